// Tests of benchmark suites (train/study/suite.h, `pelab compare SUITE.yaml`): a tiny suite runs every
// task as a comparison and writes the summary (and reuses its runs the second time), the summary's
// arithmetic on hand-made rows (mean over the extrapolation lengths, then over seeds, the 95 %
// t-interval, †, ‡, bold best, the average column), and bad input: one ConfigError naming the
// task entry's FILE:LINE, nothing trained.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/compare.h"
#include "train/study/report.h"
#include "train/study/suite.h"

namespace pelab {
namespace {

namespace fs = std::filesystem;
using pelab::testing::slurp;

// The message of the exception `f` throws (ConfigError and pelab::Error alike), "" when none.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class SuiteRuns : public pelab::testing::TempDirTest {
 protected:
  SuiteRuns() : TempDirTest("pelab_suite_runs") {}

  // The tiny comparison (reverse base config, rope and t5, seeds 1 and 2, `steps` steps) plus a
  // suite: section with the given task entries (each one line, "    - ..."). first_entry_line_
  // is the line of the first entry.
  std::string suite_yaml(const std::vector<std::string>& entries, int steps = 4,
                         const std::string& suite_extra = "") {
    std::string y = pelab::testing::tiny_compare_yaml("[3, 6]", steps) +
                    "    - rope\n    - t5\nsuite:\n  out: " + (dir_ / "out").string() + "\n" +
                    suite_extra + "  tasks:\n";
    first_entry_line_ = static_cast<int>(std::count(y.begin(), y.end(), '\n')) + 1;
    for (const auto& e : entries) y += "    - " + e + "\n";
    return y;
  }
  std::string load_error(const std::vector<std::string>& entries,
                         const std::string& suite_extra = "") {
    return error_of(
        [&] { (void)load_suite_string(suite_yaml(entries, 4, suite_extra), "cfg.yaml"); });
  }
  std::string at(int entry) const {
    return "cfg.yaml:" + std::to_string(first_entry_line_ + entry) + ": ";
  }
  int first_entry_line_ = 0;
};

TEST_F(SuiteRuns, TinySuiteWritesTheSummaryAndReusesItsRuns) {
  const std::string yaml =
      suite_yaml({"{name: parity_check, set: {task.test_lengths: [3, 6, 8]}}",
                  "{name: reverse_string, set: {task.name: reverse, task.num_symbols: 2}}"});
  const std::string path = write("suite.yaml", yaml);
  ASSERT_TRUE(is_suite_config(path));
  const SuiteSpec spec = load_suite(path);
  ASSERT_EQ(spec.tasks.size(), 2u);
  EXPECT_EQ(spec.tasks[0].spec.base.task.name, "parity_check");
  EXPECT_EQ(spec.tasks[1].spec.base.task.name, "reverse");
  EXPECT_EQ(spec.tasks[1].spec.base.task.num_symbols, 2);
  CompareOptions opt;
  opt.plots = false;
  opt.progress = 2;
  std::ostringstream log;
  opt.log = &log;
  const SuiteResult r = run_suite(spec, opt);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].trained, 4);
  const std::string md = slurp(r.summary_md);
  EXPECT_NE(md.find("| scheme | parity_check | reverse_string | average |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| rope |"), std::string::npos);
  EXPECT_NE(md.find("| t5 |"), std::string::npos);
  EXPECT_NE(md.find("parity_check/report.md"), std::string::npos);
  EXPECT_NE(md.find("| 1–4 | 6, 8 |"), std::string::npos) << md;  // extrapolation lengths only
  const std::string csv = slurp(r.summary_csv);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 2) << csv;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "parity_check" / "report.md"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "reverse_string" / "report.md"));
  // The child processes' config: the suite block blanked, the rest line for line.
  const std::string child = slurp(dir_ / "out" / "parity_check" / "compare.yaml");
  EXPECT_EQ(child.find("suite:"), std::string::npos);
  EXPECT_EQ(std::count(child.begin(), child.end(), '\n'), std::count(yaml.begin(), yaml.end(), '\n'));
  // Again: every run is reused, the summary is the same table.
  const SuiteResult again = run_suite(spec, opt);
  EXPECT_EQ(again.results[0].reused, 4);
  EXPECT_EQ(again.results[1].reused, 4);
  EXPECT_EQ(again.results[0].trained + again.results[1].trained, 0);
  EXPECT_EQ(slurp(again.summary_csv), csv);
  // --task: a subset writes no summary; an unknown task is an error; --only needs one task.
  fs::remove(r.summary_md);
  EXPECT_EQ(run_suite(spec, opt, {"reverse_string"}).results.size(), 1u);
  EXPECT_FALSE(fs::exists(r.summary_md));
  EXPECT_NE(error_of([&] { run_suite(spec, opt, {"parity"}); })
                .find("'parity' is not a task of"),
            std::string::npos);
  CompareOptions only = opt;
  only.only = {0};
  EXPECT_NE(error_of([&] { run_suite(spec, only); }).find("exactly one --task"),
            std::string::npos);
}

