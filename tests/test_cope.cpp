// pelab — CoPE (models/pe/cope.cpp, docs/model.md): a case computed by hand, the clip at p_max in
// both directions, the causal and padding masks, cached queries against the full computation, the
// term against a naive per-element reference, float64 finite differences through the gates, the
// hook contract (attention calls keyed_score_term; the default forwards to score_term), and the
// config surface (`--set pe.scheme=cope` trains both architectures; a bad pe.cope_p_max is one error
// line). The registry-driven tests (test_model.cpp, test_pe.cpp, test_golden.cpp) cover CoPE too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/pe_test_util.h"
#include "models/attention.h"
#include "models/pe/pe.h"
#include "pelab/pelab.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "train/config.h"

using namespace pelab;
using namespace pelab::models;
using pelab::testing::quote;
using pelab::testing::slurp;
namespace fs = std::filesystem;

namespace {

using pelab::testing::stack_of;

std::shared_ptr<PositionalEncoding> build_cope(StackKind kind, int64_t p_max, int64_t layers,
                                               int64_t d_model, int64_t heads) {
  PEConfig cfg;
  cfg.scheme = "cope";
  cfg.set("cope_p_max", p_max);
  Generator g(5);
  return make_pe(cfg, stack_of(kind, layers, d_model, heads), g);
}

using pelab::testing::site_of;

using pelab::testing::iota;

Tensor randn(const Shape& shape, uint64_t seed, double std = 1.0) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape, DType::Float64);
  init::normal_(t, 0.0, std, g);
  return t;
}

// Writes `v` into the parameter `t` (same number of elements).
void set_param(Tensor t, const std::vector<double>& v) {
  ASSERT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<double>());
}

Tensor causal_mask(int64_t Lq, int64_t Lk) {
  return attention_mask(Tensor(), Lq, Lk, true, DType::Float64, Device::cpu());
}

// The naive reference: per (b, h, i, j) the gates, the signed count, the clip, the interpolated
// embedding as a vector and its dot product with q (test only; O(L³·dh)).
std::vector<double> naive_term(const Tensor& q, const Tensor& k, const Tensor& table,
                               const std::vector<int64_t>& qp, const std::vector<int64_t>& kp,
                               const std::vector<double>& key_ok /* [B, Lk] */, bool bidir,
                               int64_t p_max) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), dh = q.size(3);
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector(), ev = table.to_vector();
  const double sc = 1.0 / std::sqrt(double(dh));
  const int64_t offset = bidir ? p_max : 0;
  std::vector<double> out(static_cast<size_t>(B * H * Lq * Lk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const double* qi = &qv[((b * H + h) * Lq + i) * dh];
        auto gate = [&](int64_t t) {
          if (key_ok[b * Lk + t] == 0.0) return 0.0;
          double d = 0;
          for (int64_t x = 0; x < dh; ++x) d += qi[x] * kv[((b * H + h) * Lk + t) * dh + x];
          return 1.0 / (1.0 + std::exp(-d * sc));
        };
        for (int64_t j = 0; j < Lk; ++j) {
          if (!bidir && kp[j] > qp[i]) continue;  // masked by the attention; the term is unused
          double s = 0;
          for (int64_t t = 0; t < Lk; ++t) {
            const bool between = kp[j] <= qp[i] ? (kp[t] >= kp[j] && kp[t] <= qp[i])
                                                : (kp[t] >= qp[i] && kp[t] <= kp[j]);
            if (between) s += gate(t);
          }
          if (kp[j] > qp[i]) s = -s;
          s = std::min(std::max(s, -double(p_max)), double(p_max));
          const double u = s + offset;
          const int64_t fl = static_cast<int64_t>(std::floor(u));
          const int64_t cl = std::min<int64_t>(fl + 1, table.size(0) - 1);
          const double w = u - fl;
          double dot = 0;
          for (int64_t x = 0; x < dh; ++x) dot += qi[x] * (w * ev[cl * dh + x] + (1 - w) * ev[fl * dh + x]);
          out[((b * H + h) * Lq + i) * Lk + j] = dot * sc;
        }
      }
  return out;
}

}  // namespace

