// pelab — CPU elementwise kernels: fill, copy (with dtype conversion), unary, binary, where, axpy.
// Every operand may be strided (stride 0 = broadcast). Layouts are collapsed first, so contiguous
// and row-broadcast cases become simple unit-stride inner loops; a scalar operand (stride 0 along
// the run) gets its own loop. Ops are template functors: no per-element dispatch.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend_checks.h"
#include "gelu_math.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_strided.h"

namespace pelab {
namespace {

using cpu::for_each_run;
using cpu::Layout;
using cpu::make_layout;
using cpu::sel;

// compute type of a unary op: Int64 data is computed in double
template <class T>
struct Compute {
  using type = T;
};
template <>
struct Compute<int64_t> {
  using type = double;
};

// ---------------- fill ----------------
template <class T>
void fill_impl(const View& out, double value) {
  const View* vs[1] = {&out};
  Layout<1> L = make_layout<1>(out.shape, vs, "fill");
  const T v = static_cast<T>(value);
  const int64_t so = L.inner_stride(0);
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    T* o = reinterpret_cast<T*>(L.base[0]) + off[0];
    if (so == 1) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] = v;
    }
  });
}

// ---------------- copy ----------------
// Transposing copy: the output runs along the last axis, the input along the one before it.
// Copies small tiles (8x8 measured best: power-of-two strides alias in L1 with larger tiles).
template <class To, class Ti>
void copy_transposed(const Layout<2>& L) {
  constexpr int64_t kTile = 8;
  const int nd = L.nd;
  const int64_t A = L.shape[nd - 2], B = L.shape[nd - 1];
  const int64_t oa = L.st[0][nd - 2], ib = L.st[1][nd - 1];  // out inner stride 1, in row stride 1
  const int64_t ta = (A + kTile - 1) / kTile, tb = (B + kTile - 1) / kTile;
  const int64_t planes = L.numel / (A * B);
  const int64_t tasks = planes * ta * tb;
  cpu::parallel_for(tasks, L.numel > kParallelGrain, [&](int64_t t) {
    int64_t p = t / (ta * tb);
    const int64_t a0 = (t / tb) % ta * kTile, b0 = t % tb * kTile;
    int64_t offo = 0, offi = 0;
    for (int d = nd - 3; d >= 0; --d) {
      const int64_t i = p % L.shape[d];
      p /= L.shape[d];
      offo += i * L.st[0][d];
      offi += i * L.st[1][d];
    }
    To* o = reinterpret_cast<To*>(L.base[0]) + offo;
    const Ti* x = reinterpret_cast<const Ti*>(L.base[1]) + offi;
    const int64_t a1 = std::min(A, a0 + kTile), b1 = std::min(B, b0 + kTile);
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t a = a0; a < a1; ++a) o[a * oa + b] = static_cast<To>(x[a + b * ib]);
  });
}

template <class To, class Ti>
void copy_impl(const View& out, const View& in) {
  const View* vs[2] = {&out, &in};
  Layout<2> L = make_layout<2>(out.shape, vs, "copy");
  const int64_t so = L.inner_stride(0), si = L.inner_stride(1);
  if (L.nd >= 2 && so == 1 && si != 1 && si != 0 && L.st[1][L.nd - 2] == 1 &&
      L.shape[L.nd - 1] >= 8 && L.shape[L.nd - 2] >= 8) {
    copy_transposed<To, Ti>(L);
    return;
  }
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    To* o = reinterpret_cast<To*>(L.base[0]) + off[0];
    const Ti* a = reinterpret_cast<const Ti*>(L.base[1]) + off[1];
    if (so == 1 && si == 1) {
      if (std::is_same<To, Ti>::value) {
        if (static_cast<const void*>(o) != static_cast<const void*>(a))
          std::memcpy(static_cast<void*>(o), static_cast<const void*>(a), len * sizeof(To));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) o[i] = static_cast<To>(a[i]);
      }
    } else if (so == 1 && si == 0) {
      const To v = static_cast<To>(a[0]);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] = static_cast<To>(a[i * si]);
    }
  });
}

// ---------------- unary ----------------
template <class T, class F>
void unary_loop(const Layout<2>& L, F f) {
  using C = typename Compute<T>::type;
  const int64_t so = L.inner_stride(0), si = L.inner_stride(1);
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    T* o = reinterpret_cast<T*>(L.base[0]) + off[0];
    const T* a = reinterpret_cast<const T*>(L.base[1]) + off[1];
    if (so == 1 && si == 1) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = static_cast<T>(f(static_cast<C>(a[i])));
    } else if (so == 1 && si == 0) {
      const T v = static_cast<T>(f(static_cast<C>(a[0])));
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] = static_cast<T>(f(static_cast<C>(a[i * si])));
    }
  });
}

