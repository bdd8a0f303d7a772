// pelab — data-parallel training over MPI (train/distributed.h, docs/training.md): `mpirun -np 2`
// with batch B equals one process with batch B/2 and train.grad_accum=2 bit for bit, for every PE
// scheme of the registry; resume under MPI, and across MPI and one process; a signal stops every
// rank with one checkpoint; the refusals (batch not divisible by the ranks, a launch the build or
// the verb cannot take part in). Tests that need mpirun skip, saying why, where it is not installed
// or pelab was built without MPI (tools/setup.sh installs Open MPI, so CI runs them).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "models/pe/pe.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/distributed.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;
using pelab::testing::quote;
using pelab::testing::slurp;

namespace {

// The mpirun on PATH, "" when there is none.
std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t b = 0;
  while (b <= p.size()) {
    const size_t e = std::min(p.find(':', b), p.size());
    const fs::path cand = fs::path(p.substr(b, e - b)) / "mpirun";
    if (::access(cand.c_str(), X_OK) == 0) return cand.string();
    b = e + 1;
  }
  return "";
}

#define PELAB_REQUIRE_MPIRUN()                                                                 \
  do {                                                                                         \
    if (!built_with_mpi())                                                                     \
      GTEST_SKIP() << "pelab was built without MPI (PELAB_MPI=OFF or MPI not found at build "  \
                      "time; tools/setup.sh installs libopenmpi-dev)";                          \
    if (find_mpirun().empty())                                                                 \
      GTEST_SKIP() << "mpirun is not installed (tools/setup.sh installs openmpi-bin)";         \
  } while (0)

// metrics.jsonl rows without the timing fields, as JSON lines.
std::vector<std::string> rows(const fs::path& run) {
  std::vector<std::string> out;
  for (MetricRow r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    MetricRow k;
    for (auto& f : r.fields)
      if (f.first != "elapsed_s" && f.first != "tokens_per_s") k.fields.push_back(f);
    out.push_back(k.json());
  }
  return out;
}

// Parameters, optimizer state and generator counters of two checkpoints are bit-identical.
void expect_same_state(const std::string& pa, const std::string& pb, const std::string& what) {
  CheckpointData a = load_checkpoint(pa), b = load_checkpoint(pb);
  EXPECT_EQ(a.step, b.step) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(a.params[i].second.to_vector(), b.params[i].second.to_vector())
        << what << ": " << a.params[i].first;
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size()) << what;
  for (const auto& [name, ts] : a.optimizer_state) {
    const auto& tb = b.optimizer_state.at(name);
    ASSERT_EQ(ts.size(), tb.size()) << what << ": " << name;
    for (size_t i = 0; i < ts.size(); ++i)
      EXPECT_EQ(ts[i].to_vector(), tb[i].to_vector()) << what << ": " << name;
  }
  for (const char* c : {"model_rng_offset", "randpos_rng_offset"})
    EXPECT_EQ(a.counters.at(c), b.counters.at(c)) << what << ": " << c;
}

// Largest |a - b| / max(1, |b|) over two runs' train-row losses (same steps).
double loss_gap(const fs::path& a, const fs::path& b) {
  auto losses = [](const fs::path& run) {
    std::vector<double> out;
    for (const MetricRow& r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
      const MetricValue* t = r.get("type");
      if (t && t->s == "train") out.push_back(r.get("loss")->d);
    }
    return out;
  };
  const auto la = losses(a), lb = losses(b);
  EXPECT_EQ(la.size(), lb.size());
  double gap = 0;
  for (size_t i = 0; i < std::min(la.size(), lb.size()); ++i)
    gap = std::max(gap, std::fabs(la[i] - lb[i]) / std::max(1.0, std::fabs(lb[i])));
  return gap;
}

class MpiTest : public pelab::testing::TempDirTest {
 protected:
  MpiTest() : TempDirTest("pelab_mpi") {}

