// pelab — the report's plots: each metric against length and the training loss, as .dat / .csv
// data and gnuplot PNGs drawn through run_gnuplot (report_gnuplot.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "train/study/report.h"
#include "train/study/report_internal.h"

namespace pelab {
using namespace report_detail;

namespace {

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

// "n = 3 seeds" or "n = 2–3 seeds (per point in the .csv)".
std::string n_text(int64_t lo, int64_t hi) {
  if (lo == hi) return "n = " + std::to_string(lo) + (lo == 1 ? " seed" : " seeds");
  return "n = " + std::to_string(lo) + "–" + std::to_string(hi) + " seeds (n per point in the .csv)";
}

}  // namespace

namespace report_detail {

namespace {

// Where the points of a metric-vs-length plot go: the measured lengths, the series (labels with
// a point), and the horizontal jitter that keeps the series apart: they spread over 30 % of the
// smallest gap between measured lengths (in log2 units on a log axis).
struct MetricLayout {
  std::vector<int64_t> lengths;
  std::vector<std::string> series;
  double gap = 1.0, spread = 0.0;
  double offset(size_t i) const {
    return series.size() > 1 ? (static_cast<double>(i) / (series.size() - 1) - 0.5) * spread : 0.0;
  }
};

MetricLayout metric_layout(const ReportInput& in, const std::string& metric,
                           const std::vector<Column>& cols) {
  MetricLayout m;
  for (const auto& c : cols)
    if (c.length > 0) m.lengths.push_back(c.length);
  std::sort(m.lengths.begin(), m.lengths.end());
  m.lengths.erase(std::unique(m.lengths.begin(), m.lengths.end()), m.lengths.end());
  for (size_t i = 1; i < m.lengths.size(); ++i) {
    const double g = in.log_x ? std::log2(static_cast<double>(m.lengths[i]) / m.lengths[i - 1])
                              : static_cast<double>(m.lengths[i] - m.lengths[i - 1]);
    m.gap = i == 1 ? g : std::min(m.gap, g);
  }
  for (const auto& label : in.labels)
    for (const auto& c : cols)
      if (c.length > 0 && aggregate(in.rows, label, c.split, metric, excludes(in, label)).n > 0) {
        m.series.push_back(label);
        break;
      }
  m.spread = m.series.size() > 1 ? 0.3 * m.gap : 0.0;
  return m;
}

// The data of a metric-vs-length plot as written: two blocks per series in the .dat (converged
// cells, cells with runs that missed their criterion), the seeds' n and the plotted x range.
struct MetricPoints {
  struct Block {
    size_t series, index;
    bool open;
  };
  std::vector<Block> blocks;
  int64_t nmin = std::numeric_limits<int64_t>::max(), nmax = 0;
  double xmin = 1e300, xmax = -1e300;
};

MetricPoints write_metric_data(const std::string& dir, const std::string& stem,
                               const ReportInput& in, const std::string& metric,
                               const std::vector<Column>& cols, const MetricLayout& m,
                               PlotResult& pr) {
  const double scale = is_percent_metric(metric) ? 100.0 : 1.0;
  std::string dat = "# " + metric_title(metric) + " vs " + in.length_name +
                    ": plotted x (length with jitter), mean, 95 % t-interval low, high (clipped), "
                    "n, length; two blocks per series: converged cells, cells with runs that "
                    "missed their stop criterion\n";
  std::string csv = "series,split,length,mean,ci_low,ci_high,n,n_converged,n_unconverged,x_plotted\n";
  MetricPoints p;
  size_t index = 0;
  for (size_t i = 0; i < m.series.size(); ++i) {
    std::string part[2];
    for (const auto& c : cols) {
      if (c.length <= 0) continue;
      const Stat s = aggregate(in.rows, m.series[i], c.split, metric, excludes(in, m.series[i]));
      if (s.n == 0) continue;
      const double len = static_cast<double>(c.length);
      const double x = in.log_x ? len * std::exp2(m.offset(i)) : len + m.offset(i);
      const double lo = s.n > 1 ? s.ci_low : s.mean, hi = s.n > 1 ? s.ci_high : s.mean;
      part[s.n_unconverged > 0 ? 1 : 0] += format_double(x, 8) + " " +
                                           format_double(s.mean * scale, 8) + " " +
                                           format_double(lo * scale, 8) + " " +
                                           format_double(hi * scale, 8) + " " +
                                           std::to_string(s.n) + " " + std::to_string(c.length) +
                                           "\n";
      csv += csv_cell(m.series[i]) + "," + csv_cell(c.split) + "," + std::to_string(c.length) +
             "," + format_double(s.mean, 10) + "," + format_double(lo, 10) + "," +
             format_double(hi, 10) + "," + std::to_string(s.n) + "," +
             (s.any_criterion ? std::to_string(s.n_converged) : "") + "," +
             std::to_string(s.n_unconverged) + "," + format_double(x, 8) + "\n";
      p.nmin = std::min(p.nmin, s.n);
      p.nmax = std::max(p.nmax, s.n);
      p.xmin = std::min(p.xmin, x);
      p.xmax = std::max(p.xmax, x);
    }
    for (int k = 0; k < 2; ++k) {
      if (part[k].empty()) continue;
      dat += "# " + m.series[i] + (k ? " (not converged)" : "") + "\n" + part[k] + "\n\n";
      p.blocks.push_back({i, index++, k == 1});
    }
  }
  write_text_file(dir + "/" + stem + ".dat", dat);
  write_text_file(dir + "/" + stem + ".csv", csv);
  pr.data.push_back(dir + "/" + stem + ".dat");
  pr.data.push_back(dir + "/" + stem + ".csv");
  return p;
}

// The plot's subtitle: what the points are (n, clipping), the jitter, and the rows with no point
// at all because every run was left out (compare.unconverged: exclude).
std::string metric_subtitle(const ReportInput& in, const std::string& metric,
                            const std::vector<Column>& cols, const MetricLayout& m,
                            const MetricPoints& p) {
  const auto range = metric_range(metric);
  const std::string clip = is_percent_metric(metric)
                               ? "clipped to [0, 100]"
                               : "clipped to >= " + format_double(range.first);
  std::string sub = "mean and 95 % t-interval, " + n_text(p.nmin, p.nmax) + ", " + clip;
  std::string third;
  if (m.spread > 0)
    third = in.log_x ? "points offset by up to ×" + format_double(std::exp2(m.spread / 2), 3) +
                           " in x (jitter) so that none hides another"
                     : "points offset by up to ±" + format_double(m.spread / 2, 2) +
                           " in x (jitter) so that none hides another";
  std::string absent;
  for (const auto& label : in.labels) {
    if (std::find(m.series.begin(), m.series.end(), label) != m.series.end()) continue;
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
  return sub;
}

// The gnuplot script: axes over the plotted points, the training range shaded (clamped to the
// plotted range, wide enough to hold the jittered points of its lengths, named in the key so
// that no label covers data), one point series per block.
std::string metric_script(const std::string& stem, const ReportInput& in,
                          const std::string& metric, const MetricLayout& m, const MetricPoints& p,
                          const std::string& sub) {
  std::string gp = gnuplot_terminal_line(1200, 700);
  gp += "set title " +
        gnuplot_quote(in.title + ": " + metric_title(metric) + " vs " + in.length_name + "\n" +
                      sub) +
        "\n";
  gp += "set xlabel " + gnuplot_quote(in.length_name + " (points at the measured lengths)") +
        "\nset ylabel " + gnuplot_quote(metric_title(metric)) + "\n";
  gp += "set key outside right top\nset grid\n";
  double lo = p.xmin, hi = p.xmax;
  if (in.log_x) {
    gp += "set logscale x 2\n";
    lo = p.xmin / 1.15;
    hi = p.xmax * 1.15;
  } else {
    const double pad = std::max(0.5, 0.04 * (p.xmax - p.xmin));
    lo = p.xmin - pad;
    hi = p.xmax + pad;
  }
  gp += "set xrange [" + format_double(lo) + ":" + format_double(hi) + "]\n";
  if (m.lengths.size() <= 24) {
    gp += "set xtics (";
    for (size_t i = 0; i < m.lengths.size(); ++i)
      gp += (i ? ", " : "") + std::to_string(m.lengths[i]);
    gp += ")\n";
  }
  if (is_percent_metric(metric)) gp += "set yrange [-2:102]\n";
  if (metric == "perplexity" || metric == "loss") gp += "set logscale y\n";
  const double margin = m.spread / 2 + 0.05 * m.gap;
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
  for (const auto& b : p.blocks)
    parts.push_back("  " + gnuplot_quote(stem + ".dat") + " index " + std::to_string(b.index) +
                    " using 1:2:3:4 with yerrorbars " + point_style(b.series, b.open) +
                    " title " +
                    gnuplot_quote(m.series[b.series] +
                                  (in.cannot_learn.count(scheme_of(in, m.series[b.series]))
                                       ? " (cannot learn by construction)"
                                       : "") +
                                  (b.open ? " (not converged)" : "")));
  for (size_t i = 0; i < parts.size(); ++i)
    gp += parts[i] + (i + 1 < parts.size() ? ", \\\n" : "\n");
  return gp;
}

}  // namespace

// metric vs length: one series per label, points with their clipped 95 % t-intervals at the
// measured lengths only (no connecting lines), series offset horizontally so that none hides
// another, cells with runs that missed their stop criterion as open points of their own key
// entry, the training range shaded (its key entry names it).
void plot_metric(const std::string& dir, const ReportInput& in, const std::string& metric,
                 const std::vector<Column>& cols, PlotResult& pr, bool make_png) {
  const std::string stem = metric + "_vs_length";
  const MetricLayout m = metric_layout(in, metric, cols);
  const MetricPoints p = write_metric_data(dir, stem, in, metric, cols, m, pr);
  if (!make_png || p.blocks.empty()) return;
  const std::string gp = metric_script(stem, in, metric, m, p, metric_subtitle(in, metric, cols, m, p));
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
        if (r.converged == Converged::no) missed.insert(r.seed);
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

}  // namespace report_detail

}  // namespace pelab
