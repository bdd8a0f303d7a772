// pelab — train.stop_when from YAML to report (train/stop_criterion.h).
#include "train/stop_criterion.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/config_internal.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {

// ---------------- the key ----------------

namespace config_detail {

// The sub-keys of train.stop_when, in the order they are written and documented.
const std::vector<std::string>& stop_when_fields() {
  static const std::vector<std::string> f = {"metric",    "split",    "at_least",  "at_most",
                                                "min_delta", "patience", "per_length",
                                                "stop"};
  return f;
}

// train.stop_when: {} / empty = off, else a mapping of the sub-keys above. Errors name the line
// of the offending sub-key.
StopWhen parse_stop_when(const YAML::Node& n, const std::string& what, const Ctx& c) {
  StopWhen sw;
  const std::string where = c.at(n);
  if (n.IsNull() || !n.IsDefined()) return sw;
  if (!n.IsMap())
    fail(where, what + ": expected a mapping like {metric: exact_match, split: valid, "
                       "at_least: 0.99, patience: 2}, got " + describe(n));
  if (n.size() == 0) return sw;
  std::map<std::string, YAML::Node> sub;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node k = it->first;
    if (!k.IsScalar()) fail(c.at(k), what + ": sub-keys must be plain words, got " + describe(k));
    const std::string name = k.Scalar();
    const auto& f = stop_when_fields();
    if (std::find(f.begin(), f.end(), name) == f.end()) {
      std::string msg = what + ": unknown sub-key '" + name + "'";
      const std::string near = nearest_name(name, f);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      fail(c.at(k), msg + " (sub-keys: " + join(f, ", ") + ")");
    }
    if (sub.count(name)) fail(c.at(k), what + "." + name + " appears twice");
    sub[name] = it->second;
    if (it->second.IsNull() || !it->second.IsScalar())
      fail(c.at(it->second.IsNull() ? k : it->second),
           what + "." + name + ": expected a plain value, got " + describe(it->second));
  }
  auto at = [&](const std::string& name) { return c.at(sub.at(name)); };
  // metric
  static const std::vector<std::string> metrics = {"exact_match", "token_accuracy", "loss",
                                                   "perplexity"};
  if (!sub.count("metric"))
    fail(where, what + ": metric is missing (one of " + join(metrics, ", ") + ")");
  sw.metric = sub.at("metric").Scalar();
  if (std::find(metrics.begin(), metrics.end(), sw.metric) == metrics.end()) {
    std::string msg = what + ".metric: '" + sw.metric + "' is not one of " + join(metrics, ", ");
    const std::string near = nearest_name(sw.metric, metrics);
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    fail(at("metric"), msg);
  }
  // split: only the validation split may decide when to stop.
  if (sub.count("split")) {
    const std::string split = sub.at("split").Scalar();
    if (lower(split).rfind("test", 0) == 0)
      fail(at("split"), what + ".split: '" + split +
                            "' is a test split; selecting on test data is forbidden (use valid)");
    if (split != "valid")
      fail(at("split"), what + ".split: unknown split '" + split +
                            "'; the only split a criterion can use is valid");
    sw.split = split;
  }
  // criterion: exactly one of at_least / at_most (a threshold, in the metric's direction) and
  // min_delta (a plateau, either direction).
  const bool higher = sw.higher();
  const bool least = sub.count("at_least") > 0, most = sub.count("at_most") > 0,
             delta = sub.count("min_delta") > 0;
  if (least + most + delta > 1) {
    std::vector<std::string> given;
    for (const char* k : {"at_least", "at_most", "min_delta"})
      if (sub.count(k)) given.push_back(k);
    fail(at(given.back()), what + ": give one of at_least / at_most / min_delta, not " +
                               join(given, " and "));
  }
  if (!least && !most && !delta)
    fail(where, what + ": a criterion is missing: " +
                    (higher ? "at_least: X (" + sw.metric + " is higher-is-better)"
                            : "at_most: X (" + sw.metric + " is lower-is-better)") +
                    " or min_delta: R (stop on a plateau: improvement below R relative)");
  const std::string tk = least ? "at_least" : most ? "at_most" : "min_delta";
  if (!delta && least != higher)
    fail(at(tk), what + "." + tk + ": " + sw.metric + " is " +
                     (higher ? "higher" : "lower") + "-is-better; write " +
                     (higher ? "at_least" : "at_most") + " instead");
  double thr = 0;
  if (!parse_float(sub.at(tk).Scalar(), thr))
    fail(at(tk), what + "." + tk + ": expected a finite number, got " + describe(sub.at(tk)));
  ConfigRange r;
  if (delta) {
    r.has_min = r.has_max = r.min_exclusive = r.max_exclusive = true;
    r.min = 0, r.max = 1;
    if (!in_range(thr, r))
      fail(at(tk), what + ".min_delta: " + fmt_num(thr) + " is out of range " + r.str() +
                       " (a relative improvement: 0.01 = 1 %)");
    sw.min_delta = thr;
  } else {
    r.has_min = true;
    r.min = sw.metric == "perplexity" ? 1 : 0;
    if (higher) r.has_max = true, r.max = 1;
    if (!in_range(thr, r))
      fail(at(tk), what + "." + tk + ": " + fmt_num(thr) + " is out of range " + r.str() +
                       " for " + sw.metric);
    (least ? sw.at_least : sw.at_most) = thr;
  }
  // patience
  if (sub.count("patience")) {
    ConfigKey k;
    k.section = what, k.name = "patience", k.type = ConfigType::Int;
    k.range.has_min = true, k.range.min = 1;
    parse_into(sw.patience, sub.at("patience"), k, c);
  }
  // per_length: the threshold holds at every task length of the validation split.
  if (sub.count("per_length")) {
    if (!parse_bool(sub.at("per_length").Scalar(), sw.per_length))
      fail(at("per_length"),
           what + ".per_length: expected true or false, got " + describe(sub.at("per_length")));
    if (sw.per_length && (delta || sw.metric != "exact_match"))
      fail(at("per_length"), what + ".per_length: only a threshold on exact_match is scored per "
                                    "length (got " + sw.metric + (delta ? " with min_delta" : "") +
                                    "); use {metric: exact_match, at_least: X, per_length: true}");
  }
  // stop: whether meeting the criterion ends training (false: record the step, train on).
  if (sub.count("stop") && !parse_bool(sub.at("stop").Scalar(), sw.stop))
    fail(at("stop"), what + ".stop: expected true or false, got " + describe(sub.at("stop")));
  return sw;
}

