// pelab — comparison reports: results.csv, report.md and gnuplot plots (report.h).
#include "train/study/report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <tuple>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/metrics.h"

namespace fs = std::filesystem;

namespace pelab {

// ---------------- small helpers ----------------

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? json_number(v) : std::string(); }

std::string format_double(double v, int precision) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

namespace {

// A number for CSV: exact (17 digits), "" when not finite.
std::string num_cell(double v) { return csv_number(v); }

std::string csv_cell(const std::string& s) { return csv_field(s); }

// Splits CSV text into records of fields (RFC 4180 quoting).
std::vector<std::vector<std::string>> parse_csv(const std::string& text, const std::string& where) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> rec;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == ',') {
      rec.push_back(field);
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        rec.push_back(field);
        out.push_back(rec);
      }
      rec.clear();
      field.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  PELAB_CHECK(!quoted, where, ": unterminated quoted field");
  if (any || !field.empty()) {
    rec.push_back(field);
    out.push_back(rec);
  }
  return out;
}

double parse_num(const std::string& s, const std::string& where) {
  if (s.empty() || s == "null") return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  PELAB_CHECK(end && *end == '\0', where, ": not a number: '", s, "'");
  return v;
}

bool is_percent_metric(const std::string& m) { return m == "exact_match" || m == "token_accuracy"; }

bool higher_better(const std::string& m) { return is_percent_metric(m); }

std::string metric_title(const std::string& m) {
  if (m == "exact_match") return "exact match (%)";
  if (m == "token_accuracy") return "token accuracy (%)";
  if (m == "perplexity") return "perplexity";
  if (m == "loss") return "loss (nats/token)";
  return m;
}

// printf format for a metric's values in a table (by the magnitude of the mean).
const char* number_format(const std::string& metric, double scaled_mean) {
  if (is_percent_metric(metric)) return "%.1f";
  const double a = std::fabs(scaled_mean);
  return a >= 1000 ? "%.0f" : a >= 100 ? "%.1f" : "%.2f";
}

std::string range_text(const std::string& metric) {
  if (is_percent_metric(metric)) return "[0, 100] %";
  if (metric == "perplexity") return ">= 1";
  return ">= 0";
}

// The unconverged policy that applies to a label: a scheme that cannot learn the task is never
// excluded (it is shown, marked).
bool excludes(const ReportInput& in, const std::string& label) {
  if (in.unconverged != "exclude") return false;
  for (const auto& r : in.rows)
    if (r.label() == label) return !in.cannot_learn.count(r.scheme);
  return true;
}

std::string scheme_of(const ReportInput& in, const std::string& label) {
  for (const auto& r : in.rows)
    if (r.label() == label) return r.scheme;
  return label;
}

std::string row_name(const ReportInput& in, const std::string& label) {
  return in.cannot_learn.count(scheme_of(in, label)) ? label + " ‡" : label;
}

// Splits in column order: by length when every split has one, else by first appearance.
struct Column {
  std::string split;
  int64_t length = 0;
  int in_distribution = -1;
};

std::vector<Column> columns_of(const std::vector<ResultRow>& rows) {
  std::vector<Column> cols;
  std::set<std::string> seen;
  for (const auto& r : rows) {
    if (seen.insert(r.split).second) cols.push_back({r.split, r.length, r.in_distribution});
  }
  const bool all_len =
      std::all_of(cols.begin(), cols.end(), [](const Column& c) { return c.length > 0; });
  if (all_len)
    std::stable_sort(cols.begin(), cols.end(),
                     [](const Column& a, const Column& b) { return a.length < b.length; });
  return cols;
}

std::string column_header(const Column& c) {
  const std::string name = c.length > 0 ? std::to_string(c.length) : c.split;
  return c.in_distribution == 1 ? name + " (train)" : name;
}

std::string gnuplot_terminal_line(int w, int h) {
  const std::string t = gnuplot_png_terminal();
  if (t == "pngcairo")
    return "set terminal pngcairo size " + std::to_string(w) + "," + std::to_string(h) +
           " noenhanced font 'Sans,10'\n";
  return "set terminal png size " + std::to_string(w) + "," + std::to_string(h) + " noenhanced\n";
}

// Colours for up to 16 series (tab10 and six more); cycles beyond.
const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                         "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#a05195",
                         "#393b79", "#637939", "#e7969c", "#8c6d31"};
constexpr size_t kNumColors = sizeof(kColors) / sizeof(kColors[0]);
// Filled point types (circle, square, triangle up/down, diamond, pentagon); the open form of each
// is one less.
const int kFilledPoints[] = {7, 5, 9, 11, 13, 15};
constexpr size_t kNumPoints = sizeof(kFilledPoints) / sizeof(kFilledPoints[0]);

// Point style of series i: colour, point type (open for runs that missed their criterion), size.
std::string point_style(size_t i, bool open) {
  const int pt = kFilledPoints[i % kNumPoints] - (open ? 1 : 0);
  const double ps = 1.6 - 0.2 * static_cast<double>((i / kNumPoints) % 3);
  return "lc rgb '" + std::string(kColors[i % kNumColors]) + "' lw 1.5 pt " + std::to_string(pt) +
         " ps " + format_double(ps, 3);
}

struct PlotResult {
  std::vector<std::string> pngs, data;
  std::string error;
};

// "n = 3 seeds" or "n = 2–3 seeds (per point in the .csv)".
std::string n_text(int64_t lo, int64_t hi) {
  if (lo == hi) return "n = " + std::to_string(lo) + (lo == 1 ? " seed" : " seeds");
  return "n = " + std::to_string(lo) + "–" + std::to_string(hi) + " seeds (n per point in the .csv)";
}

