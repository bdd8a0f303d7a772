// pelab — CUDA fused NN kernels: softmax / log-softmax (+ backward), layer norm (+ backward, with
// grad_weight/grad_bias as fixed-order two-pass partial sums), fused mean cross-entropy (+ backward;
// the mean's divisor counted and the targets checked on the device), index_select / index_add /
// gather / scatter_add (accumulation parallel over (outer, inner) only, j in order per chunk,
// bounds via the device error record), gather_lerp
// (+ backward, positions checked through the same record), counter-based random
// fills and dropout masks (the CPU's rng functions, so masks are identical on both devices), and the
// AdamW / SGD steps (per parameter, and guarded: many parameters per launch under a device-side
// control record). Row statistics of Float32 data accumulate in double, as on the CPU.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "backend_checks.h"
#include "cuda/cuda_common.cuh"
#include "pelab/random.h"

namespace pelab {
namespace {

using cuda::ceil_div;
using cuda::grid_for;
using cuda::kThreads;
using cuda::row_threads;

std::string rows_ctx(int64_t outer, int64_t n, int64_t inner, DType dt) {
  std::ostringstream os;
  os << " ([" << outer << ", " << n << ", " << inner << "] " << dtype_name(dt) << ")";
  return os.str();
}

// ---------------- softmax ----------------
template <class T>
__global__ void softmax_rows(T* y, const T* x, int64_t outer, int64_t n, bool log) {
  __shared__ T smax[256];
  __shared__ double ssum[256];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * n;
    T* yr = y + o * n;
    T m = xr[0];
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
    m = cuda::block_max<T>(m, smax);
    double s = 0;
    if (!log) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T e = cuda::dexp(xr[j] - m);
        yr[j] = e;
        s += static_cast<double>(e);
      }
    } else {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        s += static_cast<double>(cuda::dexp(xr[j] - m));
    }
    s = cuda::block_sum<double>(s, ssum);
    if (!log) {
      const T inv = static_cast<T>(1.0 / s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= inv;  // own elements only
    } else {
      const T shift = static_cast<T>(static_cast<double>(m) + ::log(s));
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = xr[j] - shift;
    }
  }
}

template <class T>
__global__ void softmax_cols(T* y, const T* x, int64_t outer, int64_t n, int64_t inner, bool log) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    T m = xc[0];
    for (int64_t j = 1; j < n; ++j) m = xc[j * inner] > m ? xc[j * inner] : m;
    double s = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T e = cuda::dexp(xc[j * inner] - m);
      if (!log) yc[j * inner] = e;
      s += static_cast<double>(e);
    }
    if (log) {
      const T f = static_cast<T>(static_cast<double>(m) + ::log(s));
      for (int64_t j = 0; j < n; ++j) yc[j * inner] = xc[j * inner] - f;
    } else {
      const T f = static_cast<T>(1.0 / s);
      for (int64_t j = 0; j < n; ++j) yc[j * inner] *= f;
    }
  }
}

template <class T>
__global__ void softmax_bwd_rows(T* gi, const T* g, const T* y, int64_t outer, int64_t n, bool log) {
  __shared__ double ssum[256];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* gr = g + o * n;
    const T* yr = y + o * n;
    T* w = gi + o * n;
    double s = 0;
    if (!log) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        s += static_cast<double>(gr[j]) * static_cast<double>(yr[j]);
    } else {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += static_cast<double>(gr[j]);
    }
    const T d = static_cast<T>(cuda::block_sum<double>(s, ssum));
    if (!log) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) w[j] = yr[j] * (gr[j] - d);
    } else {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) w[j] = gr[j] - cuda::dexp(yr[j]) * d;
    }
  }
}

template <class T>
__global__ void softmax_bwd_cols(T* gi, const T* g, const T* y, int64_t outer, int64_t n,
                                 int64_t inner, bool log) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    const int64_t base = o * n * inner + i;
    double s = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      s += log ? static_cast<double>(g[k]) : static_cast<double>(g[k]) * static_cast<double>(y[k]);
    }
    const T d = static_cast<T>(s);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      gi[k] = log ? g[k] - cuda::dexp(y[k]) * d : y[k] * (g[k] - d);
    }
  }
}

// ---------------- layer norm ----------------
template <class T>
__global__ void layer_norm_rows(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b,
                                int64_t rows, int64_t n, double eps) {
  __shared__ double sm[256];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(xr[i]);
    const double mu = cuda::block_sum<double>(s, sm) / static_cast<double>(n);
    double q = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = static_cast<double>(xr[i]) - mu;
      q += d * d;
    }
    q = cuda::block_sum<double>(q, sm);
    const double rs = 1.0 / ::sqrt(q / static_cast<double>(n) + eps);
    if (threadIdx.x == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(rs);
    }
    const T m = static_cast<T>(mu), k = static_cast<T>(rs);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      T v = (xr[i] - m) * k;
      if (w) v = v * w[i];
      if (b) v = v + b[i];
      yr[i] = v;
    }
  }
}

// gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w
template <class T>
__global__ void layer_norm_bwd_rows(T* gx, const T* gy, const T* x, const T* mean, const T* rstd,
                                    const T* w, int64_t rows, int64_t n) {
  __shared__ double sm[256];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    const T* gr = gy + r * n;
    const T m = mean[r], k = rstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const T g = w ? gr[i] * w[i] : gr[i];
      s1 += static_cast<double>(g);
      s2 += static_cast<double>(g * ((xr[i] - m) * k));
    }
    s1 = cuda::block_sum<double>(s1, sm);
    s2 = cuda::block_sum<double>(s2, sm);
    const T a = static_cast<T>(s1 / static_cast<double>(n));
    const T c = static_cast<T>(s2 / static_cast<double>(n));
    T* out = gx + r * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const T g = w ? gr[i] * w[i] : gr[i];
      out[i] = k * (g - a - (xr[i] - m) * k * c);
    }
  }
}

