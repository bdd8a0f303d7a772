// Direct tests of the CPU backend kernels (framework/src/cpu) against naive double-precision loops:
// strided/broadcast elementwise ops, reductions and argmax ties, softmax layouts, layer norm,
// cross-entropy with smoothing/ignore, index ops and their bounds checks, batched/transposed GEMM,
// optimizer steps, random fills, determinism and the caching allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_small_gemm.h"
#include "pelab/backend.h"
#include "pelab/parallel.h"
#include "pelab/random.h"

using namespace pelab;

namespace {

View mk(void* p, DType dt, const Shape& shape, Shape strides = {}) {
  View v;
  v.data = p;
  v.dtype = dt;
  v.shape = shape;
  v.strides = strides.empty() ? contiguous_strides(shape) : strides;
  return v;
}

std::vector<double> randv(int64_t n, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(seed, i);
  return v;
}
std::vector<float> to_f(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// offset of a multi-index under strides
int64_t offset_of(const Shape& idx, const Shape& st) {
  int64_t o = 0;
  for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * st[d];
  return o;
}
// visit every multi-index of shape in row-major order
void for_all(const Shape& shape, const std::function<void(const Shape&)>& f) {
  Shape idx(shape.size(), 0);
  const int64_t n = shape_numel(shape);
  for (int64_t k = 0; k < n; ++k) {
    f(idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

double ref_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Max:
      return std::max(a, b);
    case BinaryOp::Min:
      return std::min(a, b);
    case BinaryOp::Eq:
      return a == b ? 1 : 0;
    case BinaryOp::Ne:
      return a != b ? 1 : 0;
    case BinaryOp::Lt:
      return a < b ? 1 : 0;
    case BinaryOp::Gt:
      return a > b ? 1 : 0;
    case BinaryOp::TanhGrad:
      return a * (1 - b * b);
    case BinaryOp::GeluGrad:  // a * d/db [b Phi(b)]
      return a * (0.5 * (1 + std::erf(b / std::sqrt(2.0))) +
                  b * std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI));
    case BinaryOp::GeluTanhGrad: {
      const double k0 = std::sqrt(2 / M_PI), k1 = 0.044715;
      const double t = std::tanh(k0 * (b + k1 * b * b * b));
      return a * (0.5 * (1 + t) + 0.5 * b * (1 - t * t) * k0 * (1 + 3 * k1 * b * b));
    }
    case BinaryOp::SigmoidGrad:
      return a * b * (1 - b);
  }
  return 0;
}

const BinaryOp kAllBinary[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,     BinaryOp::Div,
                               BinaryOp::Max, BinaryOp::Min, BinaryOp::Eq,      BinaryOp::Ne,
                               BinaryOp::Lt,  BinaryOp::Gt,  BinaryOp::TanhGrad,
                               BinaryOp::GeluGrad, BinaryOp::GeluTanhGrad, BinaryOp::SigmoidGrad};

// a: a permuted [4,3,5] buffer viewed as [5,3,4]... general strided view; b broadcast along axes.
template <class T>
void check_binary_strided(DType dt, const Shape& out_shape, const View& a_tmpl, const View& b_tmpl,
                          const std::vector<T>& abuf, const std::vector<T>& bbuf) {
  CpuBackend be;
  for (BinaryOp op : kAllBinary) {
    std::vector<T> out(shape_numel(out_shape), T(-7));
    View o = mk(out.data(), dt, out_shape);
    be.binary(op, o, a_tmpl, b_tmpl);
    int64_t k = 0;
    double max_err = 0;
    for_all(out_shape, [&](const Shape& idx) {
      const double a = abuf[offset_of(idx, a_tmpl.strides)];
      const double b = bbuf[offset_of(idx, b_tmpl.strides)];
      const double ref = static_cast<T>(ref_binary(op, a, b));
      max_err = std::max(max_err, std::fabs(static_cast<double>(out[k]) - ref));
      ++k;
    });
    EXPECT_LE(max_err, 1e-6) << "binary op " << static_cast<int>(op);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(CpuBackendElementwise, BinaryStridedAndBroadcastMatchNaive) {
  // a: storage [5, 3, 4] viewed permuted as [4, 3, 5] (strides 1, 4, 12); b: [3, 1] broadcast with
  // stride 0 along the first and last axes.
  const Shape shape = {4, 3, 5};
  const auto ad = randv(60, 1), bd = randv(3, 2, 0.5, 2.0);
  auto af = to_f(ad), bf = to_f(bd);
  // make some equal entries so Eq/Ne see both outcomes
  af[0] = bf[0];
  View a = mk(af.data(), DType::Float32, shape, {1, 4, 12});
  View b = mk(bf.data(), DType::Float32, shape, {0, 1, 0});
  check_binary_strided<float>(DType::Float32, shape, a, b, af, bf);
  // Float64, b a scalar broadcast everywhere and a sliced (every other column)
  std::vector<double> a2 = randv(4 * 3 * 10, 3), b2 = {1.25};
  View av = mk(a2.data(), DType::Float64, shape, {30, 10, 2});
  View bv = mk(b2.data(), DType::Float64, shape, {0, 0, 0});
  check_binary_strided<double>(DType::Float64, shape, av, bv, a2, b2);
  // scalar on the left with a contiguous right operand
  std::vector<double> a3 = {0.75}, b3 = randv(60, 4, 0.5, 2.0);
  check_binary_strided<double>(DType::Float64, shape,
                               mk(a3.data(), DType::Float64, shape, {0, 0, 0}),
                               mk(b3.data(), DType::Float64, shape), a3, b3);
}

TEST(CpuBackendElementwise, LargeRowBroadcastAndComparisonDtype) {
  // [rows, C] + [C] (row broadcast), above the parallel grain; and Lt into a Float32 output from
  // Int64 operands.
  CpuBackend be;
  const int64_t R = 300, C = 130;
  auto a = to_f(randv(R * C, 5)), b = to_f(randv(C, 6));
  std::vector<float> out(R * C);
  be.binary(BinaryOp::Add, mk(out.data(), DType::Float32, {R, C}),
            mk(a.data(), DType::Float32, {R, C}), mk(b.data(), DType::Float32, {R, C}, {0, 1}));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[r * C + c], a[r * C + c] + b[c]);
  // column broadcast: [R, 1] against [R, C]
  std::vector<float> col = to_f(randv(R, 7, 0.5, 1.5));
  be.binary(BinaryOp::Div, mk(out.data(), DType::Float32, {R, C}),
            mk(a.data(), DType::Float32, {R, C}), mk(col.data(), DType::Float32, {R, C}, {1, 0}));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[r * C + c], a[r * C + c] / col[r]);
  std::vector<int64_t> x = {1, 5, -3, 7}, y = {2, 5, -4, 8};
  std::vector<float> cmp(4, -1.f);
  be.binary(BinaryOp::Lt, mk(cmp.data(), DType::Float32, {4}), mk(x.data(), DType::Int64, {4}),
            mk(y.data(), DType::Int64, {4}));
  EXPECT_EQ(cmp, (std::vector<float>{1.f, 0.f, 0.f, 1.f}));
  // in place: out aliases a
  std::vector<double> z = {1, 2, 3}, w = {10, 20, 30};
  be.binary(BinaryOp::Mul, mk(z.data(), DType::Float64, {3}), mk(z.data(), DType::Float64, {3}),
            mk(w.data(), DType::Float64, {3}));
  EXPECT_EQ(z, (std::vector<double>{10, 40, 90}));
}

// The float32 GELU's erf (a rational fit, cpu_backend.h): within 1e-6 of the float64 formula over
// [-6, 6] relative to max(1, |gelu|) (the worst case is the negative tail, where 1 + erf cancels:
// 7.6e-7 at x = -5.28), and within 1e-6 relative near 0, where erf's absolute error would otherwise
// dominate the tiny output.
TEST(CpuBackendElementwise, Float32GeluErfAccuracy) {
  CpuBackend be;
  const int64_t n = 240001;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-6.0 + 12.0 * i / (n - 1));
  be.unary(UnaryOp::Gelu, mk(y.data(), DType::Float32, {n}), mk(x.data(), DType::Float32, {n}), 0);
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = gelu(x[i]);
    worst = std::max(worst, std::fabs(y[i] - r) / std::max(1.0, std::fabs(r)));
  }
  EXPECT_LE(worst, 1e-6);
  std::vector<float> small = {1e-6f, -1e-6f, 3e-4f, -3e-4f, 1e-2f, -1e-2f}, ys(small.size());
  be.unary(UnaryOp::Gelu, mk(ys.data(), DType::Float32, {6}), mk(small.data(), DType::Float32, {6}), 0);
  for (size_t i = 0; i < small.size(); ++i)
    EXPECT_NEAR(ys[i] / gelu(small[i]), 1.0, 1e-6) << "x = " << small[i];
}

