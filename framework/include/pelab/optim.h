// pelab — optimizers (SGD with momentum, AdamW), global grad-norm clipping and LR schedules.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pelab/backend.h"
#include "pelab/tensor.h"

namespace pelab {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // One step decided on the parameters' device (they must all be on one), reading nothing back:
  // `step` is a contiguous Float64 [3] tensor there holding the step's loss in [0]; this writes the
  // gradients' global sum of squares into [1] and their norm into [2] (Backend::sum_squares_many,
  // update_control), then updates the parameters (one multi-tensor Backend call) with every
  // gradient scaled by min(1, max_norm / (norm + 1e-6)), only when the norm and the loss are
  // finite; else nothing changes, the step count included. The same result as clip_grad_norm(
  // params(), max_norm) followed by step() when both are finite, which read the norm on the host.
  // max_norm may be infinite (no clip).
  void guarded_step(const Tensor& step, double max_norm);
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  // Updates taken (after guarded steps, read from the device once: one device->host read).
  int64_t step_count() const;
  void set_step_count(int64_t s);
  const std::vector<Tensor>& params() const { return params_; }
  // Per-parameter state buffers, e.g. {"exp_avg", "exp_avg_sq"} for AdamW; index i matches params()[i].
  // Allocated lazily on the first step; state_buffers() allocates them if needed (for checkpoints).
  virtual std::vector<std::string> state_names() const = 0;
  std::vector<std::vector<Tensor>>& state_buffers();

 protected:
  void ensure_state();
  // The update of guarded_step under the device's control record (Backend::update_control).
  virtual void apply_guarded(const View& control) = 0;
  // The step count before a host step (reads the device's after guarded steps).
  void sync_step_count();
  std::vector<Tensor> params_;
  std::vector<std::vector<Tensor>> state_;  // [param][state_name]
  double lr_;
  mutable int64_t step_ = 0;
  // Guarded steps: the control record on the parameters' device (its [2] is the step count), and
  // whether it is ahead of step_.
  Tensor control_;
  mutable bool device_steps_ = false;
};

struct SGDOptions {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SGDOptions opt = {});
  void step() override;
  std::vector<std::string> state_names() const override;
  SGDOptions opt;

 protected:
  void apply_guarded(const View& control) override;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
// Decoupled weight decay (Loshchilov & Hutter): p -= lr*wd*p; then the bias-corrected Adam update.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, double lr, AdamWOptions opt = {});
  void step() override;
  std::vector<std::string> state_names() const override;
  AdamWOptions opt;

 protected:
  void apply_guarded(const View& control) override;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before scaling.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// LR at optimizer step `step` (0-based: the step about to be taken).
//  constant:       base
//  warmup_cosine:  base*(step+1)/warmup for step < warmup, then cosine from base to min_lr over
//                  the remaining total-warmup steps (min_lr after total)
//  inverse_sqrt:   base * min((step+1)/warmup, sqrt(warmup/(step+1)))   (warmup >= 1)
struct LRSchedule {
  std::string kind = "constant";
  double base_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup = 0;
  int64_t total = 1;
  double lr_at(int64_t step) const;
  static void validate(const std::string& kind);  // throws on an unknown kind
};

}  // namespace pelab
