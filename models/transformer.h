// pelab — the transformer: encoder/decoder (seq2seq) or decoder-only (LM), with the positional
// encoding chosen by config (one PE object per stack, models/pe/pe.h), a KV cache for incremental
// decoding and greedy decoding. Parameter names and the exact math: docs/model.md.
//
// Positions (models/positions.h) are host IDs, shared by the batch (rows 1) or one row per batch row
// (IDs supplied by the task); every forward accepts optional explicit positions per stack (default
// 0..L-1, shared). docs/model.md, "Position IDs", says what each scheme does with them. Masks are [B, L] with 1 = real token, 0 = padding (any dtype);
// an undefined mask means "all real".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/attention.h"
#include "models/model_config.h"
#include "models/pe/pe.h"
#include "pelab/nn.h"

namespace pelab::models {

// fc1 -> activation (gelu exact | relu) -> dropout -> fc2.
class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, const std::string& activation, double dropout, bool bias,
              Generator& gen, DType dtype);
  Tensor forward(const Tensor& x, Generator& gen) const;
  std::shared_ptr<Linear> fc1, fc2;
  bool relu;
  double dropout_p;
};

// A parameter holder for token tables that may be shared (tied): "weight" [vocab, d_model].
class TokenTable : public Module {
 public:
  explicit TokenTable(Tensor w) { weight = register_parameter("weight", std::move(w)); }
  Tensor weight;
};

// Per-layer state of the KV cache. self_k holds keys after transform_qk; cross_k/cross_v are the
// projections of the encoder output (computed once; transform_qk for cross-attention is re-applied
// to a copy each step, which every scheme leaves unchanged).
struct LayerKV {
  Tensor self_k, self_v;    // [B, H, offset, dh]
  Tensor cross_k, cross_v;  // [B, H, S, dh] (seq2seq only)
};

struct DecoderCache {
  int64_t batch = 0;
  std::vector<LayerKV> layers;
  Positions positions;  // positions of every cached target token (the self-attn keys)
  Tensor self_key_mask;            // [B, offset] (1 = real) or undefined when all are real
  // seq2seq only:
  Tensor memory_blocked;           // cross-attention mask from the source mask (or undefined)
  Positions src_positions;
  int64_t offset() const { return positions.len; }
};

class EncoderLayer : public Module {
 public:
  EncoderLayer(const ModelConfig& cfg, Generator& gen);
  // row_len: AttnSite::row_len (null unless pe.needs_row_lengths()).
  Tensor forward(const Tensor& x, const Tensor& blocked, PositionalEncoding& pe,
                 const Positions& pos, int64_t layer, Generator& gen,
                 const std::vector<int64_t>* row_len = nullptr);
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<FeedForward> ff;
  bool pre_norm;
  double dropout_p;
};

// Seq2seq layers: self_attn/norm1, cross_attn/norm2, ff/norm3. Decoder-only: self_attn/norm1,
// ff/norm2.
class DecoderLayer : public Module {
 public:
  DecoderLayer(const ModelConfig& cfg, bool cross, Generator& gen);
  // x [B, T, D] at positions tgt_pos. Without cache: full causal self-attention over x. With a
  // cache: x holds the new tokens only; their keys/values are appended to kv, tgt_pos are the new
  // positions and all_pos the positions of every key (cached + new). memory [B, S, D] is only used
  // without a cache.
  Tensor forward(const Tensor& x, const Tensor& self_blocked, const Tensor& memory,
                 const Tensor& memory_blocked, PositionalEncoding& pe,
                 const Positions& tgt_pos, const Positions& all_pos,
                 const Positions& src_pos, int64_t layer, Generator& gen, LayerKV* kv,
                 const std::vector<int64_t>* row_len = nullptr);
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;  // cross_attn null for decoder-only
  std::shared_ptr<LayerNorm> norm_self, norm_cross, norm_ff;
  std::shared_ptr<FeedForward> ff;
  bool pre_norm;
  double dropout_p;
};

// Token embedding (scaled) + PE hook 1 + dropout, the layers, and the final LayerNorm (pre-LN).
class Encoder : public Module {
 public:
  Encoder(const ModelConfig& cfg, Tensor embed_weight, Generator& gen);
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Positions& pos,
                 Generator& gen);
  std::shared_ptr<TokenTable> embed;
  std::shared_ptr<PositionalEncoding> pe;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null for post-LN
  double embed_scale, dropout_p;
};

class Decoder : public Module {
 public:
  Decoder(const ModelConfig& cfg, Tensor embed_weight, bool cross, Generator& gen);
  // Full (training / uncached) pass: hidden states [B, T, D].
  Tensor forward(const Tensor& tgt, const Tensor& tgt_mask, const Positions& pos,
                 const Tensor& memory, const Tensor& memory_mask,
                 const Positions& src_pos, Generator& gen);
  // Incremental pass over new tokens ids [B, n] at positions pos (size n): hidden [B, n, D].
  Tensor step(DecoderCache& cache, const Tensor& ids, const Tensor& mask,
              const Positions& pos, Generator& gen);
  std::shared_ptr<TokenTable> embed;
  std::shared_ptr<PositionalEncoding> pe;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null for post-LN
  double embed_scale, dropout_p;
  bool cross;

