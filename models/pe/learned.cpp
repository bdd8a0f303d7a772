// pelab — learned absolute positional encoding: a table W [max_positions, d_model] (parameter
// "weight", init N(0, 0.02)), x + W[pos]. A position >= max_positions is an error, never a read
// past the table. Per-row position IDs ([B, L]) index the table token by token.
#include "models/pe/pe.h"

namespace pelab::models {
namespace {

constexpr double kLearnedInitStd = 0.02;

class LearnedPE : public PositionalEncoding {
 public:
  LearnedPE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : max_positions_(cfg.get_int("max_positions")), d_(s.d_model) {
    PELAB_CHECK(max_positions_ >= 1, "pe.max_positions: must be >= 1, got ", max_positions_);
    Tensor w = Tensor::empty({max_positions_, d_}, s.dtype);
    init::normal_(w, 0.0, kLearnedInitStd, gen);
    weight = register_parameter("weight", w);
  }
  std::string name() const override { return "learned"; }
  bool additive() const override { return true; }

  Tensor embed(const Tensor& x, const Positions& pos) override {
    const int64_t L = pos.len;
    PELAB_CHECK(x.dim() == 3 && x.size(1) == L && x.size(2) == d_ &&
                    (pos.shared() || pos.rows == x.size(0)),
                "learned positional encoding: expected x [", pos.shared() ? "B" : std::to_string(pos.rows),
                ", ", L, ", ", d_, "], got ", shape_str(x.shape()));
    for (int64_t p : pos.ids) {
      PELAB_CHECK(p < max_positions_, "learned positional encoding: position ", p,
                  " >= max_positions ", max_positions_, " (sequence length ", L, ")");
      PELAB_CHECK(p >= 0, "learned positional encoding: negative position ", p,
                  " (sequence length ", L, ")");
    }
    Tensor ids = Tensor::from_ints(pos.ids, {pos.rows, L}, x.device());
    return add(x, embedding(weight, ids));  // [1 or B, L, d] (shared: broadcast over the batch)
  }

  Tensor weight;

 private:
  int64_t max_positions_, d_;
};

}  // namespace

PELAB_REGISTER_PE(
    PEScheme("learned", [](const PEConfig& c, const StackInfo& s, Generator& g) {
      return std::shared_ptr<PositionalEncoding>(std::make_shared<LearnedPE>(c, s, g));
    })
        .key("max_positions", 512, "[1, inf)",
             "learned: rows of the position table; longer inputs are an error")
        .max_positions([](const PEConfig& c) { return c.get_int("max_positions"); })
        .parameters([](const PEConfig& c, const StackInfo& s) { return c.get_int("max_positions") * s.d_model; })
        .size_key("max_positions"));

}  // namespace pelab::models
