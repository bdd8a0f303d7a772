// Device-parametrized tests (tests/device_param.h): what runs on a device but is not a CUDA
// kernel's numerics, written once and run on every device here: the CPU always (so CI runs every
// body), cuda where a GPU is usable (tools/gpu_check.sh runs them there).
//  * DeviceParam: which devices the tests run on, and why not cuda.
//  * DeviceTraining: three AdamW steps with clipping of a small transformer for every scheme, both
//    archs, float32 and float64, on the device against the CPU; whole backward passes bit-identical
//    run to run.
//  * DeviceCheckpoint: a checkpoint saved from the device's model (parameters and AdamW state)
//    loads bit-exactly on the CPU and back onto the device, whose next step is the same.
//  * DeviceDecode: greedy decoding (cached and not) emits the CPU's tokens, every scheme, both archs.
//  * DeviceErrors: an out-of-range index or target is one pelab::Error naming the op and the value
//    (at once on the CPU, at the next synchronisation on a GPU: the kernels check on the device).
//  * DeviceStep: Optimizer::guarded_step equals clip_grad_norm + step() decided on the host (AdamW
//    and SGD variants, clipping on and off, a non-finite loss and a non-finite gradient skipped),
//    in a fixed number of backend calls whatever the parameter count; and a step of `pelab train`
//    for every registered scheme and both archs reads nothing back from the device and waits for
//    nothing unless it logs (then it reads once), within a per-layer budget of backend calls and
//    allocations (docs/performance.md, "Host overhead per step").
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/host_reads.h"
#include "pelab/pelab.h"
#include "tests/device_param.h"
#include "tests/pe_test_util.h"
#include "tests/run_test_util.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#ifdef PELAB_WITH_CUDA
#include "cuda/cuda_backend.cuh"
#endif

using namespace pelab;
using pelab::testing::bit_equal;
using pelab::testing::DeviceTest;
using pelab::testing::error_of;
using pelab::testing::expect_close;
using pelab::testing::Values;

namespace {

const Device kCpu = Device::cpu();

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// A small transformer for every scheme, and one fixed batch.

models::ModelConfig small_model(const std::string& arch, const std::string& scheme,
                                const std::string& dtype) {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab = 13;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.dropout = 0.1;  // identical masks on every device (counter-based RNG)
  c.dtype = dtype;
  c.init_std = 0.1;
  c.seed = 3;
  c.pe = pelab::testing::small_pe(scheme);
  return c;
}

struct Batch {
  Tensor src, src_mask, tgt_in, tgt_mask, tgt_out;
  Batch to(Device d) const {
    return {src.to(d), src_mask.to(d), tgt_in.to(d), tgt_mask.to(d), tgt_out.to(d)};
  }
};

Batch make_batch(int64_t vocab) {
  Generator gen(17);
  auto ids = [&](int64_t B, int64_t L) {
    std::vector<int64_t> v(static_cast<size_t>(B * L));
    for (auto& x : v) x = 3 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(vocab - 3)));
    return v;
  };
  const int64_t B = 3, S = 7, T = 6;
  Batch b;
  b.src = Tensor::from_ints(ids(B, S), {B, S});
  std::vector<double> sm(B * S, 1.0);
  sm[S - 1] = sm[S - 2] = 0.0;  // row 0 padded at the end
  b.src_mask = Tensor::from_vector(sm, {B, S});
  b.tgt_in = Tensor::from_ints(ids(B, T), {B, T});
  std::vector<double> tm(B * T, 1.0);
  tm[2 * T - 1] = 0.0;
  b.tgt_mask = Tensor::from_vector(tm, {B, T});
  std::vector<int64_t> out = ids(B, T);
  out[2 * T - 1] = -100;  // ignored
  b.tgt_out = Tensor::from_ints(out, {B, T});
  return b;
}

