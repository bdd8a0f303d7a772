// pelab — data revisions (docs/experiments.md, "Data revisions"; data::Task::data_changes,
// train/task_data.h): a run records the revision of its task's examples in its resolved config
// (task.data_revision, only where it is not 1), and a comparison retrains, a merge refuses and a
// resume refuses a run trained before its data changed, while every run whose data did not change
// stays reusable. The fault injected is a run as a pelab from before the change wrote it: its
// config.yaml (and checkpoint config) without task.data_revision, its record.json's digest that of
// that config.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/tasks.h"
#include "pelab/error.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/study/compare.h"
#include "train/study/compare_internal.h"
#include "train/study/run_record.h"
#include "train/task_data.h"

namespace fs = std::filesystem;

namespace pelab {
namespace {

using pelab::testing::slurp;
using pelab::testing::write_file;

// The line a comparison prints for the randomized addition run of an old pelab (the start of it).
const char* const kOldAdditionRun =
    "trained on data revision 1 of task addition_reversed (one-length batches), from before "
    "2026-11-26 (f995bd6): one-length batches draw both operands' lengths as training does";

// Rewrites the run folder `run` as a pelab from before data revisions left it: config.yaml without
// the task.data_revision line (with its comment) and record.json, if any, with the digest of that
// config (as ensure_run_record computes it). A run without the line is left byte for byte.
void as_before_data_revisions(const fs::path& run) {
  const fs::path y = run / "config.yaml";
  std::string text = slurp(y);
  const size_t at = text.find("\n  data_revision:");
  if (at == std::string::npos) return;
  text.erase(at, text.find('\n', at + 1) - at);
  write_file(y, text);
  if (fs::exists(run / run_record_file())) {
    RunRecord rec = read_run_record(run.string());
    rec.config_digest =
        compare_detail::fingerprint(compare_detail::eval_identity(load_config(y.string())));
    write_file(run / run_record_file(), run_record_json(rec));
  }
}

class CompareDataRevisionTest : public pelab::testing::TinyCompareTest {
 protected:
  CompareDataRevisionTest() : TinyCompareTest("pelab_datarev") {}

  // A tiny decoder-only addition comparison (operands of 1-3 digits), seed 1: `schemes` rows.
  std::string addition(const std::string& schemes, const std::string& name = "add.yaml") {
    return write(name,
                 "task: {name: addition_reversed, formulation: decoder, train_min_len: 1,\n"
                 "       train_max_len: 3, test_lengths: [3, 5], num_eval_examples: 6}\n"
                 "model: {arch: decoder, d_model: 16, heads: 2, d_ff: 32, decoder_layers: 1}\n"
                 "train: {steps: 8, batch_size: 8, warmup: 2, log_every: 4, eval_every: 0,\n"
                 "        checkpoint_every: 4, threads: 1}\n"
                 "eval: {batch_size: 6}\n"
                 "compare:\n"
                 "  title: tiny addition\n"
                 "  seeds: [1]\n"
                 "  schemes:\n" +
                     schemes);
  }
  static std::string rope() { return "    - rope\n"; }
  static std::string rope_rand() {
    return "    - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: true, "
           "pe.randomized_max_position: 16}}\n";
  }
  CompareResult run(const std::string& cfg, const std::string& out, int64_t stop_after = -1) {
    CompareOptions o;
    o.out = (dir_ / out).string();
    o.progress = 2;
    o.log = &log_;
    o.stop_after = stop_after;
    return run_compare(load_compare(cfg), o);
  }
  fs::path runs(const std::string& out) const { return dir_ / out / "runs"; }

