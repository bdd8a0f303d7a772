// pelab — CoPE, contextual position encoding (Golovneva et al. 2024), hook 3 in its keyed form
// (keyed_score_term: the term needs the keys). Positions are counts of the keys a query's gates let
// through, so a head can count tokens, words or sentences instead of token indices.
//   gates      g_ij = σ(q_i·k_j / √dh), 0 for a key the attention blocks (padding)
//   causal sites (decoder self-attention), key j at or before query i:
//     p_ij = min(Σ_{t=j..i} g_it, p_max)                      (p_ii = g_ii; the paper's definition)
//   non-causal sites (encoder self-attention; our extension, the paper defines CoPE for causal
//   attention only): the count runs from the query to the key in either direction and its sign
//   says which: s_ij = +Σ_{t=j..i} g_it for key j at or before query i, −Σ_{t=i..j} g_it for a key
//   after it, clipped to [−p_max, p_max].
//   cross-attention: no term (the source and target positions are not one sequence).
//   term_ij = q_i·e[p_ij] / √dh with e linearly interpolated between the integer positions:
//     e[p] = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]
//   computed as the paper says: z_i[n] = q_i·e[n] / √dh for every integer n first ([B, H, Lq, R],
//   one GEMM), then z interpolated at p_ij (gather_lerp), so nothing [Lq, Lk, dh] is formed.
// The 1/√dh on the gates and the term is the scale the attention puts on q·k (the paper writes
// attention unscaled; its authors' code scales both the same way). Embeddings: per layer
// "layers.<i>.pos_emb", [p_max + 1, dh] in a decoder stack (n = 0..p_max), [2 p_max + 1, dh] in an
// encoder stack (n = −p_max..p_max, row n + p_max), shared by the heads as in the paper (the gates
// are per head: each head counts its own way). Init normal(0, 0.02) like Shaw's tables (the authors'
// code starts from zeros, which gives the gates no gradient on the first step).
// Counting: Σ_{t=j..i} g_it is a suffix sum along the keys (cumsum, reverse) of g ⊙ A with
// A[i, t] = [k_pos[t] <= q_pos[i]]; the forward count of the encoder is the prefix sum of
// g ⊙ [k_pos[t] >= q_pos[i]]. O(Lq·Lk) per head. ⌊p⌋, ⌈p⌉ and the mix are one gather_lerp of z
// at u = p (+ the row offset), which takes ⌊p⌋ without gradient and the weight p − ⌊p⌋ with it
// (to the gates, so to q and k), and reads the last row alone at its upper edge.
// Only the rows a count can reach are used: a count is at most Lk (the gates are at most 1), so the
// table is cut to the integer positions within ±m, m = min(p_max, Lk), and the clip at ±m equals
// the clip at ±p_max (the rows beyond get a zero gradient either way).
// With a KV cache the keys are the cached ones followed by the new ones and the counts run over all
// of them, as in the full forward.
#include <cmath>
#include <deque>

#include "models/pe/layer_params.h"
#include "models/pe/pe.h"
#include "models/pe/site_tables.h"

namespace pelab::models {
namespace {

class CoPE : public PositionalEncoding {
 public:
  CoPE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : p_max_(cfg.get_int("cope_p_max")), bidirectional_(s.kind == StackKind::Encoder),
        heads_(s.heads), dh_(s.head_dim()) {
    PELAB_CHECK(p_max_ >= 1, "pe.cope_p_max: must be >= 1, got ", p_max_);
    PELAB_CHECK(s.layers >= 1, "cope: stack needs at least one layer, got ", s.layers);
    const int64_t rows = bidirectional_ ? 2 * p_max_ + 1 : p_max_ + 1;
    LayerParams layers(s.layers);
    register_module("layers", layers.list());
    for (int64_t i = 0; i < s.layers; ++i) {
      Tensor t = Tensor::empty({rows, dh_}, s.dtype);
      init::normal_(t, 0.0, 0.02, gen);
      emb_.push_back(layers.add(i, "pos_emb", t));
    }
  }
  std::string name() const override { return "cope"; }

  Tensor keyed_score_term(const Tensor& q, const Tensor& k, const Tensor& blocked,
                          const AttnSite& site) override {
    if (site.kind == AttnKind::Cross) return Tensor();
    PELAB_CHECK(!per_row(site), "cope: position IDs per batch row (supplied by the task) have no "
                "meaning for contextual positions; pe.scheme cope takes only the default positions");
    const int64_t Lq = site.q_pos.len;
    const int64_t Lk = site.k_pos.len;
    PELAB_CHECK(q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4 && q.size(1) == heads_ &&
                    k.size(1) == heads_ && q.size(0) == k.size(0) && q.size(2) == Lq &&
                    k.size(2) == Lk && q.size(3) == dh_ && k.size(3) == dh_,
                "cope: expected q [B, ", heads_, ", ", Lq, ", ", dh_, "] and k [B, ", heads_, ", ",
                Lk, ", ", dh_, "], got q ", q.defined() ? shape_str(q.shape()) : "undefined",
                ", k ", k.defined() ? shape_str(k.shape()) : "undefined");
    PELAB_CHECK(site.causal || bidirectional_,
                "cope: a non-causal site in a decoder stack (its table holds counts 0..p_max only)");
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh_));
    const Consts& c = consts(site.q_pos.ids, site.k_pos.ids, !site.causal, q.dtype(), q.device());

