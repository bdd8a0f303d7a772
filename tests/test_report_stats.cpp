// pelab — tests of the comparison report's statistics and convergence marks (train/study/report.h,
// train/study/compare.h): the Student-t quantile, the 95 % interval and its clipping, the marks of runs
// that missed their stop criterion (train.stop_when) in report.md / results.csv / table CSVs /
// plots, the compare.unconverged policies and `expect: cannot_learn`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pelab/error.h"
#include "train/study/compare.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/study/report.h"
#include "train/trainer.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::slurp;

fs::path scratch_dir(const std::string& name) {
  return pelab::testing::fresh_temp_dir("pelab_report_stats_" + name);
}

using pelab::testing::result_row;

// A fake comparison: two schemes x three seeds at lengths 4 (train), 8 and 16; seed 3 of "alibi"
// missed its stop criterion.
ReportInput fake_input() {
  ReportInput in;
  in.title = "fake";
  in.task_summary = "fake task";
  in.primary_metric = "exact_match";
  in.length_name = "task length";
  in.train_min = 1;
  in.train_max = 4;
  in.train_range_text = "task lengths 1–4";
  in.seeds = {1, 2, 3};
  in.labels = {"rope", "alibi"};
  in.criteria = {{"rope", "valid.exact_match >= 0.9"}, {"alibi", "valid.exact_match >= 0.9"}};
  for (int64_t seed = 1; seed <= 3; ++seed) {
    in.rows.push_back(result_row("rope", seed, 4, 1, 0.95, 1, 100 * seed));
    in.rows.push_back(result_row("rope", seed, 8, 0, 0.5 + 0.05 * seed, 1, 100 * seed));
    in.rows.push_back(result_row("rope", seed, 16, 0, 0.1 * seed, 1, 100 * seed));
    const int conv = seed == 3 ? 0 : 1;
    const int64_t step = seed == 3 ? -1 : 200 * seed;
    in.rows.push_back(result_row("alibi", seed, 4, 1, 0.9, conv, step));
    in.rows.push_back(result_row("alibi", seed, 8, 0, 0.6, conv, step));
    in.rows.push_back(result_row("alibi", seed, 16, 0, 0.3 + 0.01 * seed, conv, step));
    LossCurve c;
    c.scheme = "rope";
    c.seed = seed;
    for (int s = 10; s <= 100; s += 10) c.points.emplace_back(s, 2.0 / s + 0.01 * seed);
    in.curves.push_back(c);
    c.scheme = "alibi";
    for (auto& p : c.points) p.second *= 1.5;
    in.curves.push_back(c);
  }
  return in;
}

// The markdown line of a table row starting with "| label |" after `from`.
std::string line_of(const std::string& md, const std::string& label, size_t from = 0) {
  const size_t p = md.find("| " + label + " |", from);
  if (p == std::string::npos) return "";
  return md.substr(p, md.find('\n', p) - p);
}

}  // namespace

// ---------------- the t quantile and the interval ----------------

