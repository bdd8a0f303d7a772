// pelab — the run configuration's model settings (Config::model, the models/ struct itself) plus what
// only the data and the train section know.
#pragma once
#include <cstdint>

#include "models/model_config.h"
#include "train/config.h"

namespace pelab {

// cfg.model with vocab, seed = train.seed, pe.position_channels = the task's position ID levels
// and pe.train_positions = train_positions (the longest
// training sequence in tokens, see TaskData::train_positions(); RoPE uses it when
// pe.rope_train_length is 0).
models::ModelConfig to_model_config(const Config& cfg, int64_t vocab, int64_t train_positions);

}  // namespace pelab
