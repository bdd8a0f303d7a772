// Tests of the CUDA backend's kernels (framework/src/cuda), all named Cuda*: CPU-vs-CUDA parity of
// every op driver case forward and backward (float32 within max(1e-5, case tolerance), float64
// within 1e-12; gradients 10x, as in the op driver), direct kernel parity on shapes that take the
// two-pass, chunked and multi-tensor paths, bit-identical dropout masks, determinism, and the
// caching allocator. Their subject is the CUDA kernels' numerics, so they need a GPU: without one
// (or in a build without CUDA) every test but CudaAvailability skips with "no CUDA device: CUDA
// parity tests skipped". What runs on a device but is not a kernel's numerics (training steps,
// checkpoints, decoding, error paths, the host round trips of a step) is tested once for every
// device in tests/test_device.cpp, on the CPU everywhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
#include "tests/device_param.h"
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


using pelab::testing::bit_equal;
using pelab::testing::expect_close;
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
      Pair mean = pair_empty({1}, dt), count = pair_empty({1}, DType::Float64);
      Pair g = pair_of({0.37 * 29}, {1}, dt);  // scale = g / count = 0.37 (29 rows kept)
      cpu_be().cross_entropy(view_of(mean.cpu), view_of(count.cpu), view_of(loss.cpu),
                             view_of(lse.cpu), view_of(logits.cpu), view_of(tg.cpu), R, C, -100,
                             smoothing);
      gpu_be().cross_entropy(view_of(mean.gpu), view_of(count.gpu), view_of(loss.gpu),
                             view_of(lse.gpu), view_of(logits.gpu), view_of(tg.gpu), R, C, -100,
                             smoothing);
      expect_close(loss.cpu, loss.gpu, tol, "cross_entropy loss rows");
      expect_close(lse.cpu, lse.gpu, tol, "cross_entropy lse");
      expect_close(mean.cpu, mean.gpu, tol, "cross_entropy mean");
      EXPECT_EQ(count.gpu.to_vector(), (Values{29.0})) << "rows whose target is not ignored";
      cpu_be().cross_entropy_backward(view_of(grad.cpu), view_of(logits.cpu), view_of(lse.cpu),
                                      view_of(tg.cpu), R, C, -100, smoothing, view_of(g.cpu),
                                      view_of(count.cpu));
      gpu_be().cross_entropy_backward(view_of(grad.gpu), view_of(logits.gpu), view_of(lse.gpu),
                                      view_of(tg.gpu), R, C, -100, smoothing, view_of(g.gpu),
                                      view_of(count.gpu));
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

