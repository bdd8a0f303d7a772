// pelab — tests of the relative / rotary / bias positional encodings (shaw, t5, rope, alibi) and their
// math helpers (t5_buckets.h, rope_math.h): reference values, invariances, the Shaw naive reference,
// scaling variants and float64 finite-difference gradient checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/pe_test_util.h"
#include "models/pe/pe.h"
#include "models/pe/rope_math.h"
#include "models/pe/t5_buckets.h"
#include "pelab/pelab.h"
#include "tests/test_paths.h"

using namespace pelab;
using namespace pelab::models;

namespace {

Tensor randn(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape, DType::Float64);
  init::normal_(t, 0.0, 1.0, g);
  return t;
}

using pelab::testing::stack_of;

std::shared_ptr<PositionalEncoding> build(const PEConfig& cfg, const StackInfo& s,
                                          uint64_t seed = 11) {
  Generator g(seed);
  return make_pe(cfg, s, g);
}

using pelab::testing::site_of;

using pelab::testing::iota;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0.0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Float64 central differences of L = Σ f() ⊙ W (W fixed random) w.r.t. every element of every
// leaf, against the analytic gradients from backward().
void expect_grads_match(const std::function<Tensor()>& f, std::vector<Tensor> leaves,
                        const std::string& what) {
  Tensor probe;
  {
    NoGradGuard ng;
    probe = f();
  }
  ASSERT_TRUE(probe.defined()) << what;
  const Tensor w = randn(probe.shape(), 4242);
  auto loss_value = [&] {
    NoGradGuard ng;
    return sum(mul(f(), w)).item();
  };
  for (Tensor& t : leaves) t.zero_grad();
  sum(mul(f(), w)).backward();
  for (size_t n = 0; n < leaves.size(); ++n) {
    Tensor& t = leaves[n];
    ASSERT_EQ(t.dtype(), DType::Float64) << what;
    ASSERT_TRUE(t.is_contiguous()) << what;
    const Tensor g = t.grad();
    ASSERT_TRUE(g.defined()) << what << ": no gradient for input " << n;
    ASSERT_EQ(g.shape(), t.shape()) << what;
    const std::vector<double> ga = g.to_vector();
    double* p = t.data<double>();
    const double eps = 1e-6;
    double worst = 0.0;
    for (int64_t e = 0; e < t.numel(); ++e) {
      const double orig = p[e];
      p[e] = orig + eps;
      const double lp = loss_value();
      p[e] = orig - eps;
      const double lm = loss_value();
      p[e] = orig;
      const double fd = (lp - lm) / (2 * eps);
      worst = std::max(worst, std::abs(ga[e] - fd) / std::max(1.0, std::abs(fd)));
    }
    EXPECT_LT(worst, 1e-6) << what << ": input " << n << " " << shape_str(t.shape());
  }
}

// ---------------------------------------------------------------- registry

TEST(PERegistry, FourSchemesRegistered) {
  const std::vector<std::string> names = pe_names();
  for (const char* n : {"shaw", "t5", "rope", "alibi"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n << " not registered";
}

// The contract that lets attention fuse: where a scheme says it has no value term, value_term adds
// nothing; where it says it has one, it does; where it gives a term in table form, that equals the
// hook's term (every registered scheme, every site kind, both stacks, Shaw's V table off too).
TEST(PERegistry, ValueTermFlagAndTableFormsMatchTheHooks) {
  const std::vector<int64_t> qp = iota(4), kp = iota(5);
  const Tensor probs = softmax(randn({2, 2, 4, 5}, 7), -1);
  for (const std::string& name : pe_names())
    for (const bool values : {true, false})
      for (const StackKind stack : {StackKind::Encoder, StackKind::Decoder})
        for (const AttnKind kind : {AttnKind::EncoderSelf, AttnKind::DecoderSelf, AttnKind::Cross}) {
          if ((stack == StackKind::Encoder) != (kind == AttnKind::EncoderSelf)) continue;
          PEConfig cfg;
          cfg.scheme = name;
          cfg.set("shaw_values", values);
          auto pe = build(cfg, stack_of(stack, 1, 8, 2));
          const AttnSite site = site_of(kind, qp, kind == AttnKind::Cross ? kp : qp,
                                        kind == AttnKind::DecoderSelf);
          const Tensor p = kind == AttnKind::Cross ? probs : slice(probs, 3, 0, 4);
          const Tensor vt = pe->value_term(p, site);
          const std::string what = name + (values ? "" : " (shaw_values off)") + ", site kind " +
                                   std::to_string(static_cast<int>(kind));
          EXPECT_EQ(pe->has_value_term(site), vt.defined()) << what;
          // the table forms, where given, are the same terms (attention fuses them instead)
          const PositionalEncoding::RelativeTables rt = pe->relative_tables(site);
          auto same = [&](const Tensor& x, const Tensor& y, const char* term) {
            ASSERT_TRUE(x.defined()) << what << ": a " << term << " table without the hook's term";
            const std::vector<double> a = x.to_vector(), b = y.to_vector();
            ASSERT_EQ(a.size(), b.size()) << what << " " << term;
            for (size_t i = 0; i < a.size(); ++i)
              EXPECT_NEAR(a[i], b[i], 1e-12) << what << " " << term << " at " << i;
          };
          if (rt.values.defined()) same(vt, relative_values(p, rt.index, rt.values), "value");
          if (rt.keys.defined()) {
            const Tensor q = randn({2, 2, 4, 4}, 8);
            same(pe->score_term(q, site), relative_keys(q, rt.index, rt.keys, 0.5), "key");
          }
        }
}

// ---------------------------------------------------------------- T5 buckets

std::vector<std::vector<int64_t>> read_csv(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);  // header
  std::vector<std::vector<int64_t>> rows;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string cell;
    std::vector<int64_t> row;
    while (std::getline(ss, cell, ',')) row.push_back(std::stoll(cell));
    rows.push_back(row);
  }
  return rows;
}

