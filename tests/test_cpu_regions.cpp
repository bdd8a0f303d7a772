// Small CPU kernels open no OpenMP region: `#pragma omp parallel if (false)` still enters libgomp
// and builds a team of one (~0.5 us and a heap block each), which a small model's training step
// paid hundreds of times (framework/src/cpu: cpu::parallel_for, for_each_run). This binary
// defines GOMP_parallel, the entry GCC emits for every `omp parallel`, as a counting wrapper
// around libgomp's (found with dlsym(RTLD_NEXT)); every other test runs through it unchanged.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/cpu_backend.h"
#include "pelab/backend.h"
#include "pelab/nn.h"
#include "pelab/ops.h"
#include "pelab/optim.h"
#include "pelab/parallel.h"
#include "pelab/random.h"
#include "pelab/tensor.h"

namespace {
std::atomic<long> g_regions{0};
}

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  using Real = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  if (!real) {
    std::fprintf(stderr, "test_cpu_regions: libgomp's GOMP_parallel not found (dlsym: %s)\n", dlerror());
    std::abort();
  }
  ++g_regions;
  real(fn, data, num_threads, flags);
}

namespace {

using namespace pelab;

// The OpenMP regions `f` opened.
template <class F>
long regions_of(F&& f) {
  const long before = g_regions.load();
  f();
  return g_regions.load() - before;
}

// Elementwise (binary, unary, copy, fill, axpy through the gradient sum) and index ops with their
// backward passes on a few elements each.
void small_ops() {
  Tensor a = Tensor::full({4, 8}, 0.5).set_requires_grad(true);
  Tensor b = Tensor::full({1, 8}, 2.0);
  Tensor idx = Tensor::from_ints({0, 3, 3, 1}, {4});
  Tensor y = add(mul(log(add_scalar(a, 1.0)), b), index_select(a, 0, idx));
  Tensor z = transpose(y, 0, 1).contiguous();
  sum(mul(z, z)).backward();
}

// The kernels with loops of their own, each on a few elements with its backward: softmax and
// log-softmax along the last and a leading axis, cross-entropy, max along both, rotate_pairs,
// gather / scatter-add, gather_lerp along the last and a leading axis, batched small products, the
// fused attention, dropout, a transposing copy, random fills, the gradient-norm clip, SGD, AdamW.
void small_nn_ops() {
  Generator gen(7);
  Tensor x = Tensor::empty({3, 5});
  init::normal_(x, 0.0, 1.0, gen);
  x.set_requires_grad(true);
  Tensor pos = Tensor::from_vector({0.0, 1.5, 4.0, 2.25, 3.0, 0.5, 1.0, 3.75, 2.0, 2.5, 0.0, 4.0},
                                   {3, 4});
  Tensor pos0 = Tensor::from_vector({0.0, 1.5, 2.0, 1.25, 0.5, 0.0}, {2, 3});
  Tensor idx = Tensor::from_ints({0, 4, 4, 1, 2, 2, 3, 0, 1, 1, 1, 4}, {3, 4});
  Tensor t = Tensor::from_ints({1, 0, 4}, {3});
  Tensor terms = add(add(sum(softmax(x, 1)), sum(log_softmax(x, 0))), cross_entropy(x, t));
  terms = add(terms, add(sum(max(x, 1)), sum(max(x, 0))));
  terms = add(terms, add(sum(gather(x, 1, idx)), sum(gather_lerp(x, 1, pos))));
  terms = add(terms, sum(gather_lerp(x, 0, pos0)));
  Tensor r = reshape(slice(x, 1, 0, 4), {3, 1, 4});
  Tensor c = Tensor::full({1, 2}, 0.6), s = Tensor::full({1, 2}, 0.8);
  terms = add(terms, sum(rotate_pairs(r, c, s)));
  Tensor q = reshape(concat({x, x}, 0), {1, 2, 3, 5});  // [B, H, L, dh]
  terms = add(terms, sum(scaled_dot_attention(q, q, q, Tensor(), Tensor(), 0.5, -1e9)));
  terms = add(terms, sum(matmul(q, transpose(q, 2, 3))));  // a batch of two 3 x 5 x 3 products
  terms = add(terms, sum(dropout(x, 0.25, true, gen)));
  Tensor sq = reshape(concat({x, x, x, x}, 1), {12, 5});  // a transposed copy of 8 x 8 tiles
  sq = transpose(reshape(concat({sq, sq}, 0), {8, 15}), 0, 1).contiguous();
  terms = add(terms, sum(sq));
  terms.backward();
  std::vector<Tensor> params{x};
  clip_grad_norm(params, 1.0);
  SGDOptions momentum;
  momentum.momentum = 0.9;
  SGD(params, 0.1).step();
  SGD(params, 0.1, momentum).step();
  AdamW(params, 0.1).step();
}

TEST(CpuRegions, SmallOpsOpenNoOpenMpRegion) {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    small_ops();  // warm-up (caches, first-use allocations)
    EXPECT_EQ(regions_of(small_ops), 0) << threads << " threads";
    small_nn_ops();
    EXPECT_EQ(regions_of(small_nn_ops), 0) << threads << " threads";
  }
  // The counter sees regions: an elementwise op above the grain with two threads opens one.
  set_num_threads(2);
  Tensor big = Tensor::full({2 * kParallelGrain}, 1.0);
  EXPECT_GE(regions_of([&] { add_scalar(big, 1.0); }), 1);
  set_num_threads(saved);
}

