// pelab — tests of parallel comparisons (`pelab compare --jobs N`, --plan, --only, --report-only;
// train/study/compare.h) and of the hyper-parameter search (compare.search) chosen on validation only.
// The comparisons are tiny (1+1 layers, d_model 16, a few steps); the --jobs tests run the built
// `pelab` binary (PELAB_BINARY), whose children are `pelab compare CONFIG --only I`.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint.h"
#include "train/app/cli.h"
#include "train/study/compare.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/study/report.h"
#include "train/trainer.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::slurp;
using pelab::testing::quote;

using pelab::testing::results_without_timing;

// A stand-in for the pelab binary: each child writes "started" to its log, then waits (30 s at
// most); on SIGTERM it writes "got TERM" and exits 130.
const char* const kWaitingChild =
    "#!/bin/sh\ntrap 'echo got TERM; exit 130' TERM\necho started\n"
    "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\nexit 0\n";

// The processes whose parent is `ppid` and whose command line contains `part`, zombies excluded
// (/proc/PID/stat: state and parent after the command name).
std::vector<pid_t> children_of(pid_t ppid, const std::string& part) {
  std::vector<pid_t> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream f(stat.substr(paren + 2));
    char state = 0;
    long parent = 0;
    f >> state >> parent;
    if (parent == ppid && state != 'Z' &&
        slurp(e.path() / "cmdline").find(part) != std::string::npos)
      found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

// Whether process `pid` still runs (exists and is not a zombie).
bool alive(pid_t pid) {
  const std::string stat = slurp(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class CompareJobsTest : public pelab::testing::TinyCompareTest {
 protected:
  CompareJobsTest() : TinyCompareTest("pelab_compare_jobs") {}

  CompareOptions quiet(const std::string& out) {
    CompareOptions o;
    o.out = (dir_ / out).string();
    o.progress = 2;
    o.jobs = 1;
    o.plots = false;
    o.log = &log_;
    return o;
  }

  // quiet("rep") with 2 jobs whose children run `script`, a /bin/sh stand-in for the pelab
  // binary (written to fake_pelab.sh).
  CompareOptions fake_children(const std::string& script) {
    const fs::path fake = write("fake_pelab.sh", script);
    fs::permissions(fake, fs::perms::owner_all);
    CompareOptions o = quiet("rep");
    o.jobs = 2;
    o.exe = fake.string();
    return o;
  }

  std::ostringstream log_;
};

const char* kRuns[] = {"rope_seed1", "rope_seed2", "t5_seed1", "t5_seed2"};

// The config digest --plan prints for run i (0-based) of `spec` (its output folder "rep").
std::string fingerprint_of_run(const CompareSpec& spec, size_t i) {
  std::istringstream plan(compare_plan_text(spec, "rep"));
  std::string line;
  std::getline(plan, line);  // the "# N runs" line
  std::getline(plan, line);  // the column heads
  for (size_t k = 0; k <= i; ++k) std::getline(plan, line);
  std::istringstream f(line);
  std::string index, run, seed, digest;
  f >> index >> run >> seed >> digest;
  return digest;
}

// ---------------- --jobs ----------------

TEST_F(CompareJobsTest, ParallelRunsEqualSequentialRuns) {
  const std::string cfg = config();
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --jobs 1 --out seq --no-plots"), 0) << err_;
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --jobs 2 --out par --no-plots"), 0) << err_;
  EXPECT_NE(err_.find("4 runs to train, 2 at once"), std::string::npos) << err_;
  EXPECT_NE(err_.find("[3/4] started t5 seed 1"), std::string::npos) << err_;
  EXPECT_NE(err_.find("[3/4] finished t5 seed 1"), std::string::npos) << err_;
  EXPECT_NE(out_.find("report: "), std::string::npos);

  const auto a = results_without_timing(dir_ / "seq" / "results.csv");
  const auto b = results_without_timing(dir_ / "par" / "results.csv");
  ASSERT_EQ(a.size(), 4u * 3u);  // 4 runs x 3 test lengths
  EXPECT_EQ(results_csv(a), results_csv(b));
  EXPECT_TRUE(fs::exists(dir_ / "par" / "report.md"));
  for (const char* run : kRuns) {
    SCOPED_TRACE(run);
    EXPECT_FALSE(fs::exists(dir_ / "seq" / "runs" / run / "compare.log"));
    EXPECT_NE(slurp(dir_ / "par" / "runs" / run / "compare.log").find("training"),
              std::string::npos);
    const CheckpointData ca =
        load_checkpoint(latest_checkpoint((dir_ / "seq" / "runs" / run).string()));
    const CheckpointData cb =
        load_checkpoint(latest_checkpoint((dir_ / "par" / "runs" / run).string()));
    EXPECT_EQ(ca.step, 12);
    EXPECT_EQ(cb.step, 12);
    ASSERT_EQ(ca.params.size(), cb.params.size());
    for (size_t i = 0; i < ca.params.size(); ++i) {
      EXPECT_EQ(ca.params[i].first, cb.params[i].first);
      EXPECT_EQ(ca.params[i].second.to_vector(), cb.params[i].second.to_vector())
          << ca.params[i].first;
    }
  }
  // Running it again reuses everything: nothing is spawned.
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --jobs 2 --out par --no-plots"), 0) << err_;
  EXPECT_EQ(err_.find("at once"), std::string::npos) << err_;
  EXPECT_NE(err_.find("finished run reused"), std::string::npos) << err_;
}

// A program other than pelab (this test binary) registers no child binary: --jobs 2 trains every
// run in-process instead of starting copies of itself.
TEST_F(CompareJobsTest, WithoutAChildBinaryRunsStayInProcess) {
  const CompareSpec spec = load_compare(config(), {"compare.seeds=[1]"});
  CompareOptions o = quiet("rep");
  o.jobs = 2;
  const CompareResult r = run_compare(spec, o);
  EXPECT_EQ(r.trained, 2);
  EXPECT_EQ(log_.str().find("at once"), std::string::npos) << log_.str();
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs" / "rope_seed1" / "compare.log"));
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "report.md"));
}

TEST_F(CompareJobsTest, PlanListsRunsAndTrainsNothing) {
  const std::string cfg = config();
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --plan --out rep"), 0) << err_;
  std::istringstream lines(out_);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line))
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  ASSERT_EQ(rows.size(), 5u) << out_;  // header + 4 runs
  EXPECT_NE(rows[0].find("index"), std::string::npos);
  std::set<std::string> digests;
  for (size_t i = 0; i < 4; ++i) {
    std::istringstream f(rows[i + 1]);
    std::string idx, name, seed, digest;
    f >> idx >> name >> seed >> digest;
    EXPECT_EQ(idx, std::to_string(i + 1));
    EXPECT_EQ(name, kRuns[i]);
    EXPECT_EQ(seed, i % 2 == 0 ? "1" : "2");
    EXPECT_EQ(digest.size(), 16u);
    digests.insert(digest);
    EXPECT_NE(rows[i + 1].find("to train"), std::string::npos);
  }
  EXPECT_EQ(digests.size(), 4u);  // every run's config differs (scheme or seed)
  EXPECT_FALSE(fs::exists(dir_ / "rep"));
  // The digest depends on the config only (not on the run directory).
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --plan --out other"), 0);
  for (const auto& d : digests) EXPECT_NE(out_.find(d), std::string::npos);
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --plan --set train.steps=8"), 0);
  for (const auto& d : digests) EXPECT_EQ(out_.find(d), std::string::npos);
}

