// pelab — one command-line parser for every verb (train/command_line.h) and the string helpers of
// every layer (pelab/strings.h). Every verb that run_cli dispatches (cli_verbs(): a new verb is
// checked too) rejects an unknown option, a missing value and a flag given a value with the same
// one line and exit status 2, suggests the option meant, prints its help, and accumulates --set.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "pelab/strings.h"
#include "train/app/cli.h"
#include "train/command_line.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace {

using pelab::testing::quote;

// ---------------- string helpers ----------------

TEST(Strings, TrimRemovesAsciiWhiteSpaceAtBothEndsOnly) {
  EXPECT_EQ(pelab::trim("  a b\t"), "a b");
  EXPECT_EQ(pelab::trim("\n\r\v\f x \t\r\n"), "x");
  EXPECT_EQ(pelab::trim(" \t\r\n\v\f"), "");
  EXPECT_EQ(pelab::trim(""), "");
  EXPECT_EQ(pelab::trim("a\t \tb"), "a\t \tb");
  EXPECT_EQ(pelab::trim("x"), "x");
}

TEST(Strings, JoinLowerAndPrintfNumber) {
  EXPECT_EQ(pelab::join({}, ", "), "");
  EXPECT_EQ(pelab::join({"a"}, ", "), "a");
  EXPECT_EQ(pelab::join({"a", "", "c"}, ", "), "a, , c");
  EXPECT_EQ(pelab::join({"x", "y"}, "`, `"), "x`, `y");
  EXPECT_EQ(pelab::lower("Pe.Scheme=RoPE_2"), "pe.scheme=rope_2");
  EXPECT_EQ(pelab::printf_number("%.3f", 2.0 / 3), "0.667");
  EXPECT_EQ(pelab::printf_number("%.1f%%", 99.25), "99.2%");
}

// shell_word's output read back by /bin/sh gives the word again.
TEST(Strings, ShellWordIsOneShellWord) {
  EXPECT_EQ(pelab::shell_word("runs/a_b-1.yaml"), "runs/a_b-1.yaml");  // plain: as it is
  EXPECT_EQ(pelab::shell_word("a b"), "'a b'");
  EXPECT_EQ(pelab::shell_word(""), "''");
  const pelab::testing::fs::path dir = pelab::testing::fresh_temp_dir("pelab_shell_word");
  for (const std::string w : {"plain", "two words", "it's", "$HOME `x` \"q\"", "", "a\\b*?;&|"}) {
    const pelab::testing::CommandResult r = pelab::testing::run_captured(
        "printf '%s' " + pelab::shell_word(w), dir / "o", dir / "e");
    EXPECT_EQ(r.rc, 0) << w;
    EXPECT_EQ(r.out, w);
  }
  pelab::testing::fs::remove_all(dir);
}

