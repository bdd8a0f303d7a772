// pelab — nn building blocks: Module with stable dotted parameter names, Linear, Embedding,
// LayerNorm, Dropout, and seeded init schemes.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pelab/ops.h"
#include "pelab/random.h"
#include "pelab/tensor.h"

namespace pelab {

using NamedTensor = std::pair<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters of this module and its children, depth first in registration order, named
  // "child.grandchild.param" (e.g. "decoder.layers.1.attn.q.weight").
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Module*>> named_modules() const;  // "" is this module
  int64_t num_parameters() const;
  Tensor parameter(const std::string& dotted_name) const;  // throws naming the key if absent

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Moves/converts every parameter in place (handles held elsewhere see the change).
  void to(Device device);
  void to(DType dtype);

 protected:
  Tensor register_parameter(const std::string& name, Tensor t);  // sets requires_grad
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, std::vector<NamedTensor>& out) const;
  std::vector<NamedTensor> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Puts a module (and its children) in evaluation mode for a scope and restores its previous mode
// when the scope ends, on an exception too.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& m) : m_(m), was_(m.is_training()) { m_.eval(); }
  ~EvalModeGuard() { m_.train(was_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& m_;
  bool was_;
};

// Children named "0", "1", ...
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return items_.size(); }
  template <class M>
  M& at(size_t i) const { return static_cast<M&>(*items_.at(i)); }
 private:
  std::vector<std::shared_ptr<Module>> items_;
};

namespace init {
void zeros_(Tensor& t);
void ones_(Tensor& t);
void constant_(Tensor& t, double v);
void uniform_(Tensor& t, double lo, double hi, Generator& gen);
void normal_(Tensor& t, double mean, double std, Generator& gen);
// fan_in = shape[1] * receptive, fan_out = shape[0] * receptive (PyTorch conventions for [out, in])
void xavier_uniform_(Tensor& t, Generator& gen, double gain = 1.0);
void kaiming_uniform_(Tensor& t, Generator& gen, double a = 2.23606797749979);  // a = sqrt(5): nn.Linear default
}  // namespace init

struct LinearOptions {
  bool bias = true;
  std::string init = "xavier_uniform";  // "xavier_uniform" | "kaiming_uniform" | "normal"
  double std = 0.02;                    // for "normal"
};

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, LinearOptions opt = {},
         DType dtype = DType::Float32);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  int64_t in_features, out_features;
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen, double std = 1.0, DType dtype = DType::Float32);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids); }
  Tensor weight;  // [num, dim]
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t n, double eps = 1e-5, bool affine = true, DType dtype = DType::Float32);
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }
  double eps;
  Tensor weight, bias;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p) : p(p) {}
  Tensor forward(const Tensor& x, Generator& gen) const { return dropout(x, p, is_training(), gen); }
  double p;
};

}  // namespace pelab
