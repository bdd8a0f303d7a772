// pelab — `pelab compare CONFIG ...` (compare.h): the command line of a comparison, of a suite
// (suite.h) and of its Slurm scripts (slurm.h), read with the one parser (train/command_line.h).
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include "pelab/strings.h"
#include "train/command_line.h"
#include "train/study/compare.h"
#include "train/study/slurm.h"
#include "train/study/suite.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

const char* kCompareHelp =
    "usage: pelab compare CONFIG [--set section.key=value]... [--out DIR] [--retrain]\n"
    "                     [--jobs N] [--progress auto|bar|lines|none] [--no-plots] [--archive]\n"
    "       pelab compare CONFIG (--plan | --only I[,J...] | --report-only |\n"
    "                     --emit-slurm DIR) [--set ...]\n"
    "                     [--out DIR]\n"
    "       pelab compare CONFIG --merge DIR... --out OUT [--task NAME[,NAME...]]\n"
    "                     [--set ...] [--no-plots] [--archive]\n"
    "\n"
    "Trains every scheme x seed named in CONFIG's compare: section the same way, evaluates each\n"
    "run at every test length (plus eval-time variants such as RoPE pi/ntk/yarn scaling) and\n"
    "writes a report directory: results.csv, report.md (schemes x lengths, mean and 95% "
    "t-interval\n"
    "over seeds, runs that missed their stop criterion marked), PNG plots (gnuplot) and the data\n"
    "behind them. Finished runs are reused and interrupted ones resumed: after Ctrl-C, run the\n"
    "same command again; a finished run whose checkpoints/ is gone is reused from its record\n"
    "(record.json). With compare.unconverged: fail, a run that missed its stop criterion\n"
    "makes the command exit 1 after the report is written. An optional compare.search grid\n"
    "(e.g. {train.lr: [1e-3, 2e-3]}) trains every candidate and keeps, per scheme, the one best\n"
    "on the validation split (never the test lengths). See docs/experiments.md.\n"
    "\n"
    "options:\n"
    "  --set section.key=value  override a base config key (repeatable); compare.seeds=[1,2],\n"
    "                           compare.out=DIR, compare.title=T, compare.metric=M,\n"
    "                           compare.unconverged=report|exclude|fail, compare.jobs=N also\n"
    "                           work\n"
    "  --out DIR                report directory (default compare.out, else reports/<stem>)\n"
    "  --retrain                train every run afresh (replace existing runs)\n"
    "  --jobs N                 train N runs at once, each in its own process (default\n"
    "                           compare.jobs, else the number of cores); the results equal\n"
    "                           --jobs 1\n"
    "  --plan                   list the runs (index, name, seed, config digest, state); train\n"
    "                           nothing\n"
    "  --only I[,J...]          train and evaluate only these runs (indexes as --plan prints\n"
    "                           them, or ranges A-B: --only 1-40,45) into the same run\n"
    "                           directories; no report\n"
    "  --expect-config DIGEST   with one --only run: train nothing unless its config digest\n"
    "                           (as --plan prints it) is DIGEST (comparisons give it to their\n"
    "                           child processes: a config edited meanwhile trains nothing)\n"
    "  --report-only            write the report from the finished runs; list the missing ones\n"
    "                           and exit 1 if any are missing\n"
    "  --merge DIR...           gather the finished runs of slices of this comparison (or\n"
    "                           suite) run elsewhere, each DIR a slice's --out, into one\n"
    "                           report in --out: each run's record (config, metrics, eval.json,\n"
    "                           evaluations; no weights) is checked and copied, never written\n"
    "                           back. A record of another config or pelab version, or a\n"
    "                           symbolic link in DIR, is refused (one line each, exit 1);\n"
    "                           missing runs are named (exit 1, as --report-only)\n"
    "  --archive                once the report is written, also write OUT/records.tar.xz\n"
    "                           (each task's, for a suite): the finished runs' records in one\n"
    "                           xz-compressed tar file, which --merge, reuse and --report-only\n"
    "                           read in place of runs/ (the published studies keep theirs so)\n"
    "  --emit-slurm DIR         write DIR/array.sbatch (a Slurm job array, task I = --only I),\n"
    "                           DIR/report.sbatch (--report-only after the array) and\n"
    "                           DIR/submit.sh; resources from compare.slurm (--set\n"
    "                           compare.slurm.time=2:00:00 etc.); trains nothing\n"
    "  --progress MODE          per-run progress: auto (bar on a terminal), bar, lines or none\n"
    "                           (with --jobs: auto/bar redraw a line per running run, lines and\n"
    "                           none print a line when a run starts and ends)\n"
    "  --no-plots               do not call gnuplot\n"
    "  --task NAME[,NAME...]    suite configs (a suite: section, docs/experiments.md \"Suites\"):\n"
    "                           run only these tasks (--only needs exactly one)\n"
    "  -h, --help               show this help\n";

