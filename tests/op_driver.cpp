// pelab — the op test driver (see op_driver.h): the case registry and the gtests that run every
// case on every available backend x {float32, float64}, contiguous and non-contiguous, checking the
// forward result against a CPU float64 reference and analytic gradients against central
// differences.
#include "op_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

namespace pelab::testing {

static std::vector<OpCase>& case_list() {
  static std::vector<OpCase> cases;
  return cases;
}
bool add_case(OpCase c) {
  case_list().push_back(std::move(c));
  return true;
}
const std::vector<OpCase>& all_cases() { return case_list(); }

uint64_t case_seed(const OpCase& c) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : c.op + "/" + c.label) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

std::vector<Values> case_inputs(const OpCase& c) {
  Generator gen(case_seed(c));
  std::vector<Values> raw;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Values v(static_cast<size_t>(shape_numel(c.shapes[i])));
    for (double& x : v) {
      x = gen.normal();
      if (c.domain) x = c.domain(i, x);
    }
    raw.push_back(std::move(v));
  }
  return raw;
}

Tensor make_input(const Values& vals, const Shape& shape, DType dt, Device dev, bool noncontig) {
  if (!noncontig || shape.empty()) return Tensor::from_vector(vals, shape, dt, dev);
  if (shape.size() == 1) {
    const int64_t n = shape[0];
    Values b(static_cast<size_t>(2 * n), std::numeric_limits<double>::quiet_NaN());
    for (int64_t i = 0; i < n; ++i) b[2 * i] = vals[i];
    return slice(Tensor::from_vector(b, {2 * n}, dt, dev), 0, 0, 2 * n, 2);
  }
  const size_t r = shape.size();
  const int64_t m = shape[r - 2], n = shape[r - 1];
  const int64_t batch = shape_numel(shape) / std::max<int64_t>(m * n, 1);
  Shape ps = shape;
  std::swap(ps[r - 2], ps[r - 1]);
  Values b(vals.size());
  for (int64_t k = 0; k < batch; ++k)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) b[(k * n + j) * m + i] = vals[(k * m + i) * n + j];
  return transpose(Tensor::from_vector(b, ps, dt, dev), -1, -2);
}

std::vector<Tensor> make_inputs(const OpCase& c, const std::vector<Values>& raw, DType dt,
                                Device dev, bool noncontig, bool requires_grad) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < raw.size(); ++i) {
    Tensor t = make_input(raw[i], c.shapes[i], dt, dev, noncontig);
    if (requires_grad) t.set_requires_grad(true);
    in.push_back(t);
  }
  return in;
}

double scaled_error(const Values& ref, const Values& got, size_t* worst) {
  double scale = 1.0, err = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) scale = std::max(scale, std::fabs(r));
  *worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double e;
    if (std::isnan(ref[i]) || std::isnan(got[i]))
      e = std::isnan(ref[i]) && std::isnan(got[i]) ? 0.0 : std::numeric_limits<double>::infinity();
    else if (std::isinf(ref[i]) || std::isinf(got[i]))
      e = ref[i] == got[i] ? 0.0 : std::numeric_limits<double>::infinity();
    else
      e = std::fabs(ref[i] - got[i]) / scale;
    if (e > err || (i == 0 && e == err)) {
      err = e;
      *worst = i;
    }
  }
  return err;
}

}  // namespace pelab::testing

namespace {

using namespace pelab;
using pelab::testing::all_cases;
using pelab::testing::OpCase;
using pelab::testing::Values;
using pelab::testing::case_inputs;
using pelab::testing::case_seed;
using pelab::testing::make_inputs;
using pelab::testing::scaled_error;

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (backend_available(DeviceType::CUDA)) d.push_back(Device::cuda(0));
  return d;
}


std::string layout_name(bool noncontig) { return noncontig ? "non-contiguous" : "contiguous"; }

