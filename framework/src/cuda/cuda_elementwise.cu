// pelab — CUDA elementwise kernels (fill, copy with dtype conversion, unary, binary, where, axpy,
// clamp) over strided/broadcast views, and the reductions over contiguous [outer, n, inner] (Sum
// accumulated in double / int64, Max with the first argmax, the running sum) plus the
// double-accumulated sum of squares. Reductions split long axes into blocks whose size depends
// only on the shape and combine the partials in a fixed order: no floating-point atomics, so
// results are identical run to run.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <type_traits>

#include "backend_checks.h"
#include "gelu_math.h"
#include "cuda/cuda_common.cuh"

namespace pelab {
namespace {

using cuda::Acc;
using cuda::ceil_div;
using cuda::grid_for;
using cuda::HostLayout;
using cuda::kThreads;
using cuda::Strided;

// compute type of a unary op: Int64 data is computed in double (as on the CPU)
template <class T> struct Compute { using type = T; };
template <> struct Compute<int64_t> { using type = double; };

template <int N>
std::array<int64_t, N> elem_sizes(const View* const (&vs)[N]) {
  std::array<int64_t, N> e{};
  for (int k = 0; k < N; ++k) e[k] = static_cast<int64_t>(dtype_size(vs[k]->dtype));
  return e;
}

// ---------------- elementwise kernels ----------------
template <class T>
__global__ void fill_kernel(Strided<1> S, T v) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[1];
    cuda::strided_offsets(S, e, off);
    reinterpret_cast<T*>(S.base[0])[off[0]] = v;
  }
}

template <class To, class Ti>
__global__ void copy_kernel(Strided<2> S) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[2];
    cuda::strided_offsets(S, e, off);
    reinterpret_cast<To*>(S.base[0])[off[0]] =
        static_cast<To>(reinterpret_cast<const Ti*>(S.base[1])[off[1]]);
  }
}

// CUDA's libm (float: erff/expf/tanhf) for the shared GELU formulas (gelu_math.h), where the CPU
// uses its vectorised approximations.
struct CudaMath {
  template <class C>
  __device__ static C erf(C x) { return cuda::derf(x); }
  template <class C>
  __device__ static C exp(C x) { return cuda::dexp(x); }
  template <class C>
  __device__ static C tanh(C x) { return cuda::dtanh(x); }
};

template <class C>
__device__ __forceinline__ C unary_apply(UnaryOp op, C x, C al, double alpha) {
  const C zero(0), one(1);
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return cuda::dexp(x);
    case UnaryOp::Log: return cuda::dlog(x);
    case UnaryOp::Sqrt: return cuda::dsqrt(x);
    case UnaryOp::Rsqrt: return one / cuda::dsqrt(x);
    case UnaryOp::Tanh: return cuda::dtanh(x);
    case UnaryOp::Relu: return x < zero ? zero : x;
    case UnaryOp::Gelu: return gelu_math::gelu<CudaMath>(x);
    case UnaryOp::GeluTanh: return gelu_math::gelu_tanh<CudaMath>(x);
    case UnaryOp::Sin: return cuda::dsin(x);
    case UnaryOp::Cos: return cuda::dcos(x);
    case UnaryOp::Abs: return cuda::dabs(x);
    case UnaryOp::Sigmoid: {
      const C e = cuda::dexp(-cuda::dabs(x));
      const C r = one / (one + e);
      return x >= zero ? r : e * r;
    }
    case UnaryOp::AddScalar: return x + al;
    case UnaryOp::MulScalar: return x * al;
    case UnaryOp::PowScalar:
      if (alpha == 1.0) return x;
      if (alpha == 2.0) return x * x;
      if (alpha == 3.0) return x * x * x;
      if (alpha == 0.5) return cuda::dsqrt(x);
      if (alpha == -1.0) return one / x;
      if (alpha == 0.0) return one;
      return cuda::dpow(x, al);
    case UnaryOp::RDivScalar: return al / x;
    case UnaryOp::Step: return x > zero ? one : zero;
  }
  return x;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, Strided<2> S, double alpha) {
  using C = typename Compute<T>::type;
  const C al = static_cast<C>(alpha);
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[2];
    cuda::strided_offsets(S, e, off);
    const C x = static_cast<C>(reinterpret_cast<const T*>(S.base[1])[off[1]]);
    reinterpret_cast<T*>(S.base[0])[off[0]] = static_cast<T>(unary_apply<C>(op, x, al, alpha));
  }
}

