// pelab — Tensor handle, Storage, factories, copies and conversions.
#include "pelab/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "pelab/autograd.h"
#include "pelab/backend.h"

namespace pelab {

// ---------------- shape helpers ----------------
Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    PELAB_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    PELAB_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(shape),
                " has more than 2^63 elements");
  }
  return n;
}

int64_t normalize_axis(int64_t axis, int64_t dim, const char* op) {
  const int64_t a = axis < 0 ? axis + dim : axis;
  PELAB_CHECK(a >= 0 && a < dim, op, ": axis ", axis, " is out of range for a tensor of rank ", dim);
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    PELAB_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------- storage ----------------
static size_t alloc_size(size_t nbytes) { return std::max<size_t>(nbytes, 64); }

Storage::Storage(size_t n, Device dev) : nbytes(n), device(dev) {
  data = backend_for(dev).allocate(alloc_size(n));
}

Storage::~Storage() {
  if (data) backend_for(device).deallocate(data, alloc_size(nbytes));
}

// ---------------- factories ----------------
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    PELAB_CHECK(d >= 0, "empty: negative dimension in shape ", shape_str(shape));
  int64_t nbytes = 0;
  PELAB_CHECK(!__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)),
                                      &nbytes),
              "empty: shape ", shape_str(shape), " needs more than 2^63 bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  backend_for(device).fill(view_of(t), value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

template <class T, class S>
static Tensor from_host_values(const std::vector<S>& values, const Shape& shape, DType dtype,
                               Device device) {
  std::vector<T> buf(values.begin(), values.end());
  Tensor t = Tensor::empty(shape, dtype, device);
  backend_for(device).copy_from_host(t.raw_data(), buf.data(), buf.size() * sizeof(T));
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           Device device) {
  PELAB_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
              values.size(), " values do not fill shape ", shape_str(shape));
  return PELAB_DISPATCH_ALL(dtype, "from_vector", [&](auto tag) {
    using T = decltype(tag);
    return from_host_values<T>(values, shape, dtype, device);
  });
}

Tensor Tensor::from_ints(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  PELAB_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_ints: ",
              values.size(), " values do not fill shape ", shape_str(shape));
  return from_host_values<int64_t>(values, shape, DType::Int64, device);
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return from_vector(v, {n}, dtype, device);
}

// ---------------- metadata ----------------
void Tensor::check_defined(const char* what) const {
  PELAB_CHECK(impl_ != nullptr, what, ": the tensor is undefined");
}
const Shape& Tensor::shape() const { check_defined("shape"); return impl_->shape; }
const Shape& Tensor::strides() const { check_defined("strides"); return impl_->strides; }
int64_t Tensor::offset() const { check_defined("offset"); return impl_->offset; }
int64_t Tensor::size(int64_t d) const { return shape()[normalize_axis(d, dim(), "size")]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const { check_defined("dtype"); return impl_->dtype; }
Device Tensor::device() const { check_defined("device"); return impl_->storage->device; }

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sh.size()) - 1; i >= 0; --i) {
    if (sh[i] != 1 && st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!impl_) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype()) << ", " << shape_str(shape()) << ", " << device().str()
     << ")";
  return os.str();
}

void* Tensor::raw_data() const {
  check_defined("data");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * dtype_size(impl_->dtype);
}

