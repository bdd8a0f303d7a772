// pelab — hand-computed values of the schemes added as one file each under issue 18 item 5: KERPLE
// (models/pe/kerple.cpp), FIRE (fire.cpp) and xPos (xpos.cpp), and one bad-input test per scheme's
// keys. Gradients, cached decoding, causality, padding, float32 and the PyTorch goldens of these
// schemes come from the every-scheme tests (test_model.cpp, test_pe.cpp, test_golden.cpp, ...),
// which loop over the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "tests/pe_test_util.h"
#include "models/pe/pe.h"
#include "pelab/autograd.h"
#include "pelab/host_reads.h"
#include "pelab/pelab.h"
#include "train/config.h"

using namespace pelab;
using namespace pelab::models;

namespace {

// A float64 decoder stack (pe_test_util.h's stack_of).
StackInfo stack(int64_t d_model, int64_t heads, int64_t layers = 1) {
  return pelab::testing::stack_of(StackKind::Decoder, layers, d_model, heads);
}

std::shared_ptr<PositionalEncoding> build(const PEConfig& cfg, const StackInfo& s) {
  Generator g(3);
  return make_pe(cfg, s, g);
}

using pelab::testing::iota;
using pelab::testing::site_of;

// Writes v into a float64 parameter (row-major).
void set_param(PositionalEncoding& pe, const std::string& name, const std::vector<double>& v) {
  Tensor p = pe.parameter(name);
  ASSERT_EQ(p.numel(), static_cast<int64_t>(v.size())) << name;
  ASSERT_EQ(p.dtype(), DType::Float64);
  double* d = p.data<double>();
  for (size_t i = 0; i < v.size(); ++i) d[i] = v[i];
}

// The first ConfigError of loading `yaml`, "" when it loads.
std::string load_error(const std::string& yaml) {
  try {
    load_config_string(yaml, "c.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

double softplus(double x) { return std::log1p(std::exp(x)); }

}  // namespace

// ---------------------------------------------------------------- KERPLE

// A 3×3 bias with r1 = 2, r2 = 0.5 (the initial values): causal −r1·log(1 + r2·(i − j)) at and
// before the query and 0 after it, encoder −r1·log(1 + r2·|i − j|); no term in cross-attention.
TEST(NewSchemesKerple, LogBiasByHand) {
  PEConfig cfg;
  cfg.scheme = "kerple";
  cfg.set("kerple_r1_init", 2.0);
  cfg.set("kerple_r2_init", 0.5);
  cfg.set("kerple_init_spread", 0.0);  // every head at the initial values
  auto pe = build(cfg, stack(4, 2));
  EXPECT_EQ(pe->parameter("r1_raw").shape(), (Shape{1, 2}));
  const std::vector<int64_t> pos = {0, 1, 2};
  const Tensor q = Tensor::zeros({1, 2, 3, 2}, DType::Float64);
  const std::vector<double> causal = pe->score_term(q, site_of(AttnKind::DecoderSelf, pos, pos, true)).to_vector();
  const std::vector<double> enc = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false)).to_vector();
  ASSERT_EQ(causal.size(), 18u);  // [1, 2, 3, 3]: one head's 3×3 after the other
  const double l1 = -2.0 * std::log(1.5), l2 = -2.0 * std::log(2.0);
  const std::vector<double> want_causal = {0, 0, 0, l1, 0, 0, l2, l1, 0};
  const std::vector<double> want_enc = {0, l1, l2, l1, 0, l1, l2, l1, 0};
  for (int h = 0; h < 2; ++h)
    for (int e = 0; e < 9; ++e) {
      EXPECT_NEAR(causal[h * 9 + e], want_causal[e], 1e-12) << "causal head " << h << " at " << e;
      EXPECT_NEAR(enc[h * 9 + e], want_enc[e], 1e-12) << "encoder head " << h << " at " << e;
    }
  EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::Cross, pos, pos, false)).defined());
  // Positions are absolute (a cached decoding step): query 5 against keys 3, 4, 5.
  const std::vector<int64_t> qp = {5}, kp = {3, 4, 5};
  const std::vector<double> step =
      pe->score_term(Tensor::zeros({1, 2, 1, 2}, DType::Float64), site_of(AttnKind::DecoderSelf, qp, kp, true))
          .to_vector();
  EXPECT_NEAR(step[0], l2, 1e-12);
  EXPECT_NEAR(step[1], l1, 1e-12);
  EXPECT_NEAR(step[2], 0.0, 1e-12);
  // The parameters are raw: r1 = softplus(r1_raw), r2 = softplus(r2_raw) (per head, per layer).
  set_param(*pe, "r1_raw", {0.0, 1.0});
  set_param(*pe, "r2_raw", {-1.0, 2.0});
  const std::vector<double> raw = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false)).to_vector();
  EXPECT_NEAR(raw[2], -softplus(0.0) * std::log(1 + 2 * softplus(-1.0)), 1e-12);   // head 0, d = 2
  EXPECT_NEAR(raw[9 + 1], -softplus(1.0) * std::log(1 + softplus(2.0)), 1e-12);    // head 1, d = 1
}

