// Tests of the CUDA backend (framework/src/cuda), all named Cuda*: CPU-vs-CUDA parity of every op
// driver case forward and backward (float32 within max(1e-5, case tolerance), float64 within 1e-12;
// gradients 10x, as in the op driver), direct kernel parity on shapes that take the two-pass and
// chunked paths, bit-identical dropout masks, determinism, index/target errors as pelab::Error, the
// caching allocator, full training steps of a small transformer for every PE scheme, and a checkpoint
// saved from a GPU model loaded on the CPU and back.
//
// Without a GPU (or in a build without CUDA) every test but CudaAvailability skips with
// "no CUDA device: CUDA parity tests skipped".
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "pelab/pelab.h"
#include "tests/op_driver.h"
#include "tests/pe_test_util.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#ifdef PELAB_WITH_CUDA
#include "cuda/cuda_backend.cuh"
#endif

using namespace pelab;
using pelab::testing::all_cases;
using pelab::testing::OpCase;

#define PELAB_REQUIRE_CUDA()                                              \
  do {                                                                    \
    if (!backend_available(DeviceType::CUDA))                             \
      GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";        \
  } while (0)

namespace {

using pelab::testing::Values;
using pelab::testing::case_inputs;
using pelab::testing::case_seed;
using pelab::testing::make_inputs;
using pelab::testing::scaled_error;
const Device kCuda = Device::cuda(0);
const Device kCpu = Device::cpu();


// EXPECTs that got (CUDA) matches ref (CPU) within tol (scaled error); `what` names the check.
void expect_close(const Values& ref, const Values& got, double tol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  size_t worst = 0;
  const double err = scaled_error(ref, got, &worst);
  EXPECT_LE(err, tol) << what << ": CUDA differs from CPU at flat index " << worst << ": "
                      << (got.empty() ? 0.0 : got[worst]) << " vs "
                      << (ref.empty() ? 0.0 : ref[worst]);
}

void expect_close(const Tensor& ref, const Tensor& got, double tol, const std::string& what) {
  ASSERT_EQ(ref.shape(), got.shape()) << what;
  ASSERT_EQ(ref.dtype(), got.dtype()) << what;
  expect_close(ref.to_vector(), got.to_vector(), tol, what);
}

// Identical values (same bits, so -0 != +0); any NaN matches any NaN (payloads may differ).
bool bit_equal(const Tensor& a, const Tensor& b) {
  const Values x = a.to_vector(), y = b.to_vector();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0) return false;
  }
  return true;
}

using pelab::testing::error_of;

// ---------------------------------------------------------------------------------------------
// Op-driver parity: every case of tests/op_driver.h, on CUDA vs CPU, same dtype and layout.