TEST(PET5, BucketsMatchReferenceCsv) {
  const std::string src = pelab::testing::source_dir();
  const std::string shared = src + "/../shared/reference/t5_buckets_32_128.csv";
  const std::string local = src + "/tests/data/t5_buckets_32_128.csv";
  const bool have_shared = std::ifstream(shared).good(), have_local = std::ifstream(local).good();
  if (!have_shared && !have_local) GTEST_SKIP() << "reference CSV absent: " << shared;
  const auto rows = read_csv(have_shared ? shared : local);
  if (have_shared && have_local) { EXPECT_EQ(read_csv(local), rows) << "tests/data copy is stale"; }
  ASSERT_EQ(rows.size(), 601u);  // relative positions -300..300
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 3u);
    EXPECT_EQ(t5_relative_bucket(r[0], true, 32, 128), r[1]) << "bidirectional d=" << r[0];
    EXPECT_EQ(t5_relative_bucket(r[0], false, 32, 128), r[2]) << "unidirectional d=" << r[0];
  }
}

TEST(PET5, SaturationFacts) {
  bool used16 = false;
  for (int64_t d = -2000; d <= 2000; ++d) {
    const int64_t b = t5_relative_bucket(d, true, 32, 128);
    const int64_t u = t5_relative_bucket(d, false, 32, 128);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, 32);
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 32);
    used16 |= b == 16;
    if (d >= 91) { EXPECT_EQ(b, 31) << d; }
    if (d <= -91) { EXPECT_EQ(b, 15) << d; }
    if (d <= -113) { EXPECT_EQ(u, 31) << d; }
    if (d >= 0) { EXPECT_EQ(u, 0) << d; }
  }
  EXPECT_FALSE(used16);
  // saturation starts exactly there
  EXPECT_LT(t5_relative_bucket(90, true, 32, 128), 31);
  EXPECT_LT(t5_relative_bucket(-90, true, 32, 128), 15);
  EXPECT_LT(t5_relative_bucket(-112, false, 32, 128), 31);
  // exact range, both directions
  for (int64_t n = 0; n < 8; ++n) {
    EXPECT_EQ(t5_relative_bucket(-n, true, 32, 128), n);
    EXPECT_EQ(t5_relative_bucket(n, true, 32, 128), n == 0 ? 0 : 16 + n);
  }
  for (int64_t n = 0; n < 16; ++n) EXPECT_EQ(t5_relative_bucket(-n, false, 32, 128), n);
  // far distances never overflow
  EXPECT_EQ(t5_relative_bucket(int64_t(1) << 50, true, 32, 128), 31);
  EXPECT_EQ(t5_relative_bucket(-(int64_t(1) << 50), false, 32, 128), 31);
  EXPECT_THROW(t5_relative_bucket(3, true, 2, 128), Error);
  EXPECT_THROW(t5_relative_bucket(3, false, 32, 8), Error);
}

TEST(PET5, BiasLooksUpTheTablePerDirection) {
  PEConfig cfg;
  cfg.scheme = "t5";
  const std::vector<int64_t> qp = {0, 5, 40, 200}, kp = {0, 3, 9, 100, 160, 300};
  for (bool encoder : {true, false}) {
    auto pe = build(cfg, stack_of(encoder ? StackKind::Encoder : StackKind::Decoder, 2, 8, 2));
    const Tensor table = pe->parameter("rel_bias");
    ASSERT_EQ(table.shape(), (Shape{32, 2}));
    const AttnSite site = site_of(encoder ? AttnKind::EncoderSelf : AttnKind::DecoderSelf, qp, kp,
                                  !encoder, 1);
    const Tensor q = randn({3, 2, 4, 4}, 1);
    const Tensor bias = pe->score_term(q, site);
    ASSERT_EQ(bias.shape(), (Shape{1, 2, 4, 6}));
    const std::vector<double> b = bias.to_vector(), t = table.to_vector();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          const int64_t bucket = t5_relative_bucket(kp[j] - qp[i], encoder, 32, 128);
          EXPECT_EQ(b[(h * 4 + i) * 6 + j], t[bucket * 2 + h]) << h << " " << i << " " << j;
        }
    EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::Cross, qp, kp, false)).defined());
  }
}

TEST(PET5, PerLayerTablesAndInit) {
  PEConfig cfg;
  cfg.scheme = "t5";
  cfg.set("t5_per_layer", true);
  cfg.set("t5_num_buckets", 16);
  cfg.set("t5_max_distance", 64);
  auto pe = build(cfg, stack_of(StackKind::Encoder, 3, 64, 4));
  EXPECT_EQ(pe->named_parameters().size(), 3u);
  const std::vector<int64_t> pos = iota(10);
  const Tensor q = randn({1, 4, 10, 16}, 2);
  const Tensor b0 = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false, 0));
  const Tensor b2 = pe->score_term(q, site_of(AttnKind::EncoderSelf, pos, pos, false, 2));
  EXPECT_GT(max_abs_diff(b0, b2), 1e-6);  // different tables
  const Tensor t2 = pe->parameter("layers.2.rel_bias");
  EXPECT_EQ(t2.shape(), (Shape{16, 4}));
  EXPECT_DOUBLE_EQ(b2.to_vector()[3 * 10 + 0], t2.to_vector()[t5_relative_bucket(-3, true, 16, 64) * 4]);
  // HF init: std d_model^-0.5 = 0.125 (loose check over 3·64 draws)
  double ss = 0;
  int64_t n = 0;
  for (const auto& p : pe->named_parameters())
    for (double v : p.second.to_vector()) ss += v * v, ++n;
  EXPECT_NEAR(std::sqrt(ss / n), 0.125, 0.03);
}

