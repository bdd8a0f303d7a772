// pelab — running a comparison (compare.h): run_compare and its steps: training the plan's runs
// in this process (or in child processes, compare_children.cpp), stopping on a signal, choosing
// the search's candidates and writing the report.
#include "train/study/compare.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "models/pe/pe.h"
#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/strings.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/study/compare_internal.h"
#include "train/study/run_record.h"
#include "train/text_file.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace compare_detail;

namespace {

// The 1-minute load average ("?" when unknown): timings on a shared machine need it.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string v;
  if (!(in >> v)) return "?";
  return v;
}

// " (row, row: value; ...)" for the rows whose `value` differs from the base config's, grouped by
// value in order of appearance; "" when every row has the base's. The report's first line states the
// base's steps and layers, and a row with its own (compare.schemes' set:) must not hide behind it.
std::string rows_differing(const std::vector<ComparePlanRun>& plan, const std::string& base,
                           const std::function<std::string(const Config&)>& value) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // value -> rows
  for (const auto& r : plan) {
    const std::string v = value(r.cfg);
    if (v == base) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == v; });
    if (g == groups.end()) g = groups.insert(groups.end(), {v, {}});
    if (std::find(g->second.begin(), g->second.end(), r.scheme) == g->second.end())
      g->second.push_back(r.scheme);
  }
  std::string out;
  for (const auto& [v, rows] : groups) {
    out += out.empty() ? " (" : "; ";
    for (size_t i = 0; i < rows.size(); ++i) out += (i ? ", " : "") + md_text(rows[i]);
    out += ": " + v;
  }
  return out.empty() ? out : out + ")";
}

std::string layers_text(const Config& c) {
  if (c.model.arch == "seq2seq")
    return std::to_string(c.model.encoder_layers) + "+" + std::to_string(c.model.decoder_layers);
  return std::to_string(c.model.decoder_layers);
}

std::string task_summary(const Config& c, const std::vector<ComparePlanRun>& plan) {
  const TaskConfig& t = c.task;
  std::ostringstream os;
  os << "Task **" << md_text(t.name) << "** ("
     << (is_lm(c) ? "decoder-only language model" : md_text(t.formulation))
     << "), model " << c.model.arch << " d_model " << c.model.d_model << ", "
     << count_text(c.model.heads, "head") << ", ";
  if (c.model.arch == "seq2seq")
    os << c.model.encoder_layers << "+" << c.model.decoder_layers << " layers";
  else
    os << count_text(c.model.decoder_layers, "layer");
  os << rows_differing(plan, layers_text(c), layers_text);
  os << "; " << count_text(c.train.steps, "step")
     << rows_differing(plan, std::to_string(c.train.steps),
                       [](const Config& r) { return std::to_string(r.train.steps); })
     << " of batch " << c.train.batch_size << " ("
     << c.train.optimizer << ", lr " << c.train.lr << ", " << c.train.schedule << ")";
  if (is_lm(c)) {
    os << "; corpus " << (t.corpus.empty() ? "Debian fortunes" : md_text(t.corpus))
       << ", non-overlapping evaluation windows of";
    for (size_t i = 0; i < t.lm_eval_lengths.size(); ++i)
      os << (i ? ", " : " ") << t.lm_eval_lengths[i];
    os << " tokens";
  } else if (t.name != "textfile") {
    os << "; " << t.num_eval_examples << " test examples per length";
  }
  os << ".";
  return os.str();
}

}  // namespace

namespace compare_detail {

std::string run_who(const ComparePlanRun& run) {
  return run.scheme + (run.candidate.empty() ? "" : "@" + run.candidate) + " seed " +
         std::to_string(run.seed);
}

}  // namespace compare_detail

