// pelab — evaluation of one split (evaluate.h).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "data/rng.h"
#include "models/pe/pe.h"
#include "pelab/autograd.h"
#include "pelab/ops.h"
#include "train/text_file.h"

namespace pelab {

namespace {

// Scores teacher-forced logits [B, L, V] against targets (ignore_index where not scored).
void score(const Tensor& logits, const Tensor& targets, double& loss_sum, int64_t& tokens,
           int64_t& correct) {
  const std::vector<int64_t> tg = targets.to_int_vector();
  int64_t n = 0;
  for (int64_t t : tg) n += t != kIgnoreIndex;
  if (n == 0) return;
  const double ce = cross_entropy(logits, targets, kIgnoreIndex, 0.0).item();
  loss_sum += ce * static_cast<double>(n);
  tokens += n;
  const std::vector<int64_t> am = argmax(logits, -1).to_int_vector();
  for (size_t i = 0; i < tg.size(); ++i) correct += tg[i] != kIgnoreIndex && am[i] == tg[i];
}

// The example batches of a split in evaluation order, as indexes into set.examples: runs of up
// to EB in set order; with by_source_length, stably grouped by ascending source length first and
// never mixing two lengths in a batch.
std::vector<std::vector<size_t>> example_batches(const EvalSet& set, int64_t EB,
                                                 bool by_source_length) {
  std::vector<size_t> order(set.examples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto src_len = [&](size_t i) { return set.examples[i].src.size(); };
  if (by_source_length)
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return src_len(a) < src_len(b); });
  std::vector<std::vector<size_t>> batches;
  for (size_t i : order) {
    if (batches.empty() || static_cast<int64_t>(batches.back().size()) == EB ||
        (by_source_length && src_len(batches.back().front()) != src_len(i)))
      batches.emplace_back();
    batches.back().push_back(i);
  }
  return batches;
}

}  // namespace

int64_t positions_needed(const EvalSet& set, bool decoder) {
  int64_t need = 0;
  for (const auto& ex : set.examples) {
    if (ex.has_positions()) {  // the task's IDs index the positions: the largest + 1
      for (int64_t v : ex.src_pos) need = std::max(need, v + 1);
      for (int64_t v : ex.tgt_pos) need = std::max(need, v + 1);
      for (int64_t v : ex.src_pos2) need = std::max(need, v + 1);
      for (int64_t v : ex.tgt_pos2) need = std::max(need, v + 1);
      continue;
    }
    const int64_t s = static_cast<int64_t>(ex.src.size()), t = static_cast<int64_t>(ex.tgt.size());
    need = std::max(need, decoder ? s + t + 2 : std::max(s, t) + 1);
  }
  for (const auto& w : set.windows) need = std::max(need, static_cast<int64_t>(w.input.size()));
  return need;
}

std::vector<int64_t> random_positions(Generator& gen, int64_t L, int64_t max_position) {
  PELAB_CHECK(L >= 0 && L <= max_position, "random_positions: cannot draw ", L,
              " distinct positions from [0, ", max_position, ")");
  // Floyd's algorithm: a uniform L-subset with exactly L draws.
  std::set<int64_t> chosen;
  for (int64_t j = max_position - L; j < max_position; ++j) {
    const int64_t r = static_cast<int64_t>(gen.randint(static_cast<uint64_t>(j + 1)));
    if (!chosen.insert(r).second) chosen.insert(j);
  }
  return std::vector<int64_t>(chosen.begin(), chosen.end());
}

void set_validation_positions(const Config& cfg, Generator& gen, EvalOptions& opt) {
  if (cfg.train.valid_positions != "as_trained" || !cfg.model.pe.randomized_positions) return;
  gen.set_state(data::derive_seed(static_cast<uint64_t>(cfg.train.seed), "valid_positions"), 0);
  opt.random_positions = &gen;
  opt.random_max_position = cfg.model.pe.randomized_max_position;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t B, int64_t L, Device dev) {
  return Tensor::from_ints(ids, {B, L}, dev);
}

Tensor mask_tensor(const std::vector<uint8_t>& mask, int64_t B, int64_t L, Device dev) {
  std::vector<int64_t> m(mask.begin(), mask.end());
  return Tensor::from_ints(m, {B, L}, dev);
}

