// pelab — length-extrapolation comparisons (compare.h): the `compare:` config section, the plan of
// scheme × seed runs, training with reuse/resume, cached evaluation and the report.
#include "train/study/compare.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "data/batch.h"
#include "data/rng.h"
#include "models/pe/pe.h"
#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/parallel.h"
#include "pelab/strings.h"
#include "pelab/random.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/study/config_block.h"
#include "train/study/run_record.h"
#include "train/task_data.h"
#include "train/text_file.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {

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

// `s` for a message: as it is up to 60 bytes, else its first 40 and its length.
std::string shortened(const std::string& s) {
  if (s.size() <= 60) return s;
  return s.substr(0, 40) + "... (" + std::to_string(s.size()) + " bytes)";
}

// The longest file name (bytes) the file system of `dir` takes: pathconf(_PC_NAME_MAX) on the
// nearest folder of `dir` that exists, NAME_MAX (255) when it cannot say.
int64_t name_max(const fs::path& dir) {
  fs::path p = dir.empty() ? fs::path(".") : dir;
  std::error_code ec;
  while (!fs::is_directory(p, ec)) {
    if (!p.has_parent_path() || p.parent_path() == p) {
      p = ".";
      break;
    }
    p = p.parent_path();
  }
  const long n = ::pathconf(p.c_str(), _PC_NAME_MAX);
  return n > 0 ? n : NAME_MAX;
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
bool eval_time_key(const std::string& k) {
  const auto& ok = eval_time_keys();
  return std::find(ok.begin(), ok.end(), k) != ok.end() || k.rfind("eval.", 0) == 0;
}

// Keys that may differ between a stored run and the wanted config without retraining.
// `stops`: the run trains to a train.stop_when criterion. Its validations then decide where it
// stops, so the validation cadence and split size (train.eval_every, task.num_eval_examples)
// change what is trained.
bool reusable_difference(const std::string& k, bool stops) {
  if (stops && (k == "train.eval_every" || k == "task.num_eval_examples")) return false;
  static const std::set<std::string> ok = {"train.log_every",        "train.eval_every",
                                           "train.checkpoint_every", "train.keep_checkpoints",
                                           "train.threads",          "train.device",
                                           "train.run_dir",          "train.run_name",
                                           "train.resume",           "train.tags",
                                           "task.test_lengths",      "task.lm_eval_lengths",
                                           "task.num_eval_examples"};
  return ok.count(k) || k.rfind("eval.", 0) == 0 || (eval_time_key(k) && k.rfind("pe.", 0) == 0);
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

// The grid of compare.search (product of the value lists, the first key varying slowest): each
// candidate's label ("lr=0.001,warmup=10") and settings ("train.lr=0.001", ...). One candidate
// with no label and no settings without a search.
struct SearchCandidate {
  std::string label;
  std::vector<std::string> sets;
};
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

std::string parse_unconverged(const std::string& v, const std::string& where) {
  if (v != "report" && v != "exclude" && v != "fail")
    fail_at(where, "compare.unconverged: expected report, exclude or fail, got '" + v + "'");
  return v;
}


void parse_compare_node(const YAML::Node& c, const std::string& source, CompareSpec& spec) {
  if (!c.IsDefined() || c.IsNull())
    fail_at(source, "the compare section is empty (it needs at least compare.schemes)");
  if (!c.IsMap()) fail_at(yaml_where(source, c), "compare must be a mapping");
  for (auto it = c.begin(); it != c.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;
    const std::string where = yaml_where(source, it->first);
    if (k == "title") {
      spec.title = value_text(v);
    } else if (k == "out") {
      spec.out = value_text(v);
    } else if (k == "metric") {
      spec.metric = value_text(v);
    } else if (k == "seeds") {
      spec.seeds = parse_seeds(v, where);
    } else if (k == "unconverged") {
      spec.unconverged = parse_unconverged(value_text(v), where);
    } else if (k == "schemes") {
      if (!v.IsSequence() || v.size() == 0)
        fail_at(where, "compare.schemes must be a non-empty list");
      for (size_t i = 0; i < v.size(); ++i) {
        const YAML::Node e = v[i];
        const std::string what = "compare.schemes[" + std::to_string(i) + "]";
        CompareScheme s;
        if (e.IsScalar()) {
          s.name = e.Scalar();
          s.sets.push_back("pe.scheme=" + s.name);
        } else if (e.IsMap()) {
          for (auto f = e.begin(); f != e.end(); ++f) {
            const std::string fk = f->first.Scalar();
            if (fk != "name" && fk != "set" && fk != "expect" && fk != "why")
              fail_at(yaml_where(source, f->first),
                      what + ": unknown key '" + fk + "' (valid: name, set, expect, why)");
          }
          if (!e["name"] || !e["name"].IsScalar())
            fail_at(yaml_where(source, e), what + " needs a name");
          s.name = e["name"].Scalar();
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
    } else if (k == "variants" || k == "eval_variants") {
      if (!v.IsSequence()) fail_at(where, "compare.variants must be a list");
      for (size_t i = 0; i < v.size(); ++i) {
        const YAML::Node e = v[i];
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
          for (auto f = e.begin(); f != e.end(); ++f) {
            const std::string fk = f->first.Scalar();
            if (fk != "name" && fk != "set" && fk != "schemes" && fk != "positions")
              fail_at(yaml_where(source, f->first),
                      what + ": unknown key '" + fk + "' (valid: name, set, schemes, positions)");
          }
          if (!e["name"] || !e["name"].IsScalar())
            fail_at(yaml_where(source, e), what + " needs a name");
          var.name = e["name"].Scalar();
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
    } else if (k == "jobs") {
      spec.jobs = parse_jobs(v, where);
    } else if (k == "search") {
      spec.search = parse_search(v, source, where);
    } else if (k == "slurm") {
      if (!v.IsMap())
        fail_at(where,
                "compare.slurm must be a mapping (cpus_per_task, time, mem, partition, "
                "max_parallel, options)");
      for (auto f = v.begin(); f != v.end(); ++f)
        set_slurm_key(spec.slurm, f->first.Scalar(), f->second, yaml_where(source, f->first));
    } else {
      fail_at(where, "unknown key 'compare." + k +
                         "' (valid: title, out, seeds, metric, unconverged, schemes, "
                         "variants, jobs, search, slurm)");
    }
  }
  if (spec.schemes.empty()) fail_at(source, "compare.schemes is missing");
  for (const auto& v : spec.variants)
    for (const auto& s : v.schemes) {
      bool found = false;
      for (const auto& sc : spec.schemes) found = found || sc.name == s;
      if (!found) fail_at(source, "compare.variants (" + v.name + "): unknown scheme '" + s + "'");
    }
}

const std::set<std::string>& metric_names() {
  static const std::set<std::string> m = {"auto", "exact_match", "token_accuracy", "perplexity",
                                          "loss"};
  return m;
}

// Text identifying the data a config builds (TaskData depends on the task section only).
std::string task_key(const Config& c) {
  std::string k;
  for (const auto& key : config_schema())
    if (key.section == "task") k += config_value_text(c, key.full_name()) + "\n";
  return k;
}

// FNV-1a 64, hex.
std::string fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The config with the keys that do not affect evaluation normalised (eval_identity).
Config eval_normalized(Config c) {
  c.train.threads = 1;
  c.train.device = "cpu";
  c.train.log_every = 1;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  c.train.keep_checkpoints = 0;
  c.train.run_dir = "runs";
  c.train.run_name = "run";
  c.train.resume = "";
  c.train.tags.clear();
  c.eval.save_predictions = false;
  return c;
}
std::string eval_identity(const Config& c) { return config_to_yaml(eval_normalized(c)); }

// "KEY was A, the plan has B" for the first key in which two configs differ after
// eval_normalized(); "" when none does.
std::string first_config_difference(const Config& had, const Config& want) {
  const Config a = eval_normalized(had), b = eval_normalized(want);
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    const std::string x = config_value_text(a, k), y = config_value_text(b, k);
    if (x != y) return k + " was " + x + ", the plan has " + y;
  }
  return "";
}

std::string default_out(const std::string& source) {
  std::string stem = fs::path(source).stem().string();
  if (stem.empty() || stem == "<string>") stem = "compare";
  return (fs::path("reports") / stem).string();
}

bool is_lm(const Config& c) { return c.task.name == "lm"; }

// The 1-minute load average ("?" when unknown): timings on a shared machine need it.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string v;
  if (!(in >> v)) return "?";
  return v;
}

}  // namespace

// ---------------- shared with train/study/suite.cpp ----------------

bool safe_run_name(const std::string& s) { return safe_name(s); }

std::vector<std::string> parse_config_set_map(const YAML::Node& n, const std::string& source,
                                              const std::string& what) {
  return parse_set_map(n, source, what);
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
    const std::string v = o.substr(eq + 1);
    if (k == "compare.seeds") {
      YAML::Node n;
      try {
        n = YAML::Load(v);
      } catch (const YAML::Exception& ex) {
        fail_at(where, "value '" + v + "' is not valid YAML: " + ex.msg);
      }
      spec.seeds = parse_seeds(n, where);
    } else if (k == "compare.out") {
      spec.out = v;
    } else if (k == "compare.title") {
      spec.title = v;
    } else if (k == "compare.metric") {
      spec.metric = v;
    } else if (k == "compare.unconverged") {
      spec.unconverged = parse_unconverged(v, where);
    } else if (k == "compare.jobs") {
      YAML::Node n;
      try {
        n = YAML::Load(v);
      } catch (const YAML::Exception&) {
        n = YAML::Node(v);
      }
      spec.jobs = parse_jobs(n, where);
    } else if (k.rfind("compare.slurm.", 0) == 0) {
      YAML::Node n;
      try {
        n = YAML::Load(v);
      } catch (const YAML::Exception&) {
        n = YAML::Node(v);
      }
      set_slurm_key(spec.slurm, k.substr(std::string("compare.slurm.").size()), n, where);
    } else {
      fail_at(where,
              "compare.schemes / compare.variants / compare.search cannot be set from the "
              "command line; valid: compare.seeds, compare.out, compare.title, "
              "compare.metric, compare.unconverged, compare.jobs, compare.slurm.KEY");
    }
  }
  spec.cli_sets = base_sets;
  spec.overrides = overrides;
  spec.base = load_config_node(without_blocks(root, {"compare", "literature"}), source, base_sets);
  if (!metric_names().count(spec.metric))
    fail_at(source,
            "compare.metric: expected auto, exact_match, token_accuracy, perplexity "
            "or loss, got '" +
                spec.metric + "'");
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

// ---------------- the plan ----------------

std::vector<std::string> compare_row_labels(const CompareSpec& spec) {
  std::vector<std::string> labels;
  for (const auto& s : spec.schemes) {
    labels.push_back(s.name);
    Config cfg = spec.base;
    try {
      apply_overrides(cfg, s.sets);
    } catch (const std::exception&) {
      continue;  // reported by the loader / compare_plan
    }
    for (const auto& v : spec.variants)
      if (variant_applies(v, s, cfg)) labels.push_back(s.name + "+" + v.name);
  }
  return labels;
}

namespace {

// Refuses, before anything trains, a run whose directory or files the file system cannot create
// because a name pelab forms is too long: the run directory's name (scheme, search candidate and
// seed) and every folder above it (compare.out, a suite's task), and the evaluation cache of each
// variant (<run>/compare_eval/<variant>.csv, with room for a temporary's suffix). `limit` is the
// file system's longest name (name_max).
void check_run_path(const CompareSpec& spec, const CompareScheme& scheme,
                    const SearchCandidate& cand, const Config& cfg,
                    const std::vector<ComparePlanVariant>& variants, int64_t limit) {
  const std::string what =
      "compare.schemes (" + shortened(scheme.name) +
      (cand.label.empty() ? "" : ", search candidate " + shortened(cand.label)) + ")";
  auto too_long = [&](const std::string& n) { return static_cast<int64_t>(n.size()) > limit; };
  const std::string allowed = " is too long for a file name (the file system takes up to " +
                              std::to_string(limit) + " bytes)";
  const std::string& name = cfg.train.run_name;
  if (too_long(name))
    throw ConfigError(spec.source + ": " + what + ": the run directory name '" + shortened(name) +
                      "'" + allowed + "; shorten the scheme name" +
                      (cand.label.empty() ? "" : " or write the search values shorter (1e-3)"));
  for (const auto& part : fs::path(cfg.train.run_dir))
    if (too_long(part.string()))
      throw ConfigError(spec.source + ": " + what + ": the folder '" + shortened(part.string()) +
                        "' of the run directory" + allowed +
                        "; shorten the report directory (compare.out or --out; in a suite, "
                        "suite.out or the task name)");
  const int64_t temporary_suffix = 32;  // ".tmp" and what makes a temporary unique
  for (const auto& v : variants) {
    const std::string file = v.name + ".csv";
    if (static_cast<int64_t>(file.size()) + temporary_suffix > limit)
      throw ConfigError(spec.source + ": compare.variants (" + shortened(v.name) +
                        "): its evaluation file '" + shortened(file) + "'" + allowed +
                        ", with room for a temporary's suffix; shorten the variant name");
  }
}

}  // namespace

std::vector<ComparePlanRun> compare_plan(const CompareSpec& spec, const std::string& out_dir) {
  std::vector<ComparePlanRun> plan;
  std::map<std::string, std::shared_ptr<TaskData>> data_cache;
  auto data_for = [&](const Config& c) {
    const std::string k = task_key(c);
    auto it = data_cache.find(k);
    if (it != data_cache.end()) return it->second;
    auto d = std::make_shared<TaskData>(c);
    data_cache[k] = d;
    return d;
  };
  const std::vector<SearchCandidate> candidates = search_candidates(spec.search);
  const int64_t limit = name_max(fs::path(out_dir) / "runs");
  // Every scheme x search candidate (one candidate without a search).
  std::vector<std::pair<const CompareScheme*, size_t>> rows;
  for (const auto& s : spec.schemes)
    for (size_t ci = 0; ci < candidates.size(); ++ci) rows.emplace_back(&s, ci);
  for (const auto& [scheme, ci] : rows) {
    const CompareScheme& s = *scheme;
    const SearchCandidate& cand = candidates[ci];
    const std::string what = "compare.schemes (" + s.name +
                             (cand.label.empty() ? "" : ", search candidate " + cand.label) + ")";
    Config cfg = spec.base;
    try {
      apply_overrides(cfg, s.sets);
      apply_overrides(cfg, cand.sets);
    } catch (const std::exception& e) {
      throw ConfigError(spec.source + ": " + what + ": " + e.what());
    }
    std::shared_ptr<TaskData> data = data_for(cfg);
    // Builds the model once so that scheme settings the config rules cannot see fail now.
    try {
      (void)build_model(cfg, *data);
    } catch (const std::exception& e) {
      throw ConfigError(spec.source + ": " + what + ": " + e.what());
    }
    // Eval-time variants of this scheme.
    std::vector<ComparePlanVariant> variants;
    for (const auto& v : spec.variants) {
      if (!variant_applies(v, s, cfg)) continue;
      Config vc = cfg;
      std::vector<std::string> sets;
      for (std::string set : v.sets) {
        if (models::pe_is_variant_factor_key(key_of(set)) &&
            trim(set.substr(set.find('=') + 1)) == "auto") {
          int64_t need = data->train_positions();
          std::shared_ptr<TaskData> vd = data;
          // The variant may change the test lengths: compute over the variant's own tests.
          Config probe = cfg;
          std::vector<std::string> others;
          for (const auto& o : v.sets)
            if (key_of(o) != key_of(set)) others.push_back(o);
          apply_overrides(probe, others);
          vd = data_for(probe);
          for (const auto& t : vd->tests())
            need = std::max(need, positions_needed(t, vd->is_decoder()));
          const double f = static_cast<double>(need) / static_cast<double>(data->train_positions());
          set = key_of(set) + "=" + format_double(std::max(1.0, f), 6);
        }
        sets.push_back(set);
      }
      try {
        apply_overrides(vc, sets);
        (void)build_model(vc, *data_for(vc));
      } catch (const std::exception& e) {
        throw ConfigError(spec.source + ": compare.variants (" + v.name + ") for scheme " + s.name +
                          ": " + e.what());
      }
      variants.push_back({v.name, vc, v.positions == "random"});
    }
    for (int64_t seed : spec.seeds) {
      ComparePlanRun r;
      r.scheme = s.name;
      r.seed = seed;
      r.candidate = cand.label;
      r.candidate_index = ci;
      r.candidate_sets = cand.sets;
      r.cfg = cfg;
      r.cfg.train.seed = seed;
      r.cfg.train.run_dir = (fs::path(out_dir) / "runs").string();
      r.cfg.train.run_name =
          s.name + (cand.label.empty() ? "" : "@" + cand.label) + "_seed" + std::to_string(seed);
      check_run_path(spec, s, cand, r.cfg, variants, limit);
      r.cfg.train.resume = "";
      validate_config(r.cfg);
      for (ComparePlanVariant v : variants) {
        v.cfg.train.seed = seed;
        v.cfg.train.run_dir = r.cfg.train.run_dir;
        v.cfg.train.run_name = r.cfg.train.run_name;
        v.cfg.train.resume = "";
        r.variants.push_back(v);
      }
      plan.push_back(std::move(r));
    }
  }
  return plan;
}

// ---------------- running ----------------

namespace {

enum class RunState { Fresh, Finished, Partial, Stale };

struct RunInspection {
  RunState state = RunState::Fresh;
  std::string reason;  // for Stale
  int64_t step = 0;    // newest checkpoint's step
  Config stored;
  // false: checkpoints/ is gone and the run is its record (run_record.h): reusable from its
  // evaluation cache, not evaluable anew.
  bool weights = true;
};

// N of the newest checkpoint's file name step_<N>.h5 (following last.h5), -1 if none. From the
// name only: checkpoint.h's checkpoint_step opens the file and reads /step.
int64_t checkpoint_file_step(const std::string& path) {
  if (path.empty()) return -1;
  std::error_code ec;
  fs::path p = path;
  if (fs::is_symlink(p, ec)) p = p.parent_path() / fs::read_symlink(p, ec);
  const std::string f = p.filename().string();
  if (f.rfind("step_", 0) != 0 || f.size() < 9) return -1;
  const std::string num = f.substr(5, f.size() - 8);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(num);
}

RunInspection inspect_run(const std::string& dir, const Config& want) {
  RunInspection r;
  std::error_code ec;
  if (!is_run_directory(dir)) {
    r.state = fs::exists(dir, ec) && !fs::is_empty(dir, ec) ? RunState::Stale : RunState::Fresh;
    r.reason = "no config.yaml";
    return r;
  }
  std::string mixed;
  try {
    const std::string path = (fs::path(dir) / "config.yaml").string();
    r.stored = load_config(path);
    mixed = mixed_randomized_batches(read_text_file(path));
  } catch (const std::exception& e) {
    r.state = RunState::Stale;
    r.reason = std::string("unreadable config.yaml: ") + e.what();
    return r;
  }
  if (!mixed.empty()) {
    r.state = RunState::Stale;
    r.reason = mixed;
    return r;
  }
  const bool stops = want.train.stop_when.enabled() || r.stored.train.stop_when.enabled();
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    if (reusable_difference(k, stops)) continue;
    const std::string a = config_value_text(r.stored, k), b = config_value_text(want, k);
    if (a != b) {
      r.state = RunState::Stale;
      r.reason = "config changed: " + k + " was " + a + ", now " + b;
      return r;
    }
  }
  const std::string ck = latest_checkpoint(dir);
  r.step = checkpoint_file_step(ck);
  if (ck.empty() || r.step < 0) {
    // No weights: a run record (run_record.h) stands for a finished run.
    std::error_code lec;
    if (fs::exists(fs::symlink_status(fs::path(dir) / run_record_file(), lec))) {
      try {
        const RunRecord rec = read_run_record(dir);
        if (rec.config_digest != fingerprint(eval_identity(r.stored)))
          throw Error("its config digest " + rec.config_digest + " is not that of its config.yaml");
        r.step = rec.step;
        r.weights = false;
      } catch (const std::exception& e) {
        r.state = RunState::Stale;
        r.reason = std::string("no checkpoint and an unusable record.json: ") + e.what();
        return r;
      }
    } else {
      r.state = RunState::Stale;
      r.reason = "no checkpoint";
      return r;
    }
  }
  if (r.step > want.train.steps) {
    r.state = RunState::Stale;
    r.reason = "trained past train.steps";
    return r;
  }
  // Finished: trained to train.steps, or stopped there by its train.stop_when criterion, and
  // evaluated (eval.json written after the final checkpoint). A criterion met at this step also
  // makes a resume train no further, so such a run is reused, not resumed.
  bool finished = false;
  if (fs::exists(fs::path(dir) / "eval.json", ec)) {
    if (r.step == want.train.steps) {
      finished = true;
    } else {
      try {
        const Convergence c = read_convergence(dir);
        finished = want.train.stop_when.stop && c.met && c.step == r.step;
      } catch (const std::exception&) {
        finished = false;  // an unreadable eval.json: resuming rewrites it
      }
    }
  }
  if (!finished && !r.weights) {
    r.state = RunState::Stale;
    r.reason = "a record without checkpoints of a run that did not finish";
    return r;
  }
  r.state = finished ? RunState::Finished : RunState::Partial;
  return r;
}

// "<file>:<size>:<mtime>" of a run's newest checkpoint: with the evaluation config, the key of its
// evaluation cache; "" without one.
std::string checkpoint_stamp(const std::string& run_dir) {
  const std::string ck = latest_checkpoint(run_dir);
  if (ck.empty()) return "";
  std::error_code ec;
  fs::path real = fs::canonical(ck, ec);
  if (ec) real = ck;
  struct stat st {};
  std::string stamp = real.filename().string();
  if (::stat(real.c_str(), &st) == 0)
    stamp += ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
  return stamp;
}

// Writes <run>/record.json for a finished run that has its weights, unless one for the same
// checkpoint is there (the machine it names is the one that trained and evaluated the run;
// retraining removes it). A run without weights keeps the record it has.
void ensure_run_record(const std::string& dir) {
  const std::string ck = latest_checkpoint(dir);
  const int64_t step = checkpoint_file_step(ck);
  if (ck.empty() || step < 0) return;
  const std::string stamp = checkpoint_stamp(dir);
  try {
    if (read_run_record(dir).checkpoint == stamp) return;
  } catch (const std::exception&) {
    // none, or unreadable: (re)written below
  }
  RunRecord rec = this_machine_record();
  rec.config_digest =
      fingerprint(eval_identity(load_config((fs::path(dir) / "config.yaml").string())));
  rec.step = step;
  rec.checkpoint = stamp;
  write_text_file((fs::path(dir) / run_record_file()).string(), run_record_json(rec));
}

// Wall time (s) of training and the training-loss curve, from a run's metrics.jsonl.
void read_run_metrics(const std::string& dir, double& wall,
                      std::vector<std::pair<int64_t, double>>& curve) {
  wall = std::numeric_limits<double>::quiet_NaN();
  curve.clear();
  std::error_code ec;
  const std::string p = (fs::path(dir) / "metrics.jsonl").string();
  if (!fs::exists(p, ec)) return;
  std::vector<MetricRow> rows;
  try {
    rows = parse_metrics_jsonl(read_text_file(p), p);
  } catch (const std::exception&) {
    return;
  }
  for (const auto& row : rows) {
    const MetricValue* type = row.get("type");
    if (!type || type->kind != MetricValue::Kind::Str || type->s != "train") continue;
    const MetricValue* step = row.get("step");
    const MetricValue* loss = row.get("loss");
    const MetricValue* el = row.get("elapsed_s");
    auto num = [](const MetricValue* v) {
      if (!v) return std::numeric_limits<double>::quiet_NaN();
      if (v->kind == MetricValue::Kind::Int) return static_cast<double>(v->i);
      if (v->kind == MetricValue::Kind::Num) return v->d;
      return std::numeric_limits<double>::quiet_NaN();
    };
    if (step && loss && std::isfinite(num(loss)))
      curve.emplace_back(static_cast<int64_t>(num(step)), num(loss));
    if (std::isfinite(num(el)) && num(el) >= 0) wall = num(el);  // (records may be foreign)
  }
}

int in_distribution(const Config& c, int64_t length) {
  if (length <= 0) return -1;
  if (is_lm(c)) return length <= c.task.lm_train_len ? 1 : 0;
  if (c.task.name == "textfile") return -1;
  return length >= c.task.train_min_len && length <= c.task.train_max_len ? 1 : 0;
}

// Throws unless a row read from an evaluation cache has values in their ranges and short printable
// names (they reach report.md and the plots).
void check_cached_row(const ResultRow& r, const std::string& where) {
  auto name_ok = [](const std::string& s) {
    if (s.empty() || s.size() > 200) return false;
    for (unsigned char c : s)
      if (c < 0x20 || c > 0x7e || c == '|' || c == '`' || c == '"' || c == '\\') return false;
    return true;
  };
  PELAB_CHECK(name_ok(r.split) && name_ok(r.status), where, ": split '", shortened(r.split),
              "' / status '", shortened(r.status),
              "' must be printable names of at most 200 characters");
  PELAB_CHECK(r.length >= 0 && r.length <= (int64_t{1} << 30), where, ": length ", r.length,
              " out of range");
  for (const char* m : {"loss", "perplexity", "token_accuracy", "exact_match"}) {
    const double v = row_metric(r, m);
    const auto [lo, hi] = metric_range(m);
    PELAB_CHECK(std::isnan(v) || (v >= lo && v <= hi), where, ": ", m, " ", v, " of ", r.split,
                " lies outside [", lo, ", ", hi, "]");
  }
  PELAB_CHECK(std::isnan(r.eval_wall_s) || (r.eval_wall_s >= 0 && std::isfinite(r.eval_wall_s)),
              where, ": eval_wall_s ", r.eval_wall_s, " out of range");
}

// Evaluates one run with one config (cached in <run>/compare_eval/<name>.csv).
std::vector<ResultRow> evaluate_run(const ComparePlanRun& run, const ComparePlanVariant& pv,
                                    const std::string& run_dir, bool& cached, double train_wall) {
  const std::string& variant = pv.name;
  const Config& ecfg = pv.cfg;
  const std::string ck = latest_checkpoint(run_dir);
  std::error_code ec;
  // Without weights the run is its record: the stamp of the checkpoint it was evaluated from.
  const std::string stamp =
      ck.empty() ? read_run_record(run_dir).checkpoint : checkpoint_stamp(run_dir);
  const std::string fp = fingerprint(eval_identity(ecfg) + "\n" + stamp +
                                     (pv.random_positions ? "\nrandom positions" : ""));
  const fs::path cache_dir = fs::path(run_dir) / "compare_eval";
  const fs::path cache = cache_dir / ((variant.empty() ? "base" : variant) + ".csv");
  const std::string head = "# pelab compare evaluation cache " + fp + "\n";
  if (fs::exists(cache, ec)) {
    try {
      const std::string text = read_text_file(cache.string());
      if (text.rfind(head, 0) == 0) {
        std::vector<ResultRow> rows = parse_results_csv(text.substr(head.size()), cache.string());
        // The file may come from another machine (a merged record): the run's identity is the
        // plan's, every value must lie in its range.
        for (auto& r : rows) {
          check_cached_row(r, cache.string());
          r.scheme = run.scheme;
          r.variant = variant;
          r.seed = run.seed;
          r.in_distribution = in_distribution(ecfg, r.length);
          r.train_wall_s = train_wall;
        }
        cached = true;
        return rows;
      }
    } catch (const std::exception& e) {
      // unreadable cache: evaluate again (a record without weights cannot)
      if (ck.empty()) throw;
    }
  }
  cached = false;
  if (ck.empty())
    throw Error("compare: " + run.cfg.train.run_name + " needs its weights: its record (" +
                run_dir + ", no checkpoints/) has no evaluation " +
                (variant.empty() ? std::string("as trained") : "with variant '" + variant + "'") +
                " for this config (new test lengths or variant); bring its checkpoints/ back, or "
                "evaluate it where they are (pelab compare CONFIG --only I there, I as --plan "
                "numbers it) and merge again");
  const double t0 = now_s();
  set_num_threads(ecfg.train.threads);
  LoadedModel lm = load_model(ecfg, ck);
  std::vector<EvalResult> res;
  Generator gen(
      data::derive_seed(static_cast<uint64_t>(ecfg.train.seed), "compare_eval_positions"));
  EvalOptions opt;
  if (pv.random_positions) {  // positions drawn as in training (Ruoss et al. 2023)
    opt.random_positions = &gen;
    opt.random_max_position = ecfg.model.pe.randomized_max_position;
  }
  for (const auto& s : lm.data->tests()) {
    if (stop_signal()) return {};
    res.push_back(evaluate_set(*lm.model, *lm.data, s, ecfg, opt));
  }
  const double wall = now_s() - t0;
  std::vector<ResultRow> rows;
  for (const auto& e : res) {
    ResultRow r;
    r.scheme = run.scheme;
    r.variant = variant;
    r.seed = run.seed;
    r.split = e.split;
    r.length = e.length;
    r.in_distribution = in_distribution(ecfg, e.length);
    r.status = e.status;
    r.loss = e.loss;
    r.perplexity = e.perplexity;
    r.token_accuracy = e.token_accuracy;
    r.exact_match = e.exact_match;
    r.train_wall_s = train_wall;
    r.eval_wall_s = wall;
    rows.push_back(r);
  }
  fs::create_directories(cache_dir, ec);
  write_text_file(cache.string(), head + results_csv(rows));
  return rows;
}

// Marks a run's result rows with the outcome of its stop criterion.
void set_convergence(std::vector<ResultRow>& rows, const Convergence& c) {
  for (auto& r : rows) {
    r.converged = c.has_criterion ? (c.met ? 1 : 0) : -1;
    r.criterion_step = c.has_criterion && c.met ? c.step : -1;
  }
}

std::string sets_text(const std::vector<std::string>& sets) {
  std::string s;
  for (const auto& x : sets) s += (s.empty() ? "" : ", ") + std::string("`") + x + "`";
  return s;
}

std::string task_summary(const Config& c) {
  const TaskConfig& t = c.task;
  std::ostringstream os;
  os << "Task **" << t.name << "** (" << (is_lm(c) ? "decoder-only language model" : t.formulation)
     << "), model " << c.model.arch << " d_model " << c.model.d_model << ", "
     << count_text(c.model.heads, "head") << ", ";
  if (c.model.arch == "seq2seq")
    os << c.model.encoder_layers << "+" << c.model.decoder_layers << " layers";
  else
    os << count_text(c.model.decoder_layers, "layer");
  os << "; " << count_text(c.train.steps, "step") << " of batch " << c.train.batch_size << " ("
     << c.train.optimizer << ", lr " << c.train.lr << ", " << c.train.schedule << ")";
  if (is_lm(c)) {
    os << "; corpus " << (t.corpus.empty() ? "Debian fortunes" : t.corpus)
       << ", non-overlapping evaluation windows of";
    for (size_t i = 0; i < t.lm_eval_lengths.size(); ++i)
      os << (i ? ", " : " ") << t.lm_eval_lengths[i];
    os << " tokens";
  } else if (t.name != "textfile") {
    os << "; " << t.num_eval_examples << " test examples per length";
  }
  os << ".";
  return os.str();
}

// Value of `metric` on the `valid` split of a run's final evaluation (eval.json, written by the
// trainer: one result object per line); NaN with the reason in *why when there is none.
double valid_metric(const std::string& run_dir, const std::string& metric, std::string* why) {
  const std::string p = (fs::path(run_dir) / "eval.json").string();
  std::string text;
  try {
    text = read_text_file(p);
  } catch (const std::exception&) {
    *why = "no eval.json";
    return std::numeric_limits<double>::quiet_NaN();
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (!t.empty() && t.back() == ',') t.pop_back();
    if (t.rfind("{\"split\"", 0) != 0) continue;
    MetricRow row;
    try {
      row = parse_metric_row(t, p);
    } catch (const std::exception&) {
      continue;
    }
    const MetricValue* split = row.get("split");
    if (!split || split->kind != MetricValue::Kind::Str || split->s != "valid") continue;
    const MetricValue* v = row.get(metric);
    const double x = !v                                ? std::numeric_limits<double>::quiet_NaN()
                     : v->kind == MetricValue::Kind::Num ? v->d
                     : v->kind == MetricValue::Kind::Int ? static_cast<double>(v->i)
                                                         : std::numeric_limits<double>::quiet_NaN();
    const auto [lo, hi] = metric_range(metric);  // (a merged record is someone else's file)
    if (x >= lo && x <= hi) return x;
    if (!std::isnan(x)) {
      *why = "valid " + metric + " " + format_double(x) + " out of range";
      return std::numeric_limits<double>::quiet_NaN();
    }
    *why = "valid " + metric + " not available";
    return std::numeric_limits<double>::quiet_NaN();
  }
  *why = "no valid split in eval.json";
  return std::numeric_limits<double>::quiet_NaN();
}

// ---------------- child processes (--jobs N) ----------------

std::string g_child_binary;  // set_compare_child_binary()

// open(path, flags | O_CLOEXEC) on a descriptor >= 3 (so that the child's dup2 onto 0, 1 and 2
// cannot clobber it, and no other child inherits it); -1 with *err = errno on failure.
int open_high_cloexec(const char* path, int flags, int* err) {
  int fd = ::open(path, flags | O_CLOEXEC, 0644);
  if (fd >= 0 && fd <= 2) {
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    *err = errno;
    ::close(fd);
    fd = moved;
  } else if (fd < 0) {
    *err = errno;
  }
  return fd;
}

// Starts `exe args...` with stdin /dev/null and stdout + stderr appended to `log_path`, SIGINT and
// SIGTERM at their defaults and no signal blocked. The child dies with this process: it asks the
// kernel for SIGTERM when its parent ends (PR_SET_PDEATHSIG; a pelab child stops at a checkpoint),
// so a `kill -9` of the comparison leaves no run training as an orphan that holds its run
// directory's lock. (The signal follows the thread that forks: call this from the thread that
// outlives the children, as run_compare's caller does.)
pid_t spawn_child(const std::string& exe, const std::vector<std::string>& args,
                  const std::string& log_path) {
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Everything the child needs is made here: between fork and exec it only makes system calls.
  int in_errno = 0, out_errno = 0;
  const int in = open_high_cloexec("/dev/null", O_RDONLY, &in_errno);
  const int out =
      open_high_cloexec(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, &out_errno);
  int report[2] = {-1, -1};  // the child writes exec's errno here; closed by a successful exec
  if (in < 0 || out < 0 || ::pipe2(report, O_CLOEXEC) != 0) {
    const int e = in < 0 ? in_errno : out < 0 ? out_errno : errno;
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    fail("compare: cannot start ", exe, ": ",
         in < 0 ? "/dev/null: " : out < 0 ? log_path + ": " : "", std::strerror(e));
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigset_t none;
  sigemptyset(&none);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);  // before PDEATHSIG: a TERM before exec ends the child
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(143);  // the parent died before the request took effect
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::execve(exe.c_str(), argv.data(), environ);
    const int e = errno;
    if (::write(report[1], &e, sizeof e) < 0) {
    }
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(in);
  ::close(out);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    fail("compare: cannot start ", exe, ": ", std::strerror(fork_errno));
  }
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(report[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    fail("compare: cannot start ", exe, ": ", std::strerror(exec_errno));
  }
  return pid;
}

// The newest train row of a run's metrics.jsonl (its last 16 KiB): step and loss; false if none.
bool latest_train_row(const std::string& run_dir, int64_t& step, double& loss) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl", std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 16384);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream lines(text);
  std::string line;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.find("\"train\"") == std::string::npos) continue;
    try {
      const MetricRow row = parse_metric_row(line, "metrics.jsonl");
      const MetricValue* t = row.get("type");
      const MetricValue* s = row.get("step");
      const MetricValue* l = row.get("loss");
      if (!t || t->s != "train" || !s || s->kind != MetricValue::Kind::Int) continue;
      step = s->i;
      loss = l && l->kind == MetricValue::Kind::Num ? l->d : std::nan("");
      found = true;
    } catch (const std::exception&) {
      // a line cut by the 16 KiB window or being written: skip it
    }
  }
  return found;
}

