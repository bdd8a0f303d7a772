// pelab — optimizers (SGD with momentum/Nesterov, AdamW) on the fused backend kernels, global
// gradient-norm clipping and learning-rate schedules.
#include "pelab/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "pelab/autograd.h"
#include "pelab/backend.h"

namespace pelab {

// ---------------- Optimizer ----------------
void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

void Optimizer::ensure_state() {
  if (state_.size() == params_.size()) return;
  const std::vector<std::string> names = state_names();
  state_.assign(params_.size(), {});
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    PELAB_CHECK(p.defined(), "Optimizer: parameter ", i, " is undefined");
    for (size_t k = 0; k < names.size(); ++k)
      state_[i].push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
  }
}

std::vector<std::vector<Tensor>>& Optimizer::state_buffers() {
  ensure_state();
  return state_;
}

namespace {
// Everything one fused update touches, checked and made contiguous. When the parameter is a
// non-contiguous view, the update runs on a contiguous copy that finish() writes back.
struct StepBuffers {
  Tensor param, work, grad;
  std::vector<Tensor> state;

  void finish() {
    if (work.impl() != param.impl()) param.detach().copy_(work);
  }
};

StepBuffers prepare(const char* opt, size_t i, const Tensor& p, const Tensor& g,
                    const std::vector<Tensor>& state, const std::vector<std::string>& names) {
  PELAB_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), opt,
              ": gradient ", g.str(), " of parameter ", i, " does not match the parameter ", p.str());
  StepBuffers b;
  b.param = p;
  b.work = p.is_contiguous() ? p : p.detach().contiguous();
  b.grad = g.contiguous();
  b.state.reserve(state.size());
  for (size_t k = 0; k < state.size(); ++k) {
    const Tensor& s = state[k];
    PELAB_CHECK(s.defined() && s.shape() == p.shape() && s.dtype() == p.dtype() &&
                    s.device() == p.device() && s.is_contiguous(),
                opt, ": state '", names[k], "' of parameter ", i, " is ", s.str(),
                ", expected a contiguous buffer like the parameter ", p.str());
    b.state.push_back(s);
  }
  return b;
}

// The parameters with a gradient, in order, as batches for one multi-tensor update each:
// consecutive parameters on one device with no storage in common (a parameter sharing storage with
// one already in the batch starts the next batch, so the updates stay in order). prev[i] is the
// last parameter before i with a gradient on i's storage, found by sorting (storage, index) once: a
// scan of the batch per parameter made the step quadratic in the parameter count.
std::vector<std::vector<size_t>> update_batches(const std::vector<Tensor>& params) {
  const size_t none = params.size();
  std::vector<size_t> prev(params.size(), none);
  {
    std::vector<std::pair<std::uintptr_t, size_t>> keys;
    keys.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined())
        keys.emplace_back(reinterpret_cast<std::uintptr_t>(params[i].impl()->storage.get()), i);
    std::sort(keys.begin(), keys.end());
    for (size_t k = 1; k < keys.size(); ++k)
      if (keys[k].first == keys[k - 1].first) prev[keys[k].second] = keys[k - 1].second;
  }
  std::vector<std::vector<size_t>> batches;
  size_t first = 0;  // the open batch's first parameter
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    // every parameter with a gradient in [first, i) is in the open batch
    const bool open = !batches.empty() && !batches.back().empty();
    if (batches.empty() || (open && (p.device() != params[batches.back().front()].device() ||
                                     (prev[i] != none && prev[i] >= first)))) {
      batches.emplace_back();
      batches.back().reserve(params.size() - i);  // (one heap block a batch)
    }
    if (batches.back().empty()) first = i;
    batches.back().push_back(i);
  }
  return batches;
}

// One backend call per update batch (update_batches) of the parameters with a gradient:
// view(b) makes a parameter's Backend buffer struct (Buffers) from its StepBuffers, update(backend,
// buffers) runs the batch; non-contiguous parameters are written back afterwards.
template <class Buffers, class MakeView, class Update>
void run_batches(const char* opt, const std::vector<Tensor>& params,
                 const std::vector<std::vector<Tensor>>& state,
                 const std::vector<std::string>& names, MakeView&& view, Update&& update) {
  for (const std::vector<size_t>& batch : update_batches(params)) {
    std::vector<StepBuffers> bufs;
    std::vector<Buffers> views;
    bufs.reserve(batch.size());
    views.reserve(batch.size());
    for (size_t i : batch) {
      bufs.push_back(prepare(opt, i, params[i], params[i].grad(), state[i], names));
      views.push_back(view(bufs.back()));
    }
    update(backend_for(bufs.front().param.device()), views);
    for (StepBuffers& b : bufs) b.finish();
  }
}

