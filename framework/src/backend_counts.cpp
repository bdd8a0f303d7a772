// pelab — the counting layer every registered backend is wrapped in (register_backend), and the
// per-thread counters it feeds (BackendCounts, pelab/backend.h). Counting at the interface, not
// inside a backend, makes a count mean the same on every device: a copy_to_host is a device→host
// read on the CPU as on CUDA, so a test on the CPU backend sees the reads a GPU step would make.
// Each call costs one more virtual call and a thread-local increment (nanoseconds).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pelab/backend.h"

namespace pelab {

namespace {
thread_local BackendCounts tl_counts;
}  // namespace

BackendCounts backend_counts() { return tl_counts; }
void note_backend_sync() { ++tl_counts.syncs; }
void note_backend_alloc(bool raw) {
  ++tl_counts.allocs;
  if (raw) ++tl_counts.raw_allocs;
}

namespace {

// Forwards every method to the wrapped backend, counting calls, reads, writes and syncs.
// Allocations are counted by the backends' allocator (note_backend_alloc), which also sees their
// kernels' scratch. Optional methods are forwarded too, so the wrapped backend's overrides run.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : b_(std::move(inner)) {}
  std::string name() const override { return b_->name(); }

  void* allocate(size_t nbytes) override { return b_->allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { b_->deallocate(p, nbytes); }
  void copy_from_host(void* dst, const void* src, size_t nbytes) override {
    call();
    ++tl_counts.writes;
    b_->copy_from_host(dst, src, nbytes);
  }
  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    call();
    ++tl_counts.reads;
    b_->copy_to_host(dst, src, nbytes);
  }
  void synchronize() override {
    call();
    ++tl_counts.syncs;
    b_->synchronize();
  }
  void empty_cache() override {
    call();
    ++tl_counts.syncs;
    b_->empty_cache();
  }

  void fill(const View& out, double value) override {
    call();
    b_->fill(out, value);
  }
  void copy(const View& out, const View& in) override {
    call();
    b_->copy(out, in);
  }
  void unary(UnaryOp op, const View& out, const View& in, double alpha) override {
    call();
    b_->unary(op, out, in, alpha);
  }
  void binary(BinaryOp op, const View& out, const View& a, const View& b) override {
    call();
    b_->binary(op, out, a, b);
  }
  void where(const View& out, const View& cond, const View& a, const View& b) override {
    call();
    b_->where(out, cond, a, b);
  }
  void axpy(const View& out, const View& x, double alpha) override {
    call();
    b_->axpy(out, x, alpha);
  }
  void clamp(const View& out, const View& in, double lo, double hi) override {
    call();
    b_->clamp(out, in, lo, hi);
  }
  void clamp_backward(const View& grad_in, const View& grad_out, const View& x, double lo,
                      double hi) override {
    call();
    b_->clamp_backward(grad_in, grad_out, x, lo, hi);
  }

  void reduce(ReduceOp op, const View& out, void* argmax, const View& in, int64_t outer, int64_t n,
              int64_t inner) override {
    call();
    b_->reduce(op, out, argmax, in, outer, n, inner);
  }
  double sum_squares(const View& in) override {
    call();
    ++tl_counts.reads;
    return b_->sum_squares(in);
  }
  void cumsum(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
              bool reverse) override {
    call();
    b_->cumsum(out, in, outer, n, inner, reverse);
  }

  void gemm(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
            const void* A, int64_t lda, int64_t strideA, const void* B, int64_t ldb,
            int64_t strideB, double beta, void* C, int64_t ldc, int64_t strideC,
            int64_t batch) override {
    call();
    b_->gemm(dtype, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
             strideC, batch);
  }
  void gemm_outer(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  double alpha, const void* A, int64_t lda, int64_t strideA, const void* B,
                  int64_t ldb, int64_t strideB, double beta, void* C, int64_t ldc,
                  int64_t strideC, int64_t batch,
                  const std::vector<OuterOffsets>& offsets) override {
    call();
    b_->gemm_outer(dtype, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta,
                   C, ldc, strideC, batch, offsets);
  }
  void gemm_bias(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 const void* A, int64_t lda, const void* B, int64_t ldb, const void* bias, void* C,
                 int64_t ldc) override {
    call();
    b_->gemm_bias(dtype, transA, transB, M, N, K, A, lda, B, ldb, bias, C, ldc);
  }
  void gemm_group(DType dtype, const GemmItem* items, size_t n) override {
    call();
    b_->gemm_group(dtype, items, n);
  }

