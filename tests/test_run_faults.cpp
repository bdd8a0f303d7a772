// pelab — hardening of runs (issue 16, items 3, 4, 5, 8, 14): failed writes stop a run with one
// error (a real write failure: RLIMIT_FSIZE on a child process), divergence limits and what they
// keep (fault injection through TrainOptions::grad_hook, and the issue's own diverging command),
// resuming from the run's stored config, the run directory lock (two processes), the terminal
// (a pty of 50 columns), SIGHUP, --progress none, --stop-after, number formatting, plural forms
// and tools/inspect_checkpoint.py errors.
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pelab/pelab.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "tests/run_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::quote;
using pelab::testing::slurp;
using pelab::testing::wait_for;
using Result = pelab::testing::CommandResult;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class HardeningRun : public pelab::testing::TempDirTest {
 protected:
  HardeningRun() : TempDirTest("pelab_hrun") {}
  void SetUp() override {
    TempDirTest::SetUp();
    bin_ = pelab::testing::pelab_binary();
    ASSERT_TRUE(fs::exists(bin_)) << "build the pelab target first: " << bin_;
  }

  // Runs `ENV pelab ARGS` (ARGS shell-quoted where needed).
  Result pelab(const std::string& args, const std::string& env = "") {
    return pelab::testing::run_captured(env + " " + quote(bin_) + " " + args, dir_ / "stdout.txt",
                                        dir_ / "stderr.txt");
  }

  // The CLI tests' tiny config (a few steps of a 1+1-layer model).
  std::string tiny_config(const std::string& name = "tiny.yaml") {
    return write(name, pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  }

  // The same model as a Config, for in-process runs.
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.name=reverse",      "task.num_symbols=4",       "task.train_max_len=4",
        "task.test_lengths=[3]",  "task.num_eval_examples=4", "model.d_model=16",
        "model.heads=2",          "model.d_ff=32",            "model.encoder_layers=1",
        "model.decoder_layers=1", "train.batch_size=4",       "train.warmup=1",
        "train.threads=1"};
    return pelab::testing::tiny_run_config(std::move(all), dir_ / "runs", name, sets);
  }

  // Exactly one line on stderr starts with "pelab: error: ", it is the last one, and it contains
  // every needle.
  void expect_one_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.rc, 0);
    const auto ls = lines_of(r.err);
    ASSERT_FALSE(ls.empty());
    size_t n = 0;
    for (const auto& l : ls) n += l.rfind("pelab: error: ", 0) == 0;
    EXPECT_EQ(n, 1u) << r.err;
    EXPECT_EQ(ls.back().rfind("pelab: error: ", 0), 0u) << r.err;
    for (const auto& x : needles) EXPECT_NE(ls.back().find(x), std::string::npos) << x << " in " << r.err;
  }

  std::string bin_;  // the pelab binary (tests/test_paths.h)
};

// Sets every gradient of `params` to NaN (a non-finite gradient norm).
void poison_gradients(const std::vector<Tensor>& params) {
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

}  // namespace

// ---------------- item 3: a failed write stops the run ----------------