// Power variant: −r1·d^r2 with r2 = 2·sigmoid(r2_raw) in (0, 2); layer 1 has its own parameters.
TEST(NewSchemesKerple, PowerBiasByHandPerLayer) {
  PEConfig cfg;
  cfg.scheme = "kerple";
  cfg.set("kerple_variant", "power");
  cfg.set("kerple_r1_init", 1.5);
  cfg.set("kerple_r2_init", 0.5);
  cfg.set("kerple_init_spread", 0.0);
  auto pe = build(cfg, stack(2, 1, 2));
  const std::vector<int64_t> pos = {0, 1, 2};
  const Tensor q = Tensor::zeros({1, 1, 3, 2}, DType::Float64);
  std::vector<double> b = pe->score_term(q, site_of(AttnKind::DecoderSelf, pos, pos, true, 1)).to_vector();
  const std::vector<double> want = {0, 0, 0, -1.5, 0, 0, -1.5 * std::sqrt(2.0), -1.5, 0};
  for (int e = 0; e < 9; ++e) EXPECT_NEAR(b[e], want[e], 1e-12) << e;
  set_param(*pe, "r1_raw", {0.0, 0.0});  // r1 = log 2 in both layers
  set_param(*pe, "r2_raw", {0.0, std::log(3.0)});  // layer 0: r2 = 1; layer 1: r2 = 2·3/4 = 1.5
  b = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false, 1)).to_vector();
  EXPECT_NEAR(b[2], -std::log(2.0) * std::pow(2.0, 1.5), 1e-12);
  b = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false, 0)).to_vector();
  EXPECT_NEAR(b[2], -std::log(2.0) * 2.0, 1e-12);
}

TEST(NewSchemesKerple, BadKeysAreOneErrorNamingTheKey) {
  EXPECT_EQ(load_error("pe:\n  scheme: kerple\n  kerple_r1_init: 0\n"),
            "c.yaml:3: pe.kerple_r1_init: 0 is out of range (0, inf)");
  EXPECT_EQ(load_error("pe:\n  scheme: kerple\n  kerple_variant: cubic\n"),
            "c.yaml:3: pe.kerple_variant: 'cubic' is not one of log, power");
  const std::string e =
      load_error("pe:\n  scheme: kerple\n  kerple_variant: power\n  kerple_r2_init: 2.0\n");
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find("pe.kerple_r2_init (2) times 1 + pe.kerple_init_spread (0.5) must be < 2 with "
                   "pe.kerple_variant power"),
            std::string::npos)
      << e;
  EXPECT_EQ(load_error("pe:\n  scheme: kerple\n  kerple_r2_init: 2.0\n"), "");  // fine for log
  EXPECT_EQ(load_error("pe:\n  scheme: kerple\n  kerple_init_spread: 1\n"),
            "c.yaml:3: pe.kerple_init_spread: 1 is out of range [0, 1)");
}

