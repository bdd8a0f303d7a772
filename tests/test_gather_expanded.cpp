// pelab — gather with an index expanded (stride 0) over the leading dims: the shared-index path must
// match a gather with the materialised index (forward and backward) and still reject bad indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "pelab/pelab.h"

using namespace pelab;

namespace {

Tensor ramp(const Shape& s, double scale) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (static_cast<double>(i % 13) - 6.0) + 0.01 * i;
  return Tensor::from_vector(v, s, DType::Float64);
}

}  // namespace

TEST(GatherExpanded, MatchesMaterialisedIndexForwardAndBackward) {
  const int64_t B = 3, H = 2, Lq = 4, Lk = 5, R = 3;
  std::vector<int64_t> iv(Lq * Lk);
  for (int64_t i = 0; i < Lq * Lk; ++i) iv[i] = (i * 7 + i / Lk) % R;
  Tensor idx = Tensor::from_ints(iv, {1, 1, Lq, Lk});
  Tensor expanded = expand(idx, {B, H, Lq, Lk});
  ASSERT_EQ(expanded.strides()[0], 0);
  Tensor materialised = expanded.contiguous();
  ASSERT_NE(materialised.strides()[0], 0);
  Tensor g = ramp({B, H, Lq, Lk}, 0.3);

  Tensor a1 = ramp({B, H, Lq, R}, 0.5).set_requires_grad(true);
  Tensor a2 = a1.detach().clone().set_requires_grad(true);
  Tensor y1 = gather(a1, 3, expanded);
  Tensor y2 = gather(a2, 3, materialised);
  EXPECT_EQ(y1.to_vector(), y2.to_vector());
  // spot check against the definition
  const std::vector<double> av = a1.to_vector(), yv = y1.to_vector();
  for (int64_t s = 0; s < B * H; ++s)
    for (int64_t q = 0; q < Lq; ++q)
      for (int64_t k = 0; k < Lk; ++k)
        EXPECT_EQ(yv[(s * Lq + q) * Lk + k], av[(s * Lq + q) * R + iv[q * Lk + k]]);
  sum(mul(y1, g)).backward();
  sum(mul(y2, g)).backward();
  EXPECT_EQ(a1.grad().to_vector(), a2.grad().to_vector());
  double total = 0;
  for (double x : a1.grad().to_vector()) total += x;
  double gsum = 0;
  for (double x : g.to_vector()) gsum += x;
  EXPECT_NEAR(total, gsum, 1e-9);  // every upstream gradient lands in exactly one bin
}

TEST(GatherExpanded, OutOfRangeSharedIndexThrows) {
  Tensor idx = Tensor::from_ints({0, 1, 5, 2}, {1, 1, 2, 2});
  Tensor a = ramp({2, 3, 2, 3}, 1.0);
  EXPECT_THROW(gather(a, 3, expand(idx, {2, 3, 2, 2})), Error);
}

// Backend contract: an index of P blocks [n_idx, inner] (P dividing outer) is read as block o mod P
// by slice o — the same as the materialised [outer, n_idx, inner] index — for gather and scatter_add.
TEST(GatherExpanded, BackendIndexBlocksRepeatOverOuterSlices) {
  const int64_t outer = 6, n_in = 3, n_idx = 4, inner = 2, P = 3;
  std::vector<int64_t> blocks(P * n_idx * inner), full(outer * n_idx * inner);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int64_t>((i * 5 + i / 7) % n_in);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < n_idx * inner; ++e)
      full[o * n_idx * inner + e] = blocks[(o % P) * n_idx * inner + e];
  Tensor ib = Tensor::from_ints(blocks, {P * n_idx * inner});
  Tensor iff = Tensor::from_ints(full, {outer * n_idx * inner});
  Tensor in = ramp({outer * n_in * inner}, 0.7);
  Tensor src = ramp({outer * n_idx * inner}, 0.4);
  Backend& be = backend_for(Device::cpu());
  Tensor g1 = Tensor::empty({outer * n_idx * inner}, DType::Float64);
  Tensor g2 = Tensor::empty({outer * n_idx * inner}, DType::Float64);
  be.gather(view_of(g1), view_of(in), view_of(ib), outer, n_in, n_idx, inner);
  be.gather(view_of(g2), view_of(in), view_of(iff), outer, n_in, n_idx, inner);
  EXPECT_EQ(g1.to_vector(), g2.to_vector());
  Tensor a1 = Tensor::zeros({outer * n_in * inner}, DType::Float64);
  Tensor a2 = Tensor::zeros({outer * n_in * inner}, DType::Float64);
  be.scatter_add(view_of(a1), view_of(src), view_of(ib), outer, n_in, n_idx, inner);
  be.scatter_add(view_of(a2), view_of(src), view_of(iff), outer, n_in, n_idx, inner);
  EXPECT_EQ(a1.to_vector(), a2.to_vector());
  // 4 blocks do not divide 6 slices; 5 elements are not whole blocks
  Tensor bad4 = Tensor::zeros({4 * n_idx * inner}, DType::Int64);
  EXPECT_THROW(be.gather(view_of(g1), view_of(in), view_of(bad4), outer, n_in, n_idx, inner), Error);
  Tensor bad5 = Tensor::zeros({5}, DType::Int64);
  EXPECT_THROW(be.scatter_add(view_of(a1), view_of(src), view_of(bad5), outer, n_in, n_idx, inner),
               Error);
}