template <class T>
__device__ __forceinline__ T binary_apply(BinaryOp op, T x, T y) {
  const T one(1), zero(0);
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div:
      if constexpr (std::is_integral<T>::value) {
        return y == 0 ? T(0) : x / y;
      } else {
        return x / y;
      }
    // NaN propagates (x != x picks x; a NaN y is picked by the comparison failing)
    case BinaryOp::Max: return (x > y || x != x) ? x : y;
    case BinaryOp::Min: return (x < y || x != x) ? x : y;
    case BinaryOp::Eq: return x == y ? one : zero;
    case BinaryOp::Ne: return x != y ? one : zero;
    case BinaryOp::Lt: return x < y ? one : zero;
    case BinaryOp::Gt: return x > y ? one : zero;
    case BinaryOp::TanhGrad: return x * (T(1) - y * y);
    case BinaryOp::GeluGrad:
    case BinaryOp::GeluTanhGrad: {
      using C = typename Compute<T>::type;
      const C d = op == BinaryOp::GeluGrad
                      ? gelu_math::gelu_grad<CudaMath>(static_cast<C>(y))
                      : gelu_math::gelu_tanh_grad<CudaMath>(static_cast<C>(y));
      return static_cast<T>(static_cast<C>(x) * d);
    }
    case BinaryOp::SigmoidGrad: return x * (y * (T(1) - y));
  }
  return x;
}

template <class Ti, class To>
__global__ void binary_kernel(BinaryOp op, Strided<3> S) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[3];
    cuda::strided_offsets(S, e, off);
    const Ti x = reinterpret_cast<const Ti*>(S.base[1])[off[1]];
    const Ti y = reinterpret_cast<const Ti*>(S.base[2])[off[2]];
    reinterpret_cast<To*>(S.base[0])[off[0]] = static_cast<To>(binary_apply<Ti>(op, x, y));
  }
}

template <class T, class Tc>
__global__ void where_kernel(Strided<4> S) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[4];
    cuda::strided_offsets(S, e, off);
    const Tc c = reinterpret_cast<const Tc*>(S.base[1])[off[1]];
    reinterpret_cast<T*>(S.base[0])[off[0]] = c != Tc(0)
                                                  ? reinterpret_cast<const T*>(S.base[2])[off[2]]
                                                  : reinterpret_cast<const T*>(S.base[3])[off[3]];
  }
}

// NaN stays NaN: both comparisons fail for it (as on the CPU).
template <class T>
__global__ void clamp_kernel(Strided<2> S, T lo, T hi) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[2];
    cuda::strided_offsets(S, e, off);
    const T x = reinterpret_cast<const T*>(S.base[1])[off[1]];
    reinterpret_cast<T*>(S.base[0])[off[0]] = x < lo ? lo : (x > hi ? hi : x);
  }
}

template <class T>
__global__ void clamp_backward_kernel(Strided<3> S, T lo, T hi) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[3];
    cuda::strided_offsets(S, e, off);
    const T g = reinterpret_cast<const T*>(S.base[1])[off[1]];
    const T x = reinterpret_cast<const T*>(S.base[2])[off[2]];
    reinterpret_cast<T*>(S.base[0])[off[0]] = x >= lo && x <= hi ? g : T(0);
  }
}

template <class To, class Tx>
__global__ void axpy_kernel(Strided<2> S, To al) {
  PELAB_KERNEL_LOOP(e, S.numel) {
    int64_t off[2];
    cuda::strided_offsets(S, e, off);
    To* o = reinterpret_cast<To*>(S.base[0]) + off[0];
    *o += al * static_cast<To>(reinterpret_cast<const Tx*>(S.base[1])[off[1]]);
  }
}