// The default initial values differ per head and layer (the paper's code draws each head's pair
// at random): r = init·(1 + spread·u), u in [−1, 1), so every r lies within init·(1 ± spread).
TEST(NewSchemesKerple, HeadsStartAtDifferentScales) {
  for (const char* variant : {"log", "power"}) {
    SCOPED_TRACE(variant);
    PEConfig cfg;
    cfg.scheme = "kerple";
    cfg.set("kerple_variant", variant);
    auto pe = build(cfg, stack(8, 4, 2));
    const std::vector<double> r1 = pe->parameter("r1_raw").to_vector(), r2 = pe->parameter("r2_raw").to_vector();
    ASSERT_EQ(r1.size(), 8u);
    std::set<double> distinct;
    for (size_t e = 0; e < r1.size(); ++e) {
      const double a = softplus(r1[e]);
      const double b = std::string(variant) == "power" ? 2.0 / (1.0 + std::exp(-r2[e])) : softplus(r2[e]);
      EXPECT_GE(a, 0.5 - 1e-12);
      EXPECT_LT(a, 1.5 + 1e-12);
      EXPECT_GE(b, 0.5 - 1e-12);
      EXPECT_LT(b, 1.5 + 1e-12);
      distinct.insert(a);
    }
    EXPECT_EQ(distinct.size(), 8u);
  }
}

// ---------------------------------------------------------------- FIRE

// A hand-set MLP (width 2, 2 heads), c = 1, L = 2: bias_h(i, j) = f(log(1 + d) / (log(1 + max(2,
// i)) + 1e-6))_h with f(x) = W2 relu(W1 x + b1) + b2; 0 after the query in causal attention.
TEST(NewSchemesFire, BiasOfAHandSetMlp) {
  PEConfig cfg;
  cfg.scheme = "fire";
  cfg.set("fire_mlp_width", 2);
  cfg.set("fire_threshold", 2.0);
  auto pe = build(cfg, stack(4, 2));
  set_param(*pe, "w1", {1.0, -1.0});
  set_param(*pe, "b1", {0.0, 0.5});
  set_param(*pe, "w2", {1.0, 2.0, 0.5, -1.0});  // [H, W]
  set_param(*pe, "b2", {0.1, -0.2});
  set_param(*pe, "c", {1.0});
  EXPECT_EQ(pe->parameter("threshold_scale").to_vector(), (std::vector<double>{1.0}));
  auto f = [](double x, int h) {
    const double h0 = std::max(x, 0.0), h1 = std::max(-x + 0.5, 0.0);
    return h == 0 ? h0 + 2 * h1 + 0.1 : 0.5 * h0 - h1 - 0.2;
  };
  auto x_of = [](double d, double i) { return std::log1p(d) / (std::log1p(std::max(2.0, i)) + 1e-6); };
  const std::vector<int64_t> pos = {0, 1, 2, 3};
  const Tensor q = Tensor::zeros({1, 2, 4, 2}, DType::Float64);
  const std::vector<double> causal = pe->score_term(q, site_of(AttnKind::DecoderSelf, pos, pos, true)).to_vector();
  const std::vector<double> enc = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false)).to_vector();
  ASSERT_EQ(causal.size(), 32u);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const double want = f(x_of(std::abs(i - j), i), h);
        EXPECT_NEAR(enc[(h * 4 + i) * 4 + j], want, 1e-12) << h << " " << i << " " << j;
        EXPECT_NEAR(causal[(h * 4 + i) * 4 + j], j > i ? 0.0 : want, 1e-12) << h << " " << i << " " << j;
      }
  // Query 3 > L: normalised by log(1 + 3); the learned threshold scale λ gives L = |λ|·2.
  set_param(*pe, "threshold_scale", {-4.0});  // L = 8 > every position
  const std::vector<double> b8 = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false)).to_vector();
  EXPECT_NEAR(b8[3 * 4 + 0], f(std::log1p(3.0) / (std::log1p(8.0) + 1e-6), 0), 1e-12);
  EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::Cross, pos, pos, false)).defined());
}

