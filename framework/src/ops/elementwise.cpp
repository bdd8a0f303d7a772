// pelab — elementwise ops (numpy broadcasting), comparisons, where and masked_fill, with their
// backward passes. Kernels read inputs through strided / broadcast Views, so no input is copied.
#include <vector>

#include "ops/op_util.h"
#include "pelab/ops.h"
#include "pelab/registry.h"

namespace pelab {

using detail::backend_of;
using detail::check_floating;
using detail::check_same;
using detail::make_output;
using detail::save_output;
using Grads = std::vector<Tensor>;

namespace {

// out = op(a, alpha), untracked.
Tensor unary_raw(UnaryOp op, const Tensor& a, double alpha = 0.0) {
  Tensor out = make_output(a.shape(), a.dtype(), a.device());
  if (out.numel() > 0) backend_of(a).unary(op, view_of(out), view_of(a), alpha);
  return out;
}

// out = op(a, b) with broadcasting, untracked; output dtype is a's.
Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same(name, a, b);
  if (a.shape() == b.shape()) {
    Tensor out = make_output(a.shape(), a.dtype(), a.device());
    if (out.numel() > 0) backend_of(a).binary(op, view_of(out), view_of(a), view_of(b));
    return out;
  }
  const Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = make_output(s, a.dtype(), a.device());
  if (out.numel() > 0)
    backend_of(a).binary(op, view_of(out), view_broadcast(a, s), view_broadcast(b, s));
  return out;
}

Tensor floating_binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_floating(name, a);
  check_floating(name, b);
  return binary_raw(op, a, b, name);
}

Tensor zero_scalar(const Tensor& like) { return Tensor::zeros({}, like.dtype(), like.device()); }

}  // namespace

