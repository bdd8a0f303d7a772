// pelab — the positional-encoding interface: the four hook points of the unified view (seed 004).
//
//   1. embed         add to the input embedding            (sinusoidal, learned APE)
//   2. transform_qk  transform queries and keys             (RoPE)
//   3. score_term    add a term to the attention scores     (Shaw K table, T5 bias, ALiBi; CoPE
//                    through keyed_score_term, which also sees the keys and the mask)
//   4. value_term    add a term to the attention values     (Shaw V table)
//
// The attention code calls all four hooks for every attention call and never names a scheme. A scheme
// is one file in models/pe/ holding a subclass and one PELAB_REGISTER_PE line, which also declares
// the scheme's config keys (pe.<key>: type, default, range, doc), its cross-field rules, its
// eval-time keys and the answers code outside models/pe/ asks instead of comparing scheme names
// (longest representable position, parameter count). The config loader, `--set`, the generated
// docs/config.md and `pelab compare` take all of it from this registry. One PE object is made per
// stack (encoder, decoder); its parameters live under "<stack>.pe." in the model.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/pe/pe_config.h"
#include "models/positions.h"
#include "pelab/nn.h"

namespace pelab::models {

enum class StackKind { Encoder, Decoder };
enum class AttnKind { EncoderSelf, DecoderSelf, Cross };

// What a PE object is built for.
struct StackInfo {
  StackKind kind = StackKind::Encoder;
  int64_t layers = 1;
  int64_t d_model = 64, heads = 4;
  int64_t head_dim() const { return d_model / heads; }
  DType dtype = DType::Float32;
};

// One attention call. Positions are the tokens' position IDs (models/positions.h): shared by the
// batch (rows 1: 0..L-1 normally, offset for cached decoding, a sorted random subset for randomized
// PE) or one row per batch row (IDs supplied by the task; docs/model.md, "Position IDs").
struct AttnSite {
  AttnKind kind = AttnKind::EncoderSelf;
  int64_t layer = 0;  // layer index within the stack
  Positions q_pos;    // positions of the queries ([1 or B, Lq])
  Positions k_pos;    // positions of the keys ([1 or B, Lk])
  bool causal = false;
  // Per batch row: 1 + the largest position of a real (unpadded) token of that row's sequence so
  // far (with a KV cache: the cached tokens included). Given only to a scheme whose
  // needs_row_lengths() is true (its math depends on each sequence's own length); null otherwise.
  const std::vector<int64_t>* row_len = nullptr;
};

// True when the site's queries or keys carry one ID row per batch row (task-supplied IDs).
inline bool per_row(const AttnSite& site) { return !site.q_pos.shared() || !site.k_pos.shared(); }

// The site of batch row b alone: that row's query and key IDs as shared vectors, both ID levels
// (row_len: none).
inline AttnSite row_site(const AttnSite& site, int64_t b) {
  AttnSite s = site;
  s.q_pos = site.q_pos.row_block(b);
  s.k_pos = site.k_pos.row_block(b);
  s.row_len = nullptr;
  return s;
}

// For a hook written for shared positions, at a per-row site: f(x of row b, row_site(site, b)) for
// every batch row b of x [B, ...], joined along the batch axis, so each row's result is exactly
// the one of that row alone with its IDs shared. Undefined when f gives no term.
inline Tensor by_row(const Tensor& x, const AttnSite& site,
                     const std::function<Tensor(const Tensor&, const AttnSite&)>& f);

// Throws unless the site's IDs are shared or have one row per batch row (B rows).
inline void check_site_rows(const AttnSite& site, int64_t B) {
  PELAB_CHECK((site.q_pos.shared() || site.q_pos.rows == B) &&
                  (site.k_pos.shared() || site.k_pos.rows == B),
              "positional encoding: position IDs of ", site.q_pos.rows, " (queries) and ",
              site.k_pos.rows, " (keys) rows for a batch of ", B);
}

inline Tensor by_row(const Tensor& x, const AttnSite& site,
                     const std::function<Tensor(const Tensor&, const AttnSite&)>& f) {
  const int64_t B = x.size(0);
  check_site_rows(site, B);
  std::vector<Tensor> parts;
  for (int64_t b = 0; b < B; ++b) {
    Tensor t = f(slice(x, 0, b, b + 1), row_site(site, b));
    if (!t.defined()) return Tensor();
    parts.push_back(t);
  }
  return parts.size() == 1 ? parts[0] : concat(parts, 0);
}

class PositionalEncoding : public Module {
 public:
  ~PositionalEncoding() override = default;
  virtual std::string name() const = 0;
  // True for schemes that add to the embedding (the default embedding scale is sqrt(d_model) for them).
  virtual bool additive() const { return false; }
  // True when the scheme wants AttnSite::row_len (dynamic NTK RoPE at evaluation): the stacks then
  // read the padding mask on the host to fill it.
  virtual bool needs_row_lengths() const { return false; }
  // Hook 1: x [B, L, D] at positions pos ([1 or B, L]) -> x + PE. Default: x.
  virtual Tensor embed(const Tensor& x, const Positions& pos) { return x; }
  // Hook 2: q [B, H, Lq, dh] at site.q_pos and k [B, H, Lk, dh] at site.k_pos (k holds exactly the
  // keys at those positions: with a KV cache only the new keys are passed). Default: unchanged.
  virtual void transform_qk(Tensor& q, Tensor& k, const AttnSite& site) {}
  // Hook 3: a term added to the scaled scores q·kᵀ/√dh, broadcastable to [B, H, Lq, Lk]; may use q
  // [B, H, Lq, dh]. A scheme whose paper puts its term inside the scale applies 1/√dh itself.
  // Undefined Tensor = no term.
  virtual Tensor score_term(const Tensor& q, const AttnSite& site) { return Tensor(); }
  // Hook 3 for a term that needs the keys too (CoPE's gates σ(q·k/√dh)); attention calls this one.
  // k [B, H, Lk, dh]: every key the queries attend to (after transform_qk; with a KV cache the
  // cached keys followed by the new ones); blocked: the attention's mask (1 = blocked,
  // broadcastable to [B, H, Lq, Lk]; padding and, at causal sites, the keys after each query) or
  // undefined when nothing is blocked. Default: score_term(q, site), so a scheme whose term needs
  // only q overrides score_term and nothing else.
  virtual Tensor keyed_score_term(const Tensor& q, const Tensor& k, const Tensor& blocked,
                                  const AttnSite& site) {
    return score_term(q, site);
  }
  // Hook 4: a term added to the per-head attention output [B, H, Lq, dh], given the attention
  // probabilities [B, H, Lq, Lk]. Undefined Tensor = no term.
  virtual Tensor value_term(const Tensor& probs, const AttnSite& site) { return Tensor(); }
  // Whether value_term adds a term at this site. A scheme that overrides value_term overrides this
  // too (tests/test_pe.cpp checks every registered scheme): where it is false, the attention may run
  // fused, without ever forming the probabilities value_term would be given.
  virtual bool has_value_term(const AttnSite& site) const { return false; }
  // Hooks 3 and 4 in table form, for terms looked up by a relative index (Shaw's tables): index
  // Int64 [Lq, Lk] in [0, R); keys [R, dh] or [H, R, dh] with score_term(q) = q_i·keys[r(i, j)] /
  // √dh; values (same shapes) with value_term(p) = Σ_j p_ij · values[r(i, j)]. Where a scheme
  // gives a table, it equals the hook's term (tests/test_pe.cpp checks), and attention adds it
  // inside the fused op instead of calling the hook. Undefined tables = none.
  struct RelativeTables {
    Tensor index, keys, values;
  };
  virtual RelativeTables relative_tables(const AttnSite& site) { return {}; }
};

using PEFactory = std::function<std::shared_ptr<PositionalEncoding>(const PEConfig&, const StackInfo&,
                                                                      Generator&)>;

// A numeric range: "[a, b)", "(0, inf)", "" (none).
struct PERange {
  bool has_min = false, min_exclusive = false, has_max = false, max_exclusive = false;
  double min = 0, max = 0;
  bool contains(double v) const;
  std::string str() const;  // "[0, 1)", "" when unbounded
};

// One config key a scheme owns (`pe.<name>`): type, default, allowed values, doc line.
struct PEKey {
  std::string scheme, name;     // name without "pe."
  PEValue def;                  // its type is the key's type
  std::vector<std::string> choices;  // allowed values of a string key (empty = any)
  PERange range;                // numbers
  std::string doc;
  bool eval_time = false;       // changes only the evaluation (compare variants may set it)
};

// The model dimensions a cross-field rule may need, and the model's dtype (every float key's value
// must be finite in it: validate_pe).
struct PEModelDims {
  int64_t d_model = 0, heads = 0;
  DType dtype = DType::Float32;
};
// A broken cross-field rule: one message line and the full keys involved ("pe.rope_fraction",
// "model.d_model"), so the config loader can point at the line that set them. Empty msg = fine.
struct PEViolation {
  std::string msg;
  std::vector<std::string> keys;
};
struct PERule {
  std::string scheme, doc;  // doc: one line for the config reference
  std::function<PEViolation(const PEConfig&, const PEModelDims&)> check;
};

// The attention sites of one stack, as the memory estimate (train/memory_estimate.h) asks a scheme
// what its hooks hold there: `layers` sites of `queries` x `keys` over a batch of `batch` rows and
// `heads` heads, positions up to `largest_position`.
struct AttentionSizes {
  AttnKind kind = AttnKind::DecoderSelf;  // self-attention of a stack (causal in the decoder) or cross
  int64_t batch = 1, heads = 1, queries = 0, keys = 0, layers = 1;
  int64_t largest_position = 0;
  int64_t dtype_bytes = 4;  // the model's dtype
  // A training step (forward, then the backward through every site: what each site's term keeps
  // for it stays until then), else an evaluation pass (no gradients: one site's term at a time).
  bool training = true;
  double pairs() const { return static_cast<double>(queries) * static_cast<double>(keys); }
};

// What a scheme registers with itself: its name, factory, keys, cross-field rules and the answers
// code outside models/pe/ asks of a scheme instead of comparing its name.
class PEScheme {
 public:
  PEScheme(std::string name, PEFactory factory);
  // Declares key pe.<name>. spec: "" (no constraint), an interval "[1, inf)" for numbers, or
  // "a|b|c" for the allowed values of a string.
  PEScheme& key(const std::string& name, int64_t def, const std::string& spec, const std::string& doc);
  PEScheme& key(const std::string& name, int def, const std::string& spec, const std::string& doc) {
    return key(name, static_cast<int64_t>(def), spec, doc);
  }
  PEScheme& key(const std::string& name, double def, const std::string& spec, const std::string& doc);
  PEScheme& key(const std::string& name, bool def, const std::string& spec, const std::string& doc);
  PEScheme& key(const std::string& name, const char* def, const std::string& spec,
                const std::string& doc);
  // Marks the key declared last as eval-time (an evaluation knob, not part of the trained model).
  PEScheme& eval_time();
  // A cross-field rule; it runs for every config (check pe.scheme inside when it matters).
  PEScheme& rule(const std::string& doc,
                 std::function<PEViolation(const PEConfig&, const PEModelDims&)> check);
  // Positions the scheme can represent (a learned table's rows); not given = unlimited.
  PEScheme& max_positions(std::function<int64_t(const PEConfig&)> f);
  // Parameters per stack, for the memory estimate (default: none).
  PEScheme& parameters(std::function<int64_t(const PEConfig&, const StackInfo&)> f);
  // Bytes the scheme's hooks hold at the peak of one stack's attention sites (AttentionSizes): its
  // score and value terms, the host tables and caches behind them, and the buffers the engine's
  // backward allocates for a term with a gradient (the gradient of a [.., H, Lq, Lk] bias is
  // [B, H, Lq, Lk]). Measured against the peak resident memory of a training step for every scheme
  // (tests/test_resource_bounds.cpp). Not given = the scheme's hooks hold nothing quadratic in the
  // length.
  PEScheme& attention_memory(std::function<double(const PEConfig&, const AttentionSizes&)> f);
  // The key that sets the scheme's size or position limit ("max_positions"), named by the memory
  // estimate and the position-limit messages; "" = none.
  PEScheme& size_key(const std::string& key);
  // Shorthand eval-time variants for `pelab compare`: each value X other than the default of the
  // string key `choice_key` names the variant {pe.<choice_key>: X, pe.<factor_key>: auto}, where
  // auto is the factor that stretches the training positions to the longest test sequence.
  PEScheme& variants(const std::string& choice_key, const std::string& factor_key) {
    variant_key = choice_key;
    variant_factor_key = factor_key;
    return *this;
  }
  // The scheme adds no positional information (NoPE): randomised positions make no sense with it.
  PEScheme& positionless() {
    encodes_positions = false;
    return *this;
  }
  // The scheme's positions are not token IDs a task could supply (CoPE's contextual counts): its
  // hooks refuse per-row position IDs, and pe_accepts_task_positions says so at config time.
  PEScheme& refuses_task_positions() {
    accepts_task_positions = false;
    return *this;
  }
  // The task ID levels the scheme can use (Positions::ids2; multi_addition's two-level coupled
  // IDs): 1 by default. A scheme declaring 2 builds its second-level parameters when
  // PEConfig::position_channels is 2 and reads Positions::ids2 then; the config refuses a task
  // with more levels than its scheme's (pe_position_channels).
  PEScheme& position_channels(int64_t n) {
    max_position_channels = n;
    return *this;
  }

