// pelab — CUDA backend internals shared by the .cu files: checked CUDA calls, launch sizes, the
// strided-layout struct passed to elementwise kernels by value (up to 8 collapsed dims),
// fixed-order block reductions, the device error record for index bounds, temporary device buffers
// and the float/double math wrappers. Only included by .cu files. The ops' prologues (names,
// checks, dtype dispatch) are the CPU backend's too: backend_checks.h.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend_checks.h"
#include "cuda/cuda_backend.cuh"
#include "pelab/backend.h"
#include "strided_layout.h"

namespace pelab {
namespace cuda {

// ---------------- checked calls ----------------
template <class... Ctx>
inline void check(cudaError_t e, const char* call, const Ctx&... ctx) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  fail("cuda: ", call, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e), ctx...);
}
// PELAB_CUDA_CALL(cudaMemcpy(...), " (", n, " bytes)") — the context is appended to the message.
#define PELAB_CUDA_CALL(call, ...) ::pelab::cuda::check((call), #call, ##__VA_ARGS__)

// After a kernel launch: launch-configuration errors (and earlier asynchronous faults) throw,
// naming the kernel and the shapes it was launched for.
template <class... Ctx>
inline void check_launch(const char* kernel, const Ctx&... ctx) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail("cuda: kernel ", kernel, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
         ctx...);
}

// Accumulator type: double for floating types, int64 for Int64 (as on the CPU).
template <class T> struct Acc { using type = double; };
template <> struct Acc<int64_t> { using type = int64_t; };

// ---------------- launch sizes ----------------
constexpr int kThreads = 256;
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Blocks for a grid-stride loop over n elements (kernels never rely on covering n in one pass).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = ceil_div(std::max<int64_t>(n, 1), threads);
  return static_cast<unsigned>(std::min<int64_t>(b, int64_t(1) << 20));
}
// Block size for one-block-per-row kernels: a power of two in [32, 256] that covers n if it can.
// Depends only on n, so the reduction order (and the result) is fixed by the shape.
inline int row_threads(int64_t n) {
  int t = 32;
  while (t < 256 && t < n) t *= 2;
  return t;
}
// Grid-stride loop over [0, n) with 64-bit indices.
#define PELAB_KERNEL_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// ---------------- strided layouts ----------------
constexpr int kMaxDims = 8;

// N operands over one logical shape, size-1 axes dropped and adjacent axes merged wherever every
// operand allows (as on the CPU). Passed to kernels by value.
template <int N>
struct Strided {
  int nd = 0;          // collapsed rank (0: a single element)
  bool small = true;   // numel < 2^32: 32-bit index arithmetic
  int64_t numel = 1;
  int64_t shape[kMaxDims] = {};
  int64_t st[N][kMaxDims] = {};
  char* base[N] = {};
};

// Collapsed axes of N views broadcast to `shape` (numpy rules). Host only; may hold more than
// kMaxDims axes (the launcher then loops over the leading ones).
template <int N>
struct HostLayout {
  int nd = 0;
  int64_t numel = 1;
  std::vector<int64_t> shape;                 // outermost first
  std::vector<std::array<int64_t, N>> st;     // per axis, per operand
  char* base[N] = {};
};

// The collapsed layout of N views over `shape` (strided_layout.h).
template <int N>
HostLayout<N> make_layout(const Shape& shape, const View* const (&views)[N], const char* op) {
  HostLayout<N> L;
  L.numel = collapse_axes<N>(shape, views, op, L.base,
                             [&](int64_t size, const std::array<int64_t, N>& s) {
                               L.shape.push_back(size);  // innermost first, reversed below
                               L.st.push_back(s);
                             });
  L.nd = static_cast<int>(L.shape.size());
  std::reverse(L.shape.begin(), L.shape.end());
  std::reverse(L.st.begin(), L.st.end());
  return L;
}

