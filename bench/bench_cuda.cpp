// pelab — CUDA training-step benchmark. For every PE scheme (or --scheme), times full training steps
// of a seq2seq transformer on the GPU: forward + cross-entropy, backward, AdamW (the trainer's
// guarded update, no clip), each phase followed by a device synchronisation, and prints mean ms per
// phase and per step; then the same steps issued back to back with one synchronisation at the end
// ("piped ms", what a training loop sees) and their backend calls, device->host reads, syncs and
// allocator requests per step (pelab::BackendCounts). Configs:
//   ref    vocab 32, d_model 128, 4 heads, d_ff 512, 2+2 layers, batch 32, length 32
//   large  vocab 32, d_model 512, 8 heads, d_ff 2048, 2+2 layers, batch 32, length 512
// Options: --config ref|large|all  --scheme NAME  --steps N (20)  --warmup N (3)
//          --device cuda|cpu (cpu: the same loop on the CPU backend, for comparison)  --dropout P
//          --dtype float32|float64
//          --check: print the device and exit 0, or print "no CUDA device: <why>" and exit 1
//          (tools/gpu_check.sh's probe)
// Without a GPU (or in a build without CUDA) it prints why and exits 0. The PyTorch counterpart on
// the same GPU is bench/bench_torch.py --device cuda (see docs/cuda.md).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "pelab/pelab.h"
#ifdef PELAB_WITH_CUDA
#include "cuda/cuda_backend.cuh"
#endif

using namespace pelab;
using namespace pelab::models;

namespace {

struct BenchConfig {
  std::string name;
  int64_t d_model, heads, d_ff, batch, length;
};

const BenchConfig kConfigs[] = {
    {"ref", 128, 4, 512, 32, 32},
    {"large", 512, 8, 2048, 32, 512},
};

struct Options {
  std::string config = "all", scheme = "all", device = "cuda", dtype = "float32";
  int steps = 20, warmup = 3;
  double dropout = 0.0;
  bool check = false;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "bench_cuda: %s\nusage: bench_cuda [--config ref|large|all] [--scheme NAME] "
               "[--steps N] [--warmup N] [--device cuda|cpu] [--dropout P] "
               "[--dtype float32|float64] [--check]\n",
               msg);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--config") o.config = next();
    else if (a == "--scheme") o.scheme = next();
    else if (a == "--steps") o.steps = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--device") o.device = next();
    else if (a == "--dropout") o.dropout = std::atof(next().c_str());
    else if (a == "--dtype") o.dtype = next();
    else if (a == "--check") o.check = true;
    else usage(("unknown option " + a).c_str());
  }
  if (o.steps < 1) usage("--steps must be >= 1");
  if (o.warmup < 0) usage("--warmup must be >= 0");
  if (o.device != "cuda" && o.device != "cpu") usage("--device must be cuda or cpu");
  return o;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

Tensor random_ids(int64_t B, int64_t L, int64_t vocab, Generator& gen, Device dev) {
  std::vector<int64_t> v(static_cast<size_t>(B * L));
  for (auto& x : v) x = 3 + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(vocab - 3)));
  return Tensor::from_ints(v, {B, L}, dev);
}

struct Timing {
  double fwd = 0, bwd = 0, opt = 0;  // per phase, each followed by a synchronisation
  double piped = 0;                  // per step, steps issued back to back, one sync at the end
  BackendCounts per_step;            // of a back-to-back step (averaged)
  double loss = 0;
};

Timing run(const BenchConfig& bc, const std::string& scheme, const Options& o, Device dev) {
  ModelConfig c;
  c.arch = "seq2seq";
  c.vocab = 32;
  c.d_model = bc.d_model;
  c.heads = bc.heads;
  c.d_ff = bc.d_ff;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.dropout = o.dropout;
  c.dtype = o.dtype;
  c.seed = 1;
  c.pe.scheme = scheme;
  c.pe.set("max_positions", std::max<int64_t>(512, bc.length));
  Transformer m(c);
  m.to(dev);
  Generator gen(7);
  const Tensor src = random_ids(bc.batch, bc.length, c.vocab, gen, dev);
  const Tensor tgt_in = random_ids(bc.batch, bc.length, c.vocab, gen, dev);
  const Tensor tgt_out = random_ids(bc.batch, bc.length, c.vocab, gen, dev);
  AdamW opt(m.parameters(), 1e-4);
  Backend& be = backend_for(dev);
  // The trainer's update: the loss kept on the device, AdamW under Optimizer::guarded_step (no
  // clip, as bench_torch.py), nothing read back.
  const Tensor rec = Tensor::zeros({3}, DType::Float64, dev);
  View loss_slot = view_of(rec);
  loss_slot.shape = {};
  loss_slot.strides = {};
  const double no_clip = std::numeric_limits<double>::infinity();
  Timing t;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const bool timed = step >= o.warmup;
    be.synchronize();
    const double t0 = now_ms();
    opt.zero_grad();
    Tensor logits = m.forward_seq2seq(src, Tensor(), tgt_in, Tensor());
    Tensor loss = cross_entropy(logits, tgt_out);
    be.synchronize();
    const double t1 = now_ms();
    loss.backward();
    be.synchronize();
    const double t2 = now_ms();
    be.copy(loss_slot, view_of(loss));
    opt.guarded_step(rec, no_clip);
    be.synchronize();
    const double t3 = now_ms();
    if (timed) {
      t.fwd += t1 - t0;
      t.bwd += t2 - t1;
      t.opt += t3 - t2;
    }
  }
  t.fwd /= o.steps;
  t.bwd /= o.steps;
  t.opt /= o.steps;
  // The same steps issued back to back, as a training loop runs them.
  be.synchronize();
  const BackendCounts c0 = backend_counts();
  const double p0 = now_ms();
  for (int step = 0; step < o.steps; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m.forward_seq2seq(src, Tensor(), tgt_in, Tensor()), tgt_out);
    loss.backward();
    be.copy(loss_slot, view_of(loss));
    opt.guarded_step(rec, no_clip);
  }
  const BackendCounts n = backend_counts() - c0;
  be.synchronize();
  t.piped = (now_ms() - p0) / o.steps;
  t.per_step = {n.calls / o.steps,  n.reads / o.steps,  n.syncs / o.steps,
                n.writes / o.steps, n.allocs / o.steps, n.raw_allocs / o.steps};
  t.loss = rec.to_vector()[0];
  return t;
}

}  // namespace