template <int N>
std::string layout_ctx(const View* const (&vs)[N]) {
  std::string s = " (shape " + shape_str(vs[0]->shape);
  for (int k = 0; k < N; ++k) s += (k ? ", " : "; strides ") + shape_str(vs[k]->strides);
  return s + ")";
}

}  // namespace

// =====================================================================================
void CudaBackend::fill(const View& out, double value) {
  const View* vs[1] = {&out};
  HostLayout<1> L = cuda::make_layout<1>(out.shape, vs, "fill");
  dispatch_all(out.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<1>& S) {
      fill_kernel<T><<<grid_for(S.numel), kThreads>>>(S, static_cast<T>(value));
      cuda::check_launch("fill", layout_ctx(vs));
    });
  });
}

void CudaBackend::copy(const View& out, const View& in) {
  const View* vs[2] = {&out, &in};
  HostLayout<2> L = cuda::make_layout<2>(out.shape, vs, "copy");
  dispatch_all(out.dtype, "copy", [&](auto to) {
    using To = decltype(to);
    dispatch_all(in.dtype, "copy", [&](auto ti) {
      using Ti = decltype(ti);
      cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<2>& S) {
        copy_kernel<To, Ti><<<grid_for(S.numel), kThreads>>>(S);
        cuda::check_launch("copy", layout_ctx(vs));
      });
    });
  });
}

void CudaBackend::unary(UnaryOp op, const View& out, const View& in, double alpha) {
  const AnyDTypeOp prologue = check_unary(out, in);
  const View* vs[2] = {&out, &in};
  HostLayout<2> L = cuda::make_layout<2>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<2>& S) {
      unary_kernel<T><<<grid_for(S.numel), kThreads>>>(op, S, alpha);
      cuda::check_launch(prologue.name, layout_ctx(vs), " op ", static_cast<int>(op));
    });
  });
}

void CudaBackend::binary(BinaryOp op, const View& out, const View& a, const View& b) {
  const bool cmp = op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt ||
                   op == BinaryOp::Gt;
  const AnyDTypeOp prologue = check_binary(out, a, b, cmp);
  const View* vs[3] = {&out, &a, &b};
  HostLayout<3> L = cuda::make_layout<3>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto ti) {
    using Ti = decltype(ti);
    prologue.dispatch(out.dtype, [&](auto to) {
      using To = decltype(to);
      cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<3>& S) {
        binary_kernel<Ti, To><<<grid_for(S.numel), kThreads>>>(op, S);
        cuda::check_launch(prologue.name, layout_ctx(vs), " op ", static_cast<int>(op));
      });
    });
  });
}

void CudaBackend::where(const View& out, const View& cond, const View& a, const View& b) {
  const AnyDTypeOp prologue = check_where(out, a, b);
  const View* vs[4] = {&out, &cond, &a, &b};
  HostLayout<4> L = cuda::make_layout<4>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    prologue.dispatch(cond.dtype, [&](auto tc) {
      using Tc = decltype(tc);
      cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<4>& S) {
        where_kernel<T, Tc><<<grid_for(S.numel), kThreads>>>(S);
        cuda::check_launch(prologue.name, layout_ctx(vs));
      });
    });
  });
}

void CudaBackend::axpy(const View& out, const View& x, double alpha) {
  const View* vs[2] = {&out, &x};
  HostLayout<2> L = cuda::make_layout<2>(out.shape, vs, "axpy");
  dispatch_all(out.dtype, "axpy", [&](auto to) {
    using To = decltype(to);
    dispatch_all(x.dtype, "axpy", [&](auto tx) {
      using Tx = decltype(tx);
      cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<2>& S) {
        axpy_kernel<To, Tx><<<grid_for(S.numel), kThreads>>>(S, static_cast<To>(alpha));
        cuda::check_launch("axpy", layout_ctx(vs));
      });
    });
  });
}

