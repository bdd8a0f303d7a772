// pelab — reductions: sum / mean over any set of axes, max / argmax along one axis, the running
// sum (cumsum) and sum_to (the inverse of broadcasting, used by every broadcasting backward).
//
// Sums never transpose data: a dense input (contiguous, or a permutation of a contiguous block,
// e.g. a transposed view) is walked in memory order, and each maximal run of adjacent reduced axes
// is one backend reduce over [outer, n, inner]. Only inputs with gaps or broadcast strides are
// copied.
#include <algorithm>
#include <vector>

#include "ops/op_util.h"
#include "pelab/ops.h"
#include "pelab/registry.h"

namespace pelab {

using detail::backend_of;
using detail::check_floating;
using detail::make_output;
using detail::flat_view;
using detail::make_view;
using detail::split_at;
using Grads = std::vector<Tensor>;

namespace {

// Mask of reduced axes; an empty list reduces every axis.
std::vector<bool> axes_mask(const char* op, int64_t dim, const std::vector<int64_t>& axes) {
  std::vector<bool> m(static_cast<size_t>(dim), axes.empty());
  for (int64_t ax : axes) {
    const int64_t a = normalize_axis(ax, dim, op);
    PELAB_CHECK(!m[a], op, ": axis ", ax, " appears twice in the axes list");
    m[a] = true;
  }
  return m;
}

Shape keep_shape_of(const Shape& s, const std::vector<bool>& mask) {
  Shape k = s;
  for (size_t i = 0; i < k.size(); ++i)
    if (mask[i]) k[i] = 1;
  return k;
}

// View of `t` without the masked (size-1) axes.
Tensor drop_axes(const Tensor& t, const std::vector<bool>& mask) {
  Shape sh, st;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) continue;
    sh.push_back(t.shape()[i]);
    st.push_back(t.strides()[i]);
  }
  return make_view(t, sh, st, t.offset());
}

// If `t` covers a gap-free block with positive strides, fills `order` with its axes of size > 1
// from the largest stride to the smallest and returns true.
bool dense_order(const Tensor& t, std::vector<int64_t>& order) {
  order.clear();
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.shape()[i] != 1) order.push_back(i);
  const Shape& st = t.strides();
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return st[x] > st[y]; });
  int64_t expect = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (st[*it] != expect) return false;
    expect *= t.shape()[*it];
  }
  return true;
}

Tensor sum_keepdim_raw(const Tensor& a, const std::vector<bool>& mask) {
  const Shape& sh = a.shape();
  const Shape out_shape = keep_shape_of(sh, mask);
  if (a.numel() == 0 || shape_numel(out_shape) == 0)
    return Tensor::zeros(out_shape, a.dtype(), a.device());
  Backend& be = backend_of(a);

  Tensor x = a;
  std::vector<int64_t> order;
  if (!dense_order(a, order)) {
    NoGradGuard ng;
    x = a.contiguous();
    dense_order(x, order);
  }
  std::vector<int64_t> sizes, dims;  // remaining axes of the buffer, in memory order
  std::vector<bool> red;
  for (int64_t d : order) {
    sizes.push_back(sh[d]);
    dims.push_back(d);
    red.push_back(mask[d]);
  }
  Tensor buf = x;
  bool fresh = x.impl()->storage != a.impl()->storage;
  // Reduce each run of adjacent reduced axes, last run first (each pass shrinks the data).
  for (int64_t j = static_cast<int64_t>(sizes.size()) - 1; j >= 0;) {
    if (!red[j]) {
      --j;
      continue;
    }
    int64_t i = j;
    while (i > 0 && red[i - 1]) --i;
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t k = 0; k < i; ++k) outer *= sizes[k];
    for (int64_t k = i; k <= j; ++k) n *= sizes[k];
    for (int64_t k = j + 1; k < static_cast<int64_t>(sizes.size()); ++k) inner *= sizes[k];
    Tensor out = make_output({outer, inner}, a.dtype(), a.device());
    be.reduce(ReduceOp::Sum, view_of(out), nullptr,
              flat_view(buf.raw_data(), a.dtype(), {outer, n, inner}), outer, n, inner);
    buf = out;
    fresh = true;
    sizes.erase(sizes.begin() + i, sizes.begin() + j + 1);
    dims.erase(dims.begin() + i, dims.begin() + j + 1);
    red.erase(red.begin() + i, red.begin() + j + 1);
    j = i - 1;
  }
  if (!fresh) {  // nothing to sum (reduced axes all of size 1): copy, never alias the input
    Tensor out = make_output({x.numel()}, a.dtype(), a.device());
    be.copy(view_of(out), flat_view(buf.raw_data(), a.dtype(), {x.numel()}));
    buf = out;
  }
  // Lay the remaining (memory-ordered) axes out in logical order.
  Shape strides(sh.size(), 1);
  int64_t s = 1;
  for (int64_t k = static_cast<int64_t>(dims.size()) - 1; k >= 0; --k) {
    strides[dims[k]] = s;
    s *= sizes[k];
  }
  return make_view(buf, out_shape, strides, buf.offset());
}

