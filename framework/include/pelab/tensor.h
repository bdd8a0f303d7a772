// pelab — the Tensor handle. A Tensor is a cheap, shared handle to a TensorImpl: a strided view
// (shape, strides, element offset) onto a reference-counted, 64-byte-aligned Storage that lives on
// one device. Views (reshape, permute, slice, expand) share storage; contiguous() copies only when the
// strides are not row-major.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pelab/dtype.h"
#include "pelab/error.h"
#include "pelab/small_vector.h"

namespace pelab {

// Shapes and strides: inline up to 6 dims, so a tensor or view costs no heap block for them.
using Shape = SmallVector<int64_t, 6>;
inline std::string shape_str(const Shape& shape) { return shape_str(shape.data(), shape.size()); }

struct Node;  // autograd graph node (autograd.h)

// Raw device memory. Freed through the owning backend's (caching) allocator.
struct Storage {
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient (leaves)
  std::shared_ptr<Node> grad_fn;     // producer node (non-leaves)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (never tracked by autograd) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
                     Device device = Device::cpu());
  // values are row-major; size must equal the product of shape
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape,
                          Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor arange(int64_t n, DType dtype = DType::Float32, Device device = Device::cpu());

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  std::string str() const;  // "Tensor(float32, [2, 3], cpu)"

  // ---- data access (CPU only for the pointer accessors) ----
  void* raw_data() const;  // pointer to element 0 of this view on its device
  template <class T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  double item() const;                       // single element, any device
  std::vector<double> to_vector() const;     // row-major copy to host, as doubles
  std::vector<int64_t> to_int_vector() const;

  // ---- copies and conversions (not tracked unless noted) ----
  Tensor contiguous() const;    // tracked: gradient flows through
  Tensor clone() const;         // tracked: always a fresh contiguous copy
  Tensor to(DType dtype) const; // tracked for float<->float
  Tensor to(Device device) const;  // tracked
  Tensor detach() const;        // shares storage, no grad_fn, requires_grad false

  // ---- in-place (never tracked; throw if the tensor needs grad and grad mode is on) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // same shape; converts dtype/device
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other (broadcast other)
  Tensor& mul_(double s);

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r);
  bool is_leaf() const;
  Tensor grad() const;             // undefined Tensor if none
  void set_grad(const Tensor& g);  // replaces the accumulated gradient (undefined clears it)
  void zero_grad();                // drops the gradient
  std::shared_ptr<Node> grad_fn() const;
  // Reverse-mode from this tensor. With no argument the tensor must hold one element (seed 1).
  void backward(const Tensor& grad_output = Tensor()) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Row-major strides for a shape.
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Normalises a possibly negative axis for a tensor of rank `dim`; throws naming `op`.
int64_t normalize_axis(int64_t axis, int64_t dim, const char* op);
// Broadcast two shapes (numpy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace pelab
