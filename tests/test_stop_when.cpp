// pelab — train.stop_when, training to a criterion (docs/training.md): the run stops at the first
// validation that makes `patience` consecutive validations meet the threshold (computed here
// independently from the metrics of a run without the criterion), an interrupted and resumed run
// stops at the same step bit for bit, a criterion not met by train.steps is recorded as such, the
// eval.json record round-trips through read_convergence, `pelab compare` reuses a run stopped by
// its criterion, and every bad criterion is one CLI error line with FILE:LINE before anything
// trains. The plateau form (min_delta): the stop step computed independently from the uncapped
// run's validations, resume bit for bit, the criterion in words. Every run is a few dozen steps of
// a 1+1-layer model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pelab/pelab.h"
#include "train/checkpoint.h"
#include "train/study/compare.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "tests/run_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

using pelab::testing::quiet_train;

namespace {

using pelab::testing::slurp;
using pelab::testing::quote;

double num(const MetricValue* v) {
  if (!v) return std::numeric_limits<double>::quiet_NaN();
  if (v->kind == MetricValue::Kind::Int) return static_cast<double>(v->i);
  if (v->kind == MetricValue::Kind::Num) return v->d;
  return std::numeric_limits<double>::quiet_NaN();
}

struct EvalPoint {
  int64_t step;
  double value;
};

// (step, metric) of every validation row of a run's metrics.jsonl, in order.
std::vector<EvalPoint> validations(const fs::path& run, const std::string& metric) {
  std::vector<EvalPoint> out;
  for (const MetricRow& r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    const MetricValue* t = r.get("type");
    if (t && t->kind == MetricValue::Kind::Str && t->s == "eval")
      out.push_back({r.get("step")->i, num(r.get(metric))});
  }
  return out;
}

// The criterion's definition, independently of the trainer: the step of the first validation at
// which `patience` consecutive validations meet the threshold, or -1.
int64_t expected_stop(const std::vector<EvalPoint>& v, bool at_least, double thr, int patience) {
  int hits = 0;
  for (const auto& p : v) {
    const bool ok = at_least ? p.value >= thr : p.value <= thr;
    hits = ok ? hits + 1 : 0;
    if (hits >= patience) return p.step;
  }
  return -1;
}

// The plateau form's definition, independently of the trainer: the first validation sets the
// best; a later one that beats the best by more than min_delta (relative) resets the count,
// any other adds one (and a better value still becomes the best); the step where the count
// reaches `patience`, or -1.
int64_t expected_plateau_stop(const std::vector<EvalPoint>& v, bool higher, double min_delta,
                              int patience) {
  double best = 0;
  int count = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i].value;
    if (i == 0) {
      best = x;
      continue;
    }
    const double gain = higher ? x - best : best - x;
    const double scale = higher ? std::max(std::fabs(best), 1e-12) : std::fabs(best);
    if (gain > min_delta * scale) {
      count = 0;
    } else {
      ++count;
      if (count >= patience) return v[i].step;
    }
    if (gain > 0) best = x;
  }
  return -1;
}

// The largest of `deltas` whose plateau is met after validation patience + 1 (so an improvement
// has reset the count at least once) and before the last validation; NaN if none.
double plateau_delta(const std::vector<EvalPoint>& v, bool higher, int patience,
                     const std::vector<double>& deltas) {
  for (double d : deltas) {
    const int64_t s = expected_plateau_stop(v, higher, d, patience);
    if (s > v[patience].step && s < v.back().step) return d;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// A threshold that `patience` consecutive validations before the last one meet: the best (over
// windows) of each window's worst value.
double reachable_threshold(const std::vector<EvalPoint>& v, bool at_least, int patience) {
  double best = at_least ? -1e300 : 1e300;
  for (size_t i = 0; i + patience < v.size(); ++i) {  // the window ends before the last validation
    double worst = v[i].value;
    for (int j = 1; j < patience; ++j)
      worst = at_least ? std::min(worst, v[i + j].value) : std::max(worst, v[i + j].value);
    best = at_least ? std::max(best, worst) : std::min(best, worst);
  }
  return best;
}

// metrics.jsonl rows without the timing fields.
std::vector<std::string> rows_without_timing(const fs::path& run) {
  std::vector<std::string> out;
  for (const MetricRow& r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    MetricRow k;
    for (const auto& f : r.fields)
      if (f.first != "elapsed_s" && f.first != "tokens_per_s") k.fields.push_back(f);
    out.push_back(k.json());
  }
  return out;
}

// Parameters and optimizer state bit-identical; with `criterion`, the train.stop_when state too.
void expect_same_parameters(const std::string& pa, const std::string& pb, bool criterion = true) {
  const CheckpointData a = load_checkpoint(pa), b = load_checkpoint(pb);
  EXPECT_EQ(a.step, b.step);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(a.params[i].second.to_vector(), b.params[i].second.to_vector()) << a.params[i].first;
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (const auto& [name, ts] : a.optimizer_state)
    for (size_t i = 0; i < ts.size(); ++i)
      EXPECT_EQ(ts[i].to_vector(), b.optimizer_state.at(name)[i].to_vector()) << name;
  for (const char* c : {"data_position", "model_rng_offset"})
    EXPECT_EQ(a.counters.at(c), b.counters.at(c)) << c;
  if (!criterion) return;
  for (const char* c : {"criterion_hits", "criterion_met_step"})
    EXPECT_EQ(a.counters.at(c), b.counters.at(c)) << c;
  EXPECT_EQ(a.values.at("criterion_value"), b.values.at("criterion_value"));
  // The plateau's best so far, bit for bit (NaN for a threshold criterion).
  uint64_t ba = 0, bb = 1;
  std::memcpy(&ba, &a.values.at("criterion_best"), sizeof ba);
  std::memcpy(&bb, &b.values.at("criterion_best"), sizeof bb);
  EXPECT_EQ(ba, bb);
}

class StopWhenTest : public pelab::testing::TempDirTest {
 protected:
  StopWhenTest() : TempDirTest("pelab_stop") {}

  // A tiny reverse run: 60 steps at lr 0.01, validation every 5 steps, every checkpoint kept.
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.name=reverse",      "task.num_symbols=4",       "task.train_max_len=4",
        "task.test_lengths=[3, 6]", "task.num_eval_examples=8", "model.d_model=16",
        "model.heads=2",          "model.d_ff=32",            "model.encoder_layers=1",
        "model.decoder_layers=1", "train.steps=60",           "train.batch_size=8",
        "train.warmup=2",         "train.lr=0.01",            "train.log_every=10",
        "train.eval_every=5",     "train.checkpoint_every=5", "train.keep_checkpoints=0",
        "train.threads=1",        "eval.batch_size=8"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }

  static std::string criterion(const std::string& metric, const char* dir, double thr,
                               int patience) {
    std::ostringstream s;
    s.precision(17);
    s << "train.stop_when={metric: " << metric << ", split: valid, " << dir << ": " << thr
      << ", patience: " << patience << "}";
    return s.str();
  }

  fs::path ck(const std::string& run, int64_t step) const {
    return dir_ / run / "checkpoints" / ("step_" + std::to_string(step) + ".h5");
  }
};

}  // namespace

