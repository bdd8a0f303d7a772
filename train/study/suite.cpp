// pelab — benchmark suites: tasks × schemes × seeds and the summary table (train/study/suite.h).
#include "train/study/suite.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "data/tasks.h"
#include "pelab/clock.h"
#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config_schema.h"
#include "train/study/config_block.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

bool higher_is_better(const std::string& metric) {
  return metric == "exact_match" || metric == "token_accuracy";
}

std::string metric_words(const std::string& metric) {
  if (metric == "exact_match") return "exact match (%)";
  if (metric == "token_accuracy") return "token accuracy (%)";
  return metric;
}

std::string lengths_text(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

}  // namespace

bool is_suite_config_text(const std::string& yaml) {
  std::string rest, block;
  split_config_block(yaml, "suite", rest, block);
  return block.find_first_not_of(" \t\r\n") != std::string::npos;
}

bool is_suite_config(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  return is_suite_config_text(read_text_file(path));
}

namespace {

// suite.tasks[i]: a task name or {name, set, cannot_learn}, loaded as its comparison (the config
// without the suite and literature blocks, `rest`, with the task's settings) and checked.
SuiteTask read_suite_task(const YAML::Node& e, size_t i, const SuiteSpec& spec,
                          std::set<std::string>& names, const YAML::Node& rest,
                          const std::string& rest_text, const std::vector<std::string>& overrides) {
  const std::string& source = spec.source;
  std::optional<YAML::Node> cannot;  // the entry's cannot_learn: {SCHEME: "why", ...}
  SuiteTask t;
  t.where = yaml_where(source, e);
  const std::string what = "suite.tasks[" + std::to_string(i) + "]";
  if (e.IsScalar()) {
    t.name = e.Scalar();
  } else if (e.IsMap()) {
    t.name = entry_name(e, {"name", "set", "cannot_learn"}, what, source);
    t.sets = parse_config_set_map(e["set"], source, what);
    if (e["cannot_learn"]) cannot.emplace(e["cannot_learn"]);
  } else {
    fail_at(t.where, what + " must be a task name or {name: N, set: {...}}");
  }
  if (!safe_run_name(t.name))
    fail_at(t.where, what + ": name '" + t.name +
                         "' must be letters, digits, _ - + . (it names a directory)");
  if (!names.insert(t.name).second)
    fail_at(t.where, what + ": task '" + t.name + "' is listed twice");
  bool has_task_name = false;
  for (const auto& x : t.sets) has_task_name = has_task_name || x.rfind("task.name=", 0) == 0;
  if (!has_task_name) t.sets.insert(t.sets.begin(), "task.name=" + t.name);
  for (const auto& x : t.sets)
    if (x.rfind("compare.out=", 0) == 0)
      fail_at(t.where, what +
                           ": compare.out cannot be set per task (the suite writes "
                           "<suite.out>/" +
                           t.name + ")");
  std::vector<std::string> all = t.sets;
  all.insert(all.end(), overrides.begin(), overrides.end());
  try {
    t.spec = load_compare_node(rest, rest_text, source, all);
    (void)compare_plan(t.spec, (fs::path(spec.out) / t.name).string());  // validates every run
  } catch (const ConfigError& ex) {
    fail_at(t.where, "suite task '" + t.name + "': " + ex.what());
  } catch (const data::DataError& ex) {
    fail_at(t.where, "suite task '" + t.name + "': " + ex.what());
  }
  if (cannot) {
    if (!cannot->IsMap() || cannot->size() == 0)
      fail_at(yaml_where(source, *cannot),
              what + ".cannot_learn must be a map {SCHEME: \"why\", ...} of the schemes that "
                     "cannot learn this task by construction");
    for (auto c = cannot->begin(); c != cannot->end(); ++c) {
      const std::string sn = c->first.Scalar();
      auto s = std::find_if(t.spec.schemes.begin(), t.spec.schemes.end(),
                            [&](const CompareScheme& x) { return x.name == sn; });
      if (s == t.spec.schemes.end()) {
        std::vector<std::string> known;
        for (const auto& x : t.spec.schemes) known.push_back(x.name);
        fail_at(yaml_where(source, c->first), what + ".cannot_learn: '" + sn +
                                                  "' is not a scheme of compare.schemes (" +
                                                  join(known, ", ") + ")");
      }
      if (!c->second.IsScalar() || trim(c->second.Scalar()).empty())
        fail_at(yaml_where(source, c->first),
                what + ".cannot_learn." + sn + ": give the reason as a non-empty string");
      s->cannot_learn = true;
      s->why = c->second.Scalar();  // a YAML scalar: no outer blanks
    }
  }
  const TaskConfig& tc = t.spec.base.task;
  const auto registered = data::task_names();
  if (std::find(registered.begin(), registered.end(), tc.name) == registered.end())
    fail_at(t.where, "suite task '" + t.name + "': task.name " + tc.name +
                         " is not a synthetic task; a suite runs the tasks of docs/tasks.md "
                         "and the built-in synthetic tasks");
  bool longer = false;
  for (int L : tc.test_lengths) {
    if (L < tc.train_min_len)
      fail_at(t.where, "suite task '" + t.name + "': task.test_lengths has " + std::to_string(L) +
                           ", shorter than task.train_min_len " +
                           std::to_string(tc.train_min_len) +
                           "; the summary averages the lengths outside the training range, "
                           "which must be the longer ones (use lengths >= " +
                           std::to_string(tc.train_min_len) + ")");
    longer = longer || L > tc.train_max_len;
  }
  if (!longer)
    fail_at(t.where, "suite task '" + t.name +
                         "': no test length is longer than "
                         "task.train_max_len " +
                         std::to_string(tc.train_max_len) + " (task.test_lengths: [" +
                         lengths_text(tc.test_lengths) +
                         "]); the summary needs extrapolation lengths");
  if (spec.metric == "exact_match" && tc.name == "lm")
    fail_at(t.where, "suite.metric exact_match: task lm has none");
  t.spec.out = (fs::path(spec.out) / t.name).string();
  t.spec.title = spec.title + ": " + t.name;
  // Not a file: the child processes (--jobs) then load <out>/<task>/compare.yaml, the config
  // without the suite block, with the task's settings as --set overrides (t.spec.overrides).
  t.spec.source = source + " [suite task " + t.name + "]";
  return t;
}

// The suite section's keys, read like the run config's (train/config_schema.h).
struct SuiteHead {
  std::string title, out, metric = "exact_match";
  YAML::Node tasks;
};

const SectionSchema<SuiteHead>& suite_schema() {
  static const SectionSchema<SuiteHead> schema = [] {
    SectionSchema<SuiteHead> s("suite");
    s.key("title", &SuiteHead::title, "", "the summary's title (default \"pelab suite: <stem>\")");
    s.key("out", &SuiteHead::out, "",
          "the suite's directory, one comparison per task under it (default reports/<stem>)");
    s.key("metric", &SuiteHead::metric, "exact_match|token_accuracy|perplexity|loss",
          "the summary's metric");
    s.structured("tasks", ConfigType::StringList,
                 "Required. The tasks: a task name or {name, set: {section.key: value}, "
                 "cannot_learn: {SCHEME: \"why\"}}; each is a comparison of the config's "
                 "compare section",
                 [](SuiteHead& h, const YAML::Node& n, const config_detail::Ctx&) { h.tasks = n; });
    return s;
  }();
  return schema;
}

}  // namespace

