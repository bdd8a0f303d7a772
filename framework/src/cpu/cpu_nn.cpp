// pelab — CPU fused NN kernels: softmax / log-softmax (+ backward), layer norm (+ backward), fused
// cross-entropy (+ backward), index_select / index_add / gather / scatter_add, gather_lerp
// (+ backward), counter-based random fills and dropout masks, and the AdamW / SGD steps. Each op's
// prologue (name, checks, dtype dispatch) is the one the CUDA backend uses (backend_checks.h). Row
// statistics of Float32 data accumulate in double. Every cross-row reduction uses blocks fixed by
// the shape and combines them in order, so results are identical run to run (and across thread
// counts).
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend_checks.h"
#include "cpu/cpu_backend.h"
#include "pelab/random.h"
#include "pelab/small_vector.h"
#include "pelab/strings.h"

namespace pelab {
namespace {

// Every target (`rows` of them, host memory) is in [0, C) or is ignore_index; the first one that
// is not is the error line.
void check_targets(const int64_t* t, int64_t rows, int64_t C, int64_t ignore_index) {
  const bool bad = cpu::parallel_any(rows, rows > kParallelGrain, [&](int64_t r) {
    return t[r] != ignore_index && (t[r] < 0 || t[r] >= C);
  });
  if (!bad) return;
  for (int64_t r = 0; r < rows; ++r)
    PELAB_CHECK(t[r] == ignore_index || (t[r] >= 0 && t[r] < C), "cross_entropy: target ", t[r],
                " at row ", r, " is out of range [0, ", C, ") and is not ignore_index (",
                ignore_index, ")");
}

using cpu::vexp;

constexpr int64_t kInnerChunk = 256;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tasks of a gather-like kernel: (slice o, chunk of the n_idx rows). With few slices the rows are
// cut so that every thread gets work; the cut depends only on the sizes and the thread count.
struct IndexChunks {
  int64_t width = 1, count = 0;  // rows per chunk, chunks per slice
  IndexChunks(int64_t outer, int64_t n_idx) {
    const int nth = omp_get_max_threads();
    const int64_t want =
        outer >= 4 * nth ? 1 : std::min<int64_t>(ceil_div(4 * nth, std::max<int64_t>(outer, 1)), n_idx);
    width = ceil_div(n_idx, std::max<int64_t>(want, 1));
    count = n_idx == 0 ? 0 : ceil_div(n_idx, width);
  }
};

// acc[idx[j]] += src[j] for j in order. A run of equal indices (Shaw's clipped distances, T5's
// far buckets) is summed in registers and added once, instead of a chain of dependent
// read-modify-writes of one address. The order is fixed by the index alone: deterministic.
template <class T>
void add_runs(T* acc, const T* src, const int64_t* idx, int64_t n) {
  for (int64_t j = 0; j < n;) {
    const int64_t b = idx[j];
    int64_t e = j + 1;
    while (e < n && idx[e] == b) ++e;
    T sum = T(0);
#pragma omp simd reduction(+ : sum)
    for (int64_t q = j; q < e; ++q) sum += src[q];
    acc[b] += sum;
    j = e;
  }
}

// ---------------- softmax ----------------
template <class T>
T row_max(const T* x, int64_t n) {
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <class T>
void softmax_row(T* y, const T* x, int64_t n, bool log) {
  const T m = row_max(x, n);
  double s = 0;
  if (!log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      const T e = vexp(x[i] - m);
      y[i] = e;
      s += static_cast<double>(e);
    }
    const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(vexp(x[i] - m));
    const T shift = static_cast<T>(static_cast<double>(m) + std::log(s));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  }
}

// columns [i0, i0+len) of one [n, inner] slab
template <class T>
void softmax_cols(T* y, const T* x, int64_t n, int64_t inner, int64_t len, bool log) {
  T m[kInnerChunk];
  double s[kInnerChunk];
  for (int64_t i = 0; i < len; ++i) {
    m[i] = x[i];
    s[i] = 0;
  }
  for (int64_t j = 1; j < n; ++j) {
    const T* r = x + j * inner;
    for (int64_t i = 0; i < len; ++i) m[i] = r[i] > m[i] ? r[i] : m[i];
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* r = x + j * inner;
    T* w = y + j * inner;
    for (int64_t i = 0; i < len; ++i) {
      const T e = vexp(r[i] - m[i]);
      if (!log) w[i] = e;
      s[i] += static_cast<double>(e);
    }
  }
  T f[kInnerChunk];
  for (int64_t i = 0; i < len; ++i)
    f[i] = log ? static_cast<T>(static_cast<double>(m[i]) + std::log(s[i]))
               : static_cast<T>(1.0 / s[i]);
  for (int64_t j = 0; j < n; ++j) {
    const T* r = x + j * inner;
    T* w = y + j * inner;
    if (log) {
      for (int64_t i = 0; i < len; ++i) w[i] = r[i] - f[i];
    } else {
      for (int64_t i = 0; i < len; ++i) w[i] *= f[i];
    }
  }
}

template <class T>
void softmax_bwd_row(T* gi, const T* g, const T* y, int64_t n, bool log) {
  double s = 0;
  if (!log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * static_cast<double>(y[i]);
    const T d = static_cast<T>(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gi[i] = y[i] * (g[i] - d);
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]);
    const T d = static_cast<T>(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gi[i] = g[i] - vexp(y[i]) * d;
  }
}

template <class T>
void softmax_bwd_cols(T* gi, const T* g, const T* y, int64_t n, int64_t inner, int64_t len,
                      bool log) {
  double s[kInnerChunk];
  for (int64_t i = 0; i < len; ++i) s[i] = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T* gr = g + j * inner;
    const T* yr = y + j * inner;
    if (log) {
      for (int64_t i = 0; i < len; ++i) s[i] += static_cast<double>(gr[i]);
    } else {
      for (int64_t i = 0; i < len; ++i)
        s[i] += static_cast<double>(gr[i]) * static_cast<double>(yr[i]);
    }
  }
  T d[kInnerChunk];
  for (int64_t i = 0; i < len; ++i) d[i] = static_cast<T>(s[i]);
  for (int64_t j = 0; j < n; ++j) {
    const T* gr = g + j * inner;
    const T* yr = y + j * inner;
    T* w = gi + j * inner;
    if (log) {
      for (int64_t i = 0; i < len; ++i) w[i] = gr[i] - vexp(yr[i]) * d[i];
    } else {
      for (int64_t i = 0; i < len; ++i) w[i] = yr[i] * (gr[i] - d[i]);
    }
  }
}

// Runs f(o, i0, len) over [outer] x chunks of [inner] (or f(o, 0, 1) per row when inner == 1).
template <class F>
void for_rows_cols(int64_t outer, int64_t n, int64_t inner, F f) {
  const int64_t nic = ceil_div(inner, kInnerChunk);
  const int64_t tasks = outer * nic;
  cpu::parallel_for(tasks, outer * n * inner > kParallelGrain, [&](int64_t t) {
    const int64_t o = t / nic, c = t % nic;
    const int64_t i0 = c * kInnerChunk;
    f(o, i0, std::min(kInnerChunk, inner - i0));
  });
}

}  // namespace

