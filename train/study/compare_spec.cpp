// pelab — the `compare:` section of a config (compare.h): parsing it into a CompareSpec (schemes,
// seeds, variants, compare.search, the report's settings) and loading compare configs.
#include "train/study/compare.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "models/pe/pe.h"
#include "pelab/strings.h"
#include "train/study/compare_internal.h"
#include "train/study/config_block.h"
#include "train/config_schema.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {
using namespace compare_detail;
using config_detail::Ctx;

namespace {

// YAML text of a value for a "key=value" override: scalars as written, collections in flow style.
std::string value_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "null";
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

bool safe_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '+' ||
          c == '.'))
      return false;
  return true;
}

// Keys a scheme's settings may not set: the comparison owns them.
bool managed_key(const std::string& k) {
  return k == "train.seed" || k == "train.run_dir" || k == "train.run_name" || k == "train.resume";
}

// Keys an eval-time variant may set (nothing that changes the trained model): the schemes'
// eval-time keys (declared in models/pe/, PEScheme::eval_time), the test set and eval.*.
const std::vector<std::string>& eval_time_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = models::pe_eval_time_keys();
    for (const char* t : {"task.test_lengths", "task.lm_eval_lengths", "task.num_eval_examples"})
      k.push_back(t);
    return k;
  }();
  return keys;
}

std::vector<std::string> parse_set_map(const YAML::Node& n, const std::string& source,
                                       const std::string& what) {
  std::vector<std::string> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap())
    fail_at(yaml_where(source, n), what + ".set must be a mapping of section.key: value");
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      fail_at(yaml_where(source, it->first), what + ".set: keys must be section.key");
    const std::string k = it->first.Scalar();
    if (k.find('.') == std::string::npos)
      fail_at(yaml_where(source, it->first),
              what + ".set: '" + k + "' needs a section: write section.key (e.g. pe." + k + ")");
    out.push_back(k + "=" + value_text(it->second));
  }
  return out;
}

std::vector<int64_t> parse_seeds(const YAML::Node& n, const std::string& where) {
  std::vector<int64_t> seeds;
  if (n.IsScalar()) {
    try {
      seeds.push_back(n.as<int64_t>());
    } catch (const YAML::Exception&) {
      fail_at(where, "compare.seeds must be a list of integers, got '" + n.Scalar() + "'");
    }
    return seeds;
  }
  if (!n.IsSequence()) fail_at(where, "compare.seeds must be a list of integers");
  for (size_t i = 0; i < n.size(); ++i) {
    try {
      seeds.push_back(n[i].as<int64_t>());
    } catch (const YAML::Exception&) {
      fail_at(where, "compare.seeds[" + std::to_string(i) + "] is not an integer");
    }
  }
  if (seeds.empty()) fail_at(where, "compare.seeds must not be empty");
  std::set<int64_t> uniq(seeds.begin(), seeds.end());
  if (uniq.size() != seeds.size()) fail_at(where, "compare.seeds has a repeated seed");
  for (int64_t s : seeds)
    if (s < 0) fail_at(where, "compare.seeds: seeds must be >= 0, got " + std::to_string(s));
  return seeds;
}

// compare.jobs / --set compare.jobs=N: an integer >= 1.
int64_t parse_jobs(const YAML::Node& n, const std::string& where) {
  int64_t j = 0;
  bool ok = n.IsScalar();
  if (ok) {
    try {
      j = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      ok = false;
    }
  }
  if (!ok || j < 1)
    fail_at(where, "compare.jobs must be an integer >= 1 (runs trained at once), got '" +
                       value_text(n) + "'");
  return j;
}

// Why a key may not be searched over ("" = it may): compare.search only varies training.
std::string search_key_problem(const std::string& k) {
  if (k.find('.') == std::string::npos)
    return "'" + k + "' needs a section: write section.key (e.g. train." + k + ")";
  bool known = false;
  for (const auto& key : config_schema()) known = known || key.full_name() == k;
  if (k.rfind("task.", 0) == 0 || k.rfind("eval.", 0) == 0 || k.rfind("compare.", 0) == 0)
    return k +
           " changes the data, the test set or the evaluation; search only keys that change "
           "training (model.*, pe.*, train.*)";
  if (k.rfind("train.stop_when", 0) == 0)
    return k + " is the criterion candidates are compared on; set it in the base config";
  if (!known) return "unknown key '" + k + "' (see docs/config.md)";
  if (managed_key(k)) return k + " is set by the comparison (seeds, run directories)";
  if (eval_time_key(k))
    return k + " only changes the evaluation (use compare.variants for eval-time settings)";
  if (reusable_difference(k, false)) return k + " does not change what is trained";
  return "";
}

