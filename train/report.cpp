// pelab — comparison reports: results.csv, report.md and gnuplot plots (report.h).
#include "train/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "pelab/error.h"
#include "train/metrics.h"

namespace fs = std::filesystem;

namespace pelab {

// ---------------- small helpers ----------------

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    PELAB_CHECK(out.good(), "cannot write ", path);
    out << text;
    out.flush();
    PELAB_CHECK(out.good(), "error writing ", path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  PELAB_CHECK(!ec, "cannot write ", path, ": ", ec.message());
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PELAB_CHECK(in.good(), "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string format_double(double v, int precision) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

namespace {

std::string fmtf(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A number for CSV: exact (17 digits), "" when not finite.
std::string num_cell(double v) { return std::isfinite(v) ? json_number(v) : std::string(); }

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

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

std::string style_lines(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s += "set linetype " + std::to_string(i + 1) + " lc rgb '" + kColors[i % kNumColors] +
         "' lw 2 pt " + std::to_string(static_cast<int>(i % 13) + 1) + " ps 1.1\n";
  return s;
}

struct PlotResult {
  std::vector<std::string> pngs, data;
  std::string error;
};

// metric vs length: one series per label with error bars, training range shaded.
void plot_metric(const std::string& dir, const ReportInput& in, const std::string& metric,
                 const std::vector<Column>& cols, PlotResult& pr, bool make_png) {
  const std::string stem = metric + "_vs_length";
  const double scale = is_percent_metric(metric) ? 100.0 : 1.0;
  std::string dat = "# " + metric_title(metric) + " vs " + in.length_name +
                    " (mean and sample std over seeds); one block per series\n";
  std::string csv = "series,split,length,mean,std,n\n";
  std::vector<std::string> series;
  double xmin = 1e300, xmax = -1e300;
  for (const auto& label : in.labels) {
    std::string block;
    for (const auto& c : cols) {
      if (c.length <= 0) continue;
      const Stat s = aggregate(in.rows, label, c.split, metric);
      if (s.n == 0) continue;
      const double sd = std::isfinite(s.std) ? s.std : 0.0;
      block += std::to_string(c.length) + " " + format_double(s.mean * scale, 8) + " " +
               format_double(sd * scale, 8) + " " + std::to_string(s.n) + "\n";
      csv += csv_cell(label) + "," + c.split + "," + std::to_string(c.length) + "," +
             format_double(s.mean, 10) + "," + format_double(sd, 10) + "," + std::to_string(s.n) +
             "\n";
      xmin = std::min(xmin, static_cast<double>(c.length));
      xmax = std::max(xmax, static_cast<double>(c.length));
    }
    if (block.empty()) continue;
    dat += "# " + label + "\n" + block + "\n\n";
    series.push_back(label);
  }
  write_text_file(dir + "/" + stem + ".dat", dat);
  write_text_file(dir + "/" + stem + ".csv", csv);
  pr.data.push_back(dir + "/" + stem + ".dat");
  pr.data.push_back(dir + "/" + stem + ".csv");
  if (!make_png || series.empty()) return;

  std::string gp = gnuplot_terminal_line(1100, 650);
  gp += "set output '" + stem + ".png'\n";
  gp += "set title " +
        gnuplot_quote(in.title + ": " + metric_title(metric) + " vs " + in.length_name) + "\n";
  gp += "set xlabel " + gnuplot_quote(in.length_name) + "\nset ylabel " +
        gnuplot_quote(metric_title(metric)) + "\n";
  gp += "set key outside right top\nset grid\n" + style_lines(series.size());
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
  if (is_percent_metric(metric)) gp += "set yrange [-2:102]\n";
  if (metric == "perplexity" || metric == "loss") gp += "set logscale y\n";
  // Training range shaded (clamped to the plotted range).
  const double r0 = std::max(lo, static_cast<double>(in.train_min) - (in.log_x ? 0.0 : 0.5));
  const double r1 = std::min(hi, static_cast<double>(in.train_max) + (in.log_x ? 0.0 : 0.5));
  if (r1 > r0) {
    gp += "set object 1 rect from first " + format_double(r0) + ", graph 0 to first " +
          format_double(r1) + ", graph 1 behind fc rgb '#e6e6e6' fs solid 1.0 noborder\n";
    gp += "set label 1 'training range' at first " +
          format_double(in.log_x ? std::sqrt(r0 * r1) : (r0 + r1) / 2) +
          ", graph 0.03 center tc rgb '#555555'\n";
  }
  gp += "plot \\\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const bool variant = series[i].find('+') != std::string::npos &&
                         in.label_notes.count(series[i]) &&
                         in.label_notes.at(series[i]).rfind("eval-time", 0) == 0;
    gp += "  '" + stem + ".dat' index " + std::to_string(i) + " using 1:2:3 with yerrorlines ls " +
          std::to_string(i + 1) + (variant ? " dt 2" : "") + " title " + gnuplot_quote(series[i]) +
          (i + 1 < series.size() ? ", \\\n" : "\n");
  }
  std::string err;
  if (run_gnuplot(dir + "/" + stem + ".gp", gp, &err))
    pr.pngs.push_back(dir + "/" + stem + ".png");
  else
    pr.error += stem + ": " + err + "; ";
}

// Training loss per scheme (mean over seeds at each logged step).
void plot_loss(const std::string& dir, const ReportInput& in, PlotResult& pr, bool make_png) {
  std::vector<std::string> schemes;
  for (const auto& c : in.curves)
    if (std::find(schemes.begin(), schemes.end(), c.scheme) == schemes.end())
      schemes.push_back(c.scheme);
  std::string dat = "# training loss per scheme: step, mean over seeds, sample std, n\n";
  std::string csv = "scheme,seed,step,loss\n";
  std::vector<std::string> series;
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
      double sd = 0;
      for (double x : v) sd += (x - m) * (x - m);
      sd = v.size() > 1 ? std::sqrt(sd / static_cast<double>(v.size() - 1)) : 0.0;
      dat += std::to_string(step) + " " + format_double(m, 8) + " " + format_double(sd, 8) + " " +
             std::to_string(v.size()) + "\n";
    }
    dat += "\n\n";
    series.push_back(s);
  }
  write_text_file(dir + "/train_loss.dat", dat);
  write_text_file(dir + "/train_loss.csv", csv);
  pr.data.push_back(dir + "/train_loss.dat");
  pr.data.push_back(dir + "/train_loss.csv");
  if (!make_png || series.empty()) return;
  std::string gp = gnuplot_terminal_line(1000, 600);
  gp += "set output 'train_loss.png'\n";
  gp += "set title " + gnuplot_quote(in.title + ": training loss (mean over seeds)") + "\n";
  gp += "set xlabel 'step'\nset ylabel 'training loss (nats/token)'\nset logscale y\n";
  gp += "set key outside right top\nset grid\n" + style_lines(series.size());
  gp += "plot \\\n";
  for (size_t i = 0; i < series.size(); ++i)
    gp += "  'train_loss.dat' index " + std::to_string(i) + " using 1:2 with lines ls " +
          std::to_string(i + 1) + " title " + gnuplot_quote(series[i]) +
          (i + 1 < series.size() ? ", \\\n" : "\n");
  std::string err;
  if (run_gnuplot(dir + "/train_loss.gp", gp, &err))
    pr.pngs.push_back(dir + "/train_loss.png");
  else
    pr.error += "train_loss: " + err + "; ";
}

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "–";
  if (s < 60) return fmtf("%.1f s", s);
  if (s < 3600)
    return fmtf("%.0f", std::floor(s / 60)) + " min " + fmtf("%02.0f s", std::fmod(s, 60));
  return fmtf("%.0f", std::floor(s / 3600)) + " h " + fmtf("%02.0f min", std::fmod(s, 3600) / 60);
}

// Summary CSV of a metric table: label, split, length, in_distribution, mean, std, n, status.
std::string summary_csv(const ReportInput& in, const std::string& metric,
                        const std::vector<Column>& cols) {
  std::string csv = "series,split,length,in_distribution,mean,std,n,status\n";
  for (const auto& label : in.labels)
    for (const auto& c : cols) {
      const Stat s = aggregate(in.rows, label, c.split, metric);
      csv += csv_cell(label) + "," + c.split + "," + std::to_string(c.length) + "," +
             (c.in_distribution == 1   ? "true"
              : c.in_distribution == 0 ? "false"
                                       : "") +
             "," + format_double(s.mean, 10) + "," + format_double(s.std, 10) + "," +
             std::to_string(s.n) + "," + csv_cell(s.n > 0 ? "ok" : s.status) + "\n";
    }
  return csv;
}

}  // namespace

