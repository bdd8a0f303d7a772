// pelab — our results side by side with the papers' (train/study/literature.h).
#include "train/study/literature.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config_schema.h"
#include "train/study/config_block.h"

namespace pelab {

namespace {

bool is_percent(const std::string& m) { return m == "exact_match" || m == "token_accuracy"; }

const std::vector<std::string>& metric_choices() {
  static const std::vector<std::string> m = {"exact_match", "token_accuracy", "perplexity",
                                             "loss"};
  return m;
}

std::string metric_words(const std::string& m) {
  if (m == "exact_match") return "exact match (%)";
  if (m == "token_accuracy") return "token accuracy (%)";
  if (m == "loss") return "loss (nats/token)";
  return m;
}

// "...; did you mean 'x'?" when a candidate is close.
std::string hint(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string near = nearest_name(word, candidates);
  return near.empty() ? "" : "; did you mean '" + near + "'?";
}

// A finite number written as a plain scalar.
bool scalar_number(const YAML::Node& n, double& v) {
  if (!n.IsScalar()) return false;
  const std::string s = n.Scalar();
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(v);
}

// A row name of ours (a scheme, or scheme+variant), checked against the context.
std::string row_name(const YAML::Node& n, const std::string& source, const std::string& what,
                     const LiteratureContext& ctx) {
  if (!n.IsScalar() || n.Scalar().empty())
    fail_at(yaml_where(source, n),
            what + ": expected one of our row names (" + join(ctx.rows, ", ") + ")");
  const std::string name = n.Scalar();
  if (std::find(ctx.rows.begin(), ctx.rows.end(), name) == ctx.rows.end())
    fail_at(yaml_where(source, n), what + ": '" + name + "' is not a row of this " +
                                       (ctx.suite ? "suite" : "comparison") + hint(name, ctx.rows) +
                                       " (rows: " + join(ctx.rows, ", ") +
                                       "; name OUR scheme, e.g. none for their NoPE)");
  return name;
}

bool same_value(double a, double b) {
  return std::fabs(a - b) <= 1e-12 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

// Indexes of `values` best first, grouped into runs of equal values: (first, last) positions.
std::vector<size_t> order_best_first(const std::vector<double>& v, bool higher) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return higher ? v[a] > v[b] : v[a] < v[b]; });
  return idx;
}

template <class F>
std::vector<double> by_tie_groups(const std::vector<double>& v, bool higher, F value_of_group) {
  const std::vector<size_t> idx = order_best_first(v, higher);
  std::vector<double> out(v.size(), std::nan(""));
  size_t i = 0;
  while (i < idx.size()) {
    size_t j = i;
    while (j + 1 < idx.size() && same_value(v[idx[j + 1]], v[idx[j]])) ++j;
    const double g = value_of_group(i + 1, j + 1);  // ranks i+1 .. j+1
    for (size_t k = i; k <= j; ++k) out[idx[k]] = g;
    i = j + 1;
  }
  return out;
}

std::string rank_text(double r) {
  if (!std::isfinite(r)) return "–";
  return std::fabs(r - std::round(r)) < 1e-9 ? printf_number("%.0f", r) : printf_number("%.1f", r);
}

std::string tau_number(double t) {
  if (std::fabs(t) < 0.005) t = 0;  // no "-0.00"
  return printf_number("%.2f", t);
}

// ---------------- our values ----------------

// One of our rows in a ranking table.
struct OursRow {
  std::string name;
  Stat stat;                  // metric units (fractions for accuracies) or reciprocal ranks
  bool flagged = false;       // includes a run that missed its stop criterion (†)
  bool cannot_learn = false;  // ‡
  bool has_value() const { return stat.n > 0 && std::isfinite(stat.mean); }
};

// One pair of a gains table: the differences (display units), one per unit (seed / task).
struct PairGain {
  std::string with, without;
  std::map<std::string, double> diff;  // unit -> difference
  bool flagged = false;
};

// How our values were made, for the table's text.
struct OursKind {
  std::string metric;  // the metric, or "mrr"
  std::string over;    // "seeds" / "tasks"
  std::string describe;
  double scale = 1;  // display: 100 for accuracies
};

std::string value_cell(const Stat& s, const OursKind& k, bool gain) {
  if (s.n == 0 || !std::isfinite(s.mean)) return "–";
  std::string out;
  if (gain || k.metric == "mrr") {
    const char* f = gain ? (is_percent(k.metric) ? "%+.1f" : "%+.3g") : "%.2f";
    out = printf_number(f, s.mean);
    if (s.n > 1 && std::isfinite(s.ci_low) && std::isfinite(s.ci_high))
      out += " [" + printf_number(f, s.ci_low) + ", " + printf_number(f, s.ci_high) + "]";
  } else {
    Stat plain = s;
    plain.n_unconverged = 0;
    out = format_cell(plain, k.metric);
  }
  return out + " (n = " + std::to_string(s.n) + ")";
}

std::string unit_of(const OursKind& k, bool gain) {
  if (k.metric == "mrr") return "MRR";
  if (is_percent(k.metric)) return gain ? "points" : "%";
  return k.metric;
}

// CSV row: paper,kind,name,theirs,ours,ours_ci_low,ours_ci_high,n,over,unit,their_rank,our_rank,
// unconverged,note
std::string csv_row(const std::string& paper, const std::string& kind, const std::string& name,
                    const std::string& theirs, double ours, double lo, double hi, int64_t n,
                    const std::string& over, const std::string& unit, double their_rank,
                    double our_rank, const std::string& unconverged, const std::string& note) {
  return csv_field(paper) + "," + kind + "," + csv_field(name) + "," + csv_field(theirs) + "," +
         csv_number(ours) + "," + csv_number(lo) + "," + csv_number(hi) + "," +
         (n > 0 ? std::to_string(n) : "") + "," + over + "," + unit + "," +
         csv_number(their_rank) + "," + csv_number(our_rank) + "," + unconverged + "," +
         csv_field(note) + "\n";
}

std::string entry_head(const LiteratureEntry& e) {
  std::string h = "### " + md_text(e.paper) + "\n\n" + md_text(e.setting);
  if (!h.empty() && h.back() != '.') h += ".";
  return h;
}

