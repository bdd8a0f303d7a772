// Op-driver cases (gradient checks, float32-vs-float64 parity, non-contiguous inputs) for the
// linear-algebra, fused-nn and indexing ops, plus OpsNN value tests against naive host references
// and error-message tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "pelab/pelab.h"
#include "tests/op_driver.h"
#include "tests/test_util.h"

namespace pelab::testing {
namespace {

using V = std::vector<Tensor>;

OpCase make_case(std::string op, std::string label, std::vector<Shape> shapes,
                 std::function<Tensor(const V&)> fn) {
  OpCase c;
  c.op = std::move(op);
  c.label = std::move(label);
  c.shapes = std::move(shapes);
  c.fn = std::move(fn);
  return c;
}

Tensor ints(const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
  return Tensor::from_ints(v, s, like.device());
}

// ---------------- matmul ----------------
PELAB_OP_CASE(make_case("matmul", "[3,4] @ [4,5]", {{3, 4}, {4, 5}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "alpha 0.35: batched [2,3,4] @ [2,5,4]^T", {{2, 3, 4}, {2, 5, 4}},
                        [](const V& in) { return matmul(in[0], transpose(in[1], -1, -2), 0.35); }));
PELAB_OP_CASE(make_case("matmul", "alpha -1.5: shared rhs [2,3,4] @ [4,5] (folded)",
                        {{2, 3, 4}, {4, 5}},
                        [](const V& in) { return matmul(in[0], in[1], -1.5); }));
PELAB_OP_CASE(make_case("matmul", "batched [2,3,4] @ [2,4,5]", {{2, 3, 4}, {2, 4, 5}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "broadcast [2,1,3,4] @ [5,4,2]", {{2, 1, 3, 4}, {5, 4, 2}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "shared rhs [2,3,4] @ [4,5] (folded)", {{2, 3, 4}, {4, 5}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "shared lhs [3,4] @ [2,4,5]", {{3, 4}, {2, 4, 5}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "transposed lhs [4,3]^T @ [4,5]", {{4, 3}, {4, 5}},
                        [](const V& in) { return matmul(transpose(in[0], 0, 1), in[1]); }));
PELAB_OP_CASE(make_case("matmul", "transposed rhs [2,3,4] @ [2,5,4]^T", {{2, 3, 4}, {2, 5, 4}},
                        [](const V& in) { return matmul(in[0], transpose(in[1], -1, -2)); }));
PELAB_OP_CASE(make_case("matmul", "both transposed, batched broadcast", {{2, 1, 4, 3}, {3, 5, 4}},
                        [](const V& in) {
                          return matmul(transpose(in[0], -1, -2), transpose(in[1], -1, -2));
                        }));
PELAB_OP_CASE(make_case("matmul", "permuted batch [3,2,4]->[2,3,4] @ [2,4,5]",
                        {{3, 2, 4}, {2, 4, 5}}, [](const V& in) {
                          return matmul(permute(in[0], {1, 0, 2}), in[1]);
                        }));
// A head-split view (the attention's q: [B, L, H, dh] permuted to [B, H, L, dh]) times a shared
// rhs: its rows are copied into one matrix, one GEMM forward and one for the rhs gradient.
PELAB_OP_CASE(make_case("matmul", "head-split lhs [2,3,2,4]->[2,2,3,4] @ shared [4,5]",
                        {{2, 3, 2, 4}, {4, 5}}, [](const V& in) {
                          return matmul(permute(in[0], {0, 2, 1, 3}), in[1], 0.7);
                        }));
PELAB_OP_CASE(make_case("matmul", "1-D rhs [3,4] @ [4]", {{3, 4}, {4}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "1-D rhs batched [2,3,4] @ [4]", {{2, 3, 4}, {4}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "1-D lhs [4] @ [2,4,5]", {{4}, {2, 4, 5}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "dot [4] @ [4]", {{4}, {4}},
                        [](const V& in) { return matmul(in[0], in[1]); }));
PELAB_OP_CASE(make_case("matmul", "unit dims [1,4] @ [4,1]", {{1, 4}, {4, 1}},
                        [](const V& in) { return matmul(in[0], in[1]); }));

// ---------------- linear ----------------
PELAB_OP_CASE(make_case("linear", "bias, x [2,3,4], W [5,4]", {{2, 3, 4}, {5, 4}, {5}},
                        [](const V& in) { return linear(in[0], in[1], in[2]); }));
PELAB_OP_CASE(make_case("linear", "no bias, x [3,4], W [2,4]", {{3, 4}, {2, 4}},
                        [](const V& in) { return linear(in[0], in[1], Tensor()); }));
PELAB_OP_CASE(make_case("linear", "1-D x [4], W [3,4], bias", {{4}, {3, 4}, {3}},
                        [](const V& in) { return linear(in[0], in[1], in[2]); }));
PELAB_OP_CASE(make_case("linear", "permuted x [3,2,4]->[2,3,4], transposed W",
                        {{3, 2, 4}, {4, 5}, {5}}, [](const V& in) {
                          return linear(permute(in[0], {1, 0, 2}), transpose(in[1], 0, 1), in[2]);
                        }));

// ---------------- softmax / log_softmax ----------------
PELAB_OP_CASE(make_case("softmax", "axis 0 of [3,4,5]", {{3, 4, 5}},
                        [](const V& in) { return softmax(in[0], 0); }));
PELAB_OP_CASE(make_case("softmax", "middle axis of [3,4,5]", {{3, 4, 5}},
                        [](const V& in) { return softmax(in[0], 1); }));
PELAB_OP_CASE(make_case("softmax", "last axis of [3,4,5]", {{3, 4, 5}},
                        [](const V& in) { return softmax(in[0], -1); }));
PELAB_OP_CASE(make_case("log_softmax", "axis 0 of [3,4,5]", {{3, 4, 5}},
                        [](const V& in) { return log_softmax(in[0], 0); }));
PELAB_OP_CASE(make_case("log_softmax", "middle axis of [3,4,5]", {{3, 4, 5}},
                        [](const V& in) { return log_softmax(in[0], 1); }));
PELAB_OP_CASE(make_case("log_softmax", "last axis of [6,7]", {{6, 7}},
                        [](const V& in) { return log_softmax(in[0], -1); }));

// ---------------- cross_entropy ----------------
PELAB_OP_CASE(make_case("cross_entropy", "[6,5] with ignored rows", {{6, 5}}, [](const V& in) {
  return cross_entropy(in[0], ints({1, -100, 4, 0, 4, -100}, {6}, in[0]));
}));
PELAB_OP_CASE(
    make_case("cross_entropy", "[2,3,4] label smoothing 0.1", {{2, 3, 4}}, [](const V& in) {
      return cross_entropy(in[0], ints({3, 0, 1, 2, 2, 0}, {2, 3}, in[0]), -100, 0.1);
    }));
PELAB_OP_CASE(make_case("cross_entropy", "[5,3] smoothing 0.2, custom ignore_index 1", {{5, 3}},
                        [](const V& in) {
                          return cross_entropy(in[0], ints({0, 1, 2, 1, 0}, {5}, in[0]), 1, 0.2);
                        }));

// ---------------- layer_norm ----------------
PELAB_OP_CASE(make_case("layer_norm", "affine [4,6]", {{4, 6}, {6}, {6}},
                        [](const V& in) { return layer_norm(in[0], in[1], in[2]); }));
PELAB_OP_CASE(make_case("layer_norm", "no affine [2,3,5]", {{2, 3, 5}},
                        [](const V& in) { return layer_norm(in[0], Tensor(), Tensor()); }));
PELAB_OP_CASE(make_case("layer_norm", "weight only [3,4], eps 1e-3", {{3, 4}, {4}},
                        [](const V& in) { return layer_norm(in[0], in[1], Tensor(), 1e-3); }));

// ---------------- rotate_pairs ----------------
PELAB_OP_CASE(make_case("rotate_pairs", "half pairs, pass-through tail: [2,3,4,6], [4,2]",
                        {{2, 3, 4, 6}, {4, 2}, {4, 2}},
                        [](const V& in) { return rotate_pairs(in[0], in[1], in[2]); }));
PELAB_OP_CASE(make_case("rotate_pairs", "interleaved pairs: [3,5,4], [5,2]", {{3, 5, 4}, {5, 2}, {5, 2}},
                        [](const V& in) { return rotate_pairs(in[0], in[1], in[2], true); }));
PELAB_OP_CASE(make_case("rotate_pairs", "interleaved, tail, rank 2: [3,7], [3,3]", {{3, 7}, {3, 3}, {3, 3}},
                        [](const V& in) { return rotate_pairs(in[0], in[1], in[2], true); }));

// ---------------- scaled_dot_attention ----------------
// Blocked-key patterns, 1 = blocked: a causal [4, 6] pattern whose last keys are the queries' own
// (query i sees keys 0..i+2), and per-batch padding [2, 1, 1, 6] with one row blocking every key.
Tensor attn_mask(const Shape& s, const Tensor& like) {
  std::vector<double> m(static_cast<size_t>(shape_numel(s)), 0.0);
  if (s == Shape{1, 1, 4, 6}) {
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = i + 3; j < 6; ++j) m[i * 6 + j] = 1.0;
  } else {  // [2, 1, 1, 6]: batch 0 pads its last two keys, batch 1 blocks all six
    m = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  }
  return Tensor::from_vector(m, s, like.dtype(), like.device());
}
// The probabilities kept for the backward (small scores) or recomputed from the log-sum-exp
// (limit 0); the choice is made in the forward, so the scope need not cover the backward.
Tensor attn(const V& in, const Tensor& bias, const Tensor& mask, bool recompute) {
  const int64_t saved = set_attention_keep_limit(recompute ? 0 : int64_t(32) << 20);
  Tensor y = scaled_dot_attention(in[0], in[1], in[2], bias, mask, 0.45, -1e9);
  set_attention_keep_limit(saved);
  return y;
}
PELAB_OP_CASE(make_case("scaled_dot_attention", "q [2,3,4,5], k = v [2,3,6,5], no bias or mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}},
                        [](const V& in) { return attn(in, Tensor(), Tensor(), false); }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "bias [1,3,4,6] + causal mask [1,1,4,6]",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {1, 3, 4, 6}},
                        [](const V& in) {
                          return attn(in, in[3], attn_mask({1, 1, 4, 6}, in[0]), false);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "recomputed probs: bias [1,3,4,6] + causal mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {1, 3, 4, 6}},
                        [](const V& in) {
                          return attn(in, in[3], attn_mask({1, 1, 4, 6}, in[0]), true);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention",
                        "bias [2,1,1,6], padding mask [2,1,1,6] with a fully blocked row",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {2, 1, 1, 6}},
                        [](const V& in) {
                          return attn(in, in[3], attn_mask({2, 1, 1, 6}, in[0]), false);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "recomputed, full bias [2,3,4,6], padding mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {2, 3, 4, 6}},
                        [](const V& in) {
                          return attn(in, in[3], attn_mask({2, 1, 1, 6}, in[0]), true);
                        }));
// Relative tables (Shaw's K and V tables): index r(i, j) = clip(j - i, -2, 2) + 2 into 5 rows, a
// table shared by the heads [5, 5] or one per head [3, 5, 5].
Tensor rel_index(const Tensor& like) {
  std::vector<int64_t> r(24);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) r[i * 6 + j] = std::clamp<int64_t>(j - i, -2, 2) + 2;
  return Tensor::from_ints(r, {4, 6}, like.device());
}
Tensor attn_rel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keys,
                const Tensor& values, const Tensor& mask, bool recompute) {
  const int64_t saved = set_attention_keep_limit(recompute ? 0 : int64_t(32) << 20);
  Tensor y = scaled_dot_attention(q, k, v, Tensor(), mask, 0.45, -1e9, rel_index(q), keys, values);
  set_attention_keep_limit(saved);
  return y;
}
PELAB_OP_CASE(make_case("scaled_dot_attention", "relative keys and values [5,5], causal mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {5, 5}, {5, 5}},
                        [](const V& in) {
                          return attn_rel(in[0], in[1], in[2], in[3], in[4],
                                          attn_mask({1, 1, 4, 6}, in[0]), false);
                        }));
// Unclipped distances, r(i, j) = j - i + 3 into 9 rows: every row is one unit ramp, which the CPU
// kernel walks as slices (its segment path; the clipped index above, at Lk = 6, goes entry by
// entry).
Tensor rel_ramp_index(const Tensor& like) {
  std::vector<int64_t> r(24);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) r[i * 6 + j] = j - i + 3;
  return Tensor::from_ints(r, {4, 6}, like.device());
}
PELAB_OP_CASE(make_case("scaled_dot_attention", "unclipped relative keys and values [9,5], causal",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {9, 5}, {9, 5}},
                        [](const V& in) {
                          return scaled_dot_attention(in[0], in[1], in[2], Tensor(),
                                                      attn_mask({1, 1, 4, 6}, in[0]), 0.45, -1e9,
                                                      rel_ramp_index(in[0]), in[3], in[4]);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "recomputed, per-head tables [3,5,5], padding mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {3, 5, 5}, {3, 5, 5}},
                        [](const V& in) {
                          return attn_rel(in[0], in[1], in[2], in[3], in[4],
                                          attn_mask({2, 1, 1, 6}, in[0]), true);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "relative keys only [3,5,5], no mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {3, 5, 5}}, [](const V& in) {
                          return attn_rel(in[0], in[1], in[2], in[3], Tensor(), Tensor(), true);
                        }));
PELAB_OP_CASE(make_case("scaled_dot_attention", "relative values only [5,5], causal mask",
                        {{2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 5}, {5, 5}}, [](const V& in) {
                          return attn_rel(in[0], in[1], in[2], Tensor(), in[3],
                                          attn_mask({1, 1, 4, 6}, in[0]), false);
                        }));

// ---------------- bin_sum ----------------
PELAB_OP_CASE(make_case("bin_sum", "[2,3,4,6] into 5 bins by clipped distance", {{2, 3, 4, 6}},
                        [](const V& in) { return bin_sum(in[0], rel_index(in[0]), 5); }));
PELAB_OP_CASE(make_case("bin_sum", "[4,6] into 7 bins, some empty", {{4, 6}},
                        [](const V& in) { return bin_sum(in[0], rel_index(in[0]), 7); }));

// ---------------- dropout ----------------
PELAB_OP_CASE(make_case("dropout", "training p=0.3 [4,5]", {{4, 5}}, [](const V& in) {
  Generator g(7);
  return dropout(in[0], 0.3, true, g);
}));
PELAB_OP_CASE(make_case("dropout", "eval mode is identity", {{3, 4}}, [](const V& in) {
  Generator g(7);
  return mul_scalar(dropout(in[0], 0.5, false, g), 2.0);
}));

// ---------------- indexing ----------------
PELAB_OP_CASE(make_case("index_select", "dim 0 of [5,3], repeated ids", {{5, 3}}, [](const V& in) {
  return index_select(in[0], 0, ints({0, 2, 2, 4, 0}, {5}, in[0]));
}));
PELAB_OP_CASE(make_case("index_select", "dim 1 of [2,4,3], repeated ids", {{2, 4, 3}},
                        [](const V& in) {
                          return index_select(in[0], 1, ints({3, 1, 3}, {3}, in[0]));
                        }));
PELAB_OP_CASE(make_case("gather", "dim 1 of [3,4], repeated", {{3, 4}}, [](const V& in) {
  return gather(in[0], 1, ints({0, 0, 3, 1, 2, 2, 3, 3, 0}, {3, 3}, in[0]));
}));
PELAB_OP_CASE(make_case("gather", "dim 0 of [4,5], smaller index [3,2]", {{4, 5}}, [](const V& in) {
  return gather(in[0], 0, ints({3, 0, 3, 3, 1, 0}, {3, 2}, in[0]));
}));
// gather_lerp: input 1 holds the positions, mapped into (0, n - 1) and kept 0.02 off the integers
// (the kinks of the interpolation, where central differences do not see one derivative). The edges
// and the range errors are checked in OpsNN.GatherLerp*.
// `reach` < n keeps the positions below it (float32 resolves a position near 1000 only to 6e-5).
OpCase lerp_case(std::string label, Shape a, Shape pos, int64_t dim, int64_t reach = 0) {
  int64_t n = a[static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(a.size()) : dim)];
  if (reach > 0) n = std::min(n, reach);
  OpCase c = make_case("gather_lerp", std::move(label), {a, pos},
                       [dim](const V& in) { return gather_lerp(in[0], dim, in[1]); });
  c.domain = [n](size_t input, double x) {
    if (input != 1) return x;
    double u = static_cast<double>(n - 1) * 0.5 * (1.0 + std::tanh(x));
    const double f = u - std::floor(u);
    if (f < 0.02) u += 0.02;
    if (f > 0.98) u -= 0.02;
    return u;
  };
  return c;
}
PELAB_OP_CASE(lerp_case("dim 1 of [3,5] at [3,4]", {3, 5}, {3, 4}, 1));
PELAB_OP_CASE(lerp_case("dim 0 of [4,3,2] at [6,3,2] (inner 6)", {4, 3, 2}, {6, 3, 2}, 0));
// A row of 70 positions: the last-axis backward's path that spreads the shares over interleaved
// copies of the row (rows of 64 and more; shorter ones add into grad_in directly).
PELAB_OP_CASE(lerp_case("dim 1 of [2,9] at [2,70] (long rows)", {2, 9}, {2, 70}, 1));
PELAB_OP_CASE(lerp_case("dim 1 of [2,5,3] at a smaller window [2,2,2]", {2, 5, 3}, {2, 2, 2}, 1));
PELAB_OP_CASE(lerp_case("dim -1 of [2,3,6] at [2,3,6]", {2, 3, 6}, {2, 3, 6}, -1));
PELAB_OP_CASE(lerp_case("dim 1 of [2,1100] at [2,3] < 20 (rows past the CPU's last-axis path)",
                        {2, 1100}, {2, 3}, 1, 20));

PELAB_OP_CASE(make_case("embedding", "[6,4] with ids [2,3], repeated", {{6, 4}}, [](const V& in) {
  return embedding(in[0], ints({1, 5, 1, 0, 5, 5}, {2, 3}, in[0]));
}));
PELAB_OP_CASE(make_case("embedding", "1-D ids", {{3, 2}}, [](const V& in) {
  return embedding(in[0], ints({2, 2, 0, 2}, {4}, in[0]));
}));

// ---------------- value tests against naive host references ----------------

Tensor randn(const Shape& s, uint64_t seed) {
  Generator g(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = g.normal();
  return Tensor::from_vector(v, s, DType::Float64);
}

// Row-major multi-index of flat position i in shape s.
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

// Flat position in shape s of a broadcast batch index (right-aligned; size-1 dims broadcast).
int64_t batch_pos(const std::vector<int64_t>& bidx, const Shape& s) {
  const size_t off = bidx.size() - s.size();
  int64_t p = 0;
  for (size_t d = 0; d < s.size(); ++d) p = p * s[d] + (s[d] == 1 ? 0 : bidx[off + d]);
  return p;
}

// Naive broadcast batched matmul of rank >= 2 operands given as logical values.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, Shape& out_shape) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape ba(a.shape().begin(), a.shape().end() - 2),
      bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "naive");
  out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  const int64_t nbatch = shape_numel(batch);
  std::vector<double> out(static_cast<size_t>(nbatch * M * N), 0.0);
  for (int64_t q = 0; q < nbatch; ++q) {
    const std::vector<int64_t> bidx = unravel(q, batch);
    const int64_t pa = batch_pos(bidx, ba) * M * K, pb = batch_pos(bidx, bb) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += va[pa + i * K + k] * vb[pb + k * N + j];
        out[q * M * N + i * N + j] = s;
      }
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
}

TEST(OpsNN, MatmulMatchesNaiveReference) {
  struct Pair {
    Tensor a, b;
    std::string what;
  };
  std::vector<Pair> pairs = {
      {randn({3, 4}, 1), randn({4, 5}, 2), "2-D"},
      {randn({2, 1, 3, 4}, 3), randn({5, 4, 2}, 4), "broadcast batch"},
      {randn({2, 3, 4}, 5), randn({4, 6}, 6), "shared rhs"},
      {randn({3, 4}, 7), randn({2, 4, 6}, 8), "shared lhs"},
      {transpose(randn({2, 4, 3}, 9), -1, -2), randn({2, 4, 5}, 10), "transposed lhs"},
      {randn({2, 3, 4}, 11), transpose(randn({5, 4}, 12), 0, 1), "transposed rhs"},
      {permute(randn({3, 2, 4}, 13), {1, 0, 2}), randn({2, 4, 5}, 14), "permuted batch"},
      {expand(randn({1, 3, 4}, 15), {2, 3, 4}), randn({2, 4, 2}, 16), "expanded lhs"},
      {expand(randn({1, 3, 4}, 23), {2, 3, 4}), randn({4, 2}, 24), "expanded lhs, shared rhs"},
      {permute(randn({2, 3, 2, 4}, 25), {0, 2, 1, 3}), randn({4, 5}, 26), "head-split lhs, shared rhs"},
      {slice(randn({3, 8}, 17), 1, 0, 8, 2), randn({4, 3}, 18), "strided columns"},
  };
  for (const Pair& p : pairs) {
    Shape want_shape;
    const std::vector<double> want = naive_matmul(p.a, p.b, want_shape);
    Tensor got = matmul(p.a, p.b);
    EXPECT_EQ(got.shape(), want_shape) << p.what;
    expect_close(got.to_vector(), want, 1e-12, p.what);
    // float32 path through BLAS sgemm
    Tensor got32 = matmul(p.a.to(DType::Float32), p.b.to(DType::Float32));
    expect_close(got32.to_vector(), want, 1e-4, p.what + " (float32)");
  }
  // 1-D operands: [3,4] @ [4] -> [3]; [4] @ [4,5] -> [5]; [4] @ [4] -> []
  Tensor a = randn({3, 4}, 20), v = randn({4}, 21), b = randn({4, 5}, 22);
  Shape s;
  expect_close(matmul(a, v).to_vector(), naive_matmul(a, reshape(v, {4, 1}), s), 1e-12, "mat-vec");
  EXPECT_EQ(matmul(a, v).shape(), (Shape{3}));
  expect_close(matmul(v, b).to_vector(), naive_matmul(reshape(v, {1, 4}), b, s), 1e-12, "vec-mat");
  EXPECT_EQ(matmul(v, b).shape(), (Shape{5}));
  EXPECT_EQ(matmul(v, v).shape(), Shape{});
  const std::vector<double> vv = v.to_vector();
  double dot = 0;
  for (double x : vv) dot += x * x;
  EXPECT_NEAR(matmul(v, v).item(), dot, 1e-12);
  // empty inner dimension gives zeros; empty outer dimensions give empty results
  Tensor z = matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3}));
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  for (double x : z.to_vector()) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(matmul(Tensor::ones({2, 0, 3}), Tensor::ones({3, 4})).shape(), (Shape{2, 0, 4}));
}

// A head-split lhs [B, H, L, K] (a permuted view whose rows do not merge) times a shared rhs
// [K, N] is one product over all B·H·L rows: the rhs gradient equals, bit for bit, the single
// product lhs_rowsᵀ @ g_rows. Summing B·H per-head partial products (the batched path) orders the
// additions differently and fails this.
TEST(OpsNN, MatmulHeadSplitLhsSharedRhsIsOneProduct) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 4, L = 8, H = 3, K = 5, N = 7;
    const Tensor x = randn({B, L, H, K}, 30).to(dt);
    const Tensor a = permute(x, {0, 2, 1, 3}).detach().set_requires_grad(true);  // [B, H, L, K]
    const Tensor b = randn({K, N}, 31).to(dt).set_requires_grad(true);
    const Tensor g = randn({B, H, L, N}, 32).to(dt);
    const Tensor out = matmul(a, b, 0.5);
    out.backward(g);
    const Tensor rows = reshape(a.detach().contiguous(), {B * H * L, K});
    EXPECT_EQ(out.to_vector(), matmul(rows, b.detach(), 0.5).to_vector());
    const Tensor want_gb = matmul(transpose(rows, 0, 1), reshape(g, {B * H * L, N}), 0.5);
    EXPECT_EQ(b.grad().to_vector(), want_gb.to_vector());
    expect_close(a.grad().to_vector(), matmul(g, transpose(b.detach(), 0, 1), 0.5).to_vector(),
                 0.0, "lhs gradient");
  }
}

