// pelab — command-line tests: run the built `pelab` binary (PELAB_BINARY) for every verb, its
// --help, and every validation error path; each error must be one clear line "pelab: error: ..." on
// stderr with a non-zero exit status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

using pelab::testing::quote;
using pelab::testing::slurp;
using Result = pelab::testing::CommandResult;

class CLITest : public pelab::testing::TempDirTest {
 protected:
  CLITest() : TempDirTest("pelab_cli") {}
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(fs::exists(pelab::testing::pelab_binary()))
        << "build the pelab target first: " << pelab::testing::pelab_binary();
  }

  // Runs `pelab ARGS` (ARGS already shell-quoted where needed) with `input` on stdin.
  Result pelab(const std::string& args, const std::string& input = "") {
    const std::string in = write("stdin.txt", input);
    return pelab::testing::run_captured(quote(pelab::testing::pelab_binary()) + " " + args,
                                        dir_ / "stdout.txt", dir_ / "stderr.txt", in);
  }

  // A tiny, fast config (a few steps of a 1+1-layer model).
  std::string tiny_config(const std::string& name = "tiny.yaml", const std::string& extra = "") {
    return write(name, pelab::testing::tiny_cli_yaml(dir_ / "runs", extra));
  }

  // Asserts a failed run printed exactly one "pelab: error: " line containing every `needle`.
  void expect_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.rc, 0);
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << " in " << r.err;
  }
};

}  // namespace

TEST_F(CLITest, HelpAndVersionForEveryVerb) {
  Result top = pelab("--help");
  EXPECT_EQ(top.rc, 0);
  for (const char* verb : {"train", "eval", "generate", "info", "config-reference", "demo"}) {
    EXPECT_NE(top.out.find(std::string("  ") + verb), std::string::npos) << verb;
    Result h = pelab(std::string(verb) + " --help");
    EXPECT_EQ(h.rc, 0) << verb;
    EXPECT_EQ(h.out.rfind(std::string("usage: pelab ") + verb, 0), 0u) << h.out;
    EXPECT_TRUE(h.err.empty()) << h.err;
  }
  Result v = pelab("--version");
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out.rfind("pelab ", 0), 0u);
  EXPECT_NE(v.out.find("\nBLAS: OpenBLAS "), std::string::npos) << v.out;  // and its kernels
  Result none = pelab("");
  EXPECT_EQ(none.rc, 2);
  EXPECT_NE(none.err.find("usage: pelab"), std::string::npos);
}

TEST_F(CLITest, ConfigReferenceIsDocsConfigMd) {
  Result r = pelab("config-reference");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("pe.scheme"), std::string::npos);
  EXPECT_EQ(r.out, slurp(fs::path(pelab::testing::source_dir()) / "docs" / "config.md"))
      << "docs/config.md is out of date: pelab config-reference > docs/config.md";
}

