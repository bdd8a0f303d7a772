// pelab — tests of run records and `pelab compare CONFIG --merge DIR...` (train/study/run_record.h,
// train/study/compare.h): slices of one comparison or suite trained into their own folders and
// gathered into one report; records reused without their weights; foreign, changed, missing and
// planted records. The comparisons are tinycompare_yaml's (1+1 layers, d_model 16, a few steps),
// run in process through the command line (run_cli) with --jobs 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/compare.h"
#include "train/study/report.h"
#include "train/study/run_record.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::results_without_timing;
using pelab::testing::slurp;

// Every file under `dir` (test_util.h).
std::map<std::string, std::string> tree(const fs::path& dir) {
  return pelab::testing::file_tree(dir);
}

class CompareMergeTest : public pelab::testing::TinyCompareTest {
 protected:
  CompareMergeTest() : TinyCompareTest("pelab_compare_merge") {}

  // Trains the whole comparison into "whole" and its two halves (--only 1,2 / 3,4) into "a" and
  // "b".
  void train_whole_and_slices(const std::string& cfg) {
    ASSERT_EQ(compare(cfg, {"--out", at("whole")}), 0) << err_;
    ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1-2"}), 0) << err_;  // a range
    ASSERT_EQ(compare(cfg, {"--out", at("b"), "--only", "3,4"}), 0) << err_;
  }
};

// Two slices trained into their own folders, merged: the report equals the single-folder one
// (results.csv and every table, wall times aside), no weights are copied, the merged folders are
// untouched, and report.md names the folder and machine of every run.
TEST_F(CompareMergeTest, TwoSlicesMergeIntoTheSingleFolderReport) {
  const std::string cfg = config();
  train_whole_and_slices(cfg);
  const auto a_before = tree(dir_ / "a"), b_before = tree(dir_ / "b");
  ASSERT_EQ(compare(cfg, {"--merge", at("a"), at("b"), "--out", at("merged")}), 0) << err_;
  EXPECT_NE(err_.find("2 runs from " + at("a")), std::string::npos) << err_;
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;  // nothing trained
  const auto whole = results_without_timing(dir_ / "whole" / "results.csv");
  ASSERT_EQ(whole.size(), 4u * 3u);
  EXPECT_EQ(results_csv(results_without_timing(dir_ / "merged" / "results.csv")),
            results_csv(whole));
  for (const char* t : {"table_exact_match.csv", "table_token_accuracy.csv"})
    EXPECT_EQ(slurp(dir_ / "merged" / t), slurp(dir_ / "whole" / t)) << t;
  EXPECT_EQ(tree(dir_ / "a"), a_before);
  EXPECT_EQ(tree(dir_ / "b"), b_before);
  for (const char* run : {"rope_seed1", "t5_seed2"}) {
    const fs::path r = dir_ / "merged" / "runs" / run;
    EXPECT_TRUE(fs::exists(r / "record.json")) << run;
    EXPECT_TRUE(fs::exists(r / "eval.json")) << run;
    EXPECT_FALSE(fs::exists(r / "checkpoints")) << run;
  }
  const RunRecord rec = read_run_record((dir_ / "a" / "runs" / "rope_seed1").string());
  EXPECT_EQ(rec.step, 12);
  EXPECT_FALSE(rec.host.empty());
  const std::string md = slurp(dir_ / "merged" / "report.md");
  EXPECT_NE(md.find("## Where the runs were made"), std::string::npos) << md;
  EXPECT_NE(md.find("| " + at("a") + " | " + rec.host + " | " + rec.cpu), std::string::npos) << md;
  EXPECT_NE(md.find("| " + at("b") + " | "), std::string::npos) << md;
  EXPECT_NE(md.find("2: t5_seed1, t5_seed2 |"), std::string::npos) << md;
  // Merging again gives the same results (the earlier copies are replaced by the same records).
  ASSERT_EQ(compare(cfg, {"--merge", at("a"), at("b"), "--out", at("merged")}), 0) << err_;
  EXPECT_EQ(results_csv(results_without_timing(dir_ / "merged" / "results.csv")),
            results_csv(whole));
}

// A run no folder holds is named, the report covers the others, exit 1 (as --report-only).
TEST_F(CompareMergeTest, MissingRunsAreNamedAndExitOne) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1,2,3"}), 0) << err_;
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: 1 of 4 runs are not finished (t5_seed2)"),
            std::string::npos)
      << err_;
  EXPECT_TRUE(fs::exists(dir_ / "merged" / "report.md"));
  EXPECT_EQ(results_without_timing(dir_ / "merged" / "results.csv").size(), 3u * 3u);
}