TEST(CpuBackendElementwise, UnaryFormulasFloatAndDouble) {
  CpuBackend be;
  const int64_t n = 4001;
  std::vector<double> xd(n);
  for (int64_t i = 0; i < n; ++i) xd[i] = -12.0 + 24.0 * i / (n - 1);
  const double s2 = std::sqrt(2.0), k0 = std::sqrt(2.0 / 3.14159265358979323846);
  struct Case {
    UnaryOp op;
    double alpha;
    std::function<double(double)> ref;
    bool positive_only;
  };
  auto gelu = [&](double x) { return 0.5 * x * (1 + std::erf(x / s2)); };
  auto gelu_t = [&](double x) {
    return 0.5 * x * (1 + std::tanh(k0 * (x + 0.044715 * x * x * x)));
  };
  std::vector<Case> cases = {
      {UnaryOp::Neg, 0, [](double x) { return -x; }, false},
      {UnaryOp::Exp, 0, [](double x) { return std::exp(x); }, false},
      {UnaryOp::Log, 0, [](double x) { return std::log(x); }, true},
      {UnaryOp::Sqrt, 0, [](double x) { return std::sqrt(x); }, true},
      {UnaryOp::Rsqrt, 0, [](double x) { return 1 / std::sqrt(x); }, true},
      {UnaryOp::Tanh, 0, [](double x) { return std::tanh(x); }, false},
      {UnaryOp::Relu, 0, [](double x) { return x > 0 ? x : 0; }, false},
      {UnaryOp::Gelu, 0, gelu, false},
      {UnaryOp::GeluTanh, 0, gelu_t, false},
      {UnaryOp::Sin, 0, [](double x) { return std::sin(x); }, false},
      {UnaryOp::Cos, 0, [](double x) { return std::cos(x); }, false},
      {UnaryOp::Abs, 0, [](double x) { return std::fabs(x); }, false},
      {UnaryOp::Sigmoid, 0, [](double x) { return 1 / (1 + std::exp(-x)); }, false},
      {UnaryOp::AddScalar, 1.5, [](double x) { return x + 1.5; }, false},
      {UnaryOp::MulScalar, -3.0, [](double x) { return x * -3.0; }, false},
      {UnaryOp::PowScalar, 2.0, [](double x) { return x * x; }, false},
      {UnaryOp::PowScalar, 1.7, [](double x) { return std::pow(x, 1.7); }, true},
      {UnaryOp::RDivScalar, 2.0, [](double x) { return 2.0 / x; }, true},
      {UnaryOp::Step, 0, [](double x) { return x > 0 ? 1.0 : 0.0; }, false},
  };
  for (const Case& c : cases) {
    std::vector<double> in = xd;
    if (c.positive_only)
      for (double& v : in) v = std::fabs(v) + 0.05;
    std::vector<double> od(n);
    std::vector<float> inf = to_f(in), of(n);
    be.unary(c.op, mk(od.data(), DType::Float64, {n}), mk(in.data(), DType::Float64, {n}), c.alpha);
    be.unary(c.op, mk(of.data(), DType::Float32, {n}), mk(inf.data(), DType::Float32, {n}),
             c.alpha);
    double e64 = 0, e32 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double r = c.ref(in[i]);
      const double r32 = c.ref(static_cast<double>(inf[i]));
      const double scale = std::max(1.0, std::fabs(r));
      e64 = std::max(e64, std::fabs(od[i] - r) / scale);
      e32 = std::max(e32, std::fabs(of[i] - r32) / std::max(1.0, std::fabs(r32)));
    }
    EXPECT_LE(e64, 1e-12) << "unary op " << static_cast<int>(c.op);
    EXPECT_LE(e32, 2e-6) << "unary op (float32) " << static_cast<int>(c.op);
  }
  // The fused GELU backward g * gelu'(x) with g = 1: the analytic derivatives against central
  // differences of the forward formulas.
  const std::pair<BinaryOp, std::function<double(double)>> grads[] = {
      {BinaryOp::GeluGrad, gelu}, {BinaryOp::GeluTanhGrad, gelu_t}};
  for (const auto& [op, f] : grads) {
    std::vector<double> ones(n, 1.0), x64 = xd;
    std::vector<float> ones32(n, 1.0f), xf = to_f(xd);
    std::vector<double> od(n);
    std::vector<float> of(n);
    be.binary(op, mk(od.data(), DType::Float64, {n}), mk(ones.data(), DType::Float64, {n}),
              mk(x64.data(), DType::Float64, {n}));
    be.binary(op, mk(of.data(), DType::Float32, {n}), mk(ones32.data(), DType::Float32, {n}),
              mk(xf.data(), DType::Float32, {n}));
    double e64 = 0, e32 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double r = (f(xd[i] + 1e-5) - f(xd[i] - 1e-5)) / 2e-5;
      const double x32 = static_cast<double>(xf[i]);
      const double r32 = (f(x32 + 1e-5) - f(x32 - 1e-5)) / 2e-5;
      e64 = std::max(e64, std::fabs(od[i] - r) / std::max(1.0, std::fabs(r)));
      e32 = std::max(e32, std::fabs(of[i] - r32) / std::max(1.0, std::fabs(r32)));
    }
    EXPECT_LE(e64, 1e-8) << "binary op " << static_cast<int>(op);
    EXPECT_LE(e32, 2e-6) << "binary op (float32) " << static_cast<int>(op);
  }
  // sigmoid stays finite and exact at the extremes; exp handles +-inf
  std::vector<float> ext = {-200.f, 200.f, -INFINITY, INFINITY}, r(4);
  be.unary(UnaryOp::Sigmoid, mk(r.data(), DType::Float32, {4}), mk(ext.data(), DType::Float32, {4}),
           0);
  EXPECT_EQ(r[0], 0.f);
  EXPECT_EQ(r[1], 1.f);
  be.unary(UnaryOp::Exp, mk(r.data(), DType::Float32, {4}), mk(ext.data(), DType::Float32, {4}), 0);
  EXPECT_EQ(r[2], 0.f);
  EXPECT_TRUE(std::isinf(r[3]));
}

