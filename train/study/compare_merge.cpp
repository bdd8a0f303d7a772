// pelab — `pelab compare --merge` (compare.h): the records of runs made elsewhere, each checked,
// copied into this comparison's runs/.
#include "train/study/compare.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "pelab/strings.h"
#include "train/metrics.h"
#include "train/study/compare_internal.h"
#include "train/study/run_record.h"
#include "train/task_data.h"
#include "train/text_file.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace compare_detail;

namespace {

// "" when the record `rf` (read into memory from a merged folder) is one of plan run `run` that may
// be merged; else the first problem, one line naming the file in the merged folder (throws such a
// line too). The record must be made by this pelab version (`ours`), of the plan's config (its
// config.yaml and the digest record.json names), finished, and every cached evaluation the plan
// would report must be accepted as the comparison accepts its own (accept_cached_evaluation: the
// plan's tests, the run's own eval.json). Caches the plan does not use are dropped from `rf`: they
// are never copied.
std::string record_problem(const ComparePlanRun& run, RecordFiles& rf, const std::string& ours) {
  const std::string& src = rf.src;
  const std::string rec_path = rf.path(run_record_file());
  const std::string* rec_text = rf.find(run_record_file());
  PELAB_CHECK(rec_text, rec_path, ": not a regular file");
  const RunRecord rec = parse_run_record(*rec_text, rec_path);
  if (rec.pelab_version != ours)
    return src + ": recorded by pelab " + rec.pelab_version + ", this is pelab " + ours +
           "; results may differ between versions: retrain it with this pelab";
  const std::string* cfg_text = rf.find("config.yaml");
  PELAB_CHECK(cfg_text, rf.path("config.yaml"), ": missing; a record holds its run's config");
  const Config cfg = load_config_string(*cfg_text, rf.path("config.yaml"));
  const std::string digest = fingerprint(eval_identity(cfg));
  const std::string planned = fingerprint(eval_identity(run.cfg));
  if (rec.config_digest != digest)
    return rec_path + ": config digest " + rec.config_digest + " is not that of its config.yaml (" +
           digest + ")";
  if (digest != planned) {
    const std::string diff = first_config_difference(cfg, run.cfg);
    // The plan's config on data that changed since the run trained (its data revision).
    if (!diff.empty() && diff == data_revision_change(cfg))
      return src + ": " + diff + ": retrain it with this pelab";
    return src + ": a record of another config (digest " + digest + ", the plan's " + planned +
           "): " + diff;
  }
  const std::string eval_path = rf.path("eval.json");
  const std::string* eval_text = rf.find("eval.json");
  // (A record is made once its run has finished; without its evaluation it cannot be reported,
  // and it has no checkpoints here to resume from.)
  PELAB_CHECK(eval_text, eval_path,
              ": missing: the run's final evaluation is not in its record; finish the run where it "
              "trained (pelab compare CONFIG --only I there) and merge again");
  const Convergence c = parse_convergence(*eval_text, eval_path);
  const bool finished = rec.step == run.cfg.train.steps || (c.met() && c.step == rec.step);
  if (rec.step > run.cfg.train.steps || !finished)
    return src + ": step " + std::to_string(rec.step) + " is not the end of a run of " +
           std::to_string(run.cfg.train.steps) + " steps or of its stop criterion";
  if (c.has_criterion() && (c.criterion.size() > 300 || c.step > rec.step ||
                          c.criterion.find_first_of("|`\n\r\t") != std::string::npos))
    return eval_path + ": its convergence record does not fit step " + std::to_string(rec.step) +
           " or its criterion text is not plain";
  const EvalJson own = parse_eval_json(*eval_text, eval_path);
  std::vector<ComparePlanVariant> evals = {{"", run.cfg, false, run.tests}};
  evals.insert(evals.end(), run.variants.begin(), run.variants.end());
  std::vector<std::string> keep;
  for (const auto& pv : evals) {
    const std::string name = "compare_eval/" + cache_file_name(pv);
    const std::string* text = rf.find(name);
    std::vector<ResultRow> rows;
    if (text && accept_cached_evaluation(*text, rf.path(name), run, pv, rec.checkpoint,
                                         pv.name.empty() ? &own : nullptr, eval_path, rows))
      keep.push_back(name);
  }
  rf.files.erase(std::remove_if(rf.files.begin(), rf.files.end(),
                                [&](const auto& f) {
                                  return f.first.rfind("compare_eval/", 0) == 0 &&
                                         std::find(keep.begin(), keep.end(), f.first) == keep.end();
                                }),
                 rf.files.end());
  return "";
}

}  // namespace