TEST(PET5, GradientCheck) {
  PEConfig cfg;
  cfg.scheme = "t5";
  cfg.set("t5_num_buckets", 8);
  cfg.set("t5_max_distance", 16);
  auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 6, 3));
  const std::vector<int64_t> qp = {2, 3, 9}, kp = iota(10);
  const Tensor q = randn({2, 3, 3, 2}, 3);
  expect_grads_match([&] { return pe->score_term(q, site_of(AttnKind::DecoderSelf, qp, kp, true)); },
                     {pe->parameter("rel_bias")}, "t5 score_term");
}

// ---------------------------------------------------------------- Shaw

struct ShawCase {
  bool per_head;
  std::vector<int64_t> qp, kp;
};

TEST(PEShaw, MatchesNaiveFullRelativeTensor) {
  const int64_t B = 2, H = 3, dh = 4, k = 2, R = 2 * k + 1;
  for (const ShawCase& c : {ShawCase{false, iota(8), iota(8)}, ShawCase{true, iota(8), iota(8)},
                            ShawCase{false, {5, 6, 7}, iota(8)}, ShawCase{true, {1, 4, 9}, {0, 2, 3, 7, 8, 20}}}) {
    PEConfig cfg;
    cfg.scheme = "shaw";
    cfg.set("shaw_k", k);
    cfg.set("shaw_per_head", c.per_head);
    auto pe = build(cfg, stack_of(StackKind::Decoder, 2, H * dh, H));
    const int64_t Lq = c.qp.size(), Lk = c.kp.size();
    const AttnSite site = site_of(AttnKind::DecoderSelf, c.qp, c.kp, false, 1);
    const Tensor q = randn({B, H, Lq, dh}, 5), P = randn({B, H, Lq, Lk}, 6);
    const Tensor rk = pe->parameter("layers.1.rel_k"), rv = pe->parameter("layers.1.rel_v");
    ASSERT_EQ(rk.shape(), c.per_head ? (Shape{H, R, dh}) : (Shape{R, dh}));
    const std::vector<double> qv = q.to_vector(), pv = P.to_vector(), kv = rk.to_vector(),
                              vv = rv.to_vector();
    // Naive: the full [Lq, Lk, dh] relative tensors a^K_ij, a^V_ij (test only).
    std::vector<double> score(B * H * Lq * Lk, 0.0), value(B * H * Lq * dh, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> aK(Lq * Lk * dh), aV(Lq * Lk * dh);
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) {
            const int64_t r = std::clamp<int64_t>(c.kp[j] - c.qp[i], -k, k) + k;
            for (int64_t d = 0; d < dh; ++d) {
              const int64_t t = ((c.per_head ? h * R : 0) + r) * dh + d;
              aK[(i * Lk + j) * dh + d] = kv[t];
              aV[(i * Lk + j) * dh + d] = vv[t];
            }
          }
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) {
            const int64_t row = ((b * H + h) * Lq + i);
            double s = 0;
            for (int64_t d = 0; d < dh; ++d) s += qv[row * dh + d] * aK[(i * Lk + j) * dh + d];
            score[row * Lk + j] = s / std::sqrt(double(dh));
            for (int64_t d = 0; d < dh; ++d)
              value[row * dh + d] += pv[row * Lk + j] * aV[(i * Lk + j) * dh + d];
          }
      }
    const Tensor st = pe->score_term(q, site), vt = pe->value_term(P, site);
    ASSERT_EQ(st.shape(), (Shape{B, H, Lq, Lk}));
    ASSERT_EQ(vt.shape(), (Shape{B, H, Lq, dh}));
    EXPECT_LT(max_abs_diff(st, Tensor::from_vector(score, st.shape(), DType::Float64)), 1e-12);
    EXPECT_LT(max_abs_diff(vt, Tensor::from_vector(value, vt.shape(), DType::Float64)), 1e-12);
    EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::Cross, c.qp, c.kp, false)).defined());
    EXPECT_FALSE(pe->value_term(P, site_of(AttnKind::Cross, c.qp, c.kp, false)).defined());
  }
}

