// pelab — KERPLE, kernelized relative positional embedding (Chi et al. 2022), hook 3 (score_term),
// self-attention only. A conditionally positive definite kernel of the distance, one learnable
// pair (r1, r2) per head and layer, added unscaled to the scores:
//   log   (pe.kerple_variant log, the paper's best):  bias[h, i, j] = −r1_h · log(1 + r2_h · d_ij)
//   power (pe.kerple_variant power):                  bias[h, i, j] = −r1_h · d_ij ^ r2_h,  r2 in (0, 2)
// with d_ij = p_i − p_j for keys at or before the query in causal sites (decoder self-attention;
// later keys, which the causal mask blocks, get d = 0) and d_ij = |p_i − p_j| in non-causal sites
// (encoder self-attention, the paper's symmetric form). Cross-attention: no term.
// Positivity: the paper's code clamps the raw parameters in place before each forward (r >= 0.01,
// power r2 <= 2); here they are smooth reparametrisations of unconstrained parameters instead, so
// the gradient never stops at a clamp: r1 = softplus(r1_raw), log r2 = softplus(r2_raw), power
// r2 = 2·sigmoid(r2_raw) (softplus(x) = log(1 + e^x)). Parameters "r1_raw", "r2_raw" [layers, H].
// Initial values: like the paper's code, which draws each head's pair at random, every head and
// layer starts at r = init·(1 + s·u), u uniform in [−1, 1) from the model's generator, s =
// pe.kerple_init_spread (0 = every head at init, as one shared kernel), so the heads begin at
// different scales (init = pe.kerple_r1_init / pe.kerple_r2_init, the r values, not the raw ones).
// The distance table (and, for power, log d with its d > 0 mask) is built on the host per site and
// cached; the positions are the site's absolute ones (cache offsets, randomized subsets).
#include <cmath>
#include <sstream>

#include "models/pe/pe.h"
#include "models/pe/site_tables.h"

namespace pelab::models {
namespace {

Tensor softplus(const Tensor& x) { return log(add_scalar(exp(x), 1.0)); }

class KerplePE : public PositionalEncoding {
 public:
  KerplePE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : power_(cfg.get_str("kerple_variant") == "power"), heads_(s.heads) {
    const double r1 = cfg.get_float("kerple_r1_init"), r2 = cfg.get_float("kerple_r2_init");
    const double spread = cfg.get_float("kerple_init_spread");
    PELAB_CHECK(r1 > 0 && std::isfinite(r1), "pe.kerple_r1_init: must be > 0, got ", r1);
    PELAB_CHECK(r2 > 0 && std::isfinite(r2) && (!power_ || r2 * (1 + spread) < 2),
                "pe.kerple_r2_init: must be in ",
                power_ ? "(0, 2 / (1 + pe.kerple_init_spread)) with pe.kerple_variant power" : "(0, inf)",
                ", got ", r2);
    PELAB_CHECK(spread >= 0 && spread < 1, "pe.kerple_init_spread: must be in [0, 1), got ", spread);
    PELAB_CHECK(s.layers >= 1, "kerple: stack needs at least one layer, got ", s.layers);
    auto inv_softplus = [](double r) { return r > 30 ? r : std::log(std::expm1(r)); };
    auto raw2 = [&](double r) { return power_ ? std::log(r / (2.0 - r)) : inv_softplus(r); };  // 2·sigmoid⁻¹
    std::vector<double> a, b;
    for (int64_t e = 0; e < s.layers * heads_; ++e) {
      a.push_back(inv_softplus(r1 * (1 + spread * (2 * gen.uniform() - 1))));
      b.push_back(raw2(r2 * (1 + spread * (2 * gen.uniform() - 1))));
    }
    r1_raw_ = register_parameter("r1_raw", Tensor::from_vector(a, {s.layers, heads_}, s.dtype));
    r2_raw_ = register_parameter("r2_raw", Tensor::from_vector(b, {s.layers, heads_}, s.dtype));
  }
  std::string name() const override { return "kerple"; }