// The CPU's erf / exp / tanh for the shared GELU formulas (gelu_math.h).
struct CpuMath {
  template <class C>
  static C erf(C x) { return cpu::verf(x); }
  template <class C>
  static C exp(C x) { return cpu::vexp(x); }
  template <class C>
  static C tanh(C x) { return cpu::vtanh(x); }
};

template <class T>
void unary_impl(UnaryOp op, const Layout<2>& L, double alpha) {
  using C = typename Compute<T>::type;
  const C al = static_cast<C>(alpha);
  const C zero(0), one(1);
  switch (op) {
    case UnaryOp::Neg:
      return unary_loop<T>(L, [](C x) { return -x; });
    case UnaryOp::Exp:
      return unary_loop<T>(L, [](C x) { return cpu::vexp(x); });
    case UnaryOp::Log:
      return unary_loop<T>(L, [](C x) { return std::log(x); });
    case UnaryOp::Sqrt:
      return unary_loop<T>(L, [](C x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt:
      return unary_loop<T>(L, [one](C x) { return one / std::sqrt(x); });
    case UnaryOp::Tanh:
      return unary_loop<T>(L, [](C x) { return cpu::vtanh(x); });
    case UnaryOp::Relu:
      return unary_loop<T>(L, [zero](C x) { return x < zero ? zero : x; });
    case UnaryOp::Gelu:
      return unary_loop<T>(L, [](C x) { return gelu_math::gelu<CpuMath>(x); });
    case UnaryOp::GeluTanh:
      return unary_loop<T>(L, [](C x) { return gelu_math::gelu_tanh<CpuMath>(x); });
    case UnaryOp::Sin:
      return unary_loop<T>(L, [](C x) { return std::sin(x); });
    case UnaryOp::Cos:
      return unary_loop<T>(L, [](C x) { return std::cos(x); });
    case UnaryOp::Abs:
      return unary_loop<T>(L, [](C x) { return std::fabs(x); });
    case UnaryOp::Sigmoid:
      return unary_loop<T>(L, [zero, one](C x) {
        const C e = cpu::vexp(-std::fabs(x));
        const C r = one / (one + e);
        return sel(x >= zero, r, e * r);
      });
    case UnaryOp::AddScalar:
      return unary_loop<T>(L, [al](C x) { return x + al; });
    case UnaryOp::MulScalar:
      return unary_loop<T>(L, [al](C x) { return x * al; });
    case UnaryOp::PowScalar:
      if (alpha == 1.0) return unary_loop<T>(L, [](C x) { return x; });
      if (alpha == 2.0) return unary_loop<T>(L, [](C x) { return x * x; });
      if (alpha == 3.0) return unary_loop<T>(L, [](C x) { return x * x * x; });
      if (alpha == 0.5) return unary_loop<T>(L, [](C x) { return std::sqrt(x); });
      if (alpha == -1.0) return unary_loop<T>(L, [one](C x) { return one / x; });
      if (alpha == 0.0) return unary_loop<T>(L, [one](C) { return one; });
      return unary_loop<T>(L, [al](C x) { return std::pow(x, al); });
    case UnaryOp::RDivScalar:
      return unary_loop<T>(L, [al](C x) { return al / x; });
    case UnaryOp::Step:
      return unary_loop<T>(L, [zero, one](C x) { return x > zero ? one : zero; });
  }
  fail("unary: unknown op ", static_cast<int>(op));
}

// ---------------- binary ----------------
template <class Ti, class To, class F>
void binary_loop(const Layout<3>& L, F f) {
  const int64_t so = L.inner_stride(0), sa = L.inner_stride(1), sb = L.inner_stride(2);
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    To* o = reinterpret_cast<To*>(L.base[0]) + off[0];
    const Ti* a = reinterpret_cast<const Ti*>(L.base[1]) + off[1];
    const Ti* b = reinterpret_cast<const Ti*>(L.base[2]) + off[2];
    if (so == 1 && sa == 1 && sb == 1) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = static_cast<To>(f(a[i], b[i]));
    } else if (so == 1 && sa == 1 && sb == 0) {
      const Ti bv = b[0];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = static_cast<To>(f(a[i], bv));
    } else if (so == 1 && sa == 0 && sb == 1) {
      const Ti av = a[0];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = static_cast<To>(f(av, b[i]));
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] = static_cast<To>(f(a[i * sa], b[i * sb]));
    }
  });
}

