// pelab — the transformer (seq2seq and decoder-only), its KV-cache decoding path, greedy decoding
// and ModelConfig::validate().
#include "models/transformer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "pelab/autograd.h"

namespace pelab::models {

// ---------------- ModelConfig ----------------
namespace {
void check_one_of(const char* key, const std::string& value, const std::vector<std::string>& ok) {
  for (const auto& o : ok)
    if (value == o) return;
  std::string list;
  for (size_t i = 0; i < ok.size(); ++i) list += (i ? ", " : "") + ok[i];
  fail(key, ": unknown value '", value, "' (valid: ", list, ")");
}
}  // namespace

void ModelConfig::validate() const {
  check_one_of("model.arch", arch, {"seq2seq", "decoder"});
  PELAB_CHECK(vocab >= 2, "model.vocab: must be >= 2, got ", vocab);
  PELAB_CHECK(d_model >= 1, "model.d_model: must be >= 1, got ", d_model);
  PELAB_CHECK(heads >= 1, "model.heads: must be >= 1, got ", heads);
  PELAB_CHECK(d_model % heads == 0, "model.heads: d_model ", d_model, " is not divisible by heads ",
              heads);
  PELAB_CHECK(d_ff >= 1, "model.d_ff: must be >= 1, got ", d_ff);
  if (arch == "seq2seq")
    PELAB_CHECK(encoder_layers >= 1, "model.encoder_layers: must be >= 1 for arch seq2seq, got ",
                encoder_layers);
  PELAB_CHECK(encoder_layers >= 0, "model.encoder_layers: must be >= 0, got ", encoder_layers);
  PELAB_CHECK(decoder_layers >= 1, "model.decoder_layers: must be >= 1, got ", decoder_layers);
  PELAB_CHECK(dropout >= 0 && dropout < 1, "model.dropout: must be in [0, 1), got ", dropout);
  check_one_of("model.norm", norm, {"pre", "post"});
  PELAB_CHECK(norm_eps > 0, "model.norm_eps: must be > 0, got ", norm_eps);
  check_one_of("model.activation", activation, {"gelu", "relu"});
  check_one_of("model.embed_scale", embed_scale, {"auto", "sqrt_d", "none"});
  check_one_of("model.attention_length_scale", attention_length_scale, {"off", "log_n", "ssmax"});
  check_one_of("model.dtype", dtype, {"float32", "float64"});
  PELAB_CHECK(init_std >= 0 && init_std <= dtype_max(dtype_value()),
              "model.init_std: must be >= 0 and finite in model.dtype ", dtype, ", got ", init_std);
  validate_pe(pe, PEModelDims{d_model, heads, dtype_value()});
}

// ---------------- helpers ----------------
namespace {
std::vector<int64_t> iota_positions(int64_t start, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = start + i;
  return p;
}

// Explicit positions for B rows of L tokens (shared, or one row per batch row), or 0..L-1.
Positions resolve_positions(const Positions* pos, int64_t B, int64_t L, const char* what) {
  if (!pos) return iota_positions(0, L);
  PELAB_CHECK(pos->len == L, what, ": ", pos->len, " explicit positions given for a sequence of length ", L);
  PELAB_CHECK(pos->shared() || pos->rows == B, what, ": explicit positions for ", pos->rows,
              " rows given for a batch of ", B, " rows (give one row shared by the batch, or one per row)");
  return *pos;
}

void check_ids(const Tensor& ids, const char* what) {
  PELAB_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::Int64, what,
              ": token ids must be Int64 [B, L], got ", ids.defined() ? ids.str() : "undefined");
}

void check_mask(const Tensor& mask, const Tensor& ids, const char* what) {
  if (!mask.defined()) return;
  PELAB_CHECK(mask.shape() == ids.shape(), what, ": mask shape ", shape_str(mask.shape()),
              " differs from the ids shape ", shape_str(ids.shape()));
}

double embed_scale_for(const ModelConfig& cfg, const PositionalEncoding& pe) {
  if (cfg.embed_scale == "sqrt_d") return std::sqrt(static_cast<double>(cfg.d_model));
  if (cfg.embed_scale == "none") return 1.0;
  return pe.additive() ? std::sqrt(static_cast<double>(cfg.d_model)) : 1.0;  // auto
}

// Pre-LN: x + drop(f(LN(x)));  post-LN: LN(x + drop(f(x))).
template <class F>
Tensor residual(const Tensor& x, const LayerNorm& norm, bool pre, double p, bool training,
                Generator& gen, F f) {
  if (pre) return add(x, dropout(f(norm.forward(x)), p, training, gen));
  return norm.forward(add(x, dropout(f(x), p, training, gen)));
}

StackInfo stack_info(const ModelConfig& cfg, StackKind kind) {
  StackInfo s;
  s.kind = kind;
  s.layers = kind == StackKind::Encoder ? cfg.encoder_layers : cfg.decoder_layers;
  s.d_model = cfg.d_model;
  s.heads = cfg.heads;
  s.dtype = cfg.dtype_value();
  return s;
}

Tensor tokens_to_hidden(const Tensor& weight, const Tensor& ids, double scale) {
  Tensor x = embedding(weight, ids);
  return scale == 1.0 ? x : mul_scalar(x, scale);
}

}  // namespace

