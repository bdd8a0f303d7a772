// pelab — small helpers shared by the op implementations (framework/src/ops/*.cpp): argument
// checks that name the op, output allocation, untracked views onto an existing storage, backend
// views of contiguous data, and the outer/inner split of a shape around one axis.
#pragma once
#include <memory>
#include <utility>

#include "pelab/autograd.h"
#include "pelab/backend.h"
#include "pelab/tensor.h"

namespace pelab::detail {

inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  PELAB_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

inline void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  PELAB_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.str());
}

// Same dtype and device (both defined).
inline void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  PELAB_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.str(), " vs ", b.str());
  PELAB_CHECK(a.device() == b.device(), op, ": device mismatch: ", a.str(), " vs ", b.str());
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  PELAB_CHECK(a.device() == b.device(), op, ": device mismatch: ", a.str(), " vs ", b.str());
}

// A floating argument `what` of `op` (defined, float32/float64).
inline void check_float_arg(const char* op, const Tensor& t, const char* what) {
  PELAB_CHECK(t.defined(), op, ": ", what, " is undefined");
  PELAB_CHECK(is_floating(t.dtype()), op, ": ", what, " must be float32/float64, got ",
              dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

inline Tensor make_output(const Shape& shape, DType dtype, Device device) {
  return Tensor::empty(shape, dtype, device);
}

// A new (untracked) tensor sharing `base`'s storage with the given layout.
inline Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// An untracked handle onto t's storage with t's geometry.
inline Tensor plain(const Tensor& t) { return make_view(t, t.shape(), t.strides(), t.offset()); }

// An untracked contiguous copy of t, or an untracked handle when t is already row-major.
inline Tensor contig(const Tensor& t) {
  if (t.is_contiguous()) return plain(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  if (out.numel() > 0) backend_for(t.device()).copy(view_of(out), view_of(t));
  return out;
}

// Contiguous data seen by a backend kernel with the given shape.
inline View flat_view(void* data, DType dtype, const Shape& shape) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  v.strides = contiguous_strides(shape);
  return v;
}
// A contiguous tensor's data seen with another (same-numel) shape.
inline View flat_view(const Tensor& t, const Shape& shape) {
  return flat_view(t.raw_data(), t.dtype(), shape);
}

// outer = product of the sizes before axis d, inner = product of those after it.
inline void split_at(const Shape& s, int64_t d, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[i];
  for (int64_t i = d + 1; i < static_cast<int64_t>(s.size()); ++i) inner *= s[i];
}

// A detached handle for saving an op's own output in its backward closure (capturing the output
// itself would make a reference cycle output -> node -> closure -> output).
inline Tensor save_output(const Tensor& out) { return out.detach(); }

}  // namespace pelab::detail