// Pass 1: per (row block, column) partial sums of gy * xhat and gy, in double.
template <class T>
__global__ void layer_norm_param_partials(double* pw, double* pb, const T* gy, const T* x,
                                          const T* mean, const T* rstd, int64_t rows, int64_t n,
                                          int64_t nb, int64_t rb) {
  PELAB_KERNEL_LOOP(t, nb * n) {
    const int64_t blk = t / n, i = t % n;
    const int64_t r1 = min(rows, (blk + 1) * rb);
    double sw = 0, sb = 0;
    for (int64_t r = blk * rb; r < r1; ++r) {
      const double g = static_cast<double>(gy[r * n + i]);
      sw += g * static_cast<double>((x[r * n + i] - mean[r]) * rstd[r]);
      sb += g;
    }
    pw[t] = sw;
    pb[t] = sb;
  }
}

// Pass 2: per column, the row-block partials in block order.
template <class T>
__global__ void layer_norm_param_final(T* gw, T* gb, const double* pw, const double* pb, int64_t n,
                                       int64_t nb) {
  PELAB_KERNEL_LOOP(i, n) {
    double sw = 0, sb = 0;
    for (int64_t blk = 0; blk < nb; ++blk) {
      sw += pw[blk * n + i];
      sb += pb[blk * n + i];
    }
    if (gw) gw[i] = static_cast<T>(sw);
    if (gb) gb[i] = static_cast<T>(sb);
  }
}

// ---------------- cross-entropy ----------------
// A row whose target is outside [0, C) and not ignore_index gets loss 0, is not counted, and is
// reported through the device error record (a bad index's path).
template <class T>
__global__ void cross_entropy_rows(T* lp, T* ep, double* count, const T* xp, const int64_t* tg,
                                   int64_t rows, int64_t C, int64_t ignore_index, double s,
                                   cuda::ErrorSink sink) {
  __shared__ T smax[256];
  __shared__ double ssum[256];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = xp + r * C;
    T m = x[0];
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) m = x[i] > m ? x[i] : m;
    m = cuda::block_max<T>(m, smax);
    double se = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) se += static_cast<double>(cuda::dexp(x[i] - m));
    se = cuda::block_sum<double>(se, ssum);
    const double l = static_cast<double>(m) + ::log(se);
    const int64_t t = tg[r];
    const bool bad = t != ignore_index && (t < 0 || t >= C);
    if (t == ignore_index || bad) {  // uniform over the block
      if (threadIdx.x == 0) {
        ep[r] = static_cast<T>(l);
        lp[r] = T(0);
        if (bad) cuda::report_error(sink, cuda::kCrossEntropy, r, t, C);
      }
      continue;
    }
    double dot = (1.0 - s) * static_cast<double>(x[t]);
    if (s != 0.0) {
      double sx = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sx += static_cast<double>(x[i]);
      sx = cuda::block_sum<double>(sx, ssum);
      dot += s / static_cast<double>(C) * sx;
    }
    if (threadIdx.x == 0) {
      ep[r] = static_cast<T>(l);
      lp[r] = static_cast<T>(l - dot);
      atomicAdd(count, 1.0);  // whole numbers: exact in any order
    }
  }
}

// The mean: loss = T(total) * T(1 / count), as the CPU forms it; 0 when no row counts.
template <class T>
__global__ void cross_entropy_mean(T* loss, const T* total, const double* count) {
  const double c = *count;
  *loss = c > 0 ? *total * static_cast<T>(1.0 / c) : T(0);
}

// scale = g / count from the device: each thread forms sc, off and hit as the CPU does on the host.
template <class T>
__global__ void cross_entropy_bwd(T* gp, const T* xp, const T* ep, const int64_t* tg, int64_t rows,
                                  int64_t C, int64_t ignore_index, double smoothing,
                                  const T* grad_loss, const double* count) {
  const double scale = static_cast<double>(*grad_loss) / *count;
  const T sc = static_cast<T>(scale);
  const T off = static_cast<T>(scale * smoothing / static_cast<double>(C));
  const T hit = static_cast<T>(scale * (1.0 - smoothing));
  PELAB_KERNEL_LOOP(e, rows * C) {
    const int64_t r = e / C, i = e % C;
    const int64_t t = tg[r];
    if (t == ignore_index) {
      gp[e] = T(0);
      continue;
    }
    T g = sc * cuda::dexp(xp[e] - ep[r]) - off;
    if (i == t) g -= hit;
    gp[e] = g;
  }
}

// ---------------- indexing ----------------
template <class T>
__global__ void index_select_kernel(T* out, const T* in, const int64_t* ix, int64_t outer,
                                    int64_t n_in, int64_t n_idx, int64_t inner,
                                    cuda::ErrorSink sink) {
  PELAB_KERNEL_LOOP(e, outer * n_idx * inner) {
    const int64_t i = e % inner, j = (e / inner) % n_idx, o = e / (inner * n_idx);
    const int64_t v = ix[j];
    if (v < 0 || v >= n_in) {
      cuda::report_error(sink, cuda::kIndexSelect, j, v, n_in);
      out[e] = T(0);
      continue;
    }
    out[e] = in[(o * n_in + v) * inner + i];
  }
}

