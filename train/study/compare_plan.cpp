// pelab — the plan of a comparison and the reuse of its runs (compare.h): every scheme x search
// candidate x seed resolved and checked before anything trains, the config fingerprints, which
// stored runs are finished, resumable or stale, and the --plan text.
#include "train/study/compare.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "data/batch.h"
#include "models/pe/pe.h"
#include "pelab/strings.h"
#include "train/memory_estimate.h"
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

// The longest file name (bytes) the file system of `dir` takes: pathconf(_PC_NAME_MAX) on the
// nearest folder of `dir` that exists, NAME_MAX (255) when it cannot say.
int64_t name_max(const fs::path& dir) {
  fs::path p = dir.empty() ? fs::path(".") : dir;
  std::error_code ec;
  while (!fs::is_directory(p, ec)) {
    if (!p.has_parent_path() || p.parent_path() == p) {
      p = ".";
      break;
    }
    p = p.parent_path();
  }
  const long n = ::pathconf(p.c_str(), _PC_NAME_MAX);
  return n > 0 ? n : NAME_MAX;
}

// Refuses, before anything trains, a run whose directory or files the file system cannot create
// because a name pelab forms is too long: the run directory's name (scheme, search candidate and
// seed) and every folder above it (compare.out, a suite's task), and the evaluation cache of each
// variant (<run>/compare_eval/<variant>.csv, with room for a temporary's suffix). `limit` is the
// file system's longest name (name_max).
void check_run_path(const CompareSpec& spec, const CompareScheme& scheme,
                    const SearchCandidate& cand, const Config& cfg,
                    const std::vector<ComparePlanVariant>& variants, int64_t limit) {
  const std::string what =
      "compare.schemes (" + shortened(scheme.name) +
      (cand.label.empty() ? "" : ", search candidate " + shortened(cand.label)) + ")";
  auto too_long = [&](const std::string& n) { return static_cast<int64_t>(n.size()) > limit; };
  const std::string allowed = " is too long for a file name (the file system takes up to " +
                              std::to_string(limit) + " bytes)";
  const std::string& name = cfg.train.run_name;
  if (too_long(name))
    throw ConfigError(spec.source + ": " + what + ": the run directory name '" + shortened(name) +
                      "'" + allowed + "; shorten the scheme name" +
                      (cand.label.empty() ? "" : " or write the search values shorter (1e-3)"));
  for (const auto& part : fs::path(cfg.train.run_dir))
    if (too_long(part.string()))
      throw ConfigError(spec.source + ": " + what + ": the folder '" + shortened(part.string()) +
                        "' of the run directory" + allowed +
                        "; shorten the report directory (compare.out or --out; in a suite, "
                        "suite.out or the task name)");
  const int64_t temporary_suffix = 32;  // ".tmp" and what makes a temporary unique
  for (const auto& v : variants) {
    const std::string file = v.name + ".csv";
    if (static_cast<int64_t>(file.size()) + temporary_suffix > limit)
      throw ConfigError(spec.source + ": compare.variants (" + shortened(v.name) +
                        "): its evaluation file '" + shortened(file) + "'" + allowed +
                        ", with room for a temporary's suffix; shorten the variant name");
  }
}

PlannedTests planned_tests(const TaskData& data) {
  PlannedTests t;
  for (const auto& s : data.tests()) t.emplace_back(s.name, s.length);
  return t;
}

}  // namespace

