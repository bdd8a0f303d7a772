// pelab — the Backend kernels' argument checks, shared by the CPU and CUDA backends (declared, and
// described, in backend_checks.h).
#include "backend_checks.h"

#include <algorithm>
#include <climits>
#include <utility>


namespace pelab {

void check_rows(const View& v, int64_t numel, const char* op, const char* what) {
  PELAB_CHECK(v.data != nullptr || numel == 0, op, ": ", what, " has no data");
  PELAB_CHECK(v.numel() == numel, op, ": ", what, " ", shape_str(v.shape), " should hold ", numel,
              " elements");
  PELAB_CHECK(v.contiguous(), op, ": ", what, " must be contiguous (shape ", shape_str(v.shape),
              ", strides ", shape_str(v.strides), ")");
}

void check_dtype(const View& v, DType dt, const char* op, const char* what) {
  PELAB_CHECK(v.dtype == dt, op, ": ", what, " has dtype ", dtype_name(v.dtype), ", expected ",
              dtype_name(dt));
}

// ---------------- elementwise, reductions, gemm ----------------
void check_broadcast_operand(const View& v, const Shape& shape, const char* op) {
  PELAB_CHECK(v.shape.size() == v.strides.size(), op, ": view rank mismatch (shape ",
              shape_str(v.shape), ", strides ", shape_str(v.strides), ")");
  const size_t R = shape.size(), r = v.shape.size();
  bool ok = r <= R;
  for (size_t i = 0; ok && i < r; ++i) ok = v.shape[i] == shape[R - r + i] || v.shape[i] == 1;
  PELAB_CHECK(ok, op, ": cannot broadcast ", shape_str(v.shape), " to ", shape_str(shape));
}

AnyDTypeOp check_unary(const View& out, const View& in) {
  PELAB_CHECK(out.dtype == in.dtype, "unary: dtype mismatch, out ", dtype_name(out.dtype),
              " vs in ", dtype_name(in.dtype));
  return {"unary", out.dtype};
}

AnyDTypeOp check_binary(const View& out, const View& a, const View& b, bool compare) {
  PELAB_CHECK(a.dtype == b.dtype, "binary: operand dtypes differ: ", dtype_name(a.dtype), " vs ",
              dtype_name(b.dtype));
  PELAB_CHECK(out.dtype == a.dtype || compare, "binary: output dtype ", dtype_name(out.dtype),
              " differs from the operand dtype ", dtype_name(a.dtype));
  return {"binary", a.dtype};
}

AnyDTypeOp check_where(const View& out, const View& a, const View& b) {
  PELAB_CHECK(out.dtype == a.dtype && out.dtype == b.dtype, "where: dtypes differ: out ",
              dtype_name(out.dtype), ", a ", dtype_name(a.dtype), ", b ", dtype_name(b.dtype));
  return {"where", out.dtype};
}

namespace {
void check_bounds(const char* op, double lo, double hi) {
  PELAB_CHECK(lo <= hi, op, ": lower bound ", lo, " must not exceed the upper bound ", hi);
}
}  // namespace

FloatOp check_clamp(const View& out, const View& in, double lo, double hi) {
  PELAB_CHECK(out.dtype == in.dtype, "clamp: dtype mismatch, out ", dtype_name(out.dtype),
              " vs in ", dtype_name(in.dtype));
  check_bounds("clamp", lo, hi);
  return {"clamp", out.dtype};
}

FloatOp check_clamp_backward(const View& grad_in, const View& grad_out, const View& x, double lo,
                             double hi) {
  PELAB_CHECK(grad_in.dtype == grad_out.dtype && grad_in.dtype == x.dtype,
              "clamp_backward: dtypes differ: grad_in ", dtype_name(grad_in.dtype), ", grad_out ",
              dtype_name(grad_out.dtype), ", x ", dtype_name(x.dtype));
  check_bounds("clamp_backward", lo, hi);
  return {"clamp_backward", grad_in.dtype};
}

AnyDTypeOp check_reduce(ReduceOp op, const View& out, const View& in, int64_t outer, int64_t n,
                        int64_t inner) {
  PELAB_CHECK(outer >= 0 && n >= 0 && inner >= 0, "reduce: bad extents outer=", outer, " n=", n,
              " inner=", inner);
  PELAB_CHECK(in.numel() == outer * n * inner, "reduce: input ", shape_str(in.shape),
              " does not hold [", outer, ", ", n, ", ", inner, "]");
  PELAB_CHECK(out.numel() == outer * inner, "reduce: output ", shape_str(out.shape),
              " does not hold [", outer, ", ", inner, "]");
  PELAB_CHECK(out.dtype == in.dtype, "reduce: dtype mismatch, out ", dtype_name(out.dtype),
              " vs in ", dtype_name(in.dtype));
  PELAB_CHECK(in.contiguous() && out.contiguous(), "reduce: views must be contiguous (in ",
              shape_str(in.shape), " strides ", shape_str(in.strides), ")");
  PELAB_CHECK(op != ReduceOp::Max || n > 0 || outer * inner == 0,
              "reduce: max over an empty axis (input ", shape_str(in.shape), ")");
  return {"reduce", in.dtype};
}

FloatOp check_sum_squares(const View& in) {
  PELAB_CHECK(in.contiguous(), "sum_squares: view must be contiguous (shape ", shape_str(in.shape),
              ", strides ", shape_str(in.strides), ")");
  return {"sum_squares", in.dtype};
}

FloatOp check_cumsum(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner) {
  const char* op = "cumsum";
  PELAB_CHECK(outer >= 0 && n >= 0 && inner >= 0, op, ": bad extents outer=", outer, " n=", n,
              " inner=", inner);
  check_rows(in, outer * n * inner, op, "input");
  check_rows(out, outer * n * inner, op, "output");
  check_dtype(out, in.dtype, op, "output");
  return {op, in.dtype};
}

bool check_gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, int64_t& lda,
                int64_t& ldb, int64_t& ldc, int64_t batch, const char* int_range) {
  PELAB_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "gemm: bad sizes M=", M, " N=", N, " K=", K,
              " batch=", batch);
  if (M == 0 || N == 0 || batch == 0) return false;
  // Stored shapes: A is (transA ? K x M : M x K), B is (transB ? N x K : K x N).
  const int64_t a_rows = transA ? K : M, a_cols = transA ? M : K;
  const int64_t b_rows = transB ? N : K, b_cols = transB ? K : N;
  // A leading dimension only matters when there is more than one row; BLAS still checks it.
  if (a_rows <= 1) lda = std::max<int64_t>(lda, std::max<int64_t>(a_cols, 1));
  if (b_rows <= 1) ldb = std::max<int64_t>(ldb, std::max<int64_t>(b_cols, 1));
  if (M <= 1) ldc = std::max<int64_t>(ldc, N);
  PELAB_CHECK(lda >= std::max<int64_t>(a_cols, 1) && ldb >= std::max<int64_t>(b_cols, 1) &&
                  ldc >= std::max<int64_t>(N, 1),
              "gemm: leading dimensions too small (M=", M, " N=", N, " K=", K, " lda=", lda,
              " ldb=", ldb, " ldc=", ldc, ", transA=", transA, ", transB=", transB, ")");
  PELAB_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
                  ldb <= INT32_MAX && ldc <= INT32_MAX,
              "gemm: sizes exceed the ", int_range, " integer range (M=", M, " N=", N, " K=", K,
              ")");
  return true;
}

