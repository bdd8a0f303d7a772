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
#include "train/run_folder.h"
#include "train/stop_criterion.h"
#include "train/memory_estimate.h"
#include "train/task_data.h"

namespace pelab {

class Communicator;  // train/distributed.h

struct TrainOptions {
  // Continue a run: a run directory (its newest checkpoint) or a checkpoint file inside
  // <run>/checkpoints/ (resolve_resume). "" = use train.resume from the config ("" = fresh run,
  // "latest" = the config's own run directory). The config must equal the run's except for the
  // keys resume_may_change() accepts (the CLI builds it with resume_config()).
  std::string resume;
  // Stop after this many optimizer steps in total, writing a checkpoint (like an interrupted run,
  // but not an interruption: `pelab train` exits 0); -1 = off.
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
  // Test hook (fault injection): called after every step's backward pass, before the gradient
  // norm is taken, with the step (0-based) and the parameters; it may change their gradients or
  // values (e.g. make them non-finite).
  std::function<void(int64_t step, const std::vector<Tensor>& params)> grad_hook;
  // Lines to log after the run's first line (e.g. how a config given with --resume was used).
  std::vector<std::string> notes;
  // Data-parallel training (docs/training.md, "Data-parallel training over MPI"): the ranks of
  // `comm` share every micro-batch (train.batch_size / size() examples each), sum their gradients
  // in rank order and apply the same update; rank 0 alone writes the run directory. nullptr = one
  // process.
  Communicator* comm = nullptr;
};

struct TrainResult {
  std::string run_dir;
  int64_t step = 0;            // optimizer steps done
  // Reached train.steps or met train.stop_when (false: stopped by stop_after or a signal).
  bool finished = false;
  bool interrupted = false;    // stopped by SIGINT / SIGTERM / SIGHUP
  int64_t skipped_steps = 0;   // steps skipped for a non-finite loss or gradient norm (whole run)
  bool criterion_set = false;  // train.stop_when is on
  bool criterion_met = false;  // ... and was met (at criterion_step; the run stopped there)
  int64_t criterion_step = -1;
  std::vector<EvalResult> final_eval;  // valid + test splits, when finished
  std::string last_checkpoint;
};

TrainResult train(const Config& cfg, const TrainOptions& opt = {});

// Convergence, read_convergence, convergence_json: train/stop_criterion.h.

// run_directory, latest_checkpoint, best_or_latest_checkpoint, is_run_directory: train/run_folder.h.

// ---- resuming (docs/training.md, "Resuming") ----
// Config keys that may differ on resume from the run's stored config (train.steps, the logging,
// evaluation and checkpoint cadence, threads, device, divergence limits, tags, eval.*); every
// other key is fixed by the run. This is the one list (the trainer and the CLI use it).
bool resume_may_change(const std::string& key);
std::string resume_changeable_keys();  // the list as text, for messages and docs
// A --resume argument: a run directory (its newest checkpoint), or a checkpoint file in a run's
// checkpoints/ directory. Anything else (a checkpoint file elsewhere) is an error: the run it
// belongs to would be a guess.
struct ResumeTarget {
  std::string run_dir;
  std::string checkpoint;
};
ResumeTarget resolve_resume(const std::string& path);
// The config a resumed run continues with: the run's stored config.yaml with `overrides`
// ("section.key=value", as --set) applied; an override of a key resume_may_change() refuses, to a
// value other than the run's, is an error naming the key and both values.
Config resume_config(const std::string& run_dir, const std::vector<std::string>& overrides);

// A model with its data, built from a config and optionally a checkpoint (eval, generate, info).
struct LoadedModel {
  Config cfg;
  std::unique_ptr<TaskData> data;
  std::unique_ptr<models::Transformer> model;
  std::string checkpoint;  // "" = freshly initialised
  int64_t step = 0;
  // Longest training sequence the model was built for: the checkpoint's counters/train_positions
  // (stored at training time, so a changed training file cannot change it), else the data's.
  int64_t train_positions = 0;
};
// Builds data and model from cfg; with a checkpoint path, checks its scheme/arch/vocabulary and
// loads its parameters (clear pelab::Error on any mismatch). What `use` of them needs in memory
// (MemoryUse::Evaluate: evaluating every split) is checked before the data is built, from the
// config, and again once it is (check_run_memory).
LoadedModel load_model(const Config& cfg, const std::string& checkpoint = "",
                       MemoryUse use = MemoryUse::Load);

// Builds the model for a config and its data (validates what the config rules cannot see, e.g.
// learned positions vs the longest training sequence). train_positions > 0 replaces
// data.train_positions() (the value a checkpoint stored, which resolves pe.rope_train_length: 0).
std::unique_ptr<models::Transformer> build_model(const Config& cfg, const TaskData& data,
                                                 int64_t train_positions = 0);

}  // namespace pelab