TEST_F(StopWhenTest, StopsAtTheFirstStepWithPatienceConsecutiveHits) {
  // The run without a criterion gives the validation curve; the criterion's stop step follows.
  const TrainResult base = train(tiny("base"), quiet_train());
  ASSERT_TRUE(base.finished);
  EXPECT_FALSE(base.criterion_set);
  EXPECT_FALSE(read_convergence(base.run_dir).has_criterion());
  const std::vector<EvalPoint> v = validations(base.run_dir, "token_accuracy");
  ASSERT_EQ(v.size(), 12u);
  const int patience = 2;
  const double thr = reachable_threshold(v, true, patience);
  const int64_t want = expected_stop(v, true, thr, patience);
  ASSERT_GT(want, 0);
  ASSERT_LT(want, 60) << "the threshold must be met before the cap";

  const TrainResult r =
      train(tiny("crit", {criterion("token_accuracy", "at_least", thr, patience)}), quiet_train());
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.criterion_set);
  EXPECT_TRUE(r.criterion_met);
  EXPECT_EQ(r.criterion_step, want);
  EXPECT_EQ(r.step, want);
  ASSERT_FALSE(r.final_eval.empty());  // the final evaluation ran, as at the end of a normal run
  EXPECT_TRUE(fs::exists(dir_ / "crit" / "eval.csv"));
  // The step checkpoint of the stop step is written and is the newest; nothing trained past it.
  EXPECT_EQ(latest_checkpoint(r.run_dir), ck("crit", want).string());
  EXPECT_FALSE(fs::exists(ck("crit", want + 5)));
  // Stopping does not change the trajectory: the same parameters as the uncapped run at that step.
  expect_same_parameters(ck("crit", want).string(), ck("base", want).string(), false);

  const Convergence c = read_convergence(r.run_dir);
  EXPECT_TRUE(c.has_criterion());
  EXPECT_TRUE(c.met());
  EXPECT_EQ(c.step, want);
  EXPECT_EQ(c.steps_run, want);
  EXPECT_EQ(c.metric, "token_accuracy");
  EXPECT_NE(c.criterion.find("token_accuracy on valid >= "), std::string::npos) << c.criterion;
  EXPECT_NE(c.criterion.find("2 consecutive validations"), std::string::npos) << c.criterion;
  double at_want = 0;
  for (const auto& p : v)
    if (p.step == want) at_want = p.value;
  EXPECT_EQ(c.value, at_want);
  EXPECT_EQ(r.final_eval[0].token_accuracy, at_want);  // valid at the stop step

  // The metrics rows are the base run's up to the stop step, then (the stop step not being a
  // train.log_every step) a training row for the steps since the last one, then one convergence
  // row.
  ASSERT_NE(want % 10, 0) << "pick a case where the stop step is not a logging step";
  const std::vector<std::string> rb = rows_without_timing(base.run_dir),
                                 rc = rows_without_timing(r.run_dir);
  ASSERT_GE(rc.size(), 3u);
  for (size_t i = 0; i + 2 < rc.size(); ++i) EXPECT_EQ(rc[i], rb[i]) << "row " << i;
  const MetricRow tail = parse_metric_row(rc[rc.size() - 2]);
  EXPECT_EQ(tail.get("type")->s, "train");
  EXPECT_EQ(tail.get("step")->i, want);
  const MetricRow last = parse_metric_row(rc.back());
  EXPECT_EQ(last.get("type")->s, "convergence");
  EXPECT_EQ(last.get("step")->i, want);
  EXPECT_EQ(last.get("met")->i, 1);
  EXPECT_EQ(last.get("criterion_step")->i, want);
  EXPECT_EQ(num(last.get("token_accuracy")), at_want);
}

