// pelab — the one mapping from the run configuration (train/config.h: `model:` and `pe:` sections)
// to the model's own settings (models/model_config.h, models/pe/pe.h).
#pragma once
#include <cstdint>

#include "models/model_config.h"
#include "train/config.h"

namespace pelab {

// Copies every model.* and pe.* key, sets vocab, seed = train.seed and, when pe.rope_train_length is
// 0, rope_train_length = train_positions (the longest training sequence in tokens, see
// TaskData::train_positions()). pe.randomized_* are trainer settings and have no model field.
models::ModelConfig to_model_config(const Config& cfg, int64_t vocab, int64_t train_positions);

}  // namespace pelab