// ---------------- FeedForward ----------------
FeedForward::FeedForward(int64_t d_model, int64_t d_ff, const std::string& activation,
                         double dropout, bool bias, Generator& gen, DType dtype)
    : relu(activation == "relu"), dropout_p(dropout) {
  LinearOptions opt;
  opt.bias = bias;
  fc1 = register_module("fc1", std::make_shared<Linear>(d_model, d_ff, gen, opt, dtype));
  fc2 = register_module("fc2", std::make_shared<Linear>(d_ff, d_model, gen, opt, dtype));
}

Tensor FeedForward::forward(const Tensor& x, Generator& gen) const {
  Tensor h = fc1->forward(x);
  h = relu ? pelab::relu(h) : gelu(h, false);
  h = dropout(h, dropout_p, is_training(), gen);
  return fc2->forward(h);
}

// AttnSite::row_len for a batch of B rows at positions pos under mask [B, n] (1 = real; undefined
// = every token real): per row 1 + the largest position of a real token. Empty unless the scheme
// asks for it (reading the mask on the host costs a device sync).
static std::vector<int64_t> row_lengths(const PositionalEncoding& pe, const Tensor& mask,
                                        const Positions& pos, int64_t B) {
  if (!pe.needs_row_lengths()) return {};
  const int64_t n = pos.len;
  if (!mask.defined() && !pos.shared()) {
    std::vector<int64_t> out(static_cast<size_t>(B), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) out[b] = std::max(out[b], pos.at(b, j) + 1);
    return out;
  }
  int64_t all = 0;
  for (int64_t p : pos.ids) all = std::max(all, p + 1);
  if (!mask.defined()) return std::vector<int64_t>(static_cast<size_t>(B), all);
  PELAB_CHECK(mask.numel() == B * n, "row lengths: mask ", shape_str(mask.shape()), " for ", B,
              " rows of ", n, " positions");
  const std::vector<double> m = mask.to_vector();
  std::vector<int64_t> out(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < n; ++j)
      if (m[static_cast<size_t>(b * n + j)] != 0) out[b] = std::max(out[b], pos.at(b, j) + 1);
  return out;
}

// ---------------- layers ----------------
EncoderLayer::EncoderLayer(const ModelConfig& cfg, Generator& gen)
    : pre_norm(cfg.norm == "pre"), dropout_p(cfg.dropout) {
  const DType dt = cfg.dtype_value();
  self_attn = register_module(
      "self_attn", std::make_shared<MultiHeadAttention>(
                       cfg.d_model, cfg.heads, cfg.dropout, cfg.bias, gen, dt,
                       length_scale_from_name(cfg.attention_length_scale)));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(cfg.d_model, cfg.norm_eps, true, dt));
  ff = register_module("ff", std::make_shared<FeedForward>(cfg.d_model, cfg.d_ff, cfg.activation,
                                                           cfg.dropout, cfg.bias, gen, dt));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(cfg.d_model, cfg.norm_eps, true, dt));
}