TEST(OpsNN, LinearMatchesMatmulPlusBias) {
  Tensor x = randn({2, 3, 4}, 30), w = randn({5, 4}, 31), bias = randn({5}, 32);
  Shape s;
  const std::vector<double> xw = naive_matmul(reshape(x, {6, 4}), transpose(w, 0, 1), s);
  const std::vector<double> bv = bias.to_vector();
  std::vector<double> want = xw;
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 5];
  Tensor y = linear(x, w, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  expect_close(y.to_vector(), want, 1e-12, "linear with bias");
  expect_close(linear(x, w, Tensor()).to_vector(), xw, 1e-12, "linear without bias");
  // db = column sums of the upstream gradient; dW = g^T x over all rows
  Tensor wr = randn({5, 4}, 31).set_requires_grad(true);
  Tensor br = randn({5}, 32).set_requires_grad(true);
  sum(linear(x, wr, br)).backward();
  for (double gb : br.grad().to_vector()) EXPECT_NEAR(gb, 6.0, 1e-12);
  const std::vector<double> xv = x.to_vector(), gw = wr.grad().to_vector();
  for (int64_t o = 0; o < 5; ++o)
    for (int64_t i = 0; i < 4; ++i) {
      double col = 0;
      for (int64_t r = 0; r < 6; ++r) col += xv[r * 4 + i];
      EXPECT_NEAR(gw[o * 4 + i], col, 1e-12);
    }
}