  Tensor score_term(const Tensor& q, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return Tensor();
    if (per_row(site))  // each row with its own IDs (docs/model.md, "Position IDs")
      return by_row(q, site, [this](const Tensor& qb, const AttnSite& sb) { return score_term(qb, sb); });
    PELAB_CHECK(site.layer >= 0 && site.layer < r1_raw_.size(0), "kerple: layer ", site.layer,
                " out of range (stack has ", r1_raw_.size(0), " layers)");
    const Tables& t = tables(site.q_pos.ids, site.k_pos.ids, site.causal, q.dtype(), q.device());
    auto per_head = [&](const Tensor& raw) {
      return reshape(slice(raw, 0, site.layer, site.layer + 1), {1, heads_, 1, 1});
    };
    const Tensor r1 = softplus(per_head(r1_raw_));
    if (!power_) return neg(mul(r1, log(add_scalar(mul(softplus(per_head(r2_raw_)), t.d), 1.0))));
    const Tensor r2 = mul_scalar(sigmoid(per_head(r2_raw_)), 2.0);
    return neg(mul(r1, mul(exp(mul(r2, t.log_d)), t.positive)));  // d^r2, 0 where d = 0
  }

 private:
  struct Tables {
    Tensor d;         // [1, 1, Lq, Lk]
    Tensor log_d;     // log max(d, 1) (power only)
    Tensor positive;  // 1 where d > 0 (power only)
  };

  const Tables& tables(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp, bool causal,
                       DType dt, Device dev) {
    if (const Tables* t = cache_.find(qp, kp, causal, dt, dev)) return *t;
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    const std::vector<double> d = site_distances(qp, kp, causal);
    std::vector<double> ld(d.size()), pos(d.size());
    for (size_t e = 0; e < d.size(); ++e) {
      ld[e] = d[e] > 0 ? std::log(d[e]) : 0.0;
      pos[e] = d[e] > 0 ? 1.0 : 0.0;
    }
    const Shape shape = {1, 1, Lq, Lk};
    Tables t{Tensor::from_vector(d, shape, dt, dev), Tensor(), Tensor()};
    if (power_) {
      t.log_d = Tensor::from_vector(ld, shape, dt, dev);
      t.positive = Tensor::from_vector(pos, shape, dt, dev);
    }
    return cache_.put(qp, kp, causal, dt, dev, std::move(t));
  }

  bool power_;
  int64_t heads_;
  Tensor r1_raw_, r2_raw_;
  PositionCache<Tables> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("kerple", [](const PEConfig& c, const StackInfo& s, Generator& gen) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<KerplePE>(c, s, gen));
    })
        .key("kerple_variant", "log", "log|power",
             "kerple: the kernel: log -r1*log(1+r2*d) or power -r1*d^r2 (d the query-key distance)")
        .key("kerple_r1_init", 1.0, "(0, inf)", "kerple: initial r1 (> 0), the centre of the heads' draws")
        .key("kerple_r2_init", 1.0, "(0, inf)",
             "kerple: initial r2, the centre of the heads' draws: > 0 (log), below 2 / (1 + spread) (power)")
        .key("kerple_init_spread", 0.5, "[0, 1)",
             "kerple: each head and layer starts at init*(1 + spread*u), u uniform in [-1, 1); 0 = all equal")
        .rule("pe.kerple_variant power needs pe.kerple_r2_init * (1 + pe.kerple_init_spread) < 2",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                const double r2 = c.get_float("kerple_r2_init"), sp = c.get_float("kerple_init_spread");
                if (c.scheme != "kerple" || c.get_str("kerple_variant") != "power" || r2 * (1 + sp) < 2)
                  return {};
                std::ostringstream m;
                m << "pe.kerple_r2_init (" << r2 << ") times 1 + pe.kerple_init_spread (" << sp
                  << ") must be < 2 with pe.kerple_variant power (the exponent r2 lies in (0, 2))";
                return {m.str(), {"pe.kerple_r2_init", "pe.kerple_init_spread", "pe.kerple_variant"}};
              })
        .parameters([](const PEConfig&, const StackInfo& s) { return 2 * s.heads * s.layers; })
        .attention_memory([](const PEConfig& c, const AttentionSizes& s) {
          if (s.kind == AttnKind::Cross) return 0.0;
          const double P = s.pairs(), h = static_cast<double>(s.heads), b = static_cast<double>(s.batch);
          const double dt = static_cast<double>(s.dtype_bytes);
          // cached distance tables ([1, 1, Lq, Lk]; power: also log d and d > 0) and the host
          // vectors of the newest
          const double tables = kPositionCacheEntries * (c.get_str("kerple_variant") == "power" ? 3 : 1) *
                                    P * dt + 24.0 * P;
          // training: the kernel's [1, H, Lq, Lk] intermediates of every layer kept for the
          // backward and the engine's [B, H, Lq, Lk] gradient of the bias; evaluation: one layer's
          if (!s.training) return tables + 3 * h * P * dt;
          return tables + 4.5 * static_cast<double>(s.layers) * h * P * dt + 3 * b * h * P * dt;
        }));

}  // namespace pelab::models
