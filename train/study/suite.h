// pelab — benchmark suites (docs/experiments.md, "Suites"): one config runs a set of tasks ×
// schemes × seeds. It is a compare config (train/study/compare.h: base run config + `compare:` section
// with the schemes, seeds, variants) plus a `suite:` section listing the tasks:
//
//   suite:
//     title: "Delétang et al. tasks"   # optional
//     out: reports/suite_chomsky       # default reports/<config stem>; --out overrides
//     metric: exact_match              # summary metric: exact_match (default) | token_accuracy |
//                                      #   perplexity | loss
//     tasks:                           # a plain name means {name: X, set: {task.name: X}}
//       - parity_check
//       - {name: reverse_string, set: {task.name: reverse, task.num_symbols: 2}}
//       - {name: modular_arithmetic, set: {task.test_lengths: [21, 31, 41]}}  # task.name = name
//       - {name: even_pairs, cannot_learn: {none: "why"}}  # schemes unable to learn THIS task by
//                                      #   construction (as a scheme's expect: cannot_learn, per task)
//
// Each task is one comparison (run_compare) of the config with the task's `set:` overrides (then the
// command line's --set), written to <out>/<task>/ exactly as `pelab compare` writes a report (runs
// reused, resumed, trained --jobs at once in child processes; the children load
// <out>/<task>/compare.yaml, the config without its suite: block, with the same --set overrides).
// Then <out>/summary.md, summary.csv and summary.{png,dat,gp}: scheme × task, each cell the mean
// over seeds of each run's mean metric over the task's extrapolation lengths (test lengths
// longer than task.train_max_len), with the 95 % t-interval, † / ‡ as in the compare report, the
// best mean of each task in bold. A top-level `literature:` section (train/study/literature.h) adds the
// papers' tables to summary.md and <out>/literature.csv; the tasks' comparisons do not see it.
//
// Suite checks (one error naming FILE:LINE of the task entry, nothing trained): an unknown task
// (did-you-mean), any config error of a task's resolved config (e.g. a length the task cannot
// generate), a test length shorter than task.train_min_len (the summary averages the lengths
// outside the training range, which in a suite must be the longer ones), a task without a test
// length longer than task.train_max_len.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "train/study/compare.h"

namespace pelab {

struct SuiteTask {
  std::string name;               // the summary's column and the report subdirectory
  std::vector<std::string> sets;  // "section.key=value", task.name first
  std::string where;              // FILE:LINE of the entry
  CompareSpec spec;               // the resolved comparison (out = <suite out>/<name>)
};

struct SuiteSpec {
  std::string source, title, out;
  std::string metric = "exact_match";
  std::vector<SuiteTask> tasks;
  // The top-level `literature:` section (train/study/literature.h), for the summary; the tasks'
  // comparisons never see it.
  std::vector<LiteratureEntry> literature;
};

// The `suite:` section's keys for docs/config.md, as suite.cpp declares and reads them.
ConfigReferenceSection suite_reference_section();

// True when the file (text) has a top-level `suite:` key.
bool is_suite_config(const std::string& path);
bool is_suite_config_text(const std::string& yaml);

// Loads a suite config; `overrides` are the command line's --set (applied to every task, after
// the task's own settings). Throws ConfigError naming FILE:LINE.
SuiteSpec load_suite_string(const std::string& yaml, const std::string& source,
                            const std::vector<std::string>& overrides = {});
SuiteSpec load_suite(const std::string& path, const std::vector<std::string>& overrides = {});

// One cell of the summary.
struct SuiteCell {
  std::string task, label;
  Stat stat;
  std::string text;  // format_cell(...) with ‡ for schemes that cannot learn the task
  bool best = false;
};

struct SuiteSummary {
  std::vector<std::string> tasks, labels;
  std::vector<SuiteCell> cells;  // tasks × labels present
  std::string markdown, csv;
  std::string literature_csv;  // literature.csv ("" without a literature section)
};

// The summary table from each task's result rows (rows of CompareResult, in task order).
SuiteSummary suite_summary(const SuiteSpec& spec, const std::vector<std::vector<ResultRow>>& rows,
                           const std::vector<std::string>& report_paths, double wall_s,
                           const std::string& command);

struct SuiteResult {
  std::vector<CompareResult> results;  // per selected task
  bool interrupted = false;
  std::string summary_md, summary_csv, summary_png;  // "" when not written
  std::vector<std::string> missing;                  // report-only: runs not finished
  std::vector<std::string> refused;                  // --merge: records refused (one line each)
};

// Runs the tasks named in `tasks` (all when empty) with the compare options (opt.out = the suite's
// output directory, "" = suite.out). Writes the summary when every task ran and none was
// interrupted and opt.only is empty.
SuiteResult run_suite(const SuiteSpec& spec, const CompareOptions& opt,
                      const std::vector<std::string>& tasks = {});

// `pelab compare SUITE.yaml ...` (called by compare_cli): --task NAME[,NAME] selects tasks; --plan
// lists every task's runs; --only I needs exactly one task.
int suite_cli(const std::string& path, const std::vector<std::string>& sets, CompareOptions opt,
              bool plan_only, const std::string& tasks, std::ostream& out, std::ostream& err);

}  // namespace pelab
