// pelab — tests of length-extrapolation comparisons (train/study/compare.h), their reports
// (train/study/report.h) and `pelab plot-pe` (train/study/plot_pe.h). Every comparison is tiny (1+1 layers,
// d_model 16, a few steps) so a test takes a few seconds at most.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/pe/t5_buckets.h"
#include "pelab/blas_kernels.h"
#include "train/app/cli.h"
#include "train/study/compare.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/study/plot_pe.h"
#include "train/study/report.h"
#include "train/trainer.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::slurp;

int64_t mtime_ns(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

class CompareTest : public pelab::testing::TempDirTest {
 protected:
  CompareTest() : TempDirTest("pelab_compare") {}

  // A tiny comparison: reverse over 4 symbols, trained on lengths 1-4, tested at 2, 4, 6, 8;
  // learned positions with max_positions 6 (lengths 6 and 8 need 7 and 9 positions) and rope,
  // with the rope `pi` variant.
  std::string tiny_config(const std::string& schemes_yaml, const std::string& extra = "",
                          int steps = 16) {
    return write("tiny.yaml",
                 pelab::testing::tiny_compare_yaml("[2, 4, 6, 8]", steps) + schemes_yaml + extra);
  }

  std::string default_schemes() const {
    return "    - {name: learned, set: {pe.scheme: learned, pe.max_positions: 6}}\n"
           "    - rope\n"
           "  variants: [pi]\n";
  }

  CompareOptions quiet() {
    CompareOptions o;
    o.out = (dir_ / "report").string();
    o.progress = 2;
    o.log = &log_;
    return o;
  }

  std::ostringstream log_;
};

// ---------------- report formatting (no training) ----------------

TEST(CompareReport, AggregateMeanIntervalAndCells) {
  std::vector<ResultRow> rows;
  for (int seed = 1; seed <= 3; ++seed) {
    ResultRow r;
    r.scheme = "rope";
    r.seed = seed;
    r.split = "len_8";
    r.length = 8;
    r.exact_match = 0.5 + 0.1 * (seed - 2);  // 0.4, 0.5, 0.6
    r.perplexity = 2.0 * seed;               // 2, 4, 6
    rows.push_back(r);
    ResultRow na = r;
    na.scheme = "learned";
    na.status = kNaMaxPositions;
    na.exact_match = std::nan("");
    rows.push_back(na);
  }
  const Stat s = aggregate(rows, "rope", "len_8", "exact_match");
  EXPECT_EQ(s.n, 3);
  EXPECT_NEAR(s.mean, 0.5, 1e-12);
  EXPECT_NEAR(s.std, 0.1, 1e-12);  // sample std
  // 95 % t-interval: 0.5 ± t(0.975, 2) · 0.1 / √3 = 0.5 ± 4.3027 · 0.057735 = 0.5 ± 0.24841.
  EXPECT_EQ(format_cell(s, "exact_match"), "50.0 [25.2, 74.8]");
  const Stat p = aggregate(rows, "rope", "len_8", "perplexity");
  // 4 ± 4.3027 · 2 / √3 = 4 ± 4.9683: [-0.97, 8.97] clipped to perplexity's range (>= 1).
  EXPECT_EQ(format_cell(p, "perplexity"), "4.00 [1.00, 8.97]");
  EXPECT_TRUE(p.clipped);
  const Stat na = aggregate(rows, "learned", "len_8", "exact_match");
  EXPECT_EQ(na.n, 0);
  EXPECT_EQ(format_cell(na, "exact_match"), "n/a (> max_positions)");
  EXPECT_EQ(aggregate(rows, "rope+pi", "len_8", "exact_match").n, 0);
}

TEST(CompareReport, ResultsCsvRoundTrip) {
  ResultRow a;
  a.scheme = "rope+rand";
  a.variant = "yarn";
  a.seed = 7;
  a.split = "len_24";
  a.length = 24;
  a.in_distribution = 0;
  a.loss = 0.1234567890123;
  a.perplexity = std::exp(a.loss);
  a.token_accuracy = 0.75;
  a.exact_match = 0.5;
  a.train_wall_s = 12.5;
  ResultRow b;
  b.scheme = "learned";
  b.seed = 1;
  b.split = "len_32";
  b.length = 32;
  b.in_distribution = 0;
  b.status = kNaMaxPositions;
  const std::string csv = results_csv({a, b});
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "scheme,variant,seed,split,length,in_distribution,status,loss,perplexity,"
            "token_accuracy,exact_match,train_wall_s,eval_wall_s,converged,criterion_step");
  const auto back = parse_results_csv(csv, "test");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].label(), "rope+rand+yarn");
  EXPECT_EQ(back[0].seed, 7);
  EXPECT_EQ(back[0].length, 24);
  EXPECT_EQ(back[0].in_distribution, 0);
  EXPECT_EQ(back[0].loss, a.loss);  // 17 significant digits: exact
  EXPECT_EQ(back[0].exact_match, 0.5);
  EXPECT_EQ(back[1].status, kNaMaxPositions);
  EXPECT_TRUE(std::isnan(back[1].exact_match));
  EXPECT_TRUE(std::isnan(back[1].eval_wall_s));
  EXPECT_THROW(parse_results_csv("scheme,seed\nx,1\n", "bad"), Error);
}