// Calls launch(Strided<N>) once per slice of the leading axes beyond kMaxDims (usually once).
template <int N, class F>
void for_each_launch(const HostLayout<N>& L, const int64_t* elem_size, F&& launch) {
  if (L.numel <= 0) return;
  const int lead = std::max(0, L.nd - kMaxDims);
  int64_t slices = 1;
  for (int d = 0; d < lead; ++d) slices *= L.shape[d];
  Strided<N> S;
  S.nd = L.nd - lead;
  S.numel = L.numel / slices;
  S.small = S.numel < (int64_t(1) << 32);
  for (int d = 0; d < S.nd; ++d) {
    S.shape[d] = L.shape[lead + d];
    for (int k = 0; k < N; ++k) S.st[k][d] = L.st[lead + d][k];
  }
  for (int64_t s = 0; s < slices; ++s) {
    int64_t rem = s;
    for (int k = 0; k < N; ++k) S.base[k] = L.base[k];
    for (int d = lead - 1; d >= 0; --d) {
      const int64_t i = rem % L.shape[d];
      rem /= L.shape[d];
      for (int k = 0; k < N; ++k) S.base[k] += i * L.st[d][k] * elem_size[k];
    }
    launch(S);
  }
}

// Element offsets (in elements) of every operand at flat index e.
template <int N>
__device__ __forceinline__ void strided_offsets(const Strided<N>& S, int64_t e, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (S.nd == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = e * S.st[k][0];
    return;
  }
  if (S.small) {
    uint32_t r = static_cast<uint32_t>(e);
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= S.nd) continue;
      const uint32_t size = static_cast<uint32_t>(S.shape[d]);
      const uint32_t i = r % size;
      r /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(i) * S.st[k][d];
    }
  } else {
    int64_t r = e;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= S.nd) continue;
      const int64_t i = r % S.shape[d];
      r /= S.shape[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * S.st[k][d];
    }
  }
}

// ---------------- fixed-order block reductions (blockDim.x a power of two <= 256) ----------------
// Every thread passes its partial; all threads get the block total. The tree order depends only on
// blockDim, so results are deterministic. `sm` is shared scratch of blockDim.x elements.
template <class A>
__device__ __forceinline__ A block_sum(A v, A* sm) {
  const unsigned t = threadIdx.x;
  sm[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sm[t] = sm[t] + sm[t + s];
    __syncthreads();
  }
  const A r = sm[0];
  __syncthreads();  // sm may be reused right after
  return r;
}
template <class T>
__device__ __forceinline__ T block_max(T v, T* sm) {
  const unsigned t = threadIdx.x;
  sm[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sm[t] = sm[t + s] > sm[t] ? sm[t + s] : sm[t];
    __syncthreads();
  }
  const T r = sm[0];
  __syncthreads();
  return r;
}