TEST(CpuBackendElementwise, CopyFillWhereAxpyStrided) {
  CpuBackend be;
  // transpose copy [3, 4] -> [4, 3] with float64 -> float32 conversion
  std::vector<double> src = randv(12, 11);
  std::vector<float> dst(12);
  be.copy(mk(dst.data(), DType::Float32, {4, 3}), mk(src.data(), DType::Float64, {4, 3}, {1, 4}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(dst[i * 3 + j], static_cast<float>(src[j * 4 + i]));
  // large transposing copies (tiled path) with a leading batch axis: [3, 45, 37] -> [3, 37, 45]
  {
    const int64_t P = 3, A = 37, B = 45;
    std::vector<float> s3 = to_f(randv(P * B * A, 12));
    std::vector<double> d3(P * A * B, -1);
    be.copy(mk(d3.data(), DType::Float64, {P, A, B}),
            mk(s3.data(), DType::Float32, {P, A, B}, {B * A, 1, A}));
    for (int64_t p = 0; p < P; ++p)
      for (int64_t a = 0; a < A; ++a)
        for (int64_t b = 0; b < B; ++b)
          ASSERT_EQ(d3[(p * A + a) * B + b], static_cast<double>(s3[(p * B + b) * A + a]));
    std::vector<float> big = to_f(randv(300 * 200, 13)), bt(300 * 200);
    be.copy(mk(bt.data(), DType::Float32, {200, 300}),
            mk(big.data(), DType::Float32, {200, 300}, {1, 200}));
    for (int64_t a = 0; a < 200; ++a)
      for (int64_t b = 0; b < 300; ++b) ASSERT_EQ(bt[a * 300 + b], big[b * 200 + a]);
  }
  // Int64 <-> float conversions
  std::vector<int64_t> ints = {3, -2, 7};
  std::vector<double> asd(3);
  be.copy(mk(asd.data(), DType::Float64, {3}), mk(ints.data(), DType::Int64, {3}));
  EXPECT_EQ(asd, (std::vector<double>{3, -2, 7}));
  std::vector<float> fl = {2.75f, -1.5f, 9.f};
  be.copy(mk(ints.data(), DType::Int64, {3}), mk(fl.data(), DType::Float32, {3}));
  EXPECT_EQ(ints, (std::vector<int64_t>{2, -1, 9}));
  // strided output: fill every other element of a [2, 6] buffer viewed as [2, 3]
  std::vector<float> buf(12, 0.f);
  be.fill(mk(buf.data(), DType::Float32, {2, 3}, {6, 2}), 5.0);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(buf[i], i % 2 == 0 ? 5.f : 0.f);
  // where: cond [2, 3] (int64), a scalar broadcast, b contiguous
  std::vector<int64_t> cond = {1, 0, 0, 1, 1, 0};
  std::vector<float> sa = {-1e9f}, sb = {1, 2, 3, 4, 5, 6}, wo(6);
  be.where(mk(wo.data(), DType::Float32, {2, 3}), mk(cond.data(), DType::Int64, {2, 3}),
           mk(sa.data(), DType::Float32, {2, 3}, {0, 0}), mk(sb.data(), DType::Float32, {2, 3}));
  EXPECT_EQ(wo, (std::vector<float>{-1e9f, 2, 3, -1e9f, -1e9f, 6}));
  // axpy with a row-broadcast x
  std::vector<double> acc(8, 1.0), x = {1, 2};
  be.axpy(mk(acc.data(), DType::Float64, {4, 2}), mk(x.data(), DType::Float64, {4, 2}, {0, 1}),
          0.5);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(acc[i], 1.0 + 0.5 * x[i % 2]);
}

// ---------------------------------------------------------------------------------------------
TEST(CpuBackendReduce, SumMatchesNaiveForAllLayouts) {
  CpuBackend be;
  const std::vector<std::array<int64_t, 3>> shapes = {{3, 7, 1},     {1, 50000, 1}, {4, 5, 6},
                                                      {2, 3000, 33}, {1, 10, 3000}, {5, 1, 4}};
  for (const auto& s : shapes) {
    const int64_t O = s[0], N = s[1], I = s[2];
    auto xd = randv(O * N * I, 21);
    auto xf = to_f(xd);
    std::vector<float> out(O * I);
    std::vector<double> outd(O * I);
    be.reduce(ReduceOp::Sum, mk(out.data(), DType::Float32, {O, I}), nullptr,
              mk(xf.data(), DType::Float32, {O, N, I}), O, N, I);
    be.reduce(ReduceOp::Sum, mk(outd.data(), DType::Float64, {O, I}), nullptr,
              mk(xd.data(), DType::Float64, {O, N, I}), O, N, I);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) {
        double ref = 0, ref32 = 0;
        for (int64_t j = 0; j < N; ++j) {
          ref += xd[(o * N + j) * I + i];
          ref32 += xf[(o * N + j) * I + i];
        }
        ASSERT_NEAR(outd[o * I + i], ref, 1e-9 * (1 + std::fabs(ref))) << O << "x" << N << "x" << I;
        // float32 input summed in double: only the final rounding remains
        ASSERT_NEAR(out[o * I + i], ref32, 1e-6 * (1 + std::fabs(ref32)));
      }
  }
}

TEST(CpuBackendReduce, MaxArgmaxTakesFirstIndexOnTies) {
  CpuBackend be;
  // [2, 4, 3]: ties along n
  std::vector<float> x = {1, 5, 2, 3, 5, 2, 3, 0, 9, 1, 5, 9, 0, 0, 0, 0, 0, 0, -1, 4, 0, 2, 4, 0};
  std::vector<float> out(6);
  std::vector<int64_t> arg(6, -1);
  be.reduce(ReduceOp::Max, mk(out.data(), DType::Float32, {2, 3}), arg.data(),
            mk(x.data(), DType::Float32, {2, 4, 3}), 2, 4, 3);
  EXPECT_EQ(out, (std::vector<float>{3, 5, 9, 2, 4, 0}));
  EXPECT_EQ(arg, (std::vector<int64_t>{1, 0, 2, 3, 2, 0}));
  // inner == 1, long rows crossing block boundaries; ties at two positions
  const int64_t N = 30000;
  std::vector<double> y = randv(2 * N, 31, -1, 1);
  y[12345] = 3.0;
  y[25000] = 3.0;
  y[N + 29999] = 2.0;
  y[N + 8191] = 2.0;
  std::vector<double> m(2);
  std::vector<int64_t> ai(2);
  be.reduce(ReduceOp::Max, mk(m.data(), DType::Float64, {2}), ai.data(),
            mk(y.data(), DType::Float64, {2, N}), 2, N, 1);
  EXPECT_EQ(m[0], 3.0);
  EXPECT_EQ(ai[0], 12345);
  EXPECT_EQ(m[1], 2.0);
  EXPECT_EQ(ai[1], 8191);
  // sum of squares in double
  std::vector<float> q = to_f(randv(100000, 32));
  double ref = 0;
  for (float v : q) ref += static_cast<double>(v) * v;
  EXPECT_NEAR(be.sum_squares(mk(q.data(), DType::Float32, {100000})), ref, 1e-9 * ref);
}

// ---------------------------------------------------------------------------------------------
TEST(CpuBackendNN, SoftmaxRowsAndInnerLayout) {
  CpuBackend be;
  for (int64_t inner : {int64_t(1), int64_t(5)}) {
    const int64_t O = 3, N = 7;
    auto xd = randv(O * N * inner, 41, -5, 5);
    auto xf = to_f(xd);
    std::vector<float> y(xf.size()), ly(xf.size());
    be.softmax(mk(y.data(), DType::Float32, {O, N, inner}),
               mk(xf.data(), DType::Float32, {O, N, inner}), O, N, inner, false);
    be.softmax(mk(ly.data(), DType::Float32, {O, N, inner}),
               mk(xf.data(), DType::Float32, {O, N, inner}), O, N, inner, true);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double mx = -1e300, s = 0, total = 0;
        for (int64_t j = 0; j < N; ++j)
          mx = std::max(mx, static_cast<double>(xf[(o * N + j) * inner + i]));
        for (int64_t j = 0; j < N; ++j) s += std::exp(xf[(o * N + j) * inner + i] - mx);
        for (int64_t j = 0; j < N; ++j) {
          const int64_t k = (o * N + j) * inner + i;
          const double ref = std::exp(xf[k] - mx) / s;
          EXPECT_NEAR(y[k], ref, 1e-6);
          EXPECT_NEAR(ly[k], std::log(ref), 2e-6);
          total += y[k];
        }
        EXPECT_NEAR(total, 1.0, 1e-6);
      }
    // backward vs the formulas y * (g - sum(g y)) and g - softmax * sum(g)
    auto g = to_f(randv(xf.size(), 42));
    std::vector<float> gi(xf.size()), gl(xf.size());
    be.softmax_backward(mk(gi.data(), DType::Float32, {O, N, inner}),
                        mk(g.data(), DType::Float32, {O, N, inner}),
                        mk(y.data(), DType::Float32, {O, N, inner}), O, N, inner, false);
    be.softmax_backward(mk(gl.data(), DType::Float32, {O, N, inner}),
                        mk(g.data(), DType::Float32, {O, N, inner}),
                        mk(ly.data(), DType::Float32, {O, N, inner}), O, N, inner, true);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double gy = 0, gs = 0;
        for (int64_t j = 0; j < N; ++j) {
          const int64_t k = (o * N + j) * inner + i;
          gy += static_cast<double>(g[k]) * y[k];
          gs += g[k];
        }
        for (int64_t j = 0; j < N; ++j) {
          const int64_t k = (o * N + j) * inner + i;
          EXPECT_NEAR(gi[k], y[k] * (g[k] - gy), 1e-6);
          EXPECT_NEAR(gl[k], g[k] - std::exp(static_cast<double>(ly[k])) * gs, 1e-5);
        }
      }
  }
}