  std::ostringstream log_;
};

// (a) A finished randomized addition run of a pelab from before 2026-11-26 is retrained with a
// line saying why; (b) the same task's run without one-length batches is reused; (c) the run
// retrained records revision 2 and is reused from then on.
TEST_F(CompareDataRevisionTest, FinishedRunFromBeforeItsDataChangedIsRetrained) {
  const std::string cfg = addition(rope() + rope_rand());
  ASSERT_EQ(run(cfg, "add").trained, 2);
  const std::string rand_yaml = slurp(runs("add") / "rope+rand_seed1" / "config.yaml");
  EXPECT_NE(rand_yaml.find("\n  data_revision: 2  # "), std::string::npos) << rand_yaml;
  EXPECT_EQ(slurp(runs("add") / "rope_seed1" / "config.yaml").find("  data_revision:"),
            std::string::npos);
  for (const char* r : {"rope_seed1", "rope+rand_seed1"}) as_before_data_revisions(runs("add") / r);
  const std::string rope_record = slurp(runs("add") / "rope_seed1" / "record.json");

  log_.str("");
  const CompareResult again = run(cfg, "add");
  EXPECT_EQ(again.trained, 1);  // rope+rand
  EXPECT_EQ(again.reused, 1);   // rope: its data did not change
  EXPECT_NE(log_.str().find(std::string("rope+rand seed 1: ") + kOldAdditionRun),
            std::string::npos)
      << log_.str();
  EXPECT_NE(log_.str().find("this pelab draws revision 2 -> training afresh"), std::string::npos)
      << log_.str();
  EXPECT_EQ(slurp(runs("add") / "rope_seed1" / "record.json"), rope_record);
  EXPECT_NE(slurp(runs("add") / "rope+rand_seed1" / "config.yaml").find("\n  data_revision: 2"),
            std::string::npos);

  const CompareResult third = run(cfg, "add");
  EXPECT_EQ(third.reused, 2);
  EXPECT_EQ(third.trained, 0);
}

// (b) Runs of another task, with one-length batches or not, record no revision (their config.yaml
// and record.json read as a pelab from before data revisions wrote them) and are reused.
TEST_F(CompareDataRevisionTest, RunsOnUnchangedDataRecordNothingAndAreReused) {
  const std::string cfg = write("rev.yaml", pelab::testing::tiny_compare_yaml("[2, 6]", 8) +
                                                rope() + rope_rand());
  ASSERT_EQ(run(cfg, "rev").trained, 4);
  std::vector<std::string> before;
  for (const char* r : {"rope_seed1", "rope_seed2", "rope+rand_seed1", "rope+rand_seed2"}) {
    const std::string y = slurp(runs("rev") / r / "config.yaml");
    EXPECT_EQ(y.find("  data_revision:"), std::string::npos) << r << "\n" << y;
    before.push_back(y + slurp(runs("rev") / r / "record.json"));
  }
  const CompareResult again = run(cfg, "rev");
  EXPECT_EQ(again.reused, 4);
  EXPECT_EQ(again.trained, 0);
  size_t i = 0;
  for (const char* r : {"rope_seed1", "rope_seed2", "rope+rand_seed1", "rope+rand_seed2"})
    EXPECT_EQ(slurp(runs("rev") / r / "config.yaml") + slurp(runs("rev") / r / "record.json"),
              before[i++])
        << r;
  // A slice of them merges.
  ASSERT_EQ(compare(cfg, {"--merge", at("rev"), "--out", at("rev_merged")}), 0) << err_;
}

// An interrupted randomized addition run of a pelab from before the change is not resumed (its
// first steps trained on the old examples): it is trained afresh.
TEST_F(CompareDataRevisionTest, InterruptedRunFromBeforeItsDataChangedIsNotResumed) {
  const std::string cfg = addition(rope_rand());
  const CompareResult part = run(cfg, "add", 4);
  ASSERT_TRUE(part.interrupted);
  as_before_data_revisions(runs("add") / "rope+rand_seed1");
  log_.str("");
  const CompareResult again = run(cfg, "add");
  EXPECT_EQ(again.resumed, 0);
  EXPECT_EQ(again.trained, 1);
  EXPECT_NE(log_.str().find(kOldAdditionRun), std::string::npos) << log_.str();
}

// --merge refuses the record of a randomized addition run from before the change with one line
// (a); once that slice is retrained (c) the merge succeeds, the unchanged run's record merged as
// it was (b).
TEST_F(CompareDataRevisionTest, MergeRefusesARecordFromBeforeItsDataChanged) {
  const std::string cfg = addition(rope() + rope_rand());
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("b"), "--only", "2"}), 0) << err_;
  as_before_data_revisions(dir_ / "a" / "runs" / "rope_seed1");
  as_before_data_revisions(dir_ / "b" / "runs" / "rope+rand_seed1");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), at("b"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + at("b") + "/runs/rope+rand_seed1: " +
                      kOldAdditionRun),
            std::string::npos)
      << err_;
  EXPECT_NE(err_.find("this pelab draws revision 2: retrain it with this pelab"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find("rope_seed1:"), std::string::npos) << err_;  // its record is fine
  EXPECT_NE(err_.find("1 record refused"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "merged" / "report.md"));

  ASSERT_EQ(compare(cfg, {"--out", at("b"), "--only", "2"}), 0) << err_;  // retrains it
  EXPECT_NE(err_.find("-> training afresh"), std::string::npos) << err_;
  ASSERT_EQ(compare(cfg, {"--merge", at("a"), at("b"), "--out", at("merged")}), 0) << err_;
  EXPECT_TRUE(fs::exists(dir_ / "merged" / "report.md"));
}

