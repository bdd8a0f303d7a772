// pelab — CPU reductions over contiguous [outer, n, inner] (Sum, Max + first argmax, the cumulative
// sum) and the double-accumulated sum of squares. Long axes are cut into blocks whose size depends
// only on the shape; block partials are combined in block order, so results do not depend on the
// thread count. Float32 sums accumulate in double.
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "backend_checks.h"
#include "cpu/cpu_backend.h"

namespace pelab {
namespace {

using cpu::Acc;

constexpr int64_t kBlock1 = 8192;   // elements per block along n when inner == 1
constexpr int64_t kBlockN = 65536;  // elements per block (rows x inner) when inner > 1
constexpr int64_t kInnerChunk = 1024;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// sum of x[0..len) in accumulator type A (fixed vector-lane order)
template <class T, class A>
inline A sum_run(const T* x, int64_t len) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < len; ++i) s += static_cast<A>(x[i]);
  return s;
}

template <class T>
inline bool better(T v, T best) {  // strictly greater, or the first NaN
  return v > best || (v != v && best == best);
}

template <class T>
void reduce_sum(T* out, const T* in, int64_t outer, int64_t n, int64_t inner) {
  using A = typename Acc<T>::type;
  const int64_t total = outer * n * inner;
  if (inner == 1) {
    const int64_t nb = ceil_div(n, kBlock1);
    if (nb <= 1) {
      cpu::parallel_for(outer, total > kParallelGrain,
                        [&](int64_t o) { out[o] = static_cast<T>(sum_run<T, A>(in + o * n, n)); });
      return;
    }
    std::vector<A> part(outer * nb);
    cpu::parallel_for(outer * nb, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nb, b = t % nb;
      const int64_t j0 = b * kBlock1, len = std::min(kBlock1, n - j0);
      part[t] = sum_run<T, A>(in + o * n + j0, len);
    });
    for (int64_t o = 0; o < outer; ++o) {
      A s = 0;
      for (int64_t b = 0; b < nb; ++b) s += part[o * nb + b];
      out[o] = static_cast<T>(s);
    }
    return;
  }
  // inner > 1: out[o, i] = sum_j in[o, j, i], vectorised along i
  const int64_t bj = std::max<int64_t>(1, kBlockN / inner);
  const int64_t nb = ceil_div(n, bj);
  const int64_t nic = ceil_div(inner, kInnerChunk);
  std::vector<A> part(nb > 1 ? outer * nb * inner : 0);
  cpu::parallel_for(outer * nb * nic, total > kParallelGrain, [&](int64_t t) {
    const int64_t o = t / (nb * nic), b = (t / nic) % nb, c = t % nic;
    const int64_t i0 = c * kInnerChunk, ilen = std::min(kInnerChunk, inner - i0);
    const int64_t j0 = b * bj, j1 = std::min(n, j0 + bj);
    A acc[kInnerChunk];
    for (int64_t i = 0; i < ilen; ++i) acc[i] = 0;
    for (int64_t j = j0; j < j1; ++j) {
      const T* row = in + (o * n + j) * inner + i0;
#pragma omp simd
      for (int64_t i = 0; i < ilen; ++i) acc[i] += static_cast<A>(row[i]);
    }
    if (nb == 1) {
      for (int64_t i = 0; i < ilen; ++i) out[o * inner + i0 + i] = static_cast<T>(acc[i]);
    } else {
      A* dst = part.data() + (o * nb + b) * inner + i0;
      for (int64_t i = 0; i < ilen; ++i) dst[i] = acc[i];
    }
  });
  if (nb > 1) {
    cpu::parallel_for(outer, total > kParallelGrain, [&](int64_t o) {
      for (int64_t i = 0; i < inner; ++i) {
        A s = 0;
        for (int64_t b = 0; b < nb; ++b) s += part[(o * nb + b) * inner + i];
        out[o * inner + i] = static_cast<T>(s);
      }
    });
  }
}

template <class T>
void reduce_max(T* out, int64_t* arg, const T* in, int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * n * inner;
  if (inner == 1) {
    const int64_t nb = ceil_div(n, kBlock1);
    std::vector<T> pv(outer * nb);
    std::vector<int64_t> pi(outer * nb);
    cpu::parallel_for(outer * nb, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nb, b = t % nb;
      const int64_t j0 = b * kBlock1, j1 = std::min(n, j0 + kBlock1);
      const T* x = in + o * n;
      T best = x[j0];
      int64_t bi = j0;
      for (int64_t j = j0 + 1; j < j1; ++j) {
        if (better(x[j], best)) {
          best = x[j];
          bi = j;
        }
      }
      pv[t] = best;
      pi[t] = bi;
    });
    for (int64_t o = 0; o < outer; ++o) {
      T best = pv[o * nb];
      int64_t bi = pi[o * nb];
      for (int64_t b = 1; b < nb; ++b) {
        if (better(pv[o * nb + b], best)) {
          best = pv[o * nb + b];
          bi = pi[o * nb + b];
        }
      }
      out[o] = best;
      if (arg) arg[o] = bi;
    }
    return;
  }
  // inner > 1: running max per column, chunks of columns in parallel (j in order)
  const int64_t nic = ceil_div(inner, kInnerChunk);
  cpu::parallel_for(outer * nic, total > kParallelGrain, [&](int64_t t) {
    const int64_t o = t / nic, c = t % nic;
    const int64_t i0 = c * kInnerChunk, ilen = std::min(kInnerChunk, inner - i0);
    T* best = out + o * inner + i0;
    int64_t* bi = arg ? arg + o * inner + i0 : nullptr;
    const T* row0 = in + o * n * inner + i0;
    for (int64_t i = 0; i < ilen; ++i) best[i] = row0[i];
    if (bi)
      for (int64_t i = 0; i < ilen; ++i) bi[i] = 0;
    for (int64_t j = 1; j < n; ++j) {
      const T* row = row0 + j * inner;
      if (bi) {
        for (int64_t i = 0; i < ilen; ++i) {
          if (better(row[i], best[i])) {
            best[i] = row[i];
            bi[i] = j;
          }
        }
      } else {
        for (int64_t i = 0; i < ilen; ++i) best[i] = better(row[i], best[i]) ? row[i] : best[i];
      }
    }
  });
}

