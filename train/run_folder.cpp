// pelab — a run directory on disk (train/run_folder.h).
#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "pelab/error.h"
#include "train/checkpoint.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

// step_<N>.h5 -> N, or -1.
int64_t step_of(const std::string& filename) {
  const std::string pre = "step_", suf = ".h5";
  if (filename.size() <= pre.size() + suf.size() || filename.compare(0, pre.size(), pre) != 0 ||
      filename.compare(filename.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string num = filename.substr(pre.size(), filename.size() - pre.size() - suf.size());
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(num);
}

}  // namespace

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

void RunDirLock::acquire(const fs::path& dir) {
  if (fd_ >= 0) return;
  const std::string path = (dir / ".pelab.lock").string();
  const int fd = open_for_writing(path, O_RDWR | O_CREAT, 0644);  // a planted link: refused
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    ::close(fd);
    PELAB_CHECK(err == EWOULDBLOCK, "cannot lock ", path, ": ", std::strerror(err));
    fail("run directory ", dir.string(), " is in use by another pelab process",
         pid.empty() ? std::string() : " (pid " + pid + ")",
         "; wait for it to finish or stop it first");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the message of a second process; the lock itself is held.
  }
  fd_ = fd;
}

std::vector<std::pair<int64_t, std::string>> step_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_regular_file(ec)) out.emplace_back(s, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string checkpoint_name(int64_t step) { return "step_" + std::to_string(step) + ".h5"; }

void rotate_checkpoints(const std::string& run_dir, int keep, int64_t keep_step) {
  if (keep <= 0) return;
  std::error_code ec;
  auto all = step_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (all[i].first != keep_step) fs::remove(all[i].second, ec);
}

void remove_checkpoints_after(const std::string& run_dir, int64_t step) {
  std::error_code ec;
  for (const auto& [s, p] : step_checkpoints(run_dir))
    if (s > step) fs::remove(p, ec);
}

// A new link renamed over the old one.
void update_last_link(const std::string& run_dir) {
  const fs::path ckdir = fs::path(run_dir) / "checkpoints";
  const auto all = step_checkpoints(run_dir);
  std::error_code ec;
  if (all.empty()) {
    fs::remove(ckdir / "last.h5", ec);
    return;
  }
  const fs::path tmp = ckdir / "last.h5.tmp";
  fs::remove(tmp, ec);
  fs::create_symlink(fs::path(all.back().second).filename(), tmp, ec);
  if (!ec) fs::rename(tmp, ckdir / "last.h5", ec);
  // A stale last.h5 would make the next resume continue from an older checkpoint.
  PELAB_CHECK(!ec, "cannot point ", (ckdir / "last.h5").string(), " at ",
              fs::path(all.back().second).filename().string(), ": ", ec.message());
}

// Removes the files of an old run from `dir` (only the files a run writes).
void clear_run_files(const fs::path& dir) {
  std::error_code ec;
  for (const char* f : {"config.yaml", "metrics.jsonl", "metrics.csv", "eval.json", "eval.csv",
                        "train.log"})
    fs::remove(dir / f, ec);
  fs::remove_all(dir / "checkpoints", ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("predictions_", 0) == 0) fs::remove(e.path(), ec);
  }
}

bool holds_a_run(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "metrics.jsonl", ec) || fs::exists(dir / "checkpoints", ec) ||
         fs::exists(dir / "config.yaml", ec);
}

// A pelab run (its config.yaml has pelab's header) that never completed a checkpoint, e.g. one killed
// during its first checkpoint write: nothing to continue from, so it may be started again without
// --overwrite.
bool run_without_checkpoint(const fs::path& dir) {
  std::error_code ec;
  std::ifstream cfg(dir / "config.yaml");
  std::string first;
  std::getline(cfg, first);
  if (first.rfind("# pelab run config", 0) != 0 || !fs::is_directory(dir / "checkpoints", ec) ||
      fs::exists(dir / "checkpoints" / "best.h5", ec) || !step_checkpoints(dir.string()).empty())
    return false;
  // A temporary still there after clean_temporaries belongs to a live process: a run saving now.
  for (const auto& e : fs::directory_iterator(dir / "checkpoints", ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return false;
  return true;
}

// Removes the temporaries a killed save left in <dir>/checkpoints (see remove_stale_temporaries).
void clean_temporaries(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir / "checkpoints", ec)) remove_stale_temporaries((dir / "checkpoints").string());
}

std::string run_directory(const Config& cfg) {
  return (fs::path(cfg.train.run_dir) / cfg.train.run_name).string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  const fs::path last = fs::path(run_dir) / "checkpoints" / "last.h5";
  if (fs::exists(last, ec)) {  // exists() follows the link; name the file it points to
    if (fs::is_symlink(last, ec)) {
      const fs::path target = fs::read_symlink(last, ec);
      if (!ec) return (target.is_absolute() ? target : last.parent_path() / target).string();
    }
    return last.string();
  }
  auto all = step_checkpoints(run_dir);
  return all.empty() ? "" : all.back().second;
}

std::string best_or_latest_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  const fs::path best = fs::path(run_dir) / "checkpoints" / "best.h5";
  if (fs::exists(best, ec)) return best.string();
  return latest_checkpoint(run_dir);
}

bool is_run_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.yaml", ec);
}

}  // namespace pelab
