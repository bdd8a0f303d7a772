// pelab — a register-blocked GEMM for small products and products with one thin dimension: every
// dimension <= kSmallDim (the batched attention products of short sequences, e.g. 128 products of
// 32 x 32 x 32 per call), probs·v and dS·k at any length (N = head dim, K = the length; see
// small_gemm_fits), and the blocks of the fused attention kernel (cpu_attention.cpp), which call it
// at any size. OpenBLAS spends ~2 us of fixed cost per call on a small product and, on the thin
// ones, packs a long operand to use it for only N = 32 columns. This kernel reads op(B) in place
// when its rows are whole vectors, otherwise packs it once into a zero-padded [K, Np] panel (a
// per-thread buffer kept between calls), and runs an MR x NR micro-kernel of vector accumulators
// (GCC vector extensions, so it compiles to AVX2 / AVX-512 / SSE as -march allows) over row blocks,
// each reused from L1 across the column tiles. k runs in order, so results are deterministic. Two
// widths: 6 x 16 floats of 256-bit vectors, and, in AVX-512 builds, 12 x 32 of 512-bit ones for
// products at least 32 columns wide (1.5-2x the 256-bit kernel on an AVX-512 Xeon, level with
// OpenBLAS's Cooperlake kernels at 256 x 64 x 64 .. 256 x 64 x 256; the fused attention's blocks
// take the same width by the same rule: 512-bit for panels of at least 32 columns).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <type_traits>
#include <utility>
#include <vector>

namespace pelab::cpu {

constexpr int64_t kSmallDim = 64;  // M, N, K all <= this
constexpr int64_t kThinDim = 64;   // or K <= this, or N <= this (any other sizes)

// The micro-kernel's vector width in bytes: 32 (256-bit) everywhere; 64 (512-bit) for products of
// at least one wide tile's columns when the build targets AVX-512 (kSmallWideBytes == 64).
#ifdef __AVX512F__
constexpr int kSmallWideBytes = 64;
#else
constexpr int kSmallWideBytes = 32;
#endif

// acc += a * b lane by lane with one rounding (a fused multiply-add) wherever the build has FMA,
// written out rather than left to GCC's contraction: GCC decides that per loop by its tuning (for
// -march=znver3, avoid_fma256_chains leaves a one-accumulator chain such as narrow_tile's as a
// multiply and an add, while the two-accumulator tile is fused), so the kernels' bits would depend
// on the CPU that built them and the kernels would disagree with each other (seen on an AMD EPYC,
// Zen 3: CpuBackendBlas.SmallGemmNarrowMatchesTwoVectorTileBitForBit failed in its last bits).
// Without FMA (an SSE-only build) it is a multiply and an add everywhere. By reference: a vector
// wider than the build's registers passed by value would change the ABI (-Wpsabi).
template <class V>
inline void fma_into(V& acc, const V& a, const V& b) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>;
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "float or double");
#if defined(__FMA__)
  if constexpr (sizeof(V) == 32) {
    if constexpr (std::is_same<T, float>::value)
      acc = reinterpret_cast<V>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a),
                                                reinterpret_cast<__m256>(b),
                                                reinterpret_cast<__m256>(acc)));
    else
      acc = reinterpret_cast<V>(_mm256_fmadd_pd(reinterpret_cast<__m256d>(a),
                                                reinterpret_cast<__m256d>(b),
                                                reinterpret_cast<__m256d>(acc)));
    return;
  }
  if constexpr (sizeof(V) == 64) {
#if defined(__AVX512F__)
    if constexpr (std::is_same<T, float>::value)
      acc = reinterpret_cast<V>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a),
                                                reinterpret_cast<__m512>(b),
                                                reinterpret_cast<__m512>(acc)));
    else
      acc = reinterpret_cast<V>(_mm512_fmadd_pd(reinterpret_cast<__m512d>(a),
                                                reinterpret_cast<__m512d>(b),
                                                reinterpret_cast<__m512d>(acc)));
#else  // a 512-bit vector in a build without AVX-512 (the tests' wide kernel): two 256-bit halves
    typedef T H __attribute__((vector_size(32)));
    H ah[2], bh[2], ch[2];
    std::memcpy(ah, &a, sizeof(V));
    std::memcpy(bh, &b, sizeof(V));
    std::memcpy(ch, &acc, sizeof(V));
    fma_into(ch[0], ah[0], bh[0]);
    fma_into(ch[1], ah[1], bh[1]);
    std::memcpy(&acc, ch, sizeof(V));
