// pelab — indexing ops: index_select, gather (torch.gather semantics), gather_lerp (gather at
// fractional positions), bin_sum and embedding, with scatter-add backward passes. Index values
// are validated on the host so a bad id fails with a clear pelab::Error naming the op, the id and
// the shapes (the kernels check as well); gather_lerp's positions are checked by its kernels.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "pelab/autograd.h"
#include "pelab/backend.h"
#include "pelab/ops.h"
#include "pelab/registry.h"
#include "ops/op_util.h"

namespace pelab {

using detail::check_float_arg;
using detail::contig;
using detail::flat_view;
using detail::make_view;
using detail::split_at;

PELAB_REGISTER_OP("index_select", true);
PELAB_REGISTER_OP("gather", true);
PELAB_REGISTER_OP("embedding", true);
PELAB_REGISTER_OP("bin_sum", true);
PELAB_REGISTER_OP("gather_lerp", true);

namespace {

void check_index(const char* op, const Tensor& idx, const Tensor& a, const char* what) {
  PELAB_CHECK(idx.defined(), op, ": ", what, " is undefined");
  PELAB_CHECK(idx.dtype() == DType::Int64, op, ": ", what, " must be int64, got ",
              dtype_name(idx.dtype()), " ", shape_str(idx.shape()));
  PELAB_CHECK(idx.device() == a.device(), op, ": ", what, " on ", idx.device().str(),
              " but input on ", a.device().str());
}

// Runs an index kernel of op `op`. The kernels check every index on the device that holds it
// (nothing is read back to the host): the CPU throws at once, a GPU reports a bad index at its
// next synchronisation. An error gets `op` in front and context() after it.
template <class F, class C>
void run_index_kernel(const char* op, F&& kernel, C&& context) {
  try {
    kernel();
  } catch (const Error& e) {
    fail(op, ": ", e.what(), " (", context(), ")");
  }
}

}  // namespace

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  check_float_arg("index_select", a, "input");
  check_index("index_select", index, a, "index");
  PELAB_CHECK(a.dim() >= 1, "index_select: input must have at least one dim, got a scalar");
  PELAB_CHECK(index.dim() == 1, "index_select: index must be 1-D, got ", shape_str(index.shape()));
  const int64_t d = normalize_axis(dim, a.dim(), "index_select");
  const DType dt = a.dtype();
  const Device dev = a.device();
  const Shape ashape = a.shape();
  const int64_t n_in = ashape[d], n_idx = index.size(0);
  int64_t outer, inner;
  split_at(ashape, d, outer, inner);
  Tensor ic = contig(index);
  Tensor ac = contig(a);
  Shape out_shape = ashape;
  out_shape[d] = n_idx;
  Tensor out = Tensor::empty(out_shape, dt, dev);
  if (out.numel() > 0) {
    backend_for(dev).index_select(view_of(out), view_of(ac), view_of(ic), outer, n_in, n_idx,
                                  inner);
  }
  return record("index_select", {a}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Tensor acc = Tensor::zeros(ashape, dt, dev);
    Tensor gc = contig(g);
    if (gc.numel() > 0) {
      backend_for(dev).index_add(view_of(acc), view_of(gc), view_of(ic), outer, n_in, n_idx, inner);
    }
    return {acc};
  });
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_float_arg("gather", a, "input");
  check_index("gather", index, a, "index");
  PELAB_CHECK(a.dim() >= 1, "gather: input must have at least one dim, got a scalar");
  PELAB_CHECK(index.dim() == a.dim(), "gather: index ", shape_str(index.shape()),
              " must have the same rank as input ", shape_str(a.shape()));
  const int64_t d = normalize_axis(dim, a.dim(), "gather");
  const Shape ashape = a.shape();
  for (int64_t k = 0; k < a.dim(); ++k) {
    PELAB_CHECK(k == d || index.size(k) <= ashape[k], "gather: index ", shape_str(index.shape()),
                " is larger than input ", shape_str(ashape), " at dim ", k);
  }
  const DType dt = a.dtype();
  const Device dev = a.device();
  // The part of `a` the index can reach: index sizes except along `dim`.
  Shape sub = index.shape();
  sub[d] = ashape[d];
  Tensor as = contig(make_view(a, sub, a.strides(), a.offset()));
  const int64_t n_in = sub[d], n_idx = index.size(d);
  int64_t outer, inner;
  split_at(sub, d, outer, inner);
  // An index expanded (stride 0) over its leading dims is one block repeated over them: it is
  // neither materialised nor read back (the kernels check its range); the kernels take the block
  // as it is (Backend::gather: slice o uses block o mod P).
  int64_t lead = 0, reps = 1;
  while (lead < d && (index.size(lead) == 1 || index.strides()[lead] == 0))
    reps *= index.size(lead++);
  const bool shared = reps > 1;
  Tensor ic;
  if (shared) {
    Shape one = index.shape();
    for (int64_t k = 0; k < lead; ++k) one[k] = 1;
    ic = contig(make_view(index, one, index.strides(), index.offset()));
  } else {
    ic = contig(index);
  }
  const View iv = flat_view(ic, {ic.numel()});
  Tensor out = Tensor::empty(index.shape(), dt, dev);
  if (out.numel() > 0)
    backend_for(dev).gather(view_of(out), view_of(as), iv, outer, n_in, n_idx, inner);
  return record("gather", {a}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Backend& be = backend_for(dev);
    Tensor acc = Tensor::zeros(sub, dt, dev);
    Tensor gc = contig(g);
    const View iv = flat_view(ic, {ic.numel()});  // keeps `ic` alive
    if (gc.numel() > 0) be.scatter_add(view_of(acc), view_of(gc), iv, outer, n_in, n_idx, inner);
    if (sub == ashape) return {acc};
    // Place the reachable window into a zero gradient of the full input shape.
    Tensor full = Tensor::zeros(ashape, dt, dev);
    if (acc.numel() > 0) {
      View win = view_of(full);
      win.shape = sub;
      be.copy(win, view_of(acc));
    }
    return {full};
  });
}

