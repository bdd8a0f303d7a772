// bench_own_gemm — would a GEMM of pelab's own beat OpenBLAS on the reference config's products?
// (docs/performance.md, "A GEMM of pelab's own, tried".) A candidate float32 kernel, written the
// way BLIS and OpenBLAS are (op(B) packed per 256-deep chunk into 16-column panels aligned to a
// cache line, op(A) packed per 96 rows into 6-row micro-panels, a 6 x 16 AVX2/FMA micro-kernel of
// twelve named accumulators), against cblas_sgemm on the same products, alternating call by call
// after warm-up. On `threads` threads each side runs one block of C's rows per thread inside one
// OpenMP region, each block a single-threaded call, as pelab's gemm cuts a product. Prints each
// side's best and median GFLOP/s and checks the candidate's result against OpenBLAS's.
// Usage: bench_own_gemm [threads] [samples]   (default 1 thread, 30 samples of 10 calls)
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/parallel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace {

constexpr int64_t kKC = 256, kMC = 96, kMR = 6, kNR = 16;

// A 64-byte aligned buffer of this thread (slot 0: packed op(B), slot 1: packed op(A)). With
// malloc's 16-byte alignment half the panel loads crossed a cache line: 10-15 % slower.
float* buffer(int slot, size_t n) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& v = buf[slot];
  if (v.size() < n + 16) v.resize(n + 16);
  const uintptr_t at = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - at % 64) % 64) / sizeof(float);
}

// op(B) rows k0.. k0+kc-1 as ceil(N/16) panels [kc][16], zero beyond N
void pack_b(bool tb, int64_t N, int64_t k0, int64_t kc, const float* B, int64_t ldb, float* P) {
  for (int64_t j0 = 0; j0 < N; j0 += kNR) {
    float* p = P + (j0 / kNR) * kc * kNR;
    const int64_t nj = std::min(kNR, N - j0);
    if (nj < kNR) std::fill(p, p + kc * kNR, 0.f);
    if (tb) {  // B stored [N, K]: a contiguous run of B's row j per panel column
      for (int64_t j = 0; j < nj; ++j)
        for (int64_t k = 0; k < kc; ++k) p[k * kNR + j] = B[(j0 + j) * ldb + k0 + k];
    } else {
      for (int64_t k = 0; k < kc; ++k)
        std::memcpy(p + k * kNR, B + (k0 + k) * ldb + j0, static_cast<size_t>(nj) * sizeof(float));
    }
  }
}

// op(A) rows i.. i+rows-1, columns k0.. k0+kc-1 as one micro-panel [kc][6], zero past `rows`
void pack_a(bool ta, int64_t rows, int64_t i, int64_t k0, int64_t kc, const float* A, int64_t lda,
            float* d) {
  if (rows < kMR) std::fill(d, d + kc * kMR, 0.f);
  if (ta) {  // A stored [K, M]: the micro-panel's rows of k are contiguous
    for (int64_t k = 0; k < kc; ++k)
      std::memcpy(d + k * kMR, A + (k0 + k) * lda + i, static_cast<size_t>(rows) * sizeof(float));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < kc; ++k) d[k * kMR + r] = A[(i + r) * lda + k0 + k];
  }
}

// C's `rows` x `cols` tile (+)= a [kc][6] · p [kc][16]
void tile(int64_t kc, const float* a, const float* p, float* C, int64_t ldc, int64_t rows,
          int64_t cols, bool first) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; ++k, a += kMR, p += kNR) {
    const __m256 b0 = _mm256_load_ps(p), b1 = _mm256_load_ps(p + 8);
    __m256 x;
#define ROW(r)                               \
  x = _mm256_broadcast_ss(a + r);            \
  c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); \
  c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
  }
  const __m256 lo[kMR] = {c00, c10, c20, c30, c40, c50}, hi[kMR] = {c01, c11, c21, c31, c41, c51};
  for (int64_t r = 0; r < rows; ++r) {
    float* c = C + r * ldc;
    if (cols == kNR) {  // a whole tile row: vector stores
      _mm256_storeu_ps(c, first ? lo[r] : _mm256_add_ps(lo[r], _mm256_loadu_ps(c)));
      _mm256_storeu_ps(c + 8, first ? hi[r] : _mm256_add_ps(hi[r], _mm256_loadu_ps(c + 8)));
      continue;
    }
    alignas(32) float out[kNR];
    _mm256_store_ps(out, lo[r]);
    _mm256_store_ps(out + 8, hi[r]);
    for (int64_t j = 0; j < cols; ++j) c[j] = first ? out[j] : c[j] + out[j];
  }
}