#endif
    return;
  }
#endif
  acc += a * b;
}
// v = a in every lane (a whole initializer list, which GCC compiles to one broadcast; lane-by-lane
// stores became a chain of inserts, 1.5-2x slower kernels)
template <class V, class T, size_t... i>
inline void splat_lanes(V& v, T a, std::index_sequence<i...>) {
  v = V{((void)i, a)...};
}
template <class V, class T>
inline void splat(V& v, T a) {
  splat_lanes(v, a, std::make_index_sequence<sizeof(V) / sizeof(T)>{});
}

template <class T, int BYTES = 32>
struct SmallGemmTraits {
  static constexpr int W = BYTES / sizeof(T);  // lanes per vector
  typedef T V __attribute__((vector_size(BYTES)));
  static constexpr int NR = 2 * W;  // columns per micro-tile (two vectors)
  // rows per micro-tile: 12 (256-bit) or 24 (512-bit: 32 registers) accumulators hide the FMA
  // latency; at 512 bits the 12 rows also halve the loads per FMA (1.1-1.3x on 256 x 64 x 256)
  static constexpr int MR = BYTES == 64 ? 12 : 6;
};

// C[i, j] (row stride ldc) = alpha * sum_k a(i, k) b(k, j) + beta * C[i, j] for rows i0.. i0+rows-1,
// columns j0.. j0+cols-1 (cols <= NR), with b read from the packed tile (row stride np).
template <class T, int ROWS, int BYTES = 32>
inline void small_tile(int64_t K, const T* A, int64_t lda, bool ta, int64_t i0, const T* bp,
                       int64_t np, int64_t j0, int64_t cols, T alpha, T beta, T* C, int64_t ldc) {
  using Tr = SmallGemmTraits<T, BYTES>;
  using V = typename Tr::V;
  constexpr int W = Tr::W;
  V acc[ROWS][2];
  for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = V{};
  for (int64_t k = 0; k < K; ++k) {
    V b0, b1;
    std::memcpy(&b0, bp + k * np + j0, sizeof(V));
    std::memcpy(&b1, bp + k * np + j0 + W, sizeof(V));
    for (int r = 0; r < ROWS; ++r) {
      V a;
      splat(a, ta ? A[k * lda + i0 + r] : A[(i0 + r) * lda + k]);
      fma_into(acc[r][0], a, b0);
      fma_into(acc[r][1], a, b1);
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    T* c = C + (i0 + r) * ldc + j0;
    if (cols == 2 * W) {  // a full tile row: vector stores
      V c0 = alpha * acc[r][0], c1 = alpha * acc[r][1];
      if (beta != T(0)) {  // fused as the accumulation is, so both widths give the same bits
        V o0, o1, bv;
        std::memcpy(&o0, c, sizeof(V));
        std::memcpy(&o1, c + W, sizeof(V));
        splat(bv, beta);
        fma_into(c0, bv, o0);
        fma_into(c1, bv, o1);
      }
      std::memcpy(c, &c0, sizeof(V));
      std::memcpy(c + W, &c1, sizeof(V));
      continue;
    }
    T out[2 * W];
    std::memcpy(out, &acc[r][0], sizeof(V));
    std::memcpy(out + W, &acc[r][1], sizeof(V));
    if (beta == T(0)) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * out[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * out[j] + beta * c[j];
    }
  }
}

// Rows i0.. i0+ROWS-1 of C across every column tile.
template <class T, int ROWS, int BYTES = 32>
inline void small_row_block(int64_t N, int64_t K, const T* A, int64_t lda, bool ta, int64_t i0,
                            const T* bp, int64_t np, T alpha, T beta, T* C, int64_t ldc) {
  constexpr int NR = SmallGemmTraits<T, BYTES>::NR;
  for (int64_t j0 = 0; j0 < N; j0 += NR)
    small_tile<T, ROWS, BYTES>(K, A, lda, ta, i0, bp, np, j0, std::min<int64_t>(NR, N - j0), alpha, beta,
                        C, ldc);
}

// dst[k * ldd + j] = src[j * lds + k] for an S x S block of floats (S = 8: one 256-bit vector per
// row; S = 16: one 512-bit vector), in registers: log2(S) rounds of two-source shuffles, round w
// swapping the off-diagonal w x w blocks of each 2w x 2w block (GCC vector extensions; intrinsics'
// _mm512_undefined operands trip -Wuninitialized in GCC 12). The masks are constants, so each
// shuffle compiles to fixed permutes. The scalar strip copy took ~2x as long for a 32 x 32 head's kᵀ
// (128 heads: 25 -> 12 us). Without AVX-512, GCC splits the 512-bit vectors (correct, not fast:
// pack_b uses S = 16 only in AVX-512 builds; the tests run both sizes on every machine).
template <int S, int w, class V, size_t... j>
inline void transpose_round(V (&r)[S], std::index_sequence<j...>) {
  typedef int I __attribute__((vector_size(sizeof(V))));
  // lane j of the pair (a = r[i], b = r[i + w]): lanes with bit w clear keep a's lane in the first
  // output and take a's lane j + w in the second; lanes with it set take b's lanes j - w and j
  const I lo = {((int(j) & w) ? int(j) - w + S : int(j))...};
  const I hi = {((int(j) & w) ? int(j) + S : int(j) + w)...};
  for (int i = 0; i < S; ++i)
    if ((i & w) == 0) {
      const V a = r[i], b = r[i + w];
      r[i] = __builtin_shuffle(a, b, lo);
      r[i + w] = __builtin_shuffle(a, b, hi);
    }
}
template <int S, int w = 1, class V>
inline void transpose_rounds(V (&r)[S]) {
  if constexpr (w < S) {
    transpose_round<S, w>(r, std::make_index_sequence<S>{});
    transpose_rounds<S, 2 * w>(r);
  }
}
template <int S>
inline void transpose_square(const float* src, int64_t lds, float* dst, int64_t ldd) {
  static_assert(S == 8 || S == 16, "one 256-bit or one 512-bit vector per row");
  typedef float V __attribute__((vector_size(S * sizeof(float))));
  V r[S];
  for (int i = 0; i < S; ++i) std::memcpy(&r[i], src + i * lds, sizeof(V));
  transpose_rounds<S>(r);
  for (int i = 0; i < S; ++i) std::memcpy(dst + i * ldd, &r[i], sizeof(V));
}

// op(B) [K, N] as the micro-kernel reads it: a zero-padded [K, Np] panel (Np = N rounded up to whole
// tiles) written to `panel` (at least small_panel_size(N, K) elements). Returns Np, the row stride.
template <class T, int BYTES = 32>
int64_t small_panel_size(int64_t N, int64_t K) {
  constexpr int NR = SmallGemmTraits<T, BYTES>::NR;
  return K * ((N + NR - 1) / NR * NR);
}
template <class T, int BYTES = 32>
int64_t pack_b(bool tb, int64_t N, int64_t K, const T* B, int64_t ldb, T* panel) {
  constexpr int NR = SmallGemmTraits<T, BYTES>::NR;
  // the transposing copy goes by strips of 256-bit tiles' width whatever the kernel's: at 512-bit
  // strips it took twice as long (32 x 32 floats: 0.38 against 0.20 us on the AVX-512 Xeon)
  constexpr int SW = SmallGemmTraits<T, 32>::NR;
  const int64_t np = (N + NR - 1) / NR * NR;
  if (tb) {  // B stored [N, K]: one SW-column strip at a time, its source rows L1-resident
    for (int64_t j0 = 0; j0 < N; j0 += SW) {
      const int64_t nj = std::min<int64_t>(SW, N - j0);
      int64_t k = 0;
#ifdef __AVX512F__
      if constexpr (std::is_same<T, float>::value)
        if (nj == 16)
          for (; k + 16 <= K; k += 16)
            transpose_square<16>(B + j0 * ldb + k, ldb, panel + k * np + j0, np);
#endif
      for (; k < K; ++k)
        for (int64_t j = 0; j < nj; ++j) panel[k * np + j0 + j] = B[(j0 + j) * ldb + k];
    }
  } else {
    for (int64_t k = 0; k < K; ++k) std::memcpy(panel + k * np, B + k * ldb, N * sizeof(T));
  }
  if (np > N)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = N; j < np; ++j) panel[k * np + j] = T(0);
  return np;
}

