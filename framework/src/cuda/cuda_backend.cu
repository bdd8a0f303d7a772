// pelab — CUDA backend core: device selection and cuBLAS handle, the caching allocator (size-bucketed
// free lists over cudaMalloc), host<->device copies (host->device staged and asynchronous),
// synchronisation, the device error record for
// index bounds, and GEMM through cublas{S,D}gemmStridedBatched (row-major operands mapped to
// column-major by swapping them; default math mode, so float32 never uses TF32).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "backend_checks.h"
#include "caching_pool.h"
#include "cuda/cuda_common.cuh"
#include "pelab/strings.h"

namespace pelab {
namespace cuda {
namespace {

const char* blas_status(cublasStatus_t s) { return cublasGetStatusString(s); }

template <class... Ctx>
void check_blas(cublasStatus_t s, const char* call, const Ctx&... ctx) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail("cublas: ", call, " failed: ", blas_status(s), ctx...);
}
#define PELAB_CUBLAS_CALL(call, ...) check_blas((call), #call, ##__VA_ARGS__)

// ---------------- caching allocator ----------------
// The device side of the caching pool (caching_pool.h). Block sizes are rounded to buckets: 512-byte
// steps up to 1 MiB, then 8 buckets per power of two (at most 12.5% slack). Freed blocks go to the
// free list of their bucket and are reused by any request of the same bucket; nothing is returned to
// the driver until empty_cache() or an out-of-memory retry. Single stream, so a block freed while a
// queued kernel still reads it can only be reused by work queued after that kernel.
struct CudaMemory {
  using Status = cudaError_t;
  static constexpr Status kOk = cudaSuccess;
  static constexpr size_t kMaxCached = SIZE_MAX;  // no bound

  static size_t bucket(size_t n) {
    if (n <= 512) return 512;
    if (n <= (size_t(1) << 20)) return (n + 511) / 512 * 512;
    size_t p = size_t(1) << 20;
    while (p * 2 <= n) p *= 2;
    const size_t step = p / 8;
    return (n + step - 1) / step * step;
  }
  static void* raw_allocate(size_t bytes, Status* status) {
    void* p = nullptr;
    *status = cudaMalloc(&p, bytes);
    if (*status == cudaSuccess) return p;
    cudaGetLastError();
    return nullptr;
  }
  static bool out_of_memory(Status status) { return status == cudaErrorMemoryAllocation; }
  [[noreturn]] static void allocate_failed(size_t bytes, size_t requested, Status e,
                                           const CachingPoolStats& held) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    fail("cuda allocate: cudaMalloc of ", bytes, " bytes (", requested, " requested) failed: ",
         cudaGetErrorName(e), ": ", cudaGetErrorString(e), " (cuda:0 has ", free_b, " of ",
         total_b, " bytes free; pelab holds ", held.allocated, " bytes in use, ", held.cached,
         " cached)");
  }
  // cudaFree synchronises the device.
  static Status raw_free(void* p) { return cudaFree(p); }
};
using Allocator = CachingPool<CudaMemory>;

// Backend-wide state. Never destroyed: storages released during static destruction must still
// find a live allocator, and CUDA handles must not be torn down after the runtime unloads.
struct State {
  Allocator alloc;
  cublasHandle_t blas = nullptr;
  DeviceError* rec = nullptr;  // device memory
  int* dirty = nullptr;        // mapped host memory (host pointer), or null
  int* dirty_dev = nullptr;    // its device-side address
  bool sync_checks = false;
  std::once_flag init;
};
State& state() {
  static State* s = new State();
  return *s;
}

void init_state() {
  State& s = state();
  PELAB_CUDA_CALL(cudaSetDevice(0), " (selecting cuda:0)");
  PELAB_CUBLAS_CALL(cublasCreate(&s.blas), " (creating the cuBLAS handle on cuda:0)");
  // Default math: float32 GEMMs keep full float32 precision (no TF32), float64 is exact IEEE.
  PELAB_CUBLAS_CALL(cublasSetMathMode(s.blas, CUBLAS_DEFAULT_MATH));
  PELAB_CUBLAS_CALL(cublasSetPointerMode(s.blas, CUBLAS_POINTER_MODE_HOST));
  PELAB_CUBLAS_CALL(cublasSetStream(s.blas, 0));
  PELAB_CUDA_CALL(cudaMalloc(reinterpret_cast<void**>(&s.rec), sizeof(DeviceError)),
                  " (device error record)");
  PELAB_CUDA_CALL(cudaMemset(s.rec, 0, sizeof(DeviceError)), " (device error record)");
  void* h = nullptr;
  if (cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped) == cudaSuccess) {
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, h, 0) == cudaSuccess) {
      s.dirty = static_cast<int*>(h);
      s.dirty_dev = static_cast<int*>(d);
      *s.dirty = 0;
    } else {
      cudaFreeHost(h);
    }
  }
  cudaGetLastError();  // a failed mapped allocation only disables the fast "nothing pending" path
  const char* env = std::getenv("PELAB_CUDA_SYNC_CHECKS");
  s.sync_checks = env && *env && std::strcmp(env, "0") != 0;
  PELAB_CUDA_CALL(cudaDeviceSynchronize(), " (initialising the CUDA backend)");
}