// ---------------- index checks ----------------
void cpu::check_indices(const int64_t* idx, int64_t count, int64_t limit, const char* op) {
  bool bad = false;
  if (use_threads(count > kParallelGrain)) {
#pragma omp parallel for schedule(static) reduction(|| : bad)
    for (int64_t k = 0; k < count; ++k) bad = bad || idx[k] < 0 || idx[k] >= limit;
  } else {  // no region for small work
    for (int64_t k = 0; k < count; ++k) bad = bad || idx[k] < 0 || idx[k] >= limit;
  }
  if (!bad) return;
  for (int64_t k = 0; k < count; ++k)
    PELAB_CHECK(idx[k] >= 0 && idx[k] < limit, op, ": index ", idx[k], " at position ", k,
                " is out of range [0, ", limit, ")");
}

// =====================================================================================
void CpuBackend::softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                         bool log) {
  const int64_t total = outer * n * inner;
  const FloatOp op = check_softmax(out, in, outer, n, inner, log);
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out.data);
    const T* x = static_cast<const T*>(in.data);
    if (inner == 1) {
      cpu::parallel_for(outer, total > kParallelGrain, [&](int64_t o) {
        softmax_row<T>(y + o * n, x + o * n, n, log);
      });
    } else {
      for_rows_cols(outer, n, inner, [&](int64_t o, int64_t i0, int64_t len) {
        const int64_t base = o * n * inner + i0;
        softmax_cols<T>(y + base, x + base, n, inner, len, log);
      });
    }
  });
}

void CpuBackend::softmax_backward(const View& grad_in, const View& grad_out, const View& y,
                                  int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t total = outer * n * inner;
  const FloatOp op = check_softmax_backward(grad_in, grad_out, y, outer, n, inner, log);
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* gi = static_cast<T*>(grad_in.data);
    const T* g = static_cast<const T*>(grad_out.data);
    const T* yy = static_cast<const T*>(y.data);
    if (inner == 1) {
      cpu::parallel_for(outer, total > kParallelGrain, [&](int64_t o) {
        softmax_bwd_row<T>(gi + o * n, g + o * n, yy + o * n, n, log);
      });
    } else {
      for_rows_cols(outer, n, inner, [&](int64_t o, int64_t i0, int64_t len) {
        const int64_t base = o * n * inner + i0;
        softmax_bwd_cols<T>(gi + base, g + base, yy + base, n, inner, len, log);
      });
    }
  });
}

namespace {

// Columns per task of layer norm backward's sums of the row blocks' partials.
constexpr int64_t kLnColumns = 32;

// One row of layer norm backward: s1 = sum g and s2 = sum g * xhat with g = gy * w (gy without
// W), xhat = (x - m) * k; with PARAMS also bw += gy * xhat and bb += gy (in double), in the same
// pass over the row.
template <class T, bool W, bool PARAMS>
inline void ln_bwd_row_sums(const T* gr, const T* xr, const T* w, T m, T k, int64_t n, double* bw,
                            double* bb, double& s1_out, double& s2_out) {
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t i = 0; i < n; ++i) {
    const T xh = (xr[i] - m) * k;
    if constexpr (PARAMS) {
      const double g = static_cast<double>(gr[i]);
      bw[i] += g * static_cast<double>(xh);
      bb[i] += g;
    }
    if constexpr (W) {
      const T g = gr[i] * w[i];
      s1 += static_cast<double>(g);
      s2 += static_cast<double>(g * xh);
    } else {
      s1 += static_cast<double>(gr[i]);
      s2 += static_cast<double>(gr[i] * xh);
    }
  }
  s1_out = s1;
  s2_out = s2;
}

}  // namespace