std::vector<CompareSearchKey> parse_search(const YAML::Node& n, const std::string& source,
                                           const std::string& where) {
  std::vector<CompareSearchKey> out;
  if (!n.IsMap() || n.size() == 0)
    fail_at(where,
            "compare.search must be a mapping of section.key: [value, ...] (e.g. "
            "{train.lr: [1e-3, 2e-3]})");
  for (auto it = n.begin(); it != n.end(); ++it) {
    CompareSearchKey sk;
    sk.where = yaml_where(source, it->first);
    sk.key = it->first.IsScalar() ? it->first.Scalar() : value_text(it->first);
    const std::string problem = search_key_problem(sk.key);
    if (!problem.empty()) fail_at(sk.where, "compare.search: " + problem);
    const YAML::Node v = it->second;
    if (!v.IsSequence() || v.size() == 0)
      fail_at(sk.where, "compare.search." + sk.key + " must be a non-empty list of values");
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string t = value_text(v[i]);
      if (std::find(sk.values.begin(), sk.values.end(), t) != sk.values.end())
        fail_at(sk.where, "compare.search." + sk.key + ": value " + t + " appears twice");
      sk.values.push_back(t);
    }
    for (const auto& o : out)
      if (o.key == sk.key) fail_at(sk.where, "compare.search: " + sk.key + " appears twice");
    out.push_back(sk);
  }
  return out;
}

// compare.schemes[i]: a scheme name, or {name, set, expect, why}.
void add_scheme(CompareSpec& spec, const YAML::Node& e, size_t i, const std::string& source) {
    const std::string what = "compare.schemes[" + std::to_string(i) + "]";
    CompareScheme s;
    if (e.IsScalar()) {
      s.name = e.Scalar();
      s.sets.push_back("pe.scheme=" + s.name);
    } else if (e.IsMap()) {
      s.name = entry_name(e, {"name", "set", "expect", "why"}, what, source);
      s.sets = parse_set_map(e["set"], source, what);
      if (e["expect"]) {
        const std::string x = value_text(e["expect"]);
        if (x != "cannot_learn" && x != "learn")
          fail_at(yaml_where(source, e["expect"]),
                  what + " (" + s.name + ").expect: expected cannot_learn or learn, got '" + x +
                      "'");
        s.cannot_learn = x == "cannot_learn";
      }
      if (e["why"]) {
        if (!e["why"].IsScalar() || trim(e["why"].Scalar()).empty())
          fail_at(yaml_where(source, e["why"]),
                  what + " (" + s.name + ").why must be a non-empty text");
        if (!s.cannot_learn)
          fail_at(yaml_where(source, e["why"]), what + " (" + s.name +
                                                    ").why explains expect: cannot_learn; add "
                                                    "expect: cannot_learn or remove why");
        s.why = trim(e["why"].Scalar());
      }
      if (s.cannot_learn && s.why.empty())
        fail_at(yaml_where(source, e["expect"]),
                what + " (" + s.name + "): expect: cannot_learn needs why: \"<reason>\"");
    } else {
      fail_at(yaml_where(source, e), what + " must be a scheme name or {name, set}");
    }
    s.where = yaml_where(source, e);
    if (!safe_name(s.name))
      fail_at(yaml_where(source, e),
              what + ": name '" + s.name + "' must use only letters, digits, _ - + .");
    for (const auto& set : s.sets)
      if (managed_key(key_of(set)))
        fail_at(yaml_where(source, e), what + " (" + s.name + "): " + key_of(set) +
                                           " is set by the comparison (use compare.seeds / "
                                           "compare.out)");
    for (const auto& o : spec.schemes)
      if (o.name == s.name)
        fail_at(yaml_where(source, e), what + ": scheme name '" + s.name + "' appears twice");
    spec.schemes.push_back(s);
}