TEST_F(CompareJobsTest, OnlyTrainsTheNamedRunsAndReportOnlyListsTheMissing) {
  const std::string cfg = config();
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --only 3 --out rep --no-plots"), 0) << err_;
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "runs" / "t5_seed1" / "eval.json"));
  // --only evaluates the run too (cached for the report).
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "runs" / "t5_seed1" / "compare_eval" / "base.csv"));
  for (const char* run : {"rope_seed1", "rope_seed2", "t5_seed2"})
    EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs" / run)) << run;
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "report.md"));
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "results.csv"));
  EXPECT_EQ(out_, "");

  ASSERT_EQ(pelab("compare " + quote(cfg) + " --plan --out rep"), 0);
  EXPECT_NE(out_.find("t5_seed1"), std::string::npos);
  EXPECT_NE(out_.find("finished"), std::string::npos);

  EXPECT_EQ(pelab("compare " + quote(cfg) + " --report-only --out rep --no-plots"), 1);
  EXPECT_NE(err_.find("3 of 4 runs are not finished (rope_seed1, rope_seed2, t5_seed2)"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs" / "rope_seed1"));  // nothing trained
  const auto partial = results_without_timing(dir_ / "rep" / "results.csv");
  ASSERT_EQ(partial.size(), 3u);
  for (const auto& r : partial) EXPECT_EQ(r.label() + std::to_string(r.seed), "t51");

  ASSERT_EQ(pelab("compare " + quote(cfg) + " --only 1,2,4 --out rep --no-plots"), 0) << err_;
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --report-only --out rep --no-plots"), 0) << err_;
  EXPECT_EQ(results_without_timing(dir_ / "rep" / "results.csv").size(), 12u);
  // --report-only trained nothing and reused the cached evaluations.
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;
}

TEST_F(CompareJobsTest, BadJobsAndOnlyAreOneLineErrorsBeforeTraining) {
  const std::string cfg = config();
  struct Case {
    std::vector<std::string> args;
    int rc;
    std::string msg;
  };
  const std::vector<Case> cases = {
      {{"--jobs", "0"}, 2, "--jobs must be an integer >= 1"},
      {{"--jobs", "-2"}, 2, "--jobs must be an integer >= 1"},
      {{"--jobs", "two"}, 2, "got 'two'"},
      {{"--jobs=1.5"}, 2, "got '1.5'"},
      {{"--jobs"}, 2, "needs a value"},
      {{"--only", "0"}, 2, "--only expects run indexes"},
      {{"--only", "1,,2"}, 2, "got '1,,2'"},
      {{"--only", "1,"}, 2, "got '1,'"},
      {{"--only", "x"}, 2, "got 'x'"},
      {{"--only", "5"}, 1, "--only 5: the plan has 4 runs, numbered 1-4"},
      {{"--only", "2,9"}, 1, "--only 9: the plan has 4 runs"},
      {{"--only", "1", "--report-only"}, 2, "exclude each other"},
      {{"--plan", "--report-only"}, 2, "exclude each other"},
      {{"--set", "compare.jobs=0"}, 1, "--set compare.jobs=0: compare.jobs must be an integer"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"compare", cfg, "--out", (dir_ / "rep").string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    EXPECT_EQ(cli(args), c.rc) << c.args[0];
    EXPECT_NE(err_.find(c.msg), std::string::npos) << err_;
    EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
    EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs")) << c.args[0];
  }
  // compare.jobs in the config: FILE:LINE.
  for (const std::string v : {"0", "-1", "many", "[2]"}) {
    const std::string bad = config("  jobs: " + v + "\n", 12, "bad.yaml");
    EXPECT_EQ(cli({"compare", bad}), 1) << v;
    EXPECT_NE(err_.find("bad.yaml:13: compare.jobs must be an integer >= 1"), std::string::npos)
        << err_;
  }
  const CompareSpec ok = load_compare(config("  jobs: 3\n"), {});
  EXPECT_EQ(ok.jobs, 3);
  EXPECT_EQ(load_compare(config("  jobs: 3\n"), {"compare.jobs=2"}).jobs, 2);
}

// A stand-in for the pelab binary that fails: the comparison fails with one line naming the run
// and its log.
TEST_F(CompareJobsTest, FailingChildFailsTheComparisonNamingRunAndLog) {
  const CompareSpec spec = load_compare(config(), {});
  CompareOptions o = fake_children(
      "#!/bin/sh\necho \"fake child: $*\"\ncase \"$*\" in *'--only 2 '*) "
      "exit 3;; esac\nsleep 0.2\nexit 0\n");
  try {
    run_compare(spec, o);
    FAIL() << "expected the comparison to fail";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compare: run rope_seed2 failed (exit status 3); see " +
                     (dir_ / "rep" / "runs" / "rope_seed2" / "compare.log").string()),
              std::string::npos)
        << m;
  }
  const std::string child_log = slurp(dir_ / "rep" / "runs" / "rope_seed2" / "compare.log");
  EXPECT_NE(child_log.find("fake child: compare " + (dir_ / "tiny.yaml").string() +
                           " --only 2 --out " + (dir_ / "rep").string()),
            std::string::npos)
      << child_log;
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "report.md"));
}

