// Tests for the transformer (models/): float64 finite-difference gradients of an attention layer and
// of tiny seq2seq / decoder-only models for every registered PE scheme, causality, key-padding
// masks, NoPE permutation equivariance, the sinusoidal table, the learned-APE range error, KV-cache
// decoding vs the full forward, greedy decoding, parameter names, config validation and info.
// Every per-scheme test loops over pe_names(), so new schemes are covered when they register.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "models/attention.h"
#include "models/info.h"
#include "models/model_config.h"
#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/pelab.h"
#include "tests/pe_test_util.h"

using namespace pelab;
using namespace pelab::models;

namespace {

using pelab::testing::small_pe;

using pelab::testing::tiny_model;

Tensor randn(const Shape& shape, Generator& gen, DType dt = DType::Float64) {
  Tensor t = Tensor::empty(shape, dt);
  init::normal_(t, 0.0, 1.0, gen);
  return t;
}

Tensor random_ids(int64_t B, int64_t L, int64_t vocab, Generator& gen) {
  std::vector<int64_t> v(static_cast<size_t>(B * L));
  for (auto& x : v) x = static_cast<int64_t>(gen.randint(static_cast<uint64_t>(vocab)));
  return Tensor::from_ints(v, {B, L});
}

Tensor mask_from(const std::vector<double>& v, int64_t B, int64_t L) {
  return Tensor::from_vector(v, {B, L}, DType::Float64);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

// Rows [0, n) along axis 1 of a [B, L, ...] tensor, as a contiguous copy.
Tensor head_rows(const Tensor& t, int64_t n) { return slice(t, 1, 0, n).contiguous(); }

struct GradTarget {
  std::string name;
  Tensor t;  // contiguous float64 CPU tensor requiring grad
};

// Central differences (eps 1e-6) on a subset of elements of every target: up to `nonzero`
// elements whose analytic gradient is non-zero plus `random` uniformly drawn ones. Error measure
// (as in the op driver): |analytic - numeric| / max(1, |numeric|) <= 1e-6.
void grad_check(const std::function<Tensor()>& loss_fn, const std::vector<GradTarget>& targets,
                const std::string& label, int nonzero = 3, int random = 2) {
  for (auto g : targets) g.t.zero_grad();  // Tensor handles: copies share the impl
  Tensor loss = loss_fn();
  ASSERT_TRUE(std::isfinite(loss.item())) << label;
  loss.backward();
  Generator pick(99);
  int checked = 0, nonzero_checked = 0;
  for (const auto& g : targets) {
    ASSERT_TRUE(g.t.is_contiguous() && g.t.dtype() == DType::Float64) << g.name;
    Tensor grad = g.t.grad();
    const int64_t n = g.t.numel();
    std::vector<double> ga = grad.defined() ? grad.to_vector() : std::vector<double>(n, 0.0);
    std::vector<int64_t> nz;
    for (int64_t i = 0; i < n; ++i)
      if (ga[i] != 0.0) nz.push_back(i);
    std::set<int64_t> idx;
    for (int k = 0; k < nonzero && !nz.empty(); ++k) idx.insert(nz[pick.randint(nz.size())]);
    for (int k = 0; k < random; ++k) idx.insert(static_cast<int64_t>(pick.randint(n)));
    double* data = g.t.data<double>();
    for (int64_t i : idx) {
      NoGradGuard ng;
      const double orig = data[i], eps = 1e-6;
      data[i] = orig + eps;
      const double fp = loss_fn().item();
      data[i] = orig - eps;
      const double fm = loss_fn().item();
      data[i] = orig;
      const double numeric = (fp - fm) / (2 * eps);
      const double err = std::fabs(ga[i] - numeric) / std::max(1.0, std::fabs(numeric));
      EXPECT_LE(err, 1e-6) << label << ": " << g.name << "[" << i << "] analytic " << ga[i]
                           << " numeric " << numeric;
      ++checked;
      nonzero_checked += ga[i] != 0.0;
    }
  }
  EXPECT_GT(checked, 0) << label;
  EXPECT_GT(nonzero_checked, 0) << label << ": every checked gradient was zero";
}

std::vector<GradTarget> model_targets(const Module& m) {
  std::vector<GradTarget> out;
  for (const auto& nt : m.named_parameters()) out.push_back({nt.first, nt.second});
  return out;
}

// Sequence inputs shared by several tests: B = 2, row 1 padded at the end.
struct Batch {
  Tensor src, src_mask, tgt_in, tgt_mask, tgt_out;
};
Batch make_batch(int64_t vocab, Generator& gen) {
  Batch b;
  b.src = random_ids(2, 6, vocab, gen);
  b.src_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, 2, 6);
  b.tgt_in = random_ids(2, 5, vocab, gen);
  b.tgt_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, 2, 5);
  std::vector<int64_t> out = random_ids(2, 5, vocab, gen).to_int_vector();
  out[8] = out[9] = -100;  // padded targets ignored
  b.tgt_out = Tensor::from_ints(out, {2, 5});
  return b;
}


// One decoding input (seed 51): 2 rows, a source of 6 tokens (the second row's last two padded)
// and a target of 7.
struct DecodingInput {
  Tensor src, src_mask, tgt;
};
DecodingInput decoding_input() {
  Generator gen(51);
  DecodingInput in;
  in.src = random_ids(2, 6, 11, gen);
  in.tgt = random_ids(2, 7, 11, gen);
  in.src_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, 2, 6);
  return in;
}

// The decoder's output for it, whole, as training computes it.
Tensor decode_whole(Transformer& m, const std::string& arch, const DecodingInput& in) {
  NoGradGuard ng;
  return arch == "seq2seq" ? m.decode(in.tgt, Tensor(), m.encode(in.src, in.src_mask), in.src_mask)
                           : m.forward_decoder(in.tgt, Tensor());
}