// The ranking table of one entry, with τ-b.
void ranking_section(const LiteratureEntry& e, const std::vector<OursRow>& ours,
                     const OursKind& k, std::ostringstream& md, std::ostringstream& csv) {
  const bool our_higher = k.metric == "mrr" || is_percent(k.metric);
  // The rows both have, their ranks among those rows.
  std::vector<size_t> both;
  for (size_t i = 0; i < ours.size(); ++i)
    if (ours[i].has_value()) both.push_back(i);
  std::vector<double> theirs_v, ours_v;
  for (size_t i : both) {
    theirs_v.push_back(e.theirs[i].second);
    ours_v.push_back(ours[i].stat.mean);
  }
  const std::vector<double> tr = literature_ranks(theirs_v, e.higher_is_better);
  const std::vector<double> orank = literature_ranks(ours_v, our_higher);
  std::vector<double> their_rank(ours.size(), std::nan("")), our_rank(ours.size(), std::nan(""));
  for (size_t j = 0; j < both.size(); ++j) {
    their_rank[both[j]] = tr[j];
    our_rank[both[j]] = orank[j];
  }
  const KendallTau all = kendall_tau_b(tr, orank);
  std::vector<double> tr_c, or_c;
  std::vector<std::string> flagged;
  for (size_t j = 0; j < both.size(); ++j) {
    if (ours[both[j]].flagged) {
      flagged.push_back(ours[both[j]].name);
      continue;
    }
    tr_c.push_back(tr[j]);
    or_c.push_back(orank[j]);
  }
  const KendallTau conv = kendall_tau_b(tr_c, or_c);

  md << entry_head(e) << " Their figure: " << md_text(e.figure) << " ("
     << (e.higher_is_better ? "higher" : "lower") << " is better). " << k.describe << "\n\n";
  md << "| scheme | theirs | ours (mean [95 % CI], n) | their rank | our rank |\n"
     << "|---|---:|---:|---:|---:|\n";
  // Rows in their order (best first by their figure), the ones we lack last.
  std::vector<double> all_theirs;
  for (const auto& t : e.theirs) all_theirs.push_back(t.second);
  std::vector<size_t> order = order_best_first(all_theirs, e.higher_is_better);
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return ours[i].has_value(); });
  std::vector<std::string> missing;
  bool any_dagger = false, any_cannot = false;
  for (size_t i : order) {
    const OursRow& o = ours[i];
    std::string name = o.name + (o.cannot_learn ? " ‡" : "");
    std::string cell = value_cell(o.stat, k, false);
    if (o.flagged) cell += " †";
    any_dagger = any_dagger || o.flagged;
    any_cannot = any_cannot || o.cannot_learn;
    if (!o.has_value()) missing.push_back(md_text(o.name));
    md << "| " << md_text(name) << " | " << md_text(e.theirs_text[i]) << " | " << cell << " | "
       << rank_text(their_rank[i]) << " | " << rank_text(our_rank[i]) << " |\n";
    const double scale = k.metric == "mrr" ? 1.0 : k.scale;
    csv << csv_row(e.paper, "rank", o.name, e.theirs_text[i], o.stat.mean * scale,
                   o.stat.ci_low * scale, o.stat.ci_high * scale, o.stat.n, k.over,
                   unit_of(k, false), their_rank[i], our_rank[i], o.flagged ? "true" : "false",
                   o.has_value() ? "" : "no value of ours: not ranked");
  }
  md << "\n_Ranks: 1 = best, among the " << both.size()
     << " schemes both have (tied values share the mean of their ranks)."
     << (any_dagger ? " † includes a run that missed its stop criterion (train.stop_when)." : "")
     << (any_cannot ? " ‡ declared unable to learn the task (expect: cannot_learn)." : "")
     << (missing.empty() ? "" : " Not ranked (no value of ours): " + join(missing, ", ") + ".")
     << "_\n\n";
  md << "Kendall's " << kendall_text(all) << " between their ranking and ours";
  if (!flagged.empty())
    md << "; over the rows without † only (leaving out " << md_text(join(flagged, ", ")) << "): "
       << kendall_text(conv);
  md << ".\n\n";
  csv << csv_row(e.paper, "tau_b", "all rows", "", all.tau, std::nan(""), std::nan(""), all.n,
                 "schemes", "tau", std::nan(""), std::nan(""), flagged.empty() ? "false" : "true",
                 kendall_text(all));
  if (!flagged.empty())
    csv << csv_row(e.paper, "tau_b_converged", "rows without unconverged runs", "", conv.tau,
                   std::nan(""), std::nan(""), conv.n, "schemes", "tau", std::nan(""),
                   std::nan(""), "false", kendall_text(conv));
}

// The gains table of one entry.
void gains_section(const LiteratureEntry& e, const std::vector<PairGain>& pairs,
                   const OursKind& k, std::ostringstream& md, std::ostringstream& csv) {
  md << entry_head(e) << " Their figure: " << md_text(e.figure) << ": **" << md_text(e.gain_text)
     << "**. "
     << k.describe << "\n\n";
  md << "| pair (with − without) | theirs | ours (mean [95 % CI], n " << k.over << ") |\n"
     << "|---|---:|---:|\n";
  const std::string unit = unit_of(k, true);
  bool any_dagger = false;
  for (const auto& p : pairs) {
    std::vector<double> d;
    for (const auto& [u, x] : p.diff) d.push_back(x);
    const Stat s = difference_stat(d);
    const std::string name = p.with + " − " + p.without;
    any_dagger = any_dagger || p.flagged;
    md << "| " << md_text(name) << " | " << (pairs.size() == 1 ? md_text(e.gain_text) : "") << " | "
       << value_cell(s, k, true) << (p.flagged ? " †" : "") << " |\n";
    csv << csv_row(e.paper, "gain", p.with + " - " + p.without,
                   pairs.size() == 1 ? e.gain_text : "", s.mean, s.ci_low, s.ci_high, s.n, k.over,
                   unit, std::nan(""), std::nan(""), p.flagged ? "true" : "false", "");
  }
  if (pairs.size() > 1) {
    // Per unit the mean over the pairs (units every pair has).
    std::map<std::string, std::pair<double, size_t>> acc;
    for (const auto& p : pairs)
      for (const auto& [u, x] : p.diff) {
        acc[u].first += x;
        ++acc[u].second;
      }
    std::vector<double> d;
    for (const auto& [u, a] : acc)
      if (a.second == pairs.size()) d.push_back(a.first / static_cast<double>(a.second));
    const Stat s = difference_stat(d);
    md << "| mean over the " << pairs.size() << " pairs | " << md_text(e.gain_text) << " | "
       << value_cell(s, k, true) << (any_dagger ? " †" : "") << " |\n";
    csv << csv_row(e.paper, "gain_mean", "mean over the pairs", e.gain_text, s.mean, s.ci_low,
                   s.ci_high, s.n, k.over, unit, std::nan(""), std::nan(""),
                   any_dagger ? "true" : "false",
                   "per " + k.over.substr(0, k.over.size() - 1) +
                       " the mean over the pairs, then the mean and interval over the " + k.over);
  }
  md << "\n_Differences in " << unit << "; 95 % Student-t interval over the " << k.over
     << ", not clipped; n < 2 has none."
     << (any_dagger ? " † includes a run that missed its stop criterion (train.stop_when)." : "")
     << "_\n\n";
}

