// pelab — memory estimate of a configuration (memory_estimate.h).
#include "train/memory_estimate.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/tasks.h"
#include "models/pe/pe.h"
#include "pelab/error.h"
#include "pelab/ops.h"
#include "train/evaluate.h"
#include "train/task_data.h"

namespace pelab {
namespace {

std::string gb(double bytes) {
  char buf[64];
  const double g = bytes / 1e9;
  if (g >= 100)
    std::snprintf(buf, sizeof buf, "%.3g GB", g);  // "646 GB", "6.08e+09 GB"
  else if (g >= 1 || bytes <= 0)
    std::snprintf(buf, sizeof buf, "%.1f GB", g);  // "23.1 GB"
  else
    std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);  // "27.3 MB", "0.0243 MB"
  return buf;
}

// A number from a cgroup file, or 0 when it is absent or "max".
double read_limit(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s.empty() || s == "max") return 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && v > 0 ? v : 0;
}

}  // namespace

namespace {

double dtype_bytes_of(const Config& cfg) { return cfg.model.dtype == "float64" ? 8 : 4; }

// Parameters and training state (the parameter part of MemoryEstimate).
MemoryEstimate estimate_parameters(const Config& cfg, int64_t vocab) {
  const models::ModelConfig& m = cfg.model;
  const double d = m.d_model, ff = m.d_ff, V = static_cast<double>(vocab);
  const double b = m.bias ? 1 : 0;
  const bool s2s = m.arch == "seq2seq";
  const double dtype_bytes = dtype_bytes_of(cfg);
  const double enc = s2s ? m.encoder_layers : 0, dec = m.decoder_layers;
  const double stacks = s2s ? 2 : 1;

  // Token tables: seq2seq encoder, decoder and output (one tensor for all three when tied);
  // decoder-only decoder and output (one when tied).
  const double tables = m.tie_embeddings ? 1 : (s2s ? 3 : 2);
  const double attention = 4 * (d * d + b * d);
  const double feed_forward = d * ff + b * ff + ff * d + b * d;
  const double norm = 2 * d;
  const double enc_layer = attention + 2 * norm + feed_forward;
  const double dec_layer = (s2s ? 2 : 1) * attention + (s2s ? 3 : 2) * norm + feed_forward;
  const double final_norms = m.norm == "pre" ? stacks * norm : 0;

  // The scheme's own parameter count per stack (models/pe/, PEScheme::parameters).
  double pe = 0;
  const models::PEScheme& scheme = models::pe_scheme(m.pe.scheme);
  if (scheme.parameters_fn) {
    for (const bool encoder : {true, false}) {
      if (encoder && !s2s) continue;
      models::StackInfo st;
      st.kind = encoder ? models::StackKind::Encoder : models::StackKind::Decoder;
      st.layers = encoder ? m.encoder_layers : m.decoder_layers;
      st.d_model = m.d_model, st.heads = m.heads;
      pe += static_cast<double>(scheme.parameters_fn(m.pe, st));
    }
  }

  MemoryEstimate e;
  e.parameters = tables * V * d + enc * enc_layer + dec * dec_layer + final_norms + pe;
  e.parameter_bytes = e.parameters * dtype_bytes;
  e.embedding_bytes = tables * V * d * dtype_bytes;
  e.pe_bytes = pe * dtype_bytes;
  e.layer_bytes = e.parameter_bytes - e.embedding_bytes - e.pe_bytes;
  const double optimizer =
      cfg.train.optimizer == "adamw" ? 2 : (cfg.train.momentum > 0 ? 1 : 0);
  e.state_bytes = (1 + optimizer) * e.parameter_bytes;
  return e;
}

// Whether a training micro-batch's rows differ in length (each then gets its own causal mask).
bool padded_training(const Config& cfg) {
  if (cfg.task.name == "lm") return false;
  if (cfg.task.name == "textfile") return true;
  return cfg.task.train_min_len < cfg.task.train_max_len && !one_length_batches(cfg);
}

// Whether the training batches' lengths vary.
bool varying_training(const Config& cfg) {
  if (cfg.task.name == "lm") return false;
  return cfg.task.name == "textfile" || cfg.task.train_min_len < cfg.task.train_max_len;
}

// The shape of a training micro-batch of sequences of `positions` positions.
BatchShape training_shape(const Config& cfg, int64_t positions) {
  BatchShape b;
  b.batch = cfg.train.batch_size;
  b.target = std::max<int64_t>(positions, 1);
  if (cfg.model.arch == "seq2seq") b.source = b.target;
  b.padded = padded_training(cfg);
  b.varies = varying_training(cfg);
  b.largest_position = cfg.model.pe.randomized_positions
                           ? static_cast<int64_t>(cfg.model.pe.randomized_max_position) - 1
                           : b.target - 1;
  return b;
}

}  // namespace