class CudaOpParity : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOpParity, ForwardAndBackwardMatchCpu) {
  PELAB_REQUIRE_CUDA();
  const OpCase& c = all_cases()[GetParam()];
  SCOPED_TRACE("op '" + c.op + "' case '" + c.label + "'");
  ASSERT_TRUE(c.fn);
  const std::vector<Values> raw = case_inputs(c);
  std::vector<bool> layouts{false};
  if (c.noncontig) layouts.push_back(true);
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double tol = dt == DType::Float32 ? std::max(1e-5, c.fwd_tol) : 1e-12;
    for (bool nc : layouts) {
      const std::string where = std::string(dtype_name(dt)) + (nc ? " non-contiguous" : " contiguous");
      SCOPED_TRACE(where);
      // ---- forward ----
      Tensor ref, got;
      {
        NoGradGuard ng;
        ref = c.fn(make_inputs(c, raw, dt, kCpu, nc, false));
        got = c.fn(make_inputs(c, raw, dt, kCuda, nc, false));
      }
      ASSERT_TRUE(ref.defined() && got.defined());
      EXPECT_EQ(got.device(), kCuda);
      if (!is_floating(ref.dtype())) {
        EXPECT_EQ(got.dtype(), ref.dtype());
        EXPECT_EQ(got.shape(), ref.shape());
        EXPECT_EQ(got.to_int_vector(), ref.to_int_vector()) << "integer output differs";
      } else {
        expect_close(ref, got, tol, "forward");
      }
      if (!c.grad) continue;
      // ---- backward with the same seeded output weights on both devices ----
      Generator wgen(case_seed(c) ^ 0x5bd1e995ULL);
      Values w(static_cast<size_t>(ref.numel()));
      for (double& x : w) x = wgen.normal();
      std::vector<Tensor> in_cpu = make_inputs(c, raw, dt, kCpu, nc, true);
      std::vector<Tensor> in_gpu = make_inputs(c, raw, dt, kCuda, nc, true);
      Tensor out_cpu = c.fn(in_cpu), out_gpu = c.fn(in_gpu);
      out_cpu.backward(Tensor::from_vector(w, ref.shape(), dt, kCpu));
      out_gpu.backward(Tensor::from_vector(w, ref.shape(), dt, kCuda));
      for (size_t i = 0; i < in_cpu.size(); ++i) {
        const Tensor gc = in_cpu[i].grad(), gg = in_gpu[i].grad();
        ASSERT_EQ(gc.defined(), gg.defined()) << "input " << i << ": gradient defined on one device only";
        if (!gc.defined()) continue;
        EXPECT_EQ(gg.device(), kCuda);
        expect_close(gc, gg, dt == DType::Float32 ? 10 * tol : 1e-11,
                     "gradient of input " + std::to_string(i) + " " + shape_str(c.shapes[i]));
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const auto& cases = all_cases();
  const OpCase& c = cases[info.param];
  int ordinal = 0;
  for (size_t i = 0; i < info.param; ++i) ordinal += cases[i].op == c.op;
  std::string name = c.op + "_" + std::to_string(ordinal);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(CudaParity, CudaOpParity, ::testing::Range<size_t>(0, all_cases().size()),
                         case_name);

// ---------------------------------------------------------------------------------------------
// Direct kernel parity (Backend calls on both devices).

Values randv(int64_t n, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Values v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(seed, static_cast<uint64_t>(i));
  return v;
}

// The same values on both devices.
struct Pair {
  Tensor cpu, gpu;
};
Pair pair_of(const Values& v, const Shape& s, DType dt) {
  Tensor c = Tensor::from_vector(v, s, dt, kCpu);
  return {c, c.to(kCuda)};
}
Pair pair_ints(const std::vector<int64_t>& v, const Shape& s) {
  Tensor c = Tensor::from_ints(v, s, kCpu);
  return {c, c.to(kCuda)};
}
Pair pair_empty(const Shape& s, DType dt) {
  return {Tensor::zeros(s, dt, kCpu), Tensor::zeros(s, dt, kCuda)};
}
View flat(const Tensor& t, const Shape& s) {
  View v = view_of(t);
  v.shape = s;
  v.strides = contiguous_strides(s);
  return v;
}

Backend& cpu_be() { return backend_for(kCpu); }
Backend& gpu_be() { return backend_for(kCuda); }

double f_tol(DType dt) { return dt == DType::Float32 ? 1e-5 : 1e-12; }

TEST(CudaKernels, ReductionsEveryPathAndFirstArgmax) {
  PELAB_REQUIRE_CUDA();
  // [outer, n, inner] shapes covering: thread per row, block per row, two-pass rows, columns in one
  // pass and in row blocks.
  const std::vector<std::array<int64_t, 3>> shapes = {
      {5, 7, 1}, {700, 300, 1}, {3, 100003, 1}, {600, 5, 130}, {2, 5000, 37}, {1, 20000, 3}};
  for (const auto& s : shapes) {
    const int64_t outer = s[0], n = s[1], inner = s[2];
    for (DType dt : {DType::Float32, DType::Float64, DType::Int64}) {
      SCOPED_TRACE(shape_str(Shape{outer, n, inner}) + " " + dtype_name(dt));
      Values v = randv(outer * n * inner, 11 + n);
      // quantised values create ties for the argmax; Int64 gets integers
      for (double& x : v) x = std::round(x * 4.0);
      Pair in = pair_of(v, {outer, n, inner}, dt);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Pair out = pair_empty({outer, inner}, dt);
        Pair arg = pair_empty({outer, inner}, DType::Int64);
        const bool want_arg = op == ReduceOp::Max;
        cpu_be().reduce(op, view_of(out.cpu), want_arg ? arg.cpu.raw_data() : nullptr,
                        view_of(in.cpu), outer, n, inner);
        gpu_be().reduce(op, view_of(out.gpu), want_arg ? arg.gpu.raw_data() : nullptr,
                        view_of(in.gpu), outer, n, inner);
        if (op == ReduceOp::Max || dt == DType::Int64) {
          EXPECT_TRUE(bit_equal(out.cpu, out.gpu)) << (op == ReduceOp::Max ? "max" : "int sum");
        } else {
          // both accumulate in double; float32 rounds once at the end
          expect_close(out.cpu, out.gpu, dt == DType::Float32 ? 1e-6 : 1e-13, "sum");
        }
        if (want_arg) {
          EXPECT_EQ(arg.cpu.to_int_vector(), arg.gpu.to_int_vector()) << "argmax (first on ties)";
        }
      }
    }
  }
  // NaN wins the max, first NaN index; -0 == +0 ties keep the first index.
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Values v(600, 1.0);
    v[7] = 5.0;
    v[300] = nan;
    v[450] = nan;
    v[599] = 5.0;
    Pair in = pair_of(v, {2, 300, 1}, dt);
    Pair out = pair_empty({2, 1}, dt), arg = pair_empty({2, 1}, DType::Int64);
    cpu_be().reduce(ReduceOp::Max, view_of(out.cpu), arg.cpu.raw_data(), view_of(in.cpu), 2, 300, 1);
    gpu_be().reduce(ReduceOp::Max, view_of(out.gpu), arg.gpu.raw_data(), view_of(in.gpu), 2, 300, 1);
    EXPECT_EQ(arg.gpu.to_int_vector(), (std::vector<int64_t>{7, 0}));
    EXPECT_EQ(arg.cpu.to_int_vector(), arg.gpu.to_int_vector());
    const Values g = out.gpu.to_vector();
    EXPECT_EQ(g[0], 5.0);
    EXPECT_TRUE(std::isnan(g[1]));
  }
}

TEST(CudaKernels, SumSquaresMatchesCpuAndIsDeterministic) {
  PELAB_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t n : {int64_t(1), int64_t(5000), int64_t(1234567)}) {
      Pair x = pair_of(randv(n, 5 + n), {n}, dt);
      const double c = cpu_be().sum_squares(view_of(x.cpu));
      const double g1 = gpu_be().sum_squares(view_of(x.gpu));
      const double g2 = gpu_be().sum_squares(view_of(x.gpu));
      EXPECT_EQ(g1, g2) << "sum_squares must be bit-identical run to run";
      EXPECT_NEAR(g1, c, 1e-12 * std::max(1.0, c)) << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaKernels, GemmTransposesBatchStridesSharedOperandsAndBeta) {
  PELAB_REQUIRE_CUDA();
  const int64_t M = 37, N = 29, K = 45, batch = 3;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int mode = 0; mode < 4; ++mode) {
          // mode 0: all batched; 1: A shared; 2: B shared; 3: C shared (accumulates in order)
          SCOPED_TRACE(std::string(dtype_name(dt)) + " transA=" + std::to_string(ta) +
                       " transB=" + std::to_string(tb) + " mode=" + std::to_string(mode));
          const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
          const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
          const int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = N + 2;  // padded rows
          const int64_t sA = mode == 1 ? 0 : a_rows * lda, sB = mode == 2 ? 0 : b_rows * ldb;
          const int64_t sC = mode == 3 ? 0 : M * ldc;
          const int64_t nA = (mode == 1 ? 1 : batch) * a_rows * lda;
          const int64_t nB = (mode == 2 ? 1 : batch) * b_rows * ldb;
          const int64_t nC = (mode == 3 ? 1 : batch) * M * ldc;
          Pair A = pair_of(randv(nA, 1), {nA}, dt), B = pair_of(randv(nB, 2), {nB}, dt);
          Pair C = pair_of(randv(nC, 3), {nC}, dt);
          const double beta = mode == 3 ? 1.0 : 0.5;
          cpu_be().gemm(dt, ta, tb, M, N, K, 0.75, A.cpu.raw_data(), lda, sA, B.cpu.raw_data(), ldb,
                        sB, beta, C.cpu.raw_data(), ldc, sC, batch);
          gpu_be().gemm(dt, ta, tb, M, N, K, 0.75, A.gpu.raw_data(), lda, sA, B.gpu.raw_data(), ldb,
                        sB, beta, C.gpu.raw_data(), ldc, sC, batch);
          expect_close(C.cpu, C.gpu, f_tol(dt), "gemm");
        }
      }
    }
    // K == 0 and alpha == 0 scale C by beta (beta == 0 overwrites NaN).
    for (double beta : {0.0, 2.0}) {
      Values cv = randv(12, 4);
      cv[5] = std::numeric_limits<double>::quiet_NaN();
      Pair C = pair_of(cv, {12}, dt), A = pair_of(randv(12, 5), {12}, dt);
      cpu_be().gemm(dt, false, false, 3, 4, 0, 1.0, A.cpu.raw_data(), 1, 0, A.cpu.raw_data(), 4, 0,
                    beta, C.cpu.raw_data(), 4, 12, 1);
      gpu_be().gemm(dt, false, false, 3, 4, 0, 1.0, A.gpu.raw_data(), 1, 0, A.gpu.raw_data(), 4, 0,
                    beta, C.gpu.raw_data(), 4, 12, 1);
      EXPECT_TRUE(bit_equal(C.cpu, C.gpu)) << "K=0 beta=" << beta;
      Pair D = pair_of(cv, {12}, dt);
      cpu_be().gemm(dt, false, false, 3, 4, 3, 0.0, A.cpu.raw_data(), 3, 0, A.cpu.raw_data(), 4, 0,
                    beta, D.cpu.raw_data(), 4, 12, 1);
      gpu_be().gemm(dt, false, false, 3, 4, 3, 0.0, A.gpu.raw_data(), 3, 0, A.gpu.raw_data(), 4, 0,
                    beta, D.gpu.raw_data(), 4, 12, 1);
      EXPECT_TRUE(bit_equal(D.cpu, D.gpu)) << "alpha=0 beta=" << beta;
    }
  }
  // A float32 product with long K stays within 1e-5 relative of the CPU (no TF32).
  const int64_t KK = 4096;
  Pair A = pair_of(randv(64 * KK, 6), {64, KK}, DType::Float32);
  Pair B = pair_of(randv(KK * 64, 7), {KK, 64}, DType::Float32);
  expect_close(matmul(A.cpu, B.cpu), matmul(A.gpu, B.gpu), 1e-5, "float32 K=4096 (TF32 would fail)");
}

