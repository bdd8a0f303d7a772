// pelab — command-line entry point; the verbs live in train/app/cli.cpp, which catches every error and
// prints it as one line "pelab: error: ...".
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "pelab/blas_kernels.h"
#include "train/app/cli.h"
#include "train/study/compare.h"

int main(int argc, char** argv) {
  // Waiting OpenMP threads spin for GOMP_SPINCOUNT iterations before they sleep. libgomp's default
  // (300000, milliseconds) makes training several times slower as soon as another process shares the
  // cores; sleeping at once (OMP_WAIT_POLICY=PASSIVE) makes every fork/join pay a futex wake-up
  // (~2x slower on an idle machine). 1000 spins (~20 us) keeps nearly all of the idle-machine speed
  // and bounds the loss under sharing (docs/performance.md). libgomp reads these when it is loaded,
  // so when the user has chosen neither, set the spin count and re-execute ourselves once.
  const bool spin = std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr;
  if (spin) ::setenv("GOMP_SPINCOUNT", "1000", 1);
  // OpenBLAS's kernels against the CPU's (pelab/blas_kernels.h): when it re-executes us, the
  // spin count above goes with it.
  pelab::select_blas_kernels(argv);
  if (spin) ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  // `pelab compare --jobs N` starts this binary for each run (train/study/compare.h).
  pelab::set_compare_child_binary("/proc/self/exe");
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return pelab::run_cli(args, std::cin, std::cout, std::cerr);
  } catch (...) {
    std::cerr << "pelab: error: unexpected failure\n";
    return 1;
  }
}