Tensor loss_of(models::Transformer& m, const Batch& b) {
  Tensor logits = m.is_seq2seq() ? m.forward_seq2seq(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
                                 : m.forward_decoder(b.tgt_in, b.tgt_mask);
  return cross_entropy(logits, b.tgt_out, -100, 0.1);
}

Values randv(int64_t n, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Values v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(seed, static_cast<uint64_t>(i));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

// The devices this binary runs the device-parametrized tests on, recorded in the test's output
// (and in the gtest XML as the property "devices"), with the reason cuda is not one of them.
TEST(DeviceParam, ListsTheDevicesItRunsOn) {
  const std::vector<std::string> d = pelab::testing::test_devices();
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front(), "cpu");
  std::string list;
  for (const auto& x : d) list += (list.empty() ? "" : ", ") + x;
  const std::string why = pelab::testing::cuda_unavailable_reason();
  EXPECT_EQ(why.empty(), std::find(d.begin(), d.end(), "cuda") != d.end());
  const std::string line = "device-parametrized tests run on: " + list +
                           (why.empty() ? "" : " (not cuda: " + why + ")");
  RecordProperty("devices", line);
  std::printf("%s\n", line.c_str());
}

// ---------------------------------------------------------------------------------------------
class DeviceTraining : public DeviceTest {};

TEST_P(DeviceTraining, StepsMatchCpuForEverySchemeAndArch) {
  const Device dev = device();
  const std::vector<std::string> schemes = models::pe_names();
  ASSERT_FALSE(schemes.empty());
  for (const auto& scheme : schemes) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      for (const std::string dtype : {"float32", "float64"}) {
        SCOPED_TRACE(scheme + " " + arch + " " + dtype);
        const bool f64 = dtype == "float64";
        const models::ModelConfig cfg = small_model(arch, scheme, dtype);
        models::Transformer mc(cfg), mg(cfg);
        mg.to(dev);
        for (const auto& nt : mg.named_parameters()) ASSERT_EQ(nt.second.device(), dev) << nt.first;
        const Batch bc = make_batch(cfg.vocab), bg = bc.to(dev);
        AdamW oc(mc.parameters(), 3e-3), og(mg.parameters(), 3e-3);
        const auto pc = mc.named_parameters(), pg = mg.named_parameters();
        for (int step = 0; step < 3; ++step) {
          oc.zero_grad();
          og.zero_grad();
          Tensor lc = loss_of(mc, bc), lg = loss_of(mg, bg);
          EXPECT_EQ(lg.device(), dev);
          const double vc = lc.item(), vg = lg.item();
          EXPECT_NEAR(vg, vc, (f64 ? 1e-11 : 2e-5) * std::max(1.0, std::fabs(vc)))
              << "loss at step " << step;
          lc.backward();
          lg.backward();
          if (step == 0) {
            for (size_t i = 0; i < pc.size(); ++i) {
              const Tensor gc = pc[i].second.grad(), gg = pg[i].second.grad();
              ASSERT_EQ(gc.defined(), gg.defined()) << pc[i].first;
              if (gc.defined())
                expect_close(gc, gg, f64 ? 1e-10 : 1e-4, "gradient of " + pc[i].first);
            }
          }
          const double nc = clip_grad_norm(mc.parameters(), 1.0);
          const double ng = clip_grad_norm(mg.parameters(), 1.0);
          EXPECT_NEAR(ng, nc, (f64 ? 1e-10 : 1e-4) * std::max(1.0, nc)) << "grad norm";
          oc.step();
          og.step();
        }
        // float64: the parameters after three AdamW steps agree tightly. (float32 Adam updates of
        // near-zero gradients amplify rounding noise, so only losses and gradients are compared.)
        if (f64)
          for (size_t i = 0; i < pc.size(); ++i)
            expect_close(pc[i].second, pg[i].second, 1e-9, "parameter " + pc[i].first);
        EXPECT_EQ(mc.rng().offset(), mg.rng().offset()) << "dropout consumed the same counters";
      }
    }
  }
}

TEST_P(DeviceTraining, RepeatedStepsAreBitIdentical) {
  for (const std::string scheme : {"shaw", "t5", "rope"}) {
    std::vector<Tensor> grads[2];
    for (int run = 0; run < 2; ++run) {
      models::Transformer m(small_model("seq2seq", scheme, "float32"));
      m.to(device());
      const Batch b = make_batch(13).to(device());
      Tensor loss = loss_of(m, b);
      loss.backward();
      for (const Tensor& p : m.parameters()) grads[run].push_back(p.grad());
    }
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_TRUE(bit_equal(grads[0][i], grads[1][i])) << scheme << " parameter " << i;
  }
}