TEST(OpsNN, SoftmaxAndLogSoftmaxMatchReference) {
  Tensor x = randn({3, 4, 5}, 40);
  const std::vector<double> xv = x.to_vector();
  for (int64_t axis : {0, 1, 2}) {
    const Shape sh = x.shape();
    std::vector<double> want(xv.size()), want_log(xv.size());
    const int64_t n = sh[axis];
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < 3; ++d) inner *= sh[d];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const std::vector<int64_t> idx = unravel(i, sh);
      const int64_t base = i - idx[axis] * inner;
      double mx = -1e300, z = 0;
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, xv[base + k * inner]);
      for (int64_t k = 0; k < n; ++k) z += std::exp(xv[base + k * inner] - mx);
      want[i] = std::exp(xv[i] - mx) / z;
      want_log[i] = xv[i] - mx - std::log(z);
    }
    const std::string what = "axis " + std::to_string(axis);
    expect_close(softmax(x, axis).to_vector(), want, 1e-12, "softmax " + what);
    expect_close(log_softmax(x, axis).to_vector(), want_log, 1e-12, "log_softmax " + what);
    expect_close(softmax(x.to(DType::Float32), axis).to_vector(), want, 1e-5,
                 "softmax f32 " + what);
  }
}

TEST(OpsNN, CrossEntropyMatchesReference) {
  const int64_t R = 5, C = 4;
  Tensor logits = randn({R, C}, 50);
  const std::vector<int64_t> t = {2, -100, 0, 3, 3};
  Tensor targets = Tensor::from_ints(t, {R});
  const std::vector<double> lv = logits.to_vector();
  for (double s : {0.0, 0.1}) {
    double total = 0;
    int64_t count = 0;
    std::vector<double> grad(lv.size(), 0.0);
    for (int64_t r = 0; r < R; ++r) {
      if (t[r] == -100) continue;
      ++count;
      double mx = -1e300, z = 0;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, lv[r * C + c]);
      for (int64_t c = 0; c < C; ++c) z += std::exp(lv[r * C + c] - mx);
      const double lse = mx + std::log(z);
      for (int64_t c = 0; c < C; ++c) {
        const double q = (c == t[r] ? 1.0 - s : 0.0) + s / C;
        total -= q * (lv[r * C + c] - lse);
        grad[r * C + c] = std::exp(lv[r * C + c] - lse) - q;
      }
    }
    for (double& g : grad) g /= static_cast<double>(count);
    Tensor lg = logits.detach().set_requires_grad(true);
    Tensor loss = cross_entropy(lg, targets, -100, s);
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_NEAR(loss.item(), total / count, 1e-12) << "smoothing " << s;
    loss.backward();
    expect_close(lg.grad().to_vector(), grad, 1e-12, "cross_entropy grad");
  }
  // every row ignored: loss 0 and zero gradient
  Tensor lg = logits.detach().set_requires_grad(true);
  Tensor loss = cross_entropy(lg, Tensor::from_ints({-1, -1, -1, -1, -1}, {R}), -1);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (double g : lg.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

TEST(OpsNN, LayerNormMatchesReference) {
  const int64_t R = 3, n = 6;
  Tensor x = randn({R, n}, 60), w = randn({n}, 61), b = randn({n}, 62);
  const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  std::vector<double> want(xv.size()), want_plain(xv.size());
  for (int64_t r = 0; r < R; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += xv[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i) var += (xv[r * n + i] - mu) * (xv[r * n + i] - mu) / n;
    for (int64_t i = 0; i < n; ++i) {
      const double xh = (xv[r * n + i] - mu) / std::sqrt(var + 1e-5);
      want_plain[r * n + i] = xh;
      want[r * n + i] = xh * wv[i] + bv[i];
    }
  }
  expect_close(layer_norm(x, w, b).to_vector(), want, 1e-10, "affine");
  expect_close(layer_norm(x, Tensor(), Tensor()).to_vector(), want_plain, 1e-10, "no affine");
  // d(sum y)/d bias = number of rows; d(sum y)/d weight = column sums of x-hat
  Tensor wr = w.detach().set_requires_grad(true), br = b.detach().set_requires_grad(true);
  sum(layer_norm(x, wr, br)).backward();
  for (double g : br.grad().to_vector()) EXPECT_NEAR(g, static_cast<double>(R), 1e-12);
  const std::vector<double> gw = wr.grad().to_vector();
  for (int64_t i = 0; i < n; ++i) {
    double col = 0;
    for (int64_t r = 0; r < R; ++r) col += want_plain[r * n + i];
    EXPECT_NEAR(gw[i], col, 1e-10);
  }
}

// scaled_dot_attention against the composite it fuses (matmul, add, masked_fill, softmax, matmul) in
// float64: 70 queries and 75 keys span two query blocks and a row tail, and head dims 32 and 33 give
// full and partial vector tiles; the bias broadcasts over the batch and needs its own gradient, as
// do a shared relative key table and a per-head relative value table; the probabilities both kept
// and recomputed. Masks: causal with a gap and a fully blocked row (every
// block sees all keys), and causal plus key padding, whose first block skips the keys it cannot see.
// The fused op runs on contiguous q, k, v and again on token-major ones (permuted views of
// [B, L, H, dh] leaves, as multi-head attention passes them: read in place, rows H·dh apart, with
// the output and the gradients written in that layout).
TEST(OpsNN, ScaledDotAttentionMatchesComposite) {
  const int64_t B = 2, H = 3, Lq = 70, Lk = 75;
  std::vector<double> gappy(static_cast<size_t>(Lq * Lk)), padded(static_cast<size_t>(B * Lq * Lk));
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) {
      gappy[i * Lk + j] = j > i + 5 || i == 7 || (j > 2 && j < 6 && i > 10) ? 1.0 : 0.0;
      for (int64_t b = 0; b < B; ++b)
        padded[(b * Lq + i) * Lk + j] = j > i + 5 || j >= Lk - 3 * b ? 1.0 : 0.0;
    }
  const Tensor masks[] = {Tensor::from_vector(gappy, {1, 1, Lq, Lk}, DType::Float64),
                          Tensor::from_vector(padded, {B, 1, Lq, Lk}, DType::Float64)};
  const int64_t R = 9;  // relative tables indexed by clip(j - i, -4, 4) + 4
  std::vector<int64_t> ri(static_cast<size_t>(Lq * Lk));
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) ri[i * Lk + j] = std::clamp<int64_t>(j - i, -4, 4) + 4;
  const Tensor rel = Tensor::from_ints(ri, {Lq, Lk});
  for (const int64_t dh : {32, 33})
    for (const bool recompute : {false, true})
      for (const Tensor& mask : masks) {
        const std::string what = "dh " + std::to_string(dh) +
                                 (recompute ? ", recomputed" : ", kept") +
                                 (mask.size(0) == 1 ? ", gappy causal" : ", causal + padding");
        std::vector<Tensor> ins = {randn({B, H, Lq, dh}, 80), randn({B, H, Lk, dh}, 81),
                                   randn({B, H, Lk, dh}, 82), randn({1, H, Lq, Lk}, 83),
                                   randn({R, dh}, 85),        randn({H, R, dh}, 86)};
        const Tensor w = randn({B, H, Lq, dh}, 84);  // loss = sum(out * w)
        std::vector<std::vector<double>> got, got_tm, want;
        for (const int run : {0, 1, 2}) {  // fused, fused on token-major views, composite
          const bool fused = run < 2, token_major = run == 1;
          std::vector<Tensor> x, leaves;
          for (size_t i = 0; i < ins.size(); ++i) {
            if (token_major && i < 3) {  // a [B, L, H, dh] leaf seen as [B, H, L, dh]
              leaves.push_back(
                  permute(ins[i], {0, 2, 1, 3}).contiguous().detach().set_requires_grad(true));
              x.push_back(permute(leaves.back(), {0, 2, 1, 3}));
              EXPECT_FALSE(x.back().is_contiguous());
            } else {
              leaves.push_back(ins[i].detach().set_requires_grad(true));
              x.push_back(leaves.back());
            }
          }
          Tensor out;
          if (fused) {
            const int64_t saved = set_attention_keep_limit(recompute ? 0 : int64_t(1) << 30);
            out = scaled_dot_attention(x[0], x[1], x[2], x[3], mask, 0.3, -1e9, rel, x[4], x[5]);
            set_attention_keep_limit(saved);
          } else {
            Tensor s = add(add(matmul(x[0], transpose(x[1], 2, 3), 0.3),
                               relative_keys(x[0], rel, x[4], 0.3)),
                           x[3]);
            const Tensor p = softmax(masked_fill(s, mask, -1e9), -1);
            out = add(matmul(p, x[2]), relative_values(p, rel, x[5]));
          }
          sum(mul(out, w)).backward();
          auto& dst = run == 0 ? got : run == 1 ? got_tm : want;
          dst.push_back(out.to_vector());
          for (size_t i = 0; i < leaves.size(); ++i)
            dst.push_back(token_major && i < 3
                              ? permute(leaves[i].grad(), {0, 2, 1, 3}).to_vector()
                              : leaves[i].grad().to_vector());
        }
        const char* names[] = {"out",       "grad q",    "grad k",     "grad v",
                               "grad bias", "grad keys", "grad values"};
        for (size_t i = 0; i < got.size(); ++i) {
          expect_close(got[i], want[i], 1e-11, what + " " + names[i]);
          expect_close(got_tm[i], want[i], 1e-11, what + ", token-major " + names[i]);
        }
      }
  // errors name the op and the shapes
  const Tensor q = randn({2, 3, 4, 5}, 85), k = randn({2, 3, 6, 5}, 86);
  try {
    scaled_dot_attention(q, k, randn({2, 3, 6, 4}, 87), Tensor(), Tensor(), 1.0, -1e9);
    ADD_FAILURE() << "a v of another head dim must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scaled_dot_attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3, 6, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scaled_dot_attention(q, k, k, randn({3, 4, 5}, 88), Tensor(), 1.0, -1e9), Error);
  EXPECT_THROW(scaled_dot_attention(q, k, k, Tensor(), randn({2, 1, 4, 7}, 89), 1.0, -1e9), Error);
  EXPECT_THROW(set_attention_keep_limit(-1), Error);
  // a relative table without its index, of the wrong head dim, tables of two sizes, an index out of
  // range
  const Tensor ix = Tensor::from_ints(std::vector<int64_t>(24, 1), {4, 6});
  EXPECT_THROW(scaled_dot_attention(q, k, k, Tensor(), Tensor(), 1.0, -1e9, Tensor(), Tensor(),
                                    randn({3, 5}, 90)),
               Error);
  EXPECT_THROW(scaled_dot_attention(q, k, k, Tensor(), Tensor(), 1.0, -1e9, ix, Tensor(),
                                    randn({3, 4}, 91)),
               Error);
  EXPECT_THROW(scaled_dot_attention(q, k, k, Tensor(), Tensor(), 1.0, -1e9, ix, randn({3, 5}, 92),
                                    randn({4, 5}, 93)),
               Error);
  try {
    scaled_dot_attention(q, k, k, Tensor(), Tensor(), 1.0, -1e9,
                         Tensor::from_ints(std::vector<int64_t>(24, 3), {4, 6}), randn({3, 5}, 94));
    ADD_FAILURE() << "an index past the table must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range [0, 3)"), std::string::npos) << e.what();
  }
}

