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

// The checksum exactly as docs/checkpoint.md defines it (written here from the documentation, not
// taken from train/checkpoint.cpp): FNV-1a 64 with pelab's initial value 1469598103934665603.
uint64_t fnv1a64(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}
std::vector<unsigned char> le64(uint64_t v) {
  std::vector<unsigned char> b(8);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
  return b;
}
// The documented byte sequence of a string array: per entry its length (8 bytes LE), its bytes.
std::vector<unsigned char> string_bytes(const std::vector<std::string>& entries) {
  std::vector<unsigned char> out;
  for (const auto& s : entries) {
    const auto n = le64(s.size());
    out.insert(out.end(), n.begin(), n.end());
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

// Reads and writes datasets and checksum attributes of a checkpoint with the HDF5 C API, as a
// user with h5py would.
class H5File {
 public:
  explicit H5File(const std::string& path, bool write = false) {
    // The file's objects use the HDF5 1.8+ format, which the library edits only with these bounds.
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    f_ = H5Fopen(path.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    EXPECT_GE(f_, 0) << path;
  }
  ~H5File() { H5Fclose(f_); }
  uint64_t checksum(const std::string& name) {
    uint64_t v = 0;
    hid_t a = H5Aopen_by_name(f_, name.c_str(), "fnv1a64", H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_UINT64, &v), 0) << name;
    H5Aclose(a);
    return v;
  }
  // Replaces the checksum attribute (removed and created again, as h5py's attrs[...] = does).
  void set_checksum(const std::string& name, uint64_t v) {
    EXPECT_GE(H5Adelete_by_name(f_, name.c_str(), "fnv1a64", H5P_DEFAULT), 0) << name;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f_, name.c_str(), "fnv1a64", H5T_STD_U64LE, space, H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_UINT64, &v), 0) << name;
    H5Aclose(a);
    H5Sclose(space);
  }
  // Writes an int64 scalar and its checksum from the documented recipe (8 bytes LE).
  void write_int64(const std::string& name, int64_t v) {
    hid_t ds = H5Dopen2(f_, name.c_str(), H5P_DEFAULT);
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0) << name;
    H5Dclose(ds);
    set_checksum(name, fnv1a64(le64(static_cast<uint64_t>(v))));
  }
  // The raw little-endian bytes of a numeric dataset in row-major order.
  std::vector<unsigned char> bytes(const std::string& name, hid_t mem_type) {
    hid_t ds = H5Dopen2(f_, name.c_str(), H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    std::vector<unsigned char> out(static_cast<size_t>(n) * H5Tget_size(mem_type));
    if (n > 0) {
      EXPECT_GE(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0);
    }
    H5Sclose(space);
    H5Dclose(ds);
    return out;
  }
  // A variable-length string array (or scalar) as strings.
  std::vector<std::string> strings(const std::string& name) {
    hid_t ds = H5Dopen2(f_, name.c_str(), H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    std::vector<char*> p(static_cast<size_t>(n), nullptr);
    EXPECT_GE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), 0) << name;
    std::vector<std::string> out;
    for (char* s : p) out.emplace_back(s ? s : "");
    H5Dvlen_reclaim(type, space, H5P_DEFAULT, p.data());
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(ds);
    return out;
  }

 private:
  hid_t f_;
};

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

// ---------------------------------------------------------------- item 5: counters

// A crafted /step (checksum recomputed) is refused on load, naming the file, and a resume from it
// deletes nothing; so are a negative data_position and counters outside their ranges.
TEST_F(SafetyNumeric, CraftedCheckpointCountersAreRefusedBeforeAnythingIsDeleted) {
  const TrainResult r = train(tiny("run"), quiet_train());
  const fs::path ck = fs::path(r.run_dir) / "checkpoints";
  const std::vector<std::string> steps = {"step_1.h5", "step_2.h5", "step_3.h5"};
  for (const auto& s : steps) ASSERT_TRUE(fs::exists(ck / s)) << s;
  const std::string good = (ck / "step_3.h5").string();
  fs::copy_file(good, (dir_ / "good.h5").string());
  struct Case {
    std::string dataset;
    int64_t value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"step", -5, ": dataset step is -5, must be >= 0"},
      {"counters/data_position", -1, ": dataset counters/data_position is -1, outside [0, inf]"},
      {"counters/data_position", 7, ": dataset counters/data_position is 7, but 3 steps of "
                                     "train.grad_accum 1 consume exactly 3 x 1 micro-batches"},
      {"counters/skipped_steps", 4, ": dataset counters/skipped_steps is 4, outside [0, 3] (/step is 3)"},
      {"counters/best_step", -2, ": dataset counters/best_step is -2, outside [-1, 3]"},
      {"optimizer/step", -1, ": dataset optimizer/step is -1, must be >= 0"},
      {"counters/criterion_met_step", 9, ": dataset counters/criterion_met_step is 9, outside [-1, 3]"},
  };
  for (const auto& c : cases) {
    fs::copy_file(dir_ / "good.h5", good, fs::copy_options::overwrite_existing);
    { H5File(good, true).write_int64(c.dataset, c.value); }
    TrainOptions o = quiet_train();
    o.resume = good;
    const std::string e = error_of([&] { train(tiny("run"), o); });
    EXPECT_TRUE(contains(e, "checkpoint " + good + c.want)) << c.dataset << ": " << e;
    for (const auto& s : steps) EXPECT_TRUE(fs::exists(ck / s)) << c.dataset << ": " << s << " deleted";
  }
  // Resuming from step 2 with /step crafted to -5: nothing is deleted either (the unfixed resume
  // deleted every step checkpoint, then failed in the LR schedule).
  const std::string two = (ck / "step_2.h5").string();
  { H5File(two, true).write_int64("step", -5); }
  TrainOptions o = quiet_train();
  o.resume = two;
  EXPECT_TRUE(contains(error_of([&] { train(tiny("run"), o); }), "checkpoint " + two +
                                                                  ": dataset step is -5"));
  for (const auto& s : steps) EXPECT_TRUE(fs::exists(ck / s)) << s << " deleted";
  // The untouched checkpoint still resumes (train.steps 4: one more step).
  fs::copy_file(dir_ / "good.h5", good, fs::copy_options::overwrite_existing);
  TrainOptions ok = quiet_train();
  ok.resume = good;
  EXPECT_EQ(train(tiny("run", {"train.steps=4"}), ok).step, 4);
}

