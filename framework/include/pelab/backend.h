// pelab — the backend seam. Ops (framework/src/ops) are written once against this interface; each
// device (CPU now, CUDA later) implements the kernels. Ops never branch on the device: they call
// backend_for(device) and pass Views. Adding a backend = one subclass + register_backend().
// Every pure virtual method below is also declared once in framework/src/backend_kernels.inc,
// which each backend class includes in its body.
//
// Conventions for every kernel:
//  * A View is a strided window: `data` points at element 0 (offset already applied), strides are in
//    elements and may be 0 (broadcast) or arbitrary (permuted/sliced). Kernels must honour strides of
//    inputs. Outputs are contiguous unless a kernel says otherwise.
//  * Floating kernels support Float32 and Float64; index arguments are Int64.
//  * "rows x n" kernels take contiguous data laid out [outer, n, inner] and work along the middle axis
//    (inner = 1 for the last axis), so "along any axis" needs no transpose.
//  * Results must be identical run to run for a fixed thread count.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pelab/tensor.h"

namespace pelab {

struct View {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Shape shape;
  Shape strides;
  int64_t numel() const { return shape_numel(shape); }
  bool contiguous() const;
};
View view_of(const Tensor& t);                    // the tensor's own strides
View view_broadcast(const Tensor& t, const Shape& to);  // strides 0 on broadcast axes (numpy rules)

enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Relu, Gelu, GeluTanh, Sin, Cos, Abs, Sigmoid,
  AddScalar,   // x + alpha
  MulScalar,   // x * alpha
  PowScalar,   // x ^ alpha
  RDivScalar,  // alpha / x
  Step         // 1 if x > 0 else 0 (relu derivative)
};

enum class BinaryOp {
  Add, Sub, Mul, Div, Max, Min,
  Eq, Ne, Lt, Gt,   // 1.0 / 0.0 results in the output dtype
  TanhGrad,         // a * (1 - b^2): grad * tanh'(x) from the tanh output b
  GeluGrad,         // a * gelu'(b): grad * d gelu(x) / dx at x = b (erf form), one pass
  GeluTanhGrad,     // a * gelu_tanh'(b)
  SigmoidGrad       // a * b * (1 - b): grad * sigmoid'(x) from the sigmoid output b
};

enum class ReduceOp { Sum, Max };

// The operands of Backend::attention. q, k, v, out (and the gradients below) are [B, H, L, dh]
// views with unit stride along dh and any other strides (a token-major [B, L, H, dh] buffer seen
// through a permute, as multi-head attention's projections are, needs no copy); the other dense
// views are contiguous; optional ones have data == nullptr when absent. BH = B·H.
struct AttentionArgs {
  View q, k, v;       // [B, H, Lq, dh], [B, H, Lk, dh], [B, H, Lk, dh]
  View out, stats;    // [B, H, Lq, dh], [BH, Lq, 2] (written by the forward)
  View probs;         // [B, H, Lq, Lk] contiguous, or none
  View bias, mask;    // [B, H, Lq, Lk] views, stride 0 on broadcast axes; mask != 0 blocks
  View rel_index;     // Int64 [Lq, Lk] with values in [0, R), or none (then no tables)
  View rel_keys;      // [Hr, R, dh], Hr = 1 (shared by the heads) or H, or none
  View rel_values;    // [Hr', R, dh] likewise, or none
  int64_t B = 0, H = 0;
  double scale = 1.0, masked = -1e9;
};
// Backend::attention_backward's outputs (overwritten): q, k, v gradients (shapes of the inputs);
// optional: scores [B, H, Lq, Lk] = dL/dx, zero where masked (the bias's gradient before
// broadcasting), and rel_keys / rel_values [BH, R, dh], each head's share of a table's gradient.
struct AttentionGrads {
  View q, k, v, scores, rel_keys, rel_values;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory (device memory; 64-byte aligned; may cache) ----
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void synchronize() {}
  virtual void empty_cache() {}