TEST_F(StopWhenTest, ResumedMidwayStopsAtTheSameStepBitForBit) {
  // at_most on loss, patience 3: the counter must survive the interruption.
  const TrainResult base = train(tiny("base"), quiet_train());
  const std::vector<EvalPoint> v = validations(base.run_dir, "loss");
  const int patience = 3;
  const double thr = reachable_threshold(v, false, patience);
  const int64_t want = expected_stop(v, false, thr, patience);
  ASSERT_GT(want, 10);
  ASSERT_LT(want, 60);
  const std::string crit = criterion("loss", "at_most", thr, patience);

  const TrainResult full = train(tiny("full", {crit}), quiet_train());
  ASSERT_TRUE(full.criterion_met);
  EXPECT_EQ(full.step, want);

  // Interrupted two validations before the stop (one hit counted), then resumed.
  TrainOptions cut = quiet_train();
  cut.stop_after = want - 10;
  const TrainResult part = train(tiny("split", {crit}), cut);
  EXPECT_FALSE(part.finished);
  EXPECT_EQ(part.step, want - 10);
  EXPECT_FALSE(part.criterion_met);
  EXPECT_EQ(load_checkpoint(ck("split", want - 10).string()).counters.at("criterion_hits"), 1);
  EXPECT_FALSE(fs::exists(dir_ / "split" / "eval.json"));
  TrainOptions again = quiet_train();
  again.resume = part.run_dir;
  const TrainResult resumed = train(tiny("split", {crit}), again);
  EXPECT_TRUE(resumed.finished);
  EXPECT_TRUE(resumed.criterion_met);
  EXPECT_EQ(resumed.criterion_step, want);
  EXPECT_EQ(resumed.step, want);
  expect_same_parameters(ck("full", want).string(), ck("split", want).string());
  EXPECT_EQ(rows_without_timing(full.run_dir), rows_without_timing(resumed.run_dir));
  const Convergence a = read_convergence(full.run_dir), b = read_convergence(resumed.run_dir);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.steps_run, b.steps_run);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.criterion, b.criterion);
  EXPECT_EQ(slurp(dir_ / "full" / "eval.csv"), slurp(dir_ / "split" / "eval.csv"));

  // Resuming a run that met its criterion trains no further, even with a higher cap.
  TrainOptions more = quiet_train();
  more.resume = full.run_dir;
  const TrainResult done = train(tiny("full", {crit, "train.steps=80"}), more);
  EXPECT_TRUE(done.finished);
  EXPECT_TRUE(done.criterion_met);
  EXPECT_EQ(done.step, want);
  EXPECT_FALSE(fs::exists(ck("full", want + 5)));
  EXPECT_EQ(rows_without_timing(full.run_dir), rows_without_timing(resumed.run_dir));
}

TEST_F(StopWhenTest, RecordOnlyCriterionTrainsToTheCapAndRecordsTheStep) {
  // stop: false: the criterion is met at `want`, recorded, and training goes on to train.steps
  // with the trajectory of the run without a criterion; an interrupted run resumes past `want`.
  const TrainResult base = train(tiny("base"), quiet_train());
  const std::vector<EvalPoint> v = validations(base.run_dir, "token_accuracy");
  const int patience = 2;
  const double thr = reachable_threshold(v, true, patience);
  const int64_t want = expected_stop(v, true, thr, patience);
  ASSERT_GT(want, 10);
  ASSERT_LT(want, 55);
  std::string crit = criterion("token_accuracy", "at_least", thr, patience);
  crit.insert(crit.size() - 1, ", stop: false");

  const Config cfg = tiny("rec", {crit});
  EXPECT_FALSE(cfg.train.stop_when.stop);
  EXPECT_NE(cfg.train.stop_when.describe().find("(then training continues to train.steps)"),
            std::string::npos);
  const TrainResult r = train(cfg, quiet_train());
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.criterion_met);
  EXPECT_EQ(r.criterion_step, want);
  EXPECT_EQ(r.step, 60);
  expect_same_parameters(ck("rec", 60).string(), ck("base", 60).string(), false);
  const Convergence c = read_convergence(r.run_dir);
  EXPECT_TRUE(c.met());
  EXPECT_EQ(c.step, want);
  EXPECT_EQ(c.steps_run, 60);
  // The config round-trips with the sub-key (written only when false).
  const Config back = load_config(r.run_dir + "/config.yaml");
  EXPECT_FALSE(back.train.stop_when.stop);
  EXPECT_NE(config_to_yaml(back).find("stop: false"), std::string::npos);
  // Off by default and then not written, so configs without the sub-key keep their text.
  EXPECT_TRUE(tiny("other", {criterion("token_accuracy", "at_least", thr, patience)})
                  .train.stop_when.stop);
  EXPECT_EQ(config_to_yaml(tiny("other", {criterion("token_accuracy", "at_least", thr, patience)}))
                .find("stop: "),
            std::string::npos);

  // Interrupted after the criterion was met, then resumed: it trains on to the cap, bit for bit.
  TrainOptions cut = quiet_train();
  cut.stop_after = want + 5;
  const TrainResult part = train(tiny("split", {crit}), cut);
  EXPECT_FALSE(part.finished);
  EXPECT_TRUE(part.criterion_met);
  TrainOptions again = quiet_train();
  again.resume = part.run_dir;
  const TrainResult resumed = train(tiny("split", {crit}), again);
  EXPECT_TRUE(resumed.finished);
  EXPECT_EQ(resumed.step, 60);
  EXPECT_EQ(resumed.criterion_step, want);
  expect_same_parameters(ck("rec", 60).string(), ck("split", 60).string());
}

