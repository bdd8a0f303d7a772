// pelab — the model's own configuration (the `model:` section plus the `pe:` section). This is the one
// config model: train/config.h's Config holds it and the config schema points into it.
// validate() checks every key and throws pelab::Error naming it ("model.heads: ...").
#pragma once
#include <cstdint>
#include <string>

#include "models/pe/pe_config.h"
#include "pelab/dtype.h"

namespace pelab::models {

struct ModelConfig {
  std::string arch = "seq2seq";  // seq2seq (encoder + decoder with cross-attention) | decoder (LM)
  int64_t vocab = 32;            // one vocabulary for source and target (from the data, not a key)
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t d_ff = 256;
  int64_t encoder_layers = 2;    // ignored for arch=decoder
  int64_t decoder_layers = 2;
  double dropout = 0.0;          // embedding, attention-probability, feed-forward and residual dropout
  std::string norm = "pre";      // pre: x + f(LN(x)) and a final LN per stack | post: LN(x + f(x))
  double norm_eps = 1e-5;
  std::string activation = "gelu";  // gelu (exact, erf form) | relu
  bool bias = true;                 // biases in the attention and feed-forward Linear layers
  bool tie_embeddings = false;      // one table for src/tgt embeddings and lm_head
  std::string embed_scale = "auto";  // auto: sqrt(d_model) for additive PE else 1 | sqrt_d | none
  // off | log_n | ssmax: every attention logit of a query times log(keys it attends), learned
  // per head for ssmax (models/attention.h, LengthScale)
  std::string attention_length_scale = "off";
  std::string dtype = "float32";     // float32 | float64
  double init_std = 0.02;            // std of the token embeddings and of an untied lm_head
  uint64_t seed = 0;                 // parameter init (train.seed); dropout derives a generator from it
  PEConfig pe;

  // Throws pelab::Error naming the first bad key and its value.
  void validate() const;
  DType dtype_value() const { return dtype_from_name(dtype); }
  int64_t head_dim() const { return d_model / heads; }
  bool is_seq2seq() const { return arch == "seq2seq"; }
};

}  // namespace pelab::models
