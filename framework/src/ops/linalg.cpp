// pelab — linear algebra ops: matmul (broadcast batch dims, transposed views passed to BLAS as
// transposes, batch dims collapsed into strided-batched GEMMs, a shared right operand folded into
// one tall GEMM) and linear (x @ W^T + b as one GEMM over all rows), with backward passes.
#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "pelab/autograd.h"
#include "pelab/backend.h"
#include "pelab/ops.h"
#include "pelab/registry.h"
#include "ops/op_util.h"

namespace pelab {

using detail::contig;
using detail::make_view;
using detail::plain;

PELAB_REGISTER_OP("matmul", true);
PELAB_REGISTER_OP("linear", true);

namespace {

// Swap the last two dims (a view).
Tensor mT(const Tensor& t) {
  Shape s = t.shape(), st = t.strides();
  const size_t n = s.size();
  std::swap(s[n - 1], s[n - 2]);
  std::swap(st[n - 1], st[n - 2]);
  return make_view(t, s, st, t.offset());
}

// Insert / remove a unit dim (always a view whatever the strides).
Tensor unsqueeze_view(const Tensor& t, int64_t pos) {
  Shape s = t.shape(), st = t.strides();
  s.insert(s.begin() + pos, 1);
  st.insert(st.begin() + pos, 1);
  return make_view(t, s, st, t.offset());
}
Tensor squeeze_view(const Tensor& t, int64_t pos) {
  Shape s = t.shape(), st = t.strides();
  s.erase(s.begin() + pos);
  st.erase(st.begin() + pos);
  return make_view(t, s, st, t.offset());
}

// A logical 2-D matrix inside some storage: element (i, j) at ptr + (i * sr + j * sc) elements.
struct Mat {
  char* ptr;
  int64_t rows, cols, sr, sc;
  Mat t() const { return {ptr, cols, rows, sc, sr}; }
};

// How BLAS sees a matrix: stored row-major with leading dimension ld, possibly transposed.
struct Blas {
  bool trans;
  int64_t ld;
};

// Can (rows, cols, sr, sc) be handed to a row-major GEMM without a copy? Strides of unit dims are
// irrelevant, so they never block a layout.
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, Blas& out) {
  const int64_t need_n = std::max<int64_t>(cols, 1), need_t = std::max<int64_t>(rows, 1);
  if (cols == 1 || sc == 1) {
    const int64_t ld = rows == 1 ? need_n : sr;
    if (ld >= need_n) {
      out = {false, ld};
      return true;
    }
  }
  if (rows == 1 || sr == 1) {
    const int64_t ld = cols == 1 ? need_t : sc;
    if (ld >= need_t) {
      out = {true, ld};
      return true;
    }
  }
  return false;
}
bool blas_layout(const Mat& m, Blas& out) { return blas_layout(m.rows, m.cols, m.sr, m.sc, out); }

char* base_ptr(const Tensor& t) { return static_cast<char*>(view_of(t).data); }

// The last two dims of a tensor (rank >= 2) as a Mat.
Mat last2(const Tensor& t) {
  const int64_t n = t.dim();
  return {base_ptr(t), t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]};
}

// View t (rank >= 1) as [prod(shape[:-1]), shape[-1]] if its leading dims merge into one row
// stride.
bool rows_matrix(const Tensor& t, Mat& m) {
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  const int64_t n = t.dim();
  const int64_t C = s[n - 1];
  int64_t R = 1, rs = 0;
  bool have = false;
  for (int64_t d = n - 2; d >= 0; --d) {
    if (s[d] == 1) continue;
    if (!have) {
      rs = st[d];
      R = s[d];
      have = true;
    } else {
      if (st[d] != rs * R) return false;
      R *= s[d];
    }
  }
  if (!have) rs = std::max<int64_t>(C, 1);
  m = {base_ptr(t), R, C, rs, st[n - 1]};
  return true;
}

// A contiguous copy of a logical matrix; `keep` holds the buffer alive.
Mat materialize(const Mat& m, DType dt, Device dev, std::vector<Tensor>& keep) {
  Tensor tmp = Tensor::empty({m.rows, m.cols}, dt, dev);
  View in;
  in.data = m.ptr;
  in.dtype = dt;
  in.shape = {m.rows, m.cols};
  in.strides = {m.sr, m.sc};
  if (tmp.numel() > 0) backend_for(dev).copy(view_of(tmp), in);
  keep.push_back(tmp);
  return {base_ptr(tmp), m.rows, m.cols, m.cols, 1};
}