TEST(ReportStats, StudentTQuantileMatchesTables) {
  // t_{0.975, df} from printed tables (3 decimals).
  const std::vector<std::pair<double, double>> t975 = {
      {1, 12.706}, {2, 4.303}, {3, 3.182}, {4, 2.776}, {5, 2.571},  {9, 2.262},
      {10, 2.228}, {19, 2.093}, {29, 2.045}, {30, 2.042}, {60, 2.000}, {120, 1.980}};
  for (const auto& [df, t] : t975)
    EXPECT_NEAR(student_t_quantile(0.975, df), t, 5e-4) << "df " << df;
  EXPECT_NEAR(student_t_quantile(0.975, 1e7), 1.959964, 1e-5);  // -> the normal quantile
  EXPECT_NEAR(student_t_quantile(0.995, 1), 63.657, 5e-3);
  EXPECT_NEAR(student_t_quantile(0.95, 3), 2.353, 5e-4);
  // t(1) is the Cauchy distribution: quantile tan(π (p − 1/2)).
  EXPECT_NEAR(student_t_quantile(0.975, 1), std::tan(M_PI * 0.475), 1e-8);
  // df = 2 has the closed form t = (2p − 1) · sqrt(2 / (1 − (2p − 1)^2)).
  const double a = 2 * 0.975 - 1;
  EXPECT_NEAR(student_t_quantile(0.975, 2), a * std::sqrt(2 / (1 - a * a)), 1e-9);
  EXPECT_EQ(student_t_quantile(0.5, 7), 0.0);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -student_t_quantile(0.975, 4), 1e-12);
  EXPECT_THROW(student_t_quantile(1.0, 3), Error);
  EXPECT_THROW(student_t_quantile(0.975, 0), Error);
  // The incomplete beta itself: I_x(1, 1) = x, I_x(a, 1) = x^a, I_{1/2}(a, a) = 1/2.
  EXPECT_NEAR(incomplete_beta(1, 1, 0.3), 0.3, 1e-14);
  EXPECT_NEAR(incomplete_beta(2.5, 1, 0.7), std::pow(0.7, 2.5), 1e-13);
  EXPECT_NEAR(incomplete_beta(3.5, 3.5, 0.5), 0.5, 1e-13);
}

TEST(ReportStats, IntervalHandWorkedAndClipped) {
  // 90, 95, 100 %: mean 95, s = 5, half-width t(0.975, 2) · 5 / √3 = 4.3027 · 2.8868 = 12.42,
  // interval [82.58, 107.42] clipped to [82.58, 100].
  const Stat s = stat_of({0.90, 0.95, 1.00}, "exact_match");
  EXPECT_EQ(s.n, 3);
  EXPECT_NEAR(s.mean, 0.95, 1e-12);
  EXPECT_NEAR(s.std, 0.05, 1e-12);
  EXPECT_NEAR(s.half, 0.1242, 5e-5);
  EXPECT_NEAR(s.ci_low, 0.8258, 5e-5);
  EXPECT_EQ(s.ci_high, 1.0);
  EXPECT_TRUE(s.clipped);
  EXPECT_EQ(format_cell(s, "exact_match"), "95.0 [82.6, 100.0]");
  // Unclipped: 40, 50, 60 % -> 50 ± 24.84.
  const Stat u = stat_of({0.4, 0.5, 0.6}, "exact_match");
  EXPECT_FALSE(u.clipped);
  EXPECT_NEAR(u.ci_low, 0.5 - 0.248414, 1e-6);  // 4.302653 · 0.1 / 1.732051
  EXPECT_NEAR(u.ci_high, 0.5 + 0.248414, 1e-6);
  // Loss clips at 0, perplexity at 1.
  const Stat l = stat_of({0.01, 0.5}, "loss");  // s = 0.3465, half = 12.706 · 0.3465 / √2
  EXPECT_EQ(l.ci_low, 0.0);
  EXPECT_NEAR(l.ci_high, 0.255 + 12.7062 * 0.346482 / std::sqrt(2.0), 1e-3);
  EXPECT_EQ(stat_of({1.1, 3.0, 1.2}, "perplexity").ci_low, 1.0);
  // n = 1: no interval.
  const Stat one = stat_of({0.93}, "exact_match");
  EXPECT_TRUE(std::isnan(one.ci_low));
  EXPECT_EQ(format_cell(one, "exact_match"), "93.0");
  // n differing from the seeds: said in the cell.
  EXPECT_EQ(format_cell(u, "exact_match", 4), "50.0 [25.2, 74.8] (n = 3)");
  EXPECT_EQ(format_cell(u, "exact_match", 3), "50.0 [25.2, 74.8]");
}

// ---------------- convergence marks ----------------

