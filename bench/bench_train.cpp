// pelab — training-step benchmark: times full steps (forward, backward, AdamW) of models::Transformer
// for one configuration and prints one JSON line (ms/step, peak RSS, and the step's host overhead:
// "per_step" backend calls, device->host reads, syncs, host->device writes and allocator requests,
// BackendCounts of pelab/backend.h). The step is the trainer's: the batch uploaded, the loss kept
// on the device, AdamW applied by Optimizer::guarded_step, nothing read back (the loss is read once
// after the timed steps); the gradient norm is computed for the finite check and clipped only
// with --grad_clip X (default 0 = off, as bench_torch.py's step). `--device cuda` runs it on the GPU
// (each step then ends with a synchronisation, not counted); `--attention composite` makes the CPU
// compose attention as the CUDA backend does, and read back no value a GPU step would not read
// (pelab/host_reads.h: FIRE's learned threshold), so its counts are a GPU step's. `--sgemm N` instead
// measures the cblas_sgemm peak (GFLOP/s) on N x N x N. Driven by bench/run.sh (alternating with
// PyTorch). Every JSON line carries "blas": the BLAS this process actually ran on (see
// blas_record_json); `--blas-info` prints only that record (after setting --threads). `--products`
// times the step's matrix products alone (run_products below: the ceiling of the step's share of
// the sgemm peak).
//   bench_train --scheme rope --d_model 128 --heads 4 --d_ff 512 --layers 2 --batch 32 --len 32
//               --steps 20 --warmup 3 --threads 2 [--device cpu|cuda] [--attention fused|composite]
//               [--grad_clip X]
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "pelab/blas_kernels.h"
#include "pelab/host_reads.h"
#include "pelab/optim.h"
#include "pelab/parallel.h"
#include "pelab/pelab.h"

using namespace pelab;
using Clock = std::chrono::steady_clock;

static double now_ms() {
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

static long peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// The median of some samples (the upper one of an even count), as every figure here reports.
static double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static double cpu_ms() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

// `s` as a JSON string literal.
static std::string json_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
    } else {
      q += c;
    }
  }
  return q + "\"";
}

// The BLAS this process runs on, as one JSON object with the keys bench/blas_info.py reads for both
// sides (bench_torch.py records the same for PyTorch): "libs", the shared objects mapped into this
// process (from /proc/self/maps) whose name says BLAS, LAPACK or an OpenMP runtime, i.e. the files
// the dynamic loader resolved, not the ones the build named; OpenBLAS's own openblas_get_config(),
// its build variant from openblas_get_parallel() ("serial", "pthread", "openmp") and its thread
// count; the kernels it runs (openblas_get_corename()) and how pelab chose them ("kernels":
// blas_kernels_summary()); and omp_get_max_threads().
static std::string blas_record_json() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> libs;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    bool wanted = false;
    for (const char* m : {"blas", "lapack", "gomp", "libomp", "iomp", "mkl"})
      wanted = wanted || base.find(m) != std::string::npos;
    if (wanted && std::find(libs.begin(), libs.end(), path) == libs.end()) libs.push_back(path);
  }
  const int par = openblas_get_parallel();
  const char* variant = par == 0 ? "serial" : par == 1 ? "pthread" : par == 2 ? "openmp" : "unknown";
  std::string j = "{\"libs\": [";
  for (size_t i = 0; i < libs.size(); ++i) j += (i ? ", " : "") + json_string(libs[i]);
  j += "], \"openblas_config\": " + json_string(openblas_get_config()) +
       ", \"openblas_parallel\": " + json_string(variant) +
       ", \"openblas_threads\": " + std::to_string(openblas_get_num_threads()) +
       ", \"openblas_corename\": " + json_string(blas_corename()) +
       ", \"kernels\": " + json_string(blas_kernels_summary()) +
       ", \"omp_max_threads\": " + std::to_string(num_threads()) + "}";
  return j;
}

static int run_sgemm(int64_t n, int threads) {
  set_num_threads(threads);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  once();
  double best = 1e30;
  for (int r = 0; r < 10; ++r) {
    const double t0 = now_ms();
    once();
    best = std::min(best, now_ms() - t0);
  }
  const double gflops = 2.0 * n * n * n / (best * 1e-3) / 1e9;
  std::printf("{\"sgemm_n\": %lld, \"best_ms\": %.4f, \"gflops\": %.3f, \"blas\": %s}\n",
              static_cast<long long>(n), best, gflops, blas_record_json().c_str());
  return 0;
}