// Records of another config (a slice trained with another learning rate) and of another pelab
// version are refused, one line each naming the run folder and why, exit 1, no report.
TEST_F(CompareMergeTest, ForeignRecordsAreRefused) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1,2"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("b"), "--only", "3", "--set", "train.lr=0.002"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("c"), "--only", "4"}), 0) << err_;
  // c's record claims another pelab version.
  const fs::path rec_path = dir_ / "c" / "runs" / "t5_seed2" / "record.json";
  RunRecord rec = read_run_record(rec_path.parent_path().string());
  rec.pelab_version = "0.0.1";
  pelab::testing::write_file(rec_path, run_record_json(rec));
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), at("b"), at("c"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + at("b") +
                      "/runs/t5_seed1: a record of another config"),
            std::string::npos)
      << err_;
  EXPECT_NE(err_.find("train.lr was 0.002, the plan has 0.001"), std::string::npos) << err_;
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + at("c") +
                      "/runs/t5_seed2: recorded by pelab 0.0.1"),
            std::string::npos)
      << err_;
  EXPECT_NE(err_.find("2 records refused; no report written"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "merged" / "report.md"));
  // A run this config does not plan at all (another scheme's folder) is refused too.
  fs::rename(dir_ / "b" / "runs" / "t5_seed1", dir_ / "b" / "runs" / "shaw_seed1");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), at("b"), "--out", at("merged2")}), 1);
  EXPECT_NE(err_.find(at("b") + "/runs/shaw_seed1: a record of a run this config does not plan"),
            std::string::npos)
      << err_;
  // The report folder may not lie in a merged folder (it would be written into).
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("a") + "/merged"}), 1);
  EXPECT_NE(err_.find("lies in it, and pelab never writes into a merged folder"), std::string::npos)
      << err_;
}

// A report folder inside a merged folder is refused before anything is created: the merged folder
// is left exactly as it was, for a comparison and for a suite. Injected: --out SELF/sub/x, which
// once created SELF/sub/x/runs inside the merged folder before the refusal.
TEST_F(CompareMergeTest, ReportFolderInsideAMergedFolderCreatesNothing) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  const auto before = tree(dir_ / "a");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("a") + "/sub/x"}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: --merge " + at("a") + ": the report folder " +
                      at("a") + "/sub/x lies in it, and pelab never writes into a merged folder"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "a" / "sub"));
  EXPECT_EQ(tree(dir_ / "a"), before);
  // A suite: its folder, or one task's folder, in a merged folder.
  const std::string suite = write(
      "suite.yaml", pelab::testing::tiny_compare_yaml("[3, 6]", 4) +
                        "    - rope\nsuite:\n  tasks:\n    - {name: parity_check}\n"
                        "    - {name: reverse_string, set: {task.name: reverse}}\n");
  fs::create_directories(dir_ / "s" / "reverse_string");
  EXPECT_EQ(compare(suite, {"--merge", at("s"), "--out", at("s") + "/in"}), 1);
  EXPECT_NE(err_.find(at("s") + "/in lies in it"), std::string::npos) << err_;
  EXPECT_EQ(compare(suite, {"--merge", at("s") + "/reverse_string", "--out", at("s")}), 1);
  EXPECT_NE(err_.find(at("s") + "/reverse_string lies in it"), std::string::npos) << err_;
  EXPECT_TRUE(fs::is_empty(dir_ / "s" / "reverse_string"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "s"), fs::directory_iterator()), 1);
}

// A finished run whose checkpoints/ is gone is reused from its record: nothing retrained, the same
// results. A new test length needs the weights: one error naming the run. A config that differs
// from the record's is retrained with the line saying which key (as for a run with weights).
TEST_F(CompareMergeTest, RecordIsReusedWithoutItsWeights) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("whole")}), 0) << err_;
  const std::string before = slurp(dir_ / "whole" / "results.csv");
  for (const char* run : {"rope_seed1", "rope_seed2", "t5_seed1", "t5_seed2"})
    fs::remove_all(dir_ / "whole" / "runs" / run / "checkpoints");
  ASSERT_EQ(compare(cfg, {"--out", at("whole")}), 0) << err_;
  EXPECT_NE(err_.find("[1/4] rope seed 1: finished run reused (" + at("whole") +
                      "/runs/rope_seed1, its record: no checkpoints)"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;
  EXPECT_EQ(slurp(dir_ / "whole" / "results.csv"), before);
  EXPECT_NE(compare(cfg, {"--out", at("whole"), "--set", "task.test_lengths=[2,4,6,8]"}), 0);
  EXPECT_NE(err_.find("compare: rope_seed1 needs its weights"), std::string::npos) << err_;
  EXPECT_EQ(slurp(dir_ / "whole" / "results.csv"), before);
  ASSERT_EQ(compare(cfg, {"--out", at("whole"), "--set", "train.lr=0.002"}), 0) << err_;
  EXPECT_NE(err_.find("[1/4] rope seed 1: config changed: train.lr was 0.001, now 0.002 -> "
                      "training afresh"),
            std::string::npos)
      << err_;
  EXPECT_TRUE(fs::exists(dir_ / "whole" / "runs" / "rope_seed1" / "checkpoints"));
}

// A record in a merged folder whose config differs from the plan (a slice run with another
// test length) is refused, not retrained: the merge never trains.
TEST_F(CompareMergeTest, ChangedConfigInAMergedFolderIsRefused) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1", "--set", "task.test_lengths=[2,4,8]"}),
            0)
      << err_;
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find(at("a") + "/runs/rope_seed1: a record of another config"), std::string::npos)
      << err_;
  EXPECT_NE(err_.find("task.test_lengths was [2, 4, 8], the plan has [2, 4, 6]"), std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "merged" / "runs" / "rope_seed1"));
}