Tensor targets_tensor(const std::vector<int64_t>& target, const std::vector<uint8_t>& keep,
                      int64_t B, int64_t L, Device dev) {
  std::vector<int64_t> t(target);
  for (size_t i = 0; i < t.size(); ++i)
    if (!keep[i]) t[i] = kIgnoreIndex;
  return Tensor::from_ints(t, {B, L}, dev);
}

int64_t decode_budget(const Config& cfg, int64_t length) {
  if (cfg.eval.max_decode_len > 0) return cfg.eval.max_decode_len;
  return 2 * length + 8;
}

MetricRow EvalResult::row() const {
  MetricRow r;
  r.set("split", split);
  r.set("length", length > 0 ? MetricValue::of(length) : MetricValue::null());
  r.set("examples", examples);
  r.set("tokens", tokens);
  r.set("status", status);
  r.set("loss", loss);
  r.set("perplexity", perplexity);
  r.set("token_accuracy", token_accuracy);
  r.set("exact_match", exact_match);
  r.set("unknown_symbols", unknown_symbols);
  return r;
}

namespace {

// One evaluation of a split, batch by batch: the positions drawn for each batch (random positions,
// or the task's IDs), teacher-forced scoring (loss, token accuracy), greedy decoding (exact match,
// per length, predictions) and the result they add up to.
class SetEvaluation {
 public:
  SetEvaluation(models::Transformer& model, const TaskData& data, const EvalSet& set,
                const Config& cfg, const EvalOptions& opt, int64_t max_pos, EvalResult& r)
      : model_(model), data_(data), set_(set), cfg_(cfg), opt_(opt), max_pos_(max_pos), r_(r),
        dev_(model.parameters().front().device()),
        by_length_(set.example_lengths.size() == set.examples.size()) {}

  // A stop signal (opt.stop) before the next batch: the result is then interrupted.
  bool stopped() {
    if (opt_.stop && opt_.stop()) r_.interrupted = true;
    return r_.interrupted;
  }
  void score_windows(size_t begin, size_t end);
  // One batch of examples (rows of the set): scored, and decoded when opt.decode. False when a
  // stop signal interrupted its decoding.
  bool run_batch(const std::vector<size_t>& rows);
  void finish();

 private:
  // One stack's positions: a random subset with random positions, else null (0..L-1).
  const models::Positions* positions(models::Positions& into, int64_t L) {
    if (!opt_.random_positions) return nullptr;
    into = random_positions(*opt_.random_positions, L, opt_.random_max_position);
    return &into;
  }
  models::GreedyResult seq2seq_batch(const std::vector<data::Example>& batch, int64_t budget);
  models::GreedyResult decoder_batch(const std::vector<data::Example>& batch, int64_t budget);
  void count_decoded(const std::vector<data::Example>& batch, const std::vector<size_t>& rows,
                     const models::GreedyResult& g);

