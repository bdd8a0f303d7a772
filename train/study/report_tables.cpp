// pelab — the report's tables: markdown tables of schemes x lengths and of convergence, their
// cells, and the same tables as CSV (table_<metric>.csv) (report.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "pelab/strings.h"
#include "train/study/report.h"
#include "train/study/report_internal.h"

namespace pelab {
using namespace report_detail;

namespace {

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

std::string row_name(const ReportInput& in, const std::string& label) {
  return md_text(label) + (in.cannot_learn.count(scheme_of(in, label)) ? " ‡" : "");
}

std::string column_header(const Column& c) {
  const std::string name = c.length > 0 ? std::to_string(c.length) : md_text(c.split);
  return c.in_distribution == 1 ? name + " (train)" : name;
}

// One line of table_<metric>.csv.
std::string summary_line(const std::string& label, const std::string& split, int64_t length,
                         int in_distribution, const Stat& s) {
  std::string status = s.n > 0 ? (s.n_unconverged > 0 ? "includes_unconverged" : "ok")
                       : s.n_excluded > 0 ? "not converged"
                                          : s.status;
  return csv_cell(label) + "," + csv_cell(split) + "," + (length > 0 ? std::to_string(length) : "") +
         "," +
         (in_distribution == 1   ? "true"
          : in_distribution == 0 ? "false"
                                 : "") +
         "," + format_double(s.mean, 10) + "," + format_double(s.ci_low, 10) + "," +
         format_double(s.ci_high, 10) + "," + std::to_string(s.n) + "," +
         (s.any_criterion ? std::to_string(s.n_converged) : "") + "," + csv_cell(status) + "\n";
}

}  // namespace

namespace report_detail {

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

}  // namespace report_detail

std::string format_cell(const Stat& s, const std::string& metric, int64_t expected_n) {
  if (s.n == 0) {
    if (s.n_excluded > 0) return "not converged";
    return s.status.empty() ? "–" : md_text(s.status);
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
    if (r.converged != Converged::no || in.cannot_learn.count(r.scheme)) continue;
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
    for (size_t i = 0; i < left.size(); ++i) cap += (i ? ", " : ": ") + md_text(left[i]);
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
  out += worst->length > 0 ? "len " + std::to_string(worst->length) : md_text(worst->split);
  out += ", seed " + std::to_string(worst->seed) + ")";
  if (worst->converged == Converged::no) out += " †";
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
    std::map<int64_t, Convergence> by_seed;
    for (const auto& r : in.rows)
      if (r.label() == label) {
        Convergence& c = by_seed[r.seed];
        c.converged = r.converged;
        c.step = r.criterion_step;
      }
    std::vector<Convergence> runs;
    for (const auto& kv : by_seed) runs.push_back(kv.second);
    const ConvergenceCells cells = convergence_cells(runs);
    auto crit = in.criteria.find(label);
    const std::string criterion =
        crit != in.criteria.end() && !crit->second.empty() ? md_code(crit->second) : "—";
    const std::string& conv = cells.converged;
    const std::string& steps = cells.steps;
    const Stat ind = aggregate_runs(in.rows, label, 1, in.primary_metric, excludes(in, label));
    auto cl = in.cannot_learn.find(label);
    const std::string note =
        cl != in.cannot_learn.end() ? "cannot learn by construction: " + md_text(cl->second) : "";
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

}  // namespace pelab