template <class T>
__global__ void gather_kernel(T* out, const T* in, const int64_t* ix, int64_t outer, int64_t n_in,
                              int64_t n_idx, int64_t inner, int64_t P, cuda::ErrorSink sink) {
  PELAB_KERNEL_LOOP(e, outer * n_idx * inner) {
    const int64_t i = e % inner, o = e / (inner * n_idx);
    const int64_t pos = ((o % P) * n_idx + (e / inner) % n_idx) * inner + i;
    const int64_t v = ix[pos];
    if (v < 0 || v >= n_in) {
      cuda::report_error(sink, cuda::kGather, pos, v, n_in);
      out[e] = T(0);
      continue;
    }
    out[e] = in[(o * n_in + v) * inner + i];
  }
}

// Accumulation into acc[o, idx, i] from src[o, j, i], j in [j0, j1) in order. `per_element` selects
// scatter_add (idx[o, j, i]) over index_add (idx[j]). One thread per (o, chunk, i): threads never
// share a destination, so there are no atomics and the order is fixed. With nc > 1 chunks the
// thread adds into its own slice of `part` ([outer, nc, n_in, inner], zeroed), which
// accumulate_partials then adds to acc in chunk order.
template <class T, bool per_element>
__global__ void accumulate_kernel(T* acc, T* part, const T* src, const int64_t* ix, int64_t outer,
                                  int64_t n_in, int64_t n_idx, int64_t inner, int64_t nc,
                                  int64_t chunk, int64_t P, cuda::ErrorSink sink, int code) {
  PELAB_KERNEL_LOOP(t, outer * nc * inner) {
    const int64_t i = t % inner, c = (t / inner) % nc, o = t / (inner * nc);
    T* dst = part ? part + (o * nc + c) * n_in * inner : acc + o * n_in * inner;
    const int64_t j1 = min(n_idx, (c + 1) * chunk);
    for (int64_t j = c * chunk; j < j1; ++j) {
      const int64_t pos = per_element ? ((o % P) * n_idx + j) * inner + i : j;
      const int64_t v = ix[pos];
      if (v < 0 || v >= n_in) {
        cuda::report_error(sink, code, pos, v, n_in);
        continue;
      }
      dst[v * inner + i] += src[(o * n_idx + j) * inner + i];
    }
  }
}

template <class T>
__global__ void accumulate_partials(T* acc, const T* part, int64_t outer, int64_t n_in,
                                    int64_t inner, int64_t nc) {
  PELAB_KERNEL_LOOP(t, outer * n_in * inner) {
    const int64_t i = t % inner, r = (t / inner) % n_in, o = t / (inner * n_in);
    T a = acc[t];
    for (int64_t c = 0; c < nc; ++c) a += part[((o * nc + c) * n_in + r) * inner + i];
    acc[t] = a;
  }
}

// Shared driver of index_add / scatter_add. The chunk count depends only on the shape.
template <class T, bool per_element>
void accumulate(T* acc, const T* src, const int64_t* ix, int64_t outer, int64_t n_in, int64_t n_idx,
                int64_t inner, int code, const char* op, int64_t P = 1) {
  const int64_t cols = outer * inner;
  if (cols == 0 || n_idx == 0) return;
  int64_t nc = 1;
  if (cols < 16384 && n_idx > 64) {
    nc = std::min(ceil_div(n_idx, 32), ceil_div(65536, cols));
    const int64_t slice = outer * n_in * inner;  // partial elements per chunk
    while (nc > 1 && nc * slice > (int64_t(64) << 20)) nc /= 2;
  }
  const int64_t chunk = ceil_div(n_idx, nc);
  nc = ceil_div(n_idx, chunk);
  std::ostringstream ctx;
  ctx << " ([" << outer << ", " << n_in << "/" << n_idx << ", " << inner << "], " << nc
      << " chunks)";
  if (nc == 1) {
    accumulate_kernel<T, per_element><<<grid_for(cols), kThreads>>>(
        acc, nullptr, src, ix, outer, n_in, n_idx, inner, 1, n_idx, P, cuda::error_sink(),
        code);
    cuda::check_launch(op, ctx.str());
  } else {
    const int64_t np = outer * nc * n_in * inner;
    cuda::DeviceBuffer part(sizeof(T) * np);
    PELAB_CUDA_CALL(cudaMemsetAsync(part.as<T>(), 0, sizeof(T) * np, 0), ctx.str());
    accumulate_kernel<T, per_element><<<grid_for(cols * nc), kThreads>>>(
        acc, part.as<T>(), src, ix, outer, n_in, n_idx, inner, nc, chunk, P,
        cuda::error_sink(), code);
    cuda::check_launch(op, ctx.str());
    accumulate_partials<T><<<grid_for(outer * n_in * inner), kThreads>>>(acc, part.as<T>(), outer,
                                                                        n_in, inner, nc);
    cuda::check_launch(op, ctx.str());
  }
  cuda::after_index_kernel();
}

// ---------------- gather_lerp ----------------
// Whether u is a valid position for a row of n_in values; if not, reports it (flat index e).
template <class T>
__device__ __forceinline__ bool lerp_position_ok(T u, int64_t n_in, int64_t e,
                                                 cuda::ErrorSink sink) {
  if (u >= T(0) && u <= static_cast<T>(n_in - 1)) return true;
  cuda::report_error(sink, cuda::kGatherLerp, e, __double_as_longlong(static_cast<double>(u)),
                     n_in - 1);
  return false;
}

// k = ⌊u⌋, k1 = k + 1 (k at the upper edge), w = u - k (as on the CPU).
template <class T>
__device__ __forceinline__ void lerp_at(T u, int64_t n_in, int64_t& k, int64_t& k1, T& w) {
  k = static_cast<int64_t>(u);
  k1 = k + (k < n_in - 1 ? 1 : 0);
  w = u - static_cast<T>(k);
}