TEST(ReportStats, UnconvergedRunMarkedInTablesCsvAndPlots) {
  const fs::path dir = scratch_dir("marks");
  const ReportInput in = fake_input();
  const ReportFiles f = write_report(dir.string(), in, true);
  const std::string md = slurp(f.report_md);

  // The exact-match table: alibi's extrapolation cells and its extrapolation mean carry †, rope's
  // do not.
  const size_t table = md.find("## exact match (%) by task length");
  ASSERT_NE(table, std::string::npos) << md;
  const std::string alibi = line_of(md, "alibi", table);
  const std::string rope = line_of(md, "rope", table);
  EXPECT_EQ(rope.find("†"), std::string::npos) << rope;
  // 4 (train), 8, 16, mean (extrapolation): every cell includes seed 3.
  size_t daggers = 0;
  for (size_t p = alibi.find("†"); p != std::string::npos; p = alibi.find("†", p + 1)) ++daggers;
  EXPECT_EQ(daggers, 4u) << alibi;
  // The extrapolation mean: per seed (0.6 + 0.3 + 0.01 seed) / 2 = 0.455, 0.46, 0.465 -> 46.0,
  // marked †, never unmarked.
  EXPECT_NE(alibi.find("46.0 ["), std::string::npos) << alibi;
  const std::string last = alibi.substr(alibi.rfind("| 46.0"));
  EXPECT_NE(last.find("†"), std::string::npos) << last;
  EXPECT_NE(md.find("† a run in the cell missed its stop criterion"), std::string::npos);
  EXPECT_NE(md.find("95 % t-interval over n = 3 seeds"), std::string::npos);
  EXPECT_NE(md.find("clipped"), std::string::npos);

  // The convergence table: criterion, k/n, steps mean [min–max], in-distribution exact match.
  const size_t conv = md.find("## Convergence");
  ASSERT_NE(conv, std::string::npos);
  EXPECT_NE(line_of(md, "rope", conv).find("| `valid.exact_match >= 0.9` | 3/3 | 200 [100–300] | "
                                           "95.0 [95.0, 95.0] | 95.0 (len 4, seed 1) |"),
            std::string::npos)
      << line_of(md, "rope", conv);
  EXPECT_NE(line_of(md, "alibi", conv).find("| 2/3 | 300 [200–400] | 90.0 [90.0, 90.0] † |"),
            std::string::npos)
      << line_of(md, "alibi", conv);
  EXPECT_NE(md.find("runs that missed the stop criterion (1: alibi seed 3) are marked †"),
            std::string::npos);

  // Worst training length: the lowest training-range value of any run, with length and seed.
  {
    ReportInput w = fake_input();
    w.rows.push_back(result_row("rope", 2, 2, 1, 0.8, 1, 200));
    w.rows.push_back(result_row("alibi", 3, 2, 1, 0.7, 0, -1));
    const std::string wmd = slurp(write_report((dir / "worst").string(), w, false).report_md);
    const size_t wc = wmd.find("## Convergence");
    EXPECT_NE(line_of(wmd, "rope", wc).find("| 80.0 (len 2, seed 2) |"), std::string::npos)
        << line_of(wmd, "rope", wc);
    EXPECT_NE(line_of(wmd, "alibi", wc).find("| 70.0 (len 2, seed 3) † |"), std::string::npos)
        << line_of(wmd, "alibi", wc);
    EXPECT_NE(wmd.find("Worst training length: the lowest value"), std::string::npos);
  }

  // results.csv carries the convergence per row and reads back.
  const auto back = parse_results_csv(slurp(dir / "results.csv"), "results.csv");
  ASSERT_EQ(back.size(), in.rows.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].converged, in.rows[i].converged);
    EXPECT_EQ(back[i].criterion_step, in.rows[i].criterion_step);
  }
  const std::string csv = slurp(dir / "results.csv");
  EXPECT_NE(csv.find(",false,\n"), std::string::npos);  // alibi seed 3: missed, no step
  EXPECT_NE(csv.find(",true,200\n"), std::string::npos);

  // table_exact_match.csv: the new columns, n_converged, the status of a marked cell.
  const std::string table_csv = slurp(dir / "table_exact_match.csv");
  EXPECT_EQ(table_csv.substr(0, table_csv.find('\n')),
            "series,split,length,in_distribution,mean,ci_low,ci_high,n,n_converged,status");
  EXPECT_NE(table_csv.find("alibi,len_8,8,false,0.6,0.6,0.6,3,2,includes_unconverged\n"),
            std::string::npos)
      << table_csv;
  EXPECT_NE(table_csv.find("rope,len_4,4,true,0.95,0.95,0.95,3,3,ok\n"), std::string::npos)
      << table_csv;
  EXPECT_NE(table_csv.find("alibi,mean_extrapolation,,false,"), std::string::npos);

  // The plot data: alibi's cells are in a "(not converged)" block; series are offset in x.
  const std::string dat = slurp(dir / "exact_match_vs_length.dat");
  EXPECT_NE(dat.find("# alibi (not converged)"), std::string::npos) << dat;
  EXPECT_EQ(dat.find("# rope (not converged)"), std::string::npos) << dat;
  const std::string pcsv = slurp(dir / "exact_match_vs_length.csv");
  EXPECT_NE(pcsv.find("rope,len_8,8,"), std::string::npos);
  // Jitter: two series spread over 0.3 x the smallest gap (4): rope at 8 − 0.6, alibi at 8 + 0.6.
  EXPECT_NE(pcsv.find("rope,len_8,8,0.6,"), std::string::npos) << pcsv;
  EXPECT_NE(pcsv.find(",7.4\n"), std::string::npos) << pcsv;
  EXPECT_NE(pcsv.find(",8.6\n"), std::string::npos) << pcsv;
  if (!gnuplot_path().empty()) {
    const std::string gp = slurp(dir / "exact_match_vs_length.gp");
    EXPECT_NE(gp.find("with yerrorbars"), std::string::npos);
    EXPECT_EQ(gp.find("yerrorlines"), std::string::npos);  // no lines between sparse lengths
    EXPECT_NE(gp.find("\"alibi (not converged)\""), std::string::npos);
    EXPECT_NE(gp.find("95 % t-interval, n = 3 seeds, clipped to [0, 100]"), std::string::npos);
    EXPECT_NE(gp.find("keyentry"), std::string::npos);  // training range named in the key
    EXPECT_NE(slurp(dir / "train_loss.gp").find("filledcurves"), std::string::npos);
    EXPECT_NE(slurp(dir / "train_loss.gp").find("\"alibi (1/3 not converged)\""),
              std::string::npos);
    for (const auto& p : f.pngs) EXPECT_TRUE(is_png_file(p)) << p;
    EXPECT_EQ(f.pngs.size(), 3u) << f.plot_note;
  }
  fs::remove_all(dir);
}

