// pelab — run configuration as YAML (train/config.h): reading a file or text with line-numbered
// errors, `--set` overrides, re-validation, and writing a config back as YAML.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config.h"
#include "train/config_internal.h"

namespace pelab {
namespace config_detail {

[[noreturn]] void fail(const std::string& where, const std::string& msg) {
  throw ConfigError(where.empty() ? msg : where + ": " + msg);
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "'" + n.Scalar() + "'";
}

// ---------------- value parsing ----------------

bool parse_int(const std::string& s0, int64_t& out) {
  std::string s = trim(s0);
  if (s.empty()) return false;
  size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  out = v;
  return true;
}

bool parse_float(const std::string& s0, double& out) {
  std::string s = trim(s0);
  if (s.empty()) return false;
  for (char c : s)  // no hex floats, inf or nan
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.' ||
          c == 'e' || c == 'E'))
      return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
  out = v;
  return true;
}

bool parse_bool(const std::string& s, bool& out) {
  static const std::set<std::string> t = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
                                          "ON"};
  static const std::set<std::string> f = {"false", "False", "FALSE", "no",  "No", "NO",
                                          "off",   "Off",   "OFF"};
  if (t.count(s)) return out = true, true;
  if (f.count(s)) return out = false, true;
  return false;
}

bool in_range(double v, const ConfigRange& r) {
  if (r.has_min && (r.min_exclusive ? !(v > r.min) : !(v >= r.min))) return false;
  if (r.has_max && (r.max_exclusive ? !(v < r.max) : !(v <= r.max))) return false;
  return true;
}

namespace {

std::string choices_text(const std::vector<std::string>& c) { return join(c, ", "); }

template <class T>
int64_t get_int(const YAML::Node& n, const std::string& what, const ConfigRange& r,
                const std::string& where) {
  int64_t v = 0;
  if (!n.IsScalar()) fail(where, what + ": expected an integer, got " + describe(n));
  if (!parse_int(n.Scalar(), v)) {
    double d;
    if (parse_float(n.Scalar(), d) && std::fabs(d) < 9e18 && d == std::floor(d) &&
        n.Scalar().find_first_of(".") != std::string::npos)
      fail(where, what + ": expected an integer, got '" + n.Scalar() + "' (write it without '.')");
    fail(where, what + ": expected an integer, got '" + n.Scalar() + "'");
  }
  if (!in_range(static_cast<double>(v), r))
    fail(where, what + ": " + std::to_string(v) + " is out of range " + r.str());
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      v > static_cast<int64_t>(std::numeric_limits<T>::max()))
    fail(where, what + ": " + std::to_string(v) + " does not fit in a " +
                    std::to_string(8 * sizeof(T)) + "-bit integer");
  return v;
}

}  // namespace

template <class T>
void parse_into(T& out, const YAML::Node& n, const ConfigKey& k, const Ctx& c) {
  const std::string what = k.full_name();
  const std::string where = c.at(n);
  if constexpr (std::is_same<T, bool>::value) {
    bool v = false;
    if (!n.IsScalar() || !parse_bool(n.Scalar(), v))
      fail(where, what + ": expected true or false, got " + describe(n));
    out = v;
  } else if constexpr (is_int_type<T>::value) {
    out = static_cast<T>(get_int<T>(n, what, k.range, where));
  } else if constexpr (std::is_same<T, double>::value) {
    double v = 0;
    if (!n.IsScalar()) fail(where, what + ": expected a number, got " + describe(n));
    if (!parse_float(n.Scalar(), v))
      fail(where, what + ": expected a finite number, got '" + n.Scalar() + "'");
    if (!in_range(v, k.range))
      fail(where, what + ": " + trim(n.Scalar()) + " is out of range " + k.range.str());
    out = v;
  } else if constexpr (std::is_same<T, std::string>::value) {
    std::string v;
    if (n.IsScalar())
      v = n.Scalar();
    else if (!n.IsNull())
      fail(where, what + ": expected a string, got " + describe(n));
    if (k.type == ConfigType::Enum &&
        std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end()) {
      std::string msg = what + ": '" + v + "' is not one of " + choices_text(k.choices);
      std::string near = nearest_name(v, k.choices);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      fail(where, msg);
    }
    out = v;
  } else if constexpr (std::is_same<T, std::vector<int>>::value) {
    std::vector<int> v;
    if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) {
        const YAML::Node e = n[i];
        std::string ew = c.prefix.empty() && e.Mark().line >= 0 ? c.at(e) : where;
        v.push_back(static_cast<int>(
            get_int<int>(e, what + "[" + std::to_string(i) + "]", k.range, ew)));
      }
    } else if (!n.IsNull()) {
      fail(where, what + ": expected a list of integers like [8, 16], got " + describe(n));
    }
    out = v;
  } else if constexpr (std::is_same<T, std::vector<std::string>>::value) {
    std::vector<std::string> v;
    if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) {
        const YAML::Node e = n[i];
        if (!e.IsScalar())
          fail(c.at(e), what + "[" + std::to_string(i) + "]: expected a string, got " +
                            describe(e));
        v.push_back(e.Scalar());
      }
    } else if (!n.IsNull()) {
      fail(where, what + ": expected a list of strings like [a, b], got " + describe(n));
    }
    out = v;
  } else if constexpr (std::is_same<T, std::map<std::string, std::string>>::value) {
    std::map<std::string, std::string> v;
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar() || !it->second.IsScalar())
          fail(c.at(it->first), what + ": expected name: value pairs of plain values");
        v[it->first.Scalar()] = it->second.Scalar();
      }
    } else if (!n.IsNull()) {
      fail(where, what + ": expected a mapping like {a: b}, got " + describe(n));
    }
    out = v;
  } else if constexpr (std::is_same<T, StopWhen>::value) {
    out = parse_stop_when(n, what, c);
  } else {
    static_assert(sizeof(T) == 0, "unsupported config field type");
  }
}

