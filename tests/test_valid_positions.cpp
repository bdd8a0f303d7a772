// pelab — train.valid_positions (docs/training.md): a run trained with randomized positions
// (pe.randomized_positions) learns a distribution of positions; `as_trained` validates it there —
// each validation draws the positions as training does, the same at every validation of the run —
// so that train.stop_when asks whether the run learned what it was trained on. `fixed` (the
// default) keeps 0..L-1. Checked here: the validations really use random positions (they differ
// from 0..L-1 and equal an evaluation with positions drawn from train.seed's generator, not from a
// generator advanced by earlier ones), `pelab eval` reports the same validation row as the run's
// eval.json, an interrupted run resumed with a criterion stops at the same step bit for bit,
// `as_trained` without randomized positions changes nothing, and a bad value is one error line.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/rng.h"
#include "tests/run_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
using pelab::testing::quiet_train;

namespace {

using pelab::testing::slurp;

// A number of a metrics row (written as an integer when it is one).
double num(const MetricValue* v) {
  if (!v) return std::numeric_limits<double>::quiet_NaN();
  if (v->kind == MetricValue::Kind::Int) return static_cast<double>(v->i);
  return v->kind == MetricValue::Kind::Num ? v->d : std::numeric_limits<double>::quiet_NaN();
}

class ValidPositions : public pelab::testing::TempDirTest {
 protected:
  ValidPositions() : TempDirTest("pelab_valid_positions") {}

  // A tiny reverse run (lengths 1-4) trained on random positions from [0, 12), 30 steps,
  // validation every 5 steps, every checkpoint kept.
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {"task.name=reverse",
                                    "task.num_symbols=4",
                                    "task.train_max_len=4",
                                    "task.test_lengths=[3, 6]",
                                    "task.num_eval_examples=16",
                                    "model.d_model=16",
                                    "model.heads=2",
                                    "model.d_ff=32",
                                    "model.encoder_layers=1",
                                    "model.decoder_layers=1",
                                    "pe.scheme=rope",
                                    "pe.randomized_positions=true",
                                    "pe.randomized_max_position=12",
                                    "train.steps=30",
                                    "train.batch_size=8",
                                    "train.warmup=2",
                                    "train.lr=0.01",
                                    "train.log_every=10",
                                    "train.eval_every=5",
                                    "train.checkpoint_every=5",
                                    "train.keep_checkpoints=0",
                                    "train.threads=1",
                                    "eval.batch_size=8"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }

  // The validation split of `run` at its final checkpoint, with `opt`.
  static EvalResult valid_of(const Config& cfg, const TrainResult& run, const EvalOptions& opt) {
    LoadedModel lm =
        load_model(cfg, run.run_dir + "/checkpoints/step_" + std::to_string(run.step) + ".h5");
    return evaluate_set(*lm.model, *lm.data, lm.data->valid(), cfg, opt);
  }

  // The run's last validation row of metrics.jsonl (the final step's, which eval.json reports).
  static MetricRow last_validation(const TrainResult& run) {
    MetricRow last;
    for (const MetricRow& row :
         parse_metrics_jsonl(slurp(fs::path(run.run_dir) / "metrics.jsonl"), "metrics")) {
      const MetricValue* t = row.get("type");
      if (t && t->kind == MetricValue::Kind::Str && t->s == "eval") last = row;
    }
    return last;
  }