const char* error_op(int code) {
  switch (code) {
    case kIndexSelect: return "index_select";
    case kIndexAdd: return "index_add";
    case kGather: return "gather";
    case kScatterAdd: return "scatter_add";
    case kGatherLerp: return "gather_lerp";
    case kCrossEntropy: return "cross_entropy";
    default: return "cuda index kernel";
  }
}

}  // namespace

ErrorSink error_sink() { return {state().rec, state().dirty_dev}; }

void check_device_errors() {
  State& s = state();
  if (s.dirty && *static_cast<volatile int*>(s.dirty) == 0) return;
  DeviceError h{};
  PELAB_CUDA_CALL(cudaMemcpy(&h, s.rec, sizeof(h), cudaMemcpyDeviceToHost),
                  " (reading the device error record)");
  if (h.code == kNoError) {
    if (s.dirty) *s.dirty = 0;
    return;
  }
  PELAB_CUDA_CALL(cudaMemset(s.rec, 0, sizeof(DeviceError)), " (resetting the device error record)");
  if (s.dirty) *s.dirty = 0;
  if (h.code == kGatherLerp) {
    double u;
    std::memcpy(&u, &h.value, sizeof(u));
    fail(error_op(h.code), ": position ", printf_number("%.17g", u), " at flat index ", h.pos,
         " is out of range [0, ", h.limit, "] (positions index the gathered axis of size ",
         h.limit + 1, "; detected on cuda:0)");
  }
  if (h.code == kCrossEntropy)
    fail(error_op(h.code), ": target ", h.value, " at row ", h.pos, " is out of range [0, ",
         h.limit, ") and is not ignore_index (detected on cuda:0)");
  fail(error_op(h.code), ": index ", h.value, " at position ", h.pos, " is out of range [0, ",
       h.limit, ") (detected on cuda:0)");
}

void after_index_kernel() {
  if (!state().sync_checks) return;
  PELAB_CUDA_CALL(cudaDeviceSynchronize(), " (sync index check)");
  check_device_errors();
}

// ---------------- host -> device copies ----------------
// Staged through pinned memory and queued on the default stream (cudaMemcpyAsync), so a copy does
// not wait for the kernels queued before it, as a cudaMemcpy from pageable memory does (it
// synchronises the stream first): a training step's uploads (the batch, masks, position tables)
// then cost the host a memcpy each. The pinned buffer's two halves are used in turn; a half is
// reused only once the copies out of it have completed (an event recorded when it was left: the
// host waits there only when the device is a whole half of uploads behind, counted as a sync).
// A copy larger than a half, or any copy when pinned memory is unavailable, is synchronous.
struct Staging {
  static constexpr size_t kHalf = size_t(4) << 20;
  std::mutex mu;
  char* buf = nullptr;  // pinned, 2 * kHalf bytes
  bool tried = false;
  int half = 0;         // the half in use
  size_t used = 0;      // bytes of it taken
  cudaEvent_t done[2] = {nullptr, nullptr};
  bool pending[2] = {false, false};  // done[h] marks copies out of half h not yet waited for
};
Staging& staging() {
  static Staging* s = new Staging();  // never destroyed, as State
  return *s;
}