// The same through the KV cache, in steps of 3, 1 and 3 tokens (the cache's offset checked after
// each).
Tensor decode_cached(Transformer& m, const std::string& arch, const DecodingInput& in) {
  NoGradGuard ng;
  DecoderCache cache =
      arch == "seq2seq" ? m.start_cache(m.encode(in.src, in.src_mask), in.src_mask) : m.start_cache(2);
  std::vector<Tensor> parts;
  for (auto [a, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 4}, {4, 7}}) {
    parts.push_back(m.decode_step(cache, slice(in.tgt, 1, a, e).contiguous()));
    EXPECT_EQ(cache.offset(), e);
  }
  return concat(parts, 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST(ModelRegistry, BuiltinSchemesRegisteredAndUnknownNameListsValidOnes) {
  const std::vector<std::string> names = pe_names();
  for (const char* s : {"sinusoidal", "learned", "none"})
    EXPECT_NE(std::find(names.begin(), names.end(), s), names.end()) << s;
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  PEConfig bad;
  bad.scheme = "bogus";
  Generator gen(1);
  try {
    make_pe(bad, StackInfo{}, gen);
    FAIL() << "make_pe accepted an unknown scheme";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'bogus'"), std::string::npos) << msg;
    for (const auto& n : names) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  // A second registration under a taken name is refused.
  EXPECT_FALSE(register_pe("none", [](const PEConfig&, const StackInfo&, Generator&) {
    return std::shared_ptr<PositionalEncoding>();
  }));
}

TEST(ModelSinusoidal, ValuesMatchTheClosedForm) {
  PEConfig pc;
  pc.scheme = "sinusoidal";
  StackInfo s;
  s.d_model = 4;
  s.heads = 1;
  s.dtype = DType::Float64;
  Generator gen(1);
  auto pe = make_pe(pc, s, gen);
  EXPECT_TRUE(pe->additive());
  EXPECT_EQ(pe->num_parameters(), 0);
  // Default range 0..2 (cached table) and an explicit position vector must agree.
  Tensor all = pe->embed(Tensor::zeros({1, 3, 4}, DType::Float64), {0, 1, 2});
  Tensor only2 = pe->embed(Tensor::zeros({1, 1, 4}, DType::Float64), {2});
  const std::vector<double> expect = {std::sin(2.0), std::cos(2.0), std::sin(0.02), std::cos(0.02)};
  std::vector<double> a = all.to_vector(), b = only2.to_vector();
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(a[8 + j], expect[j], 1e-15) << j;
    EXPECT_NEAR(b[j], expect[j], 1e-15) << j;
    EXPECT_NEAR(a[j], j % 2 ? 1.0 : 0.0, 1e-15) << j;  // position 0: (0, 1, 0, 1)
  }
  // embed adds to x
  Tensor x = Tensor::full({2, 1, 4}, 3.0, DType::Float64);
  std::vector<double> c = pe->embed(x, {2}).to_vector();
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(c[4 + j], 3.0 + expect[j], 1e-15);
}

TEST(ModelLearnedPE, PastMaxPositionsRaisesTheClearError) {
  for (const std::string arch : {"decoder", "seq2seq"}) {
    ModelConfig c = tiny_model(arch, "learned");
    c.pe.set("max_positions", 8);
    Transformer m(c);
    EXPECT_EQ(m.decoder->pe->parameter("weight").shape(), (Shape{8, 8}));
    Generator gen(3);
    Tensor ok = random_ids(1, 8, c.vocab, gen), too_long = random_ids(1, 9, c.vocab, gen);
    const std::string want = "learned positional encoding: position 8 >= max_positions 8 (sequence length 9)";
    try {
      if (arch == "decoder")
        m.forward_decoder(too_long, Tensor());
      else
        m.forward_seq2seq(too_long, Tensor(), ok, Tensor());
      FAIL() << arch << ": no error past max_positions";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    // Exactly max_positions is fine.
    Tensor out = arch == "decoder" ? m.forward_decoder(ok, Tensor())
                                   : m.forward_seq2seq(ok, Tensor(), ok, Tensor());
    EXPECT_EQ(out.size(1), 8);
    // Greedy decoding past the table raises the same error, cached and uncached.
    for (bool cache : {true, false}) {
      try {
        if (arch == "decoder")
          greedy_decode(m, {{1, 5, 6, 7, 8}}, 10, cache, SpecialIds{0, 1, -1});
        else
          greedy_decode(m, ok, Tensor(), 10, cache, SpecialIds{0, 1, -1});
        FAIL() << arch << " greedy (cache " << cache << "): no error past max_positions";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("learned positional encoding: position 8 >= "
                                             "max_positions 8"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// The stack an attention site's gradient check builds its PE for: 2 layers, d 8, 2 heads, float64.
StackInfo site_stack(AttnKind kind) {
  StackInfo s;
  s.kind = kind == AttnKind::EncoderSelf ? StackKind::Encoder : StackKind::Decoder;
  s.layers = 2;
  s.d_model = 8;
  s.heads = 2;
  s.dtype = DType::Float64;
  return s;
}

// An attention site's inputs for the gradient checks, drawn from `gen` after the PE and the
// attention: B 2, Lq 5, Lk 7 for cross attention else 5, d 8, at positions offset by 3, the last
// `padded` keys of row 1 masked, a loss weight w, and the site (layer 1).
struct SiteInputs {
  Tensor xq, xk, w, blocked;
  AttnSite site;
};
SiteInputs site_inputs(AttnKind kind, Generator& gen, int64_t padded) {
  const int64_t B = 2, Lq = 5, Lk = kind == AttnKind::Cross ? 7 : 5;
  SiteInputs in;
  in.xq = randn({B, Lq, 8}, gen).set_requires_grad(true);
  in.xk = randn({B, Lk, 8}, gen).set_requires_grad(true);
  in.w = randn({B, Lq, 8}, gen);
  std::vector<int64_t> qpos, kpos;
  for (int64_t i = 0; i < Lq; ++i) qpos.push_back(3 + i);
  for (int64_t i = 0; i < Lk; ++i) kpos.push_back(3 + i);
  std::vector<double> km(B * Lk, 1.0);
  for (int64_t j = 0; j < padded; ++j) km[B * Lk - 1 - j] = 0.0;
  const bool causal = kind == AttnKind::DecoderSelf;
  in.blocked = attention_mask(mask_from(km, B, Lk), Lq, Lk, causal, DType::Float64, Device::cpu());
  in.site = pelab::testing::site_of(kind, qpos, kpos, causal, 1);
  return in;
}

// Gradient check of one attention site's loss sum(mha(pe(xq), keys) * w) over the attention's and
// the PE's parameters and the inputs; `then` (if given) runs next with the loss; last, the fused
// attention op (no dropout, no keep_probs) against the composite path (keep_probs: the softmax
// tensor, pe.value_term): the same loss and gradients.
void check_site_gradients(MultiHeadAttention& mha, PositionalEncoding& pe, AttnKind kind,
                          const Tensor& xq, const Tensor& xk, const Tensor& w,
                          const Tensor& blocked, const AttnSite& site, Generator& gen,
                          const std::string& label,
                          const std::function<void(const std::function<Tensor()>&)>& then = {}) {
  const std::function<Tensor()> loss = [&] {
    Tensor q_in = pe.embed(xq, site.q_pos);
    Tensor k_in = kind == AttnKind::Cross ? xk : q_in;
    return sum(mul(mha.forward(q_in, k_in, blocked, pe, site, gen), w));
  };
  std::vector<GradTarget> targets = model_targets(mha);
  for (const auto& nt : pe.named_parameters()) targets.push_back({"pe." + nt.first, nt.second});
  targets.push_back({"xq", xq});
  if (kind == AttnKind::Cross) targets.push_back({"xk", xk});
  grad_check(loss, targets, label, 4, 2);
  if (then) then(loss);
  std::vector<double> path_loss(2);
  std::vector<std::vector<double>> path_grads[2];
  for (int path = 0; path < 2; ++path) {
    mha.keep_probs = path == 1;
    for (auto g : targets) g.t.zero_grad();
    Tensor l = loss();
    l.backward();
    path_loss[path] = l.item();
    for (const auto& g : targets)  // a parameter the site does not use has no gradient
      path_grads[path].push_back(g.t.grad().defined() ? g.t.grad().to_vector()
                                                      : std::vector<double>{});
  }
  mha.keep_probs = false;
  EXPECT_NEAR(path_loss[0], path_loss[1], 1e-12 * (1 + std::fabs(path_loss[1]))) << label;
  for (size_t i = 0; i < targets.size(); ++i) {
    ASSERT_EQ(path_grads[0][i].size(), path_grads[1][i].size()) << label << " " << targets[i].name;
    for (size_t j = 0; j < path_grads[0][i].size(); ++j)
      ASSERT_NEAR(path_grads[0][i][j], path_grads[1][i][j], 1e-11)
          << label << ": fused vs composite gradient of " << targets[i].name << " at " << j;
  }
}

TEST(ModelAttention, GradCheckEverySchemeAndSite) {
  for (const auto& scheme : pe_names()) {
    for (AttnKind kind : {AttnKind::EncoderSelf, AttnKind::DecoderSelf, AttnKind::Cross}) {
      const std::string label =
          scheme + (kind == AttnKind::EncoderSelf ? " enc-self" : kind == AttnKind::DecoderSelf ? " dec-self" : " cross");
      Generator gen(11);
      auto pe = make_pe(small_pe(scheme), site_stack(kind), gen);
      MultiHeadAttention mha(8, 2, 0.0, true, gen, DType::Float64);
      // Key padding in row 1 for non-causal sites.
      const SiteInputs in = site_inputs(kind, gen, kind != AttnKind::DecoderSelf ? 2 : 0);
      check_site_gradients(mha, *pe, kind, in.xq, in.xk, in.w, in.blocked, in.site, gen, label);
    }
  }
}

// Length-scaled logits (model.attention_length_scale; docs/model.md §3.1): the probabilities
// against a direct computation, softmax_j(f_i · q_i·k_j / √dh) over the keys row i may attend with
// f_i = log n_i (log_n) or s_h · log n_i (ssmax), n_i counted from the mask (causal and key
// padding); then float64 finite-difference gradients of every parameter (s_h included) and the
// inputs for every scheme at every site, fused and composite paths equal. Faults this catches:
// a scale applied to the q·k term but not to a scheme's score term (Shaw's table form is inside
// the fused op, ALiBi/T5 give a tensor) — the paths or the direct values differ; n taken as Lk
// instead of the unblocked keys — the causal rows' values differ; no gradient into s_h.
TEST(ModelAttention, LengthScaledLogitsValuesAndGradients) {
  for (LengthScale ls : {LengthScale::LogN, LengthScale::SSMax}) {
    const std::string mode = ls == LengthScale::LogN ? "log_n" : "ssmax";
    // Values, scheme none (no score term), causal self-attention with key padding in row 1.
    {
      Generator gen(3);
      StackInfo s;
      s.kind = StackKind::Decoder;
      s.layers = 1;
      s.d_model = 8;
      s.heads = 2;
      s.dtype = DType::Float64;
      auto pe = make_pe(small_pe("none"), s, gen);
      MultiHeadAttention mha(8, 2, 0.0, true, gen, DType::Float64, ls);
      if (ls == LengthScale::SSMax) {
        ASSERT_TRUE(mha.length_scale_s.defined());
        EXPECT_EQ(mha.length_scale_s.to_vector(), (std::vector<double>{1.0, 1.0}));  // init
        mha.length_scale_s.data<double>()[0] = 0.5;
        mha.length_scale_s.data<double>()[1] = 2.0;
      } else {
        EXPECT_FALSE(mha.length_scale_s.defined());
      }
      const int64_t B = 2, L = 5, dh = 4;
      Tensor x = randn({B, L, 8}, gen);
      std::vector<double> km(B * L, 1.0);
      km[B * L - 1] = km[B * L - 2] = 0.0;  // row 1: the last two keys are padding
      Tensor blocked = attention_mask(mask_from(km, B, L), L, L, true, DType::Float64, Device::cpu());
      std::vector<int64_t> pos = {0, 1, 2, 3, 4};
      AttnSite site = pelab::testing::site_of(AttnKind::DecoderSelf, pos, pos, true);
      mha.keep_probs = true;
      NoGradGuard ng;
      mha.forward(x, x, blocked, *pe, site, gen);
      const std::vector<double> p = mha.last_probs.to_vector();  // [B, H, L, L]
      const std::vector<double> q = mha.project(*mha.q, x).contiguous().to_vector();
      const std::vector<double> k = mha.project(*mha.k, x).contiguous().to_vector();
      const std::vector<double> sh = ls == LengthScale::SSMax ? std::vector<double>{0.5, 2.0}
                                                              : std::vector<double>{1.0, 1.0};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t i = 0; i < L; ++i) {
            std::vector<int64_t> keys;
            for (int64_t j = 0; j <= i; ++j)
              if (km[b * L + j] != 0) keys.push_back(j);
            const double f = sh[h] * std::log(static_cast<double>(std::max<size_t>(keys.size(), 1)));
            std::vector<double> logit(L, -1e300);
            double mx = -1e300, z = 0;
            for (int64_t j : keys) {
              double dot = 0;
              for (int64_t d = 0; d < dh; ++d)
                dot += q[((b * 2 + h) * L + i) * dh + d] * k[((b * 2 + h) * L + j) * dh + d];
              logit[j] = f * dot / 2.0;  // √dh = 2
              mx = std::max(mx, logit[j]);
            }
            for (int64_t j : keys) z += std::exp(logit[j] - mx);
            for (int64_t j = 0; j < L; ++j) {
              const double want =
                  std::find(keys.begin(), keys.end(), j) != keys.end() ? std::exp(logit[j] - mx) / z : 0.0;
              if (keys.empty()) continue;  // row 1's padding queries: nothing to compare
              EXPECT_NEAR(p[((b * 2 + h) * L + i) * L + j], want, 1e-12)
                  << mode << " b" << b << " h" << h << " i" << i << " j" << j;
            }
          }
    }
    // Gradients and fused = composite, every scheme and site.
    for (const auto& scheme : pe_names()) {
      for (AttnKind kind : {AttnKind::EncoderSelf, AttnKind::DecoderSelf, AttnKind::Cross}) {
        const std::string label = mode + " " + scheme +
                                  (kind == AttnKind::EncoderSelf   ? " enc-self"
                                   : kind == AttnKind::DecoderSelf ? " dec-self"
                                                                   : " cross");
        Generator gen(13);
        auto pe = make_pe(small_pe(scheme), site_stack(kind), gen);
        MultiHeadAttention mha(8, 2, 0.0, true, gen, DType::Float64, ls);
        if (ls == LengthScale::SSMax) {  // away from 1, different per head
          mha.length_scale_s.data<double>()[0] = 0.7;
          mha.length_scale_s.data<double>()[1] = 1.3;
        }
        const SiteInputs in = site_inputs(kind, gen, 1);  // padding in row 1 at every site
        check_site_gradients(mha, *pe, kind, in.xq, in.xk, in.w, in.blocked, in.site, gen, label,
                             [&](const std::function<Tensor()>& loss) {
                               if (ls != LengthScale::SSMax) return;
                               mha.length_scale_s.zero_grad();
                               loss().backward();
                               ASSERT_TRUE(mha.length_scale_s.grad().defined()) << label;
                               for (double g : mha.length_scale_s.grad().to_vector())
                                 EXPECT_NE(g, 0.0) << label;
                             });
      }
    }
  }
}

// The option in whole models: a tiny model's gradients (ssmax: every layer's s_h is a parameter
// named ...self_attn.length_scale), and KV-cache decoding equal to the full forward — the cached
// step counts its keys from the cache's mask as the full forward does from the causal mask.
TEST(ModelTransformer, LengthScaledAttentionInWholeModels) {
  for (const std::string mode : {"log_n", "ssmax"}) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      for (const std::string scheme : {"shaw", "alibi", "rope"}) {
        ModelConfig c = tiny_model(arch, scheme);
        c.attention_length_scale = mode;
        Transformer m(c);
        if (mode == "ssmax") {
          EXPECT_EQ(m.parameter("decoder.layers.0.self_attn.length_scale").shape(), (Shape{2}));
        } else {
          EXPECT_THROW(m.parameter("decoder.layers.0.self_attn.length_scale"), Error);
        }
        Generator gen(5);
        Batch b = make_batch(c.vocab, gen);
        auto loss = [&] {
          Tensor logits = arch == "seq2seq" ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                            : m.forward_decoder(b.tgt_in, b.tgt_mask);
          return cross_entropy(logits, b.tgt_out);
        };
        grad_check(loss, model_targets(m), mode + " " + scheme + " " + arch, 3, 1);
        m.eval();
        const DecodingInput in = decoding_input();
        const Tensor full = decode_whole(m, arch, in);
        EXPECT_LE(max_abs_diff(decode_cached(m, arch, in), full), 1e-10)
            << mode << " " << scheme << " " << arch;
        // and the option changes the outputs (it is not silently off)
        ModelConfig plain = c;
        plain.attention_length_scale = "off";
        Transformer mp(plain);
        const Tensor other = decode_whole(mp, arch, in);
        EXPECT_GT(max_abs_diff(other, full), 1e-6) << mode << " " << scheme << " " << arch;
      }
    }
  }
}

TEST(ModelTransformer, GradCheckTinyModelsEveryScheme) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      for (const std::string norm : {"pre", "post"}) {
        if (norm == "post" && scheme != "sinusoidal") continue;  // post-LN once is enough
        ModelConfig c = tiny_model(arch, scheme);
        c.norm = norm;
        Transformer m(c);
        Generator gen(5);
        Batch b = make_batch(c.vocab, gen);
        auto loss = [&] {
          Tensor logits = arch == "seq2seq" ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                            : m.forward_decoder(b.tgt_in, b.tgt_mask);
          return cross_entropy(logits, b.tgt_out);
        };
        grad_check(loss, model_targets(m), scheme + " " + arch + " " + norm + "-LN", 3, 1);
      }
    }
  }
}

TEST(ModelTransformer, FutureTokensDoNotChangeEarlierOutputs) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      Generator gen(21);
      Tensor src = random_ids(2, 6, 11, gen);
      Tensor a = random_ids(2, 7, 11, gen);
      std::vector<int64_t> v = a.to_int_vector();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 4; t < 7; ++t) v[b * 7 + t] = (v[b * 7 + t] + 1 + t) % 11;
      Tensor a2 = Tensor::from_ints(v, {2, 7});
      auto run = [&](const Tensor& ids) {
        return arch == "seq2seq" ? m.forward_seq2seq(src, Tensor(), ids, Tensor())
                                 : m.forward_decoder(ids, Tensor());
      };
      Tensor l1 = run(a), l2 = run(a2);
      EXPECT_LE(max_abs_diff(head_rows(l1, 4), head_rows(l2, 4)), 1e-12) << scheme << " " << arch;
      // ...and the change is visible from position 4 on (the check above is not vacuous).
      EXPECT_GT(max_abs_diff(l1, l2), 1e-6) << scheme << " " << arch;
    }
  }
}

