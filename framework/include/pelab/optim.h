// pelab — optimizers (SGD with momentum, AdamW), global grad-norm clipping and LR schedules.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pelab/tensor.h"

namespace pelab {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const std::vector<Tensor>& params() const { return params_; }
  // Per-parameter state buffers, e.g. {"exp_avg", "exp_avg_sq"} for AdamW; index i matches params()[i].
  // Allocated lazily on the first step; state_buffers() allocates them if needed (for checkpoints).
  virtual std::vector<std::string> state_names() const = 0;
  std::vector<std::vector<Tensor>>& state_buffers();

 protected:
  void ensure_state();
  std::vector<Tensor> params_;
  std::vector<std::vector<Tensor>> state_;  // [param][state_name]
  double lr_;
  int64_t step_ = 0;
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
