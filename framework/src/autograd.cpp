// pelab — dynamic-tape reverse-mode autograd (see autograd.h for the contract).
#include "pelab/autograd.h"

#include <unordered_map>

#include "pelab/ops.h"

namespace pelab {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* op, const std::vector<Tensor>& inputs, Tensor output, BackwardFn backward) {
  if (!needs_grad(inputs)) return output;
  for (const auto& t : inputs) {
    if (t.defined() && t.impl() == output.impl()) {  // never re-parent an input: alias it
      output = output.detach();
      break;
    }
  }
  auto node = std::make_shared<Node>();
  node->name = op;
  node->edges.reserve(inputs.size());
  for (const auto& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn())
        e.fn = t.grad_fn();
      else
        e.leaf = t.impl_ptr();
    }
    node->edges.push_back(std::move(e));
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::Float32);
  }
  node->backward = std::move(backward);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
  return output;
}

// True when `t` is the only handle on a whole, dense buffer of its own: nothing else (no view, no
// saved tensor, no other gradient) can observe it, so it may be adopted or updated in place.
static bool sole_owner(const Tensor& t) {
  const TensorImpl* i = t.impl();
  return t.impl_ptr().use_count() == 1 && i->storage && i->storage.use_count() == 1 &&
         i->offset == 0 && !i->grad_fn && t.is_contiguous() &&
         i->storage->nbytes == static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
}

static void accumulate_leaf(TensorImpl* leaf, const Tensor& g) {
  if (!leaf->grad) {
    if (sole_owner(g)) {  // adopt the freshly computed gradient instead of copying it
      leaf->grad = g.impl_ptr();
      return;
    }
    Tensor copy = Tensor::empty(g.shape(), g.dtype(), g.device());
    copy.copy_(g);
    leaf->grad = copy.impl_ptr();
  } else {
    Tensor(leaf->grad).add_(g);
  }
}

void run_backward(const Tensor& root, const Tensor& grad) {
  NoGradGuard no_grad;
  PELAB_CHECK(grad.dtype() == root.dtype() && grad.device() == root.device(),
              "backward: gradient ", grad.str(), " does not match tensor ", root.str());
  if (!root.grad_fn()) {  // a leaf: its gradient is the seed itself
    accumulate_leaf(root.impl(), grad);
    return;
  }
  // Collect the graph and count, for each node, how many collected nodes feed gradient into it.
  std::unordered_map<Node*, int> pending;
  std::vector<Node*> stack{root.grad_fn().get()};
  pending[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    PELAB_CHECK(!n->released, "backward: trying to backward through the graph a second time (node '",
                n->name, "' was freed by an earlier backward)");
    for (auto& e : n->edges) {
      if (!e.fn) continue;
      auto it = pending.find(e.fn.get());
      if (it == pending.end()) {
        pending[e.fn.get()] = 1;
        stack.push_back(e.fn.get());
      } else {
        ++it->second;
      }
    }
  }
  // Kahn's order from the root; gradients for a node are summed before it runs.
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad;
  std::vector<Node*> ready{root.grad_fn().get()};
  // Keep every node alive until the walk ends (edges are cleared as nodes are released).
  std::vector<std::shared_ptr<Node>> keep{root.grad_fn()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(grads[n]);
    grads.erase(n);
    std::vector<Tensor> in_grads;
    if (g.defined()) {
      in_grads = n->backward(g);
      PELAB_CHECK(in_grads.size() == n->edges.size(), "backward of '", n->name, "' returned ",
                  in_grads.size(), " gradients for ", n->edges.size(), " inputs");
    }
    for (size_t i = 0; i < n->edges.size(); ++i) {
      Edge& e = n->edges[i];
      const bool has = i < in_grads.size() && in_grads[i].defined();
      if (has && e.active()) {
        const Tensor& gi = in_grads[i];
        PELAB_CHECK(gi.shape() == n->input_shapes[i], "backward of '", n->name, "': gradient for input ",
                    i, " has shape ", shape_str(gi.shape()), ", expected ",
                    shape_str(n->input_shapes[i]));
        PELAB_CHECK(gi.dtype() == n->input_dtypes[i], "backward of '", n->name,
                    "': gradient dtype ", dtype_name(gi.dtype()), " for input ", i, ", expected ",
                    dtype_name(n->input_dtypes[i]));
        if (e.leaf) {
          accumulate_leaf(e.leaf.get(), gi);
        } else {
          auto it = grads.find(e.fn.get());
          if (it == grads.end() || !it->second.defined())
            grads[e.fn.get()] = gi;
          else if (sole_owner(it->second))
            it->second.add_(gi);  // a gradient sum nobody else holds: accumulate in place
          else
            it->second = add(it->second, gi);
        }
      }
      if (e.fn) {
        keep.push_back(e.fn);
        if (--pending[e.fn.get()] == 0) ready.push_back(e.fn.get());
      }
    }
    // Release: drop the closure (saved tensors) and the edges; a later backward through n throws.
    n->backward = nullptr;
    n->edges.clear();
    n->released = true;
  }
}

}  // namespace pelab
