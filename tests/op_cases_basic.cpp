// pelab — op driver cases for the elementwise, reduction and shape ops (framework/src/ops/
// elementwise.cpp, reduce.cpp, shape.cpp), plus focused tests of behaviour the driver cannot see:
// tie-breaking of gradients, views sharing storage, and error messages.
#include <gtest/gtest.h>

#include <cmath>

#include "op_driver.h"

namespace {

using namespace pelab;
using pelab::testing::add_case;
using pelab::testing::OpCase;
using V = std::vector<Tensor>;
using Domain = std::function<double(size_t, double)>;
using Binary = Tensor (*)(const Tensor&, const Tensor&);

double positive(double x) { return 0.2 + std::fabs(x); }
double away_from_zero(double x) { return x < 0 ? x - 0.5 : x + 0.5; }
double quantized(double x) { return std::round(2.0 * x) / 2.0; }  // creates ties

// A fixed 0/1 pattern (1 where the flat index % period == 0 or % 3 == 1) on like's device.
Tensor pattern(const Shape& s, const Tensor& like, int period, DType dt) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % period == 0 || i % 3 == 1) ? 1.0 : 0.0;
  return Tensor::from_vector(v, s, dt, like.device());
}

OpCase make(const std::string& op, const std::string& label, std::vector<Shape> shapes,
            std::function<Tensor(const V&)> fn, Domain domain = nullptr) {
  OpCase c;
  c.op = op;
  c.label = label;
  c.shapes = std::move(shapes);
  c.fn = std::move(fn);
  c.domain = std::move(domain);
  return c;
}

const std::vector<std::pair<std::string, std::vector<Shape>>> kBinaryShapes = {
    {"same [3,4]", {{3, 4}, {3, 4}}},
    {"broadcast [3,1] x [1,4]", {{3, 1}, {1, 4}}},
    {"rank broadcast [2,3,4] x [4]", {{2, 3, 4}, {4}}},
    {"rank broadcast [4] x [3,4]", {{4}, {3, 4}}},
    {"scalar [5] x []", {{5}, {}}},
    {"size-1 axes [2,1,3] x [2,4,1]", {{2, 1, 3}, {2, 4, 1}}},
};

const std::vector<Shape> kUnaryShapes = {{3, 4}, {2, 3, 4}, {7}, {}};

std::string label_of(const Shape& s) { return shape_str(s); }

// ---------------- elementwise ----------------
const bool kBinaryCases = [] {
  const std::vector<std::tuple<std::string, Binary, Domain>> ops = {
      {"add", add, nullptr},
      {"sub", sub, nullptr},
      {"mul", mul, nullptr},
      {"div", div, [](size_t i, double x) { return i == 1 ? away_from_zero(x) : x; }},
      {"maximum", maximum, nullptr},
  };
  for (const auto& [name, f, dom] : ops) {
    for (const auto& [label, shapes] : kBinaryShapes)
      add_case(make(
          name, label, shapes, [f = f](const V& in) { return f(in[0], in[1]); }, dom));
    // the same tensor on both sides (gradients of shared inputs accumulate)
    add_case(make(
        name, "x op x [3,4]", {{3, 4}}, [f = f](const V& in) { return f(in[0], in[0]); },
        dom ? Domain([](size_t, double x) { return away_from_zero(x); }) : nullptr));
  }
  // operators route to the same ops
  add_case(make("add", "operator+ with scalar", {{3, 4}, {4}},
                [](const V& in) { return (in[0] + in[1]) + 1.5; }));
  add_case(make(
      "div", "operator/ scalar / tensor", {{2, 5}},
      [](const V& in) { return 2.0 / in[0] - in[0] / 4.0; },
      [](size_t, double x) { return away_from_zero(x); }));
  return true;
}();

const bool kScalarCases = [] {
  for (const Shape& s : kUnaryShapes) {
    add_case(make("add_scalar", label_of(s) + " + 2.5", {s},
                  [](const V& in) { return add_scalar(in[0], 2.5); }));
    add_case(make("mul_scalar", label_of(s) + " * -1.5", {s},
                  [](const V& in) { return mul_scalar(in[0], -1.5); }));
    add_case(make(
        "rdiv_scalar", "3 / " + label_of(s), {s},
        [](const V& in) { return rdiv_scalar(3.0, in[0]); },
        [](size_t, double x) { return away_from_zero(x); }));
  }
  const std::vector<std::pair<double, bool>> exps = {{2.0, false}, {3.0, false}, {1.0, false},
                                                     {0.0, false}, {0.5, true},  {-1.5, true}};
  for (const auto& [e, pos] : exps) {
    for (const Shape& s : {Shape{3, 4}, Shape{6}}) {
      add_case(make(
          "pow", label_of(s) + " ^ " + std::to_string(e), {s},
          [e = e](const V& in) { return pow(in[0], e); },
          pos ? Domain([](size_t, double x) { return positive(x); }) : nullptr));
    }
  }
  return true;
}();