// rotate_pairs against the definition (both pairings, a pass-through tail, leading dims sharing one
// table); with real angles it preserves each row's norm and its backward is the inverse rotation.
TEST(OpsNN, RotatePairsMatchesDefinition) {
  const int64_t B = 2, L = 3, D = 7, P = 3;
  Tensor x = randn({B, L, D}, 70);
  std::vector<double> ang(L * P), cv(L * P), sv(L * P);
  for (int64_t i = 0; i < L * P; ++i) {
    ang[i] = 0.37 * static_cast<double>(i) - 1.1;
    cv[i] = std::cos(ang[i]);
    sv[i] = std::sin(ang[i]);
  }
  Tensor c = Tensor::from_vector(cv, {L, P}, DType::Float64);
  Tensor s = Tensor::from_vector(sv, {L, P}, DType::Float64);
  const std::vector<double> xv = x.to_vector();
  for (const bool inter : {false, true}) {
    std::vector<double> want = xv;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t row = (b * L + l) * D, ia = inter ? 2 * p : p, ib = inter ? 2 * p + 1 : p + P;
          const double xa = xv[row + ia], xb = xv[row + ib], cc = cv[l * P + p], ss = sv[l * P + p];
          want[row + ia] = xa * cc - xb * ss;
          want[row + ib] = xb * cc + xa * ss;
        }
    Tensor xr = x.detach().set_requires_grad(true);
    Tensor y = rotate_pairs(xr, c, s, inter);
    expect_close(y.to_vector(), want, 1e-12, inter ? "interleaved" : "half");
    const std::vector<double> yv = y.to_vector();
    for (int64_t r = 0; r < B * L; ++r) {
      double nx = 0, ny = 0;
      for (int64_t d = 0; d < D; ++d) {
        nx += xv[r * D + d] * xv[r * D + d];
        ny += yv[r * D + d] * yv[r * D + d];
      }
      EXPECT_NEAR(nx, ny, 1e-12) << "row " << r;
    }
    // d(sum(y * y0))/dx with y0 = y detached is R^T y0 = x for a rotation R
    sum(mul(y, y.detach())).backward();
    expect_close(xr.grad().to_vector(), xv, 1e-12, "backward = inverse rotation");
  }
  EXPECT_THROW(rotate_pairs(x, slice(c, 1, 0, 2), s), Error);  // cos and sin shapes differ
  EXPECT_THROW(rotate_pairs(x, randn({L, 4}, 71), randn({L, 4}, 72)), Error);  // 2P > D
  EXPECT_THROW(rotate_pairs(x, randn({L + 1, P}, 73), randn({L + 1, P}, 74)), Error);  // rows
  // the backend's own checks (shared by CPU and CUDA): a table of the wrong size, a float32 output
  Tensor out = Tensor::empty({B, L, D}, DType::Float64), out32 = Tensor::empty({B, L, D});
  Backend& be = backend_for(Device::cpu());
  EXPECT_THROW(be.rotate_pairs(view_of(out), view_of(x), view_of(randn({L, P + 1}, 75)), view_of(s),
                               B, L, D, P, false, false),
               Error);
  EXPECT_THROW(be.rotate_pairs(view_of(out32), view_of(x), view_of(c), view_of(s), B, L, D, P, false,
                               false),
               Error);
}

