// pelab — dynamic-tape reverse-mode autograd.
//
// Every differentiable op that sees an input requiring grad (while grad mode is on) creates a Node
// holding a backward closure and one Edge per input. backward() walks the graph in reverse
// topological order, accumulates gradients of shared inputs (diamond graphs), adds leaf gradients
// into leaf.grad (accumulating across calls until zeroed), and then releases every node it ran:
// its closure (and thus its saved tensors) is freed, and a second backward through it throws.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "pelab/tensor.h"

namespace pelab {

struct Edge {
  std::shared_ptr<Node> fn;           // producer of a non-leaf input
  std::shared_ptr<TensorImpl> leaf;   // a leaf input that requires grad
  bool active() const { return fn || leaf; }
};

// Backward closure: given dL/d(output), returns dL/d(input_i) for every input (undefined Tensor where
// an input needs no gradient). Shapes must equal the inputs' shapes.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string name;           // op name, for error messages
  std::vector<Edge> edges;    // one per op input
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  BackwardFn backward;
  bool released = false;
  // run_backward's bookkeeping, valid during the walk that last set `walk` (no hash maps per call):
  uint64_t walk = 0;  // the walk that reached this node
  int pending = 0;    // gradients still to arrive from nodes of that walk
  Tensor grad;        // their sum so far
};

// Grad mode (thread-local). Off inside NoGradGuard and during backward().
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};

// True when grad mode is on and any input requires grad. (Each of these takes its inputs as a
// braced list without building a vector, or as a vector.)
bool needs_grad(const Tensor* inputs, size_t n);
inline bool needs_grad(std::initializer_list<Tensor> inputs) {
  return needs_grad(inputs.begin(), inputs.size());
}
inline bool needs_grad(const std::vector<Tensor>& inputs) {
  return needs_grad(inputs.data(), inputs.size());
}

// Attaches a node producing `output` from `inputs` if needs_grad(inputs); returns output (now a
// non-leaf requiring grad) either way. The closure is only kept when a node is made.
Tensor record(const char* op, const Tensor* inputs, size_t n, Tensor output, BackwardFn backward);
inline Tensor record(const char* op, std::initializer_list<Tensor> inputs, Tensor output,
                     BackwardFn backward) {
  return record(op, inputs.begin(), inputs.size(), std::move(output), std::move(backward));
}
inline Tensor record(const char* op, const std::vector<Tensor>& inputs, Tensor output,
                     BackwardFn backward) {
  return record(op, inputs.data(), inputs.size(), std::move(output), std::move(backward));
}

// Runs reverse mode from `root` with upstream gradient `grad` (same shape as root).
void run_backward(const Tensor& root, const Tensor& grad);

}  // namespace pelab