Tensor gather_lerp(const Tensor& a, int64_t dim, const Tensor& pos) {
  const char* op = "gather_lerp";
  check_float_arg(op, a, "input");
  check_float_arg(op, pos, "positions");
  PELAB_CHECK(pos.dtype() == a.dtype() && pos.device() == a.device(), op, ": positions ",
              pos.str(), " must have the dtype and device of the input ", a.str());
  PELAB_CHECK(a.dim() >= 1, op, ": input must have at least one dim, got a scalar");
  PELAB_CHECK(pos.dim() == a.dim(), op, ": positions ", shape_str(pos.shape()),
              " must have the same rank as input ", shape_str(a.shape()));
  const int64_t d = normalize_axis(dim, a.dim(), op);
  const Shape ashape = a.shape(), pshape = pos.shape();
  for (int64_t k = 0; k < a.dim(); ++k) {
    PELAB_CHECK(k == d || pshape[k] <= ashape[k], op, ": positions ", shape_str(pshape),
                " are larger than input ", shape_str(ashape), " at dim ", k);
  }
  const DType dt = a.dtype();
  const Device dev = a.device();
  // The part of `a` the positions can reach: their sizes except along `dim` (as for gather).
  Shape sub = pshape;
  sub[d] = ashape[d];
  const Tensor as = contig(make_view(a, sub, a.strides(), a.offset()));
  const Tensor pc = contig(pos);
  const int64_t n_in = sub[d], n_idx = pshape[d];
  int64_t outer, inner;
  split_at(sub, d, outer, inner);
  Tensor out = Tensor::empty(pshape, dt, dev);
  if (out.numel() > 0)
    backend_for(dev).gather_lerp(view_of(out), view_of(as), view_of(pc), outer, n_in, n_idx, inner);
  if (!needs_grad({a, pos})) return out;
  const bool ra = a.requires_grad(), rp = pos.requires_grad();
  return record(op, {a, pos}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Backend& be = backend_for(dev);
    // The kernel overwrites both gradients (when there is anything to compute).
    const bool run = g.numel() > 0;
    const auto buffer = [&](const Shape& s) {
      return run ? Tensor::empty(s, dt, dev) : Tensor::zeros(s, dt, dev);
    };
    Tensor ga = ra ? buffer(sub) : Tensor();
    Tensor gp = rp ? buffer(pshape) : Tensor();
    if (run) {
      const Tensor gc = contig(g);
      be.gather_lerp_backward(ra ? view_of(ga) : View(), rp ? view_of(gp) : View(), view_of(gc),
                              view_of(as), view_of(pc), outer, n_in, n_idx, inner);
    }
    if (!ra || sub == ashape) return {ga, gp};
    // Place the reachable window into a zero gradient of the full input shape.
    Tensor full = Tensor::zeros(ashape, dt, dev);
    if (ga.numel() > 0) {
      View win = view_of(full);
      win.shape = sub;
      be.copy(win, view_of(ga));
    }
    return {full, gp};
  });
}