template <class T>
__global__ void gather_lerp_kernel(T* out, const T* in, const T* pos, int64_t outer, int64_t n_in,
                                   int64_t n_idx, int64_t inner, cuda::ErrorSink sink) {
  PELAB_KERNEL_LOOP(e, outer * n_idx * inner) {
    const int64_t i = e % inner, o = e / (inner * n_idx);
    const T u = pos[e];
    if (!lerp_position_ok(u, n_in, e, sink)) {
      out[e] = T(0);
      continue;
    }
    int64_t k, k1;
    T w;
    lerp_at(u, n_in, k, k1, w);
    const T a0 = in[(o * n_in + k) * inner + i], a1 = in[(o * n_in + k1) * inner + i];
    out[e] = a0 + w * (a1 - a0);
  }
}

template <class T>
__global__ void gather_lerp_grad_pos(T* gp, const T* go, const T* in, const T* pos, int64_t outer,
                                     int64_t n_in, int64_t n_idx, int64_t inner,
                                     cuda::ErrorSink sink) {
  PELAB_KERNEL_LOOP(e, outer * n_idx * inner) {
    const int64_t i = e % inner, o = e / (inner * n_idx);
    const T u = pos[e];
    if (!lerp_position_ok(u, n_in, e, sink)) {
      gp[e] = T(0);
      continue;
    }
    int64_t k, k1;
    T w;
    lerp_at(u, n_in, k, k1, w);
    gp[e] = go[e] * (in[(o * n_in + k1) * inner + i] - in[(o * n_in + k) * inner + i]);
  }
}

// One thread per (o, i) column of grad_in: zeroes it, then adds j in order (no atomics, so the
// sums are identical run to run).
template <class T>
__global__ void gather_lerp_grad_in(T* gi, const T* go, const T* pos, int64_t outer, int64_t n_in,
                                    int64_t n_idx, int64_t inner, cuda::ErrorSink sink) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t i = t % inner, o = t / inner;
    T* col = gi + o * n_in * inner + i;
    for (int64_t r = 0; r < n_in; ++r) col[r * inner] = T(0);
    for (int64_t j = 0; j < n_idx; ++j) {
      const int64_t e = (o * n_idx + j) * inner + i;
      const T u = pos[e];
      if (!lerp_position_ok(u, n_in, e, sink)) continue;
      int64_t k, k1;
      T w;
      lerp_at(u, n_in, k, k1, w);
      const T g = go[e], gw = g * w;
      col[k * inner] += g - gw;
      col[k1 * inner] += gw;
    }
  }
}

// ---------------- randomness ----------------
template <class T>
__global__ void dropout_kernel(T* m, int64_t n, double p, T keep, uint64_t seed, uint64_t offset) {
  PELAB_KERNEL_LOOP(i, n) {
    m[i] = rng_uniform(seed, offset + static_cast<uint64_t>(i)) >= p ? keep : T(0);
  }
}

template <class T>
__global__ void uniform_kernel(T* o, int64_t n, double lo, double w, uint64_t seed,
                               uint64_t offset) {
  PELAB_KERNEL_LOOP(i, n) {
    o[i] = static_cast<T>(lo + w * rng_uniform(seed, offset + static_cast<uint64_t>(i)));
  }
}

template <class T>
__global__ void normal_kernel(T* o, int64_t n, double mean, double std, uint64_t seed,
                              uint64_t offset) {
  PELAB_KERNEL_LOOP(i, n) {
    o[i] = static_cast<T>(mean + std * rng_normal(seed, offset + static_cast<uint64_t>(i)));
  }
}

// ---------------- optimizers ----------------
// PyTorch AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// One element's AdamW update from its gradient gi (both kernels below).
template <class T>
__device__ __forceinline__ void adamw_element(T& p, T gi, T& m, T& v, T decay, T b1, T ob1, T b2,
                                              T ob2, T step, T inv_bc2_sqrt, T e) {
  const T mi = b1 * m + ob1 * gi;
  m = mi;
  const T vi = b2 * v + ob2 * gi * gi;
  v = vi;
  p = p * decay - step * mi / (cuda::dsqrt(vi) * inv_bc2_sqrt + e);
}

template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T ob1, T b2,
                             T ob2, T step, T inv_bc2_sqrt, T e) {
  PELAB_KERNEL_LOOP(i, n) {
    adamw_element(p[i], g[i], m[i], v[i], decay, b1, ob1, b2, ob2, step, inv_bc2_sqrt, e);
  }
}

// One element's SGD update from its gradient gi (both kernels below).
template <class T>
__device__ __forceinline__ void sgd_element(T& p, T gi, T* buf, T lr, T wd, T mu, T damp,
                                            bool use_mom, bool first, bool nesterov) {
  const T d = gi + wd * p;  // wd == 0 adds an exact zero
  if (!use_mom) {
    p -= lr * d;
  } else {
    const T b = first ? d : mu * *buf + damp * d;  // PyTorch: buffer = d on the first step
    *buf = b;
    p -= lr * (nesterov ? d + mu * b : b);
  }
}

template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T wd, T mu, T damp,
                           bool use_mom, bool first, bool nesterov) {
  PELAB_KERNEL_LOOP(i, n) {
    sgd_element(p[i], g[i], use_mom ? buf + i : nullptr, lr, wd, mu, damp, use_mom, first,
                nesterov);
  }
}

// ---------------- guarded updates (Backend::update_control, *_step_guarded) ----------------
__global__ void update_control_kernel(double* c, double* st, double max_norm) {
  // PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when below 1; a non-finite
  // norm or loss skips the step.
  const double norm = sqrt(st[1]);
  st[2] = norm;
  const bool update = isfinite(norm) && isfinite(st[0]);
  const double coef = update ? max_norm / (norm + 1e-6) : 1.0;
  c[0] = coef < 1.0 ? coef : 1.0;
  c[1] = update ? 1.0 : 0.0;
  c[2] += c[1];
}