struct MaxResult {
  Tensor values, index;  // keepdim shape
  int64_t outer = 1, n = 1, inner = 1;
};

MaxResult max_raw(const Tensor& a, int64_t axis, const char* op) {
  check_floating(op, a);
  const int64_t d = normalize_axis(axis, a.dim(), op);
  const Shape& sh = a.shape();
  MaxResult r;
  r.n = sh[d];
  PELAB_CHECK(r.n > 0, op, ": cannot reduce over axis ", axis, " of size 0 in shape ",
              shape_str(sh));
  split_at(sh, d, r.outer, r.inner);
  Shape ks = sh;
  ks[d] = 1;
  r.values = make_output(ks, a.dtype(), a.device());
  r.index = make_output(ks, DType::Int64, a.device());
  if (r.outer * r.inner == 0) return r;
  Tensor x = a;
  if (!x.is_contiguous()) {
    NoGradGuard ng;
    x = a.contiguous();
  }
  backend_of(a).reduce(ReduceOp::Max, flat_view(r.values.raw_data(), a.dtype(), {r.outer, r.inner}),
                       r.index.raw_data(),
                       flat_view(x.raw_data(), a.dtype(), {r.outer, r.n, r.inner}), r.outer, r.n,
                       r.inner);
  return r;
}

std::vector<bool> one_axis_mask(int64_t dim, int64_t axis, const char* op) {
  std::vector<bool> m(static_cast<size_t>(dim), false);
  m[normalize_axis(axis, dim, op)] = true;
  return m;
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& axes, bool keepdim) {
  check_floating("sum", a);
  const std::vector<bool> mask = axes_mask("sum", a.dim(), axes);
  Tensor out = sum_keepdim_raw(a, mask);
  if (!keepdim) out = drop_axes(out, mask);
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape(), ks = keep_shape_of(sa, mask);
  return record("sum", {a}, out,
                [sa, ks](const Tensor& g) -> Grads { return {expand(reshape(g, ks), sa)}; });
}

Tensor sum(const Tensor& a) { return sum(a, {}, false); }

Tensor mean(const Tensor& a, const std::vector<int64_t>& axes, bool keepdim) {
  check_floating("mean", a);
  const std::vector<bool> mask = axes_mask("mean", a.dim(), axes);
  int64_t count = 1;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (mask[i]) count *= a.shape()[i];
  const double scale = 1.0 / static_cast<double>(count);
  Tensor out = sum_keepdim_raw(a, mask);
  if (out.numel() > 0) {
    const View v = view_of(out);  // a fresh buffer: scale in place
    backend_of(a).unary(UnaryOp::MulScalar, v, v, scale);
  }
  if (!keepdim) out = drop_axes(out, mask);
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape(), ks = keep_shape_of(sa, mask);
  return record("mean", {a}, out, [sa, ks, scale](const Tensor& g) -> Grads {
    return {expand(reshape(mul_scalar(g, scale), ks), sa)};
  });
}

