// pelab — trainer tests (train/trainer.h, train/evaluate.h, train/task_data.h): bit-for-bit
// determinism and exact resume, sane evaluation metrics, randomized positions, cached vs uncached
// decoding in evaluation, learned positions beyond max_positions, the lm and textfile tasks, and
// the example configs (every one loads and builds; every registered scheme has one that trains).
// Every run is tiny (a few steps of a 1+1-layer model; the examples' own 2+2-layer models train 2
// steps of 4 examples) so that the suite stays fast under ASan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/pe/pe.h"
#include "models/pe/rope_math.h"
#include "pelab/pelab.h"
#include "pelab/strings.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/model_from_config.h"
#include "train/task_data.h"
#include "train/trainer.h"
#include "tests/run_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

using pelab::testing::quiet_train;

namespace {

using pelab::testing::slurp;

class TrainerTest : public pelab::testing::TempDirTest {
 protected:
  TrainerTest() : TempDirTest("pelab_trainer") {}

  // A tiny seq2seq reverse run: 1+1 layers, d_model 16, batch 8.
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.name=reverse",        "task.num_symbols=4",      "task.train_min_len=1",
        "task.train_max_len=5",     "task.test_lengths=[3, 7]", "task.num_eval_examples=6",
        "model.d_model=16",         "model.heads=2",           "model.d_ff=32",
        "model.encoder_layers=1",   "model.decoder_layers=1",  "train.steps=6",
        "train.batch_size=8",       "train.warmup=2",          "train.log_every=1",
        "train.eval_every=2",       "train.checkpoint_every=3", "train.threads=1",
        "eval.batch_size=4"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }

  // Trains tiny("old", sets) for 3 of its 6 steps; returns its step-3 checkpoint.
  std::string checkpoint_at_step_3(const std::vector<std::string>& sets) {
    TrainOptions stop = quiet_train();
    stop.stop_after = 3;
    TrainResult part = train(tiny("old", sets), stop);
    EXPECT_FALSE(part.finished);
    return (fs::path(part.run_dir) / "checkpoints" / "step_3.h5").string();
  }

  // Resumes tiny("old", sets) from checkpoint ck, expecting a refusal: returns its message
  // ("" and a test failure if it trained).
  std::string resume_refusal(const std::vector<std::string>& sets, const std::string& ck) {
    TrainOptions resume = quiet_train();
    resume.resume = ck;
    try {
      train(tiny("old", sets), resume);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected --resume from " << ck << " to be refused";
    return "";
  }
};

// metrics.jsonl rows without the timing fields.
std::vector<MetricRow> rows_without_timing(const fs::path& run) {
  std::vector<MetricRow> out;
  for (MetricRow r : parse_metrics_jsonl(slurp(run / "metrics.jsonl"), "metrics")) {
    MetricRow k;
    for (auto& f : r.fields)
      if (f.first != "elapsed_s" && f.first != "tokens_per_s") k.fields.push_back(f);
    out.push_back(k);
  }
  return out;
}

void expect_rows_equal(const std::vector<MetricRow>& a, const std::vector<MetricRow>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].json(), b[i].json()) << "row " << i;
}

// Every parameter and optimizer buffer of two checkpoints is bit-identical.
void expect_same_state(const std::string& pa, const std::string& pb) {
  CheckpointData a = load_checkpoint(pa), b = load_checkpoint(pb);
  EXPECT_EQ(a.step, b.step);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].first, b.params[i].first);
    EXPECT_EQ(a.params[i].second.to_vector(), b.params[i].second.to_vector()) << a.params[i].first;
  }
  EXPECT_EQ(a.optimizer_step, b.optimizer_step);
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (const auto& [name, ts] : a.optimizer_state) {
    const auto& tb = b.optimizer_state.at(name);
    ASSERT_EQ(ts.size(), tb.size());
    for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(ts[i].to_vector(), tb[i].to_vector()) << name;
  }
  for (const char* c : {"data_position", "model_rng_offset", "randpos_rng_offset", "best_step"})
    EXPECT_EQ(a.counters.at(c), b.counters.at(c)) << c;
  EXPECT_EQ(a.values.at("best_metric"), b.values.at("best_metric"));
}

}  // namespace

