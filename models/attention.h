// pelab — multi-head attention with the four positional-encoding hooks (models/pe/pe.h).
//
//   q, k, v = split_heads(x W_qᵀ + b_q), ...            [B, H, L, dh]
//   pe.transform_qk(q, k, site)                          (hook 2, e.g. RoPE)
//   s = q kᵀ / √dh + pe.keyed_score_term(q, k, blocked, site)
//                                                        (hook 3, e.g. T5 / ALiBi / Shaw-K / CoPE;
//                                                        default: pe.score_term(q, site))
//   s = f · s   (model.attention_length_scale, row i: f = log n_i or s_h · log n_i; off: f = 1)
//   s = masked_fill(s, blocked, -1e9)                    (causal and key-padding masks)
//   p = dropout(softmax(s))
//   out = p v + pe.value_term(p, site)                   (hook 4, e.g. Shaw-V)
//   y = merge_heads(out) W_oᵀ + b_o
//
// The hooks are called for every attention call, cross-attention included (schemes return nothing
// for AttnKind::Cross); this file never names a scheme. When nothing needs p (no value term, or one
// in table form — pe.relative_tables —, no attention dropout in training, keep_probs off), the
// lines from s to out are one fused op, scaled_dot_attention, which never forms s as a tensor.
#pragma once
#include <memory>
#include <vector>

#include "models/pe/pe.h"
#include "pelab/nn.h"

namespace pelab::models {

// Length-scaled attention logits (model.attention_length_scale): every logit of query row i — the
// q·k term and the scheme's score term alike — is multiplied by
//   LogN:  f_i = log n_i             (Chiang & Cholak 2022)
//   SSMax: f_i = s_h · log n_i       (Nakanishi 2025, "Scalable-Softmax": s_h learned per head and
//                                     layer, parameter `length_scale` [H], initialised to 1)
// with n_i the number of keys row i may attend (the keys its mask does not block; at least 1), so
// the attention a key with a given logit margin gets does not fade as the sequence grows.
enum class LengthScale { Off, LogN, SSMax };
// "off" | "log_n" | "ssmax" (model.attention_length_scale); throws naming the key otherwise.
LengthScale length_scale_from_name(const std::string& name);

// Value written into blocked scores. Finite, so a row whose keys are all blocked gives a uniform
// softmax instead of NaN.
constexpr double kMaskedScore = -1e9;

// Attention mask, 1 = blocked, broadcastable to [B, H, Lq, Lk]: [B, 1, Lq, Lk], [B, 1, 1, Lk] or
// [1, 1, Lq, Lk]; undefined when nothing is blocked.
//  key_mask [B, Lk] (any dtype, 1 = real token, 0 = padding) or undefined;
//  causal: the Lq queries are the last Lq of the Lk keys (a KV cache holds the first Lk - Lq), and
//  query i may attend to key j iff j <= Lk - Lq + i.
Tensor attention_mask(const Tensor& key_mask, int64_t Lq, int64_t Lk, bool causal, DType dtype,
                      Device device);

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t d_model, int64_t heads, double dropout, bool bias, Generator& gen,
                     DType dtype = DType::Float32, LengthScale length_scale = LengthScale::Off);

  // KV-cache decoding: the keys and values a layer keeps between calls (LayerKV's tensors).
  //  all_k_pos set (self-attention): *k / *v hold the keys (after transform_qk) and values of the
  //    earlier tokens; the call's new keys and values join them, and the queries attend over all
  //    of them at all_k_pos (the positions of every key, cached and new).
  //  all_k_pos null (cross-attention): *k / *v are the projections of the encoder output, made
  //    once by project(); they are used as they are, never extended (xkv is not read).
  struct CachedKV {
    Tensor* k = nullptr;
    Tensor* v = nullptr;
    const Positions* all_k_pos = nullptr;
  };

  // Queries from xq [B, Lq, D], keys and values from xkv [B, Lk, D] (xkv = xq for self-attention).
  // site.q_pos / site.k_pos must have lengths Lq / Lk (and 1 or B rows). Returns [B, Lq, D].
  // With a cache, site.k_pos are the positions of the keys this call projects (the new tokens';
  // the encoder output's for a fixed cache): they alone go through pe.transform_qk.
  Tensor forward(const Tensor& xq, const Tensor& xkv, const Tensor& blocked, PositionalEncoding& pe,
                 const AttnSite& site, Generator& gen, const CachedKV* cache = nullptr);

  // The pieces forward() is made of (start_cache calls project for the cross-attention cache):
  // x [B, L, D] through `lin`, split into heads: [B, H, L, dh] (a permuted view of the [B, L, H, dh]
  // projection: the fused attention reads it in place).
  Tensor project(const Linear& lin, const Tensor& x) const;
  // q [B, H, Lq, dh] and k, v [B, H, Lk, dh] (k already through transform_qk): scores, score term,
  // mask, softmax, dropout, value term, merge heads, output projection -> [B, Lq, D].
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& blocked,
                PositionalEncoding& pe, const AttnSite& site, Generator& gen);

  int64_t d_model, heads, head_dim;
  double dropout_p;
  LengthScale length_scale;
  std::shared_ptr<Linear> q, k, v, o;
  Tensor length_scale_s;  // SSMax's s_h [H] (parameter "length_scale"); undefined otherwise

  // When true, attend() keeps the attention probabilities of its last call (before dropout,
  // detached) in last_probs [B, H, Lq, Lk], for analysis tools.
  bool keep_probs = false;
  Tensor last_probs;
};

}  // namespace pelab::models