  // The tiny seq2seq reverse run of these tests (d_model 16, 1+1 layers), runs under dir_/runs.
  std::string config(const std::string& extra = "") {
    return write("tiny.yaml",
                 "task: {name: reverse, num_symbols: 4, train_min_len: 1, train_max_len: 5,\n"
                 "       test_lengths: [3, 6], num_eval_examples: 6}\n"
                 "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1,\n"
                 "        dropout: 0.1}\n"
                 "train: {steps: 3, batch_size: 8, warmup: 1, log_every: 1, eval_every: 3,\n"
                 "        checkpoint_every: 2, threads: 1, run_dir: " +
                     (dir_ / "runs").string() + "}\n" + "eval: {batch_size: 6}\n" + extra);
  }

  // `mpirun -np N pelab ARGS` as root on a small shared machine (loopback shared memory, no binding).
  // In the sanitizer build (tools/test.sh) the ranks run without LeakSanitizer: Open MPI's plugins
  // leak at MPI_Finalize and are unloaded before the check, so their stacks cannot be named in a
  // suppression. Address and undefined-behaviour checks stay on; pelab's own allocations on these
  // paths are leak-checked by the single-process tests.
  std::string mpirun_command(int np, const std::string& args) {
    const char* asan = std::getenv("ASAN_OPTIONS");
    const std::string no_leaks = std::string(asan && *asan ? asan : "") +
                                 (asan && *asan ? ":" : "") + "detect_leaks=0";
    return "env " + quote("ASAN_OPTIONS=" + no_leaks) +
           " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
           quote(find_mpirun()) + " -np " + std::to_string(np) +
           " --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none " +
           quote(pelab::testing::pelab_binary()) + " " + args;
  }
  pelab::testing::CommandResult mpirun(int np, const std::string& args) {
    return pelab::testing::run_captured(mpirun_command(np, args), dir_ / "out.txt",
                                        dir_ / "err.txt");
  }
  // One process, in this test binary.
  TrainResult train_here(const std::string& cfg_path, const std::vector<std::string>& sets,
                         const std::string& resume = "", int64_t stop_after = -1) {
    TrainOptions o;
    o.progress = 2;
    o.resume = resume;
    o.stop_after = stop_after;
    return train(resume.empty() ? load_config(cfg_path, sets) : resume_config(resume, sets), o);
  }
  fs::path run(const std::string& name) { return dir_ / "runs" / name; }
};

// Every line of `err` that pelab wrote.
int pelab_error_lines(const std::string& err) {
  int n = 0;
  size_t p = 0;
  while ((p = err.find("pelab: error:", p)) != std::string::npos) ++n, ++p;
  return n;
}

}  // namespace

TEST_F(MpiTest, TwoRanksEqualOneProcessWithGradAccumForEveryScheme) {
  PELAB_REQUIRE_MPIRUN();
  const std::string cfg = config();
  const std::vector<std::string> schemes = models::pe_names();
  ASSERT_GE(schemes.size(), 2u);
  for (const std::string& s : schemes) {
    // One process: micro-batches of 4, two per step.
    TrainResult one = train_here(cfg, {"pe.scheme=" + s, "train.run_name=one_" + s,
                                       "train.batch_size=4", "train.grad_accum=2"});
    ASSERT_TRUE(one.finished) << s;
    // Two ranks: batch 8, 4 each.
    auto r = mpirun(2, "train " + quote(cfg) + " --progress none --set pe.scheme=" + s +
                           " --set train.run_name=mpi_" + s);
    ASSERT_EQ(r.rc, 0) << s << ": " << r.err;
    const fs::path a = run("one_" + s), b = run("mpi_" + s);
    expect_same_state((a / "checkpoints/step_3.h5").string(), (b / "checkpoints/step_3.h5").string(),
                      s);
    EXPECT_EQ(rows(a), rows(b)) << s;  // losses, grad norms, learning rates, validation
    EXPECT_EQ(slurp(a / "eval.json"), slurp(b / "eval.json")) << s;
    std::cout << "[ mpi ] " << s << ": 2 ranks x batch 4 == 1 process x batch 4 x grad_accum 2, "
              << "bit for bit (parameters, AdamW state, metrics, eval.json)\n";
  }
  // The same with randomized positions (both generators in use) for one scheme.
  const std::vector<std::string> rp = {"pe.scheme=rope", "pe.randomized_positions=true",
                                       "pe.randomized_max_position=40"};
  std::vector<std::string> sets = rp;
  sets.insert(sets.end(), {"train.run_name=one_rp", "train.batch_size=4", "train.grad_accum=2"});
  ASSERT_TRUE(train_here(cfg, sets).finished);
  auto r = mpirun(2, "train " + quote(cfg) + " --progress none --set pe.scheme=rope "
                     "--set pe.randomized_positions=true --set pe.randomized_max_position=40 "
                     "--set train.run_name=mpi_rp");
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_same_state((run("one_rp") / "checkpoints/step_3.h5").string(),
                    (run("mpi_rp") / "checkpoints/step_3.h5").string(), "randomized positions");
  EXPECT_EQ(rows(run("one_rp")), rows(run("mpi_rp")));
}

