// The YAML sections of a config (the run config's sections, compare, suite, literature, and
// train.stop_when's sub-keys) read through one schema mechanism (train/config_schema.h): an
// unknown key, a value of the wrong type and a value out of range are each one line naming
// file:line and the key.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "train/config.h"
#include "train/study/compare.h"
#include "train/study/suite.h"
#include "tests/test_util.h"

using namespace pelab;

namespace {

// The message of the ConfigError `load` throws ("" when it throws none).
std::string config_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// tiny_compare_yaml's lines: 1-6 the run config, 7 "compare:", 8 title, 9 seeds, 10 schemes:,
// 11-12 rope and t5.
std::string compare_yaml(const std::string& extra_compare_lines) {
  return pelab::testing::tiny_compare_yaml("[3, 6]", 4) + "    - rope\n    - t5\n" +
         extra_compare_lines;
}

// The error of loading compare_yaml(extra) as c.yaml with --set `sets` ("" when none).
std::string compare_error(const std::string& extra, const std::vector<std::string>& sets = {}) {
  return config_error(
      [&] { (void)load_compare_string(compare_yaml(extra), "c.yaml", sets); });
}

void expect_one_line(const std::string& e, const std::string& at, const std::string& needle) {
  EXPECT_EQ(e.rfind(at, 0), 0u) << e;
  EXPECT_NE(e.find(needle), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(SectionSchema, RunConfigKeysNameFileAndLine) {
  auto load = [](const std::string& y) {
    return config_error([&] { (void)load_config_string(y, "run.yaml"); });
  };
  expect_one_line(load("train:\n  stepz: 5\n"), "run.yaml:2: ", "train.stepz");
  expect_one_line(load("train:\n  steps: many\n"), "run.yaml:2: ",
                  "train.steps: expected an integer, got 'many'");
  expect_one_line(load("train:\n  steps: 10\n  batch_size: 0\n"), "run.yaml:3: ",
                  "train.batch_size: 0 is out of range");
  // train.stop_when's sub-keys, through the same messages.
  expect_one_line(load("train:\n  eval_every: 2\n  stop_when:\n    metric: exact_match\n"
                       "    at_least: 0.9\n    patience: 0\n"),
                  "run.yaml:6: ", "train.stop_when.patience: 0 is out of range [1, inf)");
  expect_one_line(load("train:\n  stop_when: {metric: exact_match, at_lest: 0.9}\n"),
                  "run.yaml:2: ", "unknown sub-key 'at_lest'; did you mean 'at_least'?");
}

TEST(SectionSchema, CompareKeysNameFileAndLine) {
  expect_one_line(compare_error("  metrc: loss\n"), "c.yaml:13: ",
                  "unknown key 'compare.metrc'; did you mean 'compare.metric'?");
  expect_one_line(compare_error("  out: [a, b]\n"), "c.yaml:13: ",
                  "compare.out: expected a string, got a list");
  expect_one_line(compare_error("  metric: accuracy\n"), "c.yaml:13: ",
                  "compare.metric: 'accuracy' is not one of auto, exact_match");
  expect_one_line(compare_error("  jobs: 0\n"), "c.yaml:13: ", "compare.jobs must be an integer >= 1");
  expect_one_line(compare_error("  title: again\n"), "c.yaml:13: ",
                  "key 'compare.title' appears twice (first at line 8)");
  // --set goes through the same declarations.
  expect_one_line(compare_error("", {"compare.metric=accuracy"}), "--set compare.metric=accuracy: ",
                  "'accuracy' is not one of");
  expect_one_line(compare_error("", {"compare.colour=red"}), "--set compare.colour=red: ",
                  "unknown key 'compare.colour'");
  expect_one_line(compare_error("", {"compare.schemes=[rope]"}), "--set compare.schemes=[rope]: ",
                  "cannot be set from the command line");
  const CompareSpec ok = load_compare_string(
      compare_yaml("  eval_variants: [randpos]\n"), "c.yaml", {"compare.metric=loss"});
  EXPECT_EQ(ok.metric, "loss");
  ASSERT_EQ(ok.variants.size(), 1u);  // eval_variants: the older spelling of variants
}

TEST(SectionSchema, SuiteKeysNameFileAndLine) {
  auto load = [](const std::string& suite) {
    return config_error([&] { (void)load_suite_string(compare_yaml(suite), "s.yaml"); });
  };
  expect_one_line(load("suite:\n  tasks: [reverse]\n  titel: x\n"), "s.yaml:15: ",
                  "unknown key 'suite.titel'; did you mean 'suite.title'?");
  expect_one_line(load("suite:\n  metric: accuracy\n  tasks: [reverse]\n"), "s.yaml:14: ",
                  "suite.metric: 'accuracy' is not one of exact_match");
  expect_one_line(load("suite:\n  out: {a: b}\n  tasks: [reverse]\n"), "s.yaml:14: ",
                  "suite.out: expected a string, got a mapping");
}

// A list entry of compare.schemes, compare.variants or suite.tasks without a name, or with a name
// that is not one value: one line at the entry's file:line.
TEST(SectionSchema, ListEntriesNeedANameAtTheirLine) {
  expect_one_line(compare_error("    - {set: {pe.scheme: rope}}\n"), "c.yaml:13: ",
                  "compare.schemes[2] needs a name");
  expect_one_line(compare_error("    - {name: [a, b]}\n"), "c.yaml:13: ",
                  "compare.schemes[2] needs a name");
  expect_one_line(compare_error("  variants:\n    - {set: {eval.batch_size: 2}}\n"), "c.yaml:14: ",
                  "compare.variants[0] needs a name");
  const std::string e = config_error([&] {
    (void)load_suite_string(compare_yaml("suite:\n  tasks:\n    - reverse\n    - {set: {}}\n"),
                            "s.yaml");
  });
  expect_one_line(e, "s.yaml:16: ", "suite.tasks[1] needs a name");
}

TEST(SectionSchema, LiteratureKeysNameFileAndLine) {
  auto load = [](const std::string& lit) { return compare_error("literature:\n" + lit); };
  const std::string head = "  - paper: P\n    setting: S\n    figure: F\n";
  expect_one_line(load(head + "    higher_better: false\n"), "c.yaml:17: ",
                  "unknown key 'literature[0].higher_better'; did you mean "
                  "'literature[0].higher_is_better'?");
  expect_one_line(load(head + "    higher_is_better: maybe\n    theirs: {rope: 1, t5: 2}\n"),
                  "c.yaml:17: ", "literature[0].higher_is_better: expected true or false");
  expect_one_line(load(head + "    theirs: 12\n    pairs: {rope: t5}\n    fails_below: 150\n"),
                  "c.yaml:19: ", "literature[0].fails_below: 150 is out of range [0, 100]");
}

}  // namespace