template <class T>
void emit_value(YAML::Emitter& e, const T& v) {
  if constexpr (std::is_same<T, bool>::value) {
    e << (v ? "true" : "false");
  } else if constexpr (is_int_type<T>::value) {
    e << static_cast<long long>(v);
  } else if constexpr (std::is_same<T, double>::value) {
    e << fmt_float_yaml(v);
  } else if constexpr (std::is_same<T, std::string>::value) {
    e << v;
  } else if constexpr (std::is_same<T, std::vector<int>>::value ||
                       std::is_same<T, std::vector<std::string>>::value) {
    e << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) e << x;
    e << YAML::EndSeq;
  } else if constexpr (std::is_same<T, StopWhen>::value) {
    emit_stop_when(e, v);
  } else {
    e << YAML::Flow << YAML::BeginMap;
    for (const auto& kv : v) e << YAML::Key << kv.first << YAML::Value << kv.second;
    e << YAML::EndMap;
  }
}

// The member types of the config structs (train/config.h) that the schema table reads and writes.
#define PELAB_CONFIG_VALUE_TYPE(T)                                                  \
  template void parse_into<T>(T&, const YAML::Node&, const ConfigKey&, const Ctx&); \
  template void emit_value<T>(YAML::Emitter&, const T&);
PELAB_CONFIG_VALUE_TYPE(bool)
PELAB_CONFIG_VALUE_TYPE(int)
PELAB_CONFIG_VALUE_TYPE(int64_t)
PELAB_CONFIG_VALUE_TYPE(double)
PELAB_CONFIG_VALUE_TYPE(std::string)
PELAB_CONFIG_VALUE_TYPE(std::vector<int>)
PELAB_CONFIG_VALUE_TYPE(std::vector<std::string>)
PELAB_CONFIG_VALUE_TYPE(StopWhen)
using StringMap = std::map<std::string, std::string>;
PELAB_CONFIG_VALUE_TYPE(StringMap)
#undef PELAB_CONFIG_VALUE_TYPE

std::string emit_text(const Entry& e, const Config& c) {
  YAML::Emitter em;
  e.emit(c, em);
  return em.c_str();
}