// =====================================================================================
void CpuBackend::layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                            const View& weight, const View& bias, int64_t rows, int64_t n,
                            double eps) {
  const FloatOp op = check_layer_norm(y, mean, rstd, x, weight, bias, rows, n);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data);
    T* yp = static_cast<T*>(y.data);
    T* mp = static_cast<T*>(mean.data);
    T* rp = static_cast<T*>(rstd.data);
    const T* w = static_cast<const T*>(weight.data);
    const T* b = static_cast<const T*>(bias.data);
    cpu::parallel_for(rows, rows * n > kParallelGrain, [&](int64_t r) {
      const T* xr = xp + r * n;
      T* yr = yp + r * n;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(xr[i]);
      const double mu = s / static_cast<double>(n);
      double q = 0;
#pragma omp simd reduction(+ : q)
      for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(xr[i]) - mu;
        q += d * d;
      }
      const double rs = 1.0 / std::sqrt(q / static_cast<double>(n) + eps);
      mp[r] = static_cast<T>(mu);
      rp[r] = static_cast<T>(rs);
      const T m = static_cast<T>(mu), k = static_cast<T>(rs);
      if (w && b) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * k * w[i] + b[i];
      } else if (w) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * k * w[i];
      } else if (b) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * k + b[i];
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * k;
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const View& grad_x, const View& grad_weight,
                                     const View& grad_bias, const View& grad_y, const View& x,
                                     const View& mean, const View& rstd, const View& weight,
                                     int64_t rows, int64_t n) {
  const FloatOp op = check_layer_norm_backward(grad_x, grad_weight, grad_bias, grad_y, x, mean,
                                               rstd, weight, rows, n);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data);
    const T* gy = static_cast<const T*>(grad_y.data);
    const T* mp = static_cast<const T*>(mean.data);
    const T* rp = static_cast<const T*>(rstd.data);
    const T* w = static_cast<const T*>(weight.data);
    T* gx = static_cast<T*>(grad_x.data);
    T* gw = static_cast<T*>(grad_weight.data);
    T* gb = static_cast<T*>(grad_bias.data);
    const bool want_params = gw || gb;
    // Row blocks fixed by the shape, each with its own partial sums of the parameter gradients (in
    // double), added in block order: the result does not depend on the thread count. One region
    // runs the blocks and then the column sums of their partials, so both are split over the
    // threads (the sums used to run on one thread after the blocks' region).
    const int64_t rb = std::max<int64_t>(8, ceil_div(rows, 64));
    const int64_t nb = ceil_div(rows, rb);
    // [nb, n] partials of grad_weight, then [nb, n] of grad_bias; each block sets all of its own
    std::unique_ptr<double[]> part(want_params ? new double[2 * nb * n] : nullptr);
    auto block = [&](int64_t blk) {
      double* bw = want_params ? part.get() + blk * n : nullptr;
      double* bb = want_params ? part.get() + (nb + blk) * n : nullptr;
      if (want_params)
        for (int64_t i = 0; i < n; ++i) bw[i] = bb[i] = 0;
      const int64_t r1 = std::min(rows, (blk + 1) * rb);
      for (int64_t r = blk * rb; r < r1; ++r) {
        const T* xr = xp + r * n;
        const T* gr = gy + r * n;
        const T m = mp[r], k = rp[r];
        if (!gx) {
          if (!want_params) continue;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            const double g = static_cast<double>(gr[i]);
            bw[i] += g * static_cast<double>((xr[i] - m) * k);
            bb[i] += g;
          }
          continue;
        }
        // gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w; the parameter sums in
        // the same pass
        double s1 = 0, s2 = 0;
        if (w && want_params) {
          ln_bwd_row_sums<T, true, true>(gr, xr, w, m, k, n, bw, bb, s1, s2);
        } else if (w) {
          ln_bwd_row_sums<T, true, false>(gr, xr, w, m, k, n, bw, bb, s1, s2);
        } else if (want_params) {
          ln_bwd_row_sums<T, false, true>(gr, xr, w, m, k, n, bw, bb, s1, s2);
        } else {
          ln_bwd_row_sums<T, false, false>(gr, xr, w, m, k, n, bw, bb, s1, s2);
        }
        const T a = static_cast<T>(s1 / static_cast<double>(n));
        const T c = static_cast<T>(s2 / static_cast<double>(n));
        T* out = gx + r * n;
        if (w) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) out[i] = k * (gr[i] * w[i] - a - (xr[i] - m) * k * c);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) out[i] = k * (gr[i] - a - (xr[i] - m) * k * c);
        }
      }
    };
    // columns [c0, c1) of the parameter gradients: the blocks' partials in block order
    auto column_sums = [&](int64_t c0, int64_t c1) {
      double sw[kLnColumns], sb[kLnColumns];
      const int64_t len = c1 - c0;
      for (int64_t i = 0; i < len; ++i) sw[i] = sb[i] = 0;
      for (int64_t blk = 0; blk < nb; ++blk) {
        const double* pw = part.get() + blk * n + c0;
        const double* pb = part.get() + (nb + blk) * n + c0;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) {
          sw[i] += pw[i];
          sb[i] += pb[i];
        }
      }
      if (gw)
        for (int64_t i = 0; i < len; ++i) gw[c0 + i] = static_cast<T>(sw[i]);
      if (gb)
        for (int64_t i = 0; i < len; ++i) gb[c0 + i] = static_cast<T>(sb[i]);
    };
    const int64_t ncc = ceil_div(n, kLnColumns);
    auto column_chunk = [&](int64_t c) {
      column_sums(c * kLnColumns, std::min(n, (c + 1) * kLnColumns));
    };
    if (nb > 1 && cpu::use_threads(rows * n > kParallelGrain)) {
#pragma omp parallel
      {
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nb; ++blk) block(blk);
        // the loop's implicit barrier: every block's partials are written
        if (want_params) {
#pragma omp for schedule(static)
          for (int64_t c = 0; c < ncc; ++c) column_chunk(c);
        }
      }
    } else {
      for (int64_t blk = 0; blk < nb; ++blk) block(blk);
      if (want_params)
        for (int64_t c = 0; c < ncc; ++c) column_chunk(c);
    }
  });
}

// =====================================================================================

void CpuBackend::cross_entropy(const View& loss, const View& count, const View& loss_rows,
                               const View& lse, const View& logits, const View& targets,
                               int64_t rows, int64_t C, int64_t ignore_index, double smoothing) {
  const FloatOp op = check_cross_entropy(loss, count, loss_rows, lse, logits, targets, rows, C);
  const int64_t* tg = static_cast<const int64_t*>(targets.data);
  check_targets(tg, rows, C, ignore_index);
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; ++r) kept += tg[r] != ignore_index;
  *static_cast<double*>(count.data) = static_cast<double>(kept);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(logits.data);
    T* lp = static_cast<T*>(loss_rows.data);
    T* ep = static_cast<T*>(lse.data);
    const double s = smoothing;
    cpu::parallel_for(rows, rows * C > kParallelGrain, [&](int64_t r) {
      const T* x = xp + r * C;
      const T m = row_max(x, C);
      double se = 0;
#pragma omp simd reduction(+ : se)
      for (int64_t i = 0; i < C; ++i) se += static_cast<double>(vexp(x[i] - m));
      const double l = static_cast<double>(m) + std::log(se);
      ep[r] = static_cast<T>(l);
      const int64_t t = tg[r];
      if (t == ignore_index) {
        lp[r] = T(0);
        return;
      }
      double dot = (1.0 - s) * static_cast<double>(x[t]);
      if (s != 0.0) {
        double sx = 0;
#pragma omp simd reduction(+ : sx)
        for (int64_t i = 0; i < C; ++i) sx += static_cast<double>(x[i]);
        dot += s / static_cast<double>(C) * sx;
      }
      lp[r] = static_cast<T>(l - dot);
    });
    // The mean: reduce(Sum) of the rows, then times T(1 / count), as unary MulScalar would.
    T* out = static_cast<T*>(loss.data);
    if (kept == 0) {
      *out = T(0);
      return;
    }
    T total = T(0);
    View tv;
    tv.data = &total;
    tv.dtype = logits.dtype;
    tv.shape = {1};
    tv.strides = {1};
    reduce(ReduceOp::Sum, tv, nullptr, loss_rows, 1, rows, 1);
    *out = total * static_cast<T>(1.0 / static_cast<double>(kept));
  });
}