// The products with nothing to multiply: an empty C, or K = 0 (C = the bias over every row when
// given, zeros when beta = 0, else left as it is). True when the product was one of them.
bool gemm2_trivial(Backend& be, DType dt, int64_t M, int64_t N, int64_t K, void* C, int64_t ldc,
                   double beta, const void* bias) {
  if (M == 0 || N == 0) return true;
  if (K != 0) return false;
  if (bias) {
    be.gemm_bias(dt, false, false, M, N, 0, nullptr, 1, nullptr, N, bias, C,
                 std::max<int64_t>(ldc, 1));
  } else if (beta == 0.0) {
    View c;
    c.data = C;
    c.dtype = dt;
    c.shape = {M, N};
    c.strides = {ldc, 1};
    be.fill(c, 0.0);
  }
  return true;
}

// C[M, N] (row stride ldc) = alpha * A[M, K] @ B[K, N] + beta * C as the backend's GEMM sees it
// (M, N, K > 0). Operands that BLAS cannot read in place are copied first (into `keep`).
Backend::GemmItem gemm_item(DType dt, Device dev, Mat A, Mat B, void* C, int64_t ldc, double beta,
                            double alpha, std::vector<Tensor>& keep) {
  Blas la{}, lb{};
  if (!blas_layout(A, la)) {
    A = materialize(A, dt, dev, keep);
    blas_layout(A, la);
  }
  if (!blas_layout(B, lb)) {
    B = materialize(B, dt, dev, keep);
    blas_layout(B, lb);
  }
  Backend::GemmItem g;
  g.transA = la.trans;
  g.transB = lb.trans;
  g.M = A.rows;
  g.N = B.cols;
  g.K = A.cols;
  g.alpha = alpha;
  g.A = A.ptr;
  g.lda = la.ld;
  g.B = B.ptr;
  g.ldb = lb.ld;
  g.beta = beta;
  g.C = C;
  g.ldc = std::max<int64_t>(ldc, 1);
  return g;
}

// C[M, N] (row stride ldc) = alpha * A[M, K] @ B[K, N] + beta * C. Operands that BLAS cannot read
// in place are copied first.
// With `bias` (contiguous, N values): C = A B + bias over every row, alpha and beta unused
// (Backend::gemm_bias).
void gemm2(DType dt, Device dev, Mat A, Mat B, void* C, int64_t ldc, double beta,
           double alpha = 1.0, const void* bias = nullptr) {
  Backend& be = backend_for(dev);
  if (gemm2_trivial(be, dt, A.rows, B.cols, A.cols, C, ldc, beta, bias)) return;
  std::vector<Tensor> keep;
  const Backend::GemmItem g = gemm_item(dt, dev, A, B, C, ldc, beta, alpha, keep);
  if (bias)
    be.gemm_bias(dt, g.transA, g.transB, g.M, g.N, g.K, g.A, g.lda, g.B, g.ldb, bias, C, g.ldc);
  else
    be.gemm(dt, g.transA, g.transB, g.M, g.N, g.K, alpha, g.A, g.lda, 0, g.B, g.ldb, 0, beta, C,
            g.ldc, 0, 1);
}

// Independent gemm2 products (a backward's dX and dW) collected, then run as one
// Backend::gemm_group, which may run them concurrently. Each C holds its result after run().
class Gemm2Group {
 public:
  explicit Gemm2Group(DType dt, Device dev) : dt_(dt), dev_(dev) {}
  void add(Mat A, Mat B, void* C, int64_t ldc, double beta, double alpha = 1.0) {
    if (gemm2_trivial(backend_for(dev_), dt_, A.rows, B.cols, A.cols, C, ldc, beta, nullptr))
      return;
    PELAB_CHECK(n_ < items_.size(), "linalg: more than ", items_.size(), " grouped products");
    items_[n_++] = gemm_item(dt_, dev_, A, B, C, ldc, beta, alpha, keep_);
  }
  // Tensors the products read (operand copies made by the caller), kept until the group has run.
  void hold(std::vector<Tensor>& ts) {
    for (Tensor& t : ts) keep_.push_back(std::move(t));
    ts.clear();
  }
  void run() {
    if (n_ > 0) backend_for(dev_).gemm_group(dt_, items_.data(), n_);
    n_ = 0;
  }

 private:
  DType dt_;
  Device dev_;
  std::array<Backend::GemmItem, 2> items_{};
  size_t n_ = 0;
  std::vector<Tensor> keep_;  // operand copies, alive until the group has run
};

