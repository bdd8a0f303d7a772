// bench_matmul — GFLOP/s of pelab::matmul (engine path, output allocation included) next to a
// direct cblas_sgemm into a preallocated buffer, for square float32 matrices on 2 threads. The two
// are timed alternately in the same run after warm-up; each reports the median of its samples.
// Usage: bench_matmul [threads]   (default 2)
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/pelab.h"

namespace {

using pelab::now_s;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

pelab::Tensor random_matrix(int64_t n, uint64_t seed) {
  pelab::Generator g(seed);
  std::vector<double> v(static_cast<size_t>(n * n));
  for (double& x : v) x = g.normal();
  return pelab::Tensor::from_vector(v, {n, n}, pelab::DType::Float32);
}

}  // namespace

int main(int argc, char** argv) {
  pelab::select_blas_kernels(argv);  // the kernels a pelab run gets (pelab/blas_kernels.h)
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;  // default: 2 threads
  pelab::set_num_threads(threads);
  std::printf("pelab matmul vs cblas_sgemm, float32, %d threads (median GFLOP/s;\n"
              "ratio = median over alternating sample pairs of pelab/cblas speed)\n",
              threads);
  std::printf("BLAS: %s\n", pelab::blas_kernels_summary().c_str());
  std::printf("%6s %8s %12s %12s %8s %10s\n", "n", "calls", "pelab", "cblas", "ratio",
              "max|diff|");
  bool ok = true;
  for (int64_t n : {128, 512, 1024}) {
    pelab::Tensor a = random_matrix(n, 1), b = random_matrix(n, 2);
    std::vector<float> c(static_cast<size_t>(n * n));
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    const int ni = static_cast<int>(n);
    auto run_cblas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, pa, ni, pb, ni, 0.0f,
                  c.data(), ni);
    };
    pelab::Tensor out;
    auto run_pelab = [&] {
      out = pelab::Tensor();  // free the previous result first, as a training step would
      out = pelab::matmul(a, b);
    };

    // Warm-up, then calibrate the calls per sample so that one sample takes ~50 ms.
    const double flop = 2.0 * static_cast<double>(n) * n * n;
    for (int w = 0; w < 5; ++w) {
      run_cblas();
      run_pelab();
    }
    std::vector<double> cal;
    for (int w = 0; w < 5; ++w) {
      const double t = now_s();
      run_cblas();
      cal.push_back(now_s() - t);
    }
    const int inner = std::max(1, static_cast<int>(0.05 / std::max(median(cal), 1e-7)));
    // Samples alternate (ABBA order so neither side always runs first); each pair also gives a
    // paired ratio, which cancels slow drift in machine load.
    const int reps = 20;
    std::vector<double> tp, tc, pair_ratio;
    for (int r = 0; r < reps; ++r) {
      double sp = 0, sc = 0;
      for (int k = 0; k < 2; ++k) {
        const bool pelab_now = (k == 0) == (r % 2 == 0);
        const double t0 = now_s();
        for (int i = 0; i < inner; ++i) pelab_now ? run_pelab() : run_cblas();
        (pelab_now ? sp : sc) = (now_s() - t0) / inner;
      }
      tp.push_back(sp);
      tc.push_back(sc);
      pair_ratio.push_back(sc / sp);
    }
    const double gp = flop / median(tp) * 1e-9, gc = flop / median(tc) * 1e-9;
    double diff = 0;
    const float* po = out.data<float>();
    for (int64_t i = 0; i < n * n; ++i) diff = std::max(diff, std::fabs(double(po[i]) - c[i]));
    const double ratio = median(pair_ratio);  // pelab speed / cblas speed
    std::printf("%6lld %8d %12.1f %12.1f %8.3f %10.2e\n", static_cast<long long>(n), reps * inner,
                gp, gc, ratio, diff);
    if (n >= 512 && ratio < 0.95) ok = false;
    if (diff > 1e-3 * std::sqrt(static_cast<double>(n))) ok = false;
  }
  std::printf("%s\n", ok ? "OK: engine within 5% of cblas at n >= 512"
                         : "WARNING: engine slower than 95% of cblas at n >= 512 (or wrong)");
  return 0;
}
