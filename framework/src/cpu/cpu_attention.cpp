// pelab — CPU fused attention: softmax(scale · q kᵀ + bias, mask) · v and its backward, one block of
// query rows at a time, so the [rows, Lk] scores live in a per-thread buffer that stays in L2: the
// scores, their biased and masked copies and the softmax gradient never become [B, H, Lq, Lk]
// tensors (at L = 512 each is 8 MB per layer at batch 2). The forward writes out, each row's max and
// log-sum-exp and, when the op keeps them, the probabilities; without them the backward recomputes
// a block's probabilities from the row statistics (FlashAttention's recomputation, without the
// online softmax: a block holds whole rows). Keys that every row of a block has masked (a causal
// block's future) are skipped: their probabilities are exactly 0. Every product is the kernel of
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

// The mask as runs of blocked keys, built in one pass over its distinct rows (a causal
// [1, 1, Lq, Lk] mask has Lq of them, key padding [B, 1, 1, Lk] has B): filling runs replaces a
// compare per score, and each row's `live` end lets a block of rows skip the keys none of them can
// see. live = the start of a blocked run that reaches Lk (those keys get probability exactly 0:
// exp(masked - max) underflows), or Lk when no run reaches the end or every key is blocked (a row
// with no visible key is uniform over all keys, as in the composite).
struct MaskRuns {
  bool any = false;
  int64_t rb = 0, rh = 0, ri = 0;            // distinct row of (b, h, i) = b·rb + h·rh + i·ri
  std::vector<int64_t> first;                // runs of row r: run[first[r] .. first[r + 1])
  std::vector<std::pair<int64_t, int64_t>> run;  // [start, end) of blocked keys
  std::vector<int64_t> live;

