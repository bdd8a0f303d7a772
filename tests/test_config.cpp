// pelab — tests of the config system (train/config.h): defaults, every error path with its
// FILE:LINE message, --set overrides, cross-field rules, YAML round trip, markdown reference.
#include "train/config.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "models/pe/rope_math.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using pelab::Config;
using pelab::ConfigError;

namespace {

class ConfigTest : public pelab::testing::TempDirTest {
 protected:
  ConfigTest() : TempDirTest("pelab_config") {}

  // The ConfigError message of loading `text` from file `name` with `overrides`, or "" if none.
  std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {},
                       const std::string& name = "c.yaml") {
    const std::string path = write(name, text);
    try {
      pelab::load_config(path, overrides);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_F(ConfigTest, ConfigDefaults) {
  const Config d;
  EXPECT_EQ(d.task.name, "reverse");
  EXPECT_EQ(d.task.formulation, "seq2seq");
  EXPECT_EQ(d.task.test_lengths, (std::vector<int>{8, 16, 24, 32}));
  EXPECT_EQ(d.model.d_model, 64);
  EXPECT_EQ(d.model.heads, 4);
  EXPECT_DOUBLE_EQ(d.model.dropout, 0.0);
  EXPECT_EQ(d.model.pe.scheme, "sinusoidal");
  EXPECT_EQ(d.model.pe.get_str("rope_pairing"), "half");
  EXPECT_DOUBLE_EQ(d.train.lr, 1e-3);
  EXPECT_EQ(d.train.schedule, "warmup_cosine");
  EXPECT_EQ(d.eval.best_metric, "exact_match");

  // An empty file and a file with empty sections resolve to the defaults.
  Config a = pelab::load_config(write("empty.yaml", ""));
  EXPECT_EQ(a.train.run_name, "empty");  // derived from the file name
  a.train.run_name.clear();
  EXPECT_EQ(a, d);
  EXPECT_EQ(a.source, path("empty.yaml"));
  Config b = pelab::load_config_string("task:\nmodel:\npe:\ntrain:\neval:\n");
  EXPECT_EQ(b, d);
  EXPECT_EQ(b.train.run_name, "");  // text has no file name to derive from
  EXPECT_NO_THROW(pelab::validate_config(d));

  // The schema's default text is the struct default.
  for (const auto& k : pelab::config_schema())
    EXPECT_EQ(k.default_text, pelab::config_value_text(d, k.full_name())) << k.full_name();
}

TEST_F(ConfigTest, ConfigLoadsEveryType) {
  Config c = pelab::load_config(write("run1.yaml", R"(
task:
  name: lm
  formulation: decoder
  lm_eval_lengths: [64, 256, 512]
  test_files: [a.txt, "b c.txt"]
  seed: 7
model:
  arch: decoder
  d_model: 128
  dropout: 0.1
  tie_embeddings: yes
pe:
  scheme: rope
  rope_fraction: 0.5
  rope_base: 5e5
train:
  lr: 3e-4
  tags: {group: sweep1, note: "x: y"}
  run_name: mine
  device: cuda:1
eval:
  save_predictions: true
)"));
  EXPECT_EQ(c.task.name, "lm");
  EXPECT_EQ(c.task.lm_eval_lengths, (std::vector<int>{64, 256, 512}));
  EXPECT_EQ(c.task.test_files, (std::vector<std::string>{"a.txt", "b c.txt"}));
  EXPECT_EQ(c.task.seed, 7);
  EXPECT_EQ(c.model.arch, "decoder");
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.1);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.pe.scheme, "rope");
  EXPECT_DOUBLE_EQ(c.model.pe.get_float("rope_fraction"), 0.5);
  EXPECT_DOUBLE_EQ(c.model.pe.get_float("rope_base"), 5e5);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.tags.at("group"), "sweep1");
  EXPECT_EQ(c.train.tags.at("note"), "x: y");
  EXPECT_EQ(c.train.run_name, "mine");  // explicit name is kept
  EXPECT_EQ(c.train.device, "cuda:1");
  EXPECT_TRUE(c.eval.save_predictions);
  EXPECT_EQ(c.model.heads, 4);  // untouched keys keep defaults
  EXPECT_EQ(pelab::head_dim(c), 32);
  EXPECT_EQ(pelab::models::rope_rotary_dims(c.model.pe.get_float("rope_fraction"), pelab::head_dim(c)), 16);
}

TEST_F(ConfigTest, ConfigUnknownKeySuggestsNearest) {
  EXPECT_EQ(error_of("model:\n  d_modle: 32\n"),
            path("c.yaml") + ":2: key 'model.d_modle' is not a valid key; did you mean "
                             "'model.d_model'?");
  // A key of another section.
  EXPECT_EQ(error_of("task:\n  name: copy\nmodel:\n  scheme: rope\n"),
            path("c.yaml") + ":4: key 'model.scheme' is not a valid key; did you mean "
                             "'pe.scheme'?");
  // Nothing close: the valid keys of the section are listed.
  std::string e = error_of("eval:\n  qqqqqqqqqq: 1\n");
  EXPECT_TRUE(contains(e, ":2: key 'eval.qqqqqqqqqq' is not a valid key; valid keys in 'eval': "
                          "batch_size, max_decode_len"))
      << e;
}

TEST_F(ConfigTest, ConfigWrongType) {
  const std::string f = path("c.yaml");
  EXPECT_EQ(error_of("model:\n  d_model: 64\n  heads: four\n"),
            f + ":3: model.heads: expected an integer, got 'four'");
  EXPECT_EQ(error_of("model:\n  heads: 4.0\n"),
            f + ":2: model.heads: expected an integer, got '4.0' (write it without '.')");
  EXPECT_EQ(error_of("model:\n  heads:\n"),
            f + ":2: model.heads: expected an integer, got an empty value");
  EXPECT_EQ(error_of("model:\n  heads: [4]\n"),
            f + ":2: model.heads: expected an integer, got a list");
  EXPECT_EQ(error_of("model:\n  dropout: high\n"),
            f + ":2: model.dropout: expected a finite number, got 'high'");
  EXPECT_EQ(error_of("model:\n  dropout: .nan\n"),
            f + ":2: model.dropout: expected a finite number, got '.nan'");
  EXPECT_EQ(error_of("model:\n  bias: maybe\n"),
            f + ":2: model.bias: expected true or false, got 'maybe'");
  EXPECT_EQ(error_of("task:\n  test_lengths: 8\n"),
            f + ":2: task.test_lengths: expected a list of integers like [8, 16], got '8'");
  EXPECT_EQ(error_of("task:\n  test_lengths: [8,\n    x]\n"),
            f + ":3: task.test_lengths[1]: expected an integer, got 'x'");
  EXPECT_EQ(error_of("train:\n  run_dir: [a]\n"),
            f + ":2: train.run_dir: expected a string, got a list");
  EXPECT_EQ(error_of("train:\n  tags: [a]\n"),
            f + ":2: train.tags: expected a mapping like {a: b}, got a list");
  EXPECT_EQ(error_of("task:\n  train_max_len: 99999999999\n"),
            f + ":2: task.train_max_len: 99999999999 does not fit in a 32-bit integer");
  EXPECT_EQ(error_of("model: 3\n"),
            f + ":1: section 'model' must be a mapping of keys, got '3'");
  EXPECT_EQ(error_of("- a\n- b\n"),
            f + ":1: expected a mapping of sections (task, model, pe, train, eval) at the top "
                "level, got a list");
}

TEST_F(ConfigTest, ConfigOutOfRange) {
  const std::string f = path("c.yaml");
  EXPECT_EQ(error_of("model:\n  dropout: 1.5\n"),
            f + ":2: model.dropout: 1.5 is out of range [0, 1)");
  EXPECT_EQ(error_of("model:\n  dropout: 1\n"), f + ":2: model.dropout: 1 is out of range [0, 1)");
  EXPECT_EQ(error_of("task:\n  num_symbols: 1\n"),
            f + ":2: task.num_symbols: 1 is out of range [2, 65536]");
  EXPECT_EQ(error_of("pe:\n  rope_fraction: 0\n"),
            f + ":2: pe.rope_fraction: 0 is out of range (0, 1]");
  EXPECT_EQ(error_of("train:\n  lr: -1e-3\n"), f + ":2: train.lr: -1e-3 is out of range (0, inf)");
  EXPECT_EQ(error_of("task:\n  test_lengths:\n    - 8\n    - 0\n"),
            f + ":4: task.test_lengths[1]: 0 is out of range [1, inf)");
  // Boundaries that are allowed.
  EXPECT_EQ(error_of("model:\n  dropout: 0\npe:\n  rope_fraction: 1\n"), "");
}

// The registered scheme names as the error messages list them ("alibi, learned, ..."): every
// models/pe/ file registers one, so the list is not spelled out here.
static std::string registered_schemes() {
  std::string s;
  for (const std::string& n : pelab::models::pe_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

TEST_F(ConfigTest, ConfigUnknownEnumValue) {
  const std::string f = path("c.yaml");
  EXPECT_EQ(error_of("pe:\n  scheme: rop\n"),
            f + ":2: pe.scheme: 'rop' is not one of " + registered_schemes() +
                "; did you mean 'rope'?");
  EXPECT_EQ(error_of("train:\n  schedule: linear\n"),
            f + ":2: train.schedule: 'linear' is not one of constant, warmup_cosine, "
                "inverse_sqrt");
}

TEST_F(ConfigTest, ConfigUnknownSection) {
  const std::string f = path("c.yaml");
  EXPECT_EQ(error_of("modle:\n  d_model: 3\n"),
            f + ":1: unknown section 'modle'; did you mean 'model'? (sections: task, model, pe, "
                "train, eval)");
  EXPECT_EQ(error_of("task:\n  name: copy\nd_model: 3\n"),
            f + ":3: unknown section 'd_model'; 'd_model' is a key: did you mean "
                "'model.d_model'?");
  EXPECT_EQ(error_of("model:\n  heads: 2\nmodel:\n  d_ff: 8\n"),
            f + ":3: section 'model' appears twice (first at line 1)");
  EXPECT_EQ(error_of("model:\n  heads: 2\n  heads: 8\n"),
            f + ":3: key 'model.heads' appears twice (first at line 2)");
}

TEST_F(ConfigTest, ConfigMissingFile) {
  const std::string f = path("nope.yaml");
  try {
    pelab::load_config(f);
    FAIL() << "no error for a missing file";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), f + ": cannot open config file");
  }
  EXPECT_THROW(pelab::load_config(dir_.string()), ConfigError);
}

TEST_F(ConfigTest, ConfigMalformedYaml) {
  const std::string f = path("c.yaml");
  std::string e = error_of("model:\n  d_model: 64\ntask:\n  test_lengths: [1, 2\n  seed: 3\n");
  EXPECT_EQ(e.rfind(f + ":", 0), 0u) << e;
  EXPECT_TRUE(contains(e, ": YAML syntax error: ")) << e;
  // yaml-cpp's 0-based mark becomes a 1-based line inside the file.
  const size_t a = f.size() + 1, b = e.find(':', a);
  const int line = std::stoi(e.substr(a, b - a));
  EXPECT_GE(line, 4);
  EXPECT_LE(line, 5);
  e = error_of("model:\n\td_model: 64\n");
  EXPECT_EQ(e.rfind(f + ":2: YAML syntax error: ", 0), 0u) << e;
  e = error_of("model:\n  heads: 2\n---\nmodel:\n  heads: 4\n");
  EXPECT_EQ(e, f + ":4: expected one YAML document, found 2");
  e = error_of("  model:\n    heads: 2\ntrain:\n  lr: 0.1\n");
  EXPECT_EQ(e, f + ":3: YAML syntax error: this line is indented differently from the lines above");
  // A leading "---" is fine.
  EXPECT_EQ(error_of("# comment\n---\nmodel:\n  heads: 2\n"), "");
}

TEST_F(ConfigTest, ConfigSetOverrides) {
  const std::string f = write("base.yaml", "model:\n  heads: 2\ntask:\n  name: copy\n");
  Config c = pelab::load_config(
      f, {"model.heads=8", "model.d_model=128", "task.test_lengths=[4, 40]", "pe.scheme=alibi",
          "train.run_name=", "train.tags={a: b}", "model.dropout=0.25", " train.lr = 2e-3"});
  EXPECT_EQ(c.model.heads, 8);  // the override wins over the file
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.task.name, "copy");
  EXPECT_EQ(c.task.test_lengths, (std::vector<int>{4, 40}));
  EXPECT_EQ(c.model.pe.scheme, "alibi");
  EXPECT_EQ(c.train.run_name, "base");  // emptied, then derived from the file name
  EXPECT_EQ(c.train.tags, (std::map<std::string, std::string>{{"a", "b"}}));
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.25);
  EXPECT_DOUBLE_EQ(c.train.lr, 2e-3);
  // Later overrides win over earlier ones.
  Config d = pelab::load_config(f, {"model.heads=8", "model.heads=16"});
  EXPECT_EQ(d.model.heads, 16);

  // apply_overrides on a loaded config; a failing override leaves it unchanged.
  pelab::apply_overrides(d, {"pe.scheme=t5"});
  EXPECT_EQ(d.model.pe.scheme, "t5");
  Config before = d;
  EXPECT_THROW(pelab::apply_overrides(d, {"model.heads=3"}), ConfigError);  // 64 % 3 != 0
  EXPECT_EQ(d, before);
}

