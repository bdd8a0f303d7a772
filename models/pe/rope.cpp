// pelab — rotary position embedding, RoPE (Su et al. 2021), hook 2 (transform_qk), self-attention
// only. The first rot = round(rope_fraction · dh) dims of every q and k vector are rotated pairwise by
// angle pos · θ_i; the rest pass through:
//     x'_a = x_a cos − x_b sin,  x'_b = x_b cos + x_a sin   for each pair (a, b)
//   pairing "half"        (GPT-NeoX / HF): pairs (i, i + rot/2), i.e. x' = x·cos + rotate_half(x)·sin
//   pairing "interleaved" (RoFormer, the seeds' complex form): pairs (2i, 2i + 1)
// computed in one pass by the engine's rotate_pairs op (backward: the inverse rotation). Then q'·k'
// depends on the positions only through k_pos − q_pos. cos/sin tables [L, rot/2] are built on the
// host (double precision) from the site's positions, which may be offset or arbitrary, and cached.
// Eval-time context extension (pi | ntk | dynamic_ntk | yarn) comes from rope_math.h and is applied
// only when the module is not training. dynamic_ntk takes each batch row's own length
// (AttnSite::row_len: 1 + its last real position, cached tokens included), so a sequence's result
// does not depend on eval.batch_size or its batch mates. With a KV cache, the keys cached at earlier
// steps keep the rotation of the base of their step (as in HF transformers); recomputing without
// the cache rotates every key with the current base, so cached and uncached decoding differ once a
// sequence grows past rope_train_length. No parameters.
#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>

#include "models/pe/pe.h"
#include "models/pe/rope_math.h"

namespace pelab::models {
namespace {

class RopePE : public PositionalEncoding {
 public:
  RopePE(const PEConfig& cfg, const StackInfo& s) : cfg_(RopeParams::from(cfg)), dh_(s.head_dim()) {
    rot_ = rope_rotary_dims(cfg_.fraction, dh_);
    rope_validate(cfg_, rot_);
    interleaved_ = cfg_.pairing == "interleaved";
  }
  std::string name() const override { return "rope"; }

  bool needs_row_lengths() const override {
    return cfg_.scaling == "dynamic_ntk" && !is_training();
  }

