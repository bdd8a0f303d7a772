// pelab — the config schema (train/config.h): one table row per key (section, name, struct
// member, range or allowed values, doc), the scheme keys from the registry, and the lookups with
// did-you-mean messages for unknown sections and keys.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "data/tasks.h"
#include "models/pe/pe.h"
#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config.h"
#include "train/config_internal.h"

namespace pelab {
namespace config_detail {
namespace {

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
    e.key = make_key(section, name, spec, doc, &type_of<T>);
    const ConfigKey& k = e.key;
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
  task("train_min_operands", &TaskConfig::train_min_operands, "[1, inf)",
       "multi_addition: fewest operands of a training example (the count is uniform in "
       "[train_min_operands, train_max_operands]); other tasks take no count (leave 2)");
  v.back().key.omitted_at_default = true;  // added after records were published
  task("train_max_operands", &TaskConfig::train_max_operands, "[1, inf)",
       "multi_addition: most operands of a training example (and of the validation split)");
  v.back().key.omitted_at_default = true;
  task("test_operands", &TaskConfig::test_operands, "[1, inf)",
       "multi_addition: operand counts of the test splits: one split len_L_ops_M per "
       "task.test_lengths entry L and count M (L digits per operand, M operands); [] = len_L "
       "splits with the training counts");
  v.back().key.omitted_at_default = true;
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
       "position IDs from the task (addition_reversed, multiplication, multi_addition; decoder "
       "formulation): `sequential` = none (the model's 0..L-1); `coupled` = digits of the same "
       "significance share one ID (Cho et al. 2024; multi_addition: two-level IDs, digit and "
       "operand, Cho et al. 2025, which need a scheme with a second ID channel); `abacus` = each digit's significance within its own "
       "number, other tokens 0 (McLeish et al. 2024). Definitions: docs/tasks.md");
  task("max_position_id", &TaskConfig::max_position_id, "[0, inf)",
       "training-time random offset of the task's position IDs and index hints: each training "
       "example's IDs >= 1 are shifted by an offset drawn uniformly so that its largest stays <= "
       "this (Cho et al.'s random starting position ID); 0 = no offset. Evaluation uses none");
  task("index_hints", &TaskConfig::index_hints,
       "[0, " + std::to_string(data::kMaxIndexHints) + "]",
       "index hints (Zhou et al. 2024): every digit is preceded by the hint token of its "
       "significance, h1..hN; this is N (0 = off). Must cover the longest answer and "
       "task.max_position_id. Each hint is a vocabulary token (a row of the token tables)");
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
  model("attention_length_scale", &ModelConfig::attention_length_scale, "off|log_n|ssmax",
        "length-scaled attention logits: every logit of a query (q.k and the scheme's score "
        "term) times log n, n the keys it attends (log_n, Chiang & Cholak 2022), or times "
        "s*log n with s learned per head and layer, initialised to 1 (ssmax, Nakanishi 2025); "
        "off = plain softmax attention");
  v.back().key.omitted_at_default = true;  // added after records were published
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

}  // namespace

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

ConfigKey make_key(const std::string& section, const std::string& name, const std::string& spec,
                   const std::string& doc, ConfigType (*type)(bool)) {
  ConfigKey k;
  k.section = section;
  k.name = name;
  k.doc = doc;
  const std::string sp = trim(spec);
  const bool interval = !sp.empty() && (sp[0] == '[' || sp[0] == '(');
  const bool choices = !sp.empty() && !interval;
  k.type = type(choices);
  if (choices) {
    if (k.type != ConfigType::Enum)
      throw std::logic_error("config schema: choices on non-string key " + k.full_name());
    std::stringstream ss(sp);
    std::string c;
    while (std::getline(ss, c, '|')) k.choices.push_back(trim(c));
  } else if (interval) {
    if (k.type != ConfigType::Int && k.type != ConfigType::Float && k.type != ConfigType::IntList)
      throw std::logic_error("config schema: range on non-numeric key " + k.full_name());
    k.range = parse_interval(sp);
  }
  return k;
}

std::string unknown_key_in(const std::string& section, const std::string& name,
                           const std::vector<std::string>& valid) {
  std::string msg = "unknown key '" + section + "." + name + "'";
  const std::string near = nearest_name(name, valid);
  if (!near.empty()) msg += "; did you mean '" + section + "." + near + "'?";
  return msg + " (valid: " + join(valid, ", ") + ")";
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

}  // namespace config_detail
using namespace config_detail;

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

}  // namespace pelab