namespace {

// ---------------- loading ----------------

// Where each key was set: 0-based line in the file, or -2 for --set. Absent = default.
using Origins = std::map<std::string, int>;
constexpr int kFromSet = -2;
// TaskConfig::data_revision as a resolved config records it (not a key: no --set, no reference).
constexpr const char* kDataRevisionKey = "task.data_revision";

void check_rules(const Config& c, const std::string& source, const Origins& origins) {
  for (const auto& rule : rules()) {
    Violation v = rule.check(c);
    if (v.msg.empty()) continue;
    int line = -1;
    std::vector<std::string> from_set;
    for (const auto& k : v.keys) {
      auto it = origins.find(k);
      if (it == origins.end()) continue;
      if (it->second == kFromSet)
        from_set.push_back(k);
      else
        line = std::max(line, it->second);
    }
    std::string where = source;
    if (line >= 0) where += ":" + std::to_string(line + 1);
    std::string msg = v.msg;
    if (!from_set.empty()) msg += " (" + join(from_set, ", ") + " from --set)";
    fail(where, msg);
  }
}

void apply_one_override(Config& cfg, const std::string& arg, Origins& origins) {
  const std::string where = "--set " + arg;
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) fail(where, "expected section.key=value");
  const std::string full = trim(arg.substr(0, eq)), value = arg.substr(eq + 1);
  const size_t dot = full.find('.');
  if (dot == std::string::npos) {
    std::string msg = "'" + full + "' needs a section: write section.key=value";
    for (const auto& e : entries())
      if (e.key.name == full) {
        msg += "; did you mean '" + e.key.full_name() + "'?";
        break;
      }
    fail(where, msg);
  }
  const std::string section = full.substr(0, dot), name = full.substr(dot + 1);
  if (!is_section(section)) fail(where, unknown_section_msg(section));
  const Entry* e = find_entry(section, name);
  if (!e) fail(where, unknown_key_msg(section, name));
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::Exception& ex) {
    fail(where, "value '" + value + "' is not valid YAML: " + ex.msg);
  }
  Ctx ctx;
  ctx.prefix = where;
  e->set(cfg, node, ctx);
  origins[full] = kFromSet;
}

Config load_node(const YAML::Node& root, const std::string& file,
                 const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source = file;
  Origins origins;
  Ctx ctx;
  ctx.file = file;
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap())
      fail(ctx.at(root), "expected a mapping of sections (" + join(section_names(), ", ") +
                             ") at the top level, got " + describe(root));
    std::map<std::string, int> seen_sections;
    for (auto sit = root.begin(); sit != root.end(); ++sit) {
      const YAML::Node sk = sit->first;
      const YAML::Node sv = sit->second;
      const int sline = sk.Mark().line;
      ctx.key_line = sline;
      if (!sk.IsScalar()) fail(ctx.at(sk), "section names must be plain words, got " + describe(sk));
      const std::string section = sk.Scalar();
      if (!is_section(section)) fail(ctx.at(sk), unknown_section_msg(section));
      if (seen_sections.count(section))
        fail(ctx.at(sk), "section '" + section + "' appears twice (first at line " +
                             std::to_string(seen_sections[section] + 1) + ")");
      seen_sections[section] = sline;
      if (sv.IsNull()) continue;  // "model:" with nothing under it
      if (!sv.IsMap())
        fail(ctx.at(sv), "section '" + section + "' must be a mapping of keys, got " + describe(sv));
      for (auto kit = sv.begin(); kit != sv.end(); ++kit) {
        const YAML::Node kk = kit->first;
        ctx.key_line = kk.Mark().line;
        if (!kk.IsScalar())
          fail(ctx.at(kk), "keys in '" + section + "' must be plain words, got " + describe(kk));
        const std::string name = kk.Scalar(), full = section + "." + name;
        const Entry* e = find_entry(section, name);
        if (!e && full == kDataRevisionKey) {  // what pelab recorded in a run's resolved config
          if (origins.count(full))
            fail(ctx.at(kk), "key '" + full + "' appears twice (first at line " +
                                 std::to_string(origins[full] + 1) + ")");
          ConfigRange r;
          r.has_min = true;
          r.min = 1;
          cfg.task.data_revision =
              static_cast<int>(get_int<int>(kit->second, full, r, ctx.at(kit->second)));
          origins[full] = kk.Mark().line;
          continue;
        }
        if (!e) fail(ctx.at(kk), unknown_key_msg(section, name));
        if (origins.count(full))
          fail(ctx.at(kk), "key '" + full + "' appears twice (first at line " +
                               std::to_string(origins[full] + 1) + ")");
        e->set(cfg, kit->second, ctx);
        origins[full] = kk.Mark().line;
      }
    }
  }
  for (const auto& o : overrides) apply_one_override(cfg, o, origins);
  check_rules(cfg, file, origins);
  return cfg;
}