namespace compare_detail {

// Keys that may differ between a stored run and the wanted config without retraining.
// `stops`: the run trains to a train.stop_when criterion. Its validations then decide where it
// stops, so the validation cadence and split size (train.eval_every, task.num_eval_examples)
// change what is trained.
bool reusable_difference(const std::string& k, bool stops) {
  if (stops && (k == "train.eval_every" || k == "task.num_eval_examples")) return false;
  static const std::set<std::string> ok = {"train.log_every",        "train.eval_every",
                                           "train.checkpoint_every", "train.keep_checkpoints",
                                           "train.threads",          "train.device",
                                           "train.run_dir",          "train.run_name",
                                           "train.resume",           "train.tags",
                                           "task.test_lengths",      "task.lm_eval_lengths",
                                           "task.num_eval_examples"};
  return ok.count(k) || k.rfind("eval.", 0) == 0 || (eval_time_key(k) && k.rfind("pe.", 0) == 0);
}

// Text identifying the data a config builds (TaskData depends on the task section only).
std::string task_key(const Config& c) {
  std::string k;
  for (const auto& key : config_schema())
    if (key.section == "task") k += config_value_text(c, key.full_name()) + "\n";
  return k;
}

// FNV-1a 64, hex.
std::string fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The config with the keys that do not affect evaluation normalised (eval_identity).
Config eval_normalized(Config c) {
  c.train.threads = 1;
  c.train.device = "cpu";
  c.train.log_every = 1;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  c.train.keep_checkpoints = 0;
  c.train.run_dir = "runs";
  c.train.run_name = "run";
  c.train.resume = "";
  c.train.tags.clear();
  c.eval.save_predictions = false;
  return c;
}
std::string eval_identity(const Config& c) { return config_to_yaml(eval_normalized(c)); }

// "KEY was A, the plan has B" for the first key in which two configs differ after
// eval_normalized(); "" when none does.
std::string first_config_difference(const Config& had, const Config& want) {
  const Config a = eval_normalized(had), b = eval_normalized(want);
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    const std::string x = config_value_text(a, k), y = config_value_text(b, k);
    if (x != y) return k + " was " + x + ", the plan has " + y;
  }
  return data_revision_change(had);  // the same config: on the data it draws now?
}

// N of the newest checkpoint's file name step_<N>.h5 (following last.h5), -1 if none. From the
// name only: checkpoint.h's checkpoint_step opens the file and reads /step.
int64_t checkpoint_file_step(const std::string& path) {
  if (path.empty()) return -1;
  std::error_code ec;
  fs::path p = path;
  if (fs::is_symlink(p, ec)) p = p.parent_path() / fs::read_symlink(p, ec);
  const std::string f = p.filename().string();
  if (f.rfind("step_", 0) != 0 || f.size() < 9) return -1;
  const std::string num = f.substr(5, f.size() - 8);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(num);
}

RunInspection inspect_run(const std::string& dir, const Config& want) {
  RunInspection r;
  std::error_code ec;
  if (!is_run_directory(dir)) {
    r.state = fs::exists(dir, ec) && !fs::is_empty(dir, ec) ? RunState::Stale : RunState::Fresh;
    r.reason = "no config.yaml";
    return r;
  }
  std::string mixed;
  try {
    const std::string path = (fs::path(dir) / "config.yaml").string();
    r.stored = load_config(path);
    mixed = mixed_randomized_batches(read_text_file(path));
  } catch (const std::exception& e) {
    r.state = RunState::Stale;
    r.reason = std::string("unreadable config.yaml: ") + e.what();
    return r;
  }
  if (!mixed.empty()) {
    r.state = RunState::Stale;
    r.reason = mixed;
    return r;
  }
  const bool stops = want.train.stop_when.enabled() || r.stored.train.stop_when.enabled();
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    if (reusable_difference(k, stops)) continue;
    const std::string a = config_value_text(r.stored, k), b = config_value_text(want, k);
    if (a != b) {
      r.state = RunState::Stale;
      r.reason = "config changed: " + k + " was " + a + ", now " + b;
      return r;
    }
  }
  // The same config on changed data (the task's generator changed since it trained).
  if (std::string why = data_revision_change(r.stored); !why.empty()) {
    r.state = RunState::Stale;
    r.reason = why;
    return r;
  }
  const std::string ck = latest_checkpoint(dir);
  r.step = checkpoint_file_step(ck);
  if (ck.empty() || r.step < 0) {
    // No weights: a run record (run_record.h) stands for a finished run.
    std::error_code lec;
    if (fs::exists(fs::symlink_status(fs::path(dir) / run_record_file(), lec))) {
      try {
        const RunRecord rec = read_run_record(dir);
        if (rec.config_digest != fingerprint(eval_identity(r.stored)))
          throw Error("its config digest " + rec.config_digest + " is not that of its config.yaml");
        r.step = rec.step;
        r.weights = false;
      } catch (const std::exception& e) {
        r.state = RunState::Stale;
        r.reason = std::string("no checkpoint and an unusable record.json: ") + e.what();
        return r;
      }
    } else {
      r.state = RunState::Stale;
      r.reason = "no checkpoint";
      return r;
    }
  }
  if (r.step > want.train.steps) {
    r.state = RunState::Stale;
    r.reason = "trained past train.steps";
    return r;
  }
  // Finished: trained to train.steps, or stopped there by its train.stop_when criterion, and
  // evaluated (eval.json written after the final checkpoint). A criterion met at this step also
  // makes a resume train no further, so such a run is reused, not resumed.
  bool finished = false;
  if (fs::exists(fs::path(dir) / "eval.json", ec)) {
    if (r.step == want.train.steps) {
      finished = true;
    } else {
      try {
        const Convergence c = read_convergence(dir);
        finished = want.train.stop_when.stop && c.met() && c.step == r.step;
      } catch (const std::exception&) {
        finished = false;  // an unreadable eval.json: resuming rewrites it
      }
    }
  }
  if (!finished && !r.weights) {
    r.state = RunState::Stale;
    r.reason = "a record without checkpoints of a run that did not finish";
    return r;
  }
  r.state = finished ? RunState::Finished : RunState::Partial;
  return r;
}

}  // namespace compare_detail