TEST(CpuBackendNN, LayerNormForwardAndBackwardMatchNaive) {
  CpuBackend be;
  const int64_t R = 37, N = 24;
  const double eps = 1e-5;
  auto x = randv(R * N, 51, -3, 3), w = randv(N, 52, 0.5, 1.5), b = randv(N, 53),
       gy = randv(R * N, 54);
  std::vector<double> y(R * N), mean(R), rstd(R), gx(R * N), gw(N, 99), gb(N, 99);
  View xv = mk(x.data(), DType::Float64, {R, N});
  be.layer_norm(mk(y.data(), DType::Float64, {R, N}), mk(mean.data(), DType::Float64, {R}),
                mk(rstd.data(), DType::Float64, {R}), xv, mk(w.data(), DType::Float64, {N}),
                mk(b.data(), DType::Float64, {N}), R, N, eps);
  std::vector<double> rgw(N, 0), rgb(N, 0), rgx(R * N);
  for (int64_t r = 0; r < R; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) mu += x[r * N + i];
    mu /= N;
    for (int64_t i = 0; i < N; ++i) var += (x[r * N + i] - mu) * (x[r * N + i] - mu);
    var /= N;
    const double rs = 1 / std::sqrt(var + eps);
    EXPECT_NEAR(mean[r], mu, 1e-12);
    EXPECT_NEAR(rstd[r], rs, 1e-10);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < N; ++i) {
      const double xh = (x[r * N + i] - mu) * rs;
      EXPECT_NEAR(y[r * N + i], xh * w[i] + b[i], 1e-12);
      s1 += gy[r * N + i] * w[i];
      s2 += gy[r * N + i] * w[i] * xh;
      rgw[i] += gy[r * N + i] * xh;
      rgb[i] += gy[r * N + i];
    }
    // textbook layer-norm input gradient
    for (int64_t i = 0; i < N; ++i) {
      const double xh = (x[r * N + i] - mu) * rs;
      rgx[r * N + i] = rs / N * (N * gy[r * N + i] * w[i] - s1 - xh * s2);
    }
  }
  be.layer_norm_backward(mk(gx.data(), DType::Float64, {R, N}), mk(gw.data(), DType::Float64, {N}),
                         mk(gb.data(), DType::Float64, {N}), mk(gy.data(), DType::Float64, {R, N}),
                         xv, mk(mean.data(), DType::Float64, {R}),
                         mk(rstd.data(), DType::Float64, {R}), mk(w.data(), DType::Float64, {N}), R,
                         N);
  for (int64_t k = 0; k < R * N; ++k) EXPECT_NEAR(gx[k], rgx[k], 1e-10);
  for (int64_t i = 0; i < N; ++i) {
    EXPECT_NEAR(gw[i], rgw[i], 1e-10);
    EXPECT_NEAR(gb[i], rgb[i], 1e-10);
  }
  // float32 forward without affine stays close to the float64 result
  auto xf = to_f(x);
  std::vector<float> yf(R * N), mf(R), rf(R);
  be.layer_norm(mk(yf.data(), DType::Float32, {R, N}), mk(mf.data(), DType::Float32, {R}),
                mk(rf.data(), DType::Float32, {R}), mk(xf.data(), DType::Float32, {R, N}), View{},
                View{}, R, N, eps);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < N; ++i)
      EXPECT_NEAR(yf[r * N + i], (x[r * N + i] - mean[r]) * rstd[r], 2e-5);
}

// Layer norm backward on rows above the grain, so the row blocks and the column sums of their
// partials run split over the threads: at 1, 2 and 3 threads, with and without the affine weight,
// with and without grad_x, Float64 against a float64 reference and Float32 within float tolerance
// of it, and the same bits whatever the thread count.
TEST(CpuBackendNN, LayerNormBackwardThreadedMatchesReference) {
  CpuBackend be;
  const int64_t R = 1000, N = 96;  // 63 row blocks of 16; 3 column chunks
  ASSERT_GT(R * N, kParallelGrain);
  auto x = randv(R * N, 71, -3, 3), w = randv(N, 72, 0.5, 1.5), gy = randv(R * N, 73);
  std::vector<double> mean(R), rstd(R);
  std::vector<double> rgx(R * N), rgx_nw(R * N), rgw(N, 0), rgb(N, 0);
  for (int64_t r = 0; r < R; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) mu += x[r * N + i];
    mu /= N;
    for (int64_t i = 0; i < N; ++i) var += (x[r * N + i] - mu) * (x[r * N + i] - mu);
    mean[r] = mu;
    rstd[r] = 1 / std::sqrt(var / N + 1e-5);
    const double rs = rstd[r];
    double s1 = 0, s2 = 0, t1 = 0, t2 = 0;
    for (int64_t i = 0; i < N; ++i) {
      const double xh = (x[r * N + i] - mu) * rs, g = gy[r * N + i];
      s1 += g * w[i];
      s2 += g * w[i] * xh;
      t1 += g;
      t2 += g * xh;
      rgw[i] += g * xh;
      rgb[i] += g;
    }
    for (int64_t i = 0; i < N; ++i) {
      const double xh = (x[r * N + i] - mu) * rs;
      rgx[r * N + i] = rs / N * (N * gy[r * N + i] * w[i] - s1 - xh * s2);
      rgx_nw[r * N + i] = rs / N * (N * gy[r * N + i] - t1 - xh * t2);
    }
  }
  auto xf = to_f(x), wf = to_f(w), gyf = to_f(gy), mf = to_f(mean), rf = to_f(rstd);
  const int saved = num_threads();
  std::vector<float> first_gx, first_gw, first_gb, first_gx_nw, first_pw;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    // Float64: grad_x, grad_weight, grad_bias
    std::vector<double> gx(R * N, 99), gw(N, 99), gb(N, 99);
    be.layer_norm_backward(mk(gx.data(), DType::Float64, {R, N}), mk(gw.data(), DType::Float64, {N}),
                           mk(gb.data(), DType::Float64, {N}), mk(gy.data(), DType::Float64, {R, N}),
                           mk(x.data(), DType::Float64, {R, N}),
                           mk(mean.data(), DType::Float64, {R}), mk(rstd.data(), DType::Float64, {R}),
                           mk(w.data(), DType::Float64, {N}), R, N);
    for (int64_t k = 0; k < R * N; ++k) ASSERT_NEAR(gx[k], rgx[k], 1e-10) << k;
    for (int64_t i = 0; i < N; ++i) {
      ASSERT_NEAR(gw[i], rgw[i], 1e-9) << i;
      ASSERT_NEAR(gb[i], rgb[i], 1e-9) << i;
    }
    // Float32, the same three
    std::vector<float> fgx(R * N, 99), fgw(N, 99), fgb(N, 99);
    View fx = mk(xf.data(), DType::Float32, {R, N}), fg = mk(gyf.data(), DType::Float32, {R, N});
    View fm = mk(mf.data(), DType::Float32, {R}), fr = mk(rf.data(), DType::Float32, {R});
    be.layer_norm_backward(mk(fgx.data(), DType::Float32, {R, N}),
                           mk(fgw.data(), DType::Float32, {N}), mk(fgb.data(), DType::Float32, {N}),
                           fg, fx, fm, fr, mk(wf.data(), DType::Float32, {N}), R, N);
    for (int64_t k = 0; k < R * N; ++k) ASSERT_NEAR(fgx[k], rgx[k], 2e-4) << k;
    for (int64_t i = 0; i < N; ++i) {
      ASSERT_NEAR(fgw[i], rgw[i], 1e-5 * (1 + std::abs(rgw[i])) + 2e-3) << i;
      ASSERT_NEAR(fgb[i], rgb[i], 1e-5 * (1 + std::abs(rgb[i])) + 2e-3) << i;
    }
    // Float32 without the affine weight and parameter gradients; then the parameter gradients
    // alone (no grad_x)
    std::vector<float> fgx_nw(R * N, 99), pw(N, 99);
    be.layer_norm_backward(mk(fgx_nw.data(), DType::Float32, {R, N}), View{}, View{}, fg, fx, fm,
                           fr, View{}, R, N);
    for (int64_t k = 0; k < R * N; ++k) ASSERT_NEAR(fgx_nw[k], rgx_nw[k], 2e-4) << k;
    be.layer_norm_backward(View{}, mk(pw.data(), DType::Float32, {N}), View{}, fg, fx, fm, fr,
                           mk(wf.data(), DType::Float32, {N}), R, N);
    for (int64_t i = 0; i < N; ++i) ASSERT_EQ(pw[i], fgw[i]) << i;
    if (threads == 1) {
      first_gx = fgx, first_gw = fgw, first_gb = fgb, first_gx_nw = fgx_nw, first_pw = pw;
    } else {
      EXPECT_TRUE(fgx == first_gx && fgw == first_gw && fgb == first_gb &&
                  fgx_nw == first_gx_nw && pw == first_pw)
          << "results differ from one thread's";
    }
  }
  set_num_threads(saved);
}