TEST_F(MpiTest, RankZeroAloneWritesAndResumeUnderMpiIsExact) {
  PELAB_REQUIRE_MPIRUN();
  const std::string cfg = config("");
  auto full = mpirun(2, "train " + quote(cfg) + " --progress none --set train.steps=4 "
                        "--set train.run_name=full");
  ASSERT_EQ(full.rc, 0) << full.err;
  // Only rank 0 printed: one table on stdout, no line from rank 1.
  size_t tables = 0;
  for (size_t p = 0; (p = full.out.find("run: ", p)) != std::string::npos; ++p) ++tables;
  EXPECT_EQ(tables, 1u) << full.out;
  auto part = mpirun(2, "train " + quote(cfg) + " --progress none --set train.steps=4 "
                        "--set train.run_name=part --stop-after 1");
  ASSERT_EQ(part.rc, 0) << part.err;
  auto rest = mpirun(2, "train --progress none --resume " + quote(run("part").string()));
  ASSERT_EQ(rest.rc, 0) << rest.err;
  expect_same_state((run("full") / "checkpoints/step_4.h5").string(),
                    (run("part") / "checkpoints/step_4.h5").string(), "resumed under MPI");
  EXPECT_EQ(rows(run("full")), rows(run("part")));
  // Nothing but the run directories (rank 1 wrote no file of its own anywhere under dir_).
  std::vector<std::string> top;
  for (const auto& e : fs::directory_iterator(dir_ / "runs")) top.push_back(e.path().filename());
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<std::string>{"full", "part"}));
}