// With − without at one task: the difference of the two rows' means over seeds and its 95 %
// Welch interval (the runs of the two rows are independent: each seed initialises each scheme
// differently). Both samples without spread give the point difference as the interval.
Stat welch_difference(const std::vector<double>& a, const std::vector<double>& b) {
  Stat s;
  const Stat sa = difference_stat(a), sb = difference_stat(b);
  if (sa.n == 0 || sb.n == 0) return s;
  s.n = std::min(sa.n, sb.n);
  s.mean = sa.mean - sb.mean;
  if (sa.n < 2 || sb.n < 2) return s;
  const double va = sa.std * sa.std / static_cast<double>(sa.n);
  const double vb = sb.std * sb.std / static_cast<double>(sb.n);
  if (va + vb <= 0) {
    s.half = 0;
  } else {
    const double df = (va + vb) * (va + vb) /
                      (va * va / static_cast<double>(sa.n - 1) +
                       vb * vb / static_cast<double>(sb.n - 1));
    s.half = student_t_quantile(0.975, std::max(1.0, df)) * std::sqrt(va + vb);
  }
  s.ci_low = s.mean - s.half;
  s.ci_high = s.mean + s.half;
  return s;
}

// Each run's mean of `metric` over the extrapolation columns of `label` (or over `length`'s only),
// without the runs that missed their criterion when drop_unconverged (compare.unconverged: exclude).
std::vector<RunMean> kept_runs(const std::vector<ResultRow>& rows, const std::string& label,
                               const std::string& metric, bool drop_unconverged, int64_t length = 0) {
  std::vector<RunMean> runs = run_means(rows, label, 0, metric, length);
  if (drop_unconverged)
    runs.erase(std::remove_if(runs.begin(), runs.end(),
                              [](const RunMean& r) { return r.converged == Converged::no; }),
               runs.end());
  return runs;
}

// The per-task gains of a suite entry: one row per task, one column per pair (with − without:
// mean over seeds and Welch interval), and per pair the count of tasks where `without` fails and
// the gain is positive with its interval above 0.
void per_task_gains_section(const LiteratureEntry& e, const std::vector<LiteratureTask>& tasks,
                            const std::string& m, const OursKind& k,
                            const std::function<bool(const LiteratureTask&, const std::string&)>&
                                excluded,
                            std::ostringstream& md, std::ostringstream& csv) {
  const bool percent = is_percent(m);
  auto values = [&](const LiteratureTask& t, const std::string& label) {
    std::vector<double> v;
    bool flagged = false;
    for (const auto& r : kept_runs(t.rows, label, m, excluded(t, label))) {
      v.push_back(k.scale * r.value);
      flagged = flagged || r.converged == Converged::no;
    }
    return std::make_pair(v, flagged);
  };
  md << "Per task (the summary's cells; n = seeds per row): with − without, the difference of "
        "the two rows' means over seeds with its 95 % Welch interval (each scheme's runs are "
        "independent), and the `without` row's cell. **Bold**: positive with the interval above "
        "0."
     << (percent ? " A task counts as one where the `without` row fails when its cell is below " +
                       printf_number("%g", e.fails_below) + " % (`fails_below`)."
                 : "")
     << "\n\n| task |";
  for (const auto& [a, b] : e.pairs)
    md << " " << md_text(b) << " | " << md_text(a) << " − " << md_text(b) << " |";
  md << "\n|---|";
  for (size_t i = 0; i < e.pairs.size(); ++i) md << "---:|---:|";
  md << "\n";
  struct Count {
    int fails = 0, fails_won = 0, tasks = 0, won = 0;
  };
  std::vector<Count> counts(e.pairs.size());
  bool any_dagger = false;
  for (const auto& t : tasks) {
    md << "| " << md_text(t.name) << " |";
    for (size_t i = 0; i < e.pairs.size(); ++i) {
      const auto& [a, b] = e.pairs[i];
      const auto [va, fa] = values(t, a);
      const auto [vb, fb] = values(t, b);
      const Stat base = difference_stat(vb);
      const Stat d = welch_difference(va, vb);
      if (d.n == 0) {
        md << " – | – |";
        continue;
      }
      const bool dagger = fa || fb;
      any_dagger = any_dagger || dagger;
      const bool fails = percent && base.mean < e.fails_below;
      const bool won = std::isfinite(d.ci_low) && d.ci_low > 0;
      Count& c = counts[i];
      ++c.tasks;
      c.won += won;
      c.fails += fails;
      c.fails_won += fails && won;
      const char* f = percent ? "%+.1f" : "%+.3g";
      std::string cell = printf_number(f, d.mean);
      if (std::isfinite(d.ci_low))
        cell += " [" + printf_number(f, d.ci_low) + ", " + printf_number(f, d.ci_high) + "]";
      if (won) cell = "**" + cell + "**";
      md << " " << printf_number(percent ? "%.1f" : "%.3g", base.mean) << " | " << cell
         << (dagger ? " †" : "") << " |";
      csv << csv_row(e.paper, "task_gain", t.name + ": " + a + " - " + b, "", d.mean, d.ci_low,
                     d.ci_high, d.n, "seeds", unit_of(k, true), std::nan(""), std::nan(""),
                     dagger ? "true" : "false",
                     std::string("without: ") + printf_number("%.6g", base.mean) +
                         (percent ? (fails ? "; fails" : "; does not fail") : ""));
    }
    md << "\n";
  }
  md << "\n";
  for (size_t i = 0; i < e.pairs.size(); ++i) {
    const auto& [a, b] = e.pairs[i];
    const Count& c = counts[i];
    md << "- " << md_text(a) << " − " << md_text(b) << ": positive with the interval above 0 on "
       << c.won
       << " of " << c.tasks << " tasks";
    if (percent)
      md << "; on " << c.fails_won << " of the " << c.fails << " tasks where " << md_text(b)
         << " fails (below " << printf_number("%g", e.fails_below) << " %)";
    md << ".\n";
    if (percent)
      csv << csv_row(e.paper, "tasks_won_where_fails", a + " - " + b, "", c.fails_won,
                     std::nan(""), std::nan(""), c.fails, "tasks", "tasks", std::nan(""),
                     std::nan(""), "false",
                     "tasks where without fails and the gain's 95 % Welch interval is above 0");
  }
  md << "\n_Differences in " << unit_of(k, true)
     << "; n < 2 on a side has no interval."
     << (any_dagger ? " † includes a run that missed its stop criterion (train.stop_when)." : "")
     << "_\n\n";
}