// The config file is edited while the comparison runs (each child re-reads it): a child whose run
// is no longer the one planned trains nothing and fails, naming the change, instead of training
// the edited config in the planned run's place. The fault: a stand-in child edits the config
// (train.steps 12 -> 13, every run's digest changes), then runs the real pelab.
TEST_F(CompareJobsTest, ConfigEditedWhileTheComparisonRunsTrainsNothingInThePlannedRunsPlace) {
  const std::string cfg = config();
  const CompareSpec spec = load_compare(cfg, {});
  const std::string planned = fingerprint_of_run(spec, 0);
  CompareOptions o = fake_children("#!/bin/sh\nsed -i 's/steps: 12,/steps: 13,/' " + quote(cfg) +
                                   "\nexec " + quote(pelab::testing::pelab_binary()) + " \"$@\"\n");
  // Runs 1 and 2 start together (--jobs 2) and both refuse; whichever fails first is reported and
  // the other is stopped, perhaps before it wrote anything: the reported run's log is checked.
  std::string failed;
  try {
    run_compare(spec, o);
    FAIL() << "expected the comparison to fail";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    for (const char* run : {"rope_seed1", "rope_seed2"})
      if (m.find("compare: run " + std::string(run) + " failed (exit status 1)") !=
          std::string::npos)
        failed = run;
    EXPECT_FALSE(failed.empty()) << m;
  }
  if (failed.empty()) return;
  const int index = failed == "rope_seed1" ? 1 : 2;
  const std::string child_log = slurp(dir_ / "rep" / "runs" / failed / "compare.log");
  EXPECT_NE(child_log.find("compare: run " + std::to_string(index) + " of " + cfg + " is now " +
                           failed + " with config "),
            std::string::npos)
      << child_log;
  EXPECT_NE(child_log.find("not the config " + fingerprint_of_run(spec, index - 1) +
                           " this comparison planned: the config file changed while it ran"),
            std::string::npos)
      << child_log;
  for (const char* run : kRuns)
    EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs" / run / "checkpoints")) << run;
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "report.md"));
  // The check itself, from the command line: the right digest trains, another does not.
  const std::string now = fingerprint_of_run(load_compare(cfg, {}), 0);
  EXPECT_EQ(pelab("compare " + quote(cfg) + " --only 1 --expect-config " + planned +
                  " --out rep2 --no-plots"),
            1);
  EXPECT_FALSE(fs::exists(dir_ / "rep2" / "runs"));
  EXPECT_EQ(pelab("compare " + quote(cfg) + " --only 2 --expect-config " + now +
                  " --out rep2 --no-plots"),
            2 - 1)
      << "run 2's digest is not run 1's";
  EXPECT_EQ(pelab("compare " + quote(cfg) + " --only 1 --expect-config " + now +
                  " --out rep2 --no-plots"),
            0)
      << err_;
  EXPECT_TRUE(fs::exists(dir_ / "rep2" / "runs" / "rope_seed1" / "eval.json"));
  EXPECT_EQ(pelab("compare " + quote(cfg) + " --only 1,2 --expect-config " + now), 2);
  EXPECT_NE(err_.find("--expect-config needs exactly one --only run"), std::string::npos) << err_;
}