TEST(PEShaw, DistancesBeyondKActLikeK) {
  const int64_t H = 2, dh = 4, k = 3, L = 12;
  PEConfig cfg;
  cfg.scheme = "shaw";
  cfg.set("shaw_k", k);
  auto pe = build(cfg, stack_of(StackKind::Encoder, 1, H * dh, H));
  const std::vector<int64_t> pos = iota(L);
  const AttnSite site = site_of(AttnKind::EncoderSelf, pos, pos, false);
  const Tensor q = randn({1, H, L, dh}, 7);
  const std::vector<double> s = pe->score_term(q, site).to_vector();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const double* row = &s[(h * L + i) * L];
        if (j - i > k) { EXPECT_EQ(row[j], row[i + k]) << h << " " << i << " " << j; }
        if (j - i < -k) { EXPECT_EQ(row[j], row[i - k]) << h << " " << i << " " << j; }
        const int64_t at_k = i + (j > i ? k : -k);
        if (std::abs(j - i) < k && j != i && at_k >= 0 && at_k < L) { EXPECT_NE(row[j], row[at_k]); }
      }
  // value term: moving all mass of query i to a key beyond k equals putting it at distance exactly k
  const int64_t i = 2;
  for (int64_t far : {i + k + 1, L - 1}) {
    Tensor Pk = Tensor::zeros({1, H, L, L}, DType::Float64), Pfar = Pk.clone();
    for (int64_t h = 0; h < H; ++h) {
      Pk.data<double>()[(h * L + i) * L + i + k] = 1.0;
      Pfar.data<double>()[(h * L + i) * L + far] = 1.0;
    }
    EXPECT_EQ(max_abs_diff(pe->value_term(Pk, site), pe->value_term(Pfar, site)), 0.0);
  }
  Tensor Pnear = Tensor::zeros({1, H, L, L}, DType::Float64);
  for (int64_t h = 0; h < H; ++h) Pnear.data<double>()[(h * L + i) * L + i + k - 1] = 1.0;
  Tensor Pk = Tensor::zeros({1, H, L, L}, DType::Float64);
  for (int64_t h = 0; h < H; ++h) Pk.data<double>()[(h * L + i) * L + i + k] = 1.0;
  EXPECT_GT(max_abs_diff(pe->value_term(Pk, site), pe->value_term(Pnear, site)), 1e-6);
}

TEST(PEShaw, SwitchesAndParameterNames) {
  PEConfig cfg;
  cfg.scheme = "shaw";
  cfg.set("shaw_k", 4);
  cfg.set("shaw_values", false);
  auto pe = build(cfg, stack_of(StackKind::Encoder, 2, 16, 2));
  const auto params = pe->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "layers.0.rel_k");
  EXPECT_EQ(params[1].first, "layers.1.rel_k");
  EXPECT_EQ(params[0].second.shape(), (Shape{9, 8}));
  const std::vector<int64_t> pos = iota(5);
  const AttnSite site = site_of(AttnKind::EncoderSelf, pos, pos, false);
  EXPECT_TRUE(pe->score_term(randn({1, 2, 5, 8}, 1), site).defined());
  EXPECT_FALSE(pe->value_term(randn({1, 2, 5, 5}, 1), site).defined());
  cfg.set("shaw_k", -1);
  EXPECT_THROW(build(cfg, stack_of(StackKind::Encoder, 1, 16, 2)), Error);
}

TEST(PEShaw, GradientCheck) {
  for (bool per_head : {false, true}) {
    PEConfig cfg;
    cfg.scheme = "shaw";
    cfg.set("shaw_k", 2);
    cfg.set("shaw_per_head", per_head);
    auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 6, 2));
    const std::vector<int64_t> qp = {3, 4, 8}, kp = iota(9);
    const AttnSite site = site_of(AttnKind::DecoderSelf, qp, kp, true);
    Tensor q = randn({2, 2, 3, 3}, 8).set_requires_grad(true);
    Tensor P = randn({2, 2, 3, 9}, 9).set_requires_grad(true);
    expect_grads_match([&] { return pe->score_term(q, site); }, {q, pe->parameter("layers.0.rel_k")},
                       "shaw score_term");
    expect_grads_match([&] { return pe->value_term(P, site); }, {P, pe->parameter("layers.0.rel_v")},
                       "shaw value_term");
  }
}

// Two-level task IDs (multi_addition, pe.position_channels 2): a second pair of tables per layer,
// indexed by the second level; the term is the sum of each level's term (checked against two
// one-level Shaw objects holding the same tables), row by row with per-row IDs, and its gradients
// reach both levels' tables (float64 central differences). One level given to a two-level object
// is refused.
TEST(PEShaw, TwoLevelIdsAddEachLevelsTermAndGradientCheck) {
  PEConfig cfg;
  cfg.scheme = "shaw";
  cfg.set("shaw_k", 2);
  cfg.position_channels = 2;
  const StackInfo st = stack_of(StackKind::Decoder, 1, 6, 2);
  auto two = build(cfg, st);
  PEConfig one_cfg = cfg;
  one_cfg.position_channels = 1;
  auto lvl1 = build(one_cfg, st, 5), lvl2 = build(one_cfg, st, 6);
  auto copy = [](Tensor dst, const Tensor& src) {
    const std::vector<double> v = src.to_vector();
    std::copy(v.begin(), v.end(), dst.data<double>());
  };
  copy(lvl1->parameter("layers.0.rel_k"), two->parameter("layers.0.rel_k"));
  copy(lvl1->parameter("layers.0.rel_v"), two->parameter("layers.0.rel_v"));
  copy(lvl2->parameter("layers.0.rel_k"), two->parameter("layers.0.rel_k2"));
  copy(lvl2->parameter("layers.0.rel_v"), two->parameter("layers.0.rel_v2"));
  AttnSite site = site_of(AttnKind::DecoderSelf, {3, 4, 8}, iota(9), true);
  site.q_pos = Positions(1, 3, {3, 4, 8}, {1, 2, 3});
  site.k_pos = Positions(1, 9, iota(9), {1, 1, 1, 2, 2, 2, 3, 3, 3});
  const AttnSite s1 = site_of(AttnKind::DecoderSelf, {3, 4, 8}, iota(9), true);
  const AttnSite s2 = site_of(AttnKind::DecoderSelf, {1, 2, 3}, {1, 1, 1, 2, 2, 2, 3, 3, 3}, true);
  Tensor q = randn({2, 2, 3, 3}, 8).set_requires_grad(true);
  Tensor P = randn({2, 2, 3, 9}, 9).set_requires_grad(true);
  {
    NoGradGuard ng;
    EXPECT_LT(max_abs_diff(two->score_term(q, site),
                           add(lvl1->score_term(q, s1), lvl2->score_term(q, s2))), 1e-12);
    EXPECT_LT(max_abs_diff(two->value_term(P, site),
                           add(lvl1->value_term(P, s1), lvl2->value_term(P, s2))), 1e-12);
    EXPECT_FALSE(two->relative_tables(site).index.defined());  // the hooks, not one index
    // Per-row IDs: row b's term is that of its IDs alone.
    AttnSite rows = site;
    rows.q_pos = Positions(2, 3, {3, 4, 8, 2, 5, 6}, {1, 2, 3, 2, 2, 1});
    rows.k_pos = site.k_pos.expanded(2);
    const Tensor both = two->score_term(q, rows);
    const Tensor r1 = two->score_term(slice(q, 0, 1, 2), row_site(rows, 1));
    EXPECT_LT(max_abs_diff(slice(both, 0, 1, 2), r1), 1e-12);
    EXPECT_THROW(two->score_term(q, s1), Error);  // one level into a two-level object
  }
  expect_grads_match([&] { return two->score_term(q, site); },
                     {q, two->parameter("layers.0.rel_k"), two->parameter("layers.0.rel_k2")},
                     "shaw two-level score_term");
  expect_grads_match([&] { return two->value_term(P, site); },
                     {P, two->parameter("layers.0.rel_v"), two->parameter("layers.0.rel_v2")},
                     "shaw two-level value_term");
}