 private:
  Tensor embed_tokens(const Tensor& ids, const Positions& pos, Generator& gen);
};

class Transformer : public Module {
 public:
  explicit Transformer(const ModelConfig& cfg);  // validates cfg; init from cfg.seed
  const ModelConfig& config() const { return cfg_; }
  Generator& rng() { return rng_; }  // dropout
  bool is_seq2seq() const { return cfg_.is_seq2seq(); }
  DType dtype() const { return cfg_.dtype_value(); }

  // ---- seq2seq ----
  // src [B, S] Int64 -> encoder output [B, S, D].
  Tensor encode(const Tensor& src, const Tensor& src_mask,
                const Positions* src_pos = nullptr);
  // tgt_in [B, T] with the encoder output -> logits [B, T, V].
  Tensor decode(const Tensor& tgt_in, const Tensor& tgt_mask, const Tensor& memory,
                const Tensor& src_mask, const Positions* tgt_pos = nullptr,
                const Positions* src_pos = nullptr);
  Tensor forward_seq2seq(const Tensor& src, const Tensor& src_mask, const Tensor& tgt_in,
                         const Tensor& tgt_mask, const Positions* src_pos = nullptr,
                         const Positions* tgt_pos = nullptr);
  // ---- decoder-only ----
  Tensor forward_decoder(const Tensor& ids, const Tensor& mask,
                         const Positions* pos = nullptr);

  // hidden [.., D] -> logits [.., V] (final LN already applied by the stack).
  Tensor logits(const Tensor& hidden) const;

  // ---- incremental decoding ----
  // Seq2seq: computes every layer's cross-attention K/V from the encoder output once.
  DecoderCache start_cache(const Tensor& memory, const Tensor& src_mask,
                           const Positions* src_pos = nullptr);
  // Decoder-only: an empty cache for a batch of `batch` rows.
  DecoderCache start_cache(int64_t batch);
  // Appends ids [B, n] at positions pos ([1 or B, n]; default offset..offset+n-1, shared); mask
  // [B, n] or undefined.
  // Returns logits [B, n, V] equal to those of the full forward at these positions.
  Tensor decode_step(DecoderCache& cache, const Tensor& ids, const Tensor& mask = Tensor(),
                     const Positions* pos = nullptr);

  std::shared_ptr<Encoder> encoder;  // null for arch=decoder
  std::shared_ptr<Decoder> decoder;
  std::shared_ptr<TokenTable> lm_head;  // may share its weight with the embeddings

 private:
  ModelConfig cfg_;
  Generator rng_;
};

// Token ids used by greedy decoding (defaults match data/vocab.h).
struct SpecialIds {
  int64_t pad = 0, bos = 1, eos = 2;
};

struct GreedyResult {
  std::vector<std::vector<int64_t>> tokens;  // per row, generated tokens without the eos
  std::vector<bool> finished;                // per row: an eos was produced within max_len
};

// Explicit positions for greedy decoding (randomized-position evaluation, task-supplied IDs;
// default 0..L-1), shared by every row (rows 1) or one row per row of the decoded batch (the
// source batch, or the prompts in their order). src: one per source column (seq2seq only). tgt:
// the position of each
// decoder token by its index in the decoded sequence: seq2seq bos, then each emitted token;
// decoder-only the prompt's tokens, then each emitted token. Greedy decoding of max_len tokens
// feeds max_len tokens (seq2seq) or |prompt| + max_len - 1 (decoder-only), so tgt must hold at
// least that many positions (columns).
struct GreedyPositions {
  Positions src, tgt;
};

// Seq2seq greedy decoding: the decoder starts from bos and emits up to max_len tokens per row
// (stopping a row at its eos). Runs without grad and in eval mode (the mode is restored).
// With use_cache every step feeds only the new token through the KV cache; without, every step
// recomputes the full forward (same tokens). pos: explicit positions (nullptr = 0..L-1).
GreedyResult greedy_decode(Transformer& model, const Tensor& src, const Tensor& src_mask,
                           int64_t max_len, bool use_cache = true, SpecialIds ids = {},
                           const GreedyPositions* pos = nullptr);
// Decoder-only: continues each prompt (at least one token; rows may differ in length: rows with
// equal prompt lengths are decoded together) with up to max_len tokens. pos: as above (pos->src
// must be empty).
GreedyResult greedy_decode(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                           int64_t max_len, bool use_cache = true, SpecialIds ids = {},
                           const GreedyPositions* pos = nullptr);

}  // namespace pelab::models
