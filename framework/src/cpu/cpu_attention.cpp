// pelab — CPU fused attention: softmax(scale · q kᵀ + bias, mask) · v and its backward, one block of
// query rows at a time, so the [rows, Lk] scores live in a per-thread buffer that stays in L2: the
// scores, their biased and masked copies and the softmax gradient never become [B, H, Lq, Lk]
// tensors (at L = 512 each is 8 MB per layer at batch 2). The forward writes out, each row's max and
// log-sum-exp and, when the op keeps them, the probabilities; without them the backward recomputes
// a block's probabilities from the row statistics (FlashAttention's recomputation, without the
// online softmax: a block holds whole rows). Every product is the register-blocked kernel of
// cpu_small_gemm.h; k runs in order and the work split depends only on the shapes, so results are
// deterministic for any thread count.
#include <cmath>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_small_gemm.h"

namespace pelab {
namespace {

// Query rows per block: a multiple of the micro-kernel's 6 rows, with a [rows, Lk] buffer of at most
// ~96 KB (two of them, plus k and v, stay within a core's L2 in the backward), 6..60 rows.
template <class T>
int64_t block_rows(int64_t Lk) {
  const int64_t fit = (96 * 1024) / std::max<int64_t>(1, Lk * static_cast<int64_t>(sizeof(T)));
  return std::clamp<int64_t>(fit / 6 * 6, 6, 60);
}

// Where a [B, H, Lq, Lk] view's row (b, h, i) starts, and its column stride.
struct Rows {
  const char* base = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  explicit Rows(const View& v) {
    if (!v.data) return;
    base = static_cast<const char*>(v.data);
    s0 = v.strides[0], s1 = v.strides[1], s2 = v.strides[2], s3 = v.strides[3];
  }
  template <class T>
  const T* row(int64_t b, int64_t h, int64_t i) const {
    return base ? reinterpret_cast<const T*>(base) + b * s0 + h * s1 + i * s2 : nullptr;
  }
};

// op(B) of one head as the micro-kernel reads it, packed once per head (key) instead of once per
// query block; a row-major B of whole tiles is read in place. Reset `key` at the start of a call.
template <class T>
struct HeadPanel {
  std::vector<T> buf;
  const T* p = nullptr;
  int64_t np = 0, key = -1;
  void get(int64_t key_, bool tb, int64_t N, int64_t K, const T* B, int64_t ldb) {
    if (key_ == key) return;
    key = key_;
    if (!tb && N % cpu::SmallGemmTraits<T>::NR == 0) {
      p = B;
      np = ldb;
      return;
    }
    const size_t need = static_cast<size_t>(cpu::small_panel_size<T>(N, K));
    if (buf.size() < need) buf.resize(need);
    np = cpu::pack_b<T>(tb, N, K, B, ldb, buf.data());
    p = buf.data();
  }
};

// x[0..n) (already scale · q·k) gets the bias row added and the masked entries replaced.
template <class T>
inline void bias_and_mask(T* x, int64_t n, const T* bias, int64_t bs, const T* mask, int64_t ms,
                          T masked) {
  if (bias) {
    if (bs == 1) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) x[j] += bias[j];
    } else {
      for (int64_t j = 0; j < n; ++j) x[j] += bias[j * bs];
    }
  }
  if (mask) {
    if (ms == 1) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) x[j] = mask[j] != T(0) ? masked : x[j];
    } else {
      for (int64_t j = 0; j < n; ++j) x[j] = mask[j * ms] != T(0) ? masked : x[j];
    }
  }
}

// S = scale · q_blk kᵀ with the bias and mask applied: rows i0.. i0+rows-1 of head (b, h); kp is
// the head's kᵀ panel.
template <class T>
void block_scores(T* S, int64_t rows, int64_t i0, int64_t b, int64_t h, const T* q,
                  const HeadPanel<T>& kp, int64_t Lk, int64_t dh, T scale, const Rows& bias,
                  const Rows& mask, T masked) {
  cpu::small_gemm_packed<T>(false, rows, Lk, dh, scale, q + i0 * dh, dh, kp.p, kp.np, T(0), S, Lk);
  if (!bias.base && !mask.base) return;
  for (int64_t r = 0; r < rows; ++r)
    bias_and_mask<T>(S + r * Lk, Lk, bias.row<T>(b, h, i0 + r), bias.s3,
                     mask.row<T>(b, h, i0 + r), mask.s3, masked);
}

