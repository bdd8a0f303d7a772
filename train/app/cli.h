// pelab — the command-line interface: verbs train, eval, generate, info, config-reference, demo,
// compare (train/study/compare.h) and plot-pe (train/study/plot_pe.h), every one parsed by
// train/command_line.h. main() (train/app/main.cpp) only calls run_cli(); every error is caught
// here and printed as one line "pelab: error: ..." on stderr with a non-zero exit status (2 for
// usage errors, 1 otherwise).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace pelab {

// args: argv[1..] (without the program name). Returns the process exit status.
int run_cli(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
            std::ostream& err);

// The verbs run_cli dispatches, in the order of `pelab --help`.
std::vector<std::string> cli_verbs();

}  // namespace pelab