std::string elapsed_text(double s) {
  const int64_t t = static_cast<int64_t>(s);
  char buf[32];
  if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

// The reason a child gave for failing: the text of the last "pelab: error: " line it wrote to its
// log from byte `from` on (its own run; the log is appended to by every run of the folder), "" if
// none. The parent's message carries it, so that "run directory ... is in use by another pelab
// process (pid N)" is not only in the log.
std::string child_error(const std::string& log_path, std::uintmax_t from) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start =
      std::max<std::streamoff>(static_cast<std::streamoff>(from), size - 65536);
  if (size <= start) return "";
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string mark = "pelab: error: ";
  size_t at = text.rfind("\n" + mark);
  at = at == std::string::npos ? (text.rfind(mark, 0) == 0 ? 0 : at) : at + 1;
  if (at == std::string::npos) return "";
  std::string line = text.substr(at + mark.size(), text.find('\n', at) - at - mark.size());
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > 1000) line = line.substr(0, 1000) + " ...";
  return line;
}

std::string run_who(const ComparePlanRun& run) {
  return run.scheme + (run.candidate.empty() ? "" : "@" + run.candidate) + " seed " +
         std::to_string(run.seed);
}

// Trains the runs `todo` (plan indexes) in child processes, at most `jobs` at once: each child is
// `exe compare CONFIG --only I` with the same --set overrides and --out, its output appended to
// runs/<run>/compare.log. A signal to this process (stop_signal()) is forwarded as SIGTERM;
// returns false when interrupted. A child that fails throws, naming the run and its log.
bool train_in_children(const CompareSpec& spec, const CompareOptions& opt,
                       const std::vector<ComparePlanRun>& plan, const std::vector<size_t>& todo,
                       int64_t jobs, const std::string& out_dir, std::ostream& log) {
  const std::string exe = opt.exe.empty() ? g_child_binary : opt.exe;
  // The config as given (a config loaded from a string: the copy in the report directory).
  std::error_code ec;
  const std::string config = fs::is_regular_file(spec.source, ec)
                                 ? spec.source
                                 : (fs::path(out_dir) / "compare.yaml").string();
  const size_t N = plan.size();
  struct Child {
    size_t index;
    pid_t pid;
    std::string log;
    double t0;
    std::uintmax_t log_from;  // the log's size when the child started
  };
  std::vector<Child> running;
  size_t next = 0;
  bool stopping = false;
  std::string failure;
  // A block of lines redrawn on a terminal (progress bar / auto on a terminal), else plain lines.
  const bool tty =
      opt.progress == 1 || (opt.progress == -1 && &log == &std::cerr && ::isatty(2) == 1);
  size_t drawn = 0;  // lines of the progress block on the terminal
  double last_draw = 0;
  auto tag = [&](size_t i) { return "[" + std::to_string(i + 1) + "/" + std::to_string(N) + "] "; };
  auto clear_block = [&]() {
    if (drawn == 0) return;
    log << "\033[" << drawn << "A";
    for (size_t k = 0; k < drawn; ++k) log << "\033[2K\n";
    log << "\033[" << drawn << "A";
    drawn = 0;
  };
  auto event = [&](const std::string& line) {
    clear_block();
    log << line << "\n" << std::flush;
  };
  auto draw_block = [&]() {
    clear_block();
    for (const auto& c : running) {
      const ComparePlanRun& run = plan[c.index];
      int64_t step = 0;
      double loss = 0;
      std::string state = "starting";
      if (latest_train_row(run_directory(run.cfg), step, loss))
        state = "step " + std::to_string(step) + "/" + std::to_string(run.cfg.train.steps) +
                "  loss " + format_double(loss, 4);
      log << tag(c.index) << run_who(run) << "  " << state << "  " << elapsed_text(now_s() - c.t0)
          << "\n";
      ++drawn;
    }
    log << std::flush;
    last_draw = now_s();
  };
  auto stop_all = [&]() {
    stopping = true;
    for (const auto& c : running) ::kill(c.pid, SIGTERM);
  };
  log << "pelab compare: " << todo.size() << " runs to train, " << jobs
      << " at once (child processes; each one's output in runs/<run>/compare.log)\n"
      << std::flush;
  while ((!stopping && next < todo.size()) || !running.empty()) {
    if (!stopping && stop_signal()) {
      stop_all();
      event("pelab compare: stopping " + std::to_string(running.size()) +
            " running runs (they save a checkpoint) ...");
    }
    while (!stopping && next < todo.size() && static_cast<int64_t>(running.size()) < jobs) {
      const size_t i = todo[next++];
      const ComparePlanRun& run = plan[i];
      const fs::path dir = run_directory(run.cfg);
      std::vector<std::string> args = {
          "compare", config,  "--only",     std::to_string(i + 1),
          "--out",   out_dir, "--progress", opt.progress == 2 ? "none" : "lines",
          "--expect-config", fingerprint(eval_identity(run.cfg))};
      for (const auto& o : spec.overrides) {
        args.push_back("--set");
        args.push_back(o);
      }
      if (opt.retrain) args.push_back("--retrain");
      const std::string lp = (dir / "compare.log").string();
      try {
        fs::create_directories(dir, ec);
        PELAB_CHECK(!ec, "compare: cannot create ", dir.string(), ": ", ec.message());
        ::close(open_for_writing(lp, O_WRONLY | O_CREAT | O_APPEND, 0644));  // a link: one line
        std::error_code size_ec;
        const std::uintmax_t from = fs::file_size(lp, size_ec);
        running.push_back({i, spawn_child(exe, args, lp), lp, now_s(), size_ec ? 0 : from});
      } catch (const std::exception& e) {
        failure = e.what();  // the running children are stopped and waited for first
        stop_all();
        break;
      }
      event(tag(i) + "started " + run_who(run) + " (" + std::to_string(run.cfg.train.steps) +
            " steps; log " + lp + ")");
    }
    for (size_t k = 0; k < running.size();) {
      int st = 0;
      const pid_t w = ::waitpid(running[k].pid, &st, WNOHANG);
      if (w != running[k].pid) {
        ++k;
        continue;
      }
      const Child c = running[k];
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      const std::string how = WIFEXITED(st) ? "exit status " + std::to_string(WEXITSTATUS(st))
                                            : "killed by signal " + std::to_string(WTERMSIG(st));
      if (ok) {
        event(tag(c.index) + "finished " + run_who(plan[c.index]) + " (" +
              elapsed_text(now_s() - c.t0) + ")");
      } else if (stopping) {
        event(tag(c.index) + "stopped " + run_who(plan[c.index]));
      } else {
        const std::string why = child_error(c.log, c.log_from);
        failure = "compare: run " + plan[c.index].cfg.train.run_name + " failed (" + how + ")" +
                  (why.empty() ? "" : ": " + why) + "; see " + c.log;
        event(tag(c.index) + run_who(plan[c.index]) + " failed (" + how + ")");
        stop_all();
      }
    }
    if (tty && !running.empty() && now_s() - last_draw >= 0.5) draw_block();
    if (!running.empty()) ::usleep(100000);
  }
  clear_block();
  if (!failure.empty()) fail(failure);
  return !stopping;
}