// L = 3, one head, dh = 2, q ⟂ k so every gate is σ(0) = 1/2; e[n] = (n², −n). By hand:
//   counts p_ij = (i − j + 1)/2:  p_00 = .5;  p_10 = 1, p_11 = .5;  p_20 = 1.5, p_21 = 1, p_22 = .5
//   e[.5] = (.5, −.5), e[1] = (1, −1), e[1.5] = (.5·1 + .5·4, −1.5) = (2.5, −1.5)
//   q_i = (a_i, 0) with a = (1, 2, −3): term_ij = a_i · e[p_ij]_0 / √2.
TEST(CoPE, HandComputedCaseL3) {
  auto pe = build_cope(StackKind::Decoder, 4, 1, 2, 1);
  Tensor e = pe->parameter("layers.0.pos_emb");
  ASSERT_EQ(e.shape(), (Shape{5, 2}));
  set_param(e, {0, 0, 1, -1, 4, -2, 9, -3, 16, -4});
  const Tensor q = Tensor::from_vector({1, 0, 2, 0, -3, 0}, {1, 1, 3, 2}, DType::Float64);
  const Tensor k = Tensor::from_vector({0, 5, 0, -1, 0, 7}, {1, 1, 3, 2}, DType::Float64);
  const std::vector<int64_t> pos = iota(3);
  const Tensor t = pe->keyed_score_term(q, k, causal_mask(3, 3),
                                        site_of(AttnKind::DecoderSelf, pos, pos, true));
  ASSERT_EQ(t.shape(), (Shape{1, 1, 3, 3}));
  const std::vector<double> v = t.to_vector();
  const double r2 = std::sqrt(2.0);
  const double want[3][3] = {{1 * 0.5 / r2, 0, 0}, {2 * 1.0 / r2, 2 * 0.5 / r2, 0},
                             {-3 * 2.5 / r2, -3 * 1.0 / r2, -3 * 0.5 / r2}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j <= i; ++j) EXPECT_NEAR(v[i * 3 + j], want[i][j], 1e-14) << i << " " << j;
  // score_term alone (no keys) has nothing to count: CoPE lives in keyed_score_term only.
  EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::DecoderSelf, pos, pos, true)).defined());
  EXPECT_FALSE(pe->keyed_score_term(q, k, Tensor(), site_of(AttnKind::Cross, pos, pos, false))
                   .defined());
}

// The same gates in an encoder stack count in both directions with a sign: query 0 sees key 1 at
// −(g_00 + g_01) = −1 and key 2 at −1.5; query 2 sees key 0 at +1.5. Rows are n = −p..p.
TEST(CoPE, EncoderCountsBothDirectionsWithASign) {
  const int64_t p = 4;
  auto pe = build_cope(StackKind::Encoder, p, 1, 2, 1);
  Tensor e = pe->parameter("layers.0.pos_emb");
  ASSERT_EQ(e.shape(), (Shape{2 * p + 1, 2}));
  std::vector<double> ev;
  for (int64_t n = -p; n <= p; ++n) ev.insert(ev.end(), {double(n * n * n), 0.0});  // e[n]_0 = n³
  set_param(e, ev);
  const Tensor q = Tensor::from_vector({1, 0, 1, 0, 1, 0}, {1, 1, 3, 2}, DType::Float64);
  const Tensor k = Tensor::from_vector({0, 1, 0, 2, 0, 3}, {1, 1, 3, 2}, DType::Float64);
  const std::vector<int64_t> pos = iota(3);
  const std::vector<double> v =
      pe->keyed_score_term(q, k, Tensor(), site_of(AttnKind::EncoderSelf, pos, pos, false)).to_vector();
  // interpolated n³ at the signed counts: s = ±.5 -> ±.5, ±1 -> ±1, ±1.5 -> ±(1 + 8)/2 = ±4.5
  const double r2 = std::sqrt(2.0);
  const double want[3][3] = {{0.5, -1, -4.5}, {1, 0.5, -1}, {4.5, 1, 0.5}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(v[i * 3 + j] * r2, want[i][j], 1e-13) << i << " " << j;
}

// Counts past p_max use e[p_max] (both signs in the encoder); the gradient there does not reach
// the gates (the clipped count is constant).
TEST(CoPE, CountsClipAtPMax) {
  const std::vector<int64_t> pos = iota(6);
  const Tensor q = Tensor::from_vector(std::vector<double>(6 * 2, 0.0), {1, 1, 6, 2}, DType::Float64) +
                   Tensor::from_vector({1, 0}, {2}, DType::Float64);  // every q_i = (1, 0)
  const Tensor k = Tensor::from_vector(std::vector<double>(6 * 2, 0.0), {1, 1, 6, 2}, DType::Float64) +
                   Tensor::from_vector({0, 1}, {2}, DType::Float64);  // gates 1/2
  for (const bool enc : {false, true}) {
    const int64_t p = 1;
    auto pe = build_cope(enc ? StackKind::Encoder : StackKind::Decoder, p, 1, 2, 1);
    Tensor e = pe->parameter("layers.0.pos_emb");
    std::vector<double> ev;
    for (int64_t n = 0; n < e.size(0); ++n) ev.insert(ev.end(), {double(3 * n + 1), 0.0});
    set_param(e, ev);
    const AttnSite site = site_of(enc ? AttnKind::EncoderSelf : AttnKind::DecoderSelf, pos, pos, !enc);
    const std::vector<double> v =
        pe->keyed_score_term(q, k, enc ? Tensor() : causal_mask(6, 6), site).to_vector();
    const double top = (3 * (enc ? 2 * p : p) + 1) / std::sqrt(2.0);  // q·e[p_max] / √dh
    const double bottom = 1 / std::sqrt(2.0);                         // q·e[−p_max] (encoder row 0)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        const int64_t before = i - j + 1, after = j - i + 1;  // keys counted, each 1/2
        if (j <= i && before / 2.0 >= p) {
          EXPECT_DOUBLE_EQ(v[i * 6 + j], top) << enc << " " << i << j;
        }
        if (j <= i && before / 2.0 < p) {
          EXPECT_LT(v[i * 6 + j], top) << enc << " " << i << j;
        }
        if (enc && j > i && after / 2.0 >= p) {
          EXPECT_DOUBLE_EQ(v[i * 6 + j], bottom) << i << j;
        }
      }
  }
}