// ---------------------------------------------------------------- item 7: data memory

// Data settings that cannot fit are refused before any example is generated, naming the settings
// and the machine's memory (the unfixed code generated until std::bad_alloc).
TEST_F(SafetyNumeric, DataThatCannotFitIsRefusedBeforeGenerating) {
  struct Case {
    std::vector<std::string> sets;
    std::string lead;
  };
  const std::vector<Case> cases = {
      {{"task.train_max_len=100000000", "task.num_eval_examples=200"},
       "task.num_eval_examples=200, task.train_min_len..task.train_max_len=1..100000000: "},
      {{"task.test_lengths=[3, 2000000000]", "task.num_eval_examples=1000"},
       "task.num_eval_examples=1000, task.test_lengths=[3, 2000000000]: "},
      {{"task.num_eval_examples=2000000000"}, "task.num_eval_examples=2000000000, "},
      {{"task.train_examples=1000000000000"},
       "task.train_examples=1000000000000, task.train_min_len..task.train_max_len=1..5: "}};
  for (const auto& c : cases) {
    const Config cfg = tiny("mem", c.sets);
    const DataEstimate est = estimate_data_memory(cfg);
    ASSERT_GT(est.total(), 1e11) << c.lead;
    const std::string e = error_of([&] { check_data_memory(cfg, 8e9); });
    EXPECT_EQ(e.rfind(c.lead, 0), 0u) << e;
    EXPECT_TRUE(contains(e, "the generated data alone need ")) << e;
    EXPECT_TRUE(contains(e, "this machine has 8.0 GB. Reduce these settings.")) << e;
    // TaskData (train, eval, info) refuses it before generating: at once, with the machine's size.
    const std::string t = error_of([&] { TaskData d(cfg); });
    EXPECT_TRUE(contains(t, c.lead)) << t;
    EXPECT_TRUE(contains(t, "the generated data alone need ")) << t;
  }
  // The tiny run's data: a few kilobytes, accepted.
  const DataEstimate small = estimate_data_memory(tiny("small"));
  EXPECT_GT(small.total(), 0);
  EXPECT_LT(small.total(), 1e5);
  EXPECT_EQ(error_of([&] { check_data_memory(tiny("small"), 8e9); }), "");
}

// ---------------------------------------------------------------- item 16: checksums

// Every checksum of a real checkpoint is recomputed from docs/checkpoint.md's recipe alone (FNV-1a
// 64 over the documented bytes, written in this test), including the worked examples of the docs.
TEST_F(SafetyNumeric, ChecksumsFollowTheDocumentedRecipe) {
  // The worked examples of docs/checkpoint.md.
  EXPECT_EQ(fnv1a64({}), 0x14650fb0739d0383ull);
  EXPECT_EQ(fnv1a64(le64(3)), 0xeb0db8638ec07380ull);
  EXPECT_EQ(fnv1a64(string_bytes({"rope"})), 0xecf60c954afaf44full);
  const TrainResult r = train(tiny("sum", {"pe.scheme=rope"}), quiet_train());
  const std::string path = (fs::path(r.run_dir) / "checkpoints" / "step_3.h5").string();
  H5File f(path);
  EXPECT_EQ(f.checksum("step"), fnv1a64(le64(3)));
  EXPECT_EQ(f.checksum("scheme"), fnv1a64(string_bytes({"rope"})));
  for (const char* n : {"format_version", "step", "optimizer/step", "counters/data_position",
                        "counters/best_step"})
    EXPECT_EQ(f.checksum(n), fnv1a64(f.bytes(n, H5T_NATIVE_INT64))) << n;
  for (const char* n : {"values/last_lr", "values/elapsed_s"})
    EXPECT_EQ(f.checksum(n), fnv1a64(f.bytes(n, H5T_NATIVE_DOUBLE))) << n;
  for (const char* n : {"scheme", "arch", "config", "metrics", "vocab", "param_names"})
    EXPECT_EQ(f.checksum(n), fnv1a64(string_bytes(f.strings(n)))) << n;
  const std::vector<std::string> names = f.strings("param_names");
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) {
    EXPECT_EQ(f.checksum("params/" + n), fnv1a64(f.bytes("params/" + n, H5T_NATIVE_FLOAT))) << n;
    EXPECT_EQ(f.checksum("optimizer/exp_avg/" + n),
              fnv1a64(f.bytes("optimizer/exp_avg/" + n, H5T_NATIVE_FLOAT)))
        << n;
  }
}