namespace {

// ---------------- the steps of run_compare ----------------

// The runs --only selects (every run without it), each index checked against the plan.
std::vector<bool> selected_runs(const CompareOptions& opt, size_t N) {
  std::vector<bool> selected(N, opt.only.empty());
  for (size_t i : opt.only) {
    if (i >= N)
      throw ConfigError("compare: --only " + std::to_string(i + 1) + ": the plan has " +
                        std::to_string(N) + " runs, numbered 1-" + std::to_string(N) +
                        " (see pelab compare CONFIG --plan)");
    selected[i] = true;
  }
  return selected;
}

// --expect-config DIGEST: the one --only run must still have the config this comparison planned.
void check_expected_config(const CompareSpec& spec, const CompareOptions& opt,
                           const std::vector<ComparePlanRun>& plan) {
  if (!opt.expect_config.empty()) {
    const size_t i = opt.only.at(0);
    const std::string digest = fingerprint(eval_identity(plan[i].cfg));
    if (digest != opt.expect_config)
      throw ConfigError("compare: run " + std::to_string(i + 1) + " of " + spec.source +
                        " is now " + plan[i].cfg.train.run_name + " with config " + digest +
                        ", not the config " + opt.expect_config +
                        " this comparison planned: the config file changed while it ran; run "
                        "the comparison again (finished runs are reused)");
  }
}

// Trains (or reuses) and evaluates the selected runs one after another in this process; the rows
// of runs that are not search candidates go to rows_of. A signal between runs sets
// res.interrupted; false when a run stopped before its end (the caller returns at once).
bool train_in_process(const CompareOptions& opt, const std::vector<ComparePlanRun>& plan,
                      const std::vector<bool>& selected, const std::vector<RunInspection>& ins,
                      std::ostream& log, CompareResult& res,
                      std::map<size_t, std::vector<ResultRow>>& rows_of) {
  const size_t N = plan.size();
  std::error_code ec;
  bool stop_hook_used = false;
  for (size_t i = 0; i < N && !res.interrupted; ++i) {
    if (!selected[i]) continue;
    const ComparePlanRun& run = plan[i];
    const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(N) + "] ";
    const std::string who = run_who(run);
    const std::string dir = run_directory(run.cfg);
    if (stop_signal()) {
      res.interrupted = true;
      break;
    }
    const RunInspection& in = ins[i];
    if (in.state != RunState::Finished) {
      TrainOptions to;
      to.progress = opt.progress;
      Config tcfg = run.cfg;
      if (in.state == RunState::Partial) {
        to.resume = dir;
        // Keys the trainer compares on resume come from the stored run where they may differ.
        tcfg.task.test_lengths = in.stored.task.test_lengths;
        tcfg.task.lm_eval_lengths = in.stored.task.lm_eval_lengths;
        tcfg.task.num_eval_examples = in.stored.task.num_eval_examples;
        tcfg.model.pe = in.stored.model.pe;
        log << tag << "resuming " << who << " at step " << in.step << " of " << tcfg.train.steps
            << " ...\n";
        ++res.resumed;
      } else {
        // (A directory holding only compare.log, from an earlier --jobs run, is not a run.)
        if (in.state == RunState::Stale && is_run_directory(dir))
          log << tag << who << ": " << in.reason << " -> training afresh\n";
        to.overwrite = true;  // also clears a half-created run directory without a checkpoint
        log << tag << "training " << who << " (" << count_text(tcfg.train.steps, "step") << ") ...\n";
        ++res.trained;
      }
      log << std::flush;
      fs::remove_all(fs::path(dir) / "compare_eval", ec);
      fs::remove(fs::path(dir) / run_record_file(), ec);  // the new run's machine makes it
      if (opt.stop_after >= 0 && !stop_hook_used) {
        to.stop_after = opt.stop_after;
        stop_hook_used = true;
      }
      TrainResult tr = train(tcfg, to);
      if (!tr.finished) {
        res.interrupted = true;
        log << tag << who << " stopped at step " << tr.step
            << "; run the same command again to continue\n"
            << std::flush;
        return false;
      }
    } else {
      log << tag << who << ": finished run reused (" << dir
          << (in.weights ? "" : ", its record: no checkpoints") << ")\n"
          << std::flush;
    }
    ensure_run_record(dir);
    // A search candidate is evaluated on the test lengths only once it is chosen.
    if (!run.candidate.empty()) continue;
    std::vector<ResultRow> rows;
    if (!evaluate_all(run, dir, tag, log, res, rows)) break;
    rows_of[i] = std::move(rows);
  }
  return true;
}

// The result rows of the chosen finished runs, in plan order, into res.rows, with their
// training-loss curves and each scheme's stop criterion; runs not evaluated while training are
// evaluated (cached) now. False when a signal interrupted an evaluation.
bool collect_results(const std::vector<ComparePlanRun>& plan, const std::vector<bool>& chosen_run,
                     const std::vector<bool>& finished,
                     const std::map<size_t, std::vector<ResultRow>>& rows_of, std::ostream& log,
                     CompareResult& res, std::vector<LossCurve>& curves,
                     std::map<std::string, std::string>& criteria) {
  const size_t N = plan.size();
  for (size_t i = 0; i < N; ++i) {
    if (!chosen_run[i] || !finished[i]) continue;
    const ComparePlanRun& run = plan[i];
    const std::string dir = run_directory(run.cfg);
    double wall = 0;
    LossCurve curve;
    curve.scheme = run.scheme;
    curve.seed = run.seed;
    read_run_metrics(dir, wall, curve.points);
    curves.push_back(curve);
    ensure_run_record(dir);
    auto it = rows_of.find(i);
    std::vector<ResultRow> rows;
    if (it != rows_of.end()) {
      rows = it->second;
    } else {
      const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(N) + "] ";
      if (!evaluate_all(run, dir, tag, log, res, rows)) {
        log << "pelab compare: interrupted; run the same command again to continue\n" << std::flush;
        return false;
      }
    }
    const Convergence conv = read_convergence(dir);
    if (conv.has_criterion()) criteria[run.scheme] = conv.criterion;
    set_convergence(rows, conv);
    res.rows.insert(res.rows.end(), rows.begin(), rows.end());
  }
  return true;
}

// The "Where the runs were made" section: the folder and machine of each chosen finished run,
// from its record ("" when there is none).
std::string records_markdown(const std::vector<ComparePlanRun>& plan,
                             const std::vector<bool>& chosen_run, const std::vector<bool>& finished,
                             const std::map<size_t, std::string>& merged_from,
                             const CompareResult& res) {
  const size_t N = plan.size();
  std::map<std::vector<std::string>, std::vector<std::string>> groups;  // row -> runs
  for (size_t i = 0; i < N; ++i) {
    if (!chosen_run[i] || !finished[i]) continue;
    auto f = merged_from.find(i);
    std::vector<std::string> row = {f == merged_from.end() ? res.out_dir : f->second, "–",
                                    "–", "–", "–"};
    try {
      const RunRecord rec = read_run_record(run_directory(plan[i].cfg));
      row = {row[0], rec.host, rec.cpu, rec.blas, rec.pelab_version};
    } catch (const std::exception&) {
      // a run without a record (none is written for runs without weights)
    }
    groups[row].push_back(plan[i].cfg.train.run_name);
  }
  std::ostringstream md;
  md << "Each run's record (`runs/<run>/record.json`, docs/experiments.md \"Run records and "
        "merging\") names the machine that trained it"
     << (merged_from.empty() ? ""
                             : "; runs gathered with `--merge` name the folder they came from")
     << ".\n\n| folder | machine | CPU | BLAS kernels | pelab | runs |\n"
        "|---|---|---|---|---|---|\n";
  for (const auto& [row, runs] : groups) {
    md << "|";
    for (const auto& c : row) md << " " << md_text(c) << " |";
    md << " " << runs.size() << ": " << md_text(join(runs, ", ")) << " |\n";
  }
  return groups.empty() ? "" : md.str();
}

// The report's input: the rows, the row labels (each scheme, then its eval-time variants) with
// their settings and notes, the search and records sections, the literature, the config; not the
// timing.
ReportInput report_input(const CompareSpec& spec, const CompareOptions& opt,
                         const std::vector<ComparePlanRun>& plan,
                         const std::vector<SearchCandidate>& candidates,
                         const std::vector<bool>& chosen_run, const CompareResult& res,
                         const std::vector<LossCurve>& curves,
                         const std::map<std::string, std::string>& criteria,
                         const std::string& search_md, const std::string& records_md) {
  const size_t N = plan.size();
  const Config& b = spec.base;
  ReportInput in;
  in.title = spec.title;
  in.task_summary = task_summary(b, plan);
  in.primary_metric = spec.metric != "auto" ? spec.metric : is_lm(b) ? "perplexity" : "exact_match";
  in.length_name = is_lm(b) ? "context length (tokens)" : "task length";
  if (is_lm(b)) {
    in.train_min = 1;
    in.train_max = b.task.lm_train_len;
    in.train_range_text = "windows of " + std::to_string(b.task.lm_train_len) + " tokens";
    in.log_x = true;
  } else {
    in.train_min = b.task.train_min_len;
    in.train_max = b.task.train_max_len;
    in.train_range_text = "task lengths " + std::to_string(b.task.train_min_len) + "–" +
                          std::to_string(b.task.train_max_len);
  }
  in.seeds = spec.seeds;
  for (const auto& s : spec.schemes) {
    in.labels.push_back(s.name);
    std::string settings = sets_text(s.sets);
    auto ch = res.chosen.find(s.name);
    if (ch != res.chosen.end())
      for (const auto& c : candidates)
        if (c.label == ch->second) settings += "; chosen by the search: " + sets_text(c.sets);
    in.run_settings.emplace_back(s.name, settings);
    for (size_t i = 0; i < N; ++i) {
      const ComparePlanRun& run = plan[i];
      if (run.scheme != s.name || run.seed != spec.seeds.front() || !chosen_run[i]) continue;
      for (const auto& pv : run.variants) {
        const std::string& vname = pv.name;
        const Config& vc = pv.cfg;
        const std::string label = s.name + "+" + vname;
        in.labels.push_back(label);
        std::string note = "eval-time variant of " + md_text(s.name) + " (no retraining)";
        // The scheme's eval-time keys this variant changes (declared in models/pe/).
        std::string changed;
        for (const std::string& k : models::pe_eval_time_keys()) {
          const std::string v = config_value_text(vc, k);
          if (v != config_value_text(run.cfg, k)) changed += (changed.empty() ? "" : ", ") + k + " " + v;
        }
        if (!changed.empty()) note += ": " + md_text(changed);
        if (pv.random_positions)
          note += ": evaluated with sorted random positions from [0, " +
                  std::to_string(vc.model.pe.randomized_max_position) + ") as in training";
        in.label_notes[label] = note;
        for (const auto& v : spec.variants)
          if (v.name == vname) in.run_settings.emplace_back(label, sets_text(v.sets));
      }
    }
  }
  in.rows = res.rows;
  in.curves = curves;
  in.search_markdown = search_md;
  in.records_markdown = records_md;
  in.unconverged = spec.unconverged;
  in.criteria = criteria;
  for (const auto& s : spec.schemes)
    if (s.cannot_learn) in.cannot_learn[s.name] = s.why;
  {
    const LiteratureSection lit = literature_for_report(spec.literature, in);
    in.literature_markdown = lit.markdown;
    in.literature_csv = lit.csv;
  }
  in.command = opt.command.empty() ? "pelab compare " + spec.source : opt.command;
  in.config_text = spec.config_text;
  in.resolved_yaml = config_to_yaml(spec.base);
  return in;
}

// The closing lines: the report written, and the runs that missed their stop criterion.
void log_report(const CompareSpec& spec, const CompareResult& res, std::ostream& log) {
  log << "pelab compare: report " << res.report.report_md << " (" << res.report.pngs.size()
      << " plots";
  if (!res.report.plot_note.empty()) log << "; " << res.report.plot_note;
  log << ")\n";
  if (!res.unconverged.empty() && spec.unconverged != "fail") {
    log << "pelab compare: " << res.unconverged.size()
        << (res.unconverged.size() == 1 ? " run" : " runs") << " missed the stop criterion ("
        << (spec.unconverged == "exclude" ? "left out of the statistics" : "marked † in the report")
        << "):";
    for (size_t i = 0; i < res.unconverged.size(); ++i)
      log << (i ? ", " : " ") << res.unconverged[i];
    log << "\n";
  }
  log << std::flush;
}

// Before anything is trained: OUT created (not inside a merged folder), its runs/ and run folders
// pelab's own, the runs kept in its records.tar.xz unpacked, the --merge folders gathered
// (merged_from), the config copied. False when a merge was refused (res.refused says why).
bool prepare_out(const CompareSpec& spec, const CompareOptions& opt,
                 const std::vector<ComparePlanRun>& plan, std::ostream& log, CompareResult& res,
                 std::map<size_t, std::string>& merged_from) {
  // Before anything is created: the report folder must not lie in a merged folder.
  res.refused = merge_out_problems(opt.merge, res.out_dir);
  if (!res.refused.empty()) return false;
  std::error_code ec;
  fs::create_directories(res.out_dir, ec);
  PELAB_CHECK(!ec, "compare: cannot create ", res.out_dir, ": ", ec.message());
  // runs/ and each run's folder are pelab's own: a link there (planted in a folder from someone
  // else) is refused before anything is written, trained or deleted through it.
  make_own_folder((fs::path(res.out_dir) / "runs").string());
  // (Only links here: anything else in a run folder's place fails where that run starts.)
  for (const auto& r : plan)
    if (fs::is_symlink(run_directory(r.cfg), ec)) own_folder_exists(run_directory(r.cfg));
  // Runs kept in OUT's records.tar.xz are run folders to this comparison (reused, reported).
  if (!opt.retrain) unpack_records_archive(plan, res.out_dir, log);
  if (!opt.merge.empty()) {
    merge_records(plan, opt.merge, opt.merge_sub, res.out_dir, log, res, merged_from);
    if (!res.refused.empty()) return false;
  }
  if (opt.only.empty())
    write_text_file((fs::path(res.out_dir) / "compare.yaml").string(), spec.config_text);
  return true;
}

// "2 schemes x 3 seeds = 6 runs of 3000 steps" (with the search candidates when there are).
std::string runs_text(const CompareSpec& spec, const std::vector<SearchCandidate>& candidates,
                      const std::vector<ComparePlanRun>& plan) {
  return count_text(static_cast<int64_t>(spec.schemes.size()), "scheme") + " x " +
         (spec.search.empty()
              ? ""
              : count_text(static_cast<int64_t>(candidates.size()), "search candidate") + " x ") +
         count_text(static_cast<int64_t>(spec.seeds.size()), "seed") + " = " +
         count_text(static_cast<int64_t>(plan.size()), "run") + " of " +
         plan_steps_text(plan, spec.base.train.steps);
}

// The selected runs that need training (ins: what each selected run's folder holds); with
// --report-only they are the missing runs (res.missing).
std::vector<size_t> runs_to_train(const CompareOptions& opt, const std::vector<ComparePlanRun>& plan,
                                  const std::vector<bool>& selected,
                                  std::vector<RunInspection>& ins, CompareResult& res) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!selected[i]) continue;
    ins[i] = opt.retrain && !opt.report_only ? RunInspection{RunState::Stale, "--retrain", 0, {}}
                                             : inspect_run(run_directory(plan[i].cfg), plan[i].cfg);
    if (ins[i].state != RunState::Finished) {
      todo.push_back(i);
      if (opt.report_only) res.missing.push_back(plan[i].cfg.train.run_name);
    }
  }
  return todo;
}