// The MRR entry's per-task ranks: one row per scheme (their order), one column per task, the rank
// (1 = best; ties share the mean of the ranks they span) the task's summary cells give it.
void per_task_ranks_section(const LiteratureEntry& e, const std::vector<LiteratureTask>& tasks,
                            const std::map<std::string, std::map<std::string, double>>& rank_task,
                            std::ostringstream& md, std::ostringstream& csv) {
  md << "Per task, our rank of each scheme (1 = best among these " << e.theirs.size()
     << "; tied cells share the mean of the ranks they span; – where the task has no value):\n\n"
        "| scheme |";
  for (const auto& t : tasks) md << " " << md_text(t.name) << " |";
  md << "\n|---|";
  for (size_t i = 0; i < tasks.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& th : e.theirs) {
    md << "| " << md_text(th.first) << " |";
    const auto row = rank_task.find(th.first);
    for (const auto& t : tasks) {
      const double* found = nullptr;
      if (row != rank_task.end())
        if (const auto it = row->second.find(t.name); it != row->second.end()) found = &it->second;
      if (!found) {
        md << " – |";
        continue;
      }
      const double rank = *found;
      md << " " << printf_number("%g", std::round(rank * 100.0) / 100.0) << " |";
      csv << csv_row(e.paper, "task_rank", t.name + ": " + th.first, "", rank, std::nan(""),
                     std::nan(""), 0, "", "rank", std::nan(""), std::nan(""), "", "");
    }
    md << "\n";
  }
  md << "\n";
}

// The MRR ranking's pairs that our data resolves: per pair of schemes, the paired difference of
// their reciprocal ranks over the tasks both have, resolved when its 95 % t-interval excludes 0;
// over the resolved pairs, (concordant − discordant) / resolved against their order.
void resolved_pairs_section(const LiteratureEntry& e,
                            const std::map<std::string, std::map<std::string, double>>& rr_task,
                            std::ostringstream& md, std::ostringstream& csv) {
  int64_t pairs = 0, resolved = 0, concordant = 0, discordant = 0;
  std::vector<std::string> lines;
  for (size_t i = 0; i < e.theirs.size(); ++i)
    for (size_t j = i + 1; j < e.theirs.size(); ++j) {
      const auto& [a, ta] = e.theirs[i];
      const auto& [b, tb] = e.theirs[j];
      auto ia = rr_task.find(a), ib = rr_task.find(b);
      if (ia == rr_task.end() || ib == rr_task.end() || same_value(ta, tb)) continue;
      std::vector<double> d;
      for (const auto& [task, x] : ia->second) {
        auto it = ib->second.find(task);
        if (it != ib->second.end()) d.push_back(x - it->second);
      }
      const Stat s = difference_stat(d);
      if (s.n < 2) continue;
      ++pairs;
      if (!(s.ci_low > 0 || s.ci_high < 0)) continue;
      ++resolved;
      const bool they_a = e.higher_is_better ? ta > tb : ta < tb;  // they rank a first
      const bool we_a = s.mean > 0;
      (they_a == we_a ? concordant : discordant) += 1;
      const std::string first = we_a ? a : b, second = we_a ? b : a;
      lines.push_back(md_text(first) + " > " + md_text(second) + " (" + printf_number("%+.2f", std::fabs(s.mean)) +
                      " [" + printf_number("%+.2f", we_a ? s.ci_low : -s.ci_high) + ", " +
                      printf_number("%+.2f", we_a ? s.ci_high : -s.ci_low) + "], n = " +
                      std::to_string(s.n) + "; " + (they_a == we_a ? "theirs too" : "theirs: the reverse") +
                      ")");
    }
  md << "Pairs our data resolves: of the " << pairs
     << " pairs of schemes, those whose paired difference of reciprocal ranks over the tasks has "
        "a 95 % t-interval excluding 0: "
     << resolved;
  if (resolved > 0) {
    const double agree = static_cast<double>(concordant - discordant) / static_cast<double>(resolved);
    md << " (" << join(lines, "; ") << "). Over them, (concordant − discordant) / resolved = "
       << tau_number(agree) << " (" << concordant << " concordant, " << discordant
       << " discordant).\n\n";
    csv << csv_row(e.paper, "tau_resolved_pairs", "pairs resolved at our scale", "", agree,
                   std::nan(""), std::nan(""), resolved, "pairs", "tau", std::nan(""),
                   std::nan(""), "false",
                   std::to_string(concordant) + " concordant, " + std::to_string(discordant) +
                       " discordant of " + std::to_string(pairs) + " pairs");
  } else {
    md << " — no order to compare at this scale.\n\n";
  }
}

const char* kCsvHeader =
    "paper,kind,name,theirs,ours,ours_ci_low,ours_ci_high,n,over,unit,their_rank,our_rank,"
    "unconverged,note\n";