// Work above the grain that makes one task opens no region either: it would leave the other
// threads idle and still pay for the team. A column sum of [1024, 32] (the vocabulary-32 head's
// bias gradient) is one block of rows; one of [1024, 128] is two blocks of rows, summed in one
// region, and their partial sums are added without one.
TEST(CpuRegions, OneTaskOpensNoRegion) {
  const int saved = num_threads();
  set_num_threads(2);
  Tensor narrow = Tensor::full({1024, 32}, 1.0), wide = Tensor::full({1024, 128}, 1.0);
  sum(narrow, {0});  // warm-up
  EXPECT_EQ(regions_of([&] { sum(narrow, {0}); }), 0);
  EXPECT_EQ(regions_of([&] { sum(wide, {0}); }), 1);
  EXPECT_EQ(sum(sum(wide, {0})).item(), 1024.0 * 128.0);
  set_num_threads(saved);
}

// An AdamW step updates every parameter in one region: one per parameter above the grain before,
// and none for the ones below it, which ran on one thread. The update of each element does not
// depend on the split: one and two threads give the same bits.
TEST(CpuRegions, AdamWStepOpensOneRegion) {
  const int saved = num_threads();
  auto run = [](int threads, long* regions) {
    set_num_threads(threads);
    std::vector<Tensor> ps;
    for (int64_t n : {int64_t{20000}, int64_t{128}, kParallelGrain, int64_t{20000}}) {
      Tensor p = Tensor::arange(n);
      ps.push_back(mul_scalar(p, 1e-4).detach().set_requires_grad(true));
    }
    AdamW opt(ps, 1e-2);
    for (int step = 0; step < 2; ++step) {
      Tensor l = sum(mul(ps[0], ps[0]));
      for (size_t i = 1; i < ps.size(); ++i) l = add(l, sum(mul(ps[i], ps[i])));
      l.backward();
      *regions = regions_of([&] { opt.step(); });
      for (Tensor& p : ps) p.zero_grad();
    }
    return ps;
  };
  long one_thread = -1, two_threads = -1;
  const std::vector<Tensor> a = run(1, &one_thread), b = run(2, &two_threads);
  EXPECT_EQ(one_thread, 0);
  EXPECT_EQ(two_threads, 1);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(sum(ne(a[i], b[i])).item(), 0.0) << "parameter " << i;
  set_num_threads(saved);
}

// A linear layer's bias is written into each thread's block of the output inside the product's
// region: one region for [1024, 128] x [128, 128]ᵀ + bias, where the copy of the bias used to open
// a region of its own.
TEST(CpuRegions, LinearBiasOpensNoRegionOfItsOwn) {
  const int saved = num_threads();
  set_num_threads(2);
  Tensor x = Tensor::full({1024, 128}, 0.5), w = Tensor::full({128, 128}, 0.25),
         b = Tensor::full({128}, 1.0);
  linear(x, w, b);  // warm-up
  EXPECT_EQ(regions_of([&] { linear(x, w, b); }), 1);
  EXPECT_EQ(regions_of([&] { linear(x, w, Tensor()); }), 1);
  EXPECT_EQ(sum(linear(x, w, b)).item(), 1024.0 * 128.0 * (128 * 0.125 + 1.0));
  set_num_threads(saved);
}