Tensor bin_sum(const Tensor& x, const Tensor& index, int64_t bins) {
  const char* op = "bin_sum";
  check_float_arg(op, x, "input");
  check_index(op, index, x, "index");
  PELAB_CHECK(x.dim() >= 2 && index.dim() == 2 && index.size(0) == x.size(-2) &&
                  index.size(1) == x.size(-1),
              op, ": index ", shape_str(index.shape()), " must be the last two dims of input ",
              shape_str(x.shape()));
  PELAB_CHECK(bins >= 1, op, ": bins must be >= 1, got ", bins);
  const DType dt = x.dtype();
  const Device dev = x.device();
  const Shape xshape = x.shape();
  const int64_t Lq = index.size(0), Lk = index.size(1), rows = x.numel() / std::max<int64_t>(Lk, 1);
  Shape out_shape = xshape;
  out_shape.back() = bins;
  Tensor out = Tensor::zeros(out_shape, dt, dev);
  const Tensor ic = contig(index);
  if (x.numel() > 0) {
    // one scatter-add over every [.., i] row; the [Lq, Lk] index is one block per query row,
    // repeated over the leading dims (never replicated; the kernel checks its range)
    const Tensor xc = contig(x);
    backend_for(dev).scatter_add(flat_view(out, {rows, bins}), flat_view(xc, {rows, Lk}),
                                 flat_view(ic, {Lq * Lk}), rows, bins, Lk, 1);
  }
  return record(op, {x}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Shape ishape(xshape.size(), 1);
    ishape[ishape.size() - 2] = Lq;
    ishape[ishape.size() - 1] = Lk;
    return {gather(g, -1, expand(reshape(ic, ishape), xshape))};
  });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_float_arg("embedding", weight, "weight");
  check_index("embedding", ids, weight, "ids");
  PELAB_CHECK(weight.dim() == 2, "embedding: weight must be [num, dim], got ",
              shape_str(weight.shape()));
  const int64_t V = weight.size(0), D = weight.size(1), N = ids.numel();
  const DType dt = weight.dtype();
  const Device dev = weight.device();
  Tensor ic = contig(ids);
  Tensor wc = contig(weight);
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, dt, dev);
  if (out.numel() > 0) {
    run_index_kernel(
        "embedding",
        [&] {
          backend_for(dev).index_select(flat_view(out, {1, N, D}), flat_view(wc, {1, V, D}),
                                        flat_view(ic, {N}), 1, V, N, D);
        },
        [&] { return "ids " + shape_str(ids.shape()) + " for weight " + shape_str(weight.shape()); });
  }
  return record("embedding", {weight}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Tensor acc = Tensor::zeros({V, D}, dt, dev);
    Tensor gc = contig(g);
    if (gc.numel() > 0) {
      backend_for(dev).index_add(flat_view(acc, {1, V, D}), flat_view(gc, {1, N, D}),
                                 flat_view(ic, {N}), 1, V, N, D);
    }
    return {acc};
  });
}

}  // namespace pelab
