// pelab — run configuration: the schema table, YAML loading with line-numbered errors,
// `--set` overrides, cross-field rules, YAML serialisation and the markdown key reference.
#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "data/batch.h"
#include "data/tasks.h"
#include "models/pe/pe.h"
#include "pelab/error.h"
#include "pelab/strings.h"

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

std::string choices_text(const std::vector<std::string>& c) { return join(c, ", "); }

template <class T>
struct is_int_type
    : std::integral_constant<bool, std::is_integral<T>::value && !std::is_same<T, bool>::value> {};

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

// The sub-keys of train.stop_when, in the order they are written and documented.
const std::vector<std::string>& stop_when_fields() {
  static const std::vector<std::string> f = {"metric",    "split",    "at_least",  "at_most",
                                                "min_delta", "patience", "per_length",
                                                "stop"};
  return f;
}

// train.stop_when: {} / empty = off, else a mapping of the sub-keys above. Errors name the line
// of the offending sub-key.
StopWhen parse_stop_when(const YAML::Node& n, const std::string& what, const Ctx& c) {
  StopWhen sw;
  const std::string where = c.at(n);
  if (n.IsNull() || !n.IsDefined()) return sw;
  if (!n.IsMap())
    fail(where, what + ": expected a mapping like {metric: exact_match, split: valid, "
                       "at_least: 0.99, patience: 2}, got " + describe(n));
  if (n.size() == 0) return sw;
  std::map<std::string, YAML::Node> sub;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node k = it->first;
    if (!k.IsScalar()) fail(c.at(k), what + ": sub-keys must be plain words, got " + describe(k));
    const std::string name = k.Scalar();
    const auto& f = stop_when_fields();
    if (std::find(f.begin(), f.end(), name) == f.end()) {
      std::string msg = what + ": unknown sub-key '" + name + "'";
      const std::string near = nearest_name(name, f);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      fail(c.at(k), msg + " (sub-keys: " + join(f, ", ") + ")");
    }
    if (sub.count(name)) fail(c.at(k), what + "." + name + " appears twice");
    sub[name] = it->second;
    if (it->second.IsNull() || !it->second.IsScalar())
      fail(c.at(it->second.IsNull() ? k : it->second),
           what + "." + name + ": expected a plain value, got " + describe(it->second));
  }
  auto at = [&](const std::string& name) { return c.at(sub.at(name)); };
  // metric
  static const std::vector<std::string> metrics = {"exact_match", "token_accuracy", "loss",
                                                   "perplexity"};
  if (!sub.count("metric"))
    fail(where, what + ": metric is missing (one of " + join(metrics, ", ") + ")");
  sw.metric = sub.at("metric").Scalar();
  if (std::find(metrics.begin(), metrics.end(), sw.metric) == metrics.end()) {
    std::string msg = what + ".metric: '" + sw.metric + "' is not one of " + join(metrics, ", ");
    const std::string near = nearest_name(sw.metric, metrics);
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    fail(at("metric"), msg);
  }
  // split: only the validation split may decide when to stop.
  if (sub.count("split")) {
    const std::string split = sub.at("split").Scalar();
    if (lower(split).rfind("test", 0) == 0)
      fail(at("split"), what + ".split: '" + split +
                            "' is a test split; selecting on test data is forbidden (use valid)");
    if (split != "valid")
      fail(at("split"), what + ".split: unknown split '" + split +
                            "'; the only split a criterion can use is valid");
    sw.split = split;
  }
  // criterion: exactly one of at_least / at_most (a threshold, in the metric's direction) and
  // min_delta (a plateau, either direction).
  const bool higher = sw.higher();
  const bool least = sub.count("at_least") > 0, most = sub.count("at_most") > 0,
             delta = sub.count("min_delta") > 0;
  if (least + most + delta > 1) {
    std::vector<std::string> given;
    for (const char* k : {"at_least", "at_most", "min_delta"})
      if (sub.count(k)) given.push_back(k);
    fail(at(given.back()), what + ": give one of at_least / at_most / min_delta, not " +
                               join(given, " and "));
  }
  if (!least && !most && !delta)
    fail(where, what + ": a criterion is missing: " +
                    (higher ? "at_least: X (" + sw.metric + " is higher-is-better)"
                            : "at_most: X (" + sw.metric + " is lower-is-better)") +
                    " or min_delta: R (stop on a plateau: improvement below R relative)");
  const std::string tk = least ? "at_least" : most ? "at_most" : "min_delta";
  if (!delta && least != higher)
    fail(at(tk), what + "." + tk + ": " + sw.metric + " is " +
                     (higher ? "higher" : "lower") + "-is-better; write " +
                     (higher ? "at_least" : "at_most") + " instead");
  double thr = 0;
  if (!parse_float(sub.at(tk).Scalar(), thr))
    fail(at(tk), what + "." + tk + ": expected a finite number, got " + describe(sub.at(tk)));
  ConfigRange r;
  if (delta) {
    r.has_min = r.has_max = r.min_exclusive = r.max_exclusive = true;
    r.min = 0, r.max = 1;
    if (!in_range(thr, r))
      fail(at(tk), what + ".min_delta: " + fmt_num(thr) + " is out of range " + r.str() +
                       " (a relative improvement: 0.01 = 1 %)");
    sw.min_delta = thr;
  } else {
    r.has_min = true;
    r.min = sw.metric == "perplexity" ? 1 : 0;
    if (higher) r.has_max = true, r.max = 1;
    if (!in_range(thr, r))
      fail(at(tk), what + "." + tk + ": " + fmt_num(thr) + " is out of range " + r.str() +
                       " for " + sw.metric);
    (least ? sw.at_least : sw.at_most) = thr;
  }
  // patience
  if (sub.count("patience")) {
    ConfigRange pr;
    pr.has_min = true, pr.min = 1;
    sw.patience = static_cast<int>(
        get_int<int>(sub.at("patience"), what + ".patience", pr, at("patience")));
  }
  // per_length: the threshold holds at every task length of the validation split.
  if (sub.count("per_length")) {
    if (!parse_bool(sub.at("per_length").Scalar(), sw.per_length))
      fail(at("per_length"),
           what + ".per_length: expected true or false, got " + describe(sub.at("per_length")));
    if (sw.per_length && (delta || sw.metric != "exact_match"))
      fail(at("per_length"), what + ".per_length: only a threshold on exact_match is scored per "
                                    "length (got " + sw.metric + (delta ? " with min_delta" : "") +
                                    "); use {metric: exact_match, at_least: X, per_length: true}");
  }
  // stop: whether meeting the criterion ends training (false: record the step, train on).
  if (sub.count("stop") && !parse_bool(sub.at("stop").Scalar(), sw.stop))
    fail(at("stop"), what + ".stop: expected true or false, got " + describe(sub.at("stop")));
  return sw;
}

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
    e << YAML::Flow << YAML::BeginMap;
    if (v.enabled()) {
      e << YAML::Key << "metric" << YAML::Value << v.metric;
      e << YAML::Key << "split" << YAML::Value << v.split;
      if (v.plateau())
        e << YAML::Key << "min_delta" << YAML::Value << fmt_float_yaml(v.min_delta);
      else
        e << YAML::Key << (v.higher() ? "at_least" : "at_most") << YAML::Value
          << fmt_float_yaml(v.threshold());
      e << YAML::Key << "patience" << YAML::Value << v.patience;
      if (v.per_length) e << YAML::Key << "per_length" << YAML::Value << true;
      if (!v.stop) e << YAML::Key << "stop" << YAML::Value << false;  // written only when off
    }
    e << YAML::EndMap;
  } else {
    e << YAML::Flow << YAML::BeginMap;
    for (const auto& kv : v) e << YAML::Key << kv.first << YAML::Value << kv.second;
    e << YAML::EndMap;
  }
}