std::string of_metric_text(const LiteratureEntry& e) {
  return metric_words(e.metric) +
         (e.length > 0 ? " at length " + std::to_string(e.length)
                       : " averaged over the extrapolation lengths (each run's mean over the test "
                         "lengths outside the training range)");
}

}  // namespace

// ---------------- schema and parsing ----------------

namespace {

// One entry's keys, read like the run config's (train/config_schema.h); theirs and pairs are
// checked against the comparison's rows afterwards (they depend on each other and the context).
const SectionSchema<LiteratureEntry>& entry_schema() {
  static const SectionSchema<LiteratureEntry> schema = [] {
    SectionSchema<LiteratureEntry> s("literature[]");
    auto node = [](LiteratureEntry&, const YAML::Node&, const config_detail::Ctx&) {};
    s.key("paper", &LiteratureEntry::paper, "",
          "Required. The paper, as a short citation (\"Press et al. 2022\"); the heading of its "
          "table");
    s.key("setting", &LiteratureEntry::setting, "",
          "Required. Their setting in one line (data, model, training and test lengths)");
    s.key("figure", &LiteratureEntry::figure, "",
          "Required. What their numbers are (\"perplexity at 3512 tokens\", \"mean reciprocal "
          "rank over tasks\", \"accuracy %\")");
    s.structured("theirs", ConfigType::Map,
                 "Required. Their figure per scheme: a map from OUR row names (compare.schemes "
                 "names or scheme+variant labels, e.g. none for their NoPE) to their numbers (at "
                 "least 2), ranked against ours with Kendall's tau-b; or, with pairs, their one "
                 "figure for the mean difference of the pairs (e.g. 12.0)",
                 node);
    s.key("higher_is_better", &LiteratureEntry::higher_is_better, "",
          "Required with theirs as a map: the direction of THEIR figure (false for perplexity)");
    s.structured("pairs", ConfigType::Map,
                 "Gains form: {with: without, ...} of our row names (e.g. {rope+rand: rope}); ours "
                 "is the mean difference with - without, per seed in a comparison (runs paired by "
                 "seed), per task in a suite, with its 95 % t-interval",
                 node);
    s.key("metric", &LiteratureEntry::metric, join(metric_choices(), "|"),
          "Our metric (default: the report's primary metric, in a suite suite.metric)");
    s.key("length", &LiteratureEntry::length, "[0, inf)",
          "Comparisons only: rank by our values at this test length (one of task.test_lengths, "
          "for lm task.lm_eval_lengths); 0 = each run's mean over the extrapolation lengths");
    s.key("statistic", &LiteratureEntry::statistic, "mean|mrr",
          "Suites only: mean = each seed's mean over the tasks, then the mean and interval over "
          "seeds (the summary's average column); mrr = the mean reciprocal rank over the tasks "
          "(each task ranks this entry's schemes by their summary cells), with the interval over "
          "tasks");
    s.key("fails_below", &LiteratureEntry::fails_below, "[0, 100]",
          "Suites, gains form (pairs), accuracy metrics: the per-task table of the gains counts, "
          "per pair, the tasks where the `without` row fails (its summary cell, in %, is below "
          "this) and where the gain is positive with its 95 % Welch interval above 0");
    return s;
  }();
  return schema;
}

}  // namespace

std::vector<ConfigKey> literature_schema() {
  std::vector<ConfigKey> keys = entry_schema().keys();
  for (auto& k : keys) {  // defaults as the entry states them (metric: the report's)
    if (k.name == "length") k.default_text = "0";
    if (k.name == "fails_below") k.default_text = "90";
    if (k.name == "metric" || k.name == "higher_is_better") k.default_text = "";
  }
  return keys;
}

ConfigReferenceSection literature_reference_section() {
  return {"`literature` (compare and suite configs)",
          "A compare or suite config (docs/experiments.md) may add a top-level `literature:` list "
          "that puts our results next to the papers' figures in report.md / summary.md (section "
          "\"Against the literature\") and `literature.csv`: per entry either the paper's figure "
          "per scheme, ranked against ours with Kendall's tau-b, or (`theirs` one number with "
          "`pairs`) their mean gain next to ours. It is not part of any run's config (changing it "
          "retrains nothing) and cannot be set with `--set`. Each entry of the list has these keys "
          "(unknown keys, unknown scheme names and bad values are errors naming the file and "
          "line):",
          literature_schema()};
}