// Runs trained at once: --jobs, else compare.jobs, else the cores, at most the runs to train; 1
// when no pelab binary can be run as a child process (every run then trains in this process).
int64_t runs_at_once(const CompareSpec& spec, const CompareOptions& opt, size_t todo) {
  const int64_t jobs = opt.jobs > 0    ? opt.jobs
                       : spec.jobs > 0 ? spec.jobs
                                       : std::max<int64_t>(1, std::thread::hardware_concurrency());
  const bool can_spawn = !opt.exe.empty() || !compare_child_binary().empty();
  return can_spawn ? std::min<int64_t>(jobs, static_cast<int64_t>(todo)) : 1;
}

// The report's timing note: the machine, its load, the BLAS kernels and threads, and how many
// runs this invocation trained (with its wall time), or that every run was reused.
void note_timing(ReportInput& in, const CompareSpec& spec, const CompareResult& res, size_t runs,
                 int64_t at_once, double t_start, const std::string& load_start) {
  const std::string threads =
      std::to_string(spec.base.train.threads) +
      (spec.base.train.threads == 1 ? " thread per run" : " threads per run");
  if (res.trained + res.resumed == 0) {
    in.timing_note = threads + "; every run reused from an earlier invocation";
    return;
  }
  in.total_wall_s = now_s() - t_start;
  in.timing_note =
      "machine: " + std::to_string(std::thread::hardware_concurrency()) +
      " cores, 1-min load average " + load_start + " at the start and " + load_average() +
      " at the end; BLAS: " + blas_kernels_summary() + "; " + threads + "; " + std::to_string(res.trained + res.resumed) + " of " +
      std::to_string(runs) + " runs trained in this invocation, the rest reused" +
      (at_once > 1 ? "; " + std::to_string(at_once) + " runs at once in child processes (--jobs)"
                   : "");
}

}  // namespace

