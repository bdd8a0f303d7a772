// pelab — tests of comparisons on Slurm (`pelab compare CONFIG --emit-slurm DIR`, train/study/slurm.h):
// the scripts' content, bad input (config errors, bad compare.slurm settings, an unwritable
// directory, a missing sbatch, a failing sbatch), and a real run on a private single-node Slurm
// cluster started by tests/slurm_cluster.sh (skipped where Slurm/munge are not installed or the
// suite does not run as root; tools/setup.sh installs them).
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint.h"
#include "train/app/cli.h"
#include "train/study/compare.h"
#include "train/study/report.h"
#include "train/trainer.h"
#include "train/study/slurm.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;
using pelab::testing::quote;
using pelab::testing::slurp;

namespace {

// results.csv with the wall-time columns blanked, as text.
std::string results_without_timing(const fs::path& csv) {
  return results_csv(pelab::testing::results_without_timing(csv));
}

size_t lines_of(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

class SlurmTest : public pelab::testing::TinyCompareTest {
 protected:
  SlurmTest() : TinyCompareTest("pelab_slurm") {}

  // The files of `d` (names, sorted), "" when it does not exist.
  std::vector<std::string> listing(const fs::path& d) {
    std::vector<std::string> v;
    std::error_code ec;
    if (!fs::is_directory(d, ec)) return v;
    for (const auto& e : fs::directory_iterator(d)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
};

// ---------------- the scripts ----------------

TEST_F(SlurmTest, EmitWritesAnArrayAReportJobAndASubmitScriptAndTrainsNothing) {
  const std::string cfg =
      config("  jobs: 3\n  slurm: {time: \"0:30:00\", mem: 500M, max_parallel: 2,\n"
             "          options: [\"--account=proj42\", \"--qos=normal\"]}\n");
  ASSERT_EQ(pelab("compare tiny.yaml --out rep --set train.steps=20 --set 'compare.title=a\nb' "
                  "--set compare.slurm.partition=debug --no-plots --emit-slurm jobs"),
            0)
      << err_;
  EXPECT_TRUE(has(out_, "4 runs as a Slurm job array")) << out_;
  EXPECT_TRUE(has(out_, "submit with: sh jobs/submit.sh")) << out_;
  EXPECT_EQ(listing(dir_ / "jobs"),
            (std::vector<std::string>{"array.sbatch", "logs", "report.sbatch", "submit.sh"}));
  EXPECT_FALSE(fs::exists(dir_ / "rep"));  // nothing trained, no run directory
  const std::string a = slurp(dir_ / "jobs" / "array.sbatch");
  const std::string r = slurp(dir_ / "jobs" / "report.sbatch");
  const std::string bin = fs::canonical(pelab::testing::pelab_binary()).string();
  const std::string abs_cfg = fs::absolute(cfg).lexically_normal().string();
  const std::string args = bin + " compare " + abs_cfg +
                           " --out rep --set train.steps=20 --set 'compare.title=a\nb' --set "
                           "compare.slurm.partition=debug";
  for (const std::string& line :
       {std::string("#!/bin/bash\n"), std::string("\n#SBATCH --job-name=pelab-tiny\n"),
        std::string("\n#SBATCH --array=1-4%2\n"), std::string("\n#SBATCH --cpus-per-task=1\n"),
        std::string("\n#SBATCH --time=0:30:00\n"), std::string("\n#SBATCH --mem=500M\n"),
        std::string("\n#SBATCH --partition=debug\n"),
        "\n#SBATCH --chdir=" + fs::canonical(dir_).string() + "\n",
        "\n#SBATCH --output=" + fs::canonical(dir_).string() + "/jobs/logs/run-%a.out\n",
        std::string("\n#SBATCH --account=proj42\n#SBATCH --qos=normal\n"),
        "\nexec " + args + " --only \"$SLURM_ARRAY_TASK_ID\"\n"})
    EXPECT_TRUE(has(a, line)) << line << " in\n" << a;
  EXPECT_EQ(a.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_TRUE(has(a, "# pelab comparison 'a b' on Slurm")) << a;  // the title on one line
  for (const std::string& line :
       {std::string("\n#SBATCH --job-name=pelab-tiny-report\n"),
        std::string("\n#SBATCH --cpus-per-task=1\n"), std::string("\n#SBATCH --time=0:30:00\n"),
        "\n#SBATCH --output=" + fs::canonical(dir_).string() + "/jobs/logs/report.out\n",
        "\nexec " + args + " --report-only --no-plots\n"})
    EXPECT_TRUE(has(r, line)) << line << " in\n" << r;
  EXPECT_FALSE(has(r, "--array"));
  // Every #SBATCH line comes before the first command (sbatch stops reading them there).
  for (const std::string& s : {a, r}) {
    EXPECT_LT(s.rfind("#SBATCH"), s.find("\nexec ")) << s;
  }
  const std::string sub = slurp(dir_ / "jobs" / "submit.sh");
  EXPECT_TRUE(has(sub, "sbatch --parsable \"$dir/array.sbatch\"")) << sub;
  EXPECT_TRUE(has(sub, "--dependency=afterany:\"$array\" \"$dir/report.sbatch\"")) << sub;
  for (const char* f : {"array.sbatch", "report.sbatch", "submit.sh"})
    EXPECT_NE(fs::status(dir_ / "jobs" / f).permissions() & fs::perms::owner_exec,
              fs::perms::none)
        << f;

  // Without compare.slurm: the runs' train.threads CPUs, compare.jobs (or --jobs) at once, no
  // time / memory / partition lines (the cluster's defaults).
  ASSERT_EQ(pelab("compare " + quote(config("  jobs: 3\n", 12, "plain.yaml")) +
                  " --set train.threads=2 --emit-slurm j2"),
            0)
      << err_;
  const std::string a2 = slurp(dir_ / "j2" / "array.sbatch");
  EXPECT_TRUE(has(a2, "\n#SBATCH --array=1-4%3\n")) << a2;
  EXPECT_TRUE(has(a2, "\n#SBATCH --cpus-per-task=2\n")) << a2;
  for (const char* absent : {"--time", "--mem", "--partition", " --out "})
    EXPECT_FALSE(has(a2, absent)) << absent << "\n" << a2;
  EXPECT_TRUE(has(slurp(dir_ / "j2" / "report.sbatch"), " --report-only\n"));
  ASSERT_EQ(pelab("compare plain.yaml --jobs 9 --emit-slurm j3"), 0) << err_;
  EXPECT_TRUE(has(slurp(dir_ / "j3" / "array.sbatch"), "\n#SBATCH --array=1-4%4\n"));
  ASSERT_EQ(pelab("compare plain.yaml --jobs 1 --emit-slurm j3"), 0) << err_;  // replaced
  EXPECT_TRUE(has(slurp(dir_ / "j3" / "array.sbatch"), "\n#SBATCH --array=1-4%1\n"));
  EXPECT_EQ(listing(dir_ / "j3"),
            (std::vector<std::string>{"array.sbatch", "logs", "report.sbatch", "submit.sh"}));
  // The help texts name it.
  ASSERT_EQ(cli({"compare", "--help"}), 0);
  EXPECT_TRUE(has(out_, "--emit-slurm DIR")) << out_;
  ASSERT_EQ(cli({"--help"}), 0);
  EXPECT_TRUE(has(out_, "--emit-slurm DIR")) << out_;
}

// An array task is `pelab compare CONFIG --only I`: run outside Slurm with the variable set, the
// script trains exactly that run.
TEST_F(SlurmTest, ArrayScriptTrainsTheRunOfItsTaskIndex) {
  config();
  ASSERT_EQ(pelab("compare tiny.yaml --out rep --emit-slurm jobs"), 0) << err_;
  ASSERT_EQ(sh("SLURM_ARRAY_TASK_ID=3 OMP_NUM_THREADS=1 bash jobs/array.sbatch"), 0) << err_;
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "runs" / "t5_seed1" / "eval.json"));
  EXPECT_EQ(listing(dir_ / "rep" / "runs"), std::vector<std::string>{"t5_seed1"});
}

// ---------------- bad input ----------------

TEST_F(SlurmTest, ConfigAndSettingErrorsAreOneLineAndWriteNothing) {
  struct Case {
    std::string extra;               // appended to the compare section
    std::vector<std::string> flags;  // more command-line arguments
    std::string msg;
  };
  const std::vector<Case> cases = {
      {"  slurm: {time: 2h}\n", {}, "bad.yaml:13: compare.slurm.time: expected a Slurm time"},
      {"  slurm: {time: \"1:2:3:4\"}\n", {}, "compare.slurm.time: expected a Slurm time"},
      {"  slurm: {mem: lots}\n", {}, "bad.yaml:13: compare.slurm.mem: expected memory"},
      {"  slurm: {mem: 4GB}\n", {}, "got '4GB'"},
      {"  slurm: {cpus_per_task: 0}\n", {}, "compare.slurm.cpus_per_task must be an integer >= 1"},
      {"  slurm: {max_parallel: two}\n", {}, "compare.slurm.max_parallel must be an integer >= 1"},
      {"  slurm: {partition: \"a b\"}\n", {}, "is not a partition name"},
      {"  slurm: {gpus: 1}\n", {}, "bad.yaml:13: unknown key 'compare.slurm.gpus'"},
      {"  slurm: [1]\n", {}, "bad.yaml:13: compare.slurm must be a mapping"},
      {"  slurm: {options: \"--qos=x\"}\n", {}, "must be a list of sbatch options"},
      {"  slurm: {options: [\"qos=x\"]}\n", {}, "must be one sbatch option starting with -"},
      {"  slurm: {options: [\"--array=1-3\"]}\n", {}, "'--array=1-3' is set by the runs"},
      {"  slurm: {options: [\"--time=1:00\"]}\n", {}, "is set by compare.slurm.time"},
      {"  slurm: {options: [\"-c4\"]}\n", {}, "is set by compare.slurm.cpus_per_task"},
      {"  slurm: {cpus_per_task: 1}\n", {"--set", "train.threads=4"},
       "cpus_per_task is 1 but the runs use up to train.threads=4"},
      {"", {"--set", "train.threads=0"}, "has train.threads: 0"},
      {"", {"--set", "compare.slurm.time=soon"}, "--set compare.slurm.time=soon: compare.slurm"},
      {"", {"--set", "compare.slurm.nodes=2"}, "unknown key 'compare.slurm.nodes'"},
      // An error of the comparison itself, found as a real compare finds it.
      {"    - {name: x, set: {pe.scheme: nope}}\n", {}, "compare.schemes (x)"},
      {"", {"--set", "model.heads=3"}, "heads"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.msg);
    const std::string bad = config(c.extra, 12, "bad.yaml");
    std::vector<std::string> args = {"compare", bad, "--emit-slurm", (dir_ / "jobs").string()};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    EXPECT_EQ(cli(args), 1);
    EXPECT_TRUE(has(err_, c.msg)) << err_;
    EXPECT_EQ(lines_of(err_), 1u) << err_;
    EXPECT_FALSE(fs::exists(dir_ / "jobs"));
  }
  // Usage errors: exit status 2.
  const std::string cfg = config();
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--emit-slurm", "j", "--only", "1"},
           {"--emit-slurm", "j", "--report-only"},
           {"--plan", "--emit-slurm", "j"},
           {"--emit-slurm", "j", "--retrain"},
           {"--emit-slurm"},
           {"--emit-slurm="}}) {
    std::vector<std::string> args = {"compare", cfg};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_EQ(cli(args), 2) << flags[0];
    EXPECT_EQ(lines_of(err_), 1u) << err_;
    EXPECT_FALSE(fs::exists(dir_ / "j"));
  }
  // The settings themselves.
  CompareSpec spec = load_compare(
      config("  slurm: {cpus_per_task: 4, time: 1-12, mem: 16G, partition: \"a,b\",\n"
             "          max_parallel: 8, options: [--account=x]}\n"),
      {"compare.slurm.time=2:00:00", "compare.slurm.options=[--qos=y, --nice=5]"});
  EXPECT_EQ(spec.slurm.cpus_per_task, 4);
  EXPECT_EQ(spec.slurm.time, "2:00:00");
  EXPECT_EQ(spec.slurm.mem, "16G");
  EXPECT_EQ(spec.slurm.partition, "a,b");
  EXPECT_EQ(spec.slurm.max_parallel, 8);
  EXPECT_EQ(spec.slurm.options, (std::vector<std::string>{"--qos=y", "--nice=5"}));
}

// compare.slurm.options is refused when sbatch would read it as an option the scripts set
// themselves: sbatch takes any unambiguous prefix of a long option (getopt_long: --chd=X is
// --chdir=X), splits an #SBATCH line into several words (quotes group, a backslash escapes, #
// starts a comment) and reads short options in clusters (-vD X: -v takes no argument).
TEST(SlurmOptions, ManagedOptionsAreFoundAsSbatchReadsThem) {
  auto check = [](const std::string& option) {
    SlurmSettings s;
    YAML::Node list(YAML::NodeType::Sequence);
    list.push_back(option);
    try {
      set_slurm_key(s, "options", list, "cfg.yaml:3");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--chd=/tmp", "is set by the scripts (the directory --emit-slurm ran in) (sbatch reads "
                     "--chd as --chdir)"},
      {"--arr=1-3", "is set by the runs of the comparison (sbatch reads --arr as --array)"},
      {"--a=1-3", "sbatch reads --a as --array"},
      {"--dep=afterok:1", "is set by submit.sh"},
      {"--out=/tmp/x", "is set by the scripts (DIR/logs)"},
      {"--er=/tmp/x", "is set by the scripts (DIR/logs)"},
      {"--cpus=8", "is set by compare.slurm.cpus_per_task"},
      {"--ti 1:00", "is set by compare.slurm.time"},
      {"--me=1G", "is set by compare.slurm.mem"},
      {"--par=gpu", "is set by compare.slurm.partition"},
      {"--job=x", "is set by the scripts (pelab-<config name>)"},
      {"--chdir /tmp", "is set by the scripts"},
      {"--account=x --chdir=/tmp", "is set by the scripts"},
      {"--account=x\t-D/tmp", "sbatch reads -D as --chdir"},
      {"--qos=normal '--chd'=/tmp", "sbatch reads --chd as --chdir"},
      {"--qos=normal --c\\hdir=/tmp", "is set by the scripts"},
      {"-vD /tmp", "sbatch reads -D as --chdir"},
      {"-HQa1-3", "sbatch reads -a as --array"},
      {"-c4", "is set by compare.slurm.cpus_per_task"},
  };
  for (const auto& [option, msg] : refused) {
    const std::string m = check(option);
    EXPECT_NE(m.find("cfg.yaml:3: compare.slurm.options[0] '"), std::string::npos) << option << m;
    EXPECT_NE(m.find(msg), std::string::npos) << option << ": " << m;
  }
  // Options sbatch reads as others: not managed.
  for (const std::string ok :
       {"--account=proj42", "--mem-per-cpu=2G", "--time-min=10", "--cpus-per-gpu=2",
        "--comment=\"see --chdir=/x\"", "--qos=normal # --chdir=/tmp", "-A proj", "-Adir",
        "--begin=now", "-s", "--export=NONE", "--nodes 1 --ntasks=1"})
    EXPECT_EQ(check(ok), "") << ok;
}

TEST_F(SlurmTest, UnwritableDirectoryIsOneLineAndLeavesNoPartialScript) {
  config();
  // A directory that cannot be created (its parent is a file).
  write("afile", "x");
  EXPECT_EQ(pelab("compare tiny.yaml --emit-slurm afile/jobs"), 1);
  EXPECT_TRUE(has(err_, "pelab: error: compare --emit-slurm: cannot create afile/jobs/logs"))
      << err_;
  EXPECT_EQ(lines_of(err_), 1u) << err_;
  EXPECT_EQ(out_, "");
  // A script's name taken by a directory: nothing is written, no temporary file is left.
  fs::create_directories(dir_ / "jobs" / "report.sbatch" / "x");
  EXPECT_EQ(pelab("compare tiny.yaml --emit-slurm jobs"), 1);
  EXPECT_TRUE(has(err_, "jobs/report.sbatch is a directory")) << err_;
  EXPECT_EQ(lines_of(err_), 1u) << err_;
  EXPECT_EQ(listing(dir_ / "jobs"), (std::vector<std::string>{"logs", "report.sbatch"}));
  // A directory without write permission (only meaningful when not root: root writes anyway).
  if (::geteuid() != 0) {
    fs::create_directories(dir_ / "ro" / "logs");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_EQ(pelab("compare tiny.yaml --emit-slurm ro"), 1);
    EXPECT_TRUE(has(err_, "compare --emit-slurm: cannot write ro/.")) << err_;
    EXPECT_EQ(lines_of(err_), 1u) << err_;
    EXPECT_EQ(listing(dir_ / "ro"), std::vector<std::string>{"logs"});
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
}

// submit.sh without Slurm, with an sbatch that fails, and with one that fails for the report job
// (the array job is cancelled: nothing is left half-submitted). Fake sbatch / scancel record
// their arguments.
TEST_F(SlurmTest, SubmitWithoutSlurmOrWithAFailingSbatchIsOneLineAndSubmitsNothing) {
  config();
  ASSERT_EQ(pelab("compare tiny.yaml --emit-slurm jobs"), 0) << err_;
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(sh("PATH=" + quote((dir_ / "empty").string()) + " /bin/sh jobs/submit.sh"), 1);
  EXPECT_EQ(err_,
            "submit.sh: sbatch not found on PATH: Slurm's client commands are needed (load the "
            "cluster's slurm module or install slurm-client); nothing was submitted\n");
  EXPECT_EQ(out_, "");

  fs::create_directories(dir_ / "fake");
  auto fake = [&](const std::string& name, const std::string& body) {
    const fs::path p = dir_ / "fake" / name;
    pelab::testing::write_file(p, "#!/bin/sh\necho \"$*\" >> " + quote((dir_ / "calls").string()) +
                                      "\n" + body);
    fs::permissions(p, fs::perms::owner_all);
  };
  const std::string path = "PATH=" + quote((dir_ / "fake").string()) + ":$PATH ";
  // sbatch fails (a multi-line error): one line, nothing submitted.
  fake("sbatch", "echo 'sbatch: error: Batch job submission failed:' >&2\n"
                 "echo 'Unable to contact slurm controller (connect failure)' >&2\nexit 1\n");
  fake("scancel", "exit 0\n");
  EXPECT_EQ(sh(path + "/bin/sh jobs/submit.sh"), 1);
  EXPECT_EQ(err_,
            "submit.sh: sbatch could not submit the array job: sbatch: error: Batch job submission "
            "failed: Unable to contact slurm controller (connect failure); nothing was submitted\n");
  EXPECT_EQ(lines_of(slurp(dir_ / "calls")), 1u);
  // The array job goes in, the report job fails: the array job is cancelled.
  fs::remove(dir_ / "calls");
  fake("sbatch",
       "case \"$*\" in *report.sbatch*) echo 'sbatch: error: invalid partition' >&2; exit 1;; esac\n"
       "echo 'sbatch: warning: a warning' >&2\necho '4711;cluster'\n");
  EXPECT_EQ(sh(path + "/bin/sh jobs/submit.sh"), 1);
  EXPECT_EQ(err_,
            "submit.sh: sbatch could not submit the report job: sbatch: error: invalid partition; "
            "the array job 4711 was cancelled, nothing is left submitted\n");
  const std::string calls = slurp(dir_ / "calls");
  EXPECT_TRUE(has(calls, "--dependency=afterany:4711 " + fs::canonical(dir_).string() +
                             "/jobs/report.sbatch\n4711\n"))
      << calls;
  // Both go in: one line naming both jobs.
  fs::remove(dir_ / "calls");
  fake("sbatch", "case \"$*\" in *report.sbatch*) echo 4712;; *) echo 4711;; esac\n");
  EXPECT_EQ(sh(path + "/bin/sh jobs/submit.sh"), 0) << err_;
  EXPECT_EQ(out_,
            "submitted: array job 4711 (4 runs, at most 4 at once), report job 4712 (after the "
            "array); logs in " +
                fs::canonical(dir_).string() + "/jobs/logs\n");
  EXPECT_EQ(err_, "");
}

// ---------------- a real cluster ----------------

// A private single-node cluster (tests/slurm_cluster.sh) for one test; stopped in TearDown, also
// when the test fails.
class SlurmClusterTest : public SlurmTest {
 protected:
  void SetUp() override {
    SlurmTest::SetUp();
    cluster_ = dir_ / "cluster";
    const std::string script = pelab::testing::source_dir() + "/tests/slurm_cluster.sh";
    const int rc = sh("bash " + quote(script) + " start " + quote(cluster_.string()));
    if (rc == 77) GTEST_SKIP() << "no Slurm test cluster here: " << out_;
    started_ = true;
    ASSERT_EQ(rc, 0) << "the test cluster did not start: " << out_ << err_;
  }
  void TearDown() override {
    if (started_) {
      const std::string script = pelab::testing::source_dir() + "/tests/slurm_cluster.sh";
      sh("bash " + quote(script) + " stop " + quote(cluster_.string()));
    }
    SlurmTest::TearDown();
  }
  std::string env() { return "SLURM_CONF=" + quote((cluster_ / "slurm.conf").string()) + " "; }

  // The job's state per `scontrol show job` (one word per array task), "" when unknown.
  std::string job_states(const std::string& id) {
    sh(env() + "scontrol -o show job " + id);
    std::string states;
    std::istringstream in(out_);
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("JobState=");
      if (at == std::string::npos) continue;
      states += (states.empty() ? "" : " ") + line.substr(at + 9, line.find(' ', at) - at - 9);
    }
    return states;
  }

  // Submits DIR/submit.sh and waits (bounded) until the report job has ended; returns the
  // array job's and the report job's ids.
  std::pair<std::string, std::string> submit_and_wait(const std::string& dir, double timeout_s) {
    EXPECT_EQ(sh(env() + "sh " + dir + "/submit.sh"), 0) << err_;
    std::string array, report;
    std::istringstream words(out_);
    std::string w, prev;
    while (words >> w) {
      if (prev == "job" && array.empty()) array = w;
      else if (prev == "job") report = w;
      prev = w;
    }
    EXPECT_FALSE(array.empty() || report.empty()) << out_;
    if (array.empty() || report.empty()) return {array, report};
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const std::string s = job_states(report);
      if (s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT") break;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > timeout_s) {
        ADD_FAILURE() << "the report job " << report << " did not end within " << timeout_s
                      << " s (state '" << s << "'; array: '" << job_states(array) << "')";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return {array, report};
  }

  fs::path cluster_;
  bool started_ = false;
};

TEST_F(SlurmClusterTest, ArrayOnARealClusterEqualsTheLocalRunAndResumes) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cfg = config("", 40);
  // The reference: the whole comparison in one process.
  ASSERT_EQ(pelab("compare tiny.yaml --jobs 1 --out seq --no-plots"), 0) << err_;
  // Run 2 interrupted at step 20 (a checkpoint, no eval.json): its array task must resume it.
  {
    CompareSpec spec = load_compare(cfg, {});
    CompareOptions o;
    o.out = (dir_ / "sl").string();
    o.progress = 2;
    o.jobs = 1;
    o.plots = false;
    o.only = {1};
    o.stop_after = 20;
    std::ostringstream log;
    o.log = &log;
    const CompareResult r = run_compare(spec, o);
    ASSERT_TRUE(r.interrupted) << log.str();
    ASSERT_EQ(load_checkpoint(latest_checkpoint((dir_ / "sl/runs/rope_seed2").string())).step, 20);
  }
  ASSERT_EQ(pelab("compare tiny.yaml --out sl --no-plots --set compare.slurm.time=00:05:00 "
                  "--set compare.slurm.mem=100M --emit-slurm jobs"),
            0)
      << err_;
  const auto [array, report] = submit_and_wait("jobs", 300);
  EXPECT_EQ(job_states(array), "COMPLETED COMPLETED COMPLETED COMPLETED");
  EXPECT_EQ(job_states(report), "COMPLETED") << slurp(dir_ / "jobs/logs/report.out");
  EXPECT_TRUE(has(slurp(dir_ / "jobs/logs/run-2.out"), "resuming rope seed 2 at step 20"))
      << slurp(dir_ / "jobs/logs/run-2.out");
  EXPECT_TRUE(has(slurp(dir_ / "jobs/logs/run-3.out"), "training t5 seed 1"));
  ASSERT_TRUE(fs::exists(dir_ / "sl" / "results.csv")) << slurp(dir_ / "jobs/logs/report.out");
  EXPECT_EQ(results_without_timing(dir_ / "sl" / "results.csv"),
            results_without_timing(dir_ / "seq" / "results.csv"));
  EXPECT_EQ(parse_results_csv(slurp(dir_ / "sl" / "results.csv"), "results.csv").size(), 12u);
  const double first_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Submitting again trains nothing: every task finds its run finished.
  const auto mtime = fs::last_write_time(latest_checkpoint((dir_ / "sl/runs/t5_seed2").string()));
  const auto again = submit_and_wait("jobs", 300);
  EXPECT_EQ(job_states(again.second), "COMPLETED");
  for (int i = 1; i <= 4; ++i) {
    const std::string log = slurp(dir_ / "jobs/logs" / ("run-" + std::to_string(i) + ".out"));
    EXPECT_TRUE(has(log, "finished run reused")) << log;
    EXPECT_FALSE(has(log, "training")) << log;
  }
  EXPECT_EQ(fs::last_write_time(latest_checkpoint((dir_ / "sl/runs/t5_seed2").string())), mtime);
  EXPECT_EQ(results_without_timing(dir_ / "sl" / "results.csv"),
            results_without_timing(dir_ / "seq" / "results.csv"));

  // The controller gone: submit.sh says so in one line and submits nothing.
  sh("bash " + quote(pelab::testing::source_dir() + "/tests/slurm_cluster.sh") + " stop " +
     quote(cluster_.string()));
  EXPECT_EQ(sh(env() + "sh jobs/submit.sh"), 1);
  EXPECT_TRUE(has(err_, "submit.sh: sbatch could not submit the array job: ")) << err_;
  EXPECT_TRUE(has(err_, "Unable to contact slurm controller")) << err_;
  EXPECT_EQ(lines_of(err_), 1u) << err_;
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ slurm    ] 4 runs submitted as an array + report job; first submission done in "
            << first_s << " s (local reference run included), whole test " << total_s << " s\n";
}

}  // namespace
