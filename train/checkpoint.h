// pelab — HDF5 checkpoints (layout in docs/checkpoint.md).
//
// A checkpoint holds everything needed to continue a run bit for bit: parameters, optimizer state,
// RNG states, data-sampler position, LR-schedule step, metrics so far, the resolved config and the
// vocabulary. Saving is atomic (the file is built in memory, then temp file, write, fsync, rename,
// fsync of the directory, every call checked), so a crash, a kill or a full disk during a save
// leaves the previous checkpoint intact. Every dataset carries a checksum. Loading checks every
// dataset's rank, type and size before allocating, verifies the checksums and turns every failure
// into a pelab::Error naming the file and dataset.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pelab/nn.h"
#include "pelab/optim.h"

namespace pelab {

// 2: per-dataset checksums (attribute fnv1a64), HDF5 1.8+ object format. Version 1 files (no
// checksums) still load.
constexpr int64_t kCheckpointFormatVersion = 2;

struct CheckpointData {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t step = 0;                  // optimizer steps taken
  std::string scheme;                // positional-encoding scheme
  std::string arch;                  // seq2seq | decoder
  std::string config_yaml;           // resolved config
  std::string metrics_jsonl;         // metrics so far
  std::vector<std::string> vocab;    // token strings, id order
  std::vector<NamedTensor> params;   // dotted name -> tensor (host copies on load)
  std::string optimizer;             // "adamw" | "sgd" | ""
  int64_t optimizer_step = 0;
  // state name ("exp_avg", ...) -> per-parameter tensors in params order
  std::map<std::string, std::vector<Tensor>> optimizer_state;
  std::map<std::string, int64_t> counters;  // rng seeds/offsets, sampler position, ...
  std::map<std::string, double> values;     // best metric, last lr, ...
};

// Test hook: make save_checkpoint throw after N datasets (-1 = off), to prove atomicity.
void set_checkpoint_fault_injection(int64_t fail_after_datasets);

// Writes `data` to `path` atomically. Tensors may live on any device. `before_publish`, when
// given, runs once the file is complete and synced under its temporary name (its argument), just
// before it is renamed to `path`: what must be true of the file from the moment it exists under
// its name is recorded there (the trainer's proof that it wrote it, run_folder.h); if it throws,
// nothing is published.
void save_checkpoint(const std::string& path, const CheckpointData& data,
                     const std::function<void(const std::string& temporary)>& before_publish = {});

// Reads a checkpoint (parameters and state as CPU tensors of their stored dtype).
CheckpointData load_checkpoint(const std::string& path);
// Reads only /step (checksum verified).
int64_t checkpoint_step(const std::string& path);
// The counters a training checkpoint holds (train/trainer.cpp writes them; docs/checkpoint.md):
// each one present within its range (most are bounded by /step, e.g. skipped_steps in
// [0, step]; schedule_step equals it) and optimizer/step <= /step. Throws pelab::Error naming the
// file, the counter, its value and the range. load_checkpoint itself checks /step and
// optimizer/step >= 0.
void check_training_counters(const CheckpointData& data, const std::string& path);
// Copies a checkpoint file to `to` with the same atomic write as save_checkpoint.
void copy_checkpoint(const std::string& from, const std::string& to);
// Removes `<name>.tmp.<pid>` files in `dir` whose process no longer exists (left by a kill during a
// save); returns the removed paths.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

// Copies checkpoint parameters into a module's parameters (any device/dtype), checking that names and
// shapes match exactly; errors name the dataset and both shapes.
void load_parameters(Module& module, const CheckpointData& data, const std::string& path);

// Builds the CheckpointData parameter/optimizer fields from a live module and optimizer.
void capture_parameters(const Module& module, CheckpointData& data);
void capture_optimizer(Optimizer& opt, const std::string& kind, CheckpointData& data);
// Restores optimizer state saved by capture_optimizer (same parameter order); checks shapes.
void restore_optimizer(Optimizer& opt, const CheckpointData& data, const std::string& path);

}  // namespace pelab
