// The Backend kernels' argument checks (framework/src/backend_checks.{h,cpp}, one copy shared by
// the CPU and CUDA backends): each check is driven with one bad argument through the CPU backend
// and must throw its one-line error. The op layer (framework/src/ops) validates shapes, dtypes,
// targets and axes first with its own messages, so these checks are reached through the public
// Backend interface (pelab/backend.h), which the ops call. A check lost when the backends were
// rewired makes its case here fail.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "pelab/backend.h"
#include "pelab/ops.h"  // transpose
#include "pelab/tensor.h"
#include "tests/device_param.h"
#include "tests/test_util.h"

using namespace pelab;
using pelab::testing::error_of;

namespace {

Backend& cpu() { return backend_for(Device::cpu()); }

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::Float32); }
Tensor f64(const Shape& s) { return Tensor::zeros(s, DType::Float64); }
Tensor i64(const Shape& s) { return Tensor::zeros(s, DType::Int64); }
View v(const Tensor& t) { return view_of(t); }

// `f` throws a pelab::Error whose message contains `want`.
void expect_error(const std::function<void()>& f, const std::string& want) {
  const std::string msg = error_of(f);
  EXPECT_NE(msg.find(want), std::string::npos) << "wanted \"" << want << "\", got \"" << msg << "\"";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

}  // namespace

TEST(BackendChecks, RowsAndDtypeHelpers) {
  // check_rows: element count, contiguity; check_dtype: the dtype (through softmax).
  expect_error([] { cpu().softmax(v(f32({2, 3})), v(f32({2, 4})), 2, 3, 1, false); },
               "softmax: input [2, 4] should hold 6 elements");
  const Tensor t = transpose(f32({3, 2}), 0, 1);
  expect_error([&] { cpu().softmax(v(f32({2, 3})), v(t), 2, 3, 1, false); },
               "softmax: input must be contiguous (shape [2, 3], strides [1, 2])");
  expect_error([] { cpu().softmax(v(f64({2, 3})), v(f32({2, 3})), 2, 3, 1, true); },
               "log_softmax: output has dtype float64, expected float32");
}

TEST(BackendChecks, Elementwise) {
  expect_error([] { cpu().unary(UnaryOp::Exp, v(f64({2})), v(f32({2})), 0.0); },
               "unary: dtype mismatch, out float64 vs in float32");
  expect_error([] { cpu().binary(BinaryOp::Add, v(f32({2})), v(f32({2})), v(f64({2}))); },
               "binary: operand dtypes differ: float32 vs float64");
  expect_error([] { cpu().binary(BinaryOp::Add, v(f64({2})), v(f32({2})), v(f32({2}))); },
               "binary: output dtype float64 differs from the operand dtype float32");
  expect_error([] { cpu().where(v(f32({2})), v(f32({2})), v(f32({2})), v(f64({2}))); },
               "where: dtypes differ: out float32, a float32, b float64");
  // check_broadcast_operand (the elementwise layouts of both backends).
  expect_error([] { cpu().binary(BinaryOp::Add, v(f32({2, 2})), v(f32({2, 2})), v(f32({3}))); },
               "binary: cannot broadcast [3] to [2, 2]");
  expect_error([] { cpu().unary(UnaryOp::Exp, v(f32({2, 2})), v(f32({2, 2, 2})), 0.0); },
               "unary: cannot broadcast [2, 2, 2] to [2, 2]");
  View no_strides = v(f32({2}));
  no_strides.strides.clear();
  expect_error([&] { cpu().where(v(f32({2})), v(f32({2})), no_strides, v(f32({2}))); },
               "where: view rank mismatch (shape [2], strides [])");
  // An axis of size 1 in the target is checked too (it used to be skipped, and a [3] operand
  // was read as its first element).
  expect_error([] { cpu().binary(BinaryOp::Add, v(f32({1})), v(f32({1})), v(f32({3}))); },
               "binary: cannot broadcast [3] to [1]");
  EXPECT_NO_THROW(cpu().binary(BinaryOp::Add, v(f32({2, 2})), v(f32({2, 2})), v(f32({1, 2}))));
}

