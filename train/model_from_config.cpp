// pelab — Config -> models::ModelConfig (see model_from_config.h).
#include "train/model_from_config.h"

namespace pelab {

models::ModelConfig to_model_config(const Config& cfg, int64_t vocab, int64_t train_positions) {
  const ModelConfig& m = cfg.model;
  const PEConfig& p = cfg.pe;
  models::ModelConfig out;
  out.arch = m.arch;
  out.vocab = vocab;
  out.d_model = m.d_model;
  out.heads = m.heads;
  out.d_ff = m.d_ff;
  out.encoder_layers = m.encoder_layers;
  out.decoder_layers = m.decoder_layers;
  out.dropout = m.dropout;
  out.norm = m.norm;
  out.norm_eps = m.norm_eps;
  out.activation = m.activation;
  out.bias = m.bias;
  out.tie_embeddings = m.tie_embeddings;
  out.embed_scale = m.embed_scale;
  out.dtype = m.dtype;
  out.init_std = m.init_std;
  out.seed = static_cast<uint64_t>(cfg.train.seed);

  models::PEConfig& pe = out.pe;
  pe.scheme = p.scheme;
  pe.sinusoidal_base = p.sinusoidal_base;
  pe.max_positions = p.max_positions;
  pe.shaw_k = p.shaw_k;
  pe.shaw_keys = p.shaw_keys;
  pe.shaw_values = p.shaw_values;
  pe.shaw_per_head = p.shaw_per_head;
  pe.t5_num_buckets = p.t5_num_buckets;
  pe.t5_max_distance = p.t5_max_distance;
  pe.t5_per_layer = p.t5_per_layer;
  pe.rope_base = p.rope_base;
  pe.rope_pairing = p.rope_pairing;
  pe.rope_fraction = p.rope_fraction;
  pe.rope_scaling = p.rope_scaling;
  pe.rope_scaling_factor = p.rope_scaling_factor;
  pe.rope_train_length = p.rope_train_length > 0 ? p.rope_train_length : train_positions;
  pe.yarn_beta_fast = p.yarn_beta_fast;
  pe.yarn_beta_slow = p.yarn_beta_slow;
  pe.alibi_symmetric = p.alibi_symmetric;
  return out;
}

}  // namespace pelab
