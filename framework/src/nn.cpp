// pelab — nn building blocks: Module (dotted parameter names, train/eval, in-place dtype/device
// conversion), ModuleList, seeded init schemes, Linear, Embedding and LayerNorm.
#include "pelab/nn.h"

#include <cmath>
#include <sstream>
#include <unordered_set>

#include "pelab/autograd.h"
#include "pelab/backend.h"

namespace pelab {

// ---------------- Module ----------------
Tensor Module::register_parameter(const std::string& name, Tensor t) {
  PELAB_CHECK(!name.empty() && name.find('.') == std::string::npos,
              "Module::register_parameter: invalid name '", name, "' (non-empty, no '.')");
  PELAB_CHECK(t.defined(), "Module::register_parameter: parameter '", name, "' is undefined");
  for (const auto& p : params_)
    PELAB_CHECK(p.first != name, "Module::register_parameter: duplicate parameter name '", name, "'");
  for (const auto& c : children_)
    PELAB_CHECK(c.first != name, "Module::register_parameter: '", name, "' is already a child module");
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  PELAB_CHECK(!name.empty() && name.find('.') == std::string::npos,
              "Module::register_module: invalid name '", name, "' (non-empty, no '.')");
  PELAB_CHECK(m != nullptr, "Module::register_module: child '", name, "' is null");
  PELAB_CHECK(m.get() != this, "Module::register_module: a module cannot be its own child ('", name,
              "')");
  for (const auto& c : children_)
    PELAB_CHECK(c.first != name, "Module::register_module: duplicate child name '", name, "'");
  for (const auto& p : params_)
    PELAB_CHECK(p.first != name, "Module::register_module: '", name, "' is already a parameter");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& p : params_) out.emplace_back(prefix + p.first, p.second);
  for (const auto& c : children_) c.second->collect(prefix + c.first + ".", out);
}

// Shared (tied) parameters are listed once, under the first name they are reached by (as in
// PyTorch), so optimizers never update one tensor twice.
std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> all;
  collect("", all);
  std::vector<NamedTensor> out;
  out.reserve(all.size());
  std::unordered_set<const TensorImpl*> seen;
  for (auto& nt : all)
    if (seen.insert(nt.second.impl()).second) out.push_back(std::move(nt));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& nt : named_parameters()) out.push_back(nt.second);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  // Depth-first pre-order; an explicit stack keeps the order equal to registration order.
  struct Item { std::string name; const Module* m; };
  std::vector<Item> stack{{"", this}};
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    out.emplace_back(it.name, const_cast<Module*>(it.m));
    for (auto c = it.m->children_.rbegin(); c != it.m->children_.rend(); ++c)
      stack.push_back({it.name.empty() ? c->first : it.name + "." + c->first, c->second.get()});
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& nt : named_parameters()) n += nt.second.numel();
  return n;
}

Tensor Module::parameter(const std::string& dotted_name) const {
  std::vector<NamedTensor> all = named_parameters();
  for (const auto& nt : all)
    if (nt.first == dotted_name) return nt.second;
  std::ostringstream os;
  const size_t shown = std::min<size_t>(all.size(), 8);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << all[i].first;
  if (all.size() > shown) os << ", ...";
  fail("Module::parameter: no parameter named '", dotted_name, "' (", all.size(),
       " parameters; valid names include: ", all.empty() ? "<none>" : os.str(), ")");
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (auto& nt : named_parameters()) nt.second.zero_grad();
}

// Replaces the parameter's data in place with `converted` (same shape): every handle to the
// parameter's TensorImpl sees the new storage. requires_grad is kept; the gradient is dropped.
static void replace_data(const Tensor& param, const Tensor& converted) {
  TensorImpl* impl = param.impl();
  impl->storage = converted.impl()->storage;
  impl->strides = converted.impl()->strides;
  impl->offset = converted.impl()->offset;
  impl->dtype = converted.impl()->dtype;
  impl->grad.reset();
}

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto& nt : named_parameters()) {
    const Tensor& p = nt.second;
    if (p.device() == device) continue;
    replace_data(p, p.detach().to(device).contiguous());
  }
}

void Module::to(DType dtype) {
  PELAB_CHECK(is_floating(dtype), "Module::to: parameters must stay floating, got ",
              dtype_name(dtype));
  NoGradGuard ng;
  for (auto& nt : named_parameters()) {
    const Tensor& p = nt.second;
    if (p.dtype() == dtype) continue;
    replace_data(p, p.detach().to(dtype).contiguous());
  }
}

// ---------------- ModuleList ----------------
void ModuleList::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