void CudaBackend::clamp(const View& out, const View& in, double lo, double hi) {
  const FloatOp prologue = check_clamp(out, in, lo, hi);
  const View* vs[2] = {&out, &in};
  HostLayout<2> L = cuda::make_layout<2>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<2>& S) {
      clamp_kernel<T><<<grid_for(S.numel), kThreads>>>(S, static_cast<T>(lo), static_cast<T>(hi));
      cuda::check_launch(prologue.name, layout_ctx(vs));
    });
  });
}

void CudaBackend::clamp_backward(const View& grad_in, const View& grad_out, const View& x,
                                 double lo, double hi) {
  const FloatOp prologue = check_clamp_backward(grad_in, grad_out, x, lo, hi);
  const View* vs[3] = {&grad_in, &grad_out, &x};
  HostLayout<3> L = cuda::make_layout<3>(grad_in.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    cuda::for_each_launch(L, elem_sizes(vs).data(), [&](const Strided<3>& S) {
      clamp_backward_kernel<T><<<grid_for(S.numel), kThreads>>>(S, static_cast<T>(lo),
                                                                static_cast<T>(hi));
      cuda::check_launch(prologue.name, layout_ctx(vs));
    });
  });
}

// =====================================================================================
// Reductions.
namespace {

// Running sums: one thread per (o, i) column walks j in order (accumulating in A).
template <class T, class A>
__global__ void cumsum_cols(T* out, const T* in, int64_t outer, int64_t n, int64_t inner,
                            bool reverse) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    A acc = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t k = (o * n + (reverse ? n - 1 - s : s)) * inner + i;
      acc += static_cast<A>(in[k]);
      out[k] = static_cast<T>(acc);
    }
  }
}

constexpr int64_t kRowChunk = 8192;     // elements per block along n when inner == 1 (two-pass)
constexpr int64_t kSmallRow = 16;       // rows this short are reduced by one thread each
constexpr int64_t kColThreads = 262144; // target parallelism for the inner > 1 two-pass split

// ---- Sum ----
// One thread per row (short rows).
template <class T, class A>
__global__ void sum_rows_thread(T* out, const T* in, int64_t outer, int64_t n) {
  PELAB_KERNEL_LOOP(o, outer) {
    A s = 0;
    const T* x = in + o * n;
    for (int64_t j = 0; j < n; ++j) s += static_cast<A>(x[j]);
    out[o] = static_cast<T>(s);
  }
}

// One block per (row, chunk of `chunk` elements): writes the chunk sum as A to part (or as T to out
// when `part` is null, i.e. one chunk per row).
template <class T, class A>
__global__ void sum_rows_block(T* out, A* part, const T* in, int64_t rows_x_chunks, int64_t nb,
                               int64_t n, int64_t chunk) {
  __shared__ A sm[256];
  for (int64_t t = blockIdx.x; t < rows_x_chunks; t += gridDim.x) {
    const int64_t o = t / nb, b = t % nb;
    const int64_t j0 = b * chunk, j1 = min(n, j0 + chunk);
    const T* x = in + o * n;
    A s = 0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) s += static_cast<A>(x[j]);
    s = cuda::block_sum<A>(s, sm);
    if (threadIdx.x == 0) {
      if (part) {
        part[t] = s;
      } else {
        out[o] = static_cast<T>(s);
      }
    }
  }
}

// One block per row: out[o] = sum_b part[o * nb + b].
template <class T, class A>
__global__ void sum_partials_block(T* out, const A* part, int64_t outer, int64_t nb) {
  __shared__ A sm[256];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    A s = 0;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) s += part[o * nb + b];
    s = cuda::block_sum<A>(s, sm);
    if (threadIdx.x == 0) out[o] = static_cast<T>(s);
  }
}

