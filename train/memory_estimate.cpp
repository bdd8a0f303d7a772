// pelab — memory estimate of a configuration (memory_estimate.h).
#include "train/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "data/tasks.h"
#include "models/pe/pe.h"
#include "pelab/error.h"

namespace pelab {
namespace {

std::string gb(double bytes) {
  char buf[64];
  const double g = bytes / 1e9;
  if (g >= 100)
    std::snprintf(buf, sizeof buf, "%.3g GB", g);
  else
    std::snprintf(buf, sizeof buf, "%.1f GB", g);
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

MemoryEstimate estimate_memory(const Config& cfg, int64_t vocab, int64_t train_positions) {
  const models::ModelConfig& m = cfg.model;
  const double d = m.d_model, ff = m.d_ff, V = static_cast<double>(vocab);
  const double b = m.bias ? 1 : 0;
  const bool s2s = m.arch == "seq2seq";
  const double dtype_bytes = m.dtype == "float64" ? 8 : 4;
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
  const double layers = enc + dec;
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
  const double tokens = static_cast<double>(cfg.train.batch_size) *
                        static_cast<double>(std::max<int64_t>(train_positions, 1));
  e.activation_bytes = tokens * (V + layers * (4 * d + ff)) * dtype_bytes;
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

void check_data_memory(const Config& cfg, double available) {
  const DataEstimate e = estimate_data_memory(cfg);
  if (available <= 0 || e.total() <= available) return;
  const TaskConfig& t = cfg.task;
  std::string lengths;
  for (int L : t.test_lengths) lengths += (lengths.empty() ? "" : ", ") + std::to_string(L);
  const std::string n_eval = "task.num_eval_examples=" + std::to_string(t.num_eval_examples);
  const std::string range = "task.train_min_len..task.train_max_len=" +
                            std::to_string(t.train_min_len) + ".." + std::to_string(t.train_max_len);
  const std::string tests = "task.test_lengths=[" + lengths + "]";
  const std::string train = "task.train_examples=" + std::to_string(t.train_examples);
  // Name the settings behind the largest part first.
  std::string lead = n_eval + ", " + range;
  if (e.test_bytes >= e.valid_bytes && e.test_bytes >= e.train_bytes) lead = n_eval + ", " + tests;
  if (e.train_bytes > e.valid_bytes && e.train_bytes > e.test_bytes) lead = train + ", " + range;
  fail(lead, ": the generated data alone need ", gb(e.total()), " (validation split ",
       gb(e.valid_bytes), ", test splits ", gb(e.test_bytes), ", training set ", gb(e.train_bytes),
       "); this machine has ", gb(available), ". Reduce these settings.");
}

double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  double total = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const double lim = read_limit(f);
    if (lim > 0 && (total == 0 || lim < total)) total = lim;
  }
  return total;
}

void check_parameter_memory(const Config& cfg, int64_t vocab, int64_t train_positions,
                            double available) {
  const MemoryEstimate e = estimate_memory(cfg, vocab, train_positions);
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
       " positions: training needs at least ", gb(e.training_bytes()), " (parameters ",
       gb(e.parameter_bytes), ", gradients and ", cfg.train.optimizer, " state ",
       gb(e.state_bytes), ", activations of one micro-batch at least ", gb(e.activation_bytes),
       "); this machine has ", gb(available),
       ". Reduce train.batch_size (raise train.grad_accum to keep the effective batch), the "
       "sequence length or the model size.");
}

}  // namespace pelab
