// pelab — multi-head attention calling the four PE hooks; the attention mask builder.
#include "models/attention.h"

#include <algorithm>
#include <cmath>

#include "pelab/autograd.h"

namespace pelab::models {

Tensor attention_mask(const Tensor& key_mask, int64_t Lq, int64_t Lk, bool causal, DType dtype,
                      Device device) {
  PELAB_CHECK(Lq >= 0 && Lk >= 0 && (!causal || Lq <= Lk), "attention_mask: bad sizes Lq ", Lq,
              ", Lk ", Lk, causal ? " (causal needs Lq <= Lk)" : "");
  Tensor pad;  // [B, 1, 1, Lk], 1 = blocked
  if (key_mask.defined()) {
    PELAB_CHECK(key_mask.dim() == 2 && key_mask.size(1) == Lk,
                "attention_mask: key mask must be [B, ", Lk, "], got ", shape_str(key_mask.shape()));
    // Computed where the mask is (a device op, no read back): every query row of a batch row
    // then carries the same blocked keys, also where none is blocked (a padding-free batch masks
    // nothing, with the same result).
    Tensor km = key_mask.device() == device ? key_mask : key_mask.to(device);
    pad = eq(km, Tensor::zeros({1}, km.dtype(), device));
    if (pad.dtype() != dtype) pad = pad.to(dtype);
    pad = reshape(pad, {key_mask.size(0), 1, 1, Lk});
  }
  Tensor cm;  // [1, 1, Lq, Lk]
  if (causal && Lq > 0) {
    std::vector<double> blocked(static_cast<size_t>(Lq * Lk), 0.0);
    bool any = false;
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = Lk - Lq + i + 1; j < Lk; ++j) {
        blocked[i * Lk + j] = 1.0;
        any = true;
      }
    if (any) cm = Tensor::from_vector(blocked, {1, 1, Lq, Lk}, dtype, device);
  }
  if (pad.defined() && cm.defined()) return maximum(pad, cm);
  return pad.defined() ? pad : cm;
}

LengthScale length_scale_from_name(const std::string& name) {
  if (name == "off") return LengthScale::Off;
  if (name == "log_n") return LengthScale::LogN;
  if (name == "ssmax") return LengthScale::SSMax;
  fail("model.attention_length_scale: unknown value '", name, "' (valid: off, log_n, ssmax)");
}

namespace {
// log n_i per query row: n_i = the keys of row i that `blocked` leaves (at least 1), as a constant
// [B or 1, 1, Lq or 1, 1] tensor (the shape `blocked` reduces to); log Lk everywhere when nothing
// is blocked.
Tensor log_key_counts(const Tensor& blocked, int64_t Lk, DType dtype, Device device) {
  if (!blocked.defined())
    return Tensor::full({1, 1, 1, 1}, std::log(static_cast<double>(std::max<int64_t>(Lk, 1))),
                        dtype, device);
  NoGradGuard ng;
  const Tensor n = add_scalar(neg(sum(blocked, {3}, true)), static_cast<double>(Lk));
  return log(clamp(n, 1.0, static_cast<double>(Lk)));
}
}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t heads_, double dropout,
                                       bool bias, Generator& gen, DType dtype,
                                       LengthScale length_scale_)
    : d_model(d_model_), heads(heads_), head_dim(heads_ > 0 ? d_model_ / heads_ : 0),
      dropout_p(dropout), length_scale(length_scale_) {
  PELAB_CHECK(heads > 0 && d_model > 0 && d_model % heads == 0,
              "MultiHeadAttention: d_model ", d_model, " must be a positive multiple of heads ", heads);
  PELAB_CHECK(dropout >= 0 && dropout < 1, "MultiHeadAttention: dropout must be in [0, 1), got ",
              dropout);
  LinearOptions opt;
  opt.bias = bias;
  q = register_module("q", std::make_shared<Linear>(d_model, d_model, gen, opt, dtype));
  k = register_module("k", std::make_shared<Linear>(d_model, d_model, gen, opt, dtype));
  v = register_module("v", std::make_shared<Linear>(d_model, d_model, gen, opt, dtype));
  o = register_module("o", std::make_shared<Linear>(d_model, d_model, gen, opt, dtype));
  if (length_scale == LengthScale::SSMax)
    length_scale_s = register_parameter("length_scale", Tensor::full({heads}, 1.0, dtype));
}

Tensor MultiHeadAttention::project(const Linear& lin, const Tensor& x) const {
  PELAB_CHECK(x.dim() == 3 && x.size(2) == d_model, "MultiHeadAttention: expected input [B, L, ",
              d_model, "], got ", shape_str(x.shape()));
  const int64_t B = x.size(0), L = x.size(1);
  Tensor y = reshape(lin.forward(x), {B, L, heads, head_dim});
  // a view: the fused attention reads the heads in this token-major layout without a copy (and
  // writes its output in it, so the permute back in attend() is free)
  return permute(y, {0, 2, 1, 3});
}

