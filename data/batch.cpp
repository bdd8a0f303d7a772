// data/batch.cpp - padding and batching.
#include "data/batch.h"

#include <algorithm>
#include <numeric>

#include "data/error.h"
#include "data/rng.h"

namespace pelab::data {

namespace {
size_t sz(int64_t v) { return static_cast<size_t>(v); }
}  // namespace

int64_t example_positions(int64_t src_len, int64_t tgt_len, bool decoder) {
  return decoder ? src_len + tgt_len + 2 : std::max(src_len, tgt_len) + 1;
}

int64_t task_positions(const Task& task, int64_t max_len, bool decoder) {
  return example_positions(task.max_source_len(max_len), task.max_target_len(max_len), decoder);
}

Seq2SeqBatch make_seq2seq_batch(const std::vector<Example>& examples) {
  PELAB_DATA_CHECK(!examples.empty(), "make_seq2seq_batch: empty batch");
  Seq2SeqBatch b;
  b.B = static_cast<int64_t>(examples.size());
  for (const auto& ex : examples) {
    b.S = std::max<int64_t>(b.S, static_cast<int64_t>(ex.src.size()) + 1);
    b.T = std::max<int64_t>(b.T, static_cast<int64_t>(ex.tgt.size()) + 1);
  }
  b.src.assign(sz(b.B * b.S), Vocab::kPad);
  b.src_mask.assign(sz(b.B * b.S), 0);
  b.tgt_in.assign(sz(b.B * b.T), Vocab::kPad);
  b.tgt_out.assign(sz(b.B * b.T), Vocab::kPad);
  b.tgt_mask.assign(sz(b.B * b.T), 0);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& ex = examples[sz(r)];
    const int64_t ns = static_cast<int64_t>(ex.src.size()),
                  nt = static_cast<int64_t>(ex.tgt.size());
    int64_t* src = &b.src[sz(r * b.S)];
    std::copy(ex.src.begin(), ex.src.end(), src);
    src[ns] = Vocab::kEos;
    std::fill_n(&b.src_mask[sz(r * b.S)], ns + 1, 1);
    int64_t* tin = &b.tgt_in[sz(r * b.T)];
    int64_t* tout = &b.tgt_out[sz(r * b.T)];
    tin[0] = Vocab::kBos;
    std::copy(ex.tgt.begin(), ex.tgt.end(), tin + 1);
    std::copy(ex.tgt.begin(), ex.tgt.end(), tout);
    tout[nt] = Vocab::kEos;
    std::fill_n(&b.tgt_mask[sz(r * b.T)], nt + 1, 1);
    b.src_len.push_back(ns + 1);
    b.tgt_len.push_back(nt + 1);
  }
  return b;
}

std::vector<int64_t> decoder_prompt(const std::vector<int64_t>& src) {
  std::vector<int64_t> p;
  p.reserve(src.size() + 2);
  p.push_back(Vocab::kBos);
  p.insert(p.end(), src.begin(), src.end());
  p.push_back(Vocab::kSep);
  return p;
}

std::vector<int64_t> decoder_position_ids(const Example& ex, int64_t n_generated, int level) {
  PELAB_DATA_CHECK(level == 1 || level == 2, "decoder_position_ids: level ", level,
                   " is not 1 or 2");
  const std::vector<int64_t>& src_pos = level == 1 ? ex.src_pos : ex.src_pos2;
  const std::vector<int64_t>& tgt_pos = level == 1 ? ex.tgt_pos : ex.tgt_pos2;
  PELAB_DATA_CHECK(!src_pos.empty() && src_pos.size() == ex.src.size() + 2 &&
                       tgt_pos.size() == ex.tgt.size() && !tgt_pos.empty(),
                   "decoder_position_ids: the example has ", src_pos.size(), " prompt and ",
                   tgt_pos.size(), " target IDs (level ", level, ") for ", ex.src.size(),
                   " source and ", ex.tgt.size(), " target tokens (need |src| + 2 and |tgt| >= 1)");
  std::vector<int64_t> ids = src_pos;
  for (int64_t k = 0; k < n_generated; ++k)
    ids.push_back(tgt_pos[sz(std::min<int64_t>(k, static_cast<int64_t>(tgt_pos.size()) - 1))]);
  return ids;
}

