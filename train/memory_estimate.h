// pelab — what a command needs in memory, estimated from the config before anything is allocated,
// so that an impossible setting (model.d_model 1e9, task.train_max_len 1e8, a test length of 3e6, a
// batch of 5000-token sequences on a small machine) is one error naming the settings instead of an
// allocation failure, minutes in. docs/training.md ("Memory: what pelab checks before it
// allocates") lists the terms and what they were measured against.
//
//   data: the examples a synthetic task generates (DataEstimate);
//   parameters: counted exactly from the model config (token tables, attention, feed-forward,
//     LayerNorms, the PE scheme's tables; a tied table once), times the dtype size;
//   training state: the parameters again for the gradients, plus the optimizer's buffers (adamw 2,
//     sgd with momentum 1);
//   one pass over a batch (PassEstimate): activations (per token: embeddings and logits 4·vocab +
//     6·d_model values, per layer 8·d_model + 2·d_ff, a cross-attending layer 4·d_model more) and
//     attention, per site: the mask (a causal one per stack, one per row when the rows' lengths
//     differ), the probabilities the fused kernel keeps for the backward (up to
//     attention_keep_limit() bytes a site), the composite path's with dropout, and the PE scheme's
//     terms (PEScheme::attention_memory); an evaluation pass has no gradients and adds the KV cache
//     of greedy decoding;
//   training: the data, the parameters and state, and the larger of one training micro-batch and
//     the largest evaluation batch (validation and the final evaluation at every test length);
//   evaluation (pelab eval, compare): the data, the parameters and the largest evaluation batch.
//   plus 32 MB for the process itself.
// The terms were fitted to the peak resident memory of pelab itself (tests/test_resource_bounds.cpp
// checks every scheme against it). The machine's memory is the physical RAM, or the cgroup limit or
// the process's address-space limit (ulimit -v, less what the process maps already) when lower.
#pragma once
#include <cstdint>
#include <string>

#include "train/config.h"

namespace pelab {

class TaskData;

// One batch the model processes: `batch` rows; seq2seq: `source` encoder and `target` decoder
// positions; decoder-only: `target` positions (source 0). `padded`: the rows' lengths differ (a
// causal mask per row). `largest_position`: the largest position ID the model is given.
// `decode`: tokens greedy decoding may append (an evaluation's KV cache; 0 = none). `varies`: the
// batches' lengths vary up to these (training: a shorter batch may keep the probabilities that a
// longer one recomputes).
struct BatchShape {
  int64_t batch = 1, source = 0, target = 0;
  bool padded = false, varies = false;
  int64_t largest_position = 0;
  int64_t decode = 0;
};

// What one pass over a batch holds beyond the parameters, in bytes. Training: the forward and
// backward of one micro-batch; evaluation: a forward without gradients and greedy decoding.
struct PassEstimate {
  double activation_bytes = 0;  // embeddings, every layer's values, logits
  double attention_bytes = 0;   // masks, kept probabilities, the PE scheme's terms
  double cache_bytes = 0;       // the KV cache of greedy decoding (evaluation)
  double total() const { return activation_bytes + attention_bytes + cache_bytes; }
};
PassEstimate estimate_pass(const Config& cfg, int64_t vocab, const BatchShape& b, bool training);

struct MemoryEstimate {
  double parameters = 0;        // count
  double parameter_bytes = 0;   // weights alone
  double embedding_bytes = 0;   // token tables (part of parameter_bytes)
  double layer_bytes = 0;       // attention, feed-forward and norms (part of parameter_bytes)
  double pe_bytes = 0;          // the PE scheme's tables (part of parameter_bytes)
  double state_bytes = 0;       // gradients + optimizer buffers
  double activation_bytes = 0;  // one training micro-batch: activations
  double attention_bytes = 0;   // one training micro-batch: attention (estimate_pass)
  double training_bytes() const {
    return parameter_bytes + state_bytes + activation_bytes + attention_bytes;
  }
};

// The estimate for a model over `vocab` tokens training on micro-batches of train.batch_size
// sequences of `train_positions` positions (TaskData::train_positions()).
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

// This process's peak resident memory in bytes (VmHWM; 0 where /proc does not say).
double peak_resident_bytes();

// Physical memory in bytes, or the cgroup (v2 memory.max, v1 limit_in_bytes) limit, or the
// address-space limit (RLIMIT_AS less the process's present size) when lower.
double machine_memory_bytes();

// Throws pelab::Error when the parameters alone exceed `available` bytes, naming the settings that
// make them up (e.g. "model.d_model=1000000000: the parameters alone need 60 GB ...").
void check_parameter_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                            double available);
// Throws pelab::Error when training (parameters, gradients, optimizer state and one micro-batch)
// cannot fit in `available` bytes, naming train.batch_size and the length.
void check_training_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                           double available);

// What a command does with a config: train it, evaluate it (pelab eval, compare), or only load
// its data and model (generate, info, plot-pe, which checks its own pass).
enum class MemoryUse { Train, Evaluate, Load };
// What training cfg asks of the host: everything on the CPU; with train.device cuda the model,
// its state and the passes live on the GPU, the host holding the data and the parameters
// (MemoryUse::Load).
MemoryUse training_memory_use(const Config& cfg);

// Everything a command holds at its peak (see the top of the file).
struct RunEstimate {
  int64_t vocab = 0;
  BatchShape train;             // one training micro-batch
  MemoryEstimate model;         // parameters, state and the training micro-batch
  DataEstimate data;
  PassEstimate eval;            // the largest evaluation batch
  BatchShape eval_shape;
  std::string eval_split;       // its split ("valid", "len_24", a file stem, "ctx_512")
  double step_bytes() const { return model.activation_bytes + model.attention_bytes; }
  double total(MemoryUse use) const;
};
// From the config alone, or with `data` (built) from its vocabulary and examples: synthetic tasks
// and lm are known from the config (lm's vocabulary counts as the special tokens until its corpus
// is read); a text file's lengths only from its data (0 before).
RunEstimate estimate_run(const Config& cfg, const TaskData* data = nullptr);
// Throws pelab::Error, one line naming the settings behind the largest part, when `use` of cfg
// cannot fit in `available` bytes ("task.train_max_len=100000000: training needs 646 GB (...);
// this machine has 24.6 GB. Reduce ..."). Parameters past `available` give check_parameter_memory's
// message. Callers: the trainer and load_model before the data is built, and again with it.
void check_run_memory(const Config& cfg, MemoryUse use, double available,
                      const TaskData* data = nullptr);
// Bytes as the messages write them: "23.1 GB", "646 GB", "6.08e+09 GB", "27.3 MB".
std::string gigabytes(double bytes);
// "training needs 23.1 GB (data ..., parameters ..., ...)": the estimate's parts (pelab info).
std::string run_memory_text(const Config& cfg, MemoryUse use, const TaskData* data = nullptr);

}  // namespace pelab