// Without a learned threshold there is no λ and L is the key's value; c enters as |c|.
TEST(NewSchemesFire, FixedThresholdAndAbsoluteC) {
  PEConfig cfg;
  cfg.scheme = "fire";
  cfg.set("fire_mlp_width", 1);
  cfg.set("fire_threshold", 1.0);
  cfg.set("fire_learn_threshold", false);
  auto pe = build(cfg, stack(2, 1));
  EXPECT_THROW(pe->parameter("threshold_scale"), Error);
  set_param(*pe, "w1", {1.0});
  set_param(*pe, "b1", {0.0});
  set_param(*pe, "w2", {3.0});
  set_param(*pe, "b2", {0.0});
  set_param(*pe, "c", {-0.5});
  const std::vector<int64_t> qp = {4}, kp = {1};
  const std::vector<double> b =
      pe->score_term(Tensor::zeros({1, 1, 1, 2}, DType::Float64), site_of(AttnKind::DecoderSelf, qp, kp, true))
          .to_vector();
  EXPECT_NEAR(b[0], 3.0 * std::log1p(0.5 * 3) / (std::log1p(0.5 * 4) + 1e-6), 1e-12);
}

// The rows of the MLP's input, one entry per MLP in the bias's autograd graph: its first linear's
// input rows.
static std::set<int64_t> fire_mlp_rows(const Tensor& bias) {
  std::vector<Node*> stack{bias.grad_fn().get()};
  std::set<Node*> seen;
  std::set<int64_t> rows;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second) continue;
    if (n->name == "linear" && n->input_shapes[0].back() == 1) rows.insert(n->input_shapes[0][0]);
    for (const Edge& e : n->edges) stack.push_back(e.fn.get());
  }
  return rows;
}

// Where every row shares the normaliser (L above every position, or one query) the MLP runs once
// per distinct distance; where rows differ, once per (i, j). With a learned threshold the choice
// depends on L: an evaluation, and a training step on the CPU, read L on the host and build one
// form; a training step on a GPU (emulated here, pelab/host_reads.h) reads nothing back from the
// device (issue 50), so it builds both and selects on the device, except for one query (always
// shared). A fixed threshold is known on the host: one form in training too.
TEST(NewSchemesFire, MlpRunsOncePerDistinctDistanceWhenRowsShareTheNormaliser) {
  using Rows = std::set<int64_t>;
  PEConfig cfg;
  cfg.scheme = "fire";
  cfg.set("fire_threshold", 4.0);
  auto pe = build(cfg, stack(4, 2));
  const std::vector<int64_t> pos = iota(6), q1 = {5};
  const Tensor q = Tensor::zeros({1, 2, 6, 2}, DType::Float64);
  for (bool causal : {true, false}) {
    const AttnKind kind = causal ? AttnKind::DecoderSelf : AttnKind::EncoderSelf;
    pe->eval();
    set_param(*pe, "threshold_scale", {2.0});  // L = 8 > 5: shared, distances 0..5
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, pos, pos, causal))), Rows{6}) << causal;
    set_param(*pe, "threshold_scale", {1.0});  // L = 4 < 5: rows 4 and 5 differ
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, pos, pos, causal))), Rows{36}) << causal;
    // One query at 5 > L: its own normaliser, still one row.
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, q1, pos, causal))), Rows{6}) << causal;
    pe->train();
    // Training on the CPU: L is read on the host as in evaluation (a free read there).
    set_param(*pe, "threshold_scale", {2.0});
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, pos, pos, causal))), Rows{6}) << causal;
    set_param(*pe, "threshold_scale", {1.0});
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, pos, pos, causal))), Rows{36}) << causal;
    // Training as on a GPU (no read back): both forms, selected on the device.
    const EmulateDeviceReads device_reads;
    for (double lambda : {2.0, 1.0}) {
      set_param(*pe, "threshold_scale", {lambda});
      EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, pos, pos, causal))), (Rows{6, 36}))
          << causal << " training, lambda " << lambda;
    }
    EXPECT_EQ(fire_mlp_rows(pe->score_term(q, site_of(kind, q1, pos, causal))), Rows{6}) << causal;
  }
  PEConfig fixed = cfg;
  fixed.set("fire_learn_threshold", false);
  fixed.set("fire_threshold", 8.0);
  auto pf = build(fixed, stack(4, 2));  // training mode
  EXPECT_EQ(fire_mlp_rows(pf->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false))), Rows{6});
  fixed.set("fire_threshold", 4.0);
  pf = build(fixed, stack(4, 2));
  EXPECT_EQ(fire_mlp_rows(pf->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false))), Rows{36});
}