TEST(ReportStats, ExcludePolicyCountsAndNotConvergedRows) {
  const fs::path dir = scratch_dir("exclude");
  ReportInput in = fake_input();
  in.unconverged = "exclude";
  // A third scheme whose only run missed: every cell "not converged".
  in.labels.push_back("nope");
  in.seeds = {1, 2, 3};
  for (int64_t len : {4, 8, 16}) in.rows.push_back(result_row("nope", 1, len, len == 4 ? 1 : 0, 0.1, 0));
  const Stat a = aggregate(in.rows, "alibi", "len_8", "exact_match", true);
  EXPECT_EQ(a.n, 2);
  EXPECT_EQ(a.n_excluded, 1);
  EXPECT_EQ(a.n_unconverged, 0);
  EXPECT_EQ(a.n_converged, 2);
  EXPECT_EQ(aggregate_runs(in.rows, "alibi", 0, "exact_match", true).n, 2);
  write_report(dir.string(), in, false);
  const std::string md = slurp(dir / "report.md");
  const size_t table = md.find("## exact match (%) by task length");
  const std::string alibi = line_of(md, "alibi", table);
  EXPECT_EQ(alibi.find("†"), std::string::npos) << alibi;  // the unconverged run is left out
  EXPECT_NE(alibi.find("(n = 2)"), std::string::npos) << alibi;
  const std::string nope = line_of(md, "nope", table);
  EXPECT_NE(nope.find("| not converged | not converged | not converged | not converged |"),
            std::string::npos)
      << nope;
  EXPECT_NE(md.find("compare.unconverged: exclude — 2 runs that missed the stop criterion left "
                    "out: alibi seed 3, nope seed 1"),
            std::string::npos)
      << md;
  const std::string table_csv = slurp(dir / "table_exact_match.csv");
  EXPECT_NE(table_csv.find("nope,len_8,8,false,,,,0,0,not converged\n"), std::string::npos)
      << table_csv;
  fs::remove_all(dir);
}