Tensor EncoderLayer::forward(const Tensor& x, const Tensor& blocked, PositionalEncoding& pe,
                             const Positions& pos, int64_t layer, Generator& gen,
                             const std::vector<int64_t>* row_len) {
  AttnSite site;
  site.row_len = row_len;
  site.kind = AttnKind::EncoderSelf;
  site.layer = layer;
  site.q_pos = pos;
  site.k_pos = pos;
  site.causal = false;
  const bool tr = is_training();
  Tensor h = residual(x, *norm1, pre_norm, dropout_p, tr, gen, [&](const Tensor& in) {
    return self_attn->forward(in, in, blocked, pe, site, gen);
  });
  return residual(h, *norm2, pre_norm, dropout_p, tr, gen,
                  [&](const Tensor& in) { return ff->forward(in, gen); });
}

DecoderLayer::DecoderLayer(const ModelConfig& cfg, bool cross, Generator& gen)
    : pre_norm(cfg.norm == "pre"), dropout_p(cfg.dropout) {
  const DType dt = cfg.dtype_value();
  auto mha = [&] {
    return std::make_shared<MultiHeadAttention>(cfg.d_model, cfg.heads, cfg.dropout, cfg.bias, gen,
                                                dt, length_scale_from_name(cfg.attention_length_scale));
  };
  auto ln = [&] { return std::make_shared<LayerNorm>(cfg.d_model, cfg.norm_eps, true, dt); };
  self_attn = register_module("self_attn", mha());
  norm_self = register_module("norm1", ln());
  if (cross) {
    cross_attn = register_module("cross_attn", mha());
    norm_cross = register_module("norm2", ln());
  }
  ff = register_module("ff", std::make_shared<FeedForward>(cfg.d_model, cfg.d_ff, cfg.activation,
                                                           cfg.dropout, cfg.bias, gen, dt));
  norm_ff = register_module(cross ? "norm3" : "norm2", ln());
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& self_blocked, const Tensor& memory,
                             const Tensor& memory_blocked, PositionalEncoding& pe,
                             const Positions& tgt_pos,
                             const Positions& all_pos,
                             const Positions& src_pos, int64_t layer, Generator& gen,
                             LayerKV* kv, const std::vector<int64_t>* row_len) {
  const bool tr = is_training();
  AttnSite site;
  site.row_len = row_len;
  site.kind = AttnKind::DecoderSelf;
  site.layer = layer;
  site.q_pos = tgt_pos;
  site.k_pos = tgt_pos;
  site.causal = true;
  Tensor h = residual(x, *norm_self, pre_norm, dropout_p, tr, gen, [&](const Tensor& in) {
    MultiHeadAttention::CachedKV c;
    if (kv) c = {&kv->self_k, &kv->self_v, &all_pos};
    return self_attn->forward(in, in, self_blocked, pe, site, gen, kv ? &c : nullptr);
  });
  if (cross_attn) {
    AttnSite cs;
    cs.kind = AttnKind::Cross;
    cs.layer = layer;
    cs.q_pos = tgt_pos;
    cs.k_pos = src_pos;
    cs.causal = false;
    h = residual(h, *norm_cross, pre_norm, dropout_p, tr, gen, [&](const Tensor& in) {
      MultiHeadAttention::CachedKV c;
      if (kv) c = {&kv->cross_k, &kv->cross_v, nullptr};
      return cross_attn->forward(in, memory, memory_blocked, pe, cs, gen, kv ? &c : nullptr);
    });
  }
  return residual(h, *norm_ff, pre_norm, dropout_p, tr, gen,
                  [&](const Tensor& in) { return ff->forward(in, gen); });
}

// ---------------- stacks ----------------
Encoder::Encoder(const ModelConfig& cfg, Tensor embed_weight, Generator& gen)
    : dropout_p(cfg.dropout) {
  embed = register_module("embed", std::make_shared<TokenTable>(std::move(embed_weight)));
  pe = register_module("pe", make_pe(cfg.pe, stack_info(cfg, StackKind::Encoder), gen));
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.encoder_layers; ++i) layers->push_back(std::make_shared<EncoderLayer>(cfg, gen));
  if (cfg.norm == "pre")
    norm = register_module("norm", std::make_shared<LayerNorm>(cfg.d_model, cfg.norm_eps, true,
                                                               cfg.dtype_value()));
  embed_scale = embed_scale_for(cfg, *pe);
}