// ---------------- the compare section ----------------

TEST_F(CompareTest, ParsesSectionShorthandsAndOverrides) {
  const std::string path = tiny_config(
      "    - rope\n"
      "    - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: true,\n"
      "                              pe.randomized_max_position: 64}}\n"
      "  variants:\n"
      "    - ntk\n"
      "    - {name: yarn2, set: {pe.rope_scaling: yarn, pe.rope_scaling_factor: 2},\n"
      "       schemes: [rope]}\n");
  const CompareSpec spec =
      load_compare(path, {"compare.seeds=[3]", "train.steps=8", "compare.out=" + dir_.string()});
  EXPECT_EQ(spec.seeds, std::vector<int64_t>({3}));
  EXPECT_EQ(spec.out, dir_.string());
  EXPECT_EQ(spec.base.train.steps, 8);
  EXPECT_EQ(spec.base.task.name, "reverse");
  ASSERT_EQ(spec.schemes.size(), 2u);
  EXPECT_EQ(spec.schemes[0].sets, std::vector<std::string>({"pe.scheme=rope"}));
  ASSERT_EQ(spec.variants.size(), 2u);
  EXPECT_EQ(spec.variants[0].sets,
            std::vector<std::string>({"pe.rope_scaling=ntk", "pe.rope_scaling_factor=auto"}));
  // The plan: ntk applies to both rope schemes, yarn2 only to "rope"; auto factor = positions of
  // the longest test (8 + 1) / longest training sequence (4 + 1).
  const auto plan = compare_plan(spec, (dir_ / "out").string());
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].cfg.train.seed, 3);
  EXPECT_EQ(plan[0].cfg.train.run_name, "rope_seed3");
  EXPECT_EQ(plan[0].cfg.train.run_dir, (dir_ / "out" / "runs").string());
  ASSERT_EQ(plan[0].variants.size(), 2u);
  EXPECT_EQ(plan[0].variants[0].name, "ntk");
  EXPECT_DOUBLE_EQ(plan[0].variants[0].cfg.model.pe.get_float("rope_scaling_factor"), 9.0 / 5.0);
  EXPECT_EQ(plan[0].variants[1].cfg.model.pe.get_str("rope_scaling"), "yarn");
  EXPECT_DOUBLE_EQ(plan[0].variants[1].cfg.model.pe.get_float("rope_scaling_factor"), 2.0);
  EXPECT_FALSE(plan[0].variants[0].random_positions);
  ASSERT_EQ(plan[1].variants.size(), 1u);
  EXPECT_TRUE(plan[1].cfg.model.pe.randomized_positions);
}