// The revision a task declares: addition_reversed's one-length batches over a range of operand
// lengths changed on 2026-11-26 (revision 2); its other runs and every other task draw revision 1.
TEST(TaskDataRevision, OnlyTheDrawsThatChangedHaveANewRevision) {
  data::TaskSpec add;
  add.name = "addition_reversed";
  add.train_min_len = 1;
  add.train_max_len = 5;
  const auto task = data::make_task(add);
  EXPECT_EQ(task->data_revision(true), 2);
  EXPECT_EQ(task->data_revision(false), 1);
  ASSERT_EQ(task->data_changes(true).size(), 1u);
  EXPECT_EQ(task->data_changes(true)[0].commit, "f995bd6");
  add.train_min_len = add.train_max_len = 3;  // one length: both operands had it, and have
  EXPECT_EQ(data::make_task(add)->data_revision(true), 1);
  for (const auto& name : data::task_names()) {
    if (name == "addition_reversed") continue;
    data::TaskSpec s;
    s.name = name;
    std::unique_ptr<data::Task> t;
    try {
      t = data::make_task(s);
    } catch (const std::exception&) {
      continue;  // a task that needs other settings
    }
    EXPECT_EQ(t->data_revision(true), 1) << name;
    EXPECT_EQ(t->data_revision(false), 1) << name;
  }
}

// task.data_revision is what pelab records, not a key: written only where it is not 1, read back,
// refused from --set.
TEST(TaskDataRevision, ResolvedConfigRecordsItOnlyWhereNotOne) {
  Config c = load_config_string(
      "task: {name: addition_reversed, formulation: decoder, train_max_len: 3}\n"
      "model: {arch: decoder}\n"
      "pe: {scheme: rope, randomized_positions: true, randomized_max_position: 64}\n");
  EXPECT_EQ(c.task.data_revision, 1);
  EXPECT_EQ(config_to_yaml(c).find("  data_revision:"), std::string::npos);
  record_data_revision(c);
  EXPECT_EQ(c.task.data_revision, 2);
  const std::string y = config_to_yaml(c, true);
  EXPECT_NE(y.find("  data_revision: 2  # "), std::string::npos) << y;
  EXPECT_EQ(load_config_string(y).task.data_revision, 2);
  Config old = load_config_string(config_to_yaml(Config()));
  EXPECT_EQ(data_revision_change(old), "");
  EXPECT_EQ(data_revision_change(c), "");
  old = c;
  old.task.data_revision = 1;
  EXPECT_EQ(data_revision_change(old).rfind(kOldAdditionRun, 0), 0u) << data_revision_change(old);
  old.task.data_revision = 3;
  EXPECT_NE(data_revision_change(old).find("newer than this pelab's revision 2"),
            std::string::npos);
  EXPECT_THROW(apply_overrides(c, {"task.data_revision=1"}), ConfigError);
  EXPECT_THROW(load_config_string("task: {data_revision: 0}\n"), ConfigError);
}

}  // namespace
}  // namespace pelab