TEST(CudaKernels, FusedSoftmaxLayerNormCrossEntropyLargeRows) {
  PELAB_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = f_tol(dt);
    // softmax / log_softmax rows (n > 256: several elements per thread) and the inner layout
    for (const auto& s : std::vector<std::array<int64_t, 3>>{{300, 1000, 1}, {7, 300, 33}}) {
      const int64_t outer = s[0], n = s[1], inner = s[2], total = outer * n * inner;
      Pair x = pair_of(randv(total, 21, -6, 6), {total}, dt);
      Pair g = pair_of(randv(total, 22), {total}, dt);
      for (bool log : {false, true}) {
        Pair y = pair_empty({total}, dt), gi = pair_empty({total}, dt);
        cpu_be().softmax(view_of(y.cpu), view_of(x.cpu), outer, n, inner, log);
        gpu_be().softmax(view_of(y.gpu), view_of(x.gpu), outer, n, inner, log);
        expect_close(y.cpu, y.gpu, tol, log ? "log_softmax" : "softmax");
        cpu_be().softmax_backward(view_of(gi.cpu), view_of(g.cpu), view_of(y.cpu), outer, n, inner,
                                  log);
        gpu_be().softmax_backward(view_of(gi.gpu), view_of(g.gpu), view_of(y.gpu), outer, n, inner,
                                  log);
        expect_close(gi.cpu, gi.gpu, tol, log ? "log_softmax_backward" : "softmax_backward");
      }
    }
    // layer norm with and without affine, rows of 700 (> 256 per block)
    const int64_t rows = 300, n = 700;
    Pair x = pair_of(randv(rows * n, 31, -3, 5), {rows, n}, dt);
    Pair w = pair_of(randv(n, 32), {n}, dt), b = pair_of(randv(n, 33), {n}, dt);
    Pair gy = pair_of(randv(rows * n, 34), {rows, n}, dt);
    for (bool affine : {true, false}) {
      Pair y = pair_empty({rows, n}, dt), mean = pair_empty({rows}, dt), rstd = pair_empty({rows}, dt);
      View none;
      cpu_be().layer_norm(view_of(y.cpu), view_of(mean.cpu), view_of(rstd.cpu), view_of(x.cpu),
                          affine ? view_of(w.cpu) : none, affine ? view_of(b.cpu) : none, rows, n,
                          1e-5);
      gpu_be().layer_norm(view_of(y.gpu), view_of(mean.gpu), view_of(rstd.gpu), view_of(x.gpu),
                          affine ? view_of(w.gpu) : none, affine ? view_of(b.gpu) : none, rows, n,
                          1e-5);
      expect_close(y.cpu, y.gpu, tol, "layer_norm y");
      expect_close(mean.cpu, mean.gpu, tol, "layer_norm mean");
      expect_close(rstd.cpu, rstd.gpu, tol, "layer_norm rstd");
      Pair gx = pair_empty({rows, n}, dt), gw = pair_empty({n}, dt), gb = pair_empty({n}, dt);
      cpu_be().layer_norm_backward(view_of(gx.cpu), view_of(gw.cpu), view_of(gb.cpu),
                                   view_of(gy.cpu), view_of(x.cpu), view_of(mean.cpu),
                                   view_of(rstd.cpu), affine ? view_of(w.cpu) : none, rows, n);
      gpu_be().layer_norm_backward(view_of(gx.gpu), view_of(gw.gpu), view_of(gb.gpu),
                                   view_of(gy.gpu), view_of(x.gpu), view_of(mean.gpu),
                                   view_of(rstd.gpu), affine ? view_of(w.gpu) : none, rows, n);
      expect_close(gx.cpu, gx.gpu, 10 * tol, "layer_norm grad_x");
      expect_close(gw.cpu, gw.gpu, 10 * tol, "layer_norm grad_weight");
      expect_close(gb.cpu, gb.gpu, 10 * tol, "layer_norm grad_bias");
      // deterministic parameter gradients
      Pair gw2 = pair_empty({n}, dt);
      View nogx;
      gpu_be().layer_norm_backward(nogx, view_of(gw2.gpu), View(), view_of(gy.gpu), view_of(x.gpu),
                                   view_of(mean.gpu), view_of(rstd.gpu),
                                   affine ? view_of(w.gpu) : none, rows, n);
      EXPECT_TRUE(bit_equal(gw.gpu, gw2.gpu)) << "grad_weight must be bit-identical run to run";
    }
    // cross-entropy: 1000 classes, label smoothing, ignored rows
    const int64_t R = 37, C = 1000;
    std::vector<int64_t> t(R);
    for (int64_t r = 0; r < R; ++r) t[r] = r % 5 == 2 ? -100 : (r * 131) % C;
    Pair tg = pair_ints(t, {R});
    Pair logits = pair_of(randv(R * C, 41, -5, 5), {R, C}, dt);
    for (double smoothing : {0.0, 0.1}) {
      Pair loss = pair_empty({R}, dt), lse = pair_empty({R}, dt), grad = pair_empty({R, C}, dt);
      cpu_be().cross_entropy(view_of(loss.cpu), view_of(lse.cpu), view_of(logits.cpu),
                             view_of(tg.cpu), R, C, -100, smoothing);
      gpu_be().cross_entropy(view_of(loss.gpu), view_of(lse.gpu), view_of(logits.gpu),
                             view_of(tg.gpu), R, C, -100, smoothing);
      expect_close(loss.cpu, loss.gpu, tol, "cross_entropy loss rows");
      expect_close(lse.cpu, lse.gpu, tol, "cross_entropy lse");
      cpu_be().cross_entropy_backward(view_of(grad.cpu), view_of(logits.cpu), view_of(lse.cpu),
                                      view_of(tg.cpu), R, C, -100, smoothing, 0.37);
      gpu_be().cross_entropy_backward(view_of(grad.gpu), view_of(logits.gpu), view_of(lse.gpu),
                                      view_of(tg.gpu), R, C, -100, smoothing, 0.37);
      expect_close(grad.cpu, grad.gpu, tol, "cross_entropy_backward");
    }
  }
}