TEST(ModelTransformer, PaddedKeysDoNotAffectRealTokens) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      Generator gen(31);
      // Row 1 is padded: at the end of the source, at the start of the target (left padding, so
      // that the causal mask alone would not hide the pads from later tokens).
      Tensor src = random_ids(2, 6, 11, gen), tgt = random_ids(2, 5, 11, gen);
      Tensor src_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, 2, 6);
      Tensor tgt_mask = mask_from({1, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 2, 5);
      std::vector<int64_t> s2 = src.to_int_vector(), t2 = tgt.to_int_vector();
      s2[10] = (s2[10] + 3) % 11;
      s2[11] = (s2[11] + 5) % 11;
      t2[5] = (t2[5] + 2) % 11;
      t2[6] = (t2[6] + 7) % 11;
      Tensor src2 = Tensor::from_ints(s2, {2, 6}), tgt2 = Tensor::from_ints(t2, {2, 5});
      auto run = [&](const Tensor& s, const Tensor& t) {
        return arch == "seq2seq" ? m.forward_seq2seq(s, src_mask, t, tgt_mask)
                                 : m.forward_decoder(t, tgt_mask);
      };
      Tensor l1 = run(src, tgt), l2 = run(src2, tgt2);
      std::vector<double> x = l1.to_vector(), y = l2.to_vector();
      const int64_t V = 11;
      double real_diff = 0, pad_diff = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 5; ++t)
          for (int64_t k = 0; k < V; ++k) {
            const size_t i = (b * 5 + t) * V + k;
            const bool pad = b == 1 && t < 2;
            (pad ? pad_diff : real_diff) = std::max(pad ? pad_diff : real_diff, std::fabs(x[i] - y[i]));
          }
      EXPECT_LE(real_diff, 1e-12) << scheme << " " << arch;
      EXPECT_GT(pad_diff, 1e-6) << scheme << " " << arch << ": the padded tokens were not changed";
      if (arch == "seq2seq") {
        // The encoder outputs of real source tokens ignore the padded source tokens too.
        Tensor e1 = m.encode(src, src_mask), e2 = m.encode(src2, src_mask);
        EXPECT_LE(max_abs_diff(head_rows(e1, 4), head_rows(e2, 4)), 1e-12) << scheme;
      }
    }
  }
}

