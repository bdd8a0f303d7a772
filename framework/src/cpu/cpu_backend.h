// pelab — the CPU backend (internal header): OpenMP kernels, OpenBLAS GEMM, a caching allocator,
// plus the small vectorisable float math helpers the kernels share.
#pragma once
#include <omp.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "backend_checks.h"  // the ops' shared prologues and dtype dispatch
#include "pelab/backend.h"
#include "pelab/parallel.h"

namespace pelab {

void register_cpu_backend();  // cpu_register.cpp; called lazily by backend_for()

class CpuBackend : public Backend {
 public:
  CpuBackend() = default;
  ~CpuBackend() override = default;
  std::string name() const override { return "cpu"; }

#include "backend_kernels.inc"  // the Backend interface's kernels and memory methods
  void gemm_bias(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 const void* A, int64_t lda, const void* B, int64_t ldb, const void* bias, void* C,
                 int64_t ldc) override;
  void gemm_group(DType dtype, const GemmItem* items, size_t n) override;
  void adamw_step_many(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                       double beta2, double eps, double weight_decay, double bias_correction1,
                       double bias_correction2) override;

  void empty_cache() override;
  // Caching-allocator statistics (for tests and diagnostics).
  static size_t cached_bytes();

  bool has_fused_attention() const override { return true; }
  void attention(const AttentionArgs& a) override;
  void attention_backward(const AttentionArgs& a, const View& grad_out,
                          const AttentionGrads& g) override;
};

namespace cpu {

// Static partition of [0, n) over nth threads: the half-open range owned by thread tid.
inline void split_range(int64_t n, int tid, int nth, int64_t* lo, int64_t* hi) {
  const int64_t q = n / nth, r = n % nth;
  *lo = tid * q + std::min<int64_t>(tid, r);
  *hi = *lo + q + (tid < r ? 1 : 0);
}

// ---- branch-free float math the compiler can vectorise (used for Float32 only; Float64 uses
// libm). Accuracy is ~1-2 ulp for exp/tanh; erf is a rational fit (|err| < 3.1e-7 in float32). ----
inline float bits_to_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int32_t float_to_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}
// Branch-free select through bit masks: unlike `c ? a : b` it never stops GCC from vectorising
// under the default -ftrapping-math (both arms are always computed).
inline float fsel(bool c, float a, float b) {
  const int32_t m = -static_cast<int32_t>(c);
  return bits_to_float((float_to_bits(a) & m) | (float_to_bits(b) & ~m));
}

// Cephes-style expf: range reduction by ln2, degree-6 polynomial, exponent by bit construction.
inline float fast_expf(float x) {
  const float lo = -88.3762626647949f, hi = 88.7228317260742f;
  const bool under = x<lo, over = x> hi;
  // NaN computes with 0 (the float-to-int conversion below must see a finite value) and is put
  // back at the end.
  const float xc = fsel(x != x, 0.0f, fsel(under, lo, fsel(over, hi, x)));
  // round-to-nearest via the 1.5 * 2^23 trick (vectorises, unlike floor under -ftrapping-math)
  const float fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500E-4f;
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * z + r + 1.0f;
  const int32_t n = static_cast<int32_t>(fx);  // in [-128, 128]: scale in two halves
  const int32_t n1 = n >> 1, n2 = n - n1;
  y = y * bits_to_float((n1 + 127) << 23) * bits_to_float((n2 + 127) << 23);
  y = fsel(under, 0.0f, y);
  y = fsel(over, std::numeric_limits<float>::infinity(), y);
  return fsel(x != x, x, y);
}

// tanh: odd polynomial for |x| < 0.625 (Cephes tanhf), 1 - 2/(exp(2|x|)+1) otherwise.
inline float fast_tanhf(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745E-3f;
  p = p * z + 2.06390887954E-2f;
  p = p * z - 5.37397155531E-2f;
  p = p * z + 1.33314422036E-1f;
  p = p * z - 3.33332819422E-1f;
  const float small = p * z * x + x;
  const float e = fast_expf(2.0f * fsel(ax > 9.1f, 9.1f, ax));
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float r = fsel(ax < 0.625f, small, fsel(x < 0.0f, -big, big));
  return fsel(x != x, x, r);
}

// erf: odd rational minimax-style fit erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (degrees 6 / 5 in
// x^2; fitted for pelab by iteratively reweighted least squares, max error 1.5e-9 in exact
// arithmetic, 3.1e-7 evaluated in float32), clamped outside, where erf(x) rounds to +-1 in float32.
// No exp and one division: 2.2x faster than Abramowitz-Stegun 7.1.26 (which needs exp(-x^2) and
// loses relative accuracy near 0), and more accurate.
inline float fast_erff(float x) {
  const float xc = fsel(x < -4.0f, -4.0f, fsel(x > 4.0f, 4.0f, x));
  const float t = xc * xc;
  float p = -1.366496302224185e-08f;
  p = p * t + 4.7801656215089305e-06f;
  p = p * t + 3.826794368355863e-04f;
  p = p * t + 3.839546427400187e-03f;
  p = p * t + 5.433246863800682e-02f;
  p = p * t + 1.8471179701686272e-01f;
  p = p * t + 1.1283791820865519f;
  float q = 6.400572406633272e-05f;
  q = q * t + 1.3095653109401835e-03f;
  q = q * t + 1.5453506327954681e-02f;
  q = q * t + 1.1382662378882501e-01f;
  q = q * t + 4.9703011322442137e-01f;
  q = q * t + 1.0f;
  return fsel(x != x, x, xc * p / q);
}

template <class T>
inline T sel(bool c, T a, T b) {
  return c ? a : b;
}
template <>
inline float sel<float>(bool c, float a, float b) {
  return fsel(c, a, b);
}

template <class T>
inline T vexp(T x) {
  return std::exp(x);
}
template <>
inline float vexp<float>(float x) {
  return fast_expf(x);
}
template <class T>
inline T vtanh(T x) {
  return std::tanh(x);
}
template <>
inline float vtanh<float>(float x) {
  return fast_tanhf(x);
}
template <class T>
inline T verf(T x) {
  return std::erf(x);
}
template <>
inline float verf<float>(float x) {
  return fast_erff(x);
}

// Whether work that `parallel` deems large enough should open an OpenMP region: only with more
// than one thread and outside a parallel region. Every kernel tests this before `omp parallel`
// instead of an `if` clause: a region whose `if` clause is false still enters libgomp and builds a
// team of one (~0.4 us each; a small model's training step opened ~300 of them).
inline bool use_threads(bool parallel) {
  return parallel && omp_get_max_threads() > 1 && !omp_in_parallel();
}

// f(i) for i in [0, n): split over the threads (static schedule, as `omp parallel for
// schedule(static)`) when use_threads(parallel) and there are two or more tasks, otherwise a
// plain loop (a region for one task would leave every other thread idle and still pay the team).
template <class F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
  if (n > 1 && use_threads(parallel)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// Whether f(i) returned true for any i in [0, n); every f(i) runs, split as parallel_for.
template <class F>
inline bool parallel_any(int64_t n, bool parallel, F&& f) {
  bool any = false;
  if (n > 1 && use_threads(parallel)) {
#pragma omp parallel for schedule(static) reduction(|| : any)
    for (int64_t i = 0; i < n; ++i) any = f(i) || any;
  } else {
    for (int64_t i = 0; i < n; ++i) any = f(i) || any;
  }
  return any;
}

// x[i] = sqrt(x[i]); vectorised explicitly (GCC will not vectorise std::sqrt under -fmath-errno).
inline void sqrt_inplace(float* x, int64_t n) {
  int64_t i = 0;
#ifdef __AVX__
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}
inline void sqrt_inplace(double* x, int64_t n) {
  int64_t i = 0;
#ifdef __AVX__
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// Throws naming `op` if any of idx[0..count) lies outside [0, limit) (cpu_nn.cpp; one parallel
// scan, then a serial one to name the first bad index).
void check_indices(const int64_t* idx, int64_t count, int64_t limit, const char* op);

// How many of the Lq rows of a relative index [Lq, Lk] the fused attention walks as segments
// (runs of equal entries and unit ramps: slice adds and vector sums) rather than entry by entry
// (cpu_attention.cpp, IndexRuns). For tests.
int64_t attention_segmented_rows(const int64_t* idx, int64_t Lq, int64_t Lk);

// Accumulator type: double for floating types, int64 for Int64.
template <class T>
struct Acc {
  using type = double;
};
template <>
struct Acc<int64_t> {
  using type = int64_t;
};

}  // namespace cpu
}  // namespace pelab
