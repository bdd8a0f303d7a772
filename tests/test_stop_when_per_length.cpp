// pelab — train.stop_when.per_length (docs/training.md): an exact_match threshold met at every
// task length of the validation split, its worst length deciding. Checked here: the task length
// each validation example was drawn with (Task::length_at) is the example's length; the
// per-length scores of evaluate_set add up to the split's exact match; a run stops at the first
// validation whose worst length meets the threshold, computed independently from the per-length
// scores a run logs (worst_length_exact_match in metrics.jsonl), and never later than the
// whole-split criterion; bad uses are one config error naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/rng.h"
#include "data/tasks.h"
#include "pelab/pelab.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/task_data.h"
#include "train/trainer.h"
#include "tests/run_test_util.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

using pelab::testing::quiet_train;

namespace {

using pelab::testing::slurp;

struct Validation {
  int64_t step;
  double exact, worst;
};

std::vector<Validation> validations(const fs::path& run) {
  std::vector<Validation> out;
  for (const MetricRow& r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    const MetricValue* t = r.get("type");
    if (!t || t->kind != MetricValue::Kind::Str || t->s != "eval") continue;
    const MetricValue* w = r.get("worst_length_exact_match");
    out.push_back({r.get("step")->i, r.get("exact_match")->d,
                   w && w->kind == MetricValue::Kind::Num ? w->d
                                                            : std::numeric_limits<double>::quiet_NaN()});
  }
  return out;
}

class PerLengthTest : public pelab::testing::TempDirTest {
 protected:
  PerLengthTest() : TempDirTest("pelab_perlen") {}

  // A tiny reverse run (lengths 1-5, 60 validation examples, validation every 5 steps).
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.name=reverse",        "task.num_symbols=4",        "task.train_max_len=5",
        "task.test_lengths=[3]",    "task.num_eval_examples=60", "model.d_model=16",
        "model.heads=2",            "model.d_ff=32",             "model.encoder_layers=1",
        "model.decoder_layers=1",   "train.steps=80",            "train.batch_size=16",
        "train.warmup=2",           "train.lr=0.01",             "train.log_every=10",
        "train.eval_every=5",       "train.checkpoint_every=0",  "train.threads=1",
        "eval.batch_size=16"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }
};

TEST(PerLength, LengthAtIsTheLengthExampleAtDraws) {
  data::TaskSpec spec;
  spec.name = "copy";
  spec.num_symbols = 5;
  const auto task = data::make_task(spec);
  const uint64_t seed = data::derive_seed(7, "valid");
  std::map<int64_t, int> seen;
  for (int64_t k = 0; k < 300; ++k) {
    const int64_t len = task->length_at(seed, k, 2, 9);
    EXPECT_EQ(len, static_cast<int64_t>(task->example_at(seed, k, 2, 9).src.size())) << k;
    ++seen[len];
  }
  EXPECT_EQ(seen.size(), 8u);  // every length 2..9 drawn
  EXPECT_EQ(seen.begin()->first, 2);
  EXPECT_EQ(seen.rbegin()->first, 9);
}

TEST_F(PerLengthTest, ScoresPerLengthAddUpToTheSplitsExactMatch) {
  const Config cfg = tiny("sum");
  train(cfg, quiet_train());  // 80 steps: some lengths learned, others not yet
  LoadedModel lm = load_model(cfg, (dir_ / "sum" / "checkpoints" / "last.h5").string());
  const TaskData& data = *lm.data;
  const EvalSet& valid = data.valid();
  ASSERT_EQ(valid.example_lengths.size(), valid.examples.size());
  std::map<int64_t, int64_t> count;
  for (size_t i = 0; i < valid.examples.size(); ++i) {
    // reverse: the source is as long as the task length
    EXPECT_EQ(valid.example_lengths[i], static_cast<int64_t>(valid.examples[i].src.size()));
    ++count[valid.example_lengths[i]];
  }
  const EvalResult r = evaluate_set(*lm.model, data, valid, cfg);
  ASSERT_EQ(r.exact_by_length.size(), count.size());
  double right = 0, worst = 2;
  size_t i = 0;
  for (const auto& [len, n] : count) {
    EXPECT_EQ(r.exact_by_length[i].first, len);
    right += r.exact_by_length[i].second * static_cast<double>(n);
    worst = std::min(worst, r.exact_by_length[i].second);
    ++i;
  }
  EXPECT_NEAR(right / static_cast<double>(valid.examples.size()), r.exact_match, 1e-12);
  EXPECT_EQ(r.worst_length_exact_match(), worst);
  // A test split has no per-length breakdown (one length).
  EXPECT_TRUE(evaluate_set(*lm.model, data, data.tests().front(), cfg).exact_by_length.empty());
}

