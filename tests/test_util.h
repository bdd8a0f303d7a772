// Helpers shared by the test files: scratch directories under the system temporary directory,
// reading and writing small files, waiting for a file's text, shell quoting, running a shell
// command (the pelab binary, a tool) with its stdout, stderr and exit status captured, the message
// of a pelab::Error, and the tiny YAML configs that several files use. Paths of the tree and the binary are in
// tests/test_paths.h.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pelab/error.h"
#include "train/app/cli.h"
#include "train/study/report.h"
#include "tests/test_paths.h"

namespace pelab::testing {

namespace fs = std::filesystem;

// The whole content of file `p` (bytes as they are); "" when it cannot be read.
inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to `p` (replacing it); returns the path as a string.
inline std::string write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

// Every file under `dir` (relative path -> contents; a link -> "link:" + its target): what a test
// compares to show that a folder was not written to.
inline std::map<std::string, std::string> file_tree(const fs::path& dir) {
  std::map<std::string, std::string> t;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string rel = fs::relative(it->path(), dir).string();
    if (it->is_symlink())
      t[rel] = "link:" + fs::read_symlink(it->path()).string();
    else if (it->is_regular_file())
      t[rel] = slurp(it->path());
  }
  return t;
}

// `s` as one single-quoted /bin/sh word.
// probability[(head, query, key)] of a plot-pe attention-map CSV
// (head,query,key,query_token,key_token,probability), its header checked.
inline std::map<std::tuple<int, int, int>, double> read_attention_csv(const fs::path& f) {
  std::map<std::tuple<int, int, int>, double> out;
  std::ifstream in(f);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "head,query,key,query_token,key_token,probability") << f;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string h, q, k, qt, kt, p;
    std::getline(ss, h, ',');
    std::getline(ss, q, ',');
    std::getline(ss, k, ',');
    std::getline(ss, qt, ',');
    std::getline(ss, kt, ',');
    std::getline(ss, p, ',');
    out[{std::stoi(h), std::stoi(q), std::stoi(k)}] = std::stod(p);
  }
  return out;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// An empty directory <tmp>/<stem>_<pid> (whatever was there before is removed).
inline fs::path fresh_temp_dir(const std::string& stem) {
  const fs::path d = fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Waits (up to ~30 s) until `file` contains `needle`; false if it never does.
inline bool wait_for(const fs::path& file, const std::string& needle) {
  for (int i = 0; i < 3000; ++i) {
    if (slurp(file).find(needle) != std::string::npos) return true;
    ::usleep(10000);
  }
  return false;
}

// The message of the pelab::Error that `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pelab::Error& e) {
    return e.what();
  }
  return "";
}

// The name of the running test ("" outside a test).
inline std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info != nullptr ? info->name() : "";
}

// A fixture whose every test gets an empty directory dir_ = <tmp>/<prefix>_<test>_<pid>, removed
// after the test. A fixture that overrides SetUp calls TempDirTest::SetUp() first.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override { dir_ = fresh_temp_dir(prefix_ + "_" + current_test_name()); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to dir_/name; returns its path.
  std::string write(const std::string& name, const std::string& text) {
    return write_file(dir_ / name, text);
  }

  fs::path dir_;

 private:
  std::string prefix_;
};

// The exit status of a finished command (-1 when it did not exit normally) and what it printed.
struct CommandResult {
  int rc = -1;
  std::string out, err;
};

// Runs `command` with /bin/sh, stdout into `out_file` and stderr into `err_file`, stdin from
// `stdin_file` (none: the test's own stdin), and returns the exit status and both files' text.
inline CommandResult run_captured(const std::string& command, const fs::path& out_file,
                                  const fs::path& err_file,
                                  const std::string& stdin_file = "/dev/null") {
  std::string cmd = command;
  if (!stdin_file.empty()) cmd += " <" + quote(stdin_file);
  cmd += " >" + quote(out_file.string()) + " 2>" + quote(err_file.string());
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  return r;
}

// The CLI tests' tiny run (reverse over 4 symbols, a 1+1-layer model, 4 steps) as YAML, its runs
// under `run_dir`, followed by `extra`.
// Whether pelab::testing::python3() can import `module` (found without importing it: fast). The
// tests that need PyTorch skip without it.
inline bool python_has_module(const std::string& module) {
  const std::string probe = python3() +
                            " -c 'import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec(\"" + module + "\") is None)' >/dev/null 2>&1";
  return std::system(probe.c_str()) == 0;
}

inline std::string tiny_cli_yaml(const fs::path& run_dir, const std::string& extra = "") {
  return "task:\n  name: reverse\n  num_symbols: 4\n  train_max_len: 4\n"
         "  test_lengths: [3, 6]\n  num_eval_examples: 4\n"
         "model:\n  d_model: 16\n  heads: 2\n  d_ff: 32\n  encoder_layers: 1\n"
         "  decoder_layers: 1\n"
         "train:\n  steps: 4\n  batch_size: 4\n  warmup: 1\n  log_every: 2\n"
         "  eval_every: 2\n  checkpoint_every: 2\n  threads: 1\n  run_dir: " +
         run_dir.string() + "\n" + extra;
}

// The comparison tests' tiny comparison as YAML: reverse over 4 symbols trained on lengths 1-4 and
// tested at `test_lengths` (a YAML list), a 1+1-layer model trained `steps` steps, seeds 1 and 2;
// it ends with "  schemes:\n", the caller appends the schemes and anything else.
inline std::string tiny_compare_yaml(const std::string& test_lengths, int steps) {
  std::ostringstream y;
  y << "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: 4,\n"
       "       test_lengths: "
    << test_lengths
    << ", num_eval_examples: 6}\n"
       "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1}\n"
       "train: {steps: "
    << steps
    << ", batch_size: 8, warmup: 2, log_every: 4, eval_every: 0,\n"
       "        checkpoint_every: 4, threads: 1}\n"
       "eval: {batch_size: 6}\n"
       "compare:\n"
       "  title: tiny\n"
       "  seeds: [1, 2]\n"
       "  schemes:\n";
  return y.str();
}

