// pelab — helpers of the positional-encoding and model tests (test_pe.cpp, test_pe_kerple_fire_xpos.cpp,
// test_cope.cpp, test_model.cpp, test_greedy_decode.cpp, test_golden.cpp, test_cuda.cpp): a stack, one attention site, position
// lists, a tiny model config.
#pragma once

#include <cstdint>
#include <vector>

#include <string>

#include "models/model_config.h"
#include "models/pe/pe.h"

namespace pelab::testing {

// Small settings for every scheme, so that tables are exercised at short lengths.
inline models::PEConfig small_pe(const std::string& scheme) {
  models::PEConfig pe;
  pe.scheme = scheme;
  pe.set("max_positions", 32);
  pe.set("shaw_k", 3);
  pe.set("t5_num_buckets", 8);
  pe.set("t5_max_distance", 16);
  return pe;
}

// A tiny model (width 8, 2 heads, one layer per stack, vocabulary 11, seed 7) of `arch` with
// small_pe(scheme), in `dtype`, without dropout.
inline models::ModelConfig tiny_model(const std::string& arch, const std::string& scheme,
                                      const std::string& dtype = "float64") {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab = 11;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.dropout = 0.0;
  c.dtype = dtype;
  c.init_std = 0.5;  // large enough that token content matters
  c.seed = 7;
  c.pe = small_pe(scheme);
  return c;
}

// An attention call of `kind` with queries at qp and keys at kp (shared positions).
inline models::AttnSite site_of(models::AttnKind kind, const std::vector<int64_t>& qp,
                                const std::vector<int64_t>& kp, bool causal, int64_t layer = 0) {
  models::AttnSite s;
  s.kind = kind;
  s.layer = layer;
  s.q_pos = qp;
  s.k_pos = kp;
  s.causal = causal;
  return s;
}

// A float64 stack of `kind` with `layers` layers of width d_model and `heads` heads.
inline models::StackInfo stack_of(models::StackKind kind, int64_t layers, int64_t d_model,
                                  int64_t heads) {
  models::StackInfo s;
  s.kind = kind;
  s.layers = layers;
  s.d_model = d_model;
  s.heads = heads;
  s.dtype = DType::Float64;
  return s;
}

// start, start + 1, ..., start + n - 1.
inline std::vector<int64_t> iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

}  // namespace pelab::testing