// Evaluates one finished run as trained and with each of its variants (cached per run and
// variant), logging one line; false when a signal interrupted it (res.interrupted set).
bool evaluate_all(const ComparePlanRun& run, const std::string& dir, const std::string& tag,
                  std::ostream& log, CompareResult& res, std::vector<ResultRow>& out) {
  double wall = 0;
  std::vector<std::pair<int64_t, double>> points;
  read_run_metrics(dir, wall, points);
  std::vector<ComparePlanVariant> evals = {{"", run.cfg, false}};
  for (const auto& v : run.variants) evals.push_back(v);
  std::string names;
  for (const auto& v : evals)
    names += (names.empty() ? "" : ", ") + (v.name.empty() ? std::string("as trained") : v.name);
  log << tag << "evaluating " << run_who(run) << " (" << names << ") ...";
  log.flush();
  const double te = now_s();
  int n_cached = 0;
  for (const auto& v : evals) {
    bool cached = false;
    std::vector<ResultRow> rows = evaluate_run(run, v, dir, cached, wall);
    if (stop_signal()) {
      res.interrupted = true;
      log << " interrupted\n" << std::flush;
      return false;
    }
    n_cached += cached;
    ++(cached ? res.eval_cached : res.evaluated);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  log << " " << (n_cached == static_cast<int>(evals.size()) ? "cached" : "done") << " ("
      << format_double(now_s() - te, 3) << " s)\n"
      << std::flush;
  return true;
}

// `s` for a markdown table cell: printable ASCII, `|` escaped.
std::string md_cell(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '|') o += "\\|";
    else if (c < 0x20 || c > 0x7e) o += '?';
    else o += static_cast<char>(c);
  }
  return o;
}

