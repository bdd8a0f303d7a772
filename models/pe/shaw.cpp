// pelab — Shaw et al. (2018) relative position representations, hooks 3 and 4, self-attention only.
// Clip distance k = pe.shaw_k; relative index r(i, j) = clip(k_pos[j] − q_pos[i], −k, k) + k in
// [0, 2k]. Per layer two tables ("layers.<i>.rel_k", "layers.<i>.rel_v"), [2k+1, dh] shared by the
// heads or [H, 2k+1, dh] with pe.shaw_per_head; each can be switched off (pe.shaw_keys/shaw_values).
// Init: normal(0, 0.02).
// Two-level task IDs (pe.position_channels 2: multi_addition's digit and operand IDs, Cho et al.
// 2025's relative bias over each ID dimension): a second pair of tables per layer
// ("layers.<i>.rel_k2", "layers.<i>.rel_v2", same shapes and clip) indexed by the second level's
// r2(i, j) = clip(k_pos2[j] − q_pos2[i], −k, k) + k; both terms are added. Such sites go through
// the hooks (relative_tables gives none: it holds one index).
//   score_term: e[b,h,i,j] = q[b,h,i]·rel_k[r(i,j)] / √dh  (Shaw puts it inside the scale)
//     computed by the engine's relative_keys as (q/√dh) @ rel_kᵀ -> [B,H,Lq,2k+1], then gather along
//     the last axis with the index [1,1,Lq,Lk] expanded (stride 0) to [B,H,Lq,Lk]; the gather's
//     backward is the scatter-add into the 2k+1 bins.
//   value_term: z[b,h,i] = Σ_j P[b,h,i,j]·rel_v[r(i,j)] = w[b,h,i,:] @ rel_v, where the bin weights
//     w[b,h,i,r] = Σ_{j: r(i,j)=r} P[b,h,i,j] come from the engine's bin_sum (backward: a gather of
//     the upstream gradient).
//   relative_tables gives both as (index, rel_k, rel_v), which attention adds inside its fused op
//   without forming the scores or P.
// Nothing of size L×L×dh is ever built: the relative parts are O(Lq·R) per head, plus one shared
// [Lq, Lk] Int64 index per site (cached across layers and calls), where R = the rows the site can
// reach: the clipped distances of a site lie in [lo − k, hi − k] with lo = max(min(k_pos) −
// max(q_pos), −k) + k and hi = min(max(k_pos) − min(q_pos), k) + k, so relative_tables hands
// attention the rows [lo, hi] of each table (a slice, whose backward scatters into the full
// table) and the index r(i, j) − lo. When 2k+1 rows are reachable (k below the sequence length)
// that is the whole table and the index above, unchanged; for k beyond the sequence length the
// cost no longer grows with k (at most Lq + Lk − 1 rows). The parameters stay [.., 2k+1, dh].
#include <algorithm>
#include <cmath>
#include <deque>

#include "models/pe/layer_params.h"
#include "models/pe/pe.h"
#include "models/pe/site_tables.h"
#include "pelab/autograd.h"
#include "pelab/backend.h"

namespace pelab::models {
namespace {

class ShawPE : public PositionalEncoding {
 public:
  ShawPE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : k_(cfg.get_int("shaw_k")), keys_(cfg.get_bool("shaw_keys")), values_(cfg.get_bool("shaw_values")),
        per_head_(cfg.get_bool("shaw_per_head")), two_levels_(cfg.position_channels == 2),
        heads_(s.heads), dh_(s.head_dim()) {
    PELAB_CHECK(cfg.position_channels == 1 || cfg.position_channels == 2, "shaw: ",
                cfg.position_channels, " position ID levels (1 or 2 supported)");
    PELAB_CHECK(k_ >= 0, "pe.shaw_k: clip distance must be >= 0, got ", k_);
    PELAB_CHECK(s.layers >= 1, "shaw: stack needs at least one layer, got ", s.layers);
    const int64_t R = 2 * k_ + 1;
    const Shape shape = per_head_ ? Shape{heads_, R, dh_} : Shape{R, dh_};
    auto make_table = [&] {
      Tensor t = Tensor::empty(shape, s.dtype);
      init::normal_(t, 0.0, 0.02, gen);
      return t;
    };
    LayerParams layers(s.layers);
    register_module("layers", layers.list());
    for (int64_t i = 0; i < s.layers; ++i) {
      rel_k_.push_back(keys_ ? layers.add(i, "rel_k", make_table()) : Tensor());
      rel_v_.push_back(values_ ? layers.add(i, "rel_v", make_table()) : Tensor());
      if (!two_levels_) continue;
      rel_k2_.push_back(keys_ ? layers.add(i, "rel_k2", make_table()) : Tensor());
      rel_v2_.push_back(values_ ? layers.add(i, "rel_v2", make_table()) : Tensor());
    }
  }
  std::string name() const override { return "shaw"; }