Tensor MultiHeadAttention::attend(const Tensor& qh, const Tensor& kh, const Tensor& vh,
                                  const Tensor& blocked, PositionalEncoding& pe,
                                  const AttnSite& site, Generator& gen) {
  PELAB_CHECK(qh.dim() == 4 && kh.dim() == 4 && vh.dim() == 4 && kh.shape() == vh.shape() &&
                  qh.size(0) == kh.size(0) && qh.size(1) == heads && kh.size(1) == heads &&
                  qh.size(3) == head_dim && kh.size(3) == head_dim,
              "MultiHeadAttention::attend: expected q [B, ", heads, ", Lq, ", head_dim,
              "] and k = v [B, ", heads, ", Lk, ", head_dim, "], got q ", shape_str(qh.shape()),
              ", k ", shape_str(kh.shape()), ", v ", shape_str(vh.shape()));
  const int64_t B = qh.size(0), Lq = qh.size(2), Lk = kh.size(2);
  PELAB_CHECK(site.q_pos.len == Lq && site.k_pos.len == Lk &&
                  (site.q_pos.shared() || site.q_pos.rows == B) &&
                  (site.k_pos.shared() || site.k_pos.rows == B),
              "MultiHeadAttention::attend: the site's positions must cover Lq = ", Lq, " queries and Lk = ",
              Lk, " keys, shared or one row per batch row (B = ", B, "); got [", site.q_pos.rows, ", ",
              site.q_pos.len, "] and [", site.k_pos.rows, ", ", site.k_pos.len, "]");
  const double scale = 1.0 / std::sqrt(double(head_dim));
  // Length scaling: every logit of row i times f_i. The q·k and table (Shaw-K) terms are linear in
  // q, so the queries are scaled; a score term given as a tensor is scaled itself (it is computed
  // from the unscaled queries: CoPE's gates read q·k).
  Tensor f;  // [B or 1, 1 or H, Lq or 1, 1]
  if (length_scale != LengthScale::Off) {
    f = log_key_counts(blocked, Lk, qh.dtype(), qh.device());
    if (length_scale == LengthScale::SSMax) f = mul(reshape(length_scale_s, {1, heads, 1, 1}), f);
  }
  const Tensor qs = f.defined() ? mul(qh, f) : qh;
  auto scaled = [&](const Tensor& term) {
    return term.defined() && f.defined() ? mul(term, f) : term;
  };
  Tensor out;  // [B, H, Lq, dh]
  const PositionalEncoding::RelativeTables rel = pe.relative_tables(site);
  if (!keep_probs && !(is_training() && dropout_p > 0) &&
      (rel.values.defined() || !pe.has_value_term(site))) {
    // nothing needs the probabilities: one fused op, the hooks' table forms inside it
    const Tensor term =
        rel.keys.defined() ? Tensor() : scaled(pe.keyed_score_term(qh, kh, blocked, site));
    out = scaled_dot_attention(qs, kh, vh, term, blocked, scale, kMaskedScore, rel.index, rel.keys,
                               rel.values);
  } else {
    const Tensor term = scaled(pe.keyed_score_term(qh, kh, blocked, site));
    // q k^T / sqrt(dh), the scale applied inside the GEMM
    Tensor scores = matmul(qs, transpose(kh, 2, 3), scale);
    if (term.defined()) scores = add(scores, term);
    if (blocked.defined()) scores = masked_fill(scores, blocked, kMaskedScore);
    Tensor probs = softmax(scores, -1);
    if (keep_probs) last_probs = probs.detach();
    probs = dropout(probs, dropout_p, is_training(), gen);
    out = matmul(probs, vh);
    Tensor vterm = pe.value_term(probs, site);
    if (vterm.defined()) out = add(out, vterm);
  }
  out = reshape(permute(out, {0, 2, 1, 3}).contiguous(), {B, Lq, d_model});
  return o->forward(out);
}

Tensor MultiHeadAttention::forward(const Tensor& xq, const Tensor& xkv, const Tensor& blocked,
                                   PositionalEncoding& pe, const AttnSite& site, Generator& gen,
                                   const CachedKV* cache) {
  const bool fixed = cache && !cache->all_k_pos;
  Tensor qh = project(*q, xq);
  Tensor kh = fixed ? *cache->k : project(*k, xkv);  // fixed: a handle copy, the cache stays as is
  Tensor vh = fixed ? *cache->v : project(*v, xkv);
  pe.transform_qk(qh, kh, site);
  if (!cache || fixed) return attend(qh, kh, vh, blocked, pe, site, gen);
  // Cached: only the new keys went through transform_qk; they join the cache.
  *cache->k = cache->k->defined() ? concat({*cache->k, kh}, 2) : kh;
  *cache->v = cache->v->defined() ? concat({*cache->v, vh}, 2) : vh;
  AttnSite all = site;
  all.k_pos = *cache->all_k_pos;
  return attend(qh, *cache->k, *cache->v, blocked, pe, all, gen);
}

}  // namespace pelab::models