  models::Transformer& model_;
  const TaskData& data_;
  const EvalSet& set_;
  const Config& cfg_;
  const EvalOptions& opt_;
  const int64_t max_pos_;  // 0 = no limit
  EvalResult& r_;
  const Device dev_;
  const bool by_length_;
  models::Positions drawn_;  // the lm windows' positions
  double loss_sum_ = 0;
  int64_t tokens_ = 0, correct_ = 0, exact_ = 0;
  std::map<int64_t, std::pair<int64_t, int64_t>> per_length_;  // length -> (right, examples)
};

void SetEvaluation::score_windows(size_t begin, size_t end) {
  std::vector<data::LmWindow> w(set_.windows.begin() + begin, set_.windows.begin() + end);
  data::LmBatch b = data::make_lm_batch(w);
  Tensor logits = model_.forward_decoder(ids_tensor(b.input, b.B, b.L, dev_), Tensor(),
                                         positions(drawn_, b.L));
  score(logits, ids_tensor(b.target, b.B, b.L, dev_), loss_sum_, tokens_, correct_);
}

bool SetEvaluation::run_batch(const std::vector<size_t>& rows) {
  std::vector<data::Example> batch;
  for (size_t i : rows) batch.push_back(set_.examples[i]);
  int64_t longest_src = 0;
  for (const auto& ex : batch)
    longest_src = std::max<int64_t>(longest_src, static_cast<int64_t>(ex.src.size()));
  int64_t budget = decode_budget(cfg_, set_.length > 0 ? set_.length : longest_src);
  // The default budget never cuts off a reference answer and its eos (multi_addition's
  // scratchpad is longer than 2 * length + 8); decoding stops at eos all the same.
  if (cfg_.eval.max_decode_len <= 0)
    for (const auto& ex : batch)
      budget = std::max<int64_t>(budget, static_cast<int64_t>(ex.tgt.size()) + 1);
  const models::GreedyResult g =
      data_.is_decoder() ? decoder_batch(batch, budget) : seq2seq_batch(batch, budget);
  if (!opt_.decode) return true;
  if (g.stopped) {
    r_.interrupted = true;
    return false;
  }
  count_decoded(batch, rows, g);
  return true;
}

models::GreedyResult SetEvaluation::seq2seq_batch(const std::vector<data::Example>& batch,
                                                  int64_t budget) {
  models::GreedyPositions gp;  // used with random positions only
  data::Seq2SeqBatch b = data::make_seq2seq_batch(batch);
  const models::Positions* sp = positions(gp.src, b.S);
  const models::Positions* tp = positions(gp.tgt, b.T);
  Tensor src = ids_tensor(b.src, b.B, b.S, dev_), src_mask = mask_tensor(b.src_mask, b.B, b.S, dev_);
  Tensor logits = model_.forward_seq2seq(src, src_mask, ids_tensor(b.tgt_in, b.B, b.T, dev_),
                                         mask_tensor(b.tgt_mask, b.B, b.T, dev_), sp, tp);
  score(logits, targets_tensor(b.tgt_out, b.tgt_mask, b.B, b.T, dev_), loss_sum_, tokens_,
        correct_);
  if (!opt_.decode) return {};
  const bool rgen = opt_.random_positions != nullptr;
  if (max_pos_ > 0) budget = std::min(budget, max_pos_);
  if (rgen) budget = b.T;  // one decoded token per drawn target position
  return models::greedy_decode(model_, src, src_mask, budget, opt_.use_cache, {},
                               rgen ? &gp : nullptr, opt_.stop);
}

models::GreedyResult SetEvaluation::decoder_batch(const std::vector<data::Example>& batch,
                                                  int64_t budget) {
  models::GreedyPositions gp;  // used with random positions or task IDs only
  data::DecoderBatch b = data::make_decoder_batch(batch);
  const models::Positions* pos = positions(gp.tgt, b.L);
  models::Positions task_pos;  // the task's IDs (one row per example), if it gives them
  const bool task_ids = !b.pos.empty();
  if (task_ids) {
    task_pos = models::Positions(b.B, b.L, b.pos, b.pos2);
    pos = &task_pos;
  }
  Tensor logits = model_.forward_decoder(ids_tensor(b.input, b.B, b.L, dev_),
                                         mask_tensor(b.mask, b.B, b.L, dev_), pos);
  score(logits, targets_tensor(b.target, b.loss_mask, b.B, b.L, dev_), loss_sum_, tokens_,
        correct_);
  if (!opt_.decode) return {};
  const bool rgen = opt_.random_positions != nullptr;
  std::vector<std::vector<int64_t>> prompts;
  int64_t longest_prompt = 0;
  for (const auto& ex : batch) {
    prompts.push_back(data::decoder_prompt(ex.src));
    longest_prompt = std::max<int64_t>(longest_prompt, prompts.back().size());
  }
  // Task IDs bound the IDs, not the sequence (every decoded token's ID is the task's).
  if (max_pos_ > 0 && !task_ids) budget = std::min(budget, max_pos_ - longest_prompt + 1);
  // The drawn positions cover prompt + target: the prompt's, then one per decoded token.
  if (rgen) budget = b.L - longest_prompt + 1;
  if (task_ids) {
    // Row i: its prompt's IDs, then the task's ID of every token it may generate.
    const int64_t cols = longest_prompt + budget;
    // (and of the second ID level, where the task has one)
    std::vector<int64_t> ids, ids2;
    ids.reserve(static_cast<size_t>(b.B * cols));
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t n = cols - static_cast<int64_t>(prompts[i].size());
      const std::vector<int64_t> row = data::decoder_position_ids(batch[i], n);
      ids.insert(ids.end(), row.begin(), row.end());
      if (!b.pos2.empty()) {
        const std::vector<int64_t> row2 = data::decoder_position_ids(batch[i], n, 2);
        ids2.insert(ids2.end(), row2.begin(), row2.end());
      }
    }
    gp.tgt = models::Positions(b.B, cols, std::move(ids), std::move(ids2));
  }
  return models::greedy_decode(model_, prompts, budget, opt_.use_cache, {},
                               rgen || task_ids ? &gp : nullptr, opt_.stop);
}

