// A CPU run of a CUDA-enabled build loads no CUDA library (issue 31 item 4): the CUDA backend is
// libpelab_cuda.so, loaded on the first use of a CUDA device (framework/src/backend.cpp), so the
// pelab binary does not link cudart / cuBLAS, a CPU process (bench_train) maps no cuBLAS, and
// asking for a CUDA device still reaches the CUDA runtime through the loaded module. Skipped in a
// build without CUDA.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using pelab::testing::quote;

class CudaLazy : public pelab::testing::TempDirTest {
 protected:
  CudaLazy() : TempDirTest("cuda_lazy") {}
  pelab::testing::CommandResult run(const std::string& cmd) {
    return pelab::testing::run_captured(cmd, dir_ / "out.txt", dir_ / "err.txt");
  }
  static std::string bin(const std::string& name) {
    return (fs::path(pelab::testing::pelab_binary()).parent_path() / name).string();
  }
};

}  // namespace

TEST_F(CudaLazy, CpuRunsLoadNoCudaLibraryAndCudaStillLoadsOnDemand) {
#ifndef PELAB_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  // The binaries do not need the CUDA libraries to start.
  for (const char* b : {"pelab", "bench_train"}) {
    const auto ldd = run("ldd " + quote(bin(b)));
    ASSERT_EQ(ldd.rc, 0) << ldd.err;
    for (const char* lib : {"libcudart", "libcublas", "libpelab_cuda"})
      EXPECT_EQ(ldd.out.find(lib), std::string::npos) << b << " links " << lib << ":\n" << ldd.out;
  }
  // A CPU process maps none of them (bench_train's record lists every mapped *blas* object).
  const auto rec = run(quote(bin("bench_train")) + " --blas-info");
  ASSERT_EQ(rec.rc, 0) << rec.err;
  EXPECT_EQ(rec.out.find("cublas"), std::string::npos) << rec.out;
  // Asking for a CUDA device loads the backend: it trains on a GPU, or fails in the CUDA runtime
  // (no device here), not in loading the module.
  const std::string cfg = write("tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const auto cuda = run(quote(pelab::testing::pelab_binary()) + " train " + quote(cfg) +
                        " --set train.device=cuda --progress none");
  if (cuda.rc != 0) {
    EXPECT_NE(cuda.err.find("cuda:0 is not available: no CUDA device: "), std::string::npos)
        << cuda.err;
    EXPECT_EQ(cuda.err.find("cannot load the CUDA backend"), std::string::npos) << cuda.err;
  }
#endif
}