PELAB_INSTANTIATE_DEVICE_TESTS(DeviceTraining);

// ---------------------------------------------------------------------------------------------
class DeviceCheckpoint : public DeviceTest {};

// (Was CudaCheckpoint.GpuCheckpointLoadsOnCpuAndBack, which ran only with a GPU and rotted: the
// checkpoint format gained a vocabulary and this CheckpointData had none.)
TEST_P(DeviceCheckpoint, SavedOnDeviceLoadsOnCpuAndBack) {
  namespace fs = std::filesystem;
  const Device dev = device();
  const fs::path dir = fs::temp_directory_path() /
                       ("pelab_device_ckpt_" + GetParam() + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.h5").string();

  const models::ModelConfig cfg = small_model("seq2seq", "rope", "float32");
  models::Transformer gpu(cfg);
  gpu.to(dev);
  const Batch b = make_batch(cfg.vocab);
  AdamW opt(gpu.parameters(), 1e-2);
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    loss_of(gpu, b.to(dev)).backward();
    opt.step();
  }
  CheckpointData d;
  d.step = 2;
  d.scheme = "rope";
  d.arch = "seq2seq";
  for (int64_t i = 0; i < cfg.vocab; ++i) d.vocab.push_back("t" + std::to_string(i));
  capture_parameters(gpu, d);
  capture_optimizer(opt, "adamw", d);
  save_checkpoint(path, d);

  const CheckpointData loaded = load_checkpoint(path);
  EXPECT_EQ(loaded.vocab, d.vocab);
  models::Transformer cpu(cfg);
  load_parameters(cpu, loaded, path);
  const auto pg = gpu.named_parameters(), pc = cpu.named_parameters();
  ASSERT_EQ(pg.size(), pc.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pc[i].second.device(), kCpu);
    EXPECT_TRUE(bit_equal(pg[i].second, pc[i].second)) << pg[i].first;
  }
  // ... and back onto the device, with the optimizer state.
  models::Transformer gpu2(cfg);
  gpu2.to(dev);
  load_parameters(gpu2, loaded, path);
  AdamW opt2(gpu2.parameters(), 1e-2);
  restore_optimizer(opt2, loaded, path);
  const auto pg2 = gpu2.named_parameters();
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg2[i].second.device(), dev);
    EXPECT_TRUE(bit_equal(pg[i].second, pg2[i].second)) << pg[i].first;
  }
  EXPECT_EQ(opt2.step_count(), opt.step_count());
  // The next step is the same on the original and the reloaded model.
  gpu.eval();
  gpu2.eval();
  for (auto* o : {&opt, &opt2}) o->zero_grad();
  loss_of(gpu, b.to(dev)).backward();
  loss_of(gpu2, b.to(dev)).backward();
  opt.step();
  opt2.step();
  for (size_t i = 0; i < pg.size(); ++i)
    EXPECT_TRUE(bit_equal(pg[i].second, pg2[i].second)) << "after a step: " << pg[i].first;
  // The CPU copy computes the same loss as the device model it came from (eval: no dropout).
  cpu.eval();
  models::Transformer gpu3(cfg);
  gpu3.to(dev);
  load_parameters(gpu3, loaded, path);
  gpu3.eval();
  NoGradGuard ng;
  EXPECT_NEAR(loss_of(cpu, b).item(), loss_of(gpu3, b.to(dev)).item(), 2e-5);
  fs::remove_all(dir);
}

PELAB_INSTANTIATE_DEVICE_TESTS(DeviceCheckpoint);

// ---------------------------------------------------------------------------------------------
class DeviceErrors : public DeviceTest {};