const bool kUnaryCases = [] {
  using Unary = Tensor (*)(const Tensor&);
  const std::vector<std::tuple<std::string, Unary, Domain>> ops = {
      {"neg", neg, nullptr},
      {"exp", exp, nullptr},
      {"log", log, [](size_t, double x) { return positive(x); }},
      {"sqrt", sqrt, [](size_t, double x) { return positive(x); }},
      {"tanh", tanh, nullptr},
      {"sigmoid", sigmoid, nullptr},
      {"relu", relu, nullptr},
      {"sin", sin, nullptr},
      {"cos", cos, nullptr},
  };
  for (const auto& [name, f, dom] : ops)
    for (const Shape& s : kUnaryShapes)
      add_case(make(
          name, label_of(s), {s}, [f = f](const V& in) { return f(in[0]); }, dom));
  for (const Shape& s : kUnaryShapes) {
    add_case(make("gelu", "exact " + label_of(s), {s}, [](const V& in) { return gelu(in[0]); }));
    add_case(make("gelu", "tanh approximation " + label_of(s), {s},
                  [](const V& in) { return gelu(in[0], true); }));
  }
  return true;
}();

// clamp: values near a bound moved 0.05 off it, so the central differences never straddle the
// kink (the bounds themselves are checked in OpsBasic.ClampBoundsPassTheGradientNaNStays).
double off_bounds(double x, double lo, double hi) {
  for (double b : {lo, hi})
    if (std::fabs(x - b) < 0.05) return x < b ? b - 0.05 : b + 0.05;
  return x;
}

const bool kClampCases = [] {
  for (const Shape& s : kUnaryShapes) {
    add_case(make(
        "clamp", "[-0.5, 0.7] " + label_of(s), {s},
        [](const V& in) { return clamp(in[0], -0.5, 0.7); },
        [](size_t, double x) { return off_bounds(x, -0.5, 0.7); }));
  }
  add_case(make(
      "clamp", "(-inf, 0.3] [3,4]", {{3, 4}},
      [](const V& in) { return clamp(in[0], -INFINITY, 0.3); },
      [](size_t, double x) { return off_bounds(x, 0.3, 0.3); }));
  add_case(make(
      "clamp", "[-0.2, inf) [2,3,4]", {{2, 3, 4}},
      [](const V& in) { return clamp(in[0], -0.2, INFINITY); },
      [](size_t, double x) { return off_bounds(x, -0.2, -0.2); }));
  return true;
}();

const bool kCompareCases = [] {
  const std::vector<std::pair<std::string, Binary>> ops = {
      {"eq", eq}, {"ne", ne}, {"lt", lt}, {"gt", gt}};
  for (const auto& [name, f] : ops) {
    for (const auto& [label, shapes] : kBinaryShapes) {
      OpCase c = make(
          name, label + " with ties", shapes, [f = f](const V& in) { return f(in[0], in[1]); },
          [](size_t, double x) { return quantized(x); });
      c.grad = false;
      add_case(c);
    }
  }
  return true;
}();

const bool kSelectCases = [] {
  // cond as a floating input thresholded inside (so it is non-contiguous too); no gradient flows to
  // it
  add_case(make("where", "cond from input, [3,4] all", {{3, 4}, {3, 4}, {3, 4}}, [](const V& in) {
    return where(gt(in[0], Tensor::zeros({}, in[0].dtype(), in[0].device())), in[1], in[2]);
  }));
  add_case(
      make("where", "broadcast cond [3,1], a [1,4], b [3,4]", {{1, 4}, {3, 4}}, [](const V& in) {
        return where(pattern({3, 1}, in[0], 2, in[0].dtype()), in[0], in[1]);
      }));
  add_case(make("where", "int64 cond [4], a [2,3,4], b []", {{2, 3, 4}, {}}, [](const V& in) {
    return where(pattern({4}, in[0], 4, DType::Int64), in[0], in[1]);
  }));
  add_case(make("masked_fill", "[3,4] mask [3,4] -> -5", {{3, 4}}, [](const V& in) {
    return masked_fill(in[0], pattern({3, 4}, in[0], 5, in[0].dtype()), -5.0);
  }));
  add_case(make("masked_fill", "[2,3,4] mask [3,1] -> -1e4", {{2, 3, 4}}, [](const V& in) {
    return masked_fill(in[0], pattern({3, 1}, in[0], 2, in[0].dtype()), -1e4);
  }));
  add_case(
      make("masked_fill", "[2,4] int64 mask [2,1,4] (broadcast out)", {{2, 4}}, [](const V& in) {
        return masked_fill(in[0], pattern({2, 1, 4}, in[0], 3, DType::Int64), 7.0);
      }));
  return true;
}();