ConfigReferenceSection suite_reference_section() {
  return {"`suite` (suite configs)",
          "A suite config (docs/experiments.md, Suites) is a compare config plus a `suite:` "
          "section: one comparison per task, summarised together. Unknown keys and bad values are "
          "errors naming the file and line.",
          suite_schema().keys()};
}

SuiteSpec load_suite_string(const std::string& yaml, const std::string& source,
                            const std::vector<std::string>& overrides) {
  SuiteSpec spec;
  spec.source = source;
  // Parsed once: an anchor of one section can be used in another.
  const YAML::Node root = parse_config_yaml(yaml, source);
  // The literature section belongs to the summary: the tasks' comparisons do not see it.
  const YAML::Node literature =
      root.IsMap() ? root["literature"] : YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node rest = without_blocks(root, {"suite", "literature"});
  std::string rest_text, suite_block, literature_block;  // what the tasks show as their config
  split_config_block(yaml, "suite", rest_text, suite_block);
  split_config_block(std::string(rest_text), "literature", rest_text, literature_block);
  const YAML::Node s = root.IsMap() ? root["suite"] : YAML::Node();
  if (!s.IsDefined() || !s.IsMap())
    fail_at(source, "suite must be a mapping with suite.tasks (see docs/experiments.md, Suites)");
  SuiteHead head;
  suite_schema().read(head, s, source);
  spec.title = head.title, spec.out = head.out, spec.metric = head.metric;
  const YAML::Node tasks = head.tasks;
  if (!tasks.IsDefined() || !tasks.IsSequence() || tasks.size() == 0)
    fail_at(yaml_where(source, s), "suite.tasks must be a non-empty list of tasks");
  const std::string stem = fs::path(source).stem().string();
  if (spec.out.empty()) spec.out = (fs::path("reports") / (stem.empty() ? "suite" : stem)).string();
  if (spec.title.empty()) spec.title = "pelab suite: " + (stem.empty() ? "suite" : stem);
  // Every override of the command line except compare.out (the suite owns the directories).
  std::set<std::string> names;
  for (size_t i = 0; i < tasks.size(); ++i)
    spec.tasks.push_back(read_suite_task(tasks[i], i, spec, names, rest, rest_text, overrides));
  if (literature.IsDefined()) {
    LiteratureContext ctx;
    ctx.suite = true;
    for (const auto& t : spec.tasks) {
      for (const auto& l : compare_row_labels(t.spec))
        if (std::find(ctx.rows.begin(), ctx.rows.end(), l) == ctx.rows.end()) ctx.rows.push_back(l);
      ctx.lm = ctx.lm || t.spec.base.task.name == "lm";
    }
    ctx.default_metric = spec.metric;
    spec.literature = parse_literature(literature, source, ctx);
  }
  return spec;
}

