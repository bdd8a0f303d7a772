// pelab — a register-blocked GEMM for small products (every dimension <= kSmallDim), the batched
// attention products of short sequences (e.g. 128 products of 32 x 32 x 32 per call). OpenBLAS
// spends ~2 us of fixed cost per call on such a product (argument checks, buffer pool, packing
// for large-matrix blocking); this kernel reads op(B) in place when its rows are whole vectors,
// otherwise packs it once into a zero-padded [K, Np] tile on the stack, and runs an MR x NR
// micro-kernel of vector accumulators (GCC vector extensions, so it compiles to AVX2 / AVX-512 /
// SSE as -march allows). k runs in order, so results are deterministic.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace pelab::cpu {

constexpr int64_t kSmallDim = 64;  // M, N, K all <= this

template <class T>
struct SmallGemmTraits {
  static constexpr int W = 32 / sizeof(T);  // lanes per 256-bit vector
  typedef T V __attribute__((vector_size(32)));
  static constexpr int NR = 2 * W;  // columns per micro-tile (two vectors)
  static constexpr int MR = 6;      // rows per micro-tile (12 accumulators hide the FMA latency)
};

// C[i, j] (row stride ldc) = alpha * sum_k a(i, k) b(k, j) + beta * C[i, j] for rows i0.. i0+rows-1,
// columns j0.. j0+cols-1 (cols <= NR), with b read from the packed tile (row stride np).
template <class T, int ROWS>
inline void small_tile(int64_t K, const T* A, int64_t lda, bool ta, int64_t i0, const T* bp,
                       int64_t np, int64_t j0, int64_t cols, T alpha, T beta, T* C, int64_t ldc) {
  using Tr = SmallGemmTraits<T>;
  using V = typename Tr::V;
  constexpr int W = Tr::W;
  V acc[ROWS][2];
  for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = V{};
  for (int64_t k = 0; k < K; ++k) {
    V b0, b1;
    std::memcpy(&b0, bp + k * np + j0, sizeof(V));
    std::memcpy(&b1, bp + k * np + j0 + W, sizeof(V));
    for (int r = 0; r < ROWS; ++r) {
      const T a = ta ? A[k * lda + i0 + r] : A[(i0 + r) * lda + k];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    T* c = C + (i0 + r) * ldc + j0;
    if (cols == 2 * W) {  // a full tile row: vector stores
      V c0 = alpha * acc[r][0], c1 = alpha * acc[r][1];
      if (beta != T(0)) {
        V o0, o1;
        std::memcpy(&o0, c, sizeof(V));
        std::memcpy(&o1, c + W, sizeof(V));
        c0 += beta * o0;
        c1 += beta * o1;
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

// C = alpha * op(A) @ op(B) + beta * C for M, N, K in [1, kSmallDim] (row-major; op = transpose
// when ta / tb). beta == 0 overwrites C (NaN included), as BLAS does.
template <class T>
void small_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  using Tr = SmallGemmTraits<T>;
  constexpr int NR = Tr::NR, MR = Tr::MR;
  int64_t np = (N + NR - 1) / NR * NR;
  alignas(64) T tile[kSmallDim * ((kSmallDim + NR - 1) / NR * NR)];
  const T* bp = tile;
  if (!tb && N % NR == 0) {  // op(B) rows are already whole vectors: read B in place
    bp = B;
    np = ldb;
  } else if (tb) {  // B stored [N, K]: read its rows contiguously, write columns of the tile
    for (int64_t j = 0; j < N; ++j) {
      const T* src = B + j * ldb;
      for (int64_t k = 0; k < K; ++k) tile[k * np + j] = src[k];
    }
  } else {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) tile[k * np + j] = B[k * ldb + j];
  }
  if (bp == tile && np > N)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = N; j < np; ++j) tile[k * np + j] = T(0);
  for (int64_t j0 = 0; j0 < N; j0 += NR) {
    const int64_t cols = std::min<int64_t>(NR, N - j0);
    int64_t i0 = 0;
    for (; i0 + MR <= M; i0 += MR)
      small_tile<T, MR>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc);
    switch (M - i0) {
      case 5: small_tile<T, 5>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc); break;
      case 4: small_tile<T, 4>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc); break;
      case 3: small_tile<T, 3>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc); break;
      case 2: small_tile<T, 2>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc); break;
      case 1: small_tile<T, 1>(K, A, lda, ta, i0, bp, np, j0, cols, alpha, beta, C, ldc); break;
      default: break;
    }
  }
}

inline bool small_gemm_fits(int64_t M, int64_t N, int64_t K) {
  return M >= 1 && N >= 1 && K >= 1 && M <= kSmallDim && N <= kSmallDim && K <= kSmallDim;
}

}  // namespace pelab::cpu