Backend::AdamWBuffers adamw_view(const StepBuffers& b) {
  return {view_of(b.work), view_of(b.grad), view_of(b.state[0]), view_of(b.state[1])};
}

}  // namespace

// ---------------- guarded steps ----------------
int64_t Optimizer::step_count() const {
  if (device_steps_) {
    step_ = static_cast<int64_t>(control_.to_vector()[2]);
    device_steps_ = false;
  }
  return step_;
}

void Optimizer::set_step_count(int64_t s) {
  step_ = s;
  device_steps_ = false;
  control_ = Tensor();  // the next guarded step starts its record from s
}

void Optimizer::sync_step_count() {
  step_count();
  control_ = Tensor();  // a host step moves step_ past the device's count
}

void Optimizer::guarded_step(const Tensor& step, double max_norm) {
  PELAB_CHECK(max_norm > 0, "guarded_step: max_norm must be > 0, got ", max_norm);
  PELAB_CHECK(!params_.empty(), "guarded_step: the optimizer has no parameters");
  NoGradGuard ng;
  ensure_state();
  const Device dev = params_.front().device();
  PELAB_CHECK(step.defined() && step.dtype() == DType::Float64 && step.numel() == 3 &&
                  step.is_contiguous() && step.device() == dev,
              "guarded_step: the step record must be a contiguous float64 [3] tensor on ",
              dev.str(), ", got ", step.str());
  std::vector<Tensor> grads;
  std::vector<View> views;
  grads.reserve(params_.size());
  views.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    PELAB_CHECK(p.device() == dev, "guarded_step: parameter ", i, " is on ", p.device().str(),
                ", parameter 0 on ", dev.str(), " (the step is decided on one device)");
    const Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    grads.push_back(g.contiguous());
    views.push_back(view_of(grads.back()));
  }
  if (!control_.defined())
    control_ = Tensor::from_vector({1.0, 1.0, static_cast<double>(step_)}, {3}, DType::Float64, dev);
  Backend& be = backend_for(dev);
  View sumsq = view_of(step);
  sumsq.data = static_cast<double*>(sumsq.data) + 1;
  sumsq.shape = {1};
  sumsq.strides = {1};
  be.sum_squares_many(sumsq, views);
  be.update_control(view_of(control_), view_of(step), max_norm);
  apply_guarded(view_of(control_));
  device_steps_ = true;
}

// ---------------- SGD ----------------
SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions o) : Optimizer(std::move(params), lr), opt(o) {
  PELAB_CHECK(lr >= 0, "SGD: lr must be >= 0, got ", lr);
  PELAB_CHECK(opt.momentum >= 0, "SGD: momentum must be >= 0, got ", opt.momentum);
  PELAB_CHECK(opt.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  PELAB_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
              "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum ", opt.momentum,
              ", dampening ", opt.dampening);
}

std::vector<std::string> SGD::state_names() const { return {"momentum_buffer"}; }

// The momentum buffer starts as the first gradient (PyTorch) on the optimizer's first step. A
// parameter that first receives a gradient later starts from a zero buffer, which differs from
// PyTorch only when dampening != 0.
void SGD::step() {
  NoGradGuard ng;
  ensure_state();
  sync_step_count();
  ++step_;
  const bool first = step_ == 1;
  const std::vector<std::string> names = state_names();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    StepBuffers b = prepare("SGD", i, p, g, state_[i], names);
    backend_for(p.device())
        .sgd_step(view_of(b.work), view_of(b.grad), view_of(b.state[0]), lr_, opt.momentum,
                  opt.dampening, opt.weight_decay, opt.nesterov, first);
    b.finish();
  }
}

void SGD::apply_guarded(const View& control) {
  run_batches<Backend::SGDBuffers>(
      "SGD", params_, state_, state_names(),
      [](const StepBuffers& b) {
        return Backend::SGDBuffers{view_of(b.work), view_of(b.grad), view_of(b.state[0])};
      },
      [&](Backend& be, const std::vector<Backend::SGDBuffers>& views) {
        be.sgd_step_guarded(views, lr_, opt.momentum, opt.dampening, opt.weight_decay,
                            opt.nesterov, control);
      });
}