// metric vs length: one series per label, points with their clipped 95 % t-intervals at the
// measured lengths only (no connecting lines), series offset horizontally so that none hides
// another, cells with runs that missed their stop criterion as open points of their own key
// entry, the training range shaded (its key entry names it).
void plot_metric(const std::string& dir, const ReportInput& in, const std::string& metric,
                 const std::vector<Column>& cols, PlotResult& pr, bool make_png) {
  const std::string stem = metric + "_vs_length";
  const double scale = is_percent_metric(metric) ? 100.0 : 1.0;
  std::vector<int64_t> lengths;
  for (const auto& c : cols)
    if (c.length > 0) lengths.push_back(c.length);
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  // Jitter: the series spread over 30 % of the smallest gap between measured lengths (in log2
  // units on a log axis).
  double gap = 1.0;
  for (size_t i = 1; i < lengths.size(); ++i) {
    const double g = in.log_x ? std::log2(static_cast<double>(lengths[i]) / lengths[i - 1])
                              : static_cast<double>(lengths[i] - lengths[i - 1]);
    gap = i == 1 ? g : std::min(gap, g);
  }
  std::vector<std::string> series;
  for (const auto& label : in.labels)
    for (const auto& c : cols)
      if (c.length > 0 && aggregate(in.rows, label, c.split, metric, excludes(in, label)).n > 0) {
        series.push_back(label);
        break;
      }
  const double spread = series.size() > 1 ? 0.3 * gap : 0.0;
  auto offset = [&](size_t i) {
    return series.size() > 1 ? (static_cast<double>(i) / (series.size() - 1) - 0.5) * spread
                             : 0.0;
  };

  std::string dat = "# " + metric_title(metric) + " vs " + in.length_name +
                    ": plotted x (length with jitter), mean, 95 % t-interval low, high (clipped), "
                    "n, length; two blocks per series: converged cells, cells with runs that "
                    "missed their stop criterion\n";
  std::string csv = "series,split,length,mean,ci_low,ci_high,n,n_converged,n_unconverged,x_plotted\n";
  struct Block {
    size_t series, index;
    bool open;
  };
  std::vector<Block> blocks;
  size_t index = 0;
  int64_t nmin = std::numeric_limits<int64_t>::max(), nmax = 0;
  double xmin = 1e300, xmax = -1e300;
  for (size_t i = 0; i < series.size(); ++i) {
    std::string part[2];
    for (const auto& c : cols) {
      if (c.length <= 0) continue;
      const Stat s = aggregate(in.rows, series[i], c.split, metric, excludes(in, series[i]));
      if (s.n == 0) continue;
      const double len = static_cast<double>(c.length);
      const double x = in.log_x ? len * std::exp2(offset(i)) : len + offset(i);
      const double lo = s.n > 1 ? s.ci_low : s.mean, hi = s.n > 1 ? s.ci_high : s.mean;
      part[s.n_unconverged > 0 ? 1 : 0] += format_double(x, 8) + " " +
                                           format_double(s.mean * scale, 8) + " " +
                                           format_double(lo * scale, 8) + " " +
                                           format_double(hi * scale, 8) + " " +
                                           std::to_string(s.n) + " " + std::to_string(c.length) +
                                           "\n";
      csv += csv_cell(series[i]) + "," + c.split + "," + std::to_string(c.length) + "," +
             format_double(s.mean, 10) + "," + format_double(lo, 10) + "," +
             format_double(hi, 10) + "," + std::to_string(s.n) + "," +
             (s.any_criterion ? std::to_string(s.n_converged) : "") + "," +
             std::to_string(s.n_unconverged) + "," + format_double(x, 8) + "\n";
      nmin = std::min(nmin, s.n);
      nmax = std::max(nmax, s.n);
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
    }
    for (int k = 0; k < 2; ++k) {
      if (part[k].empty()) continue;
      dat += "# " + series[i] + (k ? " (not converged)" : "") + "\n" + part[k] + "\n\n";
      blocks.push_back({i, index++, k == 1});
    }
  }
  write_text_file(dir + "/" + stem + ".dat", dat);
  write_text_file(dir + "/" + stem + ".csv", csv);
  pr.data.push_back(dir + "/" + stem + ".dat");
  pr.data.push_back(dir + "/" + stem + ".csv");
  if (!make_png || blocks.empty()) return;

  const auto range = metric_range(metric);
  const std::string clip = is_percent_metric(metric)
                               ? "clipped to [0, 100]"
                               : "clipped to >= " + format_double(range.first);
  std::string sub = "mean and 95 % t-interval, " + n_text(nmin, nmax) + ", " + clip;
  std::string third;
  if (spread > 0)
    third = in.log_x ? "points offset by up to ×" + format_double(std::exp2(spread / 2), 3) +
                           " in x (jitter) so that none hides another"
                     : "points offset by up to ±" + format_double(spread / 2, 2) +
                           " in x (jitter) so that none hides another";
  // Rows with no point at all because every run was left out (compare.unconverged: exclude).
  std::string absent;
  for (const auto& label : in.labels) {
    if (std::find(series.begin(), series.end(), label) != series.end()) continue;
    for (const auto& c : cols)
      if (c.length > 0 && aggregate(in.rows, label, c.split, metric, excludes(in, label))
                                  .n_excluded > 0) {
        absent += (absent.empty() ? "" : ", ") + label;
        break;
      }
  }
  if (!absent.empty())
    third += (third.empty() ? "" : "; ") + std::string("not plotted (every run not converged): ") +
             absent;
  if (!third.empty()) sub += "\n" + third;
  std::string gp = gnuplot_terminal_line(1200, 700);
  gp += "set title " +
        gnuplot_quote(in.title + ": " + metric_title(metric) + " vs " + in.length_name + "\n" +
                      sub) +
        "\n";
  gp += "set xlabel " + gnuplot_quote(in.length_name + " (points at the measured lengths)") +
        "\nset ylabel " + gnuplot_quote(metric_title(metric)) + "\n";
  gp += "set key outside right top\nset grid\n";
  double lo = xmin, hi = xmax;
  if (in.log_x) {
    gp += "set logscale x 2\n";
    lo = xmin / 1.15;
    hi = xmax * 1.15;
  } else {
    const double pad = std::max(0.5, 0.04 * (xmax - xmin));
    lo = xmin - pad;
    hi = xmax + pad;
  }
  gp += "set xrange [" + format_double(lo) + ":" + format_double(hi) + "]\n";
  if (lengths.size() <= 24) {
    gp += "set xtics (";
    for (size_t i = 0; i < lengths.size(); ++i)
      gp += (i ? ", " : "") + std::to_string(lengths[i]);
    gp += ")\n";
  }
  if (is_percent_metric(metric)) gp += "set yrange [-2:102]\n";
  if (metric == "perplexity" || metric == "loss") gp += "set logscale y\n";
  // Training range shaded (clamped to the plotted range) wide enough to hold the jittered points
  // of its lengths; named in the key, so no label covers data.
  const double margin = spread / 2 + 0.05 * gap;
  const double r0 = std::max(lo, in.log_x ? in.train_min * std::exp2(-margin)
                                          : in.train_min - std::max(0.5, margin));
  const double r1 = std::min(hi, in.log_x ? in.train_max * std::exp2(margin)
                                          : in.train_max + std::max(0.5, margin));
  const bool shade = r1 > r0;
  if (shade)
    gp += "set object 1 rect from first " + format_double(r0) + ", graph 0 to first " +
          format_double(r1) + ", graph 1 behind fc rgb '#e6e6e6' fs solid 1.0 noborder\n";
  gp += "plot \\\n";
  std::vector<std::string> parts;
  if (shade)
    parts.push_back("  keyentry with boxes fc rgb '#e6e6e6' fs solid 1.0 title " +
                    gnuplot_quote("training range (" + in.train_range_text + ")"));
  for (const auto& b : blocks)
    parts.push_back("  " + gnuplot_quote(stem + ".dat") + " index " + std::to_string(b.index) +
                    " using 1:2:3:4 with yerrorbars " + point_style(b.series, b.open) +
                    " title " +
                    gnuplot_quote(series[b.series] +
                                  (in.cannot_learn.count(scheme_of(in, series[b.series]))
                                       ? " (cannot learn by construction)"
                                       : "") +
                                  (b.open ? " (not converged)" : "")));
  for (size_t i = 0; i < parts.size(); ++i)
    gp += parts[i] + (i + 1 < parts.size() ? ", \\\n" : "\n");
  std::string err;
  if (run_gnuplot(dir + "/" + stem + ".png", gp, &err))
    pr.pngs.push_back(dir + "/" + stem + ".png");
  else
    pr.error += stem + ": " + err + "; ";
}