Tensor Encoder::forward(const Tensor& src, const Tensor& src_mask, const Positions& pos,
                        Generator& gen) {
  check_ids(src, "Encoder::forward");
  check_mask(src_mask, src, "Encoder::forward");
  const int64_t S = src.size(1);
  Tensor x = pe->embed(tokens_to_hidden(embed->weight, src, embed_scale), pos);
  x = dropout(x, dropout_p, is_training(), gen);
  Tensor blocked = attention_mask(src_mask, S, S, false, x.dtype(), x.device());
  const std::vector<int64_t> rows = row_lengths(*pe, src_mask, pos, src.size(0));
  const std::vector<int64_t>* rl = rows.empty() ? nullptr : &rows;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<EncoderLayer>(i).forward(x, blocked, *pe, pos, static_cast<int64_t>(i), gen, rl);
  return norm ? norm->forward(x) : x;
}

Decoder::Decoder(const ModelConfig& cfg, Tensor embed_weight, bool cross_, Generator& gen)
    : dropout_p(cfg.dropout), cross(cross_) {
  embed = register_module("embed", std::make_shared<TokenTable>(std::move(embed_weight)));
  pe = register_module("pe", make_pe(cfg.pe, stack_info(cfg, StackKind::Decoder), gen));
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.decoder_layers; ++i)
    layers->push_back(std::make_shared<DecoderLayer>(cfg, cross, gen));
  if (cfg.norm == "pre")
    norm = register_module("norm", std::make_shared<LayerNorm>(cfg.d_model, cfg.norm_eps, true,
                                                               cfg.dtype_value()));
  embed_scale = embed_scale_for(cfg, *pe);
}

Tensor Decoder::embed_tokens(const Tensor& ids, const Positions& pos, Generator& gen) {
  Tensor x = pe->embed(tokens_to_hidden(embed->weight, ids, embed_scale), pos);
  return dropout(x, dropout_p, is_training(), gen);
}

Tensor Decoder::forward(const Tensor& tgt, const Tensor& tgt_mask, const Positions& pos,
                        const Tensor& memory, const Tensor& memory_mask,
                        const Positions& src_pos, Generator& gen) {
  check_ids(tgt, "Decoder::forward");
  check_mask(tgt_mask, tgt, "Decoder::forward");
  const int64_t T = tgt.size(1);
  Tensor x = embed_tokens(tgt, pos, gen);
  Tensor self_blocked = attention_mask(tgt_mask, T, T, true, x.dtype(), x.device());
  Tensor mem_blocked;
  if (cross) {
    PELAB_CHECK(memory.defined() && memory.dim() == 3 && memory.size(0) == tgt.size(0) &&
                    memory.size(2) == x.size(2),
                "Decoder::forward: encoder output must be [", tgt.size(0), ", S, ", x.size(2),
                "], got ", memory.defined() ? shape_str(memory.shape()) : "undefined");
    PELAB_CHECK(src_pos.len == memory.size(1), "Decoder::forward: ", src_pos.len,
                " source positions for ", memory.size(1), " encoder outputs");
    mem_blocked = attention_mask(memory_mask, T, memory.size(1), false, x.dtype(), x.device());
  }
  const std::vector<int64_t> rows = row_lengths(*pe, tgt_mask, pos, tgt.size(0));
  const std::vector<int64_t>* rl = rows.empty() ? nullptr : &rows;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<DecoderLayer>(i).forward(x, self_blocked, memory, mem_blocked, *pe, pos, pos,
                                            src_pos, static_cast<int64_t>(i), gen, nullptr, rl);
  return norm ? norm->forward(x) : x;
}