// ---------------- results.csv ----------------

const std::vector<std::string>& results_csv_columns() {
  static const std::vector<std::string> c = {
      "scheme",          "variant",      "seed",       "split",      "length",
      "in_distribution", "status",       "loss",       "perplexity", "token_accuracy",
      "exact_match",     "train_wall_s", "eval_wall_s"};
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
           num_cell(r.train_wall_s) + "," + num_cell(r.eval_wall_s) + "\n";
  }
  return out;
}

std::vector<ResultRow> parse_results_csv(const std::string& text, const std::string& where) {
  const auto recs = parse_csv(text, where);
  PELAB_CHECK(!recs.empty(), where, ": empty (no header)");
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < recs[0].size(); ++i) col[recs[0][i]] = i;
  for (const auto& c : results_csv_columns())
    if (c != "eval_wall_s") PELAB_CHECK(col.count(c), where, ": missing column '", c, "'");
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

// ---------------- aggregation and tables ----------------

Stat aggregate(const std::vector<ResultRow>& rows, const std::string& label,
               const std::string& split, const std::string& metric) {
  Stat s;
  std::vector<double> v;
  for (const auto& r : rows) {
    if (r.split != split || r.label() != label) continue;
    if (!r.available()) {
      if (s.status.empty()) s.status = r.status;
      continue;
    }
    const double x = row_metric(r, metric);
    if (std::isfinite(x)) v.push_back(x);
  }
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  s.mean = m;
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    s.std = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

std::string format_cell(const Stat& s, const std::string& metric) {
  if (s.n == 0) return s.status.empty() ? "–" : s.status;
  const bool pct = is_percent_metric(metric);
  const double k = pct ? 100.0 : 1.0;
  const double m = s.mean * k;
  const char* f = pct ? "%.1f"
                      : (std::fabs(m) >= 1000  ? "%.0f"
                         : std::fabs(m) >= 100 ? "%.1f"
                                               : "%.2f");
  std::string out = fmtf(f, m);
  if (s.n > 1 && std::isfinite(s.std)) out += " ± " + fmtf(f, s.std * k);
  return out;
}

std::string metric_table_markdown(const ReportInput& in, const std::string& metric) {
  const std::vector<Column> cols = columns_of(in.rows);
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
      const Stat s = aggregate(in.rows, label, c.split, metric);
      if (s.n == 0) continue;
      lo = any ? std::min(lo, s.mean) : s.mean;
      hi = any ? std::max(hi, s.mean) : s.mean;
      any = true;
    }
    if (any && hi > lo) best[c.split] = higher_better(metric) ? hi : lo;
  }
  for (const auto& label : in.labels) {
    bool any = false;
    std::string line = "| " + label;
    double extrap_sum = 0;
    int extrap_n = 0;
    bool extrap_na = false;
    for (const auto& c : cols) {
      const Stat s = aggregate(in.rows, label, c.split, metric);
      any = any || s.n > 0 || !s.status.empty();
      std::string cell = format_cell(s, metric);
      if (s.n > 0 && best.count(c.split) && s.mean == best[c.split]) cell = "**" + cell + "**";
      line += " | " + cell;
      if (c.in_distribution == 0) {
        if (s.n > 0) {
          extrap_sum += s.mean;
          ++extrap_n;
        } else {
          extrap_na = true;
        }
      }
    }
    if (any_extrap) {
      Stat e;
      if (!extrap_na && extrap_n > 0) {
        e.n = 1;
        e.mean = extrap_sum / extrap_n;
      } else {
        e.status = "n/a";
      }
      line += " | " + format_cell(e, metric);
    }
    if (any) md += line + " |\n";
  }
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
  md << (in.seeds.size() > 1 ? " — cells are mean ± sample std over seeds.\n"
                             : " — one seed, so no spread is shown.\n");
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
  md << "\n";
  for (size_t i = 0; i < metrics.size(); ++i) {
    const std::string& m = metrics[i];
    md << "## " << metric_title(m) << " by " << in.length_name << "\n\n";
    md << metric_table_markdown(in, m) << "\n";
    if (has_png(m + "_vs_length"))
      md << "![" << metric_title(m) << " vs " << in.length_name << "](" << m
         << "_vs_length.png)\n\n";
  }
  md << "## Training loss\n\n";
  if (has_png("train_loss")) md << "![training loss](train_loss.png)\n\n";
  md << "Data: `train_loss.csv` (every logged step of every run).\n\n";

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
  md << "## Files\n\n";
  md << "`results.csv` (one row per scheme × variant × seed × split), `table_<metric>.csv` (the "
        "tables above), `<metric>_vs_length.{dat,csv,png}`, `train_loss.{dat,csv,png}`, "
        "`runs/<scheme>_seed<N>/` (each run's config, metrics, checkpoints and evaluation "
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
  const std::string cmd = "'" + gp + "' -e 'set terminal' 2>&1";
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
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

