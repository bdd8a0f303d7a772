// pelab — TaskData: vocabulary, training batches and evaluation sets for a run (task_data.h).
#include "train/task_data.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/rng.h"
#include "data/textfile.h"
#include "pelab/error.h"
#include "train/memory_estimate.h"

namespace pelab {

namespace {

// Training batches are drawn from pools of this many batches when train.bucket_by_length is on.
constexpr int64_t kBucketPoolBatches = 16;

int64_t positions_of(const data::Example& ex, bool decoder) {
  return data::example_positions(static_cast<int64_t>(ex.src.size()),
                                 static_cast<int64_t>(ex.tgt.size()), decoder);
}

std::string join_symbols(const data::Vocab& v) {
  std::string out;
  for (int64_t i = data::Vocab::kNumSpecial; i < v.size() && i < data::Vocab::kNumSpecial + 20;
       ++i)
    out += (out.empty() ? "" : " ") + v.symbol(i);
  if (v.size() > data::Vocab::kNumSpecial + 20) out += " ...";
  return out;
}

}  // namespace

uint64_t train_stream_seed(const Config& cfg) {
  return data::mix64(data::derive_seed(static_cast<uint64_t>(cfg.task.seed), "train") ^
                     data::mix64(static_cast<uint64_t>(cfg.train.seed) + 0x7a11ULL));
}

TaskData::TaskData(const Config& cfg, const std::vector<std::string>& vocab_tokens) : cfg_(cfg) {
  lm_ = cfg.task.name == "lm";
  decoder_ = cfg.task.formulation == "decoder";
  valid_.name = "valid";
  if (lm_) {
    load_corpus(vocab_tokens);
    return;
  }
  std::vector<int64_t> train_lines;  // textfile: the line of each training example
  if (cfg.task.name == "textfile")
    load_text_files(vocab_tokens, train_lines);
  else
    make_task_splits(vocab_tokens);
  open_training_stream(train_lines);
}

// The lm task: the corpus split into train/valid/test, the validation windows at
// task.lm_train_len and a test split per task.lm_eval_lengths.
void TaskData::load_corpus(const std::vector<std::string>& vocab_tokens) {
  const TaskConfig& t = cfg_.task;
  PELAB_CHECK(t.tokenization == "char", "task.tokenization: the lm task is character-level; '",
              t.tokenization, "' is not supported");
  PELAB_CHECK(t.valid_fraction > 0, "task.valid_fraction: the lm task needs a validation and a "
              "test split (task.valid_fraction > 0), got ", t.valid_fraction);
  const std::string path = t.corpus.empty() ? data::default_corpus_path() : t.corpus;
  const std::string text = data::read_corpus(path);
  const double vf = t.valid_fraction, tf = 1.0 - 2.0 * vf;
  if (vocab_tokens.empty())
    corpus_ = std::make_unique<data::LmCorpus>(text, tf, vf);
  else
    corpus_ = std::make_unique<data::LmCorpus>(text, data::Vocab(vocab_tokens), tf, vf);
  vocab_ = std::make_unique<data::Vocab>(corpus_->vocab());
  lm_seed_ = train_stream_seed(cfg_);
  train_positions_ = t.lm_train_len;
  const auto& train_tokens = corpus_->tokens(data::LmSplit::Train);
  PELAB_CHECK(static_cast<int64_t>(train_tokens.size()) > t.lm_train_len,
              "task.lm_train_len: ", t.lm_train_len, " needs more training tokens than the ",
              train_tokens.size(), " of corpus '", path, "'");
  // Every evaluation length sees (almost) the same tokens: the first n_eval * max_len + 1.
  int64_t max_len = t.lm_train_len;
  for (int L : t.lm_eval_lengths) max_len = std::max<int64_t>(max_len, L);
  auto windows = [&](data::LmSplit split, int64_t L, EvalSet& set) {
    const auto& all = corpus_->tokens(split);
    const int64_t span =
        std::min<int64_t>(static_cast<int64_t>(all.size()), t.num_eval_examples * max_len + 1);
    PELAB_CHECK(span >= L + 1, "lm: the ", data::lm_split_name(split), " split of corpus '", path,
                "' has ", all.size(), " tokens, too few for a window of length ", L,
                " (raise task.valid_fraction or use a larger corpus)");
    std::vector<int64_t> part(all.begin(), all.begin() + span);
    data::LmEvalWindows w = data::lm_eval_windows(part, L);
    set.windows = std::move(w.windows);
    set.dropped_tokens = w.dropped_tokens;
    set.length = L;
  };
  windows(data::LmSplit::Valid, t.lm_train_len, valid_);
  for (int L : t.lm_eval_lengths) {
    EvalSet s;
    s.name = "ctx_" + std::to_string(L);
    windows(data::LmSplit::Test, L, s);
    tests_.push_back(std::move(s));
  }
}

// One file of the textfile task: its examples, each within task.max_example_len, and its unknown
// symbols (added to *unknown) as task.unknown_symbols allows; *lines gets each example's line.
std::vector<data::Example> TaskData::load_text_file(const std::string& path, int64_t* unknown,
                                                    bool checkpoint_vocab,
                                                    std::vector<int64_t>* lines) const {
  const TaskConfig& t = cfg_.task;
  data::LoadReport rep;
  std::vector<data::Example> ex = data::load_examples(path, *vocab_, tok_, &rep);
  if (lines) *lines = rep.lines;
  for (size_t i = 0; i < ex.size(); ++i) {
    const int64_t s = static_cast<int64_t>(ex[i].src.size());
    const int64_t g = static_cast<int64_t>(ex[i].tgt.size());
    const int64_t n = data::example_positions(s, g, decoder_);
    PELAB_CHECK(n <= t.max_example_len, path, ":", rep.lines[i], ": this example needs ", n,
                " positions (", s, " source and ", g, " target tokens, ",
                decoder_ ? "plus bos and sep" : "the longer plus bos/eos",
                "), more than task.max_example_len = ", t.max_example_len,
                "; shorten the line or raise task.max_example_len (memory grows with the "
                "square of the length)");
  }
  if (rep.num_unknown > 0) {
    PELAB_CHECK(t.unknown_symbols == "map_to_unk", path, ":", rep.first_unknown_line,
                ": symbol '", rep.first_unknown, "' is not in the vocabulary (",
                checkpoint_vocab ? std::string("of the checkpoint")
                                 : "built from task.train_file '" + t.train_file + "'",
                "); the file has ", rep.num_unknown, " unknown symbol",
                rep.num_unknown == 1 ? "" : "s",
                ". Add them to the training data, or set task.unknown_symbols: map_to_unk "
                "to score them as <unk>");
    *unknown += rep.num_unknown;
  }
  return ex;
}

// The textfile task: the vocabulary (of task.train_file or the checkpoint), the training and
// validation examples (task.valid_file, or a seeded task.valid_fraction held out of the training
// file; train_lines gets each training example's line) and a test split per task.test_files.
void TaskData::load_text_files(const std::vector<std::string>& vocab_tokens,
                               std::vector<int64_t>& train_lines) {
  const TaskConfig& t = cfg_.task;
  tok_ = data::parse_tokenization(t.tokenization);
  PELAB_CHECK(!t.train_file.empty(), "task.train_file: the textfile task needs a training file");
  vocab_ = std::make_unique<data::Vocab>(
      vocab_tokens.empty() ? data::build_vocab_from_files({t.train_file}, tok_)
                           : data::Vocab(vocab_tokens));
  const bool ck = !vocab_tokens.empty();
  std::vector<int64_t> all_lines;
  std::vector<data::Example> all = load_text_file(t.train_file, &train_unknown_symbols_, ck,
                                                  &all_lines);
  if (!t.valid_file.empty()) {
    train_ = std::move(all);
    train_lines = all_lines;
    valid_.examples = load_text_file(t.valid_file, &valid_.unknown_symbols, ck);
  } else {
    // Hold out a seeded random valid_fraction of the training file.
    data::Rng rng(data::derive_seed(static_cast<uint64_t>(t.seed), "valid_split"));
    const std::vector<int64_t> perm = data::permutation(static_cast<int64_t>(all.size()), rng);
    int64_t nv = static_cast<int64_t>(static_cast<double>(all.size()) * t.valid_fraction);
    if (t.valid_fraction > 0 && nv == 0 && all.size() > 1) nv = 1;
    std::vector<bool> held(all.size(), false);
    for (int64_t i = 0; i < nv; ++i) held[static_cast<size_t>(perm[static_cast<size_t>(i)])] = true;
    for (size_t i = 0; i < all.size(); ++i) {
      (held[i] ? valid_.examples : train_).push_back(all[i]);
      if (!held[i]) train_lines.push_back(all_lines[i]);
    }
  }
  PELAB_CHECK(!train_.empty(), "task.train_file: '", t.train_file,
              "' leaves no training examples after holding out task.valid_fraction");
  std::set<std::string> names = {"valid"};
  for (const auto& f : t.test_files) {
    EvalSet s;
    std::string name = std::filesystem::path(f).stem().string();
    if (name.empty()) name = "test";
    std::string unique = name;
    for (int k = 2; names.count(unique); ++k) unique = name + "_" + std::to_string(k);
    names.insert(unique);
    s.name = unique;
    s.examples = load_text_file(f, &s.unknown_symbols, ck);
    tests_.push_back(std::move(s));
  }
}

// A synthetic task: its vocabulary (the checkpoint's must equal it), the fixed training set when
// task.train_examples > 0, the validation split at the training lengths and a test split per
// task.test_lengths (and task.test_operands count, for multi_addition).
void TaskData::make_task_splits(const std::vector<std::string>& vocab_tokens) {
  const TaskConfig& t = cfg_.task;
  const uint64_t seed = static_cast<uint64_t>(t.seed);
  const int64_t n_eval = t.num_eval_examples;
  task_ = data::make_task(task_spec(cfg_));
  if (!vocab_tokens.empty()) {
    PELAB_CHECK(data::Vocab(vocab_tokens) == task_->vocab(),
                "vocabulary mismatch: the checkpoint's vocabulary (", vocab_tokens.size(),
                " tokens) differs from task '", t.name, "' with task.num_symbols ",
                t.num_symbols, " (", task_->vocab().size(), " tokens)");
  }
  vocab_ = std::make_unique<data::Vocab>(task_->vocab());
  // Refused before any example is generated when the examples cannot fit in memory.
  check_data_memory(cfg_, machine_memory_bytes());
  for (int64_t i = data::Vocab::kNumSpecial; i < vocab_->size(); ++i)
    single_char_symbols_ = single_char_symbols_ && vocab_->symbol(i).size() == 1;
  if (t.train_examples > 0)
    train_ = task_->make_split(data::derive_seed(seed, "train_set"), t.train_examples,
                               t.train_min_len, t.train_max_len);
  const uint64_t valid_seed = data::derive_seed(seed, "valid");
  valid_.examples = task_->make_split(valid_seed, n_eval, t.train_min_len, t.train_max_len);
  valid_.example_lengths.reserve(static_cast<size_t>(n_eval));
  for (int64_t k = 0; k < n_eval; ++k)
    valid_.example_lengths.push_back(
        task_->length_at(valid_seed, k, t.train_min_len, t.train_max_len));
  for (int L : t.test_lengths) {
    if (!t.test_operands.empty()) continue;
    EvalSet s;
    s.name = "len_" + std::to_string(L);
    s.length = L;
    s.examples = task_->make_split(data::derive_seed(seed, "test_" + std::to_string(L)), n_eval,
                                   L, L);
    tests_.push_back(std::move(s));
  }
  // Two-axis splits (multi_addition: digits x operand count). Length 0: a split of two sizes
  // has no one task length, so reports name its column by the split.
  for (int L : t.test_lengths)
    for (int M : t.test_operands) {
      data::TaskSpec spec = task_spec(cfg_);
      spec.train_min_operands = spec.train_max_operands = M;
      spec.test_operands.clear();
      const std::unique_ptr<data::Task> task = data::make_task(spec);
      EvalSet s;
      s.name = "len_" + std::to_string(L) + "_ops_" + std::to_string(M);
      s.examples = task->make_split(data::derive_seed(seed, "test_" + s.name.substr(4)), n_eval,
                                    L, L);
      tests_.push_back(std::move(s));
    }
}

// The training stream (the fixed set reshuffled every epoch, or fresh task examples) and what the
// model is built for: the longest training sequence (and its file:line), the largest position ID.
void TaskData::open_training_stream(const std::vector<int64_t>& train_lines) {
  const TaskConfig& t = cfg_.task;
  const uint64_t stream_seed = train_stream_seed(cfg_);
  data::ExampleStream stream = train_.empty() ? data::ExampleStream(*task_, stream_seed)
                                              : data::ExampleStream(train_, stream_seed);
  sampler_ = std::make_unique<data::BatchSampler>(
      stream, cfg_.train.batch_size, cfg_.train.bucket_by_length ? kBucketPoolBatches : 1, 0,
      one_length_batches(cfg_));
  if (!train_.empty()) {
    for (size_t i = 0; i < train_.size(); ++i) {
      const int64_t n = positions_of(train_[i], decoder_);
      if (n > train_positions_ && i < train_lines.size())
        longest_train_example_ = t.train_file + ":" + std::to_string(train_lines[i]);
      train_positions_ = std::max(train_positions_, n);
    }
  } else {
    train_positions_ = data::task_positions(*task_, t.train_max_len, decoder_);
  }
  if (task_ && t.position_ids != "sequential")
    largest_train_position_id_ =
        std::max<int64_t>(t.max_position_id, task_->max_position_id(t.train_max_len));
}

std::vector<data::Example> TaskData::train_batch(int64_t j) const {
  PELAB_CHECK(!lm_, "TaskData::train_batch: the lm task has windows, not examples");
  std::vector<data::Example> batch = sampler_->batch_at(j);
  const int64_t M = cfg_.task.max_position_id;
  if (M > 0 && task_) {
    // Training-time random offsets of the task's IDs and hints: example i of batch j gets one
    // drawn uniformly from [0, M - its largest ID], a pure function of (seeds, j, i).
    const uint64_t seed = data::derive_seed(train_stream_seed(cfg_), "position_offset");
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t top = task_->top_position(batch[i]);
      PELAB_CHECK(top <= M, "task.max_position_id (", M, ") is below the largest position ID ",
                  top, " of a training example");
      data::Rng rng = data::Rng::for_index(
          seed, static_cast<uint64_t>(j) * static_cast<uint64_t>(batch.size()) + i);
      task_->shift_positions(batch[i], rng.uniform_int(0, M - top));
    }
  }
  return batch;
}