// compare.variants[i]: a scheme's shorthand variant, randpos, or {name, set, schemes, positions}.
void add_variant(CompareSpec& spec, const YAML::Node& e, size_t i, const std::string& source) {
    const std::string what = "compare.variants[" + std::to_string(i) + "]";
    CompareVariant var;
    if (e.IsScalar() && e.Scalar() == "randpos") {
      var.name = "randpos";
      var.positions = "random";
    } else if (e.IsScalar()) {
      var.name = e.Scalar();
      var.sets = models::pe_variant_sets(var.name);
      if (var.sets.empty()) {
        std::string names;
        for (const auto& n : models::pe_variant_names()) names += (names.empty() ? "" : ", ") + n;
        fail_at(yaml_where(source, e),
                what + ": '" + var.name + "' is not a scheme's shorthand variant (" + names +
                    "); write {name: ..., set: {...}} for other eval-time variants");
      }
    } else if (e.IsMap()) {
      var.name = entry_name(e, {"name", "set", "schemes", "positions"}, what, source);
      var.sets = parse_set_map(e["set"], source, what);
      if (e["positions"]) {
        var.positions = value_text(e["positions"]);
        if (var.positions != "random" && var.positions != "default")
          fail_at(yaml_where(source, e["positions"]),
                  what + ".positions: expected random or default, got '" + var.positions + "'");
        if (var.positions == "default") var.positions.clear();
      }
      if (var.sets.empty() && var.positions.empty()) var.sets = models::pe_variant_sets(var.name);
      if (e["schemes"]) {
        const YAML::Node sc = e["schemes"];
        if (sc.IsScalar())
          var.schemes.push_back(sc.Scalar());
        else if (sc.IsSequence())
          for (size_t j = 0; j < sc.size(); ++j) var.schemes.push_back(value_text(sc[j]));
        else
          fail_at(yaml_where(source, sc), what + ".schemes must be a list of scheme names");
      }
    } else {
      fail_at(yaml_where(source, e), what + " must be a variant name or {name, set, schemes}");
    }
    if (!safe_name(var.name) || var.name == "base")
      fail_at(yaml_where(source, e), what + ": name '" + var.name +
                                         "' must use only letters, digits, _ - + . "
                                         "(and not be 'base')");
    if (var.sets.empty() && var.positions.empty())
      fail_at(yaml_where(source, e), what + " (" + var.name + ") sets nothing");
    for (const auto& set : var.sets)
      if (!eval_time_key(key_of(set))) {
        std::string keys;
        for (const auto& k : eval_time_keys()) keys += k + ", ";
        fail_at(yaml_where(source, e),
                what + " (" + var.name + "): " + key_of(set) +
                    " changes the trained model; eval-time variants may only set " + keys +
                    "and eval.*");
      }
    for (const auto& o : spec.variants)
      if (o.name == var.name)
        fail_at(yaml_where(source, e),
                what + ": variant name '" + var.name + "' appears twice");
    spec.variants.push_back(var);
}