void SetEvaluation::count_decoded(const std::vector<data::Example>& batch,
                                  const std::vector<size_t>& rows, const models::GreedyResult& g) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const bool ok = g.finished[i] && g.tokens[i] == batch[i].tgt;
    exact_ += ok;
    if (by_length_) {
      auto& pl = per_length_[set_.example_lengths[rows[i]]];
      pl.first += ok, ++pl.second;
    }
    if (opt_.keep_predictions)
      r_.predictions.push_back({data_.render(batch[i].src), data_.render(batch[i].tgt),
                                data_.render(g.tokens[i]), ok});
  }
}

void SetEvaluation::finish() {
  r_.tokens = tokens_;
  if (tokens_ > 0) {
    r_.loss = loss_sum_ / static_cast<double>(tokens_);
    r_.perplexity = std::exp(r_.loss);
    r_.token_accuracy = static_cast<double>(correct_) / static_cast<double>(tokens_);
    // A loss that overflowed (inf logits, NaN parameters) is no result: never status "ok".
    if (!std::isfinite(r_.loss)) r_.status = kNonFiniteLoss;
  }
  if (!data_.is_lm() && opt_.decode)
    r_.exact_match = static_cast<double>(exact_) / static_cast<double>(r_.examples);
  for (const auto& [len, pl] : per_length_)
    r_.exact_by_length.emplace_back(len, static_cast<double>(pl.first) / static_cast<double>(pl.second));
}

}  // namespace

EvalResult evaluate_set(models::Transformer& model, const TaskData& data, const EvalSet& set,
                        const Config& cfg, const EvalOptions& opt) {
  EvalResult r;
  r.split = set.name;
  r.length = set.length;
  r.unknown_symbols = set.unknown_symbols;
  r.examples = static_cast<int64_t>(data.is_lm() ? set.windows.size() : set.examples.size());
  if (set.empty()) {
    r.status = "n/a (empty)";
    return r;
  }
  Generator* const rgen = opt.random_positions;
  const int64_t maxp = opt.random_max_position;
  PELAB_CHECK(!rgen || maxp >= 1,
              "evaluate_set: random positions need random_max_position >= 1, got ", maxp);
  // 0 = no limit (random positions stay below random_max_position, checked instead).
  const int64_t max_pos = rgen ? 0 : models::pe_max_positions(model.config().pe);
  if (rgen && positions_needed(set, data.is_decoder()) > maxp) {
    r.status = kNaRandomMaxPosition;
    return r;
  }
  if (max_pos > 0 && positions_needed(set, data.is_decoder()) > max_pos) {
    r.status = kNaMaxPositions;
    return r;
  }
  NoGradGuard ng;
  EvalModeGuard mode(model);
  SetEvaluation ev(model, data, set, cfg, opt, max_pos, r);
  const size_t EB = static_cast<size_t>(cfg.eval.batch_size);
  if (data.is_lm()) {
    for (size_t i = 0; i < set.windows.size(); i += EB) {
      if (ev.stopped()) return r;
      ev.score_windows(i, std::min(set.windows.size(), i + EB));
    }
  } else {
    // With random positions a batch's rows share one source length: decoder-only prompts are
    // not padded and the drawn positions are shared by the batch.
    for (const auto& rows : example_batches(set, cfg.eval.batch_size, rgen != nullptr))
      if (ev.stopped() || !ev.run_batch(rows)) return r;
  }
  ev.finish();
  return r;
}

double EvalResult::worst_length_exact_match() const {
  double w = std::numeric_limits<double>::quiet_NaN();
  for (const auto& lv : exact_by_length) w = std::isnan(w) ? lv.second : std::min(w, lv.second);
  return w;
}

std::string effective_best_metric(const Config& cfg) {
  if (cfg.task.name == "lm" && cfg.eval.best_metric == "exact_match") return "loss";
  return cfg.eval.best_metric;
}

double metric_of(const EvalResult& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "token_accuracy") return r.token_accuracy;
  if (metric == "exact_match") return r.exact_match;
  if (metric == "perplexity") return r.perplexity;
  fail("eval.best_metric: unknown metric '", metric, "'");
}

