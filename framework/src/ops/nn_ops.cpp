// pelab — fused nn ops on top of the backend's fused kernels: softmax / log_softmax along any
// axis, cross-entropy with ignore_index and label smoothing, layer norm over the last axis, and
// inverted dropout with a counter-based mask, the pairwise rotation of the last axis by per-row
// angles, and fused scaled-dot-product attention; each with its backward pass.
#include <atomic>
#include <memory>
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
using detail::plain;
using detail::split_at;

PELAB_REGISTER_OP("softmax", true);
PELAB_REGISTER_OP("log_softmax", true);
PELAB_REGISTER_OP("cross_entropy", true);
PELAB_REGISTER_OP("layer_norm", true);
PELAB_REGISTER_OP("dropout", true);
PELAB_REGISTER_OP("rotate_pairs", true);
PELAB_REGISTER_OP("scaled_dot_attention", true);

namespace {

View null_view(DType dt, int64_t n) {
  View v;
  v.data = nullptr;
  v.dtype = dt;
  v.shape = {n};
  v.strides = {1};
  return v;
}

Tensor softmax_impl(const char* op, const Tensor& a, int64_t axis, bool log) {
  check_float_arg(op, a, "input");
  const Shape shape = a.shape();
  const int64_t rank = a.dim();
  int64_t outer = 1, n = 1, inner = 1;
  if (rank > 0) {
    const int64_t ax = normalize_axis(axis, rank, op);
    split_at(shape, ax, outer, inner);
    n = shape[ax];
  } else {
    normalize_axis(axis, 1, op);  // a scalar behaves as [1]
  }
  const DType dt = a.dtype();
  const Device dev = a.device();
  Tensor x = contig(a);
  Tensor y = Tensor::empty(shape, dt, dev);
  if (y.numel() > 0) backend_for(dev).softmax(view_of(y), view_of(x), outer, n, inner, log);
  const Tensor ys = plain(y);
  return record(op, {a}, y, [=](const Tensor& g) -> std::vector<Tensor> {
    Tensor gc = contig(g);
    Tensor gi = Tensor::empty(shape, dt, dev);
    if (gi.numel() > 0)
      backend_for(dev).softmax_backward(view_of(gi), view_of(gc), view_of(ys), outer, n, inner,
                                        log);
    return {gi};
  });
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t axis) { return softmax_impl("softmax", a, axis, false); }
Tensor log_softmax(const Tensor& a, int64_t axis) {
  return softmax_impl("log_softmax", a, axis, true);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double label_smoothing) {
  check_float_arg("cross_entropy", logits, "logits");
  PELAB_CHECK(logits.dim() >= 1, "cross_entropy: logits must be [..., C], got a scalar");
  PELAB_CHECK(targets.defined(), "cross_entropy: targets are undefined");
  PELAB_CHECK(targets.dtype() == DType::Int64, "cross_entropy: targets must be int64, got ",
              dtype_name(targets.dtype()), " ", shape_str(targets.shape()));
  PELAB_CHECK(targets.device() == logits.device(), "cross_entropy: logits on ",
              logits.device().str(), " but targets on ", targets.device().str());
  const Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  PELAB_CHECK(targets.shape() == rows_shape, "cross_entropy: targets ", shape_str(targets.shape()),
              " do not match logits ", shape_str(logits.shape()), " (expected targets ",
              shape_str(rows_shape), ")");
  PELAB_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t C = logits.size(-1);
  const int64_t rows = shape_numel(rows_shape);
  PELAB_CHECK(C > 0 || rows == 0, "cross_entropy: logits ", shape_str(logits.shape()),
              " have no classes");
  const DType dt = logits.dtype();
  const Device dev = logits.device();
  Backend& be = backend_for(dev);

  Tensor x = contig(logits), t = contig(targets);
  // The mean's divisor (the targets that are not ignore_index) is counted, and the targets
  // checked, by the kernel on the logits' device: nothing is read back to the host.
  Tensor lse = Tensor::empty({rows}, dt, dev);
  Tensor loss = Tensor::empty({}, dt, dev);
  Tensor count = Tensor::empty({1}, DType::Float64, dev);
  if (rows == 0) {  // (C may be 0 then)
    be.fill(view_of(loss), 0.0);
    be.fill(view_of(count), 0.0);
  } else {
    Tensor loss_rows = Tensor::empty({rows}, dt, dev);
    be.cross_entropy(view_of(loss), view_of(count), view_of(loss_rows), view_of(lse),
                     flat_view(x, {rows, C}), flat_view(t, {rows}), rows, C, ignore_index,
                     label_smoothing);
  }
  const Shape lshape = logits.shape();
  return record("cross_entropy", {logits}, loss, [=](const Tensor& g) -> std::vector<Tensor> {
    Tensor gl = Tensor::empty(lshape, dt, dev);
    if (gl.numel() == 0) return {gl};
    const Tensor gc = contig(g);
    backend_for(dev).cross_entropy_backward(flat_view(gl, {rows, C}), flat_view(x, {rows, C}),
                                            view_of(lse), flat_view(t, {rows}), rows, C,
                                            ignore_index, label_smoothing, flat_view(gc, {1}),
                                            view_of(count));
    return {gl};
  });
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_float_arg("layer_norm", x, "input");
  PELAB_CHECK(x.dim() >= 1, "layer_norm: input must have at least one dim, got a scalar");
  const int64_t n = x.size(-1);
  PELAB_CHECK(n > 0, "layer_norm: normalized axis of ", shape_str(x.shape()), " is empty");
  PELAB_CHECK(eps >= 0.0, "layer_norm: eps must be >= 0, got ", eps);
  const DType dt = x.dtype();
  const Device dev = x.device();
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* what = p == &weight ? "weight" : "bias";
    PELAB_CHECK(p->dtype() == dt && p->device() == dev, "layer_norm: ", what, " ",
                dtype_name(p->dtype()), " on ", p->device().str(), " does not match input ",
                dtype_name(dt), " on ", dev.str());
    PELAB_CHECK(p->shape() == Shape{n}, "layer_norm: ", what, " ", shape_str(p->shape()),
                " does not match input ", shape_str(x.shape()), " (expected [", n, "])");
  }
  const int64_t rows = x.numel() / n;
  const bool has_w = weight.defined(), has_b = bias.defined();
  Tensor xc = contig(x);
  Tensor wc = has_w ? contig(weight) : Tensor();
  Tensor bc = has_b ? contig(bias) : Tensor();
  Tensor y = Tensor::empty(x.shape(), dt, dev);
  Tensor mean = Tensor::empty({rows}, dt, dev);
  Tensor rstd = Tensor::empty({rows}, dt, dev);
  if (rows > 0) {
    backend_for(dev).layer_norm(view_of(y), view_of(mean), view_of(rstd), flat_view(xc, {rows, n}),
                                has_w ? view_of(wc) : null_view(dt, n),
                                has_b ? view_of(bc) : null_view(dt, n), rows, n, eps);
  }
  Tensor inputs[3] = {x};  // x, then weight and bias where given; no heap vector
  size_t n_inputs = 1;
  if (has_w) inputs[n_inputs++] = weight;
  if (has_b) inputs[n_inputs++] = bias;
  const bool need_w = has_w && weight.requires_grad(), need_b = has_b && bias.requires_grad();
  const Shape xshape = x.shape();
  return record("layer_norm", inputs, n_inputs, y, [=](const Tensor& g) -> std::vector<Tensor> {
    Backend& be = backend_for(dev);
    Tensor gc = contig(g);
    Tensor gx = Tensor::empty(xshape, dt, dev);
    Tensor gw = need_w ? Tensor::empty({n}, dt, dev) : Tensor();
    Tensor gb = need_b ? Tensor::empty({n}, dt, dev) : Tensor();
    if (rows > 0) {
      be.layer_norm_backward(flat_view(gx, {rows, n}), need_w ? view_of(gw) : null_view(dt, n),
                             need_b ? view_of(gb) : null_view(dt, n), flat_view(gc, {rows, n}),
                             flat_view(xc, {rows, n}), view_of(mean), view_of(rstd),
                             has_w ? view_of(wc) : null_view(dt, n), rows, n);
    } else {
      if (need_w) be.fill(view_of(gw), 0.0);
      if (need_b) be.fill(view_of(gb), 0.0);
    }
    std::vector<Tensor> grads{gx};
    if (has_w) grads.push_back(gw);
    if (has_b) grads.push_back(gb);
    return grads;
  });
}