TEST(ModelTransformer, NoPEEncoderIsPermutationEquivariant) {
  Transformer m(tiny_model("seq2seq", "none"));
  Generator gen(41);
  Tensor src = random_ids(2, 6, 11, gen);
  const std::vector<int64_t> perm = {3, 0, 5, 1, 4, 2};
  std::vector<int64_t> v = src.to_int_vector(), pv(v.size());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i) pv[b * 6 + i] = v[b * 6 + perm[i]];
  std::vector<double> h = m.encode(src, Tensor()).to_vector();
  std::vector<double> hp = m.encode(Tensor::from_ints(pv, {2, 6}), Tensor()).to_vector();
  double diff = 0, spread = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t d = 0; d < 8; ++d) {
        diff = std::max(diff, std::fabs(hp[(b * 6 + i) * 8 + d] - h[(b * 6 + perm[i]) * 8 + d]));
        spread = std::max(spread, std::fabs(h[(b * 6 + i) * 8 + d] - h[(b * 6 + perm[i]) * 8 + d]));
      }
  EXPECT_LE(diff, 1e-12);
  EXPECT_GT(spread, 1e-3);  // outputs do differ per token, so the check means something
  // With a positional scheme the same permutation is not equivariant.
  Transformer ms(tiny_model("seq2seq", "sinusoidal"));
  std::vector<double> g = ms.encode(src, Tensor()).to_vector();
  std::vector<double> gp = ms.encode(Tensor::from_ints(pv, {2, 6}), Tensor()).to_vector();
  double d2 = 0;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t d = 0; d < 8; ++d) d2 = std::max(d2, std::fabs(gp[i * 8 + d] - g[perm[i] * 8 + d]));
  EXPECT_GT(d2, 1e-3);
}

TEST(ModelDecoding, CachedStepsMatchTheFullForwardEveryScheme) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      m.eval();
      const DecodingInput in = decoding_input();
      EXPECT_LE(max_abs_diff(decode_cached(m, arch, in), decode_whole(m, arch, in)), 1e-10)
          << scheme << " " << arch;
    }
  }
}

