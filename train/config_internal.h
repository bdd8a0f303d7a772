// pelab — what the config files (train/config*.cpp) share and nothing else includes: where an
// error is (Ctx), the schema table's rows (Entry), the cross-field rules (Rule), the typed value
// readers and writers, and the number formats.
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "train/config.h"
#include "train/config_schema.h"

namespace pelab::config_detail {

// config.cpp: for docs and messages ("0.5", "1e-9", "10000"); for YAML output, always
// recognisably a float ("1.0", "1.0e-9").
std::string fmt_num(double v);
std::string fmt_float_yaml(double v);

// Ctx, fail, parse_into, type_of, make_key: train/config_schema.h (shared with the sections above).
// config_yaml.cpp: an error's text for a node ("a list", '5').
std::string describe(const YAML::Node& n);
// A number as config files write it; false when it is not one (or not finite).
bool parse_int(const std::string& s0, int64_t& out);
bool parse_float(const std::string& s0, double& out);
bool parse_bool(const std::string& s, bool& out);
bool in_range(double v, const ConfigRange& r);

// Writes a member as YAML. Instantiated in config_yaml.cpp for the member types of Config.
template <class T>
void emit_value(YAML::Emitter& e, const T& v);

// config_schema.cpp: one row of the schema table.
struct Entry {
  ConfigKey key;
  std::function<void(Config&, const YAML::Node&, const Ctx&)> set;
  std::function<void(const Config&, YAML::Emitter&)> emit;
};
const std::vector<Entry>& entries();
const Entry* find_entry(const std::string& section, const std::string& name);
std::vector<std::string> section_names();
bool is_section(const std::string& s);
std::string unknown_section_msg(const std::string& s);
std::string unknown_key_msg(const std::string& section, const std::string& name);
// config_yaml.cpp: a key's value as YAML text.
std::string emit_text(const Entry& e, const Config& c);

// config_rules.cpp: the cross-field rules.
struct Violation {
  std::string msg;                // empty = no violation
  std::vector<std::string> keys;  // keys involved, for locating the error
};

struct Rule {
  std::string doc;
  std::function<Violation(const Config&)> check;
};
const std::vector<Rule>& rules();

}  // namespace pelab::config_detail
