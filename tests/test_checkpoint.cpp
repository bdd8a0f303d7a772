// Checkpoint tests: round trip, atomic save under injected failure and SIGKILL, clear errors for
// corrupt / truncated / non-HDF5 files and shape or version mismatches, h5py interop.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pelab/pelab.h"
#include "train/checkpoint.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

using namespace pelab;
namespace fs = std::filesystem;

namespace {

class TwoLayer : public Module {
 public:
  TwoLayer(int64_t in, int64_t hidden, Generator& g) {
    a = register_module("a", std::make_shared<Linear>(in, hidden, g));
    b = register_module("b", std::make_shared<Linear>(hidden, 3, g));
  }
  std::shared_ptr<Linear> a, b;
};

fs::path temp_dir(const std::string& name) {
  return pelab::testing::fresh_temp_dir("pelab_ckpt_" + name);
}

CheckpointData make_data(TwoLayer& m, AdamW& opt, int64_t step) {
  CheckpointData d;
  d.step = step;
  d.scheme = "rope";
  d.arch = "seq2seq";
  d.config_yaml = "model:\n  d_model: 8\n";
  d.metrics_jsonl = "{\"step\": 1, \"loss\": 2.5}\n";
  d.vocab = {"<pad>", "<bos>", "\n", "é", ""};
  capture_parameters(m, d);
  capture_optimizer(opt, "adamw", d);
  d.counters["data_position"] = 12345;
  d.counters["rng_offset"] = -7;
  d.values["best_metric"] = 0.875;
  return d;
}

void train_steps(TwoLayer& m, AdamW& opt, int n) {
  Tensor x = Tensor::from_vector({0.5, -1.0, 2.0, 0.25, 1.5, -0.5, 0.0, 1.0}, {2, 4});
  for (int i = 0; i < n; ++i) {
    opt.zero_grad();
    Tensor y = m.b->forward(tanh(m.a->forward(x)));
    sum(y * y).backward();
    opt.step();
  }
}

using pelab::testing::error_of;

}  // namespace

TEST(Checkpoint, RoundTripRestoresEverything) {
  auto dir = temp_dir("roundtrip");
  Generator g(3);
  TwoLayer m(4, 5, g);
  AdamW opt(m.parameters(), 1e-2);
  train_steps(m, opt, 3);
  const std::string path = (dir / "ckpt.h5").string();
  save_checkpoint(path, make_data(m, opt, 3));

  CheckpointData d = load_checkpoint(path);
  EXPECT_EQ(d.step, 3);
  EXPECT_EQ(d.scheme, "rope");
  EXPECT_EQ(d.arch, "seq2seq");
  EXPECT_EQ(d.config_yaml, "model:\n  d_model: 8\n");
  EXPECT_EQ(d.vocab, (std::vector<std::string>{"<pad>", "<bos>", "\n", "é", ""}));
  EXPECT_EQ(d.counters.at("data_position"), 12345);
  EXPECT_EQ(d.counters.at("rng_offset"), -7);
  EXPECT_DOUBLE_EQ(d.values.at("best_metric"), 0.875);
  EXPECT_EQ(d.optimizer, "adamw");
  EXPECT_EQ(d.optimizer_step, 3);

  Generator g2(99);
  TwoLayer m2(4, 5, g2);
  AdamW opt2(m2.parameters(), 1e-2);
  load_parameters(m2, d, path);
  restore_optimizer(opt2, d, path);
  auto p1 = m.named_parameters(), p2 = m2.named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_EQ(p1[i].first, p2[i].first);
    EXPECT_EQ(p1[i].second.to_vector(), p2[i].second.to_vector()) << p1[i].first;
  }
  // Continuing both gives identical parameters: optimizer moments and step were restored exactly.
  train_steps(m, opt, 2);
  train_steps(m2, opt2, 2);
  p1 = m.named_parameters();
  p2 = m2.named_parameters();
  for (size_t i = 0; i < p1.size(); ++i)
    EXPECT_EQ(p1[i].second.to_vector(), p2[i].second.to_vector()) << p1[i].first;
  fs::remove_all(dir);
}