// Training loss per scheme: the mean over seeds at each logged step (line) and the min–max over
// seeds (band). A run stopped early by its criterion ends early: later steps average fewer runs.
void plot_loss(const std::string& dir, const ReportInput& in, PlotResult& pr, bool make_png) {
  std::vector<std::string> schemes;
  for (const auto& c : in.curves)
    if (std::find(schemes.begin(), schemes.end(), c.scheme) == schemes.end())
      schemes.push_back(c.scheme);
  std::string dat = "# training loss per scheme: step, mean over seeds, min, max, n\n";
  std::string csv = "scheme,seed,step,loss\n";
  std::vector<std::string> series, titles;
  int64_t nmin = std::numeric_limits<int64_t>::max(), nmax = 0;
  for (const auto& s : schemes) {
    std::map<int64_t, std::vector<double>> at;
    for (const auto& c : in.curves) {
      if (c.scheme != s) continue;
      for (const auto& [step, loss] : c.points) {
        at[step].push_back(loss);
        csv += csv_cell(s) + "," + std::to_string(c.seed) + "," + std::to_string(step) + "," +
               format_double(loss, 10) + "\n";
      }
    }
    if (at.empty()) continue;
    dat += "# " + s + "\n";
    for (const auto& [step, v] : at) {
      double m = 0;
      for (double x : v) m += x;
      m /= static_cast<double>(v.size());
      const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
      dat += std::to_string(step) + " " + format_double(m, 8) + " " + format_double(*mn, 8) + " " +
             format_double(*mx, 8) + " " + std::to_string(v.size()) + "\n";
      nmin = std::min(nmin, static_cast<int64_t>(v.size()));
      nmax = std::max(nmax, static_cast<int64_t>(v.size()));
    }
    dat += "\n\n";
    series.push_back(s);
    // Runs of the scheme that missed their stop criterion.
    std::set<int64_t> missed, all;
    for (const auto& r : in.rows)
      if (r.scheme == s && r.variant.empty()) {
        all.insert(r.seed);
        if (r.converged == 0) missed.insert(r.seed);
      }
    titles.push_back(missed.empty() ? s
                                    : s + " (" + std::to_string(missed.size()) + "/" +
                                          std::to_string(all.size()) + " not converged)");
  }
  write_text_file(dir + "/train_loss.dat", dat);
  write_text_file(dir + "/train_loss.csv", csv);
  pr.data.push_back(dir + "/train_loss.dat");
  pr.data.push_back(dir + "/train_loss.csv");
  if (!make_png || series.empty()) return;
  std::string gp = gnuplot_terminal_line(1100, 620);
  std::string sub = "line: mean over " + n_text(nmin, nmax) + "; band: min–max over seeds";
  if (nmin != nmax) sub += "; runs stopped by their criterion end early";
  gp += "set title " + gnuplot_quote(in.title + ": training loss\n" + sub) + "\n";
  gp += "set xlabel 'step'\nset ylabel 'training loss (nats/token)'\nset logscale y\n";
  gp += "set key outside right top\nset grid\n";
  gp += "plot \\\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string col = kColors[i % kNumColors];
    const std::string src = "  " + gnuplot_quote("train_loss.dat") + " index " + std::to_string(i);
    gp += src + " using 1:3:4 with filledcurves fc rgb '" + col +
          "' fs transparent solid 0.2 noborder notitle, \\\n";
    gp += src + " using 1:2 with lines lc rgb '" + col + "' lw 2 title " +
          gnuplot_quote(titles[i]) + (i + 1 < series.size() ? ", \\\n" : "\n");
  }
  std::string err;
  if (run_gnuplot(dir + "/train_loss.png", gp, &err))
    pr.pngs.push_back(dir + "/train_loss.png");
  else
    pr.error += "train_loss: " + err + "; ";
}

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "–";
  if (s < 60) return printf_number("%.1f s", s);
  if (s < 3600)
    return printf_number("%.0f", std::floor(s / 60)) + " min " + printf_number("%02.0f s", std::fmod(s, 60));
  return printf_number("%.0f", std::floor(s / 3600)) + " h " + printf_number("%02.0f min", std::fmod(s, 3600) / 60);
}