// A row with its own train.steps or depth (compare.schemes' set:) is named where the plan, the log
// and the report state the comparison's steps and layers, instead of hiding behind the base's.
TEST_F(CompareJobsTest, RowsWithTheirOwnStepsOrLayersAreNamed) {
  const std::string cfg = config(
      "    - {name: t5deep, set: {pe.scheme: t5, train.steps: 16, model.decoder_layers: 2}}\n");
  const CompareSpec spec = load_compare(cfg, {});
  const std::string plan = compare_plan_text(spec, "rep");
  EXPECT_EQ(plan.rfind("# 6 runs of 12-16 steps in ", 0), 0u) << plan;
  run_compare(spec, quiet("rep"));
  EXPECT_NE(log_.str().find("= 6 runs of 12-16 steps;"), std::string::npos) << log_.str();
  const std::string md = slurp(dir_ / "rep" / "report.md");
  EXPECT_NE(md.find("1+1 layers (t5deep: 1+2); 12 steps (t5deep: 16) of batch 8"),
            std::string::npos)
      << md.substr(0, 600);
  // Rows that share the base's keep the line as it was.
  const CompareSpec plain = load_compare(config("", 12, "plain.yaml"), {});
  EXPECT_EQ(compare_plan_text(plain, "rep").rfind("# 4 runs of 12 steps in ", 0), 0u);
}

// A run that cannot be started (its directory cannot be created: a file is in the way) fails the
// comparison naming it, after the children already running were stopped and waited for.
TEST_F(CompareJobsTest, RunThatCannotStartStopsTheRunningChildrenFirst) {
  fs::create_directories(dir_ / "rep" / "runs");
  std::ofstream(dir_ / "rep" / "runs" / "rope_seed2") << "in the way\n";
  const CompareSpec spec = load_compare(config(), {});
  CompareOptions o = fake_children(kWaitingChild);
  try {
    run_compare(spec, o);
    FAIL() << "expected the comparison to fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create " +
                                         (dir_ / "rep" / "runs" / "rope_seed2").string()),
              std::string::npos)
        << e.what();
  }
  // Run 1 was stopped and waited for before the error came back: no child of this process runs
  // the stand-in any more (they are reaped, not even zombies).
  const std::vector<pid_t> left = children_of(::getpid(), "fake_pelab");
  EXPECT_TRUE(left.empty()) << left.size() << " child(ren) left running";
  for (pid_t p : left) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

// SIGTERM to the parent is forwarded to every running child; the comparison reports an
// interruption (exit 130 on the command line) and starts no further run.
TEST_F(CompareJobsTest, SignalIsForwardedToChildren) {
  const CompareSpec spec = load_compare(config(), {});
  CompareOptions o = fake_children(kWaitingChild);
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(::getpid(), SIGTERM);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const CompareResult r = run_compare(spec, o);
  killer.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.interrupted);
  EXPECT_LT(s, 20.0);  // did not wait for the children's 30 s
  for (const char* run : {"rope_seed1", "rope_seed2"}) {
    const std::string l = slurp(dir_ / "rep" / "runs" / run / "compare.log");
    EXPECT_NE(l.find("started"), std::string::npos) << run;
    EXPECT_NE(l.find("got TERM"), std::string::npos) << run << ": " << l;
  }
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "runs" / "t5_seed1"));  // never started
  EXPECT_NE(log_.str().find("run the same command again to continue"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "report.md"));
}