SuiteSpec load_suite(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(path + ": no such config file");
  return load_suite_string(read_text_file(path), path, overrides);
}

// ---------------- the summary ----------------

namespace {

// The summary's cells, task by task (sum.tasks and sum.labels set): each label's statistic on the
// task, its text and whether it is the task's best. Returns the training wall time summed over
// the runs (each run once).
double add_summary_cells(const SuiteSpec& spec, const std::vector<std::vector<ResultRow>>& rows,
                         std::map<std::string, std::string>& scheme_of, SuiteSummary& sum) {
  const std::string& metric = spec.metric;
  double train_wall = 0;
  std::set<std::string> runs_seen;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    const SuiteTask& task = spec.tasks[t];
    std::set<std::string> cannot;
    for (const auto& s : task.spec.schemes)
      if (s.cannot_learn) cannot.insert(s.name);
    const bool exclude = task.spec.unconverged == "exclude";
    for (const auto& r : rows[t])
      if (r.variant.empty() && std::isfinite(r.train_wall_s) &&
          runs_seen.insert(task.name + "/" + r.scheme + "/" + std::to_string(r.seed)).second)
        train_wall += r.train_wall_s;
    std::vector<SuiteCell> cells;
    double best = std::nan("");
    for (const auto& label : sum.labels) {
      SuiteCell c;
      c.task = task.name;
      c.label = label;
      c.stat = aggregate_runs(rows[t], label, 0, metric, exclude);
      c.text = format_cell(c.stat, metric, static_cast<int64_t>(task.spec.seeds.size()));
      if (cannot.count(scheme_of[label])) c.text += " ‡";
      const double m = c.stat.mean;
      if (c.stat.n > 0 && std::isfinite(m) &&
          (!std::isfinite(best) || (higher_is_better(metric) ? m > best : m < best)))
        best = m;
      cells.push_back(c);
    }
    for (auto& c : cells) {
      c.best = c.stat.n > 0 && std::isfinite(best) && std::fabs(c.stat.mean - best) <= 1e-12;
      sum.cells.push_back(c);
    }
  }
  return train_wall;
}