// Indices and targets are checked by the kernels on the device that holds them (the host reads
// nothing back): the CPU throws at once, a GPU reports the first bad value at its next
// synchronisation point (any read). Either way one pelab::Error names the op, the value and where.
TEST_P(DeviceErrors, IndexAndTargetErrorsBecomePelabErrors) {
  const Device d = device();
  Backend& be = backend();
  const Tensor in = Tensor::from_vector(randv(15, 71), {15}, DType::Float32, d);
  const Tensor idx = Tensor::from_ints({0, 4, 9, 1}, {4}, d);
  const Tensor out = Tensor::zeros({12}, DType::Float32, d);
  // Backend level.
  std::string msg = error_of([&] {
    be.index_select(view_of(out), view_of(in), view_of(idx), 1, 5, 4, 3);
    be.synchronize();
  });
  EXPECT_TRUE(contains(msg, "index_select")) << msg;
  EXPECT_TRUE(contains(msg, "index 9 at position 2")) << msg;
  EXPECT_TRUE(contains(msg, "[0, 5)")) << msg;
  // Reported once (a GPU resets its record).
  EXPECT_EQ(error_of([&] { be.synchronize(); }), "");
  // scatter_add: reported by the next read of any tensor at the latest.
  const Tensor acc = Tensor::zeros({2, 3}, DType::Float64, d);
  const Tensor src = Tensor::from_vector({1, 2, 3, 4}, {4}, DType::Float64, d);
  const Tensor sidx = Tensor::from_ints({0, 2, -1, 1}, {4}, d);
  msg = error_of([&] {
    be.scatter_add(view_of(acc), view_of(src), view_of(sidx), 2, 3, 2, 1);
    (void)acc.to_vector();
  });
  EXPECT_TRUE(contains(msg, "scatter_add: index -1 at position 2")) << msg;
#ifdef PELAB_WITH_CUDA
  if (d.is_cuda()) {
    // With sync checks on, the kernel call itself throws.
    CudaBackend::set_sync_checks(true);
    const Tensor five = Tensor::from_ints(std::vector<int64_t>(12, 5), {12}, d);
    msg = error_of([&] { be.gather(view_of(out), view_of(in), view_of(five), 1, 5, 4, 3); });
    CudaBackend::set_sync_checks(false);
    EXPECT_TRUE(contains(msg, "gather: index 5 at position ")) << msg;
  }
#endif
  // Ops level: the value and the kernel named (on the CPU also the op: "embedding: index_select").
  const Tensor table = Tensor::ones({5, 3}, DType::Float32, d);
  msg = error_of([&] { (void)index_select(table, 0, Tensor::from_ints({1, 7}, {2}, d)).to_vector(); });
  EXPECT_TRUE(contains(msg, "index_select: index 7 at position 1")) << msg;
  msg = error_of([&] { (void)embedding(table, Tensor::from_ints({1, 12}, {2}, d)).to_vector(); });
  EXPECT_TRUE(contains(msg, "index 12 at position 1 is out of range [0, 5)")) << msg;
  if (d.is_cpu()) {
    EXPECT_TRUE(contains(msg, "embedding: ")) << msg;
  }
  const Tensor logits = Tensor::zeros({3, 4}, DType::Float32, d);
  msg = error_of([&] { (void)cross_entropy(logits, Tensor::from_ints({0, 4, 1}, {3}, d)).item(); });
  EXPECT_TRUE(contains(msg, "cross_entropy: target 4 at row 1 is out of range [0, 4)")) << msg;
  // Backend level cross-entropy.
  const Tensor loss = Tensor::zeros({1}, DType::Float32, d), count = Tensor::zeros({1}, DType::Float64, d);
  const Tensor rows = Tensor::zeros({3}, DType::Float32, d), lse = Tensor::zeros({3}, DType::Float32, d);
  const Tensor bad = Tensor::from_ints({0, 40, 1}, {3}, d);
  msg = error_of([&] {
    be.cross_entropy(view_of(loss), view_of(count), view_of(rows), view_of(lse), view_of(logits),
                     view_of(bad), 3, 4, -100, 0.0);
    be.synchronize();
  });
  EXPECT_TRUE(contains(msg, "target 40 at row 1 is out of range [0, 4)")) << msg;
  // The device works on.
  EXPECT_EQ(Tensor::from_vector({1.5}, {1}, DType::Float32, d).to_vector(), (Values{1.5}));
}

PELAB_INSTANTIATE_DEVICE_TESTS(DeviceErrors);

// ---------------------------------------------------------------------------------------------
class DeviceDecode : public DeviceTest {};