TEST_F(StopWhenTest, CriterionNotMetByTheCapIsRecorded) {
  // exact_match 1.0 on valid for 3 validations: not within 20 steps of this tiny model.
  const TrainResult r = train(
      tiny("cap", {"train.steps=20", criterion("exact_match", "at_least", 1.0, 3)}), quiet_train());
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.criterion_set);
  EXPECT_FALSE(r.criterion_met);
  EXPECT_EQ(r.criterion_step, -1);
  EXPECT_EQ(r.step, 20);
  const Convergence c = read_convergence(r.run_dir);
  EXPECT_TRUE(c.has_criterion());
  EXPECT_FALSE(c.met());
  EXPECT_EQ(c.step, -1);
  EXPECT_EQ(c.steps_run, 20);
  EXPECT_EQ(c.metric, "exact_match");
  EXPECT_EQ(c.value, r.final_eval[0].exact_match);  // the last validation was at the cap
  EXPECT_NE(slurp(dir_ / "cap" / "eval.json").find("\"met\": false, \"step\": null"),
            std::string::npos);
  const MetricRow last = parse_metrics_jsonl(slurp(dir_ / "cap" / "metrics.jsonl"), "m").back();
  EXPECT_EQ(last.get("type")->s, "convergence");
  EXPECT_EQ(last.get("met")->i, 0);
  EXPECT_EQ(last.get("criterion_step")->kind, MetricValue::Kind::Null);
}

TEST_F(StopWhenTest, ConvergenceRecordRoundTripsAndMalformedFilesFail) {
  const fs::path d = dir_ / "run";
  fs::create_directories(d);
  EvalResult valid;
  valid.split = "valid";
  valid.loss = 0.25;
  const std::vector<EvalResult> results = {valid};

  Convergence c;
  c.converged = Converged::yes;
  c.step = 40;
  c.steps_run = 40;
  c.criterion = "exact_match on valid >= 0.99 for 2 consecutive validations";
  c.metric = "exact_match";
  c.value = 0.1 + 0.2;  // not exactly representable in few digits: must come back bit for bit
  write_eval_files(d.string(), results, 40, "checkpoints/step_40.h5", convergence_json(c));
  Convergence b = read_convergence(d.string());
  EXPECT_TRUE(b.has_criterion());
  EXPECT_TRUE(b.met());
  EXPECT_EQ(b.step, 40);
  EXPECT_EQ(b.steps_run, 40);
  EXPECT_EQ(b.criterion, c.criterion);
  EXPECT_EQ(b.metric, c.metric);
  EXPECT_EQ(b.value, c.value);

  // Not met, no value yet (NaN is written as null).
  c.converged = Converged::no;
  c.step = -1;
  c.value = std::numeric_limits<double>::quiet_NaN();
  write_eval_files(d.string(), results, 40, "x", convergence_json(c));
  b = read_convergence(d.string());
  EXPECT_TRUE(b.has_criterion());
  EXPECT_FALSE(b.met());
  EXPECT_EQ(b.step, -1);
  EXPECT_TRUE(std::isnan(b.value));

  // No criterion: "convergence": null, or no key at all (pelab eval --out elsewhere).
  EXPECT_EQ(convergence_json(Convergence{}), "null");
  write_eval_files(d.string(), results, 40, "x", convergence_json(Convergence{}));
  EXPECT_FALSE(read_convergence(d.string()).has_criterion());
  write_eval_files(d.string(), results, 40, "x");
  EXPECT_FALSE(read_convergence(d.string()).has_criterion());

  // Malformed files: a pelab::Error naming eval.json.
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    std::ofstream(d / "eval.json", std::ios::trunc) << text;
    try {
      read_convergence(d.string());
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("eval.json"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  const std::string good = slurp(d / "eval.json");
  expect_error(good.substr(0, good.size() / 2), "malformed");
  expect_error("{\"convergence\": {\"criterion\": \"x\", \"met\": true}}", "is missing");
  expect_error("{\"convergence\": {\"criterion\": \"x\", \"met\": 3, \"step\": null, "
               "\"steps_run\": 1, \"metric\": \"loss\", \"value\": 1.0}}",
               "met");
  expect_error("{\"convergence\": {\"criterion\": \"x\", \"met\": false, \"step\": 4, "
               "\"steps_run\": 5, \"metric\": \"loss\", \"value\": 1.0}}",
               "step");
  expect_error("{\"convergence\": {\"criterion\": 7, \"met\": false, \"step\": null, "
               "\"steps_run\": 5, \"metric\": \"loss\", \"value\": 1.0}}",
               "criterion");
  expect_error("{\"step\": 1} trailing", "malformed");
  fs::remove(d / "eval.json");
  expect_error("", "eval.json");  // written empty
  fs::remove(d / "eval.json");
  EXPECT_THROW(read_convergence(d.string()), Error);  // missing
}

TEST_F(StopWhenTest, ConfigRoundTripAndResumeMustKeepTheCriterion) {
  const Config a = tiny("rt", {criterion("loss", "at_most", 0.125, 2)});
  EXPECT_TRUE(a.train.stop_when.enabled());
  EXPECT_EQ(a.train.stop_when.metric, "loss");
  EXPECT_EQ(a.train.stop_when.at_most, 0.125);
  EXPECT_TRUE(std::isnan(a.train.stop_when.at_least));
  EXPECT_EQ(a.train.stop_when.patience, 2);
  EXPECT_EQ(config_value_text(a, "train.stop_when"),
            "{metric: loss, split: valid, at_most: 0.125, patience: 2}");
  const Config back = load_config_string(config_to_yaml(a, true), "<yaml>");
  EXPECT_EQ(back, a);
  EXPECT_EQ(back.train.stop_when.at_most, 0.125);
  EXPECT_NO_THROW(validate_config(a));
  // Off: {} and an empty value; patience defaults to 1, split to valid.
  EXPECT_FALSE(tiny("off", {"train.stop_when={}"}).train.stop_when.enabled());
  EXPECT_EQ(config_value_text(tiny("off"), "train.stop_when"), "{}");
  const Config p = tiny("p", {"train.stop_when={metric: exact_match, at_least: 0.9}"});
  EXPECT_EQ(p.train.stop_when.patience, 1);
  EXPECT_EQ(p.train.stop_when.split, "valid");
  EXPECT_NE(p, tiny("p"));
  // The reference documents every sub-key in a row of its own, under the key.
  const std::string md = config_reference_markdown();
  const size_t key_row = md.find("| `train.stop_when` | map | `{}` |");
  ASSERT_NE(key_row, std::string::npos);
  for (const char* sub : {"metric", "split", "at_least", "at_most", "min_delta", "patience"}) {
    const size_t row = md.find(std::string("| `train.stop_when.") + sub + "` | ");
    EXPECT_NE(row, std::string::npos) << sub;
    EXPECT_GT(row, key_row) << sub;
  }
  // A run resumed with another criterion: refused (the hit count would mean something else).
  TrainOptions cut = quiet_train();
  cut.stop_after = 5;
  train(tiny("r", {criterion("loss", "at_most", 0.5, 2)}), cut);
  TrainOptions res = quiet_train();
  res.resume = (dir_ / "r").string();
  try {
    train(tiny("r", {criterion("loss", "at_most", 0.25, 2)}), res);
    ADD_FAILURE() << "resume with another criterion accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.stop_when"), std::string::npos) << e.what();
  }
}