  void softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
               bool log) override {
    call();
    b_->softmax(out, in, outer, n, inner, log);
  }
  void softmax_backward(const View& grad_in, const View& grad_out, const View& y, int64_t outer,
                        int64_t n, int64_t inner, bool log) override {
    call();
    b_->softmax_backward(grad_in, grad_out, y, outer, n, inner, log);
  }
  void layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                  const View& weight, const View& bias, int64_t rows, int64_t n,
                  double eps) override {
    call();
    b_->layer_norm(y, mean, rstd, x, weight, bias, rows, n, eps);
  }
  void layer_norm_backward(const View& grad_x, const View& grad_weight, const View& grad_bias,
                           const View& grad_y, const View& x, const View& mean, const View& rstd,
                           const View& weight, int64_t rows, int64_t n) override {
    call();
    b_->layer_norm_backward(grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight, rows, n);
  }
  void cross_entropy(const View& loss, const View& count, const View& loss_rows, const View& lse,
                     const View& logits, const View& targets, int64_t rows, int64_t C,
                     int64_t ignore_index, double smoothing) override {
    call();
    b_->cross_entropy(loss, count, loss_rows, lse, logits, targets, rows, C, ignore_index,
                      smoothing);
  }
  void cross_entropy_backward(const View& grad_logits, const View& logits, const View& lse,
                              const View& targets, int64_t rows, int64_t C, int64_t ignore_index,
                              double smoothing, const View& grad_loss,
                              const View& count) override {
    call();
    b_->cross_entropy_backward(grad_logits, logits, lse, targets, rows, C, ignore_index, smoothing,
                               grad_loss, count);
  }
  void rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                    int64_t outer, int64_t L, int64_t D, int64_t P, bool interleaved,
                    bool inverse) override {
    call();
    b_->rotate_pairs(out, x, cos, sin, outer, L, D, P, interleaved, inverse);
  }

  bool has_fused_attention() const override { return b_->has_fused_attention(); }
  void attention(const AttentionArgs& a) override {
    call();
    b_->attention(a);
  }
  void attention_backward(const AttentionArgs& a, const View& grad_out,
                          const AttentionGrads& g) override {
    call();
    b_->attention_backward(a, grad_out, g);
  }

  void index_select(const View& out, const View& in, const View& idx, int64_t outer, int64_t n_in,
                    int64_t n_idx, int64_t inner) override {
    call();
    b_->index_select(out, in, idx, outer, n_in, n_idx, inner);
  }
  void index_add(const View& acc, const View& src, const View& idx, int64_t outer, int64_t n_in,
                 int64_t n_idx, int64_t inner) override {
    call();
    b_->index_add(acc, src, idx, outer, n_in, n_idx, inner);
  }
  void gather(const View& out, const View& in, const View& idx, int64_t outer, int64_t n_in,
              int64_t n_idx, int64_t inner) override {
    call();
    b_->gather(out, in, idx, outer, n_in, n_idx, inner);
  }
  void scatter_add(const View& acc, const View& src, const View& idx, int64_t outer, int64_t n_in,
                   int64_t n_idx, int64_t inner) override {
    call();
    b_->scatter_add(acc, src, idx, outer, n_in, n_idx, inner);
  }
  void gather_lerp(const View& out, const View& in, const View& pos, int64_t outer, int64_t n_in,
                   int64_t n_idx, int64_t inner) override {
    call();
    b_->gather_lerp(out, in, pos, outer, n_in, n_idx, inner);
  }
  void gather_lerp_backward(const View& grad_in, const View& grad_pos, const View& grad_out,
                            const View& in, const View& pos, int64_t outer, int64_t n_in,
                            int64_t n_idx, int64_t inner) override {
    call();
    b_->gather_lerp_backward(grad_in, grad_pos, grad_out, in, pos, outer, n_in, n_idx, inner);
  }

  void dropout_mask(const View& mask, double p, uint64_t seed, uint64_t offset) override {
    call();
    b_->dropout_mask(mask, p, seed, offset);
  }
  void random_uniform(const View& out, double lo, double hi, uint64_t seed,
                      uint64_t offset) override {
    call();
    b_->random_uniform(out, lo, hi, seed, offset);
  }
  void random_normal(const View& out, double mean, double std, uint64_t seed,
                     uint64_t offset) override {
    call();
    b_->random_normal(out, mean, std, seed, offset);
  }

  void adamw_step(const View& param, const View& grad, const View& m, const View& v, double lr,
                  double beta1, double beta2, double eps, double weight_decay,
                  double bias_correction1, double bias_correction2) override {
    call();
    b_->adamw_step(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, bias_correction1,
                   bias_correction2);
  }
  void sgd_step(const View& param, const View& grad, const View& momentum_buf, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                bool first_step) override {
    call();
    b_->sgd_step(param, grad, momentum_buf, lr, momentum, dampening, weight_decay, nesterov,
                 first_step);
  }
  void adamw_step_many(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                       double beta2, double eps, double weight_decay, double bias_correction1,
                       double bias_correction2) override {
    call();
    b_->adamw_step_many(bufs, lr, beta1, beta2, eps, weight_decay, bias_correction1,
                        bias_correction2);
  }
  void sum_squares_many(const View& out, const std::vector<View>& ins) override {
    call();
    b_->sum_squares_many(out, ins);
  }
  void update_control(const View& control, const View& step, double max_norm) override {
    call();
    b_->update_control(control, step, max_norm);
  }
  void adamw_step_guarded(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                          double beta2, double eps, double weight_decay,
                          const View& control) override {
    call();
    b_->adamw_step_guarded(bufs, lr, beta1, beta2, eps, weight_decay, control);
  }
  void sgd_step_guarded(const std::vector<SGDBuffers>& bufs, double lr, double momentum,
                        double dampening, double weight_decay, bool nesterov,
                        const View& control) override {
    call();
    b_->sgd_step_guarded(bufs, lr, momentum, dampening, weight_decay, nesterov, control);
  }

 private:
  static void call() { ++tl_counts.calls; }
  std::unique_ptr<Backend> b_;
};

}  // namespace

std::unique_ptr<Backend> counting_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<CountingBackend>(std::move(inner));
}

}  // namespace pelab