TEST(ReportStats, CannotLearnSchemeIsMarkedAndNeverExcluded) {
  const fs::path dir = scratch_dir("cannot");
  ReportInput in = fake_input();
  in.unconverged = "exclude";
  in.cannot_learn["alibi"] = "no positions in an encoder-decoder";
  EXPECT_TRUE(unconverged_runs(in).empty());
  write_report(dir.string(), in, false);
  const std::string md = slurp(dir / "report.md");
  const size_t table = md.find("## exact match (%) by task length");
  const std::string alibi = line_of(md, "alibi ‡", table);
  EXPECT_NE(alibi.find("†"), std::string::npos) << alibi;  // kept and marked, not excluded
  EXPECT_EQ(alibi.find("(n = 2)"), std::string::npos) << alibi;
  EXPECT_NE(md.find("cannot learn by construction: no positions in an encoder-decoder"),
            std::string::npos);
  fs::remove_all(dir);
}

// ---------------- json_member_text (train/metrics.h) ----------------

TEST(ReportStats, JsonMemberTextReadsNestedDocuments) {
  const std::string doc =
      "{\"step\": 40,\n \"results\": [{\"split\": \"a]}\\\"\", \"x\": [1, [2, {}], null]}],\n"
      " \"convergence\": {\"criterion\": \"a}b\", \"met\": true}, \"e\": []}\n";
  EXPECT_EQ(json_member_text(doc, "step", "f"), "40");
  EXPECT_EQ(json_member_text(doc, "convergence", "f"),
            "{\"criterion\": \"a}b\", \"met\": true}");
  EXPECT_EQ(json_member_text(doc, "e", "f"), "[]");
  EXPECT_EQ(json_member_text(doc, "absent", "f"), "");
  EXPECT_EQ(json_member_text("{}", "step", "f"), "");
  for (const std::string bad : {"", "[1]", "{\"a\": [1, 2}", "{\"a\": {\"b\": 1]}", "{\"a\": 1} x",
                                "{\"a\": tru}", "{\"a\": \"open}", "{\"a\" 1}"}) {
    try {
      json_member_text(bad, "a", "the/eval.json");
      ADD_FAILURE() << "no error for: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the/eval.json: malformed JSON"), std::string::npos)
          << e.what();
    }
  }
}