TEST(CudaKernels, IndexOpsMatchCpuAndAccumulateDeterministically) {
  PELAB_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::Int64 ? 0.0 : f_tol(dt);
    auto ints_or = [&](Values v) {
      if (dt == DType::Int64)
        for (double& x : v) x = std::round(x * 10);
      return v;
    };
    // index_select / index_add with many duplicate indices: [outer, n_in, inner] with
    // (outer, inner, n_idx) covering the single-pass and the chunked (two-pass) accumulation.
    for (const auto& s : std::vector<std::array<int64_t, 4>>{{3, 7, 50, 5}, {1, 7, 5000, 64},
                                                             {2, 11, 3000, 1}}) {
      const int64_t outer = s[0], n_in = s[1], n_idx = s[2], inner = s[3];
      std::vector<int64_t> ix(n_idx);
      for (int64_t j = 0; j < n_idx; ++j) ix[j] = (j * 7 + j / 3) % n_in;
      Pair idx = pair_ints(ix, {n_idx});
      Pair in = pair_of(ints_or(randv(outer * n_in * inner, 51)), {outer * n_in * inner}, dt);
      Pair sel = pair_empty({outer * n_idx * inner}, dt);
      cpu_be().index_select(view_of(sel.cpu), view_of(in.cpu), view_of(idx.cpu), outer, n_in, n_idx,
                            inner);
      gpu_be().index_select(view_of(sel.gpu), view_of(in.gpu), view_of(idx.gpu), outer, n_in, n_idx,
                            inner);
      EXPECT_TRUE(bit_equal(sel.cpu, sel.gpu)) << "index_select";
      Pair src = pair_of(ints_or(randv(outer * n_idx * inner, 52)), {outer * n_idx * inner}, dt);
      Pair acc = pair_of(ints_or(randv(outer * n_in * inner, 53)), {outer * n_in * inner}, dt);
      Tensor acc2 = acc.gpu.clone();
      cpu_be().index_add(view_of(acc.cpu), view_of(src.cpu), view_of(idx.cpu), outer, n_in, n_idx,
                         inner);
      gpu_be().index_add(view_of(acc.gpu), view_of(src.gpu), view_of(idx.gpu), outer, n_in, n_idx,
                         inner);
      gpu_be().index_add(view_of(acc2), view_of(src.gpu), view_of(idx.gpu), outer, n_in, n_idx,
                         inner);
      expect_close(acc.cpu, acc.gpu, tol * std::sqrt(double(n_idx)), "index_add");
      EXPECT_TRUE(bit_equal(acc.gpu, acc2)) << "index_add must be bit-identical run to run";
    }
    // gather / scatter_add: idx [outer, n_idx, inner]
    for (const auto& s : std::vector<std::array<int64_t, 4>>{{4, 6, 9, 3}, {40, 33, 3000, 1},
                                                             {2, 5, 700, 20}}) {
      const int64_t outer = s[0], n_in = s[1], n_idx = s[2], inner = s[3];
      const int64_t total = outer * n_idx * inner;
      std::vector<int64_t> ix(total);
      for (int64_t k = 0; k < total; ++k) ix[k] = (k * 5 + k / 7) % n_in;
      Pair idx = pair_ints(ix, {total});
      Pair in = pair_of(ints_or(randv(outer * n_in * inner, 61)), {outer * n_in * inner}, dt);
      Pair out = pair_empty({total}, dt);
      cpu_be().gather(view_of(out.cpu), view_of(in.cpu), view_of(idx.cpu), outer, n_in, n_idx, inner);
      gpu_be().gather(view_of(out.gpu), view_of(in.gpu), view_of(idx.gpu), outer, n_in, n_idx, inner);
      EXPECT_TRUE(bit_equal(out.cpu, out.gpu)) << "gather";
      Pair src = pair_of(ints_or(randv(total, 62)), {total}, dt);
      Pair acc = pair_of(ints_or(randv(outer * n_in * inner, 63)), {outer * n_in * inner}, dt);
      Tensor acc2 = acc.gpu.clone();
      cpu_be().scatter_add(view_of(acc.cpu), view_of(src.cpu), view_of(idx.cpu), outer, n_in, n_idx,
                           inner);
      gpu_be().scatter_add(view_of(acc.gpu), view_of(src.gpu), view_of(idx.gpu), outer, n_in, n_idx,
                           inner);
      gpu_be().scatter_add(view_of(acc2), view_of(src.gpu), view_of(idx.gpu), outer, n_in, n_idx,
                           inner);
      expect_close(acc.cpu, acc.gpu, tol * std::sqrt(double(n_idx)), "scatter_add");
      EXPECT_TRUE(bit_equal(acc.gpu, acc2)) << "scatter_add must be bit-identical run to run";
    }
  }
}