TEST_F(HardeningRun, FailedMetricsWriteStopsTheRunWithOneError) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny", err = dir_ / "child.err";
  // A run with a checkpoint at step 100 (checkpoints carry the metrics rows: 158 KB + 19 KB).
  ASSERT_EQ(pelab("train " + quote(cfg) + " --set train.steps=3000 --set train.log_every=1 "
                  "--set train.eval_every=0 --set train.checkpoint_every=0 --stop-after 100").rc,
            0);
  // Resumed with files limited to 256 KiB: config.yaml fits, metrics.jsonl (a row per step, ~190
  // bytes) does not after ~1400 steps; no checkpoint is due before the end. SIGXFSZ ignored:
  // write() fails with EFBIG, like on a full disk.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = 256 * 1024;
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::signal(SIGXFSZ, SIG_IGN);
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bin_.c_str(), bin_.c_str(), "train", "--resume", run.c_str(), "--progress", "none",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << ": " << slurp(err);
  Result r;
  r.rc = WEXITSTATUS(status);
  r.err = slurp(err);
  expect_one_error(r, {"error writing", run.string(), "File too large"});
  EXPECT_EQ(r.rc, 1);
  // Stopped at the failure, not at the end; the files end with whole lines and the metrics rows
  // all parse; the last checkpoint before the failure is intact.
  EXPECT_FALSE(fs::exists(run / "eval.json"));
  for (const char* f : {"metrics.jsonl", "metrics.csv", "train.log"}) {
    const std::string text = slurp(run / f);
    ASSERT_FALSE(text.empty()) << f;
    EXPECT_EQ(text.back(), '\n') << f << " is cut mid-line";
  }
  const auto rows = parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics.jsonl");
  ASSERT_GE(rows.size(), 1000u);
  EXPECT_EQ(lines_of(slurp(run / "metrics.csv")).size(), rows.size() + 1);  // + the header
  const std::string last = latest_checkpoint(run.string());
  ASSERT_EQ(fs::path(last).filename(), "step_100.h5");
  EXPECT_EQ(load_checkpoint(last).step, 100);
}

TEST_F(HardeningRun, AppendToFileCutsAFailedWriteBack) {
  const fs::path f = dir_ / "rows.txt";
  append_to_file(f.string(), "first line\n");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = 20;  // the next line crosses the limit part-way
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::signal(SIGXFSZ, SIG_IGN);
    try {
      append_to_file(f.string(), "a second, longer line\n");
    } catch (const Error& e) {  // (no file can take the message here: the limit holds for all)
      ::_exit(std::string(e.what()).find("rows.txt: File too large") != std::string::npos ? 3 : 4);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);  // the error, naming the file and the reason
  EXPECT_EQ(slurp(f), "first line\n");
}

// ---------------- item 4: divergence ----------------