  Tensor score_term(const Tensor& q, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross || !keys_) return Tensor();
    if (per_row(site))  // each row with its own IDs (docs/model.md, "Position IDs")
      return by_row(q, site, [this](const Tensor& qb, const AttnSite& sb) { return score_term(qb, sb); });
    check_site(site);
    PELAB_CHECK(q.defined() && q.dim() == 4 && q.size(1) == heads_ &&
                    q.size(2) == site.q_pos.len && q.size(3) == dh_,
                "shaw score_term: expected q [B, ", heads_, ", ", site.q_pos.len, ", ", dh_,
                "], got ", q.defined() ? shape_str(q.shape()) : std::string("undefined"));
    // (q/√dh) @ rel_kᵀ -> [B,H,Lq,2k+1], looked up by the index (O(L·(2k+1)), not O(L²·dh))
    const double scale = 1.0 / std::sqrt(double(dh_));
    const RelativeTables t = level_tables(site, 1);
    Tensor e = relative_keys(q, t.index, t.keys, scale);
    if (!two_levels_) return e;
    const RelativeTables t2 = level_tables(site, 2);
    return add(e, relative_keys(q, t2.index, t2.keys, scale));
  }

  bool has_value_term(const AttnSite& site) const override {
    return site.kind != AttnKind::Cross && values_;
  }

  Tensor value_term(const Tensor& probs, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross || !values_) return Tensor();
    if (per_row(site))  // each row with its own IDs
      return by_row(probs, site, [this](const Tensor& pb, const AttnSite& sb) { return value_term(pb, sb); });
    check_site(site);
    PELAB_CHECK(probs.defined() && probs.dim() == 4 && probs.size(1) == heads_ &&
                    probs.size(2) == site.q_pos.len &&
                    probs.size(3) == site.k_pos.len,
                "shaw value_term: expected probs [B, ", heads_, ", ", site.q_pos.len, ", ",
                site.k_pos.len, "], got ",
                probs.defined() ? shape_str(probs.shape()) : std::string("undefined"));
    const RelativeTables t = level_tables(site, 1);
    Tensor z = relative_values(probs, t.index, t.values);  // [B,H,Lq,dh]
    if (!two_levels_) return z;
    const RelativeTables t2 = level_tables(site, 2);
    return add(z, relative_values(probs, t2.index, t2.values));
  }

  // Both terms in table form (the tables switched off are undefined), which attention adds inside
  // its fused op. None at a site with per-row position IDs (one [Lq, Lk] index cannot hold them):
  // attention then calls the hooks, which work row by row.
  RelativeTables relative_tables(const AttnSite& site) override {
    if (site.kind == AttnKind::Cross || (!keys_ && !values_) || per_row(site) || two_levels_)
      return {};
    return level_tables(site, 1);
  }

 private:
  // The tables of ID level 1 (ids) or 2 (ids2) at a shared site.
  RelativeTables level_tables(const AttnSite& site, int level) {
    const size_t l = check_site(site);
    PELAB_CHECK(site.q_pos.levels() == (two_levels_ ? 2 : 1) &&
                    site.k_pos.levels() == (two_levels_ ? 2 : 1),
                "shaw: built for ", two_levels_ ? 2 : 1, " position ID level(s) "
                "(pe.position_channels), given ", site.q_pos.levels());
    const std::vector<Tensor>& K = level == 1 ? rel_k_ : rel_k2_;
    const std::vector<Tensor>& V = level == 1 ? rel_v_ : rel_v2_;
    const Tensor& any = keys_ ? K[l] : V[l];
    const Entry& e = level == 1 ? index(site.q_pos.ids, site.k_pos.ids, any.device())
                                : index(site.q_pos.ids2, site.k_pos.ids2, any.device());
    return {e.idx, rows(K[l], e), rows(V[l], e)};
  }