bool run_gnuplot(const std::string& script_path, const std::string& script, std::string* error) {
  const std::string gp = gnuplot_path();
  if (gp.empty()) {
    if (error) *error = "gnuplot not found";
    return false;
  }
  write_text_file(script_path, script);
  const fs::path p = fs::absolute(script_path);
  const std::string err_path = p.string() + ".err";
  const std::string cmd = "cd " + shell_quote(p.parent_path().string()) + " && " + shell_quote(gp) +
                          " " + shell_quote(p.filename().string()) + " > /dev/null 2> " +
                          shell_quote(err_path);
  const int rc = std::system(cmd.c_str());
  std::string msg;
  std::error_code ec;
  if (fs::exists(err_path, ec)) {
    msg = read_text_file(err_path);
    fs::remove(err_path, ec);
  }
  if (rc != 0) {
    if (error) {
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
      *error = "gnuplot " + p.filename().string() + " failed (status " + std::to_string(rc) + ")" +
               (msg.empty() ? "" : ": " + msg);
    }
    return false;
  }
  return true;
}

bool is_png_file(const std::string& path) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return false;
  unsigned char buf[8] = {};
  in.read(reinterpret_cast<char*>(buf), 8);
  if (in.gcount() != 8) return false;
  return std::equal(buf, buf + 8, sig);
}

}  // namespace pelab