// Queues the copy through the staging buffer; false when it cannot be staged.
bool staged_copy(void* dst, const void* src, size_t nbytes) {
  if (nbytes > Staging::kHalf) return false;
  Staging& s = staging();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.tried) {
    s.tried = true;
    void* p = nullptr;
    if (cudaHostAlloc(&p, 2 * Staging::kHalf, cudaHostAllocDefault) == cudaSuccess &&
        cudaEventCreateWithFlags(&s.done[0], cudaEventDisableTiming) == cudaSuccess &&
        cudaEventCreateWithFlags(&s.done[1], cudaEventDisableTiming) == cudaSuccess) {
      s.buf = static_cast<char*>(p);
    } else {
      if (p) cudaFreeHost(p);
      cudaGetLastError();  // only disables staging: copies stay synchronous
    }
  }
  if (!s.buf) return false;
  const size_t need = (nbytes + 255) / 256 * 256;
  if (s.used + need > Staging::kHalf) {
    PELAB_CUDA_CALL(cudaEventRecord(s.done[s.half], 0), " (host->device staging)");
    s.pending[s.half] = true;
    s.half ^= 1;
    s.used = 0;
    if (s.pending[s.half]) {
      const cudaError_t q = cudaEventQuery(s.done[s.half]);
      if (q == cudaErrorNotReady) {
        if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
        note_backend_sync();
        PELAB_CUDA_CALL(cudaEventSynchronize(s.done[s.half]), " (host->device staging)");
      } else {
        PELAB_CUDA_CALL(q, " (host->device staging)");
      }
      s.pending[s.half] = false;
    }
  }
  char* p = s.buf + static_cast<size_t>(s.half) * Staging::kHalf + s.used;
  std::memcpy(p, src, nbytes);
  PELAB_CUDA_CALL(cudaMemcpyAsync(dst, p, nbytes, cudaMemcpyHostToDevice, 0), " (", nbytes,
                  " bytes host -> cuda:0)");
  s.used += need;
  return true;
}

void* raw_alloc(size_t nbytes) { return state().alloc.allocate(nbytes); }
void raw_free(void* p, size_t nbytes) { state().alloc.deallocate(p, nbytes); }

}  // namespace cuda

using namespace cuda;

CudaBackend::CudaBackend() { std::call_once(state().init, init_state); }

void* CudaBackend::allocate(size_t nbytes) { return state().alloc.allocate(nbytes); }

void CudaBackend::deallocate(void* p, size_t nbytes) { state().alloc.deallocate(p, nbytes); }

void CudaBackend::copy_from_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  if (!staged_copy(dst, src, nbytes)) {
    note_backend_sync();  // a pageable cudaMemcpy waits for the queued kernels first
    PELAB_CUDA_CALL(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice), " (", nbytes,
                    " bytes host -> cuda:0)");
  }
  check_device_errors();
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  PELAB_CUDA_CALL(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost), " (", nbytes,
                  " bytes cuda:0 -> host)");
  check_device_errors();
}

void CudaBackend::synchronize() {
  PELAB_CUDA_CALL(cudaDeviceSynchronize());
  check_device_errors();
}

void CudaBackend::empty_cache() {
  PELAB_CUDA_CALL(cudaDeviceSynchronize(), " (empty_cache)");
  check_device_errors();
  PELAB_CUDA_CALL(state().alloc.release_all(), " (empty_cache: cudaFree of cached blocks)");
}

size_t CudaBackend::cached_bytes() { return state().alloc.stats().cached; }
size_t CudaBackend::allocated_bytes() { return state().alloc.stats().allocated; }
size_t CudaBackend::peak_bytes() { return state().alloc.stats().peak; }
void CudaBackend::reset_peak_bytes() { state().alloc.reset_peak(); }

