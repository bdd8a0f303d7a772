// pelab — the positional-encoding registry: scheme name -> factory, config keys, cross-field rules
// and the answers code outside models/pe/ asks of a scheme. Schemes register themselves with
// PELAB_REGISTER_PE in their own file; make_pe builds one PE object per stack.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "models/pe/pe.h"
#include "pelab/strings.h"

namespace pelab::models {
namespace {
// Function-local statics: safe to use from other files' static initialisers.
std::map<std::string, PEScheme>& pe_table() {
  static std::map<std::string, PEScheme> table;
  return table;
}
std::vector<std::string>& errors() {
  static std::vector<std::string> e;
  return e;
}

std::string joined_names() {
  const std::vector<std::string> n = pe_names();
  return n.empty() ? std::string("<none registered>") : join(n, ", ");
}

// "[0, 1)", "(1, inf)"; false when malformed.
bool parse_range(const std::string& spec, PERange& r) {
  const std::string s = trim(spec);
  const size_t comma = s.find(',');
  if (s.size() < 5 || (s.front() != '[' && s.front() != '(') ||
      (s.back() != ']' && s.back() != ')') || comma == std::string::npos)
    return false;
  const std::string lo = trim(s.substr(1, comma - 1)), hi = trim(s.substr(comma + 1, s.size() - comma - 2));
  char* end = nullptr;
  if (lo != "-inf") {
    r.min = std::strtod(lo.c_str(), &end);
    if (lo.empty() || *end) return false;
    r.has_min = true, r.min_exclusive = s.front() == '(';
  }
  if (hi != "inf") {
    r.max = std::strtod(hi.c_str(), &end);
    if (hi.empty() || *end) return false;
    r.has_max = true, r.max_exclusive = s.back() == ')';
  }
  return true;
}

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os << v;
  return os.str();
}

const char* type_name(PEValueType t) {
  switch (t) {
    case PEValueType::Int: return "int";
    case PEValueType::Float: return "float";
    case PEValueType::Bool: return "bool";
    case PEValueType::String: return "string";
  }
  return "?";
}

const PEKey& key_of(const std::string& name, PEValueType want) {
  const PEKey* k = find_pe_key(name);
  PELAB_CHECK(k != nullptr, "pe.", name, ": no registered scheme declares this key");
  PELAB_CHECK(k->def.type == want, "pe.", name, ": is a ", type_name(k->def.type), " key, read or set as ",
              type_name(want));
  return *k;
}

const PEValue& value_of(const PEConfig& c, const std::string& name, PEValueType want) {
  const PEKey& k = key_of(name, want);
  auto it = c.values.find(name);
  return it == c.values.end() ? k.def : it->second;
}
}  // namespace

// ---------------- PERange, PEConfig ----------------

bool PERange::contains(double v) const {
  if (has_min && (min_exclusive ? !(v > min) : !(v >= min))) return false;
  if (has_max && (max_exclusive ? !(v < max) : !(v <= max))) return false;
  return true;
}

std::string PERange::str() const {
  if (!has_min && !has_max) return "";
  return std::string(has_min && !min_exclusive ? "[" : "(") + (has_min ? num(min) : "-inf") + ", " +
         (has_max ? num(max) : "inf") + (has_max && !max_exclusive ? "]" : ")");
}

int64_t PEConfig::get_int(const std::string& k) const { return value_of(*this, k, PEValueType::Int).i; }
double PEConfig::get_float(const std::string& k) const {
  return value_of(*this, k, PEValueType::Float).d;
}
bool PEConfig::get_bool(const std::string& k) const { return value_of(*this, k, PEValueType::Bool).b; }
const std::string& PEConfig::get_str(const std::string& k) const {
  return value_of(*this, k, PEValueType::String).s;
}

