// Heap blocks per tensor, view and autograd node. Shapes and strides are SmallVectors (tensor.h)
// that keep up to 6 dims inline; with std::vector every tensor, view and node input paid one heap
// block per shape and per stride vector (~36 blocks per autograd node in a small model's step).
// This binary replaces the global operator new with one that counts the calling thread's
// allocations (a thread_local counter, so OpenMP or other threads do not disturb the counts);
// every other test runs through it unchanged.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "pelab/autograd.h"
#include "pelab/ops.h"
#include "pelab/optim.h"
#include "pelab/parallel.h"
#include "pelab/tensor.h"

namespace {
thread_local long t_blocks = 0;
}

// Every unaligned form is replaced, so all of them allocate and free alike (malloc/free) and a
// sanitizer runtime's own forms never see a block from the others. The aligned forms stay the
// runtime's, in pairs, and are not counted.
// GCC's -Wmismatched-new-delete takes the free() inside these replacements for a mismatch with
// the operator new they replace (a false positive at -O1, which the test files are built at).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ++t_blocks;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++t_blocks;
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return ::operator new(n, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using namespace pelab;

// The heap blocks `f` allocated on this thread through operator new.
template <class F>
long blocks_of(F&& f) {
  const long before = t_blocks;
  f();
  return t_blocks - before;
}

TEST(TensorHeap, CounterSeesAllocations) {
  // A call of ::operator new itself is never elided (a new-expression may be).
  EXPECT_EQ(blocks_of([] { ::operator delete(::operator new(8)); }), 1);
  EXPECT_GE(blocks_of([] { Tensor t = Tensor::zeros({2, 3}); }), 1);
}

// A view of a 4-D tensor is one block: its TensorImpl (the storage is shared, shape and strides
// are inline). With std::vector shapes each view cost 5 blocks (7 for unsqueeze).
TEST(TensorHeap, ViewIsOneBlock) {
  const Tensor a = Tensor::zeros({2, 3, 4, 5});
  const Shape flat{6, 20};
  EXPECT_EQ(blocks_of([&] { Tensor v = reshape(a, flat); }), 1);
  EXPECT_EQ(blocks_of([&] { Tensor v = transpose(a, 1, 2); }), 1);
  const std::vector<int64_t> perm{3, 2, 1, 0};
  EXPECT_EQ(blocks_of([&] { Tensor v = permute(a, perm); }), 1);  // 3 with vector work lists
  EXPECT_EQ(blocks_of([&] { Tensor v = slice(a, 3, 1, 4, 2); }), 1);
  EXPECT_EQ(blocks_of([&] { Tensor v = unsqueeze(a, 2); }), 1);  // 5 dims, still inline
  // Beyond the inline capacity shape and strides spill to the heap.
  const Tensor b = Tensor::zeros({1, 1, 1, 1, 1, 1, 2});
  EXPECT_GT(blocks_of([&] { Tensor v = transpose(b, 0, 6); }), 1);
}

// A small forward and backward pass: linear, gelu, a 4-D reshape and permute, softmax, mean and
// backward on one thread. Measured: 139 blocks (144 before permute's work lists were Shapes), 428
// with std::vector shapes.
// The bound leaves room for unrelated changes to the ops (it is not the exact count) and fails
// well before the old cost.
void small_step(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor h = gelu(linear(x, w, bias));                         // [8, 16]
  Tensor q = permute(reshape(h, {2, 4, 4, 4}), {0, 2, 1, 3});  // [2, 4, 4, 4]
  Tensor s = softmax(matmul(q, transpose(q, 2, 3)), 3);
  mean(mul(s, s)).backward();
}

TEST(TensorHeap, SmallStepBlocks) {
  const int saved = num_threads();
  set_num_threads(1);
  Tensor x = Tensor::full({8, 16}, 0.25);
  Tensor w = Tensor::full({16, 16}, 0.01).set_requires_grad(true);
  Tensor bias = Tensor::full({16}, 0.1).set_requires_grad(true);
  small_step(x, w, bias);  // warm-up: first-use allocations, gradients created
  const long blocks = blocks_of([&] { small_step(x, w, bias); });
  RecordProperty("blocks", static_cast<int>(blocks));
  EXPECT_LE(blocks, 180) << "heap blocks for one small step";
  set_num_threads(saved);
}

// Recording linear and layer_norm builds no heap list of their inputs. linear with its optional
// bias costs the same blocks as without; layer_norm's weight and bias cost 1 block each (their
// contiguous handles). A std::vector of inputs grown by push_back cost 1 more block with a bias,
// 2 more with weight and bias.
TEST(TensorHeap, OptionalInputsCostNoBlocks) {
  Tensor x = Tensor::full({4, 8}, 0.5).set_requires_grad(true);
  Tensor w = Tensor::full({8, 8}, 0.1).set_requires_grad(true);
  Tensor b = Tensor::full({8}, 0.2).set_requires_grad(true);
  Tensor g = Tensor::full({8}, 1.0).set_requires_grad(true);
  const Tensor none;
  auto lin = [&](const Tensor& bias) { return blocks_of([&] { Tensor y = linear(x, w, bias); }); };
  auto ln = [&](const Tensor& weight, const Tensor& bias) {
    return blocks_of([&] { Tensor y = layer_norm(x, weight, bias); });
  };
  lin(b), ln(g, b);  // warm-up
  EXPECT_EQ(lin(b), lin(none));
  EXPECT_LE(ln(g, b) - ln(none, none), 2);
  EXPECT_LE(ln(g, none) - ln(none, none), 1);
}

// An AdamW step costs the same blocks for each parameter, 2 state buffers included, as for the
// first: the per-parameter list of state buffers is reserved, not grown (it cost 2 blocks a
// parameter, now 1).
TEST(TensorHeap, AdamWStepBlocksPerParameter) {
  auto step_blocks = [](int n_params) {
    std::vector<Tensor> ps;
    for (int i = 0; i < n_params; ++i)
      ps.push_back(Tensor::full({4}, 0.5).set_requires_grad(true));
    AdamW opt(ps, 1e-3);
    auto loss = [&] {
      Tensor l = sum(ps[0]);
      for (int i = 1; i < n_params; ++i) l = add(l, sum(ps[i]));
      l.backward();
    };
    loss();
    opt.step();  // warm-up: state buffers made
    loss();
    return blocks_of([&] { opt.step(); });
  };
  const long one = step_blocks(1), three = step_blocks(3);
  RecordProperty("blocks_one", static_cast<int>(one));
  EXPECT_LE(three - one, 2) << "1 block for each of 2 extra parameters; one: " << one
                            << ", three: " << three;
}

// matmul of a head-split a [B, H, L, dh] (a permuted view of a token-major [B, L, H·dh]) by a
// shared b copies a into contiguous rows for one GEMM; the backward's dB = a_rowsᵀ g reuses the
// forward's copy instead of copying a again (CoPE's z = q tableᵀ). Its backward therefore costs
// the blocks of the same product with an already contiguous a (no copy in either), and dB and the
// output are the same bits (the same product on the same rows).
TEST(TensorHeap, MatmulBackwardReusesForwardRowCopy) {
  const int saved = num_threads();
  set_num_threads(1);
  const int64_t B = 3, L = 5, H = 2, dh = 7, N = 9;
  std::vector<double> xv(B * L * H * dh), bv(dh * N);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1 + 0.37 * static_cast<double>(i % 23) / 7.0;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.3 - 0.11 * static_cast<double>(i % 13) / 3.0;
  const Tensor x = Tensor::from_vector(xv, {B, L, H * dh});
  const Tensor split = permute(reshape(x, {B, L, H, dh}), {0, 2, 1, 3});  // not contiguous
  const Tensor rows = split.contiguous();
  ASSERT_FALSE(split.is_contiguous());
  struct Run {
    long blocks;
    std::vector<double> out, grad;
  };
  auto run = [&](const Tensor& a) {
    Tensor b = Tensor::from_vector(bv, {dh, N}).set_requires_grad(true);
    Tensor y = matmul(a, b);
    Tensor l = sum(mul(y, y));
    Run r;
    r.blocks = blocks_of([&] { l.backward(); });
    r.out = y.to_vector();
    r.grad = b.grad().to_vector();
    return r;
  };
  run(split), run(rows);  // warm-up
  const Run s = run(split), c = run(rows);
  EXPECT_EQ(s.blocks, c.blocks) << "the backward copied the head-split a again";
  EXPECT_EQ(s.out, c.out);
  EXPECT_EQ(s.grad, c.grad);
  set_num_threads(saved);
}

}  // namespace