TEST_F(CompareTest, RejectsBadSectionsWithLocation) {
  auto err = [&](const std::string& schemes, const std::string& extra = "") {
    try {
      load_compare(tiny_config(schemes, extra));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Line numbers refer to the file (the compare block starts at line 7; schemes at line 10).
  EXPECT_NE(err("    - rope\n  colour: red\n").find("tiny.yaml:12: unknown key 'compare.colour'"),
            std::string::npos);
  EXPECT_NE(err("    - rope\n    - rope\n").find("appears twice"), std::string::npos);
  EXPECT_NE(
      err("    - {name: r, set: {train.seed: 3}}\n").find("train.seed is set by the comparison"),
      std::string::npos);
  EXPECT_NE(err("    - rope\n  variants: [{name: big, set: {model.d_model: 32}}]\n")
                .find("model.d_model changes the trained model"),
            std::string::npos);
  EXPECT_NE(err("    - rope\n  variants: [bogus]\n").find("is not a scheme's shorthand variant (dynamic_ntk, ntk, pi, yarn)"), std::string::npos);
  EXPECT_NE(err("    - {name: r, set: {pe.scheme: bogus}}\n").find("compare.schemes (r)"),
            std::string::npos);
  EXPECT_NE(err("    - {name: a/b}\n").find("must use only letters"), std::string::npos);
  // A mistake in the base sections keeps its own line number.
  const std::string path = (dir_ / "base.yaml").string();
  std::ofstream(path) << "compare:\n  schemes: [rope]\nmodel:\n  d_modle: 16\n";
  try {
    load_compare(path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("base.yaml:4:"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "model: {d_model: 16}\n";
  EXPECT_THROW(load_compare(path), ConfigError);  // no compare section
}

// The file is parsed once: an anchor defined in a run section can be used in the compare section
// and the other way round (the compare section used to be parsed on its own: "unknown anchor"),
// errors still name FILE:LINE, and a file saved with a byte-order mark reads the same.
TEST_F(CompareTest, AnchorsWorkAcrossSections) {
  const std::string base =
      "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: 4,\n"
      "       test_lengths: [2, 4], num_eval_examples: 6}\n"
      "model: {d_model: 16, heads: 2, d_ff: &ff 48, encoder_layers: 1, decoder_layers: 1}\n"
      "train: {steps: 4, batch_size: 8, warmup: &warm 2, threads: 1}\n";
  const CompareSpec a = load_compare_string(
      base +
          "compare:\n"
          "  seeds: [1]\n"
          "  schemes:\n"
          "    - {name: wide, set: {pe.scheme: rope, model.d_ff: *ff, train.warmup: *warm}}\n",
      "a.yaml");
  ASSERT_EQ(a.schemes.size(), 1u);
  EXPECT_EQ(a.schemes[0].sets,
            (std::vector<std::string>{"pe.scheme=rope", "model.d_ff=48", "train.warmup=2"}));
  EXPECT_EQ(a.base.model.d_ff, 48);
  // An anchor of the compare section used by a run section below it.
  const CompareSpec b = load_compare_string(
      "compare:\n"
      "  seeds: &seeds [7]\n"
      "  schemes: [rope]\n"
      "  search: {train.lr: [&lr 0.002, 0.004]}\n" +
          base.substr(0, base.find("train:")) + "train: {steps: 4, warmup: 1, lr: *lr, threads: 1}\n",
      "b.yaml");
  EXPECT_DOUBLE_EQ(b.base.train.lr, 0.002);
  EXPECT_EQ(b.seeds, std::vector<int64_t>{7});
  // Errors name the file's line, wherever they are.
  auto error = [](const std::string& yaml) {
    try {
      (void)load_compare_string(yaml, "c.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(base + "compare:\n  schemes: [*nope]\n").rfind("c.yaml:6:", 0), 0u)
      << error(base + "compare:\n  schemes: [*nope]\n");
  EXPECT_EQ(error(base + "compare:\n  schemes: [rope]\n  colour: red\n")
                .rfind("c.yaml:7: unknown key 'compare.colour'", 0),
            0u);
  EXPECT_EQ(error("model: {d_modle: 16}\ncompare: {schemes: [rope]}\n").rfind("c.yaml:1:", 0), 0u);
  EXPECT_NE(error("compare: {schemes: [rope]}\nmodel: {d_model: 16}\n  x: 1\n").find("c.yaml:"),
            std::string::npos);
  // A byte-order mark before the first key.
  const CompareSpec c = load_compare_string(
      "\xEF\xBB\xBF" + base + "compare:\n  seeds: [1]\n  schemes: [rope]\n", "d.yaml");
  EXPECT_EQ(c.schemes.size(), 1u);
  EXPECT_EQ(c.base.model.d_ff, 48);
}

// ---------------- end to end ----------------

TEST_F(CompareTest, WritesReportWithTablesPlotsAndNaCells) {
  const CompareSpec spec = load_compare(tiny_config(default_schemes()));
  const CompareResult r = run_compare(spec, quiet());
  ASSERT_FALSE(r.interrupted) << log_.str();
  EXPECT_EQ(r.trained, 4);
  EXPECT_EQ(r.reused, 0);
  EXPECT_EQ(r.evaluated, 6);  // 4 runs as trained + 2 rope runs with pi
  const fs::path out = dir_ / "report";

  // results.csv: (2 schemes x 2 seeds + 1 variant x 2 seeds) x 4 lengths.
  const auto rows = parse_results_csv(slurp(out / "results.csv"), "results.csv");
  ASSERT_EQ(rows.size(), 24u);
  std::map<std::string, int> per_label;
  for (const auto& row : rows) {
    ++per_label[row.label()];
    EXPECT_EQ(row.in_distribution, row.length <= 4 ? 1 : 0) << row.split;
    EXPECT_TRUE(std::isfinite(row.train_wall_s) && row.train_wall_s > 0);
    if (row.scheme == "learned" && row.length >= 6) {
      EXPECT_EQ(row.status, kNaMaxPositions);
      EXPECT_TRUE(std::isnan(row.exact_match));
    } else {
      EXPECT_EQ(row.status, "ok");
      EXPECT_GE(row.exact_match, 0.0);
      EXPECT_LE(row.exact_match, 1.0);
      EXPECT_GT(row.perplexity, 1.0);
    }
  }
  EXPECT_EQ(per_label["learned"], 8);
  EXPECT_EQ(per_label["rope"], 8);
  EXPECT_EQ(per_label["rope+pi"], 8);
  // The pi rows really are a different evaluation of the same checkpoints.
  bool differs = false;
  for (const auto& a : rows)
    for (const auto& b : rows)
      if (a.scheme == "rope" && a.variant.empty() && b.variant == "pi" && a.seed == b.seed &&
          a.split == b.split)
        differs = differs || a.loss != b.loss;
  EXPECT_TRUE(differs);

  // report.md: the table with training-range marks, mean and interval, n/a cells and the reproduce
  // block.
  const std::string md = slurp(out / "report.md");
  EXPECT_NE(md.find("| scheme | 2 (train) | 4 (train) | 6 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("95 % t-interval over n = 2 seeds"), std::string::npos) << md;
  EXPECT_NE(md.find("| learned |"), std::string::npos);
  EXPECT_NE(md.find("| rope+pi |"), std::string::npos);
  EXPECT_NE(md.find("n/a (> max_positions)"), std::string::npos);
  EXPECT_NE(md.find("task lengths 1–4"), std::string::npos);
  EXPECT_NE(md.find("compare:"), std::string::npos);  // the config as given
  EXPECT_NE(md.find("## Reproduce"), std::string::npos);
  // The conditions of the timings name the BLAS kernels (issue 31).
  EXPECT_NE(md.find("; BLAS: OpenBLAS "), std::string::npos) << md;
  EXPECT_NE(md.find(pelab::blas_corename() + " kernels; "), std::string::npos) << md;
  // The learned row: two numeric in-distribution cells, then two n/a cells.
  // (the first "| learned |" is the Convergence table's row)
  const size_t lp = md.find("| learned |", md.find("## exact match"));
  const std::string learned_line = md.substr(lp, md.find('\n', lp) - lp);
  EXPECT_NE(learned_line.find("n/a (> max_positions) | n/a (> max_positions) |"), std::string::npos)
      << learned_line;
  EXPECT_EQ(learned_line.find("n/a"), learned_line.find("n/a (> max_positions) | n/a"))
      << learned_line;
  EXPECT_NE(learned_line.find(" ["), std::string::npos) << learned_line;

  // Plots and the data behind them.
  for (const char* f : {"exact_match_vs_length.dat", "exact_match_vs_length.csv", "train_loss.csv",
                        "token_accuracy_vs_length.csv", "table_exact_match.csv"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const std::string loss_csv = slurp(out / "train_loss.csv");
  EXPECT_NE(loss_csv.find("rope,2,16,"), std::string::npos);  // seed 2's last logged step
  if (!gnuplot_path().empty()) {
    for (const char* f :
         {"exact_match_vs_length.png", "token_accuracy_vs_length.png", "train_loss.png"}) {
      EXPECT_TRUE(is_png_file((out / f).string())) << f;
      EXPECT_NE(md.find(std::string("](") + f + ")"), std::string::npos) << f;
    }
  } else {
    EXPECT_NE(md.find("gnuplot not found"), std::string::npos);
  }
}

TEST_F(CompareTest, RerunReusesFinishedRunsAndCachedEvaluations) {
  const CompareSpec spec = load_compare(tiny_config(default_schemes()));
  const CompareResult first = run_compare(spec, quiet());
  ASSERT_FALSE(first.interrupted);
  const fs::path ck = dir_ / "report" / "runs" / "rope_seed1" / "checkpoints" / "step_16.h5";
  ASSERT_TRUE(fs::exists(ck));
  const int64_t before = mtime_ns(ck);
  const std::string csv_before = slurp(dir_ / "report" / "results.csv");

  const CompareResult again = run_compare(spec, quiet());
  EXPECT_EQ(again.trained, 0);
  EXPECT_EQ(again.resumed, 0);
  EXPECT_EQ(again.reused, 4);
  EXPECT_EQ(again.evaluated, 0);
  EXPECT_EQ(again.eval_cached, 6);
  EXPECT_EQ(mtime_ns(ck), before);  // not retrained
  EXPECT_EQ(slurp(dir_ / "report" / "results.csv"), csv_before);
  EXPECT_NE(log_.str().find("finished run reused"), std::string::npos);

  // New test lengths: no retraining, but a fresh evaluation.
  const CompareSpec more =
      load_compare(tiny_config(default_schemes()), {"task.test_lengths=[3, 9]"});
  const CompareResult third = run_compare(more, quiet());
  EXPECT_EQ(third.trained, 0);
  EXPECT_EQ(third.evaluated, 6);
  EXPECT_EQ(mtime_ns(ck), before);
  EXPECT_EQ(third.rows.size(), 12u);
  // A change that affects training retrains.
  const CompareSpec changed =
      load_compare(tiny_config(default_schemes()), {"train.lr=0.01", "compare.seeds=[1]"});
  const CompareResult fourth = run_compare(changed, quiet());
  EXPECT_EQ(fourth.trained, 2);
  EXPECT_NE(log_.str().find("config changed: train.lr"), std::string::npos);
}

TEST_F(CompareTest, InterruptedComparisonResumesToTheSameResults) {
  const std::string schemes = "    - rope\n";
  const CompareSpec spec = load_compare(tiny_config(schemes), {"compare.seeds=[1]"});
  // Uninterrupted reference in another directory.
  CompareOptions ref = quiet();
  ref.out = (dir_ / "reference").string();
  const CompareResult full = run_compare(spec, ref);
  ASSERT_FALSE(full.interrupted);

  CompareOptions stop = quiet();
  stop.stop_after = 8;  // as if Ctrl-C after step 8 of the first run
  const CompareResult cut = run_compare(spec, stop);
  EXPECT_TRUE(cut.interrupted);
  EXPECT_FALSE(fs::exists(dir_ / "report" / "results.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "report" / "runs" / "rope_seed1" / "checkpoints" / "step_8.h5"));
  EXPECT_NE(log_.str().find("run the same command again"), std::string::npos);

  const CompareResult resumed = run_compare(spec, quiet());
  ASSERT_FALSE(resumed.interrupted);
  EXPECT_EQ(resumed.resumed, 1);
  EXPECT_EQ(resumed.trained, 0);
  ASSERT_EQ(resumed.rows.size(), full.rows.size());
  for (size_t i = 0; i < full.rows.size(); ++i) {
    EXPECT_EQ(resumed.rows[i].split, full.rows[i].split);
    EXPECT_EQ(resumed.rows[i].loss, full.rows[i].loss) << full.rows[i].split;
    EXPECT_EQ(resumed.rows[i].exact_match, full.rows[i].exact_match) << full.rows[i].split;
  }
  EXPECT_NE(slurp(dir_ / "report" / "runs" / "rope_seed1" / "train.log").find("resumed"),
            std::string::npos);
}

TEST_F(CompareTest, CommandLineVerbs) {
  std::istringstream in;
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"compare", "--help"}, in, out, err), 0);
  EXPECT_NE(out.str().find("usage: pelab compare CONFIG"), std::string::npos);
  EXPECT_EQ(run_cli({"compare"}, in, out, err), 2);
  EXPECT_NE(err.str().find("missing CONFIG"), std::string::npos);
  EXPECT_EQ(run_cli({"compare", "x.yaml", "--bogus"}, in, out, err), 2);
  EXPECT_EQ(run_cli({"plot-pe", "--help"}, in, out, err), 0);
  EXPECT_NE(out.str().find("usage: pelab plot-pe"), std::string::npos);
  EXPECT_EQ(run_cli({"plot-pe", "--input", "123"}, in, out, err), 2);
  EXPECT_EQ(run_cli({"compare", (dir_ / "missing.yaml").string()}, in, out, err), 1);
  EXPECT_NE(err.str().find("no such config file"), std::string::npos);
}

TEST_F(CompareTest, RandomizedPositionsRowsAndRandomPositionEvaluation) {
  // rope trained with randomized positions from [0, 8): evaluated as pelab eval does (0..L-1) and
  // with random positions as in training (randpos); length 8 needs 9 positions > 8.
  const std::string path = tiny_config(
      "    - rope\n"
      "    - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: true,\n"
      "                              pe.randomized_max_position: 8}}\n"
      "  variants: [randpos]\n");
  // Length 7 is 8 tokens in each stack: the only 8-subset of [0, 8) is 0..7, so there the random
  // evaluation must equal pelab's own (teacher forcing and the hand-written greedy decoding).
  const CompareSpec spec =
      load_compare(path, {"compare.seeds=[1]", "task.test_lengths=[2, 4, 7, 8]"});
  const auto plan = compare_plan(spec, (dir_ / "report").string());
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].variants.empty());  // randpos applies to randomized runs only
  ASSERT_EQ(plan[1].variants.size(), 1u);
  EXPECT_TRUE(plan[1].variants[0].random_positions);
  CompareOptions o = quiet();
  o.plots = false;
  const CompareResult r = run_compare(spec, o);
  ASSERT_FALSE(r.interrupted);
  std::map<std::string, std::map<int64_t, ResultRow>> by;
  for (const auto& row : r.rows) by[row.label()][row.length] = row;
  ASSERT_EQ(by.size(), 3u);
  ASSERT_EQ(by["rope+rand+randpos"].size(), 4u);
  EXPECT_EQ(by["rope+rand+randpos"][8].status, "n/a (> randomized_max_position)");
  EXPECT_EQ(by["rope+rand"][8].status, "ok");  // positions 0..8 need no table
  const ResultRow& same = by["rope+rand+randpos"][7];
  ASSERT_EQ(same.status, "ok");
  EXPECT_EQ(same.loss, by["rope+rand"][7].loss);
  EXPECT_EQ(same.token_accuracy, by["rope+rand"][7].token_accuracy);
  EXPECT_EQ(same.exact_match, by["rope+rand"][7].exact_match);
  for (int64_t L : {2, 4}) {
    const ResultRow& a = by["rope+rand+randpos"][L];
    EXPECT_EQ(a.status, "ok") << L;
    EXPECT_GE(a.exact_match, 0.0);
    EXPECT_LE(a.exact_match, 1.0);
    EXPECT_GT(a.token_accuracy, 0.0);
    EXPECT_NE(a.loss, by["rope+rand"][L].loss) << L;  // other positions, other scores
  }
  EXPECT_NE(slurp(dir_ / "report" / "report.md").find("| rope+rand+randpos |"), std::string::npos);
  // Random-position evaluation is reproducible (seeded from train.seed): the cache is bypassed by
  // a fresh directory.
  CompareOptions o2 = o;
  o2.out = (dir_ / "again").string();
  const CompareResult r2 = run_compare(spec, o2);
  ASSERT_EQ(r2.rows.size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    if (r.rows[i].available()) {
      EXPECT_EQ(r2.rows[i].loss, r.rows[i].loss) << r.rows[i].label();
    }
  }
}

TEST_F(CompareTest, RandomPositionEvaluationMatchesDefaultWhenTheRangeIsExact) {
  // Decoder-only count: a length-n example is 2n + 2 tokens. With randomized_max_position 18 the
  // only 18-subset of [0, 18) is 0..17, so at n = 8 the random-position evaluation (teacher
  // forcing and the hand-written cached greedy decoding) must equal pelab's own evaluation; n = 9
  // needs 20 positions (n/a).
  const std::string path = (dir_ / "count.yaml").string();
  std::ofstream(path)
      << "task: {name: count, formulation: decoder, train_min_len: 1, train_max_len: 8,\n"
         "       test_lengths: [3, 8, 9], num_eval_examples: 5}\n"
         "model: {arch: decoder, d_model: 16, heads: 2, d_ff: 32, decoder_layers: 1}\n"
         "train: {steps: 40, batch_size: 8, warmup: 4, lr: 0.01, log_every: 10, eval_every: 0,\n"
         "        checkpoint_every: 40, threads: 1}\n"
         "eval: {batch_size: 5}\n"
         "compare:\n"
         "  seeds: [1]\n"
         "  schemes:\n"
         "    - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: true,\n"
         "                              pe.randomized_max_position: 18}}\n"
         "  variants: [randpos]\n";
  CompareOptions o = quiet();
  o.plots = false;
  const CompareResult r = run_compare(load_compare(path), o);
  ASSERT_FALSE(r.interrupted);
  std::map<std::string, std::map<int64_t, ResultRow>> by;
  for (const auto& row : r.rows) by[row.label()][row.length] = row;
  const ResultRow& a = by["rope+rand"][8];
  const ResultRow& b = by["rope+rand+randpos"][8];
  ASSERT_EQ(a.status, "ok");
  ASSERT_EQ(b.status, "ok");
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.token_accuracy, b.token_accuracy);
  EXPECT_EQ(a.exact_match, b.exact_match);
  EXPECT_EQ(by["rope+rand+randpos"][9].status, "n/a (> randomized_max_position)");
  EXPECT_NE(by["rope+rand+randpos"][3].loss, by["rope+rand"][3].loss);
  // A model that learned something: the comparison is not between two zeros.
  EXPECT_GT(a.token_accuracy, 0.3);
}

// ---------------- plot-pe ----------------

std::vector<std::vector<double>> read_numeric_csv(const fs::path& p, std::string* header) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  if (header) *header = line;
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> r;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) r.push_back(std::strtod(cell.c_str(), nullptr));
    rows.push_back(r);
  }
  return rows;
}

TEST_F(CompareTest, PlotPeSchemePictures) {
  PlotPeOptions o;
  o.out = (dir_ / "pe").string();
  o.positions = 16;
  o.d_model = 8;
  o.heads = 4;
  o.rotation_dims = 16;
  o.distance = 64;
  const PlotPeResult r = plot_pe(o);
  // Every parameter-free scheme is drawn from its hooks. Sinusoidal (hook 1): PE[p, 2i] =
  // sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...).
  const auto sin_rows = read_numeric_csv(dir_ / "pe" / "sinusoidal_embedding.csv", nullptr);
  ASSERT_EQ(sin_rows.size(), 16u);
  EXPECT_NEAR(sin_rows[3][1 + 0], std::sin(3.0), 1e-6);
  EXPECT_NEAR(sin_rows[3][1 + 3], std::cos(3.0 / std::pow(10000.0, 2.0 / 8)), 1e-6);
  // RoPE (hook 2): constant q = k = 1, query at 0 and key at r: q'.k'/d = mean_j cos(r θ_j) with
  // θ_j = 10000^(-2j/d), j < d/2; the scaled variants are drawn next to it.
  std::string header;
  const auto rope = read_numeric_csv(dir_ / "pe" / "rope_rotation.csv", &header);
  ASSERT_EQ(rope.size(), 65u);
  EXPECT_EQ(header.substr(0, 29), "distance,score_rope,score_pi,");
  for (int r : {0, 1, 7, 64}) {
    double want = 0;
    for (int j = 0; j < 8; ++j) want += std::cos(r * std::pow(10000.0, -2.0 * j / 16)) / 8;
    EXPECT_NEAR(rope[static_cast<size_t>(r)][1], want, 1e-7) << "distance " << r;
  }
  // ALiBi (hook 3) with 4 heads, causal, last query (position 15): slopes 2^-2 ... 2^-8, term
  // -m_h·distance at key - query = -10 (row 5).
  const auto alibi = read_numeric_csv(dir_ / "pe" / "alibi_bias.csv", &header);
  EXPECT_EQ(header, "relative_position,head1,head2,head3,head4");
  ASSERT_EQ(alibi.size(), 16u);
  EXPECT_EQ(alibi[5][0], -10);
  EXPECT_NEAR(alibi[5][1], -10.0 / 4.0, 1e-12);
  EXPECT_NEAR(alibi[5][4], -10.0 / 256.0, 1e-12);
  EXPECT_NEAR(alibi[15][1], 0.0, 1e-12);
  // A scheme with trained parameters is drawn from a run only; NoPE has nothing to draw.
  EXPECT_FALSE(fs::exists(dir_ / "pe" / "t5_bias.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "pe" / "learned_embedding.csv"));
  for (const auto& e : fs::directory_iterator(dir_ / "pe"))
    EXPECT_NE(e.path().filename().string().rfind("none_", 0), 0u) << e.path();
  if (!gnuplot_path().empty()) {
    for (const char* png : {"sinusoidal_embedding.png", "rope_rotation.png", "alibi_bias.png"})
      EXPECT_NE(std::find(r.pngs.begin(), r.pngs.end(), (dir_ / "pe" / png).string()), r.pngs.end())
          << png << "; " << r.note;
    for (const auto& p : r.pngs) EXPECT_TRUE(is_png_file(p)) << p;
  }
}

TEST_F(CompareTest, PlotPeFromTrainedRun) {
  // A trained t5 run (the smallest comparison: one run).
  const CompareSpec spec = load_compare(tiny_config("    - t5\n", "", 8), {"compare.seeds=[1]"});
  CompareOptions co = quiet();
  co.plots = false;
  ASSERT_FALSE(run_compare(spec, co).interrupted);
  PlotPeOptions o;
  o.out = (dir_ / "pe").string();
  o.run = (dir_ / "report" / "runs" / "t5_seed1").string();
  o.input = "0123";
  o.positions = 8;
  o.d_model = 8;
  o.heads = 2;
  o.rotation_dims = 8;
  o.distance = 16;
  const PlotPeResult r = plot_pe(o);
  // The run's T5 tables through hook 3: each relative position's term is the trained table's
  // entry at its bucket (HF T5 buckets; bidirectional in the encoder, causal in the decoder).
  {
    const std::string run = (dir_ / "report" / "runs" / "t5_seed1").string();
    const Config cfg = load_config(run + "/config.yaml");
    LoadedModel lm = load_model(cfg, latest_checkpoint(run));
    for (const std::string stack : {"encoder", "decoder"}) {
      SCOPED_TRACE(stack);
      const Tensor* table = nullptr;
      std::vector<NamedTensor> ps = lm.model->named_parameters();
      for (const auto& p : ps)
        if (p.first == stack + ".pe.rel_bias") table = &p.second;
      ASSERT_NE(table, nullptr);
      const std::vector<double> w = table->to_vector();
      const int64_t nb = table->size(0), H = table->size(1);
      const auto rows = read_numeric_csv(dir_ / "pe" / ("t5_" + stack + "_bias.csv"), nullptr);
      ASSERT_FALSE(rows.empty());
      const bool bidir = stack == "encoder";
      EXPECT_EQ(rows.back()[0], bidir ? 31 : 0);  // 64 positions: middle or last query
      for (const auto& row : rows) {
        const int64_t b = models::t5_relative_bucket(static_cast<int64_t>(row[0]), bidir, nb,
                                                     cfg.model.pe.get_int("t5_max_distance"));
        for (int64_t h = 0; h < H; ++h)
          EXPECT_NEAR(row[static_cast<size_t>(1 + h)], w[static_cast<size_t>(b * H + h)], 1e-6)
              << "relative position " << row[0] << " head " << h + 1;
      }
    }
  }
  // Attention maps: probabilities of every query row sum to 1 over the keys.
  for (const char* f : {"attention_encoder_self_layer0.csv", "attention_decoder_self_layer0.csv",
                        "attention_decoder_cross_layer0.csv"}) {
    ASSERT_TRUE(fs::exists(dir_ / "pe" / f)) << f;
    std::map<std::pair<int, int>, double> sums;
    for (const auto& [hqk, p] : pelab::testing::read_attention_csv(dir_ / "pe" / f))
      sums[{std::get<0>(hqk), std::get<1>(hqk)}] += p;
    EXPECT_EQ(sums.size() % 2, 0u);  // 2 heads
    for (const auto& [key, s] : sums) EXPECT_NEAR(s, 1.0, 1e-5) << f;
  }
  // The encoder input is "0123" + eos: 5 keys for query 0 of head 1.
  const std::string enc = slurp(dir_ / "pe" / "attention_encoder_self_layer0.csv");
  EXPECT_NE(enc.find("1,0,4,0,<eos>,"), std::string::npos);
  if (!gnuplot_path().empty()) {
    for (const auto& p : r.pngs) EXPECT_TRUE(is_png_file(p)) << p;
  }
}

}  // namespace