// Learned table with two-level IDs: x + W[ids] + W2[ids2], gradients to x and both tables
// (float64 central differences); one level given to it is refused, and a one-level table refuses
// two levels.
TEST(PELearned, TwoLevelIdsAddASecondTableAndGradientCheck) {
  PEConfig cfg;
  cfg.scheme = "learned";
  cfg.set("max_positions", 6);
  cfg.position_channels = 2;
  auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 4, 2));
  const Positions pos(2, 3, {0, 1, 5, 2, 2, 3}, {0, 4, 4, 1, 2, 3});
  Tensor x = randn({2, 3, 4}, 3).set_requires_grad(true);
  const Tensor W = pe->parameter("weight"), W2 = pe->parameter("weight2");
  {
    NoGradGuard ng;
    const std::vector<double> y = pe->embed(x, pos).to_vector(), xv = x.to_vector(),
                              w = W.to_vector(), w2 = W2.to_vector();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < 4; ++d) {
          const size_t e = static_cast<size_t>((b * 3 + j) * 4 + d);
          EXPECT_NEAR(y[e], xv[e] + w[static_cast<size_t>(pos.at(b, j) * 4 + d)] +
                                w2[static_cast<size_t>(pos.at2(b, j) * 4 + d)], 1e-12);
        }
    EXPECT_THROW(pe->embed(x, Positions(2, 3, {0, 1, 5, 2, 2, 3})), Error);
    EXPECT_THROW(pe->embed(x, Positions(2, 3, {0, 1, 5, 2, 2, 3}, {0, 6, 4, 1, 2, 3})), Error);
    PEConfig one = cfg;
    one.position_channels = 1;
    EXPECT_THROW(build(one, stack_of(StackKind::Decoder, 1, 4, 2))->embed(x, pos), Error);
  }
  expect_grads_match([&] { return pe->embed(x, pos); }, {x, W, W2}, "learned two-level embed");
}

// ---------------------------------------------------------------- RoPE

PEConfig rope_cfg(const std::string& pairing, double fraction) {
  PEConfig cfg;
  cfg.scheme = "rope";
  cfg.set("rope_pairing", pairing);
  cfg.set("rope_fraction", fraction);
  return cfg;
}

Tensor rope_scores(PositionalEncoding& pe, const Tensor& q, const Tensor& k,
                   const std::vector<int64_t>& qp, const std::vector<int64_t>& kp) {
  Tensor q2 = q, k2 = k;
  pe.transform_qk(q2, k2, site_of(AttnKind::DecoderSelf, qp, kp, false));
  return matmul(q2, transpose(k2, -1, -2));
}

std::vector<int64_t> shifted(const std::vector<int64_t>& v, int64_t tau) {
  std::vector<int64_t> o = v;
  for (int64_t& x : o) x += tau;
  return o;
}