template <class T>
void attention_fwd(const View& out, const View& stats, const View& probs, const View& q,
                   const View& k, const View& v, const View& bias_v, const View& mask_v, int64_t B,
                   int64_t H, T scale, T masked) {
  const int64_t BH = B * H, Lq = q.shape[1], Lk = k.shape[1], dh = q.shape[2];
  const T* Q = static_cast<const T*>(q.data);
  const T* K = static_cast<const T*>(k.data);
  const T* Vp = static_cast<const T*>(v.data);
  T* O = static_cast<T*>(out.data);
  T* ST = static_cast<T*>(stats.data);
  T* PR = static_cast<T*>(probs.data);
  const Rows bias(bias_v), mask(mask_v);
  const int64_t QB = block_rows<T>(Lk), nqb = (Lq + QB - 1) / QB, tasks = BH * nqb;
#pragma omp parallel if (BH * Lq * Lk * dh > kParallelGrain)
  {
    thread_local HeadPanel<T> kp, vp;  // a thread's tasks run whole heads' blocks in a row
    kp.key = vp.key = -1;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / nqb, i0 = (t % nqb) * QB, rows = std::min(QB, Lq - i0);
      const int64_t b = bh / H, h = bh % H;
      kp.get(bh, true, Lk, dh, K + bh * Lk * dh, dh);
      vp.get(bh, false, dh, Lk, Vp + bh * Lk * dh, dh);
      thread_local std::vector<T> buf;
      T* S = PR ? PR + (bh * Lq + i0) * Lk : nullptr;  // kept probabilities: work in place there
      if (!S) {
        if (buf.size() < static_cast<size_t>(QB * Lk)) buf.resize(static_cast<size_t>(QB * Lk));
        S = buf.data();
      }
      block_scores<T>(S, rows, i0, b, h, Q + bh * Lq * dh, kp, Lk, dh, scale, bias, mask, masked);
      for (int64_t r = 0; r < rows; ++r) {  // softmax in place; max and log-sum for the backward
        T* x = S + r * Lk;
        T m = x[0];
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < Lk; ++j) m = x[j] > m ? x[j] : m;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < Lk; ++j) {
          const T e = cpu::vexp(x[j] - m);
          x[j] = e;
          s += static_cast<double>(e);
        }
        const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
        for (int64_t j = 0; j < Lk; ++j) x[j] *= inv;
        T* st = ST + 2 * (bh * Lq + i0 + r);
        st[0] = m;
        st[1] = static_cast<T>(std::log(s));
      }
      cpu::small_gemm_packed<T>(false, rows, dh, Lk, T(1), S, Lk, vp.p, vp.np, T(0),
                                O + (bh * Lq + i0) * dh, dh);
    }
  }
}

template <class T>
void attention_bwd(const View& gq, const View& gk, const View& gv, const View& gs, const View& go,
                   const View& q, const View& k, const View& v, const View& out,
                   const View& stats, const View& probs, const View& bias_v, const View& mask_v,
                   int64_t B, int64_t H, T scale, T masked) {
  const int64_t BH = B * H, Lq = q.shape[1], Lk = k.shape[1], dh = q.shape[2];
  const T* Q = static_cast<const T*>(q.data);
  const T* K = static_cast<const T*>(k.data);
  const T* Vp = static_cast<const T*>(v.data);
  const T* O = static_cast<const T*>(out.data);
  const T* GO = static_cast<const T*>(go.data);
  const T* ST = static_cast<const T*>(stats.data);
  T* GQ = static_cast<T*>(gq.data);
  T* GK = static_cast<T*>(gk.data);
  T* GV = static_cast<T*>(gv.data);
  T* GS = static_cast<T*>(gs.data);
  const T* PR = static_cast<const T*>(probs.data);
  const Rows bias(bias_v), mask(mask_v);
  const int64_t QB = block_rows<T>(Lk), nqb = (Lq + QB - 1) / QB;
  // One task per head: its k and v gradients collect every query block's share in order.
#pragma omp parallel for schedule(static) if (BH * Lq * Lk * dh > kParallelGrain)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    thread_local HeadPanel<T> kp, vp, kn;  // kᵀ (recomputing), vᵀ (for dO vᵀ), k (for dS k)
    kp.key = vp.key = kn.key = -1;
    if (!PR) kp.get(bh, true, Lk, dh, K + bh * Lk * dh, dh);
    vp.get(bh, true, Lk, dh, Vp + bh * Lk * dh, dh);
    kn.get(bh, false, dh, Lk, K + bh * Lk * dh, dh);
    thread_local std::vector<T> buf;
    if (buf.size() < static_cast<size_t>(2 * QB * Lk)) buf.resize(static_cast<size_t>(2 * QB * Lk));
    T* Pbuf = buf.data();
    T* dS = Pbuf + QB * Lk;
    const T* q_bh = Q + bh * Lq * dh;
    T* gk_bh = GK + bh * Lk * dh;
    T* gv_bh = GV + bh * Lk * dh;
    if (nqb == 0) {  // no queries: k and v get no gradient
      std::fill(gk_bh, gk_bh + Lk * dh, T(0));
      std::fill(gv_bh, gv_bh + Lk * dh, T(0));
    }
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t i0 = qb * QB, rows = std::min(QB, Lq - i0);
      const T beta = qb == 0 ? T(0) : T(1);
      const T* go_blk = GO + (bh * Lq + i0) * dh;
      const T* P = PR ? PR + (bh * Lq + i0) * Lk : Pbuf;
      if (!PR) {  // recompute the block's probabilities: exp((x - max) - log-sum)
        block_scores<T>(Pbuf, rows, i0, b, h, q_bh, kp, Lk, dh, scale, bias, mask, masked);
        for (int64_t r = 0; r < rows; ++r) {
          T* p = Pbuf + r * Lk;
          const T m = ST[2 * (bh * Lq + i0 + r)], l = ST[2 * (bh * Lq + i0 + r) + 1];
#pragma omp simd
          for (int64_t j = 0; j < Lk; ++j) p[j] = cpu::vexp((p[j] - m) - l);
        }
      }
      // dP = dO vᵀ
      cpu::small_gemm_packed<T>(false, rows, Lk, dh, T(1), go_blk, dh, vp.p, vp.np, T(0), dS, Lk);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T* p = P + r * Lk;
        T* ds = dS + r * Lk;
        double dd = 0;  // D_i = Σ_d dO_id O_id = Σ_j P_ij dP_ij
        const T* o_i = O + (bh * Lq + i) * dh;
        const T* go_i = go_blk + r * dh;
        for (int64_t d = 0; d < dh; ++d) dd += static_cast<double>(go_i[d]) * o_i[d];
        const T D = static_cast<T>(dd);
#pragma omp simd
        for (int64_t j = 0; j < Lk; ++j) ds[j] = p[j] * (ds[j] - D);
        if (const T* mi = mask.row<T>(b, h, i)) {  // masked_fill's backward: no gradient there
          for (int64_t j = 0; j < Lk; ++j)
            if (mi[j * mask.s3] != T(0)) ds[j] = T(0);
        }
        if (GS) std::copy(ds, ds + Lk, GS + (bh * Lq + i) * Lk);
      }
      cpu::small_gemm<T>(true, false, Lk, dh, rows, T(1), P, Lk, go_blk, dh, beta, gv_bh, dh);
      cpu::small_gemm_packed<T>(false, rows, dh, Lk, scale, dS, Lk, kn.p, kn.np, T(0),
                                GQ + (bh * Lq + i0) * dh, dh);
      cpu::small_gemm<T>(true, false, Lk, dh, rows, scale, dS, Lk, q_bh + i0 * dh, dh, beta, gk_bh,
                         dh);
    }
  }
}

}  // namespace