TEST(CpuBackendNN, CrossEntropySmoothingIgnoreMatchesNaive) {
  CpuBackend be;
  const int64_t R = 6, C = 11, ignore = -100;
  const double s = 0.1, scale = 0.25;
  auto logits = randv(R * C, 61, -4, 4);
  std::vector<int64_t> t = {3, ignore, 0, 10, 7, ignore};
  std::vector<double> loss(R, 9), lse(R), grad(R * C, 9);
  double mean = 9, count = 9, g = 1.0;  // scale = g / count = 1 / 4
  View lv = mk(logits.data(), DType::Float64, {R, C});
  View tv = mk(t.data(), DType::Int64, {R});
  View mv = mk(&mean, DType::Float64, {1}), cv = mk(&count, DType::Float64, {1});
  View gv = mk(&g, DType::Float64, {1});
  be.cross_entropy(mv, cv, mk(loss.data(), DType::Float64, {R}), mk(lse.data(), DType::Float64, {R}),
                   lv, tv, R, C, ignore, s);
  EXPECT_EQ(count, 4.0) << "the rows whose target is not ignore_index";
  be.cross_entropy_backward(mk(grad.data(), DType::Float64, {R, C}), lv,
                            mk(lse.data(), DType::Float64, {R}), tv, R, C, ignore, s, gv, cv);
  for (int64_t r = 0; r < R; ++r) {
    double se = 0;
    for (int64_t c = 0; c < C; ++c) se += std::exp(logits[r * C + c]);
    const double l = std::log(se);
    EXPECT_NEAR(lse[r], l, 1e-12);
    if (t[r] == ignore) {
      EXPECT_EQ(loss[r], 0.0);
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(grad[r * C + c], 0.0);
      continue;
    }
    double ref = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double dist = (1 - s) * (c == t[r] ? 1 : 0) + s / C;
      ref -= dist * (logits[r * C + c] - l);  // -sum dist * log_softmax
      EXPECT_NEAR(grad[r * C + c], scale * (std::exp(logits[r * C + c] - l) - dist), 1e-12);
    }
    EXPECT_NEAR(loss[r], ref, 1e-12);
  }
  // the mean over the kept rows: their sum (in row order here: one block) times 1 / count
  double sum = 0;
  for (int64_t r = 0; r < R; ++r) sum += loss[r];
  EXPECT_EQ(mean, sum * (1.0 / 4.0));
  // a target outside [0, C) that is not ignore_index throws, naming the op, row and value
  t[4] = C;
  try {
    be.cross_entropy(mv, cv, mk(loss.data(), DType::Float64, {R}), mk(lse.data(), DType::Float64, {R}),
                     lv, tv, R, C, ignore, s);
    FAIL() << "expected pelab::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cross_entropy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("11"), std::string::npos) << msg;
  }
  t[4] = -1;
  EXPECT_THROW(
      be.cross_entropy_backward(mk(grad.data(), DType::Float64, {R, C}), lv,
                                mk(lse.data(), DType::Float64, {R}), tv, R, C, ignore, s, gv, cv),
      Error);
}

TEST(CpuBackendNN, IndexOpsMatchNaiveAndCheckBounds) {
  CpuBackend be;
  const int64_t O = 2, NI = 5, NJ = 4, I = 3;
  auto in = randv(O * NI * I, 71);
  std::vector<int64_t> idx = {4, 0, 4, 2};
  // index_select
  std::vector<double> out(O * NJ * I);
  be.index_select(mk(out.data(), DType::Float64, {O, NJ, I}),
                  mk(in.data(), DType::Float64, {O, NI, I}), mk(idx.data(), DType::Int64, {NJ}), O,
                  NI, NJ, I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t j = 0; j < NJ; ++j)
      for (int64_t i = 0; i < I; ++i)
        EXPECT_EQ(out[(o * NJ + j) * I + i], in[(o * NI + idx[j]) * I + i]);
  // index_add with a repeated index accumulates both
  std::vector<double> acc(O * NI * I, 1.0), ref(O * NI * I, 1.0);
  auto src = randv(O * NJ * I, 72);
  be.index_add(mk(acc.data(), DType::Float64, {O, NI, I}),
               mk(src.data(), DType::Float64, {O, NJ, I}), mk(idx.data(), DType::Int64, {NJ}), O,
               NI, NJ, I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t j = 0; j < NJ; ++j)
      for (int64_t i = 0; i < I; ++i) ref[(o * NI + idx[j]) * I + i] += src[(o * NJ + j) * I + i];
  for (size_t k = 0; k < acc.size(); ++k) EXPECT_DOUBLE_EQ(acc[k], ref[k]);
  // gather / scatter_add with a full [O, NJ, I] index
  std::vector<int64_t> gidx(O * NJ * I);
  for (size_t k = 0; k < gidx.size(); ++k) gidx[k] = static_cast<int64_t>((k * 7 + 3) % NI);
  std::vector<double> g(O * NJ * I);
  be.gather(mk(g.data(), DType::Float64, {O, NJ, I}), mk(in.data(), DType::Float64, {O, NI, I}),
            mk(gidx.data(), DType::Int64, {O, NJ, I}), O, NI, NJ, I);
  std::vector<double> sacc(O * NI * I, 0.0), sref(O * NI * I, 0.0);
  be.scatter_add(mk(sacc.data(), DType::Float64, {O, NI, I}),
                 mk(src.data(), DType::Float64, {O, NJ, I}),
                 mk(gidx.data(), DType::Int64, {O, NJ, I}), O, NI, NJ, I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t j = 0; j < NJ; ++j)
      for (int64_t i = 0; i < I; ++i) {
        const int64_t k = (o * NJ + j) * I + i;
        EXPECT_EQ(g[k], in[(o * NI + gidx[k]) * I + i]);
        sref[(o * NI + gidx[k]) * I + i] += src[k];
      }
  for (size_t k = 0; k < sacc.size(); ++k) EXPECT_DOUBLE_EQ(sacc[k], sref[k]);
  // out-of-range indices throw (and name the op, the index and the range); nothing is written
  std::vector<int64_t> bad = {1, 5, 0, -1};
  auto expect_msg = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << " did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op), std::string::npos) << msg;
      EXPECT_NE(msg.find("index 5"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
    }
  };
  std::vector<double> before = acc;
  expect_msg(
      [&] {
        be.index_select(mk(out.data(), DType::Float64, {O, NJ, I}),
                        mk(in.data(), DType::Float64, {O, NI, I}),
                        mk(bad.data(), DType::Int64, {NJ}), O, NI, NJ, I);
      },
      "index_select");
  expect_msg(
      [&] {
        be.index_add(mk(acc.data(), DType::Float64, {O, NI, I}),
                     mk(src.data(), DType::Float64, {O, NJ, I}), mk(bad.data(), DType::Int64, {NJ}),
                     O, NI, NJ, I);
      },
      "index_add");
  EXPECT_EQ(acc, before);
  gidx[5] = 5;
  expect_msg(
      [&] {
        be.gather(mk(g.data(), DType::Float64, {O, NJ, I}),
                  mk(in.data(), DType::Float64, {O, NI, I}),
                  mk(gidx.data(), DType::Int64, {O, NJ, I}), O, NI, NJ, I);
      },
      "gather");
  expect_msg(
      [&] {
        be.scatter_add(mk(sacc.data(), DType::Float64, {O, NI, I}),
                       mk(src.data(), DType::Float64, {O, NJ, I}),
                       mk(gidx.data(), DType::Int64, {O, NJ, I}), O, NI, NJ, I);
      },
      "scatter_add");
}

// ---------------------------------------------------------------------------------------------
namespace {
template <class T>
void check_gemm(DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch,
                bool shareA, bool shareB, double tol) {
  CpuBackend be;
  // padded leading dimensions to exercise lda/ldb/ldc
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = N + 3;
  const int64_t sA = shareA ? 0 : a_rows * lda, sB = shareB ? 0 : b_rows * ldb, sC = M * ldc;
  auto A = randv((shareA ? 1 : batch) * a_rows * lda, 81),
       B = randv((shareB ? 1 : batch) * b_rows * ldb, 82);
  auto C0 = randv(batch * sC, 83);
  std::vector<T> a(A.begin(), A.end()), b(B.begin(), B.end()), c(C0.begin(), C0.end());
  const double alpha = 0.5, beta = -1.25;
  be.gemm(dt, ta, tb, M, N, K, alpha, a.data(), lda, sA, b.data(), ldb, sB, beta, c.data(), ldc, sC,
          batch);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = a[p * sA + (ta ? k * lda + i : i * lda + k)];
          const double bv = b[p * sB + (tb ? j * ldb + k : k * ldb + j)];
          acc += av * bv;
        }
        const double ref = alpha * acc + beta * static_cast<T>(C0[p * sC + i * ldc + j]);
        ASSERT_NEAR(c[p * sC + i * ldc + j], ref, tol * (1 + std::fabs(ref)))
            << "ta=" << ta << " tb=" << tb << " batch " << p << " (" << i << "," << j << ")";
      }
}
}  // namespace