bool higher_is_better(const std::string& metric) {
  return metric == "exact_match" || metric == "token_accuracy";
}

void write_eval_files(const std::string& dir, const std::vector<EvalResult>& results, int64_t step,
                      const std::string& checkpoint, const std::string& convergence) {
  // Built in memory, then written atomically and checked (write_text_file): a reader never sees
  // half a file.
  std::ostringstream js;
  js << "{\"step\": " << step << ", \"checkpoint\": " << json_quote(checkpoint);
  if (!convergence.empty()) js << ",\n \"convergence\": " << convergence;
  js << ",\n \"results\": [";
  for (size_t i = 0; i < results.size(); ++i)
    js << (i ? ",\n  " : "\n  ") << results[i].row().json();
  js << "\n]}\n";
  std::ostringstream csv;
  bool header = false;
  for (const auto& r : results) {
    MetricRow row = r.row();
    if (!header) {
      for (size_t i = 0; i < row.fields.size(); ++i) csv << (i ? "," : "") << row.fields[i].first;
      csv << "\n";
      header = true;
    }
    for (size_t i = 0; i < row.fields.size(); ++i) csv << (i ? "," : "") << row.fields[i].second.csv();
    csv << "\n";
  }
  write_text_file(dir + "/eval.json", js.str());
  write_text_file(dir + "/eval.csv", csv.str());
}

const MetricRow* EvalJson::result(const std::string& split) const {
  for (const auto& r : results) {
    const MetricValue* v = r.get("split");
    if (v && v->kind == MetricValue::Kind::Str && v->s == split) return &r;
  }
  return nullptr;
}

EvalJson parse_eval_json(const std::string& text, const std::string& where) {
  EvalJson e;
  const std::string ck = json_member_text(text, "checkpoint", where);
  const MetricRow row =
      parse_metric_row("{\"checkpoint\": " + (ck.empty() ? std::string("null") : ck) + "}", where);
  const MetricValue* v = row.get("checkpoint");
  PELAB_CHECK(v && v->kind == MetricValue::Kind::Str, where,
              ": \"checkpoint\" is missing or not a string");
  e.checkpoint = v->s;
  const std::string results = json_member_text(text, "results", where);
  PELAB_CHECK(!results.empty(), where, ": \"results\" is missing");
  e.results = parse_metric_rows(results, where + ": results");
  return e;
}

void write_prediction_files(const std::string& dir, const std::vector<EvalResult>& results) {
  for (const auto& r : results) {
    if (r.predictions.empty()) continue;
    std::string text = "source\ttarget\toutput\tcorrect\n";
    for (const auto& p : r.predictions)
      text += p.source + "\t" + p.target + "\t" + p.output + "\t" + (p.correct ? "1" : "0") + "\n";
    write_text_file(dir + "/predictions_" + r.split + ".tsv", text);
  }
}

std::string eval_table(const std::vector<EvalResult>& results) {
  std::ostringstream os;
  char buf[256];
  int w = 12;
  for (const auto& r : results) w = std::max(w, static_cast<int>(r.split.size()));
  std::snprintf(buf, sizeof buf, "%-*s %6s %8s %9s %10s %9s %11s\n", w, "split", "length",
                "examples", "loss", "perplexity", "token_acc", "exact_match");
  os << buf;
  auto num = [](double v, int decimals) { return format_metric(v, decimals); };
  for (const auto& r : results) {
    const std::string len = r.length > 0 ? std::to_string(r.length) : "-";
    if (!r.available()) {
      std::snprintf(buf, sizeof buf, "%-*s %6s %8lld %s\n", w, r.split.c_str(), len.c_str(),
                    static_cast<long long>(r.examples), r.status.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "%-*s %6s %8lld %9s %10s %9s %11s\n", w, r.split.c_str(),
                    len.c_str(), static_cast<long long>(r.examples), num(r.loss, 4).c_str(),
                    num(r.perplexity, 3).c_str(), num(r.token_accuracy, 4).c_str(),
                    num(r.exact_match, 4).c_str());
    }
    os << buf;
  }
  for (const auto& r : results)
    if (r.unknown_symbols > 0)
      os << r.split << ": " << r.unknown_symbols << " symbol" << (r.unknown_symbols == 1 ? "" : "s")
         << " not in the vocabulary scored as <unk> (task.unknown_symbols: map_to_unk)\n";
  return os.str();
}

}  // namespace pelab
