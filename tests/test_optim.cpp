// Tests for optim.h: AdamW and SGD against hand-written double arithmetic and PyTorch numbers,
// state buffers, global grad-norm clipping and LR schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "pelab/pelab.h"

using namespace pelab;

namespace {

// Three fixed gradients for a 2-element parameter that starts at [1, -2].
const double kP0[2] = {1.0, -2.0};
const double kGrads[3][2] = {{0.1, -0.2}, {0.3, 0.05}, {-0.4, 0.25}};

Tensor make_param(DType dt) {
  Tensor p = Tensor::from_vector({kP0[0], kP0[1]}, {2}, dt);
  p.set_requires_grad(true);
  return p;
}

void set_step_grad(Tensor& p, int t) {
  p.set_grad(Tensor::from_vector({kGrads[t][0], kGrads[t][1]}, {2}, p.dtype()));
}

// Plain-double AdamW (Loshchilov & Hutter, PyTorch's torch.optim.AdamW update order).
struct RefAdamW {
  double lr, b1, b2, eps, wd;
  double p[2] = {kP0[0], kP0[1]}, m[2] = {0, 0}, v[2] = {0, 0};
  int t = 0;
  void step(const double g[2]) {
    ++t;
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (int j = 0; j < 2; ++j) {
      p[j] *= 1.0 - lr * wd;
      m[j] = b1 * m[j] + (1.0 - b1) * g[j];
      v[j] = b2 * v[j] + (1.0 - b2) * g[j] * g[j];
      const double mhat = m[j] / bc1, vhat = v[j] / bc2;
      p[j] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// Plain-double SGD (torch.optim.SGD semantics: buffer = first d, then momentum*buf + (1-damp)*d).
struct RefSGD {
  double lr, mom, damp, wd;
  bool nesterov;
  double p[2] = {kP0[0], kP0[1]}, buf[2] = {0, 0};
  int t = 0;
  void step(const double g[2]) {
    ++t;
    for (int j = 0; j < 2; ++j) {
      double d = g[j] + wd * p[j];
      if (mom != 0.0) {
        buf[j] = t == 1 ? d : mom * buf[j] + (1.0 - damp) * d;
        d = nesterov ? d + mom * buf[j] : buf[j];
      }
      p[j] -= lr * d;
    }
  }
};

}  // namespace

TEST(OptimAdamW, MatchesHandComputedAndPyTorchFloat64) {
  Tensor p = make_param(DType::Float64);
  AdamW opt({p}, 0.1, AdamWOptions{0.9, 0.999, 1e-8, 0.1});
  RefAdamW ref{0.1, 0.9, 0.999, 1e-8, 0.1};
  for (int t = 0; t < 3; ++t) {
    set_step_grad(p, t);
    opt.step();
    ref.step(kGrads[t]);
    std::vector<double> got = p.to_vector();
    EXPECT_NEAR(got[0], ref.p[0], 1e-12) << "step " << t + 1;
    EXPECT_NEAR(got[1], ref.p[1], 1e-12) << "step " << t + 1;
  }
  EXPECT_EQ(opt.step_count(), 3);
  // /usr/bin/python3 -c "import torch; p = torch.tensor([1.0, -2.0], dtype=torch.float64,
  //   requires_grad=True); o = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.999), eps=1e-8,
  //   weight_decay=0.1)
  //   for g in [[0.1, -0.2], [0.3, 0.05], [-0.4, 0.25]]:
  //     p.grad = torch.tensor(g, dtype=torch.float64); o.step()
  //   print([repr(x) for x in p.detach().tolist()])"
  std::vector<double> got = p.to_vector();
  EXPECT_NEAR(got[0], 0.7875687828178258, 1e-12);
  EXPECT_NEAR(got[1], -1.8223408663409315, 1e-12);
  // State buffers hold the reference moments.
  auto& st = opt.state_buffers();
  ASSERT_EQ(st.size(), 1u);
  ASSERT_EQ(st[0].size(), 2u);
  std::vector<double> m = st[0][0].to_vector(), v = st[0][1].to_vector();
  for (int j = 0; j < 2; ++j) {
    EXPECT_NEAR(m[j], ref.m[j], 1e-14);
    EXPECT_NEAR(v[j], ref.v[j], 1e-14);
  }
  EXPECT_EQ(opt.state_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(OptimAdamW, Float32MatchesReference) {
  Tensor p = make_param(DType::Float32);
  AdamW opt({p}, 0.1, AdamWOptions{0.9, 0.999, 1e-8, 0.1});
  RefAdamW ref{0.1, 0.9, 0.999, 1e-8, 0.1};
  for (int t = 0; t < 3; ++t) {
    set_step_grad(p, t);
    opt.step();
    ref.step(kGrads[t]);
  }
  std::vector<double> got = p.to_vector();
  EXPECT_NEAR(got[0], ref.p[0], 2e-6);
  EXPECT_NEAR(got[1], ref.p[1], 2e-6);
  EXPECT_EQ(p.dtype(), DType::Float32);
}

TEST(OptimAdamW, SkipsParamsWithoutGrad) {
  Tensor a = make_param(DType::Float64);
  Tensor b = make_param(DType::Float64);
  AdamW opt({a, b}, 0.1);
  set_step_grad(a, 0);
  opt.step();
  EXPECT_NE(a.to_vector()[0], kP0[0]);
  EXPECT_EQ(b.to_vector(), (std::vector<double>{kP0[0], kP0[1]}));  // no grad: no decay either
  auto& st = opt.state_buffers();
  EXPECT_EQ(st[1][0].to_vector(), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(st[1][1].to_vector(), (std::vector<double>{0.0, 0.0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(OptimAdamW, StateBuffersAllocatedBeforeFirstStep) {
  Tensor p = make_param(DType::Float32);
  AdamW opt({p}, 1e-3);
  auto& st = opt.state_buffers();
  ASSERT_EQ(st.size(), 1u);
  ASSERT_EQ(st[0].size(), 2u);
  EXPECT_EQ(st[0][0].shape(), p.shape());
  EXPECT_EQ(st[0][1].dtype(), DType::Float32);
  EXPECT_EQ(st[0][1].to_vector(), (std::vector<double>{0.0, 0.0}));
}

TEST(OptimAdamW, RejectsBadOptions) {
  Tensor p = make_param(DType::Float32);
  EXPECT_THROW(AdamW({p}, 0.1, AdamWOptions{1.0, 0.999, 1e-8, 0.0}), Error);
  EXPECT_THROW(AdamW({p}, -1.0), Error);
}

TEST(OptimSGD, MomentumWeightDecayMatchesReference) {
  Tensor p = make_param(DType::Float64);
  SGDOptions o;
  o.momentum = 0.9;
  o.weight_decay = 0.05;
  SGD opt({p}, 0.1, o);
  RefSGD ref{0.1, 0.9, 0.0, 0.05, false};
  for (int t = 0; t < 3; ++t) {
    set_step_grad(p, t);
    opt.step();
    ref.step(kGrads[t]);
    std::vector<double> got = p.to_vector();
    EXPECT_NEAR(got[0], ref.p[0], 1e-13) << "step " << t + 1;
    EXPECT_NEAR(got[1], ref.p[1], 1e-13) << "step " << t + 1;
  }
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.05), same loop as the AdamW test
  std::vector<double> got = p.to_vector();
  EXPECT_NEAR(got[0], 0.9283096249999999, 1e-13);
  EXPECT_NEAR(got[1], -1.92479425, 1e-13);
  std::vector<double> buf = opt.state_buffers()[0][0].to_vector();
  EXPECT_NEAR(buf[0], ref.buf[0], 1e-13);
  EXPECT_NEAR(buf[1], ref.buf[1], 1e-13);
  EXPECT_EQ(opt.state_names(), (std::vector<std::string>{"momentum_buffer"}));
}

TEST(OptimSGD, NesterovMatchesReference) {
  Tensor p = make_param(DType::Float64);
  SGDOptions o;
  o.momentum = 0.9;
  o.weight_decay = 0.05;
  o.nesterov = true;
  SGD opt({p}, 0.1, o);
  RefSGD ref{0.1, 0.9, 0.0, 0.05, true};
  for (int t = 0; t < 3; ++t) {
    set_step_grad(p, t);
    opt.step();
    ref.step(kGrads[t]);
  }
  std::vector<double> got = p.to_vector();
  EXPECT_NEAR(got[0], ref.p[0], 1e-13);
  EXPECT_NEAR(got[1], ref.p[1], 1e-13);
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
  EXPECT_NEAR(got[0], 0.921466527875, 1e-13);
  EXPECT_NEAR(got[1], -1.91340980575, 1e-13);
}

TEST(OptimSGD, DampeningAndPlainMatchReference) {
  {
    Tensor p = make_param(DType::Float64);
    SGDOptions o;
    o.momentum = 0.9;
    o.dampening = 0.1;
    SGD opt({p}, 0.1, o);
    RefSGD ref{0.1, 0.9, 0.1, 0.0, false};
    for (int t = 0; t < 3; ++t) {
      set_step_grad(p, t);
      opt.step();
      ref.step(kGrads[t]);
    }
    std::vector<double> got = p.to_vector();
    EXPECT_NEAR(got[0], ref.p[0], 1e-13);
    EXPECT_NEAR(got[1], ref.p[1], 1e-13);
    // torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.1)
    EXPECT_NEAR(got[0], 0.9576, 1e-13);
    EXPECT_NEAR(got[1], -1.97685, 1e-13);
  }
  {
    Tensor p = make_param(DType::Float32);
    SGDOptions o;
    o.weight_decay = 0.05;
    SGD opt({p}, 0.1, o);
    RefSGD ref{0.1, 0.0, 0.0, 0.05, false};
    for (int t = 0; t < 3; ++t) {
      set_step_grad(p, t);
      opt.step();
      ref.step(kGrads[t]);
    }
    std::vector<double> got = p.to_vector();
    EXPECT_NEAR(got[0], ref.p[0], 1e-6);
    EXPECT_NEAR(got[1], ref.p[1], 1e-6);
    // torch.optim.SGD([p], lr=0.1, weight_decay=0.05) in float64
    EXPECT_NEAR(got[0], 0.985324625, 1e-6);
    EXPECT_NEAR(got[1], -1.98032425, 1e-6);
  }
}

TEST(OptimSGD, NesterovNeedsMomentum) {
  Tensor p = make_param(DType::Float32);
  SGDOptions o;
  o.nesterov = true;
  EXPECT_THROW(SGD({p}, 0.1, o), Error);
}

TEST(OptimClip, ScalesToMaxNormAndReturnsNorm) {
  Tensor a = Tensor::zeros({2});
  Tensor b = Tensor::zeros({1});
  Tensor c = Tensor::zeros({3});  // no grad: ignored
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  c.set_requires_grad(true);
  a.set_grad(Tensor::from_vector({3.0, 4.0}, {2}));
  b.set_grad(Tensor::from_vector({12.0}, {1}));
  // torch.nn.utils.clip_grad_norm_([a, b], 1.0) with a.grad=[3,4], b.grad=[12] returns 13.0 and
  // leaves a.grad=[0.23076921701431274, 0.307692289352417], b.grad=[0.923076868057251] (float32)
  const double norm = clip_grad_norm({a, b, c}, 1.0);
  EXPECT_NEAR(norm, 13.0, 1e-9);
  const double coef = 1.0 / (13.0 + 1e-6);
  std::vector<double> ga = a.grad().to_vector(), gb = b.grad().to_vector();
  EXPECT_NEAR(ga[0], 3.0 * coef, 1e-7);
  EXPECT_NEAR(ga[1], 4.0 * coef, 1e-7);
  EXPECT_NEAR(gb[0], 12.0 * coef, 1e-7);
  EXPECT_NEAR(ga[0], 0.23076921701431274, 1e-7);
  EXPECT_NEAR(gb[0], 0.923076868057251, 1e-7);
  EXPECT_FALSE(c.grad().defined());
  // The clipped gradients now have norm ~max_norm; a larger max_norm leaves them unchanged.
  const double norm2 = clip_grad_norm({a, b}, 5.0);
  EXPECT_NEAR(norm2, 1.0, 1e-6);
  EXPECT_EQ(a.grad().to_vector(), ga);
  EXPECT_EQ(b.grad().to_vector(), gb);
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

TEST(OptimClip, Float64AndNoGrads) {
  Tensor a = Tensor::zeros({2, 2}, DType::Float64);
  a.set_requires_grad(true);
  EXPECT_EQ(clip_grad_norm({a}, 1.0), 0.0);
  a.set_grad(Tensor::from_vector({1.0, 2.0, 2.0, 4.0}, {2, 2}, DType::Float64));  // norm 5
  EXPECT_NEAR(clip_grad_norm({a}, 2.5), 5.0, 1e-12);
  std::vector<double> g = a.grad().to_vector();
  EXPECT_NEAR(g[3], 4.0 * 2.5 / (5.0 + 1e-6), 1e-12);
}

TEST(OptimSchedule, Constant) {
  LRSchedule s;
  s.kind = "constant";
  s.base_lr = 3e-4;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(12345), 3e-4);
}

TEST(OptimSchedule, WarmupCosine) {
  LRSchedule s;
  s.kind = "warmup_cosine";
  s.base_lr = 1e-3;
  s.min_lr = 1e-5;
  s.warmup = 10;
  s.total = 110;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-4);          // (0+1)/10
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5e-4);          // (4+1)/10
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1e-3);          // last warmup step reaches base
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);         // cosine starts at base
  EXPECT_NEAR(s.lr_at(60), (1e-3 + 1e-5) / 2, 1e-15);  // halfway: cos(pi/2) = 0
  const double quarter = 1e-5 + 0.5 * (1e-3 - 1e-5) * (1.0 + std::sqrt(0.5));  // cos(pi/4)
  EXPECT_NEAR(s.lr_at(35), quarter, 1e-15);
  EXPECT_GT(s.lr_at(109), 1e-5);
  EXPECT_LT(s.lr_at(109), 1.1e-5);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 1e-5);        // end
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 1e-5);       // after total
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(s.lr_at(t), s.lr_at(t + 1)) << t;  // monotone decay
  LRSchedule nowarm = s;
  nowarm.warmup = 0;
  EXPECT_DOUBLE_EQ(nowarm.lr_at(0), 1e-3);
  EXPECT_NEAR(nowarm.lr_at(55), (1e-3 + 1e-5) / 2, 1e-15);
}

TEST(OptimSchedule, InverseSqrt) {
  LRSchedule s;
  s.kind = "inverse_sqrt";
  s.base_lr = 1.0;
  s.warmup = 4;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 1.0);     // peak at step warmup-1
  EXPECT_DOUBLE_EQ(s.lr_at(15), 0.5);    // sqrt(4/16)
  EXPECT_DOUBLE_EQ(s.lr_at(99), 0.2);    // sqrt(4/100)
  s.warmup = 0;
  EXPECT_THROW(s.lr_at(0), Error);
}

TEST(OptimSchedule, InvalidKindThrows) {
  LRSchedule s;
  s.kind = "linear_decay";
  EXPECT_THROW(s.lr_at(0), Error);
  try {
    LRSchedule::validate("cosine");
    FAIL() << "validate accepted an unknown kind";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'cosine'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("warmup_cosine"), std::string::npos) << msg;
    EXPECT_NE(msg.find("inverse_sqrt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(LRSchedule::validate("constant"));
  EXPECT_NO_THROW(LRSchedule::validate("warmup_cosine"));
  EXPECT_NO_THROW(LRSchedule::validate("inverse_sqrt"));
}
