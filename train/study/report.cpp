// pelab — comparison reports: write_report puts results.csv, report.md, the tables and the plots
// together (report.h). The parts: results.csv (report_csv.cpp), statistics (report_stats.cpp),
// tables (report_tables.cpp), plots (report_plots.cpp), gnuplot (report_gnuplot.cpp).
#include "train/study/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/study/report_internal.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace report_detail;

namespace {

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "–";
  if (s < 60) return printf_number("%.1f s", s);
  if (s < 3600)
    return printf_number("%.0f", std::floor(s / 60)) + " min " + printf_number("%02.0f s", std::fmod(s, 60));
  return printf_number("%.0f", std::floor(s / 3600)) + " h " + printf_number("%02.0f min", std::fmod(s, 3600) / 60);
}

// The metrics the report shows: the primary one, token accuracy (a task decoded for exact match),
// and perplexity (or loss, for a language model).
std::vector<std::string> report_metrics(const ReportInput& in) {
  const bool lm = in.primary_metric == "perplexity" || in.primary_metric == "loss";
  std::vector<std::string> metrics = {in.primary_metric};
  if (!lm && in.primary_metric != "token_accuracy") metrics.push_back("token_accuracy");
  metrics.push_back(lm ? (in.primary_metric == "loss" ? "perplexity" : "loss") : "perplexity");
  return metrics;
}

// results.csv, and literature.csv when the config has a literature section (else a stale one of
// an earlier config is removed).
void write_result_files(const std::string& dir, const ReportInput& in, ReportFiles& files) {
  std::error_code ec;
  files.results_csv = dir + "/results.csv";
  write_text_file(files.results_csv, results_csv(in.rows));
  const std::string literature_csv = dir + "/literature.csv";
  if (!in.literature_csv.empty()) {
    write_text_file(literature_csv, in.literature_csv);
    files.data.push_back(literature_csv);
  } else if (fs::exists(literature_csv, ec)) {
    fs::remove(literature_csv, ec);  // from an earlier config with a literature section
    PELAB_CHECK(!ec, "report: cannot remove the stale ", literature_csv, ": ", ec.message());
  }
}

// Each metric against length (the first two; every one for a language model), the training loss,
// and the tables as CSV; with PNGs when plots are on and gnuplot is found.
void write_plots_and_tables(const std::string& dir, const ReportInput& in,
                            const std::vector<std::string>& metrics,
                            const std::vector<Column>& cols, bool plots, ReportFiles& files) {
  const bool lm = in.primary_metric == "perplexity" || in.primary_metric == "loss";
  const bool can_plot = plots && !gnuplot_path().empty();
  if (plots && !can_plot)
    files.plot_note = "gnuplot not found: no PNG plots (the .dat/.csv files are written)";
  if (!plots) files.plot_note = "plots disabled";
  PlotResult pr;
  for (size_t i = 0; i < metrics.size(); ++i)
    if (i < 2 || lm) plot_metric(dir, in, metrics[i], cols, pr, can_plot);
  plot_loss(dir, in, pr, can_plot);
  for (const auto& m : metrics) {
    write_text_file(dir + "/table_" + m + ".csv", summary_csv(in, m, cols));
    files.data.push_back(dir + "/table_" + m + ".csv");
  }
  files.pngs = pr.pngs;
  for (const auto& d : pr.data) files.data.push_back(d);
  if (!pr.error.empty()) files.plot_note = "gnuplot failed: " + pr.error;
}

// The compute time summed over the runs (each run's training and each evaluation counted once).
void wall_time_line(std::ostream& md, const ReportInput& in) {
  std::set<std::pair<std::string, int64_t>> runs;
  std::set<std::tuple<std::string, std::string, int64_t>> evals;
  double train_sum = 0, eval_sum = 0;
  for (const auto& r : in.rows) {
    if (std::isfinite(r.train_wall_s) && runs.insert({r.scheme, r.seed}).second)
      train_sum += r.train_wall_s;
    if (std::isfinite(r.eval_wall_s) && evals.insert({r.scheme, r.variant, r.seed}).second)
      eval_sum += r.eval_wall_s;
  }
  md << "- Wall time of all runs: " << duration_text(train_sum + eval_sum) << " (training "
     << duration_text(train_sum) << ", evaluation " << duration_text(eval_sum) << ")";
  if (std::isfinite(in.total_wall_s))
    md << "; this invocation of pelab compare: " << duration_text(in.total_wall_s);
  md << (in.timing_note.empty() ? "" : " (" + md_text(in.timing_note) + ")") << ".\n";
}

// The report's opening: title, task, training range, seeds, primary metric, wall time and the
// runs that missed their criterion.
void report_header(std::ostream& md, const ReportInput& in) {
  md << "# " << md_text(in.title) << "\n\n";
  md << in.task_summary << "\n\n";
  md << "- Training range: " << in.train_range_text
     << "; columns marked **(train)** are inside it, the others test length extrapolation.\n";
  md << "- Seeds:";
  for (size_t i = 0; i < in.seeds.size(); ++i) md << (i ? ", " : " ") << in.seeds[i];
  md << (in.seeds.size() > 1
             ? " — cells are the mean and its 95 % Student-t interval over the n = " +
                   std::to_string(in.seeds.size()) +
                   " seeds, clipped to the metric's range (each table's caption says how).\n"
             : " — one seed (n = 1), so no interval is shown.\n");
  md << "- Primary metric: " << metric_title(in.primary_metric)
     << (in.primary_metric == "exact_match" ? " (greedy decoding, whole output must match)" : "")
     << ". Best value per column in bold. \"n/a (> max_positions)\": a learned absolute table "
        "cannot represent that length.\n";
  wall_time_line(md, in);
  const std::vector<std::string> missed = unconverged_runs(in);
  md << "- Convergence (`train.stop_when`): ";
  if (missed.empty()) {
    md << "no run missed its stop criterion";
  } else {
    md << "runs that missed the stop criterion (" << missed.size() << ":";
    for (size_t i = 0; i < missed.size(); ++i) md << (i ? ", " : " ") << md_text(missed[i]);
    md << ") are marked † in the tables and drawn as open points \"(not converged)\" in the "
          "plots";
  }
  md << "; compare.unconverged: " << in.unconverged << ".\n";
}