  // ---- generic strided kernels ----
  virtual void fill(const View& out, double value) = 0;               // out may be strided
  virtual void copy(const View& out, const View& in) = 0;             // same shape; converts dtype; out may be strided
  virtual void unary(UnaryOp op, const View& out, const View& in, double alpha) = 0;
  virtual void binary(BinaryOp op, const View& out, const View& a, const View& b) = 0;  // a,b broadcast to out
  virtual void where(const View& out, const View& cond, const View& a, const View& b) = 0;  // cond != 0 ? a : b
  virtual void axpy(const View& out, const View& x, double alpha) = 0;  // out += alpha * x (out contiguous, x broadcast)
  // out = min(max(in, lo), hi) (lo <= hi; NaN stays NaN); out contiguous, in strided like unary's.
  virtual void clamp(const View& out, const View& in, double lo, double hi) = 0;
  // grad_in = lo <= x <= hi ? grad_out : 0 (the bounds pass the gradient); grad_in contiguous,
  // grad_out and x strided.
  virtual void clamp_backward(const View& grad_in, const View& grad_out, const View& x, double lo,
                              double hi) = 0;

  // ---- reductions on contiguous [outer, n, inner] -> [outer, inner] ----
  // For Max, `argmax` (Int64, [outer, inner]) receives the first index of the maximum if non-null.
  virtual void reduce(ReduceOp op, const View& out, void* argmax, const View& in,
                      int64_t outer, int64_t n, int64_t inner) = 0;
  // Sum of squares of a contiguous buffer, accumulated in double.
  virtual double sum_squares(const View& in) = 0;
  // Cumulative sum along n of contiguous [outer, n, inner]: out[o, j, i] = Σ_{t<=j} in[o, t, i], or
  // Σ_{t>=j} when `reverse` (a suffix sum); Float32 accumulates in double. out may alias in.
  virtual void cumsum(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                      bool reverse) = 0;

  // ---- GEMM: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], column-major-free (row-major) ----
  // Row-major matrices; lda/ldb/ldc are row strides; strideA/B/C are batch strides (0 = shared).
  virtual void gemm(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                    double alpha, const void* A, int64_t lda, int64_t strideA,
                    const void* B, int64_t ldb, int64_t strideB, double beta,
                    void* C, int64_t ldc, int64_t strideC, int64_t batch) = 0;
  // gemm over a batch with more than one level of strides (what one stride cannot express: e.g.
  // the [B, H] heads of a token-major [B, L, H, dh] projection): for each o, the strided batch
  // gemm(..., A + offsets[o][0], ..., B + offsets[o][1], ..., C + offsets[o][2], ..., batch), the
  // offsets in elements, in order. The default runs those gemm calls; a device may run all of them
  // as one launch. No two products' C overlap.
  struct OuterOffsets {
    int64_t a = 0, b = 0, c = 0;
  };
  virtual void gemm_outer(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                          double alpha, const void* A, int64_t lda, int64_t strideA,
                          const void* B, int64_t ldb, int64_t strideB, double beta, void* C,
                          int64_t ldc, int64_t strideC, int64_t batch,
                          const std::vector<OuterOffsets>& offsets) {
    const size_t esz = dtype_size(dtype);
    for (const OuterOffsets& o : offsets)
      gemm(dtype, transA, transB, M, N, K, alpha, static_cast<const char*>(A) + o.a * esz, lda,
           strideA, static_cast<const char*>(B) + o.b * esz, ldb, strideB, beta,
           static_cast<char*>(C) + o.c * esz, ldc, strideC, batch);
  }
  // C = op(A) * op(B) + bias broadcast over C's M rows (one product; bias contiguous [N]). The
  // default copies the bias into C, then runs gemm with beta = 1; the CPU backend fills each
  // thread's block of C inside the product's parallel region (no region of its own), with the same
  // result.
  virtual void gemm_bias(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                         const void* A, int64_t lda, const void* B, int64_t ldb, const void* bias,
                         void* C, int64_t ldc) {
    View c, b;
    c.data = C;
    c.dtype = b.dtype = dtype;
    c.shape = b.shape = {M, N};
    c.strides = {ldc, 1};
    b.data = const_cast<void*>(bias);
    b.strides = {0, 1};
    copy(c, b);
    if (K > 0) gemm(dtype, transA, transB, M, N, K, 1.0, A, lda, 0, B, ldb, 0, 1.0, C, ldc, 0, 1);
  }