namespace {

// theirs as a map {row: number} (the ranking form), with higher_is_better and without pairs.
void read_ranking(LiteratureEntry& le, const std::map<std::string, YAML::Node>& k,
                  const std::string& source, const std::string& what,
                  const LiteratureContext& ctx) {
  const YAML::Node th = k.at("theirs");
  for (auto it = th.begin(); it != th.end(); ++it) {
    const std::string name = row_name(it->first, source, what + ".theirs", ctx);
    double v = 0;
    if (!scalar_number(it->second, v))
      fail_at(yaml_where(source, it->second),
              what + ".theirs." + name + ": expected their figure as a number, got '" +
                  (it->second.IsScalar() ? it->second.Scalar() : "?") + "'");
    for (const auto& t : le.theirs)
      if (t.first == name)
        fail_at(yaml_where(source, it->first), what + ".theirs: " + name + " appears twice");
    le.theirs.emplace_back(name, v);
    le.theirs_text.push_back(it->second.Scalar());
  }
  if (le.theirs.size() < 2)
    fail_at(yaml_where(source, th), what + ".theirs: a ranking needs at least 2 schemes");
  if (!k.count("higher_is_better"))
    fail_at(le.where, what +
                          ": higher_is_better is missing (the direction of their "
                          "figure: false for perplexity or loss)");
  if (k.count("pairs"))
    fail_at(yaml_where(source, k.at("pairs")),
            what +
                ".pairs goes with theirs as one number (their mean gain); with theirs "
                "as a map the schemes are ranked");
}

// theirs as one number (the gains form), with pairs {with: without} and no higher_is_better.
void read_gains(LiteratureEntry& le, const std::map<std::string, YAML::Node>& k,
                const std::string& source, const std::string& what, const LiteratureContext& ctx) {
  const YAML::Node th = k.at("theirs");
  double v = 0;
  if (!scalar_number(th, v))
    fail_at(yaml_where(source, th), what +
                                        ".theirs: expected a map {scheme: number} or, with "
                                        "pairs, one number");
  le.gain = v;
  le.gain_text = th.Scalar();
  if (v > 0 && le.gain_text.front() != '+') le.gain_text = "+" + le.gain_text;
  if (!k.count("pairs"))
    fail_at(yaml_where(source, th), what +
                                        ": theirs as one number needs pairs: {with: without} "
                                        "(e.g. {rope+rand: rope})");
  if (k.count("higher_is_better"))
    fail_at(yaml_where(source, k.at("higher_is_better")),
            what + ".higher_is_better goes with theirs as a map (a ranking)");
  const YAML::Node p = k.at("pairs");
  if (!p.IsMap() || p.size() == 0)
    fail_at(yaml_where(source, p), what + ".pairs must be a mapping {with: without, ...}");
  for (auto it = p.begin(); it != p.end(); ++it) {
    const std::string a = row_name(it->first, source, what + ".pairs", ctx);
    const std::string b = row_name(it->second, source, what + ".pairs." + a, ctx);
    if (a == b) fail_at(yaml_where(source, it->first), what + ".pairs: " + a + " paired with itself");
    for (const auto& q : le.pairs)
      if (q.first == a)
        fail_at(yaml_where(source, it->first), what + ".pairs: " + a + " appears twice");
    le.pairs.emplace_back(a, b);
  }
}

// Which of our values: metric, length, statistic and fails_below against the context.
void check_our_values(const LiteratureEntry& le, const std::map<std::string, YAML::Node>& k,
                      const std::string& source, const std::string& what,
                      const LiteratureContext& ctx) {
  if (k.count("metric") && ctx.lm && le.metric == "exact_match")
    fail_at(yaml_where(source, k.at("metric")),
            what + ".metric: the lm task has no exact match (use perplexity or loss)");
  if (k.count("length")) {
    const YAML::Node l = k.at("length");
    if (ctx.suite)
      fail_at(yaml_where(source, l), what +
                                         ".length: a suite ranks by each task's mean over its "
                                         "extrapolation lengths; length is for comparisons");
    std::vector<std::string> ls;
    for (int x : ctx.lengths) ls.push_back(std::to_string(x));
    const int64_t L = le.length;
    if (L != 0 && std::find(ctx.lengths.begin(), ctx.lengths.end(), L) == ctx.lengths.end())
      fail_at(yaml_where(source, l), what + ".length: " + std::to_string(L) +
                                         " is not a test length (" + ctx.lengths_key + ": [" +
                                         join(ls, ", ") +
                                         "]); 0 = the mean over the extrapolation lengths");
  }
  if (k.count("statistic")) {
    const YAML::Node st = k.at("statistic");
    if (!ctx.suite)
      fail_at(yaml_where(source, st),
              what +
                  ".statistic is for suites (mean over the tasks or mrr); "
                  "a comparison ranks by its one task");
    if (le.statistic == "mrr" && le.gains())
      fail_at(yaml_where(source, st),
              what + ".statistic: mrr ranks schemes; it needs theirs as a map");
  }
  if (k.count("fails_below") && (!ctx.suite || !le.gains() || !is_percent(le.metric)))
    fail_at(yaml_where(source, k.at("fails_below")),
            what + ".fails_below is for suites with pairs (gains) on exact_match or "
                   "token_accuracy; remove it here");
}

LiteratureEntry read_entry(const YAML::Node& e, size_t i, const std::string& source,
                           const LiteratureContext& ctx) {
  std::string what = "literature[" + std::to_string(i) + "]";
  if (!e.IsMap())
    fail_at(yaml_where(source, e), what + " must be a mapping {paper, setting, figure, theirs, ...}");
  LiteratureEntry le;
  le.where = yaml_where(source, e);
  const std::map<std::string, YAML::Node> k = entry_schema().read(le, e, source, what);
  for (const char* name : {"paper", "setting", "figure"}) {
    if (!k.count(name))
      fail_at(le.where, what + ": " + name + " is missing (required: paper, setting, figure, theirs)");
    const YAML::Node v = k.at(name);
    if (!v.IsScalar() || v.Scalar().find_first_not_of(" \t") == std::string::npos)
      fail_at(yaml_where(source, v), what + "." + name + " must be a non-empty text");
    if (std::string(name) == "paper") what += " (" + le.paper + ")";
  }
  if (!k.count("theirs"))
    fail_at(le.where, what +
                          ": theirs is missing (their figure per scheme, or with pairs "
                          "their one figure)");
  if (k.at("theirs").IsMap())
    read_ranking(le, k, source, what, ctx);
  else
    read_gains(le, k, source, what, ctx);
  if (!k.count("metric")) le.metric = ctx.default_metric;
  check_our_values(le, k, source, what, ctx);
  return le;
}

}  // namespace

std::vector<LiteratureEntry> parse_literature(const YAML::Node& n, const std::string& source,
                                              const LiteratureContext& ctx) {
  if (!n.IsSequence() || n.size() == 0)
    fail_at(yaml_where(source, n),
            "literature must be a non-empty list of entries {paper, setting, figure, theirs, "
            "...} (see docs/config.md, section literature[])");
  std::vector<LiteratureEntry> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(read_entry(n[i], i, source, ctx));
  return out;
}

// ---------------- statistics ----------------

KendallTau kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  PELAB_CHECK(x.size() == y.size(), "kendall_tau_b: ", x.size(), " vs ", y.size(), " values");
  KendallTau k;
  k.n = static_cast<int64_t>(x.size());
  if (k.n < 2) {
    k.undefined = "n = " + std::to_string(k.n) + ": at least 2 schemes in common are needed";
    return k;
  }
  auto sign = [](double a, double b) { return same_value(a, b) ? 0 : (a < b ? -1 : 1); };
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j) {
      const int dx = sign(x[i], x[j]), dy = sign(y[i], y[j]);
      k.ties_x += dx == 0;
      k.ties_y += dy == 0;
      if (dx * dy > 0) ++k.concordant;
      if (dx * dy < 0) ++k.discordant;
    }
  const int64_t n0 = k.n * (k.n - 1) / 2;
  if (k.ties_x == n0 || k.ties_y == n0) {
    k.undefined = "n = " + std::to_string(k.n) + ": " +
                  (k.ties_x == n0 ? "their values all tie" : "our values all tie") +
                  ", so there is no order to compare";
    return k;
  }
  k.tau = static_cast<double>(k.concordant - k.discordant) /
          std::sqrt(static_cast<double>(n0 - k.ties_x) * static_cast<double>(n0 - k.ties_y));
  return k;
}

