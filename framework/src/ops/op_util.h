// pelab — small helpers shared by the op implementations (framework/src/ops/*.cpp): argument
// checks that name the op, output allocation, untracked views onto an existing storage.
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

// A detached handle for saving an op's own output in its backward closure (capturing the output
// itself would make a reference cycle output -> node -> closure -> output).
inline Tensor save_output(const Tensor& out) { return out.detach(); }

}  // namespace pelab::detail
