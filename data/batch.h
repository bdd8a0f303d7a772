// data/batch.h - batching of examples into padded row-major id arrays (the trainer turns them into
// tensors): encoder-decoder, decoder-only and language-model layouts, plus length bucketing.
// Padding uses Vocab::kPad in id arrays and 0 in masks; the trainer maps padded targets to
// "ignore".
#pragma once

#include <cstdint>
#include <vector>

#include "data/lm.h"
#include "data/tasks.h"

namespace pelab::data {

// Positions one example occupies in the model (the layouts below): decoder-only
// |src| + |tgt| + 2 (bos, src, sep, tgt; the final eos is a target only), encoder-decoder
// max(|src| + 1, |tgt| + 1) (src + eos in the encoder; bos + tgt in the decoder). The one count
// behind the batch lengths, TaskData::train_positions(), the learned-table config rule and
// task.max_example_len.
int64_t example_positions(int64_t src_len, int64_t tgt_len, bool decoder);
// The longest training sequence of a synthetic task in positions: example_positions of its
// largest source and target at length max_len.
int64_t task_positions(const Task& task, int64_t max_len, bool decoder);

// Encoder-decoder batch. Row b:
//   src     = src_b + [eos]          (encoder input; the eos marks the end of the source)
//   tgt_in  = [bos] + tgt_b          (decoder input, teacher forcing)
//   tgt_out = tgt_b + [eos]          (decoder targets)
// S = max |src_b| + 1, T = max |tgt_b| + 1. Masks are 1 on real tokens, 0 on padding.
struct Seq2SeqBatch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int64_t> src;       // [B, S]
  std::vector<uint8_t> src_mask;  // [B, S]
  std::vector<int64_t> tgt_in;    // [B, T]
  std::vector<int64_t> tgt_out;   // [B, T]
  std::vector<uint8_t> tgt_mask;  // [B, T] (same for tgt_in and tgt_out)
  std::vector<int64_t> src_len;   // [B] real length of src row (|src_b| + 1)
  std::vector<int64_t> tgt_len;   // [B] real length of tgt rows (|tgt_b| + 1)
};
Seq2SeqBatch make_seq2seq_batch(const std::vector<Example>& examples);

// Decoder-only batch. Row b (n_b = |src_b| + |tgt_b| + 2 real positions):
//   input  = [bos] + src_b + [sep] + tgt_b
//   target = src_b + [sep] + tgt_b + [eos]      (input shifted left by one)
//   loss_mask = 1 exactly where target is a tgt_b token or the final eos, i.e. positions
//               p >= prompt_len_b - 1 and p < n_b
//   prompt_len_b = |src_b| + 2 (bos + src + sep): greedy decoding feeds input[0, prompt_len) and
//               generates until eos.
//   pos    = src_pos_b + tgt_pos_b (the task's position IDs of the input tokens), padded with 0;
//            empty when no example has IDs (every example of a batch has them or none has).
//   pos2   = the second ID level (src_pos2_b + tgt_pos2_b) laid out as pos; empty when the
//            examples have one level.
struct DecoderBatch {
  int64_t B = 0, L = 0;             // L = max n_b
  std::vector<int64_t> input;       // [B, L]
  std::vector<int64_t> target;      // [B, L]
  std::vector<uint8_t> mask;        // [B, L] 1 = real position
  std::vector<uint8_t> loss_mask;   // [B, L]
  std::vector<int64_t> prompt_len;  // [B]
  std::vector<int64_t> seq_len;     // [B] n_b
  std::vector<int64_t> pos;         // [B, L] or empty
  std::vector<int64_t> pos2;        // [B, L] or empty
};
DecoderBatch make_decoder_batch(const std::vector<Example>& examples);
// The decoding prompt of one source: [bos] + src + [sep].
std::vector<int64_t> decoder_prompt(const std::vector<int64_t>& src);
// The position IDs greedy decoding feeds for one example with task IDs: the prompt's (src_pos),
// then one per generated token, n_generated of them: tgt_pos's, and past its end the last ID of
// tgt_pos repeated (a token past the reference answer makes the answer wrong whatever its ID).
// |src_pos| + n_generated IDs; DataError when the example has no IDs. level 2: the same from the
// second ID level (src_pos2, tgt_pos2; DataError when the example has none).
std::vector<int64_t> decoder_position_ids(const Example& ex, int64_t n_generated, int level = 1);

// Language-model batch: all windows have the same length L; target = next token.
struct LmBatch {
  int64_t B = 0, L = 0;
  std::vector<int64_t> input;   // [B, L]
  std::vector<int64_t> target;  // [B, L]
};
LmBatch make_lm_batch(const std::vector<LmWindow>& windows);

// Groups examples into batches of at most batch_size, keeping the order. With bucket = true the
// examples are first sorted (stably) by |src| + |tgt|, so each batch holds similar lengths, and the
// batch order is then shuffled with `seed` (deterministic).
std::vector<std::vector<Example>> make_batches(const std::vector<Example>& examples,
                                               int64_t batch_size, bool bucket = false,
                                               uint64_t seed = 0);

// Training batches drawn from an ExampleStream, optionally length-bucketed; batch j is a pure
// function of (stream seed, j), so position() (batches consumed) restores a run exactly.
// pool_batches <= 1: batch j = stream examples [j*B, (j+1)*B).
// pool_batches = P > 1: pool p = stream examples [p*P*B, (p+1)*P*B), bucketed by make_batches with
// seed derived from (stream seed, p); batch j is batch j % P of pool j / P.
// one_length (a task stream, pool_batches <= 1): every example of batch j has the length
// stream.batch_length(j) (uniform over the task's valid training lengths), example i being
// stream.at_length(j*B + i, that length) — the batches of Delétang et al. 2023 / Ruoss et al. 2023,
// which randomized positions need (one position subset per batch, sized to its sequences).
class BatchSampler {
 public:
  BatchSampler(ExampleStream stream, int64_t batch_size, int64_t pool_batches = 1,
               int64_t position = 0, bool one_length = false);
  std::vector<Example> batch_at(int64_t j) const;
  std::vector<Example> next() { return batch_at(position_++); }
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  int64_t batch_size() const { return B_; }

 private:
  ExampleStream stream_;
  int64_t B_, P_;
  bool one_length_ = false;
  int64_t position_ = 0;
  mutable int64_t cached_pool_ = -1;
  mutable std::vector<std::vector<Example>> pool_;
};

}  // namespace pelab::data