void CpuBackend::cross_entropy_backward(const View& grad_logits, const View& logits,
                                        const View& lse, const View& targets, int64_t rows,
                                        int64_t C, int64_t ignore_index, double smoothing,
                                        const View& grad_loss, const View& count) {
  const FloatOp op =
      check_cross_entropy_backward(grad_logits, logits, lse, targets, rows, C, grad_loss, count);
  const int64_t* tg = static_cast<const int64_t*>(targets.data);
  check_targets(tg, rows, C, ignore_index);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const double scale = static_cast<double>(*static_cast<const T*>(grad_loss.data)) /
                         *static_cast<const double*>(count.data);
    const T* xp = static_cast<const T*>(logits.data);
    const T* ep = static_cast<const T*>(lse.data);
    T* gp = static_cast<T*>(grad_logits.data);
    const T sc = static_cast<T>(scale);
    const T off = static_cast<T>(scale * smoothing / static_cast<double>(C));
    const T hit = static_cast<T>(scale * (1.0 - smoothing));
    cpu::parallel_for(rows, rows * C > kParallelGrain, [&](int64_t r) {
      T* g = gp + r * C;
      const int64_t t = tg[r];
      if (t == ignore_index) {
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) g[i] = T(0);
        return;
      }
      const T* x = xp + r * C;
      const T l = ep[r];
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) g[i] = sc * vexp(x[i] - l) - off;
      g[t] -= hit;
    });
  });
}

// =====================================================================================
void CpuBackend::rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                              int64_t outer, int64_t L, int64_t D, int64_t P, bool interleaved,
                              bool inverse) {
  const FloatOp op = check_rotate_pairs(out, x, cos, sin, outer, L, D, P);
  const int64_t rows = outer * L;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data);
    T* ob = static_cast<T*>(out.data);
    const T* cp = static_cast<const T*>(cos.data);
    const T* sp = static_cast<const T*>(sin.data);
    const T sgn = inverse ? T(-1) : T(1);
    // a row at a time; reads of a pair precede its writes, so out may alias x
    cpu::parallel_for(rows, rows * D > kParallelGrain, [&](int64_t r) {
      const T* xr = xp + r * D;
      T* o = ob + r * D;
      const T* c = cp + (r % L) * P;
      const T* sn = sp + (r % L) * P;
      if (!interleaved) {
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) {
          const T a = xr[p], b = xr[p + P], s = sgn * sn[p];
          o[p] = a * c[p] - b * s;
          o[p + P] = b * c[p] + a * s;
        }
      } else {
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) {
          const T a = xr[2 * p], b = xr[2 * p + 1], s = sgn * sn[p];
          o[2 * p] = a * c[p] - b * s;
          o[2 * p + 1] = b * c[p] + a * s;
        }
      }
      if (o != xr)
        for (int64_t d = 2 * P; d < D; ++d) o[d] = xr[d];
    });
  });
}

// =====================================================================================
void CpuBackend::index_select(const View& out, const View& in, const View& idx, int64_t outer,
                              int64_t n_in, int64_t n_idx, int64_t inner) {
  const AnyDTypeOp op = check_index_select(out, in, idx, outer, n_in, n_idx, inner);
  const int64_t* ix = static_cast<const int64_t*>(idx.data);
  cpu::check_indices(ix, n_idx, n_in, op.name);
  const IndexChunks chunks(outer, n_idx);
  const int64_t jw = chunks.width, nj = chunks.count;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    // Tasks are (slice o, chunk of indices); inner == 1 (selecting along the last axis, e.g. T5's
    // bias table) is a plain indexed copy without per-element index arithmetic.
    cpu::parallel_for(outer * nj, outer * n_idx * inner > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nj, j0 = (t % nj) * jw, j1 = std::min(n_idx, j0 + jw);
      const T* sb = src + o * n_in * inner;
      T* db = dst + o * n_idx * inner;
      if (inner == 1) {
        for (int64_t j = j0; j < j1; ++j) db[j] = sb[ix[j]];
      } else {
        for (int64_t j = j0; j < j1; ++j)
          std::memcpy(db + j * inner, sb + ix[j] * inner, sizeof(T) * inner);
      }
    });
  });
}

void CpuBackend::index_add(const View& acc, const View& src, const View& idx, int64_t outer,
                           int64_t n_in, int64_t n_idx, int64_t inner) {
  const AnyDTypeOp op = check_index_add(acc, src, idx, outer, n_in, n_idx, inner);
  const int64_t* ix = static_cast<const int64_t*>(idx.data);
  cpu::check_indices(ix, n_idx, n_in, op.name);
  // parallel over (outer, column chunk) only; j runs in order, so sums are deterministic
  const int nth = omp_get_max_threads();
  const int64_t chunks = outer >= nth ? 1 : std::min<int64_t>(ceil_div(nth, outer) * 2, inner);
  const int64_t cw = ceil_div(inner, std::max<int64_t>(chunks, 1));
  const int64_t nc = inner == 0 ? 0 : ceil_div(inner, cw);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc.data);
    const T* s = static_cast<const T*>(src.data);
    cpu::parallel_for(outer * nc, outer * n_idx * inner > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nc, c = t % nc;
      const int64_t i0 = c * cw, len = std::min(cw, inner - i0);
      if (inner == 1) {  // along the last axis (T5's bias table)
        add_runs(a + o * n_in, s + o * n_idx, ix, n_idx);
        return;
      }
      for (int64_t j = 0; j < n_idx; ++j) {
        T* d = a + (o * n_in + ix[j]) * inner + i0;
        const T* v = s + (o * n_idx + j) * inner + i0;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) d[i] += v[i];
      }
    });
  });
}

void CpuBackend::gather(const View& out, const View& in, const View& idx, int64_t outer,
                        int64_t n_in, int64_t n_idx, int64_t inner) {
  const int64_t total = outer * n_idx * inner;
  const BlockIndexOp op = check_gather(out, in, idx, outer, n_in, n_idx, inner);
  const int64_t* ix = static_cast<const int64_t*>(idx.data);
  cpu::check_indices(ix, op.blocks * n_idx * inner, n_in, op.name);
  // Tasks are (slice o, chunk of rows j); the slice's index block and base pointers are computed
  // once per task, and the inner == 1 case (gather along the last axis) is a plain indexed copy.
  const IndexChunks chunks(outer, n_idx);
  const int64_t jw = chunks.width, nj = chunks.count;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    cpu::parallel_for(outer * nj, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nj, j0 = (t % nj) * jw, j1 = std::min(n_idx, j0 + jw);
      const int64_t* ib = ix + (o % op.blocks) * n_idx * inner;
      const T* sb = src + o * n_in * inner;
      T* db = dst + o * n_idx * inner;
      if (inner == 1) {
        for (int64_t j = j0; j < j1; ++j) db[j] = sb[ib[j]];
      } else {
        for (int64_t j = j0; j < j1; ++j) {
          const int64_t* ir = ib + j * inner;
          T* d = db + j * inner;
          for (int64_t i = 0; i < inner; ++i) d[i] = sb[ir[i] * inner + i];
        }
      }
    });
  });
}