TEST(ModelDecoding, GreedyCachedEqualsUncachedEveryScheme) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      ModelConfig c = tiny_model(arch, scheme);
      c.dropout = 0.1;  // greedy decoding must switch dropout off (eval mode) and restore the mode
      Transformer m(c);
      Generator gen(61);
      Tensor src = random_ids(3, 6, 11, gen);
      Tensor src_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0}, 3, 6);
      const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6}, {1, 7, 8, 9, 4}, {1, 3, 3}};
      auto run = [&](bool cache, SpecialIds ids) {
        return arch == "seq2seq" ? greedy_decode(m, src, src_mask, 9, cache, ids)
                                 : greedy_decode(m, prompts, 9, cache, ids);
      };
      GreedyResult ref = run(false, SpecialIds{0, 1, -1});  // no eos: 9 tokens per row
      EXPECT_TRUE(m.is_training());
      for (const auto& row : ref.tokens) EXPECT_EQ(row.size(), 9u) << scheme << " " << arch;
      // Use row 0's third token as eos so that row 0 stops early.
      const SpecialIds ids{0, 1, ref.tokens[0][2]};
      GreedyResult a = run(false, ids), b = run(true, ids);
      EXPECT_EQ(a.tokens, b.tokens) << scheme << " " << arch;
      EXPECT_EQ(a.finished, b.finished) << scheme << " " << arch;
      EXPECT_TRUE(a.finished[0]) << scheme << " " << arch;
      EXPECT_LE(a.tokens[0].size(), 2u);
      EXPECT_EQ(run(true, SpecialIds{0, 1, -1}).tokens, ref.tokens) << scheme << " " << arch;
      if (arch == "decoder") {
        // Rows are decoded independently of their batch-mates (grouping by prompt length).
        for (size_t r = 0; r < prompts.size(); ++r)
          EXPECT_EQ(greedy_decode(m, {prompts[r]}, 9, true, SpecialIds{0, 1, -1}).tokens[0],
                    ref.tokens[r])
              << scheme << " row " << r;
      } else {
        // The seq2seq decoding of a row does not depend on the padded source tokens.
        std::vector<int64_t> s = src.to_int_vector();
        s[15] = (s[15] + 1) % 11;
        GreedyResult p = greedy_decode(m, Tensor::from_ints(s, {3, 6}), src_mask, 9, true,
                                       SpecialIds{0, 1, -1});
        EXPECT_EQ(p.tokens, ref.tokens) << scheme;
      }
    }
  }
}

TEST(ModelTransformer, Float32MatchesFloat64EveryScheme) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      ModelConfig c = tiny_model(arch, scheme, "float32");
      c.init_std = 0.1;
      Transformer m32(c);
      c.dtype = "float64";
      Transformer m64(c);
      Generator gen(71);
      Batch b = make_batch(11, gen);
      auto run = [&](Transformer& m) {
        return arch == "seq2seq" ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                 : m.forward_decoder(b.tgt_in, b.tgt_mask);
      };
      Tensor l32 = run(m32), l64 = run(m64);
      EXPECT_EQ(l32.dtype(), DType::Float32);
      EXPECT_EQ(l64.dtype(), DType::Float64);
      EXPECT_LE(max_abs_diff(l32, l64), 1e-4) << scheme << " " << arch;
    }
  }
}

TEST(ModelTransformer, EmbedScaleFollowsTheScheme) {
  for (const auto& scheme : pe_names()) {
    ModelConfig c = tiny_model("seq2seq", scheme);
    Transformer m(c);
    const double want = m.decoder->pe->additive() ? std::sqrt(8.0) : 1.0;
    EXPECT_DOUBLE_EQ(m.decoder->embed_scale, want) << scheme;
    EXPECT_DOUBLE_EQ(m.encoder->embed_scale, want) << scheme;
    c.embed_scale = "none";
    EXPECT_DOUBLE_EQ(Transformer(c).decoder->embed_scale, 1.0) << scheme;
    c.embed_scale = "sqrt_d";
    EXPECT_DOUBLE_EQ(Transformer(c).decoder->embed_scale, std::sqrt(8.0)) << scheme;
  }
  EXPECT_TRUE(Transformer(tiny_model("seq2seq", "sinusoidal")).decoder->pe->additive());
  EXPECT_FALSE(Transformer(tiny_model("seq2seq", "none")).decoder->pe->additive());
}

TEST(ModelNames, DottedParameterNamesAsDocumented) {
  ModelConfig c = tiny_model("seq2seq", "learned");
  c.decoder_layers = 2;
  Transformer m(c);
  std::vector<std::string> names;
  for (const auto& nt : m.named_parameters()) names.push_back(nt.first);
  auto attn = [](const std::string& p) {
    std::vector<std::string> v;
    for (const char* l : {"q", "k", "v", "o"})
      for (const char* t : {"weight", "bias"}) v.push_back(p + "." + l + "." + t);
    return v;
  };
  auto ln = [](const std::string& p) { return std::vector<std::string>{p + ".weight", p + ".bias"}; };
  auto ff = [](const std::string& p) {
    return std::vector<std::string>{p + ".fc1.weight", p + ".fc1.bias", p + ".fc2.weight", p + ".fc2.bias"};
  };
  std::vector<std::string> expected = {"encoder.embed.weight", "encoder.pe.weight"};
  auto append = [&](const std::vector<std::string>& v) { expected.insert(expected.end(), v.begin(), v.end()); };
  append(attn("encoder.layers.0.self_attn"));
  append(ln("encoder.layers.0.norm1"));
  append(ff("encoder.layers.0.ff"));
  append(ln("encoder.layers.0.norm2"));
  append(ln("encoder.norm"));
  append({"decoder.embed.weight", "decoder.pe.weight"});
  for (const std::string l : {"0", "1"}) {
    const std::string p = "decoder.layers." + l;
    append(attn(p + ".self_attn"));
    append(ln(p + ".norm1"));
    append(attn(p + ".cross_attn"));
    append(ln(p + ".norm2"));
    append(ff(p + ".ff"));
    append(ln(p + ".norm3"));
  }
  append(ln("decoder.norm"));
  append({"lm_head.weight"});
  EXPECT_EQ(names, expected);
  EXPECT_EQ(m.parameter("decoder.layers.1.ff.fc1.weight").shape(), (Shape{16, 8}));
  EXPECT_EQ(m.parameter("decoder.pe.weight").shape(), (Shape{32, 8}));
  EXPECT_EQ(m.parameter("lm_head.weight").shape(), (Shape{11, 8}));

  // Decoder-only, post-LN, tied, no biases: no encoder, no cross-attention, ff norm is norm2,
  // no final norms, lm_head shares decoder.embed.weight (listed once).
  ModelConfig d = tiny_model("decoder", "none");
  d.norm = "post";
  d.tie_embeddings = true;
  d.bias = false;
  Transformer md(d);
  std::vector<std::string> dn;
  for (const auto& nt : md.named_parameters()) dn.push_back(nt.first);
  const std::vector<std::string> dexp = {
      "decoder.embed.weight", "decoder.layers.0.self_attn.q.weight",
      "decoder.layers.0.self_attn.k.weight", "decoder.layers.0.self_attn.v.weight",
      "decoder.layers.0.self_attn.o.weight", "decoder.layers.0.norm1.weight",
      "decoder.layers.0.norm1.bias", "decoder.layers.0.ff.fc1.weight",
      "decoder.layers.0.ff.fc2.weight", "decoder.layers.0.norm2.weight",
      "decoder.layers.0.norm2.bias"};
  EXPECT_EQ(dn, dexp);
  EXPECT_EQ(md.lm_head->weight.impl(), md.decoder->embed->weight.impl());

  // Seq2seq tied: one table for encoder, decoder and lm_head, named encoder.embed.weight.
  ModelConfig t = tiny_model("seq2seq", "sinusoidal");
  t.tie_embeddings = true;
  Transformer mt(t);
  EXPECT_EQ(mt.decoder->embed->weight.impl(), mt.encoder->embed->weight.impl());
  EXPECT_EQ(mt.lm_head->weight.impl(), mt.encoder->embed->weight.impl());
  int tables = 0;
  for (const auto& nt : mt.named_parameters())
    tables += nt.first.find("embed") != std::string::npos || nt.first.find("lm_head") != std::string::npos;
  EXPECT_EQ(tables, 1);
  EXPECT_EQ(mt.num_parameters(), m.num_parameters() - 2 * 11 * 8  // two fewer tables
                                     - 2 * 32 * 8                 // no learned PE tables
                                     - m.decoder->layers->at<DecoderLayer>(1).num_parameters());
}

