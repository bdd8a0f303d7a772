// pelab — RoPE frequency math (host side, double precision): the rotated width, the base
// frequencies θ_i = base^(−2i/rot), and the eval-time context-extension variants.
//
//   none         θ_i = base^(−2i/rot)
//   pi           position interpolation (Chen et al. 2023): positions divided by s, folded into the
//                frequencies as θ_i / s (identical angles m·θ_i/s).
//   ntk          "NTK-aware" scaling (bloc97 2023): base' = base · s^(rot/(rot−2)), so the highest
//                frequency (i = 0) is unchanged and the lowest (i = rot/2−1) is divided by exactly s.
//   dynamic_ntk  (HF DynamicNTK): at current length L > train_length the ntk formula with
//                s' = s·L/train_length − (s − 1); plain RoPE for L <= train_length.
//   yarn         YaRN (Peng et al. 2023), as HF `_compute_yarn_parameters` (truncate = true):
//                  corr(r) = rot · ln(train_length / (2π·r)) / (2 ln base)
//                  low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), rot − 1)
//                  ramp_i = clamp((i − low) / (high − low), 0, 1)   (high += 0.001 if equal)
//                  θ'_i = θ_i/s · ramp_i + θ_i · (1 − ramp_i)
//                so fast dims (many rotations over the training context) extrapolate unchanged and
//                slow dims are interpolated by s. Attention temperature: mscale = 0.1·ln(s) + 1
//                (1 for s <= 1) multiplies the cos/sin tables, i.e. both the rotated q and k, so the
//                rotary part of the logits is scaled by mscale² = 1/t (the paper's √(1/t) on q and k).
//
// The scaling variants are eval-time: the rope PE applies them only when not training.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/pe/pe.h"