// A \uXXXX escape is one character in UTF-8, a surrogate pair one code point; an escape JSON does not
// have and a lone surrogate are malformed. Injected: "v\u202em" (RIGHT-TO-LEFT OVERRIDE), which the
// reader once kept as its low byte only ("v.m").
TEST(ReportStats, JsonStringsDecodeUnicodeEscapesToUtf8) {
  auto s_of = [](const std::string& quoted) {
    const MetricRow row = parse_metric_row("{\"s\": " + quoted + "}", "f");
    const MetricValue* v = row.get("s");
    return v && v->kind == MetricValue::Kind::Str ? v->s : std::string("<not a string>");
  };
  EXPECT_EQ(s_of("\"v\\u202em\""), "v\xE2\x80\xAEm");
  EXPECT_EQ(s_of("\"\\u00e9\\u00E9\""), "\xC3\xA9\xC3\xA9");
  EXPECT_EQ(s_of("\"\\ud83d\\ude00\""), "\xF0\x9F\x98\x80");  // a surrogate pair
  EXPECT_EQ(s_of("\"a\\u0007b\""), "a\ab");
  EXPECT_EQ(s_of("\"\\b\\f\\/\\\"\\\\\\n\""), "\b\f/\"\\\n");
  // What pelab writes reads back as it was.
  const std::string odd = "x\x01\t\"y\xE2\x80\xAE";
  EXPECT_EQ(s_of(json_quote(odd)), odd);
  for (const std::string bad : {"\"\\ud800\"", "\"\\ud800\\u0041\"", "\"\\udc00\"",
                                "\"\\u12g4\"", "\"\\u12\"", "\"\\x41\"", "\"\\q\""}) {
    const std::string e = pelab::testing::error_of([&] { s_of(bad); });
    EXPECT_NE(e.find("f: malformed metrics line"), std::string::npos) << bad << ": " << e;
  }
}

// A document nested deeper than kMaxJsonDepth is malformed, whatever its depth: one error, no
// recursion down the stack. Injected: 100000 nested arrays in an eval.json member (which crashed
// `pelab compare --merge` with SIGSEGV).
TEST(ReportStats, JsonNestedDeeperThanTheLimitIsOneError) {
  auto nested = [](int levels) {
    return "{\"step\": 1, \"deep\": " + std::string(levels, '[') + std::string(levels, ']') +
           ", \"convergence\": null}";
  };
  EXPECT_EQ(json_member_text(nested(kMaxJsonDepth - 1), "step", "f"), "1");
  for (int levels : {kMaxJsonDepth, 100000}) {
    const std::string e =
        pelab::testing::error_of([&] { json_member_text(nested(levels), "step", "the/eval.json"); });
    EXPECT_NE(e.find("the/eval.json: malformed JSON (nested deeper than " +
                     std::to_string(kMaxJsonDepth) + " levels at offset"),
              std::string::npos)
        << levels << ": " << e;
  }
}

// ---------------- read_convergence ----------------