double dot(const Values& a, const Values& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// L(inputs) = sum(fn(inputs) * W) on the CPU in float64, without autograd.
double loss_at(const OpCase& c, const std::vector<Values>& raw, const Values& w) {
  NoGradGuard ng;
  std::vector<Tensor> in;
  for (size_t i = 0; i < raw.size(); ++i)
    in.push_back(Tensor::from_vector(raw[i], c.shapes[i], DType::Float64, Device::cpu()));
  return dot(c.fn(in).to_vector(), w);
}

const OpInfo* find_op(const std::string& name) {
  for (const auto& o : registered_ops())
    if (o.name == name) return &o;
  return nullptr;
}

class OpDriverCase : public ::testing::TestWithParam<size_t> {};

TEST_P(OpDriverCase, ForwardAndGradient) {
  const OpCase& c = all_cases()[GetParam()];
  SCOPED_TRACE("op '" + c.op + "' case '" + c.label + "'");
  ASSERT_TRUE(c.fn) << "case has no fn";
  const std::vector<Values> raw = case_inputs(c);

  // ---- reference: CPU float64, contiguous ----
  Tensor ref_out;
  {
    NoGradGuard ng;
    std::vector<Tensor> in;
    for (size_t i = 0; i < raw.size(); ++i)
      in.push_back(Tensor::from_vector(raw[i], c.shapes[i], DType::Float64, Device::cpu()));
    ref_out = c.fn(in);
  }
  ASSERT_TRUE(ref_out.defined());
  const Values ref = ref_out.to_vector();
  const Shape ref_shape = ref_out.shape();
  const bool int_out = !is_floating(ref_out.dtype());

  std::vector<bool> layouts{false};
  if (c.noncontig) layouts.push_back(true);

  // ---- forward on every backend x dtype x layout ----
  for (Device dev : devices()) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      for (bool nc : layouts) {
        SCOPED_TRACE(dev.str() + " " + dtype_name(dt) + " " + layout_name(nc));
        const std::vector<Tensor> in = make_inputs(c, raw, dt, dev, nc, false);
        const Tensor out = c.fn(in);
        ASSERT_TRUE(out.defined());
        EXPECT_EQ(out.shape(), ref_shape);
        EXPECT_EQ(out.device(), dev);
        EXPECT_EQ(out.dtype(), int_out ? DType::Int64 : dt);
        EXPECT_FALSE(out.requires_grad()) << "no input requires grad, yet the output does";
        size_t worst = 0;
        const double tol = dt == DType::Float32 ? c.fwd_tol : 1e-12;
        const Values got = out.to_vector();
        ASSERT_EQ(got.size(), ref.size());
        const double err = scaled_error(ref, got, &worst);
        EXPECT_LE(err, tol) << "forward differs from the float64 reference: at flat index " << worst
                            << " got " << got[worst] << ", expected " << ref[worst];
        for (size_t i = 0; i < in.size(); ++i) {  // inputs must not be modified
          const Values now = in[i].to_vector();
          for (size_t k = 0; k < now.size(); ++k) {
            const double expect = dt == DType::Float32 ? static_cast<float>(raw[i][k]) : raw[i][k];
            ASSERT_EQ(now[k], expect) << "input " << i << " was modified at flat index " << k;
          }
        }
      }
    }
  }

  const OpInfo* info = find_op(c.op);
  if (!c.grad) {
    // Non-differentiable: with inputs requiring grad, nothing may be recorded.
    if (info && !info->differentiable && !raw.empty()) {
      const Tensor out = c.fn(make_inputs(c, raw, DType::Float64, Device::cpu(), false, true));
      EXPECT_FALSE(out.requires_grad()) << "a non-differentiable op recorded an autograd node";
    }
    return;
  }
  ASSERT_FALSE(int_out) << "a gradient case needs a floating output";

  // ---- numeric gradients of L = sum(out * W), float64 central differences ----
  Generator wgen(case_seed(c) ^ 0x5bd1e995ULL);
  Values w(ref.size());
  for (double& x : w) x = wgen.normal();
  std::vector<Values> numeric(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    numeric[i].resize(raw[i].size());
    for (size_t k = 0; k < raw[i].size(); ++k) {
      std::vector<Values> p = raw;
      p[i][k] = raw[i][k] + c.fd_eps;
      const double lp = loss_at(c, p, w);
      p[i][k] = raw[i][k] - c.fd_eps;
      const double lm = loss_at(c, p, w);
      numeric[i][k] = (lp - lm) / (2.0 * c.fd_eps);
    }
  }

  // ---- analytic gradients on every backend x layout (float64: vs numeric; float32: vs float64)
  // ----
  for (Device dev : devices()) {
    for (bool nc : layouts) {
      std::vector<Values> analytic64(raw.size());
      for (DType dt : {DType::Float64, DType::Float32}) {
        SCOPED_TRACE(dev.str() + " " + dtype_name(dt) + " " + layout_name(nc) + " backward");
        const std::vector<Tensor> in = make_inputs(c, raw, dt, dev, nc, true);
        const Tensor out = c.fn(in);
        ASSERT_TRUE(out.requires_grad()) << "the op recorded no autograd node";
        out.backward(Tensor::from_vector(w, ref_shape, dt, dev));
        for (size_t i = 0; i < in.size(); ++i) {
          SCOPED_TRACE("input " + std::to_string(i) + " " + shape_str(c.shapes[i]));
          const Tensor g = in[i].grad();
          Values a(raw[i].size(), 0.0);
          if (g.defined()) {
            ASSERT_EQ(g.shape(), c.shapes[i]);
            ASSERT_EQ(g.dtype(), dt);
            a = g.to_vector();
          }
          if (dt == DType::Float64) {
            analytic64[i] = a;
            double err = 0.0;
            size_t worst = 0;
            for (size_t k = 0; k < a.size(); ++k) {
              const double e =
                  std::fabs(a[k] - numeric[i][k]) / std::max(1.0, std::fabs(numeric[i][k]));
              if (!(e <= err)) {
                err = e;
                worst = k;
              }
            }
            EXPECT_LE(err, c.grad_tol)
                << "gradient check failed at flat index " << worst << ": analytic " << a[worst]
                << ", numeric " << numeric[i][worst];
          } else {
            size_t worst = 0;
            const double err = scaled_error(analytic64[i], a, &worst);
            EXPECT_LE(err, 10 * c.fwd_tol)
                << "float32 gradient differs from float64 at flat index " << worst << ": "
                << a[worst] << " vs " << analytic64[i][worst];
          }
        }
      }
    }
  }
}