// Keys the attention blocks are not counted: a query's term on the keys at or before it does not
// change when the keys after it change (causal), and a padded key's gate is 0.
TEST(CoPE, CausalAndPaddingMasks) {
  auto pe = build_cope(StackKind::Decoder, 8, 1, 8, 2);
  set_param(pe->parameter("layers.0.pos_emb"), randn({9, 4}, 3).to_vector());
  const std::vector<int64_t> pos = iota(5);
  const AttnSite site = site_of(AttnKind::DecoderSelf, pos, pos, true);
  const Tensor q = randn({1, 2, 5, 4}, 1, 2.0), k = randn({1, 2, 5, 4}, 2, 2.0);
  Tensor k2 = k.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 4; ++d) k2.data<double>()[(h * 5 + 4) * 4 + d] += 3.0;  // key 4 only
  const std::vector<double> a = pe->keyed_score_term(q, k, causal_mask(5, 5), site).to_vector();
  const std::vector<double> b = pe->keyed_score_term(q, k2, causal_mask(5, 5), site).to_vector();
  double unchanged = 0, changed = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const double d = std::fabs(a[(h * 5 + i) * 5 + j] - b[(h * 5 + i) * 5 + j]);
        (i < 4 ? unchanged : changed) = std::max(i < 4 ? unchanged : changed, d);
      }
  EXPECT_EQ(unchanged, 0.0);
  EXPECT_GT(changed, 1e-6);  // query 4 counts key 4, so the check above is not vacuous
  // A padded key (key 2 of row 0 blocked, so it lies between real keys and later queries): its
  // gate is 0, as in the naive reference with that gate zeroed.
  const Tensor q2 = randn({2, 2, 5, 4}, 4, 2.0), k3 = randn({2, 2, 5, 4}, 5, 2.0);
  const std::vector<double> ok = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
  const Tensor blocked =
      attention_mask(Tensor::from_vector(ok, {2, 5}, DType::Float64), 5, 5, true, DType::Float64,
                     Device::cpu());
  const std::vector<double> got = pe->keyed_score_term(q2, k3, blocked, site).to_vector();
  const std::vector<double> want =
      naive_term(q2, k3, pe->parameter("layers.0.pos_emb"), pos, pos, ok, false, 8);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          if (b == 0 && j == 2) continue;  // the padded key itself: blocked by the attention
          const size_t n = static_cast<size_t>(((b * 2 + h) * 5 + i) * 5 + j);
          EXPECT_NEAR(got[n], want[n], 1e-12) << b << h << i << j;
        }
}