// Both paths against the formula, values and gradients (central differences, float64): shared
// and per-row normalisers, learned and fixed threshold, one query above L, and L exactly at the
// largest position (max's tie goes to L: L gets the gradient, the one-sided derivative from above).
TEST(NewSchemesFire, SharedAndPerRowNormalisersMatchTheFormulaAndGradients) {
  struct Case {
    const char* label;
    bool learn;
    double lambda;  // threshold_scale (learned) ; L = |lambda| * 4
    std::vector<int64_t> qp;
    bool causal;
  };
  const std::vector<int64_t> kp = iota(6);
  const std::vector<Case> cases = {
      {"shared, learned", true, -2.0, iota(6), true},
      {"per row, learned", true, 0.8, iota(6), true},
      {"per row, learned, enc", true, 0.8, iota(6), false},
      {"one query above L", true, 0.5, {5}, false},
      {"tie L = max p", true, 1.25, iota(6), true},
      {"shared, fixed", false, 2.0, iota(6), false},
      {"per row, fixed", false, 0.8, iota(6), true},
  };
  const int64_t H = 2, W = 3;
  for (const Case& k : cases) {
    PEConfig cfg;
    cfg.scheme = "fire";
    cfg.set("fire_mlp_width", W);
    cfg.set("fire_learn_threshold", k.learn);
    cfg.set("fire_threshold", k.learn ? 4.0 : 4.0 * k.lambda);
    auto pe = build(cfg, stack(4, H));
    set_param(*pe, "w1", {0.7, -1.1, 0.4});
    set_param(*pe, "b1", {0.2, 0.9, -0.1});
    set_param(*pe, "w2", {1.0, -0.5, 0.3, 0.6, 0.8, -1.2});
    set_param(*pe, "b2", {0.05, -0.3});
    set_param(*pe, "c", {-0.7});
    if (k.learn) set_param(*pe, "threshold_scale", {k.lambda});
    const int64_t Lq = static_cast<int64_t>(k.qp.size()), Lk = 6;
    const AttnSite site = site_of(k.causal ? AttnKind::DecoderSelf : AttnKind::EncoderSelf, k.qp, kp, k.causal);
    const Tensor q = Tensor::zeros({1, H, Lq, 2}, DType::Float64);
    // The formula, from the parameters' current values.
    auto formula = [&] {
      auto v = [&](const char* n) { return pe->parameter(n).to_vector(); };
      const auto w1 = v("w1"), b1 = v("b1"), w2 = v("w2"), b2 = v("b2");
      const double c = std::abs(v("c")[0]);
      const double L = k.learn ? std::abs(v("threshold_scale")[0]) * 4.0 : 4.0 * k.lambda;
      std::vector<double> out(H * Lq * Lk);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) {
            const double pi = static_cast<double>(k.qp[i]), pj = static_cast<double>(kp[j]);
            if (k.causal && pj > pi) continue;
            const double x = std::log1p(c * std::abs(pi - pj)) / (std::log1p(c * std::max(L, pi)) + 1e-6);
            double f = b2[h];
            for (int64_t w = 0; w < W; ++w) f += w2[h * W + w] * std::max(w1[w] * x + b1[w], 0.0);
            out[(h * Lq + i) * Lk + j] = f;
          }
      return out;
    };
    std::vector<double> weights(H * Lq * Lk);
    for (size_t e = 0; e < weights.size(); ++e) weights[e] = std::sin(1.0 + 0.37 * e);
    auto loss_of = [&](const std::vector<double>& b) {
      double s = 0;
      for (size_t e = 0; e < b.size(); ++e) s += weights[e] * b[e];
      return s;
    };
    Tensor bias = pe->score_term(q, site);
    const std::vector<double> got = bias.to_vector(), want = formula();
    ASSERT_EQ(got.size(), want.size()) << k.label;
    for (size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], want[e], 1e-12) << k.label << " " << e;
    for (auto np : pe->named_parameters()) np.second.zero_grad();
    sum(mul(bias, Tensor::from_vector(weights, bias.shape(), DType::Float64))).backward();
    const bool tie = std::string(k.label).rfind("tie", 0) == 0;
    for (const auto& np : pe->named_parameters()) {
      Tensor p = np.second;
      ASSERT_TRUE(p.grad().defined()) << k.label << " " << np.first;  // 0 where L is below
      const std::vector<double> g = p.grad().to_vector();
      for (int64_t e = 0; e < p.numel(); ++e) {
        const double orig = p.data<double>()[e], eps = 1e-6;
        const bool one_sided = tie && np.first == "threshold_scale";
        p.data<double>()[e] = orig + eps;
        const double fp = loss_of(formula());
        p.data<double>()[e] = one_sided ? orig : orig - eps;
        const double fm = loss_of(formula());
        p.data<double>()[e] = orig;
        const double numeric = (fp - fm) / (one_sided ? eps : 2 * eps);
        EXPECT_NEAR(g[e], numeric, 1e-5 * (1 + std::abs(numeric))) << k.label << " " << np.first << "[" << e << "]";
        if (one_sided) {
          EXPECT_NE(g[e], 0.0) << k.label << ": the tie's gradient goes to L";
        }
      }
    }
  }
}