template <class T>
ConfigType type_of(bool has_choices) {
  if constexpr (std::is_same<T, bool>::value) return ConfigType::Bool;
  if constexpr (is_int_type<T>::value) return ConfigType::Int;
  if constexpr (std::is_same<T, double>::value) return ConfigType::Float;
  if constexpr (std::is_same<T, std::string>::value)
    return has_choices ? ConfigType::Enum : ConfigType::String;
  if constexpr (std::is_same<T, std::vector<int>>::value) return ConfigType::IntList;
  if constexpr (std::is_same<T, std::vector<std::string>>::value) return ConfigType::StringList;
  return ConfigType::Map;
}

// "[0, 1)", "(0, inf)", "[2, 65536]".
ConfigRange parse_interval(const std::string& spec) {
  auto bad = [&]() -> ConfigRange {
    throw std::logic_error("config schema: bad interval '" + spec + "'");
  };
  std::string s = trim(spec);
  if (s.size() < 5 || (s.front() != '[' && s.front() != '(') ||
      (s.back() != ']' && s.back() != ')'))
    return bad();
  size_t comma = s.find(',');
  if (comma == std::string::npos) return bad();
  std::string lo = trim(s.substr(1, comma - 1)), hi = trim(s.substr(comma + 1, s.size() - comma - 2));
  ConfigRange r;
  double v;
  if (lo != "-inf") {
    if (!parse_float(lo, v)) return bad();
    r.has_min = true, r.min = v, r.min_exclusive = s.front() == '(';
  }
  if (hi != "inf") {
    if (!parse_float(hi, v)) return bad();
    r.has_max = true, r.max = v, r.max_exclusive = s.back() == ')';
  }
  return r;
}

// ---------------- the schema table ----------------

struct Entry {
  ConfigKey key;
  std::function<void(Config&, const YAML::Node&, const Ctx&)> set;
  std::function<void(const Config&, YAML::Emitter&)> emit;
};

template <class S>
struct Section {
  std::vector<Entry>& out;
  const char* section;
  S& (*get)(Config&);  // the struct the section's keys live in

  // spec: "" (no constraint), an interval "[0, 1)" for numbers and int-list elements, or
  // "a|b|c" for the allowed values of a string (making it an enum).
  template <class T>
  void operator()(const char* name, T S::*field, const std::string& spec, const char* doc) const {
    Entry e;
    ConfigKey& k = e.key;
    k.section = section;
    k.name = name;
    k.doc = doc;
    const std::string sp = trim(spec);
    const bool interval = !sp.empty() && (sp[0] == '[' || sp[0] == '(');
    const bool choices = !sp.empty() && !interval;
    k.type = type_of<T>(choices);
    if (choices) {
      if (k.type != ConfigType::Enum)
        throw std::logic_error("config schema: choices on non-string key " + k.full_name());
      std::stringstream ss(sp);
      std::string c;
      while (std::getline(ss, c, '|')) k.choices.push_back(trim(c));
    } else if (interval) {
      if (k.type != ConfigType::Int && k.type != ConfigType::Float &&
          k.type != ConfigType::IntList)
        throw std::logic_error("config schema: range on non-numeric key " + k.full_name());
      k.range = parse_interval(sp);
    }
    auto g = get;
    e.set = [g, field, k](Config& c, const YAML::Node& n, const Ctx& ctx) {
      parse_into(g(c).*field, n, k, ctx);
    };
    // g only selects a member: reading through it does not modify the config.
    e.emit = [g, field](const Config& c, YAML::Emitter& em) {
      emit_value(em, g(const_cast<Config&>(c)).*field);
    };
    out.push_back(std::move(e));
  }
};

// pe.<key> of a scheme (models/pe/pe.h PEKey): parsed and checked like every other key (the
// range and allowed values are the scheme's own), stored in the config's pe key map.
Entry scheme_key_entry(const models::PEKey& pk) {
  using models::PEValueType;
  Entry e;
  ConfigKey& k = e.key;
  k.section = "pe";
  k.name = pk.name;
  k.doc = pk.doc;
  k.choices = pk.choices;
  k.range.has_min = pk.range.has_min, k.range.min_exclusive = pk.range.min_exclusive;
  k.range.min = pk.range.min;
  k.range.has_max = pk.range.has_max, k.range.max_exclusive = pk.range.max_exclusive;
  k.range.max = pk.range.max;
  const PEValueType t = pk.def.type;
  k.type = t == PEValueType::Int     ? ConfigType::Int
           : t == PEValueType::Float ? ConfigType::Float
           : t == PEValueType::Bool  ? ConfigType::Bool
           : k.choices.empty()       ? ConfigType::String
                                     : ConfigType::Enum;
  const std::string name = pk.name;
  e.set = [name, k, t](Config& c, const YAML::Node& n, const Ctx& ctx) {
    models::PEConfig& pe = c.model.pe;
    if (t == PEValueType::Int) {
      int64_t v = 0;
      parse_into(v, n, k, ctx);
      pe.set(name, v);
    } else if (t == PEValueType::Float) {
      double v = 0;
      parse_into(v, n, k, ctx);
      pe.set(name, v);
    } else if (t == PEValueType::Bool) {
      bool v = false;
      parse_into(v, n, k, ctx);
      pe.set(name, v);
    } else {
      std::string v;
      parse_into(v, n, k, ctx);
      pe.set(name, v);
    }
  };
  e.emit = [name, t](const Config& c, YAML::Emitter& em) {
    const models::PEConfig& pe = c.model.pe;
    if (t == PEValueType::Int) emit_value(em, pe.get_int(name));
    else if (t == PEValueType::Float) emit_value(em, pe.get_float(name));
    else if (t == PEValueType::Bool) emit_value(em, pe.get_bool(name));
    else emit_value(em, pe.get_str(name));
  };
  return e;
}