// ---------------- copies ----------------
Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype(), device());
  backend_for(device()).copy(view_of(out), view_of(*this));
  return record("contiguous", {*this}, out, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape(), dtype(), device());
  backend_for(device()).copy(view_of(out), view_of(*this));
  return record("clone", {*this}, out, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::to(DType dt) const {
  check_defined("to");
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, device());
  backend_for(device()).copy(view_of(out), view_of(*this));
  if (!is_floating(dt) || !is_floating(dtype())) return out;
  const DType src = dtype();
  return record("to_dtype", {*this}, out, [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
}

// Copies between devices through host memory (contiguous source).
static void cross_device_copy(const Tensor& dst_contig, const Tensor& src) {
  Tensor s = src.contiguous();
  const size_t nbytes = static_cast<size_t>(s.numel()) * dtype_size(s.dtype());
  if (nbytes == 0) return;
  if (dst_contig.device().is_cpu()) {
    backend_for(s.device()).copy_to_host(dst_contig.raw_data(), s.raw_data(), nbytes);
  } else if (s.device().is_cpu()) {
    backend_for(dst_contig.device()).copy_from_host(dst_contig.raw_data(), s.raw_data(), nbytes);
  } else {
    std::vector<char> host(nbytes);
    backend_for(s.device()).copy_to_host(host.data(), s.raw_data(), nbytes);
    backend_for(dst_contig.device()).copy_from_host(dst_contig.raw_data(), host.data(), nbytes);
  }
}

Tensor Tensor::to(Device dev) const {
  check_defined("to");
  if (dev == device()) return *this;
  Tensor out = empty(shape(), dtype(), dev);
  {
    NoGradGuard ng;
    cross_device_copy(out, *this);
  }
  const Device src = device();
  return record("to_device", {*this}, out, [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

// The tensor's values in host memory, read through its backend's copy_to_host on every device (on
// the CPU a copy in memory), so a read counts as one (BackendCounts::reads) wherever it happens.
template <class Out>
static std::vector<Out> host_values(const Tensor& t) {
  NoGradGuard ng;
  const Tensor c = t.contiguous();
  const int64_t n = c.numel();
  std::vector<Out> out(static_cast<size_t>(n));
  if (n == 0) return out;
  PELAB_DISPATCH_ALL(c.dtype(), "to_vector", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> host(static_cast<size_t>(n));
    backend_for(c.device()).copy_to_host(host.data(), c.raw_data(), static_cast<size_t>(n) * sizeof(T));
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(host[i]);
  });
  return out;
}

std::vector<double> Tensor::to_vector() const {
  check_defined("to_vector");
  return host_values<double>(*this);
}

std::vector<int64_t> Tensor::to_int_vector() const {
  check_defined("to_int_vector");
  return host_values<int64_t>(*this);
}

double Tensor::item() const {
  check_defined("item");
  PELAB_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape()), " has ", numel(),
              " elements, expected 1");
  return to_vector()[0];
}

// ---------------- in-place ----------------
static void check_inplace(const Tensor& t, const char* op) {
  PELAB_CHECK(!(t.requires_grad() && grad_enabled()), op, ": in-place update of a tensor that ",
              "requires grad while grad mode is on (wrap it in NoGradGuard)");
}

Tensor& Tensor::fill_(double value) {
  check_defined("fill_");
  check_inplace(*this, "fill_");
  backend_for(device()).fill(view_of(*this), value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_");
  check_inplace(*this, "copy_");
  PELAB_CHECK(src.shape() == shape(), "copy_: source shape ", shape_str(src.shape()),
              " differs from destination shape ", shape_str(shape()));
  if (src.device() == device()) {
    backend_for(device()).copy(view_of(*this), view_of(src));
  } else {
    NoGradGuard ng;
    Tensor staged = empty(shape(), src.dtype(), device());
    cross_device_copy(staged, src);
    backend_for(device()).copy(view_of(*this), view_of(staged));
  }
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_defined("add_");
  check_inplace(*this, "add_");
  PELAB_CHECK(is_contiguous(), "add_: destination must be contiguous, got strides ",
              shape_str(strides()));
  PELAB_CHECK(other.dtype() == dtype() && other.device() == device(), "add_: ", str(), " += ",
              other.str(), ": dtype/device differ");
  backend_for(device()).axpy(view_of(*this), view_broadcast(other, shape()), alpha);
  return *this;
}

Tensor& Tensor::mul_(double s) {
  check_defined("mul_");
  check_inplace(*this, "mul_");
  PELAB_CHECK(is_contiguous(), "mul_: tensor must be contiguous");
  View v = view_of(*this);
  backend_for(device()).unary(UnaryOp::MulScalar, v, v, s);
  return *this;
}

// ---------------- autograd accessors ----------------
bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool r) {
  check_defined("set_requires_grad");
  PELAB_CHECK(!r || is_floating(dtype()), "set_requires_grad: only floating tensors can require ",
              "grad, got ", dtype_name(dtype()));
  PELAB_CHECK(is_leaf() || r, "set_requires_grad: cannot turn off requires_grad of a non-leaf tensor");
  impl_->requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const { return impl_ && !impl_->grad_fn; }

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad ? Tensor(impl_->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  if (g.defined())
    PELAB_CHECK(g.shape() == shape(), "set_grad: gradient shape ", shape_str(g.shape()),
                " differs from tensor shape ", shape_str(shape()));
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  check_defined("zero_grad");
  impl_->grad.reset();
}

std::shared_ptr<Node> Tensor::grad_fn() const { return impl_ ? impl_->grad_fn : nullptr; }

void Tensor::backward(const Tensor& grad_output) const {
  check_defined("backward");
  PELAB_CHECK(requires_grad(), "backward: the tensor does not require grad (no graph was recorded)");
  Tensor g = grad_output;
  if (!g.defined()) {
    PELAB_CHECK(numel() == 1, "backward: gradient can be implicitly created only for a single-element",
                " tensor, got shape ", shape_str(shape()));
    g = Tensor::ones(shape(), dtype(), device());
  }
  PELAB_CHECK(g.shape() == shape(), "backward: gradient shape ", shape_str(g.shape()),
              " differs from tensor shape ", shape_str(shape()));
  run_backward(*this, g);
}

}  // namespace pelab