TEST_F(HardeningRun, ConsecutiveSkippedStepsStopTheRunAndKeepTheLastFiniteCheckpoint) {
  const Config cfg = tiny("div", {"train.steps=20", "train.log_every=100", "train.eval_every=1",
                                  "train.checkpoint_every=1", "train.keep_checkpoints=2",
                                  "train.max_consecutive_skipped=3", "train.max_skipped_steps=0"});
  TrainOptions opt;
  opt.progress = 2;
  opt.grad_hook = [](int64_t step, const std::vector<Tensor>& params) {
    if (step >= 4) poison_gradients(params);  // steps 5, 6, 7 (1-based) are skipped
  };
  const fs::path run = dir_ / "runs" / "div";
  try {
    train(cfg, opt);
    FAIL() << "a diverged run finished";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 7: 3 consecutive steps skipped"), std::string::npos) << m;
    EXPECT_NE(m.find("train.max_consecutive_skipped = 3"), std::string::npos) << m;
    EXPECT_NE(m.find("last finite checkpoint: " + (run / "checkpoints" / "step_4.h5").string()),
              std::string::npos)
        << m;
  }
  // Rotation kept the newest two (diverged) checkpoints and the last finite one.
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_4.h5"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_5.h5"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_6.h5"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_3.h5"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_7.h5"));
  const CheckpointData ck = load_checkpoint((run / "checkpoints" / "step_6.h5").string());
  EXPECT_EQ(ck.counters.at("skipped_steps"), 2);
  EXPECT_EQ(ck.counters.at("consecutive_skipped"), 2);
  EXPECT_EQ(ck.counters.at("last_finite_step"), 4);
  // Reported as it happened (once for the streak: train.log_every is 100) and in the log.
  const std::string log = slurp(run / "train.log");
  EXPECT_EQ(count_of(log, " skipped: non-finite gradient norm"), 1u) << log;
  EXPECT_NE(log.find("step 5 skipped: non-finite gradient norm (1 step in a row, 1 skipped in total)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("pelab: error: step 7: 3 consecutive steps skipped"), std::string::npos);

  // best.h5 is from before the divergence.
  EXPECT_EQ(best_or_latest_checkpoint(run.string()), (run / "checkpoints" / "best.h5").string());
  EXPECT_LE(load_checkpoint((run / "checkpoints" / "best.h5").string()).step, 4);
}

// A step's loss and gradient norm are read back at the next training row, validation or checkpoint
// (issue 50: a step reads nothing back). A limit reached between two reads (steps 6 and 7 skipped,
// read at step 8) stops the run at that read, naming the step where it was reached and reporting
// the first skip with its own step and counts, and nothing of the steps after the limit is written:
// no checkpoint or training row of step 8; the checkpoint of step 4 holds the steps before it.
TEST_F(HardeningRun, ALimitReachedBetweenReadsNamesItsStepAndWritesNothingAfter) {
  const Config cfg = tiny("late", {"train.steps=20", "train.log_every=8", "train.eval_every=0",
                                   "train.checkpoint_every=4", "train.keep_checkpoints=0",
                                   "train.max_consecutive_skipped=2", "train.max_skipped_steps=0"});
  TrainOptions opt;
  opt.progress = 2;
  opt.grad_hook = [](int64_t step, const std::vector<Tensor>& params) {
    if (step == 5 || step == 6) poison_gradients(params);  // steps 6 and 7 (1-based)
  };
  const std::string e = pelab::testing::error_of([&] { train(cfg, opt); });
  EXPECT_NE(e.find("step 7: 2 consecutive steps skipped"), std::string::npos) << e;
  EXPECT_NE(e.find("last finite checkpoint: " + (dir_ / "runs" / "late" / "checkpoints" / "step_4.h5").string()),
            std::string::npos)
      << e;
  const fs::path run = dir_ / "runs" / "late";
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_4.h5"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_8.h5"));
  const std::string log = slurp(run / "train.log");
  EXPECT_NE(log.find("step 6 skipped: non-finite gradient norm (1 step in a row, 1 skipped in total)"),
            std::string::npos)
      << log;
  EXPECT_EQ(slurp(run / "metrics.jsonl").find("\"step\": 8"), std::string::npos)
      << "no row of the steps after the limit";
  const CheckpointData ck = load_checkpoint((run / "checkpoints" / "step_4.h5").string());
  EXPECT_EQ(ck.counters.at("skipped_steps"), 0);
  EXPECT_EQ(ck.optimizer_step, 4);
}

TEST_F(HardeningRun, TotalSkippedStepsLimitNamesTheStep) {
  const Config cfg = tiny("total", {"train.steps=20", "train.log_every=1", "train.eval_every=0",
                                    "train.checkpoint_every=0", "train.max_consecutive_skipped=0",
                                    "train.max_skipped_steps=3"});
  TrainOptions opt;
  opt.progress = 2;
  opt.grad_hook = [](int64_t step, const std::vector<Tensor>& params) {
    if (step % 2 == 1) poison_gradients(params);  // steps 2, 4, 6 (1-based)
  };
  try {
    train(cfg, opt);
    FAIL() << "the total limit did not stop the run";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 6: 3 steps skipped in total"), std::string::npos) << m;
    EXPECT_NE(m.find("train.max_skipped_steps = 3"), std::string::npos) << m;
  }
  // train.log_every 1: every skipped step has its line.
  const std::string log = slurp(dir_ / "runs" / "total" / "train.log");
  EXPECT_EQ(count_of(log, " skipped: non-finite gradient norm"), 3u) << log;
}