TEST(Strings, EditDistanceAndNearestName) {
  EXPECT_EQ(pelab::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(pelab::edit_distance("trian", "train"), 1u);  // a transposition is one edit
  EXPECT_EQ(pelab::edit_distance("Model", "model"), 0u);  // case-folded
  EXPECT_EQ(pelab::edit_distance("", "abc"), 3u);
  const std::vector<std::string> verbs = {"train", "eval", "generate", "compare", "plot-pe"};
  EXPECT_EQ(pelab::nearest_name("trian", verbs), "train");
  EXPECT_EQ(pelab::nearest_name("comp", verbs), "compare");  // one contains the other
  EXPECT_EQ(pelab::nearest_name("plotpe", verbs), "plot-pe");
  EXPECT_EQ(pelab::nearest_name("xyzzy", verbs), "");
  EXPECT_EQ(pelab::nearest_name("train", {}), "");
  EXPECT_EQ(pelab::nearest_name("num_heads", {"heads", "d_model"}), "heads");
}

// ---------------- the parser itself ----------------

const pelab::CommandSpec kSpec{"verb", {"--out", "--jobs", "--progress"}, {"--retrain"}, true};

pelab::CommandLine parse(const std::vector<std::string>& a) {
  return pelab::parse_command_line(kSpec, a);
}

std::string usage_error(const std::vector<std::string>& a) {
  try {
    parse(a);
  } catch (const pelab::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CommandLine, SetsAccumulateInOrderAndOptionsKeepTheirLastValue) {
  const pelab::CommandLine c = parse({"verb", "--set", "a.b=1", "c.yaml", "--set=d.e=x=y", "--out",
                                      "o1", "--out=o2", "--set", "a.b=2", "--retrain"});
  EXPECT_EQ(c.sets, (std::vector<std::string>{"a.b=1", "d.e=x=y", "a.b=2"}));
  EXPECT_EQ(c.positional, std::vector<std::string>{"c.yaml"});
  EXPECT_EQ(c.value("--out"), "o2");
  EXPECT_TRUE(c.has("--retrain"));
  EXPECT_FALSE(c.has("--jobs"));
  EXPECT_EQ(c.value("--jobs", "none"), "none");
  EXPECT_FALSE(c.help);
  // A value may start with '-'; a lone "-" is a positional argument.
  const pelab::CommandLine d = parse({"verb", "--out", "-x", "-"});
  EXPECT_EQ(d.value("--out"), "-x");
  EXPECT_EQ(d.positional, std::vector<std::string>{"-"});
}

TEST(CommandLine, EveryMistakeIsOneUsageErrorNamingVerbAndHelp) {
  EXPECT_EQ(usage_error({"verb", "--ouput", "x"}),
            "verb: unknown option '--ouput'; did you mean '--out'? (see pelab verb --help)");
  EXPECT_EQ(usage_error({"verb", "--zzzzzz"}),
            "verb: unknown option '--zzzzzz' (see pelab verb --help)");
  EXPECT_EQ(usage_error({"verb", "--sett", "a=1"}),
            "verb: unknown option '--sett'; did you mean '--set'? (see pelab verb --help)");
  EXPECT_EQ(usage_error({"verb", "x", "--out"}),
            "verb: option --out needs a value (see pelab verb --help)");
  EXPECT_EQ(usage_error({"verb", "--set"}),
            "verb: option --set needs a value (see pelab verb --help)");
  EXPECT_EQ(usage_error({"verb", "--retrain=1"}),
            "verb: option --retrain takes no value, got '--retrain=1' (see pelab verb --help)");
  // The first mistake is the one reported.
  EXPECT_EQ(usage_error({"verb", "--bogus", "--out"}),
            "verb: unknown option '--bogus' (see pelab verb --help)");
  // --set only where the verb takes it.
  EXPECT_EQ(usage_error({"verb"}), "");
  try {
    pelab::parse_command_line({"plain", {}, {}, false}, {"plain", "--set", "a=1"});
    ADD_FAILURE() << "--set accepted by a verb without it";
  } catch (const pelab::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "plain: unknown option '--set' (see pelab plain --help)");
  }
}

TEST(CommandLine, HelpWinsOverMistakesAnywhere) {
  for (const auto& a : std::vector<std::vector<std::string>>{
           {"verb", "--help"}, {"verb", "-h"}, {"verb", "--bogus", "--help"},
           {"verb", "x", "y", "-h", "--out"}, {"verb", "--retrain=2", "--help"}})
    EXPECT_TRUE(parse(a).help) << a.size();
  // As an option's value it is the value.
  const pelab::CommandLine c = parse({"verb", "--out", "--help"});
  EXPECT_FALSE(c.help);
  EXPECT_EQ(c.value("--out"), "--help");
}

TEST(CommandLine, PositionalCountIntegersAndProgress) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const pelab::UsageError& e) {
      return e.what();
    }
    return "";
  };
  const pelab::CommandLine none = parse({"verb"});
  EXPECT_EQ(error_of([&] { none.expect_positional(1, "CONFIG"); }),
            "verb: missing CONFIG (see pelab verb --help)");
  const pelab::CommandLine two = parse({"verb", "a", "b"});
  EXPECT_EQ(error_of([&] { two.expect_positional(1, "CONFIG"); }),
            "verb: unexpected argument 'b' (see pelab verb --help)");
  EXPECT_EQ(error_of([&] { two.expect_positional(2, "A B"); }), "");

  EXPECT_EQ(none.integer("--jobs", 1, 7), 7);
  EXPECT_EQ(parse({"verb", "--jobs", "12"}).integer("--jobs", 1, 7), 12);
  EXPECT_EQ(parse({"verb", "--jobs=0"}).integer("--jobs", 0, 7), 0);
  for (const std::string bad : {"0", "-2", "two", "1.5", "", " 3", "+3", "9999999999999999999"})
    EXPECT_EQ(error_of([&] { parse({"verb", "--jobs", bad}).integer("--jobs", 1, 7, "at once"); }),
              "verb: --jobs must be an integer >= 1 (at once), got '" + bad +
                  "' (see pelab verb --help)");

  EXPECT_EQ(none.progress(), -1);
  const std::map<std::string, int> modes = {{"auto", -1}, {"lines", 0}, {"bar", 1}, {"none", 2}};
  for (const auto& m : modes) EXPECT_EQ(parse({"verb", "--progress", m.first}).progress(), m.second);
  EXPECT_EQ(error_of([&] { parse({"verb", "--progress=fancy"}).progress(); }),
            "verb: --progress must be auto, bar, lines or none, got 'fancy' (see pelab verb --help)");
}