// Greedy decoding on the device, with and without the KV cache, emits the CPU's tokens: every
// scheme, both architectures, a float64 model (argmax ties cannot flip on rounding), rows of
// different lengths and padding.
TEST_P(DeviceDecode, GreedyDecodeEmitsTheCpusTokens) {
  for (const auto& scheme : models::pe_names()) {
    SCOPED_TRACE(scheme);
    models::Transformer mc(pelab::testing::tiny_model("seq2seq", scheme));
    models::Transformer mg(pelab::testing::tiny_model("seq2seq", scheme));
    mg.to(device());
    const Tensor src = Tensor::from_ints({5, 6, 7, 8, 9, 6, 5, 7, 0, 0, 9, 9, 9, 9, 9}, {3, 5});
    const Tensor src_mask = Tensor::from_ints({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {3, 5});
    const models::SpecialIds ids{0, 1, 4};
    for (const bool cache : {true, false}) {
      const models::GreedyResult want = models::greedy_decode(mc, src, src_mask, 7, cache, ids);
      const models::GreedyResult got =
          models::greedy_decode(mg, src.to(device()), src_mask.to(device()), 7, cache, ids);
      EXPECT_EQ(got.tokens, want.tokens) << "seq2seq, cache " << cache;
      EXPECT_EQ(got.finished, want.finished) << "seq2seq, cache " << cache;
    }
    models::Transformer dc(pelab::testing::tiny_model("decoder", scheme));
    models::Transformer dg(pelab::testing::tiny_model("decoder", scheme));
    dg.to(device());
    const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6, 4}, {1, 7, 4}, {1, 8, 9, 4}};
    for (const bool cache : {true, false}) {
      const models::GreedyResult want = models::greedy_decode(dc, prompts, 6, cache, ids);
      const models::GreedyResult got = models::greedy_decode(dg, prompts, 6, cache, ids);
      EXPECT_EQ(got.tokens, want.tokens) << "decoder, cache " << cache;
      EXPECT_EQ(got.finished, want.finished) << "decoder, cache " << cache;
    }
  }
}

PELAB_INSTANTIATE_DEVICE_TESTS(DeviceDecode);

// ---------------------------------------------------------------------------------------------
class DeviceStep : public DeviceTest {};

namespace {

// Parameters of several shapes (one above a multi-tensor launch's chunk of 8192 elements), and
// gradients drawn for a step; `bad` puts an infinity into one gradient.
std::vector<Tensor> step_params(DType dt, Device d) {
  const std::vector<Shape> shapes = {{7, 5}, {5}, {100, 90}, {1}, {64, 33}, {300}};
  std::vector<Tensor> ps;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = Tensor::from_vector(randv(shape_numel(shapes[i]), 500 + i), shapes[i], dt, d);
    p.set_requires_grad(true);
    ps.push_back(p);
  }
  return ps;
}
void set_step_grads(const std::vector<Tensor>& ps, int step, bool bad) {
  for (size_t i = 0; i < ps.size(); ++i) {
    Values g = randv(ps[i].numel(), 900 + 31 * step + i, -0.5, 0.5);
    if (bad && i == 2) g[17] = std::numeric_limits<double>::infinity();
    Tensor(ps[i]).set_grad(Tensor::from_vector(g, ps[i].shape(), ps[i].dtype(), ps[i].device()));
  }
}

struct OptimizerKind {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make;
};
std::vector<OptimizerKind> optimizer_kinds() {
  return {
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(std::move(p), 1e-2); }},
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), 0.1); }},
      {"sgd momentum",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(std::move(p), 0.1, SGDOptions{0.9, 0.1, 1e-3, false});
       }},
      {"sgd nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(std::move(p), 0.1, SGDOptions{0.9, 0.0, 1e-3, true});
       }},
  };
}

}  // namespace