// adamw_kernel's update on kMultiChunk-element chunks of up to kMultiTensors parameters (ptr[0..3]
// = param, grad, exp_avg, exp_avg_sq), under the control record: scale, update?, step count.
template <class T>
__global__ void adamw_multi(cuda::MultiTable<4> tab, const double* ctl, double lr, double beta1,
                            double beta2, double eps, double weight_decay) {
  if (ctl[1] == 0.0) return;
  const double t = ctl[2], scale = ctl[0];
  const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), ob1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), ob2 = static_cast<T>(1.0 - beta2);
  const T step = static_cast<T>(lr / bc1), inv_bc2_sqrt = static_cast<T>(1.0 / sqrt(bc2));
  const T e = static_cast<T>(eps), sc = static_cast<T>(scale);
  const bool scaled = scale != 1.0;
  const int64_t b = blockIdx.x;
  const int k = cuda::multi_find(tab.first, tab.count, b);
  T* p = static_cast<T*>(tab.ptr[0][k]);
  const T* g = static_cast<const T*>(tab.ptr[1][k]);
  T* m = static_cast<T*>(tab.ptr[2][k]);
  T* v = static_cast<T*>(tab.ptr[3][k]);
  const int64_t i0 = (b - tab.first[k]) * cuda::kMultiChunk;
  const int64_t i1 = min(tab.n[k], i0 + cuda::kMultiChunk);
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const T gi = scaled ? cuda::dmul_rn(g[i], sc) : g[i];
    adamw_element(p[i], gi, m[i], v[i], decay, b1, ob1, b2, ob2, step, inv_bc2_sqrt, e);
  }
}

// sgd_kernel's update likewise (ptr[0..2] = param, grad, momentum buffer); the first step is t == 1.
template <class T>
__global__ void sgd_multi(cuda::MultiTable<3> tab, const double* ctl, double lr, double momentum,
                          double dampening, double weight_decay, bool nesterov) {
  if (ctl[1] == 0.0) return;
  const bool first = ctl[2] == 1.0, use_mom = momentum != 0.0;
  const double scale = ctl[0];
  const T lrt = static_cast<T>(lr), wd = static_cast<T>(weight_decay);
  const T mu = static_cast<T>(momentum), damp = static_cast<T>(1.0 - dampening);
  const T sc = static_cast<T>(scale);
  const bool scaled = scale != 1.0;
  const int64_t b = blockIdx.x;
  const int k = cuda::multi_find(tab.first, tab.count, b);
  T* p = static_cast<T*>(tab.ptr[0][k]);
  const T* g = static_cast<const T*>(tab.ptr[1][k]);
  T* buf = static_cast<T*>(tab.ptr[2][k]);
  const int64_t i0 = (b - tab.first[k]) * cuda::kMultiChunk;
  const int64_t i1 = min(tab.n[k], i0 + cuda::kMultiChunk);
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const T gi = scaled ? cuda::dmul_rn(g[i], sc) : g[i];
    sgd_element(p[i], gi, use_mom ? buf + i : nullptr, lrt, wd, mu, damp, use_mom, first,
                nesterov);
  }
}

// ---------------- pairwise rotation ----------------
// One thread per (row, pair) writes both members, so out may alias x.
template <class T>
__global__ void rotate_pairs_kernel(T* out, const T* x, const T* cs, const T* sn, int64_t rows,
                                    int64_t L, int64_t D, int64_t P, bool interleaved, T sgn) {
  PELAB_KERNEL_LOOP(i, rows * P) {
    const int64_t r = i / P, p = i % P;
    const int64_t a = interleaved ? 2 * p : p, b = interleaved ? 2 * p + 1 : p + P;
    const T* xr = x + r * D;
    const T c = cs[(r % L) * P + p], s = sgn * sn[(r % L) * P + p];
    const T va = xr[a], vb = xr[b];
    out[r * D + a] = va * c - vb * s;
    out[r * D + b] = vb * c + va * s;
  }
}
template <class T>
__global__ void rotate_pairs_tail(T* out, const T* x, int64_t rows, int64_t D, int64_t P) {
  const int64_t w = D - 2 * P;
  PELAB_KERNEL_LOOP(i, rows * w) {
    const int64_t r = i / w, d = 2 * P + i % w;
    out[r * D + d] = x[r * D + d];
  }
}

}  // namespace

// =====================================================================================
void CudaBackend::rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                               int64_t outer, int64_t L, int64_t D, int64_t P, bool interleaved,
                               bool inverse) {
  const FloatOp op = check_rotate_pairs(out, x, cos, sin, outer, L, D, P);
  const int64_t rows = outer * L;
  if (rows == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    const T* xp = static_cast<const T*>(x.data);
    rotate_pairs_kernel<T><<<grid_for(rows * P), kThreads>>>(
        o, xp, static_cast<const T*>(cos.data), static_cast<const T*>(sin.data), rows, L, D, P,
        interleaved, inverse ? T(-1) : T(1));
    cuda::check_launch(op.name, rows_ctx(outer, L, D, x.dtype));
    if (2 * P < D && out.data != x.data) {
      rotate_pairs_tail<T><<<grid_for(rows * (D - 2 * P)), kThreads>>>(o, xp, rows, D, P);
      cuda::check_launch(op.name, rows_ctx(outer, L, D, x.dtype));
    }
  });
}