TEST_F(PerLengthTest, StopsAtTheFirstValidationWhoseWorstLengthMeetsTheThreshold) {
  // Run A: an unreachable per-length threshold logs the worst length at every validation.
  const std::string never = "train.stop_when={metric: exact_match, at_least: 1.0, per_length: true}";
  train(tiny("a", {never, "train.steps=200"}), quiet_train());
  const std::vector<Validation> va = validations(dir_ / "a");
  ASSERT_GE(va.size(), 10u);
  for (const auto& v : va) {
    ASSERT_TRUE(std::isfinite(v.worst)) << v.step;
    EXPECT_LE(v.worst, v.exact + 1e-12) << v.step;  // the worst length is never above the mean
  }
  // A threshold first met by the worst length in the middle of run A.
  double thr = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 3; i + 2 < va.size() && std::isnan(thr); ++i) {
    bool before = false;
    for (size_t j = 0; j < i; ++j) before = before || va[j].worst >= va[i].worst;
    if (!before && va[i].worst > 0) thr = va[i].worst;
  }
  if (std::isnan(thr)) GTEST_SKIP() << "run A's worst length never rose in its middle";
  int64_t expected = -1;
  for (const auto& v : va)
    if (expected < 0 && v.worst >= thr) expected = v.step;
  int64_t whole = -1;  // the same threshold on the whole split
  for (const auto& v : va)
    if (whole < 0 && v.exact >= thr) whole = v.step;
  ASSERT_GT(expected, 0);
  EXPECT_LE(whole, expected);

  std::ostringstream crit;
  crit.precision(17);
  crit << "train.stop_when={metric: exact_match, at_least: " << thr << ", per_length: true}";
  train(tiny("b", {crit.str(), "train.steps=200"}), quiet_train());
  const Convergence c = read_convergence((dir_ / "b").string());
  EXPECT_TRUE(c.met());
  EXPECT_EQ(c.step, expected);
  EXPECT_GE(c.value, thr);
  EXPECT_NE(c.criterion.find("at every length"), std::string::npos) << c.criterion;
}

TEST(PerLength, BadUsesAreOneConfigErrorNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.stop_when={metric: loss, at_most: 0.1, per_length: true}", "per_length"},
      {"train.stop_when={metric: exact_match, min_delta: 0.01, per_length: true}", "per_length"},
      {"train.stop_when={metric: exact_match, at_least: 0.9, per_length: maybe}", "true or false"},
      {"train.stop_when={metric: exact_match, at_least: 0.9, per_lenght: true}",
       "did you mean 'per_length'"},
  };
  for (const auto& [set, want] : cases) {
    try {
      load_config_string("", "<test>", {"task.name=copy", "train.eval_every=10", set});
      ADD_FAILURE() << set << ": accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(want), std::string::npos) << set << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // A task without task lengths in its validation split (text files: no task length per line).
  const fs::path txt = fs::temp_directory_path() / "pelab_perlen_pairs.tsv";
  {
    std::ofstream f(txt);
    for (int i = 0; i < 20; ++i) f << "ab" << i << "\tba" << i << "\n";
  }
  try {
    load_config_string("", "<test>",
                       {"task.name=textfile", "task.train_file=" + txt.string(),
                        "task.valid_fraction=0.2", "train.eval_every=10",
                        "train.stop_when={metric: exact_match, at_least: 0.5, per_length: true}"});
    ADD_FAILURE() << "per_length on textfile accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("per_length needs a synthetic task"), std::string::npos)
        << e.what();
  }
  fs::remove(txt);
  // Round trip: written back with the key only when set (older configs keep their digests).
  const Config on = load_config_string(
      "", "<test>",
      {"train.stop_when={metric: exact_match, at_least: 0.9, per_length: true}"});
  EXPECT_TRUE(on.train.stop_when.per_length);
  EXPECT_NE(config_to_yaml(on).find("per_length: true"), std::string::npos);
  const Config off =
      load_config_string("", "<test>", {"train.stop_when={metric: exact_match, at_least: 0.9}"});
  EXPECT_EQ(config_to_yaml(off).find("per_length"), std::string::npos);
  EXPECT_EQ(load_config_string("", "<test>", {}).train.stop_when.describe(), "");
  EXPECT_EQ(on.train.stop_when.describe(),
            "exact_match on valid >= 0.9 at every length for 1 consecutive validation");
}

}  // namespace
