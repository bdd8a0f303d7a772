// pelab — sinusoidal absolute positional encoding (Vaswani et al. 2017), added to the embedding:
//   PE[p, 2i]   = sin(p · ω_i),   PE[p, 2i+1] = cos(p · ω_i),   ω_i = exp(-2i · ln(base) / d).
// No parameters. The table for positions 0..N-1 is cached (per dtype/device) and sliced. Per-row
// position IDs ([B, L]) give each token the row of its own ID.
#include <algorithm>
#include <cmath>

#include "models/pe/pe.h"

namespace pelab::models {
namespace {

class SinusoidalPE : public PositionalEncoding {
 public:
  SinusoidalPE(const PEConfig& cfg, const StackInfo& s) : base_(cfg.get_float("sinusoidal_base")), d_(s.d_model) {
    PELAB_CHECK(base_ > 0, "pe.sinusoidal_base: must be > 0, got ", base_);
  }
  std::string name() const override { return "sinusoidal"; }
  bool additive() const override { return true; }

  Tensor embed(const Tensor& x, const Positions& pos) override {
    PELAB_CHECK(x.dim() == 3 && x.size(1) == pos.len && x.size(2) == d_ &&
                    (pos.shared() || pos.rows == x.size(0)),
                "sinusoidal positional encoding: expected x [", pos.shared() ? "B" : std::to_string(pos.rows),
                ", ", pos.len, ", ", d_, "], got ", shape_str(x.shape()));
    const int64_t L = pos.len;
    bool contiguous_from_zero = pos.shared();
    for (int64_t i = 0; contiguous_from_zero && i < L; ++i) contiguous_from_zero &= pos.ids[i] == i;
    Tensor pe;
    if (contiguous_from_zero) {
      if (!table_.defined() || table_.size(1) < L || table_.dtype() != x.dtype() ||
          table_.device() != x.device()) {
        std::vector<int64_t> all(std::max<int64_t>(L, 64));
        for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
        table_ = make_table(all, x.dtype(), x.device());
      }
      pe = slice(table_, 1, 0, L);
    } else {
      pe = make_table(pos, x.dtype(), x.device());
    }
    return add(x, pe);
  }

 private:
  // [rows, L, d]: the row of every ID.
  Tensor make_table(const Positions& positions, DType dtype, Device device) const {
    const std::vector<int64_t>& pos = positions.ids;
    std::vector<double> v(pos.size() * static_cast<size_t>(d_));
    for (size_t p = 0; p < pos.size(); ++p) {
      PELAB_CHECK(pos[p] >= 0, "sinusoidal positional encoding: negative position ", pos[p]);
      for (int64_t j = 0; j < d_; ++j) {
        const int64_t two_i = j - (j % 2);
        const double angle = static_cast<double>(pos[p]) *
                             std::exp(-static_cast<double>(two_i) * std::log(base_) / d_);
        v[p * d_ + j] = (j % 2 == 0) ? std::sin(angle) : std::cos(angle);
      }
    }
    return Tensor::from_vector(v, {positions.rows, positions.len, d_}, dtype, device);
  }

  double base_;
  int64_t d_;
  Tensor table_;  // [1, N, d] for positions 0..N-1
};

}  // namespace

PELAB_REGISTER_PE(PEScheme("sinusoidal", [](const PEConfig& c, const StackInfo& s, Generator&) {
                    return std::shared_ptr<PositionalEncoding>(std::make_shared<SinusoidalPE>(c, s));
                  }).key("sinusoidal_base", 10000.0, "(1, inf)",
                         "sinusoidal: wavelength base (10000 in Vaswani et al.)"));

}  // namespace pelab::models
