// pelab — the cross-field rules of a config (train/config.h): checks that involve more than one
// key, each with the doc line that docs/config.md lists; config_yaml.cpp locates a violation at
// the line of the keys it names.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "data/batch.h"
#include "data/tasks.h"
#include "models/pe/pe.h"
#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config.h"
#include "train/config_internal.h"

namespace pelab {
namespace config_detail {
namespace {

int max_of(const std::vector<int>& v, int init) {
  for (int x : v) init = std::max(init, x);
  return init;
}

}  // namespace
}  // namespace config_detail
using namespace config_detail;

data::TaskSpec task_spec(const Config& c) {
  data::TaskSpec spec;
  spec.name = c.task.name;
  spec.num_symbols = c.task.num_symbols;
  spec.seed = static_cast<uint64_t>(c.task.seed);
  spec.train_min_len = c.task.train_min_len;
  spec.train_max_len = c.task.train_max_len;
  spec.position_ids = c.task.position_ids;
  spec.index_hints = c.task.index_hints;
  spec.train_min_operands = c.task.train_min_operands;
  spec.train_max_operands = c.task.train_max_operands;
  spec.test_operands.assign(c.task.test_operands.begin(), c.task.test_operands.end());
  return spec;
}

namespace config_detail {
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
      {"task.train_min_operands / train_max_operands / test_operands are multi_addition's "
       "(1 <= min <= max); a task with two-level position IDs (multi_addition, coupled) needs a "
       "pe.scheme with a second ID channel",
       [](const Config& c) -> Violation {
         const bool counts = c.task.train_min_operands != 2 || c.task.train_max_operands != 2 ||
                             !c.task.test_operands.empty();
         const std::vector<std::string> ckeys = {"task.train_min_operands",
                                                 "task.train_max_operands", "task.test_operands",
                                                 "task.name"};
         if (c.task.name == "lm" || c.task.name == "textfile") {
           if (!counts) return {};
           return {"task " + c.task.name + " takes no operand count (task.train_min_operands, "
                       "train_max_operands and test_operands are for multi_addition)",
                   ckeys};
         }
         std::unique_ptr<data::Task> task;
         try {
           task = data::make_task(task_spec(c));
         } catch (const data::DataError& e) {
           const std::string what = e.what();
           if (what.find("operand") == std::string::npos) return {};  // the other rules
           return {what, ckeys};
         }
         int64_t levels = 1;
         try {
           levels = models::pe_position_channels(c.model.pe);
         } catch (const Error&) {
           return {};  // unknown scheme: pe.scheme's own check reports it
         }
         if (task->position_channels() <= levels) return {};
         std::string able;
         for (const auto& n : models::pe_names()) {
           models::PEConfig p;
           p.scheme = n;
           if (models::pe_position_channels(p) >= task->position_channels())
             able += (able.empty() ? "" : ", ") + n;
         }
         return {"pe.scheme " + c.model.pe.scheme + " takes one position ID level; task " +
                     c.task.name + " with task.position_ids " + c.task.position_ids + " gives " +
                     std::to_string(task->position_channels()) +
                     " (docs/tasks.md): use a scheme with a second ID channel (" + able +
                     ") or task.position_ids sequential",
                 {"pe.scheme", "task.position_ids", "task.name"}};
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

}  // namespace

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = build_rules();
  return r;
}

}  // namespace config_detail

const std::vector<std::string>& config_cross_field_rules() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> d;
    for (const auto& r : rules()) d.push_back(r.doc);
    return d;
  }();
  return docs;
}

}  // namespace pelab