TEST(OpsNN, DropoutMaskScalingAndGenerator) {
  const int64_t n = 4000;
  const double p = 0.25;
  Tensor x = Tensor::ones({n}, DType::Float64).set_requires_grad(true);
  Generator g(123);
  g.take(10);  // a non-zero starting offset
  Tensor y = dropout(x, p, true, g);
  EXPECT_EQ(g.offset(), 10u + static_cast<uint64_t>(n));
  const std::vector<double> yv = y.to_vector();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng_uniform(123, 10 + static_cast<uint64_t>(i)) >= p;
    EXPECT_NEAR(yv[i], keep ? 1.0 / (1.0 - p) : 0.0, 1e-12) << i;
    kept += keep;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.03);
  sum(y).backward();
  expect_close(x.grad().to_vector(), yv, 1e-12, "dropout grad is the mask");
  // eval mode and p == 0 are the identity and draw nothing
  Generator g2(5);
  Tensor z = randn({3, 4}, 70);
  expect_close(dropout(z, 0.5, false, g2).to_vector(), z.to_vector(), 0, "eval");
  expect_close(dropout(z, 0.0, true, g2).to_vector(), z.to_vector(), 0, "p=0");
  EXPECT_EQ(g2.offset(), 0u);
  EXPECT_THROW(dropout(z, 1.0, true, g2), Error);
  EXPECT_THROW(dropout(z, -0.1, true, g2), Error);
}

