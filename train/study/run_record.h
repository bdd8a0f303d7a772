// pelab — a finished run's record (docs/experiments.md, "Run records and merging"): what a
// comparison needs of a run to report it, without its weights. A run directory's record is the
// directory minus checkpoints/:
//
//   config.yaml           the resolved config (the plan's config digest is computed from it)
//   record.json           this file's one JSON object (RunRecord): pelab version, the config
//                         digest, the final step, the stamp of the checkpoint it was evaluated
//                         from (the key of the evaluation cache), and the machine that made it
//                         (host name, CPU model, BLAS kernels as `pelab --version` says)
//   eval.json, eval.csv   the trainer's final evaluation with the convergence record
//   metrics.jsonl/.csv    training curve and wall time
//   compare_eval/*.csv    the comparison's cached evaluations (per eval-time variant)
//   train.log, predictions_* (when eval.save_predictions)
//
// `pelab compare` writes record.json once a run has finished (never over an existing one: the
// machine named is the one that trained it), and reuses a run whose checkpoints/ is gone from its
// record alone. `pelab compare CONFIG --merge DIR...` copies the records of other output folders
// (slices run elsewhere) into its own --out with import_run_record(), which trusts nothing in them:
// every file is opened relative to its folder without following a symbolic link (one in the path
// refuses the merge), must be a regular file of bounded size, and record.json's values are
// range-checked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pelab {

// record.json of a run.
struct RunRecord {
  std::string pelab_version;    // version() of the pelab that trained it
  std::string config_digest;    // 16 hex digits: the run's resolved config (as --plan prints it)
  int64_t step = -1;            // the final checkpoint's step
  std::string checkpoint;       // "<file>:<size>:<mtime>" of that checkpoint (evaluation cache key)
  std::string host, cpu, blas;  // the machine that made the record
};

// The record file's name in a run directory.
inline const char* run_record_file() { return "record.json"; }

// A record of this machine and pelab (version, host, cpu, blas filled in; the rest empty).
RunRecord this_machine_record();
// One line of JSON (and a newline).
std::string run_record_json(const RunRecord& r);
// Parses record.json text; throws pelab::Error naming `where` and the field when a field is
// missing, of the wrong type or out of range (step >= 0; digest 16 hex digits; strings of
// printable ASCII, at most 300 characters; checkpoint "<file>:<size>:<mtime>").
RunRecord parse_run_record(const std::string& text, const std::string& where);
// <run_dir>/record.json read and parsed (throws as parse_run_record; "no record.json" when absent).
RunRecord read_run_record(const std::string& run_dir);

// Copies the record of run directory `name` inside the folder `root`/`rel` (`root` a merged output
// folder as the user named it, `rel` "runs" or, in a suite, "<task>/runs") to `dest` (created;
// must not exist), never following a symbolic link: no component of `rel` may be one, nor `name`,
// nor any record file or compare_eval/. Copies config.yaml, record.json, eval.json, eval.csv,
// metrics.jsonl, metrics.csv, train.log, predictions_*, compare_eval/*.csv; never checkpoints/.
// Returns false when the run folder does not exist or holds no record.json (a run not finished
// there); throws one line naming the path on a symbolic link, a file that is not a regular file or
// is larger than 256 MiB, or a read error. Never writes into `root`.
bool import_run_record(const std::string& root, const std::string& rel, const std::string& name,
                       const std::string& dest);
// The names of the entries of `root`/`rel` that hold a record.json (folders only; symbolic links
// refused as above). Empty when it does not exist.
std::vector<std::string> list_run_records(const std::string& root, const std::string& rel);

}  // namespace pelab