template <class T, class To>
bool binary_compare(BinaryOp op, const Layout<3>& L) {
  const T one(1), zero(0);
  switch (op) {
    case BinaryOp::Eq:
      binary_loop<T, To>(L, [=](T x, T y) { return x == y ? one : zero; });
      return true;
    case BinaryOp::Ne:
      binary_loop<T, To>(L, [=](T x, T y) { return x != y ? one : zero; });
      return true;
    case BinaryOp::Lt:
      binary_loop<T, To>(L, [=](T x, T y) { return x < y ? one : zero; });
      return true;
    case BinaryOp::Gt:
      binary_loop<T, To>(L, [=](T x, T y) { return x > y ? one : zero; });
      return true;
    default:
      return false;
  }
}

template <class T>
void binary_impl(BinaryOp op, const Layout<3>& L) {
  if (binary_compare<T, T>(op, L)) return;
  switch (op) {
    case BinaryOp::Add:
      return binary_loop<T, T>(L, [](T x, T y) { return x + y; });
    case BinaryOp::Sub:
      return binary_loop<T, T>(L, [](T x, T y) { return x - y; });
    case BinaryOp::Mul:
      return binary_loop<T, T>(L, [](T x, T y) { return x * y; });
    case BinaryOp::Div:
      if constexpr (std::is_integral<T>::value) {
        return binary_loop<T, T>(L, [](T x, T y) { return y == 0 ? T(0) : x / y; });
      } else {
        return binary_loop<T, T>(L, [](T x, T y) { return x / y; });
      }
    // NaN propagates (x != x picks x; a NaN y is picked by the comparison failing)
    case BinaryOp::Max:
      return binary_loop<T, T>(L, [](T x, T y) { return (x > y || x != x) ? x : y; });
    case BinaryOp::Min:
      return binary_loop<T, T>(L, [](T x, T y) { return (x < y || x != x) ? x : y; });
    case BinaryOp::TanhGrad:
      return binary_loop<T, T>(L, [](T x, T y) { return x * (T(1) - y * y); });
    case BinaryOp::GeluGrad:
      return binary_loop<T, T>(L, [](T g, T x) {
        using C = typename Compute<T>::type;
        return static_cast<T>(static_cast<C>(g) *
                              gelu_math::gelu_grad<CpuMath>(static_cast<C>(x)));
      });
    case BinaryOp::GeluTanhGrad:
      return binary_loop<T, T>(L, [](T g, T x) {
        using C = typename Compute<T>::type;
        return static_cast<T>(static_cast<C>(g) *
                              gelu_math::gelu_tanh_grad<CpuMath>(static_cast<C>(x)));
      });
    case BinaryOp::SigmoidGrad:
      return binary_loop<T, T>(L, [](T g, T y) { return g * (y * (T(1) - y)); });
    default:
      break;
  }
  fail("binary: unknown op ", static_cast<int>(op));
}

// ---------------- where ----------------
template <class T, class Tc>
void where_impl(const Layout<4>& L) {
  const int64_t so = L.inner_stride(0), sc = L.inner_stride(1), sa = L.inner_stride(2),
                sb = L.inner_stride(3);
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    T* o = reinterpret_cast<T*>(L.base[0]) + off[0];
    const Tc* c = reinterpret_cast<const Tc*>(L.base[1]) + off[1];
    const T* a = reinterpret_cast<const T*>(L.base[2]) + off[2];
    const T* b = reinterpret_cast<const T*>(L.base[3]) + off[3];
    const Tc cz(0);
    if (so == 1 && sc == 1 && sa == 1 && sb == 1) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = c[i] != cz ? a[i] : b[i];
    } else if (so == 1 && sc == 1 && sa == 0 && sb == 1) {
      const T av = a[0];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = c[i] != cz ? av : b[i];
    } else if (so == 1 && sc == 1 && sa == 1 && sb == 0) {
      const T bv = b[0];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = c[i] != cz ? a[i] : bv;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] = c[i * sc] != cz ? a[i * sa] : b[i * sb];
    }
  });
}

