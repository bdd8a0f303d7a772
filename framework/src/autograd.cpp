// pelab — dynamic-tape reverse-mode autograd (see autograd.h for the contract).
#include "pelab/autograd.h"

#include <atomic>
#include <vector>

#include "pelab/ops.h"

namespace pelab {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

bool needs_grad(const Tensor* inputs, size_t n) {
  if (!g_grad_enabled) return false;
  for (size_t i = 0; i < n; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) return true;
  return false;
}

Tensor record(const char* op, const Tensor* inputs, size_t n, Tensor output, BackwardFn backward) {
  if (!needs_grad(inputs, n)) return output;
  for (const Tensor* t = inputs; t != inputs + n; ++t) {
    if (t->defined() && t->impl() == output.impl()) {  // never re-parent an input: alias it
      output = output.detach();
      break;
    }
  }
  auto node = std::make_shared<Node>();
  node->name = op;
  node->edges.reserve(n);
  node->input_shapes.reserve(n);
  node->input_dtypes.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = inputs[i];
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
  // The counts and the gradient sums live on the nodes, marked with this walk's number (a node
  // another walk left behind, e.g. by throwing, is reset when this one first reaches it).
  static std::atomic<uint64_t> walks{0};
  const uint64_t walk = ++walks;
  Node* root_fn = root.grad_fn().get();
  // Every node of the walk, kept alive until it ends (edges are cleared as nodes are released).
  std::vector<std::shared_ptr<Node>> keep{root.grad_fn()};
  root_fn->walk = walk;
  root_fn->pending = 0;
  root_fn->grad = Tensor();
  for (size_t k = 0; k < keep.size(); ++k) {
    Node* n = keep[k].get();
    PELAB_CHECK(!n->released, "backward: trying to backward through the graph a second time (node '",
                n->name, "' was freed by an earlier backward)");
    for (auto& e : n->edges) {
      if (!e.fn) continue;
      Node* m = e.fn.get();
      if (m->walk != walk) {
        m->walk = walk;
        m->pending = 1;
        m->grad = Tensor();
        keep.push_back(e.fn);
      } else {
        ++m->pending;
      }
    }
  }
  // Kahn's order from the root; gradients for a node are summed before it runs.
  root_fn->grad = grad;
  std::vector<Node*> ready{root_fn};
  auto run = [&] {
    while (!ready.empty()) {
      Node* n = ready.back();
      ready.pop_back();
      Tensor g = std::move(n->grad);
      n->grad = Tensor();
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
          PELAB_CHECK(gi.shape() == n->input_shapes[i], "backward of '", n->name,
                      "': gradient for input ", i, " has shape ", shape_str(gi.shape()),
                      ", expected ", shape_str(n->input_shapes[i]));
          PELAB_CHECK(gi.dtype() == n->input_dtypes[i], "backward of '", n->name,
                      "': gradient dtype ", dtype_name(gi.dtype()), " for input ", i, ", expected ",
                      dtype_name(n->input_dtypes[i]));
          if (e.leaf) {
            accumulate_leaf(e.leaf.get(), gi);
          } else {
            Tensor& sum = e.fn->grad;
            if (!sum.defined())
              sum = gi;
            else if (sole_owner(sum))
              sum.add_(gi);  // a gradient sum nobody else holds: accumulate in place
            else
              sum = add(sum, gi);
          }
        }
        if (e.fn && --e.fn->pending == 0) ready.push_back(e.fn.get());
      }
      // Release: drop the closure (saved tensors) and the edges; a later backward through n throws.
      n->backward = nullptr;
      n->edges.clear();
      n->released = true;
    }
  };
  try {
    run();
  } catch (...) {
    for (auto& k : keep) k->grad = Tensor();  // no gradient sums outlive a failed walk
    throw;
  }
}

}  // namespace pelab
