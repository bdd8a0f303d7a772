// pelab — run configuration (train/config.h): the number formats shared by the config files, the
// batch-length policy, config equality, head_dim and the run name. The rest is
// split by concern: config_schema.cpp (the key table), config_rules.cpp (cross-field rules), config_yaml.cpp
// (YAML reading with file:line errors, --set, writing) and config_reference.cpp (docs/config.md).
#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>

#include "train/config_internal.h"

namespace pelab {
namespace {

// ---------------- small helpers ----------------

// Shortest text that parses back to exactly `v`: "0.1", "1e-09", "1000000" (fixed notation for
// exponents -4..15, like %g but without switching to "1e+06" for round numbers).
std::string shortest(double v) {
  char buf[64];
  int p = 1;
  for (; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  const char* e = std::strchr(buf, 'e');
  if (e) {
    const int exp = std::atoi(e + 1);
    if (exp >= -4 && exp <= 15) {
      std::snprintf(buf, sizeof buf, "%.*f", std::max(0, p - 1 - exp), v);
    }
  }
  return buf;
}

// Splits "1e-09" into mantissa "1" and exponent "-9" (exponent "" when there is none).
void split_exp(const std::string& s, std::string& mant, std::string& exp) {
  size_t e = s.find_first_of("eE");
  mant = s.substr(0, e);
  exp.clear();
  if (e == std::string::npos) return;
  std::string x = s.substr(e + 1);
  char sign = '+';
  if (!x.empty() && (x[0] == '+' || x[0] == '-')) sign = x[0], x = x.substr(1);
  x.erase(0, std::min(x.find_first_not_of('0'), x.size() - 1));
  exp = std::string(1, sign) + x;
}

}  // namespace

namespace config_detail {

// For docs and messages: "0.5", "1e-9", "10000".
std::string fmt_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string mant, exp;
  split_exp(shortest(v), mant, exp);
  if (exp.empty()) return mant;
  return mant + "e" + (exp[0] == '-' ? exp : exp.substr(1));
}

// For YAML output: always recognisably a float, also to YAML 1.1 readers ("1.0", "1.0e-9").
std::string fmt_float_yaml(double v) {
  std::string mant, exp;
  split_exp(shortest(v), mant, exp);
  if (mant.find('.') == std::string::npos) mant += ".0";
  return exp.empty() ? mant : mant + "e" + exp;
}

}  // namespace config_detail
using namespace config_detail;

bool one_length_batches(const Config& c) {
  if (c.task.name == "lm") return false;
  return c.train.batch_lengths == "one" ||
         (c.train.batch_lengths == "auto" && c.model.pe.randomized_positions);
}

std::string mixed_randomized_batches(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return "";  // not a config: the caller's own parse reports it
  }
  if (!root.IsMap()) return "";
  const YAML::Node train = root["train"], pe = root["pe"], task = root["task"];
  if (train.IsMap() && train["batch_lengths"]) return "";
  if (!pe.IsMap() || !pe["randomized_positions"] || !pe["randomized_positions"].IsScalar() ||
      pe["randomized_positions"].Scalar() != "true")
    return "";
  if (task.IsMap() && task["name"] && task["name"].IsScalar() && task["name"].Scalar() == "lm")
    return "";
  return "trained with pe.randomized_positions on mixed-length batches by a pelab from before "
         "train.batch_lengths (its config has no train.batch_lengths); randomized positions now "
         "train on one-length batches (docs/training.md)";
}

// ---------------- public API ----------------

bool operator==(const Config& a, const Config& b) {
  for (const auto& e : entries())
    if (emit_text(e, a) != emit_text(e, b)) return false;
  return true;
}
bool operator!=(const Config& a, const Config& b) { return !(a == b); }

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << config_to_yaml(c); }

int head_dim(const Config& cfg) {
  if (cfg.model.heads <= 0 || cfg.model.d_model % cfg.model.heads != 0)
    throw ConfigError("config: model.d_model (" + std::to_string(cfg.model.d_model) +
                      ") must be divisible by model.heads (" + std::to_string(cfg.model.heads) +
                      ")");
  return cfg.model.d_model / cfg.model.heads;
}

std::string derive_run_name(const std::string& config_path) {
  std::string stem = std::filesystem::path(config_path).stem().string();
  return stem.empty() || stem == "." || stem == ".." ? "run" : stem;
}

}  // namespace pelab
