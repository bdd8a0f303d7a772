// Checkpoint hardening (issue 16): a full disk during a save (a real RLIMIT_FSIZE fault), crafted
// datasets (huge, wrong rank, wrong or integer dtype, extra, non-finite, empty vocab), random bit
// flips, NUL bytes in tokens, stale temporaries of killed saves, best.h5 after a resume from an older
// checkpoint, and the resolved pe.rope_train_length stored in the checkpoint.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pelab/pelab.h"
#include "train/checkpoint.h"
#include "tests/test_util.h"

using namespace pelab;
namespace fs = std::filesystem;

namespace {

using pelab::testing::slurp;

class TwoLayer : public Module {
 public:
  TwoLayer(int64_t in, int64_t hidden, Generator& g) {
    a = register_module("a", std::make_shared<Linear>(in, hidden, g));
    b = register_module("b", std::make_shared<Linear>(hidden, 3, g));
  }
  std::shared_ptr<Linear> a, b;
};

using pelab::testing::error_of;

// A trained two-layer model's checkpoint with optimizer state, RNG counters and values.
CheckpointData sample_data() {
  Generator g(11);
  TwoLayer m(4, 5, g);
  AdamW opt(m.parameters(), 1e-2);
  Tensor x = Tensor::from_vector({0.5, -1.0, 2.0, 0.25, 1.5, -0.5, 0.0, 1.0}, {2, 4});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    Tensor y = m.b->forward(tanh(m.a->forward(x)));
    sum(y * y).backward();
    opt.step();
  }
  CheckpointData d;
  d.step = 3;
  d.scheme = "rope";
  d.arch = "seq2seq";
  d.config_yaml = "model:\n  d_model: 8\n";
  d.metrics_jsonl = "{\"step\": 1, \"loss\": 2.5}\n";
  d.vocab = {"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a", "b"};
  capture_parameters(m, d);
  capture_optimizer(opt, "adamw", d);
  d.counters["model_rng_seed"] = 987654321;
  d.counters["model_rng_offset"] = 4242;
  d.counters["data_position"] = 17;
  d.values["best_metric"] = 0.875;
  d.values["last_lr"] = 1e-3;
  return d;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return n == 0 || std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), n) == 0;
}

// Bit-identical checkpoint contents.
bool identical(const CheckpointData& x, const CheckpointData& y) {
  if (x.format_version != y.format_version || x.step != y.step || x.scheme != y.scheme ||
      x.arch != y.arch || x.config_yaml != y.config_yaml || x.metrics_jsonl != y.metrics_jsonl ||
      x.vocab != y.vocab || x.optimizer != y.optimizer || x.optimizer_step != y.optimizer_step ||
      x.counters != y.counters || x.params.size() != y.params.size() ||
      x.values.size() != y.values.size() || x.optimizer_state.size() != y.optimizer_state.size())
    return false;
  for (size_t i = 0; i < x.params.size(); ++i)
    if (x.params[i].first != y.params[i].first || !same_bytes(x.params[i].second, y.params[i].second))
      return false;
  for (const auto& [k, v] : x.values) {
    auto it = y.values.find(k);
    if (it == y.values.end() || std::memcmp(&v, &it->second, sizeof v) != 0) return false;
  }
  for (const auto& [k, v] : x.optimizer_state) {
    auto it = y.optimizer_state.find(k);
    if (it == y.optimizer_state.end() || it->second.size() != v.size()) return false;
    for (size_t i = 0; i < v.size(); ++i)
      if (!same_bytes(v[i], it->second[i])) return false;
  }
  return true;
}

