// pelab — the schema mechanism every YAML section is read through: the run config's key table
// (config_schema.cpp) and the sections above it (compare, suite: train/study/) declare their keys
// the same way — a name, the member it fills (its type), a range "[1, inf)" or allowed values
// "a|b|c", a doc string — and get the same checks, the same messages naming file:line, the same
// did-you-mean for unknown keys, `--set section.key=value` and a table in the key reference
// (docs/config.md). A key whose value is structured (a list of mappings) declares its reader.
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "train/config.h"

namespace pelab {
namespace config_detail {

// Where an error is: "file:line" of a node (or of its key, for values without a mark).
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
  // Where the key itself is (a structured value's messages name the line of its key).
  std::string key_at() const { return at(YAML::Node()); }
};

// Throws ConfigError "where: msg".
[[noreturn]] void fail(const std::string& where, const std::string& msg);

// Reads one key's value into a member, checked against the key (type, range, choices).
// Instantiated in config_yaml.cpp for the member types the schemas use.
template <class T>
void parse_into(T& out, const YAML::Node& n, const ConfigKey& k, const Ctx& c);

template <class T>
struct is_int_type
    : std::integral_constant<bool, std::is_integral<T>::value && !std::is_same<T, bool>::value> {};

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

// A key from its declaration: `spec` is "" (no constraint), an interval "[0, 1)" for numbers
// and int-list elements, or "a|b|c" for the allowed values of a string (making it an enum).
// `type(has_choices)` gives the member's type. Throws std::logic_error on a bad declaration.
ConfigKey make_key(const std::string& section, const std::string& name, const std::string& spec,
                   const std::string& doc, ConfigType (*type)(bool));

// The message for a key a section does not have, with the nearest valid name.
std::string unknown_key_in(const std::string& section, const std::string& name,
                           const std::vector<std::string>& valid);

}  // namespace config_detail

// A YAML section (a mapping of keys) read into a struct S through its declared keys.
template <class S>
class SectionSchema {
 public:
  using Reader = std::function<void(S&, const YAML::Node&, const config_detail::Ctx&)>;

  explicit SectionSchema(std::string section) : section_(std::move(section)) {}

  // A key read by the config's value parser into a member (type, range, choices checked).
  template <class T>
  SectionSchema& key(const char* name, T S::*field, const std::string& spec, const char* doc) {
    Key k{config_detail::make_key(section_, name, spec, doc, &config_detail::type_of<T>), {},
          true};
    if constexpr (std::is_same<T, std::string>::value) {  // the default, for the reference
      const S defaults{};
      k.key.default_text = defaults.*field;
    }
    k.read = [field](S& s, const YAML::Node& n, const config_detail::Ctx& c,
                     const ConfigKey& ck) { config_detail::parse_into(s.*field, n, ck, c); };
    keys_.push_back(std::move(k));
    return *this;
  }
  // A key with a structured value read by its own reader; `settable` whether --set may give it.
  SectionSchema& structured(const char* name, ConfigType type, const char* doc, Reader read,
                            bool settable = false) {
    ConfigKey k;
    k.section = section_, k.name = name, k.type = type, k.doc = doc;
    keys_.push_back(Key{std::move(k),
                        [read](S& s, const YAML::Node& n, const config_detail::Ctx& c,
                               const ConfigKey&) { read(s, n, c); },
                        settable});
    return *this;
  }
  // Another spelling of a key (read the same way; not in the reference).
  SectionSchema& alias(const char* name, const char* of) {
    aliases_.emplace_back(name, of);
    return *this;
  }

  // Reads a mapping: each key once and known (else one line naming file:line and the nearest
  // valid key), each through its declaration. `what` names the section in messages where it is
  // an entry of a list ("literature[2]"; default: the section). Returns the values given, by key.
  std::map<std::string, YAML::Node> read(S& out, const YAML::Node& map, const std::string& source,
                                         const std::string& what = "") const {
    const std::string section = what.empty() ? section_ : what;
    config_detail::Ctx ctx;
    ctx.file = source;
    if (!map.IsMap())
      config_detail::fail(ctx.at(map), section + " must be a mapping of keys, got " +
                                           (map.IsSequence() ? "a list" : "'" + text(map) + "'"));
    std::map<std::string, YAML::Node> given;
    std::map<std::string, int> line_of;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node k = it->first;
      ctx.key_line = k.Mark().line;
      const std::string name = k.IsScalar() ? k.Scalar() : text(k);
      const Key* key = find(name);
      if (!key) config_detail::fail(ctx.at(k), config_detail::unknown_key_in(section, name, names()));
      ConfigKey ck = key->key;
      ck.section = section;
      if (line_of.count(ck.name))
        config_detail::fail(ctx.at(k), "key '" + ck.full_name() + "' appears twice (first at line " +
                                           std::to_string(line_of[ck.name] + 1) + ")");
      line_of[ck.name] = ctx.key_line;
      given[ck.name] = it->second;
      key->read(out, it->second, ctx, ck);
    }
    return given;
  }
  // `--set section.name=value` (`where` names the argument in messages).
  void set(S& out, const std::string& name, const std::string& value,
           const std::string& where) const {
    const Key* key = find(name);
    if (!key) config_detail::fail(where, config_detail::unknown_key_in(section_, name, names()));
    if (!key->settable)
      config_detail::fail(where, section_ + "." + name +
                                     " cannot be set from the command line; edit it in the "
                                     "config file (--set gives " + join_settable() + ")");
    YAML::Node n;
    try {
      n = YAML::Load(value);
    } catch (const YAML::Exception&) {
      n = YAML::Node(value);
    }
    config_detail::Ctx ctx;
    ctx.prefix = where;
    key->read(out, n, ctx, key->key);
  }
  // The keys in declaration order (for the reference).
  std::vector<ConfigKey> keys() const {
    std::vector<ConfigKey> v;
    for (const auto& k : keys_) v.push_back(k.key);
    return v;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& k : keys_) v.push_back(k.key.name);
    return v;
  }

 private:
  struct Key {
    ConfigKey key;
    std::function<void(S&, const YAML::Node&, const config_detail::Ctx&, const ConfigKey&)> read;
    bool settable = true;
  };
  const Key* find(const std::string& name) const {
    std::string n = name;
    for (const auto& a : aliases_)
      if (a.first == name) n = a.second;
    for (const auto& k : keys_)
      if (k.key.name == n) return &k;
    return nullptr;
  }
  std::string join_settable() const {
    std::string s;
    for (const auto& k : keys_)
      if (k.settable) s += (s.empty() ? "" : ", ") + section_ + "." + k.key.name;
    return s;
  }
  static std::string text(const YAML::Node& n) {
    if (n.IsScalar()) return n.Scalar();
    YAML::Emitter e;
    e << YAML::Flow << n;
    return e.c_str();
  }
  std::string section_;
  std::vector<Key> keys_;
  std::vector<std::pair<std::string, std::string>> aliases_;
};

}  // namespace pelab