// Rows view of a contiguous copy of t (kept alive by `keep`).
Mat copy_rows(const Tensor& t, std::vector<Tensor>& keep) {
  Mat m;
  Tensor c = contig(t);
  keep.push_back(c);
  rows_matrix(c, m);
  return m;
}

// Rows view of t, copying t when its leading dims do not merge.
Mat rows_of(const Tensor& t, std::vector<Tensor>& keep) {
  Mat m;
  if (rows_matrix(t, m)) return m;
  return copy_rows(t, keep);
}

// Whether b is one matrix shared by every batch entry and a's batch rows can be made one matrix:
// either they already are one (Rows: rows_matrix, whose view lands in `rows`), or a holds no
// broadcast dim (Copy), so a contiguous copy of a costs one pass over its own elements. a's
// head-split view [B, H, L, dh] of a token-major projection is the second case: copying it
// (L·B·H rows) beats B·H small products of L rows, each packing b again, or in the backward B·H
// partial dB products and their sum.
enum class SharedB { No, Rows, Copy };
SharedB shared_b_rows(const Tensor& a, const Shape& b_batch, Mat& rows) {
  if (shape_numel(b_batch) != 1) return SharedB::No;
  if (rows_matrix(a, rows)) return SharedB::Rows;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.shape()[d] > 1 && a.strides()[d] == 0) return SharedB::No;
  return SharedB::Copy;
}

// Effective stride of batch dim d (of an nb-dim output batch) for operand x, 0 where broadcast.
int64_t batch_stride(const Tensor& x, int64_t d, int64_t nb) {
  const int64_t xb = x.dim() - 2;
  const int64_t xd = d - (nb - xb);
  if (xd < 0 || x.shape()[xd] == 1) return 0;
  return x.strides()[xd];
}