// The real thing: SIGTERM to `pelab compare --jobs 2` stops both children with a checkpoint and
// exits 130; --plan then shows where each run resumes.
TEST_F(CompareJobsTest, InterruptedParallelComparisonCheckpointsAndResumes) {
  const std::string cfg = config();
  const fs::path err = dir_ / "par.err", runs = dir_ / "rep" / "runs";
  const std::string bin = pelab::testing::pelab_binary();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bin.c_str(), bin.c_str(), "compare", cfg.c_str(), "--jobs", "2", "--out",
            (dir_ / "rep").c_str(), "--set", "train.steps=100000", "--set", "train.log_every=1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const bool started = pelab::testing::wait_for(runs / "rope_seed1" / "train.log", "step 2/") &&
                       pelab::testing::wait_for(runs / "rope_seed2" / "train.log", "step 2/");
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(started);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string e = slurp(err);
  EXPECT_NE(e.find("run the same command again to continue"), std::string::npos) << e;
  EXPECT_NE(e.find("stopped rope seed 1"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(runs / "t5_seed1"));
  std::map<std::string, int64_t> stopped_at;
  for (const char* run : {"rope_seed1", "rope_seed2"}) {
    const std::string l = slurp(runs / run / "compare.log");
    const size_t at = l.find("interrupted at step ");
    ASSERT_NE(at, std::string::npos) << run << ": " << l;
    stopped_at[run] = std::stoll(l.substr(at + 20));
    EXPECT_TRUE(fs::exists(runs / run / "checkpoints" /
                           ("step_" + std::to_string(stopped_at[run]) + ".h5")));
  }
  ASSERT_EQ(pelab("compare " + quote(cfg) + " --plan --out rep --set train.steps=100000"), 0);
  EXPECT_NE(out_.find("resumes at step " + std::to_string(stopped_at["rope_seed1"])),
            std::string::npos)
      << out_;
  // (Resuming is the in-process path that CompareTest.InterruptedComparisonResumesToTheSame-
  // Results checks bit for bit: a child is `pelab compare CONFIG --only I`.)
  EXPECT_NE(out_.find("resumes at step " + std::to_string(stopped_at["rope_seed2"])),
            std::string::npos)
      << out_;
}

// `kill -9` of `pelab compare --jobs 2` (no chance to forward a signal): its children get SIGTERM
// from the kernel (PR_SET_PDEATHSIG) and stop at a checkpoint within seconds instead of training
// on as orphans that hold their run directories' locks.
TEST_F(CompareJobsTest, ChildrenDieWithTheirParent) {
  const std::string cfg = config();
  const fs::path runs = dir_ / "rep" / "runs";
  const std::string bin = pelab::testing::pelab_binary();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execl(bin.c_str(), bin.c_str(), "compare", cfg.c_str(), "--jobs", "2", "--out",
            (dir_ / "rep").c_str(), "--set", "train.steps=100000", "--set", "train.log_every=1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const bool started = pelab::testing::wait_for(runs / "rope_seed1" / "train.log", "step 2/") &&
                       pelab::testing::wait_for(runs / "rope_seed2" / "train.log", "step 2/");
  const std::vector<pid_t> children = children_of(pid, "--only");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(started);
  ASSERT_EQ(children.size(), 2u);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<pid_t> left = children;
  while (!left.empty() && seconds() < 15) {
    left.erase(std::remove_if(left.begin(), left.end(), [](pid_t p) { return !alive(p); }),
               left.end());
    ::usleep(50000);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " child(ren) still training " << seconds()
                            << " s after the parent was killed";
  for (pid_t p : left) ::kill(p, SIGKILL);
  // They stopped as on Ctrl-C: at a checkpoint the next run resumes from.
  for (const char* run : {"rope_seed1", "rope_seed2"})
    EXPECT_NE(slurp(runs / run / "compare.log").find("interrupted at step "), std::string::npos)
        << run;
}

// A run whose directory is locked by another process (an orphan still training it, a second
// comparison): the comparison's one error line says so and names the holder, not only the log.
TEST_F(CompareJobsTest, LockedRunDirectoryIsNamedWithItsHolder) {
  const std::string cfg = config();
  const fs::path run = dir_ / "rep" / "runs" / "rope_seed1";
  fs::create_directories(run);
  write("rep/runs/rope_seed1/compare.log", "pelab: error: an older failure\n");
  const int fd = ::open((run / ".pelab.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string holder = std::to_string(::getpid());
  ASSERT_EQ(::write(fd, (holder + "\n").data(), holder.size() + 1),
            static_cast<ssize_t>(holder.size() + 1));
  const int rc = pelab("compare " + quote(cfg) + " --jobs 2 --out rep --no-plots");
  ::close(fd);
  EXPECT_EQ(rc, 1);
  const std::string last = err_.substr(err_.rfind("pelab: error: "));
  EXPECT_NE(last.find("compare: run rope_seed1 failed (exit status 1): run directory "
                      "rep/runs/rope_seed1 is in use by another pelab process (pid " +
                      holder + ")"),
            std::string::npos)
      << err_;
  EXPECT_NE(last.find("; see rep/runs/rope_seed1/compare.log"), std::string::npos) << err_;
  EXPECT_EQ(last.find("older failure"), std::string::npos) << err_;  // this run's reason only
  EXPECT_EQ(std::count(last.begin(), last.end(), '\n'), 1) << err_;
}

// A child binary that cannot be started: one error naming it and why, no run left running.
TEST_F(CompareJobsTest, ChildBinaryThatCannotStartIsNamed) {
  const CompareSpec spec = load_compare(config(), {});
  CompareOptions o = quiet("rep");
  o.jobs = 2;
  o.exe = (dir_ / "no_such_pelab").string();
  const std::string e = pelab::testing::error_of([&] { run_compare(spec, o); });
  EXPECT_NE(e.find("compare: cannot start " + o.exe + ": No such file or directory"),
            std::string::npos)
      << e;
  EXPECT_TRUE(children_of(::getpid(), "").empty());
}

// ---------------- compare.search ----------------

TEST_F(CompareJobsTest, SearchRejectsKeysThatTouchDataEvaluationOrTheComparison) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"task.test_lengths: [[2], [4]]", "changes the data, the test set or the evaluation"},
      {"task.seed: [1, 2]", "changes the data"},
      {"eval.batch_size: [2, 3]", "changes the data, the test set or the evaluation"},
      {"compare.seeds: [1]", "changes the data"},
      {"train.seed: [1, 2]", "train.seed is set by the comparison"},
      {"train.run_dir: [a, b]", "is set by the comparison"},
      {"train.run_name: [a, b]", "is set by the comparison"},
      {"train.resume: [a, b]", "is set by the comparison"},
      {"train.log_every: [1, 2]", "does not change what is trained"},
      {"train.stop_when: [{}, {}]", "train.stop_when is the criterion candidates are compared on"},
      {"train.threads: [1, 2]", "does not change what is trained"},
      {"pe.rope_scaling: [pi, ntk]", "only changes the evaluation"},
      {"train.bogus: [1, 2]", "unknown key 'train.bogus'"},
      {"lr: [1, 2]", "needs a section"},
      {"train.lr: 0.001", "must be a non-empty list"},
      {"train.lr: [0.001, 0.001]", "appears twice"},
      {"train.lr: [0.001, fast]", "compare.search.train.lr"},
  };
  for (const auto& [entry, msg] : bad) {
    const std::string path = config("  search:\n    " + entry + "\n", 12, "bad.yaml");
    try {
      load_compare(path, {});
      ADD_FAILURE() << entry << " accepted";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bad.yaml:14: "), std::string::npos) << entry << ": " << m;
      EXPECT_NE(m.find(msg), std::string::npos) << entry << ": " << m;
    }
  }
  try {
    load_compare(config("  search:\n    train.lr: [0.001]\n"), {"compare.search={}"});
    ADD_FAILURE() << "compare.search accepted from --set";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be set from the command line"), std::string::npos);
  }
  // Allowed: training keys, model and PE keys; the grid is the product, first key slowest.
  const CompareSpec ok =
      load_compare(config("  search:\n    train.lr: [1e-3, 2e-3]\n    model.d_ff: [32, 64]\n"), {});
  const auto plan = compare_plan(ok, (dir_ / "rep").string());
  ASSERT_EQ(plan.size(), 2u * 4u * 2u);
  EXPECT_EQ(plan[0].cfg.train.run_name, "rope@lr=1e-3,d_ff=32_seed1");
  EXPECT_EQ(plan[1].cfg.train.run_name, "rope@lr=1e-3,d_ff=32_seed2");
  EXPECT_EQ(plan[2].cfg.train.run_name, "rope@lr=1e-3,d_ff=64_seed1");
  EXPECT_EQ(plan[6].cfg.train.run_name, "rope@lr=2e-3,d_ff=64_seed1");
  EXPECT_DOUBLE_EQ(plan[6].cfg.train.lr, 2e-3);
  EXPECT_EQ(plan[6].cfg.model.d_ff, 64);
  EXPECT_EQ(plan[8].cfg.train.run_name, "t5@lr=1e-3,d_ff=32_seed1");
}

// Rewrites the `valid` row's exact_match of a run's eval.json and sets every test row's to
// `test_em` (a poisoned value the search must never read).
void poison_eval_json(const fs::path& run, double valid_em, double test_em) {
  const fs::path p = run / "eval.json";
  std::istringstream in(slurp(p));
  std::string line, out;
  while (std::getline(in, line)) {
    std::string t = line;
    const bool comma = !t.empty() && t.back() == ',';
    if (comma) t.pop_back();
    const size_t b = t.find('{');
    if (b != std::string::npos && t.compare(b, 8, "{\"split\"") == 0) {
      MetricRow row = parse_metric_row(t.substr(b), p.string());
      const bool valid = row.get("split")->s == "valid";
      row.set("exact_match", valid ? valid_em : test_em);
      line = t.substr(0, b) + row.json() + (comma ? "," : "");
    }
    out += line + "\n";
  }
  std::ofstream(p, std::ios::trunc) << out;
}

// Replaces the convergence record of a run's eval.json (train.stop_when's outcome).
void set_convergence(const fs::path& run, bool met, int64_t step) {
  Convergence c;
  c.converged = met ? Converged::yes : Converged::no;
  c.criterion = "exact_match on valid >= 0.5";
  c.metric = "exact_match";
  c.step = step;
  c.steps_run = 8;
  c.value = 0.5;
  const fs::path p = run / "eval.json";
  std::istringstream in(slurp(p));
  std::string line, out;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.rfind(" \"convergence\": ", 0) == 0) continue;
    out += line + "\n";
    if (first) out += " \"convergence\": " + convergence_json(c) + ",\n";
    first = false;
  }
  std::ofstream(p, std::ios::trunc) << out;
  ASSERT_EQ(read_convergence(run.string()).met(), met);
}