// ---------------- the plan ----------------

std::vector<std::string> compare_row_labels(const CompareSpec& spec) {
  std::vector<std::string> labels;
  for (const auto& s : spec.schemes) {
    labels.push_back(s.name);
    Config cfg = spec.base;
    try {
      apply_overrides(cfg, s.sets);
    } catch (const std::exception&) {
      continue;  // reported by the loader / compare_plan
    }
    for (const auto& v : spec.variants)
      if (variant_applies(v, s, cfg)) labels.push_back(s.name + "+" + v.name);
  }
  return labels;
}

std::vector<ComparePlanRun> compare_plan(const CompareSpec& spec, const std::string& out_dir) {
  std::vector<ComparePlanRun> plan;
  std::map<std::string, std::shared_ptr<TaskData>> data_cache;
  // The data of a config, estimated with what `use` of it holds before any example is generated
  // (a scheme's runs train with it, a variant evaluates with it): a config that cannot fit is
  // refused here, not after gigabytes of data are built.
  auto data_for = [&](const Config& c, MemoryUse use) {
    check_run_memory(c, use, machine_memory_bytes());
    const std::string k = task_key(c);
    auto it = data_cache.find(k);
    if (it != data_cache.end()) return it->second;
    auto d = std::make_shared<TaskData>(c);
    data_cache[k] = d;
    return d;
  };
  const std::vector<SearchCandidate> candidates = search_candidates(spec.search);
  const int64_t limit = name_max(fs::path(out_dir) / "runs");
  // Every scheme x search candidate (one candidate without a search).
  std::vector<std::pair<const CompareScheme*, size_t>> rows;
  for (const auto& s : spec.schemes)
    for (size_t ci = 0; ci < candidates.size(); ++ci) rows.emplace_back(&s, ci);
  for (const auto& [scheme, ci] : rows) {
    const CompareScheme& s = *scheme;
    const SearchCandidate& cand = candidates[ci];
    const std::string what = "compare.schemes (" + s.name +
                             (cand.label.empty() ? "" : ", search candidate " + cand.label) + ")";
    Config cfg = spec.base;
    try {
      apply_overrides(cfg, s.sets);
      apply_overrides(cfg, cand.sets);
    } catch (const std::exception& e) {
      throw ConfigError(spec.source + ": " + what + ": " + e.what());
    }
    // Builds the data and the model once so that scheme settings the config rules cannot see (and
    // sizes that cannot fit) fail now.
    std::shared_ptr<TaskData> data;
    try {
      data = data_for(cfg, training_memory_use(cfg));
      (void)build_model(cfg, *data);
    } catch (const std::exception& e) {
      throw ConfigError(spec.source + ": " + what + ": " + e.what());
    }
    // Eval-time variants of this scheme.
    std::vector<ComparePlanVariant> variants;
    for (const auto& v : spec.variants) {
      if (!variant_applies(v, s, cfg)) continue;
      Config vc = cfg;
      std::vector<std::string> sets;
      for (std::string set : v.sets) {
        if (models::pe_is_variant_factor_key(key_of(set)) &&
            trim(set.substr(set.find('=') + 1)) == "auto") {
          int64_t need = data->train_positions();
          std::shared_ptr<TaskData> vd = data;
          // The variant may change the test lengths: compute over the variant's own tests.
          Config probe = cfg;
          std::vector<std::string> others;
          for (const auto& o : v.sets)
            if (key_of(o) != key_of(set)) others.push_back(o);
          apply_overrides(probe, others);
          vd = data_for(probe, MemoryUse::Evaluate);
          for (const auto& t : vd->tests())
            need = std::max(need, positions_needed(t, vd->is_decoder()));
          const double f = static_cast<double>(need) / static_cast<double>(data->train_positions());
          set = key_of(set) + "=" + format_double(std::max(1.0, f), 6);
        }
        sets.push_back(set);
      }
      std::shared_ptr<TaskData> vdata;
      try {
        apply_overrides(vc, sets);
        vdata = data_for(vc, MemoryUse::Evaluate);
        (void)build_model(vc, *vdata);
      } catch (const std::exception& e) {
        throw ConfigError(spec.source + ": compare.variants (" + v.name + ") for scheme " + s.name +
                          ": " + e.what());
      }
      variants.push_back({v.name, vc, v.positions == "random", planned_tests(*vdata)});
    }
    for (int64_t seed : spec.seeds) {
      ComparePlanRun r;
      r.scheme = s.name;
      r.seed = seed;
      r.candidate = cand.label;
      r.candidate_index = ci;
      r.candidate_sets = cand.sets;
      r.cfg = cfg;
      r.tests = planned_tests(*data);
      r.cfg.train.seed = seed;
      r.cfg.train.run_dir = (fs::path(out_dir) / "runs").string();
      r.cfg.train.run_name =
          s.name + (cand.label.empty() ? "" : "@" + cand.label) + "_seed" + std::to_string(seed);
      check_run_path(spec, s, cand, r.cfg, variants, limit);
      r.cfg.train.resume = "";
      validate_config(r.cfg);
      record_data_revision(r.cfg);  // the data it trains on, in its digest and config.yaml
      for (ComparePlanVariant v : variants) {
        v.cfg.task.data_revision = r.cfg.task.data_revision;
        v.cfg.train.seed = seed;
        v.cfg.train.run_dir = r.cfg.train.run_dir;
        v.cfg.train.run_name = r.cfg.train.run_name;
        v.cfg.train.resume = "";
        r.variants.push_back(v);
      }
      plan.push_back(std::move(r));
    }
  }
  return plan;
}

