// pelab — the one command-line parser of every `pelab` verb: train, eval, generate, info,
// config-reference and demo (train/app/cli.cpp), compare (train/study/compare_cli.cpp) and plot-pe
// (train/study/plot_pe.cpp). A verb declares its options (with a value, without, and whether it
// takes the repeatable --set section.key=value); the parser gives its positional arguments, its
// --set overrides in order and its options, or -h/--help. Every wrong command line is one
// UsageError with the same wording for every verb, reported as one line "pelab: error: ..." with
// exit status 2:
//
//   VERB: unknown option '--ouput'; did you mean '--out'? (see pelab VERB --help)
//   VERB: option --out needs a value (see pelab VERB --help)
//   VERB: option --retrain takes no value, got '--retrain=1' (see pelab VERB --help)
//   VERB: missing CONFIG (see pelab VERB --help)
//   VERB: unexpected argument 'x' (see pelab VERB --help)
//   VERB: --jobs must be an integer >= 1, got 'two' (see pelab VERB --help)
//   VERB: --progress must be auto, bar, lines or none, got 'x' (see pelab VERB --help)
//
// An option's value is the next argument (--out DIR, even when it starts with '-') or follows '='
// (--out=DIR). A repeated option keeps its last value; --set accumulates. -h or --help anywhere
// (not as an option's value) asks for the verb's help, even after a mistake; without it the first
// mistake is the error. The subcommand dispatch stays in train/app/cli.cpp.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace pelab {

// A wrong command line: reported as "pelab: error: <what>" with exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What one verb accepts.
struct CommandSpec {
  std::string verb;                 // "compare": messages start "compare: "
  std::vector<std::string> values;  // options with a value ("--out")
  std::vector<std::string> flags;   // options without a value ("--retrain")
  bool sets = false;                // --set section.key=value (repeatable)
};

// A parsed command line of one verb.
struct CommandLine {
  std::string verb;
  bool help = false;                           // -h or --help was given
  std::vector<std::string> positional;         // in order
  std::vector<std::string> sets;               // every --set value, in order
  std::map<std::string, std::string> options;  // "--out" -> value ("" for a flag)

  bool has(const std::string& option) const { return options.count(option) > 0; }
  // The option's value, or `otherwise` when it was not given.
  std::string value(const std::string& option, const std::string& otherwise = "") const;
  // The option's value as an integer >= `min` (digits only), or `otherwise` when it was not
  // given; else UsageError "VERB: OPTION must be an integer >= MIN[ (hint)], got 'V'" (and the
  // help hint, like every error below).
  int64_t integer(const std::string& option, int64_t min, int64_t otherwise,
                  const std::string& hint = "") const;
  // --progress MODE (train, compare): -1 auto (also when not given), 0 lines, 1 bar, 2 none, the
  // values of TrainOptions::progress; else UsageError.
  int progress() const;
  // UsageError unless exactly `n` positional arguments were given: "VERB: missing WHAT" (fewer)
  // or "VERB: unexpected argument 'X'" (more).
  void expect_positional(size_t n, const std::string& what) const;
  // UsageError "VERB: MESSAGE (see pelab VERB --help)".
  UsageError error(const std::string& message) const;
};

// Parses args[1..] (args[0] is the verb, as `pelab VERB ...` gives it). Throws UsageError.
CommandLine parse_command_line(const CommandSpec& spec, const std::vector<std::string>& args);

// `text` as a non-negative integer of decimal digits only (at most 18); false otherwise.
bool parse_whole_number(const std::string& text, int64_t& out);

// Prints "pelab: error: <what>" on `err`; returns 2, the exit status of a usage error (for verbs
// that return their status rather than throw: compare, plot-pe).
int report_usage_error(std::ostream& err, const UsageError& e);

}  // namespace pelab