// ---------------- AdamW ----------------
AdamW::AdamW(std::vector<Tensor> params, double lr, AdamWOptions o)
    : Optimizer(std::move(params), lr), opt(o) {
  PELAB_CHECK(lr >= 0, "AdamW: lr must be >= 0, got ", lr);
  PELAB_CHECK(opt.beta1 >= 0 && opt.beta1 < 1, "AdamW: beta1 must be in [0, 1), got ", opt.beta1);
  PELAB_CHECK(opt.beta2 >= 0 && opt.beta2 < 1, "AdamW: beta2 must be in [0, 1), got ", opt.beta2);
  PELAB_CHECK(opt.eps >= 0, "AdamW: eps must be >= 0, got ", opt.eps);
  PELAB_CHECK(opt.weight_decay >= 0, "AdamW: weight_decay must be >= 0, got ", opt.weight_decay);
}

std::vector<std::string> AdamW::state_names() const { return {"exp_avg", "exp_avg_sq"}; }

void AdamW::step() {
  NoGradGuard ng;
  ensure_state();
  sync_step_count();
  ++step_;
  const double t = static_cast<double>(step_);
  const double bc1 = 1.0 - std::pow(opt.beta1, t);
  const double bc2 = 1.0 - std::pow(opt.beta2, t);
  run_batches<Backend::AdamWBuffers>(
      "AdamW", params_, state_, state_names(), adamw_view,
      [&](Backend& be, const std::vector<Backend::AdamWBuffers>& views) {
        be.adamw_step_many(views, lr_, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, bc1, bc2);
      });
}

void AdamW::apply_guarded(const View& control) {
  run_batches<Backend::AdamWBuffers>(
      "AdamW", params_, state_, state_names(), adamw_view,
      [&](Backend& be, const std::vector<Backend::AdamWBuffers>& views) {
        be.adamw_step_guarded(views, lr_, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, control);
      });
}

// ---------------- clipping ----------------
// PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when it is below 1. A
// non-finite norm is returned with the gradients untouched, so the caller can skip the step.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  PELAB_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard ng;
  // One Backend::sum_squares_many and one read per device (in the order the devices first appear).
  std::vector<Device> devices;
  std::vector<std::vector<Tensor>> grads;
  for (const auto& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    size_t d = 0;
    while (d < devices.size() && devices[d] != g.device()) ++d;
    if (d == devices.size()) {
      devices.push_back(g.device());
      grads.emplace_back();
    }
    grads[d].push_back(g.contiguous());
  }
  double total = 0.0;
  for (size_t d = 0; d < devices.size(); ++d) {
    std::vector<View> views;
    for (const Tensor& g : grads[d]) views.push_back(view_of(g));
    Tensor sum = Tensor::empty({1}, DType::Float64, devices[d]);
    backend_for(devices[d]).sum_squares_many(view_of(sum), views);
    total += sum.item();
  }
  const double norm = std::sqrt(total);
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  for (const auto& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (g.is_contiguous()) {
      g.mul_(coef);
    } else {
      Tensor scaled = g.contiguous().clone();
      scaled.mul_(coef);
      Tensor(p).set_grad(scaled);
    }
  }
  return norm;
}

// ---------------- LR schedules ----------------
void LRSchedule::validate(const std::string& kind) {
  PELAB_CHECK(kind == "constant" || kind == "warmup_cosine" || kind == "inverse_sqrt",
              "LRSchedule: unknown kind '", kind,
              "' (valid kinds: constant, warmup_cosine, inverse_sqrt)");
}

double LRSchedule::lr_at(int64_t step) const {
  validate(kind);
  PELAB_CHECK(step >= 0, "LRSchedule::lr_at: step must be >= 0, got ", step);
  const double s1 = static_cast<double>(step + 1);
  if (kind == "constant") return base_lr;
  if (kind == "warmup_cosine") {
    PELAB_CHECK(warmup >= 0, "LRSchedule(warmup_cosine): warmup must be >= 0, got ", warmup);
    if (step < warmup) return base_lr * s1 / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double progress =
        static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    const double pi = 3.14159265358979323846;
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(pi * progress));
  }
  // inverse_sqrt
  PELAB_CHECK(warmup >= 1, "LRSchedule(inverse_sqrt): warmup must be >= 1, got ", warmup);
  const double w = static_cast<double>(warmup);
  return base_lr * std::min(s1 / w, std::sqrt(w / s1));
}

}  // namespace pelab