// "" when every cached evaluation of the imported record `stage` reads back with its values in
// range (check_cached_row); else the first problem, naming the file in `src`, its origin.
std::string cached_evaluations_problem(const fs::path& stage, const std::string& src) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(stage / "compare_eval", ec)) {
    const std::string where =
        (fs::path(src) / "compare_eval" / e.path().filename()).string();
    try {
      const std::string text = read_text_file(e.path().string());
      const size_t nl = text.find('\n');
      PELAB_CHECK(
          text.rfind("# pelab compare evaluation cache ", 0) == 0 && nl != std::string::npos,
          where, ": not an evaluation cache");
      for (const auto& r : parse_results_csv(text.substr(nl + 1), where))
        check_cached_row(r, where);
    } catch (const std::exception& x) {
      return x.what();
    }
  }
  return "";
}

// --merge: copies the records of the plan's runs found in each folder's runs/ (<sub>/runs/) into
// <out_dir>/runs/ (run_record.h), each checked first: made by this pelab version, of the plan's
// config (digest), finished. Every record refused is one line in res.refused; `from` gets the
// folder each imported run came from. The first folder holding a run wins; a finished run of
// out_dir's own with its weights is kept. Nothing is written into the merged folders.
void merge_records(const std::vector<ComparePlanRun>& plan, const std::vector<std::string>& dirs,
                   const std::string& sub, const std::string& out_dir, std::ostream& log,
                   CompareResult& res, std::map<size_t, std::string>& from) {
  std::error_code ec;
  const fs::path out_real = fs::weakly_canonical(fs::absolute(out_dir), ec);
  for (const auto& d : dirs) {
    const fs::path real = fs::weakly_canonical(fs::absolute(fs::path(d) / sub), ec);
    const auto rel = out_real.lexically_relative(real);
    if (!rel.empty() && *rel.begin() != "..")
      res.refused.push_back("--merge " + d + ": the report folder " + out_dir +
                            " lies in it, and pelab never writes into a merged folder; choose "
                            "another --out");
  }
  if (!res.refused.empty()) return;
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < plan.size(); ++i) index_of[plan[i].cfg.train.run_name] = i;
  const fs::path runs_out = fs::path(out_dir) / "runs";
  const std::string ours = this_machine_record().pelab_version;
  for (const auto& d : dirs) {
    // In a suite, the task's folder inside DIR: opened like the rest, without following a link.
    const std::string rel = (fs::path(sub) / "runs").string();
    const std::string folder = sub.empty() ? d : (fs::path(d) / sub).string();
    const std::string runs = (fs::path(d) / rel).string();
    std::vector<std::string> names;
    try {
      names = list_run_records(d, rel);
    } catch (const std::exception& e) {
      res.refused.push_back(e.what());
      continue;
    }
    if (names.empty()) log << "pelab compare --merge: no finished run in " << runs << "\n";
    int64_t taken = 0;
    for (const auto& n : names) {
      const std::string src = (fs::path(runs) / n).string();
      auto it = index_of.find(n);
      if (it == index_of.end()) {
        res.refused.push_back(src + ": a record of a run this config does not plan (another "
                              "config? its runs: pelab compare CONFIG --plan)");
        continue;
      }
      const size_t i = it->second;
      const ComparePlanRun& run = plan[i];
      // (every run name ends in _seed<N>: no run is called so; short, within NAME_MAX)
      const fs::path stage = runs_out / (".merge-" + std::to_string(i));
      fs::remove_all(stage, ec);
      std::string why;
      try {
        if (!import_run_record(d, rel, n, stage.string())) continue;
        const std::string rec_path = (fs::path(src) / run_record_file()).string();
        const RunRecord rec =
            parse_run_record(read_text_file((stage / run_record_file()).string()), rec_path);
        Config cfg;
        try {
          cfg = load_config((stage / "config.yaml").string());
        } catch (const std::exception& e) {
          throw Error(src + "/config.yaml: " + e.what());
        }
        const std::string digest = fingerprint(eval_identity(cfg));
        const std::string planned = fingerprint(eval_identity(run.cfg));
        if (rec.pelab_version != ours)
          why = src + ": recorded by pelab " + rec.pelab_version + ", this is pelab " + ours +
                "; results may differ between versions: retrain it with this pelab";
        else if (rec.config_digest != digest)
          why = rec_path + ": config digest " + rec.config_digest +
                " is not that of its config.yaml (" + digest + ")";
        else if (digest != planned)
          why = src + ": a record of another config (digest " + digest + ", the plan's " +
                planned + "): " + first_config_difference(cfg, run.cfg);
        else {
          const Convergence c = read_convergence(stage.string());
          const bool finished =
              rec.step == run.cfg.train.steps || (c.met && c.step == rec.step);
          if (rec.step > run.cfg.train.steps || !finished)
            why = src + ": step " + std::to_string(rec.step) + " is not the end of a run of " +
                  std::to_string(run.cfg.train.steps) + " steps or of its stop criterion";
          else if (const std::string bad = cached_evaluations_problem(stage, src); !bad.empty())
            why = bad;
          else if (c.has_criterion && (c.criterion.size() > 300 || c.step > rec.step ||
                                       c.criterion.find_first_of("|`\n\r\t") != std::string::npos))
            why = src + "/eval.json: its convergence record does not fit step " +
                  std::to_string(rec.step) + " or its criterion text is not plain";
        }
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty() || from.count(i)) {
        fs::remove_all(stage, ec);
        if (!why.empty()) res.refused.push_back(why);
        else log << "pelab compare --merge: " << src << " ignored (taken from " << from[i] << ")\n";
        continue;
      }
      const fs::path dst = runs_out / n;
      if (is_run_directory(dst.string())) {
        const RunInspection own = inspect_run(dst.string(), run.cfg);
        if (own.state == RunState::Finished && own.weights) {
          fs::remove_all(stage, ec);
          log << "pelab compare --merge: " << n << ": " << out_dir
              << "'s own finished run kept; " << src << " ignored\n";
          continue;
        }
      }
      fs::remove_all(dst, ec);
      PELAB_CHECK(!ec, "compare --merge: cannot replace ", dst.string(), ": ", ec.message());
      fs::rename(stage, dst, ec);
      PELAB_CHECK(!ec, "compare --merge: cannot move ", stage.string(), " to ", dst.string(), ": ",
                  ec.message());
      from[i] = folder;
      ++taken;
    }
    log << "pelab compare --merge: " << count_text(taken, "run") << " from " << folder << "\n";
  }
  log << std::flush;
}

}  // namespace