TEST_F(ConfigTest, ConfigSetErrors) {
  const std::string f = write("ok.yaml", "");
  auto err = [&](const std::string& o) -> std::string {
    try {
      pelab::load_config(f, {o});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(err("model.d_modle=3"),
            "--set model.d_modle=3: key 'model.d_modle' is not a valid key; did you mean "
            "'model.d_model'?");
  EXPECT_EQ(err("model.heads=four"),
            "--set model.heads=four: model.heads: expected an integer, got 'four'");
  EXPECT_EQ(err("model.dropout=1.5"),
            "--set model.dropout=1.5: model.dropout: 1.5 is out of range [0, 1)");
  EXPECT_EQ(err("pe.scheme=roep"),
            "--set pe.scheme=roep: pe.scheme: 'roep' is not one of " + registered_schemes() +
                "; did you mean 'rope'?");
  EXPECT_EQ(err("modle.heads=3"),
            "--set modle.heads=3: unknown section 'modle'; did you mean 'model'? (sections: "
            "task, model, pe, train, eval)");
  EXPECT_EQ(err("model.heads"), "--set model.heads: expected section.key=value");
  EXPECT_EQ(err("heads=4"),
            "--set heads=4: 'heads' needs a section: write section.key=value; did you mean "
            "'model.heads'?");
  std::string e = err("task.test_lengths=[1,");
  EXPECT_EQ(e.rfind("--set task.test_lengths=[1,: value '[1,' is not valid YAML: ", 0), 0u) << e;
  // Cross-field errors name the keys that came from --set.
  EXPECT_EQ(err("model.heads=5"),
            f + ": model.d_model (64) must be divisible by model.heads (5) (model.heads from "
                "--set)");
}

TEST_F(ConfigTest, ConfigCrossFieldRules) {
  const std::string f = path("c.yaml");
  EXPECT_EQ(error_of("model:\n  d_model: 60\n  heads: 8\n"),
            f + ":3: model.d_model (60) must be divisible by model.heads (8)");
  EXPECT_EQ(error_of("model:\n  d_model: 60\n  heads: 4\npe:\n  scheme: rope\n"),
            f + ":5: pe.scheme rope needs an even head dim >= 2, but model.d_model / "
                "model.heads = 60 / 4 = 15");
  EXPECT_EQ(error_of("pe:\n  scheme: rope\n  rope_fraction: 0.3\n"),
            f + ":3: pe.scheme rope needs an even number (>= 2) of rotary dims, but round(head "
                "dim (model.d_model / model.heads = 64 / 4 = 16) times pe.rope_fraction 0.3) = 5");
  // round(16 * 0.26) = 4 rotary dims is fine, as in the model's own rule.
  EXPECT_EQ(error_of("pe:\n  scheme: rope\n  rope_fraction: 0.26\n"), "");
  EXPECT_TRUE(contains(error_of("model:\n  heads: 32\npe:\n  scheme: rope\n  rope_scaling: ntk\n"
                                "  rope_scaling_factor: 2\n"),
                       "pe.rope_scaling ntk needs more than 2 rotary dims"));
  EXPECT_EQ(error_of("task:\n  train_min_len: 9\n  train_max_len: 8\n"),
            f + ":3: task.train_min_len (9) must be <= task.train_max_len (8)");

  // Each rule names every key involved.
  struct Case {
    std::string yaml;
    std::vector<std::string> keys;
  };
  const std::vector<Case> cases = {
      {"task:\n  name: lm\n", {"task.name", "task.formulation"}},
      {"task:\n  formulation: decoder\n", {"task.formulation", "model.arch"}},
      {"task:\n  name: textfile\n", {"task.name", "task.train_file"}},
      {"task:\n  name: addition\n  num_symbols: 16\n", {"task.name", "task.num_symbols"}},
      {"model:\n  encoder_layers: 0\n", {"model.arch", "model.encoder_layers"}},
      {"train:\n  lr: 1e-4\n  min_lr: 1e-3\n", {"train.min_lr", "train.lr"}},
      {"train:\n  steps: 10\n  warmup: 20\n", {"train.warmup", "train.steps"}},
      {"train:\n  schedule: inverse_sqrt\n  warmup: 0\n", {"train.schedule", "train.warmup"}},
      {"pe:\n  rope_scaling: yarn\n", {"pe.rope_scaling", "pe.scheme"}},
      {"pe:\n  scheme: rope\n  rope_scaling_factor: 4\n",
       {"pe.rope_scaling_factor", "pe.rope_scaling"}},
      {"pe:\n  scheme: rope\n  rope_scaling: yarn\n  yarn_beta_fast: 1\n",
       {"pe.yarn_beta_fast", "pe.yarn_beta_slow"}},
      {"pe:\n  scheme: t5\n  t5_num_buckets: 31\n", {"pe.t5_num_buckets", "pe.scheme"}},
      {"pe:\n  scheme: t5\n  t5_max_distance: 16\n", {"pe.t5_max_distance", "pe.t5_num_buckets"}},
      {"pe:\n  scheme: shaw\n  shaw_keys: false\n  shaw_values: false\n",
       {"pe.shaw_keys", "pe.shaw_values"}},
      {"pe:\n  scheme: learned\n  max_positions: 10\n", {"pe.max_positions", "task.train_max_len"}},
      {"pe:\n  scheme: learned\n  randomized_positions: true\n  randomized_max_position: 600\n",
       {"pe.max_positions", "pe.randomized_max_position"}},
      {"pe:\n  scheme: none\n  randomized_positions: true\n",
       {"pe.randomized_positions", "pe.scheme"}},
      {"pe:\n  randomized_positions: true\n  randomized_max_position: 20\n",
       {"pe.randomized_max_position", "task.test_lengths"}},
      {"pe:\n  randomized_positions: true\n  randomized_max_position: 64\ntrain:\n  "
       "batch_lengths: mixed\n",
       {"train.batch_lengths", "pe.randomized_positions"}},
      {"task:\n  train_examples: 100\ntrain:\n  batch_lengths: one\n",
       {"train.batch_lengths", "task.train_examples"}},
      {"pe:\n  randomized_positions: true\n  randomized_max_position: 64\ntrain:\n  "
       "bucket_by_length: true\n",
       {"train.bucket_by_length", "train.batch_lengths"}},
      {"train:\n  device: gpu\n", {"train.device"}},
      {"train:\n  run_name: a/b\n", {"train.run_name"}},
      {"train:\n  run_dir: ''\n", {"train.run_dir"}},
  };
  for (const auto& c : cases) {
    std::string e = error_of(c.yaml);
    ASSERT_FALSE(e.empty()) << "no error for:\n" << c.yaml;
    EXPECT_EQ(e.rfind(f + ":", 0), 0u) << e;
    for (const auto& k : c.keys) EXPECT_TRUE(contains(e, k)) << e << " lacks " << k;
  }
  // One rule per documented line.
  EXPECT_GE(pelab::config_cross_field_rules().size(), 15u);
  // Scheme-specific rules do not fire for other schemes.
  EXPECT_EQ(error_of("model:\n  d_model: 60\n  heads: 4\npe:\n  scheme: alibi\n"), "");
  EXPECT_EQ(error_of("pe:\n  t5_num_buckets: 31\n"), "");
  EXPECT_EQ(error_of("task:\n  name: lm\n  formulation: decoder\nmodel:\n  arch: decoder\n"), "");
  // train.batch_lengths: auto means one-length batches exactly with randomized positions; the lm
  // task's windows have one length whatever it says.
  Config c;
  EXPECT_FALSE(pelab::one_length_batches(c));
  c.model.pe.randomized_positions = true;
  EXPECT_TRUE(pelab::one_length_batches(c));
  c.model.pe.randomized_positions = false;
  c.train.batch_lengths = "one";
  EXPECT_TRUE(pelab::one_length_batches(c));
  c.task.name = "lm";
  EXPECT_FALSE(pelab::one_length_batches(c));
  EXPECT_EQ(error_of("train:\n  batch_lengths: one\n"), "");
  EXPECT_EQ(error_of("train:\n  batch_lengths: mixed\n  bucket_by_length: true\n"), "");
  EXPECT_NE(error_of("train:\n  batch_lengths: single\n").find("train.batch_lengths"),
            std::string::npos);
  // A stored config without train.batch_lengths (written before it existed) of a randomized run
  // on a synthetic task trained on mixed batches; with the key, or not randomized, or lm: not.
  const std::string rand = "pe:\n  randomized_positions: true\n";
  EXPECT_NE(pelab::mixed_randomized_batches("task:\n  name: reverse\n" + rand), "");
  EXPECT_NE(pelab::mixed_randomized_batches(rand + "train:\n  steps: 5\n"), "");
  EXPECT_EQ(pelab::mixed_randomized_batches(rand + "train:\n  batch_lengths: auto\n"), "");
  EXPECT_EQ(pelab::mixed_randomized_batches("pe:\n  randomized_positions: false\n"), "");
  EXPECT_EQ(pelab::mixed_randomized_batches("task:\n  name: lm\n" + rand), "");
  EXPECT_EQ(pelab::mixed_randomized_batches("[unclosed"), "");
  EXPECT_EQ(pelab::mixed_randomized_batches(pelab::config_to_yaml(c)), "");  // what pelab writes
}

TEST_F(ConfigTest, ConfigValidateInCode) {
  Config c;
  c.model.dropout = 2.0;
  try {
    pelab::validate_config(c);
    FAIL() << "no error for dropout 2";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config: model.dropout: 2.0 is out of range [0, 1)");
  }
  c = Config();
  c.model.pe.scheme = "rotary";
  EXPECT_THROW(pelab::validate_config(c), ConfigError);
  c = Config();
  c.model.heads = 7;
  try {
    pelab::validate_config(c);
    FAIL() << "no error for heads 7";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config: model.d_model (64) must be divisible by "
                                     "model.heads (7)");
  }
  EXPECT_THROW(pelab::head_dim(c), ConfigError);
}

TEST_F(ConfigTest, ConfigRoundTrip) {
  Config c = pelab::load_config(write("rt.yaml", R"(
task: {name: copy, test_lengths: [3, 300], test_files: [], corpus: "~", train_file: "yes"}
model: {d_model: 96, heads: 6, dropout: 0.1, norm: post, dtype: float64, init_std: 3e-7}
pe: {scheme: rope, rope_fraction: 0.5, rope_base: 1e6, rope_scaling: ntk, rope_scaling_factor: 2.5}
train: {lr: 0.0003, eps: 1e-9, seed: 9000000000, tags: {"a b": "c: d", n: "null"}, resume: latest}
eval: {max_decode_len: 77, best_metric: loss}
)"));
  EXPECT_EQ(c.train.seed, 9000000000LL);
  EXPECT_EQ(c.task.corpus, "~");
  const std::string text = pelab::config_to_yaml(c);
  Config back = pelab::load_config_string(text, "run/config.yaml");
  EXPECT_EQ(back, c) << text;
  EXPECT_EQ(back.train.tags.at("a b"), "c: d");
  EXPECT_EQ(back.train.tags.at("n"), "null");
  EXPECT_EQ(back.task.train_file, "yes");
  EXPECT_DOUBLE_EQ(back.model.init_std, 3e-7);
  EXPECT_EQ(back.source, "run/config.yaml");
  // Serialising again gives the same text; with docs it still loads to the same config.
  EXPECT_EQ(pelab::config_to_yaml(back), text);
  EXPECT_EQ(pelab::load_config_string(pelab::config_to_yaml(c, true)), c);
  EXPECT_TRUE(contains(pelab::config_to_yaml(c, true), "# model width"));

  // Every key of the schema appears in the output under its section (a key added after records
  // were published only when it is not at its default: ConfigOmittedAtDefault below).
  YAML::Node root = YAML::Load(text);
  size_t n = 0;
  for (const auto& k : pelab::config_schema()) {
    if (k.omitted_at_default) continue;
    EXPECT_TRUE(root[k.section][k.name].IsDefined()) << k.full_name();
    ++n;
  }
  size_t emitted = 0;
  for (auto s = root.begin(); s != root.end(); ++s) emitted += s->second.size();
  EXPECT_EQ(emitted, n);

  // A changed key makes the configs differ; the default config round-trips too.
  Config other = back;
  other.model.pe.set("rope_base", 1e6 + 1);
  EXPECT_NE(other, c);
  const Config d;
  EXPECT_EQ(pelab::load_config_string(pelab::config_to_yaml(d)), d);
  EXPECT_EQ(pelab::config_value_text(c, "pe.rope_base"), "1000000.0");
  EXPECT_EQ(pelab::config_value_text(c, "train.eps"), "1.0e-9");
  EXPECT_EQ(pelab::config_value_text(c, "task.test_lengths"), "[3, 300]");
  EXPECT_THROW(pelab::config_value_text(c, "model.nope"), ConfigError);
  EXPECT_THROW(pelab::config_value_text(c, "nope"), ConfigError);
}

TEST_F(ConfigTest, ConfigMarkdownReference) {
  const std::string md = pelab::config_reference_markdown();
  for (const auto& s : pelab::config_sections())
    EXPECT_TRUE(contains(md, "## `" + s.first + "`")) << s.first;
  std::set<std::string> seen;
  for (const auto& k : pelab::config_schema()) {
    EXPECT_TRUE(seen.insert(k.full_name()).second) << "duplicate key " << k.full_name();
    EXPECT_FALSE(k.doc.empty()) << k.full_name();
    // The key's row carries its type, default, allowed values / range and doc.
    const size_t row = md.find("| `" + k.full_name() + "` | ");
    ASSERT_NE(row, std::string::npos) << k.full_name();
    const std::string line = md.substr(row, md.find('\n', row) - row);
    EXPECT_TRUE(contains(line, std::string("| ") + pelab::config_type_name(k.type) + " |"))
        << line;
    EXPECT_TRUE(contains(line, "`" + k.default_text + "`")) << line;
    for (const auto& c : k.choices) EXPECT_TRUE(contains(line, "`" + c + "`")) << line;
    if (!k.range.empty()) {
      EXPECT_TRUE(contains(line, k.range.str())) << line;
    }
    EXPECT_TRUE(contains(line, k.doc.substr(0, 20))) << line;
  }
  EXPECT_GE(seen.size(), 80u);
  EXPECT_TRUE(contains(md, "| `model.dropout` | float | `0.0` | [0, 1) |"));
  EXPECT_TRUE(contains(md, "| `pe.rope_fraction` | float | `1.0` | (0, 1] |"));
  for (const auto& r : pelab::config_cross_field_rules()) EXPECT_TRUE(contains(md, "- " + r));
}

// A key added after run records were published (ConfigKey::omitted_at_default) must not change
// the resolved config of a run that does not set it: the config digest of every published record
// is computed from that text (train/study/compare_plan.cpp). Fault injected: emitting the key at
// its default (as every other key) makes the first expectation fail — and every record made
// before the key refused by --merge ("config digest ... is not that of its config.yaml").
TEST_F(ConfigTest, ConfigOmittedAtDefault) {
  const Config d;
  const std::string text = pelab::config_to_yaml(d);
  size_t flagged = 0;
  for (const auto& k : pelab::config_schema()) {
    if (!k.omitted_at_default) continue;
    ++flagged;
    EXPECT_FALSE(YAML::Load(text)[k.section][k.name].IsDefined()) << k.full_name();
  }
  EXPECT_GE(flagged, 1u);  // model.attention_length_scale
  // Set to another value it is written, and reads back.
  Config c = pelab::load_config_string("model: {attention_length_scale: ssmax}\n");
  EXPECT_EQ(c.model.attention_length_scale, "ssmax");
  const std::string t2 = pelab::config_to_yaml(c);
  EXPECT_EQ(YAML::Load(t2)["model"]["attention_length_scale"].as<std::string>(), "ssmax");
  EXPECT_EQ(pelab::load_config_string(t2), c);
  EXPECT_NE(c, d);
  // Written at its default in a file, it reads as the config without it: the same text.
  EXPECT_EQ(pelab::config_to_yaml(pelab::load_config_string("model: {attention_length_scale: off}\n")),
            text);
  // A run config written before the key existed (every other key, this one absent) round-trips
  // to the same text, hence the same digest.
  EXPECT_EQ(pelab::config_to_yaml(pelab::load_config_string(text)), text);
  // Bad values name the key.
  try {
    pelab::load_config_string("model: {attention_length_scale: log2}\n", "c.yaml");
    FAIL() << "log2 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention_length_scale"), std::string::npos)
        << e.what();
  }
}
