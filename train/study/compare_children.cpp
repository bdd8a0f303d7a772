// pelab — training a comparison's runs in child processes (`pelab compare --jobs N`, compare.h):
// each run is `pelab compare CONFIG --only I` with its output in runs/<run>/compare.log, at most
// N at once, one progress line per run, a signal forwarded to every child.
#include "train/study/compare.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "pelab/clock.h"
#include "pelab/strings.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/study/compare_internal.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace compare_detail;

namespace {

std::string g_child_binary;  // set_compare_child_binary()

// open(path, flags | O_CLOEXEC) on a descriptor >= 3 (so that the child's dup2 onto 0, 1 and 2
// cannot clobber it, and no other child inherits it); -1 with *err = errno on failure.
int open_high_cloexec(const char* path, int flags, int* err) {
  int fd = ::open(path, flags | O_CLOEXEC, 0644);
  if (fd >= 0 && fd <= 2) {
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    *err = errno;
    ::close(fd);
    fd = moved;
  } else if (fd < 0) {
    *err = errno;
  }
  return fd;
}

// Starts `exe args...` with stdin /dev/null and stdout + stderr appended to `log_path`, SIGINT and
// SIGTERM at their defaults and no signal blocked. The child dies with this process: it asks the
// kernel for SIGTERM when its parent ends (PR_SET_PDEATHSIG; a pelab child stops at a checkpoint),
// so a `kill -9` of the comparison leaves no run training as an orphan that holds its run
// directory's lock. (The signal follows the thread that forks: call this from the thread that
// outlives the children, as run_compare's caller does.)
pid_t spawn_child(const std::string& exe, const std::vector<std::string>& args,
                  const std::string& log_path) {
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Everything the child needs is made here: between fork and exec it only makes system calls.
  int in_errno = 0, out_errno = 0;
  const int in = open_high_cloexec("/dev/null", O_RDONLY, &in_errno);
  const int out =
      open_high_cloexec(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, &out_errno);
  int report[2] = {-1, -1};  // the child writes exec's errno here; closed by a successful exec
  if (in < 0 || out < 0 || ::pipe2(report, O_CLOEXEC) != 0) {
    const int e = in < 0 ? in_errno : out < 0 ? out_errno : errno;
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    fail("compare: cannot start ", exe, ": ",
         in < 0 ? "/dev/null: " : out < 0 ? log_path + ": " : "", std::strerror(e));
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigset_t none;
  sigemptyset(&none);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);  // before PDEATHSIG: a TERM before exec ends the child
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(143);  // the parent died before the request took effect
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::execve(exe.c_str(), argv.data(), environ);
    const int e = errno;
    if (::write(report[1], &e, sizeof e) < 0) {
    }
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(in);
  ::close(out);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    fail("compare: cannot start ", exe, ": ", std::strerror(fork_errno));
  }
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(report[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    fail("compare: cannot start ", exe, ": ", std::strerror(exec_errno));
  }
  return pid;
}

// The newest train row of a run's metrics.jsonl (its last 16 KiB): step and loss; false if none.
bool latest_train_row(const std::string& run_dir, int64_t& step, double& loss) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl", std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 16384);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream lines(text);
  std::string line;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.find("\"train\"") == std::string::npos) continue;
    try {
      const MetricRow row = parse_metric_row(line, "metrics.jsonl");
      const MetricValue* t = row.get("type");
      const MetricValue* s = row.get("step");
      const MetricValue* l = row.get("loss");
      if (!t || t->s != "train" || !s || s->kind != MetricValue::Kind::Int) continue;
      step = s->i;
      loss = l && l->kind == MetricValue::Kind::Num ? l->d : std::nan("");
      found = true;
    } catch (const std::exception&) {
      // a line cut by the 16 KiB window or being written: skip it
    }
  }
  return found;
}

