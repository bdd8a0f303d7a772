// pelab — GELU and its derivative, erf and tanh forms, written once for every backend. Each
// backend passes its own erf / exp / tanh as M (static members erf, exp, tanh of a compute type C):
// the CPU its vectorised approximations (cpu/cpu_backend.h), CUDA its libm (cuda/cuda_common.cuh).
// So the formulas, and their constants, exist in one place for host and device (issue 53 item 4).
#pragma once

#ifdef __CUDACC__
#define PELAB_GELU_FN __host__ __device__ __forceinline__
#else
#define PELAB_GELU_FN inline
#endif

namespace pelab::gelu_math {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

// gelu(x) = x Φ(x) = x (1 + erf(x / √2)) / 2
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class M, class C>
PELAB_GELU_FN C gelu(C x) {
  const C half(0.5), one(1);
  return half * x * (one + M::erf(x * static_cast<C>(kSqrt1_2)));
}

// its tanh approximation: x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class M, class C>
PELAB_GELU_FN C gelu_tanh(C x) {
  const C half(0.5), one(1);
  const C u = static_cast<C>(kSqrt2OverPi) * (x + static_cast<C>(kGeluC) * x * x * x);
  return half * x * (one + M::tanh(u));
}

// d gelu(x) / dx = Φ(x) + x φ(x) (the fused backward, BinaryOp::GeluGrad)
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class M, class C>
PELAB_GELU_FN C gelu_grad(C x) {
  const C half(0.5), one(1);
  const C cdf = half * (one + M::erf(x * static_cast<C>(kSqrt1_2)));
  const C pdf = static_cast<C>(kInvSqrt2Pi) * M::exp(-half * x * x);
  return cdf + x * pdf;
}

// d gelu_tanh(x) / dx (BinaryOp::GeluTanhGrad)
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class M, class C>
PELAB_GELU_FN C gelu_tanh_grad(C x) {
  const C half(0.5), one(1);
  const C k0 = static_cast<C>(kSqrt2OverPi), k1 = static_cast<C>(kGeluC);
  const C x2 = x * x;
  const C t = M::tanh(k0 * (x + k1 * x2 * x));
  return half * (one + t) + half * x * (one - t * t) * k0 * (one + C(3) * k1 * x2);
}

}  // namespace pelab::gelu_math

#undef PELAB_GELU_FN