// out[batch..., M, N] = alpha * a[..., M, K] @ b[..., K, N]; both rank >= 2, K already checked;
// untracked. With `defer`, a product that is one 2-D GEMM (a shared b) is added to it instead of
// run: out holds the result once the group has run. With `a_rows`, the contiguous copy of a made
// for a shared b (SharedB::Copy) is handed back there, for the backward's dB to reuse.
Tensor matmul_impl(Tensor a, Tensor b, double alpha = 1.0, Gemm2Group* defer = nullptr,
                   Tensor* a_rows = nullptr) {
  const DType dt = a.dtype();
  const Device dev = a.device();
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape ba(a.shape().begin(), a.shape().end() - 2);
  const Shape bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, dt, dev);
  if (out.numel() == 0) return out;
  Backend& be = backend_for(dev);
  if (K == 0) {
    be.fill(view_of(out), 0.0);
    return out;
  }
  char* C = base_ptr(out);

  // b shared by every batch and a's rows form one matrix (or are copied into one, see
  // shared_b_rows): one [batch*M, K] @ [K, N] GEMM.
  Mat ar{};
  std::vector<Tensor> keep;
  const SharedB shared = shared_b_rows(a, bb, ar);
  if (shared == SharedB::Copy) {
    ar = copy_rows(a, keep);
    if (a_rows) *a_rows = keep.back();
  }
  if (shared == SharedB::Copy || (shared == SharedB::Rows && (ar.sc == 1 || K == 1))) {
    if (defer) {
      defer->add(ar, last2(b), C, N, 0.0, alpha);
      defer->hold(keep);
    } else {
      gemm2(dt, dev, ar, last2(b), C, N, 0.0, alpha);
    }
    return out;
  }

  // Operands whose last two dims BLAS cannot read in place are made contiguous.
  auto prep = [&](Tensor& x) {
    Blas l{};
    if (!blas_layout(last2(x), l)) {
      x = contig(x);
      blas_layout(last2(x), l);
    }
    return l;
  };
  const Blas la = prep(a), lb = prep(b);

  // Batch dims (unit dims dropped), merged while every operand stays one strided batch.
  struct Dim {
    int64_t size, sa, sb, sc;
  };
  const int64_t nb = static_cast<int64_t>(batch.size());
  const Shape cst = contiguous_strides(out_shape);
  std::vector<Dim> dims;
  for (int64_t d = 0; d < nb; ++d) {
    if (batch[d] == 1) continue;
    Dim cur{batch[d], batch_stride(a, d, nb), batch_stride(b, d, nb), cst[d]};
    if (!dims.empty()) {
      Dim& p = dims.back();
      if (p.sa == cur.sa * cur.size && p.sb == cur.sb * cur.size && p.sc == cur.sc * cur.size) {
        p = {p.size * cur.size, cur.sa, cur.sb, cur.sc};
        continue;
      }
    }
    dims.push_back(cur);
  }
  if (dims.empty()) dims.push_back({1, 0, 0, 0});

  const char* A = base_ptr(a);
  const char* B = base_ptr(b);
  const Dim last = dims.back();
  int64_t outer_count = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) outer_count *= dims[i].size;
  if (outer_count == 1) {
    be.gemm(dt, la.trans, lb.trans, M, N, K, alpha, A, la.ld, last.sa, B, lb.ld, last.sb, 0.0, C,
            N, last.sc, last.size);
    return out;
  }
  // The outer batch levels as offsets: one backend call (a device may run it as one launch).
  std::vector<Backend::OuterOffsets> offsets(static_cast<size_t>(outer_count));
  for (int64_t o = 0; o < outer_count; ++o) {
    int64_t rem = o;
    Backend::OuterOffsets& off = offsets[static_cast<size_t>(o)];
    for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
      const int64_t k = rem % dims[i].size;
      rem /= dims[i].size;
      off.a += k * dims[i].sa;
      off.b += k * dims[i].sb;
      off.c += k * dims[i].sc;
    }
  }
  be.gemm_outer(dt, la.trans, lb.trans, M, N, K, alpha, A, la.ld, last.sa, B, lb.ld, last.sb, 0.0,
                C, N, last.sc, last.size, offsets);
  return out;
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  PELAB_CHECK(a.defined() && b.defined(), op, ": undefined tensor argument");
  PELAB_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), op,
              ": expected matching floating dtypes, got ", dtype_name(a.dtype()), " ",
              shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
  PELAB_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.device().str(),
              " ", shape_str(a.shape()), " and ", b.device().str(), " ", shape_str(b.shape()));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, double alpha) {
  check_pair("matmul", a, b);
  PELAB_CHECK(a.dim() >= 1 && b.dim() >= 1,
              "matmul: operands must have at least one dim: ", shape_str(a.shape()), " @ ",
              shape_str(b.shape()));
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  const int64_t Ka = a.size(-1), Kb = b1 ? b.size(0) : b.size(-2);
  PELAB_CHECK(Ka == Kb, "matmul: inner dimensions differ: ", shape_str(a.shape()), " @ ",
              shape_str(b.shape()));
  // 1-D operands become [1, K] / [K, 1] views; their unit dims are dropped from the result.
  const Tensor a2 = a1 ? unsqueeze_view(a, 0) : plain(a);
  const Tensor b2 = b1 ? unsqueeze_view(b, 1) : plain(b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // The forward's contiguous copy of a head-split a (shared b), kept for dB while the graph lives
  // (the size of a) instead of copying a again in the backward.
  Tensor a_rows;
  Tensor full = matmul_impl(a2, b2, alpha, nullptr, need_b && grad_enabled() ? &a_rows : nullptr);
  Tensor out = full;
  if (b1) out = squeeze_view(out, out.dim() - 1);
  if (a1) out = squeeze_view(out, out.dim() - (b1 ? 1 : 2));
  out = plain(out);

  const Shape b_shape = b.shape();
  const DType dt = a.dtype();
  const Device dev = a.device();
  return record("matmul", {a, b}, out, [=](const Tensor& g) -> std::vector<Tensor> {
    // Back to the [batch..., M, N] geometry.
    Tensor g2 = g;
    if (a1) g2 = unsqueeze_view(g2, g2.dim() - (b1 ? 0 : 1));
    if (b1) g2 = unsqueeze_view(g2, g2.dim());
    // dA and dB, when each is one 2-D product (a shared B), run as one group.
    Gemm2Group group(dt, dev);
    Tensor ra, rb;
    bool b_rows = false;  // rb is dB itself (the shared-B product)
    if (need_a) ra = matmul_impl(g2, mT(b2), alpha, &group);  // dA = alpha g @ B^T
    if (need_b) {
      const Shape bbatch(b2.shape().begin(), b2.shape().end() - 2);
      Mat ar{}, gr{};
      const SharedB sa = shared_b_rows(a2, bbatch, ar);
      const SharedB sg = sa == SharedB::No ? SharedB::No : shared_b_rows(g2, bbatch, gr);
      if (sg != SharedB::No) {
        // Shared B: dB = A_rows^T @ g_rows summed over every batch row in one GEMM.
        std::vector<Tensor> keep;
        if (sa == SharedB::Copy) {
          if (a_rows.defined())
            rows_matrix(a_rows, ar);
          else
            ar = copy_rows(a2, keep);
        }
        if (sg == SharedB::Copy) gr = copy_rows(g2, keep);
        rb = Tensor::empty(b_shape, dt, dev);
        group.add(ar.t(), gr, base_ptr(rb), b2.size(-1), 0.0, alpha);
        group.hold(keep);
        b_rows = true;
      } else {
        rb = matmul_impl(mT(a2), g2, alpha, &group);  // dB = alpha A^T @ g
      }
    }
    group.run();
    Tensor ga, gb;
    if (need_a) {
      if (ra.shape() != a2.shape()) ra = sum_to(ra, a2.shape());
      ga = a1 ? squeeze_view(ra, 0) : ra;
    }
    if (need_b && b_rows) {
      gb = rb;
    } else if (need_b) {
      if (rb.shape() != b2.shape()) rb = sum_to(rb, b2.shape());
      gb = b1 ? squeeze_view(rb, rb.dim() - 1) : rb;
    }
    return {ga, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_pair("linear", x, weight);
  PELAB_CHECK(weight.dim() == 2, "linear: weight must be [out, in], got ",
              shape_str(weight.shape()));
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  PELAB_CHECK(x.dim() >= 1 && x.size(-1) == in_f, "linear: input ", shape_str(x.shape()),
              " does not match weight ", shape_str(weight.shape()), " (last dim must be ", in_f,
              ")");
  const bool has_bias = bias.defined();
  if (has_bias) {
    check_pair("linear", x, bias);
    PELAB_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: bias ", shape_str(bias.shape()),
                " does not match weight ", shape_str(weight.shape()));
  }
  const DType dt = x.dtype();
  const Device dev = x.device();
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, dt, dev);

  // x as [rows, in] (a copy only if its leading dims do not merge).
  std::vector<Tensor> keep;
  Tensor xs = plain(x);
  Mat xm;
  if (!rows_matrix(xs, xm)) {
    xs = contig(x);
    rows_matrix(xs, xm);
  }
  const int64_t rows = xm.rows;
  if (out.numel() > 0) {
    if (has_bias) {  // the bias is written into each thread's block of out inside the product
      const Tensor bc = bias.is_contiguous() ? Tensor() : contig(bias);  // no handle if contiguous
      gemm2(dt, dev, xm, last2(weight).t(), base_ptr(out), out_f, 1.0, 1.0,
            base_ptr(bc.defined() ? bc : bias));
    } else {
      gemm2(dt, dev, xm, last2(weight).t(), base_ptr(out), out_f, 0.0);
    }
  }

  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = has_bias && bias.requires_grad();
  const Tensor ws = plain(weight);
  const Shape x_shape = x.shape();
  const Tensor inputs[3] = {x, weight, bias};  // no heap vector
  const size_t n_inputs = has_bias ? 3 : 2;
  return record("linear", inputs, n_inputs, out, [=](const Tensor& g) -> std::vector<Tensor> {
    std::vector<Tensor> keep2;
    Mat gm = rows_of(g, keep2);  // [rows, out]
    std::vector<Tensor> grads(has_bias ? 3 : 2);
    Gemm2Group group(dt, dev);  // dX and dW: independent, one backend call
    if (need_x) {  // dX = g @ W
      Tensor gx = Tensor::empty(x_shape, dt, dev);
      group.add(gm, last2(ws), base_ptr(gx), in_f, 0.0);
      grads[0] = gx;
    }
    if (need_w) {  // dW = g^T @ x over all rows at once
      Mat xm2;
      rows_matrix(xs, xm2);
      Tensor gw = Tensor::empty({out_f, in_f}, dt, dev);
      group.add(gm.t(), xm2, base_ptr(gw), in_f, 0.0);
      grads[1] = gw;
    }
    group.run();
    if (need_b) {  // db = sum of g rows
      Tensor gb = Tensor::empty({out_f}, dt, dev);
      Backend& be = backend_for(dev);
      if (out_f > 0) {
        if (rows == 0) {
          be.fill(view_of(gb), 0.0);
        } else {
          if (!(gm.sc == 1 && (gm.sr == out_f || rows == 1))) gm = materialize(gm, dt, dev, keep2);
          View in;
          in.data = gm.ptr;
          in.dtype = dt;
          in.shape = {rows, out_f};
          in.strides = {out_f, 1};
          be.reduce(ReduceOp::Sum, view_of(gb), nullptr, in, 1, rows, out_f);
        }
      }
      grads[2] = gb;
    }
    return grads;
  });
}

}  // namespace pelab
