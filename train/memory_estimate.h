// pelab — what a configuration needs in memory, estimated from the config before anything is
// allocated, so that an impossible setting (model.d_model 1e9, a batch of 2000-token sequences on a
// small machine) is one error naming the settings instead of an allocation failure.
//
//   parameters: counted exactly from the model config (token tables, attention, feed-forward,
//     LayerNorms, the PE scheme's tables; a tied table once), times the dtype size;
//   training state: the parameters again for the gradients, plus the optimizer's buffers (adamw 2,
//     sgd with momentum 1);
//   activations: a lower bound for one training micro-batch of train.batch_size sequences of the
//     longest training length L: the logits (B·L·vocab) and, per layer, B·L·(4·d_model + d_ff)
//     values kept for the backward pass. Attention matrices are not counted, so the real need is
//     higher: the check only refuses what cannot fit.
// The machine's memory is the physical RAM, or the cgroup limit when that is lower.
#pragma once
#include <cstdint>
#include <string>

#include "train/config.h"

namespace pelab {

struct MemoryEstimate {
  double parameters = 0;        // count
  double parameter_bytes = 0;   // weights alone
  double embedding_bytes = 0;   // token tables (part of parameter_bytes)
  double layer_bytes = 0;       // attention, feed-forward and norms (part of parameter_bytes)
  double pe_bytes = 0;          // the PE scheme's tables (part of parameter_bytes)
  double state_bytes = 0;       // gradients + optimizer buffers
  double activation_bytes = 0;  // lower bound for one training micro-batch
  double training_bytes() const { return parameter_bytes + state_bytes + activation_bytes; }
};

// The estimate for a model over `vocab` tokens whose longest training sequence has
// `train_positions` positions (TaskData::train_positions()).
MemoryEstimate estimate_memory(const Config& cfg, int64_t vocab, int64_t train_positions);

// The examples a synthetic task generates before training (TaskData): the validation split and
// the training set (task.train_examples) at the middle of the training lengths, and one split per
// task.test_lengths entry, task.num_eval_examples examples each; an example counts its source and
// target tokens (the task's longest for its length) as int64 plus its two vectors. Zero for
// task textfile and lm, whose data are the files read.
struct DataEstimate {
  double valid_bytes = 0, test_bytes = 0, train_bytes = 0;
  double total() const { return valid_bytes + test_bytes + train_bytes; }
};
DataEstimate estimate_data_memory(const Config& cfg);
// Throws pelab::Error when the generated data alone exceed `available` bytes, naming the settings
// of the largest part (e.g. "task.num_eval_examples=1000000, task.test_lengths=[...]: the
// generated data need 6.4 TB ..."). TaskData calls it before generating anything.
void check_data_memory(const Config& cfg, double available);

// Physical memory in bytes, or the cgroup (v2 memory.max, v1 limit_in_bytes) limit when lower.
double machine_memory_bytes();

// Throws pelab::Error when the parameters alone exceed `available` bytes, naming the settings that
// make them up (e.g. "model.d_model=1000000000: the parameters alone need 60 GB ...").
void check_parameter_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                            double available);
// Throws pelab::Error when training (parameters, gradients, optimizer state and one micro-batch
// of activations) cannot fit in `available` bytes, naming train.batch_size and the length.
void check_training_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                           double available);

}  // namespace pelab