TEST_F(TrainerTest, SameConfigGivesIdenticalMetricsAndParameters) {
  // Dropout and randomized positions exercise both generators; grad_accum the data position.
  const std::vector<std::string> sets = {"model.dropout=0.1", "pe.randomized_positions=true",
                                         "pe.randomized_max_position=40", "train.grad_accum=2"};
  TrainResult a = train(tiny("a", sets), quiet_train());
  TrainResult b = train(tiny("b", sets), quiet_train());
  ASSERT_TRUE(a.finished && b.finished);
  const auto ra = rows_without_timing(a.run_dir), rb = rows_without_timing(b.run_dir);
  EXPECT_EQ(ra.size(), 6u + 3u);  // a train row every step, an eval row every 2 steps
  expect_rows_equal(ra, rb);
  expect_same_state(a.last_checkpoint, b.last_checkpoint);
  EXPECT_EQ(slurp(fs::path(a.run_dir) / "eval.json"), slurp(fs::path(b.run_dir) / "eval.json"));
  // A different seed changes the run.
  TrainResult c = train(tiny("c", {"model.dropout=0.1", "train.seed=2"}), quiet_train());
  EXPECT_NE(rows_without_timing(c.run_dir)[0].json(), ra[0].json());
}

TEST_F(TrainerTest, ResumedRunEqualsUninterruptedRunBitForBit) {
  const std::vector<std::string> sets = {
      "model.dropout=0.1", "pe.randomized_positions=true", "pe.randomized_max_position=40",
      "train.grad_accum=2", "train.log_every=2", "train.checkpoint_every=4", "train.steps=6"};
  TrainResult full = train(tiny("full", sets), quiet_train());
  ASSERT_TRUE(full.finished);

  TrainOptions stop = quiet_train();
  stop.stop_after = 3;  // not a multiple of log_every: the partial loss window is checkpointed
  TrainResult part = train(tiny("part", sets), stop);
  EXPECT_FALSE(part.finished);
  EXPECT_EQ(part.step, 3);
  EXPECT_TRUE(fs::exists(fs::path(part.run_dir) / "checkpoints" / "step_3.h5"));

  TrainOptions resume = quiet_train();
  resume.resume = part.run_dir;
  TrainResult done = train(tiny("part", sets), resume);
  ASSERT_TRUE(done.finished);
  EXPECT_EQ(done.step, 6);
  expect_rows_equal(rows_without_timing(full.run_dir), rows_without_timing(done.run_dir));
  expect_same_state((fs::path(full.run_dir) / "checkpoints" / "step_6.h5").string(),
                    (fs::path(done.run_dir) / "checkpoints" / "step_6.h5").string());
  EXPECT_EQ(slurp(fs::path(full.run_dir) / "eval.json"), slurp(fs::path(done.run_dir) / "eval.json"));
  // metrics.csv is rebuilt from the checkpoint's rows on resume: same non-timing columns.
  auto strip = [](const std::string& csv) {
    std::string out, line;
    std::istringstream in(csv);
    while (std::getline(in, line)) {
      std::stringstream ls(line);
      std::string cell;
      for (int c = 0; std::getline(ls, cell, ','); ++c)
        if (c != 6 && c != 7) out += cell + ",";
      out += "\n";
    }
    return out;
  };
  EXPECT_EQ(strip(slurp(fs::path(full.run_dir) / "metrics.csv")),
            strip(slurp(fs::path(done.run_dir) / "metrics.csv")));
}

// Task position IDs with training offsets (task.max_position_id): the offsets are a pure function
// of the seeds, the batch index and the row, so a resumed run equals the uninterrupted one.
TEST_F(TrainerTest, ResumedRunWithTaskIdOffsetsEqualsUninterruptedRun) {
  const std::vector<std::string> sets = {
      "task.name=addition_reversed", "task.formulation=decoder", "task.position_ids=coupled",
      "task.max_position_id=12", "task.train_max_len=3", "task.test_lengths=[3, 5]",
      "model.arch=decoder", "pe.scheme=learned", "pe.max_positions=16", "train.steps=6",
      "train.checkpoint_every=4"};
  TrainResult full = train(tiny("full", sets), quiet_train());
  ASSERT_TRUE(full.finished);
  TrainOptions stop = quiet_train();
  stop.stop_after = 3;
  TrainResult part = train(tiny("part", sets), stop);
  ASSERT_FALSE(part.finished);
  TrainOptions resume = quiet_train();
  resume.resume = part.run_dir;
  TrainResult done = train(tiny("part", sets), resume);
  ASSERT_TRUE(done.finished);
  expect_rows_equal(rows_without_timing(full.run_dir), rows_without_timing(done.run_dir));
  expect_same_state((fs::path(full.run_dir) / "checkpoints" / "step_6.h5").string(),
                    (fs::path(done.run_dir) / "checkpoints" / "step_6.h5").string());
  EXPECT_EQ(slurp(fs::path(full.run_dir) / "eval.json"), slurp(fs::path(done.run_dir) / "eval.json"));
}

