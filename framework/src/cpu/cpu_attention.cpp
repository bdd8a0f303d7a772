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

#include "backend_checks.h"
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
// query block; a row-major B of whole tiles is read in place. Panels at least one 512-bit tile wide
// (AVX-512 builds) are laid out for, and multiplied by, the 12 x 32 kernel, the others for the
// 256-bit one: the same choice as cpu::small_gemm, and the same result (k in order per entry). At
// L = 32, dh = 32 the 512-bit kernel ran 128 products of 32³ in 0.60x the time, packing included.
// Reset `key` at the start of a call.
template <class T>
struct HeadPanel {
  static constexpr int kWideNR = cpu::SmallGemmTraits<T, cpu::kSmallWideBytes>::NR;
  std::vector<T> buf;
  const T* p = nullptr;
  int64_t np = 0, key = -1;
  bool wide = false;
  void get(int64_t key_, bool tb, int64_t N, int64_t K, const T* B, int64_t ldb) {
    if (key_ == key) return;
    key = key_;
    wide = cpu::kSmallWideBytes == 64 && N >= kWideNR;
    const int NR = wide ? kWideNR : cpu::SmallGemmTraits<T>::NR;
    if (!tb && N % NR == 0) {
      p = B;
      np = ldb;
      return;
    }
    const size_t need = static_cast<size_t>(wide ? cpu::small_panel_size<T, cpu::kSmallWideBytes>(N, K)
                                                  : cpu::small_panel_size<T>(N, K));
    if (buf.size() < need) buf.resize(need);
    np = wide ? cpu::pack_b<T, cpu::kSmallWideBytes>(tb, N, K, B, ldb, buf.data())
              : cpu::pack_b<T>(tb, N, K, B, ldb, buf.data());
    p = buf.data();
  }
  // C = alpha * A @ (the panel's first N columns) + beta * C, A [M, K] read by rows.
  void gemm(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, T beta, T* C,
            int64_t ldc) const {
    if (wide)
      cpu::small_gemm_packed<T, cpu::kSmallWideBytes>(false, M, N, K, alpha, A, lda, p, np, beta, C,
                                                       ldc);
    else
      cpu::small_gemm_packed<T>(false, M, N, K, alpha, A, lda, p, np, beta, C, ldc);
  }
};

// Runs of equal values along each of `rows` rows of n entries, built in two parallel passes (count,
// then fill): row r's runs are run[first[r] .. first[r + 1]), in order. row_of(r) gives an accessor
// at(j) -> int64 value; runs whose value fails keep(value) are left out.
struct RowRuns {
  struct Run {
    int64_t start, end, value;
  };
  std::vector<int64_t> first;
  std::vector<Run> run;