void CpuBackend::scatter_add(const View& acc, const View& src, const View& idx, int64_t outer,
                             int64_t n_in, int64_t n_idx, int64_t inner) {
  const int64_t total = outer * n_idx * inner;
  const BlockIndexOp op = check_scatter_add(acc, src, idx, outer, n_in, n_idx, inner);
  const int64_t* ix = static_cast<const int64_t*>(idx.data);
  cpu::check_indices(ix, op.blocks * n_idx * inner, n_in, op.name);
  const int nth = omp_get_max_threads();
  const int64_t chunks = outer >= nth ? 1 : std::min<int64_t>(ceil_div(nth, outer) * 2, inner);
  const int64_t cw = ceil_div(inner, std::max<int64_t>(chunks, 1));
  const int64_t nc = inner == 0 ? 0 : ceil_div(inner, cw);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc.data);
    const T* s = static_cast<const T*>(src.data);
    cpu::parallel_for(outer * nc, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nc, c = t % nc;
      const int64_t i0 = c * cw, len = std::min(cw, inner - i0);
      T* ab = a + o * n_in * inner;
      const int64_t* ib = ix + (o % op.blocks) * n_idx * inner;
      const T* sb = s + o * n_idx * inner;
      if (inner == 1) {  // scatter along the last axis (Shaw's bins)
        add_runs(ab, sb, ib, n_idx);
        return;
      }
      for (int64_t j = 0; j < n_idx; ++j) {
        const int64_t* ir = ib + j * inner;
        const T* sr = sb + j * inner;
        for (int64_t i = i0; i < i0 + len; ++i) ab[ir[i] * inner + i] += sr[i];
      }
    });
  });
}

// ---------------- gather_lerp ----------------
namespace {

// Whether u is a valid position, in [0, hi] with hi = n_in - 1 (false for NaN). Branch-free (`&`
// on the two comparisons), so the vectorised loops use it too.
template <class T>
inline bool lerp_position_ok(T u, T hi) {
  return (u >= T(0)) & (u <= hi);
}

// Throws naming the first position of pos[0..count) outside [0, n_in - 1] (NaN included).
template <class T>
[[noreturn]] void lerp_position_error(const T* pos, int64_t count, int64_t n_in, const char* op) {
  const T hi = static_cast<T>(n_in - 1);
  for (int64_t k = 0; k < count; ++k)
    if (!lerp_position_ok(pos[k], hi))
      fail(op, ": position ", printf_number("%.17g", static_cast<double>(pos[k])),
           " at flat index ", k, " is out of range [0, ", n_in - 1,
           "] (positions index the gathered axis of size ", n_in, ")");
  fail(op, ": a position is out of range [0, ", n_in - 1, "]");
}

// The two neighbours of position u in a row of n_in values: k = ⌊u⌋ and k1 = k + 1, or k1 = k at
// the upper edge (u = n_in - 1), and the weight w = u - k. u must be in [0, n_in - 1].
template <class T>
inline void lerp_at(T u, int64_t n_in, int64_t& k, int64_t& k1, T& w) {
  k = static_cast<int64_t>(u);  // truncation = floor for u >= 0
  k1 = k + (k < n_in - 1 ? 1 : 0);
  w = u - static_cast<T>(k);
}

// Whether every position of pos[0..count) lies in [0, hi]: one long vectorised pass, so the
// per-row loops of the last-axis kernels below carry no reduction (a reduction over a short row
// costs a store-forwarding stall per row: CoPE's rows are Lk <= 64 counts long).
template <class T>
bool lerp_positions_ok(const T* pos, int64_t count, T hi) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t k = 0; k < count; ++k) bad |= !lerp_position_ok(pos[k], hi);
  return bad == 0;
}

// The backward along the last axis (inner == 1) for rows of at most kLerpRowsInL1 values, every
// position already checked to lie in [0, n_in − 1]. One vectorisable pass computes grad_pos and
// each position's two rows and shares; a second, scalar pass adds the shares to grad_in. In a long
// row those additions hit neighbouring rows over and over (CoPE's counts move by less than 1 from
// one j to the next), so from kLerpCopiesFrom positions on, consecutive j go to kLerpCopies
// interleaved copies of the row (j mod kLerpCopies), summed at the end: no chain of dependent
// read-modify-writes through one address. A shorter row adds straight into grad_in (the copies'
// zeroing and summing would cost more than the chain). Either way the summation order is fixed by
// the shape.
constexpr int64_t kLerpRowsInL1 = 1024;
constexpr int64_t kLerpCopies = 4;  // summed below as (c0 + c1) + (c2 + c3)
constexpr int64_t kLerpCopiesFrom = 64;

template <class T>
void lerp_backward_rows(T* gi, T* gp, const T* go, const T* src, const T* ps, int64_t outer,
                        int64_t n_in, int64_t n_idx, bool parallel) {
  const int32_t last = static_cast<int32_t>(n_in - 1);
  const bool use_copies = n_idx >= kLerpCopiesFrom;
  auto rows = [&](int64_t o0, int64_t o1) {
    std::vector<T> copies(gi && use_copies ? static_cast<size_t>(kLerpCopies * n_in) : 0);
    std::vector<T> lo(static_cast<size_t>(n_idx)), up(static_cast<size_t>(n_idx));
    std::vector<int32_t> k0(static_cast<size_t>(n_idx)), k1(static_cast<size_t>(n_idx));
    std::vector<T> no_gp(gp ? 0 : static_cast<size_t>(n_idx));  // grad_pos not wanted
    for (int64_t o = o0; o < o1; ++o) {
      const T* sb = src + o * n_in;
      const T* pr = ps + o * n_idx;
      const T* gr = go + o * n_idx;
      T* gpr = gp ? gp + o * n_idx : no_gp.data();
      T* los = lo.data();
      T* ups = up.data();
      int32_t* ka = k0.data();
      int32_t* kb = k1.data();
#pragma omp simd
      for (int64_t j = 0; j < n_idx; ++j) {
        const T u = pr[j];
        const int32_t k = static_cast<int32_t>(u);  // truncation = floor for u >= 0
        const int32_t kn = k + (k < last ? 1 : 0);
        const T g = gr[j], gw = g * (u - static_cast<T>(k));
        gpr[j] = g * (sb[kn] - sb[k]);
        ka[j] = k;
        kb[j] = kn;
        los[j] = g - gw;
        ups[j] = gw;
      }
      if (!gi) continue;
      T* ab = gi + o * n_in;
      if (!use_copies) {
        std::fill(ab, ab + n_in, T(0));
        for (int64_t j = 0; j < n_idx; ++j) {
          ab[ka[j]] += los[j];
          ab[kb[j]] += ups[j];
        }
        continue;
      }
      T* acc = copies.data();
      std::fill(copies.begin(), copies.end(), T(0));
      for (int64_t j = 0; j < n_idx; ++j) {
        T* a = acc + (j % kLerpCopies) * n_in;
        a[ka[j]] += los[j];
        a[kb[j]] += ups[j];
      }
#pragma omp simd
      for (int64_t r = 0; r < n_in; ++r)
        ab[r] = (acc[r] + acc[n_in + r]) + (acc[2 * n_in + r] + acc[3 * n_in + r]);
    }
  };
  if (outer > 1 && cpu::use_threads(parallel)) {
#pragma omp parallel
    {
      int64_t o0, o1;
      cpu::split_range(outer, omp_get_thread_num(), omp_get_num_threads(), &o0, &o1);
      if (o0 < o1) rows(o0, o1);
    }
  } else {
    rows(0, outer);
  }
}

}  // namespace

