// Tests for nn.h: dotted parameter names through nested modules and ModuleList, parameter lookup
// errors, init statistics and seeding, in-place dtype conversion, train/eval propagation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "pelab/pelab.h"

using namespace pelab;

namespace {

struct Block : Module {
  Block(int64_t d, Generator& gen) {
    fc = register_module("fc", std::make_shared<Linear>(d, d, gen));
    ln = register_module("ln", std::make_shared<LayerNorm>(d));
    drop = register_module("drop", std::make_shared<Dropout>(0.5));
  }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<LayerNorm> ln;
  std::shared_ptr<Dropout> drop;
};

struct Net : Module {
  Net(int64_t vocab, int64_t d, int64_t n_layers, Generator& gen) {
    scale = register_parameter("scale", Tensor::ones({1}));
    embed = register_module("embed", std::make_shared<Embedding>(vocab, d, gen, 0.02));
    layers = register_module("layers", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < n_layers; ++i) layers->push_back(std::make_shared<Block>(d, gen));
    LinearOptions no_bias;
    no_bias.bias = false;
    head = register_module("head", std::make_shared<Linear>(d, vocab, gen, no_bias));
  }
  Tensor scale;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Linear> head;
};

struct Stats {
  double mean, std, min, max;
};
Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double mean = s / v.size();
  for (double x : v) s2 += (x - mean) * (x - mean);
  return {mean, std::sqrt(s2 / (v.size() - 1)), *std::min_element(v.begin(), v.end()),
          *std::max_element(v.begin(), v.end())};
}

}  // namespace

TEST(NNModule, DottedNamesDepthFirst) {
  Generator gen(1);
  Net net(7, 4, 2, gen);
  std::vector<std::string> names;
  for (auto& nt : net.named_parameters()) names.push_back(nt.first);
  const std::vector<std::string> expected = {
      "scale",            "embed.weight",     "layers.0.fc.weight", "layers.0.fc.bias",
      "layers.0.ln.weight", "layers.0.ln.bias", "layers.1.fc.weight", "layers.1.fc.bias",
      "layers.1.ln.weight", "layers.1.ln.bias", "head.weight"};
  EXPECT_EQ(names, expected);

  // The name resolves to the very tensor the submodule holds.
  Tensor w = net.parameter("layers.1.fc.weight");
  EXPECT_EQ(w.impl(), net.layers->at<Block>(1).fc->weight.impl());
  EXPECT_EQ(w.shape(), (Shape{4, 4}));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(net.parameter("head.weight").shape(), (Shape{7, 4}));
  EXPECT_FALSE(net.head->bias.defined());

  // 1 + 7*4 + 2 * (4*4 + 4 + 4 + 4) + 4*7
  EXPECT_EQ(net.num_parameters(), 1 + 28 + 2 * 28 + 28);
  EXPECT_EQ(net.parameters().size(), expected.size());

  std::vector<std::string> mods;
  for (auto& nm : net.named_modules()) mods.push_back(nm.first);
  const std::vector<std::string> expected_mods = {
      "",           "embed",         "layers",      "layers.0",    "layers.0.fc", "layers.0.ln",
      "layers.0.drop", "layers.1",   "layers.1.fc", "layers.1.ln", "layers.1.drop", "head"};
  EXPECT_EQ(mods, expected_mods);
  EXPECT_EQ(net.named_modules()[0].second, &net);
  EXPECT_EQ(net.layers->size(), 2u);
}

TEST(NNModule, ParameterErrorNamesKeyAndValidNames) {
  Generator gen(1);
  Net net(7, 4, 2, gen);
  try {
    net.parameter("layers.9.fc.weight");
    FAIL() << "parameter() accepted a missing key";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'layers.9.fc.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("embed.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layers.0.fc.weight"), std::string::npos) << msg;
  }
}