TEST(NewSchemesFire, BadKeysAreOneErrorNamingTheKey) {
  EXPECT_EQ(load_error("pe:\n  scheme: fire\n  fire_mlp_width: 0\n"),
            "c.yaml:3: pe.fire_mlp_width: 0 is out of range [1, inf)");
  EXPECT_EQ(load_error("pe:\n  scheme: fire\n  fire_threshold: -1\n"),
            "c.yaml:3: pe.fire_threshold: -1 is out of range (0, inf)");
  EXPECT_EQ(load_error("pe:\n  scheme: fire\n  fire_c_init: 0\n"),
            "c.yaml:3: pe.fire_c_init: 0 is out of range (0, inf)");
}

// ---------------------------------------------------------------- xPos

// One pair (head dim 2, θ_0 = 1, ζ_0 = γ / (1 + γ)): q at n is ζ^(n/B) R(n) q, k at m is
// ζ^(−m/B) R(m) k.
TEST(NewSchemesXpos, OnePairByHand) {
  PEConfig cfg;
  cfg.scheme = "xpos";
  auto pe = build(cfg, stack(2, 1));
  const std::vector<int64_t> qp = {3}, kp = {1};
  Tensor q = Tensor::from_vector({1.0, 0.0}, {1, 1, 1, 2}, DType::Float64);
  Tensor k = Tensor::from_vector({0.0, 2.0}, {1, 1, 1, 2}, DType::Float64);
  pe->transform_qk(q, k, site_of(AttnKind::DecoderSelf, qp, kp, true));
  const double zeta = 0.4 / 1.4, sq = std::pow(zeta, 3.0 / 512), sk = std::pow(zeta, -1.0 / 512);
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector();
  EXPECT_NEAR(qv[0], sq * std::cos(3.0), 1e-12);
  EXPECT_NEAR(qv[1], sq * std::sin(3.0), 1e-12);
  EXPECT_NEAR(kv[0], -2 * sk * std::sin(1.0), 1e-12);
  EXPECT_NEAR(kv[1], 2 * sk * std::cos(1.0), 1e-12);
}