TEST(PERope, ScoresDependOnlyOnRelativePosition) {
  const std::vector<int64_t> qp = {0, 3, 4, 9, 17}, kp = {1, 2, 5, 8, 13, 21, 40};
  for (const char* pairing : {"half", "interleaved"})
    for (double fraction : {1.0, 0.5}) {
      auto pe = build(rope_cfg(pairing, fraction), stack_of(StackKind::Decoder, 1, 32, 2));
      const Tensor q = randn({2, 2, 5, 16}, 1), k = randn({2, 2, 7, 16}, 2);
      const Tensor s0 = rope_scores(*pe, q, k, qp, kp);
      for (int64_t tau : {1, 37, 1000})
        EXPECT_LT(max_abs_diff(s0, rope_scores(*pe, q, k, shifted(qp, tau), shifted(kp, tau))), 1e-10)
            << pairing << " " << fraction << " tau " << tau;
      // the rotation is not the identity
      EXPECT_GT(max_abs_diff(s0, matmul(q, transpose(k, -1, -2))), 1e-3) << pairing << fraction;
      // pass-through dims untouched
      Tensor q2 = q, k2 = k;
      pe->transform_qk(q2, k2, site_of(AttnKind::DecoderSelf, qp, kp, false));
      const int64_t rot = fraction == 1.0 ? 16 : 8;
      if (rot < 16) {
        EXPECT_EQ(max_abs_diff(slice(q2, 3, rot, 16), slice(q, 3, rot, 16)), 0.0);
      }
      // cross-attention untouched
      Tensor q3 = q, k3 = k;
      pe->transform_qk(q3, k3, site_of(AttnKind::Cross, qp, kp, false));
      EXPECT_EQ(q3.impl(), q.impl());
      EXPECT_EQ(k3.impl(), k.impl());
    }
}

TEST(PERope, PairingRotatesTheDocumentedPairs) {
  const int64_t dh = 8, half = 4;
  const double theta1 = std::pow(10000.0, -2.0 / dh);
  for (const char* pairing : {"half", "interleaved"}) {
    auto pe = build(rope_cfg(pairing, 1.0), stack_of(StackKind::Decoder, 1, dh, 1));
    const bool inter = std::string(pairing) == "interleaved";
    // unit vector on the first member of pair 1, at position m = 3
    const int64_t first = inter ? 2 : 1, second = inter ? 3 : 1 + half;
    std::vector<double> e(dh, 0.0);
    e[first] = 1.0;
    Tensor q = Tensor::from_vector(e, {1, 1, 1, dh}, DType::Float64), k = q;
    const std::vector<int64_t> pos = {3};
    pe->transform_qk(q, k, site_of(AttnKind::EncoderSelf, pos, pos, false));
    const std::vector<double> y = q.to_vector();
    for (int64_t c = 0; c < dh; ++c) {
      const double expect = c == first ? std::cos(3 * theta1) : c == second ? std::sin(3 * theta1) : 0.0;
      EXPECT_NEAR(y[c], expect, 1e-14) << pairing << " dim " << c;
    }
  }
}

TEST(PERope, PreservesNorms) {
  for (const char* pairing : {"half", "interleaved"}) {
    auto pe = build(rope_cfg(pairing, 0.75), stack_of(StackKind::Encoder, 1, 32, 2));
    const Tensor q = randn({2, 2, 6, 16}, 3), k = randn({2, 2, 6, 16}, 4);
    const std::vector<int64_t> pos = {0, 7, 100, 1001, 5000, 123456};
    Tensor q2 = q, k2 = k;
    pe->transform_qk(q2, k2, site_of(AttnKind::EncoderSelf, pos, pos, false));
    const Tensor n0 = sum(mul(q, q), {3}), n1 = sum(mul(q2, q2), {3});
    EXPECT_LT(max_abs_diff(n0, n1), 1e-11) << pairing;
    EXPECT_GT(max_abs_diff(q, q2), 1e-3);
  }
}

TEST(PERope, FractionValidation) {
  EXPECT_EQ(rope_rotary_dims(1.0, 16), 16);
  EXPECT_EQ(rope_rotary_dims(0.25, 16), 4);
  EXPECT_THROW(rope_rotary_dims(0.3, 10), Error);  // 3 dims: odd
  EXPECT_THROW(rope_rotary_dims(0.0, 16), Error);
  EXPECT_THROW(rope_rotary_dims(1.5, 16), Error);
  EXPECT_THROW(build(rope_cfg("half", 0.3), stack_of(StackKind::Encoder, 1, 20, 2)), Error);
  EXPECT_THROW(build(rope_cfg("diagonal", 1.0), stack_of(StackKind::Encoder, 1, 16, 2)), Error);
  PEConfig cfg = rope_cfg("half", 1.0);
  cfg.set("rope_scaling", "yarn");
  cfg.set("rope_scaling_factor", 4);
  EXPECT_THROW(build(cfg, stack_of(StackKind::Encoder, 1, 16, 2)), Error);  // no train length
  cfg.set("rope_scaling", "bogus");
  EXPECT_THROW(build(cfg, stack_of(StackKind::Encoder, 1, 16, 2)), Error);
}

TEST(PERope, PositionInterpolationDividesPositions) {
  PEConfig cfg = rope_cfg("half", 1.0);
  cfg.set("rope_scaling", "pi");
  cfg.set("rope_scaling_factor", 4.0);
  auto pi = build(cfg, stack_of(StackKind::Decoder, 1, 16, 2));
  auto plain = build(rope_cfg("half", 1.0), stack_of(StackKind::Decoder, 1, 16, 2));
  const Tensor q = randn({1, 2, 4, 8}, 5), k = randn({1, 2, 4, 8}, 6);
  const std::vector<int64_t> p = {0, 1, 5, 9}, p4 = {0, 4, 20, 36};
  Tensor q1 = q, k1 = k, q2 = q, k2 = k;
  pi->eval();
  pi->transform_qk(q1, k1, site_of(AttnKind::DecoderSelf, p4, p4, true));
  plain->transform_qk(q2, k2, site_of(AttnKind::DecoderSelf, p, p, true));
  EXPECT_LT(max_abs_diff(q1, q2), 1e-12);
  EXPECT_LT(max_abs_diff(k1, k2), 1e-12);
  // eval-time only: in training mode it is plain RoPE
  pi->train();
  Tensor q3 = q, k3 = k, q4 = q, k4 = k;
  pi->transform_qk(q3, k3, site_of(AttnKind::DecoderSelf, p4, p4, true));
  plain->transform_qk(q4, k4, site_of(AttnKind::DecoderSelf, p4, p4, true));
  EXPECT_EQ(max_abs_diff(q3, q4), 0.0);
  EXPECT_GT(max_abs_diff(q3, q1), 1e-3);
}