std::vector<Entry> build_entries() {
  std::vector<Entry> v;
  Section<TaskConfig> task{v, "task", [](Config& c) -> TaskConfig& { return c.task; }};
  // The registered synthetic tasks (data/tasks.h) plus the two data-driven kinds.
  static const std::string task_choices = join(data::task_names(), "|") + "|textfile|lm";
  task("name", &TaskConfig::name, task_choices.c_str(),
       "task: an algorithmic task, `textfile` (examples from task.train_file) or `lm` "
       "(language modelling on task.corpus)");
  task("formulation", &TaskConfig::formulation, "seq2seq|decoder",
       "encoder-decoder pairs, or one decoder-only sequence (input, separator, output); "
       "must equal model.arch");
  task("num_symbols", &TaskConfig::num_symbols, "[2, 65536]",
       "alphabet size of the algorithmic tasks (the digit base for addition)");
  task("train_min_len", &TaskConfig::train_min_len, "[1, inf)",
       "shortest training input length (digits per operand for addition)");
  task("train_max_len", &TaskConfig::train_max_len, "[1, inf)", "longest training input length");
  task("test_lengths", &TaskConfig::test_lengths, "[1, inf)",
       "input lengths evaluated after training (length generalisation)");
  task("train_examples", &TaskConfig::train_examples, "[0, inf)",
       "size of a fixed training set; 0 = sample fresh examples for every batch");
  task("num_eval_examples", &TaskConfig::num_eval_examples, "[1, inf)",
       "examples evaluated per test length / evaluation split");
  task("train_file", &TaskConfig::train_file, "", "textfile: path of the training examples");
  task("valid_file", &TaskConfig::valid_file, "",
       "textfile: path of the validation examples; \"\" = hold out task.valid_fraction");
  task("test_files", &TaskConfig::test_files, "",
       "textfile: extra evaluation files, each reported separately");
  task("valid_fraction", &TaskConfig::valid_fraction, "[0, 0.5]",
       "textfile/lm: fraction of the training data held out for validation when no valid file "
       "is given");
  task("tokenization", &TaskConfig::tokenization, "char|space",
       "textfile/lm: characters or space-separated words as tokens");
  task("unknown_symbols", &TaskConfig::unknown_symbols, "error|map_to_unk",
       "textfile: a symbol of task.valid_file / task.test_files (or of task.train_file with a "
       "checkpoint's vocabulary) that is not in the vocabulary: `error` names file:line and the "
       "symbol; `map_to_unk` scores it as `<unk>` and reports the count per split (log, table, "
       "eval.json `unknown_symbols`)");
  task("max_example_len", &TaskConfig::max_example_len, "[1, inf)",
       "textfile: most positions one example may take (decoder: source + target + 2; seq2seq: "
       "the longer side + 1); a longer line is an error naming file:line (memory grows with the "
       "square of the length)");
  task("corpus", &TaskConfig::corpus, "",
       "lm: path of the text corpus; \"\" = the Debian fortunes corpus");
  task("position_ids", &TaskConfig::position_ids, "sequential|coupled|abacus",
       "position IDs from the task (addition_reversed, multiplication; decoder formulation): "
       "`sequential` = none (the model's 0..L-1); `coupled` = digits of the same significance "
       "share one ID (Cho et al. 2024); `abacus` = each digit's significance within its own "
       "number, other tokens 0 (McLeish et al. 2024). Definitions: docs/tasks.md");
  task("max_position_id", &TaskConfig::max_position_id, "[0, inf)",
       "training-time random offset of the task's position IDs and index hints: each training "
       "example's IDs >= 1 are shifted by an offset drawn uniformly so that its largest stays <= "
       "this (Cho et al.'s random starting position ID); 0 = no offset. Evaluation uses none");
  task("index_hints", &TaskConfig::index_hints, "[0, inf)",
       "index hints (Zhou et al. 2024): every digit is preceded by the hint token of its "
       "significance, h1..hN; this is N (0 = off). Must cover the longest answer and "
       "task.max_position_id");
  task("lm_train_len", &TaskConfig::lm_train_len, "[2, inf)",
       "lm: training context length in tokens");
  task("lm_eval_lengths", &TaskConfig::lm_eval_lengths, "[2, inf)",
       "lm: context lengths evaluated (at and beyond the training length)");
  task("seed", &TaskConfig::seed, "[0, inf)", "seed for data generation and splits");

  using models::ModelConfig;
  using models::PEConfig;
  Section<ModelConfig> model{v, "model", [](Config& c) -> ModelConfig& { return c.model; }};
  model("arch", &ModelConfig::arch, "seq2seq|decoder",
        "encoder-decoder transformer, or decoder-only (causal) transformer");
  model("d_model", &ModelConfig::d_model, "[1, inf)", "model width");
  model("heads", &ModelConfig::heads, "[1, inf)", "attention heads; must divide model.d_model");
  model("d_ff", &ModelConfig::d_ff, "[1, inf)", "hidden width of the feed-forward blocks");
  model("encoder_layers", &ModelConfig::encoder_layers, "[0, inf)",
        "encoder layers (seq2seq; ignored by decoder-only models)");
  model("decoder_layers", &ModelConfig::decoder_layers, "[1, inf)", "decoder layers");
  model("dropout", &ModelConfig::dropout, "[0, 1)",
        "dropout on embeddings, attention weights and residual branches");
  model("norm", &ModelConfig::norm, "pre|post",
        "LayerNorm placement: pre-norm (plus a final norm) or post-norm");
  model("norm_eps", &ModelConfig::norm_eps, "(0, inf)", "LayerNorm epsilon");
  model("activation", &ModelConfig::activation, "gelu|relu", "feed-forward activation");
  model("bias", &ModelConfig::bias, "", "linear layers have bias terms");
  model("tie_embeddings", &ModelConfig::tie_embeddings, "",
        "one token table for everything: in seq2seq one tensor serves the encoder and decoder "
        "embeddings and the output projection; decoder-only: the embedding and the output "
        "projection");
  model("embed_scale", &ModelConfig::embed_scale, "auto|sqrt_d|none",
        "token embedding multiplier; auto = sqrt(d_model) for additive schemes (sinusoidal, "
        "learned), else 1");
  model("dtype", &ModelConfig::dtype, "float32|float64",
        "parameter and activation dtype (float64 for gradient checks)");
  model("init_std", &ModelConfig::init_std, "(0, inf)", "std of the normal weight init");

  Section<PEConfig> pe{v, "pe", [](Config& c) -> PEConfig& { return c.model.pe; }};
  {
    std::string names;  // the registered schemes
    for (const auto& n : models::pe_names()) names += (names.empty() ? "" : "|") + n;
    pe("scheme", &PEConfig::scheme, names, "positional encoding scheme (one file each in models/pe/)");
  }
  for (const models::PEKey* k : models::pe_keys()) v.push_back(scheme_key_entry(*k));
  pe("randomized_positions", &PEConfig::randomized_positions, "",
     "randomised positions (Ruoss et al. 2023): train on sorted random positions from "
     "[0, pe.randomized_max_position)");
  pe("randomized_max_position", &PEConfig::randomized_max_position, "[1, inf)",
     "randomised positions: exclusive upper bound; must cover every train/test length");

  Section<TrainConfig> train{v, "train", [](Config& c) -> TrainConfig& { return c.train; }};
  train("steps", &TrainConfig::steps, "[0, inf)", "optimizer steps (0 = evaluate only)");
  train("batch_size", &TrainConfig::batch_size, "[1, inf)", "examples per micro-batch");
  train("grad_accum", &TrainConfig::grad_accum, "[1, inf)",
        "micro-batches accumulated per optimizer step");
  train("optimizer", &TrainConfig::optimizer, "adamw|sgd", "optimizer");
  train("lr", &TrainConfig::lr, "(0, inf)", "peak learning rate");
  train("min_lr", &TrainConfig::min_lr, "[0, inf)", "final learning rate of warmup_cosine");
  train("warmup", &TrainConfig::warmup, "[0, inf)", "linear warmup steps");
  train("schedule", &TrainConfig::schedule, "constant|warmup_cosine|inverse_sqrt",
        "learning-rate schedule");
  train("weight_decay", &TrainConfig::weight_decay, "[0, inf)",
        "decoupled weight decay (adamw) / L2 penalty (sgd)");
  train("beta1", &TrainConfig::beta1, "[0, 1)", "adamw: first-moment decay");
  train("beta2", &TrainConfig::beta2, "[0, 1)", "adamw: second-moment decay");
  train("eps", &TrainConfig::eps, "(0, inf)", "adamw: denominator epsilon");
  train("momentum", &TrainConfig::momentum, "[0, 1)", "sgd: momentum");
  train("grad_clip", &TrainConfig::grad_clip, "[0, inf)",
        "clip the global gradient norm to this value; 0 = off");
  train("label_smoothing", &TrainConfig::label_smoothing, "[0, 1)", "label smoothing");
  train("seed", &TrainConfig::seed, "[0, inf)", "seed for initialisation, dropout and batches");
  train("threads", &TrainConfig::threads, "[0, 4096]", "CPU threads; 0 = all cores");
  train("device", &TrainConfig::device, "", "compute device: cpu, cuda or cuda:N");
  train("log_every", &TrainConfig::log_every, "[1, inf)", "steps between training log lines");
  train("eval_every", &TrainConfig::eval_every, "[0, inf)",
        "steps between validation runs; 0 = only at the end");
  train("valid_positions", &TrainConfig::valid_positions, "fixed|as_trained",
        "positions of the validation split (its validations, train.stop_when, eval.json): fixed "
        "= 0..L-1 as the test splits; as_trained = drawn as training draws them (with "
        "pe.randomized_positions a sorted random subset of [0, pe.randomized_max_position), the "
        "same at every validation of the run; without it 0..L-1 too)");
  train("checkpoint_every", &TrainConfig::checkpoint_every, "[0, inf)",
        "steps between checkpoints; 0 = only at the end");
  train("keep_checkpoints", &TrainConfig::keep_checkpoints, "[0, inf)",
        "newest checkpoints kept (the best one is always kept); 0 = keep all");
  train("max_consecutive_skipped", &TrainConfig::max_consecutive_skipped, "[0, inf)",
        "stop the run (an error) after this many consecutive steps skipped for a non-finite loss "
        "or gradient norm; 0 = no limit");
  train("max_skipped_steps", &TrainConfig::max_skipped_steps, "[0, inf)",
        "stop the run (an error) after this many skipped steps in total; 0 = no limit");
  train("bucket_by_length", &TrainConfig::bucket_by_length, "",
        "batch training examples of similar length together");
  train("batch_lengths", &TrainConfig::batch_lengths, "auto|mixed|one",
        "lengths of a training batch's examples (synthetic tasks): mixed = each example's own, "
        "uniform over the training range; one = one length per batch, drawn uniformly (as "
        "Deletang et al. 2023 and Ruoss et al. 2023 train); auto = one with "
        "pe.randomized_positions (a batch shares one position subset sized to its sequences), "
        "else mixed");
  train("run_dir", &TrainConfig::run_dir, "", "directory that holds the run directories");
  train("run_name", &TrainConfig::run_name, "",
        "run directory name under train.run_dir; \"\" = the config file's stem");
  train("resume", &TrainConfig::resume, "",
        "\"\" = fresh run; a checkpoint path, or `latest` (newest in the run directory)");
  train("tags", &TrainConfig::tags, "", "free-form name: value metadata recorded with the run");
  train("stop_when", &TrainConfig::stop_when, "",
        "train to a criterion: stop at the first validation (every train.eval_every steps) that "
        "makes `patience` consecutive validations meet the threshold (at_least / at_most) or "
        "fail to improve on the best value by more than min_delta (a plateau); train.steps "
        "stays the cap; {} = off (sub-keys below)");
  {
    auto sub = [](const char* name, ConfigType type, std::vector<std::string> choices,
                  const char* range, const char* def, const char* doc) {
      ConfigKey k;
      k.section = "train";
      k.name = std::string("stop_when.") + name;
      k.type = type;
      k.choices = std::move(choices);
      if (*range) k.range = parse_interval(range);
      k.default_text = def;
      k.doc = doc;
      return k;
    };
    v.back().key.fields = {
        sub("metric", ConfigType::Enum, {"exact_match", "token_accuracy", "loss", "perplexity"},
            "", "", "validation metric (required); exact_match does not exist for task lm"),
        sub("split", ConfigType::Enum, {"valid"}, "", "valid",
            "split that decides; test splits are refused (selecting on test data is forbidden)"),
        sub("at_least", ConfigType::Float, {}, "[0, 1]", "",
            "threshold for exact_match / token_accuracy: met when value >= at_least"),
        sub("at_most", ConfigType::Float, {}, "[0, inf)", "",
            "threshold for loss / perplexity (perplexity: >= 1): met when value <= at_most; "
            "give exactly one of at_least / at_most / min_delta"),
        sub("min_delta", ConfigType::Float, {}, "(0, 1)", "",
            "plateau instead of a threshold, any metric: a validation counts when it improves on "
            "the best value so far by no more than min_delta relative (0.01 = 1 %; loss / "
            "perplexity: best - value <= min_delta*|best|, accuracies: value - best <= "
            "min_delta*max(|best|, 1e-12)); the first validation sets the best"),
        sub("patience", ConfigType::Int, {}, "[1, inf)", "1",
            "consecutive validations that must meet the threshold (or the plateau)"),
        sub("per_length", ConfigType::Bool, {}, "", "false",
            "exact_match threshold only: met when every task length of the validation split "
            "(drawn from the training lengths) reaches at_least, its worst length deciding; "
            "synthetic tasks only"),
        sub("stop", ConfigType::Bool, {}, "", "true",
            "true: training stops at the validation that meets the criterion; false: the step it "
            "was first met at is recorded (eval.json, reports) and training continues to "
            "train.steps, a fixed budget the criterion certifies"),
    };
  }

  Section<EvalConfig> eval{v, "eval", [](Config& c) -> EvalConfig& { return c.eval; }};
  eval("batch_size", &EvalConfig::batch_size, "[1, inf)", "examples per evaluation batch");
  eval("max_decode_len", &EvalConfig::max_decode_len, "[0, inf)",
       "longest greedy decode; 0 = auto (2*length+8)");
  eval("best_metric", &EvalConfig::best_metric, "exact_match|token_accuracy|loss",
       "validation metric that selects the best checkpoint");
  eval("save_predictions", &EvalConfig::save_predictions, "",
       "write decoded test predictions to the run directory");

  // Defaults come from the struct member initialisers.
  const Config defaults;
  for (auto& e : v) {
    YAML::Emitter em;
    e.emit(defaults, em);
    e.key.default_text = em.c_str();
  }
  return v;
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> v = build_entries();
  return v;
}