// The lines refusing --merge when the report folder `out_dir` lies in (or is) one of the merged
// folders `dirs`: pelab would write into it. Paths compared as they resolve now (links of the parts
// that exist followed), before anything is created.
std::vector<std::string> merge_out_problems(const std::vector<std::string>& dirs,
                                            const std::string& out_dir) {
  std::vector<std::string> problems;
  std::error_code ec;
  const fs::path out_real = fs::weakly_canonical(fs::absolute(out_dir), ec);
  for (const auto& d : dirs) {
    const fs::path real = fs::weakly_canonical(fs::absolute(d), ec);
    const auto rel = out_real.lexically_relative(real);
    if (!rel.empty() && *rel.begin() != "..")
      problems.push_back("--merge " + d + ": the report folder " + out_dir +
                         " lies in it, and pelab never writes into a merged folder; choose "
                         "another --out");
  }
  return problems;
}

namespace compare_detail {

// --merge: copies the records of the plan's runs found in each folder's runs/ (<sub>/runs/) or
// records.tar.xz (RunRecordSource) into <out_dir>/runs/ (run_record.h), each read into memory
// within RecordReadLimits and checked there first (record_problem), wherever its files come from.
// Every record refused is one line in res.refused naming the file in the merged folder (or archive
// member); a limit of the whole merge stops it there. `from` gets the folder each imported run
// came from. The first folder holding a run wins; a finished run of out_dir's own with its weights
// is kept. Nothing is written into the merged folders.
void merge_records(const std::vector<ComparePlanRun>& plan, const std::vector<std::string>& dirs,
                   const std::string& sub, const std::string& out_dir, std::ostream& log,
                   CompareResult& res, std::map<size_t, std::string>& from) {
  std::error_code ec;
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < plan.size(); ++i) index_of[plan[i].cfg.train.run_name] = i;
  const fs::path runs_out = fs::path(out_dir) / "runs";
  const std::string ours = this_machine_record().pelab_version;
  RecordReadBudget budget;  // what this merge has read (RecordReadLimits)
  for (const auto& d : dirs) {
    // In a suite, the task's folder inside DIR: opened like the rest, without following a link.
    // Its records: its runs/ folder, or its records.tar.xz (run_record.h).
    const std::string folder = sub.empty() ? d : (fs::path(d) / sub).string();
    std::optional<RunRecordSource> source;
    try {
      source.emplace(d, sub);
    } catch (const std::exception& e) {
      res.refused.push_back(e.what());
      continue;
    }
    const std::vector<std::string>& names = source->names();
    if (names.empty())
      log << "pelab compare --merge: no finished run in " << (fs::path(folder) / "runs").string()
          << " or " << (fs::path(folder) / records_archive_file()).string() << "\n";
    int64_t taken = 0;
    for (const auto& n : names) {
      const std::string src = source->origin(n);
      auto it = index_of.find(n);
      if (it == index_of.end()) {
        res.refused.push_back(src + ": a record of a run this config does not plan (another "
                              "config? its runs: pelab compare CONFIG --plan)");
        continue;
      }
      const size_t i = it->second;
      const ComparePlanRun& run = plan[i];
      // Read into memory and checked there: every message names the file in the merged folder,
      // and nothing is written for a record refused.
      RecordFiles rf;
      std::string why;
      try {
        if (!source->read(n, budget, rf)) continue;
        why = record_problem(run, rf, ours);
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (budget.exhausted) {  // a limit of the whole merge: nothing more is read
        res.refused.push_back(why);
        log << std::flush;
        return;
      }
      if (!why.empty() || from.count(i)) {
        if (!why.empty()) res.refused.push_back(why);
        else log << "pelab compare --merge: " << src << " ignored (taken from " << from[i] << ")\n";
        continue;
      }
      const fs::path dst = runs_out / n;
      if (is_run_directory(dst.string())) {
        const RunInspection own = inspect_run(dst.string(), run.cfg);
        if (own.state == RunState::Finished && own.weights) {
          log << "pelab compare --merge: " << n << ": " << out_dir
              << "'s own finished run kept; " << src << " ignored\n";
          continue;
        }
      }
      // (every run name ends in _seed<N>: no run is called so; short, within NAME_MAX)
      const fs::path stage = runs_out / (".merge-" + std::to_string(i));
      fs::remove_all(stage, ec);
      write_run_record_files(rf, stage.string());
      fs::remove_all(dst, ec);
      PELAB_CHECK(!ec, "compare --merge: cannot replace ", dst.string(), ": ", ec.message());
      fs::rename(stage, dst, ec);
      PELAB_CHECK(!ec, "compare --merge: cannot move ", stage.string(), " to ", dst.string(), ": ",
                  ec.message());
      from[i] = folder;
      ++taken;
    }
    log << "pelab compare --merge: " << count_text(taken, "run") << " from " << folder << "\n";
  }
  log << std::flush;
}

}  // namespace compare_detail

}  // namespace pelab
