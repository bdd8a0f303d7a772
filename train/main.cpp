// pelab — command-line entry point; the verbs live in train/cli.cpp, which catches every error and
// prints it as one line "pelab: error: ...".
#include <iostream>
#include <string>
#include <vector>

#include "train/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return pelab::run_cli(args, std::cin, std::cout, std::cerr);
  } catch (...) {
    std::cerr << "pelab: error: unexpected failure\n";
    return 1;
  }
}