// Gather / scatter_add along the last axis (inner = 1), the Shaw case: the index has long runs of
// one value (clipped distances) mixed with distinct values, and the accumulator is not zero. The
// kernels (row chunks for gather, run sums for scatter_add) must match the definition, for small
// outer counts (row-chunked gather) and for many slices, in float64 and float32.
TEST(GatherExpanded, LastAxisRunsMatchDefinition) {
  for (const int64_t outer : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    for (const DType dt : {DType::Float64, DType::Float32}) {
      const int64_t Lq = 40, Lk = 300, k = 5, R = 2 * k + 1, P = Lq;
      const int64_t rows = outer * Lq;  // each slice of the backend call is one query row
      std::vector<int64_t> iv(Lq * Lk);
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j) {
          const int64_t d = j - 7 * i;  // runs at both ends, distinct bins in between
          iv[i * Lk + j] = (d < -k ? -k : (d > k ? k : d)) + k;
        }
      iv[3] = 4;  // a lone value inside a run
      Tensor idx = Tensor::from_ints(iv, {P * Lk});
      Tensor in = ramp({rows * R}, 0.3).to(dt);
      Tensor src = ramp({rows * Lk}, 0.2).to(dt);
      Tensor acc = ramp({rows * R}, 0.1).to(dt);
      const std::vector<double> inv = in.to_vector(), sv = src.to_vector(), a0 = acc.to_vector();
      Backend& be = backend_for(Device::cpu());
      Tensor out = Tensor::empty({rows * Lk}, dt);
      be.gather(view_of(out), view_of(in), view_of(idx), rows, R, Lk, 1);
      be.scatter_add(view_of(acc), view_of(src), view_of(idx), rows, R, Lk, 1);
      const std::vector<double> ov = out.to_vector(), av = acc.to_vector();
      std::vector<double> want(a0);
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t j = 0; j < Lk; ++j) {
          const int64_t b = iv[(o % P) * Lk + j];
          ASSERT_EQ(ov[o * Lk + j], inv[o * R + b]) << "gather, outer " << outer << ", row " << o;
          want[o * R + b] += sv[o * Lk + j];
        }
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-4;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(av[i], want[i], tol * (1.0 + std::abs(want[i])))
            << "scatter_add " << dtype_name(dt) << ", outer " << outer << ", element " << i;
    }
  }
}

// index_select / index_add along the last axis (inner = 1), T5's bias lookup: one shared index with
// long runs of equal bucket ids, few slices (the selection is cut into index chunks), float32 and
// float64, against the definition; index_add accumulates into a non-zero buffer.
TEST(GatherExpanded, IndexSelectLastAxisRunsMatchDefinition) {
  for (const int64_t outer : {int64_t{1}, int64_t{4}, int64_t{40}}) {
    for (const DType dt : {DType::Float64, DType::Float32}) {
      const int64_t n_in = 9, n_idx = 5000;
      std::vector<int64_t> iv(n_idx);
      for (int64_t j = 0; j < n_idx; ++j) iv[j] = std::min<int64_t>(n_in - 1, (j / 37) % 12);
      iv[100] = 3;  // a lone value inside a run
      Tensor idx = Tensor::from_ints(iv, {n_idx});
      Tensor in = ramp({outer * n_in}, 0.3).to(dt);
      Tensor src = ramp({outer * n_idx}, 0.2).to(dt);
      Tensor acc = ramp({outer * n_in}, 0.1).to(dt);
      const std::vector<double> inv = in.to_vector(), sv = src.to_vector(), a0 = acc.to_vector();
      Backend& be = backend_for(Device::cpu());
      Tensor out = Tensor::empty({outer * n_idx}, dt);
      be.index_select(view_of(out), view_of(in), view_of(idx), outer, n_in, n_idx, 1);
      be.index_add(view_of(acc), view_of(src), view_of(idx), outer, n_in, n_idx, 1);
      const std::vector<double> ov = out.to_vector(), av = acc.to_vector();
      std::vector<double> want(a0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n_idx; ++j) {
          ASSERT_EQ(ov[o * n_idx + j], inv[o * n_in + iv[j]]) << "index_select, outer " << outer;
          want[o * n_in + iv[j]] += sv[o * n_idx + j];
        }
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-4;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(av[i], want[i], tol * (1.0 + std::abs(want[i])))
            << "index_add " << dtype_name(dt) << ", outer " << outer << ", element " << i;
    }
  }
}