std::string gigabytes(double bytes) { return gb(bytes); }

PassEstimate estimate_pass(const Config& cfg, int64_t vocab, const BatchShape& b, bool training) {
  const models::ModelConfig& m = cfg.model;
  const bool s2s = m.arch == "seq2seq";
  const double dt = dtype_bytes_of(cfg), d = m.d_model, ff = m.d_ff, V = static_cast<double>(vocab);
  const double H = m.heads, B = static_cast<double>(b.batch);
  const int64_t S = s2s ? b.source : 0, T = b.target;
  const double enc_layers = s2s ? m.encoder_layers : 0, dec_layers = m.decoder_layers;
  PassEstimate e;
  // Activations per token: training keeps every layer's values for the backward; an evaluation
  // holds one layer's at a time (and the encoder's output while decoding).
  const double dec_layer = 8 * d + 2 * ff + (s2s ? 4 * d : 0), enc_layer = 8 * d + 2 * ff;
  const double per_dec = training ? 4 * V + 6 * d + dec_layers * dec_layer : 3 * V + 6 * d + dec_layer;
  const double per_enc = s2s ? (training ? 6 * d + enc_layers * enc_layer : 7 * d + enc_layer) : 0;
  e.activation_bytes =
      B * (static_cast<double>(T) * per_dec + static_cast<double>(S) * per_enc) * dt;
  // Attention, per stack's sites.
  const double keep = static_cast<double>(attention_keep_limit());
  auto sites = [&](models::AttnKind kind, int64_t Lq, int64_t Lk, double layers) {
    if (Lq <= 0 || Lk <= 0 || layers <= 0) return 0.0;
    const double P = static_cast<double>(Lq) * static_cast<double>(Lk), BHP = B * H * P;
    double bytes = 0;
    // The mask: causal (decoder self-attention) [1, 1, Lq, Lk], built from a host table, or one per
    // row with padding; elsewhere only padding, [B, 1, 1, Lk].
    if (kind == models::AttnKind::DecoderSelf)
      bytes += b.padded ? B * P * (dt + 2) + 8 * P : P * (2 * dt + 8);
    else if (b.padded)
      bytes += B * static_cast<double>(Lk) * dt;
    // Training: the fused kernel keeps a site's probabilities when they fit its limit (else it
    // recomputes them block by block); dropout takes the composite path, which keeps the
    // probabilities, the dropout mask and its output per site.
    if (training) {
      const double kept = b.varies ? std::min(BHP * dt, keep) : (BHP * dt <= keep ? BHP * dt : 0.0);
      const double per_site = m.dropout > 0 ? 4 * BHP * dt : kept;
      bytes += layers * per_site;
    }
    models::AttentionSizes a;
    a.kind = kind;
    a.batch = b.batch;
    a.heads = m.heads;
    a.queries = Lq;
    a.keys = Lk;
    a.layers = static_cast<int64_t>(layers);
    a.largest_position = b.largest_position;
    a.dtype_bytes = static_cast<int64_t>(dt);
    a.training = training;
    return bytes + models::pe_attention_memory(m.pe, a);
  };
  if (s2s) {
    e.attention_bytes += sites(models::AttnKind::EncoderSelf, S, S, enc_layers);
    e.attention_bytes += sites(models::AttnKind::Cross, T, S, dec_layers);
  }
  e.attention_bytes += sites(models::AttnKind::DecoderSelf, T, T, dec_layers);
  // Greedy decoding's KV cache: every decoder layer's keys and values over the whole sequence
  // (twice: each step copies them into the grown cache), and the encoder's for cross-attention.
  if (!training && b.decode > 0) {
    const double len = static_cast<double>(T + b.decode);
    e.cache_bytes = dec_layers * 2 * B * len * d * dt * 2 +
                    (s2s ? dec_layers * 2 * B * static_cast<double>(S) * d * dt : 0.0);
  }
  return e;
}