TEST(NNModule, RegistrationErrorsAndTiedParameters) {
  struct Bad : Module {
    void dup() {
      register_parameter("w", Tensor::zeros({2}));
      register_parameter("w", Tensor::zeros({2}));
    }
    void dotted() { register_parameter("a.b", Tensor::zeros({2})); }
  };
  Bad b1, b2;
  EXPECT_THROW(b1.dup(), Error);
  EXPECT_THROW(b2.dotted(), Error);

  struct Tied : Module {
    explicit Tied(Generator& gen) {
      emb = register_module("emb", std::make_shared<Embedding>(5, 3, gen));
      out = register_parameter("out", emb->weight);  // weight tying
    }
    std::shared_ptr<Embedding> emb;
    Tensor out;
  };
  Generator gen(3);
  Tied t(gen);
  auto np = t.named_parameters();
  ASSERT_EQ(np.size(), 1u);  // the tied tensor is listed once
  EXPECT_EQ(np[0].first, "out");  // own parameters come before children's
  EXPECT_EQ(t.num_parameters(), 15);
}

TEST(NNInit, XavierAndKaimingBounds) {
  Generator gen(42);
  Tensor w = Tensor::empty({64, 32});
  init::xavier_uniform_(w, gen);
  const double bound = std::sqrt(6.0 / (64 + 32));  // 0.25
  Stats s = stats_of(w);
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, 0.95 * bound);  // the range is actually used
  EXPECT_LT(s.min, -0.95 * bound);
  EXPECT_NEAR(s.std, bound / std::sqrt(3.0), 0.06 * bound / std::sqrt(3.0));
  EXPECT_EQ(gen.offset(), 64u * 32u);  // one counter per element

  Tensor w2 = Tensor::empty({16, 8});
  init::xavier_uniform_(w2, gen, 2.0);
  const double bound2 = 2.0 * std::sqrt(6.0 / 24.0);
  Stats s2 = stats_of(w2);
  EXPECT_LE(s2.max, bound2);
  EXPECT_GT(s2.max, 0.8 * bound2);

  // kaiming_uniform with a = sqrt(5) (nn.Linear default): bound = sqrt(2/6) * sqrt(3/fan_in)
  Tensor k = Tensor::empty({128, 100});
  init::kaiming_uniform_(k, gen);
  const double kb = std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / 100.0);  // 0.1
  Stats sk = stats_of(k);
  EXPECT_GE(sk.min, -kb);
  EXPECT_LE(sk.max, kb);
  EXPECT_GT(sk.max, 0.95 * kb);
  // Linear with kaiming init uses the same bound.
  LinearOptions o;
  o.init = "kaiming_uniform";
  Linear lin(100, 50, gen, o);
  Stats sl = stats_of(lin.weight);
  EXPECT_LE(sl.max, kb);
  EXPECT_GT(sl.max, 0.9 * kb);
  EXPECT_EQ(lin.bias.to_vector(), std::vector<double>(50, 0.0));

  Tensor v = Tensor::empty({5});
  EXPECT_THROW(init::xavier_uniform_(v, gen), Error);  // fans need 2 dims
}

TEST(NNInit, NormalStatisticsAndSeeding) {
  Generator gen(7);
  LinearOptions o;
  o.init = "normal";
  o.std = 0.02;
  Linear lin(256, 256, gen, o);
  Stats s = stats_of(lin.weight);
  EXPECT_NEAR(s.std, 0.02, 0.02 * 0.02);  // n = 65536: relative sampling error ~0.3%
  EXPECT_NEAR(s.mean, 0.0, 4 * 0.02 / 256);
  EXPECT_EQ(lin.weight.shape(), (Shape{256, 256}));

  Generator g1(11), g2(11), g3(12);
  Embedding e1(256, 256, g1), e2(256, 256, g2), e3(256, 256, g3);
  Stats se = stats_of(e1.weight);
  EXPECT_NEAR(se.std, 1.0, 0.02);
  EXPECT_NEAR(se.mean, 0.0, 4.0 / 256);
  EXPECT_EQ(e1.weight.to_vector(), e2.weight.to_vector());  // same seed -> same init
  std::vector<double> a = e1.weight.to_vector(), c = e3.weight.to_vector();
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != c[i];
  EXPECT_GT(differ, a.size() * 99 / 100);  // different seed -> different values

  // Consecutive draws from one generator do not repeat values.
  Generator g4(11);
  Tensor x = Tensor::empty({1000}), y = Tensor::empty({1000});
  init::uniform_(x, -1, 1, g4);
  init::uniform_(y, -1, 1, g4);
  EXPECT_NE(x.to_vector(), y.to_vector());
  EXPECT_EQ(g4.offset(), 2000u);

  LayerNorm ln(6);
  EXPECT_EQ(ln.weight.to_vector(), std::vector<double>(6, 1.0));
  EXPECT_EQ(ln.bias.to_vector(), std::vector<double>(6, 0.0));
  LayerNorm ln_plain(6, 1e-5, false);
  EXPECT_TRUE(ln_plain.named_parameters().empty());

  Tensor c5 = Tensor::empty({3}, DType::Float64);
  init::constant_(c5, 2.5);
  EXPECT_EQ(c5.to_vector(), std::vector<double>(3, 2.5));

  LinearOptions bad;
  bad.init = "orthogonal";
  EXPECT_THROW(Linear(4, 4, gen, bad), Error);
}

