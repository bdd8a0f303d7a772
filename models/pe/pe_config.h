// pelab — the `pe:` config section as the model sees it (see PEConfig). Kept apart from pe.h so
// that headers needing only the settings (models/model_config.h, train/config.h) stay light.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace pelab::models {

// Every PE setting (the `pe:` config section). The scheme-independent fields are members; every
// other key is owned by the scheme that declares it at registration (PEScheme::key, in the
// scheme's own file) and read with get_int / get_float / get_bool / get_str, which give the
// declared default for a key not set. Schemes read their keys once, when they are built.
enum class PEValueType { Int, Float, Bool, String };

struct PEValue {
  PEValueType type = PEValueType::Int;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::string s;
};

struct PEConfig {
  std::string scheme = "sinusoidal";  // a registered scheme name (pe_names())
  // Randomised positions (Ruoss et al. 2023): trainer settings, the PE objects ignore them.
  bool randomized_positions = false;
  int64_t randomized_max_position = 1024;
  // Not a config key: the positions of the longest training sequence, set from the data by
  // to_model_config (schemes may use it as their original context length, e.g. RoPE scaling).
  int64_t train_positions = 0;
  // Not a config key: the task's position ID levels (1, or 2 for two-level IDs: Positions::ids2),
  // set from the data by to_model_config. A scheme that declares a second channel
  // (PEScheme::position_channels) builds its second-level parameters when it is 2.
  int64_t position_channels = 1;
  // The scheme keys set explicitly (name without "pe."); absent = the declared default.
  std::map<std::string, PEValue> values;

  // Throw pelab::Error for a key no scheme declares or a type that differs from the declared one.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_str(const std::string& key) const;
  void set(const std::string& key, int64_t v);
  void set(const std::string& key, int v) { set(key, static_cast<int64_t>(v)); }
  void set(const std::string& key, double v);  // also for an int key holding a whole number
  void set(const std::string& key, bool v);
  void set(const std::string& key, const std::string& v);
  void set(const std::string& key, const char* v) { set(key, std::string(v)); }
};


}  // namespace pelab::models