// A result row (every run converged unless said otherwise) whose run trained for 1 s.
ResultRow row(const std::string& scheme, int64_t seed, int64_t length, int in_dist, double em,
              int converged = 1) {
  ResultRow r = pelab::testing::result_row(scheme, seed, length, in_dist, em, converged);
  r.train_wall_s = 1.0;
  return r;
}

TEST_F(SuiteRuns, SummaryAveragesTheExtrapolationLengthsThenTheSeeds) {
  const SuiteSpec spec = load_suite_string(
      suite_yaml({"parity_check", "{name: rev, set: {task.name: reverse}}"}) , "cfg.yaml");
  // Task parity_check: rope seed 1 = mean(0.5, 0.3) = 0.4, seed 2 = mean(0.7, 0.5) = 0.6; the
  // in-distribution length (1.0) is not counted. t5: 0.9 and 0.8, seed 2 not converged (†).
  std::vector<ResultRow> a = {row("rope", 1, 4, 1, 1.0), row("rope", 1, 6, 0, 0.5),
                              row("rope", 1, 8, 0, 0.3), row("rope", 2, 4, 1, 1.0),
                              row("rope", 2, 6, 0, 0.7), row("rope", 2, 8, 0, 0.5),
                              row("t5", 1, 6, 0, 0.9),   row("t5", 1, 8, 0, 0.9),
                              row("t5", 2, 6, 0, 0.8, 0), row("t5", 2, 8, 0, 0.8, 0)};
  // Task rev: rope 0.2 / 0.2, t5 0.1 / 0.1.
  std::vector<ResultRow> b = {row("rope", 1, 6, 0, 0.2), row("rope", 2, 6, 0, 0.2),
                              row("t5", 1, 6, 0, 0.1), row("t5", 2, 6, 0, 0.1)};
  const SuiteSummary s = suite_summary(spec, {a, b}, {"a/report.md", "b/report.md"}, 1.0, "cmd");
  ASSERT_EQ(s.labels, (std::vector<std::string>{"rope", "t5"}));
  ASSERT_EQ(s.cells.size(), 4u);
  const SuiteCell& rope_a = s.cells[0];
  EXPECT_NEAR(rope_a.stat.mean, 0.5, 1e-12);
  // Two runs: half-width t(0.975, 1) * s / sqrt(2) with s = sqrt(0.02) = 12.706 * 0.1.
  EXPECT_NEAR(rope_a.stat.half, student_t_quantile(0.975, 1) * std::sqrt(0.02) / std::sqrt(2.0),
              1e-9);
  EXPECT_NEAR(rope_a.stat.half, 1.2706, 1e-3);
  EXPECT_EQ(rope_a.text, "50.0 [0.0, 100.0]");  // clipped to [0, 100] %
  EXPECT_FALSE(rope_a.best);
  const SuiteCell& t5_a = s.cells[1];
  EXPECT_NEAR(t5_a.stat.mean, 0.85, 1e-12);
  EXPECT_TRUE(t5_a.best);
  EXPECT_NE(t5_a.text.find("†"), std::string::npos);
  EXPECT_TRUE(s.cells[2].best);  // rev: rope 20 % beats t5 10 %
  EXPECT_FALSE(s.cells[3].best);
  EXPECT_NE(s.markdown.find("| rope | 50.0 [0.0, 100.0] | **20.0 [20.0, 20.0]** | 35.0 |"),
            std::string::npos)
      << s.markdown;
  EXPECT_NE(s.markdown.find("| t5 | **85.0"), std::string::npos) << s.markdown;
  EXPECT_NE(s.markdown.find("| 47.5 |"), std::string::npos) << s.markdown;  // (85 + 10) / 2
  EXPECT_NE(s.markdown.find("Training wall time summed over the runs"), std::string::npos);
  EXPECT_NE(s.markdown.find(": 8 s."), std::string::npos) << s.markdown;  // 8 runs x 1 s
}

