// pelab — per-layer parameters of a positional encoding (shaw's K/V tables, t5 with
// pe.t5_per_layer, cope's position embeddings): one parameter-only module per layer, registered
// under "layers.<i>." (the names checkpoints and goldens use), and the lookup by an attention
// site's layer with its range check.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/pe/pe.h"
#include "pelab/error.h"
#include "pelab/nn.h"

namespace pelab::models {

class LayerParams {
 public:
  // `layers` empty layer modules; register list() on the scheme as "layers".
  explicit LayerParams(int64_t layers) : list_(std::make_shared<ModuleList>()) {
    for (int64_t i = 0; i < layers; ++i) {
      holders_.push_back(std::make_shared<Holder>());
      list_->push_back(holders_.back());
    }
  }
  const std::shared_ptr<ModuleList>& list() const { return list_; }
  // Registers `t` as "layers.<layer>.<name>" (requires_grad) and returns the handle.
  Tensor add(int64_t layer, const std::string& name, Tensor t) {
    return holders_.at(static_cast<size_t>(layer))->add(name, std::move(t));
  }

 private:
  class Holder : public Module {
   public:
    Tensor add(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  };
  std::shared_ptr<ModuleList> list_;
  std::vector<std::shared_ptr<Holder>> holders_;
};

// site.layer as an index into a scheme's `n` per-layer entries; one error line naming the scheme
// when it is out of range.
inline size_t layer_index(const char* scheme, const AttnSite& site, size_t n) {
  PELAB_CHECK(site.layer >= 0 && site.layer < static_cast<int64_t>(n), scheme, ": layer ",
              site.layer, " out of range (stack has ", n, " layers)");
  return static_cast<size_t>(site.layer);
}

}  // namespace pelab::models