std::string compare_detail::plan_steps_text(const std::vector<ComparePlanRun>& plan,
                                            int64_t base_steps) {
  int64_t fewest = plan.empty() ? base_steps : plan[0].cfg.train.steps, most = fewest;
  for (const auto& r : plan) {
    fewest = std::min(fewest, r.cfg.train.steps);
    most = std::max(most, r.cfg.train.steps);
  }
  return most == fewest ? count_text(fewest, "step")
                        : std::to_string(fewest) + "-" + std::to_string(most) + " steps";
}

std::string compare_plan_text(const CompareSpec& spec, const std::string& out_dir) {
  const std::vector<ComparePlanRun> plan = compare_plan(spec, out_dir);
  size_t w = 3;
  for (const auto& r : plan) w = std::max(w, r.cfg.train.run_name.size());
  std::ostringstream os;
  os << "# " << plan.size() << " runs of " << plan_steps_text(plan, spec.base.train.steps)
     << " in " << out_dir
     << "/runs (pelab compare CONFIG --only I trains run I; config = digest of the run's "
        "resolved config)\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%5s  %-*s  %6s  %-16s  %s\n", "index", static_cast<int>(w), "run",
                "seed", "config", "state");
  os << buf;
  // Runs kept in out_dir's records.tar.xz: unpacked into runs/ when the comparison runs.
  std::error_code ec;
  std::optional<RunRecordSource> kept;
  if (fs::exists(fs::symlink_status(fs::path(out_dir) / records_archive_file(), ec)))
    kept.emplace(out_dir, "", /*with_folder=*/false);
  for (size_t i = 0; i < plan.size(); ++i) {
    const ComparePlanRun& r = plan[i];
    const std::string dir = run_directory(r.cfg);
    std::string state;
    if (kept && kept->archived(r.cfg.train.run_name) && !fs::exists(fs::symlink_status(dir, ec))) {
      state = std::string("in ") + records_archive_file() + " (unpacked and checked when run)";
    } else {
      const RunInspection ins = inspect_run(dir, r.cfg);
      state = ins.state == RunState::Finished ? "finished"
              : ins.state == RunState::Partial ? "resumes at step " + std::to_string(ins.step)
              : ins.state == RunState::Fresh   ? "to train"
                                               : "to retrain (" + ins.reason + ")";
      if (ins.state == RunState::Stale && !is_run_directory(dir)) state = "to train";
    }
    std::snprintf(buf, sizeof buf, "%5zu  %-*s  %6lld  %-16s  ", i + 1, static_cast<int>(w),
                  r.cfg.train.run_name.c_str(), static_cast<long long>(r.seed),
                  fingerprint(eval_identity(r.cfg)).c_str());
    os << buf << state << "\n";
  }
  return os.str();
}

}  // namespace pelab