// The compare section's keys, read like the run config's (train/config_schema.h).
const SectionSchema<CompareSpec>& compare_schema() {
  static const SectionSchema<CompareSpec> schema = [] {
    SectionSchema<CompareSpec> s("compare");
    s.key("title", &CompareSpec::title, "",
          "the report's title (default \"pelab compare: <config stem>\")");
    s.key("out", &CompareSpec::out, "", "the report directory (default reports/<config stem>)");
    s.structured(
        "seeds", ConfigType::IntList, "train.seed of each run, distinct, >= 0 (default [train.seed])",
        [](CompareSpec& c, const YAML::Node& n, const Ctx& x) { c.seeds = parse_seeds(n, x.key_at()); },
        true);
    s.key("metric", &CompareSpec::metric, "auto|exact_match|token_accuracy|perplexity|loss",
          "the report's primary metric; auto = exact_match (perplexity for task lm)");
    s.key("unconverged", &CompareSpec::unconverged, "report|exclude|fail",
          "runs that missed their stop criterion (train.stop_when): report = keep them, marked "
          "†; exclude = leave them out of means and intervals; fail = write the report, then "
          "fail naming them");
    s.structured("schemes", ConfigType::StringList,
                 "Required. The rows: a scheme name (= {name: X, set: {pe.scheme: X}}) or {name, "
                 "set: {section.key: value}, expect: cannot_learn, why: \"reason\"}",
                 [](CompareSpec& c, const YAML::Node& n, const Ctx& x) {
                   if (!n.IsSequence() || n.size() == 0)
                     fail_at(x.key_at(), "compare.schemes must be a non-empty list");
                   for (size_t i = 0; i < n.size(); ++i) add_scheme(c, n[i], i, x.file);
                 });
    s.structured("variants", ConfigType::StringList,
                 "eval-time variants (no retraining): a scheme's shorthand (pi, ntk, ...), "
                 "randpos, or {name, set, schemes, positions: random|default}",
                 [](CompareSpec& c, const YAML::Node& n, const Ctx& x) {
                   if (!n.IsSequence()) fail_at(x.key_at(), "compare.variants must be a list");
                   for (size_t i = 0; i < n.size(); ++i) add_variant(c, n[i], i, x.file);
                 });
    s.alias("eval_variants", "variants");
    s.structured(
        "jobs", ConfigType::Int, "runs trained at once, each in its own process, >= 1 (default: "
        "the number of cores; --jobs N overrides)",
        [](CompareSpec& c, const YAML::Node& n, const Ctx& x) { c.jobs = parse_jobs(n, x.key_at()); },
        true);
    s.structured("search", ConfigType::Map,
                 "a hyper-parameter grid {section.key: [value, ...]} of training keys; chosen per "
                 "scheme on the in-distribution validation split",
                 [](CompareSpec& c, const YAML::Node& n, const Ctx& x) {
                   c.search = parse_search(n, x.file, x.key_at());
                 });
    s.structured("slurm", ConfigType::Map,
                 "--emit-slurm resources (cpus_per_task, time, mem, partition, max_parallel, "
                 "options; train/study/slurm.h)",
                 [](CompareSpec& c, const YAML::Node& n, const Ctx& x) {
                   if (!n.IsMap())
                     fail_at(x.key_at(),
                             "compare.slurm must be a mapping (cpus_per_task, time, mem, "
                             "partition, max_parallel, options)");
                   for (auto f = n.begin(); f != n.end(); ++f)
                     set_slurm_key(c.slurm, f->first.Scalar(), f->second,
                                   yaml_where(x.file, f->first));
                 });
    return s;
  }();
  return schema;
}

void parse_compare_node(const YAML::Node& c, const std::string& source, CompareSpec& spec) {
  if (!c.IsDefined() || c.IsNull())
    fail_at(source, "the compare section is empty (it needs at least compare.schemes)");
  if (!c.IsMap()) fail_at(yaml_where(source, c), "compare must be a mapping");
  compare_schema().read(spec, c, source);
  if (spec.schemes.empty()) fail_at(source, "compare.schemes is missing");
  for (const auto& v : spec.variants)
    for (const auto& s : v.schemes) {
      bool found = false;
      for (const auto& sc : spec.schemes) found = found || sc.name == s;
      if (!found) fail_at(source, "compare.variants (" + v.name + "): unknown scheme '" + s + "'");
    }
}

std::string default_out(const std::string& source) {
  std::string stem = fs::path(source).stem().string();
  if (stem.empty() || stem == "<string>") stem = "compare";
  return (fs::path("reports") / stem).string();
}

}  // namespace