TEST(CudaKernels, IndexAndTargetErrorsBecomePelabErrors) {
  PELAB_REQUIRE_CUDA();
  Pair in = pair_of(randv(15, 71), {15}, DType::Float32);
  Pair idx = pair_ints({0, 4, 9, 1}, {4});
  Pair out = pair_empty({12}, DType::Float32);
  // Backend level: the device error record surfaces at the next synchronisation point.
  std::string msg = error_of([&] {
    gpu_be().index_select(view_of(out.gpu), view_of(in.gpu), view_of(idx.gpu), 1, 5, 4, 3);
    gpu_be().synchronize();
  });
  EXPECT_NE(msg.find("index_select"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 9 at position 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
  // The record is reset once reported.
  EXPECT_EQ(error_of([&] { gpu_be().synchronize(); }), "");
  // scatter_add: reported at the next read of any tensor
  Pair acc = pair_empty({2, 3}, DType::Float64);
  Pair src = pair_of({1, 2, 3, 4}, {4}, DType::Float64);
  Pair sidx = pair_ints({0, 2, -1, 1}, {4});
  msg = error_of([&] {
    gpu_be().scatter_add(view_of(acc.gpu), view_of(src.gpu), view_of(sidx.gpu), 2, 3, 2, 1);
    (void)acc.gpu.to_vector();
  });
  EXPECT_NE(msg.find("scatter_add: index -1 at position 2"), std::string::npos) << msg;
#ifdef PELAB_WITH_CUDA
  // With sync checks on, the kernel call itself throws.
  CudaBackend::set_sync_checks(true);
  msg = error_of([&] {
    gpu_be().gather(view_of(out.gpu), view_of(in.gpu), view_of(pair_ints(std::vector<int64_t>(12, 5), {12}).gpu),
                    1, 5, 4, 3);
  });
  CudaBackend::set_sync_checks(false);
  EXPECT_NE(msg.find("gather: index 5 at position "), std::string::npos) << msg;
#endif
  // Ops level: indices and targets are validated before any kernel runs.
  Tensor table = Tensor::ones({5, 3}, DType::Float32, kCuda);
  msg = error_of([&] { index_select(table, 0, Tensor::from_ints({1, 7}, {2}, kCuda)); });
  EXPECT_NE(msg.find("index_select"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;
  Tensor logits = Tensor::zeros({3, 4}, DType::Float32, kCuda);
  msg = error_of([&] { cross_entropy(logits, Tensor::from_ints({0, 4, 1}, {3}, kCuda)); });
  EXPECT_NE(msg.find("cross_entropy: target 4"), std::string::npos) << msg;
  // Backend level: the fused kernel checks its targets on the host before launching.
  Pair loss = pair_empty({3}, DType::Float32), lse = pair_empty({3}, DType::Float32);
  Pair bad = pair_ints({0, 40, 1}, {3});
  msg = error_of([&] {
    gpu_be().cross_entropy(view_of(loss.gpu), view_of(lse.gpu), flat(logits, {3, 4}),
                           view_of(bad.gpu), 3, 4, -100, 0.0);
  });
  EXPECT_NE(msg.find("target 40 at row 1 is out of range [0, 4)"), std::string::npos) << msg;
}

TEST(CudaKernels, ElementwiseStridedBroadcastAndHighRank) {
  PELAB_REQUIRE_CUDA();
  // A rank-10 non-mergeable view (more than 8 collapsed dims: the launcher loops) and broadcasts.
  Shape big(10, 2);
  Values v = randv(shape_numel(big), 81);
  for (DType dt : {DType::Float32, DType::Float64}) {
    Pair a = pair_of(v, big, dt);
    std::vector<int64_t> perm = {9, 0, 8, 1, 7, 2, 6, 3, 5, 4};
    Tensor pc = permute(a.cpu, perm).contiguous(), pg = permute(a.gpu, perm).contiguous();
    EXPECT_TRUE(bit_equal(pc, pg)) << "rank-10 permuted copy";
    Pair b = pair_of(randv(2 * 2, 82), {2, 1, 1, 1, 1, 1, 1, 1, 1, 2}, dt);
    expect_close(permute(a.cpu, perm) * b.cpu, permute(a.gpu, perm) * b.gpu, 0.0, "rank-10 mul");
    // dtype conversions through copy
    Tensor i64 = Tensor::from_vector({-2.7, 3.9, 0.2}, {3}, DType::Float64, kCuda).to(DType::Int64);
    EXPECT_EQ(i64.to_int_vector(), (std::vector<int64_t>{-2, 3, 0}));
    Tensor back = i64.to(dt);
    EXPECT_EQ(back.to_vector(), (Values{-2, 3, 0}));
  }
  // Every unary op on both devices, float32 and float64.
  const UnaryOp all[] = {UnaryOp::Neg,       UnaryOp::Exp,       UnaryOp::Log,
                         UnaryOp::Sqrt,      UnaryOp::Rsqrt,     UnaryOp::Tanh,
                         UnaryOp::Relu,      UnaryOp::Gelu,      UnaryOp::GeluTanh,
                         UnaryOp::Sin,       UnaryOp::Cos,       UnaryOp::Abs,
                         UnaryOp::Sigmoid,   UnaryOp::AddScalar, UnaryOp::MulScalar,
                         UnaryOp::PowScalar, UnaryOp::RDivScalar, UnaryOp::Step};
  for (DType dt : {DType::Float32, DType::Float64}) {
    Pair x = pair_of(randv(999, 83, 0.1, 4.0), {999}, dt);
    for (UnaryOp op : all) {
      for (double alpha : {1.5, 2.0, -1.0}) {
        Pair y = pair_empty({999}, dt);
        cpu_be().unary(op, view_of(y.cpu), view_of(x.cpu), alpha);
        gpu_be().unary(op, view_of(y.gpu), view_of(x.gpu), alpha);
        expect_close(y.cpu, y.gpu, f_tol(dt),
                     "unary op " + std::to_string(static_cast<int>(op)) + " alpha " +
                         std::to_string(alpha));
      }
    }
  }
}

TEST(CudaKernels, RandomFillsAndDropoutMatchCpu) {
  PELAB_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const int64_t n = 100003;
    for (double p : {0.0, 0.1, 0.5, 1.0}) {
      Pair m = pair_empty({n}, dt);
      cpu_be().dropout_mask(view_of(m.cpu), p, 1234, 77);
      gpu_be().dropout_mask(view_of(m.gpu), p, 1234, 77);
      EXPECT_TRUE(bit_equal(m.cpu, m.gpu)) << "dropout mask p=" << p << " " << dtype_name(dt);
    }
    Pair u = pair_empty({n}, dt), g = pair_empty({n}, dt);
    cpu_be().random_uniform(view_of(u.cpu), -0.5, 2.0, 99, 5);
    gpu_be().random_uniform(view_of(u.gpu), -0.5, 2.0, 99, 5);
    expect_close(u.cpu, u.gpu, dt == DType::Float32 ? 3e-7 : 1e-15, "random_uniform");
    cpu_be().random_normal(view_of(g.cpu), 0.3, 1.7, 99, 5);
    gpu_be().random_normal(view_of(g.gpu), 0.3, 1.7, 99, 5);
    expect_close(g.cpu, g.gpu, dt == DType::Float32 ? 1e-6 : 1e-13, "random_normal");
  }
  // The dropout op draws the same mask on both devices.
  Generator gc(5), gg(5);
  Tensor x = Tensor::ones({64, 33}, DType::Float32);
  Tensor dc = dropout(x, 0.3, true, gc), dg = dropout(x.to(kCuda), 0.3, true, gg);
  EXPECT_TRUE(bit_equal(dc, dg));
  EXPECT_EQ(gc.offset(), gg.offset());
}

TEST(CudaKernels, OptimizerStepsMatchCpu) {
  PELAB_REQUIRE_CUDA();
  const int64_t n = 10007;
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    Pair p = pair_of(randv(n, 91), {n}, dt), g = pair_of(randv(n, 92), {n}, dt);
    Pair m = pair_of(randv(n, 93), {n}, dt), v = pair_of(randv(n, 94, 0.0, 1.0), {n}, dt);
    cpu_be().adamw_step(view_of(p.cpu), view_of(g.cpu), view_of(m.cpu), view_of(v.cpu), 1e-2, 0.9,
                        0.999, 1e-8, 0.01, 0.19, 0.0029);
    gpu_be().adamw_step(view_of(p.gpu), view_of(g.gpu), view_of(m.gpu), view_of(v.gpu), 1e-2, 0.9,
                        0.999, 1e-8, 0.01, 0.19, 0.0029);
    expect_close(p.cpu, p.gpu, f_tol(dt), "adamw param");
    expect_close(m.cpu, m.gpu, f_tol(dt), "adamw exp_avg");
    expect_close(v.cpu, v.gpu, f_tol(dt), "adamw exp_avg_sq");
    for (int variant = 0; variant < 4; ++variant) {
      const bool nesterov = variant & 1, first = variant & 2;
      Pair buf = pair_of(randv(n, 95), {n}, dt);
      cpu_be().sgd_step(view_of(p.cpu), view_of(g.cpu), view_of(buf.cpu), 0.1, 0.9, 0.1, 1e-3,
                        nesterov, first);
      gpu_be().sgd_step(view_of(p.gpu), view_of(g.gpu), view_of(buf.gpu), 0.1, 0.9, 0.1, 1e-3,
                        nesterov, first);
      expect_close(p.cpu, p.gpu, f_tol(dt), "sgd param");
      expect_close(buf.cpu, buf.gpu, f_tol(dt), "sgd momentum buffer");
    }
    cpu_be().sgd_step(view_of(p.cpu), view_of(g.cpu), View(), 0.1, 0.0, 0.0, 0.0, false, false);
    gpu_be().sgd_step(view_of(p.gpu), view_of(g.gpu), View(), 0.1, 0.0, 0.0, 0.0, false, false);
    expect_close(p.cpu, p.gpu, f_tol(dt), "plain sgd");
  }
}

TEST(CudaKernels, CachingAllocatorReusesBlocksAndEmptyCacheFreesThem) {
  PELAB_REQUIRE_CUDA();
#ifdef PELAB_WITH_CUDA
  Backend& be = gpu_be();
  be.empty_cache();
  EXPECT_EQ(CudaBackend::cached_bytes(), 0u);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::Float32, kCuda);  // 4 MiB
    first = t.raw_data();
  }
  const size_t cached = CudaBackend::cached_bytes();
  EXPECT_GE(cached, size_t(4) << 20) << "a freed block is kept for reuse";
  void* second = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::Float32, kCuda);
    EXPECT_EQ(t.raw_data(), first) << "the same-size request reuses the cached block";
    EXPECT_EQ(CudaBackend::cached_bytes(), cached - (size_t(4) << 20));
    Tensor u = Tensor::empty({(1 << 20) - 100}, DType::Float32, kCuda);  // same bucket, new block
    second = u.raw_data();
    EXPECT_NE(second, first);
  }
  {
    // a slightly smaller request is served from the same size bucket
    Tensor v = Tensor::empty({(1 << 20) - 1000}, DType::Float32, kCuda);
    EXPECT_TRUE(v.raw_data() == first || v.raw_data() == second);
  }
  EXPECT_GE(CudaBackend::cached_bytes(), size_t(8) << 20);
  be.empty_cache();
  EXPECT_EQ(CudaBackend::cached_bytes(), 0u);
  EXPECT_NE(CudaBackend::device_name().find("sm_"), std::string::npos);