const Entry* find_entry(const std::string& section, const std::string& name) {
  for (const auto& e : entries())
    if (e.key.section == section && e.key.name == name) return &e;
  return nullptr;
}

std::vector<std::string> section_names() {
  std::vector<std::string> s;
  for (const auto& p : config_sections()) s.push_back(p.first);
  return s;
}

bool is_section(const std::string& s) {
  for (const auto& p : config_sections())
    if (p.first == s) return true;
  return false;
}

std::string unknown_section_msg(const std::string& s) {
  std::string msg = "unknown section '" + s + "'";
  // A key written at the top level ("d_model: 64")?
  for (const auto& e : entries())
    if (e.key.name == s)
      return msg + "; '" + s + "' is a key: did you mean '" + e.key.full_name() + "'?";
  std::string near = nearest_name(s, section_names());
  if (!near.empty()) msg += "; did you mean '" + near + "'?";
  return msg + " (sections: " + join(section_names(), ", ") + ")";
}

std::string unknown_key_msg(const std::string& section, const std::string& name) {
  std::string msg = "key '" + section + "." + name + "' is not a valid key";
  // The same name in another section ("model.scheme" -> "pe.scheme").
  for (const auto& e : entries())
    if (lower(e.key.name) == lower(name)) return msg + "; did you mean '" + e.key.full_name() + "'?";
  std::vector<std::string> same;
  for (const auto& e : entries())
    if (e.key.section == section) same.push_back(e.key.name);
  std::string near = nearest_name(name, same);
  if (!near.empty()) return msg + "; did you mean '" + section + "." + near + "'?";
  std::vector<std::string> all;
  for (const auto& e : entries()) all.push_back(e.key.full_name());
  near = nearest_name(section + "." + name, all);
  if (!near.empty()) return msg + "; did you mean '" + near + "'?";
  return msg + "; valid keys in '" + section + "': " + join(same, ", ");
}