MemoryEstimate estimate_memory(const Config& cfg, int64_t vocab, int64_t train_positions) {
  MemoryEstimate e = estimate_parameters(cfg, vocab);
  const PassEstimate step =
      estimate_pass(cfg, vocab, training_shape(cfg, train_positions), true);
  e.activation_bytes = step.activation_bytes;
  e.attention_bytes = step.attention_bytes;
  return e;
}

DataEstimate estimate_data_memory(const Config& cfg) {
  DataEstimate e;
  const TaskConfig& t = cfg.task;
  if (t.name == "lm" || t.name == "textfile") return e;
  data::TaskSpec spec;
  spec.name = t.name;
  spec.num_symbols = t.num_symbols;
  spec.train_min_len = t.train_min_len;
  spec.train_max_len = t.train_max_len;
  std::unique_ptr<data::Task> task;
  try {
    task = data::make_task(spec);
  } catch (const data::DataError&) {
    return e;  // the task's own error comes when the data is built
  }
  // One example of task length L: its tokens as int64 and its two vectors.
  auto example = [&](double L) {
    const int64_t n = static_cast<int64_t>(L);
    return static_cast<double>(sizeof(data::Example)) +
           8.0 * (static_cast<double>(task->max_source_len(n)) +
                  static_cast<double>(task->max_target_len(n)));
  };
  const double mid = example((static_cast<double>(t.train_min_len) + t.train_max_len) / 2);
  const double n_eval = static_cast<double>(t.num_eval_examples);
  e.valid_bytes = n_eval * mid;
  e.train_bytes = static_cast<double>(t.train_examples) * mid;
  for (int L : t.test_lengths) e.test_bytes += n_eval * example(L);
  return e;
}

namespace {

std::string list_text(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

// The settings behind the largest part of the generated data.
std::string data_lead(const Config& cfg, const DataEstimate& e) {
  const TaskConfig& t = cfg.task;
  const std::string n_eval = "task.num_eval_examples=" + std::to_string(t.num_eval_examples);
  const std::string range = "task.train_min_len..task.train_max_len=" +
                            std::to_string(t.train_min_len) + ".." + std::to_string(t.train_max_len);
  const std::string tests = "task.test_lengths=" + list_text(t.test_lengths);
  const std::string train = "task.train_examples=" + std::to_string(t.train_examples);
  std::string lead = n_eval + ", " + range;
  if (e.test_bytes >= e.valid_bytes && e.test_bytes >= e.train_bytes) lead = n_eval + ", " + tests;
  if (e.train_bytes > e.valid_bytes && e.train_bytes > e.test_bytes) lead = train + ", " + range;
  return lead;
}

// The process's present address-space size (bytes), from /proc/self/statm.
double mapped_bytes() {
  std::ifstream in("/proc/self/statm");
  double pages = 0;
  if (!(in >> pages)) return 0;
  const long page = sysconf(_SC_PAGE_SIZE);
  return page > 0 ? pages * static_cast<double>(page) : 0;
}

}  // namespace

void check_data_memory(const Config& cfg, double available) {
  const DataEstimate e = estimate_data_memory(cfg);
  if (available <= 0 || e.total() <= available) return;
  fail(data_lead(cfg, e), ": the generated data alone need ", gb(e.total()), " (validation split ",
       gb(e.valid_bytes), ", test splits ", gb(e.test_bytes), ", training set ", gb(e.train_bytes),
       "); this machine has ", gb(available), ". Reduce these settings.");
}

double peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  return 0;
}

double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  double total = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  auto lower = [&](double lim) {
    if (lim > 0 && (total == 0 || lim < total)) total = lim;
  };
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    lower(read_limit(f));
  // ulimit -v: what the process may still map (at least a page: a limit is never "none").
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    lower(std::max(static_cast<double>(as.rlim_cur) - mapped_bytes(), 4096.0));
  return total;
}

