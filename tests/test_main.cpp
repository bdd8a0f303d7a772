// pelab — the test binary's main: the BLAS kernels are chosen as in every pelab program (pelab/
// blas_kernels.h) before any test runs, so results computed here and by the pelab binary the tests
// start come from the same kernels (MpiTest and ValidPositions compare them bit for bit).
#include <gtest/gtest.h>

#include "pelab/blas_kernels.h"

int main(int argc, char** argv) {
  pelab::select_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
