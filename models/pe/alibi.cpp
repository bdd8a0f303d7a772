// pelab — ALiBi, attention with linear biases (Press et al. 2022), hook 3 (score_term), self-attention
// only. No parameters. Head h gets a fixed slope m_h and the bias is added unscaled to the scores:
//   causal sites (decoder self-attention):  bias[h, i, j] = −m_h · (q_pos[i] − k_pos[j]) for keys at or
//     before the query; keys after the query (masked by the attention anyway) get 0.
//   non-causal sites (encoder self-attention): with pe.alibi_symmetric the symmetric form
//     −m_h · |q_pos[i] − k_pos[j]|; without it no term at all (the paper defines ALiBi for causal
//     language models only; such an encoder is position-free, like NoPE).
// Slopes (the official construction, `get_slopes` in ofirpress/attention_with_linear_biases):
//   H a power of two: m_h = 2^(−8h/H), h = 1..H (H = 8: 1/2, 1/4, ..., 1/256);
//   otherwise, with n the largest power of two below H: the n slopes for n, then every other slope of
//   the 2n construction (its 1st, 3rd, ...) until H slopes (H = 6: 1/4, 1/16, 1/64, 1/256, 1/2, 1/8).
// Positions are the site's absolute positions (cache offsets, randomized subsets); the bias [1, H, Lq,
// Lk] is built on the host (site_tables.h's distances) and cached per (positions, form, dtype,
// device).
#include <cmath>

#include "models/pe/pe.h"
#include "models/pe/site_tables.h"

namespace pelab::models {
namespace {

std::vector<double> power_of_two_slopes(int64_t n) {
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t h = 1; h <= n; ++h)
    s[h - 1] = std::pow(2.0, -8.0 * static_cast<double>(h) / static_cast<double>(n));
  return s;
}

std::vector<double> alibi_slopes(int64_t heads) {
  PELAB_CHECK(heads >= 1, "alibi: need at least one head, got ", heads);
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<double> s = power_of_two_slopes(n);
  if (n == heads) return s;
  const std::vector<double> extra = power_of_two_slopes(2 * n);
  for (int64_t i = 0; static_cast<int64_t>(s.size()) < heads; i += 2) s.push_back(extra[i]);
  return s;
}

class AlibiPE : public PositionalEncoding {
 public:
  AlibiPE(const PEConfig& cfg, const StackInfo& s)
      : symmetric_(cfg.get_bool("alibi_symmetric")), slopes_(alibi_slopes(s.heads)) {}
  std::string name() const override { return "alibi"; }

  Tensor score_term(const Tensor& q, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return Tensor();
    if (!site.causal && !symmetric_) return Tensor();
    if (per_row(site))  // each row with its own IDs (docs/model.md, "Position IDs")
      return by_row(q, site, [this](const Tensor& qb, const AttnSite& sb) { return score_term(qb, sb); });
    PELAB_CHECK(q.defined() && q.dim() == 4 && q.size(1) == static_cast<int64_t>(slopes_.size()) &&
                    q.size(2) == site.q_pos.len,
                "alibi: expected q [B, ", slopes_.size(), ", ", site.q_pos.len, ", dh], got ",
                q.defined() ? shape_str(q.shape()) : std::string("undefined"));
    const std::vector<int64_t>& qp = site.q_pos.ids;
    const std::vector<int64_t>& kp = site.k_pos.ids;
    if (const Tensor* bias = cache_.find(qp, kp, site.causal, q.dtype(), q.device())) return *bias;
    const int64_t H = static_cast<int64_t>(slopes_.size());
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    const std::vector<double> dist = site_distances(qp, kp, site.causal);
    std::vector<double> v(static_cast<size_t>(H) * dist.size());
    for (int64_t h = 0; h < H; ++h)
      for (size_t e = 0; e < dist.size(); ++e) v[h * dist.size() + e] = -slopes_[h] * dist[e];
    return cache_.put(qp, kp, site.causal, q.dtype(), q.device(),
                      Tensor::from_vector(v, {1, H, Lq, Lk}, q.dtype(), q.device()));
  }

 private:
  bool symmetric_;
  std::vector<double> slopes_;
  PositionCache<Tensor> cache_;
};

}  // namespace

PELAB_REGISTER_PE(PEScheme("alibi", [](const PEConfig& c, const StackInfo& s, Generator&) {
                    return std::shared_ptr<PositionalEncoding>(std::make_shared<AlibiPE>(c, s));
                  })
                      .key("alibi_symmetric", true, "",
                           "alibi: encoder self-attention gets the symmetric bias -m|i-j| (false: no "
                           "bias there; causal attention always uses -m(i-j))")
                      .attention_memory([](const PEConfig& c, const AttentionSizes& s) {
                        if (s.kind == AttnKind::Cross) return 0.0;
                        if (s.kind == AttnKind::EncoderSelf && !c.get_bool("alibi_symmetric")) return 0.0;
                        // the cached [1, H, Lq, Lk] biases, and the host distances and values
                        // behind the newest
                        const double h = static_cast<double>(s.heads), P = s.pairs();
                        return kPositionCacheEntries * h * P * s.dtype_bytes + 8.0 * P * (1 + h);
                      }));

}  // namespace pelab::models
