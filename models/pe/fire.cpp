// pelab — FIRE, functional interpolation for relative positions (Li et al. 2023), hook 3
// (score_term), self-attention only. A learned function of the log-transformed distance normalised
// by the query position, added unscaled to the scores:
//   bias[h, i, j] = f_θ( ψ(d_ij) / (ψ(max(L, p_i)) + ε) )_h,   ψ(x) = log(|c|·x + 1),  ε = 1e-6
// with f_θ: R -> R^H a two-layer MLP, x -> W2 · relu(W1 x + b1) + b2 (hidden width
// pe.fire_mlp_width), c a learnable scalar (initial pe.fire_c_init) and L the threshold that keeps
// the normalisation from blowing up the distances of short sequences (the paper's "adaptive
// threshold"): L = |λ|·pe.fire_threshold with λ learnable, initial 1 (fixed at 1 without
// pe.fire_learn_threshold). ε and the absolute values as in the paper's reference code.
//   causal sites (decoder self-attention): d_ij = p_i − p_j for keys at or before the query; later
//     keys (blocked by the causal mask) get bias 0.
//   non-causal sites (encoder self-attention): d_ij = |p_i − p_j| (the paper defines FIRE for causal
//     attention; this is its symmetric form), still normalised by the query position p_i.
//   cross-attention: no term.
// One FIRE per layer (the paper's default; it also studies sharing one across layers). Parameters
// [layers, ...]: "w1" [layers, W] (W1 is [W, 1]), "b1" [layers, W], "w2" [layers, H, W], "b2"
// [layers, H], "c" [layers], "threshold_scale" [layers] (λ, only with pe.fire_learn_threshold).
// Init: W1, b1 ~ U(−1, 1) and W2, b2 ~ U(−1/√W, 1/√W) (PyTorch's nn.Linear default, which the
// reference code uses). Positions are the site's absolute positions; the distance, query-position
// and mask tables are built on the host per site and cached. Where every row shares the normaliser
// (the usual case: L above every position) the MLP runs on the distinct distances only and the
// [H, Lq, Lk] bias is gathered from its output; otherwise on every (i, j). With a learned
// threshold, which case holds depends on L: a training step computes both and selects on the
// device (it reads nothing back), an evaluation reads L on the host and computes one.
#include <algorithm>
#include <cmath>

#include "models/pe/pe.h"
#include "models/pe/site_tables.h"
#include "pelab/host_reads.h"

namespace pelab::models {
namespace {

constexpr double kFireEps = 1e-6;

Tensor abs_of(const Tensor& x) { return maximum(x, neg(x)); }

class FirePE : public PositionalEncoding {
 public:
  FirePE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : width_(cfg.get_int("fire_mlp_width")), heads_(s.heads),
        threshold_(cfg.get_float("fire_threshold")) {
    const double c0 = cfg.get_float("fire_c_init");
    PELAB_CHECK(width_ >= 1, "pe.fire_mlp_width: must be >= 1, got ", width_);
    PELAB_CHECK(c0 > 0 && std::isfinite(c0), "pe.fire_c_init: must be > 0, got ", c0);
    PELAB_CHECK(threshold_ > 0 && std::isfinite(threshold_), "pe.fire_threshold: must be > 0, got ",
                threshold_);
    PELAB_CHECK(s.layers >= 1, "fire: stack needs at least one layer, got ", s.layers);
    const int64_t Ly = s.layers;
    auto uniform = [&](const Shape& shape, double a) {
      Tensor t = Tensor::empty(shape, s.dtype);
      init::uniform_(t, -a, a, gen);
      return t;
    };
    const double a2 = 1.0 / std::sqrt(static_cast<double>(width_));
    w1_ = register_parameter("w1", uniform({Ly, width_}, 1.0));
    b1_ = register_parameter("b1", uniform({Ly, width_}, 1.0));
    w2_ = register_parameter("w2", uniform({Ly, heads_, width_}, a2));
    b2_ = register_parameter("b2", uniform({Ly, heads_}, a2));
    c_ = register_parameter("c", Tensor::full({Ly}, c0, s.dtype));
    if (cfg.get_bool("fire_learn_threshold"))
      lambda_ = register_parameter("threshold_scale", Tensor::full({Ly}, 1.0, s.dtype));
  }
  std::string name() const override { return "fire"; }