std::vector<data::LmWindow> TaskData::lm_train_batch(int64_t j) const {
  PELAB_CHECK(lm_, "TaskData::lm_train_batch: only for the lm task");
  const int64_t B = cfg_.train.batch_size;
  std::vector<data::LmWindow> out;
  out.reserve(static_cast<size_t>(B));
  const auto& tokens = corpus_->tokens(data::LmSplit::Train);
  for (int64_t i = 0; i < B; ++i)
    out.push_back(data::lm_window_at(tokens, cfg_.task.lm_train_len, lm_seed_, j * B + i));
  return out;
}

std::string TaskData::render(const std::vector<int64_t>& ids) const {
  if (task_) return task_->render(ids);
  if (lm_) return vocab_->decode(ids, "");
  return vocab_->decode(ids, tok_ == data::Tokenization::Char ? "" : " ");
}

std::vector<int64_t> TaskData::encode_line(const std::string& line) const {
  std::vector<std::string> symbols;
  if (task_) {
    if (single_char_symbols_) {
      for (char c : line)
        if (!std::isspace(static_cast<unsigned char>(c))) symbols.emplace_back(1, c);
    } else {
      symbols = data::tokenize(line, data::Tokenization::Space);
    }
  } else {
    symbols = data::tokenize(line, lm_ ? data::Tokenization::Char : tok_);
  }
  std::vector<int64_t> ids;
  for (const auto& s : symbols) {
    PELAB_CHECK(vocab_->contains(s) && !data::Vocab::is_special(vocab_->id(s)), "unknown symbol '",
                s, "' in input '", line, "' (vocabulary: ", join_symbols(*vocab_), ")");
    ids.push_back(vocab_->id(s));
  }
  return ids;
}