namespace pelab::models {

// The rope keys of a PEConfig, read once (the attention hot path reads these fields, never the
// config's key map). train_length: pe.rope_train_length, or the training positions when it is 0.
struct RopeParams {
  double base = 10000.0;
  std::string pairing = "half", scaling = "none";
  double fraction = 1.0, factor = 1.0, beta_fast = 32.0, beta_slow = 1.0;
  int64_t train_length = 0;
  static RopeParams from(const PEConfig& c) {
    RopeParams p;
    p.base = c.get_float("rope_base");
    p.pairing = c.get_str("rope_pairing");
    p.fraction = c.get_float("rope_fraction");
    p.scaling = c.get_str("rope_scaling");
    p.factor = c.get_float("rope_scaling_factor");
    p.train_length = c.get_int("rope_train_length");
    if (p.train_length == 0) p.train_length = c.train_positions;
    p.beta_fast = c.get_float("yarn_beta_fast");
    p.beta_slow = c.get_float("yarn_beta_slow");
    return p;
  }
};

struct RopeFreqs {
  std::vector<double> inv_freq;  // rot/2 angular frequencies (radians per position)
  double mscale = 1.0;           // multiplies cos/sin (YaRN attention temperature)
};

// Rotated dims per head: round(fraction · head_dim); throws unless it is even and in [2, head_dim].
inline int64_t rope_rotary_dims(double fraction, int64_t head_dim) {
  PELAB_CHECK(fraction > 0.0 && fraction <= 1.0, "pe.rope_fraction: must be in (0, 1], got ",
              fraction);
  const int64_t rot = static_cast<int64_t>(std::llround(fraction * static_cast<double>(head_dim)));
  PELAB_CHECK(rot >= 2 && rot <= head_dim && rot % 2 == 0, "pe.rope_fraction: ", fraction,
              " of head_dim ", head_dim, " gives ", rot,
              " rotated dims; the rotated width must be even and at least 2");
  return rot;
}

// Throws pelab::Error naming the key for any invalid RoPE setting (rot from rope_rotary_dims).
// pe.rope_base's range (1, inf) is its declaration's (rope.cpp), checked by make_pe.
inline void rope_validate(const RopeParams& cfg, int64_t rot) {
  PELAB_CHECK(cfg.pairing == "half" || cfg.pairing == "interleaved",
              "pe.rope_pairing: expected half | interleaved, got '", cfg.pairing, "'");
  const std::string& m = cfg.scaling;
  PELAB_CHECK(m == "none" || m == "pi" || m == "ntk" || m == "dynamic_ntk" || m == "yarn",
              "pe.rope_scaling: expected none | pi | ntk | dynamic_ntk | yarn, got '", m, "'");
  if (m == "none") return;
  PELAB_CHECK(std::isfinite(cfg.factor) && cfg.factor > 0.0,
              "pe.rope_scaling_factor: must be > 0, got ", cfg.factor);
  if (m != "pi") {
    PELAB_CHECK(cfg.factor >= 1.0, "pe.rope_scaling_factor: ", m,
                " scaling needs a factor >= 1, got ", cfg.factor);
  }
  if (m == "ntk" || m == "dynamic_ntk") {
    PELAB_CHECK(rot > 2, "pe.rope_scaling: ", m, " needs more than 2 rotated dims, got ", rot);
  }
  if (m == "dynamic_ntk" || m == "yarn") {
    PELAB_CHECK(cfg.train_length > 0, "pe.rope_train_length: ", m,
                " scaling needs the training context length (> 0), got ", cfg.train_length);
  }
  if (m == "yarn") {
    PELAB_CHECK(cfg.beta_slow > 0.0 && cfg.beta_fast > cfg.beta_slow,
                "pe.yarn_beta_fast/yarn_beta_slow: need beta_fast > beta_slow > 0, got ",
                cfg.beta_fast, " and ", cfg.beta_slow);
  }
}

// θ_i = base^(−2i/rot), i = 0 .. rot/2 − 1.
inline std::vector<double> rope_base_inv_freq(double base, int64_t rot) {
  std::vector<double> f(static_cast<size_t>(rot / 2));
  for (int64_t i = 0; i < rot / 2; ++i)
    f[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
  return f;
}

// NTK-aware base for factor s.
inline double rope_ntk_base(double base, double s, int64_t rot) {
  return base * std::pow(s, static_cast<double>(rot) / static_cast<double>(rot - 2));
}

// YaRN attention temperature factor (HF get_mscale with mscale = 1).
inline double rope_yarn_mscale(double s) { return s <= 1.0 ? 1.0 : 0.1 * std::log(s) + 1.0; }

// Frequencies and mscale for `rot` rotated dims. `scaled` = false (training) gives plain RoPE;
// current_length (max position + 1 of the call) only matters for dynamic_ntk.
inline RopeFreqs rope_frequencies(const RopeParams& cfg, int64_t rot, int64_t current_length,
                                  bool scaled) {
  RopeFreqs out;
  const std::string& m = cfg.scaling;
  const double s = cfg.factor;
  if (!scaled || m == "none") {
    out.inv_freq = rope_base_inv_freq(cfg.base, rot);
  } else if (m == "pi") {
    out.inv_freq = rope_base_inv_freq(cfg.base, rot);
    for (double& f : out.inv_freq) f /= s;
  } else if (m == "ntk") {
    out.inv_freq = rope_base_inv_freq(rope_ntk_base(cfg.base, s, rot), rot);
  } else if (m == "dynamic_ntk") {
    const double L = static_cast<double>(current_length);
    const double T = static_cast<double>(cfg.train_length);
    double base = cfg.base;
    if (L > T) base = rope_ntk_base(cfg.base, s * L / T - (s - 1.0), rot);
    out.inv_freq = rope_base_inv_freq(base, rot);
  } else if (m == "yarn") {
    const double kPi = 3.14159265358979323846;
    const double dim = static_cast<double>(rot);
    const double T = static_cast<double>(cfg.train_length);
    auto corr = [&](double rotations) {
      return dim * std::log(T / (rotations * 2.0 * kPi)) / (2.0 * std::log(cfg.base));
    };
    double low = std::max(std::floor(corr(cfg.beta_fast)), 0.0);
    double high = std::min(std::ceil(corr(cfg.beta_slow)), dim - 1.0);
    if (low == high) high += 0.001;
    const std::vector<double> extra = rope_base_inv_freq(cfg.base, rot);
    out.inv_freq.resize(extra.size());
    for (size_t i = 0; i < extra.size(); ++i) {
      double ramp = (static_cast<double>(i) - low) / (high - low);
      ramp = ramp < 0.0 ? 0.0 : (ramp > 1.0 ? 1.0 : ramp);
      out.inv_freq[i] = extra[i] / s * ramp + extra[i] * (1.0 - ramp);
    }
    out.mscale = rope_yarn_mscale(s);
  } else {
    fail("pe.rope_scaling: unknown scaling '", m, "'");
  }
  return out;
}
// The cos/sin tables [L, P] (row-major, P = inv_freq.size()) of the angles pos[m]·inv_freq[i], each
// times scale(m, i): RoPE passes its mscale, xPos its per-dimension decay. rotate_pairs takes them.
template <class Scale>
inline void rope_cos_sin(const std::vector<int64_t>& pos, const std::vector<double>& inv_freq,
                         Scale scale, std::vector<double>& cos_out, std::vector<double>& sin_out) {
  const size_t L = pos.size(), P = inv_freq.size();
  cos_out.assign(L * P, 0.0);
  sin_out.assign(L * P, 0.0);
  for (size_t m = 0; m < L; ++m)
    for (size_t i = 0; i < P; ++i) {
      const double a = static_cast<double>(pos[m]) * inv_freq[i], g = scale(m, i);
      cos_out[m * P + i] = std::cos(a) * g;
      sin_out[m * P + i] = std::sin(a) * g;
    }
}

inline RopeFreqs rope_frequencies(const PEConfig& cfg, int64_t rot, int64_t current_length, bool scaled) {
  return rope_frequencies(RopeParams::from(cfg), rot, current_length, scaled);
}

}  // namespace pelab::models