std::string elapsed_text(double s) {
  const int64_t t = static_cast<int64_t>(s);
  char buf[32];
  if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

// The reason a child gave for failing: the text of the last "pelab: error: " line it wrote to its
// log from byte `from` on (its own run; the log is appended to by every run of the folder), "" if
// none. The parent's message carries it, so that "run directory ... is in use by another pelab
// process (pid N)" is not only in the log.
std::string child_error(const std::string& log_path, std::uintmax_t from) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start =
      std::max<std::streamoff>(static_cast<std::streamoff>(from), size - 65536);
  if (size <= start) return "";
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string mark = "pelab: error: ";
  size_t at = text.rfind("\n" + mark);
  at = at == std::string::npos ? (text.rfind(mark, 0) == 0 ? 0 : at) : at + 1;
  if (at == std::string::npos) return "";
  std::string line = text.substr(at + mark.size(), text.find('\n', at) - at - mark.size());
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > 1000) line = line.substr(0, 1000) + " ...";
  return line;
}

// The children of a comparison trained in child processes: each started as `exe compare CONFIG
// --only I` (the same --set overrides and --out; output appended to runs/<run>/compare.log),
// reaped when it ends, stopped together (SIGTERM) on a signal or a failure, and shown as one
// progress line per run (a block redrawn on a terminal, else event lines).
class ChildPool {
 public:
  ChildPool(const CompareSpec& spec, const CompareOptions& opt,
            const std::vector<ComparePlanRun>& plan, const std::string& out_dir, std::ostream& log)
      : spec_(spec), opt_(opt), plan_(plan), out_dir_(out_dir), log_(log),
        exe_(opt.exe.empty() ? g_child_binary : opt.exe),
        tty_(opt.progress == 1 || (opt.progress == -1 && &log == &std::cerr && ::isatty(2) == 1)) {
    // The config as given (a config loaded from a string: the copy in the report directory).
    std::error_code ec;
    config_ = fs::is_regular_file(spec.source, ec) ? spec.source
                                                   : (fs::path(out_dir) / "compare.yaml").string();
  }
  size_t running() const { return running_.size(); }
  bool stopping() const { return stopping_; }
  const std::string& failure() const { return failure_; }

  void start(size_t i);
  void reap();
  // SIGTERM to every running child (a pelab child stops at a checkpoint); no more are started.
  void stop_all() {
    stopping_ = true;
    for (const auto& c : running_) ::kill(c.pid, SIGTERM);
  }
  // A line above the progress block.
  void event(const std::string& line) {
    clear_block();
    log_ << line << "\n" << std::flush;
  }
  void show_progress() {
    if (tty_ && !running_.empty() && now_s() - last_draw_ >= 0.5) draw_block();
  }
  void clear_block();

 private:
  struct Child {
    size_t index;
    pid_t pid;
    std::string log;
    double t0;
    std::uintmax_t log_from;  // the log's size when the child started
  };
  std::string tag(size_t i) const {
    return "[" + std::to_string(i + 1) + "/" + std::to_string(plan_.size()) + "] ";
  }
  void draw_block();
  void ended(const Child& c, int status);

  const CompareSpec& spec_;
  const CompareOptions& opt_;
  const std::vector<ComparePlanRun>& plan_;
  const std::string out_dir_;
  std::ostream& log_;
  const std::string exe_;
  const bool tty_;
  std::string config_;
  std::vector<Child> running_;
  bool stopping_ = false;
  std::string failure_;
  size_t drawn_ = 0;  // lines of the progress block on the terminal
  double last_draw_ = 0;
};

// Starts run i (plan index); a run that cannot start is the pool's failure (every child stopped).
void ChildPool::start(size_t i) {
  const ComparePlanRun& run = plan_[i];
  const fs::path dir = run_directory(run.cfg);
  std::vector<std::string> args = {
      "compare", config_,  "--only",     std::to_string(i + 1),
      "--out",   out_dir_, "--progress", opt_.progress == 2 ? "none" : "lines",
      "--expect-config", fingerprint(eval_identity(run.cfg))};
  for (const auto& o : spec_.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  if (opt_.retrain) args.push_back("--retrain");
  const std::string lp = (dir / "compare.log").string();
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    PELAB_CHECK(!ec, "compare: cannot create ", dir.string(), ": ", ec.message());
    ::close(open_for_writing(lp, O_WRONLY | O_CREAT | O_APPEND, 0644));  // a link: one line
    std::error_code size_ec;
    const std::uintmax_t from = fs::file_size(lp, size_ec);
    running_.push_back({i, spawn_child(exe_, args, lp), lp, now_s(), size_ec ? 0 : from});
  } catch (const std::exception& e) {
    failure_ = e.what();  // the running children are stopped and waited for first
    stop_all();
    return;
  }
  event(tag(i) + "started " + run_who(run) + " (" + std::to_string(run.cfg.train.steps) +
        " steps; log " + lp + ")");
}

