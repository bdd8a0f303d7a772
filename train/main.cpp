// pelab — command-line entry point; the verbs live in train/cli.cpp, which catches every error and
// prints it as one line "pelab: error: ...".
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "train/cli.h"

int main(int argc, char** argv) {
  // OpenMP threads that busy-wait at barriers (libgomp's default) make training ~20x slower as
  // soon as another process shares the cores. libgomp reads OMP_WAIT_POLICY when it is loaded, so
  // when the user has not chosen a policy, set PASSIVE and re-execute ourselves once.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return pelab::run_cli(args, std::cin, std::cout, std::cerr);
  } catch (...) {
    std::cerr << "pelab: error: unexpected failure\n";
    return 1;
  }
}
