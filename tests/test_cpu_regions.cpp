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

#include "pelab/ops.h"
#include "pelab/parallel.h"
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

TEST(CpuRegions, SmallOpsOpenNoOpenMpRegion) {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    small_ops();  // warm-up (caches, first-use allocations)
    EXPECT_EQ(regions_of(small_ops), 0) << threads << " threads";
  }
  // The counter sees regions: an elementwise op above the grain with two threads opens one.
  set_num_threads(2);
  Tensor big = Tensor::full({2 * kParallelGrain}, 1.0);
  EXPECT_GE(regions_of([&] { add_scalar(big, 1.0); }), 1);
  set_num_threads(saved);
}

}  // namespace