  Tensor score_term(const Tensor& q, const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return Tensor();
    if (per_row(site))  // each row with its own IDs (docs/model.md, "Position IDs")
      return by_row(q, site, [this](const Tensor& qb, const AttnSite& sb) { return score_term(qb, sb); });
    const int64_t l = site.layer;
    PELAB_CHECK(l >= 0 && l < c_.size(0), "fire: layer ", l, " out of range (stack has ",
                c_.size(0), " layers)");
    const int64_t Lq = site.q_pos.len;
    const int64_t Lk = site.k_pos.len;
    const Tables& t = tables(site.q_pos.ids, site.k_pos.ids, site.causal, q.dtype(), q.device());
    auto row = [&](const Tensor& p, const Shape& shape) {
      return reshape(slice(p, 0, l, l + 1), shape);
    };
    const Tensor c = abs_of(slice(c_, 0, l, l + 1));  // |c| [1]
    auto psi = [&](const Tensor& x) { return log(add_scalar(mul(c, x), 1.0)); };
    // The normaliser max(L, p_i): with a learnable threshold the max is taken on tensors (its
    // gradient goes to L where L is the larger, ties included), else on the host. It is one value
    // for every row when L >= every p_i or all p_i are equal (always so for one query): then x,
    // and so f_θ(x), depends on the distance alone and the MLP runs once per distinct distance
    // (t.u: L of them for L consecutive positions, against L² pairs), the bias being a gather of
    // its output.
    auto bias_for = [&](const Tensor& norm) {  // [1] when shared by every row, else [Lq, 1]
      const bool shared = norm.dim() == 1;
      const Tensor x = div(psi(shared ? t.u : t.d), add_scalar(psi(norm), kFireEps));  // [U or Lq, 1 or Lk]
      const int64_t n = x.numel();
      const Tensor h = relu(linear(reshape(x, {n, 1}), row(w1_, {width_, 1}), row(b1_, {width_})));
      const Tensor f = transpose(linear(h, row(w2_, {heads_, width_}), row(b2_, {heads_})), 0, 1);  // [H, n]
      return reshape(shared ? index_select(f, 1, t.index) : f.contiguous(), {1, heads_, Lq, Lk});
    };
    Tensor bias;
    if (!lambda_.defined()) {
      bias = bias_for(threshold_ >= t.p_max || t.all_equal ? t.n_shared : t.q_norm);
    } else {
      const Tensor L = mul_scalar(abs_of(slice(lambda_, 0, l, l + 1)), threshold_);  // [1]
      if (t.all_equal) {
        bias = bias_for(maximum(L, t.p_max_t));  // = L, value and gradient, where L >= p_max
      } else if (!is_training() || step_may_read_host(L.device())) {
        // Which form applies depends on the learned L: read on the host (one scalar per site),
        // always in evaluation, in training where a read is free (the CPU; pelab/host_reads.h).
        const double L_host = L.item();  // as computed, so the choice matches the max below
        bias = bias_for(L_host >= t.p_max ? L : maximum(L, t.q_pos));
      } else {
        // A training step on a device reads nothing back: both forms, the one that applies
        // selected there. The other gets exact zeros as its gradient, so the values and the
        // gradients are those of the form that applies alone.
        const Tensor below = reshape(lt(L, t.p_max_t), {1, 1, 1, 1});  // L < max_i p_i
        bias = where(below, bias_for(maximum(L, t.q_pos)), bias_for(L));
      }
    }
    return t.mask.defined() ? mul(bias, t.mask) : bias;
  }

 private:
  struct Tables {
    Tensor d;         // [Lq, Lk] distances
    Tensor u;         // [U, 1] the distinct distances, ascending
    Tensor index;     // Int64 [Lq·Lk]: d[i, j] = u[index[i·Lk + j]]
    Tensor q_pos;     // [Lq, 1] p_i
    Tensor q_norm;    // [Lq, 1] max(L, p_i) (fixed threshold only)
    Tensor n_shared;  // [1] max(L, max_i p_i) (fixed threshold only)
    Tensor p_max_t;   // [1] max_i p_i (learned threshold, all p_i equal)
    double p_max = 0;
    bool all_equal = true;  // every p_i the same
    Tensor mask;      // [Lq, Lk] 1 for p_j <= p_i (causal sites only)
  };

