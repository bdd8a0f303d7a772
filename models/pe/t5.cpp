// pelab — T5 relative attention bias (Raffel et al. 2020), hook 3 (score_term), self-attention only.
//   bias[h, i, j] = table[bucket(k_pos[j] − q_pos[i]), h], added unscaled to the scores,
// with the canonical bucketing of t5_buckets.h: bidirectional in encoder self-attention (non-causal
// sites), unidirectional in decoder self-attention (and any causal site). Cross-attention: no term.
// Parameters: one table per stack "rel_bias" [num_buckets, H] shared by its layers (as in T5), or one
// per layer "layers.<i>.rel_bias" with pe.t5_per_layer. Init: normal(0, d_model^−0.5), HF's
// T5PreTrainedModel init with factor 1. Bucket ids [Lq, Lk] (Int64) are built on the host and cached
// per (positions, direction, device), flattened to [Lq·Lk]; the bias is index_select(tableᵀ, 1, ids)
// [H, Lq·Lk] viewed as [1, H, Lq, Lk] (contiguous: the score add runs at unit stride).
#include <cmath>

#include "models/pe/layer_params.h"
#include "models/pe/pe.h"
#include "models/pe/site_tables.h"
#include "models/pe/t5_buckets.h"

namespace pelab::models {
namespace {

class T5PE : public PositionalEncoding {
 public:
  T5PE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : num_buckets_(cfg.get_int("t5_num_buckets")), max_distance_(cfg.get_int("t5_max_distance")), heads_(s.heads) {
    // Both directions must be well defined: encoder and decoder stacks differ only per site.
    t5_check_buckets(true, num_buckets_, max_distance_);
    t5_check_buckets(false, num_buckets_, max_distance_);
    PELAB_CHECK(s.layers >= 1, "t5: stack needs at least one layer, got ", s.layers);
    const double std = 1.0 / std::sqrt(static_cast<double>(s.d_model));
    auto make_table = [&] {
      Tensor t = Tensor::empty({num_buckets_, heads_}, s.dtype);
      init::normal_(t, 0.0, std, gen);
      return t;
    };
    if (cfg.get_bool("t5_per_layer")) {
      LayerParams layers(s.layers);
      register_module("layers", layers.list());
      for (int64_t i = 0; i < s.layers; ++i) tables_.push_back(layers.add(i, "rel_bias", make_table()));
    } else {
      tables_.push_back(register_parameter("rel_bias", make_table()));
    }
  }
  std::string name() const override { return "t5"; }

  Tensor score_term(const Tensor& q, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return Tensor();
    if (per_row(site))  // each row with its own IDs (docs/model.md, "Position IDs")
      return by_row(q, site, [this](const Tensor& qb, const AttnSite& sb) { return score_term(qb, sb); });
    // One table shared by the stack, or one per layer (pe.t5_per_layer).
    const Tensor& table =
        tables_.size() == 1 && site.layer >= 0 ? tables_[0] : tables_[layer_index("t5", site, tables_.size())];
    const bool bidirectional = site.kind == AttnKind::EncoderSelf && !site.causal;
    const Tensor ids = bucket_ids(site.q_pos.ids, site.k_pos.ids, bidirectional, table.device());
    const int64_t Lq = site.q_pos.len;
    const int64_t Lk = site.k_pos.len;
    // [H, buckets] (a tiny copy) -> select along its last axis -> [H, Lq·Lk]: the bias comes out
    // contiguous in the scores' [1, H, Lq, Lk] layout, so the add runs at unit stride.
    Tensor by_head = transpose(table, 0, 1).contiguous();
    Tensor b = index_select(by_head, 1, ids);
    return reshape(b, {1, heads_, Lq, Lk});
  }

 private:
  Tensor bucket_ids(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp,
                    bool bidirectional, Device dev) {
    if (const Tensor* ids = cache_.find(qp, kp, bidirectional, DType::Int64, dev)) return *ids;
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    std::vector<int64_t> v(static_cast<size_t>(Lq * Lk));
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j)
        v[i * Lk + j] = t5_relative_bucket(kp[j] - qp[i], bidirectional, num_buckets_, max_distance_);
    return cache_.put(qp, kp, bidirectional, DType::Int64, dev, Tensor::from_ints(v, {Lq * Lk}, dev));
  }

  int64_t num_buckets_, max_distance_, heads_;
  std::vector<Tensor> tables_;  // handles to the registered parameters
  PositionCache<Tensor> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("t5", [](const PEConfig& c, const StackInfo& s, Generator& g) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<T5PE>(c, s, g));
    })
        .key("t5_num_buckets", 32, "[4, inf)",
             "t5: relative-position buckets (split between directions when bidirectional, so at "
             "least 2 per direction); even")
        .key("t5_max_distance", 128, "[1, inf)",
             "t5: distance where the log-spaced buckets end (farther shares the last bucket)")
        .key("t5_per_layer", false, "", "t5: a bias table per layer (T5 shares one across the stack)")
        .rule("pe.scheme t5 needs an even pe.t5_num_buckets >= 4 (at least 2 per direction) and "
              "pe.t5_max_distance > pe.t5_num_buckets / 2 (the checks the model build makes)",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                if (c.scheme != "t5") return {};
                const int64_t nb = c.get_int("t5_num_buckets"), md = c.get_int("t5_max_distance");
                if (nb % 2 != 0)
                  return {"pe.t5_num_buckets (" + std::to_string(nb) + ") must be even with pe.scheme t5",
                          {"pe.t5_num_buckets", "pe.scheme"}};
                try {  // the model's own check (both directions: encoder and decoder self-attention)
                  t5_check_buckets(true, nb, md);
                  t5_check_buckets(false, nb, md);
                } catch (const Error& e) {
                  return {"pe.scheme t5 with pe.t5_num_buckets " + std::to_string(nb) +
                              " and pe.t5_max_distance " + std::to_string(md) + ": " + e.what(),
                          {"pe.t5_num_buckets", "pe.t5_max_distance", "pe.scheme"}};
                }
                return {};
              })
        .parameters([](const PEConfig& c, const StackInfo& s) {
          return c.get_int("t5_num_buckets") * s.heads * (c.get_bool("t5_per_layer") ? s.layers : 1);
        })
        .attention_memory([](const PEConfig&, const AttentionSizes& s) {
          if (s.kind == AttnKind::Cross) return 0.0;
          const double P = s.pairs(), h = static_cast<double>(s.heads), b = static_cast<double>(s.batch);
          const double dt = static_cast<double>(s.dtype_bytes);
          // cached bucket ids (Int64 [Lq·Lk]) and the host vector of the newest
          const double ids = (kPositionCacheEntries + 1) * 8.0 * P;
          // training: each layer's [1, H, Lq, Lk] bias and its gather kept for the backward, the
          // engine's [B, H, Lq, Lk] gradient of the bias and its reduction; evaluation: one bias
          if (!s.training) return ids + 2 * h * P * dt;
          return ids + 2.0 * static_cast<double>(s.layers) * h * P * dt + 3 * b * h * P * dt;
        })
        .size_key("t5_num_buckets"));

}  // namespace pelab::models
