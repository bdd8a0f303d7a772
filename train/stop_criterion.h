// pelab — train.stop_when from YAML to report, in one module (docs/training.md, "Training to a
// criterion"): the key (StopWhen: its sub-keys, read and written by the config schema through
// parse_stop_when / emit_stop_when below), the running state of the criterion (StopCriterion:
// consecutive validations that met it, the step it was met at, the last and the best value, its
// counters in the checkpoint, its log lines), its records (the "convergence" row of metrics.jsonl,
// the "convergence" object of eval.json, read back by `pelab compare` and the reports) and the
// tri-state Converged of a run as the result rows, results.csv and the tables carry it.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace pelab {

struct CheckpointData;  // train/checkpoint.h
struct EvalResult;      // train/evaluate.h
struct MetricRow;       // train/metrics.h
namespace config_detail {
struct Ctx;  // train/config_internal.h
}

// train.stop_when: train until a validation metric meets a criterion for `patience` consecutive
// validations (docs/training.md). An empty metric = off. Exactly one of at_least / at_most /
// min_delta is set (the others are NaN): at_least for exact_match / token_accuracy, at_most for
// loss / perplexity (a threshold), or min_delta for either (a plateau: the validation did not
// improve on the best value so far by more than min_delta, relative).
struct StopWhen {
  std::string metric;            // "" = off; exact_match|token_accuracy|loss|perplexity
  std::string split = "valid";   // the split whose validation decides (only valid exists today)
  double at_least = std::numeric_limits<double>::quiet_NaN();
  double at_most = std::numeric_limits<double>::quiet_NaN();
  double min_delta = std::numeric_limits<double>::quiet_NaN();  // in (0, 1): 0.01 = 1 %
  int patience = 1;              // consecutive validations that must meet the criterion
  // Threshold on exact_match met at every task length of the validation split (its worst length
  // decides) instead of over the split as a whole.
  bool per_length = false;
  // What meeting the criterion does: true = training stops there (train.steps is the cap);
  // false = the step it was first met at is recorded and training goes on to train.steps (a
  // fixed budget for every run, the criterion certifying that each learned its training lengths).
  bool stop = true;
  bool enabled() const { return !metric.empty(); }
  bool plateau() const { return !std::isnan(min_delta); }
  // Larger is better: the accuracies (the parser keeps at_least / at_most in this direction).
  bool higher() const { return metric == "exact_match" || metric == "token_accuracy"; }
  double threshold() const { return higher() ? at_least : at_most; }  // threshold form only
  // Threshold form: does a validation value meet the threshold? (NaN never does.)
  bool meets(double v) const { return higher() ? v >= at_least : v <= at_most; }
  // Plateau form: does v improve on the best value so far by more than min_delta (relative:
  // best - v > min_delta*|best| for loss / perplexity, v - best > min_delta*max(|best|, 1e-12)
  // for the accuracies)? The first finite value (best NaN) counts as an improvement; NaN never is.
  bool improves(double v, double best) const;
  // "exact_match on valid >= 0.99 for 2 consecutive validations", "exact_match on valid >= 0.99
  // at every length for 2 consecutive validations",
  // "loss on valid improved by <= 1 % for 3 consecutive validations"; with stop false the text
  // ends "(then training continues to train.steps)".
  std::string describe() const;
};

// Whether a run met its criterion: a run without train.stop_when has none to meet.
enum class Converged : int8_t { no_criterion = -1, no = 0, yes = 1 };
// The cell of results.csv and the compare_eval cache: "true", "false", "" (no criterion).
const char* converged_cell(Converged c);
// A cell read back: "true" / "false" / "", or the integers 1 / 0 / -1 of older records. Throws
// pelab::Error "where: converged must be true, false or empty, got '...'" otherwise.
Converged parse_converged_cell(const std::string& cell, const std::string& where);