Tensor mean(const Tensor& a) { return mean(a, {}, false); }

Tensor max(const Tensor& a, int64_t axis, bool keepdim) {
  MaxResult r = max_raw(a, axis, "max");
  Tensor out = keepdim ? r.values : drop_axes(r.values, one_axis_mask(a.dim(), axis, "max"));
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape();
  const Tensor index = r.index;
  const int64_t outer = r.outer, n = r.n, inner = r.inner;
  return record("max", {a}, out, [=](const Tensor& g) -> Grads {
    const Tensor gc = g.contiguous();
    Tensor acc = Tensor::zeros(sa, g.dtype(), g.device());
    if (acc.numel() > 0)
      backend_of(g).scatter_add(flat_view(acc.raw_data(), g.dtype(), {outer, n, inner}),
                                flat_view(gc.raw_data(), g.dtype(), {outer, 1, inner}),
                                flat_view(index.raw_data(), DType::Int64, {outer, 1, inner}), outer,
                                n, 1, inner);
    return {acc};
  });
}

Tensor argmax(const Tensor& a, int64_t axis, bool keepdim) {
  MaxResult r = max_raw(a, axis, "argmax");
  return keepdim ? r.index : drop_axes(r.index, one_axis_mask(a.dim(), axis, "argmax"));
}

Tensor cumsum(const Tensor& a, int64_t axis, bool reverse) {
  check_floating("cumsum", a);
  PELAB_CHECK(a.dim() >= 1, "cumsum: input must have at least one dim, got a scalar");
  const int64_t d = normalize_axis(axis, a.dim(), "cumsum");
  const Shape& sh = a.shape();
  int64_t outer, inner;
  split_at(sh, d, outer, inner);
  const int64_t n = sh[d];
  Tensor out = make_output(sh, a.dtype(), a.device());
  if (out.numel() > 0) {
    const Tensor x = detail::contig(a);
    backend_of(a).cumsum(flat_view(out, {outer, n, inner}), flat_view(x, {outer, n, inner}), outer,
                         n, inner, reverse);
  }
  if (!needs_grad({a})) return out;
  return record("cumsum", {a}, out,
                [d, reverse](const Tensor& g) -> Grads { return {cumsum(g, d, !reverse)}; });
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  check_floating("sum_to", a);
  if (a.shape() == shape) return a;
  const Shape& sh = a.shape();
  PELAB_CHECK(static_cast<int64_t>(shape.size()) <= a.dim(), "sum_to: cannot sum ", shape_str(sh),
              " down to ", shape_str(shape));
  const size_t lead = sh.size() - shape.size();
  std::vector<bool> mask(sh.size(), false);
  for (size_t i = 0; i < sh.size(); ++i) {
    if (i < lead) {
      mask[i] = true;
      continue;
    }
    const int64_t t = shape[i - lead];
    PELAB_CHECK(t == sh[i] || t == 1, "sum_to: cannot sum ", shape_str(sh), " down to ",
                shape_str(shape));
    mask[i] = t != sh[i];
  }
  const Tensor r = sum_keepdim_raw(a, mask);
  Tensor out =
      make_view(r, shape, Shape(r.strides().begin() + lead, r.strides().end()), r.offset());
  if (!needs_grad({a})) return out;
  return record("sum_to", {a}, out,
                [sa = sh](const Tensor& g) -> Grads { return {expand(g, sa)}; });
}

PELAB_REGISTER_OP("sum", true);
PELAB_REGISTER_OP("mean", true);
PELAB_REGISTER_OP("max", true);
PELAB_REGISTER_OP("argmax", false);
PELAB_REGISTER_OP("sum_to", true);
PELAB_REGISTER_OP("cumsum", true);

}  // namespace pelab
