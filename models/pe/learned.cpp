// pelab — learned absolute positional encoding: a table W [max_positions, d_model] (parameter
// "weight", init N(0, 0.02)), x + W[pos]. A position >= max_positions is an error, never a read
// past the table. Per-row position IDs ([B, L]) index the table token by token. With two-level task
// IDs (pe.position_channels 2: multi_addition's digit and operand IDs, Cho et al. 2025) a second
// table W2 (parameter "weight2", same shape and init) is added: x + W[pos] + W2[pos2].
#include "models/pe/pe.h"

namespace pelab::models {
namespace {

constexpr double kLearnedInitStd = 0.02;

class LearnedPE : public PositionalEncoding {
 public:
  LearnedPE(const PEConfig& cfg, const StackInfo& s, Generator& gen)
      : max_positions_(cfg.get_int("max_positions")), d_(s.d_model) {
    PELAB_CHECK(max_positions_ >= 1, "pe.max_positions: must be >= 1, got ", max_positions_);
    PELAB_CHECK(cfg.position_channels == 1 || cfg.position_channels == 2,
                "learned positional encoding: ", cfg.position_channels,
                " position ID levels (1 or 2 supported)");
    auto table = [&](const char* name) {
      Tensor w = Tensor::empty({max_positions_, d_}, s.dtype);
      init::normal_(w, 0.0, kLearnedInitStd, gen);
      return register_parameter(name, w);
    };
    weight = table("weight");
    if (cfg.position_channels == 2) weight2 = table("weight2");
  }
  std::string name() const override { return "learned"; }
  bool additive() const override { return true; }

  Tensor embed(const Tensor& x, const Positions& pos) override {
    const int64_t L = pos.len;
    PELAB_CHECK(x.dim() == 3 && x.size(1) == L && x.size(2) == d_ &&
                    (pos.shared() || pos.rows == x.size(0)),
                "learned positional encoding: expected x [", pos.shared() ? "B" : std::to_string(pos.rows),
                ", ", L, ", ", d_, "], got ", shape_str(x.shape()));
    PELAB_CHECK(pos.levels() == 1 || weight2.defined(),
                "learned positional encoding: two-level position IDs given to a model built for "
                "one level (pe.position_channels 1)");
    PELAB_CHECK(pos.levels() == 2 || !weight2.defined() || L == 0,
                "learned positional encoding: built for two-level position IDs, given one level");
    Tensor out = add(x, lookup(weight, pos.ids, pos.rows, L, x.device()));
    if (pos.levels() == 2) out = add(out, lookup(weight2, pos.ids2, pos.rows, L, x.device()));
    return out;  // [1 or B, L, d] (shared: broadcast over the batch)
  }

  Tensor weight, weight2;  // weight2: the second ID level's table (undefined with one level)

 private:
  // table[ids] as [rows, L, d]; every ID checked against the table's rows first.
  Tensor lookup(const Tensor& table, const std::vector<int64_t>& ids, int64_t rows, int64_t L,
                Device dev) const {
    for (int64_t p : ids) {
      PELAB_CHECK(p < max_positions_, "learned positional encoding: position ", p,
                  " >= max_positions ", max_positions_, " (sequence length ", L, ")");
      PELAB_CHECK(p >= 0, "learned positional encoding: negative position ", p,
                  " (sequence length ", L, ")");
    }
    return embedding(table, Tensor::from_ints(ids, {rows, L}, dev));
  }

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
        .parameters([](const PEConfig& c, const StackInfo& s) {
          return c.position_channels * c.get_int("max_positions") * s.d_model;
        })
        .size_key("max_positions")
        .position_channels(2));

}  // namespace pelab::models