const CommandSpec kCompareSpec{"compare",
                               {"--out", "--task", "--emit-slurm", "--jobs", "--only", "--progress",
                                "--expect-config"},
                               {"--retrain", "--no-plots", "--plan", "--report-only", "--merge",
                                "--archive"},
                               true};

// --only I[,J...] (each item an index or a range A-B, A <= B): 0-based indexes, each once, in the
// order given.
std::vector<size_t> only_option(const CommandLine& c) {
  const std::string v = c.value("--only");
  const UsageError bad = c.error(
      "--only expects run indexes I[,J...] or ranges A-B (1-based, as --plan prints them), got '" +
      v + "'");
  std::vector<size_t> only;
  std::set<size_t> seen;
  std::string item;
  std::istringstream parts(v);
  while (std::getline(parts, item, ',')) {
    const size_t dash = item.find('-');
    int64_t a = 0, b = 0;
    if (dash == std::string::npos) {
      if (!parse_whole_number(trim(item), a)) throw bad;
      b = a;
    } else if (!parse_whole_number(trim(item.substr(0, dash)), a) ||
               !parse_whole_number(trim(item.substr(dash + 1)), b) || b < a ||
               b - a > 1000000) {
      throw bad;
    }
    if (a < 1) throw bad;
    for (int64_t k = a; k <= b; ++k)
      if (seen.insert(static_cast<size_t>(k - 1)).second)
        only.push_back(static_cast<size_t>(k - 1));
  }
  if (only.empty() || v.back() == ',') throw bad;
  return only;
}

int compare_command(const std::vector<std::string>& a, std::ostream& out, std::ostream& err);

}  // namespace

int compare_cli(const std::vector<std::string>& a, std::ostream& out, std::ostream& err) {
  try {
    return compare_command(a, out, err);
  } catch (const UsageError& e) {
    return report_usage_error(err, e);
  }
}