Tensor rotate_pairs(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  const char* op = "rotate_pairs";
  check_float_arg(op, x, "input");
  check_float_arg(op, cos, "cos");
  check_float_arg(op, sin, "sin");
  PELAB_CHECK(x.dim() >= 2, op, ": input must be [..., L, D], got ", shape_str(x.shape()));
  const int64_t L = x.size(-2), D = x.size(-1);
  PELAB_CHECK(cos.dim() == 2 && cos.shape() == sin.shape() && cos.size(0) == L &&
                  cos.size(1) >= 1 && 2 * cos.size(1) <= D,
              op, ": cos ", shape_str(cos.shape()), " and sin ", shape_str(sin.shape()),
              " must both be [", L, ", P] with 1 <= P <= ", D / 2, " for input ",
              shape_str(x.shape()));
  const DType dt = x.dtype();
  const Device dev = x.device();
  for (const Tensor* t : {&cos, &sin}) {
    PELAB_CHECK(t->dtype() == dt && t->device() == dev, op, ": ", t == &cos ? "cos" : "sin", " ",
                dtype_name(t->dtype()), " on ", t->device().str(), " does not match input ",
                dtype_name(dt), " on ", dev.str());
  }
  const int64_t P = cos.size(1);
  int64_t outer = 1;
  for (int64_t d = 0; d + 2 < x.dim(); ++d) outer *= x.size(d);
  Tensor xc = contig(x), cc = contig(cos), sc = contig(sin);
  Tensor y = Tensor::empty(x.shape(), dt, dev);
  if (y.numel() > 0)
    backend_for(dev).rotate_pairs(flat_view(y, {outer, L, D}), flat_view(xc, {outer, L, D}),
                                  view_of(cc), view_of(sc), outer, L, D, P, interleaved, false);
  const bool need_x = x.requires_grad(), need_cs = cos.requires_grad() || sin.requires_grad();
  const Shape xshape = x.shape();
  const Tensor xsaved = need_cs ? xc : Tensor();  // the input is kept only for the angle gradients
  return record(op, {x, cos, sin}, y, [=](const Tensor& g) -> std::vector<Tensor> {
    std::vector<Tensor> grads(3);
    Tensor gc = contig(g);
    if (need_x) {  // the transpose: rotate back by the same angles
      Tensor gx = Tensor::empty(xshape, dt, dev);
      if (gx.numel() > 0)
        backend_for(dev).rotate_pairs(flat_view(gx, {outer, L, D}), flat_view(gc, {outer, L, D}),
                                      view_of(cc), view_of(sc), outer, L, D, P, interleaved, true);
      grads[0] = gx;
    }
    if (need_cs) {  // d/dcos = ga xa + gb xb, d/dsin = gb xa - ga xb, summed over the leading dims
      const Tensor g3 = reshape(gc, {outer, L, D}), x3 = reshape(xsaved, {outer, L, D});
      auto member = [&](const Tensor& t, int64_t m) {
        return interleaved ? slice(t, 2, m, 2 * P, 2) : slice(t, 2, m * P, (m + 1) * P);
      };
      const Tensor ga = member(g3, 0), gb = member(g3, 1), xa = member(x3, 0), xb = member(x3, 1);
      grads[1] = sum(add(mul(ga, xa), mul(gb, xb)), {0});
      grads[2] = sum(sub(mul(gb, xa), mul(ga, xb)), {0});
    }
    return grads;
  });
}