// `--products`: the matrix products of one training step alone, through the engine's own product
// path (pelab::matmul: output allocation, the cut over threads, OpenBLAS or the small kernel), with
// nothing else of the step around them. They are the products bench/run_bench.py's train_flops
// counts: for every linear layer (per layer 4 projections in the encoder, 8 in the decoder, the
// feed-forward pair; the lm head) the forward x·Wᵀ, dX = G·W and dW = Gᵀ·x on B·L rows, and for
// every attention site (one per encoder layer, two per decoder layer) the forward Q·Kᵀ and P·V and
// the backward dO·Vᵀ, Pᵀ·dO, dS·K and dSᵀ·Q, each over B·H heads of [L, d_model / H]. A step's
// share of the sgemm peak can be no higher than these products' own GFLOP/s allow; run_bench.py
// reports that ceiling next to the share (docs/performance.md).
static int run_products(int64_t d_model, int64_t heads, int64_t d_ff, int64_t layers, int64_t batch,
                        int64_t len, int64_t vocab, int reps, int warmup, int threads) {
  set_num_threads(threads);
  const int64_t n = batch * len, dh = d_model / heads, bh = batch * heads;
  // The kinds of product, timed apart as well: a linear layer's forward, its dX and its dW, and
  // attention's per-head products.
  static const char* const kKinds[] = {"forward_x_wt", "dx_g_w", "dw_gt_x", "attention"};
  constexpr int kNumKinds = 4;
  struct Product {
    Tensor a, b;  // a @ b, b possibly a transposed view (as the step's backward passes it)
    int kind;
  };
  std::vector<Product> list;
  double flops = 0, kind_flops[kNumKinds] = {};
  auto filled = [](const Shape& s) { return Tensor::full(s, 0.25); };
  auto add = [&](const Tensor& a, const Tensor& b, int kind) {
    list.push_back({a, b, kind});
    const double f = 2.0 * static_cast<double>(a.numel()) * static_cast<double>(b.size(-1));
    flops += f;
    kind_flops[kind] += f;
  };
  auto linear_products = [&](int64_t in, int64_t out, int64_t count) {
    const Tensor x = filled({n, in}), w = filled({out, in}), g = filled({n, out});
    for (int64_t i = 0; i < count; ++i) {
      add(x, transpose(w, 0, 1), 0);  // forward x·Wᵀ
      add(g, w, 1);                   // dX = G·W
      add(transpose(g, 0, 1), x, 2);  // dW = Gᵀ·x
    }
  };
  auto attention_products = [&](int64_t count) {
    const Tensor q = filled({bh, len, dh}), p = filled({bh, len, len});
    const Tensor qt = transpose(q, 1, 2), pt = transpose(p, 1, 2);
    for (int64_t i = 0; i < count; ++i) {
      add(q, qt, 3);  // scores Q·Kᵀ
      add(p, q, 3);   // P·V
      add(q, qt, 3);  // dP = dO·Vᵀ
      add(pt, q, 3);  // dV = Pᵀ·dO
      add(p, q, 3);   // dQ = dS·K
      add(pt, q, 3);  // dK = dSᵀ·Q
    }
  };
  linear_products(d_model, d_model, layers * 4 + layers * 8);  // projections
  linear_products(d_model, d_ff, 2 * layers);                   // feed-forward in
  linear_products(d_ff, d_model, 2 * layers);                   // feed-forward out
  linear_products(d_model, vocab, 1);                           // lm head
  attention_products(layers + 2 * layers);
  std::vector<double> kind_ms[kNumKinds];
  auto once = [&](bool timed) {
    double t[kNumKinds] = {};
    double t0 = now_ms();
    for (const Product& pr : list) {
      (void)matmul(pr.a, pr.b);
      const double t1 = now_ms();
      t[pr.kind] += t1 - t0;
      t0 = t1;
    }
    if (timed)
      for (int k = 0; k < kNumKinds; ++k) kind_ms[k].push_back(t[k]);
  };
  for (int i = 0; i < warmup; ++i) once(false);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_ms();
    once(true);
    times.push_back(now_ms() - t0);
  }
  const double median = median_of(times), best = *std::min_element(times.begin(), times.end());
  std::string kinds;
  for (int k = 0; k < kNumKinds; ++k) {
    const double m = median_of(kind_ms[k]);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\": {\"flops\": %.0f, \"median_ms\": %.4f, \"gflops\": %.3f}",
                  k ? ", " : "", kKinds[k], kind_flops[k], m,
                  m > 0 ? kind_flops[k] / (m * 1e-3) / 1e9 : 0.0);
    kinds += buf;
  }
  std::printf("{\"impl\": \"pelab\", \"products\": %zu, \"flops\": %.0f, \"median_ms\": %.4f, "
              "\"min_ms\": %.4f, \"gflops\": %.3f, \"gflops_median\": %.3f, \"kinds\": {%s}, "
              "\"blas\": %s}\n",
              list.size(), flops, median, best, flops / (best * 1e-3) / 1e9,
              flops / (median * 1e-3) / 1e9, kinds.c_str(), blas_record_json().c_str());
  return 0;
}

