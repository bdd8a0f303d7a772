// pelab — declarations shared by the files of `pelab compare` and by none else: compare_spec.cpp,
// compare_plan.cpp, compare_eval.cpp, compare_merge.cpp, compare_records.cpp, compare_run.cpp,
// compare_children.cpp, compare_search.cpp. The public interface is compare.h.
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "train/evaluate.h"
#include "train/stop_criterion.h"
#include "train/study/compare.h"

namespace pelab::compare_detail {

// The grid of compare.search (product of the value lists, the first key varying slowest): each
// candidate's label ("lr=0.001,warmup=10") and settings ("train.lr=0.001", ...). One candidate
// with no label and no settings without a search.
struct SearchCandidate {
  std::string label;
  std::vector<std::string> sets;
};

enum class RunState { Fresh, Finished, Partial, Stale };

struct RunInspection {
  RunState state = RunState::Fresh;
  std::string reason;  // for Stale
  int64_t step = 0;    // newest checkpoint's step
  Config stored;
  // false: checkpoints/ is gone and the run is its record (run_record.h): reusable from its
  // evaluation cache, not evaluable anew.
  bool weights = true;
};

// compare_spec.cpp
// `s` for a message: as it is up to 60 bytes, else its first 40 and its length.
std::string shortened(const std::string& s);
bool eval_time_key(const std::string& k);
std::string key_of(const std::string& set);
// Whether an eval-time variant applies to a scheme whose resolved config is `cfg`: the schemes it
// names, else every scheme trained with randomized positions (positions: random) or every scheme
// that declares the pe.* keys it sets.
bool variant_applies(const CompareVariant& v, const CompareScheme& s, const Config& cfg);
std::vector<SearchCandidate> search_candidates(const std::vector<CompareSearchKey>& search);
bool is_lm(const Config& c);

// compare_plan.cpp
// Keys that may differ between a stored run and the wanted config without retraining.
// `stops`: the run trains to a train.stop_when criterion. Its validations then decide where it
// stops, so the validation cadence and split size (train.eval_every, task.num_eval_examples)
// change what is trained.
bool reusable_difference(const std::string& k, bool stops);
// Text identifying the data a config builds (TaskData depends on the task section only).
std::string task_key(const Config& c);
// FNV-1a 64, hex.
std::string fingerprint(const std::string& s);
// The plan's train.steps for a message: "1 step", "8000 steps", or "8000-24000 steps" when rows
// set their own.
std::string plan_steps_text(const std::vector<ComparePlanRun>& plan, int64_t base_steps);
std::string eval_identity(const Config& c);
// "KEY was A, the plan has B" for the first key in which two configs differ after
// eval_normalized(); when none does, why `had` trained on other data (data_revision_change);
// else "".
std::string first_config_difference(const Config& had, const Config& want);
// N of the newest checkpoint's file name step_<N>.h5 (following last.h5), -1 if none. From the
// name only: checkpoint.h's checkpoint_step opens the file and reads /step.
int64_t checkpoint_file_step(const std::string& path);
RunInspection inspect_run(const std::string& dir, const Config& want);

// compare_eval.cpp
// Writes <run>/record.json for a finished run that has its weights, unless one for the same
// checkpoint is there (the machine it names is the one that trained and evaluated the run;
// retraining removes it). A run without weights keeps the record it has.
void ensure_run_record(const std::string& dir);
// Wall time (s) of training and the training-loss curve, from a run's metrics.jsonl.
void read_run_metrics(const std::string& dir, double& wall,
                      std::vector<std::pair<int64_t, double>>& curve);
// Throws unless a row read from an evaluation cache has values in their ranges and short printable
// names (they reach report.md and the plots).
void check_cached_row(const ResultRow& r, const std::string& where);
// A cached evaluation of a run's numbers against its own evaluation (eval.json): they must agree
// to this relative difference (both are computed from the same checkpoint with the same config;
// 17 digits are written, so on one machine they are equal).
constexpr double kOwnEvaluationTolerance = 1e-6;
// <run>/compare_eval/'s file of a variant: "base.csv" as trained, else "<name>.csv".
std::string cache_file_name(const ComparePlanVariant& pv);
// The first line of that file: the fingerprint of the evaluation config, the checkpoint's stamp
// ("<file>:<size>:<mtime>", run_record.h) and the position protocol.
std::string cache_head(const ComparePlanVariant& pv, const std::string& stamp);
// How a cached evaluation is accepted, wherever it comes from (the run's own folder, a record, a
// merged folder): false when `text` (the cache file; `where` names it) is not the evaluation of
// `pv` of a checkpoint stamped `stamp` (another header: evaluate again). Else its rows in `rows`
// when every number is traced to its source and the plan: every row of `run` and `pv`, in range
// (check_cached_row), one row for each of pv.tests and no other; and with `own` (the run's own
// final evaluation, eval.json at `own_where`, when `pv` is the run as trained with its config) the
// status and metrics of each row those of `own` (kOwnEvaluationTolerance), `own` of the stamped
// checkpoint. Throws one line naming `where` (or `own_where`) and the row otherwise.
bool accept_cached_evaluation(const std::string& text, const std::string& where,
                              const ComparePlanRun& run, const ComparePlanVariant& pv,
                              const std::string& stamp, const EvalJson* own,
                              const std::string& own_where, std::vector<ResultRow>& rows);
// Marks a run's result rows with the outcome of its stop criterion.
void set_convergence(std::vector<ResultRow>& rows, const Convergence& c);
// Value of `metric` on the `valid` split of a run's final evaluation (eval.json, written by the
// trainer: one result object per line); NaN with the reason in *why when there is none.
double valid_metric(const std::string& run_dir, const std::string& metric, std::string* why);
// Evaluates one finished run as trained and with each of its variants (cached per run and
// variant), logging one line; false when a signal interrupted it (res.interrupted set).
bool evaluate_all(const ComparePlanRun& run, const std::string& dir, const std::string& tag,
                  std::ostream& log, CompareResult& res, std::vector<ResultRow>& out);

// compare_merge.cpp
// --merge: copies the records of the plan's runs found in each folder's runs/ (<sub>/runs/) or
// records.tar.xz (RunRecordSource) into <out_dir>/runs/ (run_record.h), each read into memory
// within RecordReadLimits and checked there first: made by this pelab version, of the plan's
// config (digest), finished, its cached evaluations accepted as accept_cached_evaluation accepts
// them. Every record refused is one line in res.refused naming the file in the merged folder;
// `from` gets the folder each imported run came from. The first folder holding a run wins; a
// finished run of out_dir's own with its weights is kept. Nothing is written into the merged
// folders.
void merge_records(const std::vector<ComparePlanRun>& plan, const std::vector<std::string>& dirs,
                   const std::string& sub, const std::string& out_dir, std::ostream& log,
                   CompareResult& res, std::map<size_t, std::string>& from);

// compare_records.cpp
// When out_dir holds a records.tar.xz (run_record.h), the records it holds of the plan's runs that
// out_dir/runs/ does not are unpacked into runs/ (each read as a merged record is and staged, then
// renamed into place; nothing else is written): the archive stands for the runs it holds, which are
// then reused, reported or retrained as run folders are. Logs how many.
void unpack_records_archive(const std::vector<ComparePlanRun>& plan, const std::string& out_dir,
                            std::ostream& log);
// --archive: writes out_dir/records.tar.xz from the records of the plan's finished runs.
void archive_records(const std::vector<ComparePlanRun>& plan, const std::vector<bool>& finished,
                     const std::string& out_dir, std::ostream& log);

// compare_run.cpp
std::string run_who(const ComparePlanRun& run);

// compare_search.cpp
// Settings as markdown: "`train.lr=0.001`, `train.warmup=10`" ("" for none).
std::string sets_text(const std::vector<std::string>& sets);
// compare.search: chooses each scheme's candidate on the validation split only (res.chosen; in
// chosen_run the runs of the candidates not chosen are false) and returns the report's section on
// the search ("" without a search).
std::string choose_candidates(const CompareSpec& spec, const std::vector<ComparePlanRun>& plan,
                              const std::vector<SearchCandidate>& candidates,
                              const std::vector<bool>& finished, std::ostream& log,
                              CompareResult& res, std::vector<bool>& chosen_run);

// compare_children.cpp
// Trains the runs `todo` (plan indexes) in child processes, at most `jobs` at once: each child is
// `exe compare CONFIG --only I` with the same --set overrides and --out, its output appended to
// runs/<run>/compare.log. A signal to this process (stop_signal()) is forwarded as SIGTERM;
// returns false when interrupted. A child that fails throws, naming the run and its log.
bool train_in_children(const CompareSpec& spec, const CompareOptions& opt,
                       const std::vector<ComparePlanRun>& plan, const std::vector<size_t>& todo,
                       int64_t jobs, const std::string& out_dir, std::ostream& log);

}  // namespace pelab::compare_detail