std::string kendall_text(const KendallTau& k) {
  if (!k.undefined.empty()) return "τ-b undefined (" + k.undefined + ")";
  std::string s = "τ-b = " + tau_number(k.tau) + " (n = " + std::to_string(k.n) + "; " +
                  std::to_string(k.concordant) + " concordant, " + std::to_string(k.discordant) +
                  " discordant pairs";
  if (k.ties_x || k.ties_y)
    s += "; tied pairs: theirs " + std::to_string(k.ties_x) + ", ours " + std::to_string(k.ties_y);
  return s + ")";
}

std::vector<double> literature_ranks(const std::vector<double>& values, bool higher_is_better) {
  return by_tie_groups(values, higher_is_better, [](size_t a, size_t b) {
    return (static_cast<double>(a) + static_cast<double>(b)) / 2.0;
  });
}

std::vector<double> reciprocal_ranks(const std::vector<double>& values, bool higher_is_better) {
  return by_tie_groups(values, higher_is_better, [](size_t a, size_t b) {
    double s = 0;
    for (size_t r = a; r <= b; ++r) s += 1.0 / static_cast<double>(r);
    return s / static_cast<double>(b - a + 1);
  });
}

Stat difference_stat(const std::vector<double>& differences) {
  const double inf = std::numeric_limits<double>::infinity();
  return stat_of_range(differences, -inf, inf);
}

// ---------------- the sections ----------------

LiteratureSection literature_for_report(const std::vector<LiteratureEntry>& entries,
                                        const ReportInput& in) {
  LiteratureSection sec;
  if (entries.empty()) return sec;
  std::ostringstream md, csv;
  csv << kCsvHeader;
  auto scheme_of = [&](const std::string& label) {
    for (const auto& r : in.rows)
      if (r.label() == label) return r.scheme;
    return label;
  };
  auto excluded = [&](const std::string& label) {
    return in.unconverged == "exclude" && !in.cannot_learn.count(scheme_of(label));
  };
  // Each run's value of a row (runs left out by compare.unconverged: exclude removed).
  auto runs_of = [&](const LiteratureEntry& e, const std::string& label) {
    return kept_runs(in.rows, label, e.metric, excluded(label), e.length);
  };
  md << "Our values next to the figures the papers report, for the schemes both have (a "
        "different scale, budget and task form: agreement of the ORDER is the question, not of the "
        "numbers). Every value of ours comes from the runs of this report"
     << (in.seeds.size() > 1 ? " (n = " + std::to_string(in.seeds.size()) +
                                   " seeds: the intervals are wide, and ranks inside each "
                                   "other's interval are not resolved)"
                             : "")
     << ". Data: `literature.csv`.\n\n";
  for (const auto& e : entries) {
    OursKind k;
    k.metric = e.metric;
    k.over = "seeds";
    k.scale = is_percent(e.metric) ? 100.0 : 1.0;
    if (e.gains()) {
      k.describe = "Ours: the difference with − without of " + of_metric_text(e) +
                   ", per seed (the runs of a pair are paired by seed), the mean over the seeds "
                   "and its 95 % t-interval.";
      std::vector<PairGain> pairs;
      for (const auto& [a, b] : e.pairs) {
        PairGain p;
        p.with = a;
        p.without = b;
        std::map<int64_t, RunMean> rb;
        for (const auto& r : runs_of(e, b)) rb[r.seed] = r;
        for (const auto& r : runs_of(e, a)) {
          auto it = rb.find(r.seed);
          if (it == rb.end()) continue;
          p.diff[std::to_string(r.seed)] = k.scale * (r.value - it->second.value);
          p.flagged = p.flagged || r.converged == Converged::no || it->second.converged == Converged::no;
        }
        pairs.push_back(p);
      }
      gains_section(e, pairs, k, md, csv);
      continue;
    }
    k.describe = "Ours: " + of_metric_text(e) +
                 ", the mean over the runs (seeds) and its 95 % t-interval; ranked " +
                 (is_percent(e.metric) ? "higher" : "lower") + " is better.";
    std::vector<OursRow> ours;
    for (const auto& [name, v] : e.theirs) {
      OursRow o;
      o.name = name;
      o.stat = stat_of_run_means(runs_of(e, name), e.metric, false);
      o.flagged = o.stat.n_unconverged > 0;
      o.cannot_learn = in.cannot_learn.count(scheme_of(name)) > 0;
      ours.push_back(o);
    }
    ranking_section(e, ours, k, md, csv);
  }
  sec.markdown = md.str();
  sec.csv = csv.str();
  return sec;
}