TEST(NNInit, FillsParameterThatRequiresGrad) {
  // In-place init of a parameter must work while grad mode is on.
  Generator gen(5);
  Tensor p = Tensor::zeros({8, 8});
  p.set_requires_grad(true);
  init::normal_(p, 0.0, 1.0, gen);
  EXPECT_GT(stats_of(p).std, 0.3);
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(grad_enabled());
}

TEST(NNModule, ToFloat64KeepsHandlesValid) {
  Generator gen(9);
  Net net(5, 3, 1, gen);
  Tensor held = net.layers->at<Block>(0).fc->weight;  // handle held elsewhere
  Tensor by_name = net.parameter("embed.weight");
  const std::vector<double> before = held.to_vector();
  held.set_grad(Tensor::ones({3, 3}));

  net.to(DType::Float64);
  EXPECT_EQ(held.dtype(), DType::Float64);
  EXPECT_EQ(by_name.dtype(), DType::Float64);
  EXPECT_EQ(held.to_vector(), before);  // float32 -> float64 is exact
  EXPECT_TRUE(held.requires_grad());
  EXPECT_TRUE(held.is_leaf());
  EXPECT_FALSE(held.grad().defined());  // gradients are dropped
  for (auto& nt : net.named_parameters()) {
    EXPECT_EQ(nt.second.dtype(), DType::Float64) << nt.first;
    EXPECT_TRUE(nt.second.is_contiguous()) << nt.first;
  }

  // The converted parameter still takes part in autograd through the held handle.
  Tensor x = Tensor::from_vector({1.0, 2.0, 3.0}, {1, 3}, DType::Float64);
  Tensor y = net.layers->at<Block>(0).fc->forward(x);
  EXPECT_EQ(y.dtype(), DType::Float64);
  sum(y).backward();
  ASSERT_TRUE(held.grad().defined());
  EXPECT_EQ(held.grad().dtype(), DType::Float64);
  EXPECT_EQ(held.grad().to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3}));

  net.zero_grad();
  EXPECT_FALSE(held.grad().defined());

  net.to(DType::Float32);
  EXPECT_EQ(held.dtype(), DType::Float32);
  EXPECT_EQ(held.to_vector(), before);
  net.to(Device::cpu());  // same device: a no-op
  EXPECT_EQ(held.to_vector(), before);
  EXPECT_THROW(net.to(DType::Int64), Error);
}

TEST(NNModule, TrainEvalPropagates) {
  Generator gen(2);
  Net net(5, 4, 2, gen);
  for (auto& nm : net.named_modules()) EXPECT_TRUE(nm.second->is_training()) << nm.first;
  net.eval();
  for (auto& nm : net.named_modules()) EXPECT_FALSE(nm.second->is_training()) << nm.first;

  // Dropout is the identity in eval mode.
  Generator dgen(3);
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor y = net.layers->at<Block>(1).drop->forward(x, dgen);
  EXPECT_EQ(y.to_vector(), x.to_vector());

  net.train();
  for (auto& nm : net.named_modules()) EXPECT_TRUE(nm.second->is_training()) << nm.first;
  net.layers->at<Block>(0).eval();  // only that subtree
  EXPECT_TRUE(net.is_training());
  EXPECT_FALSE(net.layers->at<Block>(0).fc->is_training());
  EXPECT_FALSE(net.layers->at<Block>(0).drop->is_training());
  EXPECT_TRUE(net.layers->at<Block>(1).drop->is_training());
}
