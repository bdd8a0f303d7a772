// pelab — a run directory on disk (docs/training.md, "Run directory"): where it is, its lock, the
// names of its checkpoints, their rotation and the last.h5 link, and telling an old run's files
// from a live run's. The trainer decides when; this module knows the files.
//
//   <train.run_dir>/<train.run_name>/
//     .pelab.lock     flock()ed by the process that trains in it
//     config.yaml, metrics.jsonl, metrics.csv, eval.json, eval.csv, train.log, predictions_*
//     checkpoints/    step_<N>.h5, best.h5, last.h5 -> the newest step_<N>.h5, written.tsv (the
//                     index of the checkpoints this run wrote: what pruning may delete)
//
// checkpoints/ is a folder of the run's own: a symbolic link there is refused (make_own_folder),
// never written or deleted through. Pruning deletes a step_<N>.h5 only when written.tsv proves
// pelab wrote that very file there (its name, inode, size and modification time as written):
// never a file planted, copied in from another folder, or written before the index existed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"

namespace pelab {

// <train.run_dir>/<train.run_name>
std::string run_directory(const Config& cfg);
// Path of the newest checkpoint of a run directory (checkpoints/last.h5, else the highest
// step_<N>.h5), "" when there is none.
std::string latest_checkpoint(const std::string& run_dir);
// checkpoints/best.h5 when it exists, else latest_checkpoint().
std::string best_or_latest_checkpoint(const std::string& run_dir);
// True when `path` is a directory with a config.yaml (a run directory).
bool is_run_directory(const std::string& path);

// An exclusive flock() on <run>/.pelab.lock, held while the trainer runs; the kernel releases it
// when the process ends in any way (kill -9 included), so a stale lock file never blocks a run.
class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();
  // Takes the lock of `dir` (once; later calls do nothing). Throws pelab::Error naming the other
  // process's pid when it holds the lock; a planted link at the lock's path is refused.
  void acquire(const std::filesystem::path& dir);

 private:
  int fd_ = -1;
};

// checkpoints/step_<N>.h5's name.
std::string checkpoint_name(int64_t step);
// (step, path) of every step_<N>.h5, ascending.
std::vector<std::pair<int64_t, std::string>> step_checkpoints(const std::string& run_dir);
// Notes in checkpoints/written.tsv that pelab has written the checkpoint `path` (in a run's
// checkpoints/): the proof pruning asks for. `written_as`, when given, is the file as it is now,
// still under its temporary name (save_checkpoint's before_publish): the note is made before the
// file has its name, so no kill can leave a checkpoint of pelab's that it cannot prove it wrote
// (a rename keeps the inode, size and mtime the note records).
void note_written_checkpoint(const std::string& path, const std::string& written_as = "");
// Whether checkpoints/written.tsv proves that pelab wrote the file `path` as it is now.
bool wrote_checkpoint(const std::string& path);
// Removes all step_<N>.h5 but the newest `keep` and the one of `keep_step` (keep <= 0: none) that
// pelab wrote (wrote_checkpoint); any other is kept.
void rotate_checkpoints(const std::string& run_dir, int keep, int64_t keep_step);
// Throws, naming the first, when a step_<N>.h5 of a step after `step` is not one pelab wrote: a
// resume from `step` would have to delete it (remove_checkpoints_after). Nothing is changed.
void check_checkpoints_after_removable(const std::string& run_dir, int64_t step);
// Removes the step_<N>.h5 of steps after `step` (a future a resumed run no longer has); each must
// be one pelab wrote (check_checkpoints_after_removable).
void remove_checkpoints_after(const std::string& run_dir, int64_t step);
// checkpoints/last.h5 -> the newest step_<N>.h5, replaced atomically; removed when there is none.
void update_last_link(const std::string& run_dir);

// Whether `dir` holds a run's files.
bool holds_a_run(const std::filesystem::path& dir);
// A pelab run (its config.yaml has pelab's header) that never completed a checkpoint, e.g. one
// killed during its first checkpoint write: nothing to continue from, so it may be started again
// without --overwrite.
bool run_without_checkpoint(const std::filesystem::path& dir);
// Removes the files of an old run from `dir` (only the files a run writes).
void clear_run_files(const std::filesystem::path& dir);
// Removes the temporaries a killed save left in <dir>/checkpoints (see remove_stale_temporaries);
// nothing when checkpoints/ is a symbolic link.
void clean_temporaries(const std::filesystem::path& dir);

}  // namespace pelab