namespace compare_detail {

// `s` for a message: as it is up to 60 bytes, else its first 40 and its length.
std::string shortened(const std::string& s) {
  if (s.size() <= 60) return s;
  return s.substr(0, 40) + "... (" + std::to_string(s.size()) + " bytes)";
}

bool eval_time_key(const std::string& k) {
  const auto& ok = eval_time_keys();
  return std::find(ok.begin(), ok.end(), k) != ok.end() || k.rfind("eval.", 0) == 0;
}

std::string key_of(const std::string& set) {
  const size_t eq = set.find('=');
  return trim(eq == std::string::npos ? set : set.substr(0, eq));
}

// A variant without `schemes:` applies to a scheme that declares every pe.* key the variant sets
// (to every scheme when it sets none): asked of the registry, no scheme names here.
bool variant_fits_scheme(const CompareVariant& v, const std::string& scheme) {
  for (const auto& set : v.sets) {
    const std::string k = key_of(set);
    if (k.rfind("pe.", 0) == 0 && models::pe_key_scheme(k) != scheme) return false;
  }
  return true;
}

// Whether an eval-time variant applies to a scheme whose resolved config is `cfg`: the schemes it
// names, else every scheme trained with randomized positions (positions: random) or every scheme
// that declares the pe.* keys it sets.
bool variant_applies(const CompareVariant& v, const CompareScheme& s, const Config& cfg) {
  if (!v.schemes.empty())
    return std::find(v.schemes.begin(), v.schemes.end(), s.name) != v.schemes.end();
  return v.positions == "random" ? cfg.model.pe.randomized_positions
                                 : variant_fits_scheme(v, cfg.model.pe.scheme);
}

std::vector<SearchCandidate> search_candidates(const std::vector<CompareSearchKey>& search) {
  if (search.empty()) return {SearchCandidate{}};
  // Short names (the part after the section) unless two keys share one.
  std::vector<std::string> names;
  for (const auto& sk : search) names.push_back(sk.key.substr(sk.key.find('.') + 1));
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = 0; j < names.size(); ++j)
      if (i != j && names[i] == search[j].key.substr(search[j].key.find('.') + 1))
        names[i] = search[i].key;
  auto clean = [](const std::string& v) {
    std::string o;
    for (char c : v)
      o += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
                   c == '_'
               ? c
               : '_';
    return o;
  };
  std::vector<SearchCandidate> out = {SearchCandidate{}};
  for (size_t k = 0; k < search.size(); ++k) {
    std::vector<SearchCandidate> next;
    for (const auto& c : out)
      for (const auto& v : search[k].values) {
        SearchCandidate d = c;
        d.label += (d.label.empty() ? "" : ",") + names[k] + "=" + clean(v);
        d.sets.push_back(search[k].key + "=" + v);
        next.push_back(d);
      }
    out = next;
  }
  std::set<std::string> labels;
  for (const auto& c : out)
    if (!labels.insert(c.label).second)
      fail_at(search.front().where,
              "compare.search: two candidates get the same run name '" + c.label +
                  "' (values that differ only in characters other than letters, digits, "
                  ". - + _)");
  return out;
}

bool is_lm(const Config& c) { return c.task.name == "lm"; }

}  // namespace compare_detail

// ---------------- shared with train/study/suite.cpp ----------------

std::string entry_name(const YAML::Node& e, const std::vector<std::string>& valid,
                       const std::string& what, const std::string& source) {
  for (auto f = e.begin(); f != e.end(); ++f) {
    const std::string k = f->first.IsScalar() ? f->first.Scalar() : value_text(f->first);
    if (std::find(valid.begin(), valid.end(), k) != valid.end()) continue;
    const std::string near = nearest_name(k, valid);
    fail_at(yaml_where(source, f->first),
            what + ": unknown key '" + k + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
                " (valid: " + join(valid, ", ") + ")");
  }
  if (!e["name"] || !e["name"].IsScalar()) fail_at(yaml_where(source, e), what + " needs a name");
  return e["name"].Scalar();
}

bool safe_run_name(const std::string& s) { return safe_name(s); }

std::vector<std::string> parse_config_set_map(const YAML::Node& n, const std::string& source,
                                              const std::string& what) {
  return parse_set_map(n, source, what);
}

ConfigReferenceSection compare_reference_section() {
  return {"`compare` (compare configs)",
          "A compare config (docs/experiments.md, `pelab compare`) is a run config plus a "
          "`compare:` section: the schemes (each a set of overrides on the run config), seeds, "
          "eval-time variants, an optional hyper-parameter search and the report's settings. "
          "Unknown keys and bad values are errors naming the file and line; `--set compare.KEY=V` "
          "sets seeds, out, title, metric, unconverged, jobs and slurm.KEY.",
          compare_schema().keys()};
}

// ---------------- loading ----------------

CompareSpec load_compare_string(const std::string& yaml, const std::string& source,
                                const std::vector<std::string>& overrides) {
  // Parsed once: an anchor of one section can be used in another.
  return load_compare_node(parse_config_yaml(yaml, source), yaml, source, overrides);
}