namespace {

// The command line of a comparison: its options, checked against each other.
struct CompareCall {
  CompareOptions opt;
  bool plan_only = false;
  std::string suite_tasks;  // --task NAME[,NAME...] (suite configs)
  std::string emit_dir;     // --emit-slurm DIR
  std::string progress;     // --progress as given (for the Slurm scripts)
};

CompareCall compare_call(const CommandLine& args, const std::vector<std::string>& a) {
  CompareCall c;
  CompareOptions& opt = c.opt;
  opt.command = "pelab";
  for (const auto& x : a) opt.command += " " + shell_word(x);
  opt.out = args.value("--out");
  opt.retrain = args.has("--retrain");
  opt.plots = !args.has("--no-plots");
  opt.report_only = args.has("--report-only");
  c.plan_only = args.has("--plan");
  c.suite_tasks = args.value("--task");
  c.emit_dir = args.value("--emit-slurm");
  if (args.has("--emit-slurm") && c.emit_dir.empty())
    throw args.error("--emit-slurm needs a directory");
  opt.jobs = args.integer("--jobs", 1, opt.jobs, "runs trained at once");
  if (args.has("--only")) opt.only = only_option(args);
  opt.expect_config = args.value("--expect-config");
  if (args.has("--expect-config") && opt.only.size() != 1)
    throw args.error("--expect-config needs exactly one --only run");
  opt.progress = args.progress();
  c.progress = args.value("--progress");
  // --merge DIR...: the folders follow CONFIG.
  if (args.has("--merge")) {
    if (args.positional.size() < 2)
      throw args.error("--merge needs at least one folder: --merge DIR...");
    if (c.plan_only || opt.report_only || !opt.only.empty() || !c.emit_dir.empty() || opt.retrain)
      throw args.error(
          "--merge excludes --plan, --only, --report-only, --emit-slurm and --retrain");
    for (size_t i = 1; i < args.positional.size(); ++i) {
      const std::string& d = args.positional[i];
      std::error_code ec;
      if (!fs::is_directory(d, ec))
        throw args.error("--merge " + d + ": no such folder (give the --out folder of each slice)");
      opt.merge.push_back(d);
    }
  } else {
    args.expect_positional(1, "CONFIG");
  }
  if (c.plan_only + opt.report_only + !opt.only.empty() + !c.emit_dir.empty() > 1)
    throw args.error("--plan, --only, --report-only and --emit-slurm exclude each other");
  opt.archive = args.has("--archive");
  if (opt.archive && (c.plan_only || !opt.only.empty() || !c.emit_dir.empty()))
    throw args.error("--archive writes the records of a report: it excludes --plan, --only and "
                     "--emit-slurm");
  if (!c.emit_dir.empty() && opt.retrain)
    throw args.error("--retrain cannot go into --emit-slurm scripts (a resubmitted array would "
                     "train every run afresh); remove the runs to retrain instead");
  return c;
}

// --emit-slurm DIR: the comparison validated like a real one (the whole plan), then its scripts.
int emit_slurm_command(const CompareSpec& spec, const CompareCall& c, const CommandLine& args,
                       std::ostream& out) {
  const CompareOptions& opt = c.opt;
  const std::vector<ComparePlanRun> plan = compare_plan(spec, opt.out.empty() ? spec.out : opt.out);
  SlurmEmitOptions eo;
  eo.dir = c.emit_dir;
  eo.exe = opt.exe.empty() ? compare_child_binary() : opt.exe;
  std::error_code ec;
  const std::string real = fs::canonical(eo.exe, ec).string();  // /proc/self/exe -> the file
  if (!eo.exe.empty() && !ec) eo.exe = real;
  eo.config = args.positional[0];
  eo.out = opt.out;
  eo.sets = args.sets;
  eo.progress = c.progress;
  eo.plots = opt.plots;
  eo.jobs = opt.jobs;
  SlurmJob job;
  job.source = spec.source;
  job.title = spec.title;
  job.settings = spec.slurm;
  job.jobs = spec.jobs;
  for (const auto& r : plan) job.runs.push_back({r.cfg.train.run_name, r.cfg.train.threads});
  const std::vector<std::string> files = emit_slurm(job, eo);
  out << "compare --emit-slurm: " << plan.size() << (plan.size() == 1 ? " run" : " runs")
      << " as a Slurm job array; wrote";
  for (const auto& f : files) out << " " << f;
  out << "\nsubmit with: sh " << shell_word((fs::path(c.emit_dir) / "submit.sh").string())
      << "\n";
  return 0;
}

// The exit status of a comparison that ran, with its closing lines: 130 interrupted, 1 a refused
// merge, unfinished runs in a report or (compare.unconverged: fail) a missed criterion, else 0.
int compare_outcome(const CompareSpec& spec, const CompareOptions& opt, const CompareResult& r,
                    std::ostream& out, std::ostream& err) {
  if (r.interrupted) return 130;
  if (!r.refused.empty()) {
    for (const auto& line : r.refused) err << "pelab: error: compare --merge: " << line << "\n";
    err << "pelab: error: compare --merge: " << r.refused.size()
        << (r.refused.size() == 1 ? " record" : " records") << " refused; no report written\n";
    return 1;
  }
  if (!opt.only.empty()) return 0;
  out << "report: " << r.report.report_md << "\n";
  if (!r.missing.empty()) {
    std::string names;
    for (const auto& m : r.missing) names += (names.empty() ? "" : ", ") + m;
    err << "pelab: error: compare " << (opt.merge.empty() ? "--report-only" : "--merge") << ": "
        << r.missing.size() << " of "
        << r.missing.size() + static_cast<size_t>(r.trained + r.resumed + r.reused)
        << " runs are not finished (" << names << "); the report covers the others; train them "
        << (opt.merge.empty() ? "with pelab compare CONFIG (or --only)"
                              : "in a slice (pelab compare CONFIG --only I --out DIR) and merge "
                                "again")
        << "\n";
    return 1;
  }
  if (spec.unconverged == "fail" && !r.unconverged.empty()) {
    err << "pelab: error: compare: " << r.unconverged.size()
        << (r.unconverged.size() == 1 ? " run" : " runs")
        << " missed the stop criterion (compare.unconverged: fail):";
    for (size_t i = 0; i < r.unconverged.size(); ++i) err << (i ? ", " : " ") << r.unconverged[i];
    err << " — the report is written (" << r.report.report_md << ")\n";
    return 1;
  }
  return 0;
}

int compare_command(const std::vector<std::string>& a, std::ostream& out, std::ostream& err) {
  const CommandLine args = parse_command_line(kCompareSpec, a);
  if (args.help) {
    out << kCompareHelp;
    return 0;
  }
  CompareCall c = compare_call(args, a);
  const std::string& config = args.positional[0];
  if (is_suite_config(config)) {
    if (!c.emit_dir.empty())
      throw args.error("--emit-slurm does not take suite configs (" + config +
                       " has a suite: section); emit a plain compare config per task");
    return suite_cli(config, args.sets, c.opt, c.plan_only, c.suite_tasks, out, err);
  }
  if (!c.suite_tasks.empty())
    throw args.error("--task selects tasks of a suite config (one with a suite: section); " +
                     config + " has none");
  const CompareSpec spec = load_compare(config, args.sets);
  if (!c.emit_dir.empty()) return emit_slurm_command(spec, c, args, out);
  if (c.plan_only) {
    out << compare_plan_text(spec, c.opt.out.empty() ? spec.out : c.opt.out);
    return 0;
  }
  c.opt.log = &err;
  return compare_outcome(spec, c.opt, run_compare(spec, c.opt), out, err);
}

}  // namespace

}  // namespace pelab