// Optimizer::guarded_step on the device against the host's decision on the CPU (clip_grad_norm,
// then step() when the norm and the loss are finite), over five steps of which the second has a
// NaN loss and the fourth an infinite gradient (both skipped): the same norms, step counts,
// parameters and optimizer state; on the CPU bit for bit.
TEST_P(DeviceStep, GuardedStepMatchesClipAndStep) {
  const Device dev = device();
  const bool exact = dev.is_cpu();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const OptimizerKind& kind : optimizer_kinds()) {
      for (double max_norm : {std::numeric_limits<double>::infinity(), 0.5}) {
        SCOPED_TRACE(kind.name + " " + dtype_name(dt) + " max_norm " + std::to_string(max_norm));
        const std::vector<Tensor> ref = step_params(dt, kCpu), got = step_params(dt, dev);
        std::unique_ptr<Optimizer> oref = kind.make(ref), ogot = kind.make(got);
        for (int step = 0; step < 5; ++step) {
          const double loss = step == 1 ? std::numeric_limits<double>::quiet_NaN() : 0.5 + step;
          set_step_grads(ref, step, step == 3);
          set_step_grads(got, step, step == 3);
          const double norm = clip_grad_norm(ref, max_norm);
          if (std::isfinite(norm) && std::isfinite(loss)) oref->step();
          const Tensor rec = Tensor::from_vector({loss, 0, 0}, {3}, DType::Float64, dev);
          ogot->guarded_step(rec, max_norm);
          const Values r = rec.to_vector();
          if (std::isfinite(norm) || exact) {
            if (exact) EXPECT_TRUE(r[2] == norm || (std::isnan(r[2]) && std::isnan(norm))) << step;
            else EXPECT_NEAR(r[2], norm, 1e-12 * norm) << "norm at step " << step;
          } else {
            EXPECT_FALSE(std::isfinite(r[2])) << "norm at step " << step;
          }
        }
        EXPECT_EQ(ogot->step_count(), 3) << "two of five steps skipped";
        EXPECT_EQ(oref->step_count(), 3);
        const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
        for (size_t i = 0; i < ref.size(); ++i) {
          if (exact) EXPECT_TRUE(bit_equal(ref[i], got[i])) << "parameter " << i;
          else expect_close(ref[i], got[i], tol, "parameter " + std::to_string(i));
          const auto& sr = oref->state_buffers()[i];
          const auto& sg = ogot->state_buffers()[i];
          for (size_t k = 0; k < sr.size(); ++k) {
            if (exact) EXPECT_TRUE(bit_equal(sr[k], sg[k])) << "state " << k << " of " << i;
            else expect_close(sr[k], sg[k], tol, "state of parameter " + std::to_string(i));
          }
        }
      }
    }
  }
}

// The clip and the update of any number of parameters is three backend calls (sum_squares_many,
// update_control, one multi-tensor update), with no read, write or wait: a per-parameter call
// (the regression this catches) would make it grow with the count.
TEST_P(DeviceStep, GuardedStepIsAFixedNumberOfBackendCalls) {
  for (const OptimizerKind& kind : optimizer_kinds()) {
    for (int n : {1, 100}) {
      SCOPED_TRACE(kind.name + ", " + std::to_string(n) + " parameters");
      std::vector<Tensor> ps;
      for (int i = 0; i < n; ++i) {
        Tensor p = Tensor::from_vector(randv(15, 40 + i), {3, 5}, DType::Float32, device());
        p.set_requires_grad(true);
        ps.push_back(p);
      }
      std::unique_ptr<Optimizer> opt = kind.make(ps);
      const Tensor rec = Tensor::zeros({3}, DType::Float64, device());
      set_step_grads(ps, 0, false);
      opt->guarded_step(rec, 1.0);  // the first creates the control record (one write)
      set_step_grads(ps, 1, false);
      const BackendCounts before = backend_counts();
      opt->guarded_step(rec, 1.0);
      const BackendCounts c = backend_counts() - before;
      EXPECT_EQ(c.calls, 3);
      EXPECT_EQ(c.reads, 0);
      EXPECT_EQ(c.syncs, 0);
      EXPECT_EQ(c.writes, 0);
      EXPECT_LE(c.allocs, 1) << "at most a scratch buffer for the partial sums";
      EXPECT_EQ(opt->step_count(), 2);
    }
  }
}

namespace {

// The per-step budget of backend calls and allocator requests of a training step (the interval
// between two steps' grad_hook: one step's update and the next one's forward and backward) for a
// model of `layers` layers (encoder + decoder) of the tiny test config: what the step makes today,
// measured per scheme, with about 25 % to spare (docs/performance.md, "Host overhead per step").
struct StepBudget {
  int64_t calls, allocs;
};
StepBudget step_budget(int64_t layers) { return {60 + 220 * layers, 60 + 200 * layers}; }

}  // namespace