TEST_F(StopWhenTest, CompareReusesARunStoppedByItsCriterion) {
  // Loss <= 100 holds at the first validation: each run stops at step 4 of 16.
  std::ofstream(dir_ / "cmp.yaml")
      << "task: {name: reverse, num_symbols: 4, train_max_len: 4, test_lengths: [2, 6],\n"
         "       num_eval_examples: 4}\n"
         "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1}\n"
         "train: {steps: 16, batch_size: 8, warmup: 2, log_every: 4, eval_every: 4,\n"
         "        checkpoint_every: 8, threads: 1,\n"
         "        stop_when: {metric: loss, at_most: 100}}\n"
         "eval: {batch_size: 4}\n"
         "compare: {seeds: [1], schemes: [rope]}\n";
  const CompareSpec spec = load_compare((dir_ / "cmp.yaml").string());
  std::ostringstream log;
  CompareOptions o;
  o.out = (dir_ / "report").string();
  o.progress = 2;
  o.log = &log;
  const CompareResult first = run_compare(spec, o);
  EXPECT_EQ(first.trained, 1);
  const Convergence c = read_convergence((dir_ / "report" / "runs" / "rope_seed1").string());
  EXPECT_TRUE(c.met());
  EXPECT_EQ(c.step, 4);
  const CompareResult again = run_compare(spec, o);
  EXPECT_EQ(again.trained, 0);
  EXPECT_EQ(again.resumed, 0) << log.str();
  EXPECT_EQ(again.reused, 1) << log.str();
}

// ---------------- the plateau form (min_delta) ----------------