  // One product of gemm_group: C = alpha * op(A) * op(B) + beta * C, as gemm with batch 1.
  struct GemmItem {
    bool transA = false, transB = false;
    int64_t M = 0, N = 0, K = 0;
    double alpha = 1.0;
    const void* A = nullptr;
    int64_t lda = 1;
    const void* B = nullptr;
    int64_t ldb = 1;
    double beta = 0.0;
    void* C = nullptr;
    int64_t ldc = 1;
  };
  // n independent products (no item's C overlaps another item's operands or C; a backward's dX
  // and dW) as one call: a backend may run them concurrently. The default runs gemm on each in
  // order. The CPU backend runs them one per thread, each a single-threaded product in one region
  // for the group, when several threads are set, the products are large and their work divides
  // evenly over the threads; otherwise as the default. Results are deterministic for a thread
  // count either way.
  virtual void gemm_group(DType dtype, const GemmItem* items, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const GemmItem& g = items[i];
      gemm(dtype, g.transA, g.transB, g.M, g.N, g.K, g.alpha, g.A, g.lda, 0, g.B, g.ldb, 0,
           g.beta, g.C, g.ldc, 0, 1);
    }
  }

  // ---- fused softmax family on contiguous [outer, n, inner], along n ----
  virtual void softmax(const View& out, const View& in, int64_t outer, int64_t n, int64_t inner,
                       bool log) = 0;
  // grad_in = y * (g - sum(g*y))  (log=false, y = softmax output)
  // grad_in = g - exp(y) * sum(g) (log=true,  y = log_softmax output)
  virtual void softmax_backward(const View& grad_in, const View& grad_out, const View& y,
                                int64_t outer, int64_t n, int64_t inner, bool log) = 0;

  // ---- fused layer norm over the last axis of contiguous [rows, n] ----
  // mean/rstd: [rows] in the input dtype. weight/bias may have data == nullptr (no affine).
  virtual void layer_norm(const View& y, const View& mean, const View& rstd, const View& x,
                          const View& weight, const View& bias, int64_t rows, int64_t n,
                          double eps) = 0;
  // grad_x [rows, n]; grad_weight/grad_bias [n] are overwritten (data may be nullptr to skip).
  virtual void layer_norm_backward(const View& grad_x, const View& grad_weight,
                                   const View& grad_bias, const View& grad_y, const View& x,
                                   const View& mean, const View& rstd, const View& weight,
                                   int64_t rows, int64_t n) = 0;

  // ---- fused log-softmax + mean cross-entropy over contiguous logits [rows, C], targets Int64 [rows] ----
  // Target distribution of row r: (1 - s) * onehot(t_r) + s / C. Writes loss_rows[r] = the smoothed
  // NLL of row r (0 for rows whose target is ignore_index), lse[r] = logsumexp of row r, count
  // (Float64, one element) = the rows whose target is not ignore_index, and loss (one element of
  // the logits' dtype) = T(Σ_r loss_rows[r]) · T(1 / count), the sum as reduce(Sum)'s, 0 when count
  // is 0. Nothing is read back to the host: the mean's divisor stays on the device. A target outside
  // [0, C) that is not ignore_index is an error (the CPU throws; a device reports it at its next
  // synchronisation, as a bad index, and computes 0 for that row).
  virtual void cross_entropy(const View& loss, const View& count, const View& loss_rows,
                             const View& lse, const View& logits, const View& targets,
                             int64_t rows, int64_t C, int64_t ignore_index, double smoothing) = 0;
  // grad_logits[r, :] = scale * (softmax(logits[r]) - target_dist(r)), zero for ignored rows, with
  // scale = g / count read on the device: g = grad_loss (one element of the logits' dtype, the mean
  // loss's gradient) and count the forward's (Float64, one element; 0 leaves scale at g / 0, which
  // only ignored rows, all zero, would see).
  virtual void cross_entropy_backward(const View& grad_logits, const View& logits, const View& lse,
                                      const View& targets, int64_t rows, int64_t C,
                                      int64_t ignore_index, double smoothing,
                                      const View& grad_loss, const View& count) = 0;

  // ---- pairwise planar rotation on contiguous x [outer, L, D], tables cos/sin contiguous [L, P],
  // 1 <= P, 2P <= D. Pair p < P holds dims (a, b) = (p, p + P), or (2p, 2p + 1) when interleaved:
  //   out[a] = x[a] cos[l, p] - x[b] sin[l, p],  out[b] = x[b] cos[l, p] + x[a] sin[l, p]
  // (inverse: sin negated, the transpose), and out[d] = x[d] for d >= 2P. out may alias x. ----
  virtual void rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                            int64_t outer, int64_t L, int64_t D, int64_t P, bool interleaved,
                            bool inverse) = 0;

  // ---- fused scaled-dot-product attention (AttentionArgs above), the [Lq, Lk] scores kept in a
  // thread's cache:
  //   x[i, j] = mask[i, j] != 0 ? masked : scale · q_i·(k_j + rel_keys[h, r_ij]) + bias[i, j]
  //   out_i = Σ_j softmax(x_i)_j (v_j + rel_values[h, r_ij]),   r = rel_index,
  //   stats_i = (m_i = max_j x_ij, log Σ_j exp(x_ij - m_i))
  // (two numbers, not m + log Σ: a row of masked entries at -1e9 would lose its digits). probs
  // receives softmax(x) when given: for short sequences keeping it is cheaper than the backward's
  // recomputation. A backend without these kernels keeps has_fused_attention() false; the op then
  // composes matmul, add, masked_fill, softmax and bin_sum (the same math).
  virtual bool has_fused_attention() const { return false; }
  virtual void attention(const AttentionArgs& a);
  // Gradients from grad_out [BH, Lq, dh] and the forward's out, stats and (if it kept them) probs
  // into AttentionGrads; without probs, each block's probabilities are recomputed from stats.
  virtual void attention_backward(const AttentionArgs& a, const View& grad_out,
                                  const AttentionGrads& g);

  // ---- indexing on contiguous data ----
  // index_select: out[o, j, i] = in[o, idx[j], i]; in [outer, n_in, inner], idx [n_idx] Int64.
  virtual void index_select(const View& out, const View& in, const View& idx, int64_t outer,
                            int64_t n_in, int64_t n_idx, int64_t inner) = 0;
  // index_add: acc[o, idx[j], i] += src[o, j, i] (acc contiguous [outer, n_in, inner], not zeroed here)
  virtual void index_add(const View& acc, const View& src, const View& idx, int64_t outer,
                         int64_t n_in, int64_t n_idx, int64_t inner) = 0;
  // gather: out[o, j, i] = in[o, idx[o, j, i], i]. idx is contiguous and holds P blocks of
  // [n_idx, inner] where P divides outer; slice o reads block o mod P (P = outer: the plain
  // [outer, n_idx, inner] index; P < outer: an index repeated over leading dims, never replicated).
  virtual void gather(const View& out, const View& in, const View& idx, int64_t outer,
                      int64_t n_in, int64_t n_idx, int64_t inner) = 0;
  // scatter_add: acc[o, idx[o, j, i], i] += src[o, j, i] (idx blocks as for gather)
  virtual void scatter_add(const View& acc, const View& src, const View& idx, int64_t outer,
                           int64_t n_in, int64_t n_idx, int64_t inner) = 0;

  // gather_lerp: linear interpolation between the rows of in [outer, n_in, inner] at fractional
  // positions pos [outer, n_idx, inner] (contiguous, in's dtype): with u = pos[o, j, i],
  // k = ⌊u⌋ and w = u − k, out[o, j, i] = a_k + w (a_{k+1} − a_k), a_r = in[o, r, i]; at
  // u = n_in − 1 (the upper edge) it is a_{n_in−1} and reads nothing beyond. Every position must
  // lie in [0, n_in − 1]: one outside (or NaN) throws naming it and its flat index.
  virtual void gather_lerp(const View& out, const View& in, const View& pos, int64_t outer,
                           int64_t n_in, int64_t n_idx, int64_t inner) = 0;
  // Its gradients from grad_out [outer, n_idx, inner]: grad_in [outer, n_in, inner] is overwritten
  // with Σ of (1 − w) g into row k and w g into row k + 1 (summed in an order fixed by the
  // positions, so the same run to run), grad_pos with
  // g (a_{k+1} − a_k) (0 at the upper edge: the right derivative, as ⌊u⌋ carries no gradient).
  // Either output may have data == nullptr to skip it. Positions are checked as in the forward.
  virtual void gather_lerp_backward(const View& grad_in, const View& grad_pos,
                                    const View& grad_out, const View& in, const View& pos,
                                    int64_t outer, int64_t n_in, int64_t n_idx, int64_t inner) = 0;

  // ---- randomness: counter-based, so results do not depend on threads or device ----
  // mask[i] = (uniform(seed, offset + i) >= p) ? 1/(1-p) : 0
  virtual void dropout_mask(const View& mask, double p, uint64_t seed, uint64_t offset) = 0;
  // Uniform [lo, hi) or normal(mean, std) fill of a contiguous floating buffer.
  virtual void random_uniform(const View& out, double lo, double hi, uint64_t seed, uint64_t offset) = 0;
  virtual void random_normal(const View& out, double mean, double std, uint64_t seed, uint64_t offset) = 0;

  // ---- fused optimizer steps on contiguous buffers of n elements ----
  virtual void adamw_step(const View& param, const View& grad, const View& m, const View& v,
                          double lr, double beta1, double beta2, double eps, double weight_decay,
                          double bias_correction1, double bias_correction2) = 0;
  virtual void sgd_step(const View& param, const View& grad, const View& momentum_buf, double lr,
                        double momentum, double dampening, double weight_decay, bool nesterov,
                        bool first_step) = 0;
  // adamw_step on several parameters with the same settings; no two entries' buffers overlap. A
  // backend may run them as one parallel pass (the CPU backend: one region for the whole step
  // instead of one per large parameter and none for the small ones); each element's result is
  // that of adamw_step.
  struct AdamWBuffers {
    View param, grad, m, v;
  };
  virtual void adamw_step_many(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                               double beta2, double eps, double weight_decay,
                               double bias_correction1, double bias_correction2) {
    for (const AdamWBuffers& b : bufs)
      adamw_step(b.param, b.grad, b.m, b.v, lr, beta1, beta2, eps, weight_decay, bias_correction1,
                 bias_correction2);
  }

  // ---- guarded updates: one training step's gradient clip and skip, decided on the device ----
  // These read and write small Float64 buffers on the device, so that a training step makes no
  // device→host read and waits for nothing; the host reads the buffers when it wants the values.
  // out (one Float64 element) = Σ over `ins` (contiguous, any dtypes) of each one's sum_squares,
  // added in order from 0: a model's global gradient norm² in one call.
  virtual void sum_squares_many(const View& out, const std::vector<View>& ins) = 0;
  // From step = Float64 {loss, sum of squares, -} (a step's loss and its gradients' global sum of
  // squares) writes step[2] = sqrt(step[1]), the global gradient norm, and control = Float64 [3]:
  // control[0] = max_norm / (norm + 1e-6) where that is below 1, else 1 (PyTorch's
  // clip_grad_norm_; max_norm may be infinite: no clip); control[1] = 1 if the norm and the loss are
  // finite, else 0 (the update is skipped); control[2] += control[1] (the updates taken so far: the
  // optimizer's step count).
  virtual void update_control(const View& control, const View& step, double max_norm) = 0;
  // adamw_step on several parameters (as adamw_step_many) under `control` (update_control's): no
  // buffer changes when control[1] == 0; else each gradient element is first multiplied by
  // control[0] in the parameters' dtype (as unary MulScalar would; not at all when it is 1), and the
  // bias corrections are 1 - beta^t at t = control[2]. Each element's result is that of clip +
  // adamw_step with those values.
  virtual void adamw_step_guarded(const std::vector<AdamWBuffers>& bufs, double lr, double beta1,
                                  double beta2, double eps, double weight_decay,
                                  const View& control) = 0;
  struct SGDBuffers {
    View param, grad, momentum_buf;  // momentum_buf unused (may have no data) when momentum == 0
  };
  // sgd_step on several parameters under `control` likewise; the first step (the momentum buffer
  // starts as the gradient) is the one at t = control[2] == 1.
  virtual void sgd_step_guarded(const std::vector<SGDBuffers>& bufs, double lr, double momentum,
                                double dampening, double weight_decay, bool nesterov,
                                const View& control) = 0;
};