  template <class RowOf, class Keep>
  void build(int64_t rows, int64_t n, RowOf row_of, Keep keep) {
    std::vector<int64_t> count(static_cast<size_t>(rows));
    // pass 1, branch-free: kept runs start where values change
    cpu::parallel_for(rows, rows * n > kParallelGrain, [&](int64_t r) {
      const auto at = row_of(r);
      int64_t c = 0, prev = n > 0 ? at(0) : 0;
      if (n > 0) c += keep(prev);
      for (int64_t j = 1; j < n; ++j) {
        const int64_t v = at(j);
        c += v != prev && keep(v);
        prev = v;
      }
      count[r] = c;
    });
    first.assign(static_cast<size_t>(rows + 1), 0);
    for (int64_t r = 0; r < rows; ++r) first[r + 1] = first[r] + count[r];
    run.resize(static_cast<size_t>(first[rows]));
    cpu::parallel_for(rows, rows * n > kParallelGrain, [&](int64_t r) {  // pass 2: the runs
      const auto at = row_of(r);
      int64_t m = first[r];
      for (int64_t j = 0; j < n;) {
        const int64_t a = j, v = at(j);
        while (++j < n && at(j) == v) {
        }
        if (keep(v)) run[m++] = {a, j, v};
      }
    });
  }
  int64_t count(int64_t r) const { return first[r + 1] - first[r]; }
  // f(start, end, value) for row r's runs clipped to [0, end).
  template <class F>
  void for_runs(int64_t r, int64_t end, F f) const {
    for (int64_t m = first[r]; m < first[r + 1] && run[m].start < end; ++m)
      f(run[m].start, std::min(run[m].end, end), run[m].value);
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
  int64_t rb = 0, rh = 0, ri = 0;  // distinct row of (b, h, i) = b·rb + h·rh + i·ri
  RowRuns runs;                    // the blocked runs of each distinct row
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
    runs.build(
        rows, Lk,
        [&](int64_t r) {
          const T* x = base + r / (nh * ni) * m.strides[0] + r / ni % nh * m.strides[1] +
                       r % ni * m.strides[2];
          return [x, s3](int64_t j) { return static_cast<int64_t>(x[j * s3] != T(0)); };
        },
        [](int64_t blocked) { return blocked != 0; });
    live.resize(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const RowRuns::Run* last = runs.count(r) ? &runs.run[runs.first[r + 1] - 1] : nullptr;
      live[r] = last && last->end == Lk && last->start > 0 ? last->start : Lk;
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
    runs.for_runs(row(b, h, i), end, [&](int64_t a, int64_t e, int64_t) { f(a, e); });
  }
};

// The relative index as segments per row: runs of equal entries (a clipped relative distance's
// two ends, far from the diagonal) and unit ramps, r_ij = base + (j − start) (Shaw's unclipped
// distances, near it), so table lookups become broadcast or slice adds and binning becomes vector
// sums or slice adds (a scalar scatter into R bins would wait on its own stores: consecutive keys
// mostly land in the same bin, or, along a ramp, in bins the compiler cannot tell apart). A
// clipped distance is at most three segments per row: the whole row is one ramp when 2k + 1 covers
// every distance (k >= L - 1, as at the tiny config: Lk = 8, k = 16).
struct IndexRuns {
  struct Seg {
    int64_t start, end, base, step;  // step 0: every entry is base; 1: entry j is base + j - start
  };
  std::vector<int64_t> first;  // row i's segments are seg[first[i] .. first[i + 1])
  std::vector<Seg> seg;
  const int64_t* idx = nullptr;
  int64_t Lk = 0;
  IndexRuns() = default;
  IndexRuns(const int64_t* idx_, int64_t Lq, int64_t Lk_) : idx(idx_), Lk(Lk_) {
    std::vector<int64_t> count(static_cast<size_t>(Lq));
    cpu::parallel_for(Lq, Lq * Lk > kParallelGrain, [&](int64_t i) {  // pass 1: count
      int64_t c = 0;
      segments(row(i), [&](const Seg&) { ++c; });
      count[i] = c;
    });
    first.assign(static_cast<size_t>(Lq + 1), 0);
    for (int64_t i = 0; i < Lq; ++i) first[i + 1] = first[i] + count[i];
    seg.resize(static_cast<size_t>(first[Lq]));
    cpu::parallel_for(Lq, Lq * Lk > kParallelGrain, [&](int64_t i) {  // pass 2: the segments
      int64_t m = first[i];
      segments(row(i), [&](const Seg& g) { seg[m++] = g; });
    });
  }
  // Row x's segments in order, greedily: a segment's first two entries set its step (equal: 0,
  // one apart: 1, otherwise a single entry) and it extends while the step holds.
  template <class F>
  void segments(const int64_t* x, F emit) const {
    for (int64_t j = 0; j < Lk;) {
      const int64_t a = j, v = x[j];
      const int64_t step = j + 1 < Lk && x[j + 1] == v + 1 ? 1 : 0;
      ++j;
      if (step == 1 || (j < Lk && x[j] == v))
        while (j < Lk && x[j] == x[j - 1] + step) ++j;
      emit(Seg{a, j, v, step});
    }
  }
  int64_t count(int64_t i) const { return first[i + 1] - first[i]; }
  // Whether row i is mostly short segments (then an element loop over the index is cheaper).
  bool short_runs(int64_t i) const { return 4 * count(i) > Lk; }
  const int64_t* row(int64_t i) const { return idx + i * Lk; }
  // f(start, end, base, step) for the segments of row i clipped to [0, n).
  template <class F>
  void for_runs(int64_t i, int64_t n, F f) const {
    for (int64_t m = first[i]; m < first[i + 1] && seg[m].start < n; ++m)
      f(seg[m].start, std::min(seg[m].end, n), seg[m].base, seg[m].step);
  }
};

// The relative tables of one call: r = index [Lq, Lk] (none: idx == nullptr), each table's rows for
// head h at table(h) (keys / values may be absent).
template <class T>
struct RelTables {
  const int64_t* idx = nullptr;
  IndexRuns runs;
  const T *keys = nullptr, *values = nullptr;
  int64_t R = 0, keys_heads = 0, values_heads = 0, dh = 0;
  explicit RelTables(const AttentionArgs& a) {
    idx = static_cast<const int64_t*>(a.rel_index.data);
    keys = static_cast<const T*>(a.rel_keys.data);
    values = static_cast<const T*>(a.rel_values.data);
    const View& any = keys ? a.rel_keys : a.rel_values;
    if (idx) {
      R = any.shape[1], dh = any.shape[2];
      runs = IndexRuns(idx, a.rel_index.shape[0], a.rel_index.shape[1]);
    }
    if (keys) keys_heads = a.rel_keys.shape[0];
    if (values) values_heads = a.rel_values.shape[0];
  }
  const T* keys_of(int64_t h) const { return keys + (keys_heads == 1 ? 0 : h) * R * dh; }
  const T* values_of(int64_t h) const { return values + (values_heads == 1 ? 0 : h) * R * dh; }
};

// x[j] += t[r_ij] for j < n, run by run (row i of the index).
template <class T>
inline void add_lookup(T* x, const T* t, const IndexRuns& runs, int64_t i, int64_t n) {
  if (runs.short_runs(i)) {
    const int64_t* ix = runs.row(i);
    for (int64_t j = 0; j < n; ++j) x[j] += t[ix[j]];
    return;
  }
  runs.for_runs(i, n, [&](int64_t a, int64_t e, int64_t base, int64_t step) {
    if (step == 1) {  // a ramp: x[a..e) += t[base .. base + e - a)
      const T* tb = t + base - a;
#pragma omp simd
      for (int64_t j = a; j < e; ++j) x[j] += tb[j];
      return;
    }
    const T add = t[base];
#pragma omp simd
    for (int64_t j = a; j < e; ++j) x[j] += add;
  });
}

// S[:, 0..n) = scale · q_blk (kᵀ + relative keys) for rows i0.. i0+rows-1 of head (b, h) (kp: the
// head's kᵀ panel; rkp: its relative keys' panel; qr: a [rows, R] buffer), with the bias added and the blocked entries set to
// `masked`. n = the block's live keys.
template <class T>
void block_scores(T* S, int64_t rows, int64_t i0, int64_t b, int64_t h, const T* q, int64_t ldq,
                  const HeadPanel<T>& kp, int64_t Lk, int64_t n, int64_t dh, T scale,
                  const Rows& bias, const MaskRuns& mask, T masked, const RelTables<T>& rel,
                  const HeadPanel<T>& rkp, T* qr) {
  kp.gemm(rows, n, dh, scale, q + i0 * ldq, ldq, T(0), S, Lk);
  if (rel.keys) {  // scale · q_i·keys[r_ij]: [rows, R] products, then one lookup per score
    const int64_t R = rel.R;
    rkp.gemm(rows, R, dh, scale, q + i0 * ldq, ldq, T(0), qr, R);
    for (int64_t r = 0; r < rows; ++r)
      add_lookup<T>(S + r * Lk, qr + r * R, rel.runs, i0 + r, n);
  }
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

// A block's bin weights: w[r, b] = Σ_{j < n} P[r, j] · [r_{i0 + r, j} = b], run by run.
template <class T>
void bin_block(T* w, const T* P, int64_t rows, int64_t n, int64_t Lk, int64_t R,
               const IndexRuns& runs, int64_t i0) {
  std::fill(w, w + rows * R, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = P + r * Lk;
    T* wr = w + r * R;
    if (runs.short_runs(i0 + r)) {
      const int64_t* ix = runs.row(i0 + r);
      for (int64_t j = 0; j < n; ++j) wr[ix[j]] += p[j];
      continue;
    }
    runs.for_runs(i0 + r, n, [&](int64_t a, int64_t e, int64_t base, int64_t step) {
      if (step == 1) {  // a ramp: one entry per bin, bins base .. base + e - a - 1
        T* wb = wr + base - a;
#pragma omp simd
        for (int64_t j = a; j < e; ++j) wb[j] += p[j];
        return;
      }
      T sum = T(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t j = a; j < e; ++j) sum += p[j];
      wr[base] += sum;
    });
  }
}

// A [B, H, L, dh] operand with unit stride along dh: head (b, h) starts at at(b, h), its rows are
// ld apart (dh when head-major, H·dh for the token-major layout of the heads' projections).
template <class T>
struct Heads {
  T* base = nullptr;
  int64_t sb = 0, sh = 0, ld = 0;
  explicit Heads(const View& v)
      : base(static_cast<T*>(v.data)), sb(v.strides[0]), sh(v.strides[1]), ld(v.strides[2]) {}
  T* at(int64_t bh, int64_t H) const { return base + bh / H * sb + bh % H * sh; }
};

// Row reductions of the softmax and its backward. `omp simd` reductions keep their lanes in a stack
// array that a short row (n = 8 at L = 8) reads back right after the scalar tail wrote it, a
// store-forwarding stall per row that made these loops the fused attention's hottest lines at small
// lengths; rows shorter than one 512-bit vector take a plain loop instead.
constexpr int64_t kShortRow = 16;

template <class T>
inline T row_max(const T* x, int64_t n) {
  T m = x[0];
  if (n < kShortRow) {
    for (int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
    return m;
  }
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Σ_j x_j y_j (y == nullptr: Σ_j x_j), accumulated in double.
template <class T>
inline double row_sum(const T* x, const T* y, int64_t n) {
  double s = 0;
  if (n < kShortRow) {
    for (int64_t j = 0; j < n; ++j)
      s += y ? static_cast<double>(x[j]) * static_cast<double>(y[j]) : static_cast<double>(x[j]);
    return s;
  }
  if (!y) {
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]);
    return s;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]) * static_cast<double>(y[j]);
  return s;
}

// The sizes, constants and operand pointers both passes start from.
template <class T>
struct Operands {
  int64_t B, H, BH, Lq, Lk, dh;
  T scale, masked;
  Heads<const T> Q, K, V;
  explicit Operands(const AttentionArgs& a)
      : B(a.B), H(a.H), BH(a.B * a.H), Lq(a.q.shape[2]), Lk(a.k.shape[2]), dh(a.q.shape[3]),
        scale(static_cast<T>(a.scale)), masked(static_cast<T>(a.masked)), Q(a.q), K(a.k), V(a.v) {}
};

template <class T>
void attention_fwd(const AttentionArgs& a) {
  const Operands<T> o(a);
  const int64_t B = o.B, H = o.H, BH = o.BH, Lq = o.Lq, Lk = o.Lk, dh = o.dh;
  const T scale = o.scale, masked = o.masked;
  const Heads<const T>&Q = o.Q, &K = o.K, &Vp = o.V;
  const Heads<T> O(a.out);
  T* ST = static_cast<T*>(a.stats.data);
  T* PR = static_cast<T*>(a.probs.data);
  const RelTables<T> rel(a);
  const int64_t R = rel.R;
  const Rows bias(a.bias);
  const MaskRuns mask(a.mask, T(), B, H, Lq, Lk);
  const int64_t QB = block_rows<T>(Lk), nqb = (Lq + QB - 1) / QB, tasks = BH * nqb;
  thread_local HeadPanel<T> kp, vp, rkp;  // a thread's tasks run whole heads' blocks in a row
  auto task = [&](int64_t t) {
    const int64_t bh = t / nqb, i0 = (t % nqb) * QB, rows = std::min(QB, Lq - i0);
    const int64_t b = bh / H, h = bh % H, n = mask.block_end(b, h, i0, rows, Lk);
    kp.get(bh, true, Lk, dh, K.at(bh, H), K.ld);
    vp.get(bh, false, dh, Lk, Vp.at(bh, H), Vp.ld);
    if (rel.keys) rkp.get(rel.keys_heads == 1 ? 0 : h, true, R, dh, rel.keys_of(h), dh);
    thread_local std::vector<T> buf, wbuf;  // scores; [rows, R] relative-table weights
    T* S = PR ? PR + (bh * Lq + i0) * Lk : nullptr;  // kept probabilities: work in place there
    if (!S) {
      if (buf.size() < static_cast<size_t>(QB * Lk)) buf.resize(static_cast<size_t>(QB * Lk));
      S = buf.data();
    }
    if (wbuf.size() < static_cast<size_t>(QB * R)) wbuf.resize(static_cast<size_t>(QB * R));
    block_scores<T>(S, rows, i0, b, h, Q.at(bh, H), Q.ld, kp, Lk, n, dh, scale, bias, mask,
                    masked, rel, rkp, wbuf.data());
    for (int64_t r = 0; r < rows; ++r) {  // softmax in place; max and log-sum for the backward
      T* x = S + r * Lk;
      const T m = row_max(x, n);
      // exp and the double sum in two loops: together (float exp, double accumulator) GCC left
      // the loop scalar, which made the exp pass most of the forward at short lengths
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) x[j] = cpu::vexp(x[j] - m);
      const double s = row_sum<T>(x, nullptr, n);
      const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) x[j] *= inv;
      if (PR) std::fill(x + n, x + Lk, T(0));  // the skipped keys' probability is exactly 0
      T* st = ST + 2 * (bh * Lq + i0 + r);
      st[0] = m;
      st[1] = static_cast<T>(std::log(s));
    }
    T* o_blk = O.at(bh, H) + i0 * O.ld;
    vp.gemm(rows, dh, n, T(1), S, Lk, T(0), o_blk, O.ld);
    if (rel.values) {  // + Σ_j p_ij values[r_ij] = w · values, w the block's bin weights
      bin_block<T>(wbuf.data(), S, rows, n, Lk, R, rel.runs, i0);
      cpu::small_gemm<T>(false, false, rows, dh, R, T(1), wbuf.data(), R, rel.values_of(h), dh,
                         T(1), o_blk, O.ld);
    }
  };
  if (tasks > 1 && cpu::use_threads(BH * Lq * Lk * dh > kParallelGrain)) {
#pragma omp parallel
    {
      kp.key = vp.key = rkp.key = -1;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; ++t) task(t);
    }
  } else {
    kp.key = vp.key = rkp.key = -1;
    for (int64_t t = 0; t < tasks; ++t) task(t);
  }
}