// Edits a saved checkpoint with the HDF5 C API (as a hostile user would with h5py).
class H5Edit {
 public:
  explicit H5Edit(const std::string& path) : f_(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    EXPECT_GE(f_, 0) << path;
  }
  ~H5Edit() { H5Fclose(f_); }
  void remove(const std::string& name) { EXPECT_GE(H5Ldelete(f_, name.c_str(), H5P_DEFAULT), 0); }
  enum Layout { kWritten, kChunked, kUnwritten };
  // Creates dataset `name` of `type` and `dims`: contiguous and written with zeros, chunked (nothing
  // allocated) or contiguous and never written.
  void create(const std::string& name, hid_t type, std::vector<hsize_t> dims, Layout layout = kWritten) {
    const bool chunked = layout == kChunked;
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
      std::vector<hsize_t> chunk(dims.size(), 1);
      H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    }
    hid_t ds = H5Dcreate2(f_, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    EXPECT_GE(ds, 0) << name;
    if (layout == kWritten) {
      hsize_t n = 1;
      for (hsize_t d : dims) n *= d;
      std::vector<char> zeros(n * H5Tget_size(type), 0);
      EXPECT_GE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
    }
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  // Removes the checksum attribute of a dataset.
  void drop_checksum(const std::string& name) {
    EXPECT_GE(H5Adelete_by_name(f_, name.c_str(), "fnv1a64", H5P_DEFAULT), 0) << name;
  }
  void write_int64(const std::string& name, int64_t v) {
    hid_t ds = H5Dopen2(f_, name.c_str(), H5P_DEFAULT);
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
    H5Dclose(ds);
  }
  // Byte offset of a contiguous dataset's data in the file.
  haddr_t offset(const std::string& name) {
    hid_t ds = H5Dopen2(f_, name.c_str(), H5P_DEFAULT);
    const haddr_t o = H5Dget_offset(ds);
    H5Dclose(ds);
    return o;
  }
  hid_t file() const { return f_; }

 private:
  hid_t f_;
};

fs::path fresh_dir(const std::string& name) {
  return pelab::testing::fresh_temp_dir("pelab_h4_" + name + "_" +
                                        pelab::testing::current_test_name());
}

using PelabRun = pelab::testing::ChildRun;

// Runs the pelab binary with `args` in `cwd`; with fsize_limit > 0 the child's RLIMIT_FSIZE is set
// to it and SIGXFSZ ignored, so a write past the limit fails with EFBIG like one on a full disk.
PelabRun run_pelab(const std::vector<std::string>& args, const fs::path& cwd, rlim_t fsize_limit = 0) {
  return pelab::testing::run_pelab_child(args, cwd, [&] {
    if (fsize_limit == 0) return true;
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {fsize_limit, fsize_limit};
    return ::setrlimit(RLIMIT_FSIZE, &rl) == 0;
  });
}

// A tiny reverse run: d_model 16, one layer each side.
std::string tiny_config(const fs::path& dir, const std::string& extra = "") {
  const fs::path p = dir / "tiny.yaml";
  std::ofstream(p) << "task:\n  name: reverse\n  num_symbols: 4\n  train_max_len: 4\n"
                      "  test_lengths: [3, 6]\n  num_eval_examples: 4\n"
                      "model:\n  d_model: 16\n  heads: 2\n  d_ff: 32\n  encoder_layers: 1\n"
                      "  decoder_layers: 1\n"
                      "train:\n  steps: 4\n  batch_size: 4\n  warmup: 1\n  log_every: 1\n"
                      "  eval_every: 2\n  checkpoint_every: 2\n  keep_checkpoints: 0\n  threads: 1\n"
                      "  run_dir: runs\n  run_name: r\n"
                   << extra;
  return p.string();
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

// A pid that no longer exists: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return pid;
}

void expect_one_error_line(const PelabRun& r) {
  EXPECT_TRUE(r.exited()) << "killed by signal " << (WIFSIGNALED(r.status) ? WTERMSIG(r.status) : 0);
  EXPECT_NE(r.code(), 0);
  EXPECT_EQ(r.err.rfind("pelab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
}

}  // namespace

// Item 1: a save that hits the file size limit (EFBIG, as on a full disk) is one error line and a
// normal non-zero exit (not a crash in the HDF5 library at exit); earlier checkpoints stay loadable
// and no temporary is left.
TEST(CheckpointHardening, FullDiskDuringASaveIsOneErrorLineAndEarlierCheckpointsSurvive) {
  const fs::path dir = fresh_dir("fsize");
  const std::string cfg = tiny_config(dir, "");
  const std::vector<std::string> args = {"train", cfg, "--progress", "none", "--set",
                                         "train.steps=30", "--set", "train.eval_every=0", "--set",
                                         "train.checkpoint_every=10"};
  // Reference run without a limit: checkpoint sizes grow with the metrics they embed.
  PelabRun ref = run_pelab(args, dir);
  ASSERT_EQ(ref.code(), 0) << ref.err;
  const fs::path ck = dir / "runs" / "r" / "checkpoints";
  const auto s10 = fs::file_size(ck / "step_10.h5"), s20 = fs::file_size(ck / "step_20.h5"),
             s30 = fs::file_size(ck / "step_30.h5");
  ASSERT_LT(s10 + 1000, s20);
  ASSERT_LT(s20 + 1000, s30);
  fs::remove_all(dir / "runs");
  // The same run with a file size limit between the sizes of step_20.h5 and step_30.h5.
  PelabRun r = run_pelab(args, dir, static_cast<rlim_t>((s20 + s30) / 2));
  expect_one_error_line(r);
  // (The final step writes best.h5 before step_30.h5: either one hits the limit.)
  EXPECT_TRUE(r.err.find("step_30.h5") != std::string::npos ||
              r.err.find("best.h5") != std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(std::strerror(EFBIG)), std::string::npos) << r.err;
  EXPECT_NO_THROW(EXPECT_EQ(load_checkpoint((ck / "step_10.h5").string()).step, 10));
  EXPECT_NO_THROW(EXPECT_EQ(load_checkpoint((ck / "step_20.h5").string()).step, 20));
  EXPECT_FALSE(fs::exists(ck / "step_30.h5"));
  EXPECT_TRUE(temporaries(ck).empty());
  // The run continues from step 20 once there is room again.
  std::vector<std::string> resume = args;
  resume.insert(resume.end(), {"--resume", "runs/r"});
  PelabRun resumed = run_pelab(resume, dir);
  EXPECT_EQ(resumed.code(), 0) << resumed.err;
  EXPECT_NE(slurp(dir / "runs" / "r" / "train.log").find("resumed runs/r at step 20"),
            std::string::npos);
  EXPECT_EQ(load_checkpoint((ck / "step_30.h5").string()).step, 30);
  fs::remove_all(dir);
}

// Item 2: crafted datasets are rejected with an error naming the dataset before anything is
// allocated: a chunked (2^31, 2^31) matrix, a contiguous one larger than the file, a wrong rank, an
// integer and a non-float element type.
TEST(CheckpointHardening, CraftedShapesAndTypesAreRejectedBeforeAllocating) {
  const fs::path dir = fresh_dir("crafted");
  const std::string good = (dir / "good.h5").string();
  save_checkpoint(good, sample_data());
  struct Case {
    const char* what;
    hid_t type;
    std::vector<hsize_t> dims;
    H5Edit::Layout layout;
    const char* needle;
  };
  const hsize_t big = hsize_t{1} << 31;
  const std::vector<Case> cases = {
      {"huge chunked", H5T_NATIVE_FLOAT, {big, big}, H5Edit::kChunked, "more than 2^63 bytes"},
      {"huge chunked", H5T_NATIVE_FLOAT, {big, 4}, H5Edit::kChunked,
       "[2147483648, 4] (34359738368 bytes), more than the whole file"},
      {"huge contiguous", H5T_NATIVE_DOUBLE, {big, 2}, H5Edit::kUnwritten,
       "(34359738368 bytes), more than the whole file"},
      {"integer", H5T_NATIVE_INT32, {5, 4}, H5Edit::kWritten, "integer elements"},
      {"char", H5T_NATIVE_SCHAR, {5, 4}, H5Edit::kWritten, "integer elements"},
      {"string", H5T_C_S1, {5, 4}, H5Edit::kWritten, "unsupported element type"},
      {"wrong rank", H5T_NATIVE_FLOAT, {5, 2, 2}, H5Edit::kWritten, nullptr},
  };
  for (const auto& c : cases) {
    const std::string path = (dir / "crafted.h5").string();
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    {
      H5Edit e(path);
      e.remove("params/a.weight");
      e.create("params/a.weight", c.type, c.dims, c.layout);
    }
    std::string err;
    if (c.needle) {
      err = error_of([&] { load_checkpoint(path); });
      EXPECT_NE(err.find(c.needle), std::string::npos) << c.what << ": " << err;
    } else {
      // A wrong rank with the right size (and a valid checksum: none is verified for a dataset
      // pelab did not write) fails either on the missing checksum or on the model's shape.
      err = error_of([&] {
        CheckpointData d = load_checkpoint(path);
        Generator g(1);
        TwoLayer m(4, 5, g);
        load_parameters(m, d, path);
      });
    }
    EXPECT_NE(err.find("params/a.weight"), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << c.what << ": " << err;
  }
  // The wrong rank reaches the model check once it carries a valid checksum: load_parameters names
  // both shapes.
  {
    CheckpointData d = sample_data();
    d.params[0].second = reshape(d.params[0].second, {5, 2, 2});
    const std::string path = (dir / "rank.h5").string();
    save_checkpoint(path, d);
    const std::string err = error_of([&] {
      CheckpointData l = load_checkpoint(path);
      Generator g(1);
      TwoLayer m(4, 5, g);
      load_parameters(m, l, path);
    });
    EXPECT_NE(err.find("params/a.weight has shape [5, 2, 2] but the model expects [5, 4]"),
              std::string::npos)
        << err;
  }
  // The same crafted file through the binary: eval and train --resume end in one error line.
  {
    const std::string cfg = tiny_config(dir);
    PelabRun trained = run_pelab({"train", cfg, "--progress", "none"}, dir);
    ASSERT_EQ(trained.code(), 0) << trained.err;
    const fs::path ck = dir / "runs" / "r" / "checkpoints";
    fs::remove(ck / "best.h5");
    {
      H5Edit e((ck / "step_4.h5").string());
      e.remove("params/lm_head.weight");
      e.create("params/lm_head.weight", H5T_NATIVE_FLOAT, {big, big}, H5Edit::kChunked);
    }
    PelabRun ev = run_pelab({"eval", "runs/r"}, dir);
    expect_one_error_line(ev);
    EXPECT_NE(ev.err.find("params/lm_head.weight"), std::string::npos) << ev.err;
    PelabRun res = run_pelab({"train", cfg, "--progress", "none", "--resume", "runs/r"}, dir);
    expect_one_error_line(res);
    EXPECT_NE(res.err.find("params/lm_head.weight"), std::string::npos) << res.err;
  }
  // Overflow-checked sizes in the tensor library itself.
  EXPECT_NE(error_of([] { Tensor::empty({big, big, big}, DType::Float32, Device::cpu()); }), "");
  EXPECT_NE(error_of([] { Tensor::empty({int64_t{1} << 62, 4}, DType::Float64, Device::cpu()); }),
            "");
  fs::remove_all(dir);
}

// Item 6: random single-bit flips anywhere in the file, and flips aimed at the data of parameters,
// optimizer state, RNG counters, values and strings: every load either fails with an error naming
// the file or returns bit-identical contents (a flip in an unused byte).
TEST(CheckpointHardening, BitFlipsAreDetectedOrHarmless) {
  const fs::path dir = fresh_dir("flips");
  const std::string good = (dir / "good.h5").string();
  const CheckpointData original = sample_data();
  save_checkpoint(good, original);
  const CheckpointData loaded = load_checkpoint(good);
  ASSERT_TRUE(identical(loaded, load_checkpoint(good)));
  const std::string bytes = slurp(good);
  const std::string path = (dir / "flipped.h5").string();
  auto flip_and_load = [&](size_t offset, int bit, bool must_fail, const std::string& what) {
    std::string b = bytes;
    b[offset] = static_cast<char>(b[offset] ^ (1 << bit));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
    CheckpointData d;
    const std::string err = error_of([&] { d = load_checkpoint(path); });
    if (err.empty()) {
      EXPECT_FALSE(must_fail) << what << ": flip at byte " << offset << " bit " << bit
                              << " loaded silently";
      EXPECT_TRUE(identical(d, loaded)) << what << ": flip at byte " << offset << " bit " << bit
                                        << " loaded different contents";
    } else {
      EXPECT_NE(err.find(path), std::string::npos) << err;
    }
    return !err.empty();
  };
  std::mt19937_64 rng(16);
  int detected = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const size_t off = static_cast<size_t>(rng() % bytes.size());
    detected += flip_and_load(off, static_cast<int>(rng() % 8), false, "random flip " +
                                                                          std::to_string(trial));
  }
  EXPECT_GT(detected, 0);
  std::printf("[   info   ] %d of 40 random bit flips detected, the others loaded bit-identical\n",
              detected);
  // Aimed at the data of datasets (the bytes that change results): each flip must be detected.
  std::vector<std::pair<std::string, haddr_t>> targets;
  {
    H5Edit e(good);
    for (const char* n : {"params/a.weight", "params/b.bias", "optimizer/exp_avg/a.weight",
                          "optimizer/exp_avg_sq/b.weight", "optimizer/step", "counters/model_rng_seed",
                          "counters/model_rng_offset", "counters/data_position", "values/best_metric",
                          "values/last_lr", "step", "format_version"})
      targets.emplace_back(n, e.offset(n));
  }
  ASSERT_EQ(slurp(good), bytes);  // opened read-write, not changed
  for (const auto& [name, off] : targets) {
    ASSERT_NE(off, HADDR_UNDEF) << name;
    for (int k = 0; k < 3; ++k)
      flip_and_load(static_cast<size_t>(off) + rng() % 4, static_cast<int>(rng() % 8), true, name);
  }
  fs::remove_all(dir);
}

// Item 6: integer-typed or non-finite parameters, extra datasets under /params or an optimizer state
// group, an empty /vocab and a missing checksum are errors naming the dataset; a version 1 file
// (written before checksums) still loads.
TEST(CheckpointHardening, SuspiciousContentsAreRejectedAndVersion1StillLoads) {
  const fs::path dir = fresh_dir("contents");
  const std::string good = (dir / "good.h5").string();
  save_checkpoint(good, sample_data());
  const std::string path = (dir / "bad.h5").string();
  {
    CheckpointData d = sample_data();
    d.params[1].second = Tensor::from_vector({0.0, NAN, 1.0, 2.0, 3.0}, {5});
    d.optimizer_state.clear();
    save_checkpoint(path, d);
    const std::string err = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(err.find("params/a.bias holds a non-finite value"), std::string::npos) << err;
  }
  {
    CheckpointData d = sample_data();
    d.optimizer_state["exp_avg"][0] = Tensor::full({5, 4}, INFINITY);
    save_checkpoint(path, d);
    const std::string err = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(err.find("optimizer/exp_avg/a.weight holds a non-finite value"), std::string::npos)
        << err;
  }
  {
    CheckpointData d = sample_data();
    d.vocab.clear();
    save_checkpoint(path, d);
    const std::string err = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(err.find("dataset vocab is empty"), std::string::npos) << err;
  }
  for (const std::string extra : {"params/extra.weight", "optimizer/exp_avg/extra.weight"}) {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    H5Edit(path).create(extra, H5T_NATIVE_FLOAT, {2});
    const std::string err = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(err.find(extra + " is not in param_names"), std::string::npos) << err;
  }
  {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    H5Edit(path).drop_checksum("counters/data_position");
    const std::string err = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(err.find("counters/data_position has no checksum"), std::string::npos) << err;
  }
  {
    // Version 1: no checksum attributes at all.
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    {
      H5Edit e(path);
      const CheckpointData d = sample_data();
      std::vector<std::string> names = {"format_version", "step",  "scheme",         "arch",
                                        "config",         "metrics", "pelab_version", "vocab",
                                        "param_names",    "optimizer/kind", "optimizer/step"};
      for (const auto& [n, t] : d.params) names.push_back("params/" + n);
      for (const auto& [state, ts] : d.optimizer_state)
        for (const auto& [n, t] : d.params) names.push_back("optimizer/" + state + "/" + n);
      for (const auto& [k, v] : d.counters) names.push_back("counters/" + k);
      for (const auto& [k, v] : d.values) names.push_back("values/" + k);
      ASSERT_GT(names.size(), 20u);
      for (const auto& n : names) e.drop_checksum(n);
      e.write_int64("format_version", 1);
    }
    CheckpointData v1, v2 = load_checkpoint(good);
    ASSERT_NO_THROW(v1 = load_checkpoint(path));
    EXPECT_EQ(v1.format_version, 1);
    v1.format_version = v2.format_version;
    EXPECT_TRUE(identical(v1, v2));
  }
  fs::remove_all(dir);
}

// Item 13 (NUL part): tokens containing NUL bytes round-trip exactly.
TEST(CheckpointHardening, TokensWithNulBytesRoundTrip) {
  const fs::path dir = fresh_dir("nul");
  CheckpointData d = sample_data();
  d.vocab.push_back(std::string("\0", 1));
  d.vocab.push_back(std::string("x\0y", 3));
  d.vocab.push_back(std::string("z\0", 2));
  d.vocab.push_back("");
  const std::string path = (dir / "nul.h5").string();
  save_checkpoint(path, d);
  const CheckpointData l = load_checkpoint(path);
  EXPECT_EQ(l.vocab, d.vocab);
  // A NUL byte where HDF5 can only hold a string is a clear error at save time, not a silent cut.
  d.config_yaml += std::string("\0", 1);
  const std::string err = error_of([&] { save_checkpoint(path, d); });
  EXPECT_NE(err.find("dataset config contains a NUL byte"), std::string::npos) << err;
  EXPECT_TRUE(identical(load_checkpoint(path), l));  // the failed save left the file as it was
  fs::remove_all(dir);
}

// Item 9: temporaries of dead processes are removed, those of live ones kept.
TEST(CheckpointHardening, StaleTemporariesOfDeadProcessesAreRemoved) {
  const fs::path dir = fresh_dir("stale");
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(::getpid());
  for (const std::string& n : std::vector<std::string>{"step_4.h5.tmp." + dead, "best.h5.tmp." + dead, "step_6.h5.tmp." + live,
                              "notes.tmp.txt", "step_2.h5"})
    std::ofstream(dir / n) << "x";
  const auto removed = remove_stale_temporaries(dir.string());
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(dir / ("step_4.h5.tmp." + dead)));
  EXPECT_FALSE(fs::exists(dir / ("best.h5.tmp." + dead)));
  EXPECT_TRUE(fs::exists(dir / ("step_6.h5.tmp." + live)));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp.txt"));
  EXPECT_TRUE(fs::exists(dir / "step_2.h5"));
  fs::remove_all(dir);
}

// Item 9: a run killed during its first checkpoint write (only a temporary of a dead process in
// checkpoints/) starts again without --overwrite; a resume removes a dead process's temporaries.
TEST(CheckpointHardening, RunKilledDuringItsFirstCheckpointRestartsAndResumeCleansUp) {
  const fs::path dir = fresh_dir("first");
  const std::string cfg = tiny_config(dir);
  const fs::path run = dir / "runs" / "r", ck = run / "checkpoints";
  fs::create_directories(ck);
  std::ofstream(run / "metrics.jsonl") << "{\"type\": \"train\", \"step\": 1}\n";
  const std::string tmp = "step_2.h5.tmp." + std::to_string(dead_pid());
  std::ofstream(ck / tmp) << std::string(4096, 'x');
  // A config.yaml that pelab did not write: the directory is not known to be a run, so it is kept.
  std::ofstream(run / "config.yaml") << "my: own file\n";
  PelabRun foreign = run_pelab({"train", cfg, "--progress", "none"}, dir);
  expect_one_error_line(foreign);
  EXPECT_NE(foreign.err.find("already holds a run"), std::string::npos) << foreign.err;
  EXPECT_EQ(slurp(run / "config.yaml"), "my: own file\n");
  // A temporary of a live process (a run saving its first checkpoint now) is not touched.
  const std::string live = "step_2.h5.tmp." + std::to_string(::getpid());
  std::ofstream(run / "config.yaml") << "# pelab run config (resolved): tiny.yaml\n";
  std::ofstream(ck / live) << "x";
  PelabRun busy = run_pelab({"train", cfg, "--progress", "none"}, dir);
  expect_one_error_line(busy);
  EXPECT_TRUE(fs::exists(ck / live));
  fs::remove(ck / live);
  // The run killed during its first checkpoint write restarts without --overwrite.
  PelabRun fresh = run_pelab({"train", cfg, "--progress", "none"}, dir);
  ASSERT_EQ(fresh.code(), 0) << fresh.err;
  EXPECT_FALSE(fs::exists(ck / tmp));
  EXPECT_TRUE(temporaries(ck).empty());
  EXPECT_EQ(load_checkpoint((ck / "step_4.h5").string()).step, 4);
  // A finished run still needs --overwrite to start over.
  PelabRun again = run_pelab({"train", cfg, "--progress", "none"}, dir);
  expect_one_error_line(again);
  EXPECT_NE(again.err.find("already holds a run"), std::string::npos) << again.err;
  // Resume: temporaries of a dead process are removed.
  const std::string tmp2 = "step_6.h5.tmp." + std::to_string(dead_pid());
  std::ofstream(ck / tmp2) << "partial";
  PelabRun resumed = run_pelab({"train", cfg, "--progress", "none", "--resume", "runs/r", "--set",
                           "train.steps=6"},
                          dir);
  ASSERT_EQ(resumed.code(), 0) << resumed.err;
  EXPECT_FALSE(fs::exists(ck / tmp2));
  EXPECT_EQ(load_checkpoint((ck / "step_6.h5").string()).step, 6);
  fs::remove_all(dir);
}

// Item 10: resuming from an older checkpoint drops best.h5 of the discarded timeline; best.h5 is
// re-derived from the kept timeline's best checkpoint, and eval RUN_DIR evaluates that one.
TEST(CheckpointHardening, BestAfterResumingFromAnOlderCheckpointBelongsToTheKeptTimeline) {
  const fs::path dir = fresh_dir("best");
  const std::string cfg = tiny_config(dir, "eval:\n  best_metric: loss\n");
  PelabRun trained = run_pelab({"train", cfg, "--progress", "none", "--set", "train.steps=8", "--set",
                           "train.lr=0.01"},
                          dir);
  ASSERT_EQ(trained.code(), 0) << trained.err;
  const fs::path ck = dir / "runs" / "r" / "checkpoints";
  const int64_t old_best = checkpoint_step((ck / "best.h5").string());
  ASSERT_GT(old_best, 2) << "the validation loss should improve after step 2";
  const CheckpointData at2 = load_checkpoint((ck / "step_2.h5").string());
  ASSERT_EQ(at2.counters.at("best_step"), 2);
  // Resume from step 2 and stop there: the newer checkpoints and their best.h5 are gone.
  PelabRun resumed = run_pelab({"train", cfg, "--progress", "none", "--resume",
                                (ck / "step_2.h5").string(), "--set", "train.steps=8", "--set",
                                "train.lr=0.01", "--stop-after", "2"},
                               dir);
  ASSERT_EQ(resumed.code(), 0) << resumed.err;
  EXPECT_FALSE(fs::exists(ck / "step_4.h5"));
  ASSERT_TRUE(fs::exists(ck / "best.h5"));
  const CheckpointData best = load_checkpoint((ck / "best.h5").string());
  EXPECT_EQ(best.step, 2);
  EXPECT_TRUE(identical(best, at2));
  PelabRun ev = run_pelab({"eval", "runs/r"}, dir);
  ASSERT_EQ(ev.code(), 0) << ev.err;
  EXPECT_NE((ev.out + ev.err).find("best.h5"), std::string::npos) << ev.out << ev.err;
  EXPECT_NE(ev.out.find("best.h5 (step 2)"), std::string::npos) << ev.out;
  fs::remove_all(dir);
}

// Item 16: pe.rope_train_length 0 resolves to the longest training sequence when the run is trained;
// the checkpoint stores it, so eval after the training file changed gives the same results.
TEST(CheckpointHardening, ResolvedRopeTrainLengthIsStoredAndUsedByEval) {
  const fs::path dir = fresh_dir("ropelen");
  std::ofstream(dir / "train.tsv") << "ab\tba\nabc\tcba\nbca\tacb\ncab\tbac\nab\tba\nba\tab\n";
  std::ofstream(dir / "valid.tsv") << "abc\tcba\nbb\tbb\n";
  std::ofstream(dir / "test.tsv") << "abcabc\tcbacba\ncabcab\tbacbac\n";
  const fs::path p = dir / "text.yaml";
  std::ofstream(p) << "task:\n  name: textfile\n  train_file: train.tsv\n  valid_file: valid.tsv\n"
                      "  test_files: [test.tsv]\n"
                      "model:\n  d_model: 16\n  heads: 2\n  d_ff: 32\n  encoder_layers: 1\n"
                      "  decoder_layers: 1\n"
                      "pe:\n  scheme: rope\n  rope_scaling: yarn\n  rope_scaling_factor: 2\n"
                      "  rope_train_length: 0\n"
                      "train:\n  steps: 4\n  batch_size: 4\n  warmup: 1\n  log_every: 2\n"
                      "  eval_every: 4\n  checkpoint_every: 4\n  threads: 1\n  run_dir: runs\n"
                      "  run_name: r\n";
  PelabRun trained = run_pelab({"train", p.string(), "--progress", "none"}, dir);
  ASSERT_EQ(trained.code(), 0) << trained.err;
  const CheckpointData ck = load_checkpoint((dir / "runs/r/checkpoints/step_4.h5").string());
  EXPECT_EQ(ck.counters.at("train_positions"), 4);  // max(|src|, |tgt|) + 1 of "abc"
  PelabRun before = run_pelab({"eval", "runs/r", "--out", "before"}, dir);
  ASSERT_EQ(before.code(), 0) << before.err;
  // A much longer training example now: recomputing the length (151 instead of 4) would move YaRN's
  // interpolation ramp and change the results.
  std::string src, tgt;
  for (int i = 0; i < 50; ++i) src += "abc", tgt += "cba";
  std::ofstream(dir / "train.tsv", std::ios::app) << src << "\t" << tgt << "\n";
  PelabRun after = run_pelab({"eval", "runs/r", "--out", "after"}, dir);
  ASSERT_EQ(after.code(), 0) << after.err;
  const std::string b = slurp(dir / "before" / "eval.json"), a = slurp(dir / "after" / "eval.json");
  EXPECT_FALSE(b.empty());
  EXPECT_EQ(b, a);
  fs::remove_all(dir);
}