// The block count P of a gather / scatter_add index (see Backend::gather), checked.
inline int64_t index_blocks(const View& idx, int64_t outer, int64_t n_idx, int64_t inner,
                            const char* op) {
  const int64_t block = n_idx * inner, n = idx.numel();
  if (block == 0 || outer == 0) return std::max<int64_t>(outer, 1);
  PELAB_CHECK(n % block == 0 && n / block >= 1 && outer % (n / block) == 0, op, ": index ",
              shape_str(idx.shape), " is not a whole number of [", n_idx, ", ", inner,
              "] blocks dividing the ", outer, " outer slices");
  return n / block;
}

// What the host asks of the backends, counted on the calling thread at the Backend interface
// (every registered backend is wrapped by a counting layer, so the counts mean the same on every
// device; bench_train prints them per step, tests bound them). A training step's host overhead on a
// device is its calls, reads and syncs.
struct BackendCounts {
  int64_t calls = 0;   // kernel and copy calls (each is one device launch or more)
  int64_t reads = 0;   // device→host reads: copy_to_host (so every Tensor::item / to_vector) and
                       // kernels that return a device value to the host (sum_squares); the CPU
                       // backend counts them too, though it copies nothing
  int64_t syncs = 0;   // explicit waits for the device: synchronize, empty_cache, and a backend's
                       // own waits (a host→device copy it cannot stage); every read waits as well
  int64_t writes = 0;  // host→device copies (copy_from_host)
  int64_t allocs = 0;  // requests that reach a backend's allocator (tensor storage and kernels'
                       // scratch), and of them
  int64_t raw_allocs = 0;  // those its cache could not serve (malloc / cudaMalloc)
  BackendCounts operator-(const BackendCounts& o) const {
    return {calls - o.calls,   reads - o.reads,   syncs - o.syncs,
            writes - o.writes, allocs - o.allocs, raw_allocs - o.raw_allocs};
  }
};
BackendCounts backend_counts();  // this thread's totals so far
// For backends: a wait for the device the interface cannot see (counted as a sync), and an
// allocator request (raw: not served from the cache).
void note_backend_sync();
void note_backend_alloc(bool raw);

// The backend for a device; throws if that device type is not available in this build or machine.
Backend& backend_for(Device device);
void register_backend(DeviceType type, std::unique_ptr<Backend> backend);
bool backend_available(DeviceType type);

}  // namespace pelab