template <class T>
void attention_bwd(const AttentionArgs& a, const View& go, const AttentionGrads& g) {
  const Operands<T> o(a);
  const int64_t B = o.B, H = o.H, BH = o.BH, Lq = o.Lq, Lk = o.Lk, dh = o.dh;
  const T scale = o.scale, masked = o.masked;
  const Heads<const T>&Q = o.Q, &K = o.K, &Vp = o.V;
  const Heads<const T> GO(go);
  const T* ST = static_cast<const T*>(a.stats.data);
  const T* PR = static_cast<const T*>(a.probs.data);
  const RelTables<T> rel(a);
  const int64_t R = rel.R;
  const Heads<T> GQ(g.q), GK(g.k), GV(g.v);
  T* GS = static_cast<T*>(g.scores.data);
  T* GRK = static_cast<T*>(g.rel_keys.data);
  T* GRV = static_cast<T*>(g.rel_values.data);
  const Rows bias(a.bias);
  const MaskRuns mask(a.mask, T(), B, H, Lq, Lk);
  const int64_t QB = block_rows<T>(Lk), nqb = (Lq + QB - 1) / QB;
  // A relative table shared by the heads has its transpose packed once per call (read by every
  // thread); a per-head table's is packed per head below.
  HeadPanel<T> rkp_shared, rvp_shared;
  const bool rk_shared = !PR && rel.keys && rel.keys_heads == 1;
  const bool rv_shared = rel.values && rel.values_heads == 1;
  if (rk_shared) rkp_shared.get(0, true, R, dh, rel.keys_of(0), dh);
  if (rv_shared) rvp_shared.get(0, true, R, dh, rel.values_of(0), dh);
  // One task per head: its k and v gradients collect every query block's share in order.
  cpu::parallel_for(BH, BH * Lq * Lk * dh > kParallelGrain, [&](int64_t bh) {
    const int64_t b = bh / H, h = bh % H;
    // kᵀ (recomputing), vᵀ (for dO vᵀ), k (for dS k); the relative tables' transposes
    thread_local HeadPanel<T> kp, vp, kn, rkp_head, rvp_head;
    kp.key = vp.key = kn.key = rkp_head.key = rvp_head.key = -1;
    if (!PR) kp.get(bh, true, Lk, dh, K.at(bh, H), K.ld);
    if (!PR && rel.keys && !rk_shared) rkp_head.get(h, true, R, dh, rel.keys_of(h), dh);
    if (rel.values && !rv_shared) rvp_head.get(h, true, R, dh, rel.values_of(h), dh);
    const HeadPanel<T>& rkp = rk_shared ? rkp_shared : rkp_head;
    const HeadPanel<T>& rvp = rv_shared ? rvp_shared : rvp_head;
    vp.get(bh, true, Lk, dh, Vp.at(bh, H), Vp.ld);
    kn.get(bh, false, dh, Lk, K.at(bh, H), K.ld);
    thread_local std::vector<T> buf, wbuf;
    if (buf.size() < static_cast<size_t>(2 * QB * Lk)) buf.resize(static_cast<size_t>(2 * QB * Lk));
    if (wbuf.size() < static_cast<size_t>(2 * QB * R)) wbuf.resize(static_cast<size_t>(2 * QB * R));
    T* Pbuf = buf.data();
    T* dS = Pbuf + QB * Lk;
    T* w = wbuf.data();   // [rows, R]: bin weights, or q·keysᵀ when recomputing
    T* wt = w + QB * R;   // [rows, R]: dO · valuesᵀ
    const T* q_bh = Q.at(bh, H);
    const int64_t ldq = Q.ld, ldgo = GO.ld, ldgq = GQ.ld, ldgk = GK.ld, ldgv = GV.ld;
    T* gk_bh = GK.at(bh, H);
    T* gv_bh = GV.at(bh, H);
    // Blocks add their shares of the keys they see; a key's first share is written (beta 0)
    // instead of added to a zero fill: keys [0, written) hold a share, the rest are zeroed at the
    // end. (Zeroing each head's rows first cost 0.5 % of the reference step in memset calls.)
    int64_t written = 0;
    // C[0, n) of a key gradient (+)= alpha · A_blkᵀ B_blk, rows [0, written) added, the rest written
    auto add_keys = [&](int64_t n, int64_t rows, T alpha, const T* A, int64_t lda, const T* Bm,
                        int64_t ldb, T* C, int64_t ldc) {
      const int64_t old = std::min(written, n);
      if (old > 0) cpu::small_gemm<T>(true, false, old, dh, rows, alpha, A, lda, Bm, ldb, T(1), C, ldc);
      if (n > old)
        cpu::small_gemm<T>(true, false, n - old, dh, rows, alpha, A + old, lda, Bm, ldb, T(0),
                           C + old * ldc, ldc);
    };
    T* grk_bh = GRK ? GRK + bh * R * dh : nullptr;
    T* grv_bh = GRV ? GRV + bh * R * dh : nullptr;
    if (grk_bh) std::fill(grk_bh, grk_bh + R * dh, T(0));
    if (grv_bh) std::fill(grv_bh, grv_bh + R * dh, T(0));
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t i0 = qb * QB, rows = std::min(QB, Lq - i0);
      const int64_t n = mask.block_end(b, h, i0, rows, Lk);
      const T* go_blk = GO.at(bh, H) + i0 * ldgo;
      const T* P = PR ? PR + (bh * Lq + i0) * Lk : Pbuf;
      if (!PR) {  // recompute the block's probabilities: exp((x - max) - log-sum)
        block_scores<T>(Pbuf, rows, i0, b, h, q_bh, ldq, kp, Lk, n, dh, scale, bias, mask, masked,
                        rel, rkp, w);
        for (int64_t r = 0; r < rows; ++r) {
          T* p = Pbuf + r * Lk;
          const T m = ST[2 * (bh * Lq + i0 + r)], l = ST[2 * (bh * Lq + i0 + r) + 1];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) p[j] = cpu::vexp((p[j] - m) - l);
        }
      }
      // dP = dO (v + values[r])ᵀ
      vp.gemm(rows, n, dh, T(1), go_blk, ldgo, T(0), dS, Lk);
      if (rel.values) {
        rvp.gemm(rows, R, dh, T(1), go_blk, ldgo, T(0), wt, R);
        for (int64_t r = 0; r < rows; ++r)
          add_lookup<T>(dS + r * Lk, wt + r * R, rel.runs, i0 + r, n);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T* p = P + r * Lk;
        T* ds = dS + r * Lk;
        // D_i = Σ_j P_ij dP_ij (= dO_i·O_i, but summed like the softmax backward's, so that each
        // row of dS sums to zero up to rounding: the gradient of a per-row shift, e.g. the key
        // bias's, stays at noise level)
        const T D = static_cast<T>(row_sum(p, static_cast<const T*>(ds), n));
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - D);
        if (mask.any)  // masked_fill's backward: no gradient there
          mask.for_runs(b, h, i, n, [&](int64_t s0, int64_t e) { std::fill(ds + s0, ds + e, T(0)); });
        if (GS) {
          T* gsr = GS + (bh * Lq + i) * Lk;
          std::copy(ds, ds + n, gsr);
          std::fill(gsr + n, gsr + Lk, T(0));
        }
      }
      add_keys(n, rows, T(1), P, Lk, go_blk, ldgo, gv_bh, ldgv);
      if (grv_bh) {  // d values[b] += Σ_i w[i, b] dO_i, w the bin weights of P
        bin_block<T>(w, P, rows, n, Lk, R, rel.runs, i0);
        cpu::small_gemm<T>(true, false, R, dh, rows, T(1), w, R, go_blk, ldgo, T(1), grv_bh, dh);
      }
      T* gq_blk = GQ.at(bh, H) + i0 * ldgq;
      kn.gemm(rows, dh, n, scale, dS, Lk, T(0), gq_blk, ldgq);
      add_keys(n, rows, scale, dS, Lk, q_bh + i0 * ldq, ldq, gk_bh, ldgk);
      written = std::max(written, n);
      if (rel.keys) {  // u = the bins of dS: dq += scale · u keys, d keys += scale · uᵀ q
        bin_block<T>(w, dS, rows, n, Lk, R, rel.runs, i0);
        cpu::small_gemm<T>(false, false, rows, dh, R, scale, w, R, rel.keys_of(h), dh, T(1), gq_blk,
                           ldgq);
        if (grk_bh)
          cpu::small_gemm<T>(true, false, R, dh, rows, scale, w, R, q_bh + i0 * ldq, ldq, T(1),
                             grk_bh, dh);
      }
    }
    for (int64_t j = written; j < Lk; ++j) {  // keys no query sees (a causal block's future)
      std::fill(gk_bh + j * ldgk, gk_bh + j * ldgk + dh, T(0));
      std::fill(gv_bh + j * ldgv, gv_bh + j * ldgv + dh, T(0));
    }
  });
}

}  // namespace

