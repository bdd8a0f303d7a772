// pelab — train.stop_when during and after a run (docs/training.md, "Training to a criterion"):
// the running state of the criterion (consecutive validations that met it, the step it was met
// at, the last and the best value), its counters in the checkpoint, its log lines and its record
// in eval.json ("convergence", read back by `pelab compare` and the reports). The key itself, its
// sub-keys and their checks are config (StopWhen, train/config.h).
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"

namespace pelab {

// Whether and when a run met its train.stop_when criterion: the "convergence" object of eval.json.
struct Convergence {
  bool has_criterion = false;  // false: the run had no criterion ("convergence": null / absent)
  bool met = false;
  int64_t step = -1;           // step at which the criterion was met, -1 when not met
  int64_t steps_run = 0;       // optimizer steps the run took
  std::string criterion, metric;  // "exact_match on valid >= 0.99 for 2 consecutive ...", metric
  double value = std::numeric_limits<double>::quiet_NaN();  // metric at the last validation
};
// Reads the convergence record of a finished run from <run_dir>/eval.json. Throws pelab::Error
// naming the file when it is missing or malformed; has_criterion = false when the run had none.
Convergence read_convergence(const std::string& run_dir);
// The same from the text of an eval.json (`path` names it in messages).
Convergence parse_convergence(const std::string& eval_json, const std::string& path);
// The convergence record as eval.json writes it: a one-line JSON object, or "null" when
// !c.has_criterion.
std::string convergence_json(const Convergence& c);

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
  Convergence convergence(int64_t steps_run) const;

 private:
  StopWhen w_;
  int64_t hits_ = 0;       // consecutive validations meeting the criterion
  int64_t met_step_ = -1;  // the step it was met at
  double value_ = std::numeric_limits<double>::quiet_NaN();  // the last validation's value
  double best_ = std::numeric_limits<double>::quiet_NaN();   // plateau form: the best so far
};

}  // namespace pelab