void CpuBackend::gather_lerp(const View& out, const View& in, const View& pos, int64_t outer,
                             int64_t n_in, int64_t n_idx, int64_t inner) {
  const FloatOp op = check_gather_lerp(out, in, pos, outer, n_in, n_idx, inner);
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  const IndexChunks chunks(outer, n_idx);
  const int64_t jw = chunks.width, nj = chunks.count;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in.data);
    const T* ps = static_cast<const T*>(pos.data);
    T* dst = static_cast<T*>(out.data);
    // No row to read (the fast path below reads row 0 before it reports a bad position).
    if (n_in == 0) lerp_position_error(ps, total, n_in, op.name);
    const T hi = static_cast<T>(n_in - 1);
    const bool small = n_in <= INT32_MAX;
    const int32_t last = small ? static_cast<int32_t>(n_in - 1) : 0;
    if (inner == 1 && small) {
      // Along the last axis: every position checked first (one long pass), then rows without a
      // reduction, branch-free and vectorisable (32-bit row indices, gathers).
      if (!lerp_positions_ok(ps, total, hi)) lerp_position_error(ps, total, n_in, op.name);
      cpu::parallel_for(outer * nj, total > kParallelGrain, [&](int64_t t) {
        const int64_t o = t / nj, j0 = (t % nj) * jw, j1 = std::min(n_idx, j0 + jw);
        const T* sb = src + o * n_in;
        const T* pr = ps + o * n_idx;
        T* dr = dst + o * n_idx;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) {
          const T u = pr[j];
          const int32_t k = static_cast<int32_t>(u);  // truncation = floor for u >= 0
          const int32_t k1 = k + (k < last ? 1 : 0);
          const T w = u - static_cast<T>(k);
          const T a0 = sb[k], a1 = sb[k1];
          dr[j] = a0 + w * (a1 - a0);
        }
      });
      return;
    }
    const bool bad = cpu::parallel_any(outer * nj, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nj, j0 = (t % nj) * jw, j1 = std::min(n_idx, j0 + jw);
      const T* sb = src + o * n_in * inner;
      bool task_bad = false;
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t e0 = (o * n_idx + j) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const T u = ps[e0 + i];
          if (!lerp_position_ok(u, hi)) {
            task_bad = true;
            dst[e0 + i] = T(0);
            continue;
          }
          int64_t k, k1;
          T w;
          lerp_at(u, n_in, k, k1, w);
          const T a0 = sb[k * inner + i], a1 = sb[k1 * inner + i];
          dst[e0 + i] = a0 + w * (a1 - a0);
        }
      }
      return task_bad;
    });
    if (bad) lerp_position_error(ps, total, n_in, op.name);
  });
}

void CpuBackend::gather_lerp_backward(const View& grad_in, const View& grad_pos,
                                      const View& grad_out, const View& in, const View& pos,
                                      int64_t outer, int64_t n_in, int64_t n_idx, int64_t inner) {
  const FloatOp op =
      check_gather_lerp_backward(grad_in, grad_pos, grad_out, in, pos, outer, n_in, n_idx, inner);
  const int64_t total = outer * n_idx * inner;
  // Tasks own whole accumulator columns: (slice o, chunk of the inner columns), j in order, so the
  // sums do not depend on the thread count.
  const int nth = omp_get_max_threads();
  const int64_t chunks = outer >= nth ? 1 : std::min<int64_t>(ceil_div(nth, outer) * 2, inner);
  const int64_t cw = ceil_div(inner, std::max<int64_t>(chunks, 1));
  const int64_t nc = inner == 0 ? 0 : ceil_div(inner, cw);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in.data);
    const T* ps = static_cast<const T*>(pos.data);
    const T* go = static_cast<const T*>(grad_out.data);
    T* gi = static_cast<T*>(grad_in.data);
    T* gp = static_cast<T*>(grad_pos.data);
    if (total > 0 && n_in == 0) lerp_position_error(ps, total, n_in, op.name);  // no row to read
    const T hi = static_cast<T>(n_in - 1);
    if (inner == 1 && n_in <= kLerpRowsInL1) {
      if (!lerp_positions_ok(ps, total, hi)) lerp_position_error(ps, total, n_in, op.name);
      lerp_backward_rows(gi, gp, go, src, ps, outer, n_in, n_idx, total > kParallelGrain);
      return;
    }
    const bool bad = cpu::parallel_any(outer * nc, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / nc, i0 = (t % nc) * cw, i1 = std::min(inner, i0 + cw);
      bool task_bad = false;
      const T* sb = src + o * n_in * inner;
      T* ab = gi ? gi + o * n_in * inner : nullptr;
      if (ab)
        for (int64_t r = 0; r < n_in; ++r)
          for (int64_t i = i0; i < i1; ++i) ab[r * inner + i] = T(0);
      for (int64_t j = 0; j < n_idx; ++j) {
        const int64_t e0 = (o * n_idx + j) * inner;
        for (int64_t i = i0; i < i1; ++i) {
          const T u = ps[e0 + i], g = go[e0 + i];
          if (!lerp_position_ok(u, hi)) {
            task_bad = true;
            if (gp) gp[e0 + i] = T(0);
            continue;
          }
          int64_t k, k1;
          T w;
          lerp_at(u, n_in, k, k1, w);
          if (gp) gp[e0 + i] = g * (sb[k1 * inner + i] - sb[k * inner + i]);
          if (ab) {
            const T gw = g * w;
            ab[k * inner + i] += g - gw;
            ab[k1 * inner + i] += gw;
          }
        }
      }
      return task_bad;
    });
    if (bad) lerp_position_error(ps, total, n_in, op.name);
  });
}

