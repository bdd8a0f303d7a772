// pelab — issue 29 items 3, 4, 5, 7 and 16: no silent wrong number from someone else's config or
// checkpoint. Each test injects the fault: xPos positions past float32's range (item 3), a
// non-finite evaluation loss (item 3), float settings beyond the model's dtype and runs that never
// update or end with non-finite parameters (item 4), crafted checkpoint counters with their
// checksums recomputed (item 5), data settings that cannot fit in memory (item 7), and the
// checksum recomputed from docs/checkpoint.md's recipe alone (item 16).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "models/pe/pe.h"
#include "pelab/pelab.h"
#include "tests/pe_test_util.h"
#include "tests/run_test_util.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/memory_estimate.h"
#include "train/task_data.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace pelab;
using pelab::testing::error_of;
using pelab::testing::quiet_train;
using pelab::testing::site_of;
using pelab::testing::slurp;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The error of loading the default config with `sets`, "" when it loads.
std::string config_error(const std::vector<std::string>& sets) {
  try {
    load_config_string("", "<test>", sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

class SafetyNumeric : public pelab::testing::TempDirTest {
 protected:
  SafetyNumeric() : TempDirTest("pelab_safety_numeric") {}

  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.num_symbols=4",       "task.train_min_len=1",     "task.train_max_len=5",
        "task.test_lengths=[3, 7]", "task.num_eval_examples=6", "model.d_model=16",
        "model.heads=2",            "model.d_ff=32",            "model.encoder_layers=1",
        "model.decoder_layers=1",   "train.steps=3",            "train.batch_size=8",
        "train.warmup=1",           "train.log_every=1",        "train.eval_every=0",
        "train.checkpoint_every=1", "train.keep_checkpoints=0", "train.threads=1",
        "eval.batch_size=4"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }
};

}  // namespace

// ---------------------------------------------------------------- item 3: xPos range

// xPos declares the positions whose scale factors stay in float32's range: with
// pe.xpos_scale_base 4 (γ = 0.4) that is floor(64·4 / ln 3.5) + 1 = 205 positions, and float32
// scores over all of them are finite, encoder and decoder. Past the limit (500 positions, the
// issue's case) the factors overflow: the limit is what keeps a run from those NaNs.
TEST(SafetyXpos, PositionLimitKeepsFloat32ScoresFinite) {
  models::PEConfig cfg;
  cfg.scheme = "xpos";
  cfg.set("xpos_scale_base", 4.0);
  const int64_t limit = models::pe_max_positions(cfg);
  ASSERT_EQ(limit, static_cast<int64_t>(std::floor(64 * 4 / std::log(3.5))) + 1);
  EXPECT_EQ(limit, 205);
  models::StackInfo st = pelab::testing::stack_of(models::StackKind::Decoder, 1, 16, 2);
  st.dtype = DType::Float32;
  Generator g(7);
  auto pe = models::make_pe(cfg, st, g);
  auto scores = [&](int64_t L, bool causal) {
    const std::vector<int64_t> pos = pelab::testing::iota(L);
    Tensor q = Tensor::empty({1, 2, L, 8}, DType::Float32), k = Tensor::empty({1, 2, L, 8}, DType::Float32);
    init::normal_(q, 0, 1, g);
    init::normal_(k, 0, 1, g);
    pe->transform_qk(q, k, site_of(causal ? models::AttnKind::DecoderSelf : models::AttnKind::EncoderSelf,
                                   pos, pos, causal));
    return matmul(q, transpose(k, 2, 3)).to_vector();
  };
  for (bool causal : {true, false}) {
    for (double v : scores(limit, causal)) ASSERT_TRUE(std::isfinite(v)) << "causal " << causal;
    bool all_finite = true;
    for (double v : scores(500, causal)) all_finite = all_finite && std::isfinite(v);
    EXPECT_FALSE(all_finite) << "500 positions at B = 4 should overflow float32 (causal " << causal
                             << ")";
  }
  // Defaults: 26157 positions; a scale base so large that there is no decay: no limit.
  models::PEConfig d;
  d.scheme = "xpos";
  EXPECT_EQ(models::pe_max_positions(d), 26157);
  d.set("xpos_scale_base", 1e300);
  EXPECT_EQ(models::pe_max_positions(d), 0);
}

// A config whose training sequences reach past the limit is refused when it is read, naming the
// limit and the length.
TEST(SafetyXpos, TrainingPastThePositionLimitIsRefusedWhenTheConfigIsRead) {
  const std::string e = config_error({"task.name=reverse", "task.train_max_len=300",
                                      "pe.scheme=xpos", "pe.xpos_scale_base=4"});
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_TRUE(contains(e, "the position limit of pe.scheme xpos (205) must be >= ")) << e;
  EXPECT_TRUE(contains(e, "task.train_max_len 300")) << e;
  EXPECT_EQ(config_error({"task.name=reverse", "task.train_max_len=100", "pe.scheme=xpos",
                          "pe.xpos_scale_base=4"}),
            "");
}

// ---------------------------------------------------------------- item 3: non-finite loss

// A model that overflows on a split (parameters made NaN) gives that split status
// "n/a (non-finite loss)", never "ok", in the result and in eval.json.
TEST_F(SafetyNumeric, NonFiniteEvaluationLossIsNotStatusOk) {
  Config cfg = tiny("nan");
  LoadedModel lm = load_model(cfg);
  EvalOptions eo;
  const EvalResult fine = evaluate_set(*lm.model, *lm.data, lm.data->valid(), cfg, eo);
  ASSERT_EQ(fine.status, "ok");
  Tensor w = lm.model->parameters().front();
  ASSERT_EQ(w.dtype(), DType::Float32);
  float* p = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  const EvalResult r = evaluate_set(*lm.model, *lm.data, lm.data->valid(), cfg, eo);
  EXPECT_EQ(r.status, "n/a (non-finite loss)");
  EXPECT_FALSE(r.available());
  write_eval_files(dir_.string(), {r}, 0, "none");
  const std::string js = slurp(dir_ / "eval.json");
  EXPECT_TRUE(contains(js, "\"status\": \"n/a (non-finite loss)\"")) << js;
  EXPECT_FALSE(contains(js, "\"ok\"")) << js;
}

// ---------------------------------------------------------------- item 4: float settings

// A float setting beyond the largest finite value of model.dtype is refused when the config is
// read: one line naming the key and the largest usable value. The same values load in float64.
TEST(SafetyConfig, FloatSettingsBeyondTheModelDtypeAreRefused) {
  const std::vector<std::vector<std::string>> cases = {
      {"model.init_std=1e300"},
      {"pe.scheme=fire", "pe.fire_c_init=1e39"},
      {"pe.scheme=kerple", "pe.kerple_r1_init=1e308"},
      {"train.lr=1e308"}};
  for (const auto& sets : cases) {
    const std::string key = sets.back().substr(0, sets.back().find('='));
    const std::string e = config_error(sets);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_TRUE(contains(e, key + ": ")) << e;
    EXPECT_TRUE(contains(e, " overflows model.dtype float32; the largest usable value is "
                            "3.4028234663852886e38"))
        << e;
    std::vector<std::string> f64 = sets;
    f64.push_back("model.dtype=float64");
    EXPECT_EQ(config_error(f64), "") << key;
  }
  // The largest float32 value itself is allowed (the range is closed).
  EXPECT_EQ(config_error({"pe.scheme=fire", "pe.fire_c_init=3.4028234663852886e38"}), "");
  // In a YAML file the error points at the line.
  try {
    load_config_string("model:\n  d_model: 16\n  init_std: 1e300\n", "c.yaml");
    FAIL() << "model.init_std 1e300 loaded";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "c.yaml:3: model.init_std: 1e300 overflows")) << e.what();
  }
  // The PE registry's own check (the model constructor runs it) knows the dtype too.
  models::PEConfig pc;
  pc.scheme = "fire";
  pc.set("fire_c_init", 1e39);
  const std::string e = error_of([&] { models::validate_pe(pc, models::PEModelDims{16, 2}); });
  EXPECT_TRUE(contains(e, "pe.fire_c_init: 1e+39 overflows model.dtype float32")) << e;
  EXPECT_EQ(error_of([&] {
              models::validate_pe(pc, models::PEModelDims{16, 2, DType::Float64});
            }),
            "");
}

// A run whose every step is skipped (an init std that fits float32 but overflows the forward pass)
// is an error, not exit 0.
TEST_F(SafetyNumeric, RunWhoseEveryStepIsSkippedFails) {
  const std::string e = error_of([&] { train(tiny("skip", {"model.init_std=1e38"}), quiet_train()); });
  EXPECT_TRUE(contains(e, "all 3 steps skipped for a non-finite loss or gradient norm")) << e;
  EXPECT_TRUE(contains(e, "the model never updated")) << e;
}

// A run whose last update leaves non-finite parameters is an error (injected: a parameter made NaN
// after the last step's backward pass, so the update writes NaN).
TEST_F(SafetyNumeric, RunEndingWithNonFiniteParametersFails) {
  TrainOptions o = quiet_train();
  o.grad_hook = [](int64_t step, const std::vector<Tensor>& params) {
    if (step != 2) return;
    Tensor p = params.front();
    p.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  };
  const std::string e = error_of([&] { train(tiny("nanparam"), o); });
  EXPECT_TRUE(contains(e, "step 3: the parameters are not finite after the last update")) << e;
  EXPECT_TRUE(contains(e, "the run diverged")) << e;
}