// =====================================================================================
void CudaBackend::softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                          bool log) {
  const int64_t total = outer * n * inner;
  const FloatOp op = check_softmax(out, in, outer, n, inner, log);
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out.data);
    const T* x = static_cast<const T*>(in.data);
    if (inner == 1) {
      softmax_rows<T><<<grid_for(outer, 1), row_threads(n)>>>(y, x, outer, n, log);
    } else {
      softmax_cols<T><<<grid_for(outer * inner), kThreads>>>(y, x, outer, n, inner, log);
    }
    cuda::check_launch(op.name, rows_ctx(outer, n, inner, in.dtype));
  });
}

void CudaBackend::softmax_backward(const View& grad_in, const View& grad_out, const View& y,
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
      softmax_bwd_rows<T><<<grid_for(outer, 1), row_threads(n)>>>(gi, g, yy, outer, n, log);
    } else {
      softmax_bwd_cols<T><<<grid_for(outer * inner), kThreads>>>(gi, g, yy, outer, n, inner, log);
    }
    cuda::check_launch(op.name, rows_ctx(outer, n, inner, y.dtype));
  });
}

// =====================================================================================
void CudaBackend::layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                             const View& weight, const View& bias, int64_t rows, int64_t n,
                             double eps) {
  const FloatOp op = check_layer_norm(y, mean, rstd, x, weight, bias, rows, n);
  if (rows == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    layer_norm_rows<T><<<grid_for(rows, 1), row_threads(n)>>>(
        static_cast<T*>(y.data), static_cast<T*>(mean.data), static_cast<T*>(rstd.data),
        static_cast<const T*>(x.data), static_cast<const T*>(weight.data),
        static_cast<const T*>(bias.data), rows, n, eps);
    cuda::check_launch(op.name, rows_ctx(rows, n, 1, x.dtype));
  });
}

void CudaBackend::layer_norm_backward(const View& grad_x, const View& grad_weight,
                                      const View& grad_bias, const View& grad_y, const View& x,
                                      const View& mean, const View& rstd, const View& weight,
                                      int64_t rows, int64_t n) {
  const FloatOp op = check_layer_norm_backward(grad_x, grad_weight, grad_bias, grad_y, x, mean,
                                               rstd, weight, rows, n);
  const std::string ctx = rows_ctx(rows, n, 1, x.dtype);
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
    if (gx && rows > 0) {
      layer_norm_bwd_rows<T><<<grid_for(rows, 1), row_threads(n)>>>(gx, gy, xp, mp, rp, w, rows, n);
      cuda::check_launch(op.name, ctx);
    }
    if (gw || gb) {
      // row blocks fixed by the shape; each (block, column) writes its own partial sums
      const int64_t rb = std::max<int64_t>(8, ceil_div(rows, 256));
      const int64_t nb = ceil_div(rows, rb);
      if (nb == 0) {
        if (gw) PELAB_CUDA_CALL(cudaMemsetAsync(gw, 0, sizeof(T) * n, 0), ctx);
        if (gb) PELAB_CUDA_CALL(cudaMemsetAsync(gb, 0, sizeof(T) * n, 0), ctx);
        return;
      }
      cuda::DeviceBuffer part(sizeof(double) * 2 * nb * n);
      double* pw = part.as<double>();
      double* pb = pw + nb * n;
      layer_norm_param_partials<T><<<grid_for(nb * n), kThreads>>>(pw, pb, gy, xp, mp, rp, rows,
                                                                    n, nb, rb);
      cuda::check_launch(op.name, ctx);
      layer_norm_param_final<T><<<grid_for(n), kThreads>>>(gw, gb, pw, pb, n, nb);
      cuda::check_launch(op.name, ctx);
    }
  });
}

// =====================================================================================
void CudaBackend::cross_entropy(const View& loss, const View& count, const View& loss_rows,
                                const View& lse, const View& logits, const View& targets,
                                int64_t rows, int64_t C, int64_t ignore_index, double smoothing) {
  const FloatOp op = check_cross_entropy(loss, count, loss_rows, lse, logits, targets, rows, C);
  PELAB_CUDA_CALL(cudaMemsetAsync(count.data, 0, sizeof(double), 0), " (cross_entropy count)");
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      cross_entropy_rows<T><<<grid_for(rows, 1), row_threads(C)>>>(
          static_cast<T*>(loss_rows.data), static_cast<T*>(lse.data),
          static_cast<double*>(count.data), static_cast<const T*>(logits.data),
          static_cast<const int64_t*>(targets.data), rows, C, ignore_index, smoothing,
          cuda::error_sink());
      cuda::check_launch(op.name, rows_ctx(rows, C, 1, logits.dtype));
    }
    // the rows' sum as reduce(Sum) forms it, then the mean on the device
    cuda::DeviceBuffer total(sizeof(T));
    View tv;
    tv.data = total.as<T>();
    tv.dtype = logits.dtype;
    tv.shape = {1};
    tv.strides = {1};
    reduce(ReduceOp::Sum, tv, nullptr, loss_rows, 1, rows, 1);
    cross_entropy_mean<T><<<1, 1>>>(static_cast<T*>(loss.data), total.as<T>(),
                                    static_cast<const double*>(count.data));
    cuda::check_launch(op.name, " (mean)");
  });
  cuda::after_index_kernel();
}

void CudaBackend::cross_entropy_backward(const View& grad_logits, const View& logits,
                                         const View& lse, const View& targets, int64_t rows,
                                         int64_t C, int64_t ignore_index, double smoothing,
                                         const View& grad_loss, const View& count) {
  const FloatOp op =
      check_cross_entropy_backward(grad_logits, logits, lse, targets, rows, C, grad_loss, count);
  if (rows == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    cross_entropy_bwd<T><<<grid_for(rows * C), kThreads>>>(
        static_cast<T*>(grad_logits.data), static_cast<const T*>(logits.data),
        static_cast<const T*>(lse.data), static_cast<const int64_t*>(targets.data), rows, C,
        ignore_index, smoothing, static_cast<const T*>(grad_loss.data),
        static_cast<const double*>(count.data));
    cuda::check_launch(op.name, rows_ctx(rows, C, 1, logits.dtype));
  });
}