// ---------------- every verb of `pelab` ----------------

// Per verb: an option it takes with a value ("" for none) and a typo with the option meant.
struct VerbCase {
  std::string value_option, typo, meant;
};
const std::map<std::string, VerbCase>& verb_cases() {
  static const std::map<std::string, VerbCase> m = {
      {"train", {"--resume", "--overwirte", "--overwrite"}},
      {"eval", {"--checkpoint", "--no-cahce", "--no-cache"}},
      {"generate", {"--max-len", "--maxlen", "--max-len"}},
      {"info", {"--set", "--yml", "--yaml"}},
      {"config-reference", {"", "--hlep", "--help"}},
      {"demo", {"", "--hepl", "--help"}},
      {"compare", {"--out", "--report-olny", "--report-only"}},
      {"plot-pe", {"--run", "--no-plot", "--no-plots"}},
  };
  return m;
}

struct CliRun {
  int rc;
  std::string out, err;
};
CliRun cli(const std::vector<std::string>& args) {
  std::istringstream in;
  std::ostringstream out, err;
  const int rc = pelab::run_cli(args, in, out, err);
  return {rc, out.str(), err.str()};
}

// One line "pelab: error: VERB: ... (see pelab VERB --help)" containing `part`, exit status 2.
void expect_usage_error(const CliRun& r, const std::string& verb, const std::string& part) {
  EXPECT_EQ(r.rc, 2) << verb << ": " << r.err;
  EXPECT_EQ(r.err.rfind("pelab: error: " + verb + ": ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << part << " in " << r.err;
  EXPECT_NE(r.err.find("(see pelab " + verb + " --help)\n"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(OneCli, EveryVerbIsCovered) {
  for (const auto& v : pelab::cli_verbs()) EXPECT_TRUE(verb_cases().count(v)) << v << ": add it here";
  EXPECT_EQ(pelab::cli_verbs().size(), verb_cases().size());
}

TEST(OneCli, EveryVerbRejectsAnUnknownOptionTheSameWayAndSuggests) {
  for (const auto& v : pelab::cli_verbs()) {
    const VerbCase& c = verb_cases().at(v);
    expect_usage_error(cli({v, "--bogus-option"}), v, "unknown option '--bogus-option'");
    expect_usage_error(cli({v, c.typo}), v,
                       "unknown option '" + c.typo + "'; did you mean '" + c.meant + "'?");
    expect_usage_error(cli({v, "--hlep"}), v, "did you mean '--help'?");
  }
}

TEST(OneCli, EveryVerbRejectsAMissingValueTheSameWay) {
  for (const auto& v : pelab::cli_verbs()) {
    const VerbCase& c = verb_cases().at(v);
    if (c.value_option.empty()) {
      // No option with a value, --set included.
      expect_usage_error(cli({v, "--set", "model.d_model=32"}), v, "unknown option '--set'");
      continue;
    }
    expect_usage_error(cli({v, "x", c.value_option}), v,
                       "option " + c.value_option + " needs a value");
  }
  // A flag given a value.
  expect_usage_error(cli({"train", "x.yaml", "--overwrite=yes"}), "train",
                     "option --overwrite takes no value, got '--overwrite=yes'");
  expect_usage_error(cli({"plot-pe", "--run-only=1"}), "plot-pe", "option --run-only takes no value");
}

TEST(OneCli, EveryVerbPrintsItsHelp) {
  for (const auto& v : pelab::cli_verbs())
    for (const auto& a : std::vector<std::vector<std::string>>{
             {v, "--help"}, {v, "-h"}, {v, "--bogus", "--help"}}) {
      const CliRun r = cli(a);
      EXPECT_EQ(r.rc, 0) << v << ": " << r.err;
      EXPECT_EQ(r.out.rfind("usage: pelab " + v, 0), 0u) << r.out;
      EXPECT_NE(r.out.find("-h, --help"), std::string::npos) << v;
      EXPECT_TRUE(r.err.empty()) << r.err;
    }
}

TEST(OneCli, PositionalArgumentsAreCheckedTheSameWay) {
  for (const auto& v : {"eval", "generate", "info", "compare"})
    expect_usage_error(cli({v}), v, "missing ");
  expect_usage_error(cli({"train"}), "train", "missing CONFIG (or --resume RUN_DIR)");
  for (const auto& v : {"config-reference", "demo", "plot-pe"})
    expect_usage_error(cli({v, "extra"}), v, "unexpected argument 'extra'");
  expect_usage_error(cli({"compare", "a.yaml", "b.yaml"}), "compare", "unexpected argument 'b.yaml'");
}

TEST(OneCli, ValuesAreCheckedTheSameWayBeforeAnyFileIsRead) {
  // Usage errors come before "no such config file or run directory" (exit status 1).
  expect_usage_error(cli({"generate", "no_run", "--max-len", "-3"}), "generate",
                     "--max-len must be an integer >= 0, got '-3'");
  expect_usage_error(cli({"train", "no.yaml", "--stop-after", "x"}), "train",
                     "--stop-after must be an integer >= 0, got 'x'");
  expect_usage_error(cli({"train", "no.yaml", "--progress", "fancy"}), "train",
                     "--progress must be auto, bar, lines or none, got 'fancy'");
  expect_usage_error(cli({"compare", "no.yaml", "--jobs", "0"}), "compare",
                     "--jobs must be an integer >= 1 (runs trained at once), got '0'");
  expect_usage_error(cli({"compare", "no.yaml", "--only", "1,,2"}), "compare",
                     "--only expects run indexes");
  expect_usage_error(cli({"compare", "no.yaml", "--plan", "--report-only"}), "compare",
                     "exclude each other");
  expect_usage_error(cli({"plot-pe", "--input", "12"}), "plot-pe", "--input needs --run RUN_DIR");
}

class OneCliSets : public pelab::testing::TempDirTest {
 protected:
  OneCliSets() : TempDirTest("pelab_one_cli") {}
};

// Repeated --set: every override applies, in order (a later one wins), for info and compare.
TEST_F(OneCliSets, RepeatedSetAccumulates) {
  const std::string cfg = write("tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const CliRun r = cli({"info", cfg, "--set", "model.d_model=32", "--set=model.heads=4", "--set",
                     "model.d_model=24", "--yaml"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("d_model: 24"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("heads: 4"), std::string::npos) << r.out;
  const std::string cmp =
      write("cmp.yaml", pelab::testing::tiny_compare_yaml("[2, 4]", 4) + "    - rope\n");
  const CliRun plan = cli({"compare", cmp, "--plan", "--set", "compare.seeds=[3, 4]", "--set",
                        "train.steps=2", "--out", (dir_ / "rep").string()});
  ASSERT_EQ(plan.rc, 0) << plan.err;
  EXPECT_NE(plan.out.find("rope_seed3"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("rope_seed4"), std::string::npos) << plan.out;
  EXPECT_EQ(plan.out.find("rope_seed1"), std::string::npos) << plan.out;
}

// Through the built binary: the exit status of a usage error is 2 and its line is on stderr.
TEST_F(OneCliSets, TheBinaryExitsTwoWithOneLine) {
  const std::string bin = quote(pelab::testing::pelab_binary());
  for (const std::string args : {"compare x.yaml --ouptu", "plot-pe --out", "demo --set a=b"}) {
    const pelab::testing::CommandResult r =
        pelab::testing::run_captured(bin + " " + args, dir_ / "o", dir_ / "e");
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