// One line of table_<metric>.csv.
std::string summary_line(const std::string& label, const std::string& split, int64_t length,
                         int in_distribution, const Stat& s) {
  std::string status = s.n > 0 ? (s.n_unconverged > 0 ? "includes_unconverged" : "ok")
                       : s.n_excluded > 0 ? "not converged"
                                          : s.status;
  return csv_cell(label) + "," + split + "," + (length > 0 ? std::to_string(length) : "") + "," +
         (in_distribution == 1   ? "true"
          : in_distribution == 0 ? "false"
                                 : "") +
         "," + format_double(s.mean, 10) + "," + format_double(s.ci_low, 10) + "," +
         format_double(s.ci_high, 10) + "," + std::to_string(s.n) + "," +
         (s.any_criterion ? std::to_string(s.n_converged) : "") + "," + csv_cell(status) + "\n";
}

// Summary CSV of a metric table: series, split, length, in_distribution, mean, ci_low, ci_high
// (the clipped 95 % t-interval; empty with n < 2), n, n_converged (empty without a criterion),
// status; then one row per series for the extrapolation mean (split "mean_extrapolation").
std::string summary_csv(const ReportInput& in, const std::string& metric,
                        const std::vector<Column>& cols) {
  std::string csv = "series,split,length,in_distribution,mean,ci_low,ci_high,n,n_converged,status\n";
  bool any_extrap = false;
  for (const auto& c : cols) any_extrap = any_extrap || c.in_distribution == 0;
  for (const auto& label : in.labels) {
    const bool ex = excludes(in, label);
    for (const auto& c : cols)
      csv += summary_line(label, c.split, c.length, c.in_distribution,
                          aggregate(in.rows, label, c.split, metric, ex));
    if (any_extrap)
      csv += summary_line(label, "mean_extrapolation", 0, 0,
                          aggregate_runs(in.rows, label, 0, metric, ex));
  }
  return csv;
}

}  // namespace

// ---------------- results.csv ----------------

const std::vector<std::string>& results_csv_columns() {
  static const std::vector<std::string> c = {
      "scheme",          "variant",      "seed",       "split",      "length",
      "in_distribution", "status",       "loss",       "perplexity", "token_accuracy",
      "exact_match",     "train_wall_s", "eval_wall_s", "converged",  "criterion_step"};
  return c;
}

std::string results_csv(const std::vector<ResultRow>& rows) {
  std::string out;
  for (size_t i = 0; i < results_csv_columns().size(); ++i)
    out += (i ? "," : "") + results_csv_columns()[i];
  out += "\n";
  for (const auto& r : rows) {
    out += csv_cell(r.scheme) + "," + csv_cell(r.variant) + "," + std::to_string(r.seed) + "," +
           csv_cell(r.split) + "," + (r.length > 0 ? std::to_string(r.length) : "") + "," +
           (r.in_distribution == 1   ? "true"
            : r.in_distribution == 0 ? "false"
                                     : "") +
           "," + csv_cell(r.status) + "," + num_cell(r.loss) + "," + num_cell(r.perplexity) + "," +
           num_cell(r.token_accuracy) + "," + num_cell(r.exact_match) + "," +
           num_cell(r.train_wall_s) + "," + num_cell(r.eval_wall_s) + "," +
           (r.converged == 1   ? "true"
            : r.converged == 0 ? "false"
                               : "") +
           "," + (r.criterion_step >= 0 ? std::to_string(r.criterion_step) : "") + "\n";
  }
  return out;
}

std::vector<ResultRow> parse_results_csv(const std::string& text, const std::string& where) {
  const auto recs = parse_csv(text, where);
  PELAB_CHECK(!recs.empty(), where, ": empty (no header)");
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < recs[0].size(); ++i) col[recs[0][i]] = i;
  // eval_wall_s, converged and criterion_step came later: files without them still read.
  for (const auto& c : results_csv_columns())
    if (c != "eval_wall_s" && c != "converged" && c != "criterion_step")
      PELAB_CHECK(col.count(c), where, ": missing column '", c, "'");
  std::vector<ResultRow> rows;
  for (size_t k = 1; k < recs.size(); ++k) {
    const auto& f = recs[k];
    const std::string at = where + ": row " + std::to_string(k + 1);
    auto get = [&](const std::string& name) -> std::string {
      auto it = col.find(name);
      if (it == col.end() || it->second >= f.size()) return "";
      return f[it->second];
    };
    ResultRow r;
    r.scheme = get("scheme");
    r.variant = get("variant");
    r.seed = static_cast<int64_t>(parse_num(get("seed"), at));
    r.split = get("split");
    const double len = parse_num(get("length"), at);
    r.length = std::isfinite(len) ? static_cast<int64_t>(len) : 0;
    const std::string ind = get("in_distribution");
    r.in_distribution = ind == "true" ? 1 : ind == "false" ? 0 : -1;
    r.status = get("status");
    r.loss = parse_num(get("loss"), at);
    r.perplexity = parse_num(get("perplexity"), at);
    r.token_accuracy = parse_num(get("token_accuracy"), at);
    r.exact_match = parse_num(get("exact_match"), at);
    r.train_wall_s = parse_num(get("train_wall_s"), at);
    r.eval_wall_s = parse_num(get("eval_wall_s"), at);
    const std::string conv = get("converged");
    PELAB_CHECK(conv.empty() || conv == "true" || conv == "false", at,
                ": converged must be true, false or empty, got '", conv, "'");
    r.converged = conv == "true" ? 1 : conv == "false" ? 0 : -1;
    const double cs = parse_num(get("criterion_step"), at);
    r.criterion_step = std::isfinite(cs) ? static_cast<int64_t>(cs) : -1;
    rows.push_back(r);
  }
  return rows;
}

double row_metric(const ResultRow& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "perplexity") return r.perplexity;
  if (metric == "token_accuracy") return r.token_accuracy;
  if (metric == "exact_match") return r.exact_match;
  fail("report: unknown metric '", metric,
       "' (expected exact_match, token_accuracy, perplexity or loss)");
}

// ---------------- statistics ----------------