// A symbolic link planted in a merged folder — a record file, a run folder, runs/ itself — refuses
// the merge with one line naming it; its target is never read.
TEST_F(CompareMergeTest, PlantedSymbolicLinksAreRefused) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1,2"}), 0) << err_;
  const std::string secret = write("secret.txt", "not a record\n");
  const fs::path eval = dir_ / "a" / "runs" / "rope_seed1" / "eval.json";
  fs::remove(eval);
  fs::create_symlink(secret, eval);
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("m1")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + eval.string() +
                      " is a symbolic link; pelab never follows one in a merged folder"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "m1" / "report.md"));
  EXPECT_FALSE(fs::exists(dir_ / "m1" / "runs" / "rope_seed1"));
  // A run folder that is a link (to a real run elsewhere).
  ASSERT_EQ(compare(cfg, {"--out", at("elsewhere"), "--only", "3"}), 0) << err_;
  fs::create_symlink(dir_ / "elsewhere" / "runs" / "t5_seed1", dir_ / "a" / "runs" / "t5_seed1");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("m2")}), 1);
  EXPECT_NE(err_.find(at("a") + "/runs/t5_seed1 is a symbolic link"), std::string::npos) << err_;
  // runs/ itself a link.
  fs::create_directories(dir_ / "c");
  fs::create_symlink(dir_ / "elsewhere" / "runs", dir_ / "c" / "runs");
  EXPECT_EQ(compare(cfg, {"--merge", at("c"), "--out", at("m3")}), 1);
  EXPECT_NE(err_.find(at("c") + "/runs is a symbolic link"), std::string::npos) << err_;
}

// Out-of-range values in a record are refused when read: record.json's fields, and a cached
// evaluation whose exact match lies outside [0, 1].
TEST_F(CompareMergeTest, RecordValuesAreRangeChecked) {
  EXPECT_THROW(
      parse_run_record("{\"pelab_version\": \"0.1.0\", \"config_digest\": "
                       "\"0123456789abcdef\", \"step\": -3, \"checkpoint\": "
                       "\"step_1.h5:1:2\", \"host\": \"h\", \"cpu\": \"c\", \"blas\": \"b\"}",
                       "r"),
      Error);
  EXPECT_THROW(parse_run_record("{\"pelab_version\": \"0.1.0\", \"config_digest\": \"zz\", "
                                "\"step\": 3, \"checkpoint\": \"step_1.h5:1:2\", \"host\": \"h\", "
                                "\"cpu\": \"c\", \"blas\": \"b\"}",
                                "r"),
               Error);
  EXPECT_THROW(parse_run_record("{\"pelab_version\": \"0.1.0\", \"config_digest\": "
                                "\"0123456789abcdef\", \"step\": 3, \"checkpoint\": "
                                "\"step_1.h5:1:2\", \"host\": \"h\\n\", \"cpu\": \"c\", "
                                "\"blas\": \"b\"}",
                                "r"),
               Error);
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  const fs::path cache = dir_ / "a" / "runs" / "rope_seed1" / "compare_eval" / "base.csv";
  std::string text = slurp(cache);
  // The first data row's exact match (column 11) set to 7.
  const size_t row = text.find('\n', text.find('\n') + 1) + 1;
  size_t pos = row;
  for (int c = 0; c < 10; ++c) pos = text.find(',', pos) + 1;
  text.replace(pos, text.find(',', pos) - pos, "7");
  pelab::testing::write_file(cache, text);
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + cache.string() +
                      ": exact_match 7 of len_2 lies outside [0, 1]"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "merged" / "runs" / "rope_seed1"));
  // The same file in a run's own folder (its weights gone) is refused when the report reads it.
  fs::remove_all(dir_ / "a" / "runs" / "rope_seed1" / "checkpoints");
  EXPECT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 1);
  EXPECT_NE(err_.find(cache.string() + ": exact_match 7 of len_2 lies outside [0, 1]"),
            std::string::npos)
      << err_;
}

