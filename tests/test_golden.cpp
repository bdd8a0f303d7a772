// Golden tests against an independent PyTorch reference (tools/torch_reference.py, written from
// docs/model.md). For every PE scheme × architecture (plus RoPE pairing / partial-rotary, post-LN,
// ReLU, tied-embedding, per-head / per-layer and explicit-position variants) a tiny float32 model
// is loaded from tests/golden/<case>.input.h5 (a pelab checkpoint plus the batch), run forward and
// backward, then trained 10 AdamW steps; logits, loss, every parameter gradient and the 11 losses
// are compared with tests/golden/<case>.golden.h5, computed by PyTorch in float64. PyTorch is not
// needed here. Regenerating: docs/testing.md (`tools/make_goldens.sh`).
//
// With PELAB_WRITE_GOLDEN_INPUTS=DIR set, Golden.MatchesTorchReference writes the input files into
// DIR instead of comparing (that is how tools/make_goldens.sh makes them). PELAB_GOLDEN_SCHEME=NAME
// limits it (writing or comparing) to the cases of pe.scheme NAME (`tools/make_goldens.sh --scheme`).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/pelab.h"
#include "pelab/strings.h"
#include "tests/pe_test_util.h"
#include "tests/test_paths.h"
#include "train/checkpoint.h"
#include "train/config.h"

using namespace pelab;

namespace {

// ---------------- tolerances (docs/testing.md) ----------------
constexpr double kLogitsTol = 1e-5;  // max|Δlogit| / max|logit|
constexpr double kGradTol = 1e-4;    // max|Δg| / max(max|g|, kGradFloor · max over all params |g|)
constexpr double kGradFloor = 1e-3;  // only matters for gradients that are mathematically zero
constexpr double kLossTol = 1e-5;    // |Δloss| / |loss|, for the loss and each AdamW-run loss
constexpr int kAdamSteps = 10;

// ---------------- the golden cases ----------------
struct GoldenCase {
  std::string name;  // file stem: tests/golden/<name>.input.h5 / .golden.h5
  models::ModelConfig cfg;
  double label_smoothing = 0.0;
  bool random_positions = false;  // explicit sorted random positions instead of 0..L-1
  bool row_ids = false;           // one position-ID row per batch row (docs/model.md 3.4)
};

models::ModelConfig base_config(const std::string& scheme, const std::string& arch) {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab = 10;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.dropout = 0.0;
  c.dtype = "float32";
  c.init_std = 0.3;
  c.pe = pelab::testing::small_pe(scheme);
  c.pe.set("max_positions", 16);
  return c;
}

uint64_t name_seed(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h % 1000003;
}

// Every scheme in pe_names() × {seq2seq, decoder} as "<scheme>_<arch>" (settings below; a scheme
// not named here gets the base settings), then three RoPE variants. Non-default settings are
// spread over the cases so that each file exercises several (the folder stays small).
std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> cases;
  auto add = [&](const std::string& name, models::ModelConfig c, double ls = 0.0,
                 bool randpos = false) {
    c.seed = name_seed(name);
    cases.push_back({name, c, ls, randpos});
  };
  for (const std::string& scheme : models::pe_names())
    for (const std::string arch : {"seq2seq", "decoder"}) {
      models::ModelConfig c = base_config(scheme, arch);
      double ls = 0.0;
      bool randpos = false;
      const bool dec = arch == "decoder";
      if (scheme == "learned" && dec) {
        c.norm = "post";
        c.tie_embeddings = true;
        ls = 0.1;
      } else if (scheme == "shaw" && dec) {
        c.decoder_layers = 2;
        c.pe.set("shaw_per_head", true);
        randpos = true;
      } else if (scheme == "t5" && !dec) {
        c.decoder_layers = 2;  // one decoder table shared by both layers
        c.norm = "post";
        ls = 0.1;
        randpos = true;
      } else if (scheme == "t5" && dec) {
        c.decoder_layers = 2;
        c.pe.set("t5_per_layer", true);
      } else if (scheme == "alibi" && dec) {
        c.d_model = 6;
        c.heads = 3;  // not a power of two: the interleaved slope construction
        randpos = true;
      }
      add(scheme + "_" + arch, c, ls, randpos);
    }
  {
    auto c = base_config("rope", "decoder");  // head dim 4: pairs (0,1),(2,3) vs (0,2),(1,3)
    c.pe.set("rope_pairing", "interleaved");
    c.norm = "post";
    c.activation = "relu";
    add("rope_interleaved_postln_relu_decoder", c);
  }
  {
    auto c = base_config("rope", "seq2seq");
    c.heads = 1;               // head dim 8
    c.pe.set("rope_fraction", 0.5);  // 4 rotary dims, pairs (0,2),(1,3); dims 4..7 pass through
    c.tie_embeddings = true;   // encoder, decoder and lm_head share one table
    add("rope_partial_tied_randpos_seq2seq", c, 0.1, true);
    auto d = base_config("rope", "decoder");
    d.heads = 1;
    d.pe.set("rope_fraction", 0.5);  // pairs (0,1),(2,3)
    d.pe.set("rope_pairing", "interleaved");
    d.bias = false;
    d.tie_embeddings = true;
    d.embed_scale = "sqrt_d";
    add("rope_partial_interleaved_nobias_tied_decoder", d);
  }
  // Length-scaled attention logits (model.attention_length_scale, docs/model.md §3.1): SSMax's
  // learned per-head scale over Shaw (its K table inside the fused op, two layers: a scale per
  // layer), and log n over ALiBi (a score term given as a tensor) with seq2seq's cross-attention
  // and padded keys.
  {
    auto c = base_config("shaw", "decoder");
    c.decoder_layers = 2;
    c.attention_length_scale = "ssmax";
    add("shaw_ssmax_decoder", c);
    auto d = base_config("alibi", "seq2seq");
    d.attention_length_scale = "log_n";
    add("alibi_logn_seq2seq", d, 0.1);
  }
  // Position IDs per batch row, "<scheme>_rowids_<arch>", for every scheme that accepts them and
  // both architectures (a scheme's cases depend on it alone, so adding a scheme leaves every other
  // scheme's goldens as they are: tools/make_goldens.sh --scheme).
  for (const std::string& scheme : models::pe_names())
    for (const std::string arch : {"seq2seq", "decoder"}) {
      const models::ModelConfig c = base_config(scheme, arch);
      if (!models::pe_accepts_task_positions(c.pe)) continue;
      add(scheme + "_rowids_" + c.arch, c);
      cases.back().row_ids = true;
    }
  return cases;
}