double incomplete_beta(double a, double b, double x) {
  PELAB_CHECK(a > 0 && b > 0 && x >= 0 && x <= 1, "incomplete_beta: needs a, b > 0 and 0 <= x <= 1",
              " (a ", a, ", b ", b, ", x ", x, ")");
  if (x == 0 || x == 1) return x;
  // The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry
  // I_x(a, b) = 1 - I_{1-x}(b, a) otherwise.
  if (x > (a + 1) / (a + b + 2)) return 1.0 - incomplete_beta(b, a, 1.0 - x);
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
               b * std::log1p(-x)) /
      a;
  // I_x(a, b) = front / (1 + d1 / (1 + d2 / (1 + ...))) with
  //   d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
  //   d_{2m}   = m (b - m) x / ((a + 2m - 1)(a + 2m)),
  // evaluated by the modified Lentz method on 1 + 1 / (1 + d1 / (1 + ...)) (the leading "1 +"
  // keeps the recurrence uniform; it is subtracted at the end).
  const double tiny = 1e-300;
  double f = 1.0, c = 1.0, d = 0.0;
  for (int i = 0; i <= 400; ++i) {
    const int m = i / 2;
    double num;
    if (i == 0)
      num = 1.0;
    else if (i % 2 == 0)
      num = m * (b - m) * x / ((a + 2.0 * m - 1) * (a + 2.0 * m));
    else
      num = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1));
    d = 1.0 + num * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + num / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = c * d;
    f *= delta;
    if (std::fabs(1.0 - delta) < 1e-15) break;
  }
  return front * (f - 1.0);
}

namespace {
// P(T <= t) for T ~ t(df), t >= 0.
double student_t_cdf_upper_half(double t, double df) {
  return 1.0 - 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}
}  // namespace

double student_t_quantile(double p, double df) {
  PELAB_CHECK(p > 0 && p < 1 && df >= 1, "student_t_quantile: needs 0 < p < 1 and df >= 1 (p ", p,
              ", df ", df, ")");
  if (p == 0.5) return 0.0;
  if (p < 0.5) return -student_t_quantile(1.0 - p, df);
  double lo = 0.0, hi = 1.0;
  while (student_t_cdf_upper_half(hi, df) < p) {
    lo = hi;
    hi *= 2.0;
    PELAB_CHECK(hi < 1e300, "student_t_quantile: no quantile for p ", p, ", df ", df);
  }
  // Bisection: the CDF is monotone; 200 halvings reach double precision.
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf_upper_half(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::pair<double, double> metric_range(const std::string& metric) {
  const double inf = std::numeric_limits<double>::infinity();
  if (is_percent_metric(metric)) return {0.0, 1.0};
  if (metric == "perplexity") return {1.0, inf};
  if (metric == "loss") return {0.0, inf};
  fail("report: unknown metric '", metric,
       "' (expected exact_match, token_accuracy, perplexity or loss)");
}

Stat stat_of(const std::vector<double>& v, const std::string& metric) {
  const auto [lo, hi] = metric_range(metric);
  return stat_of_range(v, lo, hi);
}

Stat stat_of_range(const std::vector<double>& v, double lo, double hi) {
  Stat s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  s.mean = m;
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    const double n = static_cast<double>(v.size());
    s.std = std::sqrt(ss / (n - 1));
    s.half = student_t_quantile(0.975, n - 1) * s.std / std::sqrt(n);
    s.ci_low = std::max(lo, m - s.half);
    s.ci_high = std::min(hi, m + s.half);
    s.clipped = m - s.half < lo || m + s.half > hi;
  }
  return s;
}

Stat stat_of_run_means(const std::vector<RunMean>& runs, const std::string& metric,
                       bool exclude_unconverged, const std::string& status) {
  std::vector<double> v;
  int64_t conv = 0, unconv = 0, excluded = 0;
  bool any_criterion = false;
  for (const auto& r : runs) {
    any_criterion = any_criterion || r.converged >= 0;
    if (r.converged == 0 && exclude_unconverged) {
      ++excluded;
      continue;
    }
    v.push_back(r.value);
    conv += r.converged == 1;
    unconv += r.converged == 0;
  }
  Stat s = stat_of(v, metric);
  s.n_converged = conv;
  s.n_unconverged = unconv;
  s.n_excluded = excluded;
  s.any_criterion = any_criterion;
  s.status = status;
  return s;
}

Stat aggregate(const std::vector<ResultRow>& rows, const std::string& label,
               const std::string& split, const std::string& metric, bool exclude_unconverged) {
  std::vector<RunMean> runs;
  std::string status;
  for (const auto& r : rows) {
    if (r.split != split || r.label() != label) continue;
    if (!r.available()) {
      if (status.empty()) status = r.status;
      continue;
    }
    const double x = row_metric(r, metric);
    if (std::isfinite(x)) runs.push_back({r.seed, x, r.converged});
  }
  return stat_of_run_means(runs, metric, exclude_unconverged, status);
}

std::vector<RunMean> run_means(const std::vector<ResultRow>& rows, const std::string& label,
                               int in_distribution, const std::string& metric, int64_t length,
                               std::string* status) {
  std::set<std::string> splits;
  for (const auto& r : rows)
    if (r.label() == label && (length > 0 ? r.length == length : r.in_distribution == in_distribution))
      splits.insert(r.split);
  struct Acc {
    double sum = 0;
    size_t n = 0;
    bool missing = false;
    int converged = -1;
  };
  std::map<int64_t, Acc> by_seed;
  for (const auto& r : rows) {
    if (r.label() != label || !splits.count(r.split)) continue;
    Acc& a = by_seed[r.seed];
    a.converged = r.converged;
    const double x = r.available() ? row_metric(r, metric) : std::nan("");
    if (!std::isfinite(x)) {
      a.missing = true;
      if (!r.available() && status && status->empty()) *status = "n/a";
      continue;
    }
    a.sum += x;
    ++a.n;
  }
  std::vector<RunMean> runs;
  for (const auto& [seed, a] : by_seed)
    if (!a.missing && a.n == splits.size() && a.n > 0)
      runs.push_back({seed, a.sum / static_cast<double>(a.n), a.converged});
  return runs;
}

Stat aggregate_runs(const std::vector<ResultRow>& rows, const std::string& label,
                    int in_distribution, const std::string& metric, bool exclude_unconverged) {
  std::string status;
  const std::vector<RunMean> runs = run_means(rows, label, in_distribution, metric, 0, &status);
  return stat_of_run_means(runs, metric, exclude_unconverged, status);
}


std::string format_cell(const Stat& s, const std::string& metric, int64_t expected_n) {
  if (s.n == 0) {
    if (s.n_excluded > 0) return "not converged";
    return s.status.empty() ? "–" : s.status;
  }
  const double k = is_percent_metric(metric) ? 100.0 : 1.0;
  const char* f = number_format(metric, s.mean * k);
  std::string out = printf_number(f, s.mean * k);
  if (s.n > 1 && std::isfinite(s.ci_low) && std::isfinite(s.ci_high))
    out += " [" + printf_number(f, s.ci_low * k) + ", " + printf_number(f, s.ci_high * k) + "]";
  if (expected_n > 0 && s.n != expected_n) out += " (n = " + std::to_string(s.n) + ")";
  if (s.n_unconverged > 0) out += " †";
  return out;
}

std::vector<std::string> unconverged_runs(const ReportInput& in) {
  std::vector<std::string> out;
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& r : in.rows) {
    if (r.converged != 0 || in.cannot_learn.count(r.scheme)) continue;
    if (seen.insert({r.scheme, r.seed}).second)
      out.push_back(r.scheme + " seed " + std::to_string(r.seed));
  }
  return out;
}