// Whether and when a run met its train.stop_when criterion: the "convergence" object of eval.json.
struct Convergence {
  Converged converged = Converged::no_criterion;  // no_criterion: "convergence": null / absent
  int64_t step = -1;           // step at which the criterion was met, -1 when not met
  int64_t steps_run = 0;       // optimizer steps the run took
  std::string criterion, metric;  // "exact_match on valid >= 0.99 for 2 consecutive ...", metric
  double value = std::numeric_limits<double>::quiet_NaN();  // metric at the last validation
  bool has_criterion() const { return converged != Converged::no_criterion; }
  bool met() const { return converged == Converged::yes; }
  // The step it was met at, -1 when not met (or without a criterion): criterion_step of a result row.
  int64_t met_step() const { return met() ? step : -1; }
};
// Reads the convergence record of a finished run from <run_dir>/eval.json. Throws pelab::Error
// naming the file when it is missing or malformed; no_criterion when the run had none.
Convergence read_convergence(const std::string& run_dir);
// The same from the text of an eval.json (`path` names it in messages).
Convergence parse_convergence(const std::string& eval_json, const std::string& path);
// The convergence record as eval.json writes it: a one-line JSON object, or "null" when
// !c.has_criterion().
std::string convergence_json(const Convergence& c);
// The run's "convergence" row of metrics.jsonl at its last step (split and metric: the criterion's).
MetricRow convergence_row(const Convergence& c, const StopWhen& w, int64_t step);
// One row's cells of the report's convergence table, from the runs of one scheme (converged and
// step of each): "runs converged" k/n over the runs with a criterion ("—": none had one), and
// "steps to criterion" as mean [min–max] over the runs that met it ((n = k) where fewer steps are
// known; "unknown" when none is, "not reached" when none met it, "—" without a criterion).
struct ConvergenceCells {
  std::string converged, steps;
};
ConvergenceCells convergence_cells(const std::vector<Convergence>& runs);

// The state of a run's train.stop_when (off when !when.enabled(): nothing is ever met).
class StopCriterion {
 public:
  explicit StopCriterion(const StopWhen& when) : w_(when) {}
  bool enabled() const { return w_.enabled(); }
  bool met() const { return met_step_ >= 0; }
  int64_t met_step() const { return met_step_; }  // -1 while not met
  // Whether training ends here: met, and train.stop_when.stop (stop: false only records the step
  // and the run trains on to train.steps). ends_at(step): it ends at exactly this step.
  bool ends_training() const { return w_.stop && met(); }
  bool ends_at(int64_t step) const { return w_.stop && met_step_ == step; }
  // Rank 0's decision, given to every rank of a data-parallel run.
  void set_met_step(int64_t step) { met_step_ = step; }
  // After the validation of `step` (a result that is not available counts as no measurement).
  void update(const EvalResult& r, int64_t step);
  // The checkpoint's counters criterion_hits / criterion_met_step and values criterion_value /
  // criterion_best; a checkpoint without them (older, or a run without a criterion) starts afresh.
  void save(CheckpointData& d) const;
  void restore(const CheckpointData& ck);
  // " [stop_when H/P]" for a validation's log line ("" when off).
  std::string progress_note() const;
  // "criterion met at step N: ..." when the criterion was met at `step`, else "".
  std::string met_line(int64_t step) const;
  // "criterion not met by the cap of N steps: ..." for a run that ended without meeting it.
  std::string not_met_line(int64_t cap) const;
  Convergence convergence(int64_t steps_run) const;

 private:
  StopWhen w_;
  int64_t hits_ = 0;       // consecutive validations meeting the criterion
  int64_t met_step_ = -1;  // the step it was met at
  double value_ = std::numeric_limits<double>::quiet_NaN();  // the last validation's value
  double best_ = std::numeric_limits<double>::quiet_NaN();   // plateau form: the best so far
};

namespace config_detail {
// train.stop_when as the config schema reads it (`what` = "train.stop_when"): {} / empty = off,
// else a mapping of its sub-keys; errors name the file:line of the offending sub-key. And as
// it writes it back (a flow mapping; {} when off).
StopWhen parse_stop_when(const YAML::Node& n, const std::string& what, const Ctx& c);
void emit_stop_when(YAML::Emitter& e, const StopWhen& v);
}  // namespace config_detail

}  // namespace pelab