void PEConfig::set(const std::string& k, int64_t v) {
  const PEKey* key = find_pe_key(k);
  if (key && key->def.type == PEValueType::Float) return set(k, static_cast<double>(v));
  PEValue& x = values[key_of(k, PEValueType::Int).name];
  x.type = PEValueType::Int, x.i = v;
}
void PEConfig::set(const std::string& k, double v) {
  PEValue& x = values[key_of(k, PEValueType::Float).name];
  x.type = PEValueType::Float, x.d = v;
}
void PEConfig::set(const std::string& k, bool v) {
  PEValue& x = values[key_of(k, PEValueType::Bool).name];
  x.type = PEValueType::Bool, x.b = v;
}
void PEConfig::set(const std::string& k, const std::string& v) {
  PEValue& x = values[key_of(k, PEValueType::String).name];
  x.type = PEValueType::String, x.s = v;
}

// ---------------- PEScheme ----------------

PEScheme::PEScheme(std::string n, PEFactory f) : name(std::move(n)), factory(std::move(f)) {}

PEScheme& PEScheme::add(const std::string& key_name, PEValue def, const std::string& spec,
                        const std::string& doc) {
  PEKey k;
  k.scheme = name;
  k.name = key_name;
  k.def = std::move(def);
  k.doc = doc;
  const std::string sp = trim(spec);
  const bool interval = !sp.empty() && (sp[0] == '[' || sp[0] == '(');
  if (interval) {
    if ((k.def.type != PEValueType::Int && k.def.type != PEValueType::Float) || !parse_range(sp, k.range))
      problems.push_back("scheme " + name + ": key " + key_name + ": bad range '" + sp + "'");
  } else if (!sp.empty()) {
    if (k.def.type != PEValueType::String)
      problems.push_back("scheme " + name + ": key " + key_name + ": allowed values on a non-string key");
    std::stringstream ss(sp);
    std::string c;
    while (std::getline(ss, c, '|')) k.choices.push_back(trim(c));
  }
  const std::string bad = pe_check_value(k, k.def);
  if (!bad.empty()) problems.push_back("scheme " + name + ": key " + key_name + ": default " + bad);
  keys.push_back(std::move(k));
  return *this;
}

PEScheme& PEScheme::key(const std::string& n, int64_t def, const std::string& spec, const std::string& doc) {
  PEValue v;
  v.type = PEValueType::Int, v.i = def;
  return add(n, v, spec, doc);
}
PEScheme& PEScheme::key(const std::string& n, double def, const std::string& spec, const std::string& doc) {
  PEValue v;
  v.type = PEValueType::Float, v.d = def;
  return add(n, v, spec, doc);
}
PEScheme& PEScheme::key(const std::string& n, bool def, const std::string& spec, const std::string& doc) {
  PEValue v;
  v.type = PEValueType::Bool, v.b = def;
  return add(n, v, spec, doc);
}
PEScheme& PEScheme::key(const std::string& n, const char* def, const std::string& spec,
                        const std::string& doc) {
  PEValue v;
  v.type = PEValueType::String, v.s = def;
  return add(n, v, spec, doc);
}
PEScheme& PEScheme::eval_time() {
  if (keys.empty())
    problems.push_back("scheme " + name + ": eval_time() before any key");
  else
    keys.back().eval_time = true;
  return *this;
}
PEScheme& PEScheme::rule(const std::string& doc,
                         std::function<PEViolation(const PEConfig&, const PEModelDims&)> check) {
  rules.push_back({name, doc, std::move(check)});
  return *this;
}
PEScheme& PEScheme::max_positions(std::function<int64_t(const PEConfig&)> f) {
  max_positions_fn = std::move(f);
  return *this;
}
PEScheme& PEScheme::parameters(std::function<int64_t(const PEConfig&, const StackInfo&)> f) {
  parameters_fn = std::move(f);
  return *this;
}
PEScheme& PEScheme::attention_memory(
    std::function<double(const PEConfig&, const AttentionSizes&)> f) {
  attention_memory_fn = std::move(f);
  return *this;
}
PEScheme& PEScheme::size_key(const std::string& key) {
  size_key_name = key;
  return *this;
}

// ---------------- the registry ----------------