    Tensor g = sigmoid(matmul(q, transpose(k, 2, 3), scale));  // [B, H, Lq, Lk]
    if (blocked.defined()) g = masked_fill(g, blocked, 0.0);
    // Σ over the keys from j to the query (keys after the query give nothing)
    Tensor s = cumsum(c.at_or_before.defined() ? mul(g, c.at_or_before) : g, 3, true);
    if (!site.causal)  // minus the forward count for keys after the query
      s = sub(s, mul(cumsum(mul(g, c.at_or_after), 3), c.after));
    // The reachable rows: counts lie in [−m, m] (see the top of the file).
    const int64_t m = std::min(p_max_, Lk);
    const double M = static_cast<double>(m);
    s = clamp(s, site.causal ? 0.0 : -M, M);  // causal counts are >= 0 already
    const Tensor& e = emb_[layer_index("cope", site, emb_.size())];
    // rows n = 0..m (decoder) or −m..m at row n + p_max (encoder)
    const Tensor table =
        bidirectional_ ? slice(e, 0, p_max_ - m, p_max_ + m + 1) : slice(e, 0, 0, m + 1);
    // z[b, h, i, r] = q_i·table[r] / √dh; the count p reads row p (+ m in the encoder)
    const Tensor z = matmul(q, transpose(table, 0, 1), scale);  // [B, H, Lq, rows]
    return gather_lerp(z, 3, bidirectional_ ? add_scalar(s, M) : s);
  }

 private:
  // Per (positions, direction, dtype, device): the direction masks.
  struct Consts {
    std::vector<int64_t> q, k;
    bool bidir;
    DType dtype;
    Device device;
    Tensor at_or_before;  // [Lq, Lk], [k_pos[t] <= q_pos[i]]; undefined when all ones
    Tensor at_or_after;   // [Lq, Lk], [k_pos[t] >= q_pos[i]] (bidirectional only)
    Tensor after;         // [Lq, Lk], [k_pos[j] > q_pos[i]] (bidirectional only)
  };

  const Consts& consts(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp, bool bidir,
                       DType dt, Device dev) {
    for (const Consts& c : cache_)
      if (c.bidir == bidir && c.dtype == dt && c.device == dev && c.q == qp && c.k == kp) return c;
    const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = static_cast<int64_t>(kp.size());
    for (int64_t t = 1; t < Lk; ++t)
      PELAB_CHECK(kp[t] > kp[t - 1], "cope: key positions must increase (got ", kp[t - 1], " then ",
                  kp[t], " at ", t, ")");
    std::vector<double> before(static_cast<size_t>(Lq * Lk)), after_eq(before.size()),
        after(before.size());
    bool all_before = true;
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) {
        const size_t n = static_cast<size_t>(i * Lk + j);
        before[n] = kp[j] <= qp[i] ? 1.0 : 0.0;
        after_eq[n] = kp[j] >= qp[i] ? 1.0 : 0.0;
        after[n] = kp[j] > qp[i] ? 1.0 : 0.0;
        all_before = all_before && kp[j] <= qp[i];
      }
    Consts c{qp, kp, bidir, dt, dev, Tensor(), Tensor(), Tensor()};
    if (!all_before || bidir) c.at_or_before = Tensor::from_vector(before, {Lq, Lk}, dt, dev);
    if (bidir) {
      c.at_or_after = Tensor::from_vector(after_eq, {Lq, Lk}, dt, dev);
      c.after = Tensor::from_vector(after, {Lq, Lk}, dt, dev);
    }
    if (cache_.size() >= kPositionCacheEntries) cache_.pop_front();
    cache_.push_back(std::move(c));
    return cache_.back();
  }

  int64_t p_max_;
  bool bidirectional_;
  int64_t heads_, dh_;
  std::vector<Tensor> emb_;  // per layer [rows, dh]
  std::deque<Consts> cache_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("cope", [](const PEConfig& c, const StackInfo& s, Generator& g) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<CoPE>(c, s, g));
    })
        .key("cope_p_max", 64, "[1, inf)",
             "cope: contextual positions are clipped to p_max (embeddings for 0..p_max per layer; "
             "-p_max..p_max in the encoder)")
        .rule("pe.scheme cope takes no pe.randomized_positions (it reads only the order of the "
              "positions, which random positions keep: the run would equal one without them)",
              [](const PEConfig& c, const PEModelDims&) -> PEViolation {
                if (c.scheme != "cope" || !c.randomized_positions) return {};
                return {"pe.randomized_positions has no effect with pe.scheme cope (its counts use "
                        "only the order of the positions): set it to false",
                        {"pe.randomized_positions", "pe.scheme"}};
              })
        .refuses_task_positions()
        .parameters([](const PEConfig& c, const StackInfo& s) {
          const int64_t p = c.get_int("cope_p_max");
          return (s.kind == StackKind::Encoder ? 2 * p + 1 : p + 1) * s.head_dim() * s.layers;
        })
        .attention_memory([](const PEConfig&, const AttentionSizes& s) {
          if (s.kind == AttnKind::Cross) return 0.0;
          const double P = s.pairs(), h = static_cast<double>(s.heads), b = static_cast<double>(s.batch);
          const double dt = static_cast<double>(s.dtype_bytes);
          const bool causal = s.kind == AttnKind::DecoderSelf;
          // cached direction masks ([Lq, Lk]: one causal, three bidirectional) and the host
          // vectors of the newest
          const double consts = kPositionCacheEntries * (causal ? 1 : 3) * P * dt + 24.0 * P;
          // training: per layer the gates and counts, [B, H, Lq, Lk] each (sigmoid, mask, the
          // suffix sums, the clip; twice the sums both ways in the encoder), kept for the
          // backward; evaluation: one layer's, alive together
          if (!s.training) return consts + (causal ? 4 : 7) * b * h * P * dt;
          return consts + static_cast<double>(s.layers) * ((causal ? 4.5 : 8.5) * b + 2) * h * P * dt;
        })
        .size_key("cope_p_max"));

}  // namespace pelab::models