  struct Entry {
    std::vector<int64_t> q, k;
    Device device;
    Tensor idx;         // r(i, j) − lo
    int64_t lo, hi;     // the table rows the site reaches
  };

  // Rows [e.lo, e.hi] of a table (its row axis is the last but one); the table itself when that is
  // every row.
  Tensor rows(const Tensor& table, const Entry& e) const {
    if (!table.defined() || (e.lo == 0 && e.hi == 2 * k_)) return table;
    const int64_t axis = table.dim() - 2;
    Tensor t = slice(table, axis, e.lo, e.hi + 1);
    return axis == 0 ? t : t.contiguous();
  }

  size_t check_site(const AttnSite& site) const {
    return layer_index("shaw", site, rel_k_.size());
  }

  // idx[i, j] = clip(k_pos[j] − q_pos[i], −k, k) + k − lo, Int64 [Lq, Lk] on `dev` (cached).
  const Entry& index(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp, Device dev) {
    for (const Entry& e : cache_)
      if (e.device == dev && e.q == qp && e.k == kp) return e;
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    auto clip = [&](int64_t d) { return (d < -k_ ? -k_ : (d > k_ ? k_ : d)) + k_; };
    int64_t lo = 0, hi = 2 * k_;
    if (Lq > 0 && Lk > 0) {
      const auto [qmin, qmax] = std::minmax_element(qp.begin(), qp.end());
      const auto [kmin, kmax] = std::minmax_element(kp.begin(), kp.end());
      lo = clip(*kmin - *qmax), hi = clip(*kmax - *qmin);
    }
    std::vector<int64_t> v(static_cast<size_t>(Lq * Lk));
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) v[i * Lk + j] = clip(kp[j] - qp[i]) - lo;
    if (cache_.size() >= kPositionCacheEntries) cache_.pop_front();
    cache_.push_back({qp, kp, dev, Tensor::from_ints(v, {Lq, Lk}, dev), lo, hi});
    return cache_.back();
  }

  int64_t k_;
  bool keys_, values_, per_head_, two_levels_;
  int64_t heads_, dh_;
  std::vector<Tensor> rel_k_, rel_v_;  // per layer (undefined when switched off)
  std::vector<Tensor> rel_k2_, rel_v2_;  // the second ID level's (two_levels_ only)
  std::deque<Entry> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("shaw", [](const PEConfig& c, const StackInfo& s, Generator& g) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<ShawPE>(c, s, g));
    })
        .key("shaw_k", 16, "[1, inf)", "shaw: relative distances are clipped to [-k, k]")
        .key("shaw_keys", true, "", "shaw: add relative embeddings to the keys")
        .key("shaw_values", true, "", "shaw: add relative embeddings to the values")
        .key("shaw_per_head", false, "", "shaw: one relative table per head (else shared by all heads)")
        .rule("pe.scheme shaw needs pe.shaw_keys or pe.shaw_values",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                if (c.scheme != "shaw" || c.get_bool("shaw_keys") || c.get_bool("shaw_values")) return {};
                return {"pe.scheme shaw needs pe.shaw_keys or pe.shaw_values to be true",
                        {"pe.scheme", "pe.shaw_keys", "pe.shaw_values"}};
              })
        .parameters([](const PEConfig& c, const StackInfo& s) {
          const int64_t tables = (c.get_bool("shaw_keys") ? 1 : 0) + (c.get_bool("shaw_values") ? 1 : 0);
          return c.position_channels * tables * (2 * c.get_int("shaw_k") + 1) * s.head_dim() *
                 (c.get_bool("shaw_per_head") ? s.heads : 1) * s.layers;
        })
        .attention_memory([](const PEConfig&, const AttentionSizes& s) {
          if (s.kind == AttnKind::Cross) return 0.0;
          // the cached Int64 [Lq, Lk] relative indexes and the host vector of the newest; the
          // tables' terms are formed inside the fused attention (O(Lq·R) per head)
          return (kPositionCacheEntries + 1) * 8.0 * s.pairs();
        })
        .size_key("shaw_k")
        .position_channels(2));

}  // namespace pelab::models