std::string CudaBackend::device_name() {
  cudaDeviceProp prop;
  PELAB_CUDA_CALL(cudaGetDeviceProperties(&prop, 0));
  std::ostringstream os;
  os << prop.name << " (sm_" << prop.major << prop.minor << ", "
     << (prop.totalGlobalMem >> 20) << " MiB)";
  return os.str();
}

void CudaBackend::set_sync_checks(bool on) { state().sync_checks = on; }
bool CudaBackend::sync_checks() { return state().sync_checks; }

// =====================================================================================
// GEMM. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix
// with row stride ld is the column-major transpose with leading dimension ld: so cuBLAS gets B as its
// first operand and A as its second, with the same transpose flags, sizes (N, M, K) and strides.
namespace {

template <class T>
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, int n,
                            int m, int k, const T* alpha, const T* B, int ldb, long long sb,
                            const T* A, int lda, long long sa, const T* beta, T* C, int ldc,
                            long long sc, int batch) {
  if constexpr (sizeof(T) == 4) {
    return cublasSgemmStridedBatched(h, ob, oa, n, m, k, alpha, B, ldb, sb, A, lda, sa, beta, C,
                                     ldc, sc, batch);
  } else {
    return cublasDgemmStridedBatched(h, ob, oa, n, m, k, alpha, B, ldb, sb, A, lda, sa, beta, C,
                                     ldc, sc, batch);
  }
}

// cuBLAS's gemmBatched (operands through device arrays of pointers), operands swapped as above.
template <class T>
cublasStatus_t gemm_pointers(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, int n,
                             int m, int k, const T* alpha, const T* const* B, int ldb,
                             const T* const* A, int lda, const T* beta, T* const* C, int ldc,
                             int batch) {
  if constexpr (sizeof(T) == 4) {
    return cublasSgemmBatched(h, ob, oa, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc, batch);
  } else {
    return cublasDgemmBatched(h, ob, oa, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc, batch);
  }
}

}  // namespace

// Every (outer, batch) product in one cublas<T>gemmBatched: the pointer arrays are built on the
// host and uploaded with one staged, asynchronous copy. What gemm treats specially (K == 0,
// alpha == 0, a shared C) and more than INT32_MAX products run as the default's gemm calls.
void CudaBackend::gemm_outer(DType dtype, bool transA, bool transB, int64_t M, int64_t N,
                             int64_t K, double alpha, const void* A, int64_t lda, int64_t strideA,
                             const void* B, int64_t ldb, int64_t strideB, double beta, void* C,
                             int64_t ldc, int64_t strideC, int64_t batch,
                             const std::vector<OuterOffsets>& offsets) {
  const int64_t total = batch * static_cast<int64_t>(offsets.size());
  if (offsets.size() <= 1 || K == 0 || alpha == 0.0 || (strideC == 0 && batch > 1) ||
      total > INT32_MAX) {
    Backend::gemm_outer(dtype, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB,
                        beta, C, ldc, strideC, batch, offsets);
    return;
  }
  if (!check_gemm(transA, transB, M, N, K, lda, ldb, ldc, batch, "cuBLAS")) return;
  const cublasOperation_t oa = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t ob = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  dispatch_float(dtype, "gemm_outer", [&](auto tag) {
    using T = decltype(tag);
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    // [B's pointers | A's | C's], each `total` long, product (o, i) at o * batch + i
    std::vector<const void*> host(static_cast<size_t>(3 * total));
    size_t k = 0;
    for (const OuterOffsets& o : offsets)
      for (int64_t i = 0; i < batch; ++i, ++k) {
        host[k] = static_cast<const T*>(B) + o.b + i * strideB;
        host[total + k] = static_cast<const T*>(A) + o.a + i * strideA;
        host[2 * total + k] = static_cast<T*>(C) + o.c + i * strideC;
      }
    DeviceBuffer arrays(host.size() * sizeof(void*));
    copy_from_host(arrays.as<void>(), host.data(), host.size() * sizeof(void*));
    const T* const* pb = arrays.as<const T* const>();
    const cublasStatus_t st = gemm_pointers<T>(
        state().blas, ob, oa, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &al,
        pb, static_cast<int>(ldb), pb + total, static_cast<int>(lda), &be,
        const_cast<T* const*>(pb + 2 * total), static_cast<int>(ldc), static_cast<int>(total));
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::ostringstream os;
      os << " (" << dtype_name(dtype) << " M=" << M << " N=" << N << " K=" << K << ", "
         << offsets.size() << " x " << batch << " products)";
      check_blas(st, "cublas<T>gemmBatched", os.str());
    }
    check_launch("gemm_outer", " (", offsets.size(), " x ", batch, " products)");
  });
}