// Two spellings of one number train the same run: refused when the config is read, naming both.
TEST_F(CompareJobsTest, SearchValuesThatAreTheSameNumberAreRefused) {
  const std::string long_spelling = "0.001" + std::string(250, '0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.lr: [0.001, 1e-3]", "compare.search.train.lr: 0.001 and 1e-3 are the same value"},
      {"train.lr: [0.001, 0.002, " + long_spelling + "]",
       "compare.search.train.lr: 0.001 and 0.00100000000000000000000000000000000000... (255 "
       "bytes) are the same value (0.001); list each value once"},
      {"model.d_ff: [32, 64, +32]",
       "compare.search.model.d_ff: 32 and +32 are the same value (32)"},
  };
  for (const auto& [entry, msg] : cases) {
    const std::string path = config("  search:\n    " + entry + "\n", 12, "bad.yaml");
    EXPECT_EQ(cli({"compare", path, "--plan"}), 1) << entry;
    EXPECT_NE(err_.find("bad.yaml:14: " + msg), std::string::npos) << entry << ": " << err_;
    EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  }
  // Different numbers are different candidates.
  EXPECT_EQ(load_compare(config("  search:\n    train.lr: [0.001, 0.0010001]\n"), {})
                .search[0]
                .values.size(),
            2u);
}