int64_t cpu::attention_segmented_rows(const int64_t* idx, int64_t Lq, int64_t Lk) {
  const IndexRuns runs(idx, Lq, Lk);
  int64_t n = 0;
  for (int64_t i = 0; i < Lq; ++i) n += !runs.short_runs(i);
  return n;
}

void CpuBackend::attention(const AttentionArgs& a) {
  const FloatOp op = check_attention(a);
  if (a.out.numel() == 0) return;
  PELAB_CHECK(a.k.shape[2] > 0, "attention: no keys for ", a.q.shape[2], " queries");
  if (a.rel_index.data)  // the kernels index the tables with it unchecked
    cpu::check_indices(static_cast<const int64_t*>(a.rel_index.data), a.rel_index.numel(),
                       (a.rel_keys.data ? a.rel_keys : a.rel_values).shape[1],
                       "attention (relative index)");
  op.dispatch([&](auto tag) { attention_fwd<decltype(tag)>(a); });
}

void CpuBackend::attention_backward(const AttentionArgs& a, const View& grad_out,
                                    const AttentionGrads& g) {
  const FloatOp op = check_attention(a, &grad_out, &g);
  if (a.q.numel() == 0 && a.k.numel() == 0) return;
  op.dispatch([&](auto tag) { attention_bwd<decltype(tag)>(a, grad_out, g); });
}

}  // namespace pelab