TEST(CpuBackendBlas, GemmTransposesAndBatchStridesMatchNaive) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<double>(DType::Float64, ta, tb, 5, 7, 3, 1, false, false, 1e-12);
      check_gemm<double>(DType::Float64, ta, tb, 4, 6, 9, 5, false, true, 1e-12);    // shared B
      check_gemm<float>(DType::Float32, ta, tb, 3, 8, 6, 4, true, false, 1e-5);      // shared A
      check_gemm<float>(DType::Float32, ta, tb, 70, 65, 72, 3, false, false, 1e-4);  // large path
      // the small-product kernel (every dim <= 64): full 6 x 16 tiles plus row and column tails,
      // the 64 x 64 x 64 limit, and one dim just past it (BLAS again)
      check_gemm<double>(DType::Float64, ta, tb, 13, 37, 20, 3, false, false, 1e-12);
      check_gemm<float>(DType::Float32, ta, tb, 32, 32, 32, 4, false, false, 1e-5);
      check_gemm<float>(DType::Float32, ta, tb, 64, 64, 64, 2, false, true, 1e-4);
      check_gemm<double>(DType::Float64, ta, tb, 64, 17, 65, 2, true, false, 1e-12);
      // the 512-bit kernel of AVX-512 builds (N >= one wide tile: 12-row blocks with 1 .. 11 row
      // tails, a partial column tile), and the small models' weight gradients it takes with a
      // transposed A (M <= 256, N <= 64, K <= 256; the other transposes take their own routes)
      check_gemm<float>(DType::Float32, ta, tb, 47, 45, 29, 2, false, false, 1e-5);
      check_gemm<double>(DType::Float64, ta, tb, 25, 37, 20, 2, false, false, 1e-12);
      check_gemm<float>(DType::Float32, ta, tb, 203, 64, 130, 1, false, false, 1e-4);
      check_gemm<double>(DType::Float64, ta, tb, 256, 33, 256, 1, false, false, 1e-12);
      // and the wider weight gradients (transposed A, M and N <= 128, K <= 1024), with a row
      // tail and a partial column tile
      check_gemm<float>(DType::Float32, ta, tb, 127, 113, 1000, 1, false, false, 1e-4);
    }
  // A small output with a long K is cut along K across threads (3 threads: uneven chunks), with
  // beta applied once; the result must not depend on that split beyond rounding.
  {
    const int saved = num_threads();
    set_num_threads(3);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm<double>(DType::Float64, ta, tb, 33, 32, 1001, 1, false, false, 1e-12);
        check_gemm<float>(DType::Float32, ta, tb, 9, 40, 2000, 2, false, false, 1e-4);
      }
    set_num_threads(saved);
  }
  // beta == 0 overwrites C, NaN included, in the small kernel as in BLAS
  {
    CpuBackend be;
    std::vector<float> a(8 * 8, 1.0f), b(8 * 8, 2.0f), c(8 * 8, std::nanf(""));
    be.gemm(DType::Float32, false, false, 8, 8, 8, 1.0, a.data(), 8, 0, b.data(), 8, 0, 0.0,
            c.data(), 8, 0, 1);
    for (float v : c) EXPECT_EQ(v, 16.0f);
  }
  // K == 0 scales C by beta
  CpuBackend be;
  std::vector<double> c = {1, 2, 3, 4};
  be.gemm(DType::Float64, false, false, 2, 2, 0, 1.0, nullptr, 1, 0, nullptr, 2, 0, 3.0, c.data(),
          2, 0, 1);
  EXPECT_EQ(c, (std::vector<double>{3, 6, 9, 12}));
}

// Both widths of the small-product kernel accumulate each entry over k in order, so the 512-bit
// kernel's result is the 256-bit one's bit for bit (gemm routes by shape, and a changed route must
// not change a result), for every transpose, row tail and partial column tile.
TEST(CpuBackendBlas, SmallGemmWidthsAgreeBitForBit) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& s : std::vector<std::array<int64_t, 3>>{
               {1, 1, 1}, {11, 32, 7}, {23, 45, 64}, {36, 64, 256}, {203, 64, 130}, {7, 100, 3}}) {
        const int64_t M = s[0], N = s[1], K = s[2];
        const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
        const auto A = randv((ta ? K : M) * lda, 71), B = randv((tb ? N : K) * ldb, 72),
                   C0 = randv(M * ldc, 73);
        std::vector<float> a(A.begin(), A.end()), b(B.begin(), B.end()), c32(C0.begin(), C0.end());
        std::vector<float> c64 = c32;
        cpu::small_gemm_width<float, 32>(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, -1.25f,
                                         c32.data(), ldc);
        cpu::small_gemm_width<float, 64>(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, -1.25f,
                                         c64.data(), ldc);
        for (size_t i = 0; i < c32.size(); ++i)
          ASSERT_EQ(c32[i], c64[i]) << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                    << " K=" << K << " at " << i;
      }
}

// Products at most one 256-bit vector wide take the one-vector kernel (small_gemm_narrow; CoPE's
// gates q·kᵀ at 8 keys): every width 1..W, both transposes, beta 0 and not, row counts around the
// 8-row block, K around the 8 x 8 transposed pack, float and double, padded strides: the bits of the
// two-vector kernel the products took before.
template <class T>
void check_narrow_matches_two_vector_tile() {
  constexpr int64_t W = cpu::SmallGemmTraits<T, 32>::W;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const T beta : {T(0), T(-1.25)})
        for (int64_t N = 1; N <= W; ++N)
          for (int64_t M : {1, 5, 8, 9, 16, 19})
            for (int64_t K : {1, 7, 8, 16, 17}) {
              const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
              const auto A = randv((ta ? K : M) * lda, 81), B = randv((tb ? N : K) * ldb, 82),
                         C0 = randv(M * ldc, 83);
              std::vector<T> a(A.begin(), A.end()), b(B.begin(), B.end()), cn(C0.begin(), C0.end());
              std::vector<T> ct = cn;
              cpu::small_gemm_narrow<T>(ta, tb, M, N, K, T(0.5), a.data(), lda, b.data(), ldb, beta,
                                        cn.data(), ldc);
              cpu::small_gemm_width<T, 32>(ta, tb, M, N, K, T(0.5), a.data(), lda, b.data(), ldb,
                                           beta, ct.data(), ldc);
              for (size_t i = 0; i < cn.size(); ++i)
                ASSERT_EQ(cn[i], ct[i]) << "ta=" << ta << " tb=" << tb << " beta=" << beta
                                        << " M=" << M << " N=" << N << " K=" << K << " at " << i;
            }
}
TEST(CpuBackendBlas, SmallGemmNarrowMatchesTwoVectorTileBitForBit) {
  check_narrow_matches_two_vector_tile<float>();
  check_narrow_matches_two_vector_tile<double>();
}

// transpose_square<S> (the small kernel's register transposes: S = 8 packs CoPE's 8-key kᵀ, S = 16
// a 16-column strip of op(B) in AVX-512 builds) is the transpose, element for element, with padded
// strides on both sides and nothing written outside the block. Both sizes run on every machine
// (without AVX-512 GCC splits the 512-bit vectors), so the 16 x 16 masks are checked here too.
template <int S>
void check_transpose_square() {
  const int64_t lds = S + 3, ldd = S + 5;
  std::vector<float> src(static_cast<size_t>(S * lds)), dst(static_cast<size_t>(S * ldd), -7.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.25f;
  cpu::transpose_square<S>(src.data(), lds, dst.data(), ldd);
  for (int64_t k = 0; k < S; ++k)
    for (int64_t j = 0; j < ldd; ++j)
      ASSERT_EQ(dst[k * ldd + j], j < S ? src[j * lds + k] : -7.0f)
          << "S=" << S << " dst row " << k << " column " << j;
}
TEST(CpuBackendBlas, TransposeSquareIsTheTranspose) {
  check_transpose_square<8>();
  check_transpose_square<16>();
}

// gemm_bias (the bias written into each thread's block of C inside the product) gives the bits of
// Backend's default (the bias copied into C, then gemm with beta = 1) on every path of the
// threaded product: one call (small), blocks of rows (M >= N), blocks of columns, and K cut across
// threads (a small output with a long K), with 1, 2 and 3 threads.
TEST(CpuBackendBlas, GemmBiasMatchesCopyThenGemmBitForBit) {
  CpuBackend be;
  const int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& s : std::vector<std::array<int64_t, 3>>{
                 {5, 7, 3}, {300, 70, 64}, {40, 300, 64}, {33, 32, 4096}, {20, 9, 0}}) {
          const int64_t M = s[0], N = s[1], K = s[2];
          const int64_t lda = std::max<int64_t>(ta ? M : K, 1) + 1, ldb = (tb ? K : N) + 2,
                        ldc = N + 3;
          const auto A = randv(std::max<int64_t>(ta ? K : M, 1) * lda, 81),
                     B = randv(std::max<int64_t>(tb ? N : K, 1) * ldb, 82), bias = randv(N, 83);
          std::vector<float> a(A.begin(), A.end()), b(B.begin(), B.end()),
              bs(bias.begin(), bias.end());
          std::vector<float> fused(static_cast<size_t>(M * ldc), 7.0f), ref = fused;
          be.gemm_bias(DType::Float32, ta, tb, M, N, K, a.data(), lda, b.data(), ldb, bs.data(),
                       fused.data(), ldc);
          be.Backend::gemm_bias(DType::Float32, ta, tb, M, N, K, a.data(), lda, b.data(), ldb,
                                bs.data(), ref.data(), ldc);
          for (size_t i = 0; i < fused.size(); ++i)
            ASSERT_EQ(fused[i], ref[i]) << threads << " threads, ta=" << ta << " tb=" << tb
                                        << " M=" << M << " N=" << N << " K=" << K << " at " << i;
        }
  }
  set_num_threads(saved);
}