// =====================================================================================
void CudaBackend::index_select(const View& out, const View& in, const View& idx, int64_t outer,
                               int64_t n_in, int64_t n_idx, int64_t inner) {
  const AnyDTypeOp op = check_index_select(out, in, idx, outer, n_in, n_idx, inner);
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    index_select_kernel<T><<<grid_for(total), kThreads>>>(
        static_cast<T*>(out.data), static_cast<const T*>(in.data),
        static_cast<const int64_t*>(idx.data), outer, n_in, n_idx, inner, cuda::error_sink());
    cuda::check_launch(op.name, rows_ctx(outer, n_in, inner, in.dtype), " with ", n_idx,
                       " indices");
  });
  cuda::after_index_kernel();
}

void CudaBackend::index_add(const View& acc, const View& src, const View& idx, int64_t outer,
                            int64_t n_in, int64_t n_idx, int64_t inner) {
  const AnyDTypeOp op = check_index_add(acc, src, idx, outer, n_in, n_idx, inner);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    accumulate<T, false>(static_cast<T*>(acc.data), static_cast<const T*>(src.data),
                         static_cast<const int64_t*>(idx.data), outer, n_in, n_idx, inner,
                         cuda::kIndexAdd, op.name);
  });
}

void CudaBackend::gather(const View& out, const View& in, const View& idx, int64_t outer,
                         int64_t n_in, int64_t n_idx, int64_t inner) {
  const int64_t total = outer * n_idx * inner;
  const BlockIndexOp op = check_gather(out, in, idx, outer, n_in, n_idx, inner);
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<grid_for(total), kThreads>>>(
        static_cast<T*>(out.data), static_cast<const T*>(in.data),
        static_cast<const int64_t*>(idx.data), outer, n_in, n_idx, inner, op.blocks,
        cuda::error_sink());
    cuda::check_launch(op.name, rows_ctx(outer, n_in, inner, in.dtype), " with ", n_idx,
                       " indices");
  });
  cuda::after_index_kernel();
}

void CudaBackend::scatter_add(const View& acc, const View& src, const View& idx, int64_t outer,
                              int64_t n_in, int64_t n_idx, int64_t inner) {
  const BlockIndexOp op = check_scatter_add(acc, src, idx, outer, n_in, n_idx, inner);
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    accumulate<T, true>(static_cast<T*>(acc.data), static_cast<const T*>(src.data),
                        static_cast<const int64_t*>(idx.data), outer, n_in, n_idx, inner,
                        cuda::kScatterAdd, op.name, op.blocks);
  });
}

void CudaBackend::gather_lerp(const View& out, const View& in, const View& pos, int64_t outer,
                              int64_t n_in, int64_t n_idx, int64_t inner) {
  const FloatOp op = check_gather_lerp(out, in, pos, outer, n_in, n_idx, inner);
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    gather_lerp_kernel<T><<<grid_for(total), kThreads>>>(
        static_cast<T*>(out.data), static_cast<const T*>(in.data),
        static_cast<const T*>(pos.data), outer, n_in, n_idx, inner, cuda::error_sink());
    cuda::check_launch(op.name, rows_ctx(outer, n_in, inner, in.dtype), " with ", n_idx,
                       " positions");
  });
  cuda::after_index_kernel();
}

void CudaBackend::gather_lerp_backward(const View& grad_in, const View& grad_pos,
                                       const View& grad_out, const View& in, const View& pos,
                                       int64_t outer, int64_t n_in, int64_t n_idx,
                                       int64_t inner) {
  const FloatOp op =
      check_gather_lerp_backward(grad_in, grad_pos, grad_out, in, pos, outer, n_in, n_idx, inner);
  const int64_t total = outer * n_idx * inner;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T* go = static_cast<const T*>(grad_out.data);
    const T* p = static_cast<const T*>(pos.data);
    if (grad_pos.data && total > 0) {
      gather_lerp_grad_pos<T><<<grid_for(total), kThreads>>>(
          static_cast<T*>(grad_pos.data), go, static_cast<const T*>(in.data), p, outer, n_in,
          n_idx, inner, cuda::error_sink());
      cuda::check_launch(op.name, rows_ctx(outer, n_in, inner, in.dtype), " with ", n_idx,
                         " positions");
    }
    if (grad_in.data && outer * n_in * inner > 0) {
      gather_lerp_grad_in<T><<<grid_for(outer * inner), kThreads>>>(
          static_cast<T*>(grad_in.data), go, p, outer, n_in, n_idx, inner, cuda::error_sink());
      cuda::check_launch(op.name, rows_ctx(outer, n_in, inner, in.dtype), " with ", n_idx,
                         " positions");
    }
  });
  cuda::after_index_kernel();
}

// =====================================================================================
void CudaBackend::dropout_mask(const View& mask, double p, uint64_t seed, uint64_t offset) {
  const FloatOp op = check_dropout_mask(mask, p);
  const int64_t n = mask.numel();
  if (n == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    dropout_kernel<T><<<grid_for(n), kThreads>>>(static_cast<T*>(mask.data), n, p, keep, seed,
                                                 offset);
    cuda::check_launch(op.name, " (", n, " elements)");
  });
}