// --only takes ranges A-B (slices of a long plan); a reversed or malformed range is a usage error.
TEST_F(CompareMergeTest, OnlyTakesRanges) {
  const std::string cfg = config();
  for (const char* bad : {"3-2", "1-x", "-2", "1-", "0-2"}) {
    EXPECT_EQ(compare(cfg, {"--out", at("a"), "--only", bad}), 2) << bad;
    EXPECT_NE(err_.find("--only expects run indexes I[,J...] or ranges A-B"), std::string::npos)
        << bad << ": " << err_;
  }
  EXPECT_EQ(compare(cfg, {"--out", at("a"), "--only", "2-5"}), 1);
  EXPECT_NE(err_.find("--only 5: the plan has 4 runs"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "a" / "runs" / "rope_seed2" / "checkpoints"));  // nothing trained
}

// --merge's command line: at least one folder, each existing, and none of the options that train or
// emit; each mistake one usage line (exit 2) before anything is read.
TEST_F(CompareMergeTest, MergeUsageErrorsAreOneLine) {
  const std::string cfg = config();
  fs::create_directories(dir_ / "a");
  EXPECT_EQ(compare(cfg, {"--merge"}), 2);
  EXPECT_NE(err_.find("--merge needs at least one folder"), std::string::npos) << err_;
  EXPECT_EQ(compare(cfg, {"--merge", at("nowhere")}), 2);
  EXPECT_NE(err_.find("--merge " + at("nowhere") + ": no such folder"), std::string::npos) << err_;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--only", "1"}, {"--retrain"}, {"--plan"}, {"--report-only"}}) {
    std::vector<std::string> args = {"--merge", at("a")};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(compare(cfg, args), 2) << extra[0];
    EXPECT_NE(err_.find("--merge excludes --plan, --only"), std::string::npos) << err_;
  }
}

// A suite sliced by --task (and one task by --only) merges into the summary of the whole suite;
// a task folder that is a link is refused.
TEST_F(CompareMergeTest, SuiteSlicesMergeIntoTheWholeSummary) {
  const std::string cfg = write("suite.yaml", pelab::testing::tiny_suite_yaml());
  ASSERT_EQ(compare(cfg, {"--out", at("whole")}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("s1"), "--task", "parity_check"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("s2"), "--task", "reverse_string", "--only", "1,2"}), 0)
      << err_;
  EXPECT_EQ(compare(cfg, {"--merge", at("s1"), at("s2"), "--out", at("merged")}), 1);
  EXPECT_NE(err_.find("compare --merge: 2 runs are not finished (reverse_string: t5_seed1, "
                      "reverse_string: t5_seed2)"),
            std::string::npos)
      << err_;
  // The summary of the finished runs says first that it is partial, and how much is missing.
  EXPECT_NE(slurp(dir_ / "merged" / "summary.md")
                .find("\n\n**Partial: 2 of 8 runs are not finished** (per task: reverse_string "
                      "2). Every cell"),
            std::string::npos)
      << slurp(dir_ / "merged" / "summary.md");
  ASSERT_EQ(compare(cfg, {"--out", at("s3"), "--task", "reverse_string", "--only", "3,4"}), 0)
      << err_;
  ASSERT_EQ(compare(cfg, {"--merge", at("s1"), at("s2"), at("s3"), "--out", at("merged")}), 0)
      << err_;
  EXPECT_EQ(slurp(dir_ / "merged" / "summary.md").find("Partial"), std::string::npos);
  EXPECT_EQ(slurp(dir_ / "merged" / "summary.csv"), slurp(dir_ / "whole" / "summary.csv"));
  for (const char* task : {"parity_check", "reverse_string"})
    EXPECT_EQ(results_csv(results_without_timing(dir_ / "merged" / task / "results.csv")),
              results_csv(results_without_timing(dir_ / "whole" / task / "results.csv")))
        << task;
  EXPECT_NE(slurp(dir_ / "merged" / "reverse_string" / "report.md")
                .find("| " + at("s3") + "/reverse_string | "),
            std::string::npos);
  // A task folder planted as a link in a merged suite folder is refused like any other link.
  fs::create_directories(dir_ / "s4");
  fs::create_directory_symlink(dir_ / "s1" / "parity_check", dir_ / "s4" / "parity_check");
  EXPECT_EQ(compare(cfg, {"--merge", at("s4"), "--out", at("merged4")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + at("s4") +
                      "/parity_check is a symbolic link; pelab never follows one"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "merged4" / "summary.md"));
}

}  // namespace