int main(int argc, char** argv) {
  select_blas_kernels(argv);  // the kernels a pelab run gets (pelab/blas_kernels.h)
  std::string scheme = models::PEConfig().scheme;  // pe.scheme's default
  int64_t d_model = 128, heads = 4, d_ff = 512, layers = 2, batch = 32, len = 32, vocab = 32;
  int steps = 20, warmup = 3, threads = 2;
  int64_t sgemm = 0;
  std::string device = "cpu", attention = "fused";
  double grad_clip = 0;
  bool blas_info = false, products = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--blas-info" || k == "--products") {
      (k == "--products" ? products : blas_info) = true;
      --i;  // a flag: no value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_train: option %s needs a value\n", k.c_str());
      return 2;
    }
    const char* v = argv[i + 1];
    if (k == "--scheme") scheme = v;
    else if (k == "--d_model") d_model = std::atoll(v);
    else if (k == "--heads") heads = std::atoll(v);
    else if (k == "--d_ff") d_ff = std::atoll(v);
    else if (k == "--layers") layers = std::atoll(v);
    else if (k == "--batch") batch = std::atoll(v);
    else if (k == "--len") len = std::atoll(v);
    else if (k == "--vocab") vocab = std::atoll(v);
    else if (k == "--steps") steps = std::atoi(v);
    else if (k == "--warmup") warmup = std::atoi(v);
    else if (k == "--threads") threads = std::atoi(v);
    else if (k == "--sgemm") sgemm = std::atoll(v);
    else if (k == "--device") device = v;
    else if (k == "--attention") attention = v;
    else if (k == "--grad_clip") grad_clip = std::atof(v);
    else {
      std::fprintf(stderr, "bench_train: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (blas_info) {
    set_num_threads(threads);
    std::printf("%s\n", blas_record_json().c_str());
    return 0;
  }
  if (sgemm > 0) return run_sgemm(sgemm, threads);
  if (products) {
    if (d_model < 1 || heads < 1 || d_model % heads != 0 || d_ff < 1 || layers < 1 || batch < 1 ||
        len < 1 || vocab < 1 || steps < 1 || warmup < 0) {
      std::fprintf(stderr, "bench_train: --products needs positive sizes, d_model divisible by "
                           "heads, steps >= 1 and warmup >= 0\n");
      return 2;
    }
    return run_products(d_model, heads, d_ff, layers, batch, len, vocab, steps, warmup, threads);
  }
  if (attention != "fused" && attention != "composite") {
    std::fprintf(stderr, "bench_train: --attention must be fused or composite, got %s\n",
                 attention.c_str());
    return 2;
  }
  try {
    set_num_threads(threads);
    const Device dev = Device::parse(device);
    set_fused_attention(attention == "fused");
    set_emulate_device_reads(attention == "composite");
    models::ModelConfig cfg;
    cfg.arch = "seq2seq";
    cfg.vocab = vocab;
    cfg.d_model = d_model;
    cfg.heads = heads;
    cfg.d_ff = d_ff;
    cfg.encoder_layers = layers;
    cfg.decoder_layers = layers;
    cfg.dropout = 0.0;
    cfg.norm = "pre";
    cfg.activation = "gelu";
    cfg.pe.scheme = scheme;
    cfg.pe.set("max_positions", std::max<int64_t>(512, len));
    cfg.seed = 1;
    models::Transformer model(cfg);
    model.to(dev);
    model.train();
    AdamW opt(model.parameters(), 1e-3);
    Backend& be = backend_for(dev);
    // The step's record on the device (loss, gradient sum of squares, norm), as the trainer's.
    const Tensor rec = Tensor::zeros({3}, DType::Float64, dev);
    const double max_norm = grad_clip > 0 ? grad_clip : std::numeric_limits<double>::infinity();
    View loss_slot = view_of(rec);
    loss_slot.shape = {};
    loss_slot.strides = {};

    // Fixed synthetic batch: ids in [3, vocab).
    Generator gen(7);
    std::vector<int64_t> src(batch * len), tin(batch * len), tout(batch * len);
    uint64_t s = 12345;
    auto next = [&] {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<int64_t>(3 + (s >> 33) % static_cast<uint64_t>(vocab - 3));
    };
    for (auto& x : src) x = next();
    for (auto& x : tin) x = next();
    for (auto& x : tout) x = next();
    // The batch is uploaded every step, as the trainer does.
    std::vector<double> t_fwd, t_bwd, t_opt;  // per-phase wall ms of the timed steps (on a
                                               // device: the host's time to issue them)
    bool timing = false;
    auto step = [&] {
      const double a = now_ms();
      opt.zero_grad();
      const Tensor src_t = Tensor::from_ints(src, {batch, len}, dev);
      const Tensor tin_t = Tensor::from_ints(tin, {batch, len}, dev);
      const Tensor tout_t = Tensor::from_ints(tout, {batch, len}, dev);
      Tensor logits = model.forward_seq2seq(src_t, Tensor(), tin_t, Tensor());
      Tensor loss = cross_entropy(logits, tout_t);
      const double b = now_ms();
      loss.backward();
      const double c = now_ms();
      be.copy(loss_slot, view_of(loss));
      opt.guarded_step(rec, max_norm);
      if (timing) {
        t_fwd.push_back(b - a);
        t_bwd.push_back(c - b);
        t_opt.push_back(now_ms() - c);
      }
    };
    for (int i = 0; i < warmup; ++i) step();
    be.synchronize();
    timing = true;
    std::vector<double> times, cpu;
    BackendCounts counts;
    for (int i = 0; i < steps; ++i) {
      const double t0 = now_ms(), c0 = cpu_ms();
      const BackendCounts before = backend_counts();
      step();
      const BackendCounts d = backend_counts() - before;
      counts = {counts.calls + d.calls, counts.reads + d.reads, counts.syncs + d.syncs,
                counts.writes + d.writes, counts.allocs + d.allocs, counts.raw_allocs + d.raw_allocs};
      be.synchronize();  // (a device's step is over when its kernels are; not counted)
      times.push_back(now_ms() - t0);
      cpu.push_back(cpu_ms() - c0);
    }
    const double loss_v = rec.to_vector()[0];
    auto per_step = [&](int64_t n) { return static_cast<double>(n) / steps; };
    char counts_json[256];
    std::snprintf(counts_json, sizeof counts_json,
                  "{\"calls\": %g, \"reads\": %g, \"syncs\": %g, \"writes\": %g, "
                  "\"allocs\": %g, \"raw_allocs\": %g}",
                  per_step(counts.calls), per_step(counts.reads), per_step(counts.syncs),
                  per_step(counts.writes), per_step(counts.allocs), per_step(counts.raw_allocs));
    const double median = median_of(times);
    double mean = 0;
    for (double t : times) mean += t;
    mean /= times.size();
    std::printf(
        "{\"impl\": \"pelab\", \"scheme\": \"%s\", \"device\": \"%s\", \"attention\": \"%s\", "
        "\"median_ms\": %.4f, \"mean_ms\": %.4f, "
        "\"min_ms\": %.4f, \"cpu_ms\": %.4f, \"forward_ms\": %.4f, \"backward_ms\": %.4f, "
        "\"optimizer_ms\": %.4f, \"per_step\": %s, \"peak_rss_kb\": %ld, \"loss\": %.6f, "
        "\"blas\": %s}\n",
        scheme.c_str(), dev.str().c_str(), attention.c_str(), median, mean,
        *std::min_element(times.begin(), times.end()), median_of(cpu), median_of(t_fwd),
        median_of(t_bwd), median_of(t_opt), counts_json, peak_rss_kb(), loss_v,
        blas_record_json().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
