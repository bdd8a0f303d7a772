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

#include "pelab/backend.h"

namespace pelab {

void register_cuda_backend();  // cuda_register.cpp; throws "no CUDA device: ..." without a GPU

class CudaBackend : public Backend {
 public:
  CudaBackend();  // selects device 0, creates the cuBLAS handle and the device error record
  ~CudaBackend() override = default;
  std::string name() const override { return "cuda"; }

  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes) override;
  void copy_to_host(void* dst, const void* src, size_t nbytes) override;
  void synchronize() override;
  void empty_cache() override;

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

  void fill(const View& out, double value) override;
  void copy(const View& out, const View& in) override;
  void unary(UnaryOp op, const View& out, const View& in, double alpha) override;
  void binary(BinaryOp op, const View& out, const View& a, const View& b) override;
  void where(const View& out, const View& cond, const View& a, const View& b) override;
  void axpy(const View& out, const View& x, double alpha) override;

  void reduce(ReduceOp op, const View& out, void* argmax, const View& in, int64_t outer, int64_t n,
              int64_t inner) override;
  double sum_squares(const View& in) override;

  void gemm(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
            const void* A, int64_t lda, int64_t strideA, const void* B, int64_t ldb,
            int64_t strideB, double beta, void* C, int64_t ldc, int64_t strideC,
            int64_t batch) override;

  void softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
               bool log) override;
  void softmax_backward(const View& grad_in, const View& grad_out, const View& y, int64_t outer,
                        int64_t n, int64_t inner, bool log) override;
  void layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                  const View& weight, const View& bias, int64_t rows, int64_t n,
                  double eps) override;
  void layer_norm_backward(const View& grad_x, const View& grad_weight, const View& grad_bias,
                           const View& grad_y, const View& x, const View& mean, const View& rstd,
                           const View& weight, int64_t rows, int64_t n) override;
  void cross_entropy(const View& loss_rows, const View& lse, const View& logits,
                     const View& targets, int64_t rows, int64_t C, int64_t ignore_index,
                     double smoothing) override;
  void cross_entropy_backward(const View& grad_logits, const View& logits, const View& lse,
                              const View& targets, int64_t rows, int64_t C, int64_t ignore_index,
                              double smoothing, double scale) override;

  void rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                    int64_t outer, int64_t L, int64_t D, int64_t P, bool interleaved,
                    bool inverse) override;

  void index_select(const View& out, const View& in, const View& idx, int64_t outer, int64_t n_in,
                    int64_t n_idx, int64_t inner) override;
  void index_add(const View& acc, const View& src, const View& idx, int64_t outer, int64_t n_in,
                 int64_t n_idx, int64_t inner) override;
  void gather(const View& out, const View& in, const View& idx, int64_t outer, int64_t n_in,
              int64_t n_idx, int64_t inner) override;
  void scatter_add(const View& acc, const View& src, const View& idx, int64_t outer, int64_t n_in,
                   int64_t n_idx, int64_t inner) override;

  void dropout_mask(const View& mask, double p, uint64_t seed, uint64_t offset) override;
  void random_uniform(const View& out, double lo, double hi, uint64_t seed,
                      uint64_t offset) override;
  void random_normal(const View& out, double mean, double std, uint64_t seed,
                     uint64_t offset) override;

  void adamw_step(const View& param, const View& grad, const View& m, const View& v, double lr,
                  double beta1, double beta2, double eps, double weight_decay,
                  double bias_correction1, double bias_correction2) override;
  void sgd_step(const View& param, const View& grad, const View& momentum_buf, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                bool first_step) override;
};

}  // namespace pelab