void CudaBackend::gemm(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                       double alpha, const void* A, int64_t lda, int64_t strideA, const void* B,
                       int64_t ldb, int64_t strideB, double beta, void* C, int64_t ldc,
                       int64_t strideC, int64_t batch) {
  if (!check_gemm(transA, transB, M, N, K, lda, ldb, ldc, batch, "cuBLAS")) return;
  if (K == 0 || alpha == 0.0) {
    // C = beta * C for every batch entry (beta == 0 overwrites, even NaN); a shared C (strideC 0)
    // is scaled once per entry, in order, as the CPU backend does.
    View c;
    c.data = C;
    c.dtype = dtype;
    const bool shared = strideC == 0 && batch > 1;
    c.shape = shared ? Shape{M, N} : Shape{batch, M, N};
    c.strides = shared ? Shape{ldc, 1} : Shape{strideC, ldc, 1};
    for (int64_t i = 0; i < (shared ? batch : 1); ++i) {
      if (beta == 0.0) {
        fill(c, 0.0);
      } else if (beta != 1.0) {
        unary(UnaryOp::MulScalar, c, c, beta);
      }
    }
    return;
  }
  const cublasOperation_t oa = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t ob = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = state().blas;
  dispatch_float(dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    const T* a = static_cast<const T*>(A);
    const T* b = static_cast<const T*>(B);
    T* c = static_cast<T*>(C);
    auto ctx = [&](int64_t first, int64_t count) {
      std::ostringstream os;
      os << " (" << dtype_name(dtype) << " M=" << M << " N=" << N << " K=" << K
         << " transA=" << transA << " transB=" << transB << " lda=" << lda << " ldb=" << ldb
         << " ldc=" << ldc << " strides " << strideA << "/" << strideB << "/" << strideC
         << " batch " << first << "+" << count << " of " << batch << ")";
      return os.str();
    };
    if (strideC == 0 && batch > 1) {
      // One shared output: the products accumulate into it in batch order.
      for (int64_t i = 0; i < batch; ++i) {
        const cublasStatus_t st =
            gemm_batched<T>(h, ob, oa, static_cast<int>(N), static_cast<int>(M),
                            static_cast<int>(K), &al, b + i * strideB, static_cast<int>(ldb), 0,
                            a + i * strideA, static_cast<int>(lda), 0, &be, c,
                            static_cast<int>(ldc), 0, 1);
        if (st != CUBLAS_STATUS_SUCCESS) check_blas(st, "cublas<T>gemmStridedBatched", ctx(i, 1));
      }
    } else {
      constexpr int64_t kMaxBatch = INT32_MAX;
      for (int64_t i0 = 0; i0 < batch; i0 += kMaxBatch) {
        const int64_t nb = std::min(kMaxBatch, batch - i0);
        const cublasStatus_t st = gemm_batched<T>(
            h, ob, oa, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &al,
            b + i0 * strideB, static_cast<int>(ldb), strideB, a + i0 * strideA,
            static_cast<int>(lda), strideA, &be, c + i0 * strideC, static_cast<int>(ldc), strideC,
            static_cast<int>(nb));
        if (st != CUBLAS_STATUS_SUCCESS) check_blas(st, "cublas<T>gemmStridedBatched", ctx(i0, nb));
      }
    }
    check_launch("gemm", ctx(0, batch));
  });
}

}  // namespace pelab
