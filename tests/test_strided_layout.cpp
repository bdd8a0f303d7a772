// The host side of the backends' strided layouts (framework/src/strided_layout.h), which the CPU
// make_layout and the CUDA one both build on: which axes are dropped, merged or kept, and the
// checks. Views carry no data here: only shapes and strides are read.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_strided.h"
#include "strided_layout.h"

namespace pelab {
namespace {

View strided(Shape shape, Shape strides) {
  View v;
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}

// The collapsed axes, innermost first, as (size, strides) pairs.
template <int N>
std::vector<std::pair<int64_t, std::array<int64_t, N>>> axes(const Shape& shape,
                                                             const View* const (&views)[N],
                                                             int64_t* numel = nullptr) {
  std::vector<std::pair<int64_t, std::array<int64_t, N>>> out;
  char* base[N];
  const int64_t n = collapse_axes<N>(shape, views, "test", base,
                                     [&](int64_t size, const std::array<int64_t, N>& s) {
                                       out.emplace_back(size, s);
                                     });
  if (numel) *numel = n;
  return out;
}

using Axes2 = std::vector<std::pair<int64_t, std::array<int64_t, 2>>>;

TEST(StridedLayout, ContiguousOperandsMergeIntoOneAxisAndSizeOneAxesDrop) {
  const View a = strided({2, 1, 3, 4}, {12, 12, 4, 1}), b = strided({2, 1, 3, 4}, {12, 1, 4, 1});
  const View* vs[2] = {&a, &b};
  int64_t numel = 0;
  EXPECT_EQ(axes<2>(a.shape, vs, &numel), (Axes2{{24, {1, 1}}}));
  EXPECT_EQ(numel, 24);
}

TEST(StridedLayout, TransposedAndBroadcastOperandsKeepTheirAxes) {
  const View out = strided({2, 3}, {3, 1});
  const View t = strided({2, 3}, {1, 2});  // a transposed [3, 2]
  const View* vt[2] = {&out, &t};
  EXPECT_EQ(axes<2>(out.shape, vt), (Axes2{{3, {1, 2}}, {2, {3, 1}}}));
  const View row = strided({3}, {1});  // broadcast over the leading axis: stride 0 there
  const View* vr[2] = {&out, &row};
  EXPECT_EQ(axes<2>(out.shape, vr), (Axes2{{3, {1, 1}}, {2, {3, 0}}}));
  const View col = strided({2, 1}, {5, 7});  // size-1 axis broadcast: its stride is ignored
  const View* vc[2] = {&out, &col};
  EXPECT_EQ(axes<2>(out.shape, vc), (Axes2{{3, {1, 0}}, {2, {3, 5}}}));
}

TEST(StridedLayout, EmptyShapesAndScalars) {
  const View e = strided({0, 3}, {3, 1});
  const View* ve[1] = {&e};
  int64_t numel = -1;
  EXPECT_EQ(axes<1>(e.shape, ve, &numel).size(), 1u);  // 0 x 3 merges into one empty axis
  EXPECT_EQ(numel, 0);
  const View s = strided({}, {});
  const View* vs[1] = {&s};
  EXPECT_TRUE(axes<1>(s.shape, vs, &numel).empty());
  EXPECT_EQ(numel, 1);
}

TEST(StridedLayout, AnOperandThatDoesNotBroadcastIsRejected) {
  const View out = strided({2, 3}, {3, 1}), bad = strided({2}, {1});
  const View* vs[2] = {&out, &bad};
  EXPECT_THROW(axes<2>(out.shape, vs), Error);
}

// The CPU layout holds at most cpu::kMaxDims collapsed axes, in order outermost first.
TEST(StridedLayout, CpuLayoutOrdersAxesAndBoundsTheRank) {
  const View out = strided({2, 3}, {3, 1}), t = strided({2, 3}, {1, 2});
  const View* vs[2] = {&out, &t};
  const cpu::Layout<2> L = cpu::make_layout<2>(out.shape, vs, "test");
  ASSERT_EQ(L.nd, 2);
  EXPECT_EQ(L.numel, 6);
  EXPECT_EQ(L.shape[0], 2);
  EXPECT_EQ(L.shape[1], 3);
  EXPECT_EQ(L.st[1][0], 1);
  EXPECT_EQ(L.st[1][1], 2);
  EXPECT_EQ(L.inner_stride(0), 1);

  Shape shape, strides;  // kMaxDims + 1 axes of size 2, strides that never merge
  int64_t st = 1;
  for (int d = 0; d <= cpu::kMaxDims; ++d, st *= 3) {
    shape.insert(shape.begin(), 2);
    strides.insert(strides.begin(), st);
  }
  const View deep = strided(shape, strides);
  const View* vd[1] = {&deep};
  try {
    cpu::make_layout<1>(shape, vd, "unary");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unary: too many non-mergeable axes"), std::string::npos)
        << e.what();
  }
  shape.erase(shape.begin());
  strides.erase(strides.begin());
  const View fits = strided(shape, strides);
  const View* vf[1] = {&fits};
  EXPECT_EQ(cpu::make_layout<1>(shape, vf, "unary").nd, cpu::kMaxDims);
}

}  // namespace
}  // namespace pelab
