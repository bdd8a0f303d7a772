// pelab — tests of run records and `pelab compare CONFIG --merge DIR...` (train/study/run_record.h,
// train/study/compare.h): slices of one comparison or suite trained into their own folders and
// gathered into one report; records reused without their weights; foreign, changed, missing and
// planted records. The comparisons are tinycompare_yaml's (1+1 layers, d_model 16, a few steps),
// run in process through the command line (run_cli) with --jobs 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
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

// Every number a merge publishes is traced to the run's own evaluation and to the plan: a record's
// cached evaluation (compare_eval/base.csv) with an in-range value edited, a row repeated, a row of
// a length the plan never tests, or no rows at all is refused with one line naming the file; the
// same file in a run's own folder is evaluated again from its weights. Injected: each of the four
// edits of base.csv in a slice's record, which a merge once published (exit 0) as 97.0, "50.0
// [0.0, 100.0] (n = 2)", a column "999", and a scheme missing from every table.
TEST_F(CompareMergeTest, CachedNumbersAreTracedToTheRunsOwnEvaluationAndThePlan) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("rest"), "--only", "2-4"}), 0) << err_;
  // The two slices, untouched, merge whole (exit 0): each exit 1 below is the edited file's.
  ASSERT_EQ(compare(cfg, {"--merge", at("a"), at("rest"), "--out", at("merged0")}), 0)
      << err_;
  const fs::path run = dir_ / "a" / "runs" / "rope_seed1";
  const fs::path cache = run / "compare_eval" / "base.csv";
  const std::string original = slurp(cache);
  std::vector<std::string> lines;  // the cache's lines: header, columns, len_2, len_4, len_6
  for (size_t b = 0, e; b < original.size(); b = e + 1) {
    e = original.find('\n', b);
    lines.push_back(original.substr(b, e - b));
  }
  ASSERT_EQ(lines.size(), 5u) << original;
  auto with_field = [](std::string line, int column, const std::string& value) {
    size_t pos = 0;
    for (int c = 0; c < column; ++c) pos = line.find(',', pos) + 1;
    return line.replace(pos, line.find(',', pos) - pos, value);
  };
  const std::string em = with_field(lines[2], 10, "0.97");  // exact match of len_2 (was 0.166..)
  const std::string len999 = with_field(with_field(lines[4], 3, "len_999"), 4, "999");
  const std::string head = lines[0] + "\n" + lines[1] + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + em + "\n" + lines[3] + "\n" + lines[4] + "\n",
       ": row 2: exact_match 0.96999999999999997 of len_2 is not the run's own evaluation "
       "(0.16666666666666666 in " + (run / "eval.json").string() + ")"},
      {original + lines[2] + "\n", ": row 5: a second row of len_2 (the first is row 2)"},
      {original + len999 + "\n",
       ": row 5: len_999 (length 999) is not a test of this plan (len_2, len_4, len_6)"},
      {head, ": 0 of the 3 tests of this plan (len_2, len_4, len_6): a cached evaluation covers "
             "every test"}};
  int k = 0;
  for (const auto& [text, message] : cases) {
    pelab::testing::write_file(cache, text);
    const std::string out = at("merged" + std::to_string(++k));
    EXPECT_EQ(compare(cfg, {"--merge", at("a"), at("rest"), "--out", out}), 1)
        << message;
    EXPECT_NE(err_.find("pelab: error: compare --merge: " + cache.string() + message),
              std::string::npos)
        << err_;
    EXPECT_FALSE(fs::exists(fs::path(out) / "runs" / "rope_seed1")) << message;
    EXPECT_FALSE(fs::exists(fs::path(out) / "report.md")) << message;
  }
  // In the run's own folder, with its weights: evaluated again, the run's own numbers reported.
  pelab::testing::write_file(cache, head + em + "\n" + lines[3] + "\n" + lines[4] + "\n");
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  const std::vector<ResultRow> again = parse_results_csv(
      slurp(cache).substr(slurp(cache).find('\n') + 1), cache.string());
  ASSERT_EQ(again.size(), 3u);
  EXPECT_DOUBLE_EQ(again[0].exact_match, 1.0 / 6.0);
  // Without them (a record), the edited file is refused where the report reads it.
  pelab::testing::write_file(cache, original + lines[2] + "\n");
  fs::remove_all(run / "checkpoints");
  EXPECT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 1);
  EXPECT_NE(err_.find(cache.string() + ": row 5: a second row of len_2"), std::string::npos)
      << err_;
}

