// pelab — the scheme registry as the one source of a scheme's config keys, rules and answers
// (issue 18 items 1-3): the config schema, validation, `--set`, the reference, compare's eval-time
// keys and the questions train/ asks (position limit, parameter count) all come from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/pelab.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/memory_estimate.h"
#include "train/model_from_config.h"

using namespace pelab;

namespace {

std::string load_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load_config_string(yaml, "c.yaml", sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const ConfigKey* schema_key(const std::string& full) {
  for (const auto& k : config_schema())
    if (k.full_name() == full) return &k;
  return nullptr;
}

std::shared_ptr<models::PositionalEncoding> dummy_factory(const models::PEConfig&,
                                                          const models::StackInfo&, Generator&) {
  return nullptr;
}

}  // namespace

TEST(SchemeRegistry, EveryRegistrationSucceeded) {
  // ModelRegistry.* in test_model.cpp registers "none" a second time on purpose (refused); every
  // other refusal is a scheme file whose declaration is malformed.
  for (const std::string& e : models::pe_registry_errors())
    EXPECT_EQ(e, "scheme none registered twice");
  EXPECT_GE(models::pe_names().size(), 7u);
}

// pe.scheme's allowed values and every scheme key come from the registry, with the scheme's own
// type, default, range, allowed values and doc line.
TEST(SchemeRegistry, ConfigSchemaHoldsEverySchemeKey) {
  const ConfigKey* scheme = schema_key("pe.scheme");
  ASSERT_NE(scheme, nullptr);
  EXPECT_EQ(scheme->choices, models::pe_names());
  const Config defaults;
  for (const models::PEKey* k : models::pe_keys()) {
    const ConfigKey* c = schema_key("pe." + k->name);
    ASSERT_NE(c, nullptr) << k->name;
    EXPECT_EQ(c->doc, k->doc);
    EXPECT_EQ(c->choices, k->choices);
    EXPECT_EQ(c->range.str().empty(), k->range.str().empty()) << k->name;
    EXPECT_EQ(c->default_text, config_value_text(defaults, "pe." + k->name));
    EXPECT_NE(config_reference_markdown().find("| `pe." + k->name + "` |"), std::string::npos);
  }
}

// A scheme key is read, range-checked with file:line, overridden by --set and typo-corrected like
// any other key.
TEST(SchemeRegistry, SchemeKeysLoadValidateAndSuggest) {
  const Config c = load_config_string("pe:\n  scheme: rope\n  rope_base: 500.0\n", "c.yaml",
                                      {"pe.shaw_k=5"});
  EXPECT_DOUBLE_EQ(c.model.pe.get_float("rope_base"), 500.0);
  EXPECT_EQ(c.model.pe.get_int("shaw_k"), 5);
  EXPECT_EQ(load_error("pe:\n  scheme: rope\n  rope_base: 0.5\n"),
            "c.yaml:3: pe.rope_base: 0.5 is out of range (1, inf)");
  EXPECT_EQ(load_error("pe:\n  rope_bse: 2.0\n"),
            "c.yaml:2: key 'pe.rope_bse' is not a valid key; did you mean 'pe.rope_base'?");
  EXPECT_EQ(load_error("", {"pe.rope_pairing=halff"}),
            "--set pe.rope_pairing=halff: pe.rope_pairing: 'halff' is not one of interleaved, "
            "half; did you mean 'half'?");
  // A scheme's cross-field rule names the line that set the key.
  EXPECT_EQ(load_error("pe:\n  scheme: shaw\n  shaw_keys: false\n  shaw_values: false\n"),
            "c.yaml:4: pe.scheme shaw needs pe.shaw_keys or pe.shaw_values to be true");
  // Round trip through YAML keeps the scheme keys.
  EXPECT_EQ(load_config_string(config_to_yaml(c)), c);
}

// pe.rope_base's range is declared once (rope.cpp, "(1, inf)") and every way in checks that
// declaration, each with one error naming the key: the config file (file:line), the model's
// validation, and make_pe for a scheme built without either (plot-pe, tests). Before, RoPE's
// constructor checked a hand copy ("pe.rope_base: must be > 1, got 0.5").
TEST(SchemeRegistry, RopeBaseRangeIsTheDeclaredOne) {
  EXPECT_EQ(load_error("pe:\n  scheme: rope\n  rope_base: 0.5\n"),
            "c.yaml:3: pe.rope_base: 0.5 is out of range (1, inf)");
  models::ModelConfig m;
  m.pe.scheme = "rope";
  m.pe.set("rope_base", 1.0);
  EXPECT_EQ(pelab::testing::error_of([&] { m.validate(); }),
            "pe.rope_base: 1 is out of range (1, inf)");
  Generator gen(0);
  models::StackInfo s;
  s.d_model = 16;
  s.heads = 2;
  EXPECT_EQ(pelab::testing::error_of([&] { models::make_pe(m.pe, s, gen); }),
            "pe.rope_base: 1 is out of range (1, inf)");
  m.pe.set("rope_base", 1.5);  // in range: built
  EXPECT_NE(models::make_pe(m.pe, s, gen), nullptr);
}

// The drift the issue names: the model's own validation and the config's agree because both read
// the scheme's declaration (the model accepted sinusoidal_base 0.5, the config refused it).
TEST(SchemeRegistry, ModelValidationUsesTheSchemesRanges) {
  models::ModelConfig m;
  m.pe.scheme = "sinusoidal";
  m.pe.set("sinusoidal_base", 0.5);
  EXPECT_NE(pelab::testing::error_of([&] { m.validate(); }).find("pe.sinusoidal_base: 0.5 is out of range (1, inf)"),
            std::string::npos);
  EXPECT_NE(load_error("pe:\n  sinusoidal_base: 0.5\n").find("out of range (1, inf)"),
            std::string::npos);
  m.pe.set("sinusoidal_base", 2.0);
  EXPECT_NO_THROW(m.validate());
  // The rules run in the model's validation too.
  m.pe.scheme = "shaw";
  m.pe.set("shaw_keys", false);
  m.pe.set("shaw_values", false);
  EXPECT_NE(pelab::testing::error_of([&] { m.validate(); }).find("pe.scheme shaw needs"), std::string::npos);
}

TEST(SchemeRegistry, TypedAccessRefusesUnknownKeysAndWrongTypes) {
  models::PEConfig p;
  EXPECT_NE(pelab::testing::error_of([&] { p.get_int("no_such_key"); }).find("no registered scheme declares"),
            std::string::npos);
  EXPECT_NE(pelab::testing::error_of([&] { p.get_int("rope_base"); }).find("is a float key"), std::string::npos);
  p.set("rope_scaling_factor", 2);  // an int literal for a float key
  EXPECT_DOUBLE_EQ(p.get_float("rope_scaling_factor"), 2.0);
  EXPECT_EQ(p.get_int("shaw_k"), 16);  // not set: the declared default
}

// Malformed declarations are refused at registration with a reason, not silently accepted.
TEST(SchemeRegistry, MalformedSchemesAreRefused) {
  using models::PEScheme;
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x.find(s) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("rope", dummy_factory)), "registered twice"));
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("x1", dummy_factory).key("shaw_k", 3, "", "d")),
                  "already declared by shaw"));
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("x2", dummy_factory).key("x2_a", 0.5, "[1, inf)", "d")),
                  "default 0.5 is out of range"));
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("x3", dummy_factory).key("x3_a", 1.0, "[1, oops)", "d")),
                  "bad range"));
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("x4", dummy_factory).key("x4_a", true, "a|b", "d")),
                  "allowed values on a non-string key"));
  EXPECT_TRUE(has(models::pe_scheme_problems(PEScheme("x5", nullptr)), "without a name or factory"));
  EXPECT_TRUE(models::pe_scheme_problems(PEScheme("x6", dummy_factory).key("x6_a", 2, "[1, inf)", "d"))
                  .empty());
}

