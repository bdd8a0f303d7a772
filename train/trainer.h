// pelab — the trainer: runs a config end to end in a run directory (docs/training.md).
//
//   <train.run_dir>/<train.run_name>/
//     config.yaml     the resolved config (reloadable; `pelab eval RUN_DIR` reads it)
//     metrics.jsonl   one JSON object per line: train rows every train.log_every steps, eval rows
//     metrics.csv     the same rows as CSV
//     eval.json/.csv  final evaluation: every test split (synthetic: every test length), and in
//                     eval.json the "convergence" record of train.stop_when (read_convergence)
//     train.log       the log lines
//     checkpoints/    step_<N>.h5 (newest train.keep_checkpoints kept), best.h5, last.h5 -> newest
//
// Same config + seed + thread count give identical metrics (timing columns aside) and parameters,
// and a run interrupted at step k and resumed from its checkpoint equals the uninterrupted run bit
// for bit: every source of randomness (data stream position, dropout generator, randomized-position
// generator) and all optimizer/schedule state is in the checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "pelab/random.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/task_data.h"

namespace pelab {

struct TrainOptions {
  // Continue a run: a run directory (its newest checkpoint) or a checkpoint file. "" = use
  // train.resume from the config ("" = fresh run, "latest" = the config's own run directory).
  std::string resume;
  // Stop after this many optimizer steps in total (as if interrupted), writing a checkpoint; -1 = off.
  int64_t stop_after = -1;
  // A fresh run into a run directory that already holds a run: delete the old run's files first.
  bool overwrite = false;
  // Progress display on stderr: -1 = auto (a bar when stderr is a terminal, else plain lines every
  // train.log_every steps), 0 = plain lines, 1 = bar, 2 = silent (train.log is still written).
  int progress = -1;
  // Test hook: called with every training batch's positions (one vector per stack: encoder/source
  // first for seq2seq) when pe.randomized_positions is on.
  std::function<void(int64_t step, const std::vector<std::vector<int64_t>>& positions)>
      position_hook;
};

struct TrainResult {
  std::string run_dir;
  int64_t step = 0;            // optimizer steps done
  // Reached train.steps or met train.stop_when (false: stopped by stop_after or a signal).
  bool finished = false;
  bool interrupted = false;    // stopped by SIGINT / SIGTERM
  bool criterion_set = false;  // train.stop_when is on
  bool criterion_met = false;  // ... and was met (at criterion_step; the run stopped there)
  int64_t criterion_step = -1;
  std::vector<EvalResult> final_eval;  // valid + test splits, when finished
  std::string last_checkpoint;
};

TrainResult train(const Config& cfg, const TrainOptions& opt = {});

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
// The convergence record as eval.json writes it: a one-line JSON object, or "null" when
// !c.has_criterion.
std::string convergence_json(const Convergence& c);

// <train.run_dir>/<train.run_name>
std::string run_directory(const Config& cfg);
// Path of the newest checkpoint of a run directory (checkpoints/last.h5, else the highest
// step_<N>.h5), "" when there is none.
std::string latest_checkpoint(const std::string& run_dir);
// checkpoints/best.h5 when it exists, else latest_checkpoint().
std::string best_or_latest_checkpoint(const std::string& run_dir);
// True when `path` is a directory with a config.yaml (a run directory).
bool is_run_directory(const std::string& path);

// A model with its data, built from a config and optionally a checkpoint (eval, generate, info).
struct LoadedModel {
  Config cfg;
  std::unique_ptr<TaskData> data;
  std::unique_ptr<models::Transformer> model;
  std::string checkpoint;  // "" = freshly initialised
  int64_t step = 0;
};
// Builds data and model from cfg; with a checkpoint path, checks its scheme/arch/vocabulary and
// loads its parameters (clear pelab::Error on any mismatch).
LoadedModel load_model(const Config& cfg, const std::string& checkpoint = "");

// Builds the model for a config and its data (validates what the config rules cannot see, e.g.
// learned positions vs the longest training sequence).
std::unique_ptr<models::Transformer> build_model(const Config& cfg, const TaskData& data);

// A sorted set of L distinct positions drawn uniformly from [0, max_position) (Floyd's algorithm)
// with `gen`; the randomized positional encodings of Ruoss et al. (2023).
std::vector<int64_t> random_positions(Generator& gen, int64_t L, int64_t max_position);

}  // namespace pelab