TEST(ModelConfigTest, ValidateNamesTheKey) {
  struct Case {
    std::function<void(ModelConfig&)> edit;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& c) { c.arch = "encoder"; }, "model.arch"},
      {[](ModelConfig& c) { c.vocab = 1; }, "model.vocab"},
      {[](ModelConfig& c) { c.d_model = 0; }, "model.d_model"},
      {[](ModelConfig& c) { c.heads = 3; }, "model.heads"},
      {[](ModelConfig& c) { c.d_ff = 0; }, "model.d_ff"},
      {[](ModelConfig& c) { c.encoder_layers = 0; }, "model.encoder_layers"},
      {[](ModelConfig& c) { c.decoder_layers = 0; }, "model.decoder_layers"},
      {[](ModelConfig& c) { c.dropout = 1.0; }, "model.dropout"},
      {[](ModelConfig& c) { c.norm = "mid"; }, "model.norm"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "model.norm_eps"},
      {[](ModelConfig& c) { c.activation = "swish"; }, "model.activation"},
      {[](ModelConfig& c) { c.embed_scale = "big"; }, "model.embed_scale"},
      {[](ModelConfig& c) { c.attention_length_scale = "log2"; }, "model.attention_length_scale"},
      {[](ModelConfig& c) { c.dtype = "int64"; }, "model.dtype"},
      {[](ModelConfig& c) { c.init_std = -1; }, "model.init_std"},
      {[](ModelConfig& c) { c.pe.scheme = "bogus"; }, "pe.scheme"},
  };
  for (const auto& k : cases) {
    ModelConfig c = tiny_model("seq2seq", "sinusoidal");
    k.edit(c);
    try {
      c.validate();
      FAIL() << k.key << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(k.key + ":", 0), 0u) << e.what();
    }
    EXPECT_THROW(Transformer m(c), Error) << k.key;
  }
  ModelConfig ok = tiny_model("decoder", "sinusoidal");
  ok.encoder_layers = 0;  // fine without an encoder
  EXPECT_NO_THROW(ok.validate());
  EXPECT_NO_THROW(tiny_model("seq2seq", "none").validate());
  // Wrong-arch calls are errors, not crashes.
  Transformer dec(ok);
  Tensor ids = Tensor::from_ints({1, 2, 3}, {1, 3});
  EXPECT_THROW(dec.forward_seq2seq(ids, Tensor(), ids, Tensor()), Error);
  EXPECT_THROW(dec.forward_decoder(ids, Tensor::ones({1, 4})), Error);
  Positions bad_pos = {0, 1};
  EXPECT_THROW(dec.forward_decoder(ids, Tensor(), &bad_pos), Error);
}

TEST(ModelTransformer, ExplicitPositionsReachThePE) {
  // Shifting every position by the same amount changes an absolute scheme's outputs but, with
  // explicit default positions, equals the implicit call.
  Transformer m(tiny_model("decoder", "sinusoidal"));
  Generator gen(81);
  Tensor ids = random_ids(2, 5, 11, gen);
  Positions p0 = {0, 1, 2, 3, 4}, p7 = {7, 8, 9, 10, 11};
  Tensor a = m.forward_decoder(ids, Tensor()), b = m.forward_decoder(ids, Tensor(), &p0);
  Tensor c = m.forward_decoder(ids, Tensor(), &p7);
  EXPECT_LE(max_abs_diff(a, b), 0.0);
  EXPECT_GT(max_abs_diff(a, c), 1e-6);
  // Cached decoding with explicit positions equals the full forward at those positions.
  NoGradGuard ng;
  DecoderCache cache = m.start_cache(2);
  Positions first = {7, 8}, rest = {9, 10, 11};
  Tensor s1 = m.decode_step(cache, slice(ids, 1, 0, 2).contiguous(), Tensor(), &first);
  Tensor s2 = m.decode_step(cache, slice(ids, 1, 2, 5).contiguous(), Tensor(), &rest);
  EXPECT_LE(max_abs_diff(concat({s1, s2}, 1), c), 1e-10);
}

TEST(ModelTraining, OverfitsOneBatchEveryScheme) {
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      ModelConfig c = tiny_model(arch, scheme, "float32");
      c.d_model = 16;
      c.d_ff = 32;
      c.init_std = 0.02;
      Transformer m(c);
      Generator gen(91);
      Batch b = make_batch(c.vocab, gen);
      AdamW opt(m.parameters(), 1e-2);
      double first = 0, last = 0;
      for (int step = 0; step < 60; ++step) {
        Tensor logits = arch == "seq2seq" ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                          : m.forward_decoder(b.tgt_in, b.tgt_mask);
        Tensor loss = cross_entropy(logits, b.tgt_out);
        opt.zero_grad();
        loss.backward();
        opt.step();
        (step == 0 ? first : last) = loss.item();
      }
      EXPECT_LT(last, 0.25 * first) << scheme << " " << arch << ": " << first << " -> " << last;
    }
  }
}