std::string metric_table_markdown(const ReportInput& in, const std::string& metric) {
  const std::vector<Column> cols = columns_of(in.rows);
  const int64_t expected_n = static_cast<int64_t>(in.seeds.size());
  bool any_extrap = false;
  for (const auto& c : cols) any_extrap = any_extrap || c.in_distribution == 0;
  std::string md = "| " + std::string("scheme");
  std::string sep = "|---";
  for (const auto& c : cols) {
    md += " | " + column_header(c);
    sep += "|---:";
  }
  if (any_extrap) {
    md += " | mean (extrapolation)";
    sep += "|---:";
  }
  md += " |\n" + sep + "|\n";
  // Best mean per column (bold) — only where the rows differ (a column of equal values has no
  // best).
  std::map<std::string, double> best;
  for (const auto& c : cols) {
    double lo = 0, hi = 0;
    bool any = false;
    for (const auto& label : in.labels) {
      const Stat s = aggregate(in.rows, label, c.split, metric, excludes(in, label));
      if (s.n == 0) continue;
      lo = any ? std::min(lo, s.mean) : s.mean;
      hi = any ? std::max(hi, s.mean) : s.mean;
      any = true;
    }
    if (any && hi > lo) best[c.split] = higher_better(metric) ? hi : lo;
  }
  bool any_dagger = false, any_clipped = false, any_cannot = false, n_varies = false;
  for (const auto& label : in.labels) {
    const bool ex = excludes(in, label);
    bool any = false;
    std::string line = "| " + row_name(in, label);
    any_cannot = any_cannot || in.cannot_learn.count(scheme_of(in, label));
    auto note = [&](const Stat& s) {
      any_dagger = any_dagger || s.n_unconverged > 0;
      any_clipped = any_clipped || (s.clipped && s.n > 1);
      n_varies = n_varies || (s.n > 0 && s.n != expected_n);
    };
    for (const auto& c : cols) {
      const Stat s = aggregate(in.rows, label, c.split, metric, ex);
      note(s);
      any = any || s.n > 0 || !s.status.empty() || s.n_excluded > 0;
      std::string cell = format_cell(s, metric, expected_n);
      if (s.n > 0 && best.count(c.split) && s.mean == best[c.split]) cell = "**" + cell + "**";
      line += " | " + cell;
    }
    if (any_extrap) {
      const Stat e = aggregate_runs(in.rows, label, 0, metric, ex);
      note(e);
      line += " | " + format_cell(e, metric, expected_n);
    }
    if (any) md += line + " |\n";
  }
  // The caption: what the numbers are.
  std::string cap = "\n_";
  if (expected_n > 1) {
    cap += "Cells: mean [low, high], the 95 % t-interval over n = " + std::to_string(expected_n) +
           " seeds (mean ± t(0.975, n−1)·s/√n, s the sample standard deviation), intervals "
           "clipped to the metric's range (" +
           range_text(metric) + ")";
    if (any_clipped) cap += "; some reached past it and are clipped";
    cap += ".";
    if (n_varies)
      cap += " A cell with fewer values says so: (n = k); with n = 1 it has no interval.";
  } else {
    cap += "Cells: the value of n = 1 seed — no interval (at least 2 seeds are needed for one).";
  }
  if (any_extrap)
    cap += " Mean (extrapolation): each run's mean over the extrapolation columns, then the mean "
           "and interval over runs.";
  if (!best.empty()) cap += " Bold: best mean per column.";
  if (any_dagger)
    cap += " † a run in the cell missed its stop criterion (not converged; see Convergence).";
  if (in.unconverged == "exclude") {
    const std::vector<std::string> left = unconverged_runs(in);
    cap += " compare.unconverged: exclude — " + std::to_string(left.size()) +
           (left.size() == 1 ? " run" : " runs") + " that missed the stop criterion left out";
    for (size_t i = 0; i < left.size(); ++i) cap += (i ? ", " : ": ") + left[i];
    cap += "; \"not converged\" = every run of the cell left out.";
  }
  if (any_cannot) cap += " ‡ cannot learn the task by construction (see Convergence).";
  md += cap + "_\n";
  return md;
}

// The worst value of `metric` over the training-range columns of any run of `label`: "99.5 (len
// 8, seed 2)"; "–" without such columns. Shows that every run learned every training length the
// report measures, not only their mean.
std::string worst_training_length(const ReportInput& in, const std::string& label,
                                  const std::string& metric) {
  const bool higher = higher_better(metric);
  const ResultRow* worst = nullptr;
  double wv = 0;
  for (const auto& r : in.rows) {
    if (r.label() != label || r.in_distribution != 1 || !r.available()) continue;
    const double x = row_metric(r, metric);
    if (!std::isfinite(x)) continue;
    if (worst == nullptr || (higher ? x < wv : x > wv)) worst = &r, wv = x;
  }
  if (worst == nullptr) return "–";
  const double k = is_percent_metric(metric) ? 100.0 : 1.0;
  std::string out = printf_number(number_format(metric, wv * k), wv * k) + " (";
  out += worst->length > 0 ? "len " + std::to_string(worst->length) : worst->split;
  out += ", seed " + std::to_string(worst->seed) + ")";
  if (worst->converged == 0) out += " †";
  return out;
}