TEST(OpsNN, IndexOpsMatchReference) {
  Tensor a = randn({4, 3, 2}, 80);
  const std::vector<double> av = a.to_vector();
  // index_select along dim 1
  Tensor sel = index_select(a, 1, Tensor::from_ints({2, 0, 2}, {3}));
  const std::vector<double> sv = sel.to_vector();
  const int64_t ids[3] = {2, 0, 2};
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 2; ++i)
        EXPECT_EQ(sv[(o * 3 + j) * 2 + i], av[(o * 3 + ids[j]) * 2 + i]);
  // gather along dim 0 with a smaller index
  Tensor m = randn({4, 5}, 81);
  const std::vector<double> mv = m.to_vector();
  const std::vector<int64_t> gi = {3, 0, 1, 1, 2, 3};
  Tensor gat = gather(m, 0, Tensor::from_ints(gi, {2, 3}));
  EXPECT_EQ(gat.shape(), (Shape{2, 3}));
  const std::vector<double> gv = gat.to_vector();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(gv[r * 3 + c], mv[gi[r * 3 + c] * 5 + c]);
  // embedding: values, and scatter-add of repeated ids in the gradient
  Tensor w = randn({5, 3}, 82).set_requires_grad(true);
  const std::vector<int64_t> tok = {4, 1, 4, 4, 0, 1};
  Tensor e = embedding(w, Tensor::from_ints(tok, {2, 3}));
  EXPECT_EQ(e.shape(), (Shape{2, 3, 3}));
  const std::vector<double> wv = w.to_vector(), ev = e.to_vector();
  for (int64_t k = 0; k < 6; ++k)
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(ev[k * 3 + d], wv[tok[k] * 3 + d]);
  sum(e).backward();
  const std::vector<double> gw = w.grad().to_vector();
  for (int64_t v = 0; v < 5; ++v) {
    double count = 0;
    for (int64_t t : tok) count += (t == v);
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(gw[v * 3 + d], count);
  }
}