std::string compare_plan_text(const CompareSpec& spec, const std::string& out_dir) {
  const std::vector<ComparePlanRun> plan = compare_plan(spec, out_dir);
  size_t w = 3;
  for (const auto& r : plan) w = std::max(w, r.cfg.train.run_name.size());
  std::ostringstream os;
  os << "# " << plan.size() << " runs of " << spec.base.train.steps << " steps in " << out_dir
     << "/runs (pelab compare CONFIG --only I trains run I; config = digest of the run's "
        "resolved config)\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%5s  %-*s  %6s  %-16s  %s\n", "index", static_cast<int>(w), "run",
                "seed", "config", "state");
  os << buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ComparePlanRun& r = plan[i];
    const RunInspection ins = inspect_run(run_directory(r.cfg), r.cfg);
    std::string state = ins.state == RunState::Finished ? "finished"
                        : ins.state == RunState::Partial
                            ? "resumes at step " + std::to_string(ins.step)
                        : ins.state == RunState::Fresh ? "to train"
                                                       : "to retrain (" + ins.reason + ")";
    if (ins.state == RunState::Stale && !is_run_directory(run_directory(r.cfg))) state = "to train";
    std::snprintf(buf, sizeof buf, "%5zu  %-*s  %6lld  %-16s  ", i + 1, static_cast<int>(w),
                  r.cfg.train.run_name.c_str(), static_cast<long long>(r.seed),
                  fingerprint(eval_identity(r.cfg)).c_str());
    os << buf << state << "\n";
  }
  return os.str();
}