std::vector<std::string> pe_scheme_problems(const PEScheme& scheme) {
  std::vector<std::string> out = scheme.problems;
  if (scheme.name.empty() || !scheme.factory)
    out.push_back("a scheme without a name or factory ('" + scheme.name + "')");
  if (pe_table().count(scheme.name)) out.push_back("scheme " + scheme.name + " registered twice");
  for (size_t i = 0; i < scheme.keys.size(); ++i) {
    const PEKey& k = scheme.keys[i];
    if (const PEKey* other = find_pe_key(k.name))
      out.push_back("scheme " + scheme.name + ": key pe." + k.name + " is already declared by " +
                    other->scheme);
    for (size_t j = 0; j < i; ++j)
      if (scheme.keys[j].name == k.name)
        out.push_back("scheme " + scheme.name + ": key pe." + k.name + " declared twice");
  }
  if (!scheme.variant_key.empty()) {
    bool choice = false, factor = false;
    for (const PEKey& k : scheme.keys) {
      choice = choice || (k.name == scheme.variant_key && !k.choices.empty() && k.eval_time);
      factor = factor || (k.name == scheme.variant_factor_key && k.def.type == PEValueType::Float &&
                          k.eval_time);
    }
    if (!choice || !factor)
      out.push_back("scheme " + scheme.name + ": variants() needs an eval-time string key with "
                    "allowed values and an eval-time float key of its own");
  }
  return out;
}

bool register_pe(PEScheme scheme) {
  const std::vector<std::string> p = pe_scheme_problems(scheme);
  if (!p.empty()) {
    errors().insert(errors().end(), p.begin(), p.end());
    return false;
  }
  const std::string n = scheme.name;
  pe_table().emplace(n, std::move(scheme));
  return true;
}

bool register_pe(const std::string& name, PEFactory factory) {
  return register_pe(PEScheme(name, std::move(factory)));
}

std::vector<std::string> pe_registry_errors() { return errors(); }

std::vector<std::string> pe_names() {
  std::vector<std::string> out;
  for (const auto& kv : pe_table()) out.push_back(kv.first);
  return out;  // sorted (std::map order)
}

const PEScheme& pe_scheme(const std::string& name) {
  auto it = pe_table().find(name);
  PELAB_CHECK(it != pe_table().end(), "pe.scheme: unknown positional encoding '", name, "' (valid: ",
              joined_names(), ")");
  return it->second;
}

std::vector<const PEKey*> pe_keys() {
  std::vector<const PEKey*> out;
  for (const auto& kv : pe_table())
    for (const PEKey& k : kv.second.keys) out.push_back(&k);
  return out;
}

const PEKey* find_pe_key(const std::string& name) {
  for (const auto& kv : pe_table())
    for (const PEKey& k : kv.second.keys)
      if (k.name == name) return &k;
  return nullptr;
}

std::vector<const PERule*> pe_rules() {
  std::vector<const PERule*> out;
  for (const auto& kv : pe_table())
    for (const PERule& r : kv.second.rules) out.push_back(&r);
  return out;
}

int64_t pe_max_positions(const PEConfig& cfg) {
  const PEScheme& s = pe_scheme(cfg.scheme);
  return s.max_positions_fn ? s.max_positions_fn(cfg) : 0;
}

bool pe_accepts_task_positions(const PEConfig& cfg) {
  return pe_scheme(cfg.scheme).accepts_task_positions;
}

int64_t pe_position_channels(const PEConfig& cfg) {
  return pe_scheme(cfg.scheme).max_position_channels;
}

std::vector<std::string> pe_eval_time_keys() {
  std::vector<std::string> out;
  for (const PEKey* k : pe_keys())
    if (k->eval_time) out.push_back("pe." + k->name);
  return out;
}

std::vector<std::string> pe_variant_sets(const std::string& name) {
  for (const auto& kv : pe_table()) {
    const PEScheme& s = kv.second;
    if (s.variant_key.empty()) continue;
    const PEKey* k = find_pe_key(s.variant_key);
    if (!k || name == k->def.s) continue;
    for (const auto& c : k->choices)
      if (c == name) return {"pe." + s.variant_key + "=" + name, "pe." + s.variant_factor_key + "=auto"};
  }
  return {};
}

