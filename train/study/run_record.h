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
// (slices run elsewhere) into its own --out with read_run_record_files(), which trusts nothing in
// them: every file is opened relative to its folder without following a symbolic link (one in the
// path refuses the merge), must be a regular file, and what a merge reads is bounded
// (RecordReadLimits); the merge then checks every file in memory before it writes a copy. A folder
// may also keep its records as one file, records.tar.xz (below), read as untrustingly
// (RunRecordSource).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
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

// Bounds on what `pelab compare --merge` reads from the folders it is given (docs/experiments.md,
// "Run records and merging"): a received folder must not exhaust memory or disk.
struct RecordReadLimits {
  int64_t file_bytes = int64_t{256} << 20;     // one record file
  int64_t record_bytes = int64_t{1} << 30;     // one record's files together (held in memory)
  int64_t total_files = 100000;                // files one merge reads in all
  int64_t total_bytes = int64_t{16} << 30;     // bytes one merge reads in all
  int64_t folder_entries = 100000;             // names in one folder listed (runs/, a run's)
};
// Sets the limits in force (RecordReadLimits{} until set; tests lower them); returns the previous.
RecordReadLimits set_record_read_limits(const RecordReadLimits& limits);
// What one merge has read so far (counted against RecordReadLimits' totals).
struct RecordReadBudget {
  int64_t files = 0, bytes = 0;
  bool exhausted = false;  // a total limit was reached: the merge reads nothing more
};

// One run's record read into memory: the run folder as the user's path names it (every message
// names files by it) and its files, relative name ("eval.json", "compare_eval/base.csv") -> text.
struct RecordFiles {
  std::string src;
  std::vector<std::pair<std::string, std::string>> files;
  const std::string* find(const std::string& rel) const;  // null when the record has no such file
  std::string path(const std::string& rel) const { return src + "/" + rel; }
};

// Reads the record of run directory `name` inside the folder `root`/`rel` (`root` a merged output
// folder as the user named it, `rel` "runs" or, in a suite, "<task>/runs") into `out`, never
// following a symbolic link: no component of `rel` may be one, nor `name`, nor any record file or
// compare_eval/. Reads config.yaml, record.json, eval.json, eval.csv, metrics.jsonl, metrics.csv,
// train.log, predictions_*, compare_eval/*.csv; never checkpoints/. Returns false when the run
// folder does not exist or holds no record.json (a run not finished there); throws one line naming
// the path on a symbolic link, a file that is not a regular file, a read error, or a limit of
// RecordReadLimits passed (`budget` counts the merge's reads). Writes nothing.
bool read_run_record_files(const std::string& root, const std::string& rel, const std::string& name,
                           RecordReadBudget& budget, RecordFiles& out);
// Writes the files of `rec` into `dest` (created; must not exist).
void write_run_record_files(const RecordFiles& rec, const std::string& dest);
// Copies the record of run directory `name` inside `root`/`rel` to `dest` (created; must not
// exist): read_run_record_files with one record's limits, then write_run_record_files. False when
// there is none there. Never writes into `root`.
bool import_run_record(const std::string& root, const std::string& rel, const std::string& name,
                       const std::string& dest);
// The names of the entries of `root`/`rel` that hold a record.json (folders only; symbolic links
// refused as above). Empty when it does not exist.
std::vector<std::string> list_run_records(const std::string& root, const std::string& rel);
// The record files of run directory `name` in `root`/`rel`, read as import_run_record reads them
// (relative name -> contents), before anything is written; *found false (and nothing read) when
// the run folder does not exist or holds no record.json.
std::vector<std::pair<std::string, std::string>> read_run_record_files(const std::string& root,
                                                                       const std::string& rel,
                                                                       const std::string& name,
                                                                       bool* found);

// ---- records.tar.xz: a comparison folder's run records in one file ----
//
// A comparison folder may hold its runs' records as one xz-compressed tar file, records.tar.xz,
// members runs/<run>/<record file> (tar_xz.h): what `pelab compare --archive` writes and what the
// published studies in docs/results/ keep instead of their runs/ folders. It holds each run's
// record less the files derived from the others (derived_record_file): every report, reuse and
// merge reads only config.yaml, record.json, eval.json, metrics.jsonl, compare_eval/*.csv (and
// predictions_*, when saved).
inline const char* records_archive_file() { return "records.tar.xz"; }

// Files of a record that restate another one and that no report reads, left out of
// records.tar.xz: metrics.csv (metrics.jsonl's rows as CSV), eval.csv (eval.json's results as
// CSV) and train.log (the progress lines of metrics.jsonl at 4 digits, under a header that
// config.yaml and record.json hold).
bool derived_record_file(const std::string& name);

// Writes <dir>/records.tar.xz (atomically; replacing one) from the records of the runs `names` in
// <dir>/runs/ (read as read_run_record_files reads them, derived files left out; members in name
// order, so the same records give the same bytes). Throws naming a run without a record. Returns
// the archive's size in bytes.
int64_t write_records_archive(const std::string& dir, std::vector<std::string> names);

// The run records of one comparison folder `root`/`sub` (`sub` "" or a suite's task folder, opened
// without following a link as list_run_records does): the run folders of its runs/ (unless
// `with_folder` is false) and, for the runs runs/ does not hold, the records of its
// records.tar.xz. The archive is read whole when this is made, as untrusted as a merged folder
// (tar_xz.h: regular files and folders only, relative names without '..', sizes bounded before
// anything is allocated) and holding nothing but record files (runs/<run>/<record file>,
// runs/<run>/compare_eval/*.csv); anything else throws one line naming the archive and member.
class RunRecordSource {
 public:
  RunRecordSource(const std::string& root, const std::string& sub, bool with_folder = true);
  // The runs with a record (a record.json), sorted.
  const std::vector<std::string>& names() const { return names_; }
  // Whether run `name`'s record comes from the archive.
  bool archived(const std::string& name) const;
  // Where run `name`'s record is, for messages: "<root>/<sub>/runs/<name>", or
  // "<root>/<sub>/records.tar.xz:runs/<name>" for an archived one.
  std::string origin(const std::string& name) const;
  // Copies run `name`'s record into `dest` (created; must not exist) as import_run_record does;
  // false when there is none.
  bool copy(const std::string& name, const std::string& dest) const;
  // Reads run `name`'s record into `out` (out.src its origin(), every message naming files by
  // it), within RecordReadLimits, counted in `budget`; false when there is none. Writes nothing.
  bool read(const std::string& name, RecordReadBudget& budget, RecordFiles& out) const;

 private:
  std::string root_, sub_, archive_;
  std::set<std::string> folder_;  // runs/ entries with a record
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> archived_;
  std::vector<std::string> names_;
};

}  // namespace pelab