// ---------------- reductions ----------------
const bool kReduceCases = [] {
  for (const Shape& s : {Shape{3, 4}, Shape{2, 3, 4}, Shape{7}, Shape{}}) {
    add_case(make("sum", "all of " + label_of(s), {s}, [](const V& in) { return sum(in[0]); }));
    add_case(make("mean", "all of " + label_of(s), {s}, [](const V& in) { return mean(in[0]); }));
  }
  struct AxesCase {
    Shape shape;
    std::vector<int64_t> axes;
    bool keepdim;
  };
  const std::vector<AxesCase> axes_cases = {
      {{3, 4}, {1}, false},
      {{3, 4}, {0}, true},
      {{2, 3, 4}, {0, 2}, false},
      {{2, 3, 4}, {-1}, true},
      {{2, 3, 4, 5}, {1, 2}, false},
      {{2, 3, 4}, {}, true},
      {{3, 1, 4}, {1}, false},
      {{3, 1, 4}, {0, 1}, true},
      {{5}, {0}, false},
      {{2, 3, 4, 5}, {0, 1, 3}, true},
  };
  for (const auto& ac : axes_cases) {
    std::string label =
        label_of(ac.shape) + " axes " + shape_str(ac.axes) + (ac.keepdim ? " keepdim" : "");
    const auto axes = ac.axes;
    const bool kd = ac.keepdim;
    add_case(make("sum", label, {ac.shape}, [=](const V& in) { return sum(in[0], axes, kd); }));
    add_case(make("mean", label, {ac.shape}, [=](const V& in) { return mean(in[0], axes, kd); }));
  }
  struct AxisCase {
    Shape shape;
    int64_t axis;
    bool keepdim;
  };
  const std::vector<AxisCase> max_cases = {{{3, 4}, 1, false},     {{2, 3, 4}, 0, true},
                                           {{2, 3, 4}, -1, false}, {{2, 3, 4}, 1, false},
                                           {{5}, 0, false},        {{4, 1}, 1, false}};
  for (const auto& mc : max_cases) {
    std::string label =
        label_of(mc.shape) + " axis " + std::to_string(mc.axis) + (mc.keepdim ? " keepdim" : "");
    const int64_t ax = mc.axis;
    const bool kd = mc.keepdim;
    add_case(make("max", label, {mc.shape}, [=](const V& in) { return max(in[0], ax, kd); }));
    OpCase c =
        make("argmax", label, {mc.shape}, [=](const V& in) { return argmax(in[0], ax, kd); });
    c.grad = false;
    add_case(c);
  }
  struct CumsumCase {
    Shape shape;
    int64_t axis;
    bool reverse;
  };
  const std::vector<CumsumCase> cumsum_cases = {
      {{3, 4}, 1, false},  {{3, 4}, 1, true},    {{3, 4}, 0, true},  {{2, 3, 4}, 1, false},
      {{2, 3, 4}, 1, true}, {{2, 3, 4}, -1, true}, {{7}, 0, false},   {{4, 1}, 1, true},
      {{19, 5}, 1, true}};  // 19 rows: the CPU kernel's blocks of 8 rows and a partial one
  for (const auto& cc : cumsum_cases) {
    const int64_t ax = cc.axis;
    const bool rev = cc.reverse;
    add_case(make("cumsum",
                  label_of(cc.shape) + " axis " + std::to_string(ax) + (rev ? " reverse" : ""),
                  {cc.shape}, [=](const V& in) { return cumsum(in[0], ax, rev); }));
  }
  const std::vector<std::pair<Shape, Shape>> to_cases = {
      {{3, 4}, {1, 4}}, {{3, 4}, {3, 1}}, {{2, 3, 4}, {3, 1}},   {{2, 3, 4}, {}},
      {{2, 3, 4}, {4}}, {{3, 4}, {3, 4}}, {{2, 1, 4}, {1, 1, 4}}};
  for (const auto& [from, to] : to_cases) {
    const Shape target = to;
    add_case(make("sum_to", label_of(from) + " -> " + label_of(to), {from},
                  [target](const V& in) { return sum_to(in[0], target); }));
  }
  return true;
}();

