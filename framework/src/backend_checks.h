// pelab — each Backend kernel's prologue, shared by the CPU and the CUDA backend, so that an op's
// name, its dtype dispatch and its argument checks (and the one error line each throws) are
// declared once: the backends call the op's check first thing and run their kernel through the
// OpPrologue it returns
// (`const FloatOp op = check_softmax(...); op.dispatch([&](auto tag) { <kernel> });`).
// The checks look only at the views' shapes, strides, dtypes and the scalar arguments, never at
// device data (the targets' range is checked by each backend where they are: the CPU on the host
// before its kernel, framework/src/cpu/cpu_nn.cpp; CUDA in its kernel, reported at the next read).
// They depend on no backend.
// Definitions: framework/src/backend_checks.cpp. tests/test_backend_checks.cpp drives each one
// through the public ops.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "pelab/backend.h"

namespace pelab {

// ---------------- dtype dispatch and the op prologue ----------------
// The dtypes an op has kernels for (a compile-time choice: a float-only kernel is never
// instantiated for Int64).
enum class KernelDTypes { Floating, All };

// f(T{}) for dt's element type T, among the dtypes K; any other dtype throws naming `op`. A
// function (not a macro), so lambda bodies may hold #pragma omp and kernel launches.
template <KernelDTypes K, class F>
auto dispatch_dtype(DType dt, const char* op, F&& f) -> decltype(f(float{})) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      if constexpr (K == KernelDTypes::All) return f(int64_t{});
      break;
  }
  if constexpr (K == KernelDTypes::All) fail(op, ": bad dtype ", static_cast<int>(dt));
  fail(op, ": expected a floating dtype, got ", dtype_name(dt));
}
// The ops with no check of their own (fill, copy, axpy, gemm) dispatch with these.
template <class F>
auto dispatch_float(DType dt, const char* op, F&& f) -> decltype(f(float{})) {
  return dispatch_dtype<KernelDTypes::Floating>(dt, op, std::forward<F>(f));
}
template <class F>
auto dispatch_all(DType dt, const char* op, F&& f) -> decltype(f(float{})) {
  return dispatch_dtype<KernelDTypes::All>(dt, op, std::forward<F>(f));
}

// What an op's check returns to both backends: the op's name (its error lines, its failed
// launches), the dtype its kernel runs in, and (the template argument) which dtypes have kernels.
// dispatch(f) runs f(T{}) for that dtype; dispatch(dt, f) for another one (ops over several
// buffers, each of its own dtype).
template <KernelDTypes K = KernelDTypes::Floating>
struct OpPrologue {
  const char* name;
  DType dtype;
  template <class F>
  auto dispatch(DType dt, F&& f) const -> decltype(f(float{})) {
    return dispatch_dtype<K>(dt, name, std::forward<F>(f));
  }
  template <class F>
  auto dispatch(F&& f) const -> decltype(f(float{})) {
    return dispatch(dtype, std::forward<F>(f));
  }
};
using FloatOp = OpPrologue<KernelDTypes::Floating>;
using AnyDTypeOp = OpPrologue<KernelDTypes::All>;
// gather / scatter_add: also the index's block count P (slice o uses block o % P; see
// Backend::gather).
struct BlockIndexOp : AnyDTypeOp {
  int64_t blocks;
};


// `what` of `op` holds `numel` elements contiguously (a view with no data passes only if empty).
void check_rows(const View& v, int64_t numel, const char* op, const char* what);
// `what` of `op` has dtype `dt`.
void check_dtype(const View& v, DType dt, const char* op, const char* what);

// An operand `v` of an elementwise kernel `op` broadcasts to `shape` (numpy rules: its rank is
// at most shape's, strides match its rank, and each of its trailing axes is 1 or shape's size).
void check_broadcast_operand(const View& v, const Shape& shape, const char* op);

AnyDTypeOp check_unary(const View& out, const View& in);
// `compare`: the op writes a comparison result, whose dtype may differ from the operands'.
AnyDTypeOp check_binary(const View& out, const View& a, const View& b, bool compare);
AnyDTypeOp check_where(const View& out, const View& a, const View& b);
// clamp / clamp_backward: operand dtypes agree and lo <= hi (neither NaN).
FloatOp check_clamp(const View& out, const View& in, double lo, double hi);
FloatOp check_clamp_backward(const View& grad_in, const View& grad_out, const View& x, double lo,
                             double hi);
AnyDTypeOp check_reduce(ReduceOp op, const View& out, const View& in, int64_t outer, int64_t n,
                        int64_t inner);
FloatOp check_sum_squares(const View& in);
FloatOp check_cumsum(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner);

