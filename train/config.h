// pelab — run configuration: typed structs, the schema that describes every key, the YAML loader
// with `--set section.key=value` overrides, cross-field validation, YAML serialisation (for run
// directories and checkpoints) and the markdown key reference (docs/config.md).
//
// The schema is one table in config_schema.cpp: each row names a section, a key, the struct
// member it fills and its range / allowed values and doc string; type and default come from the member
// itself (the defaults below), so adding a key is one struct field plus one table row. The keys of
// the positional-encoding schemes (pe.*, other than pe.scheme and pe.randomized_*) and their
// cross-field rules are declared by each scheme in its own file (models/pe/pe.h, PEScheme) and
// enter the schema from the scheme registry.
#pragma once
#include <cmath>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/stop_criterion.h"

#include "data/tasks.h"
#include "models/model_config.h"

namespace YAML {
class Node;
}

namespace pelab {

// Every configuration problem: one line, starting with "FILE:LINE: " (or "--set ...: ").
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& what) : std::runtime_error(what) {}
};

struct TaskConfig {
  std::string name = "reverse";       // copy|reverse|sort|duplicate|addition|count|textfile|lm
  std::string formulation = "seq2seq";  // seq2seq|decoder
  int num_symbols = 10;
  int train_min_len = 1;
  int train_max_len = 16;
  std::vector<int> test_lengths = {8, 16, 24, 32};
  // multi_addition's operand counts (docs/tasks.md): training range, test counts ([] = the
  // training range, one len_L split per length; else one len_L_ops_M split per length and count).
  int train_min_operands = 2;
  int train_max_operands = 2;
  std::vector<int> test_operands;
  int64_t train_examples = 0;  // 0 = sample fresh examples every batch
  int num_eval_examples = 200;
  std::string train_file;
  std::string valid_file;
  std::vector<std::string> test_files;
  double valid_fraction = 0.05;
  std::string tokenization = "char";  // char|space
  std::string unknown_symbols = "error";  // error|map_to_unk
  int max_example_len = 512;  // positions of one textfile example
  std::string corpus;                 // "" = default Debian fortunes corpus
  int lm_train_len = 64;
  std::vector<int> lm_eval_lengths = {64, 128};
  int64_t seed = 1234;
  // Position IDs from the task (docs/tasks.md): sequential (none) | coupled | abacus; training-time
  // random offsets keep every ID <= max_position_id (0 = no offsets); index_hints = number of hint
  // tokens (0 = off).
  std::string position_ids = "sequential";
  int max_position_id = 0;
  int index_hints = 0;
  // Not a key: the revision of the task's examples a run trained on (data::Task::data_revision),
  // recorded by pelab in the run's resolved config (config.yaml, checkpoints) as
  // task.data_revision only where it is not 1, so the configs of runs on unchanged data read as
  // before (docs/experiments.md, "Data revisions"). record_data_revision() sets it.
  int data_revision = 1;
};

// train.stop_when: struct StopWhen, train/stop_criterion.h (its parse, state, record and table).

struct TrainConfig {
  int64_t steps = 2000;
  int batch_size = 64;
  int grad_accum = 1;
  std::string optimizer = "adamw";  // adamw|sgd
  double lr = 1e-3;
  double min_lr = 1e-5;
  int64_t warmup = 100;
  std::string schedule = "warmup_cosine";  // constant|warmup_cosine|inverse_sqrt
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  double momentum = 0.9;
  double grad_clip = 1.0;
  double label_smoothing = 0.0;
  int64_t seed = 1;
  int threads = 2;
  std::string device = "cpu";
  int log_every = 50;
  int eval_every = 500;
  // Positions of the validation split: "fixed" = 0..L-1 (as the test splits); "as_trained" =
  // drawn as training draws them (with pe.randomized_positions a sorted random subset of
  // [0, pe.randomized_max_position), the same at every validation; without it 0..L-1 as well).
  std::string valid_positions = "fixed";
  int checkpoint_every = 500;
  int keep_checkpoints = 3;
  // Divergence limits (docs/training.md): a step whose loss or gradient norm is not finite is
  // skipped; the run stops with an error after this many skipped steps in a row / in total
  // (0 = no limit).
  int64_t max_consecutive_skipped = 10;
  int64_t max_skipped_steps = 100;
  bool bucket_by_length = false;
  // How the lengths of a training batch's examples are drawn (synthetic tasks): "mixed" = each
  // example's own, uniformly over the training range; "one" = one length per batch, drawn
  // uniformly, as Delétang et al. 2023 and Ruoss et al. 2023 train; "auto" = one with
  // pe.randomized_positions (a batch shares one position subset, sized to its sequences), else
  // mixed. one_length_batches() resolves it.
  std::string batch_lengths = "auto";
  std::string run_dir = "runs";
  std::string run_name;  // "" = derived from the config file name
  std::string resume;    // "" = fresh run; a checkpoint path, or "latest"
  std::map<std::string, std::string> tags;
  StopWhen stop_when;
};

struct EvalConfig {
  int batch_size = 64;
  int max_decode_len = 0;  // 0 = auto: 2*length+8
  std::string best_metric = "exact_match";  // exact_match|token_accuracy|loss
  bool save_predictions = false;
};

struct Config {
  TaskConfig task;
  // The `model:` and `pe:` sections (model.pe) are the model's own config (models/model_config.h);
  // model.vocab and model.seed are not keys: to_model_config fills them from the data and train.seed.
  models::ModelConfig model;
  TrainConfig train;
  EvalConfig eval;
  // Where this config came from (a path, "<string>", ...); metadata, not a schema key.
  std::string source;
};