// A name pelab forms that the file system cannot create (over NAME_MAX, 255 bytes: a long scheme
// name, a long spelling of a search value, a long variant name, a long --out folder) is one error
// line from --plan, --emit-slurm and compare itself before anything is written or trained;
// it used to pass --plan and --emit-slurm and fail when the run started training, stopping its
// siblings.
TEST_F(CompareJobsTest, NamesTooLongForTheFileSystemAreRefusedByThePlan) {
  const std::string scheme(250, 's');
  const std::string value = "0.002" + std::string(250, '0') + "1";  // 0.002 as a double
  struct Case {
    std::string extra;  // the compare section's end
    std::vector<std::string> flags;
    std::string msg;
  };
  const std::vector<Case> cases = {
      {"    - {name: " + scheme + ", set: {pe.scheme: rope}}\n", {},
       "compare.schemes (" + scheme.substr(0, 40) + "... (250 bytes)): the run directory name '" +
           scheme.substr(0, 40) + "... (256 bytes)' is too long for a file name (the file system "
           "takes up to 255 bytes); shorten the scheme name"},
      {"  search:\n    train.lr: [0.001, " + value + "]\n", {},
       "compare.schemes (rope, search candidate lr=0.0020000000000000000000000000000000"},
      {"  variants: [{name: " + std::string(230, 'v') +
           ", set: {pe.rope_scaling: pi, pe.rope_scaling_factor: 2}}]\n",
       {}, "its evaluation file 'vvvv"},
      {"", {"--out", (dir_ / std::string(256, 'o') / "rep").string()},
       "the folder '" + std::string(40, 'o') + "... (256 bytes)' of the run directory is too "
       "long for a file name"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.msg);
    const std::string path = config(c.extra, 12, "bad.yaml");
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{"--plan"}, {"--emit-slurm", (dir_ / "jobs").string()},
          {"--jobs", "2", "--no-plots"}}) {
      std::vector<std::string> args = {"compare", path, "--out", (dir_ / "rep").string()};
      args.insert(args.end(), mode.begin(), mode.end());
      args.insert(args.end(), c.flags.begin(), c.flags.end());
      EXPECT_EQ(cli(args), 1) << mode[0];
      EXPECT_NE(err_.find("pelab: error: " + path + ": "), std::string::npos) << err_;
      EXPECT_NE(err_.find(c.msg), std::string::npos) << mode[0] << ": " << err_;
      EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
      EXPECT_FALSE(fs::exists(dir_ / "rep")) << mode[0];
      EXPECT_FALSE(fs::exists(dir_ / "jobs")) << mode[0];
    }
  }
  // The limit itself: a run name of exactly 255 bytes is planned.
  const std::string fits(255 - std::string("_seed1").size(), 'f');
  EXPECT_EQ(cli({"compare", config("    - {name: " + fits + ", set: {pe.scheme: rope}}\n"),
                 "--plan", "--out", (dir_ / "rep").string()}),
            0)
      << err_;
}