// The multi-tensor kernels (sum_squares_many, the guarded AdamW / SGD updates) on more buffers than
// one launch takes (kMultiTensors), with empty buffers, buffers across a chunk boundary and a run of
// each dtype, against the CPU's; update_control on finite and non-finite records; deterministic
// repeats.
TEST(CudaKernels, GuardedUpdatesMatchCpu) {
  PELAB_REQUIRE_CUDA();
  std::vector<Pair> xs;
  std::vector<View> vc, vg;
  for (int i = 0; i < 90; ++i) {
    const int64_t n = i % 17 == 3 ? 0 : (i % 13 == 5 ? 20000 + i : 1 + (i * 37) % 300);
    const DType dt = i < 60 ? DType::Float32 : DType::Float64;
    xs.push_back(pair_of(randv(n, 300 + i), {n}, dt));
  }
  for (const Pair& x : xs) {
    vc.push_back(view_of(x.cpu));
    vg.push_back(view_of(x.gpu));
  }
  Pair sc = pair_empty({1}, DType::Float64), sg2 = pair_empty({1}, DType::Float64);
  cpu_be().sum_squares_many(view_of(sc.cpu), vc);
  gpu_be().sum_squares_many(view_of(sc.gpu), vg);
  gpu_be().sum_squares_many(view_of(sg2.gpu), vg);
  EXPECT_TRUE(bit_equal(sc.gpu, sg2.gpu)) << "sum_squares_many must be bit-identical run to run";
  expect_close(sc.cpu, sc.gpu, 1e-12, "sum_squares_many");
  // update_control: clip, no clip, a NaN loss, an infinite sum
  const std::vector<std::array<double, 3>> cases = {
      {1.5, 16.0, 1.0}, {1.5, 0.25, 1.0}, {std::nan(""), 4.0, 1.0},
      {2.0, std::numeric_limits<double>::infinity(), 1.0}, {2.0, 9.0, std::numeric_limits<double>::infinity()}};
  for (const auto& c : cases) {
    Pair st = pair_of({c[0], c[1], 0.0}, {3}, DType::Float64);
    Pair ctl = pair_of({0.0, 0.0, 7.0}, {3}, DType::Float64);
    cpu_be().update_control(view_of(ctl.cpu), view_of(st.cpu), c[2]);
    gpu_be().update_control(view_of(ctl.gpu), view_of(st.gpu), c[2]);
    EXPECT_TRUE(bit_equal(st.cpu, st.gpu)) << "step record, loss " << c[0] << " sumsq " << c[1];
    EXPECT_TRUE(bit_equal(ctl.cpu, ctl.gpu)) << "control, loss " << c[0] << " sumsq " << c[1];
  }
  // the guarded updates on every buffer: clipped (scale 0.3, step 4), then skipped (update 0)
  for (double update : {1.0, 0.0}) {
    Pair ctl = pair_of({0.3, update, 4.0}, {3}, DType::Float64);
    std::vector<Pair> p, g, m, v;
    std::vector<Backend::AdamWBuffers> bc, bg;
    std::vector<Backend::SGDBuffers> sc_, sg_;
    for (size_t i = 0; i < xs.size(); ++i) {
      const int64_t n = xs[i].cpu.numel();
      const DType dt = xs[i].cpu.dtype();
      p.push_back(pair_of(randv(n, 700 + i), {n}, dt));
      g.push_back(xs[i]);
      m.push_back(pair_of(randv(n, 800 + i), {n}, dt));
      v.push_back(pair_of(randv(n, 900 + i, 0.0, 1.0), {n}, dt));
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      bc.push_back({view_of(p[i].cpu), view_of(g[i].cpu), view_of(m[i].cpu), view_of(v[i].cpu)});
      bg.push_back({view_of(p[i].gpu), view_of(g[i].gpu), view_of(m[i].gpu), view_of(v[i].gpu)});
    }
    cpu_be().adamw_step_guarded(bc, 1e-2, 0.9, 0.999, 1e-8, 0.01, view_of(ctl.cpu));
    gpu_be().adamw_step_guarded(bg, 1e-2, 0.9, 0.999, 1e-8, 0.01, view_of(ctl.gpu));
    for (size_t i = 0; i < xs.size(); ++i) {
      const double tol = f_tol(p[i].cpu.dtype());
      expect_close(p[i].cpu, p[i].gpu, tol, "adamw param " + std::to_string(i));
      expect_close(m[i].cpu, m[i].gpu, tol, "adamw exp_avg " + std::to_string(i));
      expect_close(v[i].cpu, v[i].gpu, tol, "adamw exp_avg_sq " + std::to_string(i));
      sc_.push_back({view_of(p[i].cpu), view_of(g[i].cpu), view_of(m[i].cpu)});
      sg_.push_back({view_of(p[i].gpu), view_of(g[i].gpu), view_of(m[i].gpu)});
    }
    for (bool nesterov : {false, true}) {
      cpu_be().sgd_step_guarded(sc_, 0.1, 0.9, 0.0, 1e-3, nesterov, view_of(ctl.cpu));
      gpu_be().sgd_step_guarded(sg_, 0.1, 0.9, 0.0, 1e-3, nesterov, view_of(ctl.gpu));
    }
    cpu_be().sgd_step_guarded(sc_, 0.1, 0.0, 0.0, 0.0, false, view_of(ctl.cpu));
    gpu_be().sgd_step_guarded(sg_, 0.1, 0.0, 0.0, 0.0, false, view_of(ctl.gpu));
    for (size_t i = 0; i < xs.size(); ++i) {
      const double tol = f_tol(p[i].cpu.dtype());
      expect_close(p[i].cpu, p[i].gpu, tol, "sgd param " + std::to_string(i));
      expect_close(m[i].cpu, m[i].gpu, tol, "sgd momentum " + std::to_string(i));
    }
  }
}

// gemm_outer (one cuBLAS batched call over several levels of batch strides) against the CPU's,
// which runs one strided-batch gemm per outer entry, on the heads of a token-major projection.
TEST(CudaKernels, GemmOuterMatchesCpu) {
  PELAB_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const int64_t B = 5, L = 7, H = 3, dh = 4;
    Pair x = pair_of(randv(B * L * H * dh, 61), {B, L, H, dh}, dt);
    Pair y = pair_of(randv(B * L * H * dh, 62), {B, L, H, dh}, dt);
    // [B, H, L, dh] @ [B, H, dh, L] through permuted views (not one stride per batch level)
    const Tensor qc = permute(x.cpu, {0, 2, 1, 3}), kc = permute(y.cpu, {0, 2, 3, 1});
    const Tensor qg = permute(x.gpu, {0, 2, 1, 3}), kg = permute(y.gpu, {0, 2, 3, 1});
    expect_close(matmul(qc, kc, 0.5), matmul(qg, kg, 0.5), f_tol(dt) * 10, "gemm_outer scores");
    const Tensor pc = softmax(matmul(qc, kc), -1), pg = softmax(matmul(qg, kg), -1);
    expect_close(matmul(pc, permute(y.cpu, {0, 2, 1, 3})), matmul(pg, permute(y.gpu, {0, 2, 1, 3})),
                 f_tol(dt) * 10, "gemm_outer values");
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