// A randomized-positions run checkpointed by a pelab from before train.batch_lengths trained on
// mixed-length batches; continuing it on one-length batches would give a run trained half one
// way and half the other, so --resume refuses it (injected: the checkpoint's config without the
// key, as such a pelab wrote it).
TEST_F(TrainerTest, ResumeRefusesARandomizedRunFromMixedBatches) {
  const std::vector<std::string> sets = {"pe.scheme=rope", "pe.randomized_positions=true",
                                         "pe.randomized_max_position=16"};
  const std::string ck = checkpoint_at_step_3(sets);
  CheckpointData data = load_checkpoint(ck);
  std::string& y = data.config_yaml;
  EXPECT_EQ(mixed_randomized_batches(y), "");  // as the run itself wrote it, it resumes
  const size_t at = y.find("  batch_lengths: auto\n");
  ASSERT_NE(at, std::string::npos) << y;
  y.erase(at, std::string("  batch_lengths: auto\n").size());
  save_checkpoint(ck, data);
  EXPECT_NE(mixed_randomized_batches(y), "");
  const std::string err = resume_refusal(sets, ck);
  EXPECT_NE(err.find("mixed-length batches"), std::string::npos) << err;
  EXPECT_NE(err.find("train it afresh"), std::string::npos) << err;
  EXPECT_EQ(checkpoint_step(ck), 3);  // nothing written
}