CompareSpec load_compare_node(const YAML::Node& root, const std::string& text,
                              const std::string& source,
                              const std::vector<std::string>& overrides) {
  CompareSpec spec;
  spec.source = source;
  spec.config_text = text;
  // The literature section is the report's, never a run's: removed before the run config is read.
  const YAML::Node literature =
      root.IsMap() ? root["literature"] : YAML::Node(YAML::NodeType::Undefined);
  if (!root.IsDefined() || root.IsNull() || !root.IsMap() || !root["compare"])
    fail_at(source,
            "no compare section (a compare config needs compare.schemes; see "
            "docs/experiments.md)");
  parse_compare_node(root["compare"], source, spec);
  std::vector<std::string> base_sets;
  for (const auto& o : overrides) {
    const std::string k = key_of(o);
    if (k == "literature" || k.rfind("literature.", 0) == 0)
      fail_at("--set " + o,
              "the literature section cannot be set from the command line; "
              "edit it in the config file");
    if (k.rfind("compare.", 0) != 0) {
      base_sets.push_back(o);
      continue;
    }
    const std::string where = "--set " + o;
    const size_t eq = o.find('=');
    if (eq == std::string::npos) fail_at(where, "expected compare.key=value");
    const std::string v = o.substr(eq + 1), name = k.substr(std::string("compare.").size());
    if (name.rfind("slurm.", 0) == 0) {
      YAML::Node n;
      try {
        n = YAML::Load(v);
      } catch (const YAML::Exception&) {
        n = YAML::Node(v);
      }
      set_slurm_key(spec.slurm, name.substr(std::string("slurm.").size()), n, where);
    } else {
      compare_schema().set(spec, name, v, where);
    }
  }
  spec.cli_sets = base_sets;
  spec.overrides = overrides;
  spec.base = load_config_node(without_blocks(root, {"compare", "literature"}), source, base_sets);
  if (spec.metric == "exact_match" && is_lm(spec.base))
    fail_at(source, "compare.metric: the lm task has no exact match (use perplexity or loss)");
  // Every scheme's settings must make a valid config (the model-level checks run in compare_plan).
  for (const auto& s : spec.schemes) {
    Config c = spec.base;
    try {
      apply_overrides(c, s.sets);
    } catch (const std::exception& e) {
      fail_at(s.where, "compare.schemes (" + s.name + "): " + e.what());
    }
  }
  // Every search value must be valid for its key, and each a different value: two spellings of
  // one number (0.001, 1e-3, 0.0010) would train the same run twice under two names.
  for (const auto& sk : spec.search) {
    std::map<std::string, std::string> spelled;  // the value as the config holds it -> as written
    for (const auto& v : sk.values) {
      Config c = spec.base;
      try {
        apply_overrides(c, {sk.key + "=" + v});
      } catch (const std::exception& e) {
        fail_at(sk.where, "compare.search." + sk.key + ": " + e.what());
      }
      const std::string value = config_value_text(c, sk.key);
      const auto [first, fresh] = spelled.emplace(value, v);
      if (!fresh)
        fail_at(sk.where, "compare.search." + sk.key + ": " + shortened(first->second) + " and " +
                              shortened(v) + " are the same value (" + shortened(value) +
                              "); list each value once");
    }
  }
  (void)search_candidates(spec.search);
  if (literature.IsDefined()) {
    LiteratureContext ctx;
    ctx.rows = compare_row_labels(spec);
    ctx.lm = is_lm(spec.base);
    ctx.lengths = ctx.lm ? spec.base.task.lm_eval_lengths : spec.base.task.test_lengths;
    ctx.lengths_key = ctx.lm ? "task.lm_eval_lengths" : "task.test_lengths";
    ctx.default_metric = spec.metric != "auto" ? spec.metric : ctx.lm ? "perplexity" : "exact_match";
    spec.literature = parse_literature(literature, source, ctx);
  }
  if (spec.seeds.empty()) spec.seeds = {spec.base.train.seed};
  if (spec.out.empty()) spec.out = default_out(source);
  if (spec.title.empty()) {
    const std::string stem = fs::path(source).stem().string();
    spec.title = "pelab compare: " + (stem.empty() || stem == "<string>" ? "comparison" : stem);
  }
  return spec;
}

CompareSpec load_compare(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(path + ": no such config file");
  return load_compare_string(read_text_file(path), path, overrides);
}

}  // namespace pelab