// Layer norm backward with parameter gradients opens one region above the grain: its row blocks
// and then the column sums of the blocks' partials (the grad_weight / grad_bias sums over the rows)
// share it, so the sums are split over the threads too. They used to be a second pass after the
// blocks' region: one region of its own where the partials exceed the grain ([1024, 512]: 64
// blocks x 512), on one thread below it ([1024, 128]). The results do not depend on the split.
TEST(CpuRegions, LayerNormBackwardSumsShareTheRowsRegion) {
  const int saved = num_threads();
  CpuBackend be;
  auto view = [](std::vector<float>& v, Shape shape) {
    View r;
    r.data = v.data();
    r.dtype = DType::Float32;
    r.shape = shape;
    r.strides = contiguous_strides(shape);
    return r;
  };
  for (int64_t n : {int64_t{128}, int64_t{512}}) {
    const int64_t rows = 1024;
    std::vector<float> x(rows * n), gy(rows * n), mean(rows, 0.25f), rstd(rows, 1.5f), w(n);
    for (int64_t i = 0; i < rows * n; ++i) {
      x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
      gy[i] = static_cast<float>((i * 53) % 97) / 48.0f - 1.0f;
    }
    for (int64_t i = 0; i < n; ++i) w[i] = 0.5f + static_cast<float>(i % 7) / 7.0f;
    std::vector<float> gx[2], gw[2], gb[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float>& ox = gx[threads - 1] = std::vector<float>(rows * n);
      std::vector<float>& ow = gw[threads - 1] = std::vector<float>(n);
      std::vector<float>& ob = gb[threads - 1] = std::vector<float>(n);
      const long regions = regions_of([&] {
        be.layer_norm_backward(view(ox, {rows, n}), view(ow, {n}), view(ob, {n}),
                               view(gy, {rows, n}), view(x, {rows, n}), view(mean, {rows}),
                               view(rstd, {rows}), view(w, {n}), rows, n);
      });
      EXPECT_EQ(regions, threads == 1 ? 0 : 1) << "[" << rows << ", " << n << "], " << threads
                                               << " threads";
    }
    EXPECT_TRUE(gx[0] == gx[1] && gw[0] == gw[1] && gb[0] == gb[1]) << "[" << rows << ", " << n << "]";
  }
  set_num_threads(saved);
}