// A randomized-positions addition run (one-length batches over operand lengths 1-3) checkpointed
// by a pelab from before its data changed (2026-11-26, f995bd6: data revision 2) trained on other
// examples than this pelab draws; --resume refuses it (injected: the checkpoint's config without
// task.data_revision, as that pelab wrote it). The same run as this pelab checkpoints it resumes.
TEST_F(TrainerTest, ResumeRefusesARunFromBeforeItsDataChanged) {
  const std::vector<std::string> sets = {
      "task.name=addition_reversed", "task.formulation=decoder", "task.train_max_len=3",
      "task.test_lengths=[3, 5]",    "task.num_symbols=10",      "model.arch=decoder",
      "pe.scheme=rope",              "pe.randomized_positions=true",
      "pe.randomized_max_position=16"};
  const std::string ck = checkpoint_at_step_3(sets);
  CheckpointData data = load_checkpoint(ck);
  const std::string line = "  data_revision: 2\n";
  EXPECT_NE(data.config_yaml.find(line), std::string::npos) << data.config_yaml;
  EXPECT_NE(slurp(fs::path(ck).parent_path().parent_path() / "config.yaml").find("  data_revision: 2  #"),
            std::string::npos);
  const CheckpointData as_trained = data;
  if (const size_t at = data.config_yaml.find(line); at != std::string::npos)
    data.config_yaml.erase(at, line.size());
  save_checkpoint(ck, data);
  const std::string err = resume_refusal(sets, ck);
  EXPECT_NE(err.find(": the run was trained on data revision 1 of task addition_reversed (one-length "
                     "batches), from before 2026-11-26 (f995bd6): one-length batches draw both "
                     "operands' lengths"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("train it afresh"), std::string::npos) << err;
  EXPECT_EQ(checkpoint_step(ck), 3);  // nothing written
  save_checkpoint(ck, as_trained);
  TrainOptions resume = quiet_train();
  resume.resume = ck;
  TrainResult done = train(tiny("old", sets), resume);
  EXPECT_TRUE(done.finished);
}

TEST_F(TrainerTest, ResumeRejectsAChangedModelAndMissingRuns) {
  TrainOptions stop = quiet_train();
  stop.stop_after = 2;
  TrainResult part = train(tiny("r"), stop);
  TrainOptions resume = quiet_train();
  resume.resume = part.run_dir;
  try {
    train(tiny("r", {"model.d_model=32"}), resume);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.d_model is 32 but the run was trained with 16"),
              std::string::npos)
        << e.what();
  }
  resume.resume = (dir_ / "missing").string();
  try {
    train(tiny("r"), resume);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such run directory"), std::string::npos) << e.what();
  }
  // A fresh run into an existing run directory needs --overwrite.
  try {
    train(tiny("r"), quiet_train());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already holds a run"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, EvalMetricsAreSaneAndExactMatchAgreesWithPredictions) {
  // copy over 2 symbols, lengths 1..3: learnable in a few dozen steps.
  Config cfg = tiny("copy", {"task.name=copy", "task.num_symbols=2", "task.train_max_len=3",
                             "task.test_lengths=[2, 3, 6]", "task.num_eval_examples=16",
                             "train.steps=120", "train.warmup=10", "train.lr=0.01",
                             "train.batch_size=16", "train.log_every=40", "train.eval_every=60",
                             "train.checkpoint_every=0", "eval.save_predictions=true"});
  TrainResult r = train(cfg, quiet_train());
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.final_eval.size(), 4u);  // valid + 3 test lengths
  EXPECT_EQ(r.final_eval[0].split, "valid");
  EXPECT_EQ(r.final_eval[3].split, "len_6");
  for (const auto& e : r.final_eval) {
    ASSERT_TRUE(e.available()) << e.split;
    EXPECT_EQ(e.examples, 16);
    EXPECT_GT(e.loss, 0.0);
    EXPECT_NEAR(e.perplexity, std::exp(e.loss), 1e-12 * e.perplexity);
    EXPECT_GE(e.token_accuracy, 0.0);
    EXPECT_LE(e.token_accuracy, 1.0);
    EXPECT_GE(e.exact_match, 0.0);
    EXPECT_LE(e.exact_match, 1.0);
  }
  // In distribution the tiny model has learned to copy.
  EXPECT_GE(r.final_eval[1].exact_match, 0.9);
  EXPECT_GE(r.final_eval[1].token_accuracy, 0.9);
  // exact_match is the fraction of predictions equal to their target.
  Config cfg2 = load_config((fs::path(r.run_dir) / "config.yaml").string());
  LoadedModel lm = load_model(cfg2, r.last_checkpoint);
  EvalOptions eo;
  eo.keep_predictions = true;
  for (size_t s = 0; s < lm.data->tests().size(); ++s) {
    EvalResult e = evaluate_set(*lm.model, *lm.data, lm.data->tests()[s], cfg2, eo);
    ASSERT_EQ(e.predictions.size(), 16u);
    int correct = 0;
    for (const auto& p : e.predictions) {
      EXPECT_EQ(p.correct, p.output == p.target);
      correct += p.correct;
    }
    EXPECT_DOUBLE_EQ(e.exact_match, correct / 16.0);
    // The reloaded checkpoint reproduces the run's own final evaluation exactly.
    EXPECT_EQ(e.row().json(), r.final_eval[s + 1].row().json());
  }
  EXPECT_TRUE(fs::exists(fs::path(r.run_dir) / "predictions_len_6.tsv"));
  // Files of the run directory.
  for (const char* f : {"config.yaml", "metrics.jsonl", "metrics.csv", "eval.json", "eval.csv",
                        "train.log", "checkpoints/best.h5", "checkpoints/last.h5"})
    EXPECT_TRUE(fs::exists(fs::path(r.run_dir) / f)) << f;
  EXPECT_EQ(slurp(fs::path(r.run_dir) / "metrics.csv").substr(0, 60),
            metrics_csv_header().substr(0, 60));
}