TEST_F(HardeningRun, NonFiniteModelIsNeverBestAndSkipsAreSummarised) {
  // Step 1 updates, then a parameter is NaN: every later loss is NaN (skipped steps; no limit).
  // exact_match of such a model is a finite 0: only the health check keeps it from best.h5. The
  // run still ends with an error: its parameters are not finite (issue 29 item 4).
  const Config cfg = tiny("nan", {"train.steps=4", "train.log_every=1", "train.eval_every=2",
                                  "train.checkpoint_every=2", "train.keep_checkpoints=1",
                                  "train.max_consecutive_skipped=0", "train.max_skipped_steps=0"});
  TrainOptions opt;
  opt.progress = 2;
  opt.grad_hook = [](int64_t step, const std::vector<Tensor>& params) {
    if (step == 0) {
      NoGradGuard ng;
      Tensor p = params.front();
      p.fill_(std::numeric_limits<double>::quiet_NaN());
    }
  };
  const std::string e = pelab::testing::error_of([&] { train(cfg, opt); });
  EXPECT_NE(e.find("step 4: the parameters are not finite after the last update"),
            std::string::npos)
      << e;
  const fs::path run = dir_ / "runs" / "nan";
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "best.h5"));
  const std::string log = slurp(run / "train.log");
  EXPECT_NE(log.find("step 2 skipped: non-finite loss"), std::string::npos) << log;
  EXPECT_NE(log.find("3 of 4 steps skipped for a non-finite loss or gradient norm"),
            std::string::npos)
      << log;
  // No finite checkpoint to protect, and the non-finite one cannot be loaded (checkpoint.cpp).
  EXPECT_THROW(load_checkpoint(latest_checkpoint(run.string())), Error);
}

TEST_F(HardeningRun, TheIssuesDivergingCommandStopsWithAnError) {
  const std::string cfg = tiny_config();
  Result r = pelab("train " + quote(cfg) +
                   " --set train.lr=1000000 --set train.schedule=inverse_sqrt"
                   " --set train.warmup=10000 --set train.min_lr=0 --set train.steps=300"
                   " --set train.log_every=50 --progress lines");
  expect_one_error(r, {"consecutive steps skipped", "train.max_consecutive_skipped", "diverged",
                       "last finite checkpoint"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(" skipped: non-finite"), std::string::npos) << r.err;
  // Huge losses print in scientific notation, not with dozens of digits.
  EXPECT_NE(r.err.find("e+"), std::string::npos) << r.err;
  for (const auto& l : lines_of(r.err)) EXPECT_LT(l.size(), 400u) << l;
}

// ---------------- item 5: resume continues the run as configured ----------------

TEST_F(HardeningRun, ResumeContinuesTheRunAsItWasConfigured) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny";
  // The README's example: a --set at the start, then resume with the same config file only.
  ASSERT_EQ(pelab("train " + quote(cfg) + " --set pe.scheme=rope --set train.steps=6 "
                  "--stop-after 2").rc, 0);
  Result a = pelab("train " + quote(cfg) + " --resume " + quote(run.string()) + " --stop-after 4");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.err.find("differs from the run in pe.scheme (sinusoidal; the run: rope)"),
            std::string::npos)
      << a.err;
  EXPECT_NE(a.err.find("train.steps (4; the run: 6)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("stopped at step 4"), std::string::npos) << a.err;
  const std::string stored = slurp(run / "config.yaml");
  EXPECT_NE(stored.find("scheme: rope"), std::string::npos);
  EXPECT_NE(stored.find("steps: 6 "), std::string::npos);
  // Without a config: the run's own, to its own train.steps.
  Result b = pelab("train --resume " + quote(run.string()));
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_NE(b.err.find("resumed " + run.string() + " at step 4 of 6"), std::string::npos) << b.err;
  EXPECT_NE(slurp(run / "eval.json").find("\"step\": 6"), std::string::npos);
  // An allowed override: more steps.
  Result c = pelab("train --resume " + quote(run.string()) + " --set train.steps=8");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(slurp(run / "eval.json").find("\"step\": 8"), std::string::npos);
}

TEST_F(HardeningRun, ResumeRefusesChangedKeysAndStepsBelowTheRun) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny";
  ASSERT_EQ(pelab("train " + quote(cfg) + " --set train.steps=6 --stop-after 4").rc, 0);
  const std::string before = slurp(run / "config.yaml");
  expect_one_error(pelab("train --resume " + quote(run.string()) + " --set pe.scheme=alibi"),
                   {"pe.scheme=alibi", "pe.scheme=sinusoidal", "train.steps"});
  Result low = pelab("train --resume " + quote(run.string()) + " --set train.steps=2");
  expect_one_error(low, {"at step 4", "train.steps is 2", "4 or more"});
  EXPECT_EQ(low.err.find("of 2"), std::string::npos);
  EXPECT_EQ(slurp(run / "config.yaml"), before);  // a refused resume leaves the run as it was
  // Neither CONFIG nor --resume: a usage error.
  Result none = pelab("train");
  expect_one_error(none, {"missing CONFIG (or --resume RUN_DIR)"});
  EXPECT_EQ(none.rc, 2);
}