// =====================================================================================
void CpuBackend::dropout_mask(const View& mask, double p, uint64_t seed, uint64_t offset) {
  const FloatOp op = check_dropout_mask(mask, p);
  const int64_t n = mask.numel();
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* m = static_cast<T*>(mask.data);
    const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    cpu::parallel_for(n, n > kParallelGrain, [&](int64_t i) {
      m[i] = rng_uniform(seed, offset + static_cast<uint64_t>(i)) >= p ? keep : T(0);
    });
  });
}

void CpuBackend::random_uniform(const View& out, double lo, double hi, uint64_t seed,
                                uint64_t offset) {
  const FloatOp op = check_random_uniform(out);
  const int64_t n = out.numel();
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    const double w = hi - lo;
    cpu::parallel_for(n, n > kParallelGrain, [&](int64_t i) {
      o[i] = static_cast<T>(lo + w * rng_uniform(seed, offset + static_cast<uint64_t>(i)));
    });
  });
}

void CpuBackend::random_normal(const View& out, double mean, double std, uint64_t seed,
                               uint64_t offset) {
  const FloatOp op = check_random_normal(out);
  const int64_t n = out.numel();
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    cpu::parallel_for(n, n > kParallelGrain / 4, [&](int64_t i) {
      o[i] = static_cast<T>(mean + std * rng_normal(seed, offset + static_cast<uint64_t>(i)));
    });
  });
}

// =====================================================================================
namespace {

// g[0, len) * sc into buf (a separate loop, so each product is rounded to T before any later use,
// as unary MulScalar's are: fused into the update's arithmetic it could be contracted into an
// FMA); returns buf.
template <class T>
const T* scaled_chunk(const T* g, int64_t len, T sc, T* buf) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) buf[i] = g[i] * sc;
  return buf;
}

// AdamW on `count` parameters' buffers of one dtype T with the same settings, in chunks of kChunk
// elements: one loop over every parameter's chunks, split over the threads when their elements
// together are above the grain. Each element's result does not depend on the split. grad_scale !=
// 1 first multiplies each gradient element by T(grad_scale), as unary MulScalar would (the clip).
template <class T>
void adamw_chunks(const Backend::AdamWBuffers* bufs, size_t count, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double bias_correction1,
                  double bias_correction2, double grad_scale = 1.0) {
  // PyTorch AdamW: p *= 1 - lr*wd; m = lerp(m, g, 1-b1); v = b2*v + (1-b2)*g*g;
  // p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), ob1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), ob2 = static_cast<T>(1.0 - beta2);
  const T step = static_cast<T>(lr / bias_correction1);
  const T inv_bc2_sqrt = static_cast<T>(1.0 / std::sqrt(bias_correction2));
  const T e = static_cast<T>(eps);
  const T sc = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  constexpr int64_t kChunk = 512;
  // first[k]: parameter k's first chunk; first[count]: the chunk count (on the heap only for a
  // model of more than 127 parameter tensors)
  SmallVector<int64_t, 128> first_chunk(count + 1);
  int64_t* first = first_chunk.data();
  int64_t chunks = 0, total = 0;
  for (size_t k = 0; k < count; ++k) {
    const int64_t n = bufs[k].param.numel();
    first[k] = chunks;
    chunks += (n + kChunk - 1) / kChunk;
    total += n;
  }
  first[count] = chunks;
  cpu::parallel_for(chunks, total > kParallelGrain, [&](int64_t c) {
    const size_t k = static_cast<size_t>(std::upper_bound(first, first + count + 1, c) - first) - 1;
    const Backend::AdamWBuffers& b = bufs[k];
    const int64_t n = b.param.numel();
    const int64_t i0 = (c - first[k]) * kChunk, len = std::min(kChunk, n - i0);
    T* pc = static_cast<T*>(b.param.data) + i0;
    T* mc = static_cast<T*>(b.m.data) + i0;
    T* vc = static_cast<T*>(b.v.data) + i0;
    const T* gc = static_cast<const T*>(b.grad.data) + i0;
    T den[kChunk];
    if (scaled) gc = scaled_chunk(gc, len, sc, den);  // den: scratch until the moments below
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const T gi = gc[i];
      mc[i] = b1 * mc[i] + ob1 * gi;
      const T vi = b2 * vc[i] + ob2 * gi * gi;
      vc[i] = vi;
      den[i] = vi;
    }
    cpu::sqrt_inplace(den, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i)
      pc[i] = pc[i] * decay - step * mc[i] / (den[i] * inv_bc2_sqrt + e);
  });
}

// Runs f(k0, k1, tag) on each run [k0, k1) of consecutive buffers of one dtype (tag: a T{}),
// dispatched by op.
template <class Buf, class F>
void by_dtype_runs(const std::vector<Buf>& bufs, const FloatOp& op, F&& f) {
  for (size_t k0 = 0; k0 < bufs.size();) {
    size_t k1 = k0 + 1;
    while (k1 < bufs.size() && bufs[k1].param.dtype == bufs[k0].param.dtype) ++k1;
    op.dispatch(bufs[k0].param.dtype, [&](auto tag) { f(k0, k1, tag); });
    k0 = k1;
  }
}