// ---------------- cross-field rules ----------------

struct Violation {
  std::string msg;                // empty = no violation
  std::vector<std::string> keys;  // keys involved, for locating the error
};

struct Rule {
  std::string doc;
  std::function<Violation(const Config&)> check;
};

int max_of(const std::vector<int>& v, int init) {
  for (int x : v) init = std::max(init, x);
  return init;
}

}  // namespace

data::TaskSpec task_spec(const Config& c) {
  data::TaskSpec spec;
  spec.name = c.task.name;
  spec.num_symbols = c.task.num_symbols;
  spec.seed = static_cast<uint64_t>(c.task.seed);
  spec.train_min_len = c.task.train_min_len;
  spec.train_max_len = c.task.train_max_len;
  spec.position_ids = c.task.position_ids;
  spec.index_hints = c.task.index_hints;
  return spec;
}

namespace {

// The longest input length the task will see, or 0 when unknown (textfile).
int longest_length(const Config& c) {
  if (c.task.name == "lm") return max_of(c.task.lm_eval_lengths, c.task.lm_train_len);
  if (c.task.name == "textfile") return 0;
  return max_of(c.task.test_lengths, c.task.train_max_len);
}

// Whether the task gives position IDs (task.position_ids other than sequential).
bool uses_task_ids(const Config& c) { return c.task.position_ids != "sequential"; }

// The largest task position ID / hint index of an example of this length without offset, or -1
// when the task cannot be built (its own rule reports why).
int64_t task_id_top(const Config& c, int64_t length) {
  if (c.task.name == "lm" || c.task.name == "textfile") return -1;
  try {
    return data::make_task(task_spec(c))->max_position_id(length);
  } catch (const data::DataError&) {
    return -1;
  }
}

// A scheme's position limit (0 = none) and the key that sets it ("" = none), asked of the scheme.
int64_t scheme_limit(const models::PEConfig& p) {
  try {
    return models::pe_max_positions(p);
  } catch (const Error&) {
    return 0;  // unknown scheme: pe.scheme's own check reports it
  }
}

std::string emit_text(const Entry& e, const Config& c);

std::vector<Rule> build_rules() {
  static const std::vector<Rule> r = {
      {"model.d_model must be divisible by model.heads",
       [](const Config& c) -> Violation {
         if (c.model.heads > 0 && c.model.d_model % c.model.heads == 0) return {};
         return {"model.d_model (" + std::to_string(c.model.d_model) +
                     ") must be divisible by model.heads (" + std::to_string(c.model.heads) + ")",
                 {"model.d_model", "model.heads"}};
       }},
      {"task.train_min_len <= task.train_max_len",
       [](const Config& c) -> Violation {
         if (c.task.train_min_len <= c.task.train_max_len) return {};
         return {"task.train_min_len (" + std::to_string(c.task.train_min_len) +
                     ") must be <= task.train_max_len (" + std::to_string(c.task.train_max_len) +
                     ")",
                 {"task.train_min_len", "task.train_max_len"}};
       }},
      {"task.name addition needs task.num_symbols <= 10 (the number base)",
       [](const Config& c) -> Violation {
         if (c.task.name != "addition" || c.task.num_symbols <= 10) return {};
         return {"task.name addition needs task.num_symbols <= 10 (the number base), got " +
                     std::to_string(c.task.num_symbols),
                 {"task.name", "task.num_symbols"}};
       }},
      {"task.train_min_len..task.train_max_len must hold a length the task can generate, and "
       "every task.test_lengths entry must be one (e.g. modular_arithmetic: odd lengths; "
       "missing_duplicate: even; binary_addition: >= 3; docs/tasks.md)",
       [](const Config& c) -> Violation {
         if (c.task.name == "lm" || c.task.name == "textfile") return {};
         data::TaskSpec spec = task_spec(c);
         spec.train_max_len = std::max(c.task.train_min_len, c.task.train_max_len);
         std::unique_ptr<data::Task> task;
         try {
           task = data::make_task(spec);
         } catch (const data::DataError& e) {
           const std::string what = e.what();
           if (what.find("no training length") == std::string::npos) return {};  // other checks
           return {what + "; choose task.train_min_len / task.train_max_len accordingly",
                   {"task.train_min_len", "task.train_max_len", "task.name"}};
         }
         for (int L : c.task.test_lengths) {
           const std::string why = task->length_problem(L);
           if (!why.empty())
             return {"task.test_lengths: task " + c.task.name + " cannot generate length " +
                         std::to_string(L) + ": it " + why,
                     {"task.test_lengths", "task.name"}};
         }
         return {};
       }},
      {"task.name lm needs task.formulation decoder",
       [](const Config& c) -> Violation {
         if (c.task.name != "lm" || c.task.formulation == "decoder") return {};
         return {"task.name lm needs task.formulation decoder (got " + c.task.formulation + ")",
                 {"task.name", "task.formulation"}};
       }},
      {"task.formulation must equal model.arch",
       [](const Config& c) -> Violation {
         if (c.task.formulation == c.model.arch) return {};
         return {"task.formulation (" + c.task.formulation + ") must equal model.arch (" +
                     c.model.arch + ")",
                 {"task.formulation", "model.arch"}};
       }},
      {"task.name textfile needs task.train_file",
       [](const Config& c) -> Violation {
         if (c.task.name != "textfile" || !c.task.train_file.empty()) return {};
         return {"task.name textfile needs task.train_file", {"task.name", "task.train_file"}};
       }},
      {"model.arch seq2seq needs model.encoder_layers >= 1",
       [](const Config& c) -> Violation {
         if (c.model.arch != "seq2seq" || c.model.encoder_layers >= 1) return {};
         return {"model.arch seq2seq needs model.encoder_layers >= 1 (got " +
                     std::to_string(c.model.encoder_layers) + ")",
                 {"model.arch", "model.encoder_layers"}};
       }},
      {"train.min_lr <= train.lr",
       [](const Config& c) -> Violation {
         if (c.train.min_lr <= c.train.lr) return {};
         return {"train.min_lr (" + fmt_num(c.train.min_lr) + ") must be <= train.lr (" +
                     fmt_num(c.train.lr) + ")",
                 {"train.min_lr", "train.lr"}};
       }},
      {"train.schedule warmup_cosine needs train.warmup <= train.steps; inverse_sqrt needs "
       "train.warmup >= 1",
       [](const Config& c) -> Violation {
         if (c.train.schedule == "warmup_cosine" && c.train.warmup > c.train.steps)
           return {"train.warmup (" + std::to_string(c.train.warmup) +
                       ") must be <= train.steps (" + std::to_string(c.train.steps) +
                       ") with train.schedule warmup_cosine",
                   {"train.warmup", "train.steps", "train.schedule"}};
         if (c.train.schedule == "inverse_sqrt" && c.train.warmup < 1)
           return {"train.schedule inverse_sqrt needs train.warmup >= 1",
                   {"train.schedule", "train.warmup"}};
         return {};
       }},
      {"a scheme with a position limit (a learned table's pe.max_positions) needs a limit >= the "
       "positions of the longest training sequence (synthetic tasks: decoder bos + source + sep + "
       "target, seq2seq the longer of source + eos and bos + target, at task.train_max_len; lm: "
       "task.lm_train_len; textfile: checked against the data when it is loaded), and >= "
       "pe.randomized_max_position with randomised positions",
       [](const Config& c) -> Violation {
         const models::PEConfig& p = c.model.pe;
         const int64_t limit = scheme_limit(p);
         if (limit <= 0) return {};
         const std::string lname = models::pe_max_positions_name(p);
         const std::vector<std::string> lkeys = {lname.rfind("pe.", 0) == 0 ? lname : "pe.scheme"};
         if (p.randomized_positions && limit < p.randomized_max_position)
           return {lname + " (" + std::to_string(limit) + ") must be >= pe.randomized_max_position (" +
                       std::to_string(p.randomized_max_position) + ") with pe.scheme " + p.scheme,
                   {lkeys[0], "pe.randomized_max_position"}};
         if (c.task.name == "textfile") return {};
         if (uses_task_ids(c)) return {};  // the IDs index the table: the task-ID rule below
         int64_t need = c.task.lm_train_len;
         std::string why = "task.lm_train_len";
         if (c.task.name != "lm") {
           const data::TaskSpec spec = task_spec(c);
           std::unique_ptr<data::Task> task;
           try {
             task = data::make_task(spec);
           } catch (const data::DataError&) {
             return {};  // the task's own error comes when the data is built
           }
           const bool decoder = c.task.formulation == "decoder";
           need = data::task_positions(*task, c.task.train_max_len, decoder);
           why = "task " + c.task.name + " at task.train_max_len " +
                 std::to_string(c.task.train_max_len) + ": " +
                 std::to_string(task->max_source_len(c.task.train_max_len)) + " source and " +
                 std::to_string(task->max_target_len(c.task.train_max_len)) + " target tokens" +
                 (decoder ? " plus bos and sep (decoder)" : ", the longer plus bos/eos (seq2seq)");
         }
         if (limit >= need) return {};
         const std::string k = c.task.name == "lm" ? "task.lm_train_len" : "task.train_max_len";
         return {lname + " (" + std::to_string(limit) + ") must be >= " + std::to_string(need) +
                     ", the positions of the longest training sequence (" + why +
                     ") with pe.scheme " + p.scheme,
                 {lkeys[0], k, "pe.scheme", "task.formulation"}};
       }},
      {"task.position_ids coupled|abacus and task.index_hints need a task that defines them "
       "(addition_reversed, multiplication); task.position_ids needs task.formulation decoder and "
       "no pe.randomized_positions (the task gives the positions)",
       [](const Config& c) -> Violation {
         const bool ids = uses_task_ids(c), hints = c.task.index_hints > 0;
         if (!ids && !hints) return {};
         const std::vector<std::string> keys = {ids ? "task.position_ids" : "task.index_hints",
                                                "task.name"};
         if (c.task.name == "lm" || c.task.name == "textfile")
           return {(ids ? "task.position_ids " + c.task.position_ids
                        : std::string("task.index_hints")) +
                       " needs a synthetic task that defines them (addition_reversed, "
                       "multiplication); task " + c.task.name + " has none",
                   keys};
         try {
           data::make_task(task_spec(c));
         } catch (const data::DataError& e) {
           const std::string what = e.what();
           if (what.find("defines no") != std::string::npos ||
               what.find("has no index hints") != std::string::npos)
             return {what + "; use task.position_ids sequential / task.index_hints 0 or one of "
                            "those tasks",
                     keys};
         }
         if (ids && c.task.formulation != "decoder")
           return {"task.position_ids " + c.task.position_ids +
                       " needs task.formulation decoder (the IDs are defined for the decoder-only "
                       "sequence bos, source, sep, answer), got " + c.task.formulation,
                   {"task.position_ids", "task.formulation"}};
         bool accepts = true;
         try {
           accepts = models::pe_accepts_task_positions(c.model.pe);
         } catch (const Error&) {
           // unknown scheme: pe.scheme's own check reports it
         }
         if (ids && !accepts)
           return {"pe.scheme " + c.model.pe.scheme + " does not take position IDs from the task "
                       "(docs/model.md, Position IDs); use task.position_ids sequential or "
                       "another scheme",
                   {"task.position_ids", "pe.scheme"}};
         if (ids && c.model.pe.randomized_positions)
           return {"task.position_ids " + c.task.position_ids +
                       " gives every token its position; pe.randomized_positions would replace "
                       "them: turn one off (random offsets of the task IDs: task.max_position_id)",
                   {"task.position_ids", "pe.randomized_positions"}};
         return {};
       }},
      {"task.max_position_id > 0 needs task position IDs or index hints and must be >= the largest "
       "ID (or hint index) of a training example at task.train_max_len; task.index_hints must be "
       ">= task.max_position_id",
       [](const Config& c) -> Violation {
         const int64_t M = c.task.max_position_id;
         if (M <= 0) return {};
         if (!uses_task_ids(c) && c.task.index_hints <= 0)
           return {"task.max_position_id (" + std::to_string(M) +
                       ") offsets the task's position IDs and index hints, but the task has "
                       "neither (task.position_ids sequential, task.index_hints 0); set it to 0",
                   {"task.max_position_id", "task.position_ids"}};
         const int64_t top = task_id_top(c, c.task.train_max_len);
         if (top < 0) return {};  // the task's own error is reported by the rules above
         if (M < top)
           return {"task.max_position_id (" + std::to_string(M) + ") must be >= " +
                       std::to_string(top) + ", the largest position ID of a training example "
                       "at task.train_max_len " + std::to_string(c.task.train_max_len) +
                       " (task " + c.task.name + ", position_ids " + c.task.position_ids + ")",
                   {"task.max_position_id", "task.train_max_len"}};
         if (c.task.index_hints > 0 && c.task.index_hints < M)
           return {"task.index_hints (" + std::to_string(c.task.index_hints) +
                       ") must be >= task.max_position_id (" + std::to_string(M) +
                       "): training offsets move the hints up to h" + std::to_string(M),
                   {"task.index_hints", "task.max_position_id"}};
         return {};
       }},
      {"with task position IDs, a scheme with a position limit (a learned table's "
       "pe.max_positions) needs a limit > every ID: task.max_position_id and the largest ID at "
       "task.train_max_len and at every task.test_lengths entry",
       [](const Config& c) -> Violation {
         if (!uses_task_ids(c)) return {};
         const models::PEConfig& p = c.model.pe;
         const int64_t limit = scheme_limit(p);
         if (limit <= 0) return {};
         int64_t top = std::max<int64_t>(c.task.max_position_id,
                                         task_id_top(c, c.task.train_max_len));
         std::string why = "task.max_position_id / task.train_max_len";
         for (int L : c.task.test_lengths)
           if (task_id_top(c, L) > top) {
             top = task_id_top(c, L);
             why = "task.test_lengths " + std::to_string(L);
           }
         if (top < limit) return {};
         const std::string lname = models::pe_max_positions_name(p);
         return {lname + " (" + std::to_string(limit) + ") must be > " + std::to_string(top) +
                     ", the largest task position ID (" + why + ", task.position_ids " +
                     c.task.position_ids + ") with pe.scheme " + p.scheme +
                     ": raise it, or lower task.max_position_id / task.test_lengths",
                 {lname.rfind("pe.", 0) == 0 ? lname : "pe.scheme", "task.max_position_id",
                  "task.test_lengths"}};
       }},
      {"pe.randomized_positions needs a pe.scheme that encodes positions and "
       "pe.randomized_max_position >= every train and test length",
       [](const Config& c) -> Violation {
         if (!c.model.pe.randomized_positions) return {};
         if (!models::pe_scheme(c.model.pe.scheme).encodes_positions)
           return {"pe.randomized_positions needs a positional scheme (pe.scheme " + c.model.pe.scheme +
                       " encodes no positions)",
                   {"pe.randomized_positions", "pe.scheme"}};
         const int need = longest_length(c);
         if (c.model.pe.randomized_max_position >= need) return {};
         const bool lm = c.task.name == "lm";
         return {"pe.randomized_max_position (" + std::to_string(c.model.pe.randomized_max_position) +
                     ") must be >= the longest length in " +
                     (lm ? "task.lm_train_len / task.lm_eval_lengths"
                         : "task.train_max_len / task.test_lengths") +
                     " (" + std::to_string(need) + ")",
                 {"pe.randomized_max_position",
                  lm ? "task.lm_eval_lengths" : "task.test_lengths"}};
       }},
      {"one-length training batches (train.batch_lengths one, or auto with "
       "pe.randomized_positions) need a synthetic task's generated examples (not task textfile "
       "or task.train_examples > 0) and no train.bucket_by_length; pe.randomized_positions needs "
       "them",
       [](const Config& c) -> Violation {
         if (c.task.name == "lm") return {};
         const bool randomized = c.model.pe.randomized_positions;
         if (randomized && c.train.batch_lengths == "mixed")
           return {"pe.randomized_positions needs one-length batches (train.batch_lengths one or "
                   "auto, not mixed): a batch shares one sorted position subset sized to its "
                   "longest sequence, so in a mixed batch the shorter sequences would get only "
                   "its first positions",
                   {"train.batch_lengths", "pe.randomized_positions"}};
         if (!one_length_batches(c)) return {};
         const bool explicit_one = c.train.batch_lengths == "one";
         const std::string why = explicit_one
                                     ? "train.batch_lengths one"
                                     : "pe.randomized_positions (train.batch_lengths auto)";
         if (c.task.name == "textfile" || c.task.train_examples > 0)
           return {why + " draws one-length batches from a synthetic task's generated examples, "
                         "but " +
                       (c.task.name == "textfile" ? std::string("task textfile")
                                                  : "task.train_examples " +
                                                        std::to_string(c.task.train_examples)) +
                       " trains on a fixed set of examples; " +
                       (explicit_one ? "use train.batch_lengths mixed"
                                     : "use a generated task (task.train_examples 0) or train "
                                       "without pe.randomized_positions"),
                   {"train.batch_lengths", "task.name", "task.train_examples"}};
         if (c.train.bucket_by_length)
           return {"train.bucket_by_length groups examples of mixed lengths; " + why +
                       " draws one length per batch already: remove train.bucket_by_length",
                   {"train.bucket_by_length", "train.batch_lengths"}};
         return {};
       }},
      {"train.stop_when needs train.eval_every > 0, a metric the task has (no exact_match for "
       "task lm) and a validation split (task textfile: task.valid_file or "
       "task.valid_fraction > 0)",
       [](const Config& c) -> Violation {
         const StopWhen& w = c.train.stop_when;
         if (!w.enabled()) return {};
         if (c.train.eval_every <= 0)
           return {"train.stop_when needs validations: train.eval_every must be > 0 (got " +
                       std::to_string(c.train.eval_every) + ")",
                   {"train.stop_when", "train.eval_every"}};
         if (c.task.name == "lm" && w.metric == "exact_match")
           return {"train.stop_when: task lm has no exact_match (its evaluation gives loss, "
                   "perplexity and token_accuracy)",
                   {"train.stop_when", "task.name"}};
         if (w.per_length && (c.task.name == "lm" || c.task.name == "textfile"))
           return {"train.stop_when.per_length needs a synthetic task (its validation examples "
                   "have task lengths); task " + c.task.name + " has none",
                   {"train.stop_when", "task.name"}};
         if (c.task.name == "textfile" && c.task.valid_file.empty() && c.task.valid_fraction <= 0)
           return {"train.stop_when: task textfile has no valid split (set task.valid_file or "
                   "task.valid_fraction > 0)",
                   {"train.stop_when", "task.valid_file", "task.valid_fraction"}};
         return {};
       }},
      {"train.device is cpu, cuda or cuda:N",
       [](const Config& c) -> Violation {
         const std::string& d = c.train.device;
         if (d == "cpu" || d == "cuda") return {};
         int64_t n;
         if (d.rfind("cuda:", 0) == 0 && parse_int(d.substr(5), n) && n >= 0 &&
             d.substr(5).find_first_of("+-") == std::string::npos)
           return {};
         return {"train.device '" + d + "' is not cpu, cuda or cuda:N", {"train.device"}};
       }},
      {"train.run_dir is not empty; train.run_name is a plain name (no '/', not . or ..)",
       [](const Config& c) -> Violation {
         if (c.train.run_dir.empty()) return {"train.run_dir must not be empty", {"train.run_dir"}};
         const std::string& n = c.train.run_name;
         if (n.find('/') != std::string::npos || n == "." || n == "..")
           return {"train.run_name '" + n + "' must be a plain directory name", {"train.run_name"}};
         return {};
       }},
  };
  std::vector<Rule> all = r;
  // Every float setting becomes a number of the model's dtype (weights, PE parameters, the
  // optimizer's step): one beyond that dtype's range is inf there, and the run can only skip steps.
  all.push_back(
      {"every float setting (model.init_std, train.lr, pe.*_init, ...) is at most the largest "
       "finite value of model.dtype (float32: 3.4028234663852886e38)",
       [](const Config& c) -> Violation {
         const double most = dtype_max(dtype_from_name(c.model.dtype));
         for (const Entry& e : entries()) {
           if (e.key.type != ConfigType::Float) continue;
           double v = 0;
           if (!parse_float(emit_text(e, c), v) || std::fabs(v) <= most) continue;
           return {e.key.full_name() + ": " + fmt_num(v) + " overflows model.dtype " +
                       c.model.dtype + "; the largest usable value is " + fmt_num(most),
                   {e.key.full_name()}};
         }
         return {};
       }});
  // The schemes' own rules (models/pe/), after the fixed ones.
  for (const models::PERule* pr : models::pe_rules()) {
    all.push_back({pr->doc, [pr](const Config& c) -> Violation {
                     const models::PEViolation v = pr->check(
                         c.model.pe, models::PEModelDims{c.model.d_model, c.model.heads,
                                                         dtype_from_name(c.model.dtype)});
                     return {v.msg, v.keys};
                   }});
  }
  return all;
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = build_rules();
  return r;
}

// ---------------- loading ----------------

// Where each key was set: 0-based line in the file, or -2 for --set. Absent = default.
using Origins = std::map<std::string, int>;
constexpr int kFromSet = -2;

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

std::string emit_text(const Entry& e, const Config& c) {
  YAML::Emitter em;
  e.emit(c, em);
  return em.c_str();
}

}  // namespace

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