// ---------------- data revisions ----------------

namespace {

// The task's changes that a run of cfg sees (none for textfile and lm).
std::vector<data::DataChange> data_changes(const Config& cfg) {
  if (cfg.task.name == "lm" || cfg.task.name == "textfile") return {};
  return data::make_task(task_spec(cfg))->data_changes(one_length_batches(cfg));
}

}  // namespace

int data_revision(const Config& cfg) { return 1 + static_cast<int>(data_changes(cfg).size()); }

void record_data_revision(Config& cfg) { cfg.task.data_revision = data_revision(cfg); }

std::string data_revision_change(const Config& run) {
  const std::vector<data::DataChange> changes = data_changes(run);
  const int now = 1 + static_cast<int>(changes.size()), was = run.task.data_revision;
  if (was == now) return "";
  const std::string head = "trained on data revision " + std::to_string(was) + " of task " +
                           run.task.name + (one_length_batches(run) ? " (one-length batches)" : "");
  if (was > now)
    return head + ", newer than this pelab's revision " + std::to_string(now) +
           " (a newer pelab trained it)";
  std::string since;
  for (size_t i = static_cast<size_t>(was - 1); i < changes.size(); ++i)
    since += (since.empty() ? "" : "; then ") + changes[i].date + " (" + changes[i].commit +
             "): " + changes[i].what;
  return head + ", from before " + since + "; this pelab draws revision " + std::to_string(now);
}

}  // namespace pelab