void emit_stop_when(YAML::Emitter& e, const StopWhen& v) {
  e << YAML::Flow << YAML::BeginMap;
  if (v.enabled()) {
    e << YAML::Key << "metric" << YAML::Value << v.metric;
    e << YAML::Key << "split" << YAML::Value << v.split;
    if (v.plateau())
      e << YAML::Key << "min_delta" << YAML::Value << fmt_float_yaml(v.min_delta);
    else
      e << YAML::Key << (v.higher() ? "at_least" : "at_most") << YAML::Value
        << fmt_float_yaml(v.threshold());
    e << YAML::Key << "patience" << YAML::Value << v.patience;
    if (v.per_length) e << YAML::Key << "per_length" << YAML::Value << true;
    if (!v.stop) e << YAML::Key << "stop" << YAML::Value << false;  // written only when off
  }
  e << YAML::EndMap;
}

}  // namespace config_detail

bool StopWhen::improves(double v, double best) const {
  if (std::isnan(v)) return false;
  if (std::isnan(best)) return true;
  return higher() ? v - best > min_delta * std::max(std::fabs(best), 1e-12)
                  : best - v > min_delta * std::fabs(best);
}

std::string StopWhen::describe() const {
  if (!enabled()) return "";
  const std::string n = std::to_string(patience) + " consecutive validation" +
                        (patience == 1 ? "" : "s");
  if (plateau())
  {
    char pct[32];  // the percentage to 10 digits: 0.07 gives "7 %", not 7.000000000000001
    std::snprintf(pct, sizeof pct, "%.10g", min_delta * 100);
    return metric + " on " + split + " improved by <= " + pct + " % for " + n +
           (stop ? "" : " (then training continues to train.steps)");
  }
  return metric + " on " + split + (higher() ? " >= " : " <= ") + config_detail::fmt_num(threshold()) +
         (per_length ? " at every length" : "") + " for " + n +
         (stop ? "" : " (then training continues to train.steps)");
}