TEST(BackendChecks, ReduceAndSumSquares) {
  expect_error([] { cpu().reduce(ReduceOp::Sum, v(f32({2})), nullptr, v(f32({2, 3})), -1, 3, 2); },
               "reduce: bad extents outer=-1 n=3 inner=2");
  expect_error([] { cpu().reduce(ReduceOp::Sum, v(f32({2})), nullptr, v(f32({2, 4})), 2, 3, 1); },
               "reduce: input [2, 4] does not hold [2, 3, 1]");
  expect_error([] { cpu().reduce(ReduceOp::Sum, v(f32({3})), nullptr, v(f32({2, 3})), 2, 3, 1); },
               "reduce: output [3] does not hold [2, 1]");
  expect_error([] { cpu().reduce(ReduceOp::Sum, v(f64({2})), nullptr, v(f32({2, 3})), 2, 3, 1); },
               "reduce: dtype mismatch, out float64 vs in float32");
  const Tensor t = transpose(f32({3, 2}), 0, 1);
  expect_error([&] { cpu().reduce(ReduceOp::Sum, v(f32({2})), nullptr, v(t), 2, 3, 1); },
               "reduce: views must be contiguous (in [2, 3] strides [1, 2])");
  int64_t argmax[2];
  expect_error([&] { cpu().reduce(ReduceOp::Max, v(f32({2})), argmax, v(f32({2, 0})), 2, 0, 1); },
               "reduce: max over an empty axis (input [2, 0])");
  EXPECT_NO_THROW(cpu().reduce(ReduceOp::Sum, v(f32({2})), nullptr, v(f32({2, 0})), 2, 0, 1));
  expect_error([&] { cpu().sum_squares(v(t)); },
               "sum_squares: view must be contiguous (shape [2, 3], strides [1, 2])");
}

TEST(BackendChecks, Gemm) {
  const Tensor c = f32({2, 2});
  auto gemm = [&](int64_t M, int64_t lda, int64_t batch) {
    cpu().gemm(DType::Float32, false, false, M, 2, 2, 1.0, c.raw_data(), lda, 0, c.raw_data(), 2,
               0, 0.0, const_cast<void*>(c.raw_data()), 2, 0, batch);
  };
  expect_error([&] { gemm(2, 2, -1); }, "gemm: bad sizes M=2 N=2 K=2 batch=-1");
  expect_error([&] { gemm(2, 1, 1); }, "gemm: leading dimensions too small (M=2 N=2 K=2 lda=1");
  expect_error([&] { gemm(int64_t{1} << 32, 2, 1); }, "gemm: sizes exceed the BLAS integer range");
  EXPECT_NO_THROW(gemm(0, 0, 1));  // an empty product is not looked at further
}

TEST(BackendChecks, Softmax) {
  expect_error([] { cpu().softmax_backward(v(f32({6})), v(f32({6})), v(f32({5})), 2, 3, 1, false); },
               "softmax_backward: y [5] should hold 6 elements");
  expect_error([] { cpu().softmax_backward(v(f32({6})), v(f64({6})), v(f32({6})), 2, 3, 1, true); },
               "log_softmax_backward: grad_out has dtype float64, expected float32");
  expect_error([] { cpu().softmax_backward(v(f64({6})), v(f32({6})), v(f32({6})), 2, 3, 1, false); },
               "softmax_backward: grad_in has dtype float64, expected float32");
}

