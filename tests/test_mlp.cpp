// End-to-end training tests: nn + autograd + optim together. A Linear-tanh-Linear MLP learns XOR
// with AdamW, and a linear regression converges with SGD + momentum (float32, fixed seeds).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "pelab/pelab.h"

using namespace pelab;

namespace {

struct MLP : Module {
  MLP(int64_t in, int64_t hidden, int64_t out, Generator& gen) {
    fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, gen));
    fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out, gen));
  }
  Tensor forward(const Tensor& x) const { return fc2->forward(tanh(fc1->forward(x))); }
  std::shared_ptr<Linear> fc1, fc2;
};

Tensor mse(const Tensor& pred, const Tensor& target) {
  Tensor d = pred - target;
  return mean(d * d);
}

}  // namespace

TEST(MLPTrain, XorWithAdamW) {
  Generator gen(1234);
  MLP net(2, 8, 1, gen);
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = Tensor::from_vector({0, 1, 1, 0}, {4, 1});
  AdamW opt(net.parameters(), 0.05, AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  ASSERT_EQ(opt.params().size(), 4u);

  double first = 0.0, loss_v = 0.0;
  for (int step = 0; step < 1500; ++step) {
    opt.zero_grad();
    Tensor loss = mse(net.forward(x), y);
    loss_v = loss.item();
    if (step == 0) first = loss_v;
    loss.backward();
    opt.step();
  }
  NoGradGuard ng;
  const Tensor final_loss = mse(net.forward(x), y);
  EXPECT_EQ(final_loss.dtype(), DType::Float32);
  EXPECT_GT(first, 0.1);  // XOR is not linearly separable: the untrained net is far off
  EXPECT_LT(final_loss.item(), 1e-3);
  std::vector<double> pred = net.forward(x).to_vector();
  EXPECT_LT(pred[0], 0.1);
  EXPECT_GT(pred[1], 0.9);
  EXPECT_GT(pred[2], 0.9);
  EXPECT_LT(pred[3], 0.1);
  EXPECT_EQ(opt.step_count(), 1500);
}

TEST(MLPTrain, XorIsDeterministic) {
  auto run = [] {
    Generator gen(99);
    MLP net(2, 8, 1, gen);
    Tensor x = Tensor::from_vector({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
    Tensor y = Tensor::from_vector({0, 1, 1, 0}, {4, 1});
    AdamW opt(net.parameters(), 0.05);
    for (int step = 0; step < 50; ++step) {
      opt.zero_grad();
      mse(net.forward(x), y).backward();
      opt.step();
    }
    return net.parameter("fc1.weight").to_vector();
  };
  EXPECT_EQ(run(), run());
}

TEST(MLPTrain, LinearRegressionWithSGDMomentum) {
  const int64_t n = 64;
  const double w_true[3] = {1.5, -2.0, 0.5};
  const double b_true = 0.3;
  Generator data_gen(5);
  std::vector<double> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    double acc = b_true;
    for (int j = 0; j < 3; ++j) {
      xs[i * 3 + j] = data_gen.normal();
      acc += w_true[j] * xs[i * 3 + j];
    }
    ys[i] = acc;
  }
  Tensor x = Tensor::from_vector(xs, {n, 3});
  Tensor y = Tensor::from_vector(ys, {n, 1});

  Generator gen(17);
  Linear model(3, 1, gen);
  SGDOptions o;
  o.momentum = 0.9;
  SGD opt(model.parameters(), 0.05, o);
  double first = 0.0;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    Tensor loss = mse(model.forward(x), y);
    if (step == 0) first = loss.item();
    loss.backward();
    opt.step();
  }
  NoGradGuard ng;
  const double final_loss = mse(model.forward(x), y).item();
  EXPECT_GT(first, 1.0);
  EXPECT_LT(final_loss, 1e-8);
  std::vector<double> w = model.weight.to_vector();
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(w[j], w_true[j], 1e-3) << j;
  EXPECT_NEAR(model.bias.item(), b_true, 1e-3);
}