TEST_F(CLITest, TrainEvalGenerateInfoResume) {
  const std::string cfg = tiny_config("tiny.yaml", "pe:\n  scheme: rope\n");
  Result t = pelab("train " + quote(cfg));
  ASSERT_EQ(t.rc, 0) << t.err;
  const fs::path run = dir_ / "runs" / "tiny";
  for (const char* f : {"config.yaml", "metrics.jsonl", "metrics.csv", "eval.json", "eval.csv",
                        "train.log", "checkpoints/step_4.h5", "checkpoints/best.h5"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  // Not a terminal: plain periodic lines every train.log_every steps, the same as train.log.
  EXPECT_NE(t.err.find("step 2/4 loss "), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("step 4/4 loss "), std::string::npos) << t.err;
  EXPECT_EQ(t.err.find('\r'), std::string::npos);
  EXPECT_NE(slurp(run / "train.log").find("step 2/4 loss "), std::string::npos);
  EXPECT_NE(slurp(run / "train.log").find("pelab train: BLAS: OpenBLAS "), std::string::npos);
  EXPECT_NE(t.out.find("len_6"), std::string::npos);

  // eval of the run directory, and of the config (same run), with eval-time RoPE scaling.
  Result e = pelab("eval " + quote(run.string()));
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_NE(e.out.find("checkpoints/best.h5 (step "), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("len_3"), std::string::npos);
  Result e2 = pelab("eval " + quote(cfg) + " --checkpoint last --set pe.rope_scaling=yarn " +
                    "--set pe.rope_scaling_factor=2 --set task.test_lengths=[8] --out " +
                    quote((dir_ / "ev").string()));
  ASSERT_EQ(e2.rc, 0) << e2.err;
  EXPECT_NE(e2.out.find("len_8"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "ev" / "eval.json"));
  EXPECT_NE(slurp(dir_ / "ev" / "eval.csv").find("len_8,8,4,"), std::string::npos);

  // generate: one output line per input line, symbols of the task's vocabulary only.
  Result g = pelab("generate " + quote(run.string()), "0123\n21\n3\n");
  ASSERT_EQ(g.rc, 0) << g.err;
  std::istringstream lines(g.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_EQ(line.find_first_not_of("0123"), std::string::npos) << line;
  }
  EXPECT_EQ(n, 3);
  expect_error(pelab("generate " + quote(run.string()), "01x\n"), {"unknown symbol 'x'"});
  // Input saved with a UTF-8 byte-order mark: the mark is not an (unknown) symbol of line 1.
  Result gb = pelab("generate " + quote(run.string()), "\xEF\xBB\xBF" "0123\r\n21\n");
  ASSERT_EQ(gb.rc, 0) << gb.err;
  EXPECT_EQ(gb.out.substr(0, gb.out.find('\n')), g.out.substr(0, g.out.find('\n')));

  Result i = pelab("info " + quote(cfg));
  ASSERT_EQ(i.rc, 0) << i.err;
  EXPECT_NE(i.out.find("total"), std::string::npos);
  EXPECT_NE(i.out.find("encoder.layers.0"), std::string::npos);
  EXPECT_NE(i.out.find("pe: rope"), std::string::npos);

  // A fresh run into the same directory is refused; --stop-after + --resume continue a run.
  expect_error(pelab("train " + quote(cfg)), {"already holds a run", "--resume"});
  Result s = pelab("train " + quote(cfg) + " --set train.run_name=part --stop-after 2 " +
                   "--progress bar");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.err.find("stopped at step 2"), std::string::npos) << s.err;
  // The bar (forced here; automatic on a terminal) is redrawn in place with '\r'.
  EXPECT_NE(s.err.find("\r["), std::string::npos) << s.err;
  EXPECT_NE(s.err.find(" ETA "), std::string::npos) << s.err;
  EXPECT_NE(s.err.find(" tok/s "), std::string::npos) << s.err;
  Result r = pelab("train " + quote(cfg) + " --resume " + quote((dir_ / "runs" / "part").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resumed"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(run / "eval.json"), slurp(dir_ / "runs" / "part" / "eval.json"));
}

TEST_F(CLITest, ConfigErrorsAreOneLineWithFileAndLine) {
  // Unknown key, with a suggestion and FILE:LINE.
  const std::string bad_key = write("bad_key.yaml", "model:\n  d_modle: 32\n");
  expect_error(pelab("train " + quote(bad_key)),
               {bad_key + ":2", "d_modle", "did you mean 'model.d_model'"});
  // Wrong type.
  const std::string bad_type = write("bad_type.yaml", "train:\n  steps: many\n");
  expect_error(pelab("train " + quote(bad_type)), {bad_type + ":2", "train.steps"});
  // Out of range.
  const std::string bad_range = write("bad_range.yaml", "model:\n  dropout: 1.5\n");
  expect_error(pelab("info " + quote(bad_range)), {bad_range + ":2", "model.dropout"});
  // Missing config file.
  expect_error(pelab("train " + quote((dir_ / "missing.yaml").string())),
               {"missing.yaml", "cannot open"});
  // Bad --set: no '=', unknown key, bad value.
  const std::string cfg = tiny_config();
  expect_error(pelab("info " + quote(cfg) + " --set model.d_model"), {"--set model.d_model"});
  expect_error(pelab("info " + quote(cfg) + " --set pe.schem=rope"),
               {"--set pe.schem=rope", "did you mean 'pe.scheme'"});
  expect_error(pelab("info " + quote(cfg) + " --set pe.scheme=bogus"), {"pe.scheme", "bogus"});
  // --set without its value.
  expect_error(pelab("info " + quote(cfg) + " --set"), {"--set needs a value"});
}

TEST_F(CLITest, UsageAndRunErrorsAreOneLine) {
  Result v = pelab("trian x.yaml");
  expect_error(v, {"unknown command 'trian'", "did you mean 'train'"});
  EXPECT_EQ(v.rc, 2);
  expect_error(pelab("train"), {"train: missing CONFIG"});
  const std::string cfg = tiny_config();
  expect_error(pelab("train " + quote(cfg) + " --bogus"), {"unknown option '--bogus'"});
  expect_error(pelab("train " + quote(cfg) + " --stop-after -3"), {"--stop-after"});
  // Missing data file.
  const std::string tf = tiny_config("tf.yaml", "");
  expect_error(pelab("train " + quote(tf) + " --set task.name=textfile --set task.train_file=" +
                     quote((dir_ / "nope.tsv").string())),
               {"nope.tsv"});
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "tf"));  // a failed start leaves no run directory
  // eval / generate of a missing run directory; resume of a missing directory.
  expect_error(pelab("eval " + quote((dir_ / "no_run").string())),
               {"no such config file or run directory"});
  expect_error(pelab("generate " + quote((dir_ / "no_run").string())),
               {"no such config file or run directory"});
  expect_error(pelab("train " + quote(cfg) + " --resume " + quote((dir_ / "no_run").string())),
               {"--resume", "no_run", "no such run directory"});
  // eval of a config whose run has no checkpoint yet.
  expect_error(pelab("eval " + quote(cfg)), {"no checkpoint"});
}

TEST_F(CLITest, CorruptAndMismatchedCheckpoints) {
  const std::string cfg = tiny_config();
  ASSERT_EQ(pelab("train " + quote(cfg)).rc, 0);
  const fs::path run = dir_ / "runs" / "tiny";
  // Shape mismatch and scheme mismatch: the checkpoint error names the file and dataset.
  expect_error(pelab("eval " + quote(run.string()) + " --set model.d_ff=64"),
               {"checkpoint", "best.h5", "params/", "shape"});
  expect_error(pelab("eval " + quote(run.string()) + " --set pe.scheme=t5"),
               {"checkpoint", "pe.scheme sinusoidal", "t5"});
  // A corrupt checkpoint (not HDF5) and a truncated one.
  std::ofstream(run / "checkpoints" / "best.h5", std::ios::trunc) << "this is not hdf5";
  expect_error(pelab("eval " + quote(run.string())), {"best.h5"});
  expect_error(pelab("generate " + quote(run.string()), "12\n"), {"best.h5"});
  const std::string good = slurp(run / "checkpoints" / "step_4.h5");
  std::ofstream(run / "checkpoints" / "step_4.h5", std::ios::trunc | std::ios::binary)
      << good.substr(0, good.size() / 2);
  expect_error(pelab("eval " + quote(run.string()) + " --checkpoint last"), {"step_4.h5"});
  expect_error(pelab("train " + quote(cfg) + " --resume " + quote(run.string())), {"step_4.h5"});
}

TEST_F(CLITest, InterruptWritesACheckpointAndTheRunResumes) {
  const std::string cfg = tiny_config("long.yaml");
  const fs::path run = dir_ / "runs" / "long", out = dir_ / "long.out", err = dir_ / "long.err";
  const std::string bin = pelab::testing::pelab_binary();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bin.c_str(), bin.c_str(), "train", cfg.c_str(), "--set", "train.steps=100000",
            "--set", "train.log_every=1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until training is under way, then interrupt it like Ctrl-C.
  const bool started = pelab::testing::wait_for(run / "train.log", "step 2/");
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(started);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string e = slurp(err);
  const size_t at = e.find("interrupted at step ");
  ASSERT_NE(at, std::string::npos) << e;
  const int64_t step = std::stoll(e.substr(at + 20));
  EXPECT_GE(step, 2);
  EXPECT_TRUE(fs::exists(run / "checkpoints" / ("step_" + std::to_string(step) + ".h5")));
  // Resume and finish two steps later (train.steps may change on resume).
  Result r = pelab("train " + quote(cfg) + " --resume " + quote(run.string()) +
                   " --set train.steps=" + std::to_string(step + 2));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resumed " + run.string() + " at step " + std::to_string(step)),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(run / "eval.json"));
}