// ---------------- shape ops ----------------
const bool kShapeCases = [] {
  const std::vector<std::pair<Shape, Shape>> reshapes = {
      {{3, 4}, {4, 3}}, {{2, 3, 4}, {6, -1}}, {{2, 3, 4}, {24}}, {{}, {1, 1}},
      {{6}, {2, 1, 3}}, {{2, 3, 4}, {2, 12}}, {{4, 1, 3}, {12}}};
  for (const auto& [from, to] : reshapes) {
    const Shape target = to;
    add_case(make("reshape", label_of(from) + " -> " + label_of(to), {from},
                  [target](const V& in) { return reshape(in[0], target); }));
  }
  add_case(make("permute", "[2,3,4] (2,0,1)", {{2, 3, 4}}, [](const V& in) {
    return permute(in[0], {2, 0, 1});
  }));
  add_case(make("permute", "[3,4] (-1,0)", {{3, 4}}, [](const V& in) {
    return permute(in[0], {-1, 0});
  }));
  add_case(make("permute", "then reshape (view) [2,3,4] -> [4,6]", {{2, 3, 4}}, [](const V& in) {
    return reshape(permute(in[0], {2, 0, 1}), {4, 6});
  }));
  add_case(make("permute", "then reshape (copy) [2,3,4] -> [8,3]", {{2, 3, 4}}, [](const V& in) {
    return reshape(permute(in[0], {2, 0, 1}), {8, 3});
  }));
  add_case(make("transpose", "[2,3,4] (0,2)", {{2, 3, 4}},
                [](const V& in) { return transpose(in[0], 0, 2); }));
  add_case(make("transpose", "[3,4] (0,1) then mul", {{3, 4}, {4, 3}},
                [](const V& in) { return mul(transpose(in[0], 0, 1), in[1]); }));
  add_case(make("slice", "[5,6] dim 1 [1:5:2]", {{5, 6}},
                [](const V& in) { return slice(in[0], 1, 1, 5, 2); }));
  add_case(make("slice", "[5,6] dim 0 [-4:-1]", {{5, 6}},
                [](const V& in) { return slice(in[0], 0, -4, -1); }));
  add_case(
      make("slice", "[7] [0:7:3]", {{7}}, [](const V& in) { return slice(in[0], 0, 0, 7, 3); }));
  add_case(make("slice", "[4,3] empty [2:2]", {{4, 3}},
                [](const V& in) { return slice(in[0], 0, 2, 2); }));
  add_case(make("slice", "[2,5,3] dim 1 [1:100] (clamped) then exp", {{2, 5, 3}},
                [](const V& in) { return exp(slice(in[0], 1, 1, 100)); }));
  const std::vector<std::pair<Shape, Shape>> expands = {
      {{3, 1}, {2, 3, 4}}, {{4}, {3, 4}}, {{1}, {5}}, {{3, 1}, {-1, 4}}, {{}, {2, 3}}};
  for (const auto& [from, to] : expands) {
    const Shape target = to;
    add_case(make("expand", label_of(from) + " -> " + label_of(to), {from},
                  [target](const V& in) { return expand(in[0], target); }));
  }
  add_case(make("expand", "then mul (stride-0 kernel input)", {{3, 1}, {3, 4}}, [](const V& in) {
    return mul(expand(in[0], {3, 4}), in[1]);
  }));
  for (int64_t d : {0, 1, 2, -1}) {
    add_case(make("unsqueeze", "[3,4] dim " + std::to_string(d), {{3, 4}},
                  [d](const V& in) { return unsqueeze(in[0], d); }));
  }
  add_case(make("unsqueeze", "[] dim 0", {{}}, [](const V& in) { return unsqueeze(in[0], 0); }));
  add_case(
      make("squeeze", "[3,1,4] dim 1", {{3, 1, 4}}, [](const V& in) { return squeeze(in[0], 1); }));
  add_case(make("squeeze", "[1,4] dim 0", {{1, 4}}, [](const V& in) { return squeeze(in[0], 0); }));
  add_case(
      make("squeeze", "[4,1] dim -1", {{4, 1}}, [](const V& in) { return squeeze(in[0], -1); }));
  add_case(make("concat", "[2,3] + [4,3] dim 0", {{2, 3}, {4, 3}}, [](const V& in) {
    return concat({in[0], in[1]}, 0);
  }));
  add_case(make("concat", "[3,2] + [3,1] + [3,4] dim 1", {{3, 2}, {3, 1}, {3, 4}}, [](const V& in) {
    return concat({in[0], in[1], in[2]}, 1);
  }));
  add_case(make("concat", "[2,3,4] + [2,3,4] dim -1", {{2, 3, 4}, {2, 3, 4}}, [](const V& in) {
    return concat({in[0], in[1]}, -1);
  }));
  add_case(make("concat", "[5] + [2] + same again", {{5}, {2}}, [](const V& in) {
    return concat({in[0], in[1], in[0]}, 0);
  }));
  add_case(make("stack", "[3,4] x2 dim 0", {{3, 4}, {3, 4}}, [](const V& in) {
    return stack({in[0], in[1]}, 0);
  }));
  add_case(make("stack", "[3,4] x2 dim 2", {{3, 4}, {3, 4}}, [](const V& in) {
    return stack({in[0], in[1]}, 2);
  }));
  add_case(make("stack", "[2,3] x3 dim 1", {{2, 3}, {2, 3}, {2, 3}}, [](const V& in) {
    return stack({in[0], in[1], in[2]}, 1);
  }));
  add_case(make("stack", "[5] x2 dim -1", {{5}, {5}}, [](const V& in) {
    return stack({in[0], in[1]}, -1);
  }));
  return true;
}();