// inner > 1: thread per (o, b, i) sums rows [b*bj, (b+1)*bj) of column i, in order.
template <class T, class A>
__global__ void sum_cols(T* out, A* part, const T* in, int64_t outer, int64_t n, int64_t inner,
                         int64_t nb, int64_t bj) {
  PELAB_KERNEL_LOOP(t, outer * nb * inner) {
    const int64_t i = t % inner, b = (t / inner) % nb, o = t / (inner * nb);
    const int64_t j0 = b * bj, j1 = min(n, j0 + bj);
    const T* x = in + o * n * inner + i;
    A s = 0;
    for (int64_t j = j0; j < j1; ++j) s += static_cast<A>(x[j * inner]);
    if (part) {
      part[t] = s;
    } else {
      out[o * inner + i] = static_cast<T>(s);
    }
  }
}

template <class T, class A>
__global__ void sum_cols_partials(T* out, const A* part, int64_t outer, int64_t inner, int64_t nb) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    A s = 0;
    for (int64_t b = 0; b < nb; ++b) s += part[(o * nb + b) * inner + i];
    out[t] = static_cast<T>(s);
  }
}

// ---- Max + argmax ----
template <class T>
__device__ __forceinline__ bool better(T v, T best) {  // strictly greater, or the first NaN
  return v > best || (v != v && best == best);
}
// Candidate (bv, bi) replaces (av, ai) if it is better, or equally good with a smaller index.
template <class T>
__device__ __forceinline__ bool takes(T bv, int64_t bi, T av, int64_t ai) {
  return better(bv, av) || (!better(av, bv) && bi < ai);
}

template <class T>
__global__ void max_rows_thread(T* out, int64_t* arg, const T* in, int64_t outer, int64_t n) {
  PELAB_KERNEL_LOOP(o, outer) {
    const T* x = in + o * n;
    T best = x[0];
    int64_t bi = 0;
    for (int64_t j = 1; j < n; ++j)
      if (better(x[j], best)) {
        best = x[j];
        bi = j;
      }
    out[o] = best;
    if (arg) arg[o] = bi;
  }
}

template <class T>
__global__ void max_rows_block(T* out, int64_t* arg, const T* in, int64_t outer, int64_t n) {
  __shared__ T sv[256];
  __shared__ int64_t si[256];
  const unsigned t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* x = in + o * n;
    T best = x[0];
    int64_t bi = 0;
    for (int64_t j = t; j < n; j += blockDim.x)
      if (j == t || better(x[j], best)) {  // j runs upwards: the first index wins ties
        best = x[j];
        bi = j;
      }
    if (t >= n) bi = INT64_MAX;  // an idle thread never wins
    sv[t] = best;
    si[t] = bi;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (t < s && takes(sv[t + s], si[t + s], sv[t], si[t])) {
        sv[t] = sv[t + s];
        si[t] = si[t + s];
      }
      __syncthreads();
    }
    if (t == 0) {
      out[o] = sv[0];
      if (arg) arg[o] = si[0];
    }
    __syncthreads();
  }
}

template <class T>
__global__ void max_cols(T* out, int64_t* arg, const T* in, int64_t outer, int64_t n,
                         int64_t inner) {
  PELAB_KERNEL_LOOP(t, outer * inner) {
    const int64_t o = t / inner, i = t % inner;
    const T* x = in + o * n * inner + i;
    T best = x[0];
    int64_t bi = 0;
    for (int64_t j = 1; j < n; ++j)
      if (better(x[j * inner], best)) {
        best = x[j * inner];
        bi = j;
      }
    out[t] = best;
    if (arg) arg[t] = bi;
  }
}

// ---- sum of squares ----
// The block's sum of squares of x[j0, j1) in double (every thread gets it).
template <class T>
__device__ __forceinline__ double chunk_sumsq(const T* x, int64_t j0, int64_t j1, double* sm) {
  double s = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const double v = static_cast<double>(x[j]);
    s += v * v;
  }
  return cuda::block_sum<double>(s, sm);
}

template <class T>
__global__ void sumsq_blocks(double* part, const T* x, int64_t total, int64_t nb) {
  __shared__ double sm[256];
  for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const int64_t j0 = b * kRowChunk, j1 = min(total, j0 + kRowChunk);
    const double s = chunk_sumsq(x, j0, j1, sm);
    if (threadIdx.x == 0) part[b] = s;
  }
}

