// pelab — xPos, extrapolatable position embedding (Sun et al. 2022, "A Length-Extrapolatable
// Transformer"), hook 2 (transform_qk), self-attention only, no parameters. RoPE with a
// per-dimension exponential decay folded into the rotation: with head dim d, pairs i = 0..d/2−1
// (interleaved, (2i, 2i+1), as the paper's complex form), θ_i = pe.xpos_base^(−2i/d) and
//   ζ_i = (2i/d + γ) / (1 + γ),   γ = pe.xpos_gamma,   B = pe.xpos_scale_base,
// the query at position n becomes ζ_i^(n/B) · R(n·θ_i) q and the key at position m becomes
// ζ_i^(−m/B) · R(m·θ_i) k, so each pair contributes ζ_i^((n−m)/B) · (q_i · R((m−n)·θ_i) k_i) to q·k:
// it depends on the positions only through n − m, and the ζ_i < 1 factor damps distant keys
// (the most for the fast-rotating pairs). With every ζ_i^(±n/B) = 1 this is exactly RoPE.
// The rotation is rope_math.h's (base frequencies, cos/sin tables) and the engine's rotate_pairs:
// the scale multiplies the cos/sin tables, like RoPE's YaRN mscale. Positions are the site's
// absolute ones (a key keeps its scale in the KV cache, as in cached decoding with the paper's
// code); the paper's code centres the positions before scaling, which leaves q·k unchanged.
// The paper defines xPos for causal language models; non-causal sites (encoder self-attention) get
// the same transform, so there a key after the query is weighted up by ζ_i^(−(m−n)/B).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "models/pe/pe.h"
#include "models/pe/site_tables.h"
#include "models/pe/rope_math.h"

namespace pelab::models {
namespace {

class XposPE : public PositionalEncoding {
 public:
  XposPE(const PEConfig& cfg, const StackInfo& s)
      : dh_(s.head_dim()), base_(cfg.get_float("xpos_base")),
        scale_base_(cfg.get_float("xpos_scale_base")), gamma_(cfg.get_float("xpos_gamma")) {
    PELAB_CHECK(dh_ >= 2 && dh_ % 2 == 0, "xpos: needs an even head dim >= 2 (model.d_model / "
                "model.heads), got ", dh_);
    PELAB_CHECK(base_ > 1.0, "pe.xpos_base: must be > 1, got ", base_);
    PELAB_CHECK(scale_base_ > 0.0, "pe.xpos_scale_base: must be > 0, got ", scale_base_);
    PELAB_CHECK(gamma_ > 0.0, "pe.xpos_gamma: must be > 0, got ", gamma_);
    inv_freq_ = rope_base_inv_freq(base_, dh_);
    for (size_t i = 0; i < inv_freq_.size(); ++i)
      log_zeta_.push_back(std::log((2.0 * static_cast<double>(i) / static_cast<double>(dh_) + gamma_) /
                                   (1.0 + gamma_)));
  }
  std::string name() const override { return "xpos"; }

  void transform_qk(Tensor& q, Tensor& k, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return;
    if (per_row(site)) {  // each row with its own IDs (docs/model.md, "Position IDs")
      check_site_rows(site, q.size(0));
      std::vector<Tensor> qs, ks;
      for (int64_t b = 0; b < q.size(0); ++b) {
        qs.push_back(apply(slice(q, 0, b, b + 1), site.q_pos.row(b), +1, "q"));
        ks.push_back(apply(slice(k, 0, b, b + 1), site.k_pos.row(b), -1, "k"));
      }
      q = concat(qs, 0);
      k = concat(ks, 0);
      return;
    }
    q = apply(q, site.q_pos.ids, +1, "q");
    k = apply(k, site.k_pos.ids, -1, "k");
  }

 private:
  struct Tables {
    Tensor cos, sin;  // [L, d/2], the scale ζ_i^(sign·pos/B) applied
  };

  // x [B, H, L, d] at positions pos, scaled by ζ^(sign·pos/B) and rotated.
  Tensor apply(const Tensor& x, const std::vector<int64_t>& pos, int sign, const char* what) {
    const int64_t L = static_cast<int64_t>(pos.size());
    PELAB_CHECK(x.defined() && x.dim() == 4 && x.size(2) == L && x.size(3) == dh_, "xpos: expected ",
                what, " [B, H, ", L, ", ", dh_, "], got ",
                x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    const Tables* t = cache_.find(pos, {}, sign, x.dtype(), x.device());
    if (!t) {
      std::vector<double> c, s;
      rope_cos_sin(pos, inv_freq_, [&](size_t m, size_t i) {
        return std::exp(log_zeta_[i] * sign * static_cast<double>(pos[m]) / scale_base_);
      }, c, s);
      const Shape shape = {L, dh_ / 2};
      t = &cache_.put(pos, {}, sign, x.dtype(), x.device(),
                      Tables{Tensor::from_vector(c, shape, x.dtype(), x.device()),
                             Tensor::from_vector(s, shape, x.dtype(), x.device())});
    }
    return rotate_pairs(x, t->cos, t->sin, /*interleaved=*/true);
  }

  int64_t dh_;
  double base_, scale_base_, gamma_;
  std::vector<double> inv_freq_, log_zeta_;
  PositionCache<Tables> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("xpos", [](const PEConfig& c, const StackInfo& s, Generator&) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<XposPE>(c, s));
    })
        .key("xpos_base", 10000.0, "(1, inf)", "xpos: rotation frequency base theta (as pe.rope_base)")
        .key("xpos_scale_base", 512.0, "(0, inf)",
             "xpos: scale base B: q at position n is scaled by zeta^(n/B), k at m by zeta^(-m/B)")
        .key("xpos_gamma", 0.4, "(0, inf)", "xpos: gamma of the per-pair decay zeta_i = (2i/d + gamma) / (1 + gamma)")
        .rule("pe.scheme xpos needs an even head dim >= 2 (model.d_model / model.heads)",
              [](const PEConfig& c, const PEModelDims& m) -> PEViolation {
                if (c.scheme != "xpos" || m.heads <= 0) return {};
                const int64_t hd = m.d_model / m.heads;
                if (hd >= 2 && hd % 2 == 0) return {};
                std::ostringstream s;
                s << "pe.scheme xpos needs an even head dim >= 2, but model.d_model / model.heads = "
                  << m.d_model << " / " << m.heads << " = " << hd;
                return {s.str(), {"pe.scheme", "model.d_model", "model.heads"}};
              }));

}  // namespace pelab::models