Tensor Decoder::step(DecoderCache& cache, const Tensor& ids, const Tensor& mask,
                     const Positions& pos, Generator& gen) {
  check_ids(ids, "Decoder::step");
  check_mask(mask, ids, "Decoder::step");
  const int64_t B = ids.size(0), n = ids.size(1);
  PELAB_CHECK(B == cache.batch, "Decoder::step: the cache holds ", cache.batch, " rows, got ids ",
              shape_str(ids.shape()));
  PELAB_CHECK(pos.len == n && (pos.shared() || pos.rows == B), "Decoder::step: positions [",
              pos.rows, ", ", pos.len, "] for ", B, " rows of ", n, " tokens");
  PELAB_CHECK(cache.layers.size() == layers->size(), "Decoder::step: the cache has ",
              cache.layers.size(), " layers, the decoder ", layers->size());
  PELAB_CHECK(!cross || cache.layers.empty() || cache.layers[0].cross_k.defined(),
              "Decoder::step: a seq2seq decoder needs a cache from start_cache(memory, src_mask)");
  const int64_t before = cache.offset();
  Tensor x = embed_tokens(ids, pos, gen);
  // Key-padding mask over every cached token, kept only once some token is padding.
  if (mask.defined() || cache.self_key_mask.defined()) {
    std::vector<double> all(static_cast<size_t>(B * (before + n)), 1.0);
    if (cache.self_key_mask.defined()) {
      const std::vector<double> old = cache.self_key_mask.to_vector();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < before; ++j) all[b * (before + n) + j] = old[b * before + j];
    }
    if (mask.defined()) {
      const std::vector<double> m = mask.to_vector();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j) all[b * (before + n) + before + j] = m[b * n + j];
    }
    cache.self_key_mask = Tensor::from_vector(all, {B, before + n}, x.dtype(), x.device());
  }
  cache.positions.append(pos);
  Tensor self_blocked =
      attention_mask(cache.self_key_mask, n, before + n, true, x.dtype(), x.device());
  // Row lengths over every token so far (cached + new).
  const std::vector<int64_t> rows = row_lengths(*pe, cache.self_key_mask, cache.positions, B);
  const std::vector<int64_t>* rl = rows.empty() ? nullptr : &rows;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<DecoderLayer>(i).forward(x, self_blocked, Tensor(), cache.memory_blocked, *pe,
                                            pos, cache.positions, cache.src_positions,
                                            static_cast<int64_t>(i), gen, &cache.layers[i], rl);
  return norm ? norm->forward(x) : x;
}

// ---------------- Transformer ----------------
Transformer::Transformer(const ModelConfig& cfg) : cfg_(cfg), rng_(rng_mix(cfg.seed, 0x5eedd0u)) {
  cfg_.validate();
  Generator gen(cfg_.seed);
  const DType dt = cfg_.dtype_value();
  auto table = [&] {
    Tensor w = Tensor::empty({cfg_.vocab, cfg_.d_model}, dt);
    init::normal_(w, 0.0, cfg_.init_std, gen);
    return w;
  };
  const bool s2s = cfg_.is_seq2seq();
  Tensor enc_w;
  if (s2s) {
    enc_w = table();
    encoder = register_module("encoder", std::make_shared<Encoder>(cfg_, enc_w, gen));
  }
  Tensor dec_w = (s2s && cfg_.tie_embeddings) ? enc_w : table();
  decoder = register_module("decoder", std::make_shared<Decoder>(cfg_, dec_w, s2s, gen));
  Tensor head_w = cfg_.tie_embeddings ? dec_w : table();
  lm_head = register_module("lm_head", std::make_shared<TokenTable>(head_w));
}

Tensor Transformer::encode(const Tensor& src, const Tensor& src_mask,
                           const Positions* src_pos) {
  PELAB_CHECK(encoder, "Transformer::encode: arch '", cfg_.arch, "' has no encoder");
  check_ids(src, "Transformer::encode");
  return encoder->forward(src, src_mask,
                          resolve_positions(src_pos, src.size(0), src.size(1), "encode"), rng_);
}