// ---------------- init ----------------
namespace init {
namespace {
void check_float(const Tensor& t, const char* op) {
  PELAB_CHECK(t.defined(), op, ": the tensor is undefined");
  PELAB_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.str());
}

// Runs `fill(view)` on a contiguous buffer: the tensor itself when contiguous, else a scratch
// tensor copied back (so strided views are filled in row-major order, same values either way).
template <class F>
void fill_random(Tensor& t, F fill) {
  NoGradGuard ng;
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    fill(view_of(t));
  } else {
    Tensor tmp = Tensor::empty(t.shape(), t.dtype(), t.device());
    fill(view_of(tmp));
    t.copy_(tmp);
  }
}

// PyTorch's _calculate_fan_in_and_fan_out for a [out, in, *receptive] tensor.
std::pair<double, double> fans(const Tensor& t, const char* op) {
  PELAB_CHECK(t.dim() >= 2, op, ": fan in and fan out need a tensor with at least 2 dimensions, got ",
              shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  const double fan_in = static_cast<double>(t.size(1) * receptive);
  const double fan_out = static_cast<double>(t.size(0) * receptive);
  PELAB_CHECK(fan_in > 0 && fan_out > 0, op, ": zero fan for shape ", shape_str(t.shape()));
  return {fan_in, fan_out};
}
}  // namespace

void constant_(Tensor& t, double v) {
  check_float(t, "init::constant_");
  NoGradGuard ng;
  t.fill_(v);
}
void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  check_float(t, "init::uniform_");
  PELAB_CHECK(lo <= hi, "init::uniform_: lo ", lo, " > hi ", hi);
  fill_random(t, [&](const View& v) {
    backend_for(t.device()).random_uniform(v, lo, hi, gen.seed(),
                                           gen.take(static_cast<uint64_t>(v.numel())));
  });
}

void normal_(Tensor& t, double mean, double std, Generator& gen) {
  check_float(t, "init::normal_");
  PELAB_CHECK(std >= 0, "init::normal_: std must be >= 0, got ", std);
  fill_random(t, [&](const View& v) {
    backend_for(t.device()).random_normal(v, mean, std, gen.seed(),
                                          gen.take(static_cast<uint64_t>(v.numel())));
  });
}

void xavier_uniform_(Tensor& t, Generator& gen, double gain) {
  check_float(t, "init::xavier_uniform_");
  auto [fan_in, fan_out] = fans(t, "init::xavier_uniform_");
  const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
  uniform_(t, -bound, bound, gen);
}

void kaiming_uniform_(Tensor& t, Generator& gen, double a) {
  check_float(t, "init::kaiming_uniform_");
  const double fan_in = fans(t, "init::kaiming_uniform_").first;
  const double gain = std::sqrt(2.0 / (1.0 + a * a));  // leaky_relu gain
  const double bound = gain * std::sqrt(3.0 / fan_in);
  uniform_(t, -bound, bound, gen);
}
}  // namespace init

// ---------------- layers ----------------
Linear::Linear(int64_t in, int64_t out, Generator& gen, LinearOptions opt, DType dtype)
    : in_features(in), out_features(out) {
  PELAB_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in,
              " and ", out);
  PELAB_CHECK(is_floating(dtype), "Linear: dtype must be floating, got ", dtype_name(dtype));
  Tensor w = Tensor::empty({out, in}, dtype);
  if (opt.init == "xavier_uniform") {
    init::xavier_uniform_(w, gen);
  } else if (opt.init == "kaiming_uniform") {
    init::kaiming_uniform_(w, gen);
  } else if (opt.init == "normal") {
    init::normal_(w, 0.0, opt.std, gen);
  } else {
    fail("Linear: unknown init '", opt.init, "' (valid: xavier_uniform, kaiming_uniform, normal)");
  }
  weight = register_parameter("weight", w);
  if (opt.bias) bias = register_parameter("bias", Tensor::zeros({out}, dtype));
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, double std, DType dtype) {
  PELAB_CHECK(num > 0 && dim > 0, "Embedding: num and dim must be positive, got ", num, " and ", dim);
  PELAB_CHECK(is_floating(dtype), "Embedding: dtype must be floating, got ", dtype_name(dtype));
  Tensor w = Tensor::empty({num, dim}, dtype);
  init::normal_(w, 0.0, std, gen);
  weight = register_parameter("weight", w);
}

LayerNorm::LayerNorm(int64_t n, double eps, bool affine, DType dtype) : eps(eps) {
  PELAB_CHECK(n > 0, "LayerNorm: size must be positive, got ", n);
  PELAB_CHECK(eps >= 0, "LayerNorm: eps must be >= 0, got ", eps);
  PELAB_CHECK(is_floating(dtype), "LayerNorm: dtype must be floating, got ", dtype_name(dtype));
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({n}, dtype));
    bias = register_parameter("bias", Tensor::zeros({n}, dtype));
  }
}

}  // namespace pelab
