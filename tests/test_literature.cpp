// Tests of the `literature:` section (train/study/literature.h): Kendall's τ-b and the ranks against
// hand-computed examples, the gain interval against a hand computation, the section built from
// hand-made result rows (compare and suite, MRR, † rows), config errors (one line with FILE:LINE,
// nothing trained), the section kept out of the runs' configs, and a report-only run on a tiny
// finished comparison that writes the section and literature.csv with the expected τ.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/compare.h"
#include "train/config.h"
#include "train/study/literature.h"
#include "train/study/report.h"
#include "train/study/suite.h"

namespace pelab {
namespace {

namespace fs = std::filesystem;
using pelab::testing::slurp;

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// ---------------- τ-b, ranks, the gain interval ----------------

TEST(LiteratureKendall, NoTiesOneSwapIsTwoThirds) {
  // Pairs of (1,2,3,4) vs (1,3,2,4): only (2,3) is discordant: C = 5, D = 1, τ = 4/6.
  const KendallTau k = kendall_tau_b({1, 2, 3, 4}, {1, 3, 2, 4});
  EXPECT_EQ(k.n, 4);
  EXPECT_EQ(k.concordant, 5);
  EXPECT_EQ(k.discordant, 1);
  EXPECT_NEAR(k.tau, 4.0 / 6.0, 1e-15);
  EXPECT_EQ(kendall_text(k), "τ-b = 0.67 (n = 4; 5 concordant, 1 discordant pairs)");
}

TEST(LiteratureKendall, KazemnejadOrderAgainstOursIsPointFour) {
  // Theirs NoPE > T5 > ALiBi > RoPE > APE; ours NoPE > RoPE > ALiBi > T5 > APE: the pairs
  // (T5, ALiBi), (T5, RoPE), (ALiBi, RoPE) are discordant: (7 − 3) / 10.
  const KendallTau k = kendall_tau_b({1, 2, 3, 4, 5}, {1, 4, 3, 2, 5});
  EXPECT_EQ(k.concordant, 7);
  EXPECT_EQ(k.discordant, 3);
  EXPECT_NEAR(k.tau, 0.4, 1e-15);
}

TEST(LiteratureKendall, TiesOnOneSideUseTauB) {
  // x = (1, 2, 3), y = (1, 1, 2): C = 2, D = 0, one pair tied in y: 2 / sqrt(3 · 2).
  const KendallTau k = kendall_tau_b({1, 2, 3}, {1, 1, 2});
  EXPECT_EQ(k.ties_x, 0);
  EXPECT_EQ(k.ties_y, 1);
  EXPECT_NEAR(k.tau, 2.0 / std::sqrt(6.0), 1e-15);
  EXPECT_TRUE(has(kendall_text(k), "tied pairs: theirs 0, ours 1")) << kendall_text(k);
  // Ties on both sides: x = (1, 1, 2, 3), y = (1, 2, 2, 3): C = 4, D = 0, n1 = n2 = 1:
  // 4 / sqrt(5 · 5).
  EXPECT_NEAR(kendall_tau_b({1, 1, 2, 3}, {1, 2, 2, 3}).tau, 0.8, 1e-15);
}

TEST(LiteratureKendall, ReversedIsMinusOneSameIsOne) {
  EXPECT_DOUBLE_EQ(kendall_tau_b({1, 2, 3, 4, 5}, {5, 4, 3, 2, 1}).tau, -1.0);
  EXPECT_DOUBLE_EQ(kendall_tau_b({1, 2, 3}, {10, 20, 30}).tau, 1.0);
  EXPECT_EQ(kendall_text(kendall_tau_b({1, 2}, {2, 1})),
            "τ-b = -1.00 (n = 2; 0 concordant, 1 discordant pairs)");
}

TEST(LiteratureKendall, FewerThanTwoOrAllTiedIsUndefinedNotNaN) {
  for (const auto& x : std::vector<std::vector<double>>{{}, {3}}) {
    const KendallTau k = kendall_tau_b(x, x);
    EXPECT_TRUE(std::isnan(k.tau));
    const std::string t = kendall_text(k);
    EXPECT_EQ(t.rfind("τ-b undefined (n = " + std::to_string(x.size()) +
                          ": at least 2 schemes in common are needed)",
                      0),
              0u)
        << t;
    EXPECT_FALSE(has(t, "nan")) << t;
  }
  const KendallTau tied = kendall_tau_b({1, 2, 3}, {0, 0, 0});
  EXPECT_TRUE(std::isnan(tied.tau));
  EXPECT_EQ(kendall_text(tied),
            "τ-b undefined (n = 3: our values all tie, so there is no order to compare)");
}

TEST(LiteratureRanks, TiesShareTheMeanRankAndTheMeanReciprocal) {
  EXPECT_EQ(literature_ranks({0.0, 0.0, 0.5, 1.0}, true), (std::vector<double>{3.5, 3.5, 2, 1}));
  EXPECT_EQ(literature_ranks({178.97, 35.54, 22.91, 18.40}, false),
            (std::vector<double>{4, 3, 2, 1}));
  // Equal to within 1e-12 relative (means of the same counts computed in another order) tie.
  EXPECT_EQ(literature_ranks({0.2, 0.1 + 0.1, 0.3}, true), (std::vector<double>{2.5, 2.5, 1}));
  const std::vector<double> rr = reciprocal_ranks({1.0, 1.0, 0.0}, true);
  EXPECT_DOUBLE_EQ(rr[0], 0.75);  // ranks 1 and 2 shared: (1 + 1/2) / 2
  EXPECT_DOUBLE_EQ(rr[1], 0.75);
  EXPECT_DOUBLE_EQ(rr[2], 1.0 / 3.0);
}

TEST(LiteratureGain, IntervalMatchesAHandComputation) {
  // Differences 20, 20, −20 points: mean 6.667, s = sqrt(1066.67 / 2) = 23.094,
  // half-width t(0.975, 2) · s / √3 = 4.302653 · 13.3333 = 57.369.
  const Stat s = difference_stat({20, 20, -20});
  EXPECT_NEAR(s.mean, 20.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.std, std::sqrt(1600.0 / 3.0), 1e-12);
  EXPECT_NEAR(s.half, 4.302653 * std::sqrt(1600.0 / 3.0) / std::sqrt(3.0), 1e-4);
  EXPECT_NEAR(s.ci_low, -50.702, 1e-3);  // not clipped at 0
  EXPECT_NEAR(s.ci_high, 64.036, 1e-3);
  EXPECT_FALSE(s.clipped);
  EXPECT_EQ(difference_stat({5}).n, 1);
  EXPECT_TRUE(std::isnan(difference_stat({5}).ci_low));
}

// ---------------- the section from hand-made rows ----------------

ResultRow row(const std::string& scheme, int64_t seed, int64_t length, int in_dist, double em,
              int converged = -1) {
  return pelab::testing::result_row(scheme, seed, length, in_dist, em, converged);
}

LiteratureEntry kazemnejad() {
  LiteratureEntry e;
  e.paper = "Kazemnejad et al. 2023";
  e.setting = "decoder-only";
  e.figure = "mean reciprocal rank";
  e.theirs = {{"none", 0.69}, {"t5", 0.55}, {"alibi", 0.50}, {"rope", 0.33}, {"sinusoidal", 0.22}};
  e.theirs_text = {"0.69", "0.55", "0.50", "0.33", "0.22"};
  e.higher_is_better = true;
  e.metric = "exact_match";
  return e;
}

TEST(LiteratureSection, CompareRanksTiesAndFlagsUnconvergedRows) {
  ReportInput in;
  in.seeds = {1, 2};
  in.primary_metric = "exact_match";
  // Extrapolation means per seed: none 1.0 / 1.0, rope 0.8 / 0.6, t5 0.1 / 0.3 (seed 2 missed its
  // criterion), alibi 0 / 0, sinusoidal 0 / 0 (a tie with alibi); length 4 is in-distribution.
  for (int64_t s : {1, 2}) {
    in.rows.push_back(row("none", s, 4, 1, 1.0, 1));
    in.rows.push_back(row("none", s, 8, 0, 1.0, 1));
    in.rows.push_back(row("rope", s, 8, 0, s == 1 ? 0.8 : 0.6, 1));
    in.rows.push_back(row("t5", s, 8, 0, s == 1 ? 0.1 : 0.3, s == 1 ? 1 : 0));
    in.rows.push_back(row("alibi", s, 8, 0, 0.0, 1));
    in.rows.push_back(row("sinusoidal", s, 8, 0, 0.0, 1));
  }
  const LiteratureSection sec = literature_for_report({kazemnejad()}, in);
  // Ours: none 1, rope 2, t5 3, alibi = sinusoidal 4.5. Theirs 1..5 as listed.
  // Pairs (theirs, ours): all concordant except (t5, rope) and (alibi, rope); (alibi, sinusoidal)
  // is tied in ours: C = 7, D = 2, n1 = 0, n2 = 1: 5 / sqrt(10 · 9).
  const std::string md = sec.markdown;
  EXPECT_TRUE(has(md, "| none | 0.69 | 100.0 [100.0, 100.0] (n = 2) | 1 | 1 |")) << md;
  EXPECT_TRUE(has(md, "| t5 | 0.55 | 20.0 [0.0, 100.0] (n = 2) † | 2 | 3 |")) << md;
  EXPECT_TRUE(has(md, "| alibi | 0.50 | 0.0 [0.0, 0.0] (n = 2) | 3 | 4.5 |")) << md;
  EXPECT_TRUE(has(md, "| sinusoidal | 0.22 | 0.0 [0.0, 0.0] (n = 2) | 5 | 4.5 |")) << md;
  char want[160];
  std::snprintf(want, sizeof want, "Kendall's τ-b = %.2f (n = 5; 7 concordant, 2 discordant pairs",
                5.0 / std::sqrt(90.0));
  EXPECT_TRUE(has(md, want)) << md;
  // Without the † row (t5): none 1, alibi 3 / 3.5, rope 4 / 2, sinusoidal 5 / 3.5: C = 4, D = 1,
  // one tie in ours: 3 / sqrt(6 · 5).
  std::snprintf(want, sizeof want,
                "over the rows without † only (leaving out t5): τ-b = %.2f (n = 4; 4 concordant, "
                "1 discordant pairs",
                3.0 / std::sqrt(30.0));
  EXPECT_TRUE(has(md, want)) << md;
  EXPECT_TRUE(has(sec.csv, "Kazemnejad et al. 2023,tau_b_converged,")) << sec.csv;
  EXPECT_TRUE(has(sec.csv, "Kazemnejad et al. 2023,rank,t5,0.55,20")) << sec.csv;
  // A scheme with no value of ours (learned: n/a past its table) is listed, not ranked; with one
  // scheme left in common τ-b is undefined and says so.
  LiteratureEntry two = kazemnejad();
  two.theirs = {{"none", 0.69}, {"learned", 0.22}};
  two.theirs_text = {"0.69", "0.22"};
  ResultRow na = row("learned", 1, 8, 0, std::nan(""));
  na.status = "n/a (> max_positions)";
  in.rows.push_back(na);
  const std::string one = literature_for_report({two}, in).markdown;
  EXPECT_TRUE(has(one, "| learned | 0.22 | – | – | – |")) << one;
  EXPECT_TRUE(has(one, "Not ranked (no value of ours): learned.")) << one;
  EXPECT_TRUE(has(one, "Kendall's τ-b undefined (n = 1: at least 2 schemes in common are needed)"))
      << one;
  EXPECT_FALSE(has(one, "nan")) << one;
  // compare.unconverged: exclude leaves t5's seed 2 out of its value (n = 1).
  in.unconverged = "exclude";
  const std::string ex = literature_for_report({kazemnejad()}, in).markdown;
  EXPECT_TRUE(has(ex, "| t5 | 0.55 | 10.0 (n = 1) | 2 | 3 |")) << ex;
}

TEST(LiteratureSection, CompareGainsArePairedBySeedAtOneLength) {
  ReportInput in;
  in.seeds = {1, 2, 3};
  in.primary_metric = "exact_match";
  const double rope[] = {0.8, 0.6, 1.0}, rand[] = {1.0, 0.8, 0.8};
  for (int64_t s = 1; s <= 3; ++s) {
    in.rows.push_back(row("rope", s, 12, 0, rope[s - 1]));
    in.rows.push_back(row("rope+rand", s, 12, 0, rand[s - 1]));
    in.rows.push_back(row("rope", s, 16, 0, 0.0));  // not counted: the entry names length 12
    in.rows.push_back(row("rope+rand", s, 16, 0, 0.0));
  }
  LiteratureEntry e;
  e.paper = "Ruoss et al. 2023";
  e.setting = "15 tasks";
  e.figure = "mean gain";
  e.gain = 12.0;
  e.gain_text = "+12.0";
  e.pairs = {{"rope+rand", "rope"}};
  e.metric = "exact_match";
  e.length = 12;
  const LiteratureSection sec = literature_for_report({e}, in);
  // Differences 20, 20, −20 points (see IntervalMatchesAHandComputation).
  EXPECT_TRUE(has(sec.markdown, "| rope+rand − rope | +12.0 | +6.7 [-50.7, +64.0] (n = 3) |"))
      << sec.markdown;
  EXPECT_TRUE(has(sec.markdown, "exact match (%) at length 12")) << sec.markdown;
  EXPECT_TRUE(has(sec.csv, "Ruoss et al. 2023,gain,rope+rand - rope,+12.0,6.66666")) << sec.csv;
  EXPECT_TRUE(has(sec.csv, ",3,seeds,points,")) << sec.csv;
}

// ---------------- configs ----------------

class LiteratureConfig : public pelab::testing::TempDirTest {
 protected:
  LiteratureConfig() : TempDirTest("pelab_literature") {}
  // The tiny comparison (rope, t5, none; seeds 1 and 2; test lengths 3 and 6, trained on 1-4)
  // with a literature section; literature_line_ is the line of its first entry.
  std::string yaml(const std::string& literature, int steps = 4) {
    std::string y = pelab::testing::tiny_compare_yaml("[3, 6]", steps) +
                    "    - rope\n    - t5\n    - none\n  out: " + (dir_ / "out").string() +
                    "\nliterature:\n";
    literature_line_ = static_cast<int>(std::count(y.begin(), y.end(), '\n')) + 1;
    return y + literature;
  }
  // A tiny suite of the given schemes ("    - rope\n...") over the given tasks ("    - parity_check\n
  // ..."), written to <dir>/suite, with a literature section.
  std::string suite_yaml(const std::string& schemes, const std::string& tasks,
                         const std::string& literature) {
    return pelab::testing::tiny_compare_yaml("[3, 6]", 4) + schemes + "suite:\n  out: " +
           (dir_ / "suite").string() + "\n  tasks:\n" + tasks + "literature:\n" + literature;
  }
  std::string load_error(const std::string& literature) {
    return error_text([&] { (void)load_compare_string(yaml(literature), "cfg.yaml"); });
  }
  std::string at(int offset) const {
    return "cfg.yaml:" + std::to_string(literature_line_ + offset) + ": ";
  }
  int literature_line_ = 0;
};

const char* kGood =
    "  - paper: \"Kazemnejad et al. 2023\"\n"
    "    setting: \"decoder-only\"\n"
    "    figure: \"mean reciprocal rank\"\n"
    "    higher_is_better: true\n"
    "    theirs: {none: 0.69, t5: 0.55, rope: 0.33}\n"
    "  - paper: \"pair\"\n"
    "    setting: \"test\"\n"
    "    figure: \"gain\"\n"
    "    theirs: 12.0\n"
    "    pairs: {rope: t5}\n";

TEST_F(LiteratureConfig, ParsesBothFormsWithDefaults) {
  const CompareSpec spec = load_compare_string(yaml(kGood), "cfg.yaml");
  ASSERT_EQ(spec.literature.size(), 2u);
  const LiteratureEntry& k = spec.literature[0];
  EXPECT_EQ(k.paper, "Kazemnejad et al. 2023");
  EXPECT_EQ(k.metric, "exact_match");  // the comparison's primary metric
  EXPECT_EQ(k.length, 0);
  ASSERT_EQ(k.theirs.size(), 3u);
  EXPECT_EQ(k.theirs[2].first, "rope");
  EXPECT_DOUBLE_EQ(k.theirs[2].second, 0.33);
  EXPECT_EQ(k.theirs_text[0], "0.69");
  EXPECT_TRUE(spec.literature[1].gains());
  EXPECT_EQ(spec.literature[1].gain_text, "+12.0");
  EXPECT_EQ(spec.literature[1].where, at(5).substr(0, at(5).size() - 2));
}

TEST_F(LiteratureConfig, BadEntriesAreOneLineWithFileAndLine) {
  auto check = [&](const std::string& lit, int line, const std::string& needle) {
    const std::string e = load_error(lit);
    EXPECT_EQ(e.rfind(at(line), 0), 0u) << e;
    EXPECT_TRUE(has(e, needle)) << e;
    EXPECT_FALSE(has(e, "\n")) << e;
  };
  const std::string head =
      "  - paper: P\n    setting: S\n    figure: F\n    higher_is_better: false\n";
  // An unknown scheme name in the map, with a did-you-mean.
  check(head + "    theirs: {rope: 1, t5: 2,\n             rpoe: 3}\n", 5,
        "literature[0] (P).theirs: 'rpoe' is not a row of this comparison; did you mean 'rope'?");
  // A length that is not a test length.
  check(head + "    theirs: {rope: 1, t5: 2}\n    length: 5\n", 5,
        "literature[0] (P).length: 5 is not a test length (task.test_lengths: [3, 6])");
  // A bad metric.
  check(head + "    theirs: {rope: 1, t5: 2}\n    metric: exact_mach\n", 5,
        "'exact_mach' is not one of exact_match, token_accuracy, perplexity, loss; did you mean "
        "'exact_match'?");
  // An unknown key.
  check("  - paper: P\n    setting: S\n    figure: F\n    higher_better: false\n", 3,
        "unknown key 'literature[0].higher_better'; did you mean "
        "'literature[0].higher_is_better'?");
  // The ranking form needs the direction; the gains form needs pairs; suites-only keys.
  check("  - paper: P\n    setting: S\n    figure: F\n    theirs: {rope: 1, t5: 2}\n", 0,
        "higher_is_better is missing");
  check("  - paper: P\n    setting: S\n    figure: F\n    theirs: 12\n", 3,
        "theirs as one number needs pairs");
  check(head + "    theirs: {rope: 1, t5: 2}\n    statistic: mrr\n", 5,
        "statistic is for suites");
  check("  - paper: P\n    setting: S\n    figure: F\n    theirs: 12\n    pairs: {rope: tt5}\n", 4,
        "'tt5' is not a row of this comparison; did you mean 't5'?");
  check("  - paper: P\n    setting: S\n    theirs: 12\n", 0, "figure is missing");
}

TEST_F(LiteratureConfig, BadEntryTrainsNothing) {
  const std::string path = write("bad.yaml", yaml("  - paper: P\n    setting: S\n    figure: F\n"
                                                  "    higher_is_better: true\n"
                                                  "    theirs: {rope: 1, nope: 2}\n"));
  std::ostringstream out, err;
  const std::string e =
      error_text([&] { (void)compare_cli({"compare", path, "--jobs", "1"}, out, err); });
  EXPECT_TRUE(has(e, path + ":" + std::to_string(literature_line_ + 4) + ": ")) << e;
  EXPECT_TRUE(has(e, "'nope' is not a row")) << e;
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "something was trained or written";
  // Nor can --set reach the section.
  EXPECT_TRUE(has(error_text([&] {
                    (void)load_compare_string(yaml(kGood), "cfg.yaml", {"literature.x=1"});
                  }),
                  "--set literature.x=1: the literature section cannot be set"));
}

TEST_F(LiteratureConfig, SectionIsNotPartOfAnyRun) {
  const CompareSpec with = load_compare_string(yaml(kGood), "cfg.yaml");
  const CompareSpec without = load_compare_string(
      pelab::testing::tiny_compare_yaml("[3, 6]", 4) + "    - rope\n    - t5\n    - none\n  out: " +
          (dir_ / "out").string() + "\n",
      "cfg.yaml");
  EXPECT_TRUE(without.literature.empty());
  EXPECT_EQ(config_to_yaml(with.base), config_to_yaml(without.base));
  // The plan (run names, config digests) is the same with and without the section.
  const std::string out = (dir_ / "plan").string();
  EXPECT_EQ(compare_plan_text(with, out), compare_plan_text(without, out));
}

TEST_F(LiteratureConfig, ReferenceDocumentsEveryKey) {
  const std::string md = config_reference_markdown({literature_reference_section()});
  EXPECT_TRUE(has(md, "## `literature` (compare and suite configs)"));
  for (const auto& k : literature_schema())
    EXPECT_TRUE(has(md, "| `literature[]." + k.name + "` | ")) << k.name;
}

// ---------------- suites ----------------

TEST_F(LiteratureConfig, SuiteMeanMrrAndGainsOverTasks) {
  const std::string y = suite_yaml("    - rope\n    - t5\n    - none\n",
                                "    - parity_check\n    - {name: rev, set: {task.name: reverse}}\n",
                                "  - {paper: K, setting: S, figure: MRR, higher_is_better: true,\n"
                                "     theirs: {none: 0.69, t5: 0.55, rope: 0.33}, statistic: mrr}\n"
                                "  - {paper: M, setting: S, figure: F, higher_is_better: true,\n"
                                "     theirs: {none: 3, t5: 2, rope: 1}}\n"
                                "  - {paper: G, setting: S, figure: F, theirs: 12.0, pairs: {rope: t5}}\n");
  const SuiteSpec spec = load_suite_string(y, "suite.yaml");
  ASSERT_EQ(spec.literature.size(), 3u);
  // The tasks' comparisons do not see the section.
  EXPECT_TRUE(spec.tasks[0].spec.literature.empty());
  // Task A: none 1.0, t5 0.5, rope 0.5 (t5 and rope tie); task B: rope 0.8, none 0.2, t5 0.0.
  std::vector<ResultRow> a, b;
  for (int64_t s : {1, 2}) {
    a.push_back(row("none", s, 6, 0, 1.0));
    a.push_back(row("t5", s, 6, 0, 0.5));
    a.push_back(row("rope", s, 6, 0, 0.5));
    b.push_back(row("rope", s, 6, 0, 0.8));
    b.push_back(row("none", s, 6, 0, 0.2));
    b.push_back(row("t5", s, 6, 0, 0.0));
  }
  const SuiteSummary sum = suite_summary(spec, {a, b}, {"a.md", "b.md"}, 1.0, "cmd");
  const std::string& md = sum.markdown;
  ASSERT_TRUE(has(md, "## Against the literature")) << md;
  // MRR: none (1 + 1/2) / 2 = 0.75; rope ((1/2 + 1/3) / 2 + 1) / 2 = 0.708; t5 0.375. Their
  // order none > t5 > rope, ours none > rope > t5: (2 − 1) / 3.
  EXPECT_TRUE(has(md, "| none | 0.69 | 0.75 [")) << md;
  EXPECT_TRUE(has(md, "| rope | 0.33 | 0.71 [")) << md;
  EXPECT_TRUE(has(md, "(n = 2) | 3 | 2 |")) << md;
  EXPECT_TRUE(has(md, "τ-b = 0.33 (n = 3; 2 concordant, 1 discordant pairs)")) << md;
  // Per-task ranks (their order of rows; t5 and rope tie at task A: 2.5 each).
  EXPECT_TRUE(has(md, "| scheme | parity_check | rev |\n|---|---:|---:|\n| none | 1 | 2 |\n"
                      "| t5 | 2.5 | 3 |\n| rope | 2.5 | 1 |\n")) << md;
  EXPECT_TRUE(has(sum.literature_csv, "K,task_rank,parity_check: t5,,2.5,,,,,rank,,,,\n"))
      << sum.literature_csv;
  // Mean over tasks per seed: none 60.0, rope 65.0, t5 25.0.
  EXPECT_TRUE(has(md, "| none | 3 | 60.0 [60.0, 60.0] (n = 2) | 1 | 2 |")) << md;
  EXPECT_TRUE(has(md, "| rope | 1 | 65.0 [65.0, 65.0] (n = 2) | 3 | 1 |")) << md;
  // Gains over tasks: rope − t5 = 0 and 80 points.
  EXPECT_TRUE(has(md, "| rope − t5 | +12.0 | +40.0 [")) << md;
  EXPECT_TRUE(has(md, "(n = 2) |")) << md;
  EXPECT_TRUE(has(sum.literature_csv, "G,gain,rope - t5,+12.0,40.0,")) << sum.literature_csv;
  EXPECT_TRUE(has(sum.literature_csv, ",2,tasks,points,")) << sum.literature_csv;

  // A real (tiny) suite run writes the section into summary.md and <out>/literature.csv.
  CompareOptions opt;
  opt.plots = false;
  opt.jobs = 1;
  opt.progress = 2;
  std::ostringstream log;
  opt.log = &log;
  const SuiteResult run = run_suite(spec, opt);
  ASSERT_FALSE(run.summary_md.empty());
  EXPECT_TRUE(has(slurp(run.summary_md), "### K\n")) << slurp(run.summary_md);
  EXPECT_TRUE(has(slurp(dir_ / "suite" / "literature.csv"), "K,tau_b,all rows,"));
  EXPECT_FALSE(fs::exists(dir_ / "suite" / "parity_check" / "literature.csv"));
  EXPECT_FALSE(has(slurp(dir_ / "suite" / "parity_check" / "report.md"), "Against the literature"));

  // Suite-only and compare-only keys.
  const std::string bad = error_text([&] {
    (void)load_suite_string(y + "  - {paper: L, setting: S, figure: F, higher_is_better: true,\n"
                                "     theirs: {none: 1, t5: 2}, length: 6}\n",
                            "suite.yaml");
  });
  EXPECT_TRUE(has(bad, "length: a suite ranks by each task's mean")) << bad;
  EXPECT_EQ(bad.rfind("suite.yaml:", 0), 0u) << bad;
}

// The MRR entry also names the pairs of schemes our data resolves (the paired difference of
// reciprocal ranks over the tasks excludes 0) and the agreement with their order over those.
TEST_F(LiteratureConfig, SuiteMrrNamesThePairsOurDataResolves) {
  const std::string y = suite_yaml("    - rope\n    - t5\n    - none\n",
                                "    - parity_check\n    - {name: rev, set: {task.name: reverse}}\n"
                                "    - {name: rev2, set: {task.name: reverse}}\n",
                                "  - {paper: K, setting: S, figure: MRR, higher_is_better: true,\n"
                                "     theirs: {none: 0.69, t5: 0.55, rope: 0.33}, statistic: mrr}\n");
  const SuiteSpec spec = load_suite_string(y, "suite.yaml");
  // none first at every task; t5 above rope at two tasks, below at one: none − t5 and none −
  // rope are resolved (1/2, 1/2, 2/3 and 2/3, 2/3, 1/2), t5 − rope (1/6, 1/6, −1/6) is not.
  std::vector<std::vector<ResultRow>> rows(3);
  for (int64_t s : {1, 2}) {
    for (size_t t = 0; t < 3; ++t) {
      rows[t].push_back(row("none", s, 6, 0, 1.0));
      rows[t].push_back(row("t5", s, 6, 0, t < 2 ? 0.5 : 0.0));
      rows[t].push_back(row("rope", s, 6, 0, t < 2 ? 0.0 : 0.5));
    }
  }
  const SuiteSummary sum = suite_summary(spec, rows, {"a.md", "b.md", "c.md"}, 1.0, "cmd");
  const std::string& md = sum.markdown;
  EXPECT_TRUE(has(md, "Pairs our data resolves: of the 3 pairs of schemes, those whose paired "
                      "difference of reciprocal ranks over the tasks has a 95 % t-interval "
                      "excluding 0: 2 (none > t5 (+0.56 [")) << md;
  EXPECT_TRUE(has(md, "none > rope (+0.61 [")) << md;
  EXPECT_TRUE(has(md, "= 1.00 (2 concordant, 0 discordant)")) << md;
  EXPECT_TRUE(has(sum.literature_csv, "K,tau_resolved_pairs,pairs resolved at our scale,,1.0,,,2,"))
      << sum.literature_csv;
}

// Per task: with − without and its Welch interval; the tasks where `without` fails (below
// fails_below) and the gain's interval is above 0 are counted.
TEST_F(LiteratureConfig, SuitePerTaskGainsUseWelchAndCountTheTasksWhereWithoutFails) {
  const std::string y = suite_yaml("    - rope\n    - t5\n",
                                "    - parity_check\n    - {name: rev, set: {task.name: reverse}}\n",
                                "  - {paper: G, setting: S, figure: F, theirs: 12.0, pairs: {rope: t5},\n"
                                "     fails_below: 50}\n");
  const SuiteSpec spec = load_suite_string(y, "suite.yaml");
  ASSERT_EQ(spec.literature.size(), 1u);
  EXPECT_DOUBLE_EQ(spec.literature[0].fails_below, 50.0);
  // Task A: t5 0, 10, 20 % (fails), rope 50, 60, 70 %: +50 points; each side's variance of the
  // mean 100/3, so se = sqrt(200/3) = 8.165, Welch df = 4, t = 2.7764: half-width 22.67.
  // Task B: both 90 % in every seed: +0 with no spread, interval [0, 0], t5 does not fail.
  std::vector<ResultRow> a, b;
  for (int64_t s : {1, 2, 3}) {
    a.push_back(row("t5", s, 6, 0, 0.1 * static_cast<double>(s - 1)));
    a.push_back(row("rope", s, 6, 0, 0.5 + 0.1 * static_cast<double>(s - 1)));
    b.push_back(row("t5", s, 6, 0, 0.9));
    b.push_back(row("rope", s, 6, 0, 0.9));
  }
  const SuiteSummary sum = suite_summary(spec, {a, b}, {"a.md", "b.md"}, 1.0, "cmd");
  const std::string& md = sum.markdown;
  EXPECT_TRUE(has(md, "| task | t5 | rope − t5 |")) << md;
  EXPECT_TRUE(has(md, "| parity_check | 10.0 | **+50.0 [+27.3, +72.7]** |")) << md;
  EXPECT_TRUE(has(md, "| rev | 90.0 | +0.0 [+0.0, +0.0] |")) << md;
  EXPECT_TRUE(has(md, "- rope − t5: positive with the interval above 0 on 1 of 2 tasks; on 1 of "
                      "the 1 tasks where t5 fails (below 50 %).")) << md;
  EXPECT_TRUE(has(sum.literature_csv, "G,task_gain,parity_check: rope - t5,,50.0,27.33"))
      << sum.literature_csv;
  EXPECT_TRUE(has(sum.literature_csv, "G,tasks_won_where_fails,rope - t5,,1.0,,,1,tasks,"))
      << sum.literature_csv;

  // With compare.unconverged: exclude, a run that missed its criterion leaves the per-task gain:
  // t5's seed 3 (20 %) unconverged at task A gives t5 5.0 (n = 2) and rope − t5 +55.0.
  SuiteSpec ex = spec;
  for (auto& t : ex.tasks) t.spec.unconverged = "exclude";
  std::vector<ResultRow> a2 = a;
  for (auto& r : a2)
    if (r.scheme == "t5") r.converged = r.seed == 3 ? Converged::no : Converged::yes;
  const std::string md2 = suite_summary(ex, {a2, b}, {"a.md", "b.md"}, 1.0, "cmd").markdown;
  EXPECT_TRUE(has(md2, "| parity_check | 5.0 | **+55.0 [")) << md2;

  // fails_below is for suites' gains on an accuracy metric, in [0, 100].
  auto bad = [&](const std::string& extra, const std::string& needle) {
    const std::string e = error_text([&] {
      (void)load_suite_string(suite_yaml("    - rope\n    - t5\n", "    - parity_check\n",
                                         "  - {paper: G, setting: S, figure: F, " + extra + "}\n"),
                              "suite.yaml");
    });
    EXPECT_EQ(e.rfind("suite.yaml:", 0), 0u) << e;
    EXPECT_TRUE(has(e, needle)) << e;
  };
  bad("theirs: 12.0, pairs: {rope: t5}, fails_below: 150",
      "literature[0].fails_below: 150 is out of range [0, 100]");
  bad("higher_is_better: true, theirs: {rope: 1, t5: 2}, fails_below: 50",
      "fails_below is for suites with pairs");
  bad("theirs: 12.0, pairs: {rope: t5}, metric: loss, fails_below: 50",
      "fails_below is for suites with pairs");
  EXPECT_TRUE(has(load_error("  - {paper: G, setting: S, figure: F, theirs: 12.0, pairs: {rope: "
                             "t5}, fails_below: 50}\n"),
                  "fails_below is for suites with pairs"));
}

// ---------------- a report-only run on a tiny finished comparison ----------------

// Sets exact match at `length` in a run's cached evaluation (compare_eval/base.csv), keeping the
// cache's key, and in the run's own evaluation (eval.json), which a cached number must agree with
// (compare accepts no cache that differs), so that the report reads known values.
void set_cached_exact_match(const fs::path& run_dir, int64_t length, double em) {
  {
    const fs::path p = run_dir / "eval.json";
    std::istringstream in(slurp(p));
    std::string out;
    for (std::string line; std::getline(in, line);) {
      std::string t = line;
      const bool comma = !t.empty() && t.back() == ',';
      if (comma) t.pop_back();
      const size_t b = t.find("{\"split\"");
      if (b != std::string::npos) {
        MetricRow row = parse_metric_row(t.substr(b), p.string());
        const MetricValue* len = row.get("length");
        if (len && len->kind == MetricValue::Kind::Int && len->i == length) {
          row.set("exact_match", em);
          line = t.substr(0, b) + row.json() + (comma ? "," : "");
        }
      }
      out += line + "\n";
    }
    pelab::testing::write_file(p, out);
  }
  const fs::path cache = run_dir / "compare_eval" / "base.csv";
  const std::string text = slurp(cache);
  const size_t nl = text.find('\n');
  ASSERT_NE(nl, std::string::npos);
  std::vector<ResultRow> rows = parse_results_csv(text.substr(nl + 1), cache.string());
  bool found = false;
  for (auto& r : rows)
    if (r.length == length) {
      r.exact_match = em;
      found = true;
    }
  ASSERT_TRUE(found) << cache;
  pelab::testing::write_file(cache, text.substr(0, nl + 1) + results_csv(rows));
}

TEST_F(LiteratureConfig, ReportOnlyWritesTheSectionAndCsvFromFinishedRuns) {
  const std::string path = write("cmp.yaml", yaml(kGood));
  const CompareSpec spec = load_compare(path);
  CompareOptions opt;
  opt.plots = false;
  opt.jobs = 1;
  opt.progress = 2;
  std::ostringstream log;
  opt.log = &log;
  const CompareResult first = run_compare(spec, opt);
  ASSERT_EQ(first.trained, 6);
  // Known extrapolation values (length 6; trained on 1-4): none 100 %, rope 50 / 70 %, t5 0 %.
  for (int64_t s : {1, 2}) {
    const fs::path runs = dir_ / "out" / "runs";
    set_cached_exact_match(runs / ("none_seed" + std::to_string(s)), 6, 1.0);
    set_cached_exact_match(runs / ("rope_seed" + std::to_string(s)), 6, s == 1 ? 0.5 : 0.7);
    set_cached_exact_match(runs / ("t5_seed" + std::to_string(s)), 6, 0.0);
  }
  fs::remove(dir_ / "out" / "literature.csv");
  CompareOptions ro = opt;
  ro.report_only = true;
  const CompareResult r = run_compare(spec, ro);
  EXPECT_EQ(r.trained + r.resumed, 0);
  EXPECT_TRUE(r.missing.empty());
  const std::string md = slurp(dir_ / "out" / "report.md");
  ASSERT_TRUE(has(md, "## Against the literature")) << md;
  // Theirs none > t5 > rope; ours none 100 > rope 60 > t5 0: (2 − 1) / 3.
  EXPECT_TRUE(has(md, "| rope | 0.33 | 60.0 [0.0, 100.0] (n = 2) | 3 | 2 |")) << md;
  EXPECT_TRUE(has(md, "Kendall's τ-b = 0.33 (n = 3; 2 concordant, 1 discordant pairs)")) << md;
  // rope − t5 per seed: 50 and 70 points.
  EXPECT_TRUE(has(md, "| rope − t5 | +12.0 | +60.0 [")) << md;
  const std::string csv = slurp(dir_ / "out" / "literature.csv");
  EXPECT_EQ(csv.rfind("paper,kind,name,theirs,ours,ours_ci_low,ours_ci_high,n,over,unit,"
                      "their_rank,our_rank,unconverged,note\n",
                      0),
            0u)
      << csv;
  EXPECT_TRUE(has(csv, "Kazemnejad et al. 2023,tau_b,all rows,,0.333333333333333")) << csv;
  EXPECT_TRUE(has(csv, "pair,gain,rope - t5,+12.0,")) << csv;
  // Without the section the report has none and the stale literature.csv goes.
  const std::string plain = write("plain.yaml", pelab::testing::tiny_compare_yaml("[3, 6]", 4) +
                                                    "    - rope\n    - t5\n    - none\n  out: " +
                                                    (dir_ / "out").string() + "\n");
  (void)run_compare(load_compare(plain), ro);
  EXPECT_FALSE(has(slurp(dir_ / "out" / "report.md"), "Against the literature"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "literature.csv"));
}

}  // namespace
}  // namespace pelab
