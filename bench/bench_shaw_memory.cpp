// pelab — Shaw relative-position memory benchmark. Runs the Shaw score_term and value_term forward and
// backward (one layer, B=3, H=4, dh=32, k=16, float32) at L = 128, 256, 512 under a counting CPU
// backend (CpuBackend with allocate/deallocate wrapped) and reports, per allocation class, the peak of
// the bytes held during that work:
//   relative  everything that is not score-shaped: the [B,H,L,2k+1] relative scores and bin weights,
//             their gradients, the table gradients, the q gradient; should grow like L·(2k+1)
//   scores    [B,H,L,L] float32 tensors (the score term itself, dL/dprobs, copies): the size of the
//             attention scores, which attention holds anyway
//   index     the [L,L] int64 relative-index table (one per site, shared by batch, heads and layers)
//   idx-exp   [B,H,L,L] int64 buffers: an expanded index materialised by gather (0 once gather honours
//             stride-0 expanded indices)
// next to what the seed implementation needs for its R_k and R_v tensors alone: 2·L·L·dh floats.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>

#include "cpu/cpu_backend.h"
#include "models/pe/pe.h"
#include "pelab/pelab.h"

using namespace pelab;
using namespace pelab::models;

namespace {

// B·H·dh chosen so that no size class collides at the measured L (e.g. B·H·L·dh·4 == L·L·8 at L = 192).
constexpr int64_t kB = 3, kH = 4, kDh = 32, kK = 16;

enum Cls { kRelative, kScores, kIndex, kIdxExp, kNumCls };

class CountingBackend : public CpuBackend {
 public:
  void* allocate(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int c = classify(nbytes);
    live_[c] += static_cast<int64_t>(nbytes);
    if (live_[c] > peak_[c]) peak_[c] = live_[c];
    return CpuBackend::allocate(nbytes);
  }
  void deallocate(void* p, size_t nbytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[classify(nbytes)] -= static_cast<int64_t>(nbytes);
    }
    CpuBackend::deallocate(p, nbytes);
  }
  // Starts a measurement for sequence length L: peaks restart from the bytes live now.
  void start(int64_t L) {
    std::lock_guard<std::mutex> lock(mu_);
    L_ = L;
    for (int c = 0; c < kNumCls; ++c) base_[c] = peak_[c] = live_[c] = 0;
  }
  int64_t peak(int c) const { return peak_[c] - base_[c]; }

 private:
  int classify(size_t nbytes) const {
    const int64_t n = static_cast<int64_t>(nbytes);
    if (L_ <= 0) return kRelative;
    if (n == kB * kH * L_ * L_ * 4) return kScores;
    if (n == kB * kH * L_ * L_ * 8) return kIdxExp;
    if (n == L_ * L_ * 8) return kIndex;
    return kRelative;
  }
  std::mutex mu_;
  int64_t L_ = 0;
  int64_t live_[kNumCls] = {}, peak_[kNumCls] = {}, base_[kNumCls] = {};
};

Tensor randn(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(s, DType::Float32);
  init::normal_(t, 0.0, 1.0, g);
  return t;
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

int main() {
  try {
    (void)backend_for(Device::cpu());  // registers the real CPU backend first, then we replace it
    auto owned = std::make_unique<CountingBackend>();
    CountingBackend* counter = owned.get();
    register_backend(DeviceType::CPU, std::move(owned));

    PEConfig cfg;
    cfg.scheme = "shaw";
    cfg.set("shaw_k", kK);
    StackInfo stack;
    stack.kind = StackKind::Decoder;
    stack.layers = 1;
    stack.heads = kH;
    stack.d_model = kH * kDh;
    stack.dtype = DType::Float32;
    Generator gen(1);
    auto pe = make_pe(cfg, stack, gen);

    std::printf("Shaw relative terms, forward + backward: B=%" PRId64 " H=%" PRId64 " dh=%" PRId64
                " k=%" PRId64 " (2k+1=%" PRId64 "), float32; peak MiB held per class\n",
                kB, kH, kDh, kK, 2 * kK + 1);
    std::printf("%5s %10s %14s %8s %9s %8s %9s %16s\n", "L", "relative", "B*H*L*(2k+1)*4",
                "scores", "index", "idx-exp", "grow", "naive 2*L*L*dh*4");
    double prev_rel = 0;
    for (int64_t L : {128, 256, 512}) {
      std::vector<int64_t> pos(static_cast<size_t>(L));
      for (int64_t i = 0; i < L; ++i) pos[i] = i;
      AttnSite site;
      site.kind = AttnKind::DecoderSelf;
      site.q_pos = pos;
      site.k_pos = pos;
      site.causal = true;
      Tensor q = randn({kB, kH, L, kDh}, 2).set_requires_grad(true);
      Tensor P = randn({kB, kH, L, L}, 3).set_requires_grad(true);
      const Tensor gs = randn({kB, kH, L, L}, 4), gv = randn({kB, kH, L, kDh}, 5);
      pe->zero_grad();

      counter->start(L);
      {
        Tensor s = pe->score_term(q, site);
        Tensor o = pe->value_term(P, site);
        s.backward(gs);
        o.backward(gv);
      }
      PELAB_CHECK(q.grad().defined() && P.grad().defined(), "bench: gradients missing");
      const int64_t rel = counter->peak(kRelative);
      const int64_t lin = kB * kH * L * (2 * kK + 1) * 4;
      const int64_t naive = 2 * L * L * kDh * 4;
      std::printf("%5" PRId64 " %10.3f %14.3f %8.3f %9.3f %8.3f %9s %16.3f\n", L, mib(rel), mib(lin),
                  mib(counter->peak(kScores)), mib(counter->peak(kIndex)),
                  mib(counter->peak(kIdxExp)),
                  prev_rel > 0 ? (std::to_string(rel / prev_rel).substr(0, 4) + "x").c_str() : "-",
                  mib(naive));
      prev_rel = static_cast<double>(rel);
    }
    std::printf("relative = peak bytes of the non-score-shaped tensors (incl. dL/dq [B,H,L,dh]); "
                "grow = relative(L)/relative(L/2): ~2x means linear in L; the naive column grows 4x.\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_shaw_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