TEST(BackendChecks, LayerNorm) {
  const View none;
  expect_error([&] { cpu().layer_norm(v(f32({2, 3})), v(f32({2})), v(f32({2})), v(f32({2, 3})), none, none, 2, 0, 1e-5); },
               "layer_norm: normalised size must be positive, got 0");
  expect_error([&] { cpu().layer_norm(v(f32({2, 3})), v(f32({3})), v(f32({2})), v(f32({2, 3})), none, none, 2, 3, 1e-5); },
               "layer_norm: mean [3] should hold 2 elements");
  expect_error([&] { cpu().layer_norm(v(f32({2, 3})), v(f64({2})), v(f32({2})), v(f32({2, 3})), none, none, 2, 3, 1e-5); },
               "layer_norm: output has dtype float64, expected float32");
  expect_error([&] { cpu().layer_norm(v(f32({2, 3})), v(f32({2})), v(f32({2})), v(f32({2, 3})), v(f32({4})), none, 2, 3, 1e-5); },
               "layer_norm: weight [4] should hold 3 elements");
  expect_error([&] { cpu().layer_norm(v(f32({2, 3})), v(f32({2})), v(f32({2})), v(f32({2, 3})), none, v(f64({3})), 2, 3, 1e-5); },
               "layer_norm: bias has dtype float64, expected float32");
  auto bwd = [&](const Tensor& gx, const Tensor& gw, const Tensor& gy, const Tensor& rstd, const Tensor& w) {
    cpu().layer_norm_backward(v(gx), v(gw), none, v(gy), v(f32({2, 3})), v(f32({2})), v(rstd), v(w), 2, 3);
  };
  expect_error([&] { bwd(f32({2, 3}), f32({3}), f32({2, 2}), f32({2}), f32({3})); },
               "layer_norm_backward: grad_y [2, 2] should hold 6 elements");
  expect_error([&] { bwd(f32({2, 3}), f32({3}), f64({2, 3}), f32({2}), f32({3})); },
               "layer_norm_backward: grad_y has dtype float64, expected float32");
  expect_error([&] { bwd(f32({2, 3}), f32({3}), f32({2, 3}), f64({2}), f32({3})); },
               "layer_norm_backward: rstd has dtype float64, expected float32");
  expect_error([&] { bwd(f64({2, 3}), f32({3}), f32({2, 3}), f32({2}), f32({3})); },
               "layer_norm_backward: grad_x has dtype float64, expected float32");
  expect_error([&] { bwd(f32({2, 3}), f32({3}), f32({2, 3}), f32({2}), f32({2})); },
               "layer_norm_backward: weight [2] should hold 3 elements");
  expect_error([&] { bwd(f32({2, 3}), f64({3}), f32({2, 3}), f32({2}), f32({3})); },
               "layer_norm_backward: grad_weight/grad_bias has dtype float64, expected float32");
}

TEST(BackendChecks, CrossEntropy) {
  // loss (one element of the logits' dtype) and count (one float64) come first
  auto fwd = [](const Tensor& loss, const Tensor& count, const Tensor& rows, const Tensor& lse,
                const Tensor& logits, const Tensor& targets, int64_t C) {
    cpu().cross_entropy(v(loss), v(count), v(rows), v(lse), v(logits), v(targets), 2, C, -100, 0.0);
  };
  auto bwd = [](const Tensor& grad, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                int64_t C, const Tensor& g, const Tensor& count) {
    cpu().cross_entropy_backward(v(grad), v(logits), v(lse), v(targets), 2, C, -100, 0.0, v(g),
                                 v(count));
  };
  expect_error([&] { fwd(f32({1}), f64({1}), f32({2}), f32({2}), f32({2, 3}), i64({2}), 0); },
               "cross_entropy: number of classes must be positive, got 0");
  expect_error([&] { fwd(f32({1}), f64({1}), f32({2}), f32({2}), f32({2, 3}), f32({2}), 3); },
               "cross_entropy: targets has dtype float32, expected int64");
  expect_error([&] { fwd(f32({1}), f64({1}), f32({2}), f64({2}), f32({2, 3}), i64({2}), 3); },
               "cross_entropy: lse has dtype float64, expected float32");
  expect_error([&] { fwd(f64({1}), f64({1}), f32({2}), f32({2}), f32({2, 3}), i64({2}), 3); },
               "cross_entropy: loss has dtype float64, expected float32");
  expect_error([&] { fwd(f32({1}), f32({1}), f32({2}), f32({2}), f32({2, 3}), i64({2}), 3); },
               "cross_entropy: count has dtype float32, expected float64");
  expect_error([&] { fwd(f32({2}), f64({1}), f32({2}), f32({2}), f32({2, 3}), i64({2}), 3); },
               "cross_entropy: loss [2] should hold 1 elements");
  expect_error([&] { bwd(f32({2, 3}), f32({2, 3}), f32({2}), i64({2}), -1, f32({1}), f64({1})); },
               "cross_entropy_backward: number of classes must be positive, got -1");
  expect_error([&] { bwd(f32({2, 2}), f32({2, 3}), f32({2}), i64({2}), 3, f32({1}), f64({1})); },
               "cross_entropy_backward: grad_logits [2, 2] should hold 6 elements");
  expect_error([&] { bwd(f32({2, 3}), f32({2, 3}), f32({2}), f32({2}), 3, f32({1}), f64({1})); },
               "cross_entropy_backward: targets has dtype float32, expected int64");
  expect_error([&] { bwd(f32({2, 3}), f32({2, 3}), f32({2}), i64({2}), 3, f64({1}), f64({1})); },
               "cross_entropy_backward: grad_loss has dtype float64, expected float32");
  expect_error([&] { bwd(f32({2, 3}), f32({2, 3}), f32({2}), i64({2}), 3, f32({1}), i64({1})); },
               "cross_entropy_backward: count has dtype int64, expected float64");
  const Tensor targets = Tensor::from_ints({1, 7}, {2});
  expect_error([&] { fwd(f32({1}), f64({1}), f32({2}), f32({2}), f32({2, 3}), targets, 3); },
               "cross_entropy: target 7 at row 1 is out of range [0, 3) and is not ignore_index (-100)");
}

