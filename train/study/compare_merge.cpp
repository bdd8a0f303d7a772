// pelab — `pelab compare --merge` (compare.h): the records of runs made elsewhere, each checked,
// copied into this comparison's runs/.
#include "train/study/compare.h"

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

// "" when every cached evaluation of the imported record `stage` reads back with its values in
// range (check_cached_row); else the first problem, naming the file in `src`, its origin.
std::string cached_evaluations_problem(const fs::path& stage, const std::string& src) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(stage / "compare_eval", ec)) {
    const std::string where =
        (fs::path(src) / "compare_eval" / e.path().filename()).string();
    try {
      const std::string text = read_text_file(e.path().string());
      const size_t nl = text.find('\n');
      PELAB_CHECK(
          text.rfind("# pelab compare evaluation cache ", 0) == 0 && nl != std::string::npos,
          where, ": not an evaluation cache");
      for (const auto& r : parse_results_csv(text.substr(nl + 1), where))
        check_cached_row(r, where);
    } catch (const std::exception& x) {
      return x.what();
    }
  }
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

// `s` for a markdown table cell: printable ASCII, `|` escaped.
std::string md_cell(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '|') o += "\\|";
    else if (c < 0x20 || c > 0x7e) o += '?';
    else o += static_cast<char>(c);
  }
  return o;
}

// --merge: copies the records of the plan's runs found in each folder's runs/ (<sub>/runs/) or
// records.tar.xz (RunRecordSource) into <out_dir>/runs/ (run_record.h), each checked first: made
// by this pelab version, of the plan's config (digest), finished. Every record refused is one line
// in res.refused; `from` gets the folder each imported run came from. The first folder holding a
// run wins; a finished run of out_dir's own with its weights is kept. Nothing is written into the
// merged folders.
void merge_records(const std::vector<ComparePlanRun>& plan, const std::vector<std::string>& dirs,
                   const std::string& sub, const std::string& out_dir, std::ostream& log,
                   CompareResult& res, std::map<size_t, std::string>& from) {
  std::error_code ec;
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < plan.size(); ++i) index_of[plan[i].cfg.train.run_name] = i;
  const fs::path runs_out = fs::path(out_dir) / "runs";
  const std::string ours = this_machine_record().pelab_version;
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
      // (every run name ends in _seed<N>: no run is called so; short, within NAME_MAX)
      const fs::path stage = runs_out / (".merge-" + std::to_string(i));
      fs::remove_all(stage, ec);
      std::string why;
      try {
        if (!source->copy(n, stage.string())) continue;
        const std::string rec_path = (fs::path(src) / run_record_file()).string();
        const RunRecord rec =
            parse_run_record(read_text_file((stage / run_record_file()).string()), rec_path);
        Config cfg;
        try {
          cfg = load_config((stage / "config.yaml").string());
        } catch (const std::exception& e) {
          throw Error(src + "/config.yaml: " + e.what());
        }
        const std::string digest = fingerprint(eval_identity(cfg));
        const std::string planned = fingerprint(eval_identity(run.cfg));
        if (rec.pelab_version != ours)
          why = src + ": recorded by pelab " + rec.pelab_version + ", this is pelab " + ours +
                "; results may differ between versions: retrain it with this pelab";
        else if (rec.config_digest != digest)
          why = rec_path + ": config digest " + rec.config_digest +
                " is not that of its config.yaml (" + digest + ")";
        else if (digest != planned) {
          const std::string diff = first_config_difference(cfg, run.cfg);
          // The plan's config on data that changed since the run trained (its data revision).
          if (!diff.empty() && diff == data_revision_change(cfg))
            why = src + ": " + diff + ": retrain it with this pelab";
          else
            why = src + ": a record of another config (digest " + digest + ", the plan's " +
                  planned + "): " + diff;
        } else {
          const Convergence c = read_convergence(stage.string());
          const bool finished =
              rec.step == run.cfg.train.steps || (c.met && c.step == rec.step);
          if (rec.step > run.cfg.train.steps || !finished)
            why = src + ": step " + std::to_string(rec.step) + " is not the end of a run of " +
                  std::to_string(run.cfg.train.steps) + " steps or of its stop criterion";
          else if (const std::string bad = cached_evaluations_problem(stage, src); !bad.empty())
            why = bad;
          else if (c.has_criterion && (c.criterion.size() > 300 || c.step > rec.step ||
                                       c.criterion.find_first_of("|`\n\r\t") != std::string::npos))
            why = src + "/eval.json: its convergence record does not fit step " +
                  std::to_string(rec.step) + " or its criterion text is not plain";
        }
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty() || from.count(i)) {
        fs::remove_all(stage, ec);
        if (!why.empty()) res.refused.push_back(why);
        else log << "pelab compare --merge: " << src << " ignored (taken from " << from[i] << ")\n";
        continue;
      }
      const fs::path dst = runs_out / n;
      if (is_run_directory(dst.string())) {
        const RunInspection own = inspect_run(dst.string(), run.cfg);
        if (own.state == RunState::Finished && own.weights) {
          fs::remove_all(stage, ec);
          log << "pelab compare --merge: " << n << ": " << out_dir
              << "'s own finished run kept; " << src << " ignored\n";
          continue;
        }
      }
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