// ---------------- binary arithmetic ----------------
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = floating_binary(BinaryOp::Add, a, b, "add");
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("add", {a, b}, out, [=](const Tensor& g) -> Grads {
    return {ra ? sum_to(g, sa) : Tensor(), rb ? sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = floating_binary(BinaryOp::Sub, a, b, "sub");
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("sub", {a, b}, out, [=](const Tensor& g) -> Grads {
    return {ra ? sum_to(g, sa) : Tensor(), rb ? neg(sum_to(g, sb)) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = floating_binary(BinaryOp::Mul, a, b, "mul");
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  const Tensor b_saved = ra ? b : Tensor();  // b is needed for a's gradient and vice versa
  const Tensor a_saved = rb ? a : Tensor();
  return record("mul", {a, b}, out, [=](const Tensor& g) -> Grads {
    return {ra ? sum_to(mul(g, b_saved), sa) : Tensor(),
            rb ? sum_to(mul(g, a_saved), sb) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = floating_binary(BinaryOp::Div, a, b, "div");
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  const Tensor y = rb ? save_output(out) : Tensor();
  return record("div", {a, b}, out, [=](const Tensor& g) -> Grads {
    const Tensor g_over_b = div(g, b);  // dL/da = g / b ; dL/db = -(g / b) * (a / b)
    return {ra ? sum_to(g_over_b, sa) : Tensor(),
            rb ? sum_to(neg(mul(g_over_b, y)), sb) : Tensor()};
  });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = floating_binary(BinaryOp::Max, a, b, "maximum");
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("maximum", {a, b}, out, [=](const Tensor& g) -> Grads {
    const Tensor b_wins = lt(a, b);  // ties go to a
    const Tensor zero = zero_scalar(g);
    return {ra ? sum_to(where(b_wins, zero, g), sa) : Tensor(),
            rb ? sum_to(where(b_wins, g, zero), sb) : Tensor()};
  });
}

// ---------------- scalar forms ----------------
Tensor add_scalar(const Tensor& a, double s) {
  check_floating("add_scalar", a);
  Tensor out = unary_raw(UnaryOp::AddScalar, a, s);
  return record("add_scalar", {a}, out, [](const Tensor& g) -> Grads { return {g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  check_floating("mul_scalar", a);
  Tensor out = unary_raw(UnaryOp::MulScalar, a, s);
  return record("mul_scalar", {a}, out,
                [s](const Tensor& g) -> Grads { return {mul_scalar(g, s)}; });
}

Tensor rdiv_scalar(double s, const Tensor& a) {
  check_floating("rdiv_scalar", a);
  Tensor out = unary_raw(UnaryOp::RDivScalar, a, s);
  if (!needs_grad({a})) return out;
  const Tensor y = save_output(out);
  return record("rdiv_scalar", {a}, out, [a, y](const Tensor& g) -> Grads {
    return {neg(div(mul(g, y), a))};  // d(s/a)/da = -s/a^2 = -y/a
  });
}

Tensor pow(const Tensor& a, double e) {
  check_floating("pow", a);
  Tensor out = unary_raw(UnaryOp::PowScalar, a, e);
  if (!needs_grad({a})) return out;
  return record("pow", {a}, out, [a, e](const Tensor& g) -> Grads {
    if (e == 0.0) return {Tensor::zeros(g.shape(), g.dtype(), g.device())};
    if (e == 1.0) return {g};
    if (e == 2.0) return {mul(g, mul_scalar(a, 2.0))};
    return {mul(g, mul_scalar(unary_raw(UnaryOp::PowScalar, a, e - 1.0), e))};
  });
}

// ---------------- unary ----------------
Tensor neg(const Tensor& a) {
  check_floating("neg", a);
  Tensor out = unary_raw(UnaryOp::Neg, a);
  return record("neg", {a}, out, [](const Tensor& g) -> Grads { return {neg(g)}; });
}

Tensor exp(const Tensor& a) {
  check_floating("exp", a);
  Tensor out = unary_raw(UnaryOp::Exp, a);
  if (!needs_grad({a})) return out;
  const Tensor y = save_output(out);
  return record("exp", {a}, out, [y](const Tensor& g) -> Grads { return {mul(g, y)}; });
}

Tensor log(const Tensor& a) {
  check_floating("log", a);
  Tensor out = unary_raw(UnaryOp::Log, a);
  return record("log", {a}, out, [a](const Tensor& g) -> Grads { return {div(g, a)}; });
}

Tensor sqrt(const Tensor& a) {
  check_floating("sqrt", a);
  Tensor out = unary_raw(UnaryOp::Sqrt, a);
  if (!needs_grad({a})) return out;
  const Tensor y = save_output(out);
  return record("sqrt", {a}, out,
                [y](const Tensor& g) -> Grads { return {div(mul_scalar(g, 0.5), y)}; });
}

Tensor tanh(const Tensor& a) {
  check_floating("tanh", a);
  Tensor out = unary_raw(UnaryOp::Tanh, a);
  if (!needs_grad({a})) return out;
  const Tensor y = save_output(out);
  return record("tanh", {a}, out, [y](const Tensor& g) -> Grads {
    return {binary_raw(BinaryOp::TanhGrad, g, y, "tanh backward")};
  });
}

Tensor sigmoid(const Tensor& a) {
  check_floating("sigmoid", a);
  Tensor out = unary_raw(UnaryOp::Sigmoid, a);
  if (!needs_grad({a})) return out;
  const Tensor y = save_output(out);
  return record("sigmoid", {a}, out, [y](const Tensor& g) -> Grads {
    return {binary_raw(BinaryOp::SigmoidGrad, g, y, "sigmoid backward")};  // g y (1 - y), one pass
  });
}

Tensor relu(const Tensor& a) {
  check_floating("relu", a);
  Tensor out = unary_raw(UnaryOp::Relu, a);
  return record("relu", {a}, out,
                [a](const Tensor& g) -> Grads { return {mul(g, unary_raw(UnaryOp::Step, a))}; });
}

Tensor gelu(const Tensor& a, bool tanh_approximation) {
  check_floating("gelu", a);
  Tensor out = unary_raw(tanh_approximation ? UnaryOp::GeluTanh : UnaryOp::Gelu, a);
  const BinaryOp grad_op = tanh_approximation ? BinaryOp::GeluTanhGrad : BinaryOp::GeluGrad;
  return record("gelu", {a}, out, [a, grad_op](const Tensor& g) -> Grads {
    return {binary_raw(grad_op, g, a, "gelu backward")};  // g * gelu'(a) in one pass
  });
}

Tensor clamp(const Tensor& a, double lo, double hi) {
  check_floating("clamp", a);
  PELAB_CHECK(lo <= hi, "clamp: lower bound ", lo, " must not exceed the upper bound ", hi,
              " (input ", a.str(), ")");
  Tensor out = make_output(a.shape(), a.dtype(), a.device());
  if (out.numel() > 0) backend_of(a).clamp(view_of(out), view_of(a), lo, hi);
  if (!needs_grad({a})) return out;
  return record("clamp", {a}, out, [a, lo, hi](const Tensor& g) -> Grads {
    Tensor gi = make_output(a.shape(), g.dtype(), g.device());
    if (gi.numel() > 0) backend_of(g).clamp_backward(view_of(gi), view_of(g), view_of(a), lo, hi);
    return {gi};
  });
}

Tensor sin(const Tensor& a) {
  check_floating("sin", a);
  Tensor out = unary_raw(UnaryOp::Sin, a);
  return record("sin", {a}, out,
                [a](const Tensor& g) -> Grads { return {mul(g, unary_raw(UnaryOp::Cos, a))}; });
}

Tensor cos(const Tensor& a) {
  check_floating("cos", a);
  Tensor out = unary_raw(UnaryOp::Cos, a);
  return record("cos", {a}, out, [a](const Tensor& g) -> Grads {
    return {neg(mul(g, unary_raw(UnaryOp::Sin, a)))};
  });
}

// ---------------- comparisons (not differentiable) ----------------
Tensor eq(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Lt, a, b, "lt"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Gt, a, b, "gt"); }

// ---------------- selection ----------------
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined("where", cond, "cond");
  check_same("where", a, b);
  detail::check_same_device("where", cond, a);
  const Shape s =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = make_output(s, a.dtype(), a.device());
  if (out.numel() > 0)
    backend_of(a).where(view_of(out), view_broadcast(cond, s), view_broadcast(a, s),
                        view_broadcast(b, s));
  if (!needs_grad({a, b})) return out;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("where", {cond, a, b}, out, [=](const Tensor& g) -> Grads {
    const Tensor zero = zero_scalar(g);
    return {Tensor(), ra ? sum_to(where(cond, g, zero), sa) : Tensor(),
            rb ? sum_to(where(cond, zero, g), sb) : Tensor()};
  });
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", a);
  detail::check_defined("masked_fill", mask, "mask");
  detail::check_same_device("masked_fill", a, mask);
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  Tensor out = make_output(s, a.dtype(), a.device());
  if (out.numel() > 0) {
    const Tensor fill = Tensor::full({}, value, a.dtype(), a.device());
    backend_of(a).where(view_of(out), view_broadcast(mask, s), view_broadcast(fill, s),
                        view_broadcast(a, s));
  }
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape();
  return record("masked_fill", {a, mask}, out, [=](const Tensor& g) -> Grads {
    return {sum_to(where(mask, zero_scalar(g), g), sa), Tensor()};
  });
}

PELAB_REGISTER_OP("add", true);
PELAB_REGISTER_OP("sub", true);
PELAB_REGISTER_OP("mul", true);
PELAB_REGISTER_OP("div", true);
PELAB_REGISTER_OP("maximum", true);
PELAB_REGISTER_OP("add_scalar", true);
PELAB_REGISTER_OP("mul_scalar", true);
PELAB_REGISTER_OP("rdiv_scalar", true);
PELAB_REGISTER_OP("pow", true);
PELAB_REGISTER_OP("neg", true);
PELAB_REGISTER_OP("exp", true);
PELAB_REGISTER_OP("log", true);
PELAB_REGISTER_OP("sqrt", true);
PELAB_REGISTER_OP("tanh", true);
PELAB_REGISTER_OP("sigmoid", true);
PELAB_REGISTER_OP("relu", true);
PELAB_REGISTER_OP("gelu", true);
PELAB_REGISTER_OP("clamp", true);
PELAB_REGISTER_OP("sin", true);
PELAB_REGISTER_OP("cos", true);
PELAB_REGISTER_OP("eq", false);
PELAB_REGISTER_OP("ne", false);
PELAB_REGISTER_OP("lt", false);
PELAB_REGISTER_OP("gt", false);
PELAB_REGISTER_OP("where", true);
PELAB_REGISTER_OP("masked_fill", true);

}  // namespace pelab