// gather_lerp against a[k] + w (a[k+1] - a[k]) on the host, at fractional positions, at integers
// (where ∂/∂u is the right derivative a[k+1] - a[k]) and at the upper edge n - 1, where the
// result is a[n - 1], ∂/∂u is 0 and nothing beyond the row is read: the next row of the buffer
// starts with NaN, which a read of a[n] would carry into the result (0 · NaN = NaN).
TEST(OpsNN, GatherLerpMatchesReferenceAtEdgesAndIntegers) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> av = randn({2, 5}, 90).to_vector();
    av[5] = NAN;  // a[1, 0]: directly after a[0, 4] in memory
    const std::vector<double> uv = {4.0, 0.0, 2.0, 1.25, 3.5, 4.0, 1.0, 2.75};  // [2, 4]
    Tensor a = Tensor::from_vector(av, {2, 5}, dt).set_requires_grad(true);
    Tensor u = Tensor::from_vector(uv, {2, 4}, dt).set_requires_grad(true);
    Tensor out = gather_lerp(a, 1, u);
    ASSERT_EQ(out.shape(), (Shape{2, 4}));
    const std::vector<double> ov = out.to_vector();
    const std::vector<double> gv = {1.0, -2.0, 0.5, 3.0, 1.5, -1.0, 2.0, 0.25};
    out.backward(Tensor::from_vector(gv, {2, 4}, dt));
    const std::vector<double> ga = a.grad().to_vector(), gu = u.grad().to_vector();
    std::vector<double> want_ga(10, 0.0);
    const auto as_dt = [dt](double x) {
      return dt == DType::Float32 ? static_cast<double>(static_cast<float>(x)) : x;
    };
    const double tol = dt == DType::Float32 ? 1e-6 : 1e-15;
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t j = 0; j < 4; ++j) {
        const double x = uv[o * 4 + j], g = gv[o * 4 + j];
        const int64_t k = static_cast<int64_t>(std::floor(x)), k1 = std::min<int64_t>(k + 1, 4);
        const double w = x - static_cast<double>(k);
        const double a0 = as_dt(av[o * 5 + k]), a1 = as_dt(av[o * 5 + k1]);
        const double want = k == 4 ? a0 : a0 + w * (a1 - a0);
        EXPECT_NEAR(ov[o * 4 + j], want, tol) << "u = " << x;
        EXPECT_NEAR(gu[o * 4 + j], g * (a1 - a0), tol) << "u = " << x;
        want_ga[o * 5 + k] += g * (1.0 - w);
        want_ga[o * 5 + k1] += g * w;
      }
    EXPECT_EQ(ov[0], as_dt(av[4]));  // the edge: exactly a[4]
    EXPECT_EQ(gu[0], 0.0);
    expect_close(ga, want_ga, tol, "gather_lerp input gradient");
    // Only one input wanting a gradient gives that input the same one.
    for (bool input : {true, false}) {
      Tensor a1 = Tensor::from_vector(av, {2, 5}, dt).set_requires_grad(input);
      Tensor u1 = Tensor::from_vector(uv, {2, 4}, dt).set_requires_grad(!input);
      gather_lerp(a1, 1, u1).backward(Tensor::from_vector(gv, {2, 4}, dt));
      expect_close((input ? a1 : u1).grad().to_vector(), input ? ga : gu, 0.0, "one input");
    }
  }
}

