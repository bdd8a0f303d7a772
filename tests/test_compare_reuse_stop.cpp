// A comparison reuses a finished run only when nothing that decides what it trained changed. With
// train.stop_when the validations decide where a run stops, so their cadence (train.eval_every)
// and the validation split's size (task.num_eval_examples) must retrain it; without a criterion
// they only change the evaluation and the run is reused (train/study/compare_plan.cpp, inspect_run).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/compare.h"

namespace pelab {
namespace {

class CompareReuseStop : public pelab::testing::TempDirTest {
 protected:
  CompareReuseStop() : TempDirTest("pelab_reuse_stop") {}

  // The tiny comparison (reverse, lengths 1-4, tested at 2 and 6; rope, 2 seeds, 12 steps),
  // validated every 4 steps, with a stop criterion when `stops` (one the tiny runs do not meet, so
  // every run trains to the cap either way).
  std::string config(bool stops) {
    std::string y = pelab::testing::tiny_compare_yaml("[2, 6]", 12) + "    - rope\n";
    const std::string from = "eval_every: 0,";
    const size_t p = y.find(from);
    EXPECT_NE(p, std::string::npos);
    y.replace(p, from.size(),
              stops ? "eval_every: 4, stop_when: {metric: exact_match, split: valid, "
                      "at_least: 1.0, patience: 2},"
                    : "eval_every: 4,");
    return write("tiny.yaml", y);
  }

  CompareResult run(bool stops, const std::vector<std::string>& sets) {
    CompareOptions o;
    o.out = (dir_ / "report").string();
    o.progress = 2;
    o.log = &log_;
    return run_compare(load_compare(config(stops), sets), o);
  }

  std::ostringstream log_;
};

TEST_F(CompareReuseStop, ValidationCadenceAndSizeRetrainARunWithACriterion) {
  const CompareResult first = run(true, {});
  ASSERT_FALSE(first.interrupted);
  EXPECT_EQ(first.trained, 2);
  EXPECT_EQ(run(true, {}).reused, 2);  // nothing changed: reused

  const CompareResult bigger = run(true, {"task.num_eval_examples=8"});
  EXPECT_EQ(bigger.trained, 2);
  EXPECT_EQ(bigger.reused, 0);
  EXPECT_NE(log_.str().find("config changed: task.num_eval_examples was 6, now 8"),
            std::string::npos)
      << log_.str();

  const CompareResult cadence = run(true, {"task.num_eval_examples=8", "train.eval_every=6"});
  EXPECT_EQ(cadence.trained, 2);
  EXPECT_NE(log_.str().find("config changed: train.eval_every was 4, now 6"), std::string::npos)
      << log_.str();
}

TEST_F(CompareReuseStop, WithoutACriterionTheyOnlyChangeTheEvaluation) {
  const CompareResult first = run(false, {});
  ASSERT_FALSE(first.interrupted);
  EXPECT_EQ(first.trained, 2);
  const CompareResult again = run(false, {"task.num_eval_examples=8", "train.eval_every=6"});
  EXPECT_EQ(again.trained, 0);
  EXPECT_EQ(again.resumed, 0);
  EXPECT_EQ(again.reused, 2);
  EXPECT_EQ(log_.str().find("config changed"), std::string::npos) << log_.str();
}

// A randomized run that a pelab from before train.batch_lengths trained (its config.yaml has no
// such key) trained on mixed-length batches: the comparison retrains it instead of reusing it,
// and says why. A standard run from then trained as it does now and is reused.
TEST_F(CompareReuseStop, RandomizedRunsFromMixedBatchesAreRetrained) {
  const std::string cfg = write(
      "rand.yaml", pelab::testing::tiny_compare_yaml("[2, 6]", 8) +
                       "    - rope\n"
                       "    - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: "
                       "true, pe.randomized_max_position: 16}}\n");
  CompareOptions o;
  o.out = (dir_ / "rand").string();
  o.progress = 2;
  o.log = &log_;
  ASSERT_EQ(run_compare(load_compare(cfg), o).trained, 4);
  // As a pelab from before the key wrote them.
  for (const char* run : {"rope_seed1", "rope+rand_seed1"}) {
    const auto path = dir_ / "rand" / "runs" / run / "config.yaml";
    std::string y = pelab::testing::slurp(path);
    const size_t at = y.find("\n  batch_lengths: auto");  // the line, with its comment
    ASSERT_NE(at, std::string::npos) << y;
    y.erase(at, y.find('\n', at + 1) - at);
    write(path.lexically_relative(dir_).string(), y);
  }
  log_.str("");
  const CompareResult again = run_compare(load_compare(cfg), o);
  EXPECT_EQ(again.trained, 1);  // rope+rand seed 1
  EXPECT_EQ(again.reused, 3);
  EXPECT_NE(log_.str().find("mixed-length batches"), std::string::npos) << log_.str();
  EXPECT_EQ(run_compare(load_compare(cfg), o).reused, 4);  // retrained as pelab trains now
}

}  // namespace
}  // namespace pelab