// A step of `pelab train` on the device, for every registered scheme and both archs: between two
// steps' backward passes nothing is read back from the device and nothing waits for it, except at
// a step that logs (train.log_every 3: steps 3 and 6), which reads its records back once; calls
// and allocations per step stay within the budget for the model's layers.
TEST_P(DeviceStep, TrainingStepsReadNothingBackUnlessTheyLog) {
  // The path a GPU takes, on every device: the CPU could read for free where a GPU may not.
  const EmulateDeviceReads device_reads;
  namespace fs = std::filesystem;
  const fs::path dir = pelab::testing::fresh_temp_dir("pelab_device_step_" + GetParam());
  const std::vector<std::string> schemes = models::pe_names();
  ASSERT_FALSE(schemes.empty());
  std::string table;
  for (const auto& scheme : schemes) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      SCOPED_TRACE(scheme + " " + arch);
      const Config cfg = pelab::testing::tiny_run_config(
          {"task.num_symbols=4", "task.train_min_len=2", "task.train_max_len=6",
           "task.test_lengths=[3]", "task.num_eval_examples=2", "task.formulation=" + arch,
           "model.arch=" + arch, "model.d_model=16", "model.heads=2", "model.d_ff=32",
           "model.encoder_layers=1", "model.decoder_layers=1", "pe.scheme=" + scheme,
           "train.device=" + GetParam(), "train.steps=6", "train.batch_size=4", "train.warmup=1",
           "train.log_every=3", "train.eval_every=0", "train.checkpoint_every=0",
           "train.threads=1", "eval.batch_size=2"},
          dir, scheme + "_" + arch, {});
      const int64_t layers = arch == "seq2seq" ? 2 : 1;
      std::vector<BackendCounts> at;
      TrainOptions o = pelab::testing::quiet_train();
      o.grad_hook = [&](int64_t, const std::vector<Tensor>&) { at.push_back(backend_counts()); };
      train(cfg, o);
      ASSERT_EQ(at.size(), 6u);
      const StepBudget budget = step_budget(layers);
      for (size_t k = 0; k + 1 < at.size(); ++k) {
        const BackendCounts c = at[k + 1] - at[k];
        const bool logs = (k + 1) % 3 == 0;  // step k + 1 (1-based) logs
        EXPECT_EQ(c.reads, logs ? 1 : 0) << "after step " << k + 1;
        EXPECT_EQ(c.syncs, 0) << "after step " << k + 1;
        if (k == 0) continue;  // the first step also creates the step records
        EXPECT_LE(c.calls, budget.calls) << "after step " << k + 1;
        EXPECT_LE(c.allocs, budget.allocs) << "after step " << k + 1;
        if (k == 1) {
          char row[160];
          std::snprintf(row, sizeof row, "%-10s %-8s calls %4lld allocs %4lld writes %3lld\n",
                        scheme.c_str(), arch.c_str(), static_cast<long long>(c.calls),
                        static_cast<long long>(c.allocs), static_cast<long long>(c.writes));
          table += row;
        }
      }
    }
  }
  std::printf("per step (1+1 layers, batch 4, on %s):\n%s", GetParam().c_str(), table.c_str());
  fs::remove_all(dir);
}


namespace {

// The backend calls and allocator requests of one steady training step of a model built from
// small_model(arch, scheme) with `layers` layers per stack on `dev`: forward on a padded batch of
// B rows of length L, cross-entropy, backward, guarded AdamW step (the third of three steps).
BackendCounts model_step_counts(const std::string& arch, const std::string& scheme, int64_t layers,
                                int64_t heads, int64_t B, int64_t L, Device dev) {
  models::ModelConfig cfg = small_model(arch, scheme, "float32");
  cfg.encoder_layers = cfg.decoder_layers = layers;
  cfg.heads = heads;
  models::Transformer m(cfg);
  m.to(dev);
  AdamW opt(m.parameters(), 1e-3);
  const Tensor rec = Tensor::zeros({3}, DType::Float64, dev);
  Generator gen(5);
  BackendCounts c;
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids(static_cast<size_t>(B * L)), out(ids.size());
    std::vector<double> mask(ids.size(), 1.0);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = 3 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(cfg.vocab - 3)));
      out[i] = 3 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(cfg.vocab - 3)));
    }
    for (int64_t b = 0; b < B; ++b)  // row b padded after L - b % 3 tokens
      for (int64_t j = L - b % 3; j < L; ++j) {
        mask[b * L + j] = 0.0;
        out[b * L + j] = -100;
      }
    const BackendCounts before = backend_counts();
    opt.zero_grad();
    const Tensor x = Tensor::from_ints(ids, {B, L}, dev), mk = Tensor::from_vector(mask, {B, L}, DType::Float32, dev);
    const Tensor logits = m.is_seq2seq() ? m.forward_seq2seq(x, mk, x, mk) : m.forward_decoder(x, mk);
    Tensor loss = cross_entropy(logits, Tensor::from_ints(out, {B, L}, dev), -100, 0.1);
    loss.backward();
    opt.guarded_step(rec, 1.0);
    c = backend_counts() - before;
  }
  return c;
}

}  // namespace

