// pelab — StopSignalScope (train/stop_signal.h): the one signal scope of the trainer and compare;
// pelab train stopping within seconds wherever a signal lands (validation, final evaluation, a
// second signal) and resuming an interrupted validation exactly.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace pelab;
using pelab::testing::quote;
using pelab::testing::slurp;

using pelab::stop_signal;
using pelab::StopSignalScope;

void (*current_handler(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

void marker_handler(int) {}

TEST(StopSignalScope, RecordsTheSignalAndRestoresThePreviousHandlers) {
  struct sigaction mark {}, old_int {}, old_term {}, old_hup {};
  mark.sa_handler = marker_handler;
  sigemptyset(&mark.sa_mask);
  sigaction(SIGINT, &mark, &old_int);
  sigaction(SIGTERM, &mark, &old_term);
  sigaction(SIGHUP, &mark, &old_hup);
  {
    StopSignalScope scope;
    EXPECT_EQ(stop_signal(), 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) EXPECT_NE(current_handler(sig), marker_handler) << sig;
    std::raise(SIGTERM);
    EXPECT_EQ(stop_signal(), SIGTERM);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) EXPECT_EQ(current_handler(sig), marker_handler) << sig;
  {
    StopSignalScope again;  // a new outermost scope starts without a signal
    EXPECT_EQ(stop_signal(), 0);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
}

// Training inside an in-process comparison: the inner scope shares the outer one's signal (a signal
// before or during training stops both) and leaves the outer handlers in place when it ends.
TEST(StopSignalScope, AnInnerScopeSharesTheOuterSignalAndHandlers) {
  StopSignalScope outer;
  std::raise(SIGINT);
  struct sigaction inside {}, after {};
  {
    StopSignalScope inner;
    EXPECT_EQ(stop_signal(), SIGINT);  // not cleared by the inner scope
    sigaction(SIGTERM, nullptr, &inside);
  }
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_sigaction, inside.sa_sigaction);  // still the scope's handler
  EXPECT_NE(after.sa_handler, SIG_DFL);
  EXPECT_EQ(stop_signal(), SIGINT);
}

// The user insisting (Ctrl-C twice, or SIGINT then SIGTERM): the second signal ends the process by
// its default action, at once.
TEST(StopSignalScopeDeathTest, ASecondSignalEndsTheProcess) {
  for (int second : {SIGINT, SIGTERM, SIGHUP}) {
    EXPECT_EXIT(
        {
          StopSignalScope scope;
          std::raise(SIGINT);
          if (stop_signal() != SIGINT) ::_exit(3);
          std::raise(second);
          ::_exit(4);
        },
        ::testing::KilledBySignal(second), "")
        << second;
  }
}

// A signal from the parent process is not the user insisting: `compare --jobs` and mpirun pass on a
// stop that their child may already have from the terminal or the batch system.
TEST(StopSignalScope, ASignalFromTheParentDoesNotEndTheProcess) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StopSignalScope scope;
    std::raise(SIGINT);  // from the terminal
    if (::write(ready[1], "r", 1) != 1) ::_exit(5);
    ::usleep(500000);  // the parent's SIGTERM arrives meanwhile
    ::_exit(stop_signal() == SIGINT ? 7 : 8);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 7);
  ::close(ready[0]);
  ::close(ready[1]);
}

// ---- pelab train stops within seconds wherever a signal lands (issue 29 item 6) ----

class TrainStopTest : public pelab::testing::TempDirTest {
 protected:
  TrainStopTest() : TempDirTest("pelab_trainstop") {}

  // A run whose validation (train_max_len) or final evaluation (test_lengths) takes tens of
  // seconds: 2000 examples, greedy decoding of a 2+2-layer model.
  std::string config(int train_max_len, int test_length, int steps, int eval_every) {
    return write("big.yaml",
                 "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: " +
                     std::to_string(train_max_len) + ", test_lengths: [" +
                     std::to_string(test_length) + "], num_eval_examples: 2000}\n"
                     "model: {d_model: 64, heads: 4, d_ff: 128, encoder_layers: 2, "
                     "decoder_layers: 2, dropout: 0.1}\n"
                     "train: {steps: " + std::to_string(steps) + ", batch_size: 8, warmup: 1, "
                     "log_every: 1, eval_every: " + std::to_string(eval_every) +
                     ", checkpoint_every: 0, threads: 1, run_dir: " + (dir_ / "runs").string() +
                     "}\neval: {batch_size: 32}\n");
  }
  pid_t start(const std::string& cfg, const std::string& env = "") {
    return pelab::testing::start_background(
        "env " + env + " OMP_NUM_THREADS=1 " + quote(pelab::testing::pelab_binary()) + " train " +
            quote(cfg) + " --progress lines",
        dir_ / "out.txt", dir_ / "err.txt");
  }
  fs::path run() const { return dir_ / "runs" / "big"; }
  std::vector<std::string> step_checkpoints() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(run() / "checkpoints"))
      if (e.path().filename().string().rfind("step_", 0) == 0) out.push_back(e.path().filename());
    return out;
  }
};