// The last-axis backward adds a short row's shares straight into grad_in and spreads a row of 64
// or more positions over interleaved copies: both against the host sums, float64, at rows of 8
// (CoPE's tiny config) and 80 positions, with positions crowding a few neighbouring rows as
// CoPE's counts do.
TEST(OpsNN, GatherLerpBackwardShortAndLongRowsMatchReference) {
  for (int64_t n_idx : {8, 80}) {
    SCOPED_TRACE(n_idx);
    const int64_t rows = 3, n_in = 9;
    const std::vector<double> av = randn({rows, n_in}, 91).to_vector();
    const std::vector<double> gv = randn({rows, n_idx}, 92).to_vector();
    std::vector<double> uv(static_cast<size_t>(rows * n_idx));
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t j = 0; j < n_idx; ++j)  // decreasing counts, a step of 0.3 at most
        uv[o * n_idx + j] = std::max(0.0, 8.0 - 0.3 * static_cast<double>(j) * (o + 1) / rows);
    Tensor a = Tensor::from_vector(av, {rows, n_in}, DType::Float64).set_requires_grad(true);
    Tensor u = Tensor::from_vector(uv, {rows, n_idx}, DType::Float64).set_requires_grad(true);
    gather_lerp(a, 1, u).backward(Tensor::from_vector(gv, {rows, n_idx}, DType::Float64));
    std::vector<double> want_ga(static_cast<size_t>(rows * n_in), 0.0), want_gu(uv.size());
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t j = 0; j < n_idx; ++j) {
        const double x = uv[o * n_idx + j], g = gv[o * n_idx + j];
        const int64_t k = static_cast<int64_t>(std::floor(x)), k1 = std::min(k + 1, n_in - 1);
        const double w = x - static_cast<double>(k);
        want_ga[o * n_in + k] += g * (1.0 - w);
        want_ga[o * n_in + k1] += g * w;
        want_gu[o * n_idx + j] = g * (av[o * n_in + k1] - av[o * n_in + k]);
      }
    expect_close(a.grad().to_vector(), want_ga, 1e-13, "gather_lerp input gradient");
    expect_close(u.grad().to_vector(), want_gu, 1e-15, "gather_lerp position gradient");
  }
}

TEST(OpsNN, GatherLerpPositionOutOfRangeIsOneClearError) {
  const Tensor a = Tensor::zeros({2, 5}, DType::Float64);
  for (double bad : {-0.25, 4.5, std::nextafter(4.0, 5.0), static_cast<double>(NAN)}) {
    SCOPED_TRACE(bad);
    const Tensor u = Tensor::from_vector({1.0, 2.0, bad, 0.0}, {2, 2}, DType::Float64);
    const std::string msg = error_of([&] { gather_lerp(a, 1, u); });
    EXPECT_NE(msg.find("gather_lerp: position "), std::string::npos) << msg;
    EXPECT_NE(msg.find(" at flat index 2 is out of range [0, 4]"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] {
              gather_lerp(a, 1, Tensor::from_vector({4.0000001}, {1, 1}, DType::Float64));
            }).find("position 4.0000001000000003"),
            std::string::npos);
  // An empty axis has no valid position (and no row the kernel may read).
  EXPECT_NE(error_of([&] {
              gather_lerp(Tensor::zeros({2, 0}), 1, Tensor::zeros({2, 1}));
            }).find("gather_lerp: position 0 at flat index 0 is out of range [0, -1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gather_lerp(a, 1, Tensor::zeros({2, 2}, DType::Float32)); })
                .find("must have the dtype and device of the input"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gather_lerp(a, 1, Tensor::zeros({2}, DType::Float64)); })
                .find("must have the same rank"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gather_lerp(a, 1, Tensor::zeros({3, 2}, DType::Float64)); })
                .find("are larger than input [2, 5] at dim 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gather_lerp(a, 1, Tensor::from_ints({1, 2}, {1, 2})); })
                .find("positions must be float32/float64"),
            std::string::npos);
}

// ---------------- errors ----------------

using pelab::testing::error_of;

TEST(OpsNN, MatmulShapeMismatchNamesBothShapes) {
  const std::string msg = error_of([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 5]"), std::string::npos) << msg;
  EXPECT_THROW(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})), Error);  // batch 2 vs 3
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 4}, DType::Float64)), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor()), Error);
}

TEST(OpsNN, EmbeddingIdOutOfRangeThrows) {
  Tensor w = Tensor::zeros({10, 4});
  const std::string msg = error_of([&] { embedding(w, Tensor::from_ints({1, 12}, {2})); });
  EXPECT_NE(msg.find("embedding"), std::string::npos) << msg;
  EXPECT_NE(msg.find("12"), std::string::npos) << msg;
  EXPECT_THROW(embedding(w, Tensor::from_ints({-1}, {1})), Error);
  EXPECT_THROW(index_select(w, 0, Tensor::from_ints({10}, {1})), Error);
  EXPECT_THROW(gather(w, 1, Tensor::from_ints({4}, {1, 1})), Error);
}

TEST(OpsNN, CrossEntropyTargetShapeMismatchThrows) {
  Tensor logits = Tensor::zeros({4, 3});
  const std::string msg = error_of([&] {
    cross_entropy(logits, Tensor::from_ints({0, 1, 2}, {3}));
  });
  EXPECT_NE(msg.find("cross_entropy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  EXPECT_THROW(cross_entropy(logits, Tensor::from_ints({0, 1, 3, 0}, {4})), Error);  // class 3
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({4})), Error);  // float targets
}

}  // namespace
}  // namespace pelab::testing