namespace {
uint64_t bits(double x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
const std::vector<double> kDeltas = {0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005, 0.002, 0.001};
}  // namespace

TEST_F(StopWhenTest, PlateauStopsAtTheFirstValidationWithoutEnoughImprovement) {
  const TrainResult base = train(tiny("base"), quiet_train());
  ASSERT_TRUE(base.finished);
  for (const std::string metric : {"loss", "token_accuracy"}) {
    SCOPED_TRACE(metric);
    const bool higher = metric == "token_accuracy";
    const std::vector<EvalPoint> v = validations(base.run_dir, metric);
    ASSERT_EQ(v.size(), 12u);
    const int patience = 2;
    const double delta = plateau_delta(v, higher, patience, kDeltas);
    ASSERT_TRUE(std::isfinite(delta)) << "no min_delta gives a plateau before the cap";
    const int64_t want = expected_plateau_stop(v, higher, delta, patience);
    // The best so far at the stop step, and the value there.
    double best = v[0].value, at_want = 0;
    for (const auto& p : v) {
      if (p.step > want) break;
      best = higher ? std::max(best, p.value) : std::min(best, p.value);
      at_want = p.value;
    }
    std::ostringstream crit;
    crit.precision(17);
    crit << "train.stop_when={metric: " << metric << ", min_delta: " << delta
         << ", patience: " << patience << "}";
    const std::string name = "plateau_" + metric;
    const TrainResult r = train(tiny(name, {crit.str()}), quiet_train());
    EXPECT_TRUE(r.finished);
    EXPECT_TRUE(r.criterion_met);
    EXPECT_EQ(r.criterion_step, want);
    EXPECT_EQ(r.step, want);
    EXPECT_EQ(latest_checkpoint(r.run_dir), ck(name, want).string());
    EXPECT_FALSE(fs::exists(ck(name, want + 5)));
    expect_same_parameters(ck(name, want).string(), ck("base", want).string(), false);
    const CheckpointData c = load_checkpoint(ck(name, want).string());
    EXPECT_EQ(c.counters.at("criterion_hits"), patience);
    EXPECT_EQ(c.counters.at("criterion_met_step"), want);
    EXPECT_EQ(bits(c.values.at("criterion_best")), bits(best));
    EXPECT_EQ(c.values.at("criterion_value"), at_want);

    const Convergence conv = read_convergence(r.run_dir);
    EXPECT_TRUE(conv.met());
    EXPECT_EQ(conv.step, want);
    EXPECT_EQ(conv.metric, metric);
    EXPECT_EQ(conv.value, at_want);
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.10g", delta * 100);
    EXPECT_EQ(conv.criterion, metric + " on valid improved by <= " + pct +
                                  " % for 2 consecutive validations");
    const MetricRow last = parse_metrics_jsonl(slurp(dir_ / name / "metrics.jsonl"), "m").back();
    EXPECT_EQ(last.get("type")->s, "convergence");
    EXPECT_EQ(last.get("criterion_step")->i, want);
  }
}

TEST_F(StopWhenTest, PlateauResumedMidwayStopsAtTheSameStepBitForBit) {
  const TrainResult base = train(tiny("base"), quiet_train());
  const std::vector<EvalPoint> v = validations(base.run_dir, "perplexity");
  const int patience = 3;
  const double delta = plateau_delta(v, false, patience, kDeltas);
  ASSERT_TRUE(std::isfinite(delta)) << "no min_delta gives a plateau before the cap";
  const int64_t want = expected_plateau_stop(v, false, delta, patience);
  std::ostringstream crit;
  crit.precision(17);
  crit << "train.stop_when={metric: perplexity, min_delta: " << delta << ", patience: 3}";

  const TrainResult full = train(tiny("full", {crit.str()}), quiet_train());
  ASSERT_TRUE(full.criterion_met);
  EXPECT_EQ(full.step, want);
  // Interrupted two validations before the stop: one validation without improvement counted, the
  // best so far in the checkpoint; then resumed.
  TrainOptions cut = quiet_train();
  cut.stop_after = want - 10;
  const TrainResult part = train(tiny("split", {crit.str()}), cut);
  EXPECT_FALSE(part.finished);
  const CheckpointData mid = load_checkpoint(ck("split", want - 10).string());
  EXPECT_EQ(mid.counters.at("criterion_hits"), 1);
  double best = v[0].value;
  for (const auto& p : v)
    if (p.step <= want - 10) best = std::min(best, p.value);
  EXPECT_EQ(bits(mid.values.at("criterion_best")), bits(best));
  TrainOptions again = quiet_train();
  again.resume = part.run_dir;
  const TrainResult resumed = train(tiny("split", {crit.str()}), again);
  EXPECT_TRUE(resumed.finished);
  EXPECT_TRUE(resumed.criterion_met);
  EXPECT_EQ(resumed.criterion_step, want);
  expect_same_parameters(ck("full", want).string(), ck("split", want).string());
  EXPECT_EQ(rows_without_timing(full.run_dir), rows_without_timing(resumed.run_dir));
  EXPECT_EQ(slurp(dir_ / "full" / "eval.csv"), slurp(dir_ / "split" / "eval.csv"));
  const Convergence a = read_convergence(full.run_dir), b = read_convergence(resumed.run_dir);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.criterion, b.criterion);
}

