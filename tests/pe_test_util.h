// pelab — helpers of the positional-encoding tests (test_pe.cpp, test_new_schemes.cpp,
// test_cope.cpp): a stack, one attention site, position lists.
#pragma once

#include <cstdint>
#include <vector>

#include "models/pe/pe.h"

namespace pelab::testing {

// An attention call of `kind` with queries at qp and keys at kp (the vectors must outlive it).
inline models::AttnSite site_of(models::AttnKind kind, const std::vector<int64_t>& qp,
                                const std::vector<int64_t>& kp, bool causal, int64_t layer = 0) {
  models::AttnSite s;
  s.kind = kind;
  s.layer = layer;
  s.q_pos = &qp;
  s.k_pos = &kp;
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
