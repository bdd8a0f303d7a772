// pelab — CPU strided iteration (internal): views are aligned to one shape, size-1 axes dropped and
// adjacent axes merged wherever every operand allows, then the flat element range is split
// statically over OpenMP threads and handed to a kernel as runs along the innermost axis.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu/cpu_backend.h"
#include "strided_layout.h"

namespace pelab {
namespace cpu {

constexpr int kMaxDims = 16;

template <int N>
struct Layout {
  int nd = 0;  // rank after collapsing (0: a single element)
  int64_t numel = 1;
  int64_t shape[kMaxDims] = {};
  int64_t st[N][kMaxDims] = {};  // element strides per operand
  char* base[N] = {};
  // innermost stride of operand k
  int64_t inner_stride(int k) const { return nd == 0 ? 1 : st[k][nd - 1]; }
};

// Builds the collapsed layout of N views over `shape` (strided_layout.h). Views whose rank/shape
// differ from `shape` are broadcast to it with numpy rules (size-1 or missing axes get stride 0).
template <int N>
Layout<N> make_layout(const Shape& shape, const View* const (&views)[N], const char* op) {
  Layout<N> L;
  int m = 0;  // axes innermost first, reversed below
  L.numel = collapse_axes<N>(shape, views, op, L.base,
                             [&](int64_t size, const std::array<int64_t, N>& s) {
                               PELAB_CHECK(m < kMaxDims, op, ": too many non-mergeable axes in ",
                                           shape_str(shape));
                               L.shape[m] = size;
                               for (int k = 0; k < N; ++k) L.st[k][m] = s[k];
                               ++m;
                             });
  L.nd = m;
  std::reverse(L.shape, L.shape + m);
  for (int k = 0; k < N; ++k) std::reverse(L.st[k], L.st[k] + m);
  return L;
}

// f(off, len) for the runs covering flat elements [lo, hi) of L (lo < hi, L.nd > 0). Not inlined:
// its one copy per kernel keeps f inlined (two inlined copies, threaded and plain, made GCC call
// GELU's exp and erf out of line).
template <int N, class F>
__attribute__((noinline)) void run_range(const Layout<N>& L, F& f, int64_t lo, int64_t hi) {
  const int nd = L.nd;
  const int64_t inner = L.shape[nd - 1];
  int64_t idx[kMaxDims];
  int64_t off[N];
  int64_t rem = lo / inner;
  int64_t col = lo % inner;
  for (int k = 0; k < N; ++k) off[k] = col * L.st[k][nd - 1];
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rem % L.shape[d];
    rem /= L.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * L.st[k][d];
  }
  int64_t e = lo;
  while (true) {
    const int64_t len = std::min(inner - col, hi - e);
    f(static_cast<const int64_t*>(off), len);
    e += len;
    if (e >= hi) break;
    for (int k = 0; k < N; ++k) off[k] -= col * L.st[k][nd - 1];
    col = 0;
    for (int d = nd - 2; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < N; ++k) off[k] += L.st[k][d];
      if (idx[d] < L.shape[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= L.shape[d] * L.st[k][d];
      idx[d] = 0;
    }
  }
}

// Calls f(off, len) for runs along the innermost axis covering every element once; off[k] is the
// element offset of operand k at the run start. Static split of the flat range over threads when
// use_threads(work above the grain) (cpu_backend.h), otherwise one plain call, without entering
// libgomp.
template <int N, class F>
void for_each_run(const Layout<N>& L, F&& f) {
  const int64_t total = L.numel;
  if (total <= 0) return;
  if (L.nd == 0) {
    int64_t off[N] = {};
    f(off, int64_t(1));
    return;
  }
  if (use_threads(total > kParallelGrain)) {
#pragma omp parallel
    {
      int64_t lo, hi;
      split_range(total, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
      if (lo < hi) run_range(L, f, lo, hi);
    }
  } else {
    run_range(L, f, 0, total);
  }
}

}  // namespace cpu
}  // namespace pelab