TEST(BackendChecks, Indexing) {
  expect_error([] { cpu().index_select(v(f32({2, 2})), v(f32({3, 2})), v(i64({2})), 1, 4, 2, 2); },
               "index_select: input [3, 2] should hold 8 elements");
  expect_error([] { cpu().index_select(v(f32({2, 2})), v(f32({3, 2})), v(f32({2})), 1, 3, 2, 2); },
               "index_select: index has dtype float32, expected int64");
  expect_error([] { cpu().index_select(v(f64({2, 2})), v(f32({3, 2})), v(i64({2})), 1, 3, 2, 2); },
               "index_select: output has dtype float64, expected float32");
  expect_error([] { cpu().index_add(v(f32({3, 2})), v(f32({2, 3})), v(i64({2})), 1, 3, 2, 2); },
               "index_add: source [2, 3] should hold 4 elements");
  expect_error([] { cpu().index_add(v(f32({3, 2})), v(f64({2, 2})), v(i64({2})), 1, 3, 2, 2); },
               "index_add: source has dtype float64, expected float32");
  expect_error([] { cpu().gather(v(f32({2, 2})), v(f32({2, 3})), v(i64({3})), 2, 3, 2, 1); },
               "gather: index [3] is not a whole number of [2, 1] blocks");
  expect_error([] { cpu().gather(v(f32({2, 2})), v(f32({2, 3})), v(f32({2, 2})), 2, 3, 2, 1); },
               "gather: index has dtype float32, expected int64");
  expect_error([] { cpu().scatter_add(v(f32({2, 3})), v(f32({2, 3})), v(i64({2, 2})), 2, 3, 2, 1); },
               "scatter_add: source [2, 3] should hold 4 elements");
  expect_error([] { cpu().scatter_add(v(f32({2, 3})), v(f64({2, 2})), v(i64({2, 2})), 2, 3, 2, 1); },
               "scatter_add: source has dtype float64, expected float32");
}

TEST(BackendChecks, ClampCumsumGatherLerp) {
  expect_error([] { cpu().clamp(v(f64({2})), v(f32({2})), 0.0, 1.0); },
               "clamp: dtype mismatch, out float64 vs in float32");
  expect_error([] { cpu().clamp(v(f32({2})), v(f32({2})), 1.0, 0.0); },
               "clamp: lower bound 1 must not exceed the upper bound 0");
  expect_error([] { cpu().clamp_backward(v(f32({2})), v(f32({2})), v(f64({2})), 0.0, 1.0); },
               "clamp_backward: dtypes differ: grad_in float32, grad_out float32, x float64");
  expect_error([] { cpu().clamp_backward(v(f32({2})), v(f32({2})), v(f32({2})), 2.0, 1.0); },
               "clamp_backward: lower bound 2 must not exceed the upper bound 1");
  expect_error([] { cpu().cumsum(v(f32({2, 3})), v(f32({2, 4})), 2, 3, 1, false); },
               "cumsum: input [2, 4] should hold 6 elements");
  expect_error([] { cpu().cumsum(v(f64({2, 3})), v(f32({2, 3})), 2, 3, 1, true); },
               "cumsum: output has dtype float64, expected float32");
  expect_error([] { cpu().gather_lerp(v(f32({2, 2})), v(f32({2, 4})), v(f32({2, 2})), 2, 3, 2, 1); },
               "gather_lerp: input [2, 4] should hold 6 elements");
  expect_error([] { cpu().gather_lerp(v(f32({2, 2})), v(f32({2, 3})), v(f64({2, 2})), 2, 3, 2, 1); },
               "gather_lerp: positions has dtype float64, expected float32");
  expect_error(
      [] {
        cpu().gather_lerp_backward(v(f32({2, 4})), View(), v(f32({2, 2})), v(f32({2, 3})),
                                   v(f32({2, 2})), 2, 3, 2, 1);
      },
      "gather_lerp_backward: grad_in [2, 4] should hold 6 elements");
  expect_error(
      [] {
        cpu().gather_lerp_backward(View(), v(f64({2, 2})), v(f32({2, 2})), v(f32({2, 3})),
                                   v(f32({2, 2})), 2, 3, 2, 1);
      },
      "gather_lerp_backward: grad_pos has dtype float64, expected float32");
}

