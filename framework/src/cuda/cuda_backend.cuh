// pelab — the CUDA backend (internal header). Plain C++ (no CUDA types), so g++-compiled code such as
// the tests and cuda_register.cpp can include it; the kernels live in the .cu files next to it.
//
// One device (cuda:0), the legacy default stream, a caching allocator over cudaMalloc, cuBLAS for
// GEMM (no TF32) and hand-written kernels for everything else. Every reduction runs in an order fixed
// by the shape (no floating-point atomics), so results are identical run to run.
//
// Index bounds in index_select / index_add / gather / scatter_add are checked on the device: a bad
// index sets a sticky device-side error record (op, position, value) and is skipped. The record is
// read, and turned into a pelab::Error, at the next host synchronisation point (copy_to_host,
// copy_from_host, synchronize, sum_squares, empty_cache, cross-entropy target checks), or right
// after the kernel when sync checks are on (set_sync_checks(true), or PELAB_CUDA_SYNC_CHECKS=1 in
// the environment). The ops layer validates indices on the host before calling the backend, so
// user-facing errors stay immediate either way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pelab/backend.h"

namespace pelab {

void register_cuda_backend();  // cuda_register.cpp; throws "no CUDA device: ..." without a GPU

class CudaBackend : public Backend {
 public:
  CudaBackend();  // selects device 0, creates the cuBLAS handle and the device error record
  ~CudaBackend() override = default;
  std::string name() const override { return "cuda"; }

#include "backend_kernels.inc"  // the Backend interface's kernels and memory methods

  void synchronize() override;
  void empty_cache() override;
  void gemm_outer(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  double alpha, const void* A, int64_t lda, int64_t strideA, const void* B,
                  int64_t ldb, int64_t strideB, double beta, void* C, int64_t ldc,
                  int64_t strideC, int64_t batch,
                  const std::vector<OuterOffsets>& offsets) override;

  // ---- diagnostics (tests, bench) ----
  static size_t cached_bytes();     // freed blocks kept for reuse
  static size_t allocated_bytes();  // blocks currently handed out
  static size_t peak_bytes();       // maximum of allocated_bytes() since the last reset
  static void reset_peak_bytes();
  static std::string device_name(); // e.g. "NVIDIA H100 80GB HBM3 (sm_90)"
  // Check the device error record after every index kernel (slower; default from the
  // PELAB_CUDA_SYNC_CHECKS environment variable, else off).
  static void set_sync_checks(bool on);
  static bool sync_checks();
};

}  // namespace pelab