#endif
}

// ---------------------------------------------------------------------------------------------
// Training steps of a small transformer for every scheme, CPU vs CUDA.

models::ModelConfig small_model(const std::string& arch, const std::string& scheme,
                                const std::string& dtype) {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab = 13;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.dropout = 0.1;  // identical masks on both devices (counter-based RNG)
  c.dtype = dtype;
  c.init_std = 0.1;
  c.seed = 3;
  c.pe = pelab::testing::small_pe(scheme);
  return c;
}

struct Batch {
  Tensor src, src_mask, tgt_in, tgt_mask, tgt_out;
  Batch to(Device d) const {
    return {src.to(d), src_mask.to(d), tgt_in.to(d), tgt_mask.to(d), tgt_out.to(d)};
  }
};

Batch make_batch(int64_t vocab) {
  Generator gen(17);
  auto ids = [&](int64_t B, int64_t L) {
    std::vector<int64_t> v(static_cast<size_t>(B * L));
    for (auto& x : v) x = 3 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(vocab - 3)));
    return v;
  };
  const int64_t B = 3, S = 7, T = 6;
  Batch b;
  b.src = Tensor::from_ints(ids(B, S), {B, S});
  std::vector<double> sm(B * S, 1.0);
  sm[S - 1] = sm[S - 2] = 0.0;  // row 0 padded at the end
  b.src_mask = Tensor::from_vector(sm, {B, S});
  b.tgt_in = Tensor::from_ints(ids(B, T), {B, T});
  std::vector<double> tm(B * T, 1.0);
  tm[2 * T - 1] = 0.0;
  b.tgt_mask = Tensor::from_vector(tm, {B, T});
  std::vector<int64_t> out = ids(B, T);
  out[2 * T - 1] = -100;  // ignored
  b.tgt_out = Tensor::from_ints(out, {B, T});
  return b;
}