TEST_F(HardeningRun, ResumeOfACheckpointOutsideARunIsRefused) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny";
  ASSERT_EQ(pelab("train " + quote(cfg) + " --stop-after 2").rc, 0);
  // A copy in elsewhere/saved/: its grandparent is not its run (and holds someone's files).
  const fs::path other = dir_ / "elsewhere";
  fs::create_directories(other / "saved");
  fs::copy_file(run / "checkpoints" / "step_2.h5", other / "saved" / "step_2.h5");
  std::ofstream(other / "metrics.jsonl") << "not pelab's\n";
  expect_one_error(pelab("train --resume " + quote((other / "saved" / "step_2.h5").string())),
                   {"step_2.h5", "not a checkpoint in a run directory's checkpoints/"});
  expect_one_error(pelab("train " + quote(cfg) + " --resume " +
                         quote((other / "saved" / "step_2.h5").string())),
                   {"not a checkpoint in a run directory's checkpoints/"});
  EXPECT_EQ(slurp(other / "metrics.jsonl"), "not pelab's\n");
  EXPECT_FALSE(fs::exists(other / "config.yaml"));
  // The same file inside the run's checkpoints/ resumes that run.
  Result r = pelab("train --resume " + quote((run / "checkpoints" / "step_2.h5").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(run / "eval.json"));
}

// ---------------- item 8: one process per run directory ----------------