// ---------------- fused NN kernels ----------------
namespace {
// An optional view (no data: absent, not looked at) holding `numel` elements of dtype `dt`.
void check_optional(const View& v, int64_t numel, DType dt, const char* op, const char* what) {
  if (!v.data) return;
  check_rows(v, numel, op, what);
  check_dtype(v, dt, op, what);
}
}  // namespace

FloatOp check_softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                      bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const int64_t total = outer * n * inner;
  check_rows(in, total, op, "input");
  check_rows(out, total, op, "output");
  check_dtype(out, in.dtype, op, "output");
  return {op, in.dtype};
}

FloatOp check_softmax_backward(const View& grad_in, const View& grad_out, const View& y,
                               int64_t outer, int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const int64_t total = outer * n * inner;
  check_rows(grad_in, total, op, "grad_in");
  check_rows(grad_out, total, op, "grad_out");
  check_rows(y, total, op, "y");
  check_dtype(grad_out, y.dtype, op, "grad_out");
  check_dtype(grad_in, y.dtype, op, "grad_in");
  return {op, y.dtype};
}

FloatOp check_layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                         const View& weight, const View& bias, int64_t rows, int64_t n) {
  const char* op = "layer_norm";
  PELAB_CHECK(n > 0, op, ": normalised size must be positive, got ", n);
  check_rows(x, rows * n, op, "x");
  check_rows(y, rows * n, op, "y");
  check_rows(mean, rows, op, "mean");
  check_rows(rstd, rows, op, "rstd");
  for (const View* v : {&y, &mean, &rstd}) check_dtype(*v, x.dtype, op, "output");
  check_optional(weight, n, x.dtype, op, "weight");
  check_optional(bias, n, x.dtype, op, "bias");
  return {op, x.dtype};
}