namespace {
std::atomic<int64_t> g_attention_keep_bytes{int64_t(32) << 20};
}  // namespace

namespace {
std::atomic<bool> g_fused_attention{true};
}  // namespace

bool set_fused_attention(bool use) { return g_fused_attention.exchange(use); }

int64_t set_attention_keep_limit(int64_t bytes) {
  PELAB_CHECK(bytes >= 0, "set_attention_keep_limit: bytes must be >= 0, got ", bytes);
  return g_attention_keep_bytes.exchange(bytes);
}

int64_t attention_keep_limit() { return g_attention_keep_bytes.load(std::memory_order_relaxed); }

namespace {
void check_table(const char* op, const Tensor& table, const char* what) {
  check_float_arg(op, table, what);
  PELAB_CHECK(table.dim() == 2 || table.dim() == 3, op, ": ", what, " table must be [R, dh] or ",
              "[H, R, dh], got ", shape_str(table.shape()));
}
// index as a [B, H, Lq, Lk] gather index of x [B, H, Lq, R] (stride 0 over batch and heads)
Tensor expanded_index(const Tensor& index, const Tensor& x) {
  PELAB_CHECK(index.defined() && index.dim() == 2 && x.dim() == 4 && index.size(0) == x.size(2),
              "relative_keys: index ", index.defined() ? shape_str(index.shape()) : "undefined",
              " must be [Lq, Lk] for queries ", shape_str(x.shape()));
  return expand(reshape(index, {1, 1, index.size(0), index.size(1)}),
                {x.size(0), x.size(1), index.size(0), index.size(1)});
}
}  // namespace

