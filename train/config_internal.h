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

namespace pelab::config_detail {

// config.cpp: for docs and messages ("0.5", "1e-9", "10000"); for YAML output, always
// recognisably a float ("1.0", "1.0e-9").
std::string fmt_num(double v);
std::string fmt_float_yaml(double v);

// ---------------- where an error is ----------------

struct Ctx {
  std::string file;     // file name, or "" in --set / validate mode
  std::string prefix;   // used instead of file:line when non-empty ("--set a.b=c", "config")
  int key_line = -1;    // 0-based line of the key, for values without a mark (empty values)
  std::string at(const YAML::Node& n) const {
    if (!prefix.empty()) return prefix;
    int line = key_line;
    if (n.IsDefined() && !n.IsNull() && n.Mark().line >= 0) line = n.Mark().line;
    return line >= 0 ? file + ":" + std::to_string(line + 1) : file;
  }
};

// config_yaml.cpp: throws ConfigError "where: msg"; an error's text for a node ("a list", '5').
[[noreturn]] void fail(const std::string& where, const std::string& msg);
std::string describe(const YAML::Node& n);
// A number as config files write it; false when it is not one (or not finite).
bool parse_int(const std::string& s0, int64_t& out);
bool parse_float(const std::string& s0, double& out);
bool parse_bool(const std::string& s, bool& out);
bool in_range(double v, const ConfigRange& r);

template <class T>
struct is_int_type
    : std::integral_constant<bool, std::is_integral<T>::value && !std::is_same<T, bool>::value> {};

// Reads one key's value into a config member, checked against the key (type, range, choices);
// writes a member as YAML. Instantiated in config_yaml.cpp for the member types of Config.
template <class T>
void parse_into(T& out, const YAML::Node& n, const ConfigKey& k, const Ctx& c);
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