// SIGTERM while the run validates (found by waiting for the train row of the validated step, which
// is logged before the validation starts): the run ends within seconds with exit status 130 and a
// checkpoint of that step that says its validation is pending. Before the fix it validated on
// (tens of seconds) and then ran the final evaluation.
TEST_F(TrainStopTest, SigtermDuringValidationStopsWithinSeconds) {
  const pid_t pid = start(config(32, 8, 4, 2));
  ASSERT_TRUE(pelab::testing::wait_for(run() / "train.log", "step 2/4")) << slurp(dir_ / "err.txt");
  ::usleep(200000);  // well inside the validation
  ::kill(pid, SIGTERM);
  double waited = 0;
  const int status = pelab::testing::wait_at_most(pid, 60, waited);
  EXPECT_GE(waited, 0) << "still running 60 s after SIGTERM";
  EXPECT_LT(waited, 3.0) << "seconds from SIGTERM to exit";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string log = slurp(run() / "train.log");
  EXPECT_NE(log.find("interrupted at step 2 during its validation"), std::string::npos) << log;
  EXPECT_EQ(log.find("eval step 2"), std::string::npos) << log;
  ASSERT_EQ(step_checkpoints(), std::vector<std::string>{"step_2.h5"});
  const CheckpointData d = load_checkpoint((run() / "checkpoints" / "step_2.h5").string());
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.counters.at("validation_pending"), 1);
}

// SIGTERM during the final evaluation (after the last validation's line): exit 130 within seconds,
// no eval.json, the final checkpoint intact. Before the fix it evaluated on for tens of seconds.
TEST_F(TrainStopTest, SigtermDuringFinalEvaluationStopsWithinSeconds) {
  const pid_t pid = start(config(4, 64, 2, 0));
  ASSERT_TRUE(pelab::testing::wait_for(run() / "train.log", "eval step 2 valid"))
      << slurp(dir_ / "err.txt");
  ::usleep(200000);
  ::kill(pid, SIGTERM);
  double waited = 0;
  const int status = pelab::testing::wait_at_most(pid, 60, waited);
  EXPECT_GE(waited, 0) << "still running 60 s after SIGTERM";
  EXPECT_LT(waited, 3.0) << "seconds from SIGTERM to exit";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string err = slurp(dir_ / "err.txt");
  EXPECT_NE(err.find("interrupted at step 2 during the final evaluation"), std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(run() / "eval.json"));
  ASSERT_EQ(step_checkpoints(), std::vector<std::string>{"step_2.h5"});
  EXPECT_EQ(load_checkpoint((run() / "checkpoints" / "step_2.h5").string()).step, 2);
}

// Two Ctrl-C: the second ends the process at once even where the first is not acted on yet (the
// test hook holds the validation for 60 s at its first check).
TEST_F(TrainStopTest, SecondSigintEndsTheRunAtOnce) {
  const pid_t pid = start(config(4, 8, 4, 2), "PELAB_TEST_PAUSE_AT=validation+60000");
  ASSERT_TRUE(pelab::testing::wait_for(run() / "train.log", "step 2/4")) << slurp(dir_ / "err.txt");
  // Sent by a shell, as from another terminal (the parent's signals do not count as insisting).
  const std::string sigint = "kill -INT " + std::to_string(pid);
  ::usleep(300000);
  ASSERT_EQ(std::system(sigint.c_str()), 0);
  ::usleep(300000);
  ASSERT_EQ(std::system(sigint.c_str()), 0);
  double waited = 0;
  const int status = pelab::testing::wait_at_most(pid, 30, waited);
  EXPECT_GE(waited, 0);
  EXPECT_LT(waited, 2.0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// A validation interrupted by a signal is done first on resume: the resumed run equals the
// uninterrupted one (metrics rows, best.h5, parameters). The test hook raises SIGTERM at the
// validation's first check, in this process.
TEST_F(TrainStopTest, ResumeRunsTheInterruptedValidationAndEqualsTheUninterruptedRun) {
  const std::string cfg =
      write("tiny.yaml",
            "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: 5,\n"
            "       test_lengths: [3, 6], num_eval_examples: 6}\n"
            "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1,\n"
            "        dropout: 0.1}\n"
            "train: {steps: 6, batch_size: 8, warmup: 1, log_every: 1, eval_every: 2,\n"
            "        checkpoint_every: 2, threads: 1, run_dir: " +
                (dir_ / "runs").string() + "}\n");
  TrainOptions o;
  o.progress = 2;
  const TrainResult whole = train(load_config(cfg, {"train.run_name=whole"}), o);
  ASSERT_TRUE(whole.finished);
  ::setenv("PELAB_TEST_SIGNAL_AT", "validation", 1);
  const TrainResult part = train(load_config(cfg, {"train.run_name=part"}), o);
  ::unsetenv("PELAB_TEST_SIGNAL_AT");
  ASSERT_TRUE(part.interrupted);
  EXPECT_EQ(part.step, 2);
  const fs::path p = dir_ / "runs" / "part";
  EXPECT_EQ(load_checkpoint((p / "checkpoints" / "step_2.h5").string()).counters.at("validation_pending"),
            1);
  TrainOptions r = o;
  r.resume = p.string();
  const TrainResult rest = train(resume_config(p.string(), {}), r);
  ASSERT_TRUE(rest.finished);
  auto rows = [](const fs::path& run) {
    std::vector<std::string> out;
    for (MetricRow m : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
      MetricRow k;
      for (auto& f : m.fields)
        if (f.first != "elapsed_s" && f.first != "tokens_per_s") k.fields.push_back(f);
      out.push_back(k.json());
    }
    return out;
  };
  const fs::path w = dir_ / "runs" / "whole";
  EXPECT_EQ(rows(w), rows(p));
  for (const char* f : {"step_6.h5", "best.h5"}) {
    const CheckpointData a = load_checkpoint((w / "checkpoints" / f).string());
    const CheckpointData b = load_checkpoint((p / "checkpoints" / f).string());
    EXPECT_EQ(a.step, b.step) << f;
    EXPECT_EQ(b.counters.count("validation_pending"), 0u) << f;
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t i = 0; i < a.params.size(); ++i)
      EXPECT_EQ(a.params[i].second.to_vector(), b.params[i].second.to_vector()) << f;
  }
  EXPECT_EQ(slurp(w / "eval.json"), slurp(p / "eval.json"));
}

}  // namespace