namespace {

// The scheme of a row label at a task; whether compare.unconverged: exclude applies to it there.
std::string task_scheme_of(const LiteratureTask& t, const std::string& label) {
  for (const auto& r : t.rows)
    if (r.label() == label) return r.scheme;
  return label;
}
bool task_excluded(const LiteratureTask& t, const std::string& label) {
  return t.exclude_unconverged && !t.cannot_learn.count(task_scheme_of(t, label));
}
// The summary's cell of a row at a task (mean over seeds of each run's extrapolation mean).
Stat task_cell(const LiteratureTask& t, const std::string& label, const std::string& m) {
  return aggregate_runs(t.rows, label, 0, m, task_excluded(t, label));
}

// statistic mrr: each row's mean reciprocal rank over the tasks (and its rank and reciprocal rank
// at each task, for the per-task tables).
std::vector<OursRow> mrr_rows(const LiteratureEntry& e, const std::vector<LiteratureTask>& tasks,
                              const std::string& m,
                              std::map<std::string, std::map<std::string, double>>& rr_task,
                              std::map<std::string, std::map<std::string, double>>& rank_task) {
  std::vector<OursRow> ours;
  std::map<std::string, std::vector<double>> rr;
  std::map<std::string, bool> flagged;
  for (const auto& t : tasks) {
    std::vector<std::string> names;
    std::vector<double> means;
    for (const auto& th : e.theirs) {
      const Stat s = task_cell(t, th.first, m);
      flagged[th.first] = flagged[th.first] || s.n_unconverged > 0;
      if (s.n == 0 || !std::isfinite(s.mean)) continue;
      names.push_back(th.first);
      means.push_back(s.mean);
    }
    const std::vector<double> r = reciprocal_ranks(means, is_percent(m));
    const std::vector<double> rank = literature_ranks(means, is_percent(m));
    for (size_t i = 0; i < names.size(); ++i) {
      rr[names[i]].push_back(r[i]);
      rr_task[names[i]][t.name] = r[i];
      rank_task[names[i]][t.name] = rank[i];
    }
  }
  for (const auto& th : e.theirs) {
    OursRow o;
    o.name = th.first;
    o.stat = stat_of_range(rr[th.first], 0.0, 1.0);
    o.flagged = flagged[th.first];
    for (const auto& t : tasks) o.cannot_learn = o.cannot_learn || t.cannot_learn.count(task_scheme_of(t, th.first));
    ours.push_back(o);
  }
  return ours;
}

// statistic mean: each row's per-seed mean over the tasks, then the mean over the seeds.
std::vector<OursRow> seed_mean_rows(const LiteratureEntry& e,
                                    const std::vector<LiteratureTask>& tasks, const std::string& m) {
  std::vector<OursRow> ours;
  for (const auto& th : e.theirs) {
    OursRow o;
    o.name = th.first;
    // seed -> (sum over tasks, tasks, converged)
    std::map<int64_t, std::pair<double, size_t>> acc;
    std::map<int64_t, Converged> conv;
    for (const auto& t : tasks) {
      o.cannot_learn = o.cannot_learn || t.cannot_learn.count(task_scheme_of(t, th.first));
      for (const auto& r : kept_runs(t.rows, th.first, m, task_excluded(t, th.first))) {
        acc[r.seed].first += r.value;
        ++acc[r.seed].second;
        Converged& c = conv.emplace(r.seed, Converged::no_criterion).first->second;
        if (r.converged == Converged::no ||
            (r.converged == Converged::yes && c == Converged::no_criterion))
          c = r.converged;
      }
    }
    std::vector<RunMean> runs;
    for (const auto& [seed, a] : acc)
      if (a.second == tasks.size())
        runs.push_back({seed, a.first / static_cast<double>(a.second), conv[seed]});
    o.stat = stat_of_run_means(runs, m, false);
    o.flagged = o.stat.n_unconverged > 0;
    ours.push_back(o);
  }
  return ours;
}

}  // namespace

LiteratureSection literature_for_suite(const std::vector<LiteratureEntry>& entries,
                                       const std::vector<LiteratureTask>& tasks,
                                       const std::string& metric, int64_t n_seeds) {
  LiteratureSection sec;
  if (entries.empty()) return sec;
  std::ostringstream md, csv;
  csv << kCsvHeader;
  const auto& cell = task_cell;
  const auto& excluded = task_excluded;
  md << "Our values next to the figures the papers report, for the schemes both have (a "
        "different scale, budget and task form: agreement of the ORDER is the question, not of the "
        "numbers), from the summary's cells: each run's mean over a task's extrapolation lengths"
     << (n_seeds > 1 ? " (n = " + std::to_string(n_seeds) +
                           " seeds per cell: intervals are wide, ranks inside each other's "
                           "interval are not resolved)"
                     : "")
     << ". Data: `literature.csv`.\n\n";
  for (const auto& e : entries) {
    const std::string m = e.metric.empty() ? metric : e.metric;
    OursKind k;
    k.metric = m;
    k.scale = is_percent(m) ? 100.0 : 1.0;
    if (e.gains()) {
      k.over = "tasks";
      k.describe = "Ours: per task, the difference with − without of the summary's cells (" +
                   metric_words(m) +
                   " over the task's extrapolation lengths, mean over seeds); the mean over the "
                   "tasks and its 95 % t-interval.";
      std::vector<PairGain> pairs;
      for (const auto& [a, b] : e.pairs) {
        PairGain p;
        p.with = a;
        p.without = b;
        for (const auto& t : tasks) {
          const Stat sa = cell(t, a, m), sb = cell(t, b, m);
          if (sa.n == 0 || sb.n == 0) continue;
          p.diff[t.name] = k.scale * (sa.mean - sb.mean);
          p.flagged = p.flagged || sa.n_unconverged > 0 || sb.n_unconverged > 0;
        }
        pairs.push_back(p);
      }
      gains_section(e, pairs, k, md, csv);
      per_task_gains_section(e, tasks, m, k, excluded, md, csv);
      continue;
    }
    std::vector<OursRow> ours;
    std::map<std::string, std::map<std::string, double>> rr_task;    // name -> task -> 1/rank
    std::map<std::string, std::map<std::string, double>> rank_task;  // name -> task -> rank
    if (e.statistic == "mrr") {
      k.metric = "mrr";
      k.over = "tasks";
      k.describe =
          "Ours: the mean reciprocal rank over the tasks: at each task the schemes of this table "
          "are ranked by their summary cells (" +
          metric_words(m) +
          " over the extrapolation lengths, mean over seeds; tied cells share the mean of the "
          "reciprocal ranks they span), then the mean over the tasks and its 95 % t-interval "
          "(clipped to [0, 1]); ranked higher is better.";
      ours = mrr_rows(e, tasks, m, rr_task, rank_task);
    } else {
      k.over = "seeds";
      k.describe = "Ours: " + metric_words(m) +
                   " averaged over each task's extrapolation lengths, then over the tasks, per "
                   "seed (the summary's `average` column when every cell has every seed); the "
                   "mean over the seeds and its 95 % t-interval; ranked " +
                   (is_percent(m) ? "higher" : "lower") + " is better.";
      ours = seed_mean_rows(e, tasks, m);
    }
    ranking_section(e, ours, k, md, csv);
    if (e.statistic == "mrr") {
      per_task_ranks_section(e, tasks, rank_task, md, csv);
      resolved_pairs_section(e, rr_task, md, csv);
    }
  }
  sec.markdown = md.str();
  sec.csv = csv.str();
  return sec;
}

}  // namespace pelab
