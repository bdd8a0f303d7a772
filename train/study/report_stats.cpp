// pelab — the report's statistics: Student-t intervals over seeds, clipped to a metric's range,
// and the aggregation of results.csv rows into them (report.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "pelab/error.h"
#include "train/study/report.h"
#include "train/study/report_internal.h"

namespace pelab {
using namespace report_detail;

namespace report_detail {

bool is_percent_metric(const std::string& m) { return m == "exact_match" || m == "token_accuracy"; }

bool higher_better(const std::string& m) { return is_percent_metric(m); }

std::string metric_title(const std::string& m) {
  if (m == "exact_match") return "exact match (%)";
  if (m == "token_accuracy") return "token accuracy (%)";
  if (m == "perplexity") return "perplexity";
  if (m == "loss") return "loss (nats/token)";
  return m;
}

}  // namespace report_detail

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
    any_criterion = any_criterion || r.converged != Converged::no_criterion;
    if (r.converged == Converged::no && exclude_unconverged) {
      ++excluded;
      continue;
    }
    v.push_back(r.value);
    conv += r.converged == Converged::yes;
    unconv += r.converged == Converged::no;
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
    Converged converged = Converged::no_criterion;
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

}  // namespace pelab