TEST_F(HardeningRun, ASecondProcessCannotUseALockedRunDirectory) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny", err = dir_ / "first.err";
  ASSERT_EQ(pelab("train " + quote(cfg) + " --set train.steps=100000 --set train.log_every=1 "
                  "--set train.eval_every=0 --set train.checkpoint_every=5 --stop-after 2").rc, 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bin_.c_str(), bin_.c_str(), "train", "--resume", run.c_str(), "--progress", "lines",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const bool started = wait_for(run / "train.log", "step 4/100000");
  Result second = pelab("train --resume " + quote(run.string()) + " --stop-after 3");
  Result fresh = pelab("train " + quote(cfg) + " --overwrite");
  ::kill(pid, SIGKILL);  // the kernel releases the lock of a killed process
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(started) << slurp(err);
  expect_one_error(second, {"run directory " + run.string() + " is in use by another pelab process",
                            "(pid " + std::to_string(pid) + ")"});
  expect_one_error(fresh, {"is in use by another pelab process"});
  // No rows written twice.
  std::set<std::string> seen;
  for (const auto& row : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    const std::string key = row.get("type")->s + " " + std::to_string(row.get("step")->i);
    EXPECT_TRUE(seen.insert(key).second) << "duplicate row " << key;
  }
  // After the kill the lock is free: another process can take it and continue the run.
  const int fd = ::open((run / ".pelab.lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
  Result again = pelab("train --resume " + quote(run.string()) + " --stop-after 0");
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("stopped at step"), std::string::npos) << again.err;
}

// ---------------- item 14: terminal, signals, messages ----------------

TEST_F(HardeningRun, OnA50ColumnTerminalTheBarFitsAndTheTableShowsOnce) {
  const std::string cfg = tiny_config();
  struct winsize ws {};
  ws.ws_col = 50;
  ws.ws_row = 24;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(bin_.c_str(), bin_.c_str(), "train", cfg.c_str(), "--set", "train.steps=40",
            "--set", "train.log_every=10", "--set", "train.eval_every=20", "--set",
            "train.checkpoint_every=20", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string screen;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) {
      screen.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EIO once the child has closed the terminal
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << screen;
  // On a terminal the bar is automatic; every redraw fits in 49 columns.
  size_t bars = 0;
  std::string seg;
  for (char ch : screen + "\n") {
    if (ch == '\r' || ch == '\n') {
      if (!seg.empty() && seg[0] == '[') {
        ++bars;
        EXPECT_LE(seg.size(), 49u) << seg;
      }
      seg.clear();
    } else {
      seg += ch;
    }
  }
  EXPECT_GE(bars, 1u) << screen;
  // The final table once (stdout), not also from the trainer on stderr.
  EXPECT_EQ(count_of(screen, "split "), 1u) << screen;
  EXPECT_EQ(count_of(screen, "len_6 "), 1u) << screen;
  // It is still in train.log.
  EXPECT_NE(slurp(dir_ / "runs" / "tiny" / "train.log").find("final evaluation at step 40"),
            std::string::npos);
}

TEST_F(HardeningRun, ForcedBarUsesColumnsWhenStderrIsNoTerminal) {
  const std::string cfg = tiny_config();
  Result r = pelab("train " + quote(cfg) + " --progress bar", "COLUMNS=40");
  ASSERT_EQ(r.rc, 0) << r.err;
  size_t bars = 0;
  std::string seg;
  for (char ch : r.err + "\n") {
    if (ch == '\r' || ch == '\n') {
      if (!seg.empty() && seg[0] == '[') {
        ++bars;
        EXPECT_LE(seg.size(), 39u) << seg;
      }
      seg.clear();
    } else {
      seg += ch;
    }
  }
  EXPECT_GE(bars, 1u) << r.err;
}

TEST_F(HardeningRun, SighupStopsWithACheckpointAndTheLineShowsWithProgressNone) {
  const std::string cfg = tiny_config();
  const fs::path run = dir_ / "runs" / "tiny", err = dir_ / "hup.err";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bin_.c_str(), bin_.c_str(), "train", cfg.c_str(), "--set", "train.steps=100000",
            "--set", "train.log_every=1", "--set", "train.eval_every=0", "--progress", "none",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const bool started = wait_for(run / "train.log", "step 2/");
  ::kill(pid, SIGHUP);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(started);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string e = slurp(err);
  const size_t at = e.find("pelab train: interrupted at step ");
  ASSERT_NE(at, std::string::npos) << e;
  const int64_t step = std::stoll(e.substr(at + 33));
  EXPECT_NE(e.find("; continue with --resume " + run.string()), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / ("step_" + std::to_string(step) + ".h5")));
}

TEST_F(HardeningRun, StopAfterExitsZeroAndSaysHowToContinueInEveryProgressMode) {
  const std::string cfg = tiny_config();
  Result r = pelab("train " + quote(cfg) + " --stop-after 2 --progress none");
  EXPECT_EQ(r.rc, 0) << r.err;  // a requested stop is not an interruption (docs/training.md)
  EXPECT_EQ(r.err, "pelab train: stopped at step 2; continue with --resume " +
                       (dir_ / "runs" / "tiny").string() + "\n");
}

TEST_F(HardeningRun, HugeAndNonFiniteMetricsAreFormattedSanely) {
  EXPECT_EQ(format_metric(1.23456, 3), "1.235");
  EXPECT_EQ(format_metric(1e60, 3), "1.000e+60");
  EXPECT_EQ(format_metric(-2.5e7, 4), "-2.500e+07");
  EXPECT_EQ(format_metric(std::numeric_limits<double>::infinity(), 3), "inf");
  EXPECT_EQ(format_metric(std::numeric_limits<double>::quiet_NaN(), 3), "-");
  EvalResult r;
  r.split = "valid";
  r.examples = 4;
  r.loss = 138.2;
  r.perplexity = std::exp(138.2);  // about 1e60
  r.token_accuracy = 0;
  r.exact_match = 0;
  EvalResult inf = r;
  inf.split = "len_6";
  inf.loss = std::numeric_limits<double>::infinity();
  inf.perplexity = std::numeric_limits<double>::infinity();
  const std::string t = eval_table({r, inf});
  EXPECT_NE(t.find(" 1.046e+60 "), std::string::npos) << t;
  EXPECT_NE(t.find(" inf "), std::string::npos) << t;
  for (const auto& l : lines_of(t)) EXPECT_LE(l.size(), 80u) << l;
}

TEST_F(HardeningRun, MessagesUsePluralFormsForCounts) {
  EXPECT_EQ(count_text(1, "thread"), "1 thread");
  EXPECT_EQ(count_text(2, "thread"), "2 threads");
  EXPECT_EQ(count_text(0, "step"), "0 steps");
  const std::string cfg = tiny_config();
  Result t = pelab("train " + quote(cfg) + " --set train.steps=1 --progress lines");
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.err.find(" parameters, 1 step, 1 thread\n"), std::string::npos) << t.err;
  Result i = pelab("info " + quote(cfg) + " --set train.steps=1");
  ASSERT_EQ(i.rc, 0) << i.err;
  EXPECT_NE(i.out.find("train: 1 step, batch 4"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find(", 1 thread, device cpu"), std::string::npos) << i.out;
  // pelab compare with one scheme, one seed, one step, one head, one decoder layer.
  const std::string cmp = write(
      "one.yaml",
      "task: {name: reverse, formulation: decoder, num_symbols: 4, train_max_len: 4,\n"
      "       test_lengths: [3], num_eval_examples: 4}\n"
      "model: {arch: decoder, d_model: 16, heads: 1, d_ff: 32, decoder_layers: 1}\n"
      "train: {steps: 1, batch_size: 4, warmup: 1, threads: 1}\n"
      "compare:\n  seeds: [1]\n  schemes: [rope]\n");
  Result c = pelab("compare " + quote(cmp) + " --out " + quote((dir_ / "cmp").string()) +
                   " --progress none");
  ASSERT_EQ(c.rc, 0) << c.err;
  const std::string all = c.out + c.err;
  EXPECT_NE(all.find("1 scheme x 1 seed = 1 run of 1 step;"), std::string::npos) << all;
  EXPECT_NE(all.find("(1 step) ..."), std::string::npos) << all;
  EXPECT_NE(slurp(dir_ / "cmp" / "report.md").find("1 head, 1 layer; 1 step of batch 4"),
            std::string::npos);
}

TEST_F(HardeningRun, InspectCheckpointToolFailsWithOneLine) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string tool = pelab::testing::source_dir() + "/tools/inspect_checkpoint.py";
  auto run_tool = [&](const std::string& args, const std::string& env) {
    return pelab::testing::run_captured(env + " python3 " + quote(tool) + " " + args,
                                        dir_ / "py.out", dir_ / "py.err", "");
  };
  auto expect_one_line = [](const Result& r, const std::string& needle) {
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  };
  // A directory (with or without h5py).
  expect_one_line(run_tool(quote(dir_.string()), ""), "is a directory");
  // h5py missing from this python3: an importable h5py package that fails like a missing one.
  fs::create_directories(dir_ / "fake" / "h5py");
  std::ofstream(dir_ / "fake" / "h5py" / "__init__.py")
      << "raise ModuleNotFoundError(\"No module named 'h5py'\")\n";
  const std::string ck = write("x.h5", "not read");
  expect_one_line(run_tool(quote(ck), "PYTHONPATH=" + quote((dir_ / "fake").string())), "h5py");
  // A missing file.
  expect_one_line(run_tool(quote((dir_ / "missing.h5").string()), ""), "missing.h5");
}