__global__ void sum_single_block(double* result, const double* part, int64_t nb) {
  __shared__ double sm[256];
  double s = 0;
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) s += part[b];
  s = cuda::block_sum<double>(s, sm);
  if (threadIdx.x == 0) *result = s;
}

// sum_squares_many: block b's partial over its chunk of one buffer (kMultiChunk == kRowChunk, so
// a buffer's partials are the ones sum_squares forms), written to part[b].
template <class T>
__global__ void sumsq_multi(cuda::MultiTable<1> tab, double* part) {
  __shared__ double sm[256];
  const int64_t b = blockIdx.x;
  const int k = cuda::multi_find(tab.first, tab.count, b);
  const T* x = static_cast<const T*>(tab.ptr[0][k]);
  const int64_t j0 = (b - tab.first[k]) * cuda::kMultiChunk;
  const double s = chunk_sumsq(x, j0, min(tab.n[k], j0 + cuda::kMultiChunk), sm);
  if (threadIdx.x == 0) part[b] = s;
}
static_assert(cuda::kMultiChunk == kRowChunk, "sum_squares_many forms sum_squares' partials");

std::string reduce_ctx(const View& in, int64_t outer, int64_t n, int64_t inner) {
  std::ostringstream os;
  os << " (input " << shape_str(in.shape) << " " << dtype_name(in.dtype) << " as [" << outer << ", "
     << n << ", " << inner << "])";
  return os.str();
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const View& out, void* argmax, const View& in, int64_t outer,
                         int64_t n, int64_t inner) {
  const AnyDTypeOp prologue = check_reduce(op, out, in, outer, n, inner);
  if (outer * inner == 0) return;
  const std::string ctx = reduce_ctx(in, outer, n, inner);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    T* o = static_cast<T*>(out.data);
    const T* x = static_cast<const T*>(in.data);
    int64_t* arg = static_cast<int64_t*>(argmax);
    if (op == ReduceOp::Sum) {
      if (n == 0) {
        PELAB_CUDA_CALL(cudaMemsetAsync(o, 0, sizeof(T) * outer * inner, 0), ctx);
        if (arg) PELAB_CUDA_CALL(cudaMemsetAsync(arg, 0, sizeof(int64_t) * outer * inner, 0), ctx);
        return;
      }
      if (inner == 1) {
        const int64_t nb = ceil_div(n, kRowChunk);
        if (n <= kSmallRow) {
          sum_rows_thread<T, A><<<grid_for(outer), kThreads>>>(o, x, outer, n);
        } else if (nb == 1 || outer >= 512) {
          sum_rows_block<T, A><<<grid_for(outer, 1), cuda::row_threads(n)>>>(o, nullptr, x, outer,
                                                                             1, n, n);
        } else {
          cuda::DeviceBuffer part(sizeof(A) * outer * nb);
          sum_rows_block<T, A><<<grid_for(outer * nb, 1), kThreads>>>(o, part.as<A>(), x,
                                                                       outer * nb, nb, n, kRowChunk);
          cuda::check_launch("reduce_sum", ctx);
          sum_partials_block<T, A><<<grid_for(outer, 1), cuda::row_threads(nb)>>>(o, part.as<A>(),
                                                                                 outer, nb);
        }
      } else {
        const int64_t cols = outer * inner;
        int64_t nb = 1;
        if (cols < 65536 && n > 64) nb = std::min(ceil_div(n, 32), ceil_div(kColThreads, cols));
        const int64_t bj = ceil_div(n, nb);
        nb = ceil_div(n, bj);
        if (nb == 1) {
          sum_cols<T, A><<<grid_for(cols), kThreads>>>(o, nullptr, x, outer, n, inner, 1, n);
        } else {
          cuda::DeviceBuffer part(sizeof(A) * cols * nb);
          sum_cols<T, A><<<grid_for(cols * nb), kThreads>>>(o, part.as<A>(), x, outer, n, inner,
                                                            nb, bj);
          cuda::check_launch("reduce_sum", ctx);
          sum_cols_partials<T, A><<<grid_for(cols), kThreads>>>(o, part.as<A>(), outer, inner, nb);
        }
      }
      cuda::check_launch("reduce_sum", ctx);
    } else {
      if (inner == 1) {
        if (n <= kSmallRow) {
          max_rows_thread<T><<<grid_for(outer), kThreads>>>(o, arg, x, outer, n);
        } else {
          max_rows_block<T><<<grid_for(outer, 1), cuda::row_threads(n)>>>(o, arg, x, outer, n);
        }
      } else {
        max_cols<T><<<grid_for(outer * inner), kThreads>>>(o, arg, x, outer, n, inner);
      }
      cuda::check_launch("reduce_max", ctx);
    }
  });
}

