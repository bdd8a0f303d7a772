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
  // Draws one stack's positions: a random subset with random positions, else null (0..L-1).
  models::Positions drawn;
  auto positions = [&](models::Positions& into, int64_t L) -> const models::Positions* {
    if (!rgen) return nullptr;
    into = random_positions(*rgen, L, maxp);
    return &into;
  };
  const models::ModelConfig& mc = model.config();
  // 0 = no limit (random positions stay below random_max_position, checked instead).
  const int64_t max_pos = rgen ? 0 : models::pe_max_positions(mc.pe);
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
  const Device dev = model.parameters().front().device();
  const int64_t EB = cfg.eval.batch_size;
  double loss_sum = 0;
  int64_t tokens = 0, correct = 0, exact = 0;
  const bool by_length = set.example_lengths.size() == set.examples.size();
  std::map<int64_t, std::pair<int64_t, int64_t>> per_length;  // length -> (right, examples)

  auto stopped = [&] {
    if (opt.stop && opt.stop()) r.interrupted = true;
    return r.interrupted;
  };
  if (data.is_lm()) {
    for (size_t i = 0; i < set.windows.size(); i += static_cast<size_t>(EB)) {
      if (stopped()) return r;
      const size_t end = std::min(set.windows.size(), i + static_cast<size_t>(EB));
      std::vector<data::LmWindow> w(set.windows.begin() + i, set.windows.begin() + end);
      data::LmBatch b = data::make_lm_batch(w);
      Tensor logits = model.forward_decoder(ids_tensor(b.input, b.B, b.L, dev), Tensor(),
                                            positions(drawn, b.L));
      score(logits, ids_tensor(b.target, b.B, b.L, dev), loss_sum, tokens, correct);
    }
  } else {
    // With random positions a batch's rows share one source length: decoder-only prompts are
    // not padded and the drawn positions are shared by the batch.
    for (const auto& rows : example_batches(set, EB, rgen != nullptr)) {
      if (stopped()) return r;
      std::vector<data::Example> batch;
      for (size_t i : rows) batch.push_back(set.examples[i]);
      int64_t longest_src = 0;
      for (const auto& ex : batch)
        longest_src = std::max<int64_t>(longest_src, static_cast<int64_t>(ex.src.size()));
      int64_t budget = decode_budget(cfg, set.length > 0 ? set.length : longest_src);
      models::GreedyResult g;
      models::GreedyPositions gp;  // used with random positions only
      if (!data.is_decoder()) {
        data::Seq2SeqBatch b = data::make_seq2seq_batch(batch);
        const models::Positions* sp = positions(gp.src, b.S);
        const models::Positions* tp = positions(gp.tgt, b.T);
        Tensor src = ids_tensor(b.src, b.B, b.S, dev), src_mask = mask_tensor(b.src_mask, b.B, b.S, dev);
        Tensor logits = model.forward_seq2seq(src, src_mask, ids_tensor(b.tgt_in, b.B, b.T, dev),
                                              mask_tensor(b.tgt_mask, b.B, b.T, dev), sp, tp);
        score(logits, targets_tensor(b.tgt_out, b.tgt_mask, b.B, b.T, dev), loss_sum, tokens,
              correct);
        if (opt.decode) {
          if (max_pos > 0) budget = std::min(budget, max_pos);
          if (rgen) budget = b.T;  // one decoded token per drawn target position
          g = models::greedy_decode(model, src, src_mask, budget, opt.use_cache, {},
                                    rgen ? &gp : nullptr, opt.stop);
        }
      } else {
        data::DecoderBatch b = data::make_decoder_batch(batch);
        const models::Positions* pos = positions(gp.tgt, b.L);
        models::Positions task_pos;  // the task's IDs (one row per example), if it gives them
        const bool task_ids = !b.pos.empty();
        if (task_ids) {
          task_pos = models::Positions(b.B, b.L, b.pos);
          pos = &task_pos;
        }
        Tensor logits = model.forward_decoder(ids_tensor(b.input, b.B, b.L, dev),
                                              mask_tensor(b.mask, b.B, b.L, dev), pos);
        score(logits, targets_tensor(b.target, b.loss_mask, b.B, b.L, dev), loss_sum, tokens,
              correct);
        if (opt.decode) {
          std::vector<std::vector<int64_t>> prompts;
          int64_t longest_prompt = 0;
          for (const auto& ex : batch) {
            prompts.push_back(data::decoder_prompt(ex.src));
            longest_prompt = std::max<int64_t>(longest_prompt, prompts.back().size());
          }
          // Task IDs bound the IDs, not the sequence (every decoded token's ID is the task's).
          if (max_pos > 0 && !task_ids) budget = std::min(budget, max_pos - longest_prompt + 1);
          // The drawn positions cover prompt + target: the prompt's, then one per decoded token.
          if (rgen) budget = b.L - longest_prompt + 1;
          if (task_ids) {
            // Row i: its prompt's IDs, then the task's ID of every token it may generate.
            const int64_t cols = longest_prompt + budget;
            std::vector<int64_t> ids;
            ids.reserve(static_cast<size_t>(b.B * cols));
            for (size_t i = 0; i < batch.size(); ++i) {
              const std::vector<int64_t> row = data::decoder_position_ids(
                  batch[i], cols - static_cast<int64_t>(prompts[i].size()));
              ids.insert(ids.end(), row.begin(), row.end());
            }
            gp.tgt = models::Positions(b.B, cols, std::move(ids));
          }
          g = models::greedy_decode(model, prompts, budget, opt.use_cache, {},
                                    rgen || task_ids ? &gp : nullptr, opt.stop);
        }
      }
      if (!opt.decode) continue;
      if (g.stopped) {
        r.interrupted = true;
        return r;
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        const bool ok = g.finished[i] && g.tokens[i] == batch[i].tgt;
        exact += ok;
        if (by_length) {
          auto& pl = per_length[set.example_lengths[rows[i]]];
          pl.first += ok, ++pl.second;
        }
        if (opt.keep_predictions)
          r.predictions.push_back({data.render(batch[i].src), data.render(batch[i].tgt),
                                   data.render(g.tokens[i]), ok});
      }
    }
  }
  r.tokens = tokens;
  if (tokens > 0) {
    r.loss = loss_sum / static_cast<double>(tokens);
    r.perplexity = std::exp(r.loss);
    r.token_accuracy = static_cast<double>(correct) / static_cast<double>(tokens);
    // A loss that overflowed (inf logits, NaN parameters) is no result: never status "ok".
    if (!std::isfinite(r.loss)) r.status = kNonFiniteLoss;
  }
  if (!data.is_lm() && opt.decode)
    r.exact_match = static_cast<double>(exact) / static_cast<double>(r.examples);
  for (const auto& [len, pl] : per_length)
    r.exact_by_length.emplace_back(len, static_cast<double>(pl.first) / static_cast<double>(pl.second));
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