// Rows i0.. of C when fewer than MR are left (rem = 1 .. MR - 1).
template <class T, int BYTES, int ROWS>
inline void small_tail_rows(int64_t rem, int64_t N, int64_t K, const T* A, int64_t lda, bool ta,
                            int64_t i0, const T* bp, int64_t np, T alpha, T beta, T* C,
                            int64_t ldc) {
  if constexpr (ROWS > 0) {
    if (rem == ROWS)
      small_row_block<T, ROWS, BYTES>(N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
    else
      small_tail_rows<T, BYTES, ROWS - 1>(rem, N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
  }
}

// C = alpha * op(A) @ B + beta * C with B read from a panel of row stride np (whole NR-column tiles,
// zero beyond N: pack_b's output, or a row-major B whose N is a multiple of NR, read in place).
template <class T, int BYTES = 32>
void small_gemm_packed(bool ta, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                       const T* bp, int64_t np, T beta, T* C, int64_t ldc) {
  constexpr int MR = SmallGemmTraits<T, BYTES>::MR;
  int64_t i0 = 0;
  for (; i0 + MR <= M; i0 += MR)
    small_row_block<T, MR, BYTES>(N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
  if (M > i0)
    small_tail_rows<T, BYTES, MR - 1>(M - i0, N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
}

// C = alpha * op(A) @ op(B) + beta * C (row-major; op = transpose when ta / tb), any sizes >= 1;
// gemm_one sends it the shapes of small_gemm_fits. beta == 0 overwrites C (NaN included), as BLAS
// does.
template <class T, int BYTES>
void small_gemm_width(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                      int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  constexpr int NR = SmallGemmTraits<T, BYTES>::NR;
  if (!tb && N % NR == 0) {  // op(B) rows are already whole vectors: read B in place
    small_gemm_packed<T, BYTES>(ta, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  thread_local std::vector<T> panel;  // grows to the largest panel seen on this thread
  const size_t need = static_cast<size_t>(small_panel_size<T, BYTES>(N, K));
  if (panel.size() < need) panel.resize(need);
  const int64_t np = pack_b<T, BYTES>(tb, N, K, B, ldb, panel.data());
  small_gemm_packed<T, BYTES>(ta, M, N, K, alpha, A, lda, panel.data(), np, beta, C, ldc);
}

// Products at most one 256-bit vector wide (N <= W: CoPE's gates q·kᵀ and their dk at 8 keys): the
// two-vector tile above would pad op(B) to 2W columns and run half its FMAs on the zeros. Here one
// vector per row, NARROW_MR rows per block, op(B) read in place when its rows are whole vectors or
// packed into a [K, W] panel. k runs in order and the stores are small_tile's partial-tile code, so
// the results are the two-vector kernel's bits (tested). 128 heads on the AVX-512 Xeon, 1 thread:
// q·kᵀ (8 x 8 x 16, kᵀ packed) 12.5 -> 10.5 us, qᵀ·dG (16 x 8 x 8, dG in place) 7.9 -> 6.4 us.
constexpr int kNarrowMR = 8;
template <class T, int ROWS>
inline void narrow_tile(int64_t K, const T* A, int64_t lda, bool ta, int64_t i0, const T* bp,
                        int64_t np, int64_t cols, T alpha, T beta, T* C, int64_t ldc) {
  using Tr = SmallGemmTraits<T, 32>;
  using V = typename Tr::V;
  constexpr int W = Tr::W;
  V acc[ROWS];
  for (int r = 0; r < ROWS; ++r) acc[r] = V{};
  for (int64_t k = 0; k < K; ++k) {
    V b;
    std::memcpy(&b, bp + k * np, sizeof(V));
    for (int r = 0; r < ROWS; ++r) {
      V a;
      splat(a, ta ? A[k * lda + i0 + r] : A[(i0 + r) * lda + k]);
      fma_into(acc[r], a, b);
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    T* c = C + (i0 + r) * ldc;
    T out[W];
    std::memcpy(out, &acc[r], sizeof(V));
    if (beta == T(0)) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * out[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * out[j] + beta * c[j];
    }
  }
}
template <class T, int ROWS>
inline void narrow_tail_rows(int64_t rem, int64_t N, int64_t K, const T* A, int64_t lda, bool ta,
                             int64_t i0, const T* bp, int64_t np, T alpha, T beta, T* C,
                             int64_t ldc) {
  if constexpr (ROWS > 0) {
    if (rem == ROWS)
      narrow_tile<T, ROWS>(K, A, lda, ta, i0, bp, np, N, alpha, beta, C, ldc);
    else
      narrow_tail_rows<T, ROWS - 1>(rem, N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
  }
}
template <class T>
void small_gemm_narrow(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                       int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  constexpr int W = SmallGemmTraits<T, 32>::W;
  const T* bp = B;
  int64_t np = ldb;
  thread_local std::vector<T> panel;
  if (tb || N < W) {  // op(B) as a zero-padded [K, W] panel
    if (panel.size() < static_cast<size_t>(K * W)) panel.resize(static_cast<size_t>(K * W));
    T* p = panel.data();
    if (N < W) std::fill(p, p + K * W, T(0));
    if (tb) {  // B stored [N, K]: its rows become the panel's columns
      int64_t k0 = 0;
      if constexpr (std::is_same<T, float>::value)
        if (N == W)
          for (; k0 + 8 <= K; k0 += 8) transpose_square<8>(B + k0, ldb, p + k0 * W, W);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = k0; k < K; ++k) p[k * W + j] = B[j * ldb + k];
    } else {
      for (int64_t k = 0; k < K; ++k) std::memcpy(p + k * W, B + k * ldb, N * sizeof(T));
    }
    bp = panel.data();
    np = W;
  }
  int64_t i0 = 0;
  for (; i0 + kNarrowMR <= M; i0 += kNarrowMR)
    narrow_tile<T, kNarrowMR>(K, A, lda, ta, i0, bp, np, N, alpha, beta, C, ldc);
  if (M > i0)
    narrow_tail_rows<T, kNarrowMR - 1>(M - i0, N, K, A, lda, ta, i0, bp, np, alpha, beta, C, ldc);
}

// The 512-bit kernel (AVX-512 builds) takes products of at least one wide tile's columns, the
// 256-bit one the rest. Both run k in order per element, so the result does not depend on which.
template <class T>
void small_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (kSmallWideBytes == 64 && N >= SmallGemmTraits<T, kSmallWideBytes>::NR)
    small_gemm_width<T, kSmallWideBytes>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else if (N <= SmallGemmTraits<T, 32>::W)
    small_gemm_narrow<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    small_gemm_width<T, 32>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Where this kernel beat single-threaded OpenBLAS on the benchmark machine (AVX2, 2 cores):
// every dim <= 64 (1.4-1.7x at 32³); N <= 64 with op(A) read by rows (probs·v and dS·k at L = 256-1024:
// 1.2-1.4x; the vocabulary-32 logits: 1.3x; Shaw's 33-column products: 1.0-1.6x); K <= 64 with
// N <= 128 (dX = dY·W of the logits: 1.15x). A transposed A with a long K (probsᵀ·dO: 0.9x) and
// K <= 64 with a wide N (q·kᵀ at L >= 512: 0.9-1.0x, bound by writing C) stay with OpenBLAS.
// With the 512-bit kernel (Intel Xeon, AVX-512, against OpenBLAS's Cooperlake kernels, 1 thread) it
// also takes the weight gradients of small models, a transposed A with M <= 256, N <= 64,
// K <= 256 (dYᵀ·X over 256 tokens: 0.79x at d 64, 0.92x for d_ff 256); at K = 1024 or N = 256 it
// was level or slower (0.97-1.8x) and those stay with OpenBLAS. It also takes the weight gradients
// of outputs and inputs <= 128 wide over <= 1024 rows (the reference config's d 128 projections:
// 128 x 128 x 1024 in 0.87x OpenBLAS's time, its 2-thread halves 64 x 128 x 1024 0.86x, 32 x 128
// x 1024 0.67x; B, K x N, stays within L2); at M or N = 256 (1.07-1.12x), 512 (1.6-1.7x) or
// K = 2048 (1.3x) OpenBLAS keeps them.
inline bool small_gemm_fits(bool ta, int64_t M, int64_t N, int64_t K) {
  if (M < 1 || N < 1 || K < 1) return false;
  return (M <= kSmallDim && N <= kSmallDim && K <= kSmallDim) || (N <= kThinDim && !ta) ||
         (K <= kThinDim && N <= 2 * kThinDim) ||
         (kSmallWideBytes == 64 && ta && N <= kThinDim && M <= 4 * kThinDim &&
          K <= 4 * kThinDim) ||
         (kSmallWideBytes == 64 && ta && N <= 2 * kThinDim && M <= 2 * kThinDim &&
          K <= 16 * kThinDim);
}

}  // namespace pelab::cpu
