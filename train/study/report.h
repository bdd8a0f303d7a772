// pelab — the report of a length-extrapolation comparison (docs/experiments.md): results.csv,
// report.md (schemes × lengths, mean and 95 % Student-t interval over seeds, clipped to the
// metric's range; training range marked; convergence of every run (train.stop_when) with the runs
// that missed it marked †; wall times, the command and the config) and gnuplot PNG plots, each next
// to the .dat/.csv behind it. Also the small gnuplot helpers shared with `pelab plot-pe`.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "train/metrics.h"
#include "train/stop_criterion.h"
#include "train/text_file.h"

namespace pelab {

// One evaluation of one run (scheme × seed) with one eval-time variant on one split.
struct ResultRow {
  std::string scheme;   // the compare entry's name ("rope", "rope+rand")
  std::string variant;  // "" = as trained; else an eval-time variant ("pi", "yarn", ...)
  int64_t seed = 0;
  std::string split;         // "len_24", "ctx_128", a file stem
  int64_t length = 0;        // task / window length; 0 when not applicable
  int in_distribution = -1;  // 1 / 0; -1 unknown
  std::string status = "ok";
  double loss = std::numeric_limits<double>::quiet_NaN();
  double perplexity = std::numeric_limits<double>::quiet_NaN();
  double token_accuracy = std::numeric_limits<double>::quiet_NaN();
  double exact_match = std::numeric_limits<double>::quiet_NaN();
  double train_wall_s = std::numeric_limits<double>::quiet_NaN();
  double eval_wall_s = std::numeric_limits<double>::quiet_NaN();  // this run+variant, all splits
  // The run's training stop criterion (train.stop_when): met, missed, or none.
  Converged converged = Converged::no_criterion;
  int64_t criterion_step = -1;  // the step at which it was met; -1 when not met / no criterion
  bool available() const { return status == "ok"; }
  // "rope" or "rope+pi"
  std::string label() const { return variant.empty() ? scheme : scheme + "+" + variant; }
};

// Columns of results.csv, in order.
const std::vector<std::string>& results_csv_columns();
std::string results_csv(const std::vector<ResultRow>& rows);
// Reads results.csv text back (throws pelab::Error naming `where` on malformed input).
std::vector<ResultRow> parse_results_csv(const std::string& text, const std::string& where);
// Value of a metric ("loss", "perplexity", "token_accuracy", "exact_match") of a row.
double row_metric(const ResultRow& r, const std::string& metric);

// Training-loss curve of one run (train rows of its metrics.jsonl).
struct LossCurve {
  std::string scheme;
  int64_t seed = 0;
  std::vector<std::pair<int64_t, double>> points;  // (step, loss)
};

struct ReportInput {
  std::string title;
  std::string task_summary;    // one line: task, formulation, lengths
  std::string primary_metric;  // exact_match | token_accuracy | perplexity | loss
  std::string length_name;     // "task length" / "context length"
  // In-distribution range of lengths (inclusive); the report marks these columns.
  int64_t train_min = 0, train_max = 0;
  std::string train_range_text;  // e.g. "task lengths 1–16"
  std::vector<int64_t> seeds;
  std::vector<std::string> labels;                 // row order (scheme or scheme+variant)
  std::map<std::string, std::string> label_notes;  // label -> one-line description
  std::vector<ResultRow> rows;
  std::vector<LossCurve> curves;
  std::string command;        // the exact command line
  std::string config_text;    // the config file as given
  std::string resolved_yaml;  // the resolved base config (overrides applied)
  std::vector<std::pair<std::string, std::string>> run_settings;  // label -> "--set ..." summary
  double total_wall_s = std::numeric_limits<double>::quiet_NaN();
  std::string timing_note;  // threads, machine load, ...
  bool log_x = false;       // plots over lengths on a log2 axis (lm)
  // Markdown of the hyper-parameter search (compare.search: what each candidate scored on
  // validation, what was chosen), printed as its own section; "" = no search.
  std::string search_markdown;
  // Markdown of the "Where the runs were made" section (each run's folder and machine from its
  // record, train/study/run_record.h); "" = none.
  std::string records_markdown;
  // Markdown of the "Against the literature" section (train/study/literature.h) and the text of
  // literature.csv; "" = the config has no literature section (a stale literature.csv is removed).
  std::string literature_markdown, literature_csv;
  // compare.unconverged: "report" (keep runs that missed the stop criterion, marked †) or
  // "exclude" (leave them out of means and intervals; the tables say how many). "fail" reports
  // like "report"; the command fails after writing it (compare.h).
  std::string unconverged = "report";
  std::map<std::string, std::string> criteria;      // scheme -> stop criterion text ("" = none)
  std::map<std::string, std::string> cannot_learn;  // scheme -> why it cannot learn the task
};

// Student-t quantile function: the t with P(T <= t) = p for T ~ t(df), df >= 1, 0 < p < 1
// (inverts the t CDF through the regularized incomplete beta function; |error| < 1e-9).
double student_t_quantile(double p, double df);
// Regularized incomplete beta I_x(a, b), a, b > 0, 0 <= x <= 1.
double incomplete_beta(double a, double b, double x);
// The range a metric's values lie in (stored units: accuracies as fractions): [0, 1] for exact
// match / token accuracy, [0, inf) for loss, [1, inf) for perplexity.
std::pair<double, double> metric_range(const std::string& metric);

// Mean and 95 % Student-t interval over the available values (n = count):
// mean ± t_{0.975, n-1} · s / √n, s the sample std; the interval is clipped to metric_range().
struct Stat {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double std = std::numeric_limits<double>::quiet_NaN();   // sample std (n >= 2)
  double half = std::numeric_limits<double>::quiet_NaN();  // t·s/√n before clipping (n >= 2)
  double ci_low = std::numeric_limits<double>::quiet_NaN();   // clipped interval (n >= 2)
  double ci_high = std::numeric_limits<double>::quiet_NaN();
  bool clipped = false;     // the interval reached past the metric's range
  int64_t n = 0;            // values used
  int64_t n_converged = 0;  // of them, runs that met the stop criterion
  int64_t n_unconverged = 0;  // of them, runs that missed it (marked †)
  int64_t n_excluded = 0;     // runs left out (compare.unconverged: exclude)
  bool any_criterion = false;  // some run of the cell had a stop criterion
  std::string status;  // non-ok status of the rows when none is available ("n/a (> max_positions)")
};
// Mean and interval of `values` (no convergence information) for `metric`'s range.
Stat stat_of(const std::vector<double>& values, const std::string& metric);
// The same with the interval clipped to [lo, hi] (e.g. -inf, inf for differences of a metric).
Stat stat_of_range(const std::vector<double>& values, double lo, double hi);
// One run's value (seed, value, converged as ResultRow::converged).
struct RunMean {
  int64_t seed = 0;
  double value = std::numeric_limits<double>::quiet_NaN();
  Converged converged = Converged::no_criterion;
};
// Each run's mean of `metric` over the columns (splits) of `label` with in_distribution ==
// `in_distribution` — or, with length > 0, over its columns at that length only —, by seed; a run
// counts only when every such column has a value. *status (when given) gets "n/a" when some
// column was not available.
std::vector<RunMean> run_means(const std::vector<ResultRow>& rows, const std::string& label,
                               int in_distribution, const std::string& metric, int64_t length = 0,
                               std::string* status = nullptr);
// The statistic of run values as the report's tables compute it (exclude_unconverged leaves out
// runs with converged == Converged::no, counted in n_excluded).
Stat stat_of_run_means(const std::vector<RunMean>& runs, const std::string& metric,
                       bool exclude_unconverged, const std::string& status = "");
// Statistic of `metric` over the rows of `label` on `split`; exclude_unconverged leaves out rows
// of runs that missed their stop criterion (counted in n_excluded).
Stat aggregate(const std::vector<ResultRow>& rows, const std::string& label,
               const std::string& split, const std::string& metric,
               bool exclude_unconverged = false);
// Statistic over seeds of each run's mean of `metric` over the columns with in_distribution ==
// `in_distribution` (a run counts only when every such column has a value).
Stat aggregate_runs(const std::vector<ResultRow>& rows, const std::string& label,
                    int in_distribution, const std::string& metric,
                    bool exclude_unconverged = false);

// A table cell: "93.0 [88.1, 97.9]" (exact match / token accuracy in percent), "3.21 [3.02,
// 3.40]" (perplexity / loss), "93.0" with one value; " (n = 2)" when n differs from `expected_n`
// (> 0); "†" when a run in the cell missed its stop criterion; "not converged" when every run was
// excluded for that; else the status ("n/a (> max_positions)").
std::string format_cell(const Stat& s, const std::string& metric, int64_t expected_n = 0);
// The markdown table of labels × splits for a metric (in-distribution columns marked "(train)"),
// followed by its caption (interval, n, clipping, convergence marks).
std::string metric_table_markdown(const ReportInput& in, const std::string& metric);
// The convergence table: scheme, criterion, runs converged k/n, steps to criterion (mean
// [min–max]), the in-distribution primary metric, and the schemes that cannot learn the task.
std::string convergence_table_markdown(const ReportInput& in);
// Runs ("scheme seed N") that missed their stop criterion, excluding schemes in in.cannot_learn.
std::vector<std::string> unconverged_runs(const ReportInput& in);

// What write_report made.
struct ReportFiles {
  std::string report_md, results_csv;
  std::vector<std::string> pngs;  // written PNG plots
  std::vector<std::string> data;  // .dat / .csv behind the plots
  std::string plot_note;          // why plots are missing, if they are
};
// Writes results.csv, report.md, the summary tables as CSV and (when gnuplot is available and
// `plots`) the PNG plots into `dir`.
ReportFiles write_report(const std::string& dir, const ReportInput& in, bool plots = true);

// ---------------- gnuplot helpers ----------------
// Path of a usable gnuplot, "" when none is installed (PELAB_GNUPLOT overrides the search).
std::string gnuplot_path();
// "pngcairo" when the installed gnuplot has it, else "png"; "" without gnuplot.
std::string gnuplot_png_terminal();
// Draws `png_path` (<dir>/<stem>.png) with gnuplot: writes <dir>/<stem>.gp (a first line that
// sends the picture to <stem>.png, or to the file named by its argument: `gnuplot -c <stem>.gp
// FILE`, then `script`, which sets no output of its own) and runs it in <dir> into a new temporary,
// which is checked whole (is_png_file) and only then renamed over png_path, so a failed or cut-short
// drawing never replaces a good picture. False (the reason in *error) when gnuplot is missing or
// fails; a picture that gnuplot reports as drawn but is not whole (a full disk) throws
// "cannot write <png_path>: ...".
bool run_gnuplot(const std::string& png_path, const std::string& script, std::string* error);
// True when `path` is a whole PNG file: the signature, IHDR first, every chunk inside the file
// with its CRC matching, IEND at the very end; else false, with what is wrong in *why.
bool is_png_file(const std::string& path, std::string* why = nullptr);
// `s` as a gnuplot string constant that can only print: double-quoted, with " and \ escaped, a
// line break as \n and every character gnuplot could act on (` runs a shell command inside double
// quotes, @ macros, $) or that is not printable written as an octal escape. The one way any text
// (titles, names, labels, file names) is put into a gnuplot script.
std::string gnuplot_quote(const std::string& s);

// ---------------- markdown (report.md, summary.md) ----------------
// The one way any text that is not pelab's own words (a title, a scheme, variant or split name, a
// test file's stem, a path, a machine's name, a reason from a config) is put into markdown, as
// gnuplot_quote is for gnuplot: it can only print, never start a line, a table cell, a link or
// markup, nor reorder what a reader sees.
// Inline text (a heading, a table cell, a list item): line breaks and tabs become spaces; control
// characters, bidirectional and invisible formatting characters (U+202E RIGHT-TO-LEFT OVERRIDE,
// U+200B ZERO WIDTH SPACE, ...) and bytes that are not UTF-8 become U+FFFD; the characters markdown
// acts on inside a line (\ ` * [ ] < & | ~) are escaped with a backslash. Printable text, UTF-8
// included, is kept as it is.
std::string md_text(const std::string& s);
// `s` as a code span ("`train.lr=0.001`"): delimited by more backquotes than any run in it, `|`
// escaped (it may sit in a table cell), line breaks as spaces, the characters md_text replaces
// replaced.
std::string md_code(const std::string& s);
// `s` as a fenced code block with info string `info` ("yaml", "sh"): the fence longer than any run
// of backquotes in `s`, so no line of it closes the block; control characters (but line breaks and
// tabs), bidirectional and invisible characters and bytes that are not UTF-8 replaced by U+FFFD.
std::string md_fence(const std::string& s, const std::string& info);

// Small formatting helpers shared by compare / plot-pe (the file helpers are in text_file.h).
// (A CSV text cell: csv_field, train/metrics.h.)
std::string format_double(double v, int precision = 6);  // "%.*g"; "" when not finite
std::string csv_number(double v);             // 17 significant digits; "" when not finite

}  // namespace pelab