TEST_F(TrainerTest, RandomizedPositionsAreSortedUniqueInRangeAndTrainingWorks) {
  Generator gen(7);
  std::set<int64_t> seen_first;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t L = 1 + trial % 20, M = 20 + trial % 50;
    std::vector<int64_t> p = random_positions(gen, L, M);
    ASSERT_EQ(static_cast<int64_t>(p.size()), L);
    for (size_t i = 0; i < p.size(); ++i) {
      ASSERT_GE(p[i], 0);
      ASSERT_LT(p[i], M);
      if (i) {
        ASSERT_LT(p[i - 1], p[i]);
      }
    }
    seen_first.insert(p[0]);
  }
  EXPECT_GT(seen_first.size(), 10u);  // not always the same subset
  EXPECT_EQ(random_positions(gen, 5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(random_positions(gen, 6, 5), Error);

  // The trainer passes such positions to the model (one vector per stack) for every batch.
  for (const char* scheme : {"sinusoidal", "rope", "t5"}) {
    TrainOptions o = quiet_train();
    int batches = 0;
    bool any_shifted = false;
    o.position_hook = [&](int64_t, const std::vector<std::vector<int64_t>>& pos) {
      ++batches;
      ASSERT_EQ(pos.size(), 2u);  // encoder, decoder (grad_accum 1)
      for (const auto& p : pos) {
        for (size_t i = 0; i < p.size(); ++i) {
          ASSERT_LT(p[i], 64);
          if (i) {
            ASSERT_LT(p[i - 1], p[i]);
          }
          any_shifted |= p[i] != static_cast<int64_t>(i);
        }
      }
    };
    TrainResult r = train(tiny(std::string("rp_") + scheme,
                               {std::string("pe.scheme=") + scheme, "pe.randomized_positions=true",
                                "pe.randomized_max_position=64", "train.steps=10", "train.lr=0.01"}),
                          o);
    ASSERT_TRUE(r.finished);
    EXPECT_EQ(batches, 10);
    EXPECT_TRUE(any_shifted);
    for (const auto& e : r.final_eval) EXPECT_TRUE(std::isfinite(e.loss)) << scheme;
    // Training makes progress with randomized positions.
    std::vector<double> losses;
    for (const auto& row : rows_without_timing(r.run_dir))
      if (row.get("type")->s == "train") losses.push_back(row.get("loss")->d);
    ASSERT_EQ(losses.size(), 10u);
    EXPECT_LT(losses.back(), losses.front()) << scheme;
  }
}

// Randomized positions train on one-length batches (train.batch_lengths auto), as Ruoss et al.
// 2023 do: a batch shares one sorted position subset, drawn for exactly its sequences' length. In
// a batch of mixed lengths the subset would be sized to the longest sequence and the shorter ones
// would only ever get its first (small) positions.
TEST_F(TrainerTest, RandomizedPositionsTrainOnOneLengthBatches) {
  for (const char* arch : {"seq2seq", "decoder"}) {
    std::map<size_t, int> steps_of_size;  // first stack's position count -> steps
    TrainOptions o = quiet_train();
    o.position_hook = [&](int64_t, const std::vector<std::vector<int64_t>>& pos) {
      ASSERT_FALSE(pos.empty());
      ++steps_of_size[pos[0].size()];
      // Drawn from the whole range whatever the length: not only the first positions.
      for (size_t i = 1; i < pos[0].size(); ++i) ASSERT_LT(pos[0][i - 1], pos[0][i]);
    };
    std::vector<std::string> sets = {"pe.scheme=rope", "pe.randomized_positions=true",
                                     "pe.randomized_max_position=64", "train.steps=60",
                                     "train.eval_every=0", "train.checkpoint_every=0",
                                     std::string("model.arch=") + arch,
                                     std::string("task.formulation=") + arch};
    TrainResult r = train(tiny(std::string("one_length_") + arch, sets), o);
    ASSERT_TRUE(r.finished);
    // Lengths 1..5 each get about 12 of the 60 steps; with batches of 8 mixed lengths the
    // subset would be sized to the longest of 8 (length 1 in one batch of 390625).
    EXPECT_EQ(steps_of_size.size(), 5u) << arch;
    EXPECT_GE(steps_of_size.begin()->second, 4) << arch;
  }
}

TEST_F(TrainerTest, CachedDecodingInEvalEqualsUncached) {
  EvalOptions cached, uncached;
  cached.keep_predictions = uncached.keep_predictions = true;
  uncached.use_cache = false;
  for (const std::string& scheme : models::pe_names()) {  // every registered scheme
    for (const char* arch : {"seq2seq", "decoder"}) {
      Config cfg = tiny("c", {std::string("pe.scheme=") + scheme, std::string("model.arch=") + arch,
                              std::string("task.formulation=") + arch, "task.test_lengths=[4]",
                              "pe.max_positions=64"});
      LoadedModel lm = load_model(cfg);  // random init: long, varied outputs
      const EvalSet& set = lm.data->tests()[0];
      EvalResult a = evaluate_set(*lm.model, *lm.data, set, cfg, cached);
      EvalResult b = evaluate_set(*lm.model, *lm.data, set, cfg, uncached);
      ASSERT_EQ(a.predictions.size(), b.predictions.size());
      for (size_t i = 0; i < a.predictions.size(); ++i)
        EXPECT_EQ(a.predictions[i].output, b.predictions[i].output) << scheme << " " << arch;
      EXPECT_EQ(a.row().json(), b.row().json()) << scheme << " " << arch;
    }
  }
  // And after a little training (outputs that stop at eos).
  TrainResult r = train(tiny("trained", {"pe.scheme=rope"}), quiet_train());
  Config cfg = load_config((fs::path(r.run_dir) / "config.yaml").string());
  LoadedModel lm = load_model(cfg, r.last_checkpoint);
  for (const auto& set : lm.data->tests()) {
    EvalResult a = evaluate_set(*lm.model, *lm.data, set, cfg, cached);
    EvalResult b = evaluate_set(*lm.model, *lm.data, set, cfg, uncached);
    EXPECT_EQ(a.row().json(), b.row().json());
    for (size_t i = 0; i < a.predictions.size(); ++i)
      EXPECT_EQ(a.predictions[i].output, b.predictions[i].output);
  }
}

TEST_F(TrainerTest, LearnedPositionsBeyondMaxPositionsAreNotApplicable) {
  for (const char* arch : {"seq2seq", "decoder"}) {
    // seq2seq needs 6 positions for length 5, decoder 12; length 9 needs 10 / 20.
    const std::string maxp = std::string(arch) == "seq2seq" ? "8" : "14";
    Config cfg = tiny(std::string("learned_") + arch,
                      {"pe.scheme=learned", "pe.max_positions=" + maxp,
                       std::string("model.arch=") + arch, std::string("task.formulation=") + arch,
                       "task.test_lengths=[5, 9]"});
    TrainResult r = train(cfg, quiet_train());
    ASSERT_TRUE(r.finished);
    ASSERT_EQ(r.final_eval.size(), 3u);
    EXPECT_TRUE(r.final_eval[1].available()) << arch;
    EXPECT_TRUE(std::isfinite(r.final_eval[1].exact_match));
    EXPECT_EQ(r.final_eval[2].split, "len_9");
    EXPECT_EQ(r.final_eval[2].status, "n/a (> max_positions)") << arch;
    EXPECT_FALSE(std::isfinite(r.final_eval[2].loss));
    const std::string js = slurp(fs::path(r.run_dir) / "eval.json");
    EXPECT_NE(js.find("\"status\": \"n/a (> max_positions)\""), std::string::npos);
  }
  // A training sequence longer than the table is refused up front, by the config rule (seq2seq
  // reverse at length 5: 6 positions).
  try {
    train(tiny("bad", {"pe.scheme=learned", "pe.max_positions=5"}), quiet_train());
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pe.max_positions (5) must be >= 6"), std::string::npos)
        << e.what();
  }
}

TEST_F(TrainerTest, LmTaskReportsPerplexityPerLength) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat on the mat. ";
  const std::string corpus = write("corpus.txt", text);
  Config cfg = tiny("lm", {"task.name=lm", "task.formulation=decoder", "model.arch=decoder",
                           "task.corpus=" + corpus, "task.lm_train_len=8",
                           "task.lm_eval_lengths=[8, 16]", "task.num_eval_examples=5",
                           "task.valid_fraction=0.1", "pe.scheme=alibi", "train.steps=20",
                           "train.lr=0.01", "train.eval_every=10"});
  TrainResult r = train(cfg, quiet_train());
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.final_eval.size(), 3u);
  EXPECT_EQ(r.final_eval[1].split, "ctx_8");
  EXPECT_EQ(r.final_eval[2].split, "ctx_16");
  // Both lengths cover the same first 5 * 16 + 1 test tokens with non-overlapping windows.
  EXPECT_EQ(r.final_eval[1].examples, 10);
  EXPECT_EQ(r.final_eval[2].examples, 5);
  EXPECT_EQ(r.final_eval[1].tokens, 80);
  EXPECT_EQ(r.final_eval[2].tokens, 80);
  for (const auto& e : r.final_eval) {
    EXPECT_NEAR(e.perplexity, std::exp(e.loss), 1e-9 * e.perplexity);
    EXPECT_FALSE(std::isfinite(e.exact_match));  // not defined for lm
  }
  // A repetitive text is learned quickly: far below the uniform perplexity.
  TaskData data(cfg);
  EXPECT_LT(r.final_eval[1].perplexity, 0.5 * static_cast<double>(data.vocab().size()));
}