std::vector<std::string> pe_variant_names() {
  std::vector<std::string> out;
  for (const auto& kv : pe_table()) {
    const PEKey* k = kv.second.variant_key.empty() ? nullptr : find_pe_key(kv.second.variant_key);
    if (!k) continue;
    for (const auto& c : k->choices)
      if (c != k->def.s) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool pe_is_variant_factor_key(const std::string& full_key) {
  for (const auto& kv : pe_table())
    if (!kv.second.variant_factor_key.empty() && full_key == "pe." + kv.second.variant_factor_key)
      return true;
  return false;
}

std::string pe_key_scheme(const std::string& full_key) {
  if (full_key.rfind("pe.", 0) != 0) return "";
  const PEKey* k = find_pe_key(full_key.substr(3));
  return k ? k->scheme : "";
}

double pe_attention_memory(const PEConfig& cfg, const AttentionSizes& sites) {
  const PEScheme& s = pe_scheme(cfg.scheme);
  return s.attention_memory_fn ? s.attention_memory_fn(cfg, sites) : 0.0;
}

std::string pe_max_positions_name(const PEConfig& cfg) {
  const PEScheme& s = pe_scheme(cfg.scheme);
  return s.size_key_name.empty() ? "the position limit of pe.scheme " + cfg.scheme : "pe." + s.size_key_name;
}

std::string pe_check_value(const PEKey& k, const PEValue& v) {
  if (v.type != k.def.type) return std::string("has type ") + type_name(v.type) + ", expected " + type_name(k.def.type);
  if (v.type == PEValueType::String && !k.choices.empty()) {
    for (const auto& c : k.choices)
      if (c == v.s) return "";
    return "'" + v.s + "' is not one of " + join(k.choices, ", ");
  }
  if (v.type == PEValueType::Int || v.type == PEValueType::Float) {
    const double x = v.type == PEValueType::Int ? static_cast<double>(v.i) : v.d;
    if (!std::isfinite(x)) return num(x) + " is not finite";
    if (!k.range.contains(x)) return (v.type == PEValueType::Int ? std::to_string(v.i) : num(x)) +
                                     " is out of range " + k.range.str();
  }
  return "";
}

namespace {
// Every set key against its declaration (type, range, allowed values): the one check of a scheme
// key's declared range outside the config loader (which checks the same declaration with file:line).
void check_pe_key(const std::string& name, const PEValue& v) {
  const PEKey* k = find_pe_key(name);
  PELAB_CHECK(k != nullptr, "pe.", name, ": no registered scheme declares this key");
  const std::string bad = pe_check_value(*k, v);
  PELAB_CHECK(bad.empty(), "pe.", name, ": ", bad);
}
}  // namespace

void validate_pe(const PEConfig& cfg, const PEModelDims& dims) {
  pe_scheme(cfg.scheme);
  for (const auto& kv : cfg.values) {
    check_pe_key(kv.first, kv.second);
    PELAB_CHECK(kv.second.type != PEValueType::Float || std::fabs(kv.second.d) <= dtype_max(dims.dtype),
                "pe.", kv.first, ": ", num(kv.second.d), " overflows model.dtype ",
                dtype_name(dims.dtype), "; the largest usable value is ", num(dtype_max(dims.dtype)));
  }
  for (const PERule* r : pe_rules()) {
    const PEViolation v = r->check(cfg, dims);
    PELAB_CHECK(v.msg.empty(), v.msg);
  }
}

std::shared_ptr<PositionalEncoding> make_pe(const PEConfig& cfg, const StackInfo& stack,
                                            Generator& gen) {
  const PEScheme& s = pe_scheme(cfg.scheme);
  PELAB_CHECK(stack.heads > 0 && stack.d_model > 0 && stack.d_model % stack.heads == 0,
              "make_pe(", cfg.scheme, "): d_model ", stack.d_model, " must be a positive multiple of heads ",
              stack.heads);
  // A scheme's constructor may rely on its keys' declared ranges and allowed values.
  for (const auto& kv : cfg.values) check_pe_key(kv.first, kv.second);
  std::shared_ptr<PositionalEncoding> pe = s.factory(cfg, stack, gen);
  PELAB_CHECK(pe != nullptr, "make_pe: the factory of scheme '", cfg.scheme, "' returned null");
  return pe;
}

}  // namespace pelab::models