TEST(BackendChecks, RandomAndOptimizers) {
  expect_error([] { cpu().dropout_mask(v(f32({4})), 1.5, 1, 0); },
               "dropout_mask: probability must be in [0, 1], got 1.5");
  const Tensor t = transpose(f32({3, 2}), 0, 1);
  expect_error([&] { cpu().random_uniform(v(t), 0.0, 1.0, 1, 0); },
               "random_uniform: output must be contiguous");
  expect_error([&] { cpu().random_normal(v(t), 0.0, 1.0, 1, 0); },
               "random_normal: output must be contiguous");
  auto adamw = [](const Tensor& g, const Tensor& m, double bc1) {
    cpu().adamw_step(v(f32({4})), v(g), v(m), v(f32({4})), 1e-3, 0.9, 0.999, 1e-8, 0.0, bc1, 1.0);
  };
  expect_error([&] { adamw(f32({3}), f32({4}), 1.0); }, "adamw_step: grad [3] should hold 4 elements");
  expect_error([&] { adamw(f32({4}), f64({4}), 1.0); }, "adamw_step: state has dtype float64, expected float32");
  expect_error([&] { adamw(f32({4}), f32({4}), 0.0); },
               "adamw_step: bias corrections must be positive, got 0 and 1");
  auto sgd = [](const Tensor& g, const Tensor& buf, double momentum) {
    cpu().sgd_step(v(f32({4})), v(g), v(buf), 0.1, momentum, 0.0, 0.0, false, true);
  };
  expect_error([&] { sgd(f64({4}), f32({4}), 0.0); }, "sgd_step: grad has dtype float64, expected float32");
  expect_error([&] { sgd(f32({4}), f32({3}), 0.9); },
               "sgd_step: momentum_buffer [3] should hold 4 elements");
  EXPECT_NO_THROW(sgd(f32({4}), f32({3}), 0.0));  // no momentum: the buffer is not looked at
}