// ---------------- axpy ----------------
template <class To, class Tx>
void axpy_impl(const Layout<2>& L, double alpha) {
  const To al = static_cast<To>(alpha);
  const int64_t so = L.inner_stride(0), sx = L.inner_stride(1);
  const bool unit = alpha == 1.0;
  for_each_run(L, [&](const int64_t* off, int64_t len) {
    To* o = reinterpret_cast<To*>(L.base[0]) + off[0];
    const Tx* x = reinterpret_cast<const Tx*>(L.base[1]) + off[1];
    if (so == 1 && sx == 1) {
      if (unit) {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) o[i] += static_cast<To>(x[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) o[i] += al * static_cast<To>(x[i]);
      }
    } else if (so == 1 && sx == 0) {
      const To v = al * static_cast<To>(x[0]);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] += v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i * so] += al * static_cast<To>(x[i * sx]);
    }
  });
}

// ---------------- clamp ----------------
// NaN stays NaN: both comparisons fail for it.
template <class T>
void clamp_impl(const Layout<2>& L, double lo, double hi) {
  const T l = static_cast<T>(lo), h = static_cast<T>(hi);
  unary_loop<T>(L, [l, h](T x) { return x < l ? l : (x > h ? h : x); });
}

template <class T>
void clamp_backward_impl(const Layout<3>& L, double lo, double hi) {
  const T l = static_cast<T>(lo), h = static_cast<T>(hi);
  binary_loop<T, T>(L, [l, h](T g, T x) { return sel((x >= l) & (x <= h), g, T(0)); });
}

}  // namespace

void CpuBackend::fill(const View& out, double value) {
  dispatch_all(out.dtype, "fill", [&](auto tag) { fill_impl<decltype(tag)>(out, value); });
}

void CpuBackend::copy(const View& out, const View& in) {
  dispatch_all(out.dtype, "copy", [&](auto to) {
    using To = decltype(to);
    dispatch_all(in.dtype, "copy", [&](auto ti) {
      using Ti = decltype(ti);
      copy_impl<To, Ti>(out, in);
    });
  });
}

void CpuBackend::unary(UnaryOp op, const View& out, const View& in, double alpha) {
  const AnyDTypeOp prologue = check_unary(out, in);
  const View* vs[2] = {&out, &in};
  Layout<2> L = make_layout<2>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) { unary_impl<decltype(tag)>(op, L, alpha); });
}

void CpuBackend::binary(BinaryOp op, const View& out, const View& a, const View& b) {
  const bool cmp =
      op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Gt;
  const AnyDTypeOp prologue = check_binary(out, a, b, cmp);
  const View* vs[3] = {&out, &a, &b};
  Layout<3> L = make_layout<3>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    if (out.dtype == a.dtype) {
      binary_impl<T>(op, L);
    } else {
      prologue.dispatch(out.dtype, [&](auto to) { binary_compare<T, decltype(to)>(op, L); });
    }
  });
}

void CpuBackend::where(const View& out, const View& cond, const View& a, const View& b) {
  const AnyDTypeOp prologue = check_where(out, a, b);
  const View* vs[4] = {&out, &cond, &a, &b};
  Layout<4> L = make_layout<4>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) {
    using T = decltype(tag);
    prologue.dispatch(cond.dtype, [&](auto tc) { where_impl<T, decltype(tc)>(L); });
  });
}

void CpuBackend::axpy(const View& out, const View& x, double alpha) {
  const View* vs[2] = {&out, &x};
  Layout<2> L = make_layout<2>(out.shape, vs, "axpy");
  dispatch_all(out.dtype, "axpy", [&](auto to) {
    using To = decltype(to);
    dispatch_all(x.dtype, "axpy", [&](auto tx) { axpy_impl<To, decltype(tx)>(L, alpha); });
  });
}

void CpuBackend::clamp(const View& out, const View& in, double lo, double hi) {
  const FloatOp prologue = check_clamp(out, in, lo, hi);
  const View* vs[2] = {&out, &in};
  Layout<2> L = make_layout<2>(out.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) { clamp_impl<decltype(tag)>(L, lo, hi); });
}

void CpuBackend::clamp_backward(const View& grad_in, const View& grad_out, const View& x,
                                double lo, double hi) {
  const FloatOp prologue = check_clamp_backward(grad_in, grad_out, x, lo, hi);
  const View* vs[3] = {&grad_in, &grad_out, &x};
  Layout<3> L = make_layout<3>(grad_in.shape, vs, prologue.name);
  prologue.dispatch([&](auto tag) { clamp_backward_impl<decltype(tag)>(L, lo, hi); });
}

}  // namespace pelab