// Running sums along n. With inner == 1 each row is one dependent chain of additions, so rows are
// taken kRows at a time and their chains interleaved (short rows, the usual case, would otherwise
// run at the latency of one addition per element).
template <class T>
void cumsum_impl(T* out, const T* in, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  using A = typename Acc<T>::type;
  const int64_t total = outer * n * inner;
  if (inner == 1) {
    constexpr int64_t kRows = 8;
    cpu::parallel_for(ceil_div(outer, kRows), total > kParallelGrain, [&](int64_t b) {
      const int64_t o0 = b * kRows, rows = std::min(kRows, outer - o0);
      const T* x = in + o0 * n;
      T* y = out + o0 * n;
      // `count` is a compile-time constant for whole groups, so their inner loop unrolls
      auto run = [&](auto count) {
        A acc[kRows] = {};
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse ? n - 1 - s : s;
          for (int64_t r = 0; r < count; ++r) {
            acc[r] += static_cast<A>(x[r * n + j]);
            y[r * n + j] = static_cast<T>(acc[r]);
          }
        }
      };
      if (rows == kRows)
        run(std::integral_constant<int64_t, kRows>{});
      else
        run(rows);
    });
    return;
  }
  // inner > 1: a running sum per column, vectorised along i; chunks of columns in parallel
  const int64_t nic = ceil_div(inner, kInnerChunk);
  cpu::parallel_for(outer * nic, total > kParallelGrain, [&](int64_t t) {
    const int64_t o = t / nic, c = t % nic;
    const int64_t i0 = c * kInnerChunk, ilen = std::min(kInnerChunk, inner - i0);
    A acc[kInnerChunk];
    for (int64_t i = 0; i < ilen; ++i) acc[i] = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = reverse ? n - 1 - s : s;
      const T* x = in + (o * n + j) * inner + i0;
      T* y = out + (o * n + j) * inner + i0;
#pragma omp simd
      for (int64_t i = 0; i < ilen; ++i) {
        acc[i] += static_cast<A>(x[i]);
        y[i] = static_cast<T>(acc[i]);
      }
    }
  });
}

template <class T>
double sum_squares_impl(const T* x, int64_t total) {
  const int64_t nb = ceil_div(total, kBlock1);
  std::vector<double> part(nb);
  cpu::parallel_for(nb, total > kParallelGrain, [&](int64_t b) {
    const T* p = x + b * kBlock1;
    const int64_t len = std::min(kBlock1, total - b * kBlock1);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
    part[b] = s;
  });
  double s = 0;
  for (int64_t b = 0; b < nb; ++b) s += part[b];
  return s;
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const View& out, void* argmax, const View& in, int64_t outer,
                        int64_t n, int64_t inner) {
  const AnyDTypeOp prologue = check_reduce(op, out, in, outer, n, inner);
  if (outer * inner == 0) return;
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    const T* x = static_cast<const T*>(in.data);
    if (op == ReduceOp::Sum) {
      if (n == 0) {
        for (int64_t i = 0; i < outer * inner; ++i) o[i] = T(0);
        if (argmax) std::fill_n(static_cast<int64_t*>(argmax), outer * inner, int64_t(0));
        return;
      }
      reduce_sum<T>(o, x, outer, n, inner);
    } else {
      reduce_max<T>(o, static_cast<int64_t*>(argmax), x, outer, n, inner);
    }
  });
}

void CpuBackend::cumsum(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                        bool reverse) {
  const FloatOp op = check_cumsum(out, in, outer, n, inner);
  if (outer * n * inner == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    cumsum_impl<T>(static_cast<T*>(out.data), static_cast<const T*>(in.data), outer, n, inner,
                   reverse);
  });
}

double CpuBackend::sum_squares(const View& in) {
  const FloatOp op = check_sum_squares(in);
  const int64_t total = in.numel();
  if (total == 0) return 0.0;
  return op.dispatch([&](auto tag) {
    return sum_squares_impl(static_cast<const decltype(tag)*>(in.data), total);
  });
}

// Each input's sum as sum_squares computes it, added in order (as a host loop over sum_squares
// would).
void CpuBackend::sum_squares_many(const View& out, const std::vector<View>& ins) {
  const FloatOp op = check_sum_squares_many(out, ins);
  double total = 0.0;
  for (const View& in : ins) {
    const int64_t n = in.numel();
    if (n == 0) continue;
    total += op.dispatch(in.dtype, [&](auto tag) {
      return sum_squares_impl(static_cast<const decltype(tag)*>(in.data), n);
    });
  }
  *static_cast<double*>(out.data) = total;
}

}  // namespace pelab