// The train/ config whose model/pe sections describe `c` (stored as the checkpoint's /config).
Config train_config(const models::ModelConfig& c) {
  Config t;
  t.task.formulation = c.arch;
  t.task.train_min_len = 1;
  t.task.train_max_len = 7;  // decoder: 7 + 7 + bos + sep = 16 positions, the learned cases' table
  t.task.test_lengths = {8};
  t.model = c;  // the config holds the model's own struct (one config model)
  return t;
}

// ---------------- the fixed batch ----------------
// B = 2; row 1 is padded at the end so that key-padding masks matter. Pad id 0 is the ignore
// index of the loss. Positions are 0..L-1 or, with random_positions, a sorted random subset of
// 0..39 (per stack, shared by the batch); with row_ids, row 0 has 0..L-1 and row 1 repeating,
// non-monotone IDs (3 + 7i) mod 11.
struct GoldenBatch {
  int64_t B = 2;
  std::vector<int64_t> src, src_mask, tgt, tgt_mask, targets;  // seq2seq: src [B,S], tgt [B,T]
  int64_t S = 0, T = 0;                                        // decoder: tgt/targets [B,T]
  std::vector<int64_t> src_pos, tgt_pos;  // [L], or [B, L] with row_ids
};

std::vector<int64_t> positions(int64_t L, bool random, Generator& gen) {
  std::vector<int64_t> p;
  if (!random) {
    for (int64_t i = 0; i < L; ++i) p.push_back(i);
    return p;
  }
  std::set<int64_t> s;
  while (static_cast<int64_t>(s.size()) < L) s.insert(static_cast<int64_t>(gen.randint(40)));
  return {s.begin(), s.end()};
}