TEST(ModelInfo, ParameterTableSumsToTheTotal) {
  ModelConfig c = tiny_model("seq2seq", "learned");
  Transformer m(c);
  const std::string table = parameter_table(m);
  // Rows look like "    encoder.layers.0      1,234": name (indented by depth), then the count.
  std::map<std::string, int64_t> rows;
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::string name, count, digits;
    ls >> name >> count;
    for (char ch : count)
      if (ch != ',') digits += ch;
    if (name != "module") rows[name] = std::stoll(digits);
  }
  auto count_of = [&](const std::string& row) -> int64_t {
    EXPECT_EQ(rows.count(row), 1u) << row << "\n" << table;
    return rows.count(row) ? rows[row] : -1;
  };
  int64_t enc = 0, dec = 0, pe = 0;
  for (const auto& nt : m.named_parameters()) {
    if (nt.first.rfind("encoder.", 0) == 0) enc += nt.second.numel();
    if (nt.first.rfind("decoder.", 0) == 0) dec += nt.second.numel();
    if (nt.first.rfind("encoder.pe.", 0) == 0) pe += nt.second.numel();
  }
  EXPECT_EQ(count_of("total"), m.num_parameters());
  EXPECT_EQ(count_of("encoder"), enc);
  EXPECT_EQ(count_of("decoder"), dec);
  EXPECT_EQ(count_of("encoder.pe"), pe);
  EXPECT_EQ(count_of("lm_head"), 11 * 8);
  EXPECT_EQ(count_of("decoder.layers.0"), m.decoder->layers->at<DecoderLayer>(0).num_parameters());
  EXPECT_EQ(count_of("encoder") + count_of("decoder") + count_of("lm_head"), count_of("total"));
  const std::string info = model_info(m);
  EXPECT_NE(info.find("pe learned"), std::string::npos) << info;
  EXPECT_NE(info.find(table), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Position IDs per batch row (models/positions.h; docs/model.md, "Position IDs"). Every test loops
// over the registry: a scheme that refuses task positions (PEScheme::refuses_task_positions) must
// throw its one error line instead.

namespace {

// Three rows: the default, an offset with gaps, and coupled (repeating, non-monotone) IDs.
const Positions kSrcRows(3, 6, {0, 1, 2, 3, 4, 5, /**/ 4, 5, 7, 8, 10, 11, /**/ 1, 2, 3, 1, 2, 3});
const Positions kTgtRows(3, 7, {0, 1, 2, 3, 4, 5, 6, /**/ 7, 9, 10, 12, 13, 14, 15, /**/ 3, 2, 1, 4, 0, 5, 3});

// Rows 1 (two padded source tokens, one padded target token) and 2 (one padded source token).
struct RowBatch {
  Tensor src, src_mask, tgt, tgt_mask, tgt_out;
};
RowBatch row_batch(uint64_t seed) {
  Generator gen(seed);
  RowBatch b;
  b.src = random_ids(3, 6, 11, gen);
  b.src_mask = mask_from({1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 1, 0}, 3, 6);
  b.tgt = random_ids(3, 7, 11, gen);
  b.tgt_mask = mask_from({1, 1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 1, 1, 0, /**/ 1, 1, 1, 1, 1, 1, 1}, 3, 7);
  std::vector<int64_t> out = random_ids(3, 7, 11, gen).to_int_vector();
  out[13] = -100;  // the padded target
  b.tgt_out = Tensor::from_ints(out, {3, 7});
  return b;
}

// Rows [r, r + 1) of a [B, ...] tensor (undefined stays undefined).
Tensor row_of(const Tensor& t, int64_t r) {
  return t.defined() ? slice(t, 0, r, r + 1).contiguous() : Tensor();
}

// Logits of `b` (or its row r alone) at explicit positions.
Tensor run_at(Transformer& m, const RowBatch& b, const Positions& sp, const Positions& tp,
              int64_t r = -1) {
  auto sel = [&](const Tensor& t) { return r < 0 ? t : row_of(t, r); };
  if (m.is_seq2seq())
    return m.forward_seq2seq(sel(b.src), sel(b.src_mask), sel(b.tgt), sel(b.tgt_mask), &sp, &tp);
  return m.forward_decoder(sel(b.tgt), sel(b.tgt_mask), &tp);
}

// Every ID of every row plus that row's offset.
Positions shifted(const Positions& p, const std::vector<int64_t>& offset) {
  std::vector<int64_t> ids = p.ids;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t j = 0; j < p.len; ++j) ids[r * p.len + j] += offset[r % offset.size()];
  return Positions(p.rows, p.len, ids);
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelPositionIds, PositionsBlockOperations) {
  Positions a = {3, 4};
  EXPECT_TRUE(a.shared());
  EXPECT_EQ(a.at(5, 1), 4);  // row ignored when shared
  a.append(Positions(2, 1, {7, 9}));  // shared + per-row: broadcast
  EXPECT_EQ(a, Positions(2, 3, {3, 4, 7, 3, 4, 9}));
  a.append({10});
  EXPECT_EQ(a, Positions(2, 4, {3, 4, 7, 10, 3, 4, 9, 10}));
  EXPECT_EQ(a.columns(1, 3), Positions(2, 2, {4, 7, 4, 9}));
  EXPECT_EQ(a.select_rows({1}), Positions(1, 4, {3, 4, 9, 10}));
  EXPECT_EQ(a.row(1), (std::vector<int64_t>{3, 4, 9, 10}));
  EXPECT_THROW(Positions(2, 3, {1, 2, 3}), Error);
  EXPECT_THROW(a.columns(2, 5), Error);
}

TEST(ModelPositionIds, RowsEqualToASharedVectorGiveTheSharedResult) {
  const RowBatch b = row_batch(71);
  const Positions sp = {2, 3, 5, 6, 9, 11}, tp = {1, 2, 4, 5, 8, 9, 12};
  int refused = 0;
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      NoGradGuard ng;
      const std::string what = scheme + " " + arch;
      if (!pe_accepts_task_positions(m.config().pe)) {
        const std::string e = error_text([&] { run_at(m, b, sp.expanded(3), tp.expanded(3)); });
        EXPECT_NE(e.find("position IDs per batch row"), std::string::npos) << what << ": " << e;
        ++refused;
        continue;
      }
      EXPECT_LE(max_abs_diff(run_at(m, b, sp.expanded(3), tp.expanded(3)), run_at(m, b, sp, tp)),
                1e-12)
          << what;
      // The default positions as rows equal the implicit call.
      const Tensor implicit = m.is_seq2seq()
                                  ? m.forward_seq2seq(b.src, b.src_mask, b.tgt, b.tgt_mask)
                                  : m.forward_decoder(b.tgt, b.tgt_mask);
      EXPECT_LE(max_abs_diff(run_at(m, b, Positions(pelab::testing::iota(6)).expanded(3),
                                    Positions(pelab::testing::iota(7)).expanded(3)),
                             implicit),
                1e-12)
          << what;
    }
  }
  // The refusal is declared, not assumed: it is checked only where a scheme declares it.
  int declared = 0;
  for (const auto& scheme : pe_names()) declared += pe_scheme(scheme).accepts_task_positions ? 0 : 2;
  EXPECT_EQ(refused, declared);
}

TEST(ModelPositionIds, EachRowEqualsThatRowAloneWithItsIds) {
  const RowBatch b = row_batch(72);
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;  // checked above
      NoGradGuard ng;
      const Tensor all = run_at(m, b, kSrcRows, kTgtRows);
      for (int64_t r = 0; r < 3; ++r)
        EXPECT_LE(max_abs_diff(row_of(all, r),
                               run_at(m, b, kSrcRows.row(r), kTgtRows.row(r), r)),
                  1e-10)
            << scheme << " " << arch << " row " << r;
      // The IDs reach the scheme: rows 1 and 2 differ from the default positions.
      if (pe_scheme(scheme).encodes_positions) {
        EXPECT_GT(max_abs_diff(all, run_at(m, b, Positions(pelab::testing::iota(6)),
                                           Positions(pelab::testing::iota(7)))),
                  1e-6)
            << scheme << " " << arch;
      }
    }
  }
}

TEST(ModelPositionIds, TranslationInvariantSchemesStayInvariantPerRow) {
  // A scheme whose shared result does not change when every ID moves by a constant must not change
  // when each row's IDs move by their own constant; one that does change must see the moves.
  const RowBatch b = row_batch(73);
  std::set<bool> seen;
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;
      NoGradGuard ng;
      const Positions sp = kSrcRows.row(0), tp = kTgtRows.row(0);
      const bool invariant =
          max_abs_diff(run_at(m, b, sp, tp), run_at(m, b, shifted(sp, {5}), shifted(tp, {5}))) <= 1e-9;
      seen.insert(invariant);
      const std::vector<int64_t> offsets = {0, 3, 11};
      const double moved = max_abs_diff(run_at(m, b, kSrcRows, kTgtRows),
                                        run_at(m, b, shifted(kSrcRows, offsets), shifted(kTgtRows, offsets)));
      if (invariant)
        EXPECT_LE(moved, 1e-9) << scheme << " " << arch;
      else
        EXPECT_GT(moved, 1e-6) << scheme << " " << arch;
    }
  }
  EXPECT_EQ(seen.size(), 2u) << "the registry should hold both invariant and absolute schemes";
}