FloatOp check_layer_norm_backward(const View& grad_x, const View& grad_weight,
                                  const View& grad_bias, const View& grad_y, const View& x,
                                  const View& mean, const View& rstd, const View& weight,
                                  int64_t rows, int64_t n) {
  const char* op = "layer_norm_backward";
  PELAB_CHECK(n > 0, op, ": normalised size must be positive, got ", n);
  check_rows(x, rows * n, op, "x");
  check_rows(grad_y, rows * n, op, "grad_y");
  check_rows(mean, rows, op, "mean");
  check_rows(rstd, rows, op, "rstd");
  check_dtype(grad_y, x.dtype, op, "grad_y");
  check_dtype(mean, x.dtype, op, "mean");
  check_dtype(rstd, x.dtype, op, "rstd");
  check_optional(grad_x, rows * n, x.dtype, op, "grad_x");
  check_optional(weight, n, x.dtype, op, "weight");
  for (const View* v : {&grad_weight, &grad_bias})
    check_optional(*v, n, x.dtype, op, "grad_weight/grad_bias");
  return {op, x.dtype};
}

namespace {
// Both cross-entropy kernels: logits [rows, C], int64 targets [rows], lse [rows], and `out`
// (loss_rows [rows] forward, grad_logits [rows, C] backward) in the logits' dtype.
void check_cross_entropy_args(const char* op, const View& out, const char* out_what,
                              int64_t out_numel, const View& lse, const View& logits,
                              const View& targets, int64_t rows, int64_t C) {
  PELAB_CHECK(C > 0, op, ": number of classes must be positive, got ", C);
  check_rows(logits, rows * C, op, "logits");
  check_rows(targets, rows, op, "targets");
  check_rows(out, out_numel, op, out_what);
  check_rows(lse, rows, op, "lse");
  check_dtype(targets, DType::Int64, op, "targets");
  check_dtype(out, logits.dtype, op, out_what);
  check_dtype(lse, logits.dtype, op, "lse");
}
}  // namespace

FloatOp check_cross_entropy(const View& loss, const View& count, const View& loss_rows,
                            const View& lse, const View& logits, const View& targets,
                            int64_t rows, int64_t C) {
  const char* op = "cross_entropy";
  check_cross_entropy_args(op, loss_rows, "loss_rows", rows, lse, logits, targets, rows, C);
  check_rows(loss, 1, op, "loss");
  check_dtype(loss, logits.dtype, op, "loss");
  check_rows(count, 1, op, "count");
  check_dtype(count, DType::Float64, op, "count");
  return {op, logits.dtype};
}

FloatOp check_cross_entropy_backward(const View& grad_logits, const View& logits, const View& lse,
                                     const View& targets, int64_t rows, int64_t C,
                                     const View& grad_loss, const View& count) {
  const char* op = "cross_entropy_backward";
  check_cross_entropy_args(op, grad_logits, "grad_logits", rows * C, lse, logits, targets, rows, C);
  check_rows(grad_loss, 1, op, "grad_loss");
  check_dtype(grad_loss, logits.dtype, op, "grad_loss");
  check_rows(count, 1, op, "count");
  check_dtype(count, DType::Float64, op, "count");
  return {op, logits.dtype};
}

namespace {
// The index kernels' common checks: `big` is the [outer, n_in, inner] side, `small` the
// [outer, n_idx, inner] side (of big's dtype), `idx` an int64 [n_idx] index, or, with `blocks`,
// P whole [n_idx, inner] blocks (see Backend::gather). Returns the op's prologue, its kernel in
// big's dtype, with P (1 without blocks).
BlockIndexOp check_indexed(const char* op, const View& big, const char* big_what, const View& small,
                      const char* small_what, const View& idx, int64_t outer, int64_t n_in,
                      int64_t n_idx, int64_t inner, bool blocks) {
  check_rows(big, outer * n_in * inner, op, big_what);
  check_rows(small, outer * n_idx * inner, op, small_what);
  const int64_t P = blocks ? index_blocks(idx, outer, n_idx, inner, op) : 1;
  check_rows(idx, blocks ? P * n_idx * inner : n_idx, op, "index");
  check_dtype(idx, DType::Int64, op, "index");
  check_dtype(small, big.dtype, op, small_what);
  return {{op, big.dtype}, P};
}
}  // namespace