void CpuBackend::attention(const View& out, const View& stats, const View& probs, const View& q,
                           const View& k, const View& v, const View& bias, const View& mask,
                           int64_t B, int64_t H, double scale, double masked) {
  check_attention("attention", out, stats, probs, q, k, v, bias, mask, B, H);
  if (out.numel() == 0) return;
  PELAB_CHECK(k.shape[1] > 0, "attention: no keys for ", q.shape[1], " queries");
  cpu::dispatch_float(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    attention_fwd<T>(out, stats, probs, q, k, v, bias, mask, B, H, static_cast<T>(scale),
                     static_cast<T>(masked));
  });
}

void CpuBackend::attention_backward(const View& grad_q, const View& grad_k, const View& grad_v,
                                    const View& grad_scores, const View& grad_out, const View& q,
                                    const View& k, const View& v, const View& out,
                                    const View& stats, const View& probs, const View& bias, const View& mask,
                                    int64_t B, int64_t H, double scale, double masked) {
  const char* op = "attention_backward";
  check_attention(op, out, stats, probs, q, k, v, bias, mask, B, H);
  const std::pair<const View*, const View*> same[] = {
      {&grad_q, &q}, {&grad_k, &k}, {&grad_v, &v}, {&grad_out, &out}};
  for (const auto& [g, like] : same)
    PELAB_CHECK(g->data != nullptr && g->shape == like->shape && g->contiguous() &&
                    g->dtype == q.dtype,
                op, ": gradient ", shape_str(g->shape), " must be contiguous ",
                shape_str(like->shape), " of dtype ", dtype_name(q.dtype));
  const int64_t Lq = q.shape[1], Lk = k.shape[1];
  PELAB_CHECK(grad_scores.data == nullptr ||
                  (grad_scores.shape == Shape{B, H, Lq, Lk} && grad_scores.contiguous() &&
                   grad_scores.dtype == q.dtype),
              op, ": grad_scores ", shape_str(grad_scores.shape), " must be contiguous [", B, ", ",
              H, ", ", Lq, ", ", Lk, "]");
  if (k.numel() == 0 && q.numel() == 0) return;
  cpu::dispatch_float(q.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    attention_bwd<T>(grad_q, grad_k, grad_v, grad_scores, grad_out, q, k, v, out, stats, probs,
                     bias, mask, B, H, static_cast<T>(scale), static_cast<T>(masked));
  });
}

}  // namespace pelab
