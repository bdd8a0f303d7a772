// pelab — Config -> models::ModelConfig (see model_from_config.h).
#include "train/model_from_config.h"

#include "data/tasks.h"

namespace pelab {

models::ModelConfig to_model_config(const Config& cfg, int64_t vocab, int64_t train_positions) {
  models::ModelConfig out = cfg.model;  // the config holds the model's own struct: no field copy
  out.vocab = vocab;
  out.seed = static_cast<uint64_t>(cfg.train.seed);
  out.pe.train_positions = train_positions;
  // The task's position ID levels (two for multi_addition's coupled IDs); lm/textfile have one.
  if (cfg.task.position_ids != "sequential" && cfg.task.name != "lm" && cfg.task.name != "textfile")
    out.pe.position_channels = data::make_task(task_spec(cfg))->position_channels();
  return out;
}

}  // namespace pelab