// gemm_group (independent products, on several threads one whole product per thread) gives, for
// each product, exactly the bits of one of the serial routes: Backend's default (gemm on each in
// turn, each cut across the threads) at this thread count, or the product whole as one call (gemm
// on one thread). Which one is not asserted: OpenBLAS's whole product and its row blocks can
// differ in the last bits (70 x 64 x 300 with a transposed A did in the sanitizer build while the
// Release build gave equal bits), so "the default's bits" is not a property the group can promise.
// A wrong offset, owner or skipped product matches neither. With 1, 2 and 3 threads, float32 and
// float64, every transpose: the reference config's dX / dW pairs of a
// linear layer (dW's rows, then its columns, the longer side; the d 128 dW on pelab's small
// kernel), a pair with alpha, beta and padded leading dimensions, pairs below the grain or
// unequal (the default's route), a pair with a product that gemm cuts along K, and a product
// whose blocks fit pelab's small kernel while the whole goes to BLAS (with a transposed A:
// computed whole, its bits differed from the blocks', so it runs as its blocks).
template <class T>
void check_gemm_group(DType dt, int threads) {
  CpuBackend be;
  using Dims = std::array<int64_t, 3>;  // M, N, K
  const std::vector<std::array<Dims, 2>> pairs{
      {Dims{1024, 128, 512}, Dims{512, 128, 1024}},   // d_ff 512 <- 128: dX, dW
      {Dims{1024, 512, 128}, Dims{128, 512, 1024}},   // 128 <- d_ff 512
      {Dims{1024, 128, 128}, Dims{128, 128, 1024}},   // 128 <- 128
      {Dims{300, 70, 64}, Dims{70, 64, 300}},         // odd sizes
      {Dims{8, 8, 8}, Dims{9, 7, 5}},                 // below the grain
      {Dims{300, 70, 64}, Dims{40, 40, 40}},          // unequal work
      {Dims{256, 128, 512}, Dims{33, 32, 4096}},      // the second is cut along K
      {Dims{1024, 96, 96}, Dims{96, 96, 1024}},       // BLAS whole and in blocks
      {Dims{2048, 80, 48}, Dims{80, 48, 2048}},       // small kernel whole and in blocks
      {Dims{512, 64, 256}, Dims{256, 64, 512}}};      // dW (ta): small kernel in blocks only
  for (const auto& pair : pairs)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        std::vector<std::vector<T>> a(2), b(2), fused(2), ref(2);
        Backend::GemmItem items[2], ref_items[2];
        for (int i = 0; i < 2; ++i) {
          const int64_t M = pair[i][0], N = pair[i][1], K = pair[i][2];
          const bool tbi = i == 0 ? tb : !tb;   // mixed transposes within a pair
          const int64_t pad = i == 0 ? 0 : 3;  // the second item: padded rows, alpha, beta
          const int64_t lda = (ta ? M : K) + pad, ldb = (tbi ? K : N) + pad, ldc = N + pad;
          const auto A = randv((ta ? K : M) * lda, 101 + i),
                     B = randv((tbi ? N : K) * ldb, 103 + i), C = randv(M * ldc, 105 + i);
          a[i].assign(A.begin(), A.end());
          b[i].assign(B.begin(), B.end());
          fused[i].assign(C.begin(), C.end());
          ref[i] = fused[i];
          Backend::GemmItem& g = items[i];
          g.transA = ta;
          g.transB = tbi;
          g.M = M;
          g.N = N;
          g.K = K;
          g.alpha = i == 0 ? 1.0 : -0.75;
          g.A = a[i].data();
          g.lda = lda;
          g.B = b[i].data();
          g.ldb = ldb;
          g.beta = i == 0 ? 0.0 : 0.5;
          g.C = fused[i].data();
          g.ldc = ldc;
          ref_items[i] = g;
          ref_items[i].C = ref[i].data();
        }
        // the reference on one thread: every product whole, one call each
        std::vector<std::vector<T>> ref1 = ref;
        Backend::GemmItem one_items[2] = {ref_items[0], ref_items[1]};
        for (int i = 0; i < 2; ++i) one_items[i].C = ref1[i].data();
        set_num_threads(1);
        be.Backend::gemm_group(dt, one_items, 2);
        set_num_threads(threads);
        be.gemm_group(dt, items, 2);
        be.Backend::gemm_group(dt, ref_items, 2);
        for (int i = 0; i < 2; ++i) {
          const bool as_cut = fused[i] == ref[i], as_whole = fused[i] == ref1[i];
          if (as_cut || as_whole) continue;
          for (size_t j = 0; j < fused[i].size(); ++j)  // name the first element that differs
            ASSERT_TRUE(fused[i][j] == ref[i][j] || fused[i][j] == ref1[i][j])
                << threads << " threads, " << dtype_name(dt) << " ta=" << ta << " tb=" << tb
                << " item " << i << " " << pair[i][0] << " x " << pair[i][1] << " x "
                << pair[i][2] << " at " << j << ": " << fused[i][j] << " against " << ref[i][j]
                << " (gemm at this thread count) and " << ref1[i][j] << " (whole)";
          FAIL() << "item " << i << " mixes the two references' elements";
        }
      }
}

TEST(CpuBackendBlas, GemmGroupMatchesSerialGemmsBitForBit) {
  const int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    check_gemm_group<float>(DType::Float32, threads);
    check_gemm_group<double>(DType::Float64, threads);
  }
  set_num_threads(saved);
}