// The suite's "Against the literature" section, over every task's rows.
LiteratureSection suite_literature(const SuiteSpec& spec,
                                   const std::vector<std::vector<ResultRow>>& rows) {
  std::vector<LiteratureTask> lt;
  int64_t n_seeds = 0;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    LiteratureTask x;
    x.name = spec.tasks[t].name;
    x.rows = rows[t];
    x.exclude_unconverged = spec.tasks[t].spec.unconverged == "exclude";
    for (const auto& sc : spec.tasks[t].spec.schemes)
      if (sc.cannot_learn) x.cannot_learn.insert(sc.name);
    n_seeds = std::max<int64_t>(n_seeds, static_cast<int64_t>(spec.tasks[t].spec.seeds.size()));
    lt.push_back(std::move(x));
  }
  return literature_for_suite(spec.literature, lt, spec.metric, n_seeds);
}

}  // namespace

SuiteSummary suite_summary(const SuiteSpec& spec, const std::vector<std::vector<ResultRow>>& rows,
                           const std::vector<std::string>& report_paths, double wall_s,
                           const std::string& command) {
  PELAB_CHECK(rows.size() == spec.tasks.size() && report_paths.size() == spec.tasks.size(),
              "suite_summary: one result per task needed");
  SuiteSummary sum;
  const std::string& metric = spec.metric;
  std::map<std::string, std::string> scheme_of;  // label -> scheme
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    sum.tasks.push_back(spec.tasks[t].name);
    for (const auto& r : rows[t])
      if (scheme_of.emplace(r.label(), r.scheme).second) sum.labels.push_back(r.label());
  }
  const double train_wall = add_summary_cells(spec, rows, scheme_of, sum);
  auto cell = [&](size_t t, size_t l) -> const SuiteCell& {
    return sum.cells[t * sum.labels.size() + l];
  };
  const double k = higher_is_better(metric) ? 100.0 : 1.0;
  // Markdown.
  std::ostringstream md;
  md << "# " << md_text(spec.title) << "\n\n";
  md << "Each cell: " << metric_words(metric)
     << " averaged over the task's extrapolation lengths (its test lengths longer than "
        "task.train_max_len; each run's mean over those lengths), then the mean over seeds with "
        "the 95 % Student-t interval [low, high] (clipped to the metric's range; (n = k) where "
        "fewer runs than seeds have every length). † a run in the cell missed its stop criterion "
        "(train.stop_when); ‡ the scheme is declared unable to learn the task by construction "
        "(the scheme's `expect: cannot_learn`, or the task entry's `cannot_learn:`; the reasons "
        "are listed under the table). **Bold**: the best mean of the task (ties all bold). "
        "`average`: the mean of the row's cells over the tasks (– when a cell is missing). "
        "Per-task reports (every length, convergence, training curves) are linked below.\n\n";
  md << "| scheme |";
  for (const auto& t : sum.tasks) md << " " << md_text(t) << " |";
  md << " average |\n|---|";
  for (size_t t = 0; t < sum.tasks.size(); ++t) md << "---|";
  md << "---|\n";
  std::ostringstream csv;
  csv << "task,series,mean,ci_low,ci_high,n,n_converged,n_unconverged,best,cell\n";
  for (size_t l = 0; l < sum.labels.size(); ++l) {
    md << "| " << md_text(sum.labels[l]) << " |";
    double avg = 0;
    bool all = true;
    for (size_t t = 0; t < sum.tasks.size(); ++t) {
      const SuiteCell& c = cell(t, l);
      md << " " << (c.best ? "**" + c.text + "**" : c.text) << " |";
      if (c.stat.n > 0 && std::isfinite(c.stat.mean))
        avg += c.stat.mean;
      else
        all = false;
    }
    char avg_text[64] = "–";
    if (all && !sum.tasks.empty())
      std::snprintf(avg_text, sizeof avg_text, k == 100.0 ? "%.1f" : "%.4g",
                    k * avg / static_cast<double>(sum.tasks.size()));
    md << " " << avg_text << " |\n";
  }
  // The reasons behind every ‡, as the config gives them (one line per task and scheme).
  std::string reasons;
  for (const auto& task : spec.tasks)
    for (const auto& sc : task.spec.schemes)
      if (sc.cannot_learn)
        reasons += "- " + md_text(sc.name) + " on " + md_text(task.name) + ": " + md_text(sc.why) + "\n";
  if (!reasons.empty()) md << "\n‡ Declared unable to learn the task:\n\n" << reasons;
  for (const auto& c : sum.cells) {
    std::string text = c.text;
    for (auto& ch : text)
      if (ch == ',' || ch == '"') ch = ';';
    csv << csv_field(c.task) << "," << csv_field(c.label) << "," << format_double(c.stat.mean) << ","
        << format_double(c.stat.ci_low) << "," << format_double(c.stat.ci_high) << ","
        << c.stat.n << "," << c.stat.n_converged << "," << c.stat.n_unconverged << ","
        << (c.best ? "true" : "false") << ",\"" << csv_field(text) << "\"\n";  // (no , or ")
  }
  if (!spec.literature.empty()) {
    const LiteratureSection lit = suite_literature(spec, rows);
    md << "\n## Against the literature\n\n" << lit.markdown;
    sum.literature_csv = lit.csv;
  }
  md << "\n## Tasks\n\n| task | settings | training lengths | extrapolation lengths | report |\n"
        "|---|---|---|---|---|\n";
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    const SuiteTask& task = spec.tasks[t];
    const TaskConfig& tc = task.spec.base.task;
    std::vector<int> extra;
    for (int L : tc.test_lengths)
      if (L > tc.train_max_len) extra.push_back(L);
    std::vector<std::string> sets;
    for (const auto& x : task.sets) sets.push_back(md_code(x));
    md << "| " << md_text(task.name) << " | " << join(sets, ", ") << " | " << tc.train_min_len
       << "–" << tc.train_max_len << " | " << lengths_text(extra) << " | "
       << md_text(report_paths[t]) << " |\n";
  }
  md << "\n## Timing\n\nThis command: " << format_double(wall_s, 4)
     << " s wall. Training wall time summed over the runs (as recorded by each run, reused "
        "ones included): "
     << format_double(train_wall, 4) << " s.\n\n## Command\n\n" << md_fence(command, "");
  sum.markdown = md.str();
  sum.csv = csv.str();
  return sum;
}

