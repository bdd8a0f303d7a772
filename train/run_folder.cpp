// pelab — a run directory on disk (train/run_folder.h).
#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pelab/error.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
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

namespace {

constexpr const char* kWrittenIndex = "written.tsv";
constexpr off_t kMaxWrittenIndex = off_t{16} << 20;  // larger: not pelab's, proves nothing

// "<name>\t<inode>\t<size>\t<mtime_ns>" of the regular file `path` ("" when it is none), named
// `name` (default: path's own file name).
std::string identity_line(const std::string& path, const std::string& name = "") {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  const long long mtime =
      static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  return (name.empty() ? fs::path(path).filename().string() : name) + "\t" +
         std::to_string(st.st_ino) + "\t" + std::to_string(st.st_size) + "\t" +
         std::to_string(mtime);
}

// The lines of checkpoints/written.tsv in `ckdir` (none when it is missing, not a regular file or
// too large to be pelab's).
std::vector<std::string> written_lines(const fs::path& ckdir) {
  const std::string index = (ckdir / kWrittenIndex).string();
  struct stat st {};
  if (::lstat(index.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxWrittenIndex)
    return {};
  std::vector<std::string> lines;
  std::istringstream in(read_text_file(index));
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') lines.push_back(l);
  return lines;
}

// Deletes the checkpoint `path` when pelab wrote it (wrote_checkpoint); false when it is kept.
bool remove_written(const std::string& path) {
  if (!wrote_checkpoint(path)) return false;
  std::error_code ec;
  fs::remove(path, ec);
  return !ec;
}

// Rewrites written.tsv with the lines of the files still there as written (it would otherwise grow
// by a line per checkpoint for ever).
void compact_written_index(const fs::path& ckdir) {
  std::string text = "# pelab: the checkpoints this run wrote here (name, inode, size, mtime_ns);"
                     " pruning deletes only these\n";
  size_t kept = 0, had = 0;
  for (const auto& l : written_lines(ckdir)) {
    ++had;
    const std::string name = l.substr(0, l.find('\t'));
    if (name.find('/') == std::string::npos && identity_line((ckdir / name).string()) == l) {
      text += l + "\n";
      ++kept;
    }
  }
  if (kept != had) write_text_file((ckdir / kWrittenIndex).string(), text);
}

}  // namespace

void note_written_checkpoint(const std::string& path, const std::string& written_as) {
  const std::string line = identity_line(written_as.empty() ? path : written_as,
                                         fs::path(path).filename().string());
  PELAB_CHECK(!line.empty(), "cannot note the checkpoint ", path, ": not a regular file");
  append_to_file((fs::path(path).parent_path() / kWrittenIndex).string(), line + "\n");
}

bool wrote_checkpoint(const std::string& path) {
  const std::string line = identity_line(path);
  if (line.empty()) return false;
  const std::vector<std::string> lines = written_lines(fs::path(path).parent_path());
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

void rotate_checkpoints(const std::string& run_dir, int keep, int64_t keep_step) {
  if (keep <= 0) return;
  const fs::path ckdir = fs::path(run_dir) / "checkpoints";
  if (!own_folder_exists(ckdir.string())) return;  // (a link: refused)
  auto all = step_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (all[i].first != keep_step) remove_written(all[i].second);
  compact_written_index(ckdir);
}

void check_checkpoints_after_removable(const std::string& run_dir, int64_t step) {
  if (!own_folder_exists((fs::path(run_dir) / "checkpoints").string())) return;
  for (const auto& [s, p] : step_checkpoints(run_dir))
    PELAB_CHECK(s <= step || wrote_checkpoint(p), "--resume ", run_dir, ": ", p,
                " is newer than the checkpoint resumed from (step ", step,
                ") and would be deleted, but pelab cannot tell that it wrote it (it is not in "
                "checkpoints/", kWrittenIndex, "): move it out of checkpoints/ and resume again");
}

void remove_checkpoints_after(const std::string& run_dir, int64_t step) {
  check_checkpoints_after_removable(run_dir, step);
  for (const auto& [s, p] : step_checkpoints(run_dir))
    if (s > step) PELAB_CHECK(remove_written(p), "cannot remove ", p);
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
  // Never through a link (its target's temporaries are not ours).
  if (fs::is_directory(fs::symlink_status(dir / "checkpoints", ec)))
    remove_stale_temporaries((dir / "checkpoints").string());
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