TEST_F(TrainerTest, TextfileTaskTrainsAndEvaluatesEveryTestFile) {
  std::string train_tsv, test_tsv;
  for (int i = 0; i < 40; ++i) {
    std::string s = std::to_string(i * 7 % 100);
    train_tsv += s + "\t" + std::string(s.rbegin(), s.rend()) + "\n";
  }
  test_tsv = "12\t21\n345\t543\n";
  const std::string tr = write("train.tsv", train_tsv), te = write("long.tsv", test_tsv);
  Config cfg = tiny("tf", {"task.name=textfile", "task.train_file=" + tr,
                           "task.test_files=[" + te + "]", "task.valid_fraction=0.1"});
  TrainResult r = train(cfg, quiet_train());
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.final_eval.size(), 2u);
  EXPECT_EQ(r.final_eval[0].examples, 4);  // 10% of 40 held out
  EXPECT_EQ(r.final_eval[1].split, "long");
  EXPECT_EQ(r.final_eval[1].examples, 2);
  TaskData data(cfg);
  EXPECT_EQ(data.num_train_examples(), 36);
  EXPECT_EQ(data.render(data.encode_line("345")), "345");
  EXPECT_THROW(data.encode_line("3a"), Error);
  // A missing data file is a clear error naming it.
  try {
    TaskData bad(tiny("x", {"task.name=textfile", "task.train_file=" + (dir_ / "nope.tsv").string()}));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("nope.tsv"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, ModelConfigMappingAndMetricRows) {
  Config cfg = tiny("m", {"pe.scheme=rope", "pe.rope_scaling=yarn", "pe.rope_scaling_factor=2",
                          "model.dropout=0.25", "model.tie_embeddings=true", "train.seed=9"});
  TaskData data(cfg);
  EXPECT_EQ(data.train_positions(), 6);  // max(|src|, |tgt|) + 1 for length 5
  models::ModelConfig mc = to_model_config(cfg, data.vocab().size(), data.train_positions());
  EXPECT_EQ(mc.vocab, data.vocab().size());
  EXPECT_EQ(mc.d_model, 16);
  EXPECT_EQ(mc.encoder_layers, 1);
  EXPECT_EQ(mc.dropout, 0.25);
  EXPECT_TRUE(mc.tie_embeddings);
  EXPECT_EQ(mc.seed, 9u);
  EXPECT_EQ(mc.pe.scheme, "rope");
  EXPECT_EQ(mc.pe.get_str("rope_scaling"), "yarn");
  EXPECT_EQ(mc.pe.get_float("rope_scaling_factor"), 2.0);
  EXPECT_EQ(mc.pe.get_int("rope_train_length"), 0);
  EXPECT_EQ(mc.pe.train_positions, 6);
  EXPECT_EQ(models::RopeParams::from(mc.pe).train_length, 6);  // 0 in the config: the training length
  cfg.model.pe.set("rope_train_length", 40);
  EXPECT_EQ(models::RopeParams::from(to_model_config(cfg, 9, 6).pe).train_length, 40);

  MetricRow row;
  row.set("type", "train").set("step", int64_t{12}).set("loss", 0.1 + 0.2).set("lr", 1e-300);
  row.set("nan", std::nan("")).set("text", "a \"q\"\n,b");
  MetricRow back = parse_metric_row(row.json());
  ASSERT_EQ(back.fields.size(), row.fields.size());
  for (size_t i = 0; i < row.fields.size(); ++i) {
    EXPECT_EQ(back.fields[i].first, row.fields[i].first);
    EXPECT_TRUE(back.fields[i].second == row.fields[i].second) << row.fields[i].first;
  }
  EXPECT_EQ(back.get("loss")->d, 0.1 + 0.2);  // bit for bit
  EXPECT_EQ(back.get("nan")->kind, MetricValue::Kind::Null);
  EXPECT_THROW(parse_metric_row("{\"a\": }"), Error);
}

TEST_F(TrainerTest, EveryExampleConfigLoadsAndBuildsItsModel) {
  // Relative data paths in configs/ are relative to the repository root.
  const fs::path old = fs::current_path();
  fs::current_path(pelab::testing::source_dir());
  std::vector<std::string> seen;
  try {
    // configs/*.yaml and configs/pe/*.yaml are training configs (other subdirectories may hold
    // configs of other tools).
    std::vector<fs::path> files;
    for (const char* d : {"configs", "configs/pe"})
      for (const auto& e : fs::directory_iterator(d))
        if (e.path().extension() == ".yaml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      const fs::directory_entry e(path);
      SCOPED_TRACE(e.path().string());
      Config cfg = load_config(e.path().string());
      EXPECT_EQ(cfg.train.run_name, e.path().stem().string());
      EXPECT_EQ(cfg.train.threads, 2);
      TaskData data(cfg);
      auto model = build_model(cfg, data);
      EXPECT_GT(model->num_parameters(), 0);
      seen.push_back(e.path().stem().string());
    }
  } catch (...) {
    fs::current_path(old);
    throw;
  }
  fs::current_path(old);
  // Every task and feature example is here, and every registered scheme has its own
  // (TrainerTest.EverySchemeHasAnExampleConfigThatTrains trains each).
  for (const char* name : {"default", "reverse", "copy", "sort", "duplicate", "addition", "count",
                           "reverse_decoder", "textfile", "lm", "randomized"})
    EXPECT_NE(std::find(seen.begin(), seen.end(), name), seen.end()) << name;
  for (const std::string& scheme : models::pe_names())
    EXPECT_NE(std::find(seen.begin(), seen.end(), scheme), seen.end())
        << "configs/pe/" << scheme << ".yaml is missing";
}

// configs/pe/ holds one example per registered scheme, configs/pe/<scheme>.yaml with pe.scheme
// <scheme>, and besides them only the examples of features every scheme has (kFeatures); each
// scheme's example loads, builds and trains (2 steps of 4 examples on its own model and task,
// evaluated on 2 examples per split, so a test stays fast).
TEST_F(TrainerTest, EverySchemeHasAnExampleConfigThatTrains) {
  const std::set<std::string> kFeatures = {"randomized"};  // pe.randomized_positions (rope)
  const fs::path dir = fs::path(pelab::testing::source_dir()) / "configs" / "pe";
  const std::vector<std::string> names = models::pe_names();
  ASSERT_FALSE(names.empty());
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    const std::string stem = e.path().stem().string();
    EXPECT_TRUE(std::find(names.begin(), names.end(), stem) != names.end() || kFeatures.count(stem))
        << e.path() << " is neither a registered scheme's example (registered: " << join(names, ", ")
        << ") nor a feature's";
  }
  for (const std::string& scheme : names) {
    const fs::path path = dir / (scheme + ".yaml");
    SCOPED_TRACE(path.string());
    ASSERT_TRUE(fs::is_regular_file(path)) << "every registered scheme has an example config";
    const Config cfg = load_config(
        path.string(), {"train.run_dir=" + dir_.string(), "train.steps=2", "train.batch_size=4",
                        "train.warmup=1", "train.log_every=1", "train.eval_every=2",
                        "train.checkpoint_every=2", "train.threads=1", "task.num_eval_examples=2"});
    EXPECT_EQ(cfg.model.pe.scheme, scheme);
    const TrainResult r = train(cfg, quiet_train());
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.step, 2);
    EXPECT_EQ(r.skipped_steps, 0);
    ASSERT_FALSE(r.final_eval.empty());
    EXPECT_TRUE(std::isfinite(r.final_eval[0].loss)) << r.final_eval[0].split;
  }
}