Tensor loss_of(models::Transformer& m, const Batch& b) {
  Tensor logits = m.is_seq2seq() ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                 : m.forward_decoder(b.tgt_in, b.tgt_mask);
  return cross_entropy(logits, b.tgt_out, -100, 0.1);
}

TEST(CudaTraining, StepsMatchCpuForEverySchemeAndArch) {
  PELAB_REQUIRE_CUDA();
  const std::vector<std::string> schemes = models::pe_names();
  ASSERT_FALSE(schemes.empty());
  for (const auto& scheme : schemes) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      for (const std::string dtype : {"float32", "float64"}) {
        SCOPED_TRACE(scheme + " " + arch + " " + dtype);
        const bool f64 = dtype == "float64";
        const models::ModelConfig cfg = small_model(arch, scheme, dtype);
        models::Transformer mc(cfg), mg(cfg);
        mg.to(kCuda);
        for (const auto& nt : mg.named_parameters()) ASSERT_EQ(nt.second.device(), kCuda) << nt.first;
        const Batch bc = make_batch(cfg.vocab), bg = bc.to(kCuda);
        AdamW oc(mc.parameters(), 3e-3), og(mg.parameters(), 3e-3);
        const auto pc = mc.named_parameters(), pg = mg.named_parameters();
        for (int step = 0; step < 3; ++step) {
          oc.zero_grad();
          og.zero_grad();
          Tensor lc = loss_of(mc, bc), lg = loss_of(mg, bg);
          EXPECT_EQ(lg.device(), kCuda);
          const double vc = lc.item(), vg = lg.item();
          EXPECT_NEAR(vg, vc, (f64 ? 1e-11 : 2e-5) * std::max(1.0, std::fabs(vc)))
              << "loss at step " << step;
          lc.backward();
          lg.backward();
          if (step == 0) {
            for (size_t i = 0; i < pc.size(); ++i) {
              const Tensor gc = pc[i].second.grad(), gg = pg[i].second.grad();
              ASSERT_EQ(gc.defined(), gg.defined()) << pc[i].first;
              if (gc.defined())
                expect_close(gc, gg, f64 ? 1e-10 : 1e-4, "gradient of " + pc[i].first);
            }
          }
          const double nc = clip_grad_norm(mc.parameters(), 1.0);
          const double ng = clip_grad_norm(mg.parameters(), 1.0);
          EXPECT_NEAR(ng, nc, (f64 ? 1e-10 : 1e-4) * std::max(1.0, nc)) << "grad norm";
          oc.step();
          og.step();
        }
        // float64: the parameters after three AdamW steps agree tightly. (float32 Adam updates of
        // near-zero gradients amplify rounding noise, so only losses and gradients are compared.)
        if (f64)
          for (size_t i = 0; i < pc.size(); ++i)
            expect_close(pc[i].second, pg[i].second, 1e-9, "parameter " + pc[i].first);
        EXPECT_EQ(mc.rng().offset(), mg.rng().offset()) << "dropout consumed the same counters";
      }
    }
  }
}