TEST(ModelPositionIds, CachedDecodingWithRowIdsEqualsTheFullForward) {
  const RowBatch b = row_batch(74);
  // The first two IDs of every row are 0, 1: the first step may give them shared.
  Positions tgt = kTgtRows;
  for (int64_t r = 0; r < 3; ++r) tgt.ids[r * 7] = 0, tgt.ids[r * 7 + 1] = 1;
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;
      m.eval();
      NoGradGuard ng;
      for (const bool shared_first : {false, true}) {
        Tensor full;
        DecoderCache cache;
        if (arch == "seq2seq") {
          Tensor mem = m.encode(b.src, b.src_mask, &kSrcRows);
          full = m.decode(b.tgt, Tensor(), mem, b.src_mask, &tgt, &kSrcRows);
          cache = m.start_cache(mem, b.src_mask, &kSrcRows);
        } else {
          full = m.forward_decoder(b.tgt, Tensor(), &tgt);
          cache = m.start_cache(3);
        }
        std::vector<Tensor> parts;
        for (auto [a, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 3}, {3, 7}}) {
          const Positions p = a == 0 && shared_first ? Positions({0, 1}) : tgt.columns(a, e);
          parts.push_back(m.decode_step(cache, slice(b.tgt, 1, a, e).contiguous(), Tensor(), &p));
        }
        EXPECT_EQ(cache.positions, tgt) << scheme << " " << arch;
        EXPECT_LE(max_abs_diff(concat(parts, 1), full), 1e-10)
            << scheme << " " << arch << (shared_first ? " (first step shared)" : "");
      }
    }
  }
}

TEST(ModelPositionIds, GreedyDecodingWithRowIdsDecodesEachRowAsAlone) {
  // Row IDs reach greedy decoding: cached equals uncached, and every row equals its decoding alone
  // with its IDs (decoder-only prompts of different lengths are decoded in groups).
  Generator gen(75);
  const Tensor src = random_ids(3, 6, 11, gen);
  const Tensor src_mask = mask_from({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0}, 3, 6);
  const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6}, {1, 7, 8, 9}, {1, 3, 3}};
  std::vector<int64_t> t;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 9; ++j) t.push_back(r == 1 ? 20 - 2 * j : (r + 1) * j % 7);
  const Positions tgt(3, 9, t);
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;
      const bool s2s = arch == "seq2seq";
      GreedyPositions gp{s2s ? kSrcRows : Positions(), tgt};
      const int64_t budget = s2s ? 9 : 6;  // decoder-only: 4 + 6 - 1 fed tokens at most
      auto run = [&](bool cache) {
        return s2s ? greedy_decode(m, src, src_mask, budget, cache, {0, 1, -1}, &gp)
                   : greedy_decode(m, prompts, budget, cache, {0, 1, -1}, &gp);
      };
      const GreedyResult a = run(true);
      EXPECT_EQ(a.tokens, run(false).tokens) << scheme << " " << arch;
      for (size_t r = 0; r < 3; ++r) {
        GreedyPositions alone{s2s ? Positions(kSrcRows.row(r)) : Positions(), tgt.row(r)};
        const GreedyResult one =
            s2s ? greedy_decode(m, row_of(src, r), row_of(src_mask, r), budget, true, {0, 1, -1}, &alone)
                : greedy_decode(m, {prompts[r]}, budget, true, {0, 1, -1}, &alone);
        EXPECT_EQ(one.tokens[0], a.tokens[r]) << scheme << " " << arch << " row " << r;
      }
    }
  }
}

TEST(ModelPositionIds, GradCheckThroughRowIdsEveryScheme) {
  const RowBatch b = row_batch(76);
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;
      auto loss = [&] { return cross_entropy(run_at(m, b, kSrcRows, kTgtRows), b.tgt_out); };
      grad_check(loss, model_targets(m), scheme + " " + arch + " row IDs", 3, 1);
    }
  }
}

TEST(ModelPositionIds, LearnedTableRefusesAnIdPastItsRows) {
  for (const std::string arch : {"seq2seq", "decoder"}) {
    ModelConfig c = tiny_model(arch, "learned");
    c.pe.set("max_positions", 16);
    EXPECT_EQ(pe_max_positions(c.pe), 16);
    Transformer m(c);
    const RowBatch b = row_batch(77);
    NoGradGuard ng;
    const std::string e =
        error_text([&] { run_at(m, b, kSrcRows, shifted(kTgtRows, {0, 1, 0})); });  // row 1: 16
    EXPECT_NE(e.find("learned positional encoding: position 16 >= max_positions 16"), std::string::npos)
        << arch << ": " << e;
    EXPECT_NO_THROW(run_at(m, b, kSrcRows, kTgtRows));  // 15 is the last row
  }
}

TEST(ModelPositionIds, DynamicNtkRowsUseTheirOwnLengths) {
  // RoPE's dynamic NTK (evaluation) takes each row's length from its own real IDs: with per-row
  // IDs every row still equals that row alone, and the rows' lengths differ (15 vs 6).
  const RowBatch b = row_batch(78);
  for (const std::string arch : {"seq2seq", "decoder"}) {
    ModelConfig c = tiny_model(arch, "rope");
    c.pe.set("rope_scaling", "dynamic_ntk");
    c.pe.set("rope_scaling_factor", 2.0);
    c.pe.set("rope_train_length", 4);
    Transformer m(c);
    m.eval();
    NoGradGuard ng;
    const Tensor all = run_at(m, b, kSrcRows, kTgtRows);
    for (int64_t r = 0; r < 3; ++r)
      EXPECT_LE(max_abs_diff(row_of(all, r), run_at(m, b, kSrcRows.row(r), kTgtRows.row(r), r)), 1e-10)
          << arch << " row " << r;
    // Not vacuous: the scaling changes the result.
    m.train();
    EXPECT_GT(max_abs_diff(all, run_at(m, b, kSrcRows, kTgtRows)), 1e-6) << arch;
  }
}

TEST(ModelPositionIds, PaddingIdsDoNotChangeRealTokens) {
  // Row 1's padded tokens (source 4, 5; target 6) get other IDs: no real token's logits change.
  const RowBatch b = row_batch(79);
  Positions sp = kSrcRows, tp = kTgtRows;
  sp.ids[6 + 4] = 0, sp.ids[6 + 5] = 30, tp.ids[7 + 6] = 2;
  const Tensor real = reshape(b.tgt_mask, {3, 7, 1});
  for (const auto& scheme : pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      Transformer m(tiny_model(arch, scheme));
      if (!pe_accepts_task_positions(m.config().pe)) continue;
      NoGradGuard ng;
      const Tensor before = run_at(m, b, kSrcRows, kTgtRows), after = run_at(m, b, sp, tp);
      EXPECT_LE(max_abs_diff(mul(before, real), mul(after, real)), 1e-12) << scheme << " " << arch;
      // Not vacuous: the padded target token's own logits see its new ID.
      if (pe_scheme(scheme).encodes_positions) {
        EXPECT_GT(max_abs_diff(before, after), 1e-9) << scheme << " " << arch;
      }
    }
  }
}