TEST_F(StopWhenTest, PlateauConfigRoundTripsAndDescribesItself) {
  const Config a = tiny("rt", {"train.stop_when={metric: loss, min_delta: 0.01, patience: 3}"});
  const StopWhen& w = a.train.stop_when;
  EXPECT_TRUE(w.plateau());
  EXPECT_EQ(w.min_delta, 0.01);
  EXPECT_TRUE(std::isnan(w.at_least));
  EXPECT_TRUE(std::isnan(w.at_most));
  EXPECT_EQ(w.describe(), "loss on valid improved by <= 1 % for 3 consecutive validations");
  EXPECT_EQ(config_value_text(a, "train.stop_when"),
            "{metric: loss, split: valid, min_delta: 0.01, patience: 3}");
  const Config back = load_config_string(config_to_yaml(a, true), "<yaml>");
  EXPECT_EQ(back, a);
  EXPECT_EQ(back.train.stop_when.min_delta, 0.01);
  EXPECT_NE(a, tiny("rt", {"train.stop_when={metric: loss, at_most: 0.01, patience: 3}"}));
  EXPECT_EQ(tiny("p", {"train.stop_when={metric: exact_match, min_delta: 0.07}"})
                .train.stop_when.describe(),
            "exact_match on valid improved by <= 7 % for 1 consecutive validation");
  // The improvement rule, relative to the best so far, in each direction; the first finite
  // value always improves, NaN never does.
  EXPECT_TRUE(w.improves(2.0, std::nan("")));
  EXPECT_FALSE(w.improves(std::nan(""), 2.0));
  EXPECT_TRUE(w.improves(1.97, 2.0));    // 1.5 % lower
  EXPECT_FALSE(w.improves(1.995, 2.0));  // 0.25 % lower
  EXPECT_FALSE(w.improves(2.5, 2.0));    // worse
  StopWhen acc = w;
  acc.metric = "token_accuracy";
  EXPECT_TRUE(acc.improves(0.52, 0.5));
  EXPECT_FALSE(acc.improves(0.504, 0.5));
  EXPECT_TRUE(acc.improves(1e-13, 0.0));   // from 0: relative to 1e-12, any visible gain
  EXPECT_FALSE(acc.improves(0.0, 0.0));

  // pelab info shows the criterion in words.
  const fs::path cfg = dir_ / "info.yaml";
  std::ofstream(cfg) << "task: {name: reverse}\n"
                        "model: {d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, "
                        "decoder_layers: 1}\n"
                        "train: {eval_every: 50, stop_when: {metric: loss, min_delta: 0.01, "
                        "patience: 3}}\n";
  const fs::path out = dir_ / "info.txt";
  const std::string cmd = quote(pelab::testing::pelab_binary()) + " info " + quote(cfg.string()) + " >" +
                          quote(out.string()) + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
  EXPECT_NE(slurp(out).find("stop when: loss on valid improved by <= 1 % for 3 consecutive "
                            "validations (validation every 50 steps"),
            std::string::npos)
      << slurp(out);
}

// ---------------- bad criteria through the CLI: one line, FILE:LINE, nothing trained ----------