// ---------------------------------------------------------------------------------------------
TEST(CpuBackendOptim, AdamWAndSgdOneStepMatchHandFormula) {
  CpuBackend be;
  const int64_t n = 5;
  auto p0 = randv(n, 91), g = randv(n, 92), m0 = randv(n, 93), v0 = randv(n, 94, 0.01, 1.0);
  std::vector<double> p = p0, m = m0, v = v0;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  const int t = 3;
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  be.adamw_step(mk(p.data(), DType::Float64, {n}), mk(g.data(), DType::Float64, {n}),
                mk(m.data(), DType::Float64, {n}), mk(v.data(), DType::Float64, {n}), lr, b1, b2,
                eps, wd, bc1, bc2);
  for (int64_t i = 0; i < n; ++i) {
    double pp = p0[i] - lr * wd * p0[i];
    const double mm = b1 * m0[i] + (1 - b1) * g[i];
    const double vv = b2 * v0[i] + (1 - b2) * g[i] * g[i];
    pp -= lr * (mm / bc1) / (std::sqrt(vv / bc2) + eps);
    EXPECT_NEAR(m[i], mm, 1e-15);
    EXPECT_NEAR(v[i], vv, 1e-15);
    EXPECT_NEAR(p[i], pp, 1e-13);
  }
  // SGD: weight decay, momentum with dampening, nesterov; first step then a second step
  for (bool nesterov : {false, true}) {
    const double mu = 0.9, damp = nesterov ? 0.0 : 0.3, swd = 0.05, slr = 0.1;
    std::vector<double> sp = p0, buf(n, 123.0);
    std::vector<double> rp = p0, rbuf(n);
    for (int step = 0; step < 2; ++step) {
      be.sgd_step(mk(sp.data(), DType::Float64, {n}), mk(g.data(), DType::Float64, {n}),
                  mk(buf.data(), DType::Float64, {n}), slr, mu, damp, swd, nesterov, step == 0);
      for (int64_t i = 0; i < n; ++i) {
        double d = g[i] + swd * rp[i];
        rbuf[i] = step == 0 ? d : mu * rbuf[i] + (1 - damp) * d;
        d = nesterov ? d + mu * rbuf[i] : rbuf[i];
        rp[i] -= slr * d;
        EXPECT_NEAR(buf[i], rbuf[i], 1e-14);
        EXPECT_NEAR(sp[i], rp[i], 1e-14);
      }
    }
  }
  // plain SGD without momentum ignores the (absent) buffer
  std::vector<double> q = p0;
  be.sgd_step(mk(q.data(), DType::Float64, {n}), mk(g.data(), DType::Float64, {n}), View{}, 0.5, 0,
              0, 0, false, true);
  for (int64_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(q[i], p0[i] - 0.5 * g[i]);
}

TEST(CpuBackendRandom, CounterBasedFillsAndDropout) {
  CpuBackend be;
  const int64_t n = 40000;
  std::vector<float> mask(n), shifted(100);
  const double p = 0.25;
  be.dropout_mask(mk(mask.data(), DType::Float32, {n}), p, 7, 0);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mask[i] == 0.f || mask[i] == static_cast<float>(1 / (1 - p)));
    EXPECT_EQ(mask[i] != 0.f, rng_uniform(7, i) >= p);
    kept += mask[i] != 0.f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01);
  // offset k continues the same stream
  be.dropout_mask(mk(shifted.data(), DType::Float32, {100}), p, 7, 500);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(shifted[i], mask[500 + i]);
  std::vector<double> u(n), z(n);
  be.random_uniform(mk(u.data(), DType::Float64, {n}), -1, 3, 9, 11);
  be.random_normal(mk(z.data(), DType::Float64, {n}), 2.0, 0.5, 9, 11);
  double mu = 0, m2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(u[i], -1);
    ASSERT_LT(u[i], 3);
    EXPECT_EQ(u[i], -1 + 4 * rng_uniform(9, 11 + i));
    EXPECT_EQ(z[i], 2.0 + 0.5 * rng_normal(9, 11 + i));
    mu += z[i];
    m2 += z[i] * z[i];
  }
  mu /= n;
  EXPECT_NEAR(mu, 2.0, 0.02);
  EXPECT_NEAR(std::sqrt(m2 / n - mu * mu), 0.5, 0.02);
}

// ---------------------------------------------------------------------------------------------
TEST(CpuBackendDeterminism, RepeatedRunsAreBitIdenticalWithTwoThreads) {
  const int saved = num_threads();
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  CpuBackend be;
  const int64_t R = 512, N = 96;
  auto x = to_f(randv(R * N, 101, -3, 3)), gy = to_f(randv(R * N, 102)), w = to_f(randv(N, 103));
  auto run = [&]() {
    std::vector<float> y(R * N), mean(R), rstd(R), gx(R * N), gw(N), gb(N), sum(N), sm(R * N);
    be.layer_norm(mk(y.data(), DType::Float32, {R, N}), mk(mean.data(), DType::Float32, {R}),
                  mk(rstd.data(), DType::Float32, {R}), mk(x.data(), DType::Float32, {R, N}),
                  mk(w.data(), DType::Float32, {N}), View{}, R, N, 1e-5);
    be.layer_norm_backward(
        mk(gx.data(), DType::Float32, {R, N}), mk(gw.data(), DType::Float32, {N}),
        mk(gb.data(), DType::Float32, {N}), mk(gy.data(), DType::Float32, {R, N}),
        mk(x.data(), DType::Float32, {R, N}), mk(mean.data(), DType::Float32, {R}),
        mk(rstd.data(), DType::Float32, {R}), mk(w.data(), DType::Float32, {N}), R, N);
    be.reduce(ReduceOp::Sum, mk(sum.data(), DType::Float32, {N}), nullptr,
              mk(gy.data(), DType::Float32, {R, N}), 1, R, N);
    be.softmax(mk(sm.data(), DType::Float32, {R, N}), mk(x.data(), DType::Float32, {R, N}), R, N, 1,
               false);
    const double ss = be.sum_squares(mk(gx.data(), DType::Float32, {R * N}));
    std::vector<float> all;
    for (const auto* v : {&y, &gx, &gw, &gb, &sum, &sm})
      all.insert(all.end(), v->begin(), v->end());
    all.push_back(static_cast<float>(ss));
    return all;
  };
  const auto r1 = run(), r2 = run();
  ASSERT_EQ(r1.size(), r2.size());
  EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)), 0);
  set_num_threads(1);
  const auto r3 = run();  // blocks are fixed by the shape, so one thread gives the same bits too
  EXPECT_EQ(std::memcmp(r1.data(), r3.data(), r1.size() * sizeof(float)), 0);
  set_num_threads(saved);
}

TEST(CpuBackendMemory, CachingAllocatorReusesFreedBlocks) {
  CpuBackend be;
  be.empty_cache();
  EXPECT_EQ(CpuBackend::cached_bytes(), 0u);
  void* p = be.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 1, 1000);
  be.deallocate(p, 1000);
  EXPECT_EQ(CpuBackend::cached_bytes(), 1024u);  // rounded up to 64 bytes
  void* q = be.allocate(1000);
  EXPECT_EQ(q, p);  // same size class: the cached block comes back
  EXPECT_EQ(CpuBackend::cached_bytes(), 0u);
  void* r = be.allocate(5000);  // a different size does not take it
  EXPECT_NE(r, q);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r) % 64, 0u);
  be.deallocate(q, 1000);
  be.deallocate(r, 5000);
  EXPECT_EQ(CpuBackend::cached_bytes(), 1024u + 5056u);
  be.empty_cache();
  EXPECT_EQ(CpuBackend::cached_bytes(), 0u);
  // copies are plain memcpy
  std::vector<float> h = {1, 2, 3}, back(3);
  void* d = be.allocate(12);
  be.copy_from_host(d, h.data(), 12);
  be.copy_to_host(back.data(), d, 12);
  EXPECT_EQ(back, h);
  be.deallocate(d, 12);
  // the registered backend is the CPU backend
  EXPECT_EQ(backend_for(Device::cpu()).name(), "cpu");
}

// fast_expf on non-finite inputs: NaN stays NaN, ±inf give inf / 0, and none of them reaches the
// float-to-int conversion and exponent shift (undefined behaviour for NaN: UBSan reported "left
// shift of negative value" from the fused attention of a diverged run before the fix).
TEST(CpuFastMath, ExpOfNonFiniteInputsIsDefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(pelab::cpu::fast_expf(nan)));
  EXPECT_TRUE(std::isnan(pelab::cpu::fast_expf(-nan)));
  EXPECT_EQ(pelab::cpu::fast_expf(inf), inf);
  EXPECT_EQ(pelab::cpu::fast_expf(-inf), 0.0f);
  EXPECT_EQ(pelab::cpu::fast_expf(1e30f), inf);
  EXPECT_EQ(pelab::cpu::fast_expf(-1e30f), 0.0f);
  EXPECT_NEAR(pelab::cpu::fast_expf(1.0f), std::exp(1.0f), 1e-6f);
}

// The fused attention walks a relative index row by row as segments (runs of equal entries and
// unit ramps) when a row has few of them: Shaw's index at the tiny config (Lq = Lk = 8, k = 16:
// no distance clipped, each row one ramp) and a clipped one (two runs and a ramp per row) take
// that path for every row; an index without structure goes entry by entry. Fails if the ramps
// were not recognised (each tiny row would be 8 single-entry runs). That both walks give the
// formula's values and gradients: OpsNN.ScaledDotAttentionMatchesComposite (clipped rows at
// Lk = 75) and the op driver's relative-table cases (ramps at Lk = 6, and entry by entry).
TEST(CpuAttention, RelativeIndexRowsAsRunsAndRamps) {
  auto index = [](int64_t Lq, int64_t Lk, int64_t k) {
    std::vector<int64_t> r(static_cast<size_t>(Lq * Lk));
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) r[i * Lk + j] = std::clamp<int64_t>(j - i, -k, k) + k;
    return r;
  };
  EXPECT_EQ(cpu::attention_segmented_rows(index(8, 8, 16).data(), 8, 8), 8);
  EXPECT_EQ(cpu::attention_segmented_rows(index(70, 75, 4).data(), 70, 75), 70);
  std::vector<int64_t> scrambled(64);
  for (int64_t n = 0; n < 64; ++n) scrambled[n] = (n * 7) % 5;
  EXPECT_EQ(cpu::attention_segmented_rows(scrambled.data(), 8, 8), 0);
}