// AdamW batches consecutive parameters into one backend call (one region above the grain) unless a
// parameter shares storage with one already in the batch: then the batch is flushed first, so
// parameters whose memory overlaps are updated in order, each seeing the one before. Parameters
// A and B own their storage; V1, V2 (disjoint), V3 (overlapping both) and the strided V4 are views
// of one storage S. Calls: [A, V1] [V2, B] [V3] [V4]. The results equal stepping one parameter at
// a time in order, with one and two threads.
TEST(CpuRegions, AdamWParametersSharingStorageWaitForTheNextCall) {
  const int saved = num_threads();
  const int64_t n = 20000;  // each parameter above the grain
  ASSERT_GT(n, kParallelGrain);
  struct Params {
    Tensor s;
    std::vector<Tensor> ps;
  };
  auto make = [&] {
    Params r;
    r.s = mul_scalar(Tensor::arange(3 * n, DType::Float64), 1e-4).detach();
    Tensor a = mul_scalar(Tensor::arange(n, DType::Float64), 2e-4).detach();
    Tensor b = mul_scalar(Tensor::arange(n, DType::Float64), -3e-4).detach();
    Tensor v1 = slice(r.s, 0, 0, n), v2 = slice(r.s, 0, n, 2 * n),
           v3 = slice(r.s, 0, n / 2, n / 2 + n),
           v4 = transpose(reshape(slice(r.s, 0, 2 * n, 3 * n), {100, n / 100}), 0, 1);
    for (Tensor t : {a, v1, v2, b, v3, v4}) r.ps.push_back(t.set_requires_grad(true));
    return r;
  };
  auto set_grads = [&](Params& r, int step) {
    for (size_t i = 0; i < r.ps.size(); ++i) {
      Tensor g = Tensor::arange(r.ps[i].numel(), DType::Float64);
      g = mul_scalar(add_scalar(mul_scalar(g, 1e-3), -static_cast<double>(i + step)), 0.1);
      r.ps[i].set_grad(reshape(g, r.ps[i].shape()).contiguous());
    }
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Params batched = make(), one_by_one = make();
    AdamW opt(batched.ps, 1e-2);
    opt.state_buffers();  // the zero-filled moments, outside the counts
    std::vector<AdamW> singles;
    for (const Tensor& p : one_by_one.ps) singles.emplace_back(std::vector<Tensor>{p}, 1e-2);
    for (int step = 0; step < 2; ++step) {
      set_grads(batched, step);
      set_grads(one_by_one, step);
      const long regions = regions_of([&] { opt.step(); });
      for (AdamW& o : singles) o.step();
      if (threads == 2) {
        // the strided V4's update alone: its copy in, its call, its copy back
        Params solo = make();
        set_grads(solo, step);
        AdamW solo_opt({solo.ps.back()}, 1e-2);
        solo_opt.state_buffers();
        const long v4_regions = regions_of([&] { solo_opt.step(); });
        EXPECT_EQ(regions - v4_regions, 3) << "step " << step << ": [A, V1] [V2, B] [V3]";
      }
      EXPECT_EQ(sum(ne(batched.s, one_by_one.s)).item(), 0.0) << threads << " threads, step " << step;
      for (size_t i = 0; i < batched.ps.size(); ++i)
        EXPECT_EQ(sum(ne(batched.ps[i], one_by_one.ps[i])).item(), 0.0)
            << threads << " threads, step " << step << ", parameter " << i;
    }
  }
  set_num_threads(saved);
}

// A linear layer's dX = g W and dW = gᵀ x (equal work) run one per thread in one region
// (Backend::gemm_group), where each product cut across both threads opened one of its own; so do
// matmul's dA and dB when B is shared. One thread opens none; with two the gradients are those of
// one thread up to rounding (a whole product against blocks of it).
TEST(CpuRegions, LinearBackwardProductsShareOneRegion) {
  const int saved = num_threads();
  Generator gen(11);
  Tensor x = Tensor::empty({1024, 128}), w = Tensor::empty({512, 128}),
         a = Tensor::empty({4, 256, 128}), b = Tensor::empty({128, 128});
  for (Tensor* t : {&x, &w, &a, &b}) init::normal_(*t, 0.0, 1.0, gen);
  const Tensor g = Tensor::full({1024, 512}, 0.5), gm = Tensor::full({4, 256, 128}, 0.25);
  std::vector<Tensor> grads[3];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int rep = 0; rep < 2; ++rep) {  // the first a warm-up
      Tensor xl = x.detach().set_requires_grad(true), wl = w.detach().set_requires_grad(true);
      Tensor y = linear(xl, wl, Tensor());
      const long linear_regions = regions_of([&] { y.backward(g); });
      Tensor al = a.detach().set_requires_grad(true), bl = b.detach().set_requires_grad(true);
      Tensor z = matmul(al, bl);
      const long matmul_regions = regions_of([&] { z.backward(gm); });
      if (rep == 0) continue;
      EXPECT_EQ(linear_regions, threads == 1 ? 0 : 1) << threads << " threads";
      EXPECT_EQ(matmul_regions, threads == 1 ? 0 : 1) << threads << " threads";
      grads[threads] = {xl.grad(), wl.grad(), al.grad(), bl.grad()};
    }
  }
  for (size_t i = 0; i < grads[1].size(); ++i) {
    const Tensor d = sub(grads[1][i], grads[2][i]);
    EXPECT_LE(sum(mul(d, d)).item(), 1e-10 * sum(mul(grads[1][i], grads[1][i])).item())
        << "gradient " << i;
  }
  set_num_threads(saved);
}

}  // namespace