GoldenBatch make_batch(const GoldenCase& gc) {
  Generator gen(gc.cfg.seed + 17);
  GoldenBatch b;
  const int64_t V = gc.cfg.vocab;
  auto fill = [&](int64_t L, const std::vector<int64_t>& lens, std::vector<int64_t>& ids,
                  std::vector<int64_t>& mask, std::vector<int64_t>* targets) {
    auto token = [&]() {  // a non-pad id in [1, V)
      return 1 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(V - 1)));
    };
    for (int64_t r = 0; r < b.B; ++r)
      for (int64_t i = 0; i < L; ++i) {
        const bool real = i < lens[static_cast<size_t>(r)];
        ids.push_back(real ? token() : 0);
        mask.push_back(real ? 1 : 0);
        if (targets) targets->push_back(real ? token() : 0);
      }
  };
  if (gc.cfg.is_seq2seq()) {
    b.S = 7;
    b.T = 6;
    fill(b.S, {7, 5}, b.src, b.src_mask, nullptr);
    fill(b.T, {6, 4}, b.tgt, b.tgt_mask, &b.targets);
    b.src_pos = positions(b.S, gc.random_positions, gen);
  } else {
    b.T = 8;
    fill(b.T, {8, 6}, b.tgt, b.tgt_mask, &b.targets);
  }
  b.tgt_pos = positions(b.T, gc.random_positions, gen);
  if (gc.row_ids) {
    for (std::vector<int64_t>* p : {&b.src_pos, &b.tgt_pos}) {
      const int64_t L = static_cast<int64_t>(p->size());
      for (int64_t i = 0; i < L; ++i) p->push_back((3 + 7 * i) % 11);
    }
  }
  return b;
}

