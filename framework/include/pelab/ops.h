// pelab — differentiable ops. Every op here works on any backend and dtype (Float32/Float64),
// checks its arguments (throwing pelab::Error naming the op and the shapes), and records an autograd
// node when an input requires grad. Each op is listed in the op registry (registry.h) so that the
// op test driver can insist on a gradient-check case for it.
#pragma once
#include <vector>

#include "pelab/random.h"
#include "pelab/tensor.h"

namespace pelab {

// ---- elementwise, numpy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // gradient to the larger (ties: a)

Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor rdiv_scalar(double s, const Tensor& a);  // s / a
Tensor pow(const Tensor& a, double exponent);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a, bool tanh_approximation = false);  // exact: x * Phi(x)
// min(max(a, lo), hi), lo <= hi (either may be infinite); the gradient passes where
// lo <= a <= hi (the bounds included), NaN stays NaN and gets no gradient.
Tensor clamp(const Tensor& a, double lo, double hi);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);

// Non-differentiable comparisons: 1/0 in the dtype of `a` (broadcasting).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);

// ---- reductions ----
Tensor sum(const Tensor& a);  // all elements -> shape []
Tensor sum(const Tensor& a, const std::vector<int64_t>& axes, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const std::vector<int64_t>& axes, bool keepdim = false);
Tensor max(const Tensor& a, int64_t axis, bool keepdim = false);     // values; grad to the argmax
Tensor argmax(const Tensor& a, int64_t axis, bool keepdim = false);  // Int64, not differentiable
// Running sum along `axis`: out[.., j, ..] = Σ_{t<=j} a[.., t, ..], or Σ_{t>=j} when `reverse`
// (a suffix sum). Float32 accumulates in double. Backward: the running sum the other way.
Tensor cumsum(const Tensor& a, int64_t axis, bool reverse = false);
// Sum `a` down to `shape` (inverse of broadcasting), as needed by broadcast backward.
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- views and shape ops (views share storage where strides allow) ----
Tensor reshape(const Tensor& a, const Shape& shape);  // one -1 allowed; copies only if needed
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& a, const Shape& shape);  // broadcast view, stride 0
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);

// ---- indexing ----
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);  // index: Int64 1-D
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);        // torch.gather semantics
// gather at fractional positions, interpolating linearly between neighbours along `dim` (a 1-D
// linear grid sample): pos (floating, a's dtype and rank, no larger than a off `dim`) ->
// pos.shape, with u = pos[..], k = ⌊u⌋, out[..] = a[.., k, ..] + (u − k)(a[.., k+1, ..] −
// a[.., k, ..]). At the upper edge u = size − 1 the result is the last row (nothing beyond it is
// read). Every position must lie in [0, a.size(dim) − 1]; one outside, or NaN, throws naming it.
// Differentiable in a and in pos (∂out/∂u = a[k+1] − a[k]: the right derivative at integers,
// 0 at the upper edge).
Tensor gather_lerp(const Tensor& a, int64_t dim, const Tensor& pos);
// Per-row bin sums: x [..., Lq, Lk], index Int64 [Lq, Lk] with values in [0, bins) ->
// [..., Lq, bins], out[..., i, b] = Σ_j x[..., i, j] · [index[i, j] = b]. Backward: a gather.
Tensor bin_sum(const Tensor& x, const Tensor& index, int64_t bins);
Tensor embedding(const Tensor& weight, const Tensor& ids);               // [V, D], ids any shape -> ids.shape + [D]
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);   // mask != 0 -> value; broadcast
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);      // cond != 0 ? a : b; broadcast

// ---- linear algebra ----
// a [..., M, K] @ b [..., K, N] with broadcast batch dims; 1-D b is treated as [K, 1] and squeezed.
// Transposed views are passed to BLAS as transposes (no copy); batches as one strided-batched GEMM.
// alpha scales the product inside the GEMM (alpha * a @ b, no extra pass; the backward too).
Tensor matmul(const Tensor& a, const Tensor& b, double alpha = 1.0);
// x [..., in] @ weight[out, in]^T + bias[out] (bias may be undefined)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- fused nn ops ----
Tensor softmax(const Tensor& a, int64_t axis);
Tensor log_softmax(const Tensor& a, int64_t axis);
// logits [..., C], targets Int64 [...]; mean over non-ignored targets (0 if all ignored).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// over the last axis; weight/bias [n] or undefined
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Rotates coordinate pairs of the last axis by per-row angles (RoPE's rotation, one pass):
// x [..., L, D], cos/sin [L, P] with 2P <= D; pair p is dims (p, p + P), or (2p, 2p + 1) when
// interleaved: y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin; dims >= 2P pass through.
Tensor rotate_pairs(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved = false);
// Scaled-dot-product attention over q [B, H, Lq, dh], k and v [B, H, Lk, dh]:
//   x_ij = blocked_ij != 0 ? masked_value : scale · q_i·(k_j + rel_keys[(h,) r_ij]) + bias_ij
//   out_i = Σ_j p_ij (v_j + rel_values[(h,) r_ij]),   p = softmax(x) along j,   r = rel_index
// bias (differentiable) and blocked (not) are undefined or broadcastable to [B, H, Lq, Lk]; the
// optional relative tables (Shaw's K and V tables) are [R, dh] or [H, R, dh], with an Int64
// [Lq, Lk] index in [0, R). Where the backend has the fused kernel (CPU) the scores, their masked
// copy and the softmax gradient never become tensors and only the probabilities may be kept (see
// set_attention_keep_limit); elsewhere it is the composite matmul, relative_keys, add, masked_fill,
// softmax, matmul, relative_values.
Tensor scaled_dot_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                            const Tensor& blocked, double scale, double masked_value,
                            const Tensor& rel_index = Tensor(), const Tensor& rel_keys = Tensor(),
                            const Tensor& rel_values = Tensor());
// scale · q_i·table[(h,) index[i, j]]: q [B, H, Lq, dh], index Int64 [Lq, Lk] in [0, R), table
// [R, dh] or [H, R, dh] -> [B, H, Lq, Lk] (a [dh, R] product, then a gather; nothing L×L×dh).
Tensor relative_keys(const Tensor& q, const Tensor& index, const Tensor& table, double scale);
// Σ_j probs[b, h, i, j] · table[(h,) index[i, j]]: probs [B, H, Lq, Lk], index Int64 [Lq, Lk] in
// [0, R), table [R, dh] or [H, R, dh] -> [B, H, Lq, dh] (bin_sum, then a [R, dh] product).
Tensor relative_values(const Tensor& probs, const Tensor& index, const Tensor& table);
// The largest probabilities tensor (bytes, default 32 MiB) the fused scaled_dot_attention keeps for
// its backward; past it the backward recomputes them block by block from the row log-sum-exp, so
// memory stays linear in the length. Returns the previous limit (0: always recompute).
int64_t set_attention_keep_limit(int64_t bytes);
int64_t attention_keep_limit();  // the limit now (the memory estimate counts what it keeps)
// false: scaled_dot_attention composes its math on every backend, as it does on one without the
// fused kernels (the CUDA backend today): bench_train uses it to count, on the CPU, the backend
// calls a GPU step makes. Returns the previous setting (default true).
bool set_fused_attention(bool use);
// inverted dropout: identity when !training or p == 0
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
inline Tensor operator-(double s, const Tensor& a) { return add_scalar(neg(a), s); }
inline Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul_scalar(a, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv_scalar(s, a); }

}  // namespace pelab