AnyDTypeOp check_index_select(const View& out, const View& in, const View& idx, int64_t outer,
                              int64_t n_in, int64_t n_idx, int64_t inner) {
  return check_indexed("index_select", in, "input", out, "output", idx, outer, n_in, n_idx, inner,
                       false);
}

AnyDTypeOp check_index_add(const View& acc, const View& src, const View& idx, int64_t outer,
                           int64_t n_in, int64_t n_idx, int64_t inner) {
  return check_indexed("index_add", acc, "accumulator", src, "source", idx, outer, n_in, n_idx,
                       inner, false);
}

BlockIndexOp check_gather(const View& out, const View& in, const View& idx, int64_t outer,
                          int64_t n_in, int64_t n_idx, int64_t inner) {
  return check_indexed("gather", in, "input", out, "output", idx, outer, n_in, n_idx, inner, true);
}

BlockIndexOp check_scatter_add(const View& acc, const View& src, const View& idx, int64_t outer,
                               int64_t n_in, int64_t n_idx, int64_t inner) {
  return check_indexed("scatter_add", acc, "accumulator", src, "source", idx, outer, n_in, n_idx,
                       inner, true);
}

namespace {
// in [outer, n_in, inner]; pos and `per_pos` (the output, or grad_out) [outer, n_idx, inner]; all
// of in's dtype.
void check_lerp_operands(const char* op, const View& per_pos, const char* per_pos_name,
                         const View& in, const View& pos, int64_t outer, int64_t n_in,
                         int64_t n_idx, int64_t inner) {
  check_rows(in, outer * n_in * inner, op, "input");
  check_rows(pos, outer * n_idx * inner, op, "positions");
  check_rows(per_pos, outer * n_idx * inner, op, per_pos_name);
  check_dtype(pos, in.dtype, op, "positions");
  check_dtype(per_pos, in.dtype, op, per_pos_name);
}
}  // namespace

FloatOp check_gather_lerp(const View& out, const View& in, const View& pos, int64_t outer,
                          int64_t n_in, int64_t n_idx, int64_t inner) {
  const char* op = "gather_lerp";
  check_lerp_operands(op, out, "output", in, pos, outer, n_in, n_idx, inner);
  return {op, in.dtype};
}

FloatOp check_gather_lerp_backward(const View& grad_in, const View& grad_pos,
                                   const View& grad_out, const View& in, const View& pos,
                                   int64_t outer, int64_t n_in, int64_t n_idx, int64_t inner) {
  const char* op = "gather_lerp_backward";
  check_lerp_operands(op, grad_out, "grad_out", in, pos, outer, n_in, n_idx, inner);
  check_optional(grad_in, outer * n_in * inner, in.dtype, op, "grad_in");
  check_optional(grad_pos, outer * n_idx * inner, in.dtype, op, "grad_pos");
  return {op, in.dtype};
}

FloatOp check_dropout_mask(const View& mask, double p) {
  const char* op = "dropout_mask";
  PELAB_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
  check_rows(mask, mask.numel(), op, "mask");
  return {op, mask.dtype};
}

namespace {
FloatOp check_random_fill(const View& out, const char* op) {
  check_rows(out, out.numel(), op, "output");
  return {op, out.dtype};
}
}  // namespace

FloatOp check_random_uniform(const View& out) { return check_random_fill(out, "random_uniform"); }
FloatOp check_random_normal(const View& out) { return check_random_fill(out, "random_normal"); }

FloatOp check_adamw_step(const View& param, const View& grad, const View& m, const View& v,
                         double bias_correction1, double bias_correction2) {
  const char* op = "adamw_step";
  const int64_t n = param.numel();
  check_rows(param, n, op, "param");
  check_rows(grad, n, op, "grad");
  check_rows(m, n, op, "exp_avg");
  check_rows(v, n, op, "exp_avg_sq");
  for (const View* x : {&grad, &m, &v}) check_dtype(*x, param.dtype, op, "state");
  PELAB_CHECK(bias_correction1 > 0 && bias_correction2 > 0, op,
              ": bias corrections must be positive, got ", bias_correction1, " and ",
              bias_correction2);
  return {op, param.dtype};
}

FloatOp check_adamw_step_many(const std::vector<Backend::AdamWBuffers>& bufs,
                              double bias_correction1, double bias_correction2) {
  for (const Backend::AdamWBuffers& b : bufs)
    check_adamw_step(b.param, b.grad, b.m, b.v, bias_correction1, bias_correction2);
  return {"adamw_step", bufs.empty() ? DType::Float32 : bufs[0].param.dtype};
}