TEST(ReportStats, ReadConvergenceFromEvalJson) {
  const fs::path dir = scratch_dir("readconv");
  std::ofstream(dir / "eval.json") << "{\"step\": 40, \"checkpoint\": \"x\", \"results\": [\n]}\n";
  EXPECT_FALSE(read_convergence(dir.string()).has_criterion());  // no record
  std::ofstream(dir / "eval.json")
      << "{\"step\": 40, \"convergence\": {\"criterion\": \"valid.loss <= 0.1\", \"met\": true, "
         "\"step\": 30, \"steps_run\": 30, \"metric\": \"valid.loss\", \"value\": 0.09}, "
         "\"results\": [\n]}\n";
  Convergence c = read_convergence(dir.string());
  EXPECT_TRUE(c.has_criterion());
  EXPECT_TRUE(c.met());
  EXPECT_EQ(c.step, 30);
  EXPECT_EQ(c.steps_run, 30);
  EXPECT_EQ(c.criterion, "valid.loss <= 0.1");
  EXPECT_EQ(c.metric, "valid.loss");
  EXPECT_DOUBLE_EQ(c.value, 0.09);
  std::ofstream(dir / "eval.json")
      << "{\"convergence\": {\"criterion\": \"a}b\", \"met\": false, \"step\": null, "
         "\"steps_run\": 50, \"metric\": \"valid.loss\", \"value\": 0.5}}\n";
  c = read_convergence(dir.string());
  EXPECT_FALSE(c.met());
  EXPECT_EQ(c.step, -1);
  EXPECT_EQ(c.criterion, "a}b");
  std::ofstream(dir / "eval.json") << "{\"convergence\": {\"criterion\": \"x\"}}\n";
  try {
    read_convergence(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// ---------------- the config keys ----------------

namespace {
const char* kBase =
    "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: 4,\n"   // 1
    "       test_lengths: [2, 6], num_eval_examples: 4}\n"                          // 2
    "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1}\n"  // 3
    "train: {steps: 8, batch_size: 8, warmup: 2, log_every: 4, eval_every: 0,\n"    // 4
    "        checkpoint_every: 4, threads: 1}\n"                                    // 5
    "compare:\n";                                                                   // 6

std::string load_error(const std::string& compare_body, const std::vector<std::string>& sets = {}) {
  try {
    load_compare_string(std::string(kBase) + compare_body, "c.yaml", sets);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(ReportStats, ParsesUnconvergedPolicyAndExpectCannotLearn) {
  const CompareSpec spec = load_compare_string(
      std::string(kBase) +
          "  unconverged: exclude\n"                                                  // 7
          "  schemes:\n"                                                              // 8
          "    - rope\n"                                                              // 9
          "    - {name: none, set: {pe.scheme: none}, expect: cannot_learn,\n"        // 10
          "       why: \"no positions in an encoder-decoder\"}\n",                    // 11
      "c.yaml");
  EXPECT_EQ(spec.unconverged, "exclude");
  ASSERT_EQ(spec.schemes.size(), 2u);
  EXPECT_FALSE(spec.schemes[0].cannot_learn);
  EXPECT_TRUE(spec.schemes[1].cannot_learn);
  EXPECT_EQ(spec.schemes[1].why, "no positions in an encoder-decoder");
  EXPECT_EQ(spec.schemes[1].sets, std::vector<std::string>({"pe.scheme=none"}));
  EXPECT_EQ(load_compare_string(std::string(kBase) + "  schemes: [rope]\n", "c.yaml", {})
                .unconverged,
            "report");
  EXPECT_EQ(load_compare_string(std::string(kBase) + "  schemes: [rope]\n", "c.yaml",
                                {"compare.unconverged=fail"})
                .unconverged,
            "fail");

  std::string e = load_error("  unconverged: ignore\n  schemes: [rope]\n");
  // The compare section is read by the config's schema: its enum message, and did-you-mean.
  EXPECT_NE(e.find("c.yaml:7: compare.unconverged: 'ignore' is not one of report, exclude, fail"),
            std::string::npos)
      << e;
  e = load_error("  schemes: [rope]\n", {"compare.unconverged=maybe"});
  EXPECT_NE(e.find("--set compare.unconverged=maybe: compare.unconverged: 'maybe' is not one of "
                   "report"),
            std::string::npos)
      << e;
  e = load_error("  unconverged: exlcude\n  schemes: [rope]\n");
  EXPECT_NE(e.find("c.yaml:7: compare.unconverged: 'exlcude' is not one of report, exclude, fail; "
                   "did you mean 'exclude'?"),
            std::string::npos)
      << e;
  e = load_error("  schemes:\n    - {name: none, set: {pe.scheme: none},\n"
                 "       expect: nothing, why: x}\n");
  EXPECT_NE(e.find("c.yaml:9: compare.schemes[0] (none).expect: expected cannot_learn or learn, "
                   "got 'nothing'"),
            std::string::npos)
      << e;
  e = load_error("  schemes:\n    - {name: none, set: {pe.scheme: none},\n"
                 "       expect: cannot_learn}\n");
  EXPECT_NE(e.find("c.yaml:9: compare.schemes[0] (none): expect: cannot_learn needs why"),
            std::string::npos)
      << e;
  e = load_error("  schemes:\n    - {name: none, set: {pe.scheme: none}, why: because}\n");
  EXPECT_NE(e.find("c.yaml:8: compare.schemes[0] (none).why explains expect: cannot_learn"),
            std::string::npos)
      << e;
  e = load_error("  schemes:\n    - {name: none, expectation: cannot_learn}\n");
  EXPECT_NE(e.find("c.yaml:8: compare.schemes[0]: unknown key 'expectation'; did you mean "
                   "'expect'? (valid: name, set, expect, why)"),
            std::string::npos)
      << e;
}

// ---------------- the fail policy, end to end ----------------

TEST(ReportStats, FailPolicyExitsNonZeroListingUnconvergedRuns) {
  const fs::path dir = scratch_dir("fail");
  const std::string cfg = (dir / "c.yaml").string();
  auto write_cfg = [&](const std::string& expect) {
    std::ofstream(cfg) << kBase << "  seeds: [1, 2]\n  schemes:\n    - {name: rope, set: "
                       << "{pe.scheme: rope}" << expect << "}\n";
  };
  write_cfg("");
  const std::string out = (dir / "report").string();
  auto run = [&](const std::vector<std::string>& extra, std::string& err) {
    std::vector<std::string> args = {"compare", cfg, "--out", out, "--progress", "none",
                                     "--no-plots"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::ostringstream o, e;
    const int rc = compare_cli(args, o, e);
    err = e.str();
    return rc;
  };
  std::string err;
  ASSERT_EQ(run({"--set", "compare.unconverged=fail"}, err), 0) << err;  // no criterion: no fail

  // The runs' eval.json now record a missed criterion (seed 2) and a met one (seed 1), as the
  // trainer does with train.stop_when; the runs are reused, the convergence read again.
  auto record = [&](int seed, bool met) {
    const fs::path p = fs::path(out) / "runs" / ("rope_seed" + std::to_string(seed)) / "eval.json";
    std::string t = slurp(p);
    ASSERT_EQ(t.front(), '{');
    const std::string record =
        std::string("{\"criterion\": \"valid.exact_match >= 0.99\", \"met\": ") +
        (met ? "true, \"step\": 4" : "false, \"step\": null") +
        ", \"steps_run\": 8, \"metric\": \"valid.exact_match\", \"value\": 0.5}";
    // The trainer writes "convergence": null without a criterion; replace it, else add the key.
    const std::string none = "\"convergence\": null";
    const size_t at = t.find(none);
    if (at != std::string::npos)
      t.replace(at, none.size(), "\"convergence\": " + record);
    else
      t = "{\"convergence\": " + record + ", " + t.substr(1);
    std::ofstream(p) << t;
  };
  record(1, true);
  record(2, false);
  EXPECT_EQ(run({"--set", "compare.unconverged=fail"}, err), 1);
  const std::string last = err.substr(err.rfind("pelab: error:"));
  EXPECT_EQ(last.find("pelab: error: compare: 1 run missed the stop criterion (compare.unconverged: "
                      "fail): rope seed 2"),
            0u)
      << err;
  EXPECT_EQ(last.find('\n'), last.size() - 1) << last;  // one line
  // The report was written first, with the run marked.
  const std::string md = slurp(fs::path(out) / "report.md");
  EXPECT_NE(md.find("| rope | `valid.exact_match >= 0.99` | 1/2 | 4 [4–4] |"), std::string::npos)
      << md;
  EXPECT_NE(md.find(" †"), std::string::npos);
  const auto rows = parse_results_csv(slurp(fs::path(out) / "results.csv"), "results.csv");
  for (const auto& r : rows) EXPECT_EQ(r.converged, r.seed == 1 ? Converged::yes : Converged::no);
  // report keeps the exit status 0 and says which runs are marked; a scheme declared unable to
  // learn never fails.
  EXPECT_EQ(run({}, err), 0) << err;
  EXPECT_NE(err.find("1 run missed the stop criterion (marked † in the report): rope seed 2"),
            std::string::npos)
      << err;
  write_cfg(", expect: cannot_learn, why: \"test\"");
  EXPECT_EQ(run({"--set", "compare.unconverged=fail"}, err), 0) << err;
  EXPECT_NE(slurp(fs::path(out) / "report.md").find("| rope ‡ |"), std::string::npos);
  fs::remove_all(dir);
}