YAML::Node parse_text(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& ex) {
    std::string where = source;
    if (!ex.mark.is_null() && ex.mark.line >= 0) where += ":" + std::to_string(ex.mark.line + 1);
    fail(where, "YAML syntax error: " + ex.msg);
  } catch (const YAML::Exception& ex) {
    fail(source, "YAML error: " + ex.msg);
  }
  if (docs.size() > 1) {
    const int line = docs[1].Mark().line;
    std::string where = source;
    if (line >= 0) where += ":" + std::to_string(line + 1);
    // Without a "---" after some content, yaml-cpp started the second document because a line is
    // indented less than the first one: that is an indentation mistake, not a second document.
    bool content = false, separator = false;
    std::string l;
    std::istringstream in(text);
    for (int i = 0; i <= line && std::getline(in, l); ++i) {
      const std::string t = trim(l);
      if (t.rfind("---", 0) == 0 || t.rfind("...", 0) == 0)
        separator = separator || content;
      else if (!t.empty() && t[0] != '#' && t[0] != '%')
        content = true;
    }
    if (line >= 0 && !separator)
      fail(where, "YAML syntax error: this line is indented differently from the lines above");
    fail(where, "expected one YAML document, found " + std::to_string(docs.size()));
  }
  return docs.empty() ? YAML::Node() : docs[0];
}

Config load_text(const std::string& text, const std::string& source,
                 const std::vector<std::string>& overrides) {
  return load_node(parse_text(text, source), source, overrides);
}

}  // namespace
}  // namespace config_detail
using namespace config_detail;

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": cannot open config file (it is a directory)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  Config cfg = load_text(ss.str(), path, overrides);
  if (cfg.train.run_name.empty()) cfg.train.run_name = derive_run_name(path);
  return cfg;
}

Config load_config_string(const std::string& yaml, const std::string& source,
                          const std::vector<std::string>& overrides) {
  return load_text(yaml, source, overrides);
}

YAML::Node parse_config_yaml(const std::string& yaml, const std::string& source) {
  return parse_text(yaml, source);
}

Config load_config_node(const YAML::Node& root, const std::string& source,
                        const std::vector<std::string>& overrides) {
  return load_node(root, source, overrides);
}

void apply_overrides(Config& cfg, const std::vector<std::string>& overrides) {
  Config tmp = cfg;
  Origins origins;
  for (const auto& o : overrides) apply_one_override(tmp, o, origins);
  check_rules(tmp, cfg.source.empty() ? "config" : cfg.source, origins);
  cfg = tmp;
}

void validate_config(const Config& cfg) {
  Ctx ctx;
  ctx.prefix = cfg.source.empty() ? "config" : cfg.source;
  Config scratch;
  for (const auto& e : entries()) {
    // Re-read every value through its parser: one code path for ranges and allowed values.
    e.set(scratch, YAML::Load(emit_text(e, cfg)), ctx);
  }
  check_rules(cfg, ctx.prefix, {});
}

std::string config_to_yaml(const Config& cfg, bool with_docs) {
  YAML::Emitter em;
  em << YAML::BeginMap;
  for (const auto& sec : config_sections()) {
    em << YAML::Key << sec.first << YAML::Value << YAML::BeginMap;
    for (const auto& e : entries()) {
      if (e.key.section != sec.first) continue;
      if (e.key.omitted_at_default && emit_text(e, cfg) == e.key.default_text) continue;
      em << YAML::Key << e.key.name << YAML::Value;
      e.emit(cfg, em);
      if (with_docs) em << YAML::Comment(e.key.doc);
    }
    // Only where it is not 1: the configs of runs on data that never changed read as before.
    if (sec.first == "task" && cfg.task.data_revision != 1) {
      em << YAML::Key << "data_revision" << YAML::Value << cfg.task.data_revision;
      if (with_docs)
        em << YAML::Comment("the revision of the task's examples this run trained on, recorded by "
                            "pelab (docs/experiments.md, \"Data revisions\")");
    }
    em << YAML::EndMap;
  }
  em << YAML::EndMap;
  if (!em.good()) throw ConfigError("config: cannot serialise to YAML: " + em.GetLastError());
  return "# pelab resolved config: every key, defaults filled in\n" + std::string(em.c_str()) +
         "\n";
}

std::string config_value_text(const Config& cfg, const std::string& full_key) {
  const size_t dot = full_key.find('.');
  const std::string section = full_key.substr(0, dot);
  if (dot == std::string::npos || !is_section(section))
    throw ConfigError(full_key + ": " + (dot == std::string::npos
                                             ? std::string("expected section.key")
                                             : unknown_section_msg(section)));
  const std::string name = full_key.substr(dot + 1);
  const Entry* e = find_entry(section, name);
  if (!e) throw ConfigError(unknown_key_msg(section, name));
  return emit_text(*e, cfg);
}

}  // namespace pelab