Tensor Transformer::decode(const Tensor& tgt_in, const Tensor& tgt_mask, const Tensor& memory,
                           const Tensor& src_mask, const Positions* tgt_pos,
                           const Positions* src_pos) {
  PELAB_CHECK(encoder, "Transformer::decode: arch '", cfg_.arch,
              "' has no encoder (use forward_decoder)");
  check_ids(tgt_in, "Transformer::decode");
  PELAB_CHECK(memory.defined() && memory.dim() == 3, "Transformer::decode: encoder output must be "
              "[B, S, D], got ", memory.defined() ? shape_str(memory.shape()) : "undefined");
  if (src_mask.defined())
    PELAB_CHECK(src_mask.dim() == 2 && src_mask.size(0) == memory.size(0) &&
                    src_mask.size(1) == memory.size(1),
                "Transformer::decode: source mask ", shape_str(src_mask.shape()),
                " does not match the encoder output ", shape_str(memory.shape()));
  const Positions tp =
      resolve_positions(tgt_pos, tgt_in.size(0), tgt_in.size(1), "decode (target)");
  const Positions sp =
      resolve_positions(src_pos, memory.size(0), memory.size(1), "decode (source)");
  return logits(decoder->forward(tgt_in, tgt_mask, tp, memory, src_mask, sp, rng_));
}

Tensor Transformer::forward_seq2seq(const Tensor& src, const Tensor& src_mask, const Tensor& tgt_in,
                                    const Tensor& tgt_mask, const Positions* src_pos,
                                    const Positions* tgt_pos) {
  Tensor memory = encode(src, src_mask, src_pos);
  return decode(tgt_in, tgt_mask, memory, src_mask, tgt_pos, src_pos);
}

Tensor Transformer::forward_decoder(const Tensor& ids, const Tensor& mask,
                                    const Positions* pos) {
  PELAB_CHECK(!encoder, "Transformer::forward_decoder: arch '", cfg_.arch,
              "' is seq2seq (use forward_seq2seq)");
  check_ids(ids, "Transformer::forward_decoder");
  const Positions p = resolve_positions(pos, ids.size(0), ids.size(1), "forward_decoder");
  return logits(decoder->forward(ids, mask, p, Tensor(), Tensor(), {}, rng_));
}

Tensor Transformer::logits(const Tensor& hidden) const {
  return linear(hidden, lm_head->weight, Tensor());
}

DecoderCache Transformer::start_cache(const Tensor& memory, const Tensor& src_mask,
                                      const Positions* src_pos) {
  PELAB_CHECK(encoder, "Transformer::start_cache: arch '", cfg_.arch,
              "' has no encoder (use start_cache(batch))");
  PELAB_CHECK(memory.defined() && memory.dim() == 3 && memory.size(2) == cfg_.d_model,
              "Transformer::start_cache: encoder output must be [B, S, ", cfg_.d_model, "], got ",
              memory.defined() ? shape_str(memory.shape()) : "undefined");
  const int64_t B = memory.size(0), S = memory.size(1);
  if (src_mask.defined())
    PELAB_CHECK(src_mask.dim() == 2 && src_mask.size(0) == B && src_mask.size(1) == S,
                "Transformer::start_cache: source mask ", shape_str(src_mask.shape()),
                " does not match the encoder output ", shape_str(memory.shape()));
  DecoderCache c;
  c.batch = B;
  c.src_positions = resolve_positions(src_pos, B, S, "start_cache (source)");
  c.memory_blocked = attention_mask(src_mask, 1, S, false, memory.dtype(), memory.device());
  c.layers.resize(decoder->layers->size());
  for (size_t i = 0; i < c.layers.size(); ++i) {
    MultiHeadAttention& ca = *decoder->layers->at<DecoderLayer>(i).cross_attn;
    c.layers[i].cross_k = ca.project(*ca.k, memory);
    c.layers[i].cross_v = ca.project(*ca.v, memory);
  }
  return c;
}

DecoderCache Transformer::start_cache(int64_t batch) {
  PELAB_CHECK(!encoder, "Transformer::start_cache(batch): arch '", cfg_.arch,
              "' is seq2seq (use start_cache(memory, src_mask))");
  PELAB_CHECK(batch >= 1, "Transformer::start_cache: batch must be >= 1, got ", batch);
  DecoderCache c;
  c.batch = batch;
  c.layers.resize(decoder->layers->size());
  return c;
}