// Collects the children that have ended (without waiting for the others).
void ChildPool::reap() {
  for (size_t k = 0; k < running_.size();) {
    int st = 0;
    const pid_t w = ::waitpid(running_[k].pid, &st, WNOHANG);
    if (w != running_[k].pid) {
      ++k;
      continue;
    }
    const Child c = running_[k];
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
    ended(c, st);
  }
}

// A child ended: finished, stopped (after stop_all), or failed, which stops the others and is the
// pool's failure (naming the run, how it ended, the reason it logged and its log).
void ChildPool::ended(const Child& c, int st) {
  const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  const std::string how = WIFEXITED(st) ? "exit status " + std::to_string(WEXITSTATUS(st))
                                        : "killed by signal " + std::to_string(WTERMSIG(st));
  const ComparePlanRun& run = plan_[c.index];
  if (ok) {
    event(tag(c.index) + "finished " + run_who(run) + " (" + elapsed_text(now_s() - c.t0) + ")");
  } else if (stopping_) {
    event(tag(c.index) + "stopped " + run_who(run));
  } else {
    const std::string why = child_error(c.log, c.log_from);
    failure_ = "compare: run " + run.cfg.train.run_name + " failed (" + how + ")" +
               (why.empty() ? "" : ": " + why) + "; see " + c.log;
    event(tag(c.index) + run_who(run) + " failed (" + how + ")");
    stop_all();
  }
}

void ChildPool::clear_block() {
  if (drawn_ == 0) return;
  log_ << "\033[" << drawn_ << "A";
  for (size_t k = 0; k < drawn_; ++k) log_ << "\033[2K\n";
  log_ << "\033[" << drawn_ << "A";
  drawn_ = 0;
}

// One line per running child: its run, its newest training row and how long it has run.
void ChildPool::draw_block() {
  clear_block();
  for (const auto& c : running_) {
    const ComparePlanRun& run = plan_[c.index];
    int64_t step = 0;
    double loss = 0;
    std::string state = "starting";
    if (latest_train_row(run_directory(run.cfg), step, loss))
      state = "step " + std::to_string(step) + "/" + std::to_string(run.cfg.train.steps) +
              "  loss " + format_double(loss, 4);
    log_ << tag(c.index) << run_who(run) << "  " << state << "  " << elapsed_text(now_s() - c.t0)
         << "\n";
    ++drawn_;
  }
  log_ << std::flush;
  last_draw_ = now_s();
}

}  // namespace

namespace compare_detail {

// Trains the runs `todo` (plan indexes) in child processes, at most `jobs` at once: each child is
// `exe compare CONFIG --only I` with the same --set overrides and --out, its output appended to
// runs/<run>/compare.log. A signal to this process (stop_signal()) is forwarded as SIGTERM;
// returns false when interrupted. A child that fails throws, naming the run and its log.
bool train_in_children(const CompareSpec& spec, const CompareOptions& opt,
                       const std::vector<ComparePlanRun>& plan, const std::vector<size_t>& todo,
                       int64_t jobs, const std::string& out_dir, std::ostream& log) {
  ChildPool pool(spec, opt, plan, out_dir, log);
  log << "pelab compare: " << todo.size() << " runs to train, " << jobs
      << " at once (child processes; each one's output in runs/<run>/compare.log)\n"
      << std::flush;
  size_t next = 0;
  while ((!pool.stopping() && next < todo.size()) || pool.running() > 0) {
    if (!pool.stopping() && stop_signal()) {
      pool.stop_all();
      pool.event("pelab compare: stopping " + std::to_string(pool.running()) +
                 " running runs (they save a checkpoint) ...");
    }
    while (!pool.stopping() && next < todo.size() && static_cast<int64_t>(pool.running()) < jobs)
      pool.start(todo[next++]);
    pool.reap();
    pool.show_progress();
    if (pool.running() > 0) ::usleep(100000);
  }
  pool.clear_block();
  if (!pool.failure().empty()) fail(pool.failure());
  return !pool.stopping();
}

}  // namespace compare_detail

void set_compare_child_binary(const std::string& path) { g_child_binary = path; }
const std::string& compare_child_binary() { return g_child_binary; }

}  // namespace pelab
