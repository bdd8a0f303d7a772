// pelab — the test binary's main: the BLAS kernels are chosen as in every pelab program (pelab/
// blas_kernels.h) before any test runs, so results computed here and by the pelab binary the tests
// start come from the same kernels (MpiTest and ValidPositions compare them bit for bit).
//
// ctest runs one process per test suite (tests/ctest_suites.cmake) and sets PELAB_TESTS_SKIP_RC:
// a run in which tests ran, none failed and every one skipped itself (GTEST_SKIP) then exits with
// that code, which ctest reports as skipped. A run with a failure keeps gtest's non-zero status.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "pelab/blas_kernels.h"

int main(int argc, char** argv) {
  pelab::select_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const char* skip_rc = std::getenv("PELAB_TESTS_SKIP_RC");
  if (rc == 0 && skip_rc != nullptr && *skip_rc != '\0') {
    const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
    if (run.test_to_run_count() > 0 && run.skipped_test_count() == run.test_to_run_count() &&
        run.failed_test_count() == 0)
      return std::atoi(skip_rc);
  }
  return rc;
}
