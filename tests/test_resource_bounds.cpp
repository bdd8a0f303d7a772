// pelab — issue 51, items 4-7: a config, run folder or input from someone else is bounded before
// anything is allocated. Each test runs the pelab binary as a user would, its address space limited
// (RLIMIT_AS, as on a machine that small: an allocation past it fails), and asserts one clear error
// line, a non-zero exit and a few seconds at most: without the bounds the same commands end in a bare
// std::bad_alloc, a crash or minutes of work.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using pelab::testing::slurp;

namespace {

// What a bounded pelab command did.
struct BoundedRun {
  int status = -1;  // raw waitpid status
  std::string out, err;
  double seconds = 0;
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// 1.5 GiB of address space: a tiny run needs ~0.4 (the BLAS and OpenMP threads' reservations
// included); every refused case here would need hundreds of GB.
constexpr rlim_t kAddressSpace = rlim_t{3} << 29;

// Runs the pelab binary with `args` in `cwd` (one OpenMP thread), its RLIMIT_AS at `as_bytes`.
BoundedRun run_bounded(const std::vector<std::string>& args, const fs::path& cwd,
                       rlim_t as_bytes = kAddressSpace) {
  const fs::path out = cwd / "pelab.out", err = cwd / "pelab.err";
  const std::string bin = pelab::testing::pelab_binary();
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr))
      ::_exit(126);
    struct rlimit rl {as_bytes, as_bytes};
    if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(126);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  BoundedRun r;
  ::waitpid(pid, &r.status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// One "pelab: error: ..." line holding every part of `wants`, a non-zero exit, within 10 s.
void expect_refused(const BoundedRun& r, const std::vector<std::string>& wants) {
  EXPECT_TRUE(r.exited()) << "killed by signal " << (WIFSIGNALED(r.status) ? WTERMSIG(r.status) : 0)
                          << "; stderr: " << r.err;
  EXPECT_NE(r.code(), 0) << r.err;
  EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  for (const auto& w : wants) EXPECT_NE(r.err.find(w), std::string::npos) << w << " not in: " << r.err;
  EXPECT_LT(r.seconds, 10.0) << r.err;
}

class ResourceBounds : public pelab::testing::TempDirTest {
 protected:
  ResourceBounds() : TempDirTest("pelab_bounds") {}

  // A tiny decoder-only addition_reversed run (coupled IDs) as YAML, then `extra` task keys.
  std::string arithmetic_yaml(const std::string& task_extra) {
    return "task:\n  name: addition_reversed\n  formulation: decoder\n  train_min_len: 1\n"
           "  train_max_len: 3\n  test_lengths: [3, 4]\n  num_eval_examples: 4\n" +
           task_extra +
           "model:\n  arch: decoder\n  d_model: 16\n  heads: 2\n  d_ff: 32\n  decoder_layers: 1\n"
           "train:\n  steps: 2\n  batch_size: 4\n  warmup: 0\n  threads: 1\n  eval_every: 0\n"
           "  checkpoint_every: 2\n  run_dir: " + (dir_ / "runs").string() + "\n";
  }
};

}  // namespace

// Item 5: task.index_hints had no upper bound and each hint is a vocabulary token built while the
// config is checked: 2147483647 ran 46 s into a bare std::bad_alloc, 1e6 was accepted (32 M
// parameters). Its range is now [0, 10000], checked with the key's other bounds, from a config, a
// --set and a received run folder's config.yaml (pelab eval) alike.
TEST_F(ResourceBounds, IndexHintsHaveADocumentedUpperBound) {
  const std::string cfg = write("hints.yaml", arithmetic_yaml(""));
  expect_refused(run_bounded({"train", cfg, "--set", "task.index_hints=1000000"}, dir_),
                 {"task.index_hints: 1000000 is out of range [0, 10000]"});
  fs::create_directories(dir_ / "received");
  write("received/config.yaml", arithmetic_yaml("  index_hints: 2147483647\n"));
  expect_refused(run_bounded({"eval", (dir_ / "received").string()}, dir_),
                 {"task.index_hints: 2147483647 is out of range [0, 10000]"});
  // The bound itself is usable: hints up to h10000 train (10013 tokens).
  const BoundedRun ok = run_bounded(
      {"train", cfg, "--progress", "none", "--set", "task.index_hints=10000"}, dir_);
  EXPECT_EQ(ok.code(), 0) << ok.err;
  // The reference states the range.
  EXPECT_NE(slurp(fs::path(pelab::testing::source_dir()) / "docs" / "config.md")
                .find("`task.index_hints` | int | `0` | [0, 10000]"),
            std::string::npos);
}
