// pelab — the positional-encoding interface: the four hook points of the unified view (seed 004).
//
//   1. embed         add to the input embedding            (sinusoidal, learned APE)
//   2. transform_qk  transform queries and keys             (RoPE)
//   3. score_term    add a term to the attention scores     (Shaw K table, T5 bias, ALiBi)
//   4. value_term    add a term to the attention values     (Shaw V table)
//
// The attention code calls all four hooks for every attention call and never names a scheme. A scheme
// is one file in models/pe/ holding a subclass and one PELAB_REGISTER_PE line. One PE object is made
// per stack (encoder, decoder); its parameters live under "<stack>.pe." in the model.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pelab/nn.h"

namespace pelab::models {

// Every PE setting (the `pe:` config section). Schemes read the fields they need.
struct PEConfig {
  std::string scheme = "sinusoidal";  // sinusoidal | learned | shaw | t5 | rope | alibi | none
  double sinusoidal_base = 10000.0;
  int64_t max_positions = 512;        // learned
  int64_t shaw_k = 16;                // clip distance
  bool shaw_keys = true, shaw_values = true, shaw_per_head = false;
  int64_t t5_num_buckets = 32, t5_max_distance = 128;
  bool t5_per_layer = false;
  double rope_base = 10000.0;
  std::string rope_pairing = "half";  // half (GPT-NeoX/HF) | interleaved (seeds' (2i, 2i+1))
  double rope_fraction = 1.0;         // rotate the first fraction of each head's dims
  std::string rope_scaling = "none";  // eval-time: none | pi | ntk | dynamic_ntk | yarn
  double rope_scaling_factor = 1.0;
  int64_t rope_train_length = 0;      // original context length (for dynamic NTK / YaRN)
  double yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  bool alibi_symmetric = true;        // |i-j| form in encoder self-attention
};

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

// One attention call. Positions are absolute token positions (host vectors, shared by the batch):
// 0..L-1 normally, offset for cached decoding, a sorted random subset for randomized PE.
struct AttnSite {
  AttnKind kind = AttnKind::EncoderSelf;
  int64_t layer = 0;                          // layer index within the stack
  const std::vector<int64_t>* q_pos = nullptr;  // positions of the queries (size Lq)
  const std::vector<int64_t>* k_pos = nullptr;  // positions of the keys (size Lk)
  bool causal = false;
  // Per batch row: 1 + the largest position of a real (unpadded) token of that row's sequence so
  // far (with a KV cache: the cached tokens included). Given only to a scheme whose
  // needs_row_lengths() is true (its math depends on each sequence's own length); null otherwise.
  const std::vector<int64_t>* row_len = nullptr;
};

class PositionalEncoding : public Module {
 public:
  ~PositionalEncoding() override = default;
  virtual std::string name() const = 0;
  // True for schemes that add to the embedding (the default embedding scale is sqrt(d_model) for them).
  virtual bool additive() const { return false; }
  // True when the scheme wants AttnSite::row_len (dynamic NTK RoPE at evaluation): the stacks then
  // read the padding mask on the host to fill it.
  virtual bool needs_row_lengths() const { return false; }
  // Hook 1: x [B, L, D] at positions pos (size L) -> x + PE. Default: x.
  virtual Tensor embed(const Tensor& x, const std::vector<int64_t>& pos) { return x; }
  // Hook 2: q [B, H, Lq, dh] at site.q_pos and k [B, H, Lk, dh] at site.k_pos (k holds exactly the
  // keys at those positions: with a KV cache only the new keys are passed). Default: unchanged.
  virtual void transform_qk(Tensor& q, Tensor& k, const AttnSite& site) {}
  // Hook 3: a term added to the scaled scores q·kᵀ/√dh, broadcastable to [B, H, Lq, Lk]; may use q
  // [B, H, Lq, dh]. A scheme whose paper puts its term inside the scale applies 1/√dh itself.
  // Undefined Tensor = no term.
  virtual Tensor score_term(const Tensor& q, const AttnSite& site) { return Tensor(); }
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
bool register_pe(const std::string& name, PEFactory factory);
std::vector<std::string> pe_names();
// Throws pelab::Error naming the scheme and the valid names.
std::shared_ptr<PositionalEncoding> make_pe(const PEConfig& cfg, const StackInfo& stack, Generator& gen);

}  // namespace pelab::models

#define PELAB_PE_CAT2(a, b) a##b
#define PELAB_PE_CAT(a, b) PELAB_PE_CAT2(a, b)
// PELAB_REGISTER_PE("rope", [](const PEConfig& c, const StackInfo& s, Generator& g) { ... });
#define PELAB_REGISTER_PE(name, ...) \
  static const bool PELAB_PE_CAT(pelab_pe_registered_, __LINE__) = ::pelab::models::register_pe(name, __VA_ARGS__)