FloatOp check_sgd_step(const View& param, const View& grad, const View& momentum_buf,
                       bool use_momentum) {
  const char* op = "sgd_step";
  const int64_t n = param.numel();
  check_rows(param, n, op, "param");
  check_rows(grad, n, op, "grad");
  check_dtype(grad, param.dtype, op, "grad");
  if (use_momentum) {
    check_rows(momentum_buf, n, op, "momentum_buffer");
    check_dtype(momentum_buf, param.dtype, op, "momentum_buffer");
  }
  return {op, param.dtype};
}

void check_sgd_step_many(const std::vector<Backend::SGDBuffers>& bufs, bool use_momentum) {
  for (const Backend::SGDBuffers& b : bufs)
    check_sgd_step(b.param, b.grad, b.momentum_buf, use_momentum);
}

FloatOp check_sum_squares_many(const View& out, const std::vector<View>& ins) {
  const char* op = "sum_squares_many";
  check_rows(out, 1, op, "output");
  check_dtype(out, DType::Float64, op, "output");
  for (const View& in : ins) {
    PELAB_CHECK(in.data != nullptr || in.numel() == 0, op, ": an input ", shape_str(in.shape),
                " has no data");
    PELAB_CHECK(in.contiguous(), op, ": inputs must be contiguous (shape ", shape_str(in.shape),
                ", strides ", shape_str(in.strides), ")");
    PELAB_CHECK(is_floating(in.dtype), op, ": inputs must be floating, got ", dtype_name(in.dtype));
  }
  return {op, out.dtype};
}

void check_update_control(const View& control, const View& step, double max_norm) {
  const char* op = "update_control";
  check_rows(control, 3, op, "control");
  check_dtype(control, DType::Float64, op, "control");
  check_rows(step, 3, op, "step");
  check_dtype(step, DType::Float64, op, "step");
  PELAB_CHECK(max_norm > 0, op, ": max_norm must be > 0, got ", max_norm);
}

namespace {
FloatOp check_guarded_control(const View& control, const char* op) {
  check_rows(control, 3, op, "control");
  check_dtype(control, DType::Float64, op, "control");
  return {op, control.dtype};
}
}  // namespace

FloatOp check_adamw_step_guarded(const View& control) {
  return check_guarded_control(control, "adamw_step_guarded");
}
FloatOp check_sgd_step_guarded(const View& control) {
  return check_guarded_control(control, "sgd_step_guarded");
}

// ---------------- rotary pairs, fused attention ----------------
FloatOp check_rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                           int64_t outer, int64_t L, int64_t D, int64_t P) {
  const char* op = "rotate_pairs";
  PELAB_CHECK(P >= 1 && 2 * P <= D, op, ": ", P, " pairs do not fit rows of ", D);
  const std::pair<const View*, const char*> args[] = {
      {&x, "input"}, {&out, "output"}, {&cos, "cos"}, {&sin, "sin"}};
  for (const auto& [v, what] : args) {
    const int64_t want = v == &cos || v == &sin ? L * P : outer * L * D;
    PELAB_CHECK(v->data != nullptr && v->numel() == want && v->contiguous(), op, ": ", what, " ",
                shape_str(v->shape), " must be contiguous with ", want, " elements");
    PELAB_CHECK(v->dtype == x.dtype, op, ": ", what, " has dtype ", dtype_name(v->dtype),
                ", expected ", dtype_name(x.dtype));
  }
  return {op, x.dtype};
}