namespace {

// summary.{dat,gp,png}: clustered bars (one group per task, one bar per scheme) with the
// intervals. Returns the PNG path, "" when gnuplot is missing or failed (reason in *why).
std::string write_summary_plot(const std::string& dir, const SuiteSpec& spec,
                               const SuiteSummary& s, std::string* why) {
  const double k = higher_is_better(spec.metric) ? 100.0 : 1.0;
  std::ostringstream dat;
  dat << "# task";
  for (const auto& l : s.labels) dat << "  " << l << ":mean low high";
  dat << "\n";
  for (size_t t = 0; t < s.tasks.size(); ++t) {
    dat << s.tasks[t];
    for (size_t l = 0; l < s.labels.size(); ++l) {
      const Stat& st = s.cells[t * s.labels.size() + l].stat;
      if (st.n == 0 || !std::isfinite(st.mean)) {
        dat << " ? ? ?";
        continue;
      }
      const double lo = std::isfinite(st.ci_low) ? st.ci_low : st.mean;
      const double hi = std::isfinite(st.ci_high) ? st.ci_high : st.mean;
      dat << " " << format_double(k * st.mean) << " " << format_double(k * lo) << " "
          << format_double(k * hi);
    }
    dat << "\n";
  }
  write_text_file(dir + "/summary.dat", dat.str());
  const std::string term = gnuplot_png_terminal();
  if (term.empty()) {
    *why = "gnuplot is not installed";
    return "";
  }
  std::string gp = "set terminal " + term + " size " +
                   std::to_string(std::max<size_t>(900, 120 * s.tasks.size() + 300)) +
                   ",650 noenhanced\n";
  gp += "set title " + gnuplot_quote(spec.title + ": " + metric_words(spec.metric) +
                                     " over the extrapolation lengths, mean and 95 % t-interval") +
        "\n";
  gp += "set datafile missing '?'\nset style data histogram\n"
        "set style histogram errorbars gap 1 lw 1\nset style fill solid 0.7 border -1\n"
        "set key outside right top\nset grid ytics\nset xtics rotate by -30\n";
  gp += "set ylabel " + gnuplot_quote(metric_words(spec.metric)) + "\n";
  if (k == 100.0) gp += "set yrange [0:105]\n";
  gp += "plot ";
  for (size_t l = 0; l < s.labels.size(); ++l) {
    const size_t c = 2 + 3 * l;
    gp += (l ? ", '' using " : gnuplot_quote("summary.dat") + " using ") + std::to_string(c) + ":" +
          std::to_string(c + 1) + ":" + std::to_string(c + 2) + (l ? "" : ":xtic(1)") +
          " title " + gnuplot_quote(s.labels[l]);
  }
  gp += "\n";
  if (!run_gnuplot(dir + "/summary.png", gp, why)) return "";
  return dir + "/summary.png";
}

}  // namespace