TEST(Checkpoint, InjectedFailureLeavesPreviousCheckpointIntact) {
  auto dir = temp_dir("inject");
  Generator g(4);
  TwoLayer m(4, 5, g);
  AdamW opt(m.parameters(), 1e-2);
  train_steps(m, opt, 1);
  const std::string path = (dir / "ckpt.h5").string();
  save_checkpoint(path, make_data(m, opt, 1));
  const auto before = load_checkpoint(path).params.at(0).second.to_vector();

  train_steps(m, opt, 1);
  for (int64_t fail_after : {0, 3, 9, 14}) {
    set_checkpoint_fault_injection(fail_after);
    EXPECT_THROW(save_checkpoint(path, make_data(m, opt, 2)), Error);
    set_checkpoint_fault_injection(-1);
    CheckpointData d = load_checkpoint(path);
    EXPECT_EQ(d.step, 1);
    EXPECT_EQ(d.params.at(0).second.to_vector(), before);
  }
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

TEST(Checkpoint, KillDuringSaveLeavesALoadableCheckpoint) {
  auto dir = temp_dir("kill");
  const std::string path = (dir / "ckpt.h5").string();
  Generator g(5);
  TwoLayer small(4, 5, g);
  AdamW opt(small.parameters(), 1e-2);
  save_checkpoint(path, make_data(small, opt, 1));
  for (int attempt = 0; attempt < 3; ++attempt) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: save a large model over the same path, again and again, until killed. One thread:
      // OpenMP thread pools do not survive fork().
      set_num_threads(1);
      Generator gc(6);
      TwoLayer big(1024, 2048, gc);
      AdamW optc(big.parameters(), 1e-2);
      CheckpointData d = make_data(big, optc, 2);
      for (;;) save_checkpoint(path, d);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 97 * attempt));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CheckpointData d;
    ASSERT_NO_THROW(d = load_checkpoint(path));
    EXPECT_TRUE(d.step == 1 || d.step == 2);
    EXPECT_EQ(d.params.size(), 4u);
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, ClearErrorsForBadFiles) {
  auto dir = temp_dir("bad");
  const std::string missing = (dir / "missing.h5").string();
  EXPECT_NE(error_of([&] { load_checkpoint(missing); }).find("no such file"), std::string::npos);

  const std::string text = (dir / "text.h5").string();
  std::ofstream(text) << "this is not hdf5\n";
  EXPECT_NE(error_of([&] { load_checkpoint(text); }).find("not an HDF5 file"), std::string::npos);

  Generator g(7);
  TwoLayer m(64, 64, g);
  AdamW opt(m.parameters(), 1e-2);
  const std::string good = (dir / "good.h5").string();
  save_checkpoint(good, make_data(m, opt, 1));
  const auto size = fs::file_size(good);
  for (double frac : {0.1, 0.5, 0.9}) {
    const std::string trunc = (dir / "trunc.h5").string();
    fs::copy_file(good, trunc, fs::copy_options::overwrite_existing);
    fs::resize_file(trunc, static_cast<uintmax_t>(size * frac));
    const std::string err = error_of([&] { load_checkpoint(trunc); });
    EXPECT_NE(err, "") << "truncated to " << frac;
    EXPECT_NE(err.find(trunc), std::string::npos) << err;
  }
  // Damaged superblock.
  const std::string damaged = (dir / "damaged.h5").string();
  fs::copy_file(good, damaged, fs::copy_options::overwrite_existing);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("XXXXXXXX", 8);
  }
  EXPECT_NE(error_of([&] { load_checkpoint(damaged); }), "");
  fs::remove_all(dir);
}

TEST(Checkpoint, ShapeNameAndVersionMismatchesNameTheDataset) {
  auto dir = temp_dir("mismatch");
  const std::string path = (dir / "ckpt.h5").string();
  Generator g(8);
  TwoLayer m(4, 5, g);
  AdamW opt(m.parameters(), 1e-2);
  save_checkpoint(path, make_data(m, opt, 1));
  CheckpointData d = load_checkpoint(path);

  TwoLayer wider(4, 6, g);
  const std::string err = error_of([&] { load_parameters(wider, d, path); });
  EXPECT_NE(err.find("params/a.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("[5, 4]"), std::string::npos) << err;
  EXPECT_NE(err.find("[6, 4]"), std::string::npos) << err;

  Linear other(4, 5, g);  // names "weight"/"bias" are not in the checkpoint
  EXPECT_NE(error_of([&] { load_parameters(other, d, path); }).find("params/weight"), std::string::npos);

  CheckpointData future = make_data(m, opt, 1);
  future.format_version = 99;
  const std::string fpath = (dir / "future.h5").string();
  save_checkpoint(fpath, future);
  EXPECT_NE(error_of([&] { load_checkpoint(fpath); }).find("format version 99"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, OpensInH5py) {
  const std::string probe = pelab::testing::python3() + " -c 'import h5py, numpy' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0)
    GTEST_SKIP() << "python3-h5py is not installed (tools/setup.sh installs it)";
  auto dir = temp_dir("h5py");
  const std::string path = (dir / "ckpt.h5").string();
  Generator g(9);
  TwoLayer m(4, 5, g);
  AdamW opt(m.parameters(), 1e-2);
  train_steps(m, opt, 1);
  save_checkpoint(path, make_data(m, opt, 1));
  const std::string out = (dir / "out.txt").string();
  const std::string cmd = pelab::testing::python3() + " " + pelab::testing::source_dir() +
                          "/tools/inspect_checkpoint.py " + path + " > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(out);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("a.weight"), std::string::npos) << all;
  EXPECT_NE(all.find("[5, 4]"), std::string::npos) << all;
  EXPECT_NE(all.find("b.bias"), std::string::npos) << all;
  EXPECT_NE(all.find("4 parameters, 43 values"), std::string::npos) << all;
  EXPECT_NE(all.find("scheme rope"), std::string::npos) << all;
  fs::remove_all(dir);
}