std::string convergence_table_markdown(const ReportInput& in) {
  std::string md = "| scheme | criterion | runs converged | steps to criterion (mean [min–max]) | "
                   "in-distribution " + metric_title(in.primary_metric) +
                   " | worst training length | note |\n";
  md += "|---|---|---:|---:|---:|---:|---|\n";
  const int64_t expected_n = static_cast<int64_t>(in.seeds.size());
  for (const auto& label : in.labels) {
    bool trained = false;
    for (const auto& r : in.rows) trained = trained || (r.label() == label && r.variant.empty());
    if (!trained) continue;  // eval-time variants share their scheme's runs
    std::map<int64_t, std::pair<int, int64_t>> runs;  // seed -> (converged, step)
    for (const auto& r : in.rows)
      if (r.label() == label) runs[r.seed] = {r.converged, r.criterion_step};
    int64_t with = 0, met = 0, nsteps = 0, smin = 0, smax = 0;
    double ssum = 0;
    for (const auto& [seed, cs] : runs) {
      if (cs.first < 0) continue;
      ++with;
      if (cs.first != 1) continue;
      ++met;
      if (cs.second < 0) continue;  // met, step unknown
      smin = nsteps ? std::min(smin, cs.second) : cs.second;
      smax = nsteps ? std::max(smax, cs.second) : cs.second;
      ssum += static_cast<double>(cs.second);
      ++nsteps;
    }
    auto crit = in.criteria.find(label);
    const std::string criterion =
        crit != in.criteria.end() && !crit->second.empty() ? "`" + crit->second + "`" : "—";
    std::string conv = with ? std::to_string(met) + "/" + std::to_string(with) : "—";
    std::string steps = "—";
    if (nsteps)
      steps = printf_number("%.0f", ssum / static_cast<double>(nsteps)) + " [" + std::to_string(smin) +
              "–" + std::to_string(smax) + "]" +
              (nsteps < met ? " (n = " + std::to_string(nsteps) + ")" : "");
    else if (met)
      steps = "unknown";
    else if (with)
      steps = "not reached";
    const Stat ind = aggregate_runs(in.rows, label, 1, in.primary_metric, excludes(in, label));
    auto cl = in.cannot_learn.find(label);
    const std::string note =
        cl != in.cannot_learn.end() ? "cannot learn by construction: " + cl->second : "";
    md += "| " + row_name(in, label) + " | " + criterion + " | " + conv + " | " + steps + " | " +
          format_cell(ind, in.primary_metric, expected_n) + " | " +
          worst_training_length(in, label, in.primary_metric) + " | " + note + " |\n";
  }
  md += "\n_Criterion: `train.stop_when` of the run (— = none: the run trained for train.steps). "
        "Steps to criterion: over the runs that met it. In-distribution: each run's mean over the "
        "training-range columns, then the mean and 95 % t-interval over the n = " +
        std::to_string(expected_n) +
        " seeds' runs (clipped to the metric's range; (n = k) where fewer), † when a run missed "
        "its criterion. Worst training length: the lowest value (highest for loss and perplexity) "
        "of any run at any training-range column, with its length and seed.";
  if (!in.cannot_learn.empty())
    md += " ‡ declared `expect: cannot_learn` in the config: trained and shown, never a failure "
          "of compare.unconverged: fail.";
  md += "_\n";
  return md;
}

// ---------------- the report ----------------

ReportFiles write_report(const std::string& dir, const ReportInput& in, bool plots) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  PELAB_CHECK(!ec, "report: cannot create ", dir, ": ", ec.message());
  ReportFiles files;
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

  const std::vector<Column> cols = columns_of(in.rows);
  const bool lm = in.primary_metric == "perplexity" || in.primary_metric == "loss";
  std::vector<std::string> metrics = {in.primary_metric};
  if (!lm && in.primary_metric != "token_accuracy") metrics.push_back("token_accuracy");
  const std::string third =
      lm ? (in.primary_metric == "loss" ? "perplexity" : "loss") : "perplexity";
  metrics.push_back(third);

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
  auto has_png = [&](const std::string& stem) {
    return std::find(files.pngs.begin(), files.pngs.end(), dir + "/" + stem + ".png") !=
           files.pngs.end();
  };

  std::ostringstream md;
  md << "# " << in.title << "\n\n";
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
  {
    // Compute time summed over the runs (each run's training and each evaluation counted once).
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
    md << (in.timing_note.empty() ? "" : " (" + in.timing_note + ")") << ".\n";
  }
  {
    const std::vector<std::string> missed = unconverged_runs(in);
    md << "- Convergence (`train.stop_when`): ";
    if (missed.empty()) {
      md << "no run missed its stop criterion";
    } else {
      md << "runs that missed the stop criterion (" << missed.size() << ":";
      for (size_t i = 0; i < missed.size(); ++i) md << (i ? ", " : " ") << missed[i];
      md << ") are marked † in the tables and drawn as open points \"(not converged)\" in the "
            "plots";
    }
    md << "; compare.unconverged: " << in.unconverged << ".\n";
  }
  md << "\n## Convergence\n\n" << convergence_table_markdown(in) << "\n";
  for (size_t i = 0; i < metrics.size(); ++i) {
    const std::string& m = metrics[i];
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
  // Rows, settings and wall time.
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
    md << "| " << label << " | " << (settings.empty() ? "–" : settings) << " | "
       << (tn ? duration_text(tsum / tn) : "–") << " | " << (en ? duration_text(esum / en) : "–")
       << " |\n";
  }
  md << "\n";
  if (!files.plot_note.empty()) md << "_Plots: " << files.plot_note << "._\n\n";
  if (!in.records_markdown.empty())
    md << "## Where the runs were made\n\n" << in.records_markdown << "\n";
  md << "## Files\n\n";
  md << "`results.csv` (one row per scheme × variant × seed × split, with the run's convergence), "
        "`table_<metric>.csv` (the tables above: mean, ci_low, ci_high, n, n_converged), `<metric>_vs_length.{dat,csv,png}`, `train_loss.{dat,csv,png}`, "
     << (in.literature_csv.empty() ? "" : "`literature.csv` (the tables of \"Against the literature\"), ")
     << "`runs/<scheme>_seed<N>/` (each run's config, metrics, checkpoints and evaluation "
        "cache).\n\n";
  md << "## Reproduce\n\n```sh\n" << in.command << "\n```\n\n";
  md << "Re-running the command reuses finished runs and cached evaluations and resumes "
        "interrupted runs.\n\n";
  md << "### Config file\n\n```yaml\n" << in.config_text;
  if (!in.config_text.empty() && in.config_text.back() != '\n') md << "\n";
  md << "```\n\n";
  md << "### Resolved base config (before the per-scheme settings)\n\n<details><summary>"
        "config</summary>\n\n```yaml\n"
     << in.resolved_yaml << "```\n\n</details>\n";
  files.report_md = dir + "/report.md";
  write_text_file(files.report_md, md.str());
  return files;
}