// A record read from a folder's records.tar.xz is checked as one read from its runs/ folder, and the
// messages name the archive's member. Injected: a repeated row in a cached evaluation archived
// with write_records_archive, the run folder gone.
TEST_F(CompareMergeTest, ArchivedRecordsAreCheckedAsFoldersAre) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  ASSERT_EQ(compare(cfg, {"--out", at("rest"), "--only", "2-4"}), 0) << err_;
  const fs::path cache = dir_ / "a" / "runs" / "rope_seed1" / "compare_eval" / "base.csv";
  const std::string original = slurp(cache);
  const size_t row2 = original.find('\n', original.find('\n') + 1) + 1;
  const std::string len2 = original.substr(row2, original.find('\n', row2) + 1 - row2);
  ASSERT_NE(len2.find(",len_2,"), std::string::npos) << original;
  pelab::testing::write_file(cache, original + len2);
  write_records_archive(at("a"), {"rope_seed1"});
  fs::remove_all(dir_ / "a" / "runs");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), at("rest"), "--out", at("m")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + at("a") +
                      "/records.tar.xz:runs/rope_seed1/compare_eval/base.csv: row 5: a second row "
                      "of len_2 (the first is row 2)"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "m" / "runs" / "rope_seed1"));
  EXPECT_FALSE(fs::exists(dir_ / "m" / "report.md"));
}

// A merge names the files of the merged folder, never the copy it stages in the report folder, and
// gives advice a record can follow. Injected: a record's config.yaml that does not parse, an
// eval.json whose convergence record is malformed, and a record without eval.json (once named
// OUT/runs/.merge-0/... and told to "resume it", which a record without checkpoints cannot).
TEST_F(CompareMergeTest, MergeErrorsNameTheFileInTheMergedFolder) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  const fs::path run = dir_ / "a" / "runs" / "rope_seed1";
  fs::remove_all(run / "checkpoints");
  const std::string config_yaml = slurp(run / "config.yaml");
  const std::string eval_json = slurp(run / "eval.json");
  pelab::testing::write_file(run / "config.yaml", "task: {name: [\n");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("m1")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + (run / "config.yaml").string() + ":"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find(".merge-"), std::string::npos) << err_;
  pelab::testing::write_file(run / "config.yaml", config_yaml);
  std::string bad = eval_json;
  bad.replace(bad.find("\"convergence\": null"), 19, "\"convergence\": {\"met\": 2}");
  pelab::testing::write_file(run / "eval.json", bad);
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("m2")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + (run / "eval.json").string() +
                      ": convergence.criterion is missing"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find(".merge-"), std::string::npos) << err_;
  fs::remove(run / "eval.json");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("m3")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + (run / "eval.json").string() +
                      ": missing: the run's final evaluation is not in its record; finish the run "
                      "where it trained (pelab compare CONFIG --only I there) and merge again"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find(".merge-"), std::string::npos) << err_;
  EXPECT_EQ(err_.find("resume it"), std::string::npos) << err_;
}

// What a merge reads is bounded: the bytes of one file and of one record, the files and bytes of
// the whole merge, the names listed in one folder, and the nesting of an eval.json; each limit
// passed is one line naming the file, and nothing is merged. Injected: the limits lowered below a
// slice's two records (RecordReadLimits), and an eval.json nested 100000 levels deep (which once
// crashed the merge with SIGSEGV).
TEST_F(CompareMergeTest, MergeReadsAreBounded) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1,2"}), 0) << err_;
  struct Restore {
    ~Restore() { set_record_read_limits(RecordReadLimits{}); }
  } restore;
  const std::string runs = at("a") + "/runs";
  const std::vector<std::pair<std::function<void(RecordReadLimits&)>, std::string>> cases = {
      {[](RecordReadLimits& l) { l.file_bytes = 100; },
       " bytes or more, more than a record file may be (100)"},
      {[](RecordReadLimits& l) { l.record_bytes = 1000; },
       " passes the limit of 1000 bytes one record may hold"},
      {[](RecordReadLimits& l) { l.total_files = 12; },
       " passes the limit of 12 files one merge reads in all; merge the folders in parts (a "
       "merged folder can be merged again)"},
      {[](RecordReadLimits& l) { l.total_bytes = 20000; },
       " passes the limit of 20000 bytes one merge reads in all"},
      {[](RecordReadLimits& l) { l.folder_entries = 5; },
       " holds more than 5 entries, more than pelab lists in a merged folder"}};
  int k = 0;
  for (const auto& [lower, message] : cases) {
    RecordReadLimits l;
    lower(l);
    set_record_read_limits(l);
    const std::string out = at("m" + std::to_string(++k));
    EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", out}), 1) << message;
    EXPECT_NE(err_.find("pelab: error: compare --merge: "), std::string::npos) << err_;
    EXPECT_NE(err_.find(runs), std::string::npos) << err_;
    EXPECT_NE(err_.find(message), std::string::npos) << err_;
    EXPECT_FALSE(fs::exists(fs::path(out) / "report.md")) << message;
  }
  set_record_read_limits(RecordReadLimits{});
  ASSERT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("fits")}), 1) << err_;  // 2 runs missing
  EXPECT_TRUE(fs::exists(dir_ / "fits" / "runs" / "rope_seed2" / "record.json"));
  // An eval.json nested deeper than any pelab writes.
  const fs::path eval = dir_ / "a" / "runs" / "rope_seed1" / "eval.json";
  pelab::testing::write_file(eval, "{\"step\": 12, \"x\": " + std::string(100000, '[') +
                                       std::string(100000, ']') + "}\n");
  EXPECT_EQ(compare(cfg, {"--merge", at("a"), "--out", at("deep")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + eval.string() +
                      ": malformed JSON (nested deeper than 64 levels"),
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