// ---------------- focused tests ----------------
Tensor leaf(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(v, s, DType::Float64).set_requires_grad(true);
}

TEST(OpsBasic, MaximumTiesGiveGradientToFirstArgument) {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({1, 5, 0}, {3});
  maximum(a, b).backward(Tensor::ones({3}, DType::Float64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{0, 1, 0}));
}

TEST(OpsBasic, MaxTiesGiveGradientToFirstIndex) {
  Tensor a = leaf({2, 7, 7, 1, 4, 4}, {2, 3});
  Tensor m = max(a, 1);
  EXPECT_EQ(m.to_vector(), (std::vector<double>{7, 4}));
  EXPECT_EQ(argmax(a, 1).to_int_vector(), (std::vector<int64_t>{1, 1}));
  m.backward(Tensor::from_vector({10, 20}, {2}, DType::Float64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0, 10, 0, 0, 20, 0}));
}

TEST(OpsBasic, ViewsShareStorage) {
  Tensor a = Tensor::arange(24, DType::Float32).contiguous();
  Tensor r = reshape(a, {2, 3, 4});
  Tensor p = permute(r, {2, 0, 1});
  Tensor s = slice(r, 2, 1, 3);
  Tensor e = expand(reshape(a, {1, 24}), {5, 24});
  Tensor u = squeeze(unsqueeze(a, 0), 0);
  for (const Tensor& v : {r, p, s, e, u}) EXPECT_EQ(v.impl()->storage, a.impl()->storage);
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(s.to_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  // a non-viewable reshape copies (and the values follow the permuted order)
  Tensor q = reshape(permute(r, {1, 0, 2}), {6, 4});
  EXPECT_NE(q.impl()->storage, a.impl()->storage);
  EXPECT_EQ(q.to_vector()[4], 12.0);
  // a viewable reshape of a sliced tensor keeps sharing
  Tensor rows = slice(reshape(a, {6, 4}), 0, 1, 5);
  Tensor flat = reshape(rows, {16});
  EXPECT_EQ(flat.impl()->storage, a.impl()->storage);
  EXPECT_EQ(flat.to_vector()[0], 4.0);
}

TEST(OpsBasic, ReductionsOfPermutedViewsMatchContiguous) {
  Tensor a = Tensor::from_vector(
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24},
      {2, 3, 4}, DType::Float64);
  Tensor p = permute(a, {2, 0, 1});  // [4, 2, 3], not contiguous but dense
  Tensor pc = p.contiguous();
  for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {1, 2}, {}}) {
    SCOPED_TRACE(shape_str(axes));
    EXPECT_EQ(sum(p, axes).to_vector(), sum(pc, axes).to_vector());
    EXPECT_EQ(sum(p, axes, true).shape(), sum(pc, axes, true).shape());
  }
  Tensor b = expand(reshape(Tensor::arange(3, DType::Float64), {3, 1}), {3, 4});  // stride 0
  EXPECT_EQ(sum(b, {1}).to_vector(), (std::vector<double>{0, 4, 8}));
}