void check_parameter_memory(const Config& cfg, int64_t vocab, int64_t /*train_positions*/,
                            double available) {
  const MemoryEstimate e = estimate_parameters(cfg, vocab);
  if (available <= 0 || e.parameter_bytes <= available) return;
  const models::ModelConfig& m = cfg.model;
  // Name the settings behind the largest part first.
  std::string pe_keys = "pe." + cfg.model.pe.scheme;
  const std::string size_key = models::pe_scheme(cfg.model.pe.scheme).size_key_name;
  if (!size_key.empty()) pe_keys = "pe." + size_key + "=" + config_value_text(cfg, "pe." + size_key);
  const std::string d = "model.d_model=" + std::to_string(m.d_model);
  const std::string layers = d + ", model.d_ff=" + std::to_string(m.d_ff) +
                             ", model.encoder_layers=" + std::to_string(m.encoder_layers) +
                             ", model.decoder_layers=" + std::to_string(m.decoder_layers);
  std::string lead = layers;
  if (e.embedding_bytes >= e.layer_bytes && e.embedding_bytes >= e.pe_bytes) lead = d;
  if (e.pe_bytes > e.layer_bytes && e.pe_bytes > e.embedding_bytes) lead = pe_keys + ", " + d;
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", e.parameters);
  fail(lead, ": the parameters alone need ", gb(e.parameter_bytes), " (", count, " ", m.dtype,
       " parameters: token tables ", gb(e.embedding_bytes), " for ", vocab, " tokens x ", d,
       "; layers ", gb(e.layer_bytes), "; positional tables ", gb(e.pe_bytes), " from ", pe_keys,
       "); this machine has ", gb(available), ". Reduce these settings.");
}

void check_training_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                           double available) {
  check_parameter_memory(cfg, vocab, train_positions, available);
  const MemoryEstimate e = estimate_memory(cfg, vocab, train_positions);
  if (available <= 0 || e.training_bytes() <= available) return;
  fail("train.batch_size=", cfg.train.batch_size, " with sequences of ", train_positions,
       " positions: training needs ", gb(e.training_bytes()), " (parameters ",
       gb(e.parameter_bytes), ", gradients and ", cfg.train.optimizer, " state ",
       gb(e.state_bytes), ", one micro-batch's activations ", gb(e.activation_bytes),
       " and attention ", gb(e.attention_bytes), "); this machine has ", gb(available),
       ". Reduce train.batch_size (raise train.grad_accum to keep the effective batch), the "
       "sequence length or the model size.");
}

// ---------------- the whole command ----------------

MemoryUse training_memory_use(const Config& cfg) {
  return Device::parse(cfg.train.device) == Device::cpu() ? MemoryUse::Train : MemoryUse::Load;
}

double RunEstimate::total(MemoryUse use) const {
  // The process itself (binary, libraries, the BLAS library's buffers): 27 MB measured for a run
  // of length 8 (docs/training.md).
  constexpr double kProcessBytes = 32e6;
  const double base = kProcessBytes + data.total() + model.parameter_bytes;
  if (use == MemoryUse::Load) return base;
  if (use == MemoryUse::Evaluate) return base + eval.total();
  return base + model.state_bytes + std::max(step_bytes(), eval.total());
}