// ---------------- the state ----------------


// After each validation: count consecutive validations that meet train.stop_when; the criterion
// is met at the validation that makes the count reach its patience (once: the run stops there).
// Plateau form: a validation counts when it does not improve on the best value so far by more
// than min_delta; one that does resets the count. The best value follows every better value (a
// small improvement counts and still becomes the new best). A NaN value (no measurement) resets
// the count and leaves the best: a diverged run has not converged.
void StopCriterion::update(const EvalResult& r, int64_t step) {
  if (!w_.enabled() || met_step_ >= 0) return;
  value_ = !r.available()  ? std::numeric_limits<double>::quiet_NaN()
           : w_.per_length ? r.worst_length_exact_match()
                           : metric_of(r, w_.metric);
  if (w_.plateau()) {
    const double v = value_;
    if (std::isnan(v))
      hits_ = 0;
    else if (w_.improves(v, best_))
      hits_ = 0, best_ = v;
    else {
      ++hits_;
      if (w_.higher() ? v > best_ : v < best_) best_ = v;
    }
  } else {
    hits_ = w_.meets(value_) ? hits_ + 1 : 0;
  }
  if (hits_ >= w_.patience) met_step_ = step;
}

void StopCriterion::save(CheckpointData& d) const {
  d.counters["criterion_hits"] = hits_;
  d.counters["criterion_met_step"] = met_step_;
  d.values["criterion_value"] = value_;
  d.values["criterion_best"] = best_;
}

// Checkpoints written before the criterion existed have none of these (and a config without a
// criterion: a resume cannot add one, see resumable_change).
void StopCriterion::restore(const CheckpointData& ck) {
  auto counter_or = [&](const char* name, int64_t def) {
    auto it = ck.counters.find(name);
    return it == ck.counters.end() ? def : it->second;
  };
  auto value_or_nan = [&](const char* name) {
    auto it = ck.values.find(name);
    return it == ck.values.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
  };
  hits_ = counter_or("criterion_hits", 0);
  met_step_ = counter_or("criterion_met_step", -1);
  value_ = value_or_nan("criterion_value");
  best_ = value_or_nan("criterion_best");
}

std::string StopCriterion::progress_note() const {
  if (!w_.enabled()) return "";
  return " [stop_when " + std::to_string(hits_) + "/" + std::to_string(w_.patience) + "]";
}

std::string StopCriterion::met_line(int64_t step) const {
  if (!w_.enabled() || met_step_ != step) return "";
  return "criterion met at step " + std::to_string(step) + ": " + w_.metric + " on " + w_.split +
         " " + printf_number("%.6g", value_) +
         (w_.plateau() ? ", best " + printf_number("%.6g", best_) + ", improved by <= " +
                             printf_number("%.6g", 100 * w_.min_delta) + " %"
                       : (w_.higher() ? " >= " : " <= ") + printf_number("%.6g", w_.threshold())) +
         " (" + std::to_string(hits_) + " consecutive)";
}

std::string StopCriterion::not_met_line(int64_t cap) const {
  return "criterion not met by the cap of " + std::to_string(cap) + " steps: " + w_.metric +
         " on " + w_.split + " " + printf_number("%.6g", value_) +
         " at the last validation (wanted " + w_.describe() + ")";
}

Convergence StopCriterion::convergence(int64_t steps_run) const {
  Convergence c;
  if (!w_.enabled()) return c;
  c.converged = met_step_ >= 0 ? Converged::yes : Converged::no;
  c.step = met_step_;
  c.steps_run = steps_run;
  c.criterion = w_.describe();
  c.metric = w_.metric;
  c.value = value_;
  return c;
}

// ---------------- the records ----------------

const char* converged_cell(Converged c) {
  return c == Converged::yes ? "true" : c == Converged::no ? "false" : "";
}

Converged parse_converged_cell(const std::string& cell, const std::string& where) {
  if (cell == "true" || cell == "1") return Converged::yes;
  if (cell == "false" || cell == "0") return Converged::no;
  if (cell.empty() || cell == "-1") return Converged::no_criterion;
  fail(where, ": converged must be true, false or empty, got '", cell, "'");
}