CompareResult run_compare(const CompareSpec& spec, const CompareOptions& opt) {
  if (!opt.merge.empty() && !opt.report_only) {  // --merge writes the report of what it gathers
    CompareOptions o = opt;
    o.report_only = true;
    return run_compare(spec, o);
  }
  PELAB_CHECK(opt.merge.empty() || (opt.only.empty() && !opt.retrain),
              "compare: --merge cannot be combined with --only or --retrain");
  std::ostream& log = opt.log ? *opt.log : std::cerr;
  const double t_start = now_s();
  const std::string load_start = load_average();
  CompareResult res;
  res.out_dir = opt.out.empty() ? spec.out : opt.out;
  const std::vector<ComparePlanRun> plan = compare_plan(spec, res.out_dir);
  const size_t N = plan.size();
  const std::vector<bool> selected = selected_runs(opt, N);
  PELAB_CHECK(!(opt.report_only && !opt.only.empty()),
              "compare: --only and --report-only cannot be combined");
  check_expected_config(spec, opt, plan);
  std::map<size_t, std::string> merged_from;  // plan index -> the --merge folder it came from
  if (!prepare_out(spec, opt, plan, log, res, merged_from)) return res;
  const std::vector<SearchCandidate> candidates = search_candidates(spec.search);
  if (opt.only.empty())
    log << "pelab compare: " << runs_text(spec, candidates, plan) << "; report in " << res.out_dir
        << "\n" << std::flush;

  // ---- training: the runs not finished yet, in child processes or in this one ----
  StopSignalScope signals;
  std::vector<RunInspection> ins(N);
  const std::vector<size_t> todo = runs_to_train(opt, plan, selected, ins, res);
  const int64_t at_once = runs_at_once(spec, opt, todo.size());
  // Rows evaluated while training (runs that are not search candidates), by plan index.
  std::map<size_t, std::vector<ResultRow>> rows_of;
  if (opt.report_only) {
    // nothing is trained
  } else if (at_once > 1) {
    for (size_t i : todo) ++(ins[i].state == RunState::Partial ? res.resumed : res.trained);
    if (!train_in_children(spec, opt, plan, todo, at_once, res.out_dir, log))
      res.interrupted = true;
  } else if (!train_in_process(opt, plan, selected, ins, log, res, rows_of)) {
    return res;
  }
  if (res.interrupted) {
    log << "pelab compare: interrupted; run the same command again to continue\n" << std::flush;
    return res;
  }
  if (!opt.only.empty()) return res;
  res.reused = static_cast<int64_t>(N - res.missing.size()) - res.trained - res.resumed;
  std::vector<bool> finished(N, true);
  for (const auto& m : res.missing)
    for (size_t i = 0; i < N; ++i)
      if (plan[i].cfg.train.run_name == m) finished[i] = false;

  // ---- the search: choose each scheme's candidate on the validation split only ----
  std::vector<bool> chosen_run(N, true);
  const std::string search_md =
      choose_candidates(spec, plan, candidates, finished, log, res, chosen_run);

  // ---- results of the (chosen) finished runs, in plan order ----
  std::vector<LossCurve> curves;
  std::map<std::string, std::string> criteria;  // scheme -> stop criterion
  if (!collect_results(plan, chosen_run, finished, rows_of, log, res, curves, criteria))
    return res;

  // ---- where the runs were made: folder and machine of each record ----
  const std::string records_md = records_markdown(plan, chosen_run, finished, merged_from, res);

  // ---- the report ----
  ReportInput in = report_input(spec, opt, plan, candidates, chosen_run, res, curves, criteria,
                                search_md, records_md);
  res.unconverged = unconverged_runs(in);
  note_timing(in, spec, res, N, at_once, t_start, load_start);
  res.report = write_report(res.out_dir, in, opt.plots);
  log_report(spec, res, log);
  if (opt.archive) archive_records(plan, finished, res.out_dir, log);
  return res;
}

}  // namespace pelab