TEST(BackendChecks, RotatePairsAndAttention) {
  expect_error([] { cpu().rotate_pairs(v(f32({2, 4})), v(f32({2, 4})), v(f32({2, 2})), v(f32({2, 2})), 1, 2, 4, 3, false, false); },
               "rotate_pairs: 3 pairs do not fit rows of 4");
  expect_error([] { cpu().rotate_pairs(v(f32({2, 4})), v(f32({2, 4})), v(f64({2, 2})), v(f32({2, 2})), 1, 2, 4, 2, false, false); },
               "rotate_pairs: cos has dtype float64, expected float32");
  AttentionArgs a;
  a.q = v(f32({1, 2, 3, 4}));
  a.k = v(f32({1, 2, 5, 4}));
  a.v = v(f32({1, 2, 5, 4}));
  a.out = v(f32({1, 2, 3, 4}));
  a.stats = v(f32({2, 3, 2}));
  a.B = 1;
  a.H = 2;
  AttentionArgs bad = a;
  bad.v = v(f32({1, 2, 5, 3}));
  expect_error([&] { cpu().attention(bad); },
               "attention: expected q [1, 2, Lq, dh] and k = v [1, 2, Lk, dh]");
  bad = a;
  bad.stats = v(f32({2, 3}));
  expect_error([&] { cpu().attention(bad); }, "attention: stats [2, 3] must be contiguous [2, 3, 2]");
  // q, k, v, out may interleave the heads (token-major [B, L, H, dh] memory), not the dh axis
  const Tensor tok = f32({1, 5, 2, 4});
  bad = a;
  bad.k = v(tok);
  bad.k.shape = {1, 2, 5, 4};
  bad.k.strides = {40, 4, 8, 1};
  EXPECT_NO_THROW(cpu().attention(bad));
  bad.k.strides = {40, 20, 1, 5};
  expect_error([&] { cpu().attention(bad); },
               "attention: k [1, 2, 5, 4] must be a view of [B, H, L, dh] = [1, 2, 5, 4] with unit "
               "stride along dh");
  EXPECT_NO_THROW(cpu().attention(a));
  // the backward's prologue names it (the op name is the check's, not the caller's)
  bad = a;
  bad.v = v(f32({1, 2, 5, 3}));
  AttentionGrads g;
  g.q = v(f32({1, 2, 3, 4}));
  g.k = v(f32({1, 2, 5, 4}));
  g.v = v(f32({1, 2, 5, 4}));
  expect_error([&] { cpu().attention_backward(bad, v(f32({1, 2, 3, 4})), g); },
               "attention_backward: expected q [1, 2, Lq, dh] and k = v [1, 2, Lk, dh]");
}

// Each op's prologue (backend_checks.h: its name, its checks and which dtypes its kernels take) is
// one declaration used by the CPU and the CUDA backend alike, so its name and its dtype dispatch
// are tested here once, on every test device: a float-only kernel given Int64 operands (which its
// checks let through) fails in the shared dispatch naming the op; an op with kernels for every
// dtype runs on Int64 and names itself for a dtype outside the enum; the guarded steps' control
// checks name the guarded op. No kernel runs on a failing case, so no device data is read.
class OpPrologues : public pelab::testing::DeviceTest {
 protected:
  View z(const Shape& s, DType dt) const { return v(keep(Tensor::zeros(s, dt, device()))); }
  View i(const Shape& s) const { return z(s, DType::Int64); }
  // The views' tensors live as long as the test.
  const Tensor& keep(Tensor t) const { return kept_.emplace_back(std::move(t)); }
  mutable std::vector<Tensor> kept_;
};

TEST_P(OpPrologues, FloatOnlyKernelsNameTheirOpForInt64) {
  Backend& be = backend();
  const std::string not_float = ": expected a floating dtype, got int64";
  expect_error([&] { be.softmax(i({2, 3}), i({2, 3}), 2, 3, 1, false); }, "softmax" + not_float);
  expect_error([&] { be.softmax(i({2, 3}), i({2, 3}), 2, 3, 1, true); }, "log_softmax" + not_float);
  expect_error([&] { be.softmax_backward(i({2, 3}), i({2, 3}), i({2, 3}), 2, 3, 1, false); },
               "softmax_backward" + not_float);
  expect_error([&] { be.softmax_backward(i({2, 3}), i({2, 3}), i({2, 3}), 2, 3, 1, true); },
               "log_softmax_backward" + not_float);
  expect_error([&] { be.layer_norm(i({2, 3}), i({2}), i({2}), i({2, 3}), View(), View(), 2, 3, 1e-5); },
               "layer_norm" + not_float);
  expect_error(
      [&] {
        be.layer_norm_backward(i({2, 3}), View(), View(), i({2, 3}), i({2, 3}), i({2}), i({2}),
                               View(), 2, 3);
      },
      "layer_norm_backward" + not_float);
  const View count = z({1}, DType::Float64);
  expect_error(
      [&] { be.cross_entropy(i({1}), count, i({2}), i({2}), i({2, 3}), i({2}), 2, 3, -100, 0.0); },
      "cross_entropy" + not_float);
  expect_error(
      [&] {
        be.cross_entropy_backward(i({2, 3}), i({2, 3}), i({2}), i({2}), 2, 3, -100, 0.0, i({1}),
                                  count);
      },
      "cross_entropy_backward" + not_float);
  expect_error(
      [&] { be.rotate_pairs(i({2, 4}), i({2, 4}), i({2, 2}), i({2, 2}), 1, 2, 4, 2, false, false); },
      "rotate_pairs" + not_float);
  expect_error([&] { be.gather_lerp(i({2, 2}), i({2, 3}), i({2, 2}), 2, 3, 2, 1); },
               "gather_lerp" + not_float);
  expect_error(
      [&] { be.gather_lerp_backward(View(), View(), i({2, 2}), i({2, 3}), i({2, 2}), 2, 3, 2, 1); },
      "gather_lerp_backward" + not_float);
  expect_error([&] { be.dropout_mask(i({4}), 0.5, 1, 0); }, "dropout_mask" + not_float);
  expect_error([&] { be.random_uniform(i({4}), 0.0, 1.0, 1, 0); }, "random_uniform" + not_float);
  expect_error([&] { be.random_normal(i({4}), 0.0, 1.0, 1, 0); }, "random_normal" + not_float);
  expect_error(
      [&] { be.adamw_step(i({4}), i({4}), i({4}), i({4}), 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0, 1.0); },
      "adamw_step" + not_float);
  expect_error([&] { be.sgd_step(i({4}), i({4}), View(), 0.1, 0.0, 0.0, 0.0, false, true); },
               "sgd_step" + not_float);
  expect_error([&] { be.clamp(i({2}), i({2}), 0.0, 1.0); }, "clamp" + not_float);
  expect_error([&] { be.clamp_backward(i({2}), i({2}), i({2}), 0.0, 1.0); },
               "clamp_backward" + not_float);
  expect_error([&] { be.cumsum(i({2, 3}), i({2, 3}), 2, 3, 1, false); }, "cumsum" + not_float);
  expect_error([&] { be.sum_squares(i({3})); }, "sum_squares" + not_float);
}