RunEstimate estimate_run(const Config& cfg, const TaskData* data) {
  const TaskConfig& t = cfg.task;
  const bool lm = t.name == "lm", textfile = t.name == "textfile";
  const bool decoder = t.formulation == "decoder" || cfg.model.arch == "decoder";
  std::unique_ptr<data::Task> task;
  if (!lm && !textfile) {
    try {
      task = data::make_task(task_spec(cfg));
    } catch (const data::DataError&) {
      // the task's own error comes when the data is built
    }
  }
  RunEstimate r;
  r.vocab = data ? data->vocab().size() : task ? task->vocab().size() : data::Vocab::kNumSpecial;
  const int64_t max_pos = models::pe_max_positions(cfg.model.pe);  // 0 = no limit
  const bool task_ids = t.position_ids != "sequential";
  const bool randomized = cfg.model.pe.randomized_positions;
  // One batch of sequences of source length s and target length g (a task's longest at a
  // length): its shape, the positions it needs (0 = none: skipped) and its largest position.
  auto shape_of = [&](int64_t s, int64_t g, int64_t top_id) {
    BatchShape b;
    if (decoder) {
      b.target = data::example_positions(s, g, true);
    } else {
      b.source = s + 1;
      b.target = g + 1;
    }
    b.largest_position =
        randomized ? static_cast<int64_t>(cfg.model.pe.randomized_max_position) - 1
                   : (task_ids && top_id >= 0 ? top_id : std::max(b.source, b.target) - 1);
    return b;
  };
  // Training.
  int64_t train_len = 0;
  if (task) {
    r.train = shape_of(task->max_source_len(t.train_max_len), task->max_target_len(t.train_max_len),
                       std::max<int64_t>(t.max_position_id, task->max_position_id(t.train_max_len)));
    train_len = std::max(r.train.source, r.train.target);
  } else if (lm) {
    r.train.target = t.lm_train_len;
    r.train.largest_position = t.lm_train_len - 1;
    train_len = t.lm_train_len;
  } else if (data) {
    r.train = training_shape(cfg, data->train_positions());
    train_len = data->train_positions();
  }
  r.train.batch = cfg.train.batch_size;
  r.train.padded = padded_training(cfg);
  r.train.varies = varying_training(cfg);
  r.model = estimate_parameters(cfg, r.vocab);
  if (train_len > 0) {
    const PassEstimate step = estimate_pass(cfg, r.vocab, r.train, true);
    r.model.activation_bytes = step.activation_bytes;
    r.model.attention_bytes = step.attention_bytes;
  }
  r.data = estimate_data_memory(cfg);
  // Evaluation: each split's batch, decoding included; a split past the scheme's position limit
  // is not evaluated (its row says so).
  const int64_t EB = cfg.eval.batch_size;
  auto consider = [&](const std::string& split, BatchShape b, int64_t examples, int64_t budget,
                      int64_t prompt) {
    b.batch = std::max<int64_t>(1, std::min(EB, examples));
    if (budget > 0) {
      if (max_pos > 0 && !task_ids) budget = std::min(budget, max_pos - prompt + 1);
      b.decode = std::max<int64_t>(0, prompt + budget - b.target);
    }
    const PassEstimate e = estimate_pass(cfg, r.vocab, b, false);
    if (e.total() > r.eval.total() || r.eval_split.empty()) {
      r.eval = e;
      r.eval_shape = b;
      r.eval_split = split;
    }
  };
  auto fits_limit = [&](const BatchShape& b) {
    const int64_t need = task_ids ? b.largest_position + 1 : std::max(b.source, b.target);
    return max_pos <= 0 || randomized || need <= max_pos;
  };
  const int64_t n_eval = t.num_eval_examples;
  if (task) {
    auto split = [&](const std::string& name, int64_t L, bool padded) {
      const int64_t s = task->max_source_len(L), g = task->max_target_len(L);
      BatchShape b = shape_of(s, g, task->max_position_id(L));
      b.padded = padded;
      if (!fits_limit(b)) return;
      consider(name, b, n_eval, decode_budget(cfg, L), decoder ? s + 2 : 1);
    };
    split("valid", t.train_max_len, r.train.padded);
    for (int L : t.test_lengths) split("len_" + std::to_string(L), L, false);
  } else if (lm) {
    auto window = [&](const std::string& name, int64_t L) {
      BatchShape b;
      b.target = L;
      b.largest_position = randomized ? cfg.model.pe.randomized_max_position - 1 : L - 1;
      if (fits_limit(b)) consider(name, b, n_eval, 0, 0);
    };
    window("valid", t.lm_train_len);
    for (int L : t.lm_eval_lengths) window("ctx_" + std::to_string(L), L);
  } else if (data) {
    auto file_split = [&](const EvalSet& set) {
      if (set.examples.empty()) return;
      int64_t longest_src = 0;
      for (const auto& ex : set.examples)
        longest_src = std::max<int64_t>(longest_src, static_cast<int64_t>(ex.src.size()));
      BatchShape b = training_shape(cfg, positions_needed(set, decoder));
      b.padded = true;
      if (!fits_limit(b)) return;
      consider(set.name, b, static_cast<int64_t>(set.examples.size()),
               decode_budget(cfg, longest_src), decoder ? longest_src + 2 : 1);
    };
    file_split(data->valid());
    for (const auto& set : data->tests()) file_split(set);
  }
  return r;
}