// ---------------- small HDF5 helpers (the batch group and the golden file) ----------------
struct H5 {
  hid_t id;
  herr_t (*close)(hid_t);
  H5(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5() { if (id >= 0) close(id); }
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
};

// The batch is stored as attributes of the /golden_input group: they live in the group's object
// header, which keeps the committed files small (an HDF5 dataset costs about 0.5 KB).
void write_i64(hid_t loc, const std::string& name, const std::vector<int64_t>& v,
               std::vector<hsize_t> dims) {
  H5 space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5 a(H5Acreate2(loc, name.c_str(), H5T_NATIVE_INT64, space.id, H5P_DEFAULT, H5P_DEFAULT),
       H5Aclose);
  PELAB_CHECK(a.id >= 0 && H5Awrite(a.id, H5T_NATIVE_INT64, v.data()) >= 0,
              "golden: cannot write attribute ", name);
}


void write_attr(hid_t loc, const std::string& name, double v, hid_t type) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(loc, name.c_str(), type, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const int64_t i = static_cast<int64_t>(v);
  PELAB_CHECK(a.id >= 0 && H5Awrite(a.id, type == H5T_NATIVE_INT64 ? H5T_NATIVE_INT64
                                                                   : H5T_NATIVE_DOUBLE,
                                    type == H5T_NATIVE_INT64 ? static_cast<const void*>(&i)
                                                             : static_cast<const void*>(&v)) >= 0,
              "golden: cannot write attribute ", name);
}

struct Array {
  std::vector<double> data;
  std::vector<int64_t> shape;
};

// An Array shaped like an HDF5 dataspace (attribute or dataset), data zeroed to its element count.
Array sized_for(hid_t space) {
  const int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  Array a;
  size_t n = 1;
  for (hsize_t d : dims) {
    a.shape.push_back(static_cast<int64_t>(d));
    n *= d;
  }
  a.data.resize(n);
  return a;
}

Array read_attr_array(hid_t loc, const std::string& name, const std::string& fname) {
  PELAB_CHECK(H5Aexists(loc, name.c_str()) > 0, "golden ", fname, ": no attribute ", name);
  H5 a(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose);
  PELAB_CHECK(a.id >= 0, "golden ", fname, ": cannot open attribute ", name);
  H5 space(H5Aget_space(a.id), H5Sclose);
  Array out = sized_for(space.id);
  PELAB_CHECK(H5Aread(a.id, H5T_NATIVE_DOUBLE, out.data.data()) >= 0, "golden ", fname,
              ": cannot read attribute ", name);
  return out;
}

double read_attr(hid_t loc, const std::string& name, const std::string& fname) {
  const Array a = read_attr_array(loc, name, fname);
  PELAB_CHECK(a.data.size() == 1, "golden ", fname, ": attribute ", name, " is not a scalar");
  return a.data[0];
}

std::vector<int64_t> to_ints(const Array& a) {
  std::vector<int64_t> v;
  for (double x : a.data) v.push_back(static_cast<int64_t>(std::llround(x)));
  return v;
}

// A 1-D array of fixed-length strings (what torch_reference.py writes) or variable-length ones.
std::vector<std::string> read_strings(hid_t file, const std::string& path,
                                      const std::string& fname) {
  H5 ds(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  PELAB_CHECK(ds.id >= 0, "golden ", fname, ": no dataset ", path);
  H5 space(H5Dget_space(ds.id), H5Sclose);
  PELAB_CHECK(H5Sget_simple_extent_ndims(space.id) == 1, "golden ", fname, ": ", path,
              " is not a 1-D string array");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.id, &n, nullptr);
  H5 ftype(H5Dget_type(ds.id), H5Tclose);
  PELAB_CHECK(H5Tget_class(ftype.id) == H5T_STRING, "golden ", fname, ": ", path,
              " does not hold strings");
  std::vector<std::string> out;
  H5 mem(H5Tcopy(H5T_C_S1), H5Tclose);
  if (H5Tis_variable_str(ftype.id) > 0) {
    H5Tset_size(mem.id, H5T_VARIABLE);
    std::vector<char*> ptrs(n, nullptr);
    PELAB_CHECK(n == 0 || H5Dread(ds.id, mem.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) >= 0,
                "golden ", fname, ": cannot read ", path);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n > 0) H5Dvlen_reclaim(mem.id, space.id, H5P_DEFAULT, ptrs.data());
    return out;
  }
  const size_t len = H5Tget_size(ftype.id);
  H5Tset_size(mem.id, len);
  H5Tset_strpad(mem.id, H5T_STR_NULLPAD);
  std::vector<char> buf(n * len, '\0');
  PELAB_CHECK(n == 0 || H5Dread(ds.id, mem.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0,
              "golden ", fname, ": cannot read ", path);
  for (hsize_t i = 0; i < n; ++i) {
    const char* p = buf.data() + i * len;
    out.emplace_back(p, strnlen(p, len));
  }
  return out;
}

bool has_path(hid_t file, const std::string& path) {
  // Check every component so that H5Lexists never sees a missing intermediate group.
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (H5Lexists(file, cur.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

Array read_array(hid_t file, const std::string& path, const std::string& fname) {
  PELAB_CHECK(has_path(file, path), "golden ", fname, ": no dataset ", path);
  H5 ds(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  PELAB_CHECK(ds.id >= 0, "golden ", fname, ": cannot open ", path);
  H5 space(H5Dget_space(ds.id), H5Sclose);
  Array a = sized_for(space.id);
  PELAB_CHECK(H5Dread(ds.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()) >= 0,
              "golden ", fname, ": cannot read ", path);
  return a;
}

std::string golden_dir() { return pelab::testing::source_dir() + "/tests/golden"; }

// ---------------- the model ----------------
// Seeded init, then every parameter gets N(0, 0.1) noise, so biases, LayerNorm affine parameters
// and PE tables are away from their trivial initial values and every term matters.
std::shared_ptr<models::Transformer> build_model(const GoldenCase& gc) {
  auto m = std::make_shared<models::Transformer>(gc.cfg);
  NoGradGuard ng;
  Generator gen(gc.cfg.seed ^ 0x901d);
  for (auto& [name, p] : m->named_parameters()) {
    Tensor noise = Tensor::empty(p.shape(), p.dtype());
    init::normal_(noise, 0.0, 0.1, gen);
    Tensor q = p;
    q.add_(noise);
  }
  return m;
}

void write_inputs(const GoldenCase& gc, const std::string& dir) {
  auto model = build_model(gc);
  CheckpointData d;
  d.scheme = gc.cfg.pe.scheme;
  d.arch = gc.cfg.arch;
  d.config_yaml = config_to_yaml(train_config(gc.cfg));
  d.vocab = {"<pad>", "<bos>", "<eos>"};
  for (int64_t i = 3; i < gc.cfg.vocab; ++i) d.vocab.push_back(std::string(1, char('a' + i - 3)));
  capture_parameters(*model, d);
  const std::string path = dir + "/" + gc.name + ".input.h5";
  save_checkpoint(path, d);

  const GoldenBatch b = make_batch(gc);
  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  PELAB_CHECK(file.id >= 0, "golden: cannot reopen ", path);
  H5 g(H5Gcreate2(file.id, "golden_input", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  PELAB_CHECK(g.id >= 0, "golden: cannot create golden_input in ", path);
  const hsize_t B = static_cast<hsize_t>(b.B), S = static_cast<hsize_t>(b.S),
                T = static_cast<hsize_t>(b.T);
  if (gc.cfg.is_seq2seq()) {
    write_i64(g.id, "src", b.src, {B, S});
    write_i64(g.id, "src_mask", b.src_mask, {B, S});
    write_i64(g.id, "src_pos", b.src_pos, gc.row_ids ? std::vector<hsize_t>{B, S} : std::vector<hsize_t>{S});
  }
  write_i64(g.id, "tgt", b.tgt, {B, T});
  write_i64(g.id, "tgt_mask", b.tgt_mask, {B, T});
  write_i64(g.id, "tgt_pos", b.tgt_pos, gc.row_ids ? std::vector<hsize_t>{B, T} : std::vector<hsize_t>{T});
  write_i64(g.id, "targets", b.targets, {B, T});
  write_attr(g.id, "ignore_index", 0, H5T_NATIVE_INT64);  // the pad id
  write_attr(g.id, "label_smoothing", gc.label_smoothing, H5T_NATIVE_DOUBLE);
  write_attr(g.id, "adamw_steps", kAdamSteps, H5T_NATIVE_INT64);
  write_attr(g.id, "adamw_lr", 1e-2, H5T_NATIVE_DOUBLE);
  write_attr(g.id, "adamw_beta1", 0.9, H5T_NATIVE_DOUBLE);
  write_attr(g.id, "adamw_beta2", 0.98, H5T_NATIVE_DOUBLE);
  write_attr(g.id, "adamw_eps", 1e-9, H5T_NATIVE_DOUBLE);
  write_attr(g.id, "adamw_weight_decay", 0.01, H5T_NATIVE_DOUBLE);
}

Tensor ids_tensor(const std::vector<int64_t>& v, int64_t B, int64_t L) {
  return Tensor::from_ints(v, {B, L});
}

// ---------------- comparison ----------------
struct CaseResult {
  std::string name, scheme, arch;
  double logits = 0, loss = 0, adamw = 0;
  double grad = 0;   // gradients with max|g| >= kGradFloor · max over all: relative to their own max
  double grad0 = 0;  // (mathematically) zero gradients: relative to kGradFloor · max over all
  std::string worst_grad, worst_grad0;
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

CaseResult compare_case(const GoldenCase& gc) {
  CaseResult res;
  res.name = gc.name;
  res.scheme = gc.cfg.pe.scheme;
  res.arch = gc.cfg.arch;
  const std::string in_path = golden_dir() + "/" + gc.name + ".input.h5";
  const std::string gold_path = golden_dir() + "/" + gc.name + ".golden.h5";
  CheckpointData ck = load_checkpoint(in_path);
  // The stored config (what the PyTorch side read) must describe this case's model.
  // The inputs were written with task.train_max_len 8, which (decoder: 18 positions) the
  // learned-positions rule rejects for max_positions 16; only model/pe are compared below.
  const Config stored =
      load_config_string(ck.config_yaml, in_path + ":/config", {"task.train_max_len=7"});
  const Config expect = train_config(gc.cfg);
  for (const ConfigKey& k : config_schema()) {
    if (k.section != "model" && k.section != "pe") continue;
    EXPECT_EQ(config_value_text(stored, k.full_name()), config_value_text(expect, k.full_name()))
        << gc.name << ": stored config key " << k.full_name()
        << " differs from the case table (regenerate the goldens)";
  }
  EXPECT_EQ(static_cast<int64_t>(ck.vocab.size()), gc.cfg.vocab) << gc.name;

  models::Transformer model(gc.cfg);
  load_parameters(model, ck, in_path);
  model.train();

  H5 fin(H5Fopen(in_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  PELAB_CHECK(fin.id >= 0, "golden: cannot open ", in_path);
  H5 fgold(H5Fopen(gold_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  PELAB_CHECK(fgold.id >= 0, "golden: cannot open ", gold_path);
  H5 gin(H5Gopen2(fin.id, "golden_input", H5P_DEFAULT), H5Gclose);
  PELAB_CHECK(gin.id >= 0, "golden ", in_path, ": no group golden_input");
  auto ints = [&](const std::string& n) { return to_ints(read_attr_array(gin.id, n, in_path)); };
  const std::vector<int64_t> tshape = read_attr_array(gin.id, "tgt", in_path).shape;
  const int64_t B = tshape.at(0), T = tshape.at(1);
  const Tensor tgt_t = ids_tensor(ints("tgt"), B, T);
  const Tensor tgt_mask = ids_tensor(ints("tgt_mask"), B, T);
  const Tensor targets = ids_tensor(ints("targets"), B, T);
  // A position array is [L] (shared) or [B, L] (one row per batch row).
  auto positions_of = [&](const std::string& n) {
    const Array a = read_attr_array(gin.id, n, in_path);
    return a.shape.size() == 2 ? models::Positions(a.shape[0], a.shape[1], to_ints(a))
                               : models::Positions(to_ints(a));
  };
  const models::Positions tgt_pos = positions_of("tgt_pos");
  Tensor src_t, src_mask;
  models::Positions src_pos;
  if (gc.cfg.is_seq2seq()) {
    const int64_t S = read_attr_array(gin.id, "src", in_path).shape.at(1);
    src_t = ids_tensor(ints("src"), B, S);
    src_mask = ids_tensor(ints("src_mask"), B, S);
    src_pos = positions_of("src_pos");
  }
  auto scalar = [&](const std::string& n) { return read_attr(gin.id, n, in_path); };
  const int64_t ignore = static_cast<int64_t>(scalar("ignore_index"));
  const int64_t steps = static_cast<int64_t>(scalar("adamw_steps"));
  const double ls = scalar("label_smoothing");

  auto forward = [&]() {
    return gc.cfg.is_seq2seq()
               ? model.forward_seq2seq(src_t, src_mask, tgt_t, tgt_mask, &src_pos, &tgt_pos)
               : model.forward_decoder(tgt_t, tgt_mask, &tgt_pos);
  };

  // Logits and loss.
  Tensor logits = forward();
  Tensor loss = cross_entropy(logits, targets, ignore, ls);
  const Array glogits = read_array(fgold.id, "logits", gold_path);
  EXPECT_EQ(logits.shape(), Shape(glogits.shape.begin(), glogits.shape.end())) << gc.name;
  const std::vector<double> lv = logits.to_vector();
  res.logits = lv.size() == glogits.data.size()
                   ? max_abs_diff(lv, glogits.data) / max_abs(glogits.data)
                   : INFINITY;
  const double gloss = read_array(fgold.id, "loss", gold_path).data.at(0);
  res.loss = std::fabs(loss.item() - gloss) / std::fabs(gloss);

  // Gradients: the golden holds them concatenated (row-major, in /param_names order) in
  // "grads", with their names in "grad_names".
  loss.backward();
  const auto named = model.named_parameters();
  const std::vector<std::string> gnames = read_strings(fgold.id, "grad_names", gold_path);
  const Array gflat = read_array(fgold.id, "grads", gold_path);
  std::vector<std::string> pnames;
  for (const auto& [name, p] : named) pnames.push_back(name);
  EXPECT_EQ(gnames, pnames) << gc.name << ": golden gradient names";
  std::map<std::string, std::vector<double>> want_grad;
  size_t off = 0;
  double gmax = 0;
  for (size_t i = 0; i < named.size() && i < gnames.size(); ++i) {
    const size_t n = static_cast<size_t>(named[i].second.numel());
    if (off + n > gflat.data.size()) break;
    want_grad[gnames[i]].assign(gflat.data.begin() + off, gflat.data.begin() + off + n);
    gmax = std::max(gmax, max_abs(want_grad[gnames[i]]));
    off += n;
  }
  EXPECT_EQ(off, gflat.data.size()) << gc.name << ": golden gradient sizes";
  for (const auto& [name, p] : named) {
    auto it = want_grad.find(name);
    if (it == want_grad.end()) {
      ADD_FAILURE() << gc.name << ": no golden gradient for " << name;
      res.grad = INFINITY;
      res.worst_grad = name;
      continue;
    }
    const std::vector<double>& want = it->second;
    Tensor g = p.grad();
    const std::vector<double> got =
        g.defined() ? g.to_vector() : std::vector<double>(want.size(), 0.0);
    const bool zero = max_abs(want) < kGradFloor * gmax;
    const double scale = std::max(max_abs(want), kGradFloor * gmax);
    const double err = max_abs_diff(got, want) / scale;
    double& worst = zero ? res.grad0 : res.grad;
    std::string& worst_name = zero ? res.worst_grad0 : res.worst_grad;
    if (worst_name.empty() || err > worst) {
      worst = err;
      worst_name = name;
    }
    EXPECT_LE(err, kGradTol) << gc.name << ": gradient of " << name << " (scale " << scale << ")";
  }

  // AdamW: kAdamSteps steps from these parameters; losses before each step and after the last.
  const Array glosses = read_array(fgold.id, "adamw_losses", gold_path);
  EXPECT_EQ(steps, kAdamSteps) << gc.name;
  EXPECT_EQ(static_cast<int64_t>(glosses.data.size()), steps + 1) << gc.name;
  AdamWOptions ao;
  ao.beta1 = scalar("adamw_beta1");
  ao.beta2 = scalar("adamw_beta2");
  ao.eps = scalar("adamw_eps");
  ao.weight_decay = scalar("adamw_weight_decay");
  AdamW opt(model.parameters(), scalar("adamw_lr"), ao);
  for (int64_t k = 0; k <= steps && k < static_cast<int64_t>(glosses.data.size()); ++k) {
    opt.zero_grad();
    Tensor l = cross_entropy(forward(), targets, ignore, ls);
    const double e = std::fabs(l.item() - glosses.data[static_cast<size_t>(k)]) /
                     std::fabs(glosses.data[static_cast<size_t>(k)]);
    res.adamw = std::max(res.adamw, e);
    EXPECT_LE(e, kLossTol) << gc.name << ": AdamW loss after " << k << " steps: pelab " << l.item()
                           << ", torch " << glosses.data[static_cast<size_t>(k)];
    if (k == steps) break;
    l.backward();
    opt.step();
  }

  EXPECT_LE(res.logits, kLogitsTol) << gc.name << ": logits";
  EXPECT_LE(res.loss, kLossTol) << gc.name << ": loss pelab " << loss.item() << ", torch " << gloss;
  return res;
}

bool file_exists(const std::string& p) { return std::filesystem::is_regular_file(p); }

}  // namespace

// Every scheme × arch has a committed input and golden, so a new scheme cannot skip goldens.
TEST(Golden, EverySchemeAndArchHasAGolden) {
  const auto cases = golden_cases();
  std::set<std::string> names;
  for (const auto& c : cases) names.insert(c.name);
  ASSERT_FALSE(models::pe_names().empty());
  for (const std::string& scheme : models::pe_names())
    for (const std::string arch : {"seq2seq", "decoder"}) {
      const std::string n = scheme + "_" + arch;
      EXPECT_TRUE(names.count(n)) << n;
      EXPECT_TRUE(file_exists(golden_dir() + "/" + n + ".input.h5"))
          << "missing " << golden_dir() << "/" << n << ".input.h5: run tools/make_goldens.sh";
      EXPECT_TRUE(file_exists(golden_dir() + "/" + n + ".golden.h5"))
          << "missing " << golden_dir() << "/" << n << ".golden.h5: run tools/make_goldens.sh";
    }
  for (const auto& c : cases) {
    EXPECT_TRUE(file_exists(golden_dir() + "/" + c.name + ".input.h5")) << c.name;
    EXPECT_TRUE(file_exists(golden_dir() + "/" + c.name + ".golden.h5")) << c.name;
  }
}

// The float32 model against the float64 PyTorch reference, for every case; prints the table of
// worst errors. With PELAB_WRITE_GOLDEN_INPUTS=DIR it writes the input files instead.
TEST(Golden, MatchesTorchReference) {
  auto cases = golden_cases();
  if (const char* only = std::getenv("PELAB_GOLDEN_SCHEME")) {
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [&](const GoldenCase& gc) { return gc.cfg.pe.scheme != only; }),
                cases.end());
    ASSERT_FALSE(cases.empty()) << "PELAB_GOLDEN_SCHEME=" << only
                                << ": no golden case has that pe.scheme (registered: "
                                << join(models::pe_names(), ", ") << ")";
  }
  if (const char* dir = std::getenv("PELAB_WRITE_GOLDEN_INPUTS")) {
    std::filesystem::create_directories(dir);
    for (const auto& gc : cases) {
      write_inputs(gc, dir);
      // The file loads back as a checkpoint into the case's model.
      const std::string p = std::string(dir) + "/" + gc.name + ".input.h5";
      CheckpointData ck = load_checkpoint(p);
      models::Transformer m(gc.cfg);
      EXPECT_NO_THROW(load_parameters(m, ck, p)) << p;
    }
    std::printf("wrote %zu golden inputs to %s\n", cases.size(), dir);
    return;
  }
  std::vector<CaseResult> results;
  for (const auto& gc : cases) {
    SCOPED_TRACE(gc.name);
    ASSERT_TRUE(file_exists(golden_dir() + "/" + gc.name + ".golden.h5"))
        << gc.name << ": run tools/make_goldens.sh";
    results.push_back(compare_case(gc));
  }
  std::printf("\n%-44s %10s %10s %10s %10s %10s  %s\n", "case", "logits", "loss", "grad",
              "zero-grad", "adamw", "worst gradient / worst zero gradient");
  for (const auto& r : results)
    std::printf("%-44s %10.2e %10.2e %10.2e %10.2e %10.2e  %s / %s\n", r.name.c_str(), r.logits,
                r.loss, r.grad, r.grad0, r.adamw, r.worst_grad.c_str(),
                r.worst_grad0.empty() ? "-" : r.worst_grad0.c_str());
  // Worst per scheme × arch over all its cases.
  std::map<std::pair<std::string, std::string>, CaseResult> worst;
  for (const auto& r : results) {
    auto& w = worst[{r.scheme, r.arch}];
    w.logits = std::max(w.logits, r.logits);
    w.loss = std::max(w.loss, r.loss);
    w.grad = std::max(w.grad, r.grad);
    w.grad0 = std::max(w.grad0, r.grad0);
    w.adamw = std::max(w.adamw, r.adamw);
  }
  std::printf("\nworst per scheme x arch (tolerances: logits %.0e, grad %.0e, loss/adamw %.0e)\n",
              kLogitsTol, kGradTol, kLossTol);
  std::printf("| %-10s | %-8s | %9s | %9s | %9s | %9s | %9s |\n", "scheme", "arch", "logits",
              "loss", "grad", "zero-grad", "adamw");
  for (const auto& [k, w] : worst)
    std::printf("| %-10s | %-8s | %9.1e | %9.1e | %9.1e | %9.1e | %9.1e |\n", k.first.c_str(),
                k.second.c_str(), w.logits, w.loss, w.grad, w.grad0, w.adamw);
}