TEST_F(StopWhenTest, BadCriteriaAreOneLineErrorsWithFileAndLineAndTrainNothing) {
  const std::string bin = pelab::testing::pelab_binary();
  ASSERT_TRUE(fs::exists(bin)) << bin;
  const fs::path runs = dir_ / "runs";
  // Config lines: 1 task:, 2 name (lm: 2-3, and model.arch decoder at line 9), 3 model: and 5 keys,
  // 9 train:, steps, warmup, eval_every, threads, run_dir, and the case's lines from line 15
  // (lm: 17).
  auto run = [&](const std::string& name, const std::string& train_extra, bool lm,
                 int eval_every) {
    const fs::path cfg = dir_ / (name + ".yaml");
    std::ofstream(cfg) << "task:\n"
                       << (lm ? "  name: lm\n  formulation: decoder\n" : "  name: reverse\n")
                       << "model:\n  d_model: 16\n  heads: 2\n  d_ff: 32\n  encoder_layers: 1\n"
                          "  decoder_layers: 1\n"
                       << (lm ? "  arch: decoder\n" : "")
                       << "train:\n  steps: 10\n  warmup: 1\n  eval_every: " << eval_every
                       << "\n  threads: 1\n  run_dir: " << runs.string() << "\n"
                       << train_extra;
    const pelab::testing::CommandResult r = pelab::testing::run_captured(
        quote(bin) + " train " + quote(cfg.string()) + " --progress none", "/dev/null",
        dir_ / "err.txt", "");
    return std::make_pair(r.rc, r.err);
  };
  struct Case {
    std::string name, train_extra;
    int line;
    std::string needle;
    bool lm = false;
    int eval_every = 5;
  };
  const std::vector<Case> cases = {
      {"metric", "  stop_when:\n    metric: accuracy\n    at_least: 0.9\n", 16,
       "train.stop_when.metric: 'accuracy' is not one of"},
      {"split", "  stop_when: {metric: loss, split: train, at_most: 1}\n", 15,
       "unknown split 'train'"},
      {"test", "  stop_when:\n    metric: exact_match\n    split: test\n    at_least: 0.9\n", 17,
       "selecting on test data is forbidden"},
      {"test_len", "  stop_when: {metric: loss, split: test_8, at_most: 1}\n", 15,
       "selecting on test data is forbidden"},
      {"len_split", "  stop_when: {metric: loss, split: len_8, at_most: 1}\n", 15,
       "unknown split 'len_8'"},
      {"direction", "  stop_when:\n    metric: loss\n    at_least: 0.5\n", 17,
       "loss is lower-is-better; write at_most"},
      {"direction2", "  stop_when: {metric: exact_match, at_most: 0.5}\n", 15,
       "exact_match is higher-is-better; write at_least"},
      {"both", "  stop_when: {metric: loss, at_least: 0.5, at_most: 0.5}\n", 15,
       "give one of at_least / at_most / min_delta, not at_least and at_most"},
      {"none", "  stop_when: {metric: loss}\n", 15, "a criterion is missing"},
      {"delta_and_thr", "  stop_when:\n    metric: loss\n    at_most: 0.5\n    min_delta: 0.01\n",
       18, "not at_most and min_delta"},
      {"delta_zero", "  stop_when:\n    metric: perplexity\n    min_delta: 0\n", 17,
       "train.stop_when.min_delta: 0 is out of range (0, 1)"},
      {"delta_one", "  stop_when: {metric: token_accuracy, min_delta: 1}\n", 15,
       "train.stop_when.min_delta: 1 is out of range (0, 1)"},
      {"delta_neg", "  stop_when: {metric: loss, min_delta: -0.01}\n", 15,
       "train.stop_when.min_delta: -0.01 is out of range (0, 1)"},
      {"delta_text", "  stop_when: {metric: loss, min_delta: 1%}\n", 15,
       "train.stop_when.min_delta: expected a finite number"},
      {"delta_typo", "  stop_when: {metric: loss, min_detla: 0.01}\n", 15,
       "did you mean 'min_delta'"},
      {"delta_eval_every", "  stop_when: {metric: loss, min_delta: 0.01}\n", 15,
       "train.eval_every must be > 0", false, 0},
      {"range", "  stop_when: {metric: token_accuracy, at_least: 1.5}\n", 15,
       "out of range [0, 1]"},
      {"patience", "  stop_when:\n    metric: loss\n    at_most: 0.5\n    patience: 0\n", 18,
       "train.stop_when.patience: 0 is out of range [1, inf)"},
      {"subkey", "  stop_when: {metric: loss, at_most: 0.5, patiense: 2}\n", 15,
       "did you mean 'patience'"},
      {"eval_every", "  stop_when: {metric: loss, at_most: 0.5}\n", 15,
       "train.eval_every must be > 0", false, 0},
      {"lm", "  stop_when: {metric: exact_match, at_least: 0.9}\n", 17,
       "task lm has no exact_match", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto [rc, err] = run(c.name, c.train_extra, c.lm, c.eval_every);
    EXPECT_NE(rc, 0);
    EXPECT_EQ(err.rfind("pelab: error: ", 0), 0u) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << "not one line: " << err;
    const std::string where = (dir_ / (c.name + ".yaml")).string() + ":" + std::to_string(c.line);
    EXPECT_NE(err.find(where + ": "), std::string::npos) << where << " in " << err;
    EXPECT_NE(err.find(c.needle), std::string::npos) << c.needle << " in " << err;
    EXPECT_FALSE(fs::exists(runs)) << "a run directory was created";
  }
}

// The tri-state Converged from the criterion's state to its records and back: eval.json's
// "convergence" (met / missed / none), the convergence row of metrics.jsonl, and the converged
// cell of results.csv; cells written before the tri-state type ("1" / "0" / "-1" as well as
// "true" / "false" / "") still read, and any other cell is one error naming the row.
TEST(ConvergedRecord, TriStateRoundTripsThroughEvalJsonAndResultsCsv) {
  for (const Converged want : {Converged::yes, Converged::no, Converged::no_criterion}) {
    Convergence c;
    c.converged = want;
    c.step = want == Converged::yes ? 6 : -1;
    c.steps_run = 8;
    c.criterion = "exact_match on valid >= 0.5 for 1 consecutive validation";
    c.metric = "exact_match";
    c.value = 0.75;
    const std::string doc = "{\"step\": 8, \"convergence\": " + convergence_json(c) + "}";
    const Convergence back = parse_convergence(doc, "eval.json");
    EXPECT_EQ(back.converged, want);
    EXPECT_EQ(back.met_step(), c.step);

    ResultRow r = pelab::testing::result_row("rope", 1, 8, 1, 0.75);
    r.converged = back.converged;
    r.criterion_step = back.met_step();
    const std::vector<ResultRow> rows = parse_results_csv(results_csv({r}), "results.csv");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].converged, want);
    EXPECT_EQ(rows[0].criterion_step, c.step);
  }
  StopWhen w;
  w.metric = "exact_match";
  w.at_least = 0.5;
  Convergence met;
  met.converged = Converged::yes, met.step = 6, met.value = 0.75;
  const MetricRow row = convergence_row(met, w, 8);
  EXPECT_EQ(row.get("met")->i, 1);
  EXPECT_EQ(row.get("criterion_step")->i, 6);

  // Older cells: the integers 1 / 0 / -1 read as the three states.
  EXPECT_EQ(parse_converged_cell("1", "r"), Converged::yes);
  EXPECT_EQ(parse_converged_cell("0", "r"), Converged::no);
  EXPECT_EQ(parse_converged_cell("-1", "r"), Converged::no_criterion);
  EXPECT_EQ(parse_converged_cell("", "r"), Converged::no_criterion);
  EXPECT_STREQ(converged_cell(Converged::no), "false");
  const std::string header = results_csv({}).substr(0, results_csv({}).find('\n') + 1);
  const std::string old_row = "rope,,1,len_8,8,true,ok,0.26,1.3,0.75,0.75,1,1,-1,\n";
  const std::string ok_row = "rope,,1,len_8,8,true,ok,0.26,1.3,0.75,0.75,1,1,1,6\n";
  EXPECT_EQ(parse_results_csv(header + old_row, "old.csv")[0].converged, Converged::no_criterion);
  EXPECT_EQ(parse_results_csv(header + ok_row, "old.csv")[0].converged, Converged::yes);
  try {
    parse_results_csv(header + "rope,,1,len_8,8,true,ok,0.26,1.3,0.75,0.75,1,1,maybe,\n", "x.csv");
    ADD_FAILURE() << "a converged cell 'maybe' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.csv: row 2: converged must be true, false or empty, "
                                         "got 'maybe'"),
              std::string::npos)
        << e.what();
  }
}
