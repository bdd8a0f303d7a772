// pelab — run records (run_record.h).
#include "train/study/run_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "pelab/blas_kernels.h"
#include "pelab/error.h"
#include "pelab/pelab.h"
#include "pelab/strings.h"
#include "train/command_line.h"
#include "train/metrics.h"
#include "train/study/tar_xz.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

constexpr size_t kMaxText = 300;  // a record string's longest length

RecordReadLimits& limits() {
  static RecordReadLimits l;
  return l;
}

// Printable ASCII only (the values reach report.md), at most kMaxText characters.
bool printable(const std::string& s) {
  if (s.size() > kMaxText) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

// `s` made printable (non-printable bytes as '?', cut to kMaxText): for the values this machine
// records about itself.
std::string printable_text(std::string s) {
  if (s.size() > kMaxText) s.resize(kMaxText);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return trim(s);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return trim(line.substr(colon + 1));
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// The system's reason for errno `e`.
std::string reason(int e) { return std::strerror(e); }

// Opens `name` inside the folder `dirfd` without following a symbolic link; -1 (errno set) when it
// does not exist. `what` is the path for messages.
int open_no_follow(int dirfd, const std::string& name, bool directory, const std::string& what) {
  const int fd =
      ::openat(dirfd, name.c_str(),
               O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (directory ? O_DIRECTORY : 0));
  if (fd >= 0) return fd;
  const int e = errno;
  if (e == ENOENT) return -1;
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    throw Error(what +
                " is a symbolic link; pelab never follows one in a merged folder: "
                "replace it with the file itself");
  if (e == ENOTDIR) throw Error(what + " is not a folder");
  throw Error("cannot open " + what + ": " + reason(e));
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// The whole regular file `name` in folder `dirfd` (no symbolic link, at most
// RecordReadLimits::file_bytes), counted in `budget`.
std::string read_no_follow(int dirfd, const std::string& name, const std::string& what,
                           RecordReadBudget& budget) {
  const RecordReadLimits& lim = limits();
  Fd f(open_no_follow(dirfd, name, false, what));
  if (f.fd < 0) throw Error("cannot read " + what + ": " + reason(ENOENT));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error("cannot read " + what + ": " + reason(errno));
  if (!S_ISREG(st.st_mode)) throw Error(what + " is not a regular file; a record holds only files");
  auto too_big = [&](int64_t size) {
    if (size > lim.file_bytes)
      throw Error(what + " is " + std::to_string(size) + " bytes or more, more than a record file may be (" +
                  std::to_string(lim.file_bytes) + ")");
    if (budget.bytes + size > lim.total_bytes) {
      budget.exhausted = true;
      throw Error("reading " + what + " passes the limit of " + std::to_string(lim.total_bytes) +
                  " bytes one merge reads in all; merge the folders in parts (a merged folder "
                  "can be merged again)");
    }
  };
  too_big(st.st_size);
  if (++budget.files > lim.total_files) {
    budget.exhausted = true;
    throw Error("reading " + what + " passes the limit of " + std::to_string(lim.total_files) +
                " files one merge reads in all; merge the folders in parts (a merged folder can "
                "be merged again)");
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot read " + what + ": " + reason(errno));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    too_big(static_cast<int64_t>(text.size()));  // (a file growing while read)
  }
  budget.bytes += static_cast<int64_t>(text.size());
  return text;
}

// The names in folder `fd` (not "." / ".."), sorted; at most RecordReadLimits::folder_entries.
std::vector<std::string> folder_names(int fd, const std::string& what) {
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) throw Error("cannot list " + what + ": " + reason(errno));
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    throw Error("cannot list " + what + ": " + reason(errno));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (static_cast<int64_t>(names.size()) >= limits().folder_entries) {
      ::closedir(d);
      throw Error(what + " holds more than " + std::to_string(limits().folder_entries) +
                  " entries, more than pelab lists in a merged folder");
    }
    names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Opens the folder `rel` (a relative path, e.g. "task/runs") inside the folder `root` — `root` as
// the user named it, every component of `rel` without following a symbolic link —; -1 when a
// component does not exist. Throws naming the component that is a link or not a folder.
int open_inside(const std::string& root, const std::string& rel) {
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    throw Error("cannot open " + root + ": " + reason(errno));
  }
  fs::path at = root;
  for (const auto& part : fs::path(rel)) {
    if (part.empty() || part == ".") continue;
    at /= part;
    if (part == "..") {
      ::close(fd);
      throw Error(at.string() + ": '..' in a merged folder's path");
    }
    int next = -1;
    try {
      next = open_no_follow(fd, part.string(), true, at.string());
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    if (next < 0) return -1;
    fd = next;
  }
  return fd;
}

bool record_file_name(const std::string& n) {
  static const char* const kFiles[] = {"config.yaml",   "record.json", "eval.json", "eval.csv",
                                       "metrics.jsonl", "metrics.csv", "train.log"};
  for (const char* f : kFiles)
    if (n == f) return true;
  return n.rfind("predictions_", 0) == 0;
}

// Writes a record's files (relative name -> text) into `dest`, which is created and must not exist.
void write_record_files(const std::vector<std::pair<std::string, std::string>>& files,
                        const std::string& dest) {
  std::error_code ec;
  PELAB_CHECK(!fs::exists(fs::symlink_status(dest, ec)), "import: ", dest, " already exists");
  fs::create_directories(fs::path(dest) / "compare_eval", ec);
  PELAB_CHECK(!ec, "cannot create ", dest, ": ", ec.message());
  for (const auto& [rel, text] : files) write_text_file((fs::path(dest) / rel).string(), text);
}

}  // namespace

RunRecord this_machine_record() {
  RunRecord r;
  r.pelab_version = printable_text(version());
  r.host = printable_text(host_name());
  r.cpu = printable_text(cpu_model());
  r.blas = printable_text(blas_kernels_summary());
  return r;
}

std::string run_record_json(const RunRecord& r) {
  MetricRow row;
  row.set("pelab_version", r.pelab_version)
      .set("config_digest", r.config_digest)
      .set("step", r.step)
      .set("checkpoint", r.checkpoint)
      .set("host", r.host)
      .set("cpu", r.cpu)
      .set("blas", r.blas);
  return row.json() + "\n";
}

RunRecord parse_run_record(const std::string& text, const std::string& where) {
  const std::string t = trim(text);
  PELAB_CHECK(t.find('\n') == std::string::npos, where, ": a record is one line of JSON");
  const MetricRow row = parse_metric_row(t, where);
  auto str = [&](const char* key) {
    const MetricValue* v = row.get(key);
    PELAB_CHECK(v && v->kind == MetricValue::Kind::Str, where, ": ", key,
                " is missing or not a string");
    PELAB_CHECK(printable(v->s), where, ": ", key, " must be printable ASCII of at most ", kMaxText,
                " characters");
    return v->s;
  };
  RunRecord r;
  r.pelab_version = str("pelab_version");
  PELAB_CHECK(!r.pelab_version.empty(), where, ": pelab_version is empty");
  r.config_digest = str("config_digest");
  PELAB_CHECK(r.config_digest.size() == 16 &&
                  r.config_digest.find_first_not_of("0123456789abcdef") == std::string::npos,
              where, ": config_digest must be 16 hex digits, got '", r.config_digest, "'");
  const MetricValue* step = row.get("step");
  PELAB_CHECK(step && step->kind == MetricValue::Kind::Int && step->i >= 0, where,
              ": step must be an integer >= 0");
  r.step = step->i;
  r.checkpoint = str("checkpoint");
  {
    // "<file>:<size>:<mtime>", the file a step_<N>.h5 name.
    const size_t a = r.checkpoint.find(':');
    const size_t b = a == std::string::npos ? a : r.checkpoint.find(':', a + 1);
    int64_t size = 0, mtime = 0;
    const bool ok = b != std::string::npos && a > 0 &&
                    parse_whole_number(r.checkpoint.substr(a + 1, b - a - 1), size) &&
                    parse_whole_number(r.checkpoint.substr(b + 1), mtime) &&
                    r.checkpoint.substr(0, a).find('/') == std::string::npos;
    PELAB_CHECK(ok, where, ": checkpoint must be <file>:<size>:<mtime>, got '", r.checkpoint, "'");
  }
  r.host = str("host");
  r.cpu = str("cpu");
  r.blas = str("blas");
  return r;
}

RunRecord read_run_record(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / run_record_file()).string();
  std::error_code ec;
  PELAB_CHECK(fs::is_regular_file(fs::symlink_status(path, ec)), path,
              ": no record (a regular file record.json)");
  return parse_run_record(read_text_file(path), path);
}

std::vector<std::string> list_run_records(const std::string& root, const std::string& rel) {
  const std::string runs_dir = (fs::path(root) / rel).string();
  Fd runs(open_inside(root, rel));
  if (runs.fd < 0) return {};
  std::vector<std::string> out;
  for (const auto& n : folder_names(runs.fd, runs_dir)) {
    const std::string what = (fs::path(runs_dir) / n).string();
    struct stat st {};
    if (::fstatat(runs.fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(st.st_mode))
      throw Error(what +
                  " is a symbolic link; pelab never follows one in a merged folder: "
                  "replace it with the folder itself");
    if (!S_ISDIR(st.st_mode)) continue;
    Fd run(open_no_follow(runs.fd, n, true, what));
    if (run.fd < 0) continue;
    struct stat rs {};
    if (::fstatat(run.fd, run_record_file(), &rs, AT_SYMLINK_NOFOLLOW) == 0) out.push_back(n);
  }
  return out;
}

const std::string* RecordFiles::find(const std::string& rel) const {
  for (const auto& [n, text] : files)
    if (n == rel) return &text;
  return nullptr;
}

RecordReadLimits set_record_read_limits(const RecordReadLimits& l) {
  const RecordReadLimits old = limits();
  limits() = l;
  return old;
}

bool read_run_record_files(const std::string& root_dir, const std::string& rel,
                           const std::string& name, RecordReadBudget& budget, RecordFiles& out) {
  const std::string runs_dir = (fs::path(root_dir) / rel).string();
  Fd root(open_inside(root_dir, rel));
  if (root.fd < 0) return {};
  const std::string src = (fs::path(runs_dir) / name).string();
  Fd run(open_no_follow(root.fd, name, true, src));
  if (run.fd < 0) return {};
  {
    struct stat st {};
    if (::fstatat(run.fd, run_record_file(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
  }
  out.src = src;
  out.files.clear();
  int64_t bytes = 0;  // this record's, held in memory at once
  auto add = [&](const std::string& rel_name, std::string text, const std::string& what) {
    bytes += static_cast<int64_t>(text.size());
    if (bytes > limits().record_bytes)
      throw Error("reading " + what + " passes the limit of " +
                  std::to_string(limits().record_bytes) + " bytes one record may hold");
    out.files.emplace_back(rel_name, std::move(text));
  };
  for (const auto& n : folder_names(run.fd, src)) {
    const std::string what = (fs::path(src) / n).string();
    if (n == "compare_eval") {
      Fd ev(open_no_follow(run.fd, n, true, what));
      if (ev.fd < 0) continue;
      for (const auto& f : folder_names(ev.fd, what)) {
        if (f.size() < 5 || f.compare(f.size() - 4, 4, ".csv") != 0) continue;
        const std::string fw = (fs::path(what) / f).string();
        add("compare_eval/" + f, read_no_follow(ev.fd, f, fw, budget), fw);
      }
      continue;
    }
    if (!record_file_name(n)) continue;  // checkpoints/, the lock, compare.log, strangers
    add(n, read_no_follow(run.fd, n, what, budget), what);
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> read_run_record_files(const std::string& root_dir,
                                                                       const std::string& rel,
                                                                       const std::string& name,
                                                                       bool* found) {
  RecordReadBudget budget;  // (one record: the per-file and per-record limits)
  RecordFiles rf;
  *found = read_run_record_files(root_dir, rel, name, budget, rf);
  return std::move(rf.files);
}

void write_run_record_files(const RecordFiles& rec, const std::string& dest) {
  write_record_files(rec.files, dest);
}

bool import_run_record(const std::string& root_dir, const std::string& rel, const std::string& name,
                       const std::string& dest) {
  // Read everything first: nothing is written when a file is refused.
  bool found = false;
  const auto files = read_run_record_files(root_dir, rel, name, &found);
  if (!found) return false;
  write_record_files(files, dest);
  return true;
}

// ---------------- records.tar.xz ----------------

namespace {

// "" when `name` is a member records.tar.xz may hold (runs/<run>/<record file>,
// runs/<run>/compare_eval/<x>.csv and the folders above them); else why not.
std::string archive_member_problem(const std::string& name, bool folder) {
  std::vector<std::string> parts;
  for (size_t a = 0;;) {
    const size_t b = name.find('/', a);
    parts.push_back(name.substr(a, b == std::string::npos ? b : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  const bool ok =
      parts[0] == "runs" &&
      (folder ? parts.size() <= 2 || (parts.size() == 3 && parts[2] == "compare_eval")
              : (parts.size() == 3 && parts[2] != "compare_eval" && record_file_name(parts[2])) ||
                    (parts.size() == 4 && parts[2] == "compare_eval" && parts[3].size() > 4 &&
                     parts[3].compare(parts[3].size() - 4, 4, ".csv") == 0));
  if (ok) return "";
  return std::string("not a ") + (folder ? "folder" : "file") +
         " of a run record (runs/RUN/ holding config.yaml, record.json, eval.json, eval.csv, "
         "metrics.jsonl, metrics.csv, train.log, predictions_*, compare_eval/*.csv)";
}

}  // namespace

bool derived_record_file(const std::string& name) {
  return name == "metrics.csv" || name == "eval.csv" || name == "train.log";
}

RunRecordSource::RunRecordSource(const std::string& root, const std::string& sub,
                                 bool with_folder)
    : root_(root), sub_(sub) {
  const std::string rel = (fs::path(sub) / "runs").string();
  if (with_folder)
    for (const auto& n : list_run_records(root, rel)) folder_.insert(n);
  const fs::path dir = sub.empty() ? fs::path(root) : fs::path(root) / sub;
  archive_ = (dir / records_archive_file()).string();
  Fd parent(open_inside(root, sub));
  Fd file(parent.fd < 0 ? -1 : open_no_follow(parent.fd, records_archive_file(), false, archive_));
  if (file.fd >= 0) {
    struct stat st {};
    PELAB_CHECK(::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode), archive_,
                " is not a regular file");
    TarLimits tl;
    tl.member_bytes = limits().file_bytes;
    for (auto& m : read_tar_xz(file.fd, archive_, tl, archive_member_problem)) {
      // runs/<run>/<file>
      const size_t a = m.name.find('/') + 1, b = m.name.find('/', a);
      archived_[m.name.substr(a, b - a)].emplace_back(m.name.substr(b + 1), std::move(m.data));
    }
  }
  std::set<std::string> all = folder_;
  for (const auto& [run, files] : archived_)
    for (const auto& f : files)
      if (f.first == run_record_file()) all.insert(run);  // a record: it holds record.json
  names_.assign(all.begin(), all.end());
}

bool RunRecordSource::archived(const std::string& name) const {
  return !folder_.count(name) && archived_.count(name);
}

std::string RunRecordSource::origin(const std::string& name) const {
  if (archived(name)) return tar_member_where(archive_, "runs/" + name);
  return (fs::path(root_) / sub_ / "runs" / name).string();
}

bool RunRecordSource::read(const std::string& name, RecordReadBudget& budget,
                           RecordFiles& out) const {
  if (!archived(name))
    return folder_.count(name) &&
           read_run_record_files(root_, (fs::path(sub_) / "runs").string(), name, budget, out);
  const auto& files = archived_.at(name);
  bool has_record = false;
  for (const auto& f : files) has_record |= f.first == run_record_file();
  if (!has_record) return false;
  out.src = origin(name);
  out.files.clear();
  int64_t bytes = 0;
  for (const auto& [rel, text] : files) {
    const std::string what = out.path(rel);
    const int64_t size = static_cast<int64_t>(text.size());
    bytes += size;
    if (size > limits().file_bytes)
      throw Error(what + " is " + std::to_string(size) + " bytes or more, more than a record " +
                  "file may be (" + std::to_string(limits().file_bytes) + ")");
    if (bytes > limits().record_bytes)
      throw Error("reading " + what + " passes the limit of " +
                  std::to_string(limits().record_bytes) + " bytes one record may hold");
    if (++budget.files > limits().total_files || budget.bytes + size > limits().total_bytes) {
      budget.exhausted = true;
      throw Error("reading " + what + " passes the limit of " +
                  (budget.files > limits().total_files
                       ? std::to_string(limits().total_files) + " files"
                       : std::to_string(limits().total_bytes) + " bytes") +
                  " one merge reads in all; merge the folders in parts (a merged folder can be "
                  "merged again)");
    }
    budget.bytes += size;
    out.files.emplace_back(rel, text);
  }
  return true;
}

bool RunRecordSource::copy(const std::string& name, const std::string& dest) const {
  if (!archived(name))
    return folder_.count(name) &&
           import_run_record(root_, (fs::path(sub_) / "runs").string(), name, dest);
  const auto& files = archived_.at(name);
  bool has_record = false;
  for (const auto& f : files) has_record |= f.first == run_record_file();
  if (!has_record) return false;
  write_record_files(files, dest);
  return true;
}

int64_t write_records_archive(const std::string& dir, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::vector<TarMember> members;
  for (const auto& n : names) {
    bool found = false;
    for (auto& [rel, text] : read_run_record_files(dir, "runs", n, &found))
      if (!derived_record_file(rel)) members.push_back({"runs/" + n + "/" + rel, std::move(text)});
    PELAB_CHECK(found, (fs::path(dir) / "runs" / n).string(),
                ": no record (record.json) to archive");
  }
  const std::string bytes = tar_xz_bytes(members);
  write_text_file((fs::path(dir) / records_archive_file()).string(), bytes);
  return static_cast<int64_t>(bytes.size());
}

}  // namespace pelab