TEST(PERope, NtkBaseFormula) {
  PEConfig cfg = rope_cfg("half", 1.0);
  cfg.set("rope_scaling", "ntk");
  cfg.set("rope_scaling_factor", 8.0);
  const int64_t rot = 32;
  const std::vector<double> plain = rope_base_inv_freq(10000.0, rot);
  const RopeFreqs f = rope_frequencies(cfg, rot, 10, true);
  ASSERT_EQ(f.inv_freq.size(), 16u);
  EXPECT_EQ(f.mscale, 1.0);
  for (int64_t i = 0; i < 16; ++i) {
    // base' = base·s^(rot/(rot−2))  <=>  θ'_i = θ_i · s^(−2i/(rot−2))
    EXPECT_NEAR(f.inv_freq[i] / plain[i], std::pow(8.0, -2.0 * i / (rot - 2)), 1e-12) << i;
    EXPECT_NEAR(f.inv_freq[i], std::pow(10000.0 * std::pow(8.0, 32.0 / 30.0), -2.0 * i / 32), 1e-15);
  }
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);                    // highest frequency unchanged
  EXPECT_NEAR(f.inv_freq[15], plain[15] / 8.0, 1e-15);     // lowest divided by exactly s
  // not applied while training
  EXPECT_EQ(rope_frequencies(cfg, rot, 10, false).inv_freq, plain);
}

TEST(PERope, DynamicNtkGrowsWithLength) {
  PEConfig cfg = rope_cfg("half", 1.0);
  cfg.set("rope_scaling", "dynamic_ntk");
  cfg.set("rope_scaling_factor", 2.0);
  cfg.set("rope_train_length", 64);
  const int64_t rot = 16;
  const std::vector<double> plain = rope_base_inv_freq(10000.0, rot);
  EXPECT_EQ(rope_frequencies(cfg, rot, 64, true).inv_freq, plain);
  EXPECT_EQ(rope_frequencies(cfg, rot, 10, true).inv_freq, plain);
  // L = 3T: s' = 2·3 − 1 = 5, i.e. the static NTK frequencies for factor 5
  PEConfig ntk = cfg;
  ntk.set("rope_scaling", "ntk");
  ntk.set("rope_scaling_factor", 5.0);
  const RopeFreqs d = rope_frequencies(cfg, rot, 192, true), n = rope_frequencies(ntk, rot, 1, true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(d.inv_freq[i], n.inv_freq[i], 1e-15);
  const RopeFreqs d2 = rope_frequencies(cfg, rot, 400, true);
  EXPECT_LT(d2.inv_freq.back(), d.inv_freq.back());  // longer context, lower frequencies
}

TEST(PERope, YarnRampAndTemperature) {
  PEConfig cfg = rope_cfg("half", 1.0);
  cfg.set("rope_scaling", "yarn");
  cfg.set("rope_train_length", 2048);
  const int64_t rot = 64;
  const std::vector<double> plain = rope_base_inv_freq(10000.0, rot);
  cfg.set("rope_scaling_factor", 1.0);
  const RopeFreqs one = rope_frequencies(cfg, rot, 5000, true);
  EXPECT_EQ(one.mscale, 1.0);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(one.inv_freq[i], plain[i], 1e-15 * plain[i]);

  const double s = 4.0;
  cfg.set("rope_scaling_factor", s);
  const RopeFreqs f = rope_frequencies(cfg, rot, 5000, true);
  EXPECT_NEAR(f.mscale, 0.1 * std::log(s) + 1.0, 1e-15);
  const double kPi = 3.14159265358979323846;
  int fast = 0, slow = 0, mid = 0;
  double prev_ratio = 1.0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double rotations = 2048 * plain[i] / (2 * kPi);  // turns over the training context
    const double ratio = f.inv_freq[i] / plain[i];
    EXPECT_LE(ratio, prev_ratio + 1e-15) << i;  // monotone ramp
    EXPECT_GE(ratio, 1.0 / s - 1e-15);
    EXPECT_LE(ratio, 1.0 + 1e-15);
    prev_ratio = ratio;
    if (rotations >= cfg.get_float("yarn_beta_fast")) {
      EXPECT_NEAR(ratio, 1.0, 1e-15) << i;  // extrapolated (unchanged)
      ++fast;
    } else if (rotations <= cfg.get_float("yarn_beta_slow")) {
      EXPECT_NEAR(ratio, 1.0 / s, 1e-15) << i;  // interpolated
      ++slow;
    } else {
      ++mid;
    }
  }
  EXPECT_GT(fast, 0);
  EXPECT_GT(slow, 0);
  EXPECT_GT(mid, 0);

  // through the PE in eval mode: rotated vectors are scaled by mscale
  auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 2 * rot, 2));
  pe->eval();
  const Tensor q = randn({1, 2, 3, rot}, 7);
  const std::vector<int64_t> pos = {0, 3000, 4000};
  Tensor q2 = q, k2 = q;
  pe->transform_qk(q2, k2, site_of(AttnKind::DecoderSelf, pos, pos, true));
  const std::vector<double> n0 = sum(mul(q, q), {3}).to_vector(), n1 = sum(mul(q2, q2), {3}).to_vector();
  for (size_t i = 0; i < n0.size(); ++i) EXPECT_NEAR(n1[i], n0[i] * f.mscale * f.mscale, 1e-10);
}