// Random q, k, tables and positions (offset, cached queries, gaps as randomized positions give)
// against the naive reference, decoder and encoder; cached queries equal the full computation's
// last rows (the counts of a new query run over every cached key).
TEST(CoPE, MatchesNaiveReferenceAndCachedQueries) {
  for (const bool enc : {false, true}) {
    const int64_t p = 3;  // small, so some counts clip
    auto pe = build_cope(enc ? StackKind::Encoder : StackKind::Decoder, p, 2, 12, 3);
    Tensor e = pe->parameter("layers.1.pos_emb");
    set_param(e, randn(e.shape(), 9).to_vector());
    const std::vector<int64_t> kp = {2, 3, 5, 8, 9, 13, 14};
    const std::vector<int64_t> qp = enc ? kp : std::vector<int64_t>{9, 13, 14};
    const int64_t Lq = qp.size(), Lk = kp.size();
    const Tensor q = randn({2, 3, Lq, 4}, 11, 3.0), k = randn({2, 3, Lk, 4}, 12, 3.0);
    const AttnSite site = site_of(enc ? AttnKind::EncoderSelf : AttnKind::DecoderSelf, qp, kp, !enc, 1);
    const Tensor blocked = enc ? Tensor() : causal_mask(Lq, Lk);
    const std::vector<double> got = pe->keyed_score_term(q, k, blocked, site).to_vector();
    const std::vector<double> want =
        naive_term(q, k, e, qp, kp, std::vector<double>(2 * Lk, 1.0), enc, p);
    for (size_t n = 0; n < got.size(); ++n) {
      const int64_t j = n % Lk, i = (n / Lk) % Lq;
      if (!enc && kp[j] > qp[i]) continue;
      EXPECT_NEAR(got[n], want[n], 1e-12) << enc << " at " << n;
    }
    if (enc) continue;
    // the same 3 queries as the last rows of the full causal computation over the 7 keys
    const Tensor qfull = concat({randn({2, 3, Lk - Lq, 4}, 13), q}, 2);
    const std::vector<double> full =
        pe->keyed_score_term(qfull, k, causal_mask(Lk, Lk), site_of(AttnKind::DecoderSelf, kp, kp, true, 1))
            .to_vector();
    for (int64_t bh = 0; bh < 6; ++bh)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j)
          if (kp[j] <= qp[i]) {
            EXPECT_NEAR(got[(bh * Lq + i) * Lk + j], full[(bh * Lk + Lk - Lq + i) * Lk + j], 1e-13);
          }
  }
}

// Float64 central differences of Σ term ⊙ W with respect to q, k and the table, with large tables
// and a small p_max so that the gate path (through p − ⌊p⌋) and the clip both matter.
TEST(CoPE, GradientsMatchFiniteDifferences) {
  for (const bool enc : {false, true}) {
    auto pe = build_cope(enc ? StackKind::Encoder : StackKind::Decoder, 2, 1, 6, 2);
    Tensor e = pe->parameter("layers.0.pos_emb");
    set_param(e, randn(e.shape(), 21).to_vector());
    const std::vector<int64_t> pos = iota(5);
    const AttnSite site = site_of(enc ? AttnKind::EncoderSelf : AttnKind::DecoderSelf, pos, pos, !enc);
    const Tensor blocked = enc ? Tensor() : causal_mask(5, 5);
    Tensor q = randn({2, 2, 5, 3}, 22, 1.5).set_requires_grad(true);
    Tensor k = randn({2, 2, 5, 3}, 23, 1.5).set_requires_grad(true);
    Tensor w = randn({2, 2, 5, 5}, 24);
    if (!enc) w = masked_fill(w, blocked, 0.0);  // blocked entries are never used
    auto loss = [&] { return sum(mul(pe->keyed_score_term(q, k, blocked, site), w)); };
    for (Tensor t : {q, k, e}) t.zero_grad();
    loss().backward();
    int nonzero = 0;
    for (Tensor t : {q, k, e}) {
      const std::vector<double> ga = t.grad().to_vector();
      double* d = t.data<double>();
      for (int64_t n = 0; n < t.numel(); ++n) {
        NoGradGuard ng;
        const double orig = d[n], eps = 1e-6;
        d[n] = orig + eps;
        const double lp = loss().item();
        d[n] = orig - eps;
        const double lm = loss().item();
        d[n] = orig;
        const double fd = (lp - lm) / (2 * eps);
        EXPECT_NEAR(ga[n], fd, 1e-6 * std::max(1.0, std::fabs(fd))) << enc << " element " << n;
        nonzero += std::fabs(ga[n]) > 1e-3;
      }
    }
    EXPECT_GT(nonzero, 20) << enc;
  }
}