TEST(CudaTraining, RepeatedStepsAreBitIdentical) {
  PELAB_REQUIRE_CUDA();
  for (const std::string scheme : {"shaw", "t5", "rope"}) {
    std::vector<Tensor> grads[2];
    for (int run = 0; run < 2; ++run) {
      models::Transformer m(small_model("seq2seq", scheme, "float32"));
      m.to(kCuda);
      const Batch b = make_batch(13).to(kCuda);
      Tensor loss = loss_of(m, b);
      loss.backward();
      for (const Tensor& p : m.parameters()) grads[run].push_back(p.grad());
    }
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_TRUE(bit_equal(grads[0][i], grads[1][i])) << scheme << " parameter " << i;
  }
}

// ---------------------------------------------------------------------------------------------

TEST(CudaCheckpoint, GpuCheckpointLoadsOnCpuAndBack) {
  PELAB_REQUIRE_CUDA();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pelab_cuda_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "gpu.h5").string();

  const models::ModelConfig cfg = small_model("seq2seq", "rope", "float32");
  models::Transformer gpu(cfg);
  gpu.to(kCuda);
  const Batch b = make_batch(cfg.vocab);
  AdamW opt(gpu.parameters(), 1e-2);
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    loss_of(gpu, b.to(kCuda)).backward();
    opt.step();
  }
  CheckpointData d;
  d.step = 2;
  d.scheme = "rope";
  d.arch = "seq2seq";
  capture_parameters(gpu, d);
  capture_optimizer(opt, "adamw", d);
  save_checkpoint(path, d);

  const CheckpointData loaded = load_checkpoint(path);
  models::Transformer cpu(cfg);
  load_parameters(cpu, loaded, path);
  const auto pg = gpu.named_parameters(), pc = cpu.named_parameters();
  ASSERT_EQ(pg.size(), pc.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pc[i].second.device(), kCpu);
    EXPECT_TRUE(bit_equal(pg[i].second, pc[i].second)) << pg[i].first;
  }
  // ... and back onto the GPU, with the optimizer state.
  models::Transformer gpu2(cfg);
  gpu2.to(kCuda);
  load_parameters(gpu2, loaded, path);
  AdamW opt2(gpu2.parameters(), 1e-2);
  restore_optimizer(opt2, loaded, path);
  const auto pg2 = gpu2.named_parameters();
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg2[i].second.device(), kCuda);
    EXPECT_TRUE(bit_equal(pg[i].second, pg2[i].second)) << pg[i].first;
  }
  EXPECT_EQ(opt2.step_count(), opt.step_count());
  // The next step is the same on the original and the reloaded GPU model.
  gpu.eval();
  gpu2.eval();
  for (auto* pair : {&opt, &opt2}) pair->zero_grad();
  loss_of(gpu, b.to(kCuda)).backward();
  loss_of(gpu2, b.to(kCuda)).backward();
  opt.step();
  opt2.step();
  for (size_t i = 0; i < pg.size(); ++i)
    EXPECT_TRUE(bit_equal(pg[i].second, pg2[i].second)) << "after a step: " << pg[i].first;
  // The CPU copy computes the same loss as the GPU model it came from (eval: no dropout).
  cpu.eval();
  models::Transformer gpu3(cfg);
  gpu3.to(kCuda);
  load_parameters(gpu3, loaded, path);
  gpu3.eval();
  NoGradGuard ng;
  EXPECT_NEAR(loss_of(cpu, b).item(), loss_of(gpu3, b.to(kCuda)).item(), 2e-5);
  fs::remove_all(dir);
}

}  // namespace

// Runs with and without a GPU: either the backend is there and names itself, or asking for it
// fails with a pelab::Error that says why.
TEST(CudaAvailability, BackendIsUsableOrExplainsWhyNot) {
  if (backend_available(DeviceType::CUDA)) {
    EXPECT_EQ(backend_for(Device::cuda()).name(), "cuda");
    Tensor t = Tensor::from_vector({1.5, -2.0, 3.25}, {3}, DType::Float64, Device::cuda());
    EXPECT_EQ(t.device(), Device::cuda());
    EXPECT_EQ(t.to_vector(), (std::vector<double>{1.5, -2.0, 3.25}));
    EXPECT_EQ((t * t).to(Device::cpu()).to_vector(), (std::vector<double>{2.25, 4.0, 10.5625}));
  } else {
    const std::string msg = error_of([] { backend_for(Device::cuda()); });
    EXPECT_NE(msg.find("cuda:0 is not available"), std::string::npos) << msg;
#ifdef PELAB_WITH_CUDA
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("built without"), std::string::npos) << msg;
#endif
    EXPECT_THROW(Tensor::zeros({2}, DType::Float32, Device::cuda()), Error);
    // the CPU keeps working
    EXPECT_EQ(Tensor::ones({2}).to_vector(), (std::vector<double>{1.0, 1.0}));
  }
}