bool StopWhen::improves(double v, double best) const {
  if (std::isnan(v)) return false;
  if (std::isnan(best)) return true;
  return higher() ? v - best > min_delta * std::max(std::fabs(best), 1e-12)
                  : best - v > min_delta * std::fabs(best);
}

std::string StopWhen::describe() const {
  if (!enabled()) return "";
  const std::string n = std::to_string(patience) + " consecutive validation" +
                        (patience == 1 ? "" : "s");
  if (plateau())
  {
    char pct[32];  // the percentage to 10 digits: 0.07 gives "7 %", not 7.000000000000001
    std::snprintf(pct, sizeof pct, "%.10g", min_delta * 100);
    return metric + " on " + split + " improved by <= " + pct + " % for " + n +
           (stop ? "" : " (then training continues to train.steps)");
  }
  return metric + " on " + split + (higher() ? " >= " : " <= ") + fmt_num(threshold()) +
         (per_length ? " at every length" : "") + " for " + n +
         (stop ? "" : " (then training continues to train.steps)");
}

std::string ConfigRange::str() const {
  if (empty()) return "";
  return std::string(has_min && !min_exclusive ? "[" : "(") + (has_min ? fmt_num(min) : "-inf") +
         ", " + (has_max ? fmt_num(max) : "inf") + (has_max && !max_exclusive ? "]" : ")");
}