void CudaBackend::random_uniform(const View& out, double lo, double hi, uint64_t seed,
                                 uint64_t offset) {
  const FloatOp op = check_random_uniform(out);
  const int64_t n = out.numel();
  if (n == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    uniform_kernel<T><<<grid_for(n), kThreads>>>(static_cast<T*>(out.data), n, lo, hi - lo, seed,
                                                 offset);
    cuda::check_launch(op.name, " (", n, " elements)");
  });
}

void CudaBackend::random_normal(const View& out, double mean, double std, uint64_t seed,
                                uint64_t offset) {
  const FloatOp op = check_random_normal(out);
  const int64_t n = out.numel();
  if (n == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<grid_for(n), kThreads>>>(static_cast<T*>(out.data), n, mean, std, seed,
                                                offset);
    cuda::check_launch(op.name, " (", n, " elements)");
  });
}

// =====================================================================================
void CudaBackend::adamw_step(const View& param, const View& grad, const View& m, const View& v,
                             double lr, double beta1, double beta2, double eps, double weight_decay,
                             double bias_correction1, double bias_correction2) {
  const int64_t n = param.numel();
  const FloatOp op = check_adamw_step(param, grad, m, v, bias_correction1, bias_correction2);
  if (n == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    adamw_kernel<T><<<grid_for(n), kThreads>>>(
        static_cast<T*>(param.data), static_cast<const T*>(grad.data), static_cast<T*>(m.data),
        static_cast<T*>(v.data), n, static_cast<T>(1.0 - lr * weight_decay),
        static_cast<T>(beta1), static_cast<T>(1.0 - beta1), static_cast<T>(beta2),
        static_cast<T>(1.0 - beta2), static_cast<T>(lr / bias_correction1),
        static_cast<T>(1.0 / std::sqrt(bias_correction2)), static_cast<T>(eps));
    cuda::check_launch(op.name, " (", n, " elements ", dtype_name(param.dtype), ")");
  });
}

void CudaBackend::sgd_step(const View& param, const View& grad, const View& momentum_buf,
                           double lr, double momentum, double dampening, double weight_decay,
                           bool nesterov, bool first_step) {
  const int64_t n = param.numel();
  const bool use_mom = momentum != 0.0;
  const FloatOp op = check_sgd_step(param, grad, momentum_buf, use_mom);
  if (n == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreads>>>(
        static_cast<T*>(param.data), static_cast<const T*>(grad.data),
        static_cast<T*>(momentum_buf.data), n, static_cast<T>(lr), static_cast<T>(weight_decay),
        static_cast<T>(momentum), static_cast<T>(1.0 - dampening), use_mom, first_step, nesterov);
    cuda::check_launch(op.name, " (", n, " elements ", dtype_name(param.dtype), ")");
  });
}

void CudaBackend::update_control(const View& control, const View& step, double max_norm) {
  check_update_control(control, step, max_norm);
  update_control_kernel<<<1, 1>>>(static_cast<double*>(control.data),
                                  static_cast<double*>(step.data), max_norm);
  cuda::check_launch("update_control");
}

// One launch per kMultiTensors parameters of one dtype (cuda::for_each_multi_launch).
void CudaBackend::adamw_step_guarded(const std::vector<AdamWBuffers>& bufs, double lr,
                                     double beta1, double beta2, double eps, double weight_decay,
                                     const View& control) {
  const FloatOp op = check_adamw_step_guarded(control);
  // the bias corrections are formed on the device; 1 and 1 stand in for the checks
  check_adamw_step_many(bufs, 1.0, 1.0);
  const double* ctl = static_cast<const double*>(control.data);
  cuda::for_each_multi_launch<4>(
      bufs.size(),
      [&](size_t i) {
        return std::array<void*, 4>{bufs[i].param.data, bufs[i].grad.data, bufs[i].m.data,
                                    bufs[i].v.data};
      },
      [&](size_t i) { return bufs[i].param.numel(); }, [&](size_t i) { return bufs[i].param.dtype; },
      [&](const cuda::MultiTable<4>& tab, int64_t blocks, DType dt) {
        op.dispatch(dt, [&](auto tag) {
          using T = decltype(tag);
          adamw_multi<T><<<static_cast<unsigned>(blocks), kThreads>>>(tab, ctl, lr, beta1, beta2,
                                                                      eps, weight_decay);
          cuda::check_launch(op.name, " (", tab.count, " parameters, ", blocks, " blocks)");
        });
      });
}

void CudaBackend::sgd_step_guarded(const std::vector<SGDBuffers>& bufs, double lr,
                                   double momentum, double dampening, double weight_decay,
                                   bool nesterov, const View& control) {
  const FloatOp op = check_sgd_step_guarded(control);
  const bool use_mom = momentum != 0.0;
  check_sgd_step_many(bufs, use_mom);
  const double* ctl = static_cast<const double*>(control.data);
  cuda::for_each_multi_launch<3>(
      bufs.size(),
      [&](size_t i) {
        return std::array<void*, 3>{bufs[i].param.data, bufs[i].grad.data,
                                    use_mom ? bufs[i].momentum_buf.data : nullptr};
      },
      [&](size_t i) { return bufs[i].param.numel(); }, [&](size_t i) { return bufs[i].param.dtype; },
      [&](const cuda::MultiTable<3>& tab, int64_t blocks, DType dt) {
        op.dispatch(dt, [&](auto tag) {
          using T = decltype(tag);
          sgd_multi<T><<<static_cast<unsigned>(blocks), kThreads>>>(tab, ctl, lr, momentum,
                                                                    dampening, weight_decay,
                                                                    nesterov);
          cuda::check_launch(op.name, " (", tab.count, " parameters, ", blocks, " blocks)");
        });
      });
}

}  // namespace pelab