Tensor Transformer::decode_step(DecoderCache& cache, const Tensor& ids, const Tensor& mask,
                                const Positions* pos) {
  check_ids(ids, "Transformer::decode_step");
  const Positions p = pos ? *pos : Positions(iota_positions(cache.offset(), ids.size(1)));
  return logits(decoder->step(cache, ids, mask, p, rng_));
}

// ---------------- greedy decoding ----------------
namespace {
// Argmax of the last position of logits [B, L, V].
std::vector<int64_t> last_argmax(const Tensor& logits) {
  const int64_t B = logits.size(0), L = logits.size(1), V = logits.size(2);
  Tensor last = reshape(slice(logits, 1, L - 1, L), {B, V});
  return argmax(last, 1).to_int_vector();
}

Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows, Device device) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_ints(flat, {static_cast<int64_t>(rows.size()),
                                  static_cast<int64_t>(rows.empty() ? 0 : rows[0].size())},
                           device);
}

Device model_device(const Transformer& m) { return m.lm_head->weight.device(); }

// Records a step's tokens for the rows of `group`; returns true when every row is finished.
bool take_step(const std::vector<int64_t>& next, const std::vector<size_t>& group, int64_t eos,
               GreedyResult& r) {
  bool all = true;
  for (size_t i = 0; i < group.size(); ++i) {
    const size_t row = group[i];
    if (!r.finished[row]) {
      if (next[i] == eos)
        r.finished[row] = true;
      else
        r.tokens[row].push_back(next[i]);
    }
    all &= r.finished[row];
  }
  return all;
}

// The one greedy loop, for both architectures: continues `seq` (rows of equal length, the
// decoder's tokens so far: seq2seq [bos], decoder-only the prompts) by up to max_len argmax
// tokens, recording them in r for the rows `group` of the result. memory: the encoder output
// (seq2seq; null for decoder-only). tgt_pos / src_pos: explicit positions or null (0..L-1),
// shared or one row per row of `group`.
// With the cache a step feeds the tokens not yet cached (the whole prefix first, then the newest
// token); without, it reruns the full forward over seq.
void greedy_loop(Transformer& model, std::vector<std::vector<int64_t>> seq,
                 const std::vector<size_t>& group, const Tensor* memory, const Tensor& src_mask,
                 const Positions* src_pos, const Positions* tgt_pos,
                 int64_t max_len, bool use_cache, int64_t eos, GreedyResult& r,
                 const std::function<bool()>& stop) {
  const int64_t B = static_cast<int64_t>(group.size());
  const Device dev = model_device(model);
  DecoderCache cache;
  if (use_cache)
    cache = memory ? model.start_cache(*memory, src_mask, src_pos) : model.start_cache(B);
  for (int64_t t = 0; t < max_len; ++t) {
    if (stop && stop()) {
      r.stopped = true;
      return;
    }
    const int64_t L = static_cast<int64_t>(seq[0].size());
    const int64_t from = use_cache ? cache.offset() : 0;  // first token this step feeds
    Positions p;
    if (tgt_pos) p = tgt_pos->columns(from, L);
    const Positions* pp = tgt_pos ? &p : nullptr;
    Tensor logits;
    if (use_cache) {
      std::vector<std::vector<int64_t>> cur(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) cur[b].assign(seq[b].begin() + from, seq[b].end());
      logits = model.decode_step(cache, ids_tensor(cur, dev), Tensor(), pp);
    } else if (memory) {
      logits = model.decode(ids_tensor(seq, dev), Tensor(), *memory, src_mask, pp, src_pos);
    } else {
      logits = model.forward_decoder(ids_tensor(seq, dev), Tensor(), pp);
    }
    const std::vector<int64_t> next = last_argmax(logits);
    for (int64_t b = 0; b < B; ++b) seq[b].push_back(next[b]);
    if (take_step(next, group, eos, r)) break;
  }
}