TEST(PERope, GradientCheck) {
  for (const char* pairing : {"half", "interleaved"}) {
    auto pe = build(rope_cfg(pairing, 0.5), stack_of(StackKind::Decoder, 1, 16, 2));
    Tensor q = randn({1, 2, 3, 8}, 10).set_requires_grad(true);
    Tensor k = randn({1, 2, 4, 8}, 11).set_requires_grad(true);
    const std::vector<int64_t> qp = {2, 3, 7}, kp = {0, 2, 3, 7};
    expect_grads_match([&] { return rope_scores(*pe, q, k, qp, kp); }, {q, k},
                       std::string("rope ") + pairing);
  }
}

// ---------------------------------------------------------------- ALiBi

// Slopes read back from the bias at distance 1 of a causal site.
std::vector<double> alibi_slopes_of(int64_t heads) {
  PEConfig cfg;
  cfg.scheme = "alibi";
  auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 2 * heads, heads));
  const std::vector<int64_t> qp = {1}, kp = {0};
  const Tensor b = pe->score_term(randn({1, heads, 1, 2}, 1), site_of(AttnKind::DecoderSelf, qp, kp, true));
  EXPECT_EQ(b.shape(), (Shape{1, heads, 1, 1}));
  std::vector<double> s = b.to_vector();
  for (double& v : s) v = -v;
  return s;
}

TEST(PEAlibi, SlopesPowerOfTwo) {
  const std::vector<double> s = alibi_slopes_of(8);
  ASSERT_EQ(s.size(), 8u);
  for (int h = 1; h <= 8; ++h) EXPECT_DOUBLE_EQ(s[h - 1], std::ldexp(1.0, -h)) << h;  // 1/2 .. 1/256
  const std::vector<double> s4 = alibi_slopes_of(4);
  for (int h = 1; h <= 4; ++h) EXPECT_DOUBLE_EQ(s4[h - 1], std::ldexp(1.0, -2 * h)) << h;
  const std::vector<double> s16 = alibi_slopes_of(16);
  for (int h = 1; h <= 16; ++h) EXPECT_NEAR(s16[h - 1], std::pow(2.0, -0.5 * h), 1e-15) << h;
}

TEST(PEAlibi, SlopesNonPowerOfTwo) {
  // Official construction: slopes(4) + every other slope of slopes(8), first H−4 of them.
  const std::vector<double> s6 = alibi_slopes_of(6);
  const std::vector<double> e6 = {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256, 1.0 / 2, 1.0 / 8};
  ASSERT_EQ(s6.size(), e6.size());
  for (size_t i = 0; i < e6.size(); ++i) EXPECT_DOUBLE_EQ(s6[i], e6[i]) << i;
  // H = 12: slopes(8) = 2^-1..2^-8, then slopes(16)[0::2][:4] = 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
  const std::vector<double> s12 = alibi_slopes_of(12);
  ASSERT_EQ(s12.size(), 12u);
  for (int h = 1; h <= 8; ++h) EXPECT_DOUBLE_EQ(s12[h - 1], std::ldexp(1.0, -h));
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(s12[8 + j], std::pow(2.0, -0.5 - j), 1e-15) << j;
  const std::vector<double> s3 = alibi_slopes_of(3);  // slopes(2) = 1/16, 1/256; slopes(4)[0] = 1/4
  EXPECT_DOUBLE_EQ(s3[0], 1.0 / 16);
  EXPECT_DOUBLE_EQ(s3[1], 1.0 / 256);
  EXPECT_DOUBLE_EQ(s3[2], 1.0 / 4);
}

TEST(PEAlibi, BiasForms) {
  PEConfig cfg;
  cfg.scheme = "alibi";
  const int64_t H = 2;
  const std::vector<int64_t> qp = {10, 12}, kp = {0, 5, 10, 11, 12, 20};
  const Tensor q = randn({1, H, 2, 4}, 1);
  const std::vector<double> m = {1.0 / 16, 1.0 / 256};
  for (bool symmetric : {true, false}) {
    cfg.set("alibi_symmetric", symmetric);
    auto pe = build(cfg, stack_of(StackKind::Decoder, 1, 8, H));
    const std::vector<double> causal =
        pe->score_term(q, site_of(AttnKind::DecoderSelf, qp, kp, true)).to_vector();
    const Tensor enc = pe->score_term(q, site_of(AttnKind::EncoderSelf, qp, kp, false));
    EXPECT_EQ(enc.defined(), symmetric);
    const std::vector<double> sym = symmetric ? enc.to_vector() : std::vector<double>();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          const int64_t d = qp[i] - kp[j];
          EXPECT_DOUBLE_EQ(causal[(h * 2 + i) * 6 + j], d >= 0 ? -m[h] * d : 0.0);
          if (symmetric) { EXPECT_DOUBLE_EQ(sym[(h * 2 + i) * 6 + j], -m[h] * std::abs(d)); }
        }
    EXPECT_FALSE(pe->score_term(q, site_of(AttnKind::Cross, qp, kp, false)).defined());
    EXPECT_TRUE(pe->named_parameters().empty());
  }
}

}  // namespace