// A training step's host overhead on the device, for every registered scheme and both archs: its
// backend calls (each one launch or more on a GPU) and allocator requests do not depend on the
// batch size, the sequence length or the number of heads (no per-row, per-position or per-head
// loop on the host), grow with the layers by at most a per-layer budget, and nothing is read back
// or waited for. The budget is what the costliest scheme (FIRE: 410 calls per encoder + decoder
// layer pair, 186 per decoder layer, 1+1 layers 432 in all, on the CPU with dropout) makes today
// with about 25 % to spare (docs/performance.md, "Host overhead per step").
TEST_P(DeviceStep, HostOverheadIsPerLayerNotPerRowPositionOrHead) {
  // The path a GPU takes, on every device: the CPU could read for free where a GPU may not.
  const EmulateDeviceReads device_reads;
  constexpr int64_t kCallsPerLayer = 260, kAllocsPerLayer = 250, kFixed = 70;
  std::string table;
  for (const auto& scheme : models::pe_names()) {
    for (const std::string arch : {"seq2seq", "decoder"}) {
      SCOPED_TRACE(scheme + " " + arch);
      const BackendCounts one = model_step_counts(arch, scheme, 1, 2, 4, 6, device());
      const BackendCounts wide = model_step_counts(arch, scheme, 1, 2, 9, 11, device());
      const BackendCounts heads = model_step_counts(arch, scheme, 1, 4, 4, 6, device());
      const BackendCounts two = model_step_counts(arch, scheme, 2, 2, 4, 6, device());
      EXPECT_EQ(wide.calls, one.calls) << "calls depend on the batch or the length";
      EXPECT_EQ(wide.allocs, one.allocs) << "allocations depend on the batch or the length";
      EXPECT_EQ(heads.calls, one.calls) << "calls depend on the number of heads";
      EXPECT_EQ(heads.allocs, one.allocs) << "allocations depend on the number of heads";
      const int64_t layers = arch == "seq2seq" ? 2 : 1;  // per stack layer added
      const int64_t per_layer = two.calls - one.calls, per_layer_allocs = two.allocs - one.allocs;
      EXPECT_LE(per_layer, kCallsPerLayer * layers);
      EXPECT_LE(per_layer_allocs, kAllocsPerLayer * layers);
      EXPECT_LE(one.calls - per_layer, kFixed);
      EXPECT_LE(one.allocs - per_layer_allocs, kFixed);
      for (const BackendCounts& c : {one, wide, heads, two}) {
        EXPECT_EQ(c.reads, 0);
        EXPECT_EQ(c.syncs, 0);
      }
      char row[200];
      std::snprintf(row, sizeof row,
                    "%-10s %-8s 1 layer: calls %4lld allocs %4lld; per layer: calls %4lld allocs %4lld\n",
                    scheme.c_str(), arch.c_str(), static_cast<long long>(one.calls),
                    static_cast<long long>(one.allocs), static_cast<long long>(per_layer),
                    static_cast<long long>(per_layer_allocs));
      table += row;
    }
  }
  std::printf("per step on %s (1+1 layers, dropout 0.1, batch 4, length 6):\n%s", GetParam().c_str(),
              table.c_str());
}

PELAB_INSTANTIATE_DEVICE_TESTS(DeviceStep);
