// pelab — train.stop_when during and after a run (train/stop_criterion.h).
#include "train/stop_criterion.h"

#include <cmath>
#include <filesystem>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/metrics.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {

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

Convergence StopCriterion::convergence(int64_t steps_run) const {
  Convergence c;
  if (!w_.enabled()) return c;
  c.has_criterion = true;
  c.met = met_step_ >= 0;
  c.step = met_step_;
  c.steps_run = steps_run;
  c.criterion = w_.describe();
  c.metric = w_.metric;
  c.value = value_;
  return c;
}

std::string convergence_json(const Convergence& c) {
  if (!c.has_criterion) return "null";
  return "{\"criterion\": " + json_quote(c.criterion) + ", \"met\": " + (c.met ? "true" : "false") +
         ", \"step\": " + (c.met ? std::to_string(c.step) : std::string("null")) +
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
  c.has_criterion = true;
  c.criterion = get("criterion", MetricValue::Kind::Str, false)->s;
  c.metric = get("metric", MetricValue::Kind::Str, false)->s;
  const MetricValue* met = row.get("met");
  // true/false read back as the integers 1/0.
  PELAB_CHECK(met && met->kind == MetricValue::Kind::Int && (met->i == 0 || met->i == 1), where,
              ".met is missing or not true/false");
  c.met = met->i == 1;
  const MetricValue* step = get("step", MetricValue::Kind::Int, true);
  PELAB_CHECK(c.met == (step != nullptr), where, ".step must be an integer exactly when met is true");
  c.step = step ? step->i : -1;
  c.steps_run = get("steps_run", MetricValue::Kind::Int, false)->i;
  PELAB_CHECK(c.steps_run >= 0 && c.step <= c.steps_run, where, ": step ", c.step,
              " / steps_run ", c.steps_run, " are inconsistent");
  const MetricValue* v = get("value", MetricValue::Kind::Num, true);
  if (v) c.value = v->kind == MetricValue::Kind::Int ? static_cast<double>(v->i) : v->d;
  return c;
}

}  // namespace pelab