// Equality over every schema key (not `source`).
bool operator==(const Config& a, const Config& b);
bool operator!=(const Config& a, const Config& b);
// Prints config_to_yaml(c) (also makes gtest show configs readably).
std::ostream& operator<<(std::ostream& os, const Config& c);

// ---------------- schema (read-only description) ----------------
enum class ConfigType { Int, Float, Bool, String, Enum, IntList, StringList, Map };

struct ConfigRange {  // for numbers; for int lists it bounds every element
  bool has_min = false, min_exclusive = false;
  double min = 0;
  bool has_max = false, max_exclusive = false;
  double max = 0;
  bool empty() const { return !has_min && !has_max; }
  std::string str() const;  // "[0, 1)", "[1, inf)", "" when unbounded
};

struct ConfigKey {
  std::string section, name;
  ConfigType type;
  std::vector<std::string> choices;  // Enum values
  ConfigRange range;
  std::string default_text;  // the default as YAML text ("64", "[8, 16]", "\"\"")
  std::string doc;
  // A map with fixed sub-keys (train.stop_when): each sub-key's name, type, allowed values,
  // default and doc, for the reference. Empty for every other key.
  std::vector<ConfigKey> fields;
  // A key added after run records were published: the resolved config (config_to_yaml, and so
  // the config digest of a run) leaves it out while it has its default, so a record made before
  // the key existed keeps its digest (docs/experiments.md, "Run records and merging").
  bool omitted_at_default = false;
  std::string full_name() const { return section + "." + name; }
};

// Sections in file order, with one-line docs.
const std::vector<std::pair<std::string, std::string>>& config_sections();
// Every key, in section and table order.
const std::vector<ConfigKey>& config_schema();
// Cross-field rules as one-line descriptions (rendered in the reference).
const std::vector<std::string>& config_cross_field_rules();
const char* config_type_name(ConfigType t);  // "int", "float", "list of int", ...

// ---------------- loading ----------------
// Reads a YAML file (missing sections/keys take their defaults), applies `overrides` (each
// "section.key=value", value parsed as a YAML scalar or flow list/map), validates every key and
// the cross-field rules and returns the resolved config. An empty train.run_name becomes the
// file's stem ("configs/rope.yaml" -> "rope"). Throws ConfigError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from YAML text; `source` names it in messages (e.g. "run/config.yaml"). run_name is kept.
Config load_config_string(const std::string& yaml, const std::string& source = "<string>",
                          const std::vector<std::string>& overrides = {});
// The two halves of load_config_string, for files holding more than a run config (compare, suite
// and literature sections, train/study/): the YAML text parsed once, so that an anchor defined in
// one section can be used in another (a syntax error or a second document is a ConfigError naming
// SOURCE:LINE), and a config from such a node (its other sections removed; marks give FILE:LINE).
YAML::Node parse_config_yaml(const std::string& yaml, const std::string& source);
Config load_config_node(const YAML::Node& root, const std::string& source,
                        const std::vector<std::string>& overrides = {});
// Applies "section.key=value" overrides to an already loaded config, then re-validates it.
void apply_overrides(Config& cfg, const std::vector<std::string>& overrides);
// Checks every key's range / allowed values and the cross-field rules of a config built in code.
void validate_config(const Config& cfg);

// ---------------- output ----------------
// The resolved config as YAML: every section and key in schema order. With `with_docs`, each key
// carries its doc string as a trailing comment. load_config_string(config_to_yaml(c)) == c.
std::string config_to_yaml(const Config& cfg, bool with_docs = false);
// One key's value as YAML text ("64", "rope", "[8, 16]"); throws ConfigError on an unknown key.
std::string config_value_text(const Config& cfg, const std::string& full_key);
// A section of the reference that a layer above the config owns (the `literature:` list of compare
// and suite configs, train/study/literature.h): rendered like a config section, after them.
struct ConfigReferenceSection {
  std::string heading;  // markdown after "## "
  std::string intro;    // the paragraph before the table
  std::vector<ConfigKey> keys;
};
// Markdown reference: per section a table of key, type, default, range/values and doc, then the
// `extra` sections, the cross-field rules and the override syntax. docs/config.md is this text with
// the sections `pelab config-reference` adds (train/app/cli.cpp).
std::string config_reference_markdown(const std::vector<ConfigReferenceSection>& extra = {});

// ---------------- derived values shared by model code ----------------
int head_dim(const Config& cfg);           // model.d_model / model.heads
// train.batch_lengths resolved for the training batches of a synthetic task: `one`, or `auto` with
// pe.randomized_positions (false for the lm task, whose windows all have one length anyway).
bool one_length_batches(const Config& cfg);

// The data layer's description of the synthetic task of cfg.task (name, alphabet, seed, training
// lengths, position IDs, index hints): the one mapping from config to data::TaskSpec.
data::TaskSpec task_spec(const Config& cfg);
// A run's stored resolved config (its config.yaml, or a checkpoint's config) written by a pelab
// from before train.batch_lengths, of a run with pe.randomized_positions on a synthetic task: it
// trained on mixed-length batches, which randomized positions no longer do (docs/training.md).
// Returns why, "" when the text is not such a run's. Comparisons retrain such a run; --resume
// refuses to continue it.
std::string mixed_randomized_batches(const std::string& stored_config_yaml);
std::string derive_run_name(const std::string& config_path);  // file stem, "run" if empty

}  // namespace pelab