// --check: whether this binary can use a CUDA device (exit 0 and its name) or not (exit 1 and why).
int check_device() {
#ifndef PELAB_WITH_CUDA
  std::printf("no CUDA device: this binary was built without CUDA (-DPELAB_CUDA=ON)\n");
  return 1;
#else
  try {
    backend_for(Device::cuda());
  } catch (const Error& e) {
    const std::string why = e.what();
    // The backend's message already names the missing device ("... no CUDA device: ...").
    std::printf("%s%s\n", why.find("no CUDA device") == std::string::npos ? "no CUDA device: " : "",
                why.c_str());
    return 1;
  }
  std::printf("device: cuda:0 %s\n", CudaBackend::device_name().c_str());
  return 0;
#endif
}

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.check) return check_device();
  Device dev = Device::cpu();
  if (o.device == "cuda") {
#ifndef PELAB_WITH_CUDA
    std::printf("bench_cuda: built without CUDA (configure with -DPELAB_CUDA=ON on a machine with "
                "nvcc); nothing to time\n");
    return 0;
#else
    if (!backend_available(DeviceType::CUDA)) {
      try {
        backend_for(Device::cuda());
      } catch (const Error& e) {
        std::printf("bench_cuda: %s; nothing to time\n", e.what());
      }
      return 0;
    }
    dev = Device::cuda();
    std::printf("device: cuda:0 %s\n", CudaBackend::device_name().c_str());
#endif
  } else {
    std::printf("device: cpu (%d threads)\n", num_threads());
  }
  std::vector<std::string> schemes;
  if (o.scheme == "all") {
    schemes = pe_names();
  } else {
    schemes.push_back(o.scheme);
  }
  try {
    for (const BenchConfig& bc : kConfigs) {
      if (o.config != "all" && o.config != bc.name) continue;
      std::printf("\nconfig %s: seq2seq vocab 32, d_model %lld, heads %lld, d_ff %lld, 2+2 layers, "
                  "batch %lld, length %lld, %s, dropout %.2f, %d steps after %d warmup\n",
                  bc.name.c_str(), static_cast<long long>(bc.d_model),
                  static_cast<long long>(bc.heads), static_cast<long long>(bc.d_ff),
                  static_cast<long long>(bc.batch), static_cast<long long>(bc.length),
                  o.dtype.c_str(), o.dropout, o.steps, o.warmup);
      std::printf("%-12s %10s %10s %10s %12s %10s %8s %6s %6s %7s %10s", "scheme", "fwd ms",
                  "bwd ms", "adamw ms", "step ms", "piped ms", "calls", "reads", "syncs",
                  "allocs", "loss");
#ifdef PELAB_WITH_CUDA
      if (dev.is_cuda()) std::printf(" %12s", "peak MiB");
#endif
      std::printf("\n");
      for (const std::string& scheme : schemes) {
#ifdef PELAB_WITH_CUDA
        if (dev.is_cuda()) CudaBackend::reset_peak_bytes();
#endif
        const Timing t = run(bc, scheme, o, dev);
        std::printf("%-12s %10.3f %10.3f %10.3f %12.3f %10.3f %8lld %6lld %6lld %7lld %10.4f",
                    scheme.c_str(), t.fwd, t.bwd, t.opt, t.fwd + t.bwd + t.opt, t.piped,
                    static_cast<long long>(t.per_step.calls), static_cast<long long>(t.per_step.reads),
                    static_cast<long long>(t.per_step.syncs),
                    static_cast<long long>(t.per_step.allocs), t.loss);
#ifdef PELAB_WITH_CUDA
        if (dev.is_cuda())
          std::printf(" %12.1f", static_cast<double>(CudaBackend::peak_bytes()) / (1 << 20));
#endif
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
