// pelab — our results side by side with the papers' (docs/experiments.md, "Against the
// literature"). A compare or suite config may carry a top-level `literature:` list; each entry
// names a paper, its setting, what its figures are, and either
//
//   * its figure per scheme (`theirs:` a map from OUR row names to THEIR numbers, with
//     `higher_is_better:`): the report ranks the schemes both have by their figure and by ours and
//     gives Kendall's τ-b between the two rankings, or
//   * one paired figure (`theirs:` a number with `pairs:` {with: without, ...}, e.g. Ruoss et
//     al.'s +12.0 points of the randomized encodings): the report gives our mean difference per
//     pair and over the pairs, with its 95 % t-interval.
//
//   literature:
//     - paper: "Press et al. 2022"
//       setting: "WikiText-103 LM, trained on L = 512, evaluated on longer inputs"
//       figure: "perplexity at 3512 tokens"
//       higher_is_better: false
//       theirs: {sinusoidal: 178.97, rope: 35.54, t5: 22.91, alibi: 18.40}
//       metric: perplexity          # ours (default: the report's primary metric / suite.metric)
//       length: 512                 # compare only: one test length (default: the mean over the
//                                   #   extrapolation lengths)
//     - paper: "Kazemnejad et al. 2023"
//       ...
//       statistic: mrr              # suites only: mean (default) | mrr (mean reciprocal rank
//                                   #   over the tasks)
//
// The section is read by the compare and suite loaders and never enters a run's config: changing
// it retrains and re-evaluates nothing. Its keys are described by literature_schema() (rendered
// into docs/config.md); mistakes are one ConfigError naming FILE:LINE.
#pragma once
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"
#include "train/study/report.h"

namespace YAML {
class Node;
}

namespace pelab {

struct LiteratureEntry {
  std::string paper, setting, figure;
  std::string where;  // FILE:LINE of the entry
  // Ranking form: our row name -> their figure (the number and its text as written), in the
  // order given; higher_is_better is the direction of THEIR figure.
  std::vector<std::pair<std::string, double>> theirs;
  std::vector<std::string> theirs_text;
  bool higher_is_better = true;
  // Gains form: their one figure and the pairs (with, without) whose difference it is.
  double gain = std::numeric_limits<double>::quiet_NaN();
  std::string gain_text;
  std::vector<std::pair<std::string, std::string>> pairs;
  // Which of our values: the metric ("" = the report's primary metric / suite.metric), one test
  // length (0 = each run's mean over the extrapolation lengths; compare only) and, in a suite,
  // "mean" (each seed's mean over the tasks) or "mrr" (the mean reciprocal rank over the tasks).
  std::string metric;
  int64_t length = 0;
  std::string statistic = "mean";
  // Suites, gains form: the per-task table counts the tasks where the `without` row fails, i.e.
  // its cell (mean over seeds, display units: % for accuracies) is below this.
  double fails_below = 90;
  bool gains() const { return !pairs.empty(); }
};

// What a `literature:` section is validated against.
struct LiteratureContext {
  bool suite = false;
  std::vector<std::string> rows;  // our row names: schemes and scheme+variant labels
  std::vector<int> lengths;       // the test lengths `length` may name (compare)
  std::string lengths_key;        // "task.test_lengths" / "task.lm_eval_lengths"
  std::string default_metric;     // the report's primary metric / suite.metric
  bool lm = false;                // the lm task (no exact match)
};

// The keys of one entry, for docs/config.md (section "literature[]").
std::vector<ConfigKey> literature_schema();
// Its section of docs/config.md: `pelab config-reference` passes it to config_reference_markdown().
ConfigReferenceSection literature_reference_section();

// Parses the `literature` node (a list of entries). Throws ConfigError naming FILE:LINE.
std::vector<LiteratureEntry> parse_literature(const YAML::Node& n, const std::string& source,
                                              const LiteratureContext& ctx);
// Kendall's τ-b between two rankings of the same n items (ties allowed on either side):
// (C − D) / sqrt((n0 − n1)(n0 − n2)), n0 = n(n−1)/2, n1 / n2 the pairs tied in x / in y.
// Undefined (tau NaN, `undefined` saying why) when n < 2 or one side ties everywhere.
struct KendallTau {
  double tau = std::numeric_limits<double>::quiet_NaN();
  int64_t n = 0;
  int64_t concordant = 0, discordant = 0, ties_x = 0, ties_y = 0;
  std::string undefined;  // "" when tau is defined
};
KendallTau kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);
// "τ-b = 0.40 (n = 5; 7 concordant, 3 discordant pairs)" or "τ-b undefined (n = 1: ...)".
std::string kendall_text(const KendallTau& k);

// Ranks, 1 = best in the given direction; values equal to within 1e-12 (relative) share the mean
// of the ranks they span (2.5 for two values tied at ranks 2 and 3).
std::vector<double> literature_ranks(const std::vector<double>& values, bool higher_is_better);
// Reciprocal ranks (1 = best); tied values share the mean of the reciprocals of the ranks they
// span (the expected reciprocal rank when the tie is broken at random).
std::vector<double> reciprocal_ranks(const std::vector<double>& values, bool higher_is_better);

// The mean difference and its 95 % t-interval (not clipped) of paired differences.
Stat difference_stat(const std::vector<double>& differences);

// The "Against the literature" section: markdown (without its heading) and literature.csv.
struct LiteratureSection {
  std::string markdown, csv;
};
// For a comparison's report: our values from the report's rows (per run, over seeds).
LiteratureSection literature_for_report(const std::vector<LiteratureEntry>& entries,
                                        const ReportInput& in);
// One task of a suite: its result rows and its unconverged policy.
struct LiteratureTask {
  std::string name;
  std::vector<ResultRow> rows;
  bool exclude_unconverged = false;
  std::set<std::string> cannot_learn;  // schemes declared expect: cannot_learn
};
// For a suite's summary: `metric` = suite.metric; n_seeds = compare.seeds.
LiteratureSection literature_for_suite(const std::vector<LiteratureEntry>& entries,
                                       const std::vector<LiteratureTask>& tasks,
                                       const std::string& metric, int64_t n_seeds);

}  // namespace pelab