  const Tables& tables(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp, bool causal,
                       DType dt, Device dev) {
    if (const Tables* t = cache_.find(qp, kp, causal, dt, dev)) return *t;
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    const std::vector<double> d = site_distances(qp, kp, causal);
    std::vector<double> m(d.size()), p(static_cast<size_t>(Lq)), n(p.size());
    for (int64_t i = 0; i < Lq; ++i) {
      p[i] = static_cast<double>(qp[i]);
      n[i] = std::max(threshold_, p[i]);
      for (int64_t j = 0; j < Lk; ++j) m[i * Lk + j] = kp[j] <= qp[i] ? 1.0 : 0.0;
    }
    std::vector<double> u = d;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    std::vector<int64_t> index(d.size());
    for (size_t e = 0; e < d.size(); ++e)
      index[e] = std::lower_bound(u.begin(), u.end(), d[e]) - u.begin();
    Tables t;
    t.p_max = p.empty() ? 0.0 : *std::max_element(p.begin(), p.end());
    for (double v : p) t.all_equal = t.all_equal && v == t.p_max;
    t.d = Tensor::from_vector(d, {Lq, Lk}, dt, dev);
    t.u = Tensor::from_vector(u, {static_cast<int64_t>(u.size()), 1}, dt, dev);
    t.index = Tensor::from_ints(index, {Lq * Lk}, dev);
    t.n_shared = Tensor::from_vector({std::max(threshold_, t.p_max)}, {1}, dt, dev);
    t.p_max_t = Tensor::from_vector({t.p_max}, {1}, dt, dev);
    t.q_pos = Tensor::from_vector(p, {Lq, 1}, dt, dev);
    t.q_norm = Tensor::from_vector(n, {Lq, 1}, dt, dev);
    if (causal) t.mask = Tensor::from_vector(m, {Lq, Lk}, dt, dev);
    return cache_.put(qp, kp, causal, dt, dev, std::move(t));
  }

  int64_t width_, heads_;
  double threshold_;
  Tensor w1_, b1_, w2_, b2_, c_, lambda_;  // lambda_ undefined with a fixed threshold
  PositionCache<Tables> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("fire", [](const PEConfig& c, const StackInfo& s, Generator& g) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<FirePE>(c, s, g));
    })
        .key("fire_mlp_width", 32, "[1, inf)", "fire: hidden width of the MLP f_theta (per layer)")
        .key("fire_c_init", 0.1, "(0, inf)", "fire: initial c of the log transform psi(x) = log(abs(c) x + 1)")
        .key("fire_threshold", 512.0, "(0, inf)",
             "fire: threshold L of the query-position normaliser psi(max(L, i)) (initial value when learned)")
        .key("fire_learn_threshold", true, "",
             "fire: learn L = abs(lambda) * pe.fire_threshold, lambda initial 1 (false: L fixed)")
        .parameters([](const PEConfig& c, const StackInfo& s) {
          const int64_t W = c.get_int("fire_mlp_width");
          return s.layers * (2 * W + s.heads * W + s.heads + 1 + (c.get_bool("fire_learn_threshold") ? 1 : 0));
        })
        .attention_memory([](const PEConfig& c, const AttentionSizes& s) {
          if (s.kind == AttnKind::Cross) return 0.0;
          const double P = s.pairs(), h = static_cast<double>(s.heads), b = static_cast<double>(s.batch);
          const double dt = static_cast<double>(s.dtype_bytes), w = static_cast<double>(c.get_int("fire_mlp_width"));
          const double layers = s.training ? static_cast<double>(s.layers) : 1.0;
          // cached tables (distances, mask: [Lq, Lk]; the Int64 gather index) and the host vectors
          // of the newest
          const double tables = kPositionCacheEntries * (2 * dt + 8) * P + 32.0 * P;
          // The MLP runs on every (i, j), its [Lq·Lk, W] hidden values kept for the backward, when
          // a position passes the threshold (the initial one when it is learned); else on the
          // distinct distances only, the bias a [1, H, Lq, Lk] gather. Then the masked bias, and in
          // training the engine's [B, H, Lq, Lk] gradient of it.
          const bool every_pair = static_cast<double>(s.largest_position) > c.get_float("fire_threshold");
          const double per_layer = ((every_pair ? 3.5 * w + 3 * h : 0.0) + 2 * h) * P * dt;
          return tables + layers * per_layer + (s.training ? 3 * b * h * P * dt : 0.0);
        }));

}  // namespace pelab::models