TEST_P(OpPrologues, AnyDTypeKernelsRunOnInt64AndNameTheirOp) {
  Backend& be = backend();
  EXPECT_NO_THROW(be.index_select(i({2, 2}), i({2, 3}), i({2}), 2, 3, 2, 1));
  EXPECT_NO_THROW(be.gather(i({2, 2}), i({2, 3}), i({2, 2}), 2, 3, 2, 1));
  EXPECT_NO_THROW(be.index_add(i({2, 3}), i({2, 2}), i({2}), 2, 3, 2, 1));
  EXPECT_NO_THROW(be.scatter_add(i({2, 3}), i({2, 2}), i({2, 2}), 2, 3, 2, 1));
  EXPECT_NO_THROW(be.reduce(ReduceOp::Sum, i({2}), nullptr, i({2, 3}), 2, 3, 1));
  be.synchronize();
  // a dtype outside the enum (the checks compare dtypes, they do not enumerate them)
  const auto odd = [&](const Shape& s) {
    View w = z(s, DType::Float32);
    w.dtype = static_cast<DType>(7);
    return w;
  };
  expect_error([&] { be.index_select(odd({2, 2}), odd({2, 3}), i({2}), 2, 3, 2, 1); },
               "index_select: bad dtype 7");
  expect_error([&] { be.index_add(odd({2, 3}), odd({2, 2}), i({2}), 2, 3, 2, 1); },
               "index_add: bad dtype 7");
  expect_error([&] { be.gather(odd({2, 2}), odd({2, 3}), i({2, 2}), 2, 3, 2, 1); },
               "gather: bad dtype 7");
  expect_error([&] { be.scatter_add(odd({2, 3}), odd({2, 2}), i({2, 2}), 2, 3, 2, 1); },
               "scatter_add: bad dtype 7");
}

TEST_P(OpPrologues, GuardedStepsNameTheirOp) {
  Backend& be = backend();
  const View f32_control = z({3}, DType::Float32);
  expect_error([&] { be.adamw_step_guarded({}, 1e-3, 0.9, 0.999, 1e-8, 0.0, f32_control); },
               "adamw_step_guarded: control has dtype float32, expected float64");
  expect_error([&] { be.sgd_step_guarded({}, 0.1, 0.9, 0.0, 0.0, false, z({2}, DType::Float64)); },
               "sgd_step_guarded: control [2] should hold 3 elements");
}

PELAB_INSTANTIATE_DEVICE_TESTS(OpPrologues);