// Checks gemm's sizes and leading dimensions, raising a leading dimension that does not matter
// (a single row) to its smallest legal value, as BLAS wants it. Returns false when the product is
// empty (M, N or batch is 0: nothing to do; then the leading dimensions are not looked at).
// `int_range` names the library whose 32-bit sizes bound the arguments ("BLAS", "cuBLAS").
bool check_gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, int64_t& lda,
                int64_t& ldb, int64_t& ldc, int64_t batch, const char* int_range);

FloatOp check_softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                      bool log);
FloatOp check_softmax_backward(const View& grad_in, const View& grad_out, const View& y,
                               int64_t outer, int64_t n, int64_t inner, bool log);
FloatOp check_layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                         const View& weight, const View& bias, int64_t rows, int64_t n);
FloatOp check_layer_norm_backward(const View& grad_x, const View& grad_weight,
                                  const View& grad_bias, const View& grad_y, const View& x,
                                  const View& mean, const View& rstd, const View& weight,
                                  int64_t rows, int64_t n);
// cross_entropy / cross_entropy_backward (Backend): also loss / grad_loss (one element of the
// logits' dtype) and count (one Float64 element).
FloatOp check_cross_entropy(const View& loss, const View& count, const View& loss_rows,
                            const View& lse, const View& logits, const View& targets,
                            int64_t rows, int64_t C);
FloatOp check_cross_entropy_backward(const View& grad_logits, const View& logits, const View& lse,
                                     const View& targets, int64_t rows, int64_t C,
                                     const View& grad_loss, const View& count);

// index_select / index_add: the [outer, n_in, inner] side is the input / accumulator, the
// [outer, n_idx, inner] side the output / source; the index is int64 [n_idx].
AnyDTypeOp check_index_select(const View& out, const View& in, const View& idx, int64_t outer,
                              int64_t n_in, int64_t n_idx, int64_t inner);
AnyDTypeOp check_index_add(const View& acc, const View& src, const View& idx, int64_t outer,
                           int64_t n_in, int64_t n_idx, int64_t inner);
// gather / scatter_add; their prologue carries the index's block count P (see Backend::gather).
BlockIndexOp check_gather(const View& out, const View& in, const View& idx, int64_t outer,
                          int64_t n_in, int64_t n_idx, int64_t inner);
BlockIndexOp check_scatter_add(const View& acc, const View& src, const View& idx, int64_t outer,
                               int64_t n_in, int64_t n_idx, int64_t inner);
// gather_lerp: in [outer, n_in, inner], pos and out [outer, n_idx, inner], all of in's dtype;
// the backward's grad_in / grad_pos are optional (no data: skipped).
FloatOp check_gather_lerp(const View& out, const View& in, const View& pos, int64_t outer,
                          int64_t n_in, int64_t n_idx, int64_t inner);
FloatOp check_gather_lerp_backward(const View& grad_in, const View& grad_pos,
                                   const View& grad_out, const View& in, const View& pos,
                                   int64_t outer, int64_t n_in, int64_t n_idx, int64_t inner);

FloatOp check_dropout_mask(const View& mask, double p);
FloatOp check_random_uniform(const View& out);
FloatOp check_random_normal(const View& out);
FloatOp check_adamw_step(const View& param, const View& grad, const View& m, const View& v,
                         double bias_correction1, double bias_correction2);
// check_adamw_step on each buffer (adamw_step_many; the guarded step's buffers); dispatch per
// buffer dtype with dispatch(dt, f).
FloatOp check_adamw_step_many(const std::vector<Backend::AdamWBuffers>& bufs,
                              double bias_correction1, double bias_correction2);
// The momentum buffer is looked at only when `use_momentum`.
FloatOp check_sgd_step(const View& param, const View& grad, const View& momentum_buf,
                       bool use_momentum);
// check_sgd_step on each buffer (the guarded step's).
void check_sgd_step_many(const std::vector<Backend::SGDBuffers>& bufs, bool use_momentum);
// The guarded updates (Backend::sum_squares_many, update_control, *_step_guarded): one Float64
// output, contiguous floating inputs; the Float64 [3] control and step records. The guarded steps'
// checks look at the control only (their buffers are checked as adamw_step / sgd_step's, by
// check_*_step_many); these ops dispatch per buffer dtype with dispatch(dt, f).
FloatOp check_sum_squares_many(const View& out, const std::vector<View>& ins);
void check_update_control(const View& control, const View& step, double max_norm);
FloatOp check_adamw_step_guarded(const View& control);
FloatOp check_sgd_step_guarded(const View& control);

FloatOp check_rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                           int64_t outer, int64_t L, int64_t D, int64_t P);
// Backend::attention, or with grads attention_backward: ranks, sizes, contiguity, dtypes (and, with
// grads, those of the gradient views).
FloatOp check_attention(const AttentionArgs& a, const View* grad_out = nullptr,
                        const AttentionGrads* g = nullptr);

}  // namespace pelab
