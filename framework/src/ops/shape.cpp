// pelab — shape ops. reshape / permute / transpose / slice / expand / unsqueeze / squeeze return
// views that share the input's storage (reshape copies only when the strides make a view
// impossible); concat and stack copy each input once into the output through strided views.
#include <algorithm>
#include <vector>

#include "ops/op_util.h"
#include "pelab/ops.h"
#include "pelab/registry.h"

namespace pelab {

using detail::backend_of;
using detail::make_output;
using detail::make_view;
using Grads = std::vector<Tensor>;

namespace {

// Resolves one -1 in `shape` for `numel` elements.
Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      PELAB_CHECK(infer < 0, "reshape: more than one -1 in shape ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      PELAB_CHECK(out[i] >= 0, "reshape: invalid dimension in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    PELAB_CHECK(known > 0 && numel % known == 0, "reshape: cannot reshape ", shape_str(from),
                " to ", shape_str(shape));
    out[infer] = numel / known;
  }
  PELAB_CHECK(shape_numel(out) == numel, "reshape: cannot reshape ", shape_str(from), " (", numel,
              " elements) to ", shape_str(shape));
  return out;
}

// Strides that let `new_shape` view a tensor of (old_shape, old_strides), or false (PyTorch's rule:
// each run of dims that is contiguous in memory may be split or merged freely).
bool view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape,
                  Shape& new_strides) {
  new_strides.assign(new_shape.size(), 1);
  if (old_shape.empty() || shape_numel(old_shape) == 0) {
    new_strides = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// Window [start, start + len) of `t` along dim d, as a View for kernels.
View dim_window(const Tensor& t, int64_t d, int64_t start, int64_t len) {
  View v = view_of(t);
  v.data = static_cast<char*>(v.data) + start * t.strides()[d] * dtype_size(t.dtype());
  v.shape[d] = len;
  return v;
}

// View of t[..., i, ...] along d (the axis removed).
Tensor select_view(const Tensor& t, int64_t d, int64_t i) {
  Shape sh = t.shape(), st = t.strides();
  const int64_t off = t.offset() + i * st[d];
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return make_view(t, sh, st, off);
}

}  // namespace

Tensor reshape(const Tensor& a, const Shape& shape) {
  detail::check_defined("reshape", a);
  const Shape ns = infer_shape(shape, a.numel(), a.shape());
  Shape st;
  Tensor out;
  if (view_strides(a.shape(), a.strides(), ns, st)) {
    out = make_view(a, ns, st, a.offset());
  } else {
    Tensor c;
    {
      NoGradGuard ng;
      c = a.contiguous();
    }
    out = make_view(c, ns, contiguous_strides(ns), c.offset());
  }
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape();
  return record("reshape", {a}, out, [sa](const Tensor& g) -> Grads { return {reshape(g, sa)}; });
}

// permute on n dims; the work lists are Shapes (inline), so a permute costs no heap block for them,
// nor does its backward closure.
static Tensor permute_dims(const Tensor& a, const int64_t* dims, size_t n) {
  detail::check_defined("permute", a);
  const int64_t r = a.dim();
  PELAB_CHECK(static_cast<int64_t>(n) == r, "permute: ", n,
              " dims given for a tensor of shape ", shape_str(a.shape()));
  Shape p(n), inv(n, -1);
  Shape sh(n), st(n);
  for (int64_t i = 0; i < r; ++i) {
    p[i] = normalize_axis(dims[i], r, "permute");
    PELAB_CHECK(inv[p[i]] < 0, "permute: dims ", shape_str(dims, n), " are not a permutation");
    inv[p[i]] = i;
    sh[i] = a.shape()[p[i]];
    st[i] = a.strides()[p[i]];
  }
  Tensor out = make_view(a, sh, st, a.offset());
  if (!needs_grad({a})) return out;
  return record("permute", {a}, out, [inv](const Tensor& g) -> Grads {
    return {permute_dims(g, inv.data(), inv.size())};
  });
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  return permute_dims(a, dims.data(), dims.size());
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  detail::check_defined("transpose", a);
  const int64_t x = normalize_axis(d0, a.dim(), "transpose");
  const int64_t y = normalize_axis(d1, a.dim(), "transpose");
  Shape sh = a.shape(), st = a.strides();
  std::swap(sh[x], sh[y]);
  std::swap(st[x], st[y]);
  Tensor out = make_view(a, sh, st, a.offset());
  if (!needs_grad({a})) return out;
  return record("transpose", {a}, out,
                [x, y](const Tensor& g) -> Grads { return {transpose(g, x, y)}; });
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", a);
  const int64_t d = normalize_axis(dim, a.dim(), "slice");
  PELAB_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = a.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  const int64_t len = (end - start + step - 1) / step;
  Shape sh = a.shape(), st = a.strides();
  sh[d] = len;
  st[d] *= step;
  Tensor out = make_view(a, sh, st, a.offset() + start * a.strides()[d]);
  if (!needs_grad({a})) return out;
  const Shape sa = a.shape();
  return record("slice", {a}, out, [=](const Tensor& g) -> Grads {
    Tensor z = Tensor::zeros(sa, g.dtype(), g.device());
    if (g.numel() > 0) {
      Shape zst = z.strides();
      const int64_t off = start * zst[d];
      zst[d] *= step;
      backend_of(g).copy(view_of(make_view(z, g.shape(), zst, off)), view_of(g));
    }
    return {z};
  });
}

Tensor expand(const Tensor& a, const Shape& shape) {
  detail::check_defined("expand", a);
  const Shape& s = a.shape();
  PELAB_CHECK(shape.size() >= s.size(), "expand: cannot expand ", shape_str(s), " to ",
              shape_str(shape));
  const size_t lead = shape.size() - s.size();
  Shape sh(shape.size()), st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      PELAB_CHECK(shape[i] >= 0, "expand: cannot expand ", shape_str(s), " to ", shape_str(shape));
      sh[i] = shape[i];
      continue;
    }
    const int64_t have = s[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    PELAB_CHECK(want == have || have == 1, "expand: cannot expand ", shape_str(s), " to ",
                shape_str(shape));
    sh[i] = want;
    st[i] = want == have ? a.strides()[i - lead] : 0;
  }
  Tensor out = make_view(a, sh, st, a.offset());
  if (!needs_grad({a})) return out;
  return record("expand", {a}, out, [s](const Tensor& g) -> Grads { return {sum_to(g, s)}; });
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  detail::check_defined("unsqueeze", a);
  const int64_t r = a.dim();
  const int64_t d = dim < 0 ? dim + r + 1 : dim;
  PELAB_CHECK(d >= 0 && d <= r, "unsqueeze: dim ", dim, " is out of range for a tensor of shape ",
              shape_str(a.shape()));
  Shape sh = a.shape(), st = a.strides();
  const int64_t stride = d < r ? st[d] * sh[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  Tensor out = make_view(a, sh, st, a.offset());
  if (!needs_grad({a})) return out;
  return record("unsqueeze", {a}, out, [d](const Tensor& g) -> Grads { return {squeeze(g, d)}; });
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  detail::check_defined("squeeze", a);
  const int64_t d = normalize_axis(dim, a.dim(), "squeeze");
  PELAB_CHECK(a.shape()[d] == 1, "squeeze: dim ", dim, " of shape ", shape_str(a.shape()),
              " has size ", a.shape()[d], ", expected 1");
  Shape sh = a.shape(), st = a.strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(a, sh, st, a.offset());
  if (!needs_grad({a})) return out;
  return record("squeeze", {a}, out, [d](const Tensor& g) -> Grads { return {unsqueeze(g, d)}; });
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  PELAB_CHECK(!xs.empty(), "concat: no tensors given");
  const Tensor& x0 = xs[0];
  detail::check_defined("concat", x0);
  PELAB_CHECK(x0.dim() > 0, "concat: cannot concatenate 0-d tensors");
  const int64_t d = normalize_axis(dim, x0.dim(), "concat");
  Shape sh = x0.shape();
  sh[d] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    detail::check_same("concat", x0, x);
    bool ok = x.dim() == x0.dim();
    for (int64_t i = 0; ok && i < x.dim(); ++i) ok = i == d || x.shape()[i] == x0.shape()[i];
    PELAB_CHECK(ok, "concat: shapes ", shape_str(x0.shape()), " and ", shape_str(x.shape()),
                " differ outside dim ", dim);
    sizes.push_back(x.shape()[d]);
    sh[d] += x.shape()[d];
  }
  Tensor out = make_output(sh, x0.dtype(), x0.device());
  Backend& be = backend_of(x0);
  int64_t off = 0;
  for (const Tensor& x : xs) {
    if (x.numel() > 0) be.copy(dim_window(out, d, off, x.shape()[d]), view_of(x));
    off += x.shape()[d];
  }
  if (!needs_grad(xs)) return out;
  std::vector<bool> req;
  for (const Tensor& x : xs) req.push_back(x.requires_grad());
  return record("concat", xs, out, [sizes, req, d](const Tensor& g) -> Grads {
    Grads gs;
    int64_t o = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      gs.push_back(req[i] ? slice(g, d, o, o + sizes[i]) : Tensor());
      o += sizes[i];
    }
    return gs;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  PELAB_CHECK(!xs.empty(), "stack: no tensors given");
  const Tensor& x0 = xs[0];
  detail::check_defined("stack", x0);
  const int64_t r = x0.dim();
  const int64_t d = dim < 0 ? dim + r + 1 : dim;
  PELAB_CHECK(d >= 0 && d <= r, "stack: dim ", dim, " is out of range for tensors of shape ",
              shape_str(x0.shape()));
  for (const Tensor& x : xs) {
    detail::check_same("stack", x0, x);
    PELAB_CHECK(x.shape() == x0.shape(), "stack: shapes differ: ", shape_str(x0.shape()), " vs ",
                shape_str(x.shape()));
  }
  Shape sh = x0.shape();
  sh.insert(sh.begin() + d, static_cast<int64_t>(xs.size()));
  Tensor out = make_output(sh, x0.dtype(), x0.device());
  Backend& be = backend_of(x0);
  if (x0.numel() > 0)
    for (size_t i = 0; i < xs.size(); ++i)
      be.copy(view_of(select_view(out, d, static_cast<int64_t>(i))), view_of(xs[i]));
  if (!needs_grad(xs)) return out;
  std::vector<bool> req;
  for (const Tensor& x : xs) req.push_back(x.requires_grad());
  return record("stack", xs, out, [req, d](const Tensor& g) -> Grads {
    Grads gs;
    for (size_t i = 0; i < req.size(); ++i)
      gs.push_back(req[i] ? select_view(g, d, static_cast<int64_t>(i)) : Tensor());
    return gs;
  });
}

PELAB_REGISTER_OP("reshape", true);
PELAB_REGISTER_OP("permute", true);
PELAB_REGISTER_OP("transpose", true);
PELAB_REGISTER_OP("slice", true);
PELAB_REGISTER_OP("expand", true);
PELAB_REGISTER_OP("unsqueeze", true);
PELAB_REGISTER_OP("squeeze", true);
PELAB_REGISTER_OP("concat", true);
PELAB_REGISTER_OP("stack", true);

}  // namespace pelab