// One row per scheme row: its settings and the mean train and eval wall time of its runs.
void wall_time_table(std::ostream& md, const ReportInput& in) {
  md << "## Schemes and wall time\n\n";
  md << "| row | settings | train wall time per run (mean) | eval wall time per run (mean) |\n";
  md << "|---|---|---:|---:|\n";
  for (const auto& label : in.labels) {
    std::set<int64_t> seen_t, seen_e;
    double tsum = 0, esum = 0;
    int tn = 0, en = 0;
    for (const auto& r : in.rows) {
      if (r.label() != label) continue;
      if (std::isfinite(r.train_wall_s) && seen_t.insert(r.seed).second) {
        tsum += r.train_wall_s;
        ++tn;
      }
      if (std::isfinite(r.eval_wall_s) && seen_e.insert(r.seed).second) {
        esum += r.eval_wall_s;
        ++en;
      }
    }
    std::string settings;
    for (const auto& [l, s] : in.run_settings)
      if (l == label) settings = s;
    auto note = in.label_notes.find(label);
    if (note != in.label_notes.end()) settings += (settings.empty() ? "" : "; ") + note->second;
    md << "| " << md_text(label) << " | " << (settings.empty() ? "–" : settings) << " | "
       << (tn ? duration_text(tsum / tn) : "–") << " | " << (en ? duration_text(esum / en) : "–")
       << " |\n";
  }
  md << "\n";
}

// The report's closing: the files it wrote and how to reproduce it (command and configs).
void files_and_reproduce(std::ostream& md, const ReportInput& in) {
  md << "## Files\n\n";
  md << "`results.csv` (one row per scheme × variant × seed × split, with the run's convergence), "
        "`table_<metric>.csv` (the tables above: mean, ci_low, ci_high, n, n_converged), `<metric>_vs_length.{dat,csv,png}`, `train_loss.{dat,csv,png}`, "
     << (in.literature_csv.empty() ? "" : "`literature.csv` (the tables of \"Against the literature\"), ")
     << "`runs/<scheme>_seed<N>/` (each run's config, metrics, checkpoints and evaluation "
        "cache).\n\n";
  md << "## Reproduce\n\n" << md_fence(in.command, "sh") << "\n";
  md << "Re-running the command reuses finished runs and cached evaluations and resumes "
        "interrupted runs.\n\n";
  md << "### Config file\n\n" << md_fence(in.config_text, "yaml") << "\n";
  md << "### Resolved base config (before the per-scheme settings)\n\n<details><summary>"
        "config</summary>\n\n"
     << md_fence(in.resolved_yaml, "yaml") << "\n</details>\n";
}

}  // namespace

// ---------------- the report ----------------

ReportFiles write_report(const std::string& dir, const ReportInput& in, bool plots) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  PELAB_CHECK(!ec, "report: cannot create ", dir, ": ", ec.message());
  ReportFiles files;
  write_result_files(dir, in, files);
  const std::vector<Column> cols = columns_of(in.rows);
  const std::vector<std::string> metrics = report_metrics(in);
  write_plots_and_tables(dir, in, metrics, cols, plots, files);
  auto has_png = [&](const std::string& stem) {
    return std::find(files.pngs.begin(), files.pngs.end(), dir + "/" + stem + ".png") !=
           files.pngs.end();
  };

  std::ostringstream md;
  report_header(md, in);
  md << "\n## Convergence\n\n" << convergence_table_markdown(in) << "\n";
  for (const std::string& m : metrics) {
    md << "## " << metric_title(m) << " by " << in.length_name << "\n\n";
    md << metric_table_markdown(in, m) << "\n";
    if (has_png(m + "_vs_length"))
      md << "![" << metric_title(m) << " vs " << in.length_name << "](" << m
         << "_vs_length.png)\n\n";
  }
  if (!in.literature_markdown.empty()) md << "## Against the literature\n\n" << in.literature_markdown << "\n";
  md << "## Training loss\n\n";
  if (has_png("train_loss")) md << "![training loss](train_loss.png)\n\n";
  md << "Line: the mean over seeds at each logged step; band: the min–max over seeds. Data: "
        "`train_loss.csv` (every logged step of every run).\n\n";
  if (!in.search_markdown.empty())
    md << "## Hyper-parameter search\n\n" << in.search_markdown << "\n";
  wall_time_table(md, in);
  if (!files.plot_note.empty()) md << "_Plots: " << files.plot_note << "._\n\n";
  if (!in.records_markdown.empty())
    md << "## Where the runs were made\n\n" << in.records_markdown << "\n";
  files_and_reproduce(md, in);
  files.report_md = dir + "/report.md";
  write_text_file(files.report_md, md.str());
  return files;
}

}  // namespace pelab
