// pelab — evaluating a comparison's finished runs (compare.h): each run as trained and with its
// eval-time variants, cached per run in <run>/compare_eval/, and what a run's files tell
// (its record, wall time, loss curve, convergence, validation score).
#include "train/study/compare.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "pelab/clock.h"
#include "pelab/parallel.h"
#include "pelab/random.h"
#include "pelab/strings.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/study/compare_internal.h"
#include "train/study/run_record.h"
#include "train/text_file.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace compare_detail;

namespace {

// "<file>:<size>:<mtime>" of a run's newest checkpoint: with the evaluation config, the key of its
// evaluation cache; "" without one.
std::string checkpoint_stamp(const std::string& run_dir) {
  const std::string ck = latest_checkpoint(run_dir);
  if (ck.empty()) return "";
  std::error_code ec;
  fs::path real = fs::canonical(ck, ec);
  if (ec) real = ck;
  struct stat st {};
  std::string stamp = real.filename().string();
  if (::stat(real.c_str(), &st) == 0)
    stamp += ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
  return stamp;
}

int in_distribution(const Config& c, int64_t length) {
  if (length <= 0) return -1;
  if (is_lm(c)) return length <= c.task.lm_train_len ? 1 : 0;
  if (c.task.name == "textfile") return -1;
  return length >= c.task.train_min_len && length <= c.task.train_max_len ? 1 : 0;
}

// The run's own final evaluation (its eval.json) when it is the evaluation `pv` stands for: the
// run as trained, with the config it trained with (its config.yaml) equal to the plan's for
// evaluation. Empty otherwise (an eval-time variant, or a run reused with other test lengths).
std::optional<EvalJson> own_evaluation(const std::string& run_dir, const ComparePlanVariant& pv) {
  if (!pv.name.empty()) return std::nullopt;
  const std::string cfg = (fs::path(run_dir) / "config.yaml").string();
  try {
    if (fingerprint(eval_identity(load_config(cfg))) != fingerprint(eval_identity(pv.cfg)))
      return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // inspect_run has refused such a run
  }
  const std::string p = (fs::path(run_dir) / "eval.json").string();
  return parse_eval_json(read_text_file(p), p);
}

// Evaluates one run with one config (cached in <run>/compare_eval/<name>.csv).
std::vector<ResultRow> evaluate_run(const ComparePlanRun& run, const ComparePlanVariant& pv,
                                    const std::string& run_dir, bool& cached, double train_wall) {
  const std::string& variant = pv.name;
  const Config& ecfg = pv.cfg;
  const std::string ck = latest_checkpoint(run_dir);
  std::error_code ec;
  // Without weights the run is its record: the stamp of the checkpoint it was evaluated from.
  const std::string stamp =
      ck.empty() ? read_run_record(run_dir).checkpoint : checkpoint_stamp(run_dir);
  const fs::path cache_dir = fs::path(run_dir) / "compare_eval";
  const fs::path cache = cache_dir / cache_file_name(pv);
  // (compare_eval/ a link: refused before anything is read through it, or written)
  if (own_folder_exists(cache_dir.string()) && fs::exists(cache, ec)) {
    try {
      const std::optional<EvalJson> own = own_evaluation(run_dir, pv);
      std::vector<ResultRow> rows;
      if (accept_cached_evaluation(read_text_file(cache.string()), cache.string(), run, pv, stamp,
                                   own ? &*own : nullptr,
                                   (fs::path(run_dir) / "eval.json").string(), rows)) {
        for (auto& r : rows) {
          r.in_distribution = in_distribution(ecfg, r.length);
          r.train_wall_s = train_wall;
        }
        cached = true;
        return rows;
      }
    } catch (const std::exception& e) {
      // not this evaluation's numbers: evaluate again (a record without weights cannot)
      if (ck.empty()) throw;
    }
  }
  cached = false;
  if (ck.empty())
    throw Error("compare: " + run.cfg.train.run_name + " needs its weights: its record (" +
                run_dir + ", no checkpoints/) has no evaluation " +
                (variant.empty() ? std::string("as trained") : "with variant '" + variant + "'") +
                " for this config (new test lengths or variant); bring its checkpoints/ back, or "
                "evaluate it where they are (pelab compare CONFIG --only I there, I as --plan "
                "numbers it) and merge again");
  const double t0 = now_s();
  set_num_threads(ecfg.train.threads);
  LoadedModel lm = load_model(ecfg, ck, MemoryUse::Evaluate);
  std::vector<EvalResult> res;
  Generator gen(
      data::derive_seed(static_cast<uint64_t>(ecfg.train.seed), "compare_eval_positions"));
  EvalOptions opt;
  if (pv.random_positions) {  // positions drawn as in training (Ruoss et al. 2023)
    opt.random_positions = &gen;
    opt.random_max_position = ecfg.model.pe.randomized_max_position;
  }
  for (const auto& s : lm.data->tests()) {
    if (stop_signal()) return {};
    res.push_back(evaluate_set(*lm.model, *lm.data, s, ecfg, opt));
  }
  const double wall = now_s() - t0;
  std::vector<ResultRow> rows;
  for (const auto& e : res) {
    ResultRow r;
    r.scheme = run.scheme;
    r.variant = variant;
    r.seed = run.seed;
    r.split = e.split;
    r.length = e.length;
    r.in_distribution = in_distribution(ecfg, e.length);
    r.status = e.status;
    r.loss = e.loss;
    r.perplexity = e.perplexity;
    r.token_accuracy = e.token_accuracy;
    r.exact_match = e.exact_match;
    r.train_wall_s = train_wall;
    r.eval_wall_s = wall;
    rows.push_back(r);
  }
  make_own_folder(cache_dir.string());  // (a link there: refused, never written through)
  write_text_file(cache.string(), cache_head(pv, stamp) + results_csv(rows));
  return rows;
}

}  // namespace

