// pelab — evaluation of a model on one split: teacher-forced loss, perplexity and token accuracy,
// and sequence exact match by greedy decoding (with the model's KV cache). Also the batch -> tensor
// helpers shared with the trainer.
//
// Definitions (docs/training.md): loss = mean cross-entropy per target token (eos included, no
// label smoothing), perplexity = exp(loss), token_accuracy = teacher-forced argmax accuracy over the
// same tokens, exact_match = fraction of examples whose greedy output (up to eos) equals the target
// (lm: not defined). A split the model cannot represent (learned absolute positions beyond
// pe.max_positions, or xpos positions beyond its float32 range) gets status "n/a (> max_positions)"
// and no numbers; a split whose loss is not finite gets status "n/a (non-finite loss)".
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "data/batch.h"
#include "models/transformer.h"
#include "pelab/random.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/task_data.h"

namespace pelab {

struct Prediction {
  std::string source, target, output;
  bool correct = false;
};

struct EvalResult {
  std::string split;
  int64_t length = 0;  // task / window length; 0 when not applicable
  int64_t examples = 0;
  int64_t tokens = 0;  // target tokens scored
  std::string status = "ok";
  double loss = std::numeric_limits<double>::quiet_NaN();
  double perplexity = std::numeric_limits<double>::quiet_NaN();
  double token_accuracy = std::numeric_limits<double>::quiet_NaN();
  double exact_match = std::numeric_limits<double>::quiet_NaN();
  int64_t unknown_symbols = 0;  // symbols scored as <unk> (textfile, task.unknown_symbols)
  // Exact match per task length, ascending (a set with EvalSet::example_lengths, decoded).
  std::vector<std::pair<int64_t, double>> exact_by_length;
  // The lowest of exact_by_length (NaN when empty).
  double worst_length_exact_match() const;
  std::vector<Prediction> predictions;  // with EvalOptions::keep_predictions
  // EvalOptions::stop ended the evaluation early: the numbers cover part of the split (not to be
  // reported).
  bool interrupted = false;
  bool available() const { return status == "ok"; }
  // split, length, examples, tokens, status, loss, perplexity, token_accuracy, exact_match,
  // unknown_symbols
  MetricRow row() const;
};

struct EvalOptions {
  bool decode = true;        // compute exact match (greedy decoding)
  bool use_cache = true;     // KV-cache decoding (false: recompute the full forward every step)
  bool keep_predictions = false;
  // Randomized positions (Ruoss et al. 2023 evaluate this way): when set, every batch and stack
  // is run at a sorted random subset of [0, random_max_position) drawn with this generator
  // (random_positions below, as training with pe.randomized_positions draws them) instead of
  // 0..L-1. Batches then hold examples of one source length (the positions are shared by the
  // batch), and greedy decoding gets as many positions as the batch's longest target plus eos,
  // so it can emit the right answer but nothing longer. A split longer than random_max_position
  // gets status kNaRandomMaxPosition.
  Generator* random_positions = nullptr;
  int64_t random_max_position = 0;
  // Asked before every batch and every greedy decoding step (when set); true ends the evaluation
  // at once with EvalResult::interrupted (the trainer's stop on a signal, train/stop_signal.h).
  std::function<bool()> stop;
};

constexpr const char* kNaMaxPositions = "n/a (> max_positions)";
constexpr const char* kNaRandomMaxPosition = "n/a (> randomized_max_position)";
// A split whose teacher-forced loss is not finite (the model overflowed on it): its numbers are
// not results.
constexpr const char* kNonFiniteLoss = "n/a (non-finite loss)";

// The positions of the validation split (train.valid_positions): `as_trained` with
// pe.randomized_positions sets `opt` to draw them as training does, from `gen`, which is reset to
// a seed derived from train.seed, so that every validation of a run (during training, the final
// eval.json, `pelab eval`) sees the same positions; otherwise `opt` is left as it is (0..L-1).
void set_validation_positions(const Config& cfg, Generator& gen, EvalOptions& opt);

// Evaluates `model` on `set` (model left in the mode it was in).
EvalResult evaluate_set(models::Transformer& model, const TaskData& data, const EvalSet& set,
                        const Config& cfg, const EvalOptions& opt = {});

// Value of eval.best_metric in a result, and whether larger is better. For the lm task (no exact
// match) exact_match falls back to loss.
std::string effective_best_metric(const Config& cfg);
double metric_of(const EvalResult& r, const std::string& metric);
bool higher_is_better(const std::string& metric);

// ---- batch -> tensors ----
Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t B, int64_t L, Device dev);
Tensor mask_tensor(const std::vector<uint8_t>& mask, int64_t B, int64_t L, Device dev);
// Targets with positions where keep[i] == 0 replaced by ignore_index (-100).
Tensor targets_tensor(const std::vector<int64_t>& target, const std::vector<uint8_t>& keep, int64_t B,
                      int64_t L, Device dev);
constexpr int64_t kIgnoreIndex = -100;

// Positions the longest sequence of a split needs (decoder-only: prompt + target; seq2seq: the
// longer of source and target, eos included; lm: the window); with task position IDs the largest
// ID + 1 (the IDs, not the token indices, are the positions).
int64_t positions_needed(const EvalSet& set, bool decoder);

// A sorted set of L distinct positions drawn uniformly from [0, max_position) (Floyd's algorithm)
// with `gen`; the randomized positional encodings of Ruoss et al. (2023), in training and in
// EvalOptions::random_positions.
std::vector<int64_t> random_positions(Generator& gen, int64_t L, int64_t max_position);

// The greedy-decoding budget for sources of task length `length` (longest source |src| when 0):
// eval.max_decode_len, or 2 * length + 8 (evaluation raises the latter to the reference answer's
// length + 1 where that is longer).
int64_t decode_budget(const Config& cfg, int64_t length);

// Writes results as eval.json ({"step": N, "checkpoint": ..., "convergence": ..., "results":
// [...]}; eval.json atomically) and eval.csv. `convergence` is the JSON text of the run's
// train.stop_when record (train/stop_criterion.h); "" leaves the key out.
void write_eval_files(const std::string& dir, const std::vector<EvalResult>& results, int64_t step,
                      const std::string& checkpoint, const std::string& convergence = "");
// An eval.json as write_eval_files wrote it: the checkpoint it evaluated ("checkpoints/step_N.h5")
// and one row per split (EvalResult::row()). Throws pelab::Error naming `where` when the text is
// malformed or a member is missing or of the wrong type.
struct EvalJson {
  std::string checkpoint;
  std::vector<MetricRow> results;
  const MetricRow* result(const std::string& split) const;  // null when there is none
};
EvalJson parse_eval_json(const std::string& text, const std::string& where);
// Writes predictions_<split>.tsv (source, target, output, correct) for every result that kept its
// predictions (checked, atomic writes).
void write_prediction_files(const std::string& dir, const std::vector<EvalResult>& results);
// A plain-text table of results (one line per split), then one line per split with symbols
// scored as <unk>.
std::string eval_table(const std::vector<EvalResult>& results);

}  // namespace pelab