namespace {

std::string positions_text(const BatchShape& b) {
  return b.source > 0 ? std::to_string(b.source) + " + " + std::to_string(b.target)
                      : std::to_string(b.target);
}

// "training needs 23.1 GB (data ..., parameters ..., ...)".
std::string needs_text(const Config& cfg, const RunEstimate& r, MemoryUse use) {
  const bool training = use == MemoryUse::Train, evaluating = use != MemoryUse::Load;
  std::string parts = "data " + gb(r.data.total()) + ", parameters " + gb(r.model.parameter_bytes);
  if (training)
    parts += ", gradients and " + cfg.train.optimizer + " state " + gb(r.model.state_bytes) +
             ", one training micro-batch of " + std::to_string(r.train.batch) + " x " +
             positions_text(r.train) + " positions " + gb(r.step_bytes()) + " (attention " +
             gb(r.model.attention_bytes) + ")";
  if (evaluating && !r.eval_split.empty())
    parts += ", evaluating " + r.eval_split + " in batches of " + std::to_string(r.eval_shape.batch) +
             " x " + positions_text(r.eval_shape) + " positions" +
             (r.eval_shape.decode > 0 ? " decoding " + std::to_string(r.eval_shape.decode) + " more"
                                      : std::string()) +
             " " + gb(r.eval.total()) + " (attention " + gb(r.eval.attention_bytes) + ", KV cache " +
             gb(r.eval.cache_bytes) + ")";
  const char* what = training ? "training" : evaluating ? "evaluating the run" : "loading the run";
  return std::string(what) + " needs " + gb(r.total(use)) + " (" + parts + ")";
}

}  // namespace

std::string run_memory_text(const Config& cfg, MemoryUse use, const TaskData* data) {
  return needs_text(cfg, estimate_run(cfg, data), use);
}

void check_run_memory(const Config& cfg, MemoryUse use, double available, const TaskData* data) {
  if (available <= 0) return;
  const RunEstimate r = estimate_run(cfg, data);
  check_parameter_memory(cfg, r.vocab, 0, available);
  if (r.total(use) <= available) return;
  const TaskConfig& t = cfg.task;
  const bool training = use == MemoryUse::Train, evaluating = use != MemoryUse::Load;
  // The parts, and the settings behind the largest.
  const double data_bytes = r.data.total(),
               model = r.model.parameter_bytes + (training ? r.model.state_bytes : 0.0);
  const double step = training ? r.step_bytes() : 0.0, eval = evaluating ? r.eval.total() : 0.0;
  const std::string length_key =
      t.name == "lm" ? "task.lm_train_len=" + std::to_string(t.lm_train_len)
      : t.name == "textfile" ? "task.train_file=" + t.train_file
                             : "task.train_max_len=" + std::to_string(t.train_max_len);
  std::string lead, advice;
  if (data_bytes >= model && data_bytes >= step && data_bytes >= eval) {
    lead = data_lead(cfg, r.data);
    advice = "Reduce task.num_eval_examples, the lengths or task.train_examples.";
  } else if (step >= model && step >= eval) {
    lead = "train.batch_size=" + std::to_string(cfg.train.batch_size) + ", " + length_key;
    advice = "Reduce train.batch_size (raise train.grad_accum to keep the effective batch), the "
             "training length or the model.";
  } else if (eval >= model) {
    std::string which = length_key;
    if (r.eval_split.rfind("len_", 0) == 0) which = "task.test_lengths=" + list_text(t.test_lengths);
    if (r.eval_split.rfind("ctx_", 0) == 0)
      which = "task.lm_eval_lengths=" + list_text(t.lm_eval_lengths);
    if (t.name == "textfile" && r.eval_split != "valid")
      which = "task.test_files (" + r.eval_split + ")";
    lead = "eval.batch_size=" + std::to_string(cfg.eval.batch_size) + ", " + which;
    advice = r.eval_split == "valid"
                 ? "Reduce the training length (the validation split's), eval.batch_size or "
                   "eval.max_decode_len."
                 : "Reduce eval.batch_size, the evaluated lengths or eval.max_decode_len.";
  } else {
    lead = "model.d_model=" + std::to_string(cfg.model.d_model) +
           ", model.d_ff=" + std::to_string(cfg.model.d_ff) + ", model.heads=" +
           std::to_string(cfg.model.heads);
    advice = "Reduce the model.";
  }
  fail(lead, ": ", needs_text(cfg, r, use), "; this machine has ", gb(available), ". ", advice);
}

}  // namespace pelab