std::string case_test_name(const ::testing::TestParamInfo<size_t>& info) {
  const auto& cases = all_cases();
  const OpCase& c = cases[info.param];
  int ordinal = 0;
  for (size_t i = 0; i < info.param; ++i) ordinal += cases[i].op == c.op;
  std::string name = c.op + "_" + std::to_string(ordinal);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(OpDriver, OpDriverCase, ::testing::Range<size_t>(0, all_cases().size()),
                         case_test_name);

TEST(OpDriver, EveryRegisteredOpHasACase) {
  std::vector<std::string> missing, untested_grad, wrong_grad, unknown;
  for (const auto& op : registered_ops()) {
    int n = 0, ngrad = 0;
    for (const auto& c : all_cases()) {
      if (c.op != op.name) continue;
      ++n;
      ngrad += c.grad;
    }
    if (n == 0) missing.push_back(op.name);
    if (n > 0 && op.differentiable && ngrad == 0) untested_grad.push_back(op.name);
    if (!op.differentiable && ngrad > 0) wrong_grad.push_back(op.name);
  }
  for (const auto& c : all_cases())
    if (!find_op(c.op)) unknown.push_back(c.op + " (" + c.label + ")");
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  EXPECT_FALSE(registered_ops().empty());
  EXPECT_TRUE(missing.empty()) << "registered ops without an OpCase: " << join(missing);
  EXPECT_TRUE(untested_grad.empty())
      << "differentiable ops without a gradient-check case: " << join(untested_grad);
  EXPECT_TRUE(wrong_grad.empty()) << "non-differentiable ops with grad=true cases: "
                                  << join(wrong_grad);
  EXPECT_TRUE(unknown.empty()) << "cases naming unregistered ops: " << join(unknown);
}

TEST(OpDriver, ListsOpsWithCaseCounts) {
  std::map<std::string, std::array<int, 3>> counts;  // cases, gradient-checked, non-contiguous
  for (const auto& c : all_cases()) {
    auto& k = counts[c.op];
    k[0] += 1;
    k[1] += c.grad;
    k[2] += c.noncontig;
  }
  std::ostringstream os;
  os << "op                  diff  cases  gradcheck  noncontig\n";
  size_t total = 0;
  for (const auto& op : registered_ops()) {
    const auto k = counts.count(op.name) ? counts[op.name] : std::array<int, 3>{0, 0, 0};
    os << std::left << std::setw(20) << op.name << std::setw(6)
       << (op.differentiable ? "yes" : "no") << std::setw(7) << k[0] << std::setw(11) << k[1]
       << k[2] << "\n";
    total += static_cast<size_t>(k[0]);
  }
  os << registered_ops().size() << " ops, " << all_cases().size() << " cases, backends:";
  for (Device d : devices()) os << " " << d.str();
  std::cout << os.str() << std::endl;
  EXPECT_EQ(total, all_cases().size()) << "some cases name ops that are not registered";
}

}  // namespace