// ---------------- gnuplot ----------------

std::string gnuplot_path() {
  if (const char* env = std::getenv("PELAB_GNUPLOT")) {
    const std::string p = env;
    if (p.empty()) return "";
    return access(p.c_str(), X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::stringstream ss(dirs);
  std::string d;
  while (std::getline(ss, d, ':')) {
    if (d.empty()) continue;
    const std::string p = d + "/gnuplot";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string gnuplot_png_terminal() {
  static std::string cached;
  static bool done = false;
  if (done) return cached;
  done = true;
  const std::string gp = gnuplot_path();
  if (gp.empty()) return cached = "";
  const std::string cmd = shell_word(gp) + " -e 'set terminal' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  std::string text;
  if (f) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) text += buf;
    pclose(f);
  }
  return cached = text.find("pngcairo") != std::string::npos ? "pngcairo" : "png";
}

std::string gnuplot_quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f || c == '`' || c == '@' || c == '$') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += ch;  // printable ASCII and the bytes of UTF-8 text: printed as they are
    }
  }
  return out + "\"";
}

bool run_gnuplot(const std::string& png_path, const std::string& script, std::string* error) {
  const std::string gp = gnuplot_path();
  if (gp.empty()) {
    if (error) *error = "gnuplot not found";
    return false;
  }
  const fs::path png = fs::absolute(png_path);
  const fs::path dir = png.parent_path();
  const std::string script_name = png.stem().string() + ".gp";
  write_text_file((dir / script_name).string(),
                  "set output (ARGC > 0 ? ARG1 : " + gnuplot_quote(png.filename().string()) +
                      ")\n" + script);
  // gnuplot draws into a new temporary of ours (so never through a link planted at the PNG's name)
  // and its messages go to another; both are removed whatever happens.
  std::string tmp_png, tmp_err;
  ::close(create_temporary_for(png.string(), &tmp_png));
  try {
    ::close(create_temporary_for((dir / script_name).string() + ".err", &tmp_err));
  } catch (...) {
    ::unlink(tmp_png.c_str());
    throw;
  }
  const std::string cmd = "cd " + shell_word(dir.string()) + " && " + shell_word(gp) + " -c " +
                          shell_word(script_name) + " " +
                          shell_word(fs::path(tmp_png).filename().string()) + " > /dev/null 2> " +
                          shell_word(tmp_err);
  const int rc = std::system(cmd.c_str());
  std::string msg;
  try {
    msg = read_text_file(tmp_err);
  } catch (const Error&) {
  }
  ::unlink(tmp_err.c_str());
  if (rc != 0) {
    ::unlink(tmp_png.c_str());
    if (error) {
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
      *error = "gnuplot " + script_name + " failed (status " + std::to_string(rc) + ")" +
               (msg.empty() ? "" : ": " + msg);
    }
    return false;
  }
  // gnuplot exits 0 even when it could not write the whole picture (a full disk).
  std::string why;
  if (!is_png_file(tmp_png, &why)) {
    ::unlink(tmp_png.c_str());
    fail("cannot write ", png.string(), ": gnuplot's picture is not a whole PNG (", why,
         "); is the disk full? The previous ", png.filename().string(), ", if any, is kept");
  }
  if (std::rename(tmp_png.c_str(), png.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_png.c_str());
    fail("cannot write ", png.string(), ": ", std::strerror(err));
  }
  return true;
}

namespace {

// CRC-32 of PNG chunks (ISO 3309, polynomial 0xEDB88320).
uint32_t png_crc(const unsigned char* p, size_t n) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

bool is_png_file(const std::string& path, std::string* why) {
  auto bad = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return bad("cannot read it");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  const std::string size_text = std::to_string(size) + " bytes";
  if (size < 8 || !std::equal(b, b + 8, sig)) return bad(size_text + ", no PNG signature");
  size_t at = 8;
  bool first = true;
  while (true) {
    if (size - at < 12)
      return bad(size_text + ", cut short after byte " + std::to_string(at) + " (no IEND chunk)");
    const uint32_t len = big_endian_u32(b + at);
    const std::string type(text, at + 4, 4);
    if (len > 0x7FFFFFFFu || size - at - 12 < len)
      return bad(size_text + ", chunk " + type + " at byte " + std::to_string(at) +
                 " runs past the end (no IEND chunk)");
    if (png_crc(b + at + 4, 4 + size_t{len}) != big_endian_u32(b + at + 8 + len))
      return bad(size_text + ", chunk " + type + " at byte " + std::to_string(at) +
                 " has a bad CRC");
    if (first && type != "IHDR")
      return bad(size_text + ", the first chunk is " + type + ", not IHDR");
    first = false;
    at += 12 + size_t{len};
    if (type == "IEND")
      return at == size ? true : bad(size_text + ", data after the IEND chunk");
  }
}

}  // namespace pelab