// ---------------- math wrappers ----------------
__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dtanh(float x) { return tanhf(x); }
__device__ __forceinline__ double dtanh(double x) { return tanh(x); }
__device__ __forceinline__ float derf(float x) { return erff(x); }
__device__ __forceinline__ double derf(double x) { return erf(x); }
__device__ __forceinline__ float dsin(float x) { return sinf(x); }
__device__ __forceinline__ double dsin(double x) { return sin(x); }
__device__ __forceinline__ float dcos(float x) { return cosf(x); }
__device__ __forceinline__ double dcos(double x) { return cos(x); }
__device__ __forceinline__ float dabs(float x) { return fabsf(x); }
__device__ __forceinline__ double dabs(double x) { return fabs(x); }
__device__ __forceinline__ float dpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dpow(double x, double y) { return pow(x, y); }
// x * y rounded on its own, never contracted into an FMA with what uses it (as a separate kernel's
// product would be: the guarded updates' gradient scale).
__device__ __forceinline__ float dmul_rn(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double dmul_rn(double x, double y) { return __dmul_rn(x, y); }

// ---------------- device error record (index bounds) ----------------
// kGatherLerp reports a fractional position: `value` holds the bits of the double, `limit` the
// largest valid position.
enum ErrorCode : int {
  kNoError = 0, kIndexSelect = 1, kIndexAdd = 2, kGather = 3, kScatterAdd = 4, kGatherLerp = 5,
  kCrossEntropy = 6  // a target outside [0, C) that is not ignore_index (pos: its row)
};
struct DeviceError {
  int code;
  int pad;
  long long pos, value, limit;
};
// Where kernels report: the record in device memory plus a "dirty" flag in mapped host memory, so
// the host can see that nothing is pending without a copy (null if mapped memory is unavailable).
struct ErrorSink {
  DeviceError* rec;
  volatile int* dirty;
};
// First reporter wins; the rest are dropped (the record is sticky until read on the host).
__device__ __forceinline__ void report_error(ErrorSink sink, int code, int64_t pos, int64_t value,
                                             int64_t limit) {
  if (atomicCAS(&sink.rec->code, 0, code) == 0) {
    sink.rec->pos = pos;
    sink.rec->value = value;
    sink.rec->limit = limit;
    __threadfence_system();
    if (sink.dirty) *sink.dirty = 1;
  }
}
ErrorSink error_sink();  // cuda_backend.cu
// Throws pelab::Error naming the op, the index, its position and the valid range if an index error
// is pending (and resets the record). Call only after the device work is known to be complete
// (after a synchronous copy or a device synchronisation).
void check_device_errors();
// Called after every index kernel: synchronises and checks right away when sync checks are on.
void after_index_kernel();

// ---------------- multi-tensor launches (sum_squares_many, the guarded optimizer steps) ----------------
// One launch covers up to kMultiTensors buffers of one dtype, their pointers and sizes passed by
// value (well within the kernel-parameter limit); block b works on chunk b - first[k] (kMultiChunk
// elements) of buffer k, the k with first[k] <= b < first[k + 1]. for_each_multi_launch groups a
// list of buffers into such launches (runs of one dtype, empty buffers left out).
constexpr int kMultiTensors = 40;
constexpr int64_t kMultiChunk = 8192;
template <int N>
struct MultiTable {
  void* ptr[N][kMultiTensors];
  int64_t n[kMultiTensors];
  int64_t first[kMultiTensors + 1];
  int count = 0;
};
__device__ __forceinline__ int multi_find(const int64_t* first, int count, int64_t b) {
  int lo = 0, hi = count;  // first[lo] <= b < first[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first[mid] <= b) lo = mid;
    else hi = mid;
  }
  return lo;
}
// Calls launch(table, blocks, dtype) for each group; buffers(i) gives item i's N data pointers
// (std::array<void*, N>), numel(i) its size, dtype(i) its dtype.
template <int N, class Ptrs, class Numel, class Dt, class F>
void for_each_multi_launch(size_t items, Ptrs&& buffers, Numel&& numel, Dt&& dtype, F&& launch) {
  MultiTable<N> tab;
  int64_t blocks = 0;
  DType dt = DType::Float32;
  auto flush = [&] {
    if (tab.count == 0) return;
    tab.first[tab.count] = blocks;
    launch(tab, blocks, dt);
    tab.count = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < items; ++i) {
    const int64_t n = numel(i);
    if (n == 0) continue;
    if (tab.count > 0 && (tab.count == kMultiTensors || dtype(i) != dt)) flush();
    dt = dtype(i);
    const auto p = buffers(i);
    for (int k = 0; k < N; ++k) tab.ptr[k][tab.count] = p[k];
    tab.n[tab.count] = n;
    tab.first[tab.count] = blocks;
    blocks += ceil_div(n, kMultiChunk);
    ++tab.count;
  }
  flush();
}

// ---------------- temporary device memory (through the caching allocator) ----------------
void* raw_alloc(size_t nbytes);
void raw_free(void* p, size_t nbytes);
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t nbytes) : n_(std::max<size_t>(nbytes, 1)), p_(raw_alloc(n_)) {}
  ~DeviceBuffer() { raw_free(p_, n_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
 private:
  size_t n_;
  void* p_;
};

}  // namespace cuda
}  // namespace pelab