// A suite file is parsed once: anchors of the run sections work in suite.tasks and the other way
// round (the suite section used to be parsed on its own: "unknown anchor").
TEST_F(SuiteRuns, AnchorsWorkAcrossSections) {
  std::string y = suite_yaml({"{name: parity_check, set: {task.test_lengths: *lengths}}",
                              "{name: rev, set: {task.name: reverse, train.steps: *steps}}"});
  y.replace(y.find("test_lengths: [3, 6]"), 20, "test_lengths: &lengths [3, 7]");
  y.replace(y.find("steps: 4,"), 9, "steps: &steps 5,");
  const SuiteSpec spec = load_suite_string(y, "cfg.yaml");
  ASSERT_EQ(spec.tasks.size(), 2u);
  EXPECT_EQ(spec.tasks[0].spec.base.task.test_lengths, (std::vector<int>{3, 7}));
  EXPECT_EQ(spec.tasks[1].spec.base.train.steps, 5);
  // An anchor of the suite section (above the run sections) used by a run section.
  const std::string z =
      "suite:\n  out: " + (dir_ / "out").string() + "\n  tasks: [&task copy]\n" +
      suite_yaml({"copy"}).substr(0, suite_yaml({"copy"}).find("suite:"));
  std::string w = z;
  w.replace(w.find("name: reverse"), 13, "name: *task");
  const SuiteSpec t = load_suite_string(w, "cfg.yaml");
  EXPECT_EQ(t.tasks[0].spec.base.task.name, "copy");
  // A suite file saved with a byte-order mark is still a suite.
  EXPECT_TRUE(is_suite_config_text("\xEF\xBB\xBF" + w));
}

TEST_F(SuiteRuns, CannotLearnSchemesAreMarked) {
  std::string y = suite_yaml({"parity_check"});
  const size_t p = y.find("    - t5\n");
  y.replace(p, 9, "    - {name: t5, set: {pe.scheme: t5}, expect: cannot_learn, why: test}\n");
  const SuiteSpec spec = load_suite_string(y, "cfg.yaml");
  const SuiteSummary s = suite_summary(
      spec, {{row("rope", 1, 6, 0, 0.5), row("t5", 1, 6, 0, 0.25)}}, {"r.md"}, 0, "cmd");
  EXPECT_EQ(s.cells[1].text, "25.0 (n = 1) ‡");
}

TEST_F(SuiteRuns, BadInputIsOneErrorAtTheTaskEntry) {
  std::string e = load_error({"copy", "parity_chek"});
  EXPECT_EQ(e.rfind(at(1), 0), 0u) << e;
  EXPECT_NE(e.find("did you mean 'parity_check'"), std::string::npos) << e;
  // A length the task cannot generate.
  e = load_error({"{name: modular_arithmetic, set: {task.train_max_len: 5, "
                  "task.test_lengths: [7, 8]}}"});
  EXPECT_EQ(e.rfind(at(0), 0), 0u) << e;
  EXPECT_NE(e.find("cannot generate length 8"), std::string::npos) << e;
  EXPECT_NE(e.find("odd"), std::string::npos) << e;
  e = load_error({"copy", "{name: missing_duplicate, set: {task.train_min_len: 2, "
                  "task.test_lengths: [5]}}"});
  EXPECT_EQ(e.rfind(at(1), 0), 0u) << e;
  EXPECT_NE(e.find("even"), std::string::npos) << e;
  // A test length shorter than training; no extrapolation length at all.
  e = load_error({"{name: copy, set: {task.train_min_len: 3, task.test_lengths: [2, 8]}}"});
  EXPECT_EQ(e.rfind(at(0), 0), 0u) << e;
  EXPECT_NE(e.find("test_lengths has 2, shorter than task.train_min_len 3"), std::string::npos)
      << e;
  e = load_error({"{name: copy, set: {task.test_lengths: [2, 4]}}"});
  EXPECT_NE(e.find("no test length is longer than task.train_max_len 4"), std::string::npos) << e;
  // The suite section itself.
  e = load_error({"copy", "copy"});
  EXPECT_EQ(e.rfind(at(1), 0), 0u) << e;
  EXPECT_NE(e.find("listed twice"), std::string::npos) << e;
  e = load_error({"copy"}, "  metrc: exact_match\n");
  EXPECT_NE(e.find("unknown key 'suite.metrc'; did you mean 'suite.metric'?"), std::string::npos)
      << e;
  e = error_of([] {
    (void)load_suite_string("suite:\n  tasks: [copy,\n  out: x\n", "cfg.yaml");
  });
  EXPECT_EQ(e.rfind("cfg.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
  e = load_error({"{name: copy, sett: {}}"});
  EXPECT_NE(e.find("unknown key 'sett'"), std::string::npos) << e;
  // Through the command line: the error is thrown before anything is written or trained.
  const std::string path = write("bad.yaml", suite_yaml({"copy", "parity_chek"}));
  std::ostringstream out, err;
  e = error_of([&] { compare_cli({"compare", path}, out, err); });
  EXPECT_NE(e.find("did you mean 'parity_check'"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  // --task is for suites only.
  const std::string plain = write("plain.yaml", pelab::testing::tiny_compare_yaml("[3, 6]", 4) +
                                                    "    - rope\n");
  EXPECT_EQ(compare_cli({"compare", plain, "--task", "copy"}, out, err), 2);
  EXPECT_NE(err.str().find("--task selects tasks of a suite config"), std::string::npos);
}

}  // namespace
}  // namespace pelab