TEST_F(MpiTest, CheckpointsMoveBetweenMpiAndOneProcess) {
  PELAB_REQUIRE_MPIRUN();
  // Examples of one length and no dropout: two ranks' mean of per-half losses is the batch's mean,
  // so one process with the same batch follows the same trajectory up to float rounding.
  const std::string cfg = config("");
  const std::vector<std::string> fixed = {"task.train_min_len=4", "task.train_max_len=4",
                                          "model.dropout=0", "train.steps=4"};
  const std::string fixed_sets = " --set task.train_min_len=4 --set task.train_max_len=4 "
                                 "--set model.dropout=0 --set train.steps=4";
  auto with = [&](std::vector<std::string> v, const std::string& name) {
    v.insert(v.end(), fixed.begin(), fixed.end());
    v.push_back("train.run_name=" + name);
    return v;
  };
  ASSERT_TRUE(train_here(cfg, with({}, "ref")).finished);  // one process, 4 steps
  // MPI for 2 steps, then one process.
  ASSERT_EQ(mpirun(2, "train " + quote(cfg) + " --progress none --stop-after 2" + fixed_sets +
                          " --set train.run_name=m2s")
                .rc,
            0);
  EXPECT_TRUE(train_here("", {}, run("m2s").string()).finished);
  // One process for 2 steps, then MPI.
  ASSERT_EQ(train_here(cfg, with({}, "s2m"), "", 2).step, 2);
  auto r = mpirun(2, "train --progress none --resume " + quote(run("s2m").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* name : {"m2s", "s2m"}) {
    const CheckpointData a = load_checkpoint((run(name) / "checkpoints/step_4.h5").string());
    const CheckpointData b = load_checkpoint((run("ref") / "checkpoints/step_4.h5").string());
    EXPECT_EQ(a.counters.at("data_position"), b.counters.at("data_position")) << name;
    double gap = 0;
    for (size_t i = 0; i < a.params.size(); ++i) {
      const auto x = a.params[i].second.to_vector(), y = b.params[i].second.to_vector();
      for (size_t j = 0; j < x.size(); ++j) gap = std::max(gap, std::fabs(x[j] - y[j]));
    }
    // Float rounding differs (two half-batch means against one batch mean); AdamW scales every
    // update to about train.lr (1e-3), so a rounding-level difference in a near-zero gradient
    // component can move a parameter by up to that much. The losses, which a wrong data position
    // or state would change by ~1e-2, agree closely.
    EXPECT_LT(gap, 1e-3) << name << ": parameters after 4 steps";
    EXPECT_LT(loss_gap(run(name), run("ref")), 1e-5) << name;
  }
}

TEST_F(MpiTest, BatchNotDivisibleByRanksFailsOnEveryRankWritingNothing) {
  PELAB_REQUIRE_MPIRUN();
  const std::string cfg = config();
  auto r = mpirun(2, "train " + quote(cfg) + " --progress none --set train.batch_size=7 "
                     "--set train.run_name=odd");
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(pelab_error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("pelab: error: train.batch_size=7 does not divide by the 2 MPI ranks"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--set train.batch_size=6"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "nothing may be written";
  EXPECT_EQ(r.out, "");
  // A config error (the same on every rank) is one line too.
  auto bad = mpirun(2, "train " + quote(cfg) + " --set train.lr=-1");
  EXPECT_NE(bad.rc, 0);
  EXPECT_EQ(pelab_error_lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("train.lr"), std::string::npos) << bad.err;
}

namespace {

// A signal stops every rank at the same step, rank 0 writes the one checkpoint (and the
// "interrupted" line) before any rank ends, and mpirun exits 130, wherever the signal lands: each
// window is hit every time through the test hook of train/stop_signal.h (PELAB_TEST_SIGNAL_AT /
// PELAB_TEST_PAUSE_AT), not by luck. Issue 34: before, a SIGTERM to mpirun reached the ranks 1 s
// later and mpirun SIGKILLed them 1 s after that (Open MPI's odls_base_sigkill_timeout); on a busy
// machine rank 0 was still writing the checkpoint then, and lost it.
struct SignalWindow {
  const char* name;
  const char* signal_at;  // PELAB_TEST_SIGNAL_AT
  const char* pause_at;   // PELAB_TEST_PAUSE_AT ("" = none)
  int eval_every;
  int steps;
  int64_t stop_step;      // where every rank stops
  const char* line;       // what rank 0 logs
};

const SignalWindow kSignalWindows[] = {
    // Rank 1 signalled before MPI starts, its handler just installed: every rank stops before the
    // first step.
    {"startup", "startup@1", "", 0, 1000000, 0, "interrupted at step 0;"},
    // Rank 1 signalled mid-step (after its backward pass, before the reduction): the step's
    // reduction tells rank 0.
    {"mid_step", "step@1", "", 0, 1000000, 1, "interrupted at step 1;"},
    // Rank 1 signalled while it waits inside step 1's reduction (rank 0 held back 1 s): too late
    // for that reduction's flag, so both stop after step 2.
    {"in_reduction", "reduction@1+200", "reduction@0+1000", 0, 1000000, 2,
     "interrupted at step 2;"},
    // Rank 0 signalled inside the validation of step 2: it stops validating; every rank stops at
    // step 2, whose checkpoint says the validation is pending.
    {"in_validation", "validation@0", "", 2, 1000000, 2,
     "interrupted at step 2 during its validation;"},
    // Rank 1 signalled while it waits inside the reduction after rank 0's validation of step 2
    // (rank 0 held back 1 s): too late for that reduction's flag; the validation completes and
    // every rank stops after step 3.
    {"waiting_for_validation", "validation@1+200", "validation@0+1000", 2, 1000000, 3,
     "interrupted at step 3;"},
    // Rank 0 signalled in the final evaluation (rank 1 has finished): no eval.json, the final
    // checkpoint stays.
    {"in_final_evaluation", "final_eval@0", "", 0, 2, 2,
     "interrupted at step 2 during the final evaluation"},
};

class MpiSignalTest : public MpiTest, public ::testing::WithParamInterface<SignalWindow> {};

// The step checkpoints of a run.
std::vector<std::string> step_checkpoint_names(const fs::path& run) {
  std::vector<std::string> ck;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path().filename().string().rfind("step_", 0) == 0) ck.push_back(e.path().filename());
  return ck;
}

TEST_P(MpiSignalTest, SigtermStopsEveryRankWithOneCheckpoint) {
  PELAB_REQUIRE_MPIRUN();
  const SignalWindow& w = GetParam();
  const std::string cfg = config();
  // timeout: a run the signal does not stop would otherwise train its 10^6 steps.
  std::string env = std::string("timeout 120 env PELAB_TEST_SIGNAL_AT=") + w.signal_at;
  if (*w.pause_at) env += std::string(" PELAB_TEST_PAUSE_AT=") + w.pause_at;
  const std::string cmd =
      env + " " +
      mpirun_command(2, "train " + quote(cfg) + " --progress lines --set train.steps=" +
                            std::to_string(w.steps) +
                            " --set train.eval_every=" + std::to_string(w.eval_every) +
                            " --set train.log_every=1 --set train.checkpoint_every=0 "
                            "--set train.run_name=sig");
  const auto r = pelab::testing::run_captured(cmd, dir_ / "out.txt", dir_ / "err.txt");
  EXPECT_EQ(r.rc, 130) << r.err;
  const std::string log = slurp(run("sig") / "train.log");
  EXPECT_NE(log.find(w.line), std::string::npos) << log << r.err;
  ASSERT_EQ(step_checkpoint_names(run("sig")),
            std::vector<std::string>{"step_" + std::to_string(w.stop_step) + ".h5"})
      << "one checkpoint, by rank 0\n"
      << log << r.err;
  const std::string ck = "step_" + std::to_string(w.stop_step) + ".h5";
  const CheckpointData d = load_checkpoint((run("sig") / "checkpoints" / ck).string());
  EXPECT_EQ(d.step, w.stop_step);
  const bool pending = std::string(w.name) == "in_validation";
  EXPECT_EQ(d.counters.count("validation_pending"), pending ? 1u : 0u);
  EXPECT_EQ(fs::exists(run("sig") / "eval.json"), false);
}

INSTANTIATE_TEST_SUITE_P(Windows, MpiSignalTest, ::testing::ValuesIn(kSignalWindows),
                         [](const ::testing::TestParamInfo<SignalWindow>& i) {
                           return std::string(i.param.name);
                         });

// The pids whose parent is `parent` (from /proc).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// From outside, as Slurm (srun, scancel) delivers it: SIGTERM to every rank during training. All
// ranks stop at the same step; rank 0 writes its checkpoint, which resumes under MPI.
TEST_F(MpiTest, SigtermToEveryRankStopsThemAtOneStepWithOneCheckpoint) {
  PELAB_REQUIRE_MPIRUN();
  const std::string cfg = config();
  const pid_t pid = pelab::testing::start_background(
      mpirun_command(2, "train " + quote(cfg) +
                            " --progress lines --set train.steps=1000000 "
                            "--set train.eval_every=0 --set train.log_every=1 "
                            "--set train.checkpoint_every=0 --set train.run_name=sig"),
      dir_ / "out.txt", dir_ / "err.txt");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(pelab::testing::wait_for(run("sig") / "train.log", "step 3/"))
      << slurp(dir_ / "err.txt");
  const std::vector<pid_t> ranks = children_of(pid);
  EXPECT_EQ(ranks.size(), 2u);
  for (pid_t rank : ranks) ::kill(rank, SIGTERM);
  double waited = 0;
  const int status = pelab::testing::wait_at_most(pid, 60, waited);
  ASSERT_GE(waited, 0) << "mpirun still running 60 s after SIGTERM to the ranks";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(dir_ / "err.txt");
  const std::string log = slurp(run("sig") / "train.log");
  const size_t at = log.find("interrupted at step ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::vector<std::string> ck = step_checkpoint_names(run("sig"));
  ASSERT_EQ(ck.size(), 1u) << "one checkpoint, by rank 0";
  const CheckpointData d = load_checkpoint((run("sig") / "checkpoints" / ck[0]).string());
  EXPECT_EQ(ck[0], "step_" + std::to_string(d.step) + ".h5");
  EXPECT_EQ(std::stoll(log.substr(at + 20)), d.step);
  EXPECT_GE(d.step, 3);
  // It resumes (one more step, under MPI).
  auto r = mpirun(2, "train --progress none --resume " + quote(run("sig").string()) +
                         " --set train.steps=" + std::to_string(d.step + 1));
  EXPECT_EQ(r.rc, 0) << r.err;
}

}  // namespace

// The refusal of a launch this process cannot take part in, decided from the launcher's
// environment (no mpirun needed).
TEST(MpiLaunch, RefusesMultiRankLaunchWithoutMpiOrForOtherVerbs) {
  auto env = [](std::vector<std::pair<std::string, std::string>> kv) {
    return [kv](const char* name) -> const char* {
      for (const auto& [k, v] : kv)
        if (k == name) return v.c_str();
      return nullptr;
    };
  };
  const LauncherInfo none = launcher_info(env({}));
  EXPECT_EQ(none.size, 0);
  const LauncherInfo ompi =
      launcher_info(env({{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", "2"}}));
  EXPECT_EQ(ompi.size, 3);
  EXPECT_EQ(ompi.rank, 2);
  const LauncherInfo pmi = launcher_info(env({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}}));
  EXPECT_EQ(pmi.size, 2);
  EXPECT_EQ(pmi.rank, 1);
  EXPECT_EQ(launcher_info(env({{"PMI_SIZE", "x"}})).size, 0);

  const std::string no_mpi = launch_refusal(ompi, false, "train");
  EXPECT_NE(no_mpi.find("built without MPI"), std::string::npos) << no_mpi;
  EXPECT_NE(no_mpi.find("3 processes"), std::string::npos) << no_mpi;
  EXPECT_NE(no_mpi.find("without mpirun"), std::string::npos) << no_mpi;
  EXPECT_EQ(no_mpi.find('\n'), std::string::npos);
  EXPECT_EQ(launch_refusal(ompi, true, "train"), "");
  EXPECT_NE(launch_refusal(ompi, true, "eval").find("only pelab train"), std::string::npos);
  EXPECT_EQ(launch_refusal({1, 0}, false, "train"), "");  // mpirun -np 1: one ordinary process
  EXPECT_EQ(launch_refusal(none, false, "eval"), "");
}

// The binary itself, as a launcher would start it (its environment; no MPI is initialised because
// the refusal comes first): rank 0 prints one line, every rank exits non-zero, nothing is written.
TEST_F(MpiTest, BinaryRefusesALaunchItCannotJoin) {
  const std::string cfg = config();
  // A verb other than train (any build); in a build without MPI, train too.
  std::vector<std::string> verbs = {"eval " + quote(cfg)};
  if (!built_with_mpi()) verbs.push_back("train " + quote(cfg));
  for (const std::string& v : verbs) {
    for (int rank : {0, 1}) {
      auto r = pelab::testing::run_captured(
          "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + " " +
              quote(pelab::testing::pelab_binary()) + " " + v,
          dir_ / "out.txt", dir_ / "err.txt");
      EXPECT_EQ(r.rc, 2) << v;
      EXPECT_EQ(pelab_error_lines(r.err), rank == 0 ? 1 : 0) << v << ": " << r.err;
      EXPECT_EQ(r.out, "");
    }
    EXPECT_FALSE(fs::exists(dir_ / "runs")) << v;
  }
}