Tensor relative_keys(const Tensor& q, const Tensor& index, const Tensor& table, double scale) {
  check_table("relative_keys", table, "keys");
  PELAB_CHECK(q.defined() && q.dim() == 4, "relative_keys: expected q [B, H, Lq, dh], got ",
              q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  // [B,H,Lq,dh] @ [(H,) dh, R] -> [B,H,Lq,R], scaled in the GEMM; then looked up by the index
  const Tensor qr = matmul(q, transpose(table, -1, -2), scale);
  return gather(qr, 3, expanded_index(index, qr));
}

Tensor relative_values(const Tensor& probs, const Tensor& index, const Tensor& table) {
  check_table("relative_values", table, "values");
  PELAB_CHECK(probs.defined() && probs.dim() == 4,
              "relative_values: expected probs [B, H, Lq, Lk], got ",
              probs.defined() ? shape_str(probs.shape()) : std::string("undefined"));
  return matmul(bin_sum(probs, index, table.size(-2)), table);  // [B,H,Lq,R] @ [(H,) R, dh]
}

Tensor scaled_dot_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                            const Tensor& blocked, double scale, double masked_value,
                            const Tensor& rel_index, const Tensor& rel_keys,
                            const Tensor& rel_values) {
  const char* op = "scaled_dot_attention";
  check_float_arg(op, q, "q");
  check_float_arg(op, k, "k");
  check_float_arg(op, v, "v");
  PELAB_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && q.size(0) == k.size(0) &&
                  q.size(1) == k.size(1) && q.size(3) == k.size(3),
              op, ": expected q [B, H, Lq, dh] and k = v [B, H, Lk, dh], got q ",
              shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const DType dt = q.dtype();
  const Device dev = q.device();
  for (const Tensor* t : {&k, &v, &bias, &blocked, &rel_index, &rel_keys, &rel_values})
    PELAB_CHECK(!t->defined() || t->device() == dev, op, ": input on ", t->device().str(),
                " does not match q on ", dev.str());
  for (const Tensor* t : {&k, &v, &bias, &rel_keys, &rel_values})
    PELAB_CHECK(!t->defined() || t->dtype() == dt, op, ": input ", dtype_name(t->dtype()), " ",
                shape_str(t->shape()), " does not match q's ", dtype_name(dt));
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), dh = q.size(3);
  const Shape scores = {B, H, Lq, Lk};
  for (const Tensor* t : {&bias, &blocked})  // broadcast_shapes throws naming both shapes
    PELAB_CHECK(!t->defined() || broadcast_shapes(t->shape(), scores, op) == scores, op, ": ",
                t == &bias ? "bias " : "mask ", shape_str(t->shape()),
                " does not broadcast to the scores ", shape_str(scores));
  const bool rel = rel_keys.defined() || rel_values.defined();
  PELAB_CHECK(rel == rel_index.defined(), op,
              ": a relative index needs a table and a table needs the index");
  int64_t R = 0;
  if (rel) {
    PELAB_CHECK(rel_index.dtype() == DType::Int64 && rel_index.shape() == (Shape{Lq, Lk}), op,
                ": relative index ", dtype_name(rel_index.dtype()), " ",
                shape_str(rel_index.shape()), " must be int64 [", Lq, ", ", Lk, "]");
    for (const Tensor* t : {&rel_keys, &rel_values}) {
      if (!t->defined()) continue;
      const Shape& ts = t->shape();
      PELAB_CHECK((ts.size() == 2 || (ts.size() == 3 && ts[0] == H)) && ts.back() == dh &&
                      ts[ts.size() - 2] >= 1 && (R == 0 || ts[ts.size() - 2] == R),
                  op, ": relative ", t == &rel_keys ? "keys" : "values", " table ", shape_str(ts),
                  " must be [R, ", dh, "] or [", H, ", R, ", dh, "] (one R for both tables)");
      R = ts[ts.size() - 2];
    }
  }
  Backend& be = backend_for(dev);
  if (!be.has_fused_attention() || !g_fused_attention.load() || Lq == 0 || Lk == 0 ||
      dh == 0) {  // the same math, composed
    Tensor s = matmul(q, transpose(k, 2, 3), scale);
    if (rel_keys.defined()) s = add(s, relative_keys(q, rel_index, rel_keys, scale));
    if (bias.defined()) s = add(s, bias);
    if (blocked.defined()) s = masked_fill(s, blocked, masked_value);
    const Tensor p = softmax(s, -1);
    Tensor out = matmul(p, v);
    return rel_values.defined() ? add(out, relative_values(p, rel_index, rel_values)) : out;
  }
  // q, k, v as the kernel reads them: any [B, H, L, dh] view with unit stride along dh (multi-head
  // attention's permuted projections need no copy); only other strides are copied.
  auto rows4 = [](const Tensor& t) {
    return t.size(3) <= 1 || t.strides()[3] == 1 ? plain(t) : contig(t);
  };
  // A new [B, H, L, dh] tensor in the layout of x: token-major ([B, L, H, dh] memory, what the
  // caller's permute back to [B, L, H, dh] and its reshape to [B, L, H·dh] read without a copy)
  // when x's heads are interleaved within a token's row or x is the output, else contiguous.
  auto like = [=](const Tensor& x, bool token_major) {
    const int64_t L = x.size(2);
    if (!token_major && !(x.strides()[1] < x.strides()[2])) return Tensor::empty(x.shape(), dt, dev);
    const Tensor buf = Tensor::empty({B, L, H, dh}, dt, dev);
    return make_view(buf, x.shape(), {L * H * dh, dh, H * dh, 1}, 0);
  };
  const Tensor qc = rows4(q), kc = rows4(k), vc = rows4(v);
  const Tensor bc = bias.defined() ? contig(bias) : Tensor();
  const Tensor mc = !blocked.defined()        ? Tensor()
                    : blocked.dtype() == dt   ? contig(blocked)
                                              : contig(blocked.detach().to(dt));
  const Tensor ic = rel ? contig(rel_index) : Tensor();
  auto table3 = [&](const Tensor& t) {  // [Hr, R, dh], Hr = 1 for a table shared by the heads
    return t.defined() ? reshape(contig(t), {t.dim() == 3 ? H : 1, R, dh}) : Tensor();
  };
  const Tensor rkc = table3(rel_keys), rvc = table3(rel_values);
  Tensor out = like(q, true);
  Tensor stats = Tensor::empty({B * H, Lq, 2}, dt, dev);  // row max and log-sum-exp
  // Keeping the probabilities for the backward beats recomputing them (0.75x the fwd+bwd time at
  // L = 128-1024 on the benchmark machine) while they fit the budget; past it memory stays O(L).
  const bool keep = needs_grad({q, k, v, bias, rel_keys, rel_values}) &&
                    B * H * Lq * Lk * static_cast<int64_t>(dtype_size(dt)) <=
                        g_attention_keep_bytes.load(std::memory_order_relaxed);
  Tensor probs = keep ? Tensor::empty(scores, dt, dev) : Tensor();
  // The backend's views of the operands (bias and mask [B, H, Lq, Lk] with stride 0 on broadcast
  // axes); rebuilt in the backward from the tensors the closure keeps alive.
  auto args = [=]() {
    AttentionArgs a;
    a.q = view_of(qc);
    a.k = view_of(kc);
    a.v = view_of(vc);
    a.out = view_of(out);
    a.stats = view_of(stats);
    a.probs.dtype = a.bias.dtype = a.mask.dtype = a.rel_keys.dtype = a.rel_values.dtype = dt;
    a.rel_index.dtype = DType::Int64;
    if (keep) a.probs = view_of(probs);
    if (bc.defined()) a.bias = view_broadcast(bc, scores);
    if (mc.defined()) a.mask = view_broadcast(mc, scores);
    if (rel) a.rel_index = view_of(ic);
    if (rkc.defined()) a.rel_keys = view_of(rkc);
    if (rvc.defined()) a.rel_values = view_of(rvc);
    a.B = B;
    a.H = H;
    a.scale = scale;
    a.masked = masked_value;
    return a;
  };
  be.attention(args());
  const bool bias_grad = bias.defined() && bias.requires_grad();
  const bool keys_grad = rel_keys.defined() && rel_keys.requires_grad();
  const bool values_grad = rel_values.defined() && rel_values.requires_grad();
  const Shape bias_shape = bc.defined() ? bc.shape() : Shape{},
              keys_shape = rel_keys.defined() ? rel_keys.shape() : Shape{},
              values_shape = rel_values.defined() ? rel_values.shape() : Shape{};
  Tensor result = plain(out);
  return record(op, {q, k, v, bias, rel_keys, rel_values}, result,
                [=](const Tensor& g) -> std::vector<Tensor> {
    const Tensor gc = rows4(g);
    Tensor gq = like(qc, false), gk = like(kc, false), gv = like(vc, false);
    // dL/dx over the whole [B, H, Lq, Lk] only when the bias needs it; the tables' per-head shares
    Tensor gs = bias_grad ? Tensor::empty(scores, dt, dev) : Tensor();
    Tensor grk = keys_grad ? Tensor::empty({B, H, R, dh}, dt, dev) : Tensor();
    Tensor grv = values_grad ? Tensor::empty({B, H, R, dh}, dt, dev) : Tensor();
    AttentionGrads grads;
    grads.q = view_of(gq);
    grads.k = view_of(gk);
    grads.v = view_of(gv);
    grads.scores.dtype = grads.rel_keys.dtype = grads.rel_values.dtype = dt;
    if (bias_grad) grads.scores = view_of(gs);
    if (keys_grad) grads.rel_keys = flat_view(grk, {B * H, R, dh});
    if (values_grad) grads.rel_values = flat_view(grv, {B * H, R, dh});
    backend_for(dev).attention_backward(args(), view_of(gc), grads);
    return {gq, gk, gv, bias_grad ? sum_to(gs, bias_shape) : Tensor(),
            keys_grad ? sum_to(grk, keys_shape) : Tensor(),
            values_grad ? sum_to(grv, values_shape) : Tensor()};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_float_arg("dropout", x, "input");
  PELAB_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p, " for input ",
              shape_str(x.shape()));
  if (!training || p == 0.0) return x;
  const DType dt = x.dtype();
  const Device dev = x.device();
  Backend& be = backend_for(dev);
  const int64_t numel = x.numel();
  Tensor mask = Tensor::empty(x.shape(), dt, dev);
  const uint64_t offset = gen.take(static_cast<uint64_t>(numel));
  Tensor out = Tensor::empty(x.shape(), dt, dev);
  if (numel > 0) {
    be.dropout_mask(view_of(mask), p, gen.seed(), offset);
    be.binary(BinaryOp::Mul, view_of(out), view_of(x), view_of(mask));
  }
  return record("dropout", {x}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    Tensor gi = Tensor::empty(mask.shape(), dt, dev);
    if (gi.numel() > 0)
      backend_for(dev).binary(BinaryOp::Mul, view_of(gi), view_of(g), view_of(mask));
    return {gi};
  });
}

}  // namespace pelab