// C[M, N] = op(A) · op(B), row-major
void own_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc) {
  const int64_t panels = (N + kNR - 1) / kNR;
  float* P = buffer(0, static_cast<size_t>(panels * kNR * std::min(K, kKC)));
  float* ap = buffer(1, static_cast<size_t>(kMC * std::min(K, kKC)));
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    pack_b(tb, N, k0, kc, B, ldb, P);
    for (int64_t m0 = 0; m0 < M; m0 += kMC) {
      const int64_t m1 = std::min(M, m0 + kMC);
      for (int64_t i = m0; i < m1; i += kMR)
        pack_a(ta, std::min(kMR, m1 - i), i, k0, kc, A, lda, ap + (i - m0) * kc);
      for (int64_t jp = 0; jp < panels; ++jp)
        for (int64_t i = m0; i < m1; i += kMR)
          tile(kc, ap + (i - m0) * kc, P + jp * kc * kNR, C + i * ldc + jp * kNR, ldc,
               std::min(kMR, m1 - i), std::min(kNR, N - jp * kNR), k0 == 0);
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pelab;
  select_blas_kernels(argv);  // the kernels a pelab run gets (pelab/blas_kernels.h)
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const int samples = argc > 2 ? std::max(3, std::atoi(argv[2])) : 30;
  set_num_threads(threads);
  std::printf("own GEMM candidate vs cblas_sgemm, float32, %d thread(s), %d samples of 10 calls\n"
              "BLAS: %s\n",
              threads, samples, blas_kernels_summary().c_str());
  // the reference config's products (1024 rows): a linear's forward x·Wᵀ (NT), its dX = dY·W (NN)
  // and its dW = dYᵀ·x (TN), for in → out 128 → 128, 128 → 512 and 512 → 128
  struct Shape {
    bool ta, tb;
    int64_t M, N, K;
  } shapes[] = {{false, true, 1024, 128, 128},  {false, true, 1024, 512, 128},
                {false, true, 1024, 128, 512},  {false, false, 1024, 128, 128},
                {false, false, 1024, 128, 512}, {false, false, 1024, 512, 128},
                {true, false, 128, 128, 1024},  {true, false, 512, 128, 1024},
                {true, false, 128, 512, 1024}};
  int bad = 0;
  std::vector<double> ratios;
  for (const Shape& s : shapes) {
    const int64_t M = s.M, N = s.N, K = s.K;
    const int64_t lda = s.ta ? M : K, ldb = s.tb ? K : N;
    std::vector<float> A(M * K), B(K * N), C0(M * N), C1(M * N);
    uint64_t seed = 12345;
    auto rnd = [&] {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<float>((seed >> 40) & 0xffff) / 65536.0f - 0.5f;
    };
    for (float& x : A) x = rnd();
    for (float& x : B) x = rnd();
    const int64_t block = (M / threads + 15) / 16 * 16;  // pelab's cut of C's rows
    const int64_t parts = (M + block - 1) / block;
    auto run = [&](bool own) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t r0 = p * block, rows = std::min(block, M - r0);
        const float* a = s.ta ? A.data() + r0 : A.data() + r0 * lda;
        if (own)
          own_gemm(s.ta, s.tb, rows, N, K, a, lda, B.data(), ldb, C1.data() + r0 * N, N);
        else
          cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                      s.tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
                      static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, a,
                      static_cast<blasint>(lda), B.data(), static_cast<blasint>(ldb), 0.0f,
                      C0.data() + r0 * N, static_cast<blasint>(N));
      }
    };
    run(false);
    run(true);
    double err = 0, scale = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      err = std::max(err, static_cast<double>(std::fabs(C0[i] - C1[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(C0[i])));
    }
    const bool ok = err <= 1e-5 * std::max(1.0, scale) * std::sqrt(static_cast<double>(K));
    bad += !ok;
    std::vector<double> t[2];
    for (int r = 0; r < samples; ++r)
      for (int side = 0; side < 2; ++side) {
        const double t0 = now_s();
        for (int i = 0; i < 10; ++i) run(side == 1);
        t[side].push_back((now_s() - t0) / 10);
      }
    const double gf = 2.0 * M * N * K * 1e-9;
    const double b0 = *std::min_element(t[0].begin(), t[0].end()), m0 = median(t[0]);
    const double b1 = *std::min_element(t[1].begin(), t[1].end()), m1 = median(t[1]);
    ratios.push_back(m0 / m1);
    std::printf("%s%s %5lld x %4lld x %5lld  OpenBLAS best %6.1f median %6.1f | own best %6.1f "
                "median %6.1f GFLOP/s | own/OpenBLAS median %.2f | max |diff| %.1e%s\n",
                s.ta ? "T" : "N", s.tb ? "T" : "N", static_cast<long long>(M),
                static_cast<long long>(N), static_cast<long long>(K), gf / b0, gf / m0, gf / b1,
                gf / m1, m0 / m1, err, ok ? "" : "  WRONG");
  }
  std::printf("own/OpenBLAS, median over the products: %.2f\n", median(ratios));
  return bad ? 1 : 0;
}

#else
int main() {
  std::printf("bench_own_gemm: built without AVX2 and FMA (the candidate kernel needs them)\n");
  return 0;
}
#endif