// Attention passes the keys and its mask to keyed_score_term; a scheme overriding only score_term
// gets the same term through the default (ALiBi here: its bias equals what attention adds).
TEST(CoPE, KeyedHookDefaultsToScoreTerm) {
  PEConfig cfg;
  cfg.scheme = "alibi";
  Generator g(1);
  auto pe = make_pe(cfg, stack_of(StackKind::Decoder, 1, 8, 2), g);
  const std::vector<int64_t> pos = iota(4);
  const AttnSite site = site_of(AttnKind::DecoderSelf, pos, pos, true);
  const Tensor q = randn({1, 2, 4, 4}, 1), k = randn({1, 2, 4, 4}, 2);
  EXPECT_EQ(pe->keyed_score_term(q, k, causal_mask(4, 4), site).to_vector(),
            pe->score_term(q, site).to_vector());
}

// ---------------------------------------------------------------- config surface

class CoPECli : public pelab::testing::TempDirTest {
 protected:
  CoPECli() : TempDirTest("pelab_cope") {}
  pelab::testing::CommandResult pelab(const std::string& args) {
    return pelab::testing::run_captured(quote(pelab::testing::pelab_binary()) + " " + args,
                                        dir_ / "out.txt", dir_ / "err.txt");
  }
};

TEST_F(CoPECli, SetSchemeCopeTrainsBothArchitectures) {
  const std::string cfg = write("c.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  for (const std::string arch : {"seq2seq", "decoder"}) {
    const auto r = pelab("train " + quote(cfg) + " --set pe.scheme=cope --set pe.cope_p_max=3" +
                         " --set model.arch=" + arch + " --set task.formulation=" + arch +
                         " --set train.run_name=" + arch + " --progress none");
    EXPECT_EQ(r.rc, 0) << arch << "\n" << r.err;
    EXPECT_TRUE(fs::exists(dir_ / "runs" / arch / "eval.json")) << arch;
    const std::string used = slurp(dir_ / "runs" / arch / "config.yaml");
    EXPECT_NE(used.find("cope_p_max: 3"), std::string::npos) << used;
    // plot-pe draws the trained term through keyed_score_term (score_term alone has none): the
    // decoder's, and in seq2seq the encoder's with keys on both sides of the middle query.
    const fs::path out = dir_ / ("pe_" + arch);
    const auto p = pelab("plot-pe --run " + quote((dir_ / "runs" / arch).string()) + " --out " +
                         quote(out.string()) + " --run-only --no-plots");
    EXPECT_EQ(p.rc, 0) << p.err;
    for (const std::string stack : {"decoder", "encoder"}) {
      if (stack == "encoder" && arch == "decoder") continue;
      const std::string csv = slurp(out / ("cope_" + stack + "_bias.csv"));
      EXPECT_EQ(csv.rfind("relative_position,head1,head2\n", 0), 0u) << stack << ": " << csv;
      EXPECT_EQ(csv.find("nan"), std::string::npos) << csv;
      if (stack == "encoder") { EXPECT_NE(csv.find("\n1,"), std::string::npos) << csv; }
    }
  }
}

TEST_F(CoPECli, BadPMaxIsOneErrorLineNamingTheKey) {
  const std::string cfg =
      write("c.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs", "pe:\n  scheme: cope\n  cope_p_max: 0\n"));
  auto r = pelab("train " + quote(cfg) + " --progress none");
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find("c.yaml:"), std::string::npos) << r.err;  // file:line of the bad value
  EXPECT_NE(r.err.find("pe.cope_p_max"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1, inf)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
  // the same through --set, and a mistyped key gets a did-you-mean
  r = pelab("train " + quote(write("ok.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"))) +
            " --set pe.scheme=cope --set pe.cope_p_max=-2 --progress none");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("pe.cope_p_max"), std::string::npos) << r.err;
  r = pelab("train " + quote((dir_ / "ok.yaml").string()) + " --set pe.scheme=cope --set pe.cope_pmax=8");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("pe.cope_p_max"), std::string::npos) << r.err;
}

// Randomised positions keep the order, which is all CoPE reads: the combination is refused (one
// line, pointing at the file's lines) instead of silently equalling the plain run.
TEST_F(CoPECli, RandomizedPositionsAreRefused) {
  const std::string cfg = write(
      "c.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs", "pe:\n  scheme: cope\n"
                                                             "  randomized_positions: true\n"));
  const auto r = pelab("train " + quote(cfg) + " --progress none");
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find("pe.randomized_positions has no effect with pe.scheme cope"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("c.yaml:"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}
