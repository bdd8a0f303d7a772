// A suite task's `cannot_learn: {SCHEME: "why"}` (train/suite.h): the scheme is declared unable to
// learn THAT task by construction (a per-task `expect: cannot_learn`), so the summary and the
// task's report mark it ‡ there and only there; bad entries are one error naming the entry's line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/report.h"
#include "train/study/suite.h"

namespace pelab {
namespace {

std::string suite_yaml(const std::vector<std::string>& entries) {
  std::string y = pelab::testing::tiny_compare_yaml("[3, 6]", 4) +
                  "    - rope\n    - t5\nsuite:\n  out: /nonexistent/never_written\n  tasks:\n";
  for (const auto& e : entries) y += "    - " + e + "\n";
  return y;
}

std::string load_error(const std::vector<std::string>& entries) {
  try {
    (void)load_suite_string(suite_yaml(entries), "cfg.yaml");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

ResultRow row(const std::string& scheme, int64_t length, double em) {
  return pelab::testing::result_row(scheme, 1, length, 0, em, 1);
}

TEST(SuiteCannotLearn, MarksTheSchemeInThatTaskOnly) {
  const SuiteSpec spec = load_suite_string(
      suite_yaml({"{name: even_pairs, cannot_learn: {t5: \"no reason, a test\"}}", "parity_check"}),
      "cfg.yaml");
  ASSERT_EQ(spec.tasks.size(), 2u);
  const auto& a = spec.tasks[0].spec.schemes;
  const auto& b = spec.tasks[1].spec.schemes;
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0].cannot_learn);  // rope
  EXPECT_TRUE(a[1].cannot_learn);   // t5 in even_pairs
  EXPECT_EQ(a[1].why, "no reason, a test");
  EXPECT_FALSE(b[1].cannot_learn);  // t5 in parity_check: not declared
  const SuiteSummary s = suite_summary(
      spec, {{row("rope", 6, 0.5), row("t5", 6, 0.25)}, {row("rope", 6, 0.5), row("t5", 6, 0.25)}},
      {"a.md", "b.md"}, 0, "cmd");
  ASSERT_EQ(s.cells.size(), 4u);
  EXPECT_EQ(s.cells[1].task, "even_pairs");
  EXPECT_EQ(s.cells[1].text, "25.0 (n = 1) ‡");
  EXPECT_EQ(s.cells[3].task, "parity_check");
  EXPECT_EQ(s.cells[3].text, "25.0 (n = 1)");
  // The summary lists the reason under the table, for that task and scheme only.
  EXPECT_NE(s.markdown.find("‡ Declared unable to learn the task:\n\n"
                            "- t5 on even_pairs: no reason, a test\n"),
            std::string::npos)
      << s.markdown;
  EXPECT_EQ(s.markdown.find("on parity_check:"), std::string::npos);
}

TEST(SuiteCannotLearn, NoReasonListWithoutDeclarations) {
  const SuiteSpec spec = load_suite_string(suite_yaml({"even_pairs"}), "cfg.yaml");
  const SuiteSummary s =
      suite_summary(spec, {{row("rope", 6, 0.5), row("t5", 6, 0.25)}}, {"a.md"}, 0, "cmd");
  EXPECT_EQ(s.markdown.find("Declared unable to learn the task:"), std::string::npos);
}

TEST(SuiteCannotLearn, BadEntriesAreOneErrorAtTheirLine) {
  // The tasks: block starts after the tiny comparison; entry lines are found from the text.
  const std::vector<std::string> entries = {"parity_check",
                                            "{name: even_pairs, cannot_learn: {t6: \"x\"}}"};
  const std::string y = suite_yaml(entries);
  const int line = static_cast<int>(std::count(y.begin(), y.begin() + y.find("even_pairs"), '\n')) + 1;
  std::string e = load_error(entries);
  EXPECT_EQ(e.rfind("cfg.yaml:" + std::to_string(line) + ":", 0), 0u) << e;
  EXPECT_NE(e.find("'t6' is not a scheme of compare.schemes (rope, t5)"), std::string::npos) << e;
  e = load_error({"{name: even_pairs, cannot_learn: {t5: \"  \"}}"});
  EXPECT_NE(e.find("cannot_learn.t5: give the reason"), std::string::npos) << e;
  e = load_error({"{name: even_pairs, cannot_learn: [t5]}"});
  EXPECT_NE(e.find("cannot_learn must be a map"), std::string::npos) << e;
  e = load_error({"{name: even_pairs, cannot_lern: {t5: x}}"});
  EXPECT_NE(e.find("unknown key 'cannot_lern'; did you mean 'cannot_learn'? (valid: name, set, "
                   "cannot_learn)"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace pelab