// q·k depends on the positions only through n − m (the scales multiply to ζ^((n−m)/B)), the norm
// of the pair is scaled by exactly ζ_i^(n/B), and cross-attention is left alone.
TEST(NewSchemesXpos, ScoresDependOnlyOnTheRelativePosition) {
  PEConfig cfg;
  cfg.scheme = "xpos";
  cfg.set("xpos_scale_base", 16.0);  // strong decay, so a wrong exponent would show
  auto pe = build(cfg, stack(16, 2));
  Generator g(5);
  Tensor q0 = Tensor::empty({1, 2, 3, 8}, DType::Float64), k0 = Tensor::empty({1, 2, 4, 8}, DType::Float64);
  init::normal_(q0, 0, 1, g);
  init::normal_(k0, 0, 1, g);
  auto scores = [&](int64_t shift) {
    const std::vector<int64_t> qp = {4 + shift, 5 + shift, 9 + shift}, kp = {0 + shift, 2 + shift, 3 + shift, 7 + shift};
    Tensor q = q0, k = k0;
    pe->transform_qk(q, k, site_of(AttnKind::EncoderSelf, qp, kp, false));
    return matmul(q, transpose(k, 2, 3)).to_vector();
  };
  const std::vector<double> a = scores(0), b = scores(40);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-10 * (1 + std::abs(a[i]))) << i;
  // Norm of pair i of a query at position n: ζ_i^(n/B) times the original.
  const std::vector<int64_t> qp = {10, 11, 12}, kp = {0, 1, 2, 3};
  Tensor q = q0, k = k0;
  pe->transform_qk(q, k, site_of(AttnKind::DecoderSelf, qp, kp, true));
  const std::vector<double> x = q0.to_vector(), y = q.to_vector();
  for (int i = 0; i < 4; ++i) {
    const double zeta = (2.0 * i / 8 + 0.4) / 1.4;
    const double n0 = std::hypot(x[2 * i], x[2 * i + 1]), n1 = std::hypot(y[2 * i], y[2 * i + 1]);
    EXPECT_NEAR(n1, n0 * std::pow(zeta, 10.0 / 16), 1e-12) << "pair " << i;
  }
  Tensor qc = q0, kc = k0;
  pe->transform_qk(qc, kc, site_of(AttnKind::Cross, qp, kp, false));
  EXPECT_EQ(qc.to_vector(), q0.to_vector());
  EXPECT_EQ(kc.to_vector(), k0.to_vector());
}

// With the scale factors at 1 (a scale base so large that ζ^(n/B) rounds to 1) xPos is RoPE with
// interleaved pairs and the same base.
TEST(NewSchemesXpos, ReducesToRopeWhenTheScalesAreOne) {
  PEConfig x;
  x.scheme = "xpos";
  x.set("xpos_base", 500.0);
  x.set("xpos_scale_base", 1e300);
  PEConfig r;
  r.scheme = "rope";
  r.set("rope_base", 500.0);
  r.set("rope_pairing", "interleaved");
  auto px = build(x, stack(16, 2)), pr = build(r, stack(16, 2));
  Generator g(9);
  Tensor q0 = Tensor::empty({2, 2, 3, 8}, DType::Float64), k0 = Tensor::empty({2, 2, 3, 8}, DType::Float64);
  init::normal_(q0, 0, 1, g);
  init::normal_(k0, 0, 1, g);
  const std::vector<int64_t> pos = {3, 8, 20};
  Tensor qx = q0, kx = k0, qr = q0, kr = k0;
  px->transform_qk(qx, kx, site_of(AttnKind::DecoderSelf, pos, pos, true));
  pr->transform_qk(qr, kr, site_of(AttnKind::DecoderSelf, pos, pos, true));
  const std::vector<double> a = qx.to_vector(), b = qr.to_vector(), c = kx.to_vector(), d = kr.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-14) << "q " << i;
    EXPECT_NEAR(c[i], d[i], 1e-14) << "k " << i;
  }
}

TEST(NewSchemesXpos, BadKeysAreOneErrorNamingTheKey) {
  EXPECT_EQ(load_error("pe:\n  scheme: xpos\n  xpos_gamma: 0\n"),
            "c.yaml:3: pe.xpos_gamma: 0 is out of range (0, inf)");
  EXPECT_EQ(load_error("pe:\n  scheme: xpos\n  xpos_base: 1\n"),
            "c.yaml:3: pe.xpos_base: 1 is out of range (1, inf)");
  const std::string e = load_error("model:\n  d_model: 12\n  heads: 4\npe:\n  scheme: xpos\n");
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find("pe.scheme xpos needs an even head dim >= 2, but model.d_model / model.heads = "
                   "12 / 4 = 3"),
            std::string::npos)
      << e;
}