void CudaBackend::cumsum(const View& out, const View& in, int64_t outer, int64_t n,
                         int64_t inner, bool reverse) {
  const FloatOp op = check_cumsum(out, in, outer, n, inner);
  if (outer * n * inner == 0) return;
  op.dispatch([&](auto tag) {
    using T = decltype(tag);
    cumsum_cols<T, typename Acc<T>::type><<<grid_for(outer * inner), kThreads>>>(
        static_cast<T*>(out.data), static_cast<const T*>(in.data), outer, n, inner, reverse);
    cuda::check_launch(op.name, reduce_ctx(in, outer, n, inner));
  });
}

double CudaBackend::sum_squares(const View& in) {
  const FloatOp op = check_sum_squares(in);
  const int64_t total = in.numel();
  if (total == 0) return 0.0;
  return op.dispatch([&](auto tag) {
    using T = decltype(tag);
    const int64_t nb = ceil_div(total, kRowChunk);
    cuda::DeviceBuffer part(sizeof(double) * (nb + 1));
    double* p = part.as<double>();
    sumsq_blocks<T><<<grid_for(nb, 1), kThreads>>>(p + 1, static_cast<const T*>(in.data), total, nb);
    cuda::check_launch(op.name, " (", total, " elements)");
    sum_single_block<<<1, kThreads>>>(p, p + 1, nb);
    cuda::check_launch(op.name, " (", total, " elements)");
    double result = 0.0;
    PELAB_CUDA_CALL(cudaMemcpy(&result, p, sizeof(double), cudaMemcpyDeviceToHost),
                    " (sum_squares result)");
    cuda::check_device_errors();
    return result;
  });
}

// Every chunk's partial in one pass (a launch per kMultiTensors buffers), then one block sums all
// partials in a fixed order into out: two launches for a model's gradients, nothing read back.
void CudaBackend::sum_squares_many(const View& out, const std::vector<View>& ins) {
  const FloatOp op = check_sum_squares_many(out, ins);
  int64_t total_blocks = 0;
  for (const View& in : ins) total_blocks += ceil_div(in.numel(), cuda::kMultiChunk);
  cuda::DeviceBuffer part(sizeof(double) * std::max<int64_t>(total_blocks, 1));
  double* p = part.as<double>();
  int64_t base = 0;
  cuda::for_each_multi_launch<1>(
      ins.size(), [&](size_t i) { return std::array<void*, 1>{ins[i].data}; },
      [&](size_t i) { return ins[i].numel(); }, [&](size_t i) { return ins[i].dtype; },
      [&](const cuda::MultiTable<1>& tab, int64_t blocks, DType dt) {
        op.dispatch(dt, [&](auto tag) {
          using T = decltype(tag);
          sumsq_multi<T><<<static_cast<unsigned>(blocks), kThreads>>>(tab, p + base);
          cuda::check_launch(op.name, " (", tab.count, " buffers, ", blocks, " blocks)");
        });
        base += blocks;
      });
  sum_single_block<<<1, kThreads>>>(static_cast<double*>(out.data), p, base);
  cuda::check_launch(op.name, " (", ins.size(), " buffers)");
}

}  // namespace pelab