void set_compare_child_binary(const std::string& path) { g_child_binary = path; }
const std::string& compare_child_binary() { return g_child_binary; }

CompareResult run_compare(const CompareSpec& spec, const CompareOptions& opt) {
  if (!opt.merge.empty() && !opt.report_only) {  // --merge writes the report of what it gathers
    CompareOptions o = opt;
    o.report_only = true;
    return run_compare(spec, o);
  }
  PELAB_CHECK(opt.merge.empty() || (opt.only.empty() && !opt.retrain),
              "compare: --merge cannot be combined with --only or --retrain");
  std::ostream& log = opt.log ? *opt.log : std::cerr;
  const double t_start = now_s();
  const std::string load_start = load_average();
  CompareResult res;
  res.out_dir = opt.out.empty() ? spec.out : opt.out;
  const std::vector<ComparePlanRun> plan = compare_plan(spec, res.out_dir);
  const size_t N = plan.size();
  std::vector<bool> selected(N, opt.only.empty());
  for (size_t i : opt.only) {
    if (i >= N)
      throw ConfigError("compare: --only " + std::to_string(i + 1) + ": the plan has " +
                        std::to_string(N) + " runs, numbered 1-" + std::to_string(N) +
                        " (see pelab compare CONFIG --plan)");
    selected[i] = true;
  }
  PELAB_CHECK(!(opt.report_only && !opt.only.empty()),
              "compare: --only and --report-only cannot be combined");
  if (!opt.expect_config.empty()) {
    const size_t i = opt.only.at(0);
    const std::string digest = fingerprint(eval_identity(plan[i].cfg));
    if (digest != opt.expect_config)
      throw ConfigError("compare: run " + std::to_string(i + 1) + " of " + spec.source +
                        " is now " + plan[i].cfg.train.run_name + " with config " + digest +
                        ", not the config " + opt.expect_config +
                        " this comparison planned: the config file changed while it ran; run "
                        "the comparison again (finished runs are reused)");
  }
  std::error_code ec;
  fs::create_directories(fs::path(res.out_dir) / "runs", ec);
  PELAB_CHECK(!ec, "compare: cannot create ", res.out_dir, ": ", ec.message());
  std::map<size_t, std::string> merged_from;  // plan index -> the --merge folder it came from
  if (!opt.merge.empty()) {
    merge_records(plan, opt.merge, opt.merge_sub, res.out_dir, log, res, merged_from);
    if (!res.refused.empty()) return res;
  }
  if (opt.only.empty())
    write_text_file((fs::path(res.out_dir) / "compare.yaml").string(), spec.config_text);
  const std::vector<SearchCandidate> candidates = search_candidates(spec.search);
  const std::string runs_text =
      count_text(static_cast<int64_t>(spec.schemes.size()), "scheme") + " x " +
      (spec.search.empty()
           ? ""
           : count_text(static_cast<int64_t>(candidates.size()), "search candidate") + " x ") +
      count_text(static_cast<int64_t>(spec.seeds.size()), "seed") + " = " +
      count_text(static_cast<int64_t>(N), "run") + " of " +
      count_text(spec.base.train.steps, "step");
  if (opt.only.empty())
    log << "pelab compare: " << runs_text << "; report in " << res.out_dir << "\n" << std::flush;

  StopSignalScope signals;
  // Which runs need training.
  std::vector<RunInspection> ins(N);
  std::vector<size_t> todo;
  for (size_t i = 0; i < N; ++i) {
    if (!selected[i]) continue;
    ins[i] = opt.retrain && !opt.report_only ? RunInspection{RunState::Stale, "--retrain", 0, {}}
                                             : inspect_run(run_directory(plan[i].cfg), plan[i].cfg);
    if (ins[i].state != RunState::Finished) {
      todo.push_back(i);
      if (opt.report_only) res.missing.push_back(plan[i].cfg.train.run_name);
    }
  }
  const int64_t jobs = opt.jobs > 0    ? opt.jobs
                       : spec.jobs > 0 ? spec.jobs
                                       : std::max<int64_t>(1, std::thread::hardware_concurrency());
  // Child processes need a pelab binary to run (none: every run in this process).
  const bool can_spawn = !opt.exe.empty() || !g_child_binary.empty();
  const int64_t at_once =
      can_spawn ? std::min<int64_t>(jobs, static_cast<int64_t>(todo.size())) : 1;
  // Rows evaluated while training (runs that are not search candidates), by plan index.
  std::map<size_t, std::vector<ResultRow>> rows_of;
  if (opt.report_only) {
    // nothing is trained
  } else if (at_once > 1) {
    for (size_t i : todo) ++(ins[i].state == RunState::Partial ? res.resumed : res.trained);
    if (!train_in_children(spec, opt, plan, todo, at_once, res.out_dir, log))
      res.interrupted = true;
  } else {
    bool stop_hook_used = false;
    for (size_t i = 0; i < N && !res.interrupted; ++i) {
      if (!selected[i]) continue;
      const ComparePlanRun& run = plan[i];
      const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(N) + "] ";
      const std::string who = run_who(run);
      const std::string dir = run_directory(run.cfg);
      if (stop_signal()) {
        res.interrupted = true;
        break;
      }
      const RunInspection& in = ins[i];
      if (in.state != RunState::Finished) {
        TrainOptions to;
        to.progress = opt.progress;
        Config tcfg = run.cfg;
        if (in.state == RunState::Partial) {
          to.resume = dir;
          // Keys the trainer compares on resume come from the stored run where they may differ.
          tcfg.task.test_lengths = in.stored.task.test_lengths;
          tcfg.task.lm_eval_lengths = in.stored.task.lm_eval_lengths;
          tcfg.task.num_eval_examples = in.stored.task.num_eval_examples;
          tcfg.model.pe = in.stored.model.pe;
          log << tag << "resuming " << who << " at step " << in.step << " of " << tcfg.train.steps
              << " ...\n";
          ++res.resumed;
        } else {
          // (A directory holding only compare.log, from an earlier --jobs run, is not a run.)
          if (in.state == RunState::Stale && is_run_directory(dir))
            log << tag << who << ": " << in.reason << " -> training afresh\n";
          to.overwrite = true;  // also clears a half-created run directory without a checkpoint
          log << tag << "training " << who << " (" << count_text(tcfg.train.steps, "step") << ") ...\n";
          ++res.trained;
        }
        log << std::flush;
        fs::remove_all(fs::path(dir) / "compare_eval", ec);
        fs::remove(fs::path(dir) / run_record_file(), ec);  // the new run's machine makes it
        if (opt.stop_after >= 0 && !stop_hook_used) {
          to.stop_after = opt.stop_after;
          stop_hook_used = true;
        }
        TrainResult tr = train(tcfg, to);
        if (!tr.finished) {
          res.interrupted = true;
          log << tag << who << " stopped at step " << tr.step
              << "; run the same command again to continue\n"
              << std::flush;
          return res;
        }
      } else {
        log << tag << who << ": finished run reused (" << dir
            << (in.weights ? "" : ", its record: no checkpoints") << ")\n"
            << std::flush;
      }
      ensure_run_record(dir);
      // A search candidate is evaluated on the test lengths only once it is chosen.
      if (!run.candidate.empty()) continue;
      std::vector<ResultRow> rows;
      if (!evaluate_all(run, dir, tag, log, res, rows)) break;
      rows_of[i] = std::move(rows);
    }
  }
  if (res.interrupted) {
    log << "pelab compare: interrupted; run the same command again to continue\n" << std::flush;
    return res;
  }
  if (!opt.only.empty()) return res;
  res.reused = static_cast<int64_t>(N - res.missing.size()) - res.trained - res.resumed;
  std::vector<bool> finished(N, true);
  for (const auto& m : res.missing)
    for (size_t i = 0; i < N; ++i)
      if (plan[i].cfg.train.run_name == m) finished[i] = false;

  // ---- the search: choose each scheme's candidate on the validation split only ----
  const Config& b = spec.base;
  std::vector<bool> chosen_run(N, true);
  std::string search_md;
  if (!spec.search.empty()) {
    const std::string vm = is_lm(b) ? "loss" : "exact_match";
    const bool higher = higher_is_better(vm);
    std::ostringstream md;
    md << "Each scheme was trained with every candidate of `compare.search` and every seed; a "
          "candidate's score is the mean over seeds of **"
       << vm
       << "** on the in-distribution validation split (`valid` of each run's final eval.json). "
          "The test lengths were not looked at: only the chosen candidate's runs were evaluated "
          "on them, and they are the scheme's rows above. Equal scores: the candidate with more "
          "runs that met the stop criterion (train.stop_when), then fewer steps to it, then the "
          "one listed first.\n\n";
    std::vector<ResultRow> vrows;  // one per candidate × seed: the valid score, for aggregate()
    std::ostringstream table;
    bool any_criterion = false;  // some run trains to a criterion: the table gets its column
    for (const auto& run : plan)
      any_criterion = any_criterion || !run.cfg.train.stop_when.metric.empty();
    // Candidate c beats b: a better mean score; equal scores: more runs that met the stop
    // criterion, then fewer steps to it (mean); else b, listed first, stays.
    auto better = [&](size_t c, size_t b, const std::vector<Stat>& st,
                      const std::vector<int64_t>& met, const std::vector<int64_t>& steps) {
      if (st[c].mean != st[b].mean)
        return higher ? st[c].mean > st[b].mean : st[c].mean < st[b].mean;
      if (met[c] != met[b]) return met[c] > met[b];
      return met[c] > 0 && static_cast<double>(steps[c]) / static_cast<double>(met[c]) <
                               static_cast<double>(steps[b]) / static_cast<double>(met[b]);
    };
    for (const auto& s : spec.schemes) {
      std::vector<std::string> per_seed(candidates.size());
      std::vector<bool> complete(candidates.size(), true);
      // train.stop_when: runs that met the criterion and the sum of their steps to it.
      std::vector<int64_t> met(candidates.size(), 0), met_steps(candidates.size(), 0);
      for (size_t i = 0; i < N; ++i) {
        const ComparePlanRun& run = plan[i];
        if (run.scheme != s.name) continue;
        ResultRow r;
        r.scheme = s.name + "@" + run.candidate;
        r.seed = run.seed;
        r.split = "valid";
        std::string why;
        const double v = finished[i] ? valid_metric(run_directory(run.cfg), vm, &why)
                                     : std::numeric_limits<double>::quiet_NaN();
        if (!finished[i]) why = "not finished";
        if (!finished[i]) complete[run.candidate_index] = false;
        if (finished[i]) {
          try {
            const Convergence conv = read_convergence(run_directory(run.cfg));
            if (conv.met) {
              ++met[run.candidate_index];
              met_steps[run.candidate_index] += conv.step;
            }
          } catch (const std::exception&) {
            // no readable record: the run counts as not meeting the criterion
          }
        }
        (vm == "loss" ? r.loss : r.exact_match) = v;
        if (!std::isfinite(v)) r.status = why;
        vrows.push_back(r);
        std::string& ps = per_seed[run.candidate_index];
        ps += (ps.empty() ? "" : ", ") + std::to_string(run.seed) + ": " +
              (std::isfinite(v) ? format_double(vm == "loss" ? v : 100 * v, 4) : why);
      }
      size_t best = candidates.size();
      std::vector<Stat> stats;
      for (size_t c = 0; c < candidates.size(); ++c) {
        stats.push_back(aggregate(vrows, s.name + "@" + candidates[c].label, "valid", vm));
        const Stat& st = stats.back();
        if (!complete[c] || st.n != static_cast<int64_t>(spec.seeds.size()) ||
            !std::isfinite(st.mean))
          continue;
        if (best == candidates.size() || better(c, best, stats, met, met_steps)) best = c;
      }
      for (size_t c = 0; c < candidates.size(); ++c) {
        table << "| " << s.name << " | " << candidates[c].label << " | "
              << sets_text(candidates[c].sets) << " | " << format_cell(stats[c], vm) << " | "
              << per_seed[c] << " | ";
        if (any_criterion)
          table << met[c] << "/" << spec.seeds.size()
                << (met[c] > 0 ? " (mean step " +
                                     format_double(static_cast<double>(met_steps[c]) /
                                                       static_cast<double>(met[c]),
                                                   4) +
                                     ")"
                               : "")
                << " | ";
        table << (c == best ? "**chosen**" : "") << " |\n";
      }
      if (best < candidates.size()) res.chosen[s.name] = candidates[best].label;
      for (size_t i = 0; i < N; ++i)
        if (plan[i].scheme == s.name) chosen_run[i] = plan[i].candidate_index == best;
    }
    md << "| scheme | candidate | settings | valid " << vm
       << " (over seeds, as in the tables above) | per seed | "
       << (any_criterion ? "met train.stop_when | " : "") << " |\n";
    md << "|---|---|---|---:|---|" << (any_criterion ? "---|" : "") << "---|\n" << table.str();
    search_md = md.str();
    for (const auto& [scheme, label] : res.chosen)
      log << "pelab compare: search: " << scheme << " -> " << label << "\n";
    log << std::flush;
  }

  // ---- results of the (chosen) finished runs, in plan order ----
  std::vector<LossCurve> curves;
  std::map<std::string, std::string> criteria;  // scheme -> stop criterion
  for (size_t i = 0; i < N; ++i) {
    if (!chosen_run[i] || !finished[i]) continue;
    const ComparePlanRun& run = plan[i];
    const std::string dir = run_directory(run.cfg);
    double wall = 0;
    LossCurve curve;
    curve.scheme = run.scheme;
    curve.seed = run.seed;
    read_run_metrics(dir, wall, curve.points);
    curves.push_back(curve);
    ensure_run_record(dir);
    auto it = rows_of.find(i);
    std::vector<ResultRow> rows;
    if (it != rows_of.end()) {
      rows = it->second;
    } else {
      const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(N) + "] ";
      if (!evaluate_all(run, dir, tag, log, res, rows)) {
        log << "pelab compare: interrupted; run the same command again to continue\n" << std::flush;
        return res;
      }
    }
    const Convergence conv = read_convergence(dir);
    if (conv.has_criterion) criteria[run.scheme] = conv.criterion;
    set_convergence(rows, conv);
    res.rows.insert(res.rows.end(), rows.begin(), rows.end());
  }

  // ---- where the runs were made: folder and machine of each record ----
  std::string records_md;
  {
    std::map<std::vector<std::string>, std::vector<std::string>> groups;  // row -> runs
    for (size_t i = 0; i < N; ++i) {
      if (!chosen_run[i] || !finished[i]) continue;
      auto f = merged_from.find(i);
      std::vector<std::string> row = {f == merged_from.end() ? res.out_dir : f->second, "–",
                                      "–", "–", "–"};
      try {
        const RunRecord rec = read_run_record(run_directory(plan[i].cfg));
        row = {row[0], rec.host, rec.cpu, rec.blas, rec.pelab_version};
      } catch (const std::exception&) {
        // a run without a record (none is written for runs without weights)
      }
      groups[row].push_back(plan[i].cfg.train.run_name);
    }
    std::ostringstream md;
    md << "Each run's record (`runs/<run>/record.json`, docs/experiments.md \"Run records and "
          "merging\") names the machine that trained it"
       << (merged_from.empty() ? ""
                               : "; runs gathered with `--merge` name the folder they came from")
       << ".\n\n| folder | machine | CPU | BLAS kernels | pelab | runs |\n"
          "|---|---|---|---|---|---|\n";
    for (const auto& [row, runs] : groups) {
      md << "|";
      for (const auto& c : row) md << " " << md_cell(c) << " |";
      md << " " << runs.size() << ": " << md_cell(join(runs, ", ")) << " |\n";
    }
    if (!groups.empty()) records_md = md.str();
  }

  // ---- the report ----
  ReportInput in;
  in.title = spec.title;
  in.task_summary = task_summary(b);
  in.primary_metric = spec.metric != "auto" ? spec.metric : is_lm(b) ? "perplexity" : "exact_match";
  in.length_name = is_lm(b) ? "context length (tokens)" : "task length";
  if (is_lm(b)) {
    in.train_min = 1;
    in.train_max = b.task.lm_train_len;
    in.train_range_text = "windows of " + std::to_string(b.task.lm_train_len) + " tokens";
    in.log_x = true;
  } else {
    in.train_min = b.task.train_min_len;
    in.train_max = b.task.train_max_len;
    in.train_range_text = "task lengths " + std::to_string(b.task.train_min_len) + "–" +
                          std::to_string(b.task.train_max_len);
  }
  in.seeds = spec.seeds;
  for (const auto& s : spec.schemes) {
    in.labels.push_back(s.name);
    std::string settings = sets_text(s.sets);
    auto ch = res.chosen.find(s.name);
    if (ch != res.chosen.end())
      for (const auto& c : candidates)
        if (c.label == ch->second) settings += "; chosen by the search: " + sets_text(c.sets);
    in.run_settings.emplace_back(s.name, settings);
    for (size_t i = 0; i < N; ++i) {
      const ComparePlanRun& run = plan[i];
      if (run.scheme != s.name || run.seed != spec.seeds.front() || !chosen_run[i]) continue;
      for (const auto& pv : run.variants) {
        const std::string& vname = pv.name;
        const Config& vc = pv.cfg;
        const std::string label = s.name + "+" + vname;
        in.labels.push_back(label);
        std::string note = "eval-time variant of " + s.name + " (no retraining)";
        // The scheme's eval-time keys this variant changes (declared in models/pe/).
        std::string changed;
        for (const std::string& k : models::pe_eval_time_keys()) {
          const std::string v = config_value_text(vc, k);
          if (v != config_value_text(run.cfg, k)) changed += (changed.empty() ? "" : ", ") + k + " " + v;
        }
        if (!changed.empty()) note += ": " + changed;
        if (pv.random_positions)
          note += ": evaluated with sorted random positions from [0, " +
                  std::to_string(vc.model.pe.randomized_max_position) + ") as in training";
        in.label_notes[label] = note;
        for (const auto& v : spec.variants)
          if (v.name == vname) in.run_settings.emplace_back(label, sets_text(v.sets));
      }
    }
  }
  in.rows = res.rows;
  in.curves = curves;
  in.search_markdown = search_md;
  in.records_markdown = records_md;
  in.unconverged = spec.unconverged;
  in.criteria = criteria;
  for (const auto& s : spec.schemes)
    if (s.cannot_learn) in.cannot_learn[s.name] = s.why;
  res.unconverged = unconverged_runs(in);
  {
    const LiteratureSection lit = literature_for_report(spec.literature, in);
    in.literature_markdown = lit.markdown;
    in.literature_csv = lit.csv;
  }
  in.command = opt.command.empty() ? "pelab compare " + spec.source : opt.command;
  in.config_text = spec.config_text;
  in.resolved_yaml = config_to_yaml(spec.base);
  const std::string threads =
      std::to_string(spec.base.train.threads) +
      (spec.base.train.threads == 1 ? " thread per run" : " threads per run");
  if (res.trained + res.resumed > 0) {
    in.total_wall_s = now_s() - t_start;
    in.timing_note =
        "machine: " + std::to_string(std::thread::hardware_concurrency()) +
        " cores, 1-min load average " + load_start + " at the start and " + load_average() +
        " at the end; BLAS: " + blas_kernels_summary() + "; " + threads + "; " + std::to_string(res.trained + res.resumed) + " of " +
        std::to_string(N) + " runs trained in this invocation, the rest reused" +
        (at_once > 1 ? "; " + std::to_string(at_once) + " runs at once in child processes (--jobs)"
                     : "");
  } else {
    in.timing_note = threads + "; every run reused from an earlier invocation";
  }
  res.report = write_report(res.out_dir, in, opt.plots);
  log << "pelab compare: report " << res.report.report_md << " (" << res.report.pngs.size()
      << " plots";
  if (!res.report.plot_note.empty()) log << "; " << res.report.plot_note;
  log << ")\n";
  if (!res.unconverged.empty() && spec.unconverged != "fail") {
    log << "pelab compare: " << res.unconverged.size()
        << (res.unconverged.size() == 1 ? " run" : " runs") << " missed the stop criterion ("
        << (spec.unconverged == "exclude" ? "left out of the statistics" : "marked † in the report")
        << "):";
    for (size_t i = 0; i < res.unconverged.size(); ++i)
      log << (i ? ", " : " ") << res.unconverged[i];
    log << "\n";
  }
  log << std::flush;
  return res;
}

}  // namespace pelab