  // eval.csv's valid row (the run's final validation), as `pelab eval --out` writes it too.
  static std::string valid_row(const fs::path& eval_csv) {
    const std::string csv = slurp(eval_csv);
    const size_t p = csv.find("\nvalid,");
    EXPECT_NE(p, std::string::npos) << csv;
    return p == std::string::npos ? "" : csv.substr(p + 1, csv.find('\n', p + 1) - p - 1);
  }
};

TEST_F(ValidPositions, AsTrainedValidatesOnPositionsDrawnAsInTraining) {
  const Config cfg = tiny("rand", {"train.valid_positions=as_trained"});
  const TrainResult run = train(cfg, quiet_train());
  ASSERT_TRUE(run.finished);
  const MetricRow written = last_validation(run);
  ASSERT_EQ(written.get("step")->i, run.step);
  const double loss = num(written.get("loss"));

  // Positions drawn from a generator seeded from train.seed, as the docs define them.
  Generator gen(data::derive_seed(static_cast<uint64_t>(cfg.train.seed), "valid_positions"));
  EvalOptions drawn;
  drawn.random_positions = &gen;
  drawn.random_max_position = 12;
  const EvalResult expect = valid_of(cfg, run, drawn);
  EXPECT_EQ(loss, expect.loss);
  EXPECT_EQ(num(written.get("exact_match")), expect.exact_match);
  EXPECT_EQ(num(written.get("token_accuracy")), expect.token_accuracy);
  // ... and not 0..L-1.
  const EvalResult fixed = valid_of(cfg, run, EvalOptions{});
  EXPECT_NE(loss, fixed.loss);

  // Every validation draws the same positions: evaluating twice through the helper gives the
  // same numbers (the generator is reset, not advanced).
  Generator g;
  EvalOptions a, b;
  set_validation_positions(cfg, g, a);
  const EvalResult first = valid_of(cfg, run, a);
  set_validation_positions(cfg, g, b);
  EXPECT_EQ(valid_of(cfg, run, b).loss, first.loss);
  EXPECT_EQ(first.loss, expect.loss);

  // `pelab eval` of the run reports the same validation row.
  const fs::path out = dir_ / "eval_out";
  const auto r = pelab::testing::run_captured(
      pelab::testing::quote(pelab::testing::pelab_binary()) + " eval " +
          pelab::testing::quote(run.run_dir) + " --checkpoint last --out " +
          pelab::testing::quote(out.string()),
      dir_ / "o", dir_ / "e");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(valid_row(out / "eval.csv"), valid_row(fs::path(run.run_dir) / "eval.csv"));
}

TEST_F(ValidPositions, FixedIsTheDefaultAndAsTrainedWithoutRandomPositionsChangesNothing) {
  const Config cfg = tiny("fixed");
  EXPECT_EQ(cfg.train.valid_positions, "fixed");
  const TrainResult run = train(cfg, quiet_train());
  EXPECT_EQ(num(last_validation(run).get("loss")), valid_of(cfg, run, EvalOptions{}).loss);

  // Without randomized positions training uses 0..L-1, and so does `as_trained`.
  const std::vector<std::string> plain = {"pe.randomized_positions=false"};
  const TrainResult a = train(tiny("plain_fixed", plain), quiet_train());
  std::vector<std::string> as = plain;
  as.push_back("train.valid_positions=as_trained");
  const TrainResult b = train(tiny("plain_as_trained", as), quiet_train());
  EXPECT_EQ(slurp(fs::path(a.run_dir) / "eval.csv"), slurp(fs::path(b.run_dir) / "eval.csv"));
}

TEST_F(ValidPositions, ResumedRunWithACriterionStopsAtTheSameStep) {
  // A threshold on the validation loss that the uninterrupted run meets before its cap.
  const TrainResult probe = train(tiny("probe", {"train.valid_positions=as_trained"}), quiet_train());
  double thr = std::numeric_limits<double>::infinity();
  int64_t at = -1;
  for (const MetricRow& row :
       parse_metrics_jsonl(slurp(fs::path(probe.run_dir) / "metrics.jsonl"), "metrics")) {
    const MetricValue* t = row.get("type");
    if (!t || t->kind != MetricValue::Kind::Str || t->s != "eval") continue;
    const int64_t step = row.get("step")->i;
    if (step >= 15 && step <= 25 && at < 0) {
      thr = num(row.get("loss"));
      at = step;
    }
  }
  ASSERT_GT(at, 0);
  std::ostringstream when;
  when.precision(17);
  when << "train.stop_when={metric: loss, split: valid, at_most: " << thr << ", patience: 1}";
  const std::vector<std::string> crit = {"train.valid_positions=as_trained", when.str()};
  const TrainResult full = train(tiny("full", crit), quiet_train());
  ASSERT_TRUE(full.criterion_met);
  ASSERT_LE(full.step, at);

  TrainOptions cut = quiet_train();
  cut.stop_after = 5;
  const TrainResult part = train(tiny("split", crit), cut);
  ASSERT_FALSE(part.finished);
  TrainOptions again = quiet_train();
  again.resume = part.run_dir;
  const TrainResult resumed = train(tiny("split", crit), again);
  EXPECT_TRUE(resumed.criterion_met);
  EXPECT_EQ(resumed.step, full.step);
  EXPECT_EQ(slurp(fs::path(full.run_dir) / "eval.csv"),
            slurp(fs::path(resumed.run_dir) / "eval.csv"));
}

TEST_F(ValidPositions, BadValueIsOneErrorNamingTheLine) {
  const std::string path = write("bad.yaml", "train:\n  steps: 5\n  valid_positions: random\n");
  try {
    (void)load_config(path);
    FAIL() << "accepted train.valid_positions: random";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.yaml:3"), std::string::npos) << m;
    EXPECT_NE(m.find("as_trained"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace pelab
