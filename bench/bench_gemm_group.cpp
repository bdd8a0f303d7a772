// bench_gemm_group — a linear layer's backward products dX = g W and dW = gᵀ x at the reference
// config's shapes (1024 rows; in → out 128 → 128, 128 → 512, 512 → 128, 128 → 32), float32: Backend's
// default (each product cut over the threads, gemm after gemm) against CpuBackend::gemm_group (one
// product per thread, one region), alternating call by call after warm-up. Prints each side's best
// and median time and the ratios grouped / split (docs/performance.md, item 25).
// Usage: bench_gemm_group [threads] [reps]   (default 2 threads, 400 reps)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/cpu_backend.h"
#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/parallel.h"

int main(int argc, char** argv) {
  using namespace pelab;
  select_blas_kernels(argv);  // the kernels a pelab run gets (pelab/blas_kernels.h)
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 400;
  set_num_threads(threads);
  std::printf("linear backward dX, dW: split vs grouped, float32, %d threads, %d reps\nBLAS: %s\n",
              threads, reps, blas_kernels_summary().c_str());
  CpuBackend be;
  const int64_t rows = 1024;
  const int64_t shapes[][2] = {{128, 128}, {128, 512}, {512, 128}, {128, 32}};  // in, out
  double best_split = 0, best_grouped = 0;
  for (const auto& s : shapes) {
    const int64_t in = s[0], out = s[1];
    std::vector<float> g(rows * out, 0.01f), w(out * in, 0.02f), x(rows * in, 0.03f),
        gx(rows * in), gw(out * in);
    Backend::GemmItem it[2];
    it[0].M = rows;  // dX [rows, in] = g [rows, out] @ W [out, in]
    it[0].N = in;
    it[0].K = out;
    it[0].A = g.data();
    it[0].lda = out;
    it[0].B = w.data();
    it[0].ldb = in;
    it[0].C = gx.data();
    it[0].ldc = in;
    it[1].transA = true;  // dW [out, in] = gᵀ @ x [rows, in]
    it[1].M = out;
    it[1].N = in;
    it[1].K = rows;
    it[1].A = g.data();
    it[1].lda = out;
    it[1].B = x.data();
    it[1].ldb = in;
    it[1].C = gw.data();
    it[1].ldc = in;
    std::vector<double> split, grouped;
    for (int r = 0; r < reps + 10; ++r)
      for (int v = 0; v < 2; ++v) {
        const bool group = (v == 0) == (r % 2 == 0);  // alternate which side goes first
        const double t0 = now_s();
        if (group)
          be.gemm_group(DType::Float32, it, 2);
        else
          be.Backend::gemm_group(DType::Float32, it, 2);
        const double t = (now_s() - t0) * 1e6;
        if (r >= 10) (group ? grouped : split).push_back(t);
      }
    std::sort(split.begin(), split.end());
    std::sort(grouped.begin(), grouped.end());
    const double ms = split[split.size() / 2], mg = grouped[grouped.size() / 2];
    std::printf("%4lld -> %4lld: split best %8.1f median %8.1f us | grouped best %8.1f median %8.1f us"
                " | best %.3f median %.3f\n",
                static_cast<long long>(in), static_cast<long long>(out), split[0], ms, grouped[0],
                mg, grouped[0] / split[0], mg / ms);
    best_split += split[0];
    best_grouped += grouped[0];
  }
  std::printf("sum of best times: split %.1f grouped %.1f us, ratio %.3f\n", best_split,
              best_grouped, best_grouped / best_split);
  return 0;
}