TEST(OpsBasic, ErrorsNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3});
  Tensor b = Tensor::zeros({4});
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(message([&] { add(a, b); }).find("[2, 3]"), std::string::npos);
  EXPECT_NE(message([&] { add(a, b); }).find("add"), std::string::npos);
  EXPECT_NE(message([&] {
              add(a, Tensor::zeros({2, 3}, DType::Float64));
            }).find("add"),
            std::string::npos);
  EXPECT_NE(message([&] { reshape(a, {4, 2}); }).find("reshape"), std::string::npos);
  EXPECT_NE(message([&] { reshape(a, {-1, -1}); }).find("reshape"), std::string::npos);
  EXPECT_NE(message([&] { permute(a, {0, 0}); }).find("permute"), std::string::npos);
  EXPECT_NE(message([&] { squeeze(a, 0); }).find("squeeze"), std::string::npos);
  EXPECT_NE(message([&] { expand(a, {3, 3}); }).find("expand"), std::string::npos);
  EXPECT_NE(message([&] { concat({a, b}, 0); }).find("concat"), std::string::npos);
  EXPECT_NE(message([&] {
              stack({a, Tensor::zeros({3, 2})}, 0);
            }).find("stack"),
            std::string::npos);
  EXPECT_NE(message([&] { sum(a, {2}); }).find("sum"), std::string::npos);
  EXPECT_NE(message([&] { sum(a, {1, -1}); }).find("twice"), std::string::npos);
  EXPECT_NE(message([&] { sum_to(a, {2}); }).find("sum_to"), std::string::npos);
  EXPECT_NE(message([&] { max(Tensor::zeros({2, 0}), 1); }).find("max"), std::string::npos);
  EXPECT_NE(message([&] { exp(Tensor::from_ints({1}, {1})); }).find("exp"), std::string::npos);
}

// The bounds pass the gradient (the relu forms min(x, hi) = x - relu(x - hi) did so too), values
// outside get none, NaN stays NaN with no gradient; lo > hi is an error.
TEST(OpsBasic, ClampBoundsPassTheGradientNaNStays) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor x = Tensor::from_vector({-1.0, -0.5, 0.25, 0.75, 2.0, NAN}, {6}, dt);
    x.set_requires_grad(true);
    Tensor y = clamp(x, -0.5, 0.75);
    const std::vector<double> yv = y.to_vector();
    const std::vector<double> want = {-0.5, -0.5, 0.25, 0.75, 0.75};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(yv[i], want[i]) << i;
    EXPECT_TRUE(std::isnan(yv[5]));
    sum(mul_scalar(y, 3.0)).backward();
    const std::vector<double> gx = x.grad().to_vector();
    const std::vector<double> want_g = {0.0, 3.0, 3.0, 3.0, 0.0, 0.0};
    for (size_t i = 0; i < want_g.size(); ++i) EXPECT_EQ(gx[i], want_g[i]) << i;
  }
  EXPECT_THROW(clamp(Tensor::zeros({2}), 1.0, -1.0), Error);
  EXPECT_THROW(clamp(Tensor::zeros({2}), NAN, 1.0), Error);
}

// Values, the reverse (suffix) direction, and Float32 sums accumulated in double: 1e8 + 1 is 1e8 in
// float, so a float accumulator would end this row at 0 instead of 4.
TEST(OpsBasic, CumsumValuesReverseAndFloat32Accumulation) {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4}, {4}, DType::Float64);
  EXPECT_EQ(cumsum(a, 0).to_vector(), (std::vector<double>{1, 3, 6, 10}));
  EXPECT_EQ(cumsum(a, 0, true).to_vector(), (std::vector<double>{10, 9, 7, 4}));
  const Tensor m = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32);
  EXPECT_EQ(cumsum(m, 0).to_vector(), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(cumsum(m, 1, true).to_vector(), (std::vector<double>{6, 5, 3, 15, 11, 6}));
  const Tensor f = Tensor::from_vector({1e8, 1, 1, 1, 1, -1e8}, {1, 6}, DType::Float32);
  EXPECT_EQ(cumsum(f, 1).to_vector().back(), 4.0);
  EXPECT_THROW(cumsum(Tensor::zeros({}), 0), Error);
  EXPECT_THROW(cumsum(a, 1), Error);
}

TEST(OpsBasic, NoGradientRecordedWithoutRequiresGrad) {
  Tensor a = Tensor::ones({2, 3});
  Tensor y = sum(exp(mul(a, a)), {1});
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

}  // namespace