  void transform_qk(Tensor& q, Tensor& k, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return;
    if (per_row(site)) return transform_rows(q, k, site);
    int64_t max_pos = -1;
    for (int64_t p : site.q_pos.ids) max_pos = std::max(max_pos, p);
    for (int64_t p : site.k_pos.ids) max_pos = std::max(max_pos, p);
    if (!needs_row_lengths() || !site.row_len) {
      const RopeFreqs f = rope_frequencies(cfg_, rot_, max_pos + 1, !is_training());
      q = apply(q, site.q_pos.ids, f, "q");
      k = apply(k, site.k_pos.ids, f, "k");
      return;
    }
    // Dynamic NTK: each row's base comes from its own length (padding and batch mates play no
    // part). Lengths up to rope_train_length all give plain RoPE, so they count as that length;
    // runs of rows with the same effective length share one rotation.
    const std::vector<int64_t>& rl = *site.row_len;
    const int64_t B = q.size(0);
    PELAB_CHECK(static_cast<int64_t>(rl.size()) == B && k.size(0) == B, "rope: ", rl.size(),
                " row lengths for q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
    auto eff = [&](int64_t b) { return std::max<int64_t>(rl[b], cfg_.train_length); };
    std::vector<Tensor> qs, ks;
    for (int64_t b0 = 0; b0 < B;) {
      int64_t b1 = b0 + 1;
      while (b1 < B && eff(b1) == eff(b0)) ++b1;
      const RopeFreqs f = rope_frequencies(cfg_, rot_, eff(b0), true);
      const bool whole = b0 == 0 && b1 == B;
      qs.push_back(apply(whole ? q : slice(q, 0, b0, b1), site.q_pos.ids, f, "q"));
      ks.push_back(apply(whole ? k : slice(k, 0, b0, b1), site.k_pos.ids, f, "k"));
      b0 = b1;
    }
    q = qs.size() == 1 ? qs[0] : concat(qs, 0);
    k = ks.size() == 1 ? ks[0] : concat(ks, 0);
  }

 private:
  // Per-row position IDs (docs/model.md, "Position IDs"): each batch row rotated by its own IDs,
  // with the frequencies its own length gives (dynamic NTK: AttnSite::row_len; else 1 + its
  // largest ID), exactly as that row alone with its IDs shared.
  void transform_rows(Tensor& q, Tensor& k, const AttnSite& site) {
    const int64_t B = q.size(0);
    check_site_rows(site, B);
    PELAB_CHECK(k.size(0) == B, "rope: q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
    const bool dynamic = needs_row_lengths() && site.row_len;
    if (dynamic)
      PELAB_CHECK(static_cast<int64_t>(site.row_len->size()) == B, "rope: ", site.row_len->size(),
                  " row lengths for q ", shape_str(q.shape()));
    std::vector<Tensor> qs, ks;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int64_t> qp = site.q_pos.row(b), kp = site.k_pos.row(b);
      int64_t length = 0;
      if (dynamic) {
        length = std::max<int64_t>((*site.row_len)[b], cfg_.train_length);
      } else {
        for (int64_t p : qp) length = std::max(length, p + 1);
        for (int64_t p : kp) length = std::max(length, p + 1);
      }
      const RopeFreqs f = rope_frequencies(cfg_, rot_, length, !is_training());
      qs.push_back(apply(slice(q, 0, b, b + 1), qp, f, "q"));
      ks.push_back(apply(slice(k, 0, b, b + 1), kp, f, "k"));
    }
    q = concat(qs, 0);
    k = concat(ks, 0);
  }

  struct Tables {
    std::vector<int64_t> pos;
    std::vector<double> inv_freq;
    double mscale;
    DType dtype;
    Device device;
    Tensor cos, sin;  // [L, rot/2], per pair, mscale applied
  };

  const Tables& tables(const std::vector<int64_t>& pos, const RopeFreqs& f, DType dt, Device dev) {
    for (const Tables& t : cache_)
      if (t.dtype == dt && t.device == dev && t.mscale == f.mscale && t.pos == pos &&
          t.inv_freq == f.inv_freq)
        return t;
    const int64_t L = static_cast<int64_t>(pos.size()), half = rot_ / 2;
    std::vector<double> c, s;
    rope_cos_sin(pos, f.inv_freq, [&](size_t, size_t) { return f.mscale; }, c, s);
    if (cache_.size() >= 4) cache_.pop_front();
    cache_.push_back({pos, f.inv_freq, f.mscale, dt, dev, Tensor::from_vector(c, {L, half}, dt, dev),
                      Tensor::from_vector(s, {L, half}, dt, dev)});
    return cache_.back();
  }

  // One fused pass (rotate_pairs): pair i is dims (i, i + rot/2), or (2i, 2i + 1) interleaved;
  // dims >= rot pass through (partial rotation).
  Tensor apply(const Tensor& x, const std::vector<int64_t>& pos, const RopeFreqs& f,
               const char* what) {
    const int64_t L = static_cast<int64_t>(pos.size());
    PELAB_CHECK(x.defined() && x.dim() == 4 && x.size(2) == L && x.size(3) == dh_, "rope: expected ",
                what, " [B, H, ", L, ", ", dh_, "], got ",
                x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    const Tables& t = tables(pos, f, x.dtype(), x.device());
    return rotate_pairs(x, t.cos, t.sin, interleaved_);
  }

  RopeParams cfg_;
  int64_t dh_, rot_;
  bool interleaved_;
  std::deque<Tables> cache_;
};

// The rotary dims of `dims` for rule messages: "" when fine.
PEViolation rope_dims_rule(const PEConfig& c, const PEModelDims& m) {
  if (c.scheme != "rope" || m.heads <= 0) return {};
  const int64_t hd = m.d_model / m.heads;
  const double fraction = c.get_float("rope_fraction");
  const long r = std::lround(static_cast<double>(hd) * fraction);
  const std::vector<std::string> keys = {"pe.scheme", "model.d_model", "model.heads", "pe.rope_fraction"};
  const std::string dims = "model.d_model / model.heads = " + std::to_string(m.d_model) + " / " +
                           std::to_string(m.heads) + " = " + std::to_string(hd);
  std::ostringstream f;
  f << fraction;
  if (fraction == 1.0 && (hd < 2 || hd % 2 != 0))
    return {"pe.scheme rope needs an even head dim >= 2, but " + dims, keys};
  if (r < 2 || r % 2 != 0)
    return {"pe.scheme rope needs an even number (>= 2) of rotary dims, but round(head dim (" + dims +
                ") times pe.rope_fraction " + f.str() + ") = " + std::to_string(r),
            keys};
  const std::string& s = c.get_str("rope_scaling");
  if ((s == "ntk" || s == "dynamic_ntk") && r <= 2)
    return {"pe.rope_scaling " + s + " needs more than 2 rotary dims, but " + dims +
                " and pe.rope_fraction " + f.str() + " give 2",
            {"pe.rope_scaling", "model.d_model", "model.heads", "pe.rope_fraction"}};
  return {};
}

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("rope", [](const PEConfig& c, const StackInfo& s, Generator&) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<RopePE>(c, s));
    })
        .key("rope_base", 10000.0, "(1, inf)", "rope: frequency base theta")
        .key("rope_pairing", "half", "interleaved|half",
             "rope: rotate dims (2i, 2i+1) (interleaved, RoFormer) or (i, i+d/2) (half, GPT-NeoX/LLaMA)")
        .key("rope_fraction", 1.0, "(0, 1]",
             "rope: fraction of each head's dims that are rotated (the count must be even)")
        .key("rope_scaling", "none", "none|pi|ntk|dynamic_ntk|yarn",
             "rope: context extension: position interpolation, NTK-aware base, dynamic NTK or YaRN")
        .eval_time()
        .key("rope_scaling_factor", 1.0, "[1, inf)",
             "rope: extension factor (target length / original length) for pe.rope_scaling")
        .eval_time()
        .key("rope_train_length", 0, "[0, inf)",
             "rope: original context length for dynamic_ntk and yarn; 0 = the task's training length")
        .eval_time()
        .key("yarn_beta_fast", 32.0, "(0, inf)",
             "yarn: dims with more rotations than this over the original length are not interpolated")
        .eval_time()
        .key("yarn_beta_slow", 1.0, "(0, inf)", "yarn: dims with fewer rotations than this are fully interpolated")
        .eval_time()
        .variants("rope_scaling", "rope_scaling_factor")
        .rule("pe.scheme rope: the rotary dims, round(head dim × pe.rope_fraction) with head dim = "
              "model.d_model / model.heads, must be even and >= 2 (> 2 for ntk and dynamic_ntk scaling)",
              rope_dims_rule)
        .rule("pe.rope_scaling other than none needs pe.scheme rope; pe.rope_scaling_factor other "
              "than 1 needs a pe.rope_scaling",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                const std::string& s = c.get_str("rope_scaling");
                const double f = c.get_float("rope_scaling_factor");
                if (s != "none" && c.scheme != "rope")
                  return {"pe.rope_scaling " + s + " needs pe.scheme rope (got " + c.scheme + ")",
                          {"pe.rope_scaling", "pe.scheme"}};
                std::ostringstream fs;
                fs << f;
                if (s == "none" && f != 1.0)
                  return {"pe.rope_scaling_factor is " + fs.str() +
                              " but pe.rope_scaling is none; choose pi, ntk, dynamic_ntk or yarn",
                          {"pe.rope_scaling_factor", "pe.rope_scaling"}};
                return {};
              })
        .rule("pe.rope_scaling yarn needs pe.yarn_beta_fast > pe.yarn_beta_slow",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                const double fast = c.get_float("yarn_beta_fast"), slow = c.get_float("yarn_beta_slow");
                if (c.get_str("rope_scaling") != "yarn" || fast > slow) return {};
                std::ostringstream m;
                m << "pe.yarn_beta_fast (" << fast << ") must be > pe.yarn_beta_slow (" << slow << ")";
                return {m.str(), {"pe.yarn_beta_fast", "pe.yarn_beta_slow"}};
              }));

}  // namespace pelab::models