namespace compare_detail {

// Writes <run>/record.json for a finished run that has its weights, unless one for the same
// checkpoint is there (the machine it names is the one that trained and evaluated the run;
// retraining removes it). A run without weights keeps the record it has.
void ensure_run_record(const std::string& dir) {
  const std::string ck = latest_checkpoint(dir);
  const int64_t step = checkpoint_file_step(ck);
  if (ck.empty() || step < 0) return;
  const std::string stamp = checkpoint_stamp(dir);
  try {
    if (read_run_record(dir).checkpoint == stamp) return;
  } catch (const std::exception&) {
    // none, or unreadable: (re)written below
  }
  RunRecord rec = this_machine_record();
  rec.config_digest =
      fingerprint(eval_identity(load_config((fs::path(dir) / "config.yaml").string())));
  rec.step = step;
  rec.checkpoint = stamp;
  write_text_file((fs::path(dir) / run_record_file()).string(), run_record_json(rec));
}

// Wall time (s) of training and the training-loss curve, from a run's metrics.jsonl.
void read_run_metrics(const std::string& dir, double& wall,
                      std::vector<std::pair<int64_t, double>>& curve) {
  wall = std::numeric_limits<double>::quiet_NaN();
  curve.clear();
  std::error_code ec;
  const std::string p = (fs::path(dir) / "metrics.jsonl").string();
  if (!fs::exists(p, ec)) return;
  std::vector<MetricRow> rows;
  try {
    rows = parse_metrics_jsonl(read_text_file(p), p);
  } catch (const std::exception&) {
    return;
  }
  for (const auto& row : rows) {
    const MetricValue* type = row.get("type");
    if (!type || type->kind != MetricValue::Kind::Str || type->s != "train") continue;
    const MetricValue* step = row.get("step");
    const MetricValue* loss = row.get("loss");
    const MetricValue* el = row.get("elapsed_s");
    auto num = [](const MetricValue* v) {
      if (!v) return std::numeric_limits<double>::quiet_NaN();
      if (v->kind == MetricValue::Kind::Int) return static_cast<double>(v->i);
      if (v->kind == MetricValue::Kind::Num) return v->d;
      return std::numeric_limits<double>::quiet_NaN();
    };
    if (step && loss && std::isfinite(num(loss)))
      curve.emplace_back(static_cast<int64_t>(num(step)), num(loss));
    if (std::isfinite(num(el)) && num(el) >= 0) wall = num(el);  // (records may be foreign)
  }
}

// Throws unless a row read from an evaluation cache has values in their ranges and short printable
// names (they reach report.md and the plots).
void check_cached_row(const ResultRow& r, const std::string& where) {
  auto name_ok = [](const std::string& s) {
    if (s.empty() || s.size() > 200) return false;
    for (unsigned char c : s)
      if (c < 0x20 || c > 0x7e || c == '|' || c == '`' || c == '"' || c == '\\') return false;
    return true;
  };
  PELAB_CHECK(name_ok(r.split) && name_ok(r.status), where, ": split '", shortened(r.split),
              "' / status '", shortened(r.status),
              "' must be printable names of at most 200 characters");
  PELAB_CHECK(r.length >= 0 && r.length <= (int64_t{1} << 30), where, ": length ", r.length,
              " out of range");
  for (const char* m : {"loss", "perplexity", "token_accuracy", "exact_match"}) {
    const double v = row_metric(r, m);
    const auto [lo, hi] = metric_range(m);
    PELAB_CHECK(std::isnan(v) || (v >= lo && v <= hi), where, ": ", m, " ", v, " of ", r.split,
                " lies outside [", lo, ", ", hi, "]");
  }
  PELAB_CHECK(std::isnan(r.eval_wall_s) || (r.eval_wall_s >= 0 && std::isfinite(r.eval_wall_s)),
              where, ": eval_wall_s ", r.eval_wall_s, " out of range");
}

std::string cache_file_name(const ComparePlanVariant& pv) {
  return (pv.name.empty() ? "base" : pv.name) + ".csv";
}

std::string cache_head(const ComparePlanVariant& pv, const std::string& stamp) {
  return "# pelab compare evaluation cache " +
         fingerprint(eval_identity(pv.cfg) + "\n" + stamp +
                     (pv.random_positions ? "\nrandom positions" : "")) +
         "\n";
}

bool accept_cached_evaluation(const std::string& text, const std::string& where,
                              const ComparePlanRun& run, const ComparePlanVariant& pv,
                              const std::string& stamp, const EvalJson* own,
                              const std::string& own_where, std::vector<ResultRow>& rows) {
  const std::string head = cache_head(pv, stamp);
  if (text.rfind(head, 0) != 0) return false;
  rows = parse_results_csv(text.substr(head.size()), where);
  const std::string variant = pv.name.empty() ? "as trained" : "variant " + pv.name;
  std::string tests;
  for (const auto& [split, length] : pv.tests) tests += (tests.empty() ? "" : ", ") + split;
  std::map<std::string, size_t> seen;  // split -> row number
  for (size_t i = 0; i < rows.size(); ++i) {
    ResultRow& r = rows[i];
    const std::string at = where + ": row " + std::to_string(i + 2);
    check_cached_row(r, where);
    PELAB_CHECK(r.scheme == run.scheme && r.variant == pv.name && r.seed == run.seed, at,
                ": a row of ", shortened(r.label()), " seed ", r.seed, ", not of ",
                run_who(run), " ", variant);
    const auto planned = std::find_if(pv.tests.begin(), pv.tests.end(),
                                      [&](const auto& t) { return t.first == r.split; });
    PELAB_CHECK(planned != pv.tests.end() && planned->second == r.length, at, ": ",
                shortened(r.split), " (length ", r.length, ") is not a test of this plan (",
                tests, ")");
    PELAB_CHECK(seen.emplace(r.split, i + 2).second, at, ": a second row of ", r.split,
                " (the first is row ", seen[r.split], ")");
    if (own) {
      // The run as trained: the trainer's final evaluation of the same checkpoint (eval.json)
      // computed these numbers; they must be its.
      const MetricRow* o = own->result(r.split);
      PELAB_CHECK(o, at, ": ", r.split, " is not in the run's own evaluation ", own_where);
      const MetricValue* st = o->get("status");
      PELAB_CHECK(st && st->kind == MetricValue::Kind::Str && st->s == r.status, at, ": status '",
                  r.status, "' of ", r.split, " is not the run's own (", own_where, ")");
      for (const char* m : {"loss", "perplexity", "token_accuracy", "exact_match"}) {
        const MetricValue* v = o->get(m);
        const double b = !v                                  ? std::nan("")
                         : v->kind == MetricValue::Kind::Num ? v->d
                         : v->kind == MetricValue::Kind::Int ? static_cast<double>(v->i)
                                                             : std::nan("");
        const double a = row_metric(r, m);
        const bool same = (std::isnan(a) && std::isnan(b)) ||
                          std::fabs(a - b) <= kOwnEvaluationTolerance * std::max(1.0, std::fabs(b));
        PELAB_CHECK(same, at, ": ", m, " ", format_double(a, 17), " of ", r.split,
                    " is not the run's own evaluation (", format_double(b, 17), " in ", own_where,
                    ")");
      }
    }
  }
  PELAB_CHECK(rows.size() == pv.tests.size(), where, ": ", rows.size(), " of the ",
              pv.tests.size(), " tests of this plan (", tests,
              "): a cached evaluation covers every test");
  if (own) {
    // The trainer evaluated the checkpoint the cache is keyed by.
    const std::string file = stamp.substr(0, stamp.find(':'));
    PELAB_CHECK(fs::path(own->checkpoint).filename() == file, own_where, ": the evaluation of ",
                own->checkpoint, ", not of the run's final checkpoint ", file);
  }
  for (auto& r : rows) {
    r.scheme = run.scheme;
    r.variant = pv.name;
    r.seed = run.seed;
  }
  return true;
}

// Marks a run's result rows with the outcome of its stop criterion.
void set_convergence(std::vector<ResultRow>& rows, const Convergence& c) {
  for (auto& r : rows) {
    r.converged = c.converged;
    r.criterion_step = c.met_step();
  }
}

// Value of `metric` on the `valid` split of a run's final evaluation (eval.json, written by the
// trainer: one result object per line); NaN with the reason in *why when there is none.
double valid_metric(const std::string& run_dir, const std::string& metric, std::string* why) {
  const std::string p = (fs::path(run_dir) / "eval.json").string();
  std::string text;
  try {
    text = read_text_file(p);
  } catch (const std::exception&) {
    *why = "no eval.json";
    return std::numeric_limits<double>::quiet_NaN();
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (!t.empty() && t.back() == ',') t.pop_back();
    if (t.rfind("{\"split\"", 0) != 0) continue;
    MetricRow row;
    try {
      row = parse_metric_row(t, p);
    } catch (const std::exception&) {
      continue;
    }
    const MetricValue* split = row.get("split");
    if (!split || split->kind != MetricValue::Kind::Str || split->s != "valid") continue;
    const MetricValue* v = row.get(metric);
    const double x = !v                                ? std::numeric_limits<double>::quiet_NaN()
                     : v->kind == MetricValue::Kind::Num ? v->d
                     : v->kind == MetricValue::Kind::Int ? static_cast<double>(v->i)
                                                         : std::numeric_limits<double>::quiet_NaN();
    const auto [lo, hi] = metric_range(metric);  // (a merged record is someone else's file)
    if (x >= lo && x <= hi) return x;
    if (!std::isnan(x)) {
      *why = "valid " + metric + " " + format_double(x) + " out of range";
      return std::numeric_limits<double>::quiet_NaN();
    }
    *why = "valid " + metric + " not available";
    return std::numeric_limits<double>::quiet_NaN();
  }
  *why = "no valid split in eval.json";
  return std::numeric_limits<double>::quiet_NaN();
}

// Evaluates one finished run as trained and with each of its variants (cached per run and
// variant), logging one line; false when a signal interrupted it (res.interrupted set).
bool evaluate_all(const ComparePlanRun& run, const std::string& dir, const std::string& tag,
                  std::ostream& log, CompareResult& res, std::vector<ResultRow>& out) {
  double wall = 0;
  std::vector<std::pair<int64_t, double>> points;
  read_run_metrics(dir, wall, points);
  std::vector<ComparePlanVariant> evals = {{"", run.cfg, false, run.tests}};
  for (const auto& v : run.variants) evals.push_back(v);
  std::string names;
  for (const auto& v : evals)
    names += (names.empty() ? "" : ", ") + (v.name.empty() ? std::string("as trained") : v.name);
  log << tag << "evaluating " << run_who(run) << " (" << names << ") ...";
  log.flush();
  const double te = now_s();
  int n_cached = 0;
  for (const auto& v : evals) {
    bool cached = false;
    std::vector<ResultRow> rows = evaluate_run(run, v, dir, cached, wall);
    if (stop_signal()) {
      res.interrupted = true;
      log << " interrupted\n" << std::flush;
      return false;
    }
    n_cached += cached;
    ++(cached ? res.eval_cached : res.evaluated);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  log << " " << (n_cached == static_cast<int>(evals.size()) ? "cached" : "done") << " ("
      << format_double(now_s() - te, 3) << " s)\n"
      << std::flush;
  return true;
}

}  // namespace compare_detail

}  // namespace pelab