// A suite of tiny_compare_yaml's comparison (rope and t5, 2 seeds, 4 steps) on two tasks:
// parity_check (tested at 3, 6, 8) and reverse_string.
inline std::string tiny_suite_yaml() {
  return tiny_compare_yaml("[3, 6]", 4) +
         "    - rope\n    - t5\nsuite:\n  tasks:\n"
         "    - {name: parity_check, set: {task.test_lengths: [3, 6, 8]}}\n"
         "    - {name: reverse_string, set: {task.name: reverse}}\n";
}

// results.csv with the wall-time columns blanked (what equal runs must reproduce exactly).
inline std::vector<ResultRow> results_without_timing(const fs::path& csv) {
  std::vector<ResultRow> rows = parse_results_csv(slurp(csv), csv.string());
  for (auto& r : rows) r.train_wall_s = r.eval_wall_s = 0;
  return rows;
}

// A temporary directory holding tiny_compare_yaml's comparison with rope and t5 (2 schemes x 2
// seeds) and ways to run commands in it, their output in out_ / err_: the fixture of the tests
// that drive `pelab compare` as a user does (--jobs, Slurm).
class TinyCompareTest : public TempDirTest {
 protected:
  using TempDirTest::TempDirTest;

  // Writes the comparison (tested at lengths 2, 4, 6, `steps` steps, then `extra`) to dir_/name.
  std::string config(const std::string& extra = "", int steps = 12,
                     const std::string& name = "tiny.yaml") {
    return write(name, tiny_compare_yaml("[2, 4, 6]", steps) + "    - rope\n    - t5\n" + extra);
  }
  // Runs `command` with /bin/sh in dir_; returns the exit status.
  int sh(const std::string& command) {
    const CommandResult r =
        run_captured("cd " + quote(dir_.string()) + " && " + command, dir_ / "o", dir_ / "e");
    out_ = r.out;
    err_ = r.err;
    return r.rc;
  }
  // Runs the pelab binary (one OpenMP thread) with `args` in dir_.
  int pelab(const std::string& args) {
    return sh("OMP_NUM_THREADS=1 " + quote(pelab_binary()) + " " + args);
  }
  // The command line in process (run_cli), stdin empty.
  int cli(const std::vector<std::string>& args) {
    std::istringstream in;
    std::ostringstream out, err;
    const int rc = run_cli(args, in, out, err);
    out_ = out.str();
    err_ = err.str();
    return rc;
  }
  // `pelab compare CONFIG ARGS... --jobs 1 --no-plots --progress none` in process.
  int compare(const std::string& cfg, std::vector<std::string> args) {
    std::vector<std::string> a = {"compare", cfg};
    a.insert(a.end(), args.begin(), args.end());
    for (const char* x : {"--jobs", "1", "--no-plots", "--progress", "none"}) a.push_back(x);
    return cli(a);
  }
  // dir_/name as a string.
  std::string at(const std::string& name) const { return (dir_ / name).string(); }

  std::string out_, err_;
};

// A result row of a comparison (train/study/report.h) at task length `length` with every metric derived
// from the exact match `em` (token accuracy = em, loss = 1.01 - em, perplexity = e^loss).
inline ResultRow result_row(const std::string& scheme, int64_t seed, int64_t length, int in_dist,
                            double em, int converged = -1, int64_t step = -1) {
  ResultRow r;
  r.scheme = scheme;
  r.seed = seed;
  r.split = "len_" + std::to_string(length);
  r.length = length;
  r.in_distribution = in_dist;
  r.exact_match = em;
  r.token_accuracy = em;
  r.loss = 1.0 - em + 0.01;
  r.perplexity = std::exp(r.loss);
  r.converged = static_cast<Converged>(converged);  // 1 / 0 / -1
  r.criterion_step = step;
  return r;
}

// `command` (run by /bin/sh, which execs it: the child is the command itself) started in the
// background in its own process group, stdout and stderr into files; returns its pid.
inline pid_t start_background(const std::string& command, const fs::path& out_file,
                              const fs::path& err_file) {
  const std::string cmd = "exec " + command + " </dev/null >" + quote(out_file.string()) + " 2>" +
                          quote(err_file.string());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits up to `seconds` for `pid` to end: its wait status, and in `waited` how long it took. Past
// the limit the process group is killed (SIGKILL) and reaped, and `waited` is -1.
inline int wait_at_most(pid_t pid, double seconds, double& waited) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == pid) return status;
    if (r < 0) {
      waited = -1;
      return 0;
    }
    if (waited > seconds) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      waited = -1;
      return status;
    }
    ::usleep(5000);
  }
}

// What the pelab binary did in a child process: its raw wait status, stdout, stderr and wall time.
struct ChildRun {
  int status = -1;
  std::string out, err;
  double seconds = 0;
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// Runs the pelab binary with `args` in `cwd`, stdout and stderr into cwd/pelab.out and pelab.err;
// `setup` runs in the child before the exec (resource limits, the environment; false: exit 126).
inline ChildRun run_pelab_child(const std::vector<std::string>& args, const fs::path& cwd,
                                const std::function<bool()>& setup = {}) {
  const fs::path out = cwd / "pelab.out", err = cwd / "pelab.err";
  const std::string bin = pelab_binary();
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr))
      ::_exit(126);
    if (setup && !setup()) ::_exit(126);
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ChildRun r;
  ::waitpid(pid, &r.status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace pelab::testing