DecoderBatch make_decoder_batch(const std::vector<Example>& examples) {
  PELAB_DATA_CHECK(!examples.empty(), "make_decoder_batch: empty batch");
  DecoderBatch b;
  b.B = static_cast<int64_t>(examples.size());
  const bool ids = examples[0].has_positions(), ids2 = examples[0].has_second_positions();
  for (const auto& ex : examples)
    PELAB_DATA_CHECK(ex.has_positions() == ids && ex.has_second_positions() == ids2,
                     "make_decoder_batch: some examples have position "
                     "IDs (or a second ID level) and some do not (a task gives them to all or none)");
  PELAB_DATA_CHECK(ids || !ids2, "make_decoder_batch: a second ID level without the first");
  for (const auto& ex : examples)
    b.L = std::max(b.L, example_positions(static_cast<int64_t>(ex.src.size()),
                                          static_cast<int64_t>(ex.tgt.size()), true));
  b.input.assign(sz(b.B * b.L), Vocab::kPad);
  b.target.assign(sz(b.B * b.L), Vocab::kPad);
  b.mask.assign(sz(b.B * b.L), 0);
  b.loss_mask.assign(sz(b.B * b.L), 0);
  if (ids) b.pos.assign(sz(b.B * b.L), 0);
  if (ids2) b.pos2.assign(sz(b.B * b.L), 0);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& ex = examples[sz(r)];
    if (ids) {
      const std::vector<int64_t> p =
          decoder_position_ids(ex, static_cast<int64_t>(ex.tgt.size()));  // bos src sep tgt
      std::copy(p.begin(), p.end(), &b.pos[sz(r * b.L)]);
    }
    if (ids2) {
      const std::vector<int64_t> p =
          decoder_position_ids(ex, static_cast<int64_t>(ex.tgt.size()), 2);
      std::copy(p.begin(), p.end(), &b.pos2[sz(r * b.L)]);
    }
    std::vector<int64_t> seq = decoder_prompt(ex.src);  // bos src sep
    const int64_t prompt = static_cast<int64_t>(seq.size());
    seq.insert(seq.end(), ex.tgt.begin(), ex.tgt.end());
    seq.push_back(Vocab::kEos);  // seq = bos src sep tgt eos, n + 1 entries
    const int64_t n = static_cast<int64_t>(seq.size()) - 1;
    for (int64_t p = 0; p < n; ++p) {
      b.input[sz(r * b.L + p)] = seq[sz(p)];
      b.target[sz(r * b.L + p)] = seq[sz(p + 1)];
      b.mask[sz(r * b.L + p)] = 1;
      b.loss_mask[sz(r * b.L + p)] = p >= prompt - 1 ? 1 : 0;
    }
    b.prompt_len.push_back(prompt);
    b.seq_len.push_back(n);
  }
  return b;
}

LmBatch make_lm_batch(const std::vector<LmWindow>& windows) {
  PELAB_DATA_CHECK(!windows.empty(), "make_lm_batch: empty batch");
  LmBatch b;
  b.B = static_cast<int64_t>(windows.size());
  b.L = static_cast<int64_t>(windows[0].input.size());
  b.input.reserve(sz(b.B * b.L));
  b.target.reserve(sz(b.B * b.L));
  for (const auto& w : windows) {
    PELAB_DATA_CHECK(
        static_cast<int64_t>(w.input.size()) == b.L && w.target.size() == w.input.size(),
        "make_lm_batch: windows must all have length ", b.L, ", got input ", w.input.size(),
        " / target ", w.target.size());
    b.input.insert(b.input.end(), w.input.begin(), w.input.end());
    b.target.insert(b.target.end(), w.target.begin(), w.target.end());
  }
  return b;
}

std::vector<std::vector<Example>> make_batches(const std::vector<Example>& examples,
                                               int64_t batch_size, bool bucket, uint64_t seed) {
  PELAB_DATA_CHECK(batch_size >= 1, "make_batches: batch_size ", batch_size, " must be >= 1");
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (bucket)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return examples[a].src.size() + examples[a].tgt.size() <
             examples[b].src.size() + examples[b].tgt.size();
    });
  std::vector<std::vector<Example>> batches;
  for (size_t i = 0; i < order.size(); i += sz(batch_size)) {
    batches.emplace_back();
    for (size_t j = i; j < std::min(order.size(), i + sz(batch_size)); ++j)
      batches.back().push_back(examples[order[j]]);
  }
  if (bucket) {
    Rng rng(seed);
    const auto perm = permutation(static_cast<int64_t>(batches.size()), rng);
    std::vector<std::vector<Example>> shuffled;
    shuffled.reserve(batches.size());
    for (int64_t p : perm) shuffled.push_back(std::move(batches[sz(p)]));
    batches = std::move(shuffled);
  }
  return batches;
}

BatchSampler::BatchSampler(ExampleStream stream, int64_t batch_size, int64_t pool_batches,
                           int64_t position, bool one_length)
    : stream_(std::move(stream)),
      B_(batch_size),
      P_(std::max<int64_t>(1, pool_batches)),
      one_length_(one_length) {
  PELAB_DATA_CHECK(batch_size >= 1, "BatchSampler: batch_size ", batch_size, " must be >= 1");
  PELAB_DATA_CHECK(!one_length || (P_ == 1 && stream_.from_task()),
                   "BatchSampler: one-length batches need a task stream and no bucketing pool");
  set_position(position);
}

void BatchSampler::set_position(int64_t position) {
  PELAB_DATA_CHECK(position >= 0, "BatchSampler: position ", position, " must be >= 0");
  position_ = position;
}

std::vector<Example> BatchSampler::batch_at(int64_t j) const {
  PELAB_DATA_CHECK(j >= 0, "BatchSampler: batch index ", j, " must be >= 0");
  if (P_ == 1) {
    std::vector<Example> out;
    const int64_t length = one_length_ ? stream_.batch_length(j) : 0;
    for (int64_t i = 0; i < B_; ++i)
      out.push_back(one_length_ ? stream_.at_length(j * B_ + i, length) : stream_.at(j * B_ + i));
    return out;
  }
  const int64_t p = j / P_;
  if (p != cached_pool_) {
    std::vector<Example> pool;
    for (int64_t i = 0; i < P_ * B_; ++i) pool.push_back(stream_.at(p * P_ * B_ + i));
    const uint64_t seed =
        Rng::for_index(derive_seed(stream_.seed(), "bucket"), static_cast<uint64_t>(p)).next_u64();
    pool_ = make_batches(pool, B_, true, seed);
    cached_pool_ = p;
  }
  return pool_[sz(j % P_)];
}

}  // namespace pelab::data