SuiteResult run_suite(const SuiteSpec& spec, const CompareOptions& opt,
                      const std::vector<std::string>& tasks) {
  std::ostream& log = opt.log ? *opt.log : std::cerr;
  std::vector<size_t> selected;
  for (const auto& name : tasks) {
    size_t i = 0;
    while (i < spec.tasks.size() && spec.tasks[i].name != name) ++i;
    if (i == spec.tasks.size()) {
      std::vector<std::string> all;
      for (const auto& t : spec.tasks) all.push_back(t.name);
      throw ConfigError("--task: '" + name + "' is not a task of " + spec.source + " (tasks: " +
                        join(all, ", ") + ")");
    }
    if (std::find(selected.begin(), selected.end(), i) == selected.end()) selected.push_back(i);
  }
  if (tasks.empty())
    for (size_t i = 0; i < spec.tasks.size(); ++i) selected.push_back(i);
  PELAB_CHECK(opt.only.empty() || selected.size() == 1,
              "compare: --only with a suite needs exactly one --task (run indexes are per task; "
              "see --plan)");
  const std::string out = opt.out.empty() ? spec.out : opt.out;
  const double t0 = now_s();
  SuiteResult res;
  // Before any task creates its folder: neither the suite's folder nor a task's may lie in a
  // merged folder.
  res.refused = merge_out_problems(opt.merge, out);
  for (size_t k = 0; k < selected.size() && res.refused.empty(); ++k)
    res.refused = merge_out_problems(opt.merge, (fs::path(out) / spec.tasks[selected[k]].name).string());
  if (!res.refused.empty()) return res;
  for (size_t n = 0; n < selected.size(); ++n) {
    const SuiteTask& task = spec.tasks[selected[n]];
    CompareOptions o = opt;
    o.out = (fs::path(out) / task.name).string();
    o.merge_sub = task.name;  // --merge: each slice's task folder
    if (opt.only.empty())
      log << "pelab suite: task " << n + 1 << "/" << selected.size() << " " << task.name << " -> "
          << o.out << "\n" << std::flush;
    res.results.push_back(run_compare(task.spec, o));
    for (const auto& m : res.results.back().missing) res.missing.push_back(task.name + ": " + m);
    for (const auto& m : res.results.back().refused) res.refused.push_back(m);
    if (res.results.back().interrupted) {
      res.interrupted = true;
      return res;
    }
  }
  if (!opt.only.empty()) return res;
  if (!res.refused.empty()) return res;
  if (selected.size() != spec.tasks.size()) {
    log << "pelab suite: summary not written (--task ran " << selected.size() << " of "
        << spec.tasks.size() << " tasks; `--report-only` without --task writes it)\n";
    return res;
  }
  std::vector<std::vector<ResultRow>> rows;
  std::vector<std::string> reports;
  for (const auto& r : res.results) {
    rows.push_back(r.rows);
    reports.push_back(fs::relative(r.report.report_md, out).string());
  }
  const SuiteSummary s = suite_summary(spec, rows, reports, now_s() - t0, opt.command);
  std::error_code ec;
  fs::create_directories(out, ec);
  PELAB_CHECK(!ec, "suite: cannot create ", out, ": ", ec.message());
  res.summary_md = (fs::path(out) / "summary.md").string();
  res.summary_csv = (fs::path(out) / "summary.csv").string();
  std::string why;
  if (opt.plots) res.summary_png = write_summary_plot(out, spec, s, &why);
  std::string md = s.markdown;
  if (!res.missing.empty()) {
    // Say so where a reader of the summary looks first: cells and the literature section then
    // cover the finished runs only.
    std::map<std::string, int> per_task;  // "task: run" -> count per task, in task order
    std::vector<std::string> order;
    for (const auto& m : res.missing) {
      const std::string t = m.substr(0, m.find(':'));
      if (per_task[t]++ == 0) order.push_back(t);
    }
    int64_t planned = 0;
    for (const auto& t : spec.tasks)
      planned += static_cast<int64_t>(t.spec.schemes.size() * t.spec.seeds.size());
    std::vector<std::string> parts;
    for (const auto& t : order) parts.push_back(t + " " + std::to_string(per_task[t]));
    const std::string note =
        "**Partial: " + std::to_string(res.missing.size()) + " of " + std::to_string(planned) +
        " runs are not finished** (per task: " + join(parts, ", ") +
        "). Every cell, average and literature figure below covers the finished runs only; a "
        "cell with fewer runs than seeds shows (n = k), one with none –.\n\n";
    const size_t title_end = md.find("\n\n");
    md.insert(title_end == std::string::npos ? 0 : title_end + 2, note);
  }
  if (!res.summary_png.empty())
    md += "\n![summary](summary.png)\n";
  else if (opt.plots)
    md += "\n(no plot: " + why + ")\n";
  write_text_file(res.summary_csv, s.csv);
  const std::string literature_csv = (fs::path(out) / "literature.csv").string();
  if (!s.literature_csv.empty()) {
    write_text_file(literature_csv, s.literature_csv);
  } else if (fs::exists(literature_csv, ec)) {
    fs::remove(literature_csv, ec);  // from an earlier config with a literature section
    PELAB_CHECK(!ec, "suite: cannot remove the stale ", literature_csv, ": ", ec.message());
  }
  write_text_file(res.summary_md, md);
  log << "pelab suite: summary " << res.summary_md << "\n";
  return res;
}

