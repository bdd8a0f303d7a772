// pelab — the command-line interface: verbs train, eval, generate, info, config-reference, demo.
// main() (train/app/main.cpp) only calls run_cli(); every error is caught here and printed as one line
// "pelab: error: ..." on stderr with a non-zero exit status (2 for usage errors, 1 otherwise).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace pelab {

// args: argv[1..] (without the program name). Returns the process exit status.
int run_cli(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
            std::ostream& err);

}  // namespace pelab