// compare's eval-time keys and shorthand variants are the schemes' declarations.
TEST(SchemeRegistry, EvalTimeKeysAndVariantsComeFromTheSchemes) {
  for (const std::string& k : models::pe_eval_time_keys()) {
    const models::PEKey* key = models::find_pe_key(k.substr(3));
    ASSERT_NE(key, nullptr);
    EXPECT_TRUE(key->eval_time);
  }
  EXPECT_EQ(models::pe_variant_sets("pi"),
            (std::vector<std::string>{"pe.rope_scaling=pi", "pe.rope_scaling_factor=auto"}));
  EXPECT_TRUE(models::pe_variant_sets("none").empty());  // the default is no variant
  EXPECT_TRUE(models::pe_is_variant_factor_key("pe.rope_scaling_factor"));
  EXPECT_FALSE(models::pe_is_variant_factor_key("pe.rope_base"));
}

// The memory estimate asks each scheme for its parameter count: it equals the parameters the
// built model holds under <stack>.pe. for every registered scheme, both architectures.
TEST(SchemeRegistry, ParameterCountOfEverySchemeMatchesTheModel) {
  for (const std::string& scheme : models::pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Config cfg;
      cfg.task.formulation = arch;
      cfg.model.arch = arch;
      cfg.model.d_model = 16;
      cfg.model.heads = 2;
      cfg.model.d_ff = 16;
      cfg.model.pe.scheme = scheme;
      cfg.model.pe.set("max_positions", 40);
      cfg.model.pe.set("t5_per_layer", true);
      cfg.model.pe.set("shaw_per_head", true);
      models::Transformer model(to_model_config(cfg, 12, 20));
      int64_t pe_params = 0;
      for (const auto& p : model.named_parameters())
        if (p.first.find(".pe.") != std::string::npos) pe_params += p.second.numel();
      const MemoryEstimate e = estimate_memory(cfg, 12, 20);
      EXPECT_DOUBLE_EQ(e.pe_bytes / 4, static_cast<double>(pe_params)) << scheme << " " << arch;
      EXPECT_DOUBLE_EQ(e.parameters, static_cast<double>(model.num_parameters())) << scheme << " " << arch;
    }
  }
}

// A scheme's position limit is the scheme's answer, and the config rule uses it: learned's table
// and xpos's float32 range (models/pe/xpos.cpp) are limited; others have none.
TEST(SchemeRegistry, PositionLimitIsAskedOfTheScheme) {
  std::set<std::string> limited;
  for (const std::string& scheme : models::pe_names()) {
    models::PEConfig p;
    p.scheme = scheme;
    p.set("max_positions", 12);
    const int64_t limit = models::pe_max_positions(p);
    if (limit == 0) continue;
    limited.insert(scheme);
    const std::string name = models::pe_max_positions_name(p);
    if (scheme == "learned") {
      EXPECT_EQ(limit, 12);
      EXPECT_EQ(name, "pe.max_positions");
    }
    // Training sequences of `limit` task symbols need more than `limit` positions.
    const std::string e = load_error("task:\n  train_max_len: " + std::to_string(limit) +
                                     "\npe:\n  scheme: " + scheme + "\n  max_positions: 12\n");
    EXPECT_NE(e.find(name + " (" + std::to_string(limit) + ") must be >= "), std::string::npos) << e;
  }
  EXPECT_EQ(limited, (std::set<std::string>{"learned", "xpos"}));
}