// SGD with momentum / Nesterov on one buffer, in chunks of kChunk elements split over the threads
// above the grain; grad_scale != 1 first multiplies each gradient element by T(grad_scale).
template <class T>
void sgd_impl(const View& param, const View& grad, const View& momentum_buf, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step, double grad_scale) {
  const int64_t n = param.numel();
  const bool use_mom = momentum != 0.0;
  T* p = static_cast<T*>(param.data);
  const T* g = static_cast<const T*>(grad.data);
  T* buf = static_cast<T*>(momentum_buf.data);
  const T lrt = static_cast<T>(lr), wd = static_cast<T>(weight_decay);
  const T mu = static_cast<T>(momentum), damp = static_cast<T>(1.0 - dampening);
  const T sc = static_cast<T>(grad_scale);
  // f(i0, i1) over chunks of kChunk elements, split over the threads above the grain
  constexpr int64_t kChunk = 512;
  auto chunks = [&](auto&& f) {
    cpu::parallel_for((n + kChunk - 1) / kChunk, n > kParallelGrain,
                      [&](int64_t c) { f(c * kChunk, std::min(n, (c + 1) * kChunk)); });
  };
  // the invariant choices (scaling, momentum, first step, nesterov) are compile-time in each loop
  // so it vectorises
  auto run = [&](auto scaled_c, auto mom_c, auto first_c, auto nesterov_c) {
    constexpr bool kScaled = decltype(scaled_c)::value, kMom = decltype(mom_c)::value;
    [[maybe_unused]] constexpr bool kFirst = decltype(first_c)::value;
    [[maybe_unused]] constexpr bool kNesterov = decltype(nesterov_c)::value;
    T* pp = p;
    T* bp = buf;
    const T* gp = g;
    const T lr_ = lrt, wd_ = wd, mu_ = mu, damp_ = damp, sc_ = sc;
    chunks([&](int64_t i0, int64_t i1) {
      T gbuf[kScaled ? kChunk : 1];
      const T* gq = kScaled ? scaled_chunk(gp + i0, i1 - i0, sc_, gbuf) - i0 : gp;
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const T d = gq[i] + wd_ * pp[i];  // wd == 0 adds an exact zero
        if constexpr (!kMom) {
          pp[i] -= lr_ * d;
        } else {
          const T b = kFirst ? d : mu_ * bp[i] + damp_ * d;  // PyTorch: buffer = d on the first step
          bp[i] = b;
          pp[i] -= lr_ * (kNesterov ? d + mu_ * b : b);
        }
      }
    });
  };
  using F = std::false_type;
  using Tr = std::true_type;
  auto with_scale = [&](auto... c) {
    if (grad_scale != 1.0) run(Tr{}, c...);
    else run(F{}, c...);
  };
  if (!use_mom) {
    with_scale(F{}, F{}, F{});
  } else if (first_step) {
    nesterov ? with_scale(Tr{}, Tr{}, Tr{}) : with_scale(Tr{}, Tr{}, F{});
  } else {
    nesterov ? with_scale(Tr{}, F{}, Tr{}) : with_scale(Tr{}, F{}, F{});
  }
}

// The values of a guarded update's control (Backend::update_control; checked by the step's
// check_*_step_guarded first), in host memory here.
struct Control {
  double scale, update, t;
};
Control read_control(const View& control) {
  const double* c = static_cast<const double*>(control.data);
  return {c[0], c[1], c[2]};
}

}  // namespace

void CpuBackend::adamw_step(const View& param, const View& grad, const View& m, const View& v,
                            double lr, double beta1, double beta2, double eps, double weight_decay,
                            double bias_correction1, double bias_correction2) {
  const FloatOp op = check_adamw_step(param, grad, m, v, bias_correction1, bias_correction2);
  const AdamWBuffers b{param, grad, m, v};
  op.dispatch([&](auto tag) {
    adamw_chunks<decltype(tag)>(&b, 1, lr, beta1, beta2, eps, weight_decay, bias_correction1,
                                bias_correction2);
  });
}

// Every parameter in one parallel loop (runs of one dtype each): one region for the step instead
// of one per parameter above the grain, and the parameters below it (a d 128 model's 128 x 128
// projections, biases, layer norms) no longer run on one thread while the others wait.
void CpuBackend::adamw_step_many(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                                 double beta2, double eps, double weight_decay,
                                 double bias_correction1, double bias_correction2) {
  const FloatOp op = check_adamw_step_many(bufs, bias_correction1, bias_correction2);
  by_dtype_runs(bufs, op, [&](size_t k0, size_t k1, auto tag) {
    adamw_chunks<decltype(tag)>(bufs.data() + k0, k1 - k0, lr, beta1, beta2, eps, weight_decay,
                                bias_correction1, bias_correction2);
  });
}

// As adamw_step_many, with the scale, the decision and the step count from the control record; the
// bias corrections as AdamW::step computes them on the host (1 - std::pow(beta, t)).
void CpuBackend::adamw_step_guarded(const std::vector<AdamWBuffers>& bufs, double lr,
                                    double beta1, double beta2, double eps, double weight_decay,
                                    const View& control) {
  const FloatOp op = check_adamw_step_guarded(control);
  const Control c = read_control(control);
  if (c.update == 0.0) return;
  const double bc1 = 1.0 - std::pow(beta1, c.t), bc2 = 1.0 - std::pow(beta2, c.t);
  check_adamw_step_many(bufs, bc1, bc2);
  by_dtype_runs(bufs, op, [&](size_t k0, size_t k1, auto tag) {
    adamw_chunks<decltype(tag)>(bufs.data() + k0, k1 - k0, lr, beta1, beta2, eps, weight_decay,
                                bc1, bc2, c.scale);
  });
}

void CpuBackend::sgd_step(const View& param, const View& grad, const View& momentum_buf, double lr,
                          double momentum, double dampening, double weight_decay, bool nesterov,
                          bool first_step) {
  const FloatOp op = check_sgd_step(param, grad, momentum_buf, momentum != 0.0);
  op.dispatch([&](auto tag) {
    sgd_impl<decltype(tag)>(param, grad, momentum_buf, lr, momentum, dampening, weight_decay,
                            nesterov, first_step, 1.0);
  });
}

void CpuBackend::sgd_step_guarded(const std::vector<SGDBuffers>& bufs, double lr, double momentum,
                                  double dampening, double weight_decay, bool nesterov,
                                  const View& control) {
  const FloatOp op = check_sgd_step_guarded(control);
  const Control c = read_control(control);
  if (c.update == 0.0) return;
  check_sgd_step_many(bufs, momentum != 0.0);
  for (const SGDBuffers& b : bufs)
    op.dispatch(b.param.dtype, [&](auto tag) {
      sgd_impl<decltype(tag)>(b.param, b.grad, b.momentum_buf, lr, momentum, dampening,
                              weight_decay, nesterov, c.t == 1.0, c.scale);
    });
}

void CpuBackend::update_control(const View& control, const View& step, double max_norm) {
  check_update_control(control, step, max_norm);
  double* st = static_cast<double*>(step.data);
  double* c = static_cast<double*>(control.data);
  // PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when it is below 1; a
  // non-finite norm or loss leaves everything as it is (the step is skipped).
  const double norm = std::sqrt(st[1]);
  st[2] = norm;
  const bool update = std::isfinite(norm) && std::isfinite(st[0]);
  const double coef = update ? max_norm / (norm + 1e-6) : 1.0;
  c[0] = coef < 1.0 ? coef : 1.0;
  c[1] = update ? 1.0 : 0.0;
  c[2] += c[1];
}

}  // namespace pelab