const std::vector<std::pair<std::string, std::string>>& config_sections() {
  static const std::vector<std::pair<std::string, std::string>> s = {
      {"task", "what to learn: the task, its lengths and data"},
      {"model", "the transformer"},
      {"pe", "the positional encoding scheme and its options"},
      {"train", "optimisation, logging, checkpoints and the run directory"},
      {"eval", "evaluation and decoding"},
  };
  return s;
}

const std::vector<ConfigKey>& config_schema() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    for (const auto& e : entries()) k.push_back(e.key);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& config_cross_field_rules() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> d;
    for (const auto& r : rules()) d.push_back(r.doc);
    return d;
  }();
  return docs;
}

const char* config_type_name(ConfigType t) {
  switch (t) {
    case ConfigType::Int: return "int";
    case ConfigType::Float: return "float";
    case ConfigType::Bool: return "bool";
    case ConfigType::String: return "string";
    case ConfigType::Enum: return "enum";
    case ConfigType::IntList: return "list of int";
    case ConfigType::StringList: return "list of string";
    case ConfigType::Map: return "map";
  }
  return "?";
}

bool operator==(const Config& a, const Config& b) {
  for (const auto& e : entries())
    if (emit_text(e, a) != emit_text(e, b)) return false;
  return true;
}
bool operator!=(const Config& a, const Config& b) { return !(a == b); }

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << config_to_yaml(c); }

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
      em << YAML::Key << e.key.name << YAML::Value;
      e.emit(cfg, em);
      if (with_docs) em << YAML::Comment(e.key.doc);
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