// Checks that explicit target positions cover the `fed` tokens a decode feeds, and that explicit
// positions are shared or have one row per decoded row (`rows`).
void check_tgt_positions(const GreedyPositions* pos, int64_t fed, int64_t rows) {
  if (!pos) return;
  PELAB_CHECK(pos->tgt.len >= fed, "greedy_decode: ", pos->tgt.len,
              " explicit target positions for a decode that feeds ", fed,
              " tokens (give at least that many, or a smaller max_len)");
  for (const Positions* p : {&pos->src, &pos->tgt})
    PELAB_CHECK(p->shared() || p->rows == rows, "greedy_decode: explicit ",
                p == &pos->src ? "source" : "target", " positions for ", p->rows,
                " rows given for ", rows, " decoded rows (give one row shared by all, or one per row)");
}
}  // namespace

GreedyResult greedy_decode(Transformer& model, const Tensor& src, const Tensor& src_mask,
                           int64_t max_len, bool use_cache, SpecialIds ids,
                           const GreedyPositions* pos, const std::function<bool()>& stop) {
  PELAB_CHECK(model.is_seq2seq(), "greedy_decode: this overload is for seq2seq models; arch is '",
              model.config().arch, "' (pass prompts instead)");
  PELAB_CHECK(max_len >= 0, "greedy_decode: max_len must be >= 0, got ", max_len);
  check_ids(src, "greedy_decode");
  check_tgt_positions(pos, max_len, src.size(0));
  NoGradGuard ng;
  EvalModeGuard eg(model);
  const int64_t B = src.size(0);
  GreedyResult r;
  r.tokens.resize(B);
  r.finished.assign(B, false);
  if (max_len == 0 || B == 0) return r;
  std::vector<size_t> rows(B);
  for (int64_t b = 0; b < B; ++b) rows[b] = static_cast<size_t>(b);
  const Positions* src_pos = pos ? &pos->src : nullptr;
  Tensor memory = model.encode(src, src_mask, src_pos);
  greedy_loop(model, std::vector<std::vector<int64_t>>(B, std::vector<int64_t>{ids.bos}), rows,
              &memory, src_mask, src_pos, pos ? &pos->tgt : nullptr, max_len, use_cache, ids.eos,
              r, stop);
  return r;
}

GreedyResult greedy_decode(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                           int64_t max_len, bool use_cache, SpecialIds ids,
                           const GreedyPositions* pos, const std::function<bool()>& stop) {
  PELAB_CHECK(!model.is_seq2seq(), "greedy_decode: this overload is for decoder-only models; arch "
              "is '", model.config().arch, "' (pass a source batch instead)");
  PELAB_CHECK(max_len >= 0, "greedy_decode: max_len must be >= 0, got ", max_len);
  PELAB_CHECK(!pos || pos->src.len == 0, "greedy_decode: a decoder-only model has no source; got ",
              pos ? pos->src.len : 0, " explicit source positions");
  NoGradGuard ng;
  EvalModeGuard eg(model);
  GreedyResult r;
  r.tokens.resize(prompts.size());
  r.finished.assign(prompts.size(), false);
  std::map<size_t, std::vector<size_t>> groups;  // prompt length -> rows
  for (size_t i = 0; i < prompts.size(); ++i) {
    PELAB_CHECK(!prompts[i].empty(), "greedy_decode: prompt ", i,
                " is empty (start it with at least a bos token)");
    groups[prompts[i].size()].push_back(i);
  }
  if (max_len == 0 || groups.empty()) return r;
  check_tgt_positions(pos, static_cast<int64_t>(groups.rbegin()->first) + max_len - 1,
                      static_cast<int64_t>(prompts.size()));
  for (const auto& g : groups) {
    std::vector<std::vector<int64_t>> seq;
    for (size_t row : g.second) seq.push_back(prompts[row]);
    const Positions tgt = pos ? pos->tgt.select_rows(g.second) : Positions();
    greedy_loop(model, std::move(seq), g.second, nullptr, Tensor(), nullptr,
                pos ? &tgt : nullptr, max_len, use_cache, ids.eos, r, stop);
    if (r.stopped) break;
  }
  return r;
}

}  // namespace pelab::models
