// pelab — autograd engine tests: gradient accumulation, shared inputs, grad mode, graph release,
// seed rules, requires_grad propagation and detach.
#include <gtest/gtest.h>

#include "pelab/autograd.h"
#include "pelab/pelab.h"

namespace {

using namespace pelab;
using Values = std::vector<double>;

Tensor leaf(const Values& v, const Shape& s) {
  return Tensor::from_vector(v, s, DType::Float64).set_requires_grad(true);
}

void expect_near(const Values& got, const Values& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  Tensor x = leaf({1, 2, 3}, {3});
  sum(mul(x, x)).backward();  // d/dx sum(x^2) = 2x
  expect_near(x.grad().to_vector(), {2, 4, 6});
  sum(mul_scalar(x, 3.0)).backward();  // + 3
  expect_near(x.grad().to_vector(), {5, 7, 9});
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  expect_near(x.grad().to_vector(), {1, 1, 1});
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = leaf({0.5, -1.0}, {2});
  Tensor a = exp(x);                  // path 1
  Tensor b = mul(x, x);               // path 2
  Tensor y = sum(add(mul(a, b), x));  // y = sum(e^x x^2 + x)
  y.backward();
  Values want;
  for (double v : {0.5, -1.0}) want.push_back(std::exp(v) * v * v + std::exp(v) * 2 * v + 1);
  expect_near(x.grad().to_vector(), want);
  // the intermediate is not a leaf: it receives no .grad
  EXPECT_FALSE(a.is_leaf());
  EXPECT_FALSE(a.grad().defined());
}

TEST(Autograd, SharedInputUsedTwiceInOneOp) {
  Tensor x = leaf({3.0}, {});
  mul(x, x).backward();
  expect_near(x.grad().to_vector(), {6.0});
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    y = sum(mul(x, exp(x)));
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(y.backward(), Error);
  // nesting restores the previous state
  {
    NoGradGuard outer;
    { NoGradGuard inner; }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(exp(x));
  y.backward();
  try {
    y.backward();
    FAIL() << "second backward did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  // a fresh graph from the same leaf works again
  sum(exp(x)).backward();
  expect_near(x.grad().to_vector(), {2 * std::exp(1.0), 2 * std::exp(2.0)});
}

// The walk keeps its per-node counts and gradient sums on the nodes: a backward that throws
// half-way leaves none behind, and a later walk through a node it reached starts from zero.
TEST(Autograd, ThrowingBackwardLeavesNoPartialSumsOnTheNodes) {
  Tensor x = leaf({1, 2}, {2});
  Tensor a = mul_scalar(x, 3.0);  // reached by both walks, run by neither the first
  Tensor boom = record("boom", {a}, a.detach().clone(), [](const Tensor&) -> std::vector<Tensor> {
    throw Error("boom: backward fails");
  });
  // Kahn's order runs sum(a) before the failing node, so a already holds one gradient.
  Tensor root = add(sum(boom), sum(a));
  EXPECT_THROW(root.backward(), Error);
  EXPECT_FALSE(a.grad_fn()->grad.defined());
  EXPECT_FALSE(a.grad_fn()->released);
  EXPECT_FALSE(x.grad().defined());
  sum(a).backward();  // a's node again, from a new root
  expect_near(x.grad().to_vector(), {3, 3});
}

TEST(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul_scalar(x, 2.0);
  EXPECT_THROW(y.backward(), Error);
  EXPECT_THROW(y.backward(Tensor::ones({2}, DType::Float64)), Error);  // wrong shape
  y.backward(Tensor::from_vector({1, 10, 100}, {3}, DType::Float64));
  expect_near(x.grad().to_vector(), {2, 20, 200});
}

TEST(Autograd, RequiresGradPropagates) {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = Tensor::from_vector({3, 4}, {2}, DType::Float64);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(c.requires_grad());
  Tensor y = add(x, c);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name, "add");
  Tensor z = mul(c, c);
  EXPECT_FALSE(z.requires_grad());
  Tensor v = reshape(transpose(reshape(y, {1, 2}), 0, 1), {2});  // through views too
  EXPECT_TRUE(v.requires_grad());
  sum(mul(v, c)).backward();
  expect_near(x.grad().to_vector(), {3, 4});
  EXPECT_FALSE(c.grad().defined());
  // non-differentiable ops cut the graph
  EXPECT_FALSE(gt(x, c).requires_grad());
  EXPECT_FALSE(argmax(x, 0).requires_grad());
  // only floating tensors may require grad
  EXPECT_THROW(Tensor::from_ints({1}, {1}).set_requires_grad(true), Error);
}

TEST(Autograd, DetachStopsGradientAndSharesStorage) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = exp(x);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_EQ(d.impl()->storage, y.impl()->storage);
  // x * detach(exp(x)): only the direct path carries gradient
  sum(mul(x, d)).backward();
  expect_near(x.grad().to_vector(), {std::exp(1.0), std::exp(2.0)});
}

TEST(Autograd, GraphIsFreedWithoutBackward) {
  // Ops that save their own output must not form a cycle output -> node -> closure -> output.
  std::weak_ptr<Node> node;
  std::weak_ptr<TensorImpl> out;
  Tensor x = leaf({0.5, 1.5}, {2});
  {
    Tensor y = div(sqrt(exp(tanh(sigmoid(x)))), rdiv_scalar(2.0, x));
    EXPECT_TRUE(y.requires_grad());
    node = y.grad_fn();
    out = y.impl_ptr();
  }
  EXPECT_TRUE(node.expired());
  EXPECT_TRUE(out.expired());
}

TEST(Autograd, LeafGradientIsAnIndependentCopy) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor g = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::Float64);
  x.backward(g);  // a leaf root: its gradient is the seed
  expect_near(x.grad().to_vector(), {1, 2, 3, 4});
  g.fill_(0.0);  // later changes to the seed do not leak into .grad
  expect_near(x.grad().to_vector(), {1, 2, 3, 4});
  // broadcast backward produces stride-0 gradients; accumulation must still be element-wise
  Tensor b = leaf({1, 2}, {2});
  sum(add(expand(b, {3, 2}), Tensor::zeros({3, 2}, DType::Float64))).backward();
  sum(mul_scalar(b, 1.0)).backward();
  expect_near(b.grad().to_vector(), {4, 4});
}

}  // namespace