TEST_F(CompareJobsTest, SearchChoosesOnValidationOnlyAndNeverEvaluatesOtherCandidatesOnTest) {
  const std::string cfg = config("  search:\n    train.lr: [0.001, 0.004]\n", 8);
  const CompareSpec spec = load_compare(cfg, {"compare.seeds=[1]"});
  const fs::path runs = dir_ / "rep" / "runs";
  const std::string a = "rope@lr=0.001_seed1", b = "rope@lr=0.004_seed1";
  CompareResult first = run_compare(spec, quiet("rep"));
  ASSERT_FALSE(first.interrupted);
  EXPECT_EQ(first.trained, 4);
  ASSERT_EQ(first.chosen.size(), 2u);

  // Candidate lr=0.001 is best on the tests (poisoned: 100 %), lr=0.004 on validation.
  for (const char* scheme : {"rope", "t5"}) {
    poison_eval_json(runs / (std::string(scheme) + "@lr=0.001_seed1"), 0.25, 1.0);
    poison_eval_json(runs / (std::string(scheme) + "@lr=0.004_seed1"), 0.75, 0.0);
  }
  for (const auto& e : fs::directory_iterator(runs)) fs::remove_all(e.path() / "compare_eval");
  CompareResult r = run_compare(spec, quiet("rep"));
  EXPECT_EQ(r.trained, 0);
  EXPECT_EQ(r.chosen.at("rope"), "lr=0.004");
  EXPECT_EQ(r.chosen.at("t5"), "lr=0.004");
  // Only the chosen candidates were evaluated on the test lengths.
  EXPECT_TRUE(fs::exists(runs / b / "compare_eval" / "base.csv"));
  EXPECT_FALSE(fs::exists(runs / a / "compare_eval"));
  EXPECT_FALSE(fs::exists(runs / "t5@lr=0.001_seed1" / "compare_eval"));
  // The scheme's rows are the chosen runs' test results (from their checkpoints, not eval.json).
  ASSERT_EQ(r.rows.size(), 2u * 3u);
  std::string cache = slurp(runs / b / "compare_eval" / "base.csv");
  cache = cache.substr(cache.find('\n') + 1);  // the fingerprint line
  const std::vector<ResultRow> chosen_rows = parse_results_csv(cache, "cache");
  ASSERT_EQ(chosen_rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.rows[i].scheme, "rope");
    EXPECT_EQ(r.rows[i].split, chosen_rows[i].split);
    EXPECT_EQ(r.rows[i].loss, chosen_rows[i].loss);
    EXPECT_EQ(r.rows[i].exact_match, chosen_rows[i].exact_match);
  }
  const std::string md = slurp(dir_ / "rep" / "report.md");
  EXPECT_NE(md.find("## Hyper-parameter search"), std::string::npos);
  EXPECT_NE(md.find("| rope | lr=0.004 | `train.lr=0.004` | 75.0 | 1: 75 | **chosen** |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| rope | lr=0.001 | `train.lr=0.001` | 25.0 | 1: 25 |  |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("chosen by the search: `train.lr=0.004`"), std::string::npos);

  // Flip validation: the choice follows it. Equal scores: the candidate listed first.
  poison_eval_json(runs / a, 0.9, 0.0);
  poison_eval_json(runs / "t5@lr=0.001_seed1", 0.75, 0.0);
  r = run_compare(spec, quiet("rep"));
  EXPECT_EQ(r.chosen.at("rope"), "lr=0.001");
  EXPECT_EQ(r.chosen.at("t5"), "lr=0.001");
  EXPECT_TRUE(fs::exists(runs / a / "compare_eval" / "base.csv"));

  // Equal validation scores: the stop criterion breaks the tie — more runs that met it, then fewer
  // steps to it (records injected the way the trainer writes them into eval.json).
  poison_eval_json(runs / a, 0.5, 0.0);
  poison_eval_json(runs / b, 0.5, 0.0);
  set_convergence(runs / a, false, -1);
  set_convergence(runs / b, true, 6);
  EXPECT_EQ(run_compare(spec, quiet("rep")).chosen.at("rope"), "lr=0.004");
  set_convergence(runs / a, true, 4);
  EXPECT_EQ(run_compare(spec, quiet("rep")).chosen.at("rope"), "lr=0.001");
  set_convergence(runs / a, true, 8);
  EXPECT_EQ(run_compare(spec, quiet("rep")).chosen.at("rope"), "lr=0.004");

  // --plan lists every candidate's runs.
  ASSERT_EQ(cli({"compare", cfg, "--plan", "--set", "compare.seeds=[1]", "--out",
                 (dir_ / "rep").string()}),
            0);
  EXPECT_NE(out_.find("t5@lr=0.004_seed1"), std::string::npos) << out_;
  EXPECT_NE(out_.find("finished"), std::string::npos) << out_;
}

}  // namespace
