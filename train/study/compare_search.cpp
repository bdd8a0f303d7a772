// pelab — compare.search (compare.h): each scheme's candidate chosen on the validation split only,
// by its mean score over seeds, then by the runs that met the stop criterion and their steps, and
// the report's section on the search.
#include "train/study/compare.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/study/compare_internal.h"
#include "train/trainer.h"

namespace pelab {
using namespace compare_detail;

namespace compare_detail {

std::string sets_text(const std::vector<std::string>& sets) {
  std::string s;
  for (const auto& x : sets) s += (s.empty() ? "" : ", ") + md_code(x);
  return s;
}

// compare.search: chooses each scheme's candidate on the validation split only (res.chosen; in
// chosen_run the runs of the candidates not chosen are false) and returns the report's section on
// the search ("" without a search).
std::string choose_candidates(const CompareSpec& spec, const std::vector<ComparePlanRun>& plan,
                              const std::vector<SearchCandidate>& candidates,
                              const std::vector<bool>& finished, std::ostream& log,
                              CompareResult& res, std::vector<bool>& chosen_run) {
  const size_t N = plan.size();
  const Config& b = spec.base;
  std::string search_md;
  if (!spec.search.empty()) {
    const std::string vm = is_lm(b) ? "loss" : "exact_match";
    const bool higher = higher_is_better(vm);
    std::ostringstream md;
    md << "Each scheme was trained with every candidate of `compare.search` and every seed; a "
          "candidate's score is the mean over seeds of **"
       << vm
       << "** on the in-distribution validation split (`valid` of each run's final eval.json). "
          "The test lengths were not looked at: only the chosen candidate's runs were evaluated "
          "on them, and they are the scheme's rows above. Equal scores: the candidate with more "
          "runs that met the stop criterion (train.stop_when), then fewer steps to it, then the "
          "one listed first.\n\n";
    std::vector<ResultRow> vrows;  // one per candidate × seed: the valid score, for aggregate()
    std::ostringstream table;
    bool any_criterion = false;  // some run trains to a criterion: the table gets its column
    for (const auto& run : plan)
      any_criterion = any_criterion || !run.cfg.train.stop_when.metric.empty();
    // Candidate c beats b: a better mean score; equal scores: more runs that met the stop
    // criterion, then fewer steps to it (mean); else b, listed first, stays.
    auto better = [&](size_t c, size_t b, const std::vector<Stat>& st,
                      const std::vector<int64_t>& met, const std::vector<int64_t>& steps) {
      if (st[c].mean != st[b].mean)
        return higher ? st[c].mean > st[b].mean : st[c].mean < st[b].mean;
      if (met[c] != met[b]) return met[c] > met[b];
      return met[c] > 0 && static_cast<double>(steps[c]) / static_cast<double>(met[c]) <
                               static_cast<double>(steps[b]) / static_cast<double>(met[b]);
    };
    for (const auto& s : spec.schemes) {
      std::vector<std::string> per_seed(candidates.size());
      std::vector<bool> complete(candidates.size(), true);
      // train.stop_when: runs that met the criterion and the sum of their steps to it.
      std::vector<int64_t> met(candidates.size(), 0), met_steps(candidates.size(), 0);
      for (size_t i = 0; i < N; ++i) {
        const ComparePlanRun& run = plan[i];
        if (run.scheme != s.name) continue;
        ResultRow r;
        r.scheme = s.name + "@" + run.candidate;
        r.seed = run.seed;
        r.split = "valid";
        std::string why;
        const double v = finished[i] ? valid_metric(run_directory(run.cfg), vm, &why)
                                     : std::numeric_limits<double>::quiet_NaN();
        if (!finished[i]) why = "not finished";
        if (!finished[i]) complete[run.candidate_index] = false;
        if (finished[i]) {
          try {
            const Convergence conv = read_convergence(run_directory(run.cfg));
            if (conv.met()) {
              ++met[run.candidate_index];
              met_steps[run.candidate_index] += conv.step;
            }
          } catch (const std::exception&) {
            // no readable record: the run counts as not meeting the criterion
          }
        }
        (vm == "loss" ? r.loss : r.exact_match) = v;
        if (!std::isfinite(v)) r.status = why;
        vrows.push_back(r);
        std::string& ps = per_seed[run.candidate_index];
        ps += (ps.empty() ? "" : ", ") + std::to_string(run.seed) + ": " +
              (std::isfinite(v) ? format_double(vm == "loss" ? v : 100 * v, 4) : why);
      }
      size_t best = candidates.size();
      std::vector<Stat> stats;
      for (size_t c = 0; c < candidates.size(); ++c) {
        stats.push_back(aggregate(vrows, s.name + "@" + candidates[c].label, "valid", vm));
        const Stat& st = stats.back();
        if (!complete[c] || st.n != static_cast<int64_t>(spec.seeds.size()) ||
            !std::isfinite(st.mean))
          continue;
        if (best == candidates.size() || better(c, best, stats, met, met_steps)) best = c;
      }
      for (size_t c = 0; c < candidates.size(); ++c) {
        table << "| " << md_text(s.name) << " | " << md_text(candidates[c].label) << " | "
              << sets_text(candidates[c].sets) << " | " << format_cell(stats[c], vm) << " | "
              << per_seed[c] << " | ";
        if (any_criterion)
          table << met[c] << "/" << spec.seeds.size()
                << (met[c] > 0 ? " (mean step " +
                                     format_double(static_cast<double>(met_steps[c]) /
                                                       static_cast<double>(met[c]),
                                                   4) +
                                     ")"
                               : "")
                << " | ";
        table << (c == best ? "**chosen**" : "") << " |\n";
      }
      if (best < candidates.size()) res.chosen[s.name] = candidates[best].label;
      for (size_t i = 0; i < N; ++i)
        if (plan[i].scheme == s.name) chosen_run[i] = plan[i].candidate_index == best;
    }
    md << "| scheme | candidate | settings | valid " << vm
       << " (over seeds, as in the tables above) | per seed | "
       << (any_criterion ? "met train.stop_when | " : "") << " |\n";
    md << "|---|---|---|---:|---|" << (any_criterion ? "---|" : "") << "---|\n" << table.str();
    search_md = md.str();
    for (const auto& [scheme, label] : res.chosen)
      log << "pelab compare: search: " << scheme << " -> " << label << "\n";
    log << std::flush;
  }
  return search_md;
}

}  // namespace compare_detail

}  // namespace pelab