std::string config_reference_markdown(const std::vector<ConfigReferenceSection>& extra) {
  auto cell = [](std::string s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::ostringstream md;
  md << "# pelab configuration reference\n\n"
     << "Generated from the schema in `train/config.cpp` and the keys each positional-encoding "
        "scheme declares in its own file under `models/pe/`, by `config_reference_markdown()`; do "
        "not edit by hand.\n\n"
     << "A config file is YAML with the sections " << [] {
          std::vector<std::string> s;
          for (const auto& p : config_sections()) s.push_back("`" + p.first + "`");
          return join(s, ", ");
        }()
     << ". Every key is optional; missing keys take the defaults below. Unknown sections or keys, "
        "wrong types, out-of-range numbers and unknown enum values are errors naming the file "
        "and line.\n\n"
     << "Override any key on the command line with `--set section.key=value` (repeatable, "
        "applied after the file, validated the same way; the value is YAML: "
        "`--set task.test_lengths=[8,64]`, `--set train.tags={group: a}`, "
        "`--set 'train.stop_when={metric: exact_match, at_least: 0.99, patience: 2}'`). A key "
        "with sub-keys (`train.stop_when`) is one YAML mapping; its sub-keys are listed as "
        "`key.sub` rows below it and are checked like keys (unknown sub-keys and bad values name "
        "their line).\n\n"
     << "Ranges: `[a, b)` includes a and excludes b; for lists the range bounds every element.\n";
  auto row = [&cell](const ConfigKey& k) {
    std::string allowed;
    if (k.type == ConfigType::Enum) {
      std::vector<std::string> c;
      for (const auto& x : k.choices) c.push_back("`" + x + "`");
      allowed = join(c, ", ");
    } else if (!k.range.empty()) {
      allowed = (k.type == ConfigType::IntList ? "each in " : "") + k.range.str();
    } else if (k.type == ConfigType::Bool) {
      allowed = "true, false";
    }
    const std::string def = k.default_text.empty() ? "(none)" : "`" + cell(k.default_text) + "`";
    return "| `" + k.full_name() + "` | " + config_type_name(k.type) + " | " + def + " | " +
           cell(allowed) + " | " + cell(k.doc) + " |\n";
  };
  for (const auto& sec : config_sections()) {
    md << "\n## `" << sec.first << "`\n\n" << sec.second << ".\n\n"
       << "| Key | Type | Default | Allowed | Description |\n"
       << "|---|---|---|---|---|\n";
    for (const auto& k : config_schema()) {
      if (k.section != sec.first) continue;
      md << row(k);
      for (const auto& f : k.fields) md << row(f);
    }
  }
  for (const auto& sec : extra) {
    md << "\n## " << sec.heading << "\n\n" << sec.intro << "\n\n"
       << "| Key | Type | Default | Allowed | Description |\n"
       << "|---|---|---|---|---|\n";
    for (const auto& k : sec.keys) md << row(k);
  }
  md << "\n## Cross-field rules\n\nChecked after the file and all `--set` overrides:\n\n";
  for (const auto& r : config_cross_field_rules()) md << "- " << r << "\n";
  return md.str();
}

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