MetricRow convergence_row(const Convergence& c, const StopWhen& w, int64_t step) {
  MetricRow row;
  row.set("type", "convergence").set("step", step).set("split", w.split);
  row.set(w.metric, c.value).set("criterion", c.criterion);
  row.set("met", int64_t{c.met() ? 1 : 0});
  row.set("criterion_step", c.met() ? MetricValue::of(c.step) : MetricValue::null());
  return row;
}

ConvergenceCells convergence_cells(const std::vector<Convergence>& runs) {
  int64_t with = 0, met = 0, nsteps = 0, smin = 0, smax = 0;
  double ssum = 0;
  for (const Convergence& c : runs) {
    if (!c.has_criterion()) continue;
    ++with;
    if (!c.met()) continue;
    ++met;
    if (c.step < 0) continue;  // met, step unknown
    smin = nsteps ? std::min(smin, c.step) : c.step;
    smax = nsteps ? std::max(smax, c.step) : c.step;
    ssum += static_cast<double>(c.step);
    ++nsteps;
  }
  ConvergenceCells out;
  out.converged = with ? std::to_string(met) + "/" + std::to_string(with) : "—";
  out.steps = "—";
  if (nsteps)
    out.steps = printf_number("%.0f", ssum / static_cast<double>(nsteps)) + " [" +
                std::to_string(smin) + "–" + std::to_string(smax) + "]" +
                (nsteps < met ? " (n = " + std::to_string(nsteps) + ")" : "");
  else if (met)
    out.steps = "unknown";
  else if (with)
    out.steps = "not reached";
  return out;
}

std::string convergence_json(const Convergence& c) {
  if (!c.has_criterion()) return "null";
  return "{\"criterion\": " + json_quote(c.criterion) + ", \"met\": " + (c.met() ? "true" : "false") +
         ", \"step\": " + (c.met() ? std::to_string(c.step) : std::string("null")) +
         ", \"steps_run\": " + std::to_string(c.steps_run) + ", \"metric\": " +
         json_quote(c.metric) + ", \"value\": " + json_number(c.value) + "}";
}

Convergence read_convergence(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "eval.json").string();
  std::error_code ec;
  PELAB_CHECK(fs::exists(path, ec), path, ": no such file (the run has not finished; resume it)");
  return parse_convergence(read_text_file(path), path);
}

Convergence parse_convergence(const std::string& eval_json, const std::string& path) {
  const std::string value = json_member_text(eval_json, "convergence", path);
  Convergence c;
  if (value.empty() || value == "null") return c;
  const std::string where = path + ": convergence";
  const MetricRow row = parse_metric_row(value, where);
  auto get = [&](const char* name, MetricValue::Kind kind, bool nullable) -> const MetricValue* {
    const MetricValue* v = row.get(name);
    PELAB_CHECK(v, where, ".", name, " is missing");
    if (nullable && v->kind == MetricValue::Kind::Null) return nullptr;
    PELAB_CHECK(v->kind == kind || (kind == MetricValue::Kind::Num && v->kind ==
                                                                           MetricValue::Kind::Int),
                where, ".", name, " has the wrong type: ", v->json());
    return v;
  };
  c.criterion = get("criterion", MetricValue::Kind::Str, false)->s;
  c.metric = get("metric", MetricValue::Kind::Str, false)->s;
  const MetricValue* met = row.get("met");
  // true/false read back as the integers 1/0.
  PELAB_CHECK(met && met->kind == MetricValue::Kind::Int && (met->i == 0 || met->i == 1), where,
              ".met is missing or not true/false");
  c.converged = met->i == 1 ? Converged::yes : Converged::no;
  const MetricValue* step = get("step", MetricValue::Kind::Int, true);
  PELAB_CHECK(c.met() == (step != nullptr), where, ".step must be an integer exactly when met is true");
  c.step = step ? step->i : -1;
  c.steps_run = get("steps_run", MetricValue::Kind::Int, false)->i;
  PELAB_CHECK(c.steps_run >= 0 && c.step <= c.steps_run, where, ": step ", c.step,
              " / steps_run ", c.steps_run, " are inconsistent");
  const MetricValue* v = get("value", MetricValue::Kind::Num, true);
  if (v) c.value = v->kind == MetricValue::Kind::Int ? static_cast<double>(v->i) : v->d;
  return c;
}

}  // namespace pelab