int suite_cli(const std::string& path, const std::vector<std::string>& sets, CompareOptions opt,
              bool plan_only, const std::string& tasks, std::ostream& out, std::ostream& err) {
  const SuiteSpec spec = load_suite(path, sets);
  std::vector<std::string> names;
  {
    std::istringstream in(tasks);
    std::string x;
    while (std::getline(in, x, ','))
      if (!x.empty()) names.push_back(x);
  }
  const std::string dir = opt.out.empty() ? spec.out : opt.out;
  if (plan_only) {
    for (const auto& t : spec.tasks) {
      if (!names.empty() && std::find(names.begin(), names.end(), t.name) == names.end()) continue;
      out << "== task " << t.name << " (pelab compare " << path << " --task " << t.name
          << " --only I trains its run I)\n"
          << compare_plan_text(t.spec, (fs::path(dir) / t.name).string());
    }
    return 0;
  }
  opt.log = &err;
  const SuiteResult r = run_suite(spec, opt, names);
  if (r.interrupted) return 130;
  if (!opt.only.empty()) return 0;
  if (!r.refused.empty()) {
    for (const auto& line : r.refused) err << "pelab: error: compare --merge: " << line << "\n";
    err << "pelab: error: compare --merge: " << r.refused.size()
        << (r.refused.size() == 1 ? " record" : " records") << " refused; no summary written\n";
    return 1;
  }
  if (!r.summary_md.empty()) out << "summary: " << r.summary_md << "\n";
  if (!r.missing.empty()) {
    err << "pelab: error: compare " << (opt.merge.empty() ? "--report-only" : "--merge") << ": "
        << r.missing.size() << " runs are not finished (" << join(r.missing, ", ")
        << "); train them with pelab compare " << path
        << (opt.merge.empty() ? "" : " --task TASK --only I --out DIR and merge again") << "\n";
    return 1;
  }
  for (size_t i = 0; i < r.results.size(); ++i) {
    const SuiteTask* t = nullptr;
    for (const auto& x : spec.tasks)
      if (fs::path(r.results[i].out_dir).filename() == x.name) t = &x;
    if (t && t->spec.unconverged == "fail" && !r.results[i].unconverged.empty()) {
      err << "pelab: error: compare: task " << t->name << ": runs missed the stop criterion "
          << "(compare.unconverged: fail): " << join(r.results[i].unconverged, ", ") << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace pelab