  template <class T>
  MaskRuns(const View& m, T tag, int64_t B, int64_t H, int64_t Lq, int64_t Lk) {
    if (!m.data) return;
    any = true;
    const int64_t nb = m.strides[0] ? B : 1, nh = m.strides[1] ? H : 1, ni = m.strides[2] ? Lq : 1;
    ri = m.strides[2] ? 1 : 0;
    rh = m.strides[1] ? ni : 0;
    rb = m.strides[0] ? nh * ni : 0;
    const int64_t rows = nb * nh * ni, s3 = m.strides[3];
    const T* base = static_cast<const T*>(m.data);
    auto row_ptr = [&](int64_t r) {
      const int64_t b = r / (nh * ni), h = r / ni % nh, i = r % ni;
      return base + b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
    };
    std::vector<int64_t> count(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * Lk > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {  // pass 1: runs per row
      const T* x = row_ptr(r);
      int64_t c = 0;
      bool prev = false;
      for (int64_t j = 0; j < Lk; ++j) {
        const bool blocked = x[j * s3] != T(0);
        c += blocked && !prev;
        prev = blocked;
      }
      count[r] = c;
    }
    first.assign(static_cast<size_t>(rows + 1), 0);
    for (int64_t r = 0; r < rows; ++r) first[r + 1] = first[r] + count[r];
    run.resize(static_cast<size_t>(first[rows]));
    live.resize(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * Lk > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {  // pass 2: the runs themselves
      const T* x = row_ptr(r);
      int64_t n = first[r];
      for (int64_t j = 0; j < Lk;) {
        if (x[j * s3] == T(0)) {
          ++j;
          continue;
        }
        const int64_t a = j;
        while (j < Lk && x[j * s3] != T(0)) ++j;
        run[n++] = {a, j};
      }
      const bool tail = n > first[r] && run[n - 1].second == Lk && run[n - 1].first > 0;
      live[r] = tail ? run[n - 1].first : Lk;
    }
  }
  int64_t row(int64_t b, int64_t h, int64_t i) const { return b * rb + h * rh + i * ri; }
  // The keys rows i0.. i0+rows-1 of head (b, h) need: [0, end).
  int64_t block_end(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t Lk) const {
    if (!any) return Lk;
    int64_t e = 0;
    for (int64_t r = 0; r < rows; ++r) e = std::max(e, live[row(b, h, i0 + r)]);
    return e;
  }
  // Calls f(start, end) for the blocked runs of row (b, h, i) clipped to [0, end).
  template <class F>
  void for_runs(int64_t b, int64_t h, int64_t i, int64_t end, F f) const {
    const int64_t r = row(b, h, i);
    for (int64_t n = first[r]; n < first[r + 1] && run[n].first < end; ++n)
      f(run[n].first, std::min(run[n].second, end));
  }
};

// S[:, 0..n) = scale · q_blk kᵀ for rows i0.. i0+rows-1 of head (b, h) (kp: the head's kᵀ panel),
// with the bias added and the blocked entries set to `masked`. n = the block's live keys.
template <class T>
void block_scores(T* S, int64_t rows, int64_t i0, int64_t b, int64_t h, const T* q,
                  const HeadPanel<T>& kp, int64_t Lk, int64_t n, int64_t dh, T scale,
                  const Rows& bias, const MaskRuns& mask, T masked) {
  cpu::small_gemm_packed<T>(false, rows, n, dh, scale, q + i0 * dh, dh, kp.p, kp.np, T(0), S, Lk);
  for (int64_t r = 0; r < rows; ++r) {
    T* x = S + r * Lk;
    if (const T* bi = bias.row<T>(b, h, i0 + r)) {
      if (bias.s3 == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) x[j] += bi[j];
      } else {
        for (int64_t j = 0; j < n; ++j) x[j] += bi[j * bias.s3];
      }
    }
    if (mask.any)
      mask.for_runs(b, h, i0 + r, n, [&](int64_t a, int64_t e) { std::fill(x + a, x + e, masked); });
  }
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
  const Rows bias(bias_v);
  const MaskRuns mask(mask_v, T(), B, H, Lq, Lk);
  const int64_t QB = block_rows<T>(Lk), nqb = (Lq + QB - 1) / QB, tasks = BH * nqb;
#pragma omp parallel if (BH * Lq * Lk * dh > kParallelGrain)
  {
    thread_local HeadPanel<T> kp, vp;  // a thread's tasks run whole heads' blocks in a row
    kp.key = vp.key = -1;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / nqb, i0 = (t % nqb) * QB, rows = std::min(QB, Lq - i0);
      const int64_t b = bh / H, h = bh % H, n = mask.block_end(b, h, i0, rows, Lk);
      kp.get(bh, true, Lk, dh, K + bh * Lk * dh, dh);
      vp.get(bh, false, dh, Lk, Vp + bh * Lk * dh, dh);
      thread_local std::vector<T> buf;
      T* S = PR ? PR + (bh * Lq + i0) * Lk : nullptr;  // kept probabilities: work in place there
      if (!S) {
        if (buf.size() < static_cast<size_t>(QB * Lk)) buf.resize(static_cast<size_t>(QB * Lk));
        S = buf.data();
      }
      block_scores<T>(S, rows, i0, b, h, Q + bh * Lq * dh, kp, Lk, n, dh, scale, bias, mask,
                      masked);
      for (int64_t r = 0; r < rows; ++r) {  // softmax in place; max and log-sum for the backward
        T* x = S + r * Lk;
        T m = x[0];
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; ++j) {
          const T e = cpu::vexp(x[j] - m);
          x[j] = e;
          s += static_cast<double>(e);
        }
        const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) x[j] *= inv;
        if (PR) std::fill(x + n, x + Lk, T(0));  // the skipped keys' probability is exactly 0
        T* st = ST + 2 * (bh * Lq + i0 + r);
        st[0] = m;
        st[1] = static_cast<T>(std::log(s));
      }
      cpu::small_gemm_packed<T>(false, rows, dh, n, T(1), S, Lk, vp.p, vp.np, T(0),
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
  const Rows bias(bias_v);
  const MaskRuns mask(mask_v, T(), B, H, Lq, Lk);
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
    std::fill(gk_bh, gk_bh + Lk * dh, T(0));  // blocks add their shares of the keys they see
    std::fill(gv_bh, gv_bh + Lk * dh, T(0));
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t i0 = qb * QB, rows = std::min(QB, Lq - i0);
      const int64_t n = mask.block_end(b, h, i0, rows, Lk);
      const T* go_blk = GO + (bh * Lq + i0) * dh;
      const T* P = PR ? PR + (bh * Lq + i0) * Lk : Pbuf;
      if (!PR) {  // recompute the block's probabilities: exp((x - max) - log-sum)
        block_scores<T>(Pbuf, rows, i0, b, h, q_bh, kp, Lk, n, dh, scale, bias, mask, masked);
        for (int64_t r = 0; r < rows; ++r) {
          T* p = Pbuf + r * Lk;
          const T m = ST[2 * (bh * Lq + i0 + r)], l = ST[2 * (bh * Lq + i0 + r) + 1];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) p[j] = cpu::vexp((p[j] - m) - l);
        }
      }
      // dP = dO vᵀ
      cpu::small_gemm_packed<T>(false, rows, n, dh, T(1), go_blk, dh, vp.p, vp.np, T(0), dS, Lk);
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
        for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - D);
        if (mask.any)  // masked_fill's backward: no gradient there
          mask.for_runs(b, h, i, n, [&](int64_t a, int64_t e) { std::fill(ds + a, ds + e, T(0)); });
        if (GS) {
          T* g = GS + (bh * Lq + i) * Lk;
          std::copy(ds, ds + n, g);
          std::fill(g + n, g + Lk, T(0));
        }
      }
      cpu::small_gemm<T>(true, false, n, dh, rows, T(1), P, Lk, go_blk, dh, T(1), gv_bh, dh);
      cpu::small_gemm_packed<T>(false, rows, dh, n, scale, dS, Lk, kn.p, kn.np, T(0),
                                GQ + (bh * Lq + i0) * dh, dh);
      cpu::small_gemm<T>(true, false, n, dh, rows, scale, dS, Lk, q_bh + i0 * dh, dh, T(1), gk_bh,
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