  std::string name;
  PEFactory factory;
  std::vector<PEKey> keys;
  std::vector<PERule> rules;
  std::function<int64_t(const PEConfig&)> max_positions_fn;
  std::function<int64_t(const PEConfig&, const StackInfo&)> parameters_fn;
  std::function<double(const PEConfig&, const AttentionSizes&)> attention_memory_fn;
  std::string size_key_name;
  bool encodes_positions = true;
  bool accepts_task_positions = true;
  int64_t max_position_channels = 1;
  std::string variant_key, variant_factor_key;
  std::vector<std::string> problems;  // malformed declarations (bad range, default out of range)

 private:
  PEScheme& add(const std::string& name, PEValue def, const std::string& spec, const std::string& doc);
};

// What keeps `scheme` from being registered: an empty or taken name, no factory, a malformed key,
// a key another scheme declares. Empty = fine.
std::vector<std::string> pe_scheme_problems(const PEScheme& scheme);
// Registration (static-init time, so no throwing): false when pe_scheme_problems is not empty;
// the reasons are kept and reported by pe_registry_errors() (tests/test_scheme_registry.cpp
// checks it is empty).
bool register_pe(PEScheme scheme);
bool register_pe(const std::string& name, PEFactory factory);
std::vector<std::string> pe_registry_errors();

std::vector<std::string> pe_names();  // sorted
// Throws pelab::Error naming the scheme and the valid names.
const PEScheme& pe_scheme(const std::string& name);
// Every scheme key, schemes in name order, keys in declaration order.
std::vector<const PEKey*> pe_keys();
const PEKey* find_pe_key(const std::string& name);  // null when no scheme declares it
std::vector<const PERule*> pe_rules();
// The positions cfg.scheme can represent; 0 = unlimited.
int64_t pe_max_positions(const PEConfig& cfg);
// Whether cfg.scheme honours position IDs supplied per token by the task (Positions with one row
// per batch row); false for a scheme declared with refuses_task_positions().
bool pe_accepts_task_positions(const PEConfig& cfg);
// The task ID levels cfg.scheme can use (PEScheme::position_channels): 1 or 2.
int64_t pe_position_channels(const PEConfig& cfg);
// PEScheme::attention_memory of cfg.scheme at `sites` (0 when it declares none).
double pe_attention_memory(const PEConfig& cfg, const AttentionSizes& sites);
// What sets that limit, for messages: "pe.max_positions" (the scheme's size_key), else
// "the position limit of pe.scheme X".
std::string pe_max_positions_name(const PEConfig& cfg);
// Every eval-time key ("pe.rope_scaling", ...): settings that change only the evaluation.
std::vector<std::string> pe_eval_time_keys();
// A shorthand variant name (see PEScheme::variants) -> its overrides ("pe.rope_scaling=pi",
// "pe.rope_scaling_factor=auto"); empty when no scheme defines it.
std::vector<std::string> pe_variant_sets(const std::string& name);
std::vector<std::string> pe_variant_names();  // every shorthand, sorted
// True for a key "pe.X" that a scheme names as its variant factor (it accepts `auto`).
bool pe_is_variant_factor_key(const std::string& full_key);
// The scheme that declares "pe.X" ("" for another key).
std::string pe_key_scheme(const std::string& full_key);
// "" when v is a value the key allows, else the reason ("5 is out of range [1, inf)").
std::string pe_check_value(const PEKey& key, const PEValue& v);
// Every scheme key's value (ranges, allowed values, a float at most dtype_max(dims.dtype)) and
// every rule; throws pelab::Error naming the key ("pe.rope_base: ...") or the rule's message.
void validate_pe(const PEConfig& cfg, const PEModelDims& dims);
// The scheme's positional encoding; throws naming the key when a set key is not declared or its
// value is outside the declared range / allowed values (the scheme's constructor relies on both).
std::shared_ptr<PositionalEncoding> make_pe(const PEConfig& cfg, const StackInfo& stack, Generator& gen);

}  // namespace pelab::models

#define PELAB_PE_CAT2(a, b) a##b
#define PELAB_PE_CAT(a, b) PELAB_PE_CAT2(a, b)
// PELAB_REGISTER_PE("none", [](const PEConfig& c, const StackInfo& s, Generator& g) { ... });
// PELAB_REGISTER_PE(PEScheme("rope", factory).key("rope_base", 10000.0, "(1, inf)", "doc")...);
#define PELAB_REGISTER_PE(...) \
  static const bool PELAB_PE_CAT(pelab_pe_registered_, __LINE__) = ::pelab::models::register_pe(__VA_ARGS__)