FloatOp check_attention(const AttentionArgs& a, const View* grad_out, const AttentionGrads* g) {
  const char* op = g ? "attention_backward" : "attention";
  const int64_t B = a.B, H = a.H;
  const View &q = a.q, &k = a.k, &v = a.v;
  PELAB_CHECK(B >= 0 && H >= 0 && q.shape.size() == 4 && k.shape.size() == 4 && k.shape == v.shape &&
                  q.shape[0] == B && q.shape[1] == H && k.shape[0] == B && k.shape[1] == H &&
                  q.shape[3] == k.shape[3],
              op, ": expected q [", B, ", ", H, ", Lq, dh] and k = v [", B, ", ", H,
              ", Lk, dh], got q ", shape_str(q.shape), ", k ", shape_str(k.shape), ", v ",
              shape_str(v.shape));
  const int64_t Lq = q.shape[2], Lk = k.shape[2], dh = q.shape[3];
  const Shape scores = {B, H, Lq, Lk};
  // q, k, v, out and the gradients: [B, H, L, dh] views whose rows are dh contiguous elements (the
  // heads may be interleaved, e.g. a token-major [B, L, H, dh] buffer seen through a permute)
  auto rows_view = [&](const View& t, const Shape& want, const char* what) {
    PELAB_CHECK(t.data != nullptr && t.shape == want && t.strides.size() == 4 &&
                    (want[3] <= 1 || t.strides[3] == 1) && t.strides[0] >= 0 &&
                    t.strides[1] >= 0 && t.strides[2] >= 0,
                op, ": ", what, " ", shape_str(t.shape),
                " must be a view of [B, H, L, dh] = ", shape_str(want),
                " with unit stride along dh");
    PELAB_CHECK(t.dtype == q.dtype, op, ": ", what, " has dtype ", dtype_name(t.dtype),
                ", expected ", dtype_name(q.dtype));
  };
  auto dense = [&](const View& t, const Shape& want, const char* what, bool optional) {
    if (optional && t.data == nullptr) return;
    PELAB_CHECK(t.data != nullptr && t.shape == want && t.contiguous(), op, ": ", what, " ",
                shape_str(t.shape), " must be contiguous ", shape_str(want));
    PELAB_CHECK(t.dtype == q.dtype, op, ": ", what, " has dtype ", dtype_name(t.dtype),
                ", expected ", dtype_name(q.dtype));
  };
  rows_view(q, q.shape, "q");
  rows_view(k, k.shape, "k");
  rows_view(v, k.shape, "v");
  rows_view(a.out, q.shape, "out");
  dense(a.stats, {B * H, Lq, 2}, "stats", false);
  dense(a.probs, scores, "probs", true);
  for (const auto& [t, what] : {std::pair<const View*, const char*>{&a.bias, "bias"}, {&a.mask, "mask"}}) {
    if (t->data == nullptr) continue;
    PELAB_CHECK(t->shape == scores && t->strides.size() == 4, op, ": ", what, " ",
                shape_str(t->shape), " must be a view of ", shape_str(scores));
    PELAB_CHECK(t->dtype == q.dtype, op, ": ", what, " has dtype ", dtype_name(t->dtype),
                ", expected ", dtype_name(q.dtype));
  }
  const bool rel = a.rel_keys.data || a.rel_values.data;
  PELAB_CHECK(rel == (a.rel_index.data != nullptr), op,
              ": a relative index needs a table and a table needs the index");
  int64_t R = 0;
  for (const auto& [t, what] : {std::pair<const View*, const char*>{&a.rel_keys, "relative keys"},
                                {&a.rel_values, "relative values"}}) {
    if (!t->data) continue;
    const Shape& ts = t->shape;
    PELAB_CHECK(ts.size() == 3 && (ts[0] == 1 || ts[0] == H) && ts[1] >= 1 && ts[2] == dh &&
                    (R == 0 || ts[1] == R),
                op, ": ", what, " table ", shape_str(ts), " must be [1 or ", H, ", R, ", dh,
                "] with the same R as the other table");
    R = ts[1];
    dense(*t, ts, what, false);
  }
  if (rel)
    PELAB_CHECK(a.rel_index.dtype == DType::Int64 && a.rel_index.shape == (Shape{Lq, Lk}) &&
                    a.rel_index.contiguous(),
                op, ": relative index ", shape_str(a.rel_index.shape), " ",
                dtype_name(a.rel_index.dtype), " must be contiguous int64 [", Lq, ", ", Lk, "]");
  if (!g) return {op, q.dtype};
  PELAB_CHECK(grad_out != nullptr, op, ": no grad_out");
  rows_view(*grad_out, q.shape, "grad_out");
  rows_view(g->q, q.shape, "grad q");
  rows_view(g->k, k.shape, "grad k");
  rows_view(g->v, k.shape, "grad v");
  dense(g->scores, scores, "grad scores", true);
  PELAB_CHECK((!g->rel_keys.data || a.rel_keys.data) && (!g->rel_values.data || a.rel_values.data),
              op, ": a relative-table gradient without its table");
  if (a.rel_keys.data) dense(g->rel_keys, {B * H, R, dh}, "relative keys gradient", true);
  if (a.rel_values.data) dense(g->rel_values, {B * H, R, dh}, "relative values gradient", true);
  return {op, q.dtype};
}

}  // namespace pelab
