// pelab — CPU GEMM through OpenBLAS (row-major cblas). A large product is cut into one block of rows
// (or columns) per thread, each a single-threaded BLAS call inside one OpenMP region (the OpenMP
// build of OpenBLAS runs single-threaded inside a parallel region); the products of a batch run one
// call per batch entry inside an OpenMP loop; the independent products of a gemm_group (a
// backward's dX and dW) may run one per thread, each a single call, in one region. Products with
// every dimension <= 64 skip BLAS for the register-blocked kernel of cpu_small_gemm.h (1.4-1.7x
// faster on 32 x 32 x 32).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend_checks.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_small_gemm.h"
#include "pelab/parallel.h"

namespace pelab {
namespace {

// Below this M*N*K one product is too small to be worth BLAS-internal threading.
constexpr int64_t kLargeGemm = 64 * 64 * 64;
// Above this one product of a batch is large enough to use every thread on its own.
constexpr int64_t kHugeGemm = 256 * 256 * 256;

template <class T>
void gemm_one(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (K == 0 || alpha == T(0)) {  // C = beta * C (beta == 0 overwrites, even NaN)
    for (int64_t i = 0; i < M; ++i) {
      T* c = C + i * ldc;
      if (beta == T(0)) {
        for (int64_t j = 0; j < N; ++j) c[j] = T(0);
      } else if (beta != T(1)) {
        for (int64_t j = 0; j < N; ++j) c[j] *= beta;
      }
    }
    return;
  }
  if (cpu::small_gemm_fits(ta, M, N, K)) {  // BLAS's fixed cost per call dominates below this size
    cpu::small_gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const auto TA = ta ? CblasTrans : CblasNoTrans;
  const auto TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == 4) {
    cblas_sgemm(CblasRowMajor, TA, TB, static_cast<blasint>(M), static_cast<blasint>(N),
                static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, TA, TB, static_cast<blasint>(M), static_cast<blasint>(N),
                static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
  }
}

// Above this output side, cutting C's rows or columns keeps every thread busy; at or below it a
// product with a long K (a weight gradient such as Shaw's [33, B·H·L] @ [B·H·L, 32]) is cut along K.
constexpr int64_t kSplitKMaxExtent = 64;

// C = alpha * op(A) @ op(B) + beta * C with K cut into nt equal chunks: thread 0 applies beta and
// adds its chunk into C, thread t > 0 writes its chunk to a private [M, N] buffer, and the buffers
// are then added into C in thread order (fixed by the shape and thread count: deterministic).
template <class T>
void gemm_split_k(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t chunk = (K + nt - 1) / nt;
  std::vector<T> part(static_cast<size_t>((nt - 1) * M * N));
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < nt; ++t) {
    const int64_t k0 = std::min<int64_t>(K, t * chunk), kn = std::min<int64_t>(chunk, K - k0);
    const T* a = ta ? A + k0 * lda : A + k0;  // op(A) columns k0.. (stored rows when transposed)
    const T* b = tb ? B + k0 : B + k0 * ldb;  // op(B) rows k0..
    if (t == 0)
      gemm_one<T>(ta, tb, M, N, kn, alpha, a, lda, b, ldb, beta, C, ldc);
    else
      gemm_one<T>(ta, tb, M, N, kn, alpha, a, lda, b, ldb, T(0), part.data() + (t - 1) * M * N, N);
  }
  for (int t = 1; t < nt; ++t) {
    const T* p = part.data() + (t - 1) * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += p[i * N + j];
  }
}

// How gemm_threaded runs a product on nt threads: one call, one block of C's rows (or columns,
// `by_rows` false) per thread, or K cut into one chunk per thread (gemm_split_k).
enum class Cut { One, Blocks, SplitK };
struct GemmCut {
  Cut cut;
  bool by_rows;
  int64_t extent, block;  // the cut side's length and its block (Cut::Blocks)
};
GemmCut gemm_cut(int nt, int64_t M, int64_t N, int64_t K) {
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t block = (extent / nt + 15) / 16 * 16;
  const bool parallel = M * N * K >= kLargeGemm && nt > 1 && !omp_in_parallel() && K > 0;
  if (parallel && extent <= kSplitKMaxExtent && K >= 8 * extent * nt)
    return {Cut::SplitK, by_rows, extent, block};
  if (!parallel || block == 0 || block >= extent) return {Cut::One, by_rows, extent, block};
  return {Cut::Blocks, by_rows, extent, block};
}

// Block p of a product cut into Cut::Blocks: rows s.. of op(A) and of C, or columns s.. of op(B)
// and of C.
template <class T>
void gemm_block(const GemmCut& cut, int64_t p, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                int64_t ldc) {
  const int64_t s = p * cut.block, len = std::min(cut.block, cut.extent - s);
  if (cut.by_rows)
    gemm_one<T>(ta, tb, len, N, K, alpha, ta ? A + s : A + s * lda, lda, B, ldb, beta, C + s * ldc,
                ldc);
  else
    gemm_one<T>(ta, tb, M, len, K, alpha, A, lda, tb ? B + s * ldb : B + s, ldb, beta, C + s, ldc);
}

// One product on every thread: C's rows (or, when it is wider than tall, its columns) are cut into
// one block per thread, aligned to 16, and each block is a single-threaded BLAS call; products below
// kLargeGemm stay one call, and a small output with a long K goes to gemm_split_k. The cut depends
// only on the shape and the thread count, so results are deterministic for a thread count. On the
// 2-core
// benchmark machine this ran the transformer's products (M = 1024-2048 rows, N and K = 32-512)
// 5-50% faster than OpenBLAS's own threading, which forks, syncs and yields inside every call
// (docs/performance.md).
//
// With `bias` (N values) C is first set to the bias broadcast over its rows and beta is 1: each
// thread fills its own block of C just before its product, so the fill costs no region of its own.
template <class T>
void gemm_threaded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                   int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc,
                   const T* bias = nullptr) {
  // C's rows [0, rows) x columns [c0, c0 + cols) = the bias's columns c0..
  auto fill_bias = [&](T* c, int64_t rows, int64_t c0, int64_t cols) {
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(c + i * ldc + c0, bias + c0, static_cast<size_t>(cols) * sizeof(T));
  };
  if (bias) beta = T(1);
  const int nt = num_threads();
  const GemmCut cut = gemm_cut(nt, M, N, K);
  const bool by_rows = cut.by_rows;
  const int64_t extent = cut.extent, block = cut.block;
  if (cut.cut == Cut::SplitK) {
    if (bias) fill_bias(C, M, 0, N);
    gemm_split_k<T>(nt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (cut.cut == Cut::One) {
    if (bias) fill_bias(C, M, 0, N);
    gemm_one<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t parts = (extent + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t p = 0; p < parts; ++p) {
    if (bias) {  // the block's share of C, before its product
      const int64_t s = p * block, len = std::min(block, extent - s);
      if (by_rows)
        fill_bias(C + s * ldc, len, 0, N);
      else
        fill_bias(C, M, s, len);
    }
    gemm_block<T>(cut, p, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

// Whether every block of a Cut::Blocks product takes the route of the whole product (pelab's small
// kernel or BLAS: small_gemm_fits), so one call on the whole computes the blocks' bits.
bool blocks_route_as_whole(const GemmCut& cut, bool ta, int64_t M, int64_t N, int64_t K) {
  const bool whole = cpu::small_gemm_fits(ta, M, N, K);
  for (int64_t s = 0; s < cut.extent; s += cut.block) {
    const int64_t len = std::min(cut.block, cut.extent - s);
    if (cpu::small_gemm_fits(ta, cut.by_rows ? len : M, cut.by_rows ? N : len, K) != whole)
      return false;
  }
  return true;
}

}  // namespace

void CpuBackend::gemm(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                      double alpha, const void* A, int64_t lda, int64_t strideA, const void* B,
                      int64_t ldb, int64_t strideB, double beta, void* C, int64_t ldc,
                      int64_t strideC, int64_t batch) {
  if (!check_gemm(transA, transB, M, N, K, lda, ldb, ldc, batch, "BLAS")) return;
  dispatch_float(dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(A);
    const T* b = static_cast<const T*>(B);
    T* c = static_cast<T*>(C);
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    // Many medium products (batched attention) parallelise better over the batch than inside BLAS.
    const bool large = M * N * K >= kLargeGemm &&
                       (batch < 2 * num_threads() || M * N * K >= kHugeGemm);
    // a shared output (strideC == 0) must be updated in batch order
    if (batch == 1 || large || strideC == 0) {
      for (int64_t i = 0; i < batch; ++i)
        gemm_threaded<T>(transA, transB, M, N, K, al, a + i * strideA, lda, b + i * strideB, ldb,
                         be, c + i * strideC, ldc);
    } else {
      // no OpenMP region below the grain or on one thread (cpu::parallel_for)
      cpu::parallel_for(batch, batch * M * N * K > kParallelGrain, [&](int64_t i) {
        gemm_one<T>(transA, transB, M, N, K, al, a + i * strideA, lda, b + i * strideB, ldb, be,
                    c + i * strideC, ldc);
      });
    }
  });
}

// gemm_group runs its products one per thread when every one of them is large enough that gemm
// would cut it into blocks of rows or columns (so none that gemm runs as one call or cuts along
// K), there are at most kMaxGroup of them, at least as many as threads, and the busiest thread's
// multiply-adds (products placed largest first on the least loaded thread) are at most
// kGroupImbalance times an even share. A backward's dX = g W and dW = gᵀ x (equal work) on two
// threads qualify: each thread then packs its own operands once and runs the kernels on the whole
// product, instead of both threads packing the same panel for half of each product in two regions
// (docs/performance.md, item 25).
constexpr size_t kMaxGroup = 8;
constexpr double kGroupImbalance = 1.2;

void CpuBackend::gemm_group(DType dtype, const GemmItem* items, size_t n) {
  const int nt = num_threads();
  std::array<int, kMaxGroup> owner{};
  bool grouped = n >= 2 && n <= kMaxGroup && nt > 1 && n >= static_cast<size_t>(nt) &&
                 !omp_in_parallel();
  std::array<GemmCut, kMaxGroup> cuts{};
  std::array<double, kMaxGroup> work{};
  double total = 0.0;
  for (size_t i = 0; grouped && i < n; ++i) {
    const GemmItem& g = items[i];
    cuts[i] = gemm_cut(nt, g.M, g.N, g.K);
    grouped = cuts[i].cut == Cut::Blocks;
    work[i] = static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
    total += work[i];
  }
  if (grouped) {
    std::array<size_t, kMaxGroup> order{};
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.begin() + n,
                     [&](size_t x, size_t y) { return work[x] > work[y]; });
    std::array<double, kMaxGroup> load{};
    for (size_t r = 0; r < n; ++r) {
      const int t = static_cast<int>(std::min_element(load.begin(), load.begin() + nt) -
                                     load.begin());
      owner[order[r]] = t;
      load[t] += work[order[r]];
    }
    grouped = *std::max_element(load.begin(), load.begin() + nt) <= kGroupImbalance * total / nt;
  }
  if (!grouped) {
    Backend::gemm_group(dtype, items, n);
    return;
  }
  // A copy, as gemm's arguments are: check_gemm raises a leading dimension that does not matter
  // (a single row) to its legal value, and the items are the caller's.
  std::array<GemmItem, kMaxGroup> g{};
  for (size_t i = 0; i < n; ++i) {
    g[i] = items[i];
    check_gemm(g[i].transA, g[i].transB, g[i].M, g[i].N, g[i].K, g[i].lda, g[i].ldb, g[i].ldc, 1,
               "BLAS");  // non-empty: every product is large
  }
  dispatch_float(dtype, "gemm_group", [&](auto tag) {
    using T = decltype(tag);
    // A product whose blocks would take another route than the whole (the small kernel for a
    // block, BLAS for the whole) runs its blocks in turn: the same calls as gemm, the same bits.
    std::array<bool, kMaxGroup> whole{};
    for (size_t i = 0; i < n; ++i)
      whole[i] = blocks_route_as_whole(cuts[i], g[i].transA, g[i].M, g[i].N, g[i].K);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; ++t)
      for (size_t i = 0; i < n; ++i) {
        if (owner[i] != t) continue;
        const GemmItem& x = g[i];
        const T al = static_cast<T>(x.alpha), be = static_cast<T>(x.beta);
        const T* a = static_cast<const T*>(x.A);
        const T* b = static_cast<const T*>(x.B);
        T* c = static_cast<T*>(x.C);
        if (whole[i]) {
          gemm_one<T>(x.transA, x.transB, x.M, x.N, x.K, al, a, x.lda, b, x.ldb, be, c, x.ldc);
          continue;
        }
        const int64_t parts = (cuts[i].extent + cuts[i].block - 1) / cuts[i].block;
        for (int64_t p = 0; p < parts; ++p)
          gemm_block<T>(cuts[i], p, x.transA, x.transB, x.M, x.N, x.K, al, a, x.lda, b, x.ldb, be,
                        c, x.ldc);
      }
  });
}

void CpuBackend::gemm_bias(DType dtype, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                           const void* A, int64_t lda, const void* B, int64_t ldb,
                           const void* bias, void* C, int64_t ldc) {
  if (!check_gemm(transA, transB, M, N, K, lda, ldb, ldc, 1, "BLAS")) return;
  dispatch_float(dtype, "gemm_bias", [&](auto tag) {
    using T = decltype(tag);
    gemm_threaded<T>(transA, transB, M, N, K, T(1), static_cast<const T*>(A), lda,
                     static_cast<const T*>(B), ldb, T(1), static_cast<T*>(C), ldc,
                     static_cast<const T*>(bias));
  });
}

}  // namespace pelab
