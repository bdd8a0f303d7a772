// SmallVector (framework/include/pelab/small_vector.h), the type of Shape and strides: the part of
// std::vector's interface the code uses, inline up to N elements and on the heap beyond.
#include "pelab/small_vector.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace {

using pelab::SmallVector;
using V = SmallVector<int64_t, 4>;

std::vector<int64_t> as_vector(const V& v) { return std::vector<int64_t>(v.begin(), v.end()); }

TEST(SmallVector, ConstructsLikeStdVector) {
  EXPECT_TRUE(V().empty());
  EXPECT_EQ(as_vector(V{1, 2, 3}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(as_vector(V{7}), (std::vector<int64_t>{7}));  // braces: one element, as std::vector
  EXPECT_EQ(as_vector(V(3)), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(as_vector(V(3, 5)), (std::vector<int64_t>{5, 5, 5}));  // (count, value), not a range
  const std::vector<int64_t> src{4, 5, 6, 7, 8, 9};
  EXPECT_EQ(as_vector(V(src.begin(), src.end() - 1)), (std::vector<int64_t>{4, 5, 6, 7, 8}));
  V a{1, 2};
  a = {3, 4, 5};
  EXPECT_EQ(as_vector(a), (std::vector<int64_t>{3, 4, 5}));
}

TEST(SmallVector, StaysInlineUpToNAndSpillsBeyond) {
  V v;
  for (int64_t i = 0; i < 4; ++i) v.push_back(i);
  EXPECT_TRUE(v.is_inline());
  EXPECT_EQ(v.capacity(), 4u);
  v.push_back(4);
  EXPECT_FALSE(v.is_inline());
  EXPECT_GE(v.capacity(), 5u);
  for (int64_t i = 5; i < 20; ++i) v.push_back(v[i - 1] + 1);  // argument aliases the vector
  ASSERT_EQ(v.size(), 20u);
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(v[i], i);
  EXPECT_EQ(v.front(), 0);
  EXPECT_EQ(v.back(), 19);
  v.pop_back();
  EXPECT_EQ(v.back(), 18);
  v.resize(2);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{0, 1}));
  v.resize(4, 9);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{0, 1, 9, 9}));
  v.clear();
  EXPECT_TRUE(v.empty());
}

TEST(SmallVector, CopiesAndMovesInlineAndSpilled) {
  for (size_t n : {size_t{3}, size_t{9}}) {
    SCOPED_TRACE(n);
    V src;
    for (size_t i = 0; i < n; ++i) src.push_back(static_cast<int64_t>(10 + i));
    const std::vector<int64_t> want = as_vector(src);

    V copy(src);
    EXPECT_EQ(as_vector(copy), want);
    EXPECT_NE(copy.data(), src.data());
    copy[0] = -1;  // a copy is independent
    EXPECT_EQ(src[0], 10);

    V assigned{1};
    assigned = src;
    EXPECT_EQ(as_vector(assigned), want);
    const V& self = assigned;
    assigned = self;  // self-assignment keeps the elements
    EXPECT_EQ(as_vector(assigned), want);

    V moved(std::move(copy));
    EXPECT_EQ(moved[0], -1);
    EXPECT_EQ(moved.size(), n);
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty and usable
    copy.push_back(1);
    EXPECT_EQ(as_vector(copy), (std::vector<int64_t>{1}));

    V target{5, 6, 7, 8, 9, 10};  // spilled target: its block is freed, not leaked (ASan)
    target = std::move(moved);
    EXPECT_EQ(target.size(), n);
    EXPECT_EQ(target[0], -1);
    EXPECT_EQ(target.is_inline(), n <= 4);
  }
}

TEST(SmallVector, ComparesElementwise) {
  EXPECT_EQ((V{1, 2, 3}), (V{1, 2, 3}));
  EXPECT_NE((V{1, 2, 3}), (V{1, 2}));
  EXPECT_NE((V{1, 2, 3}), (V{1, 2, 4}));
  EXPECT_EQ(V(), V());
  V spilled{1, 2, 3, 4, 5};
  V grown{1, 2, 3, 4};
  grown.push_back(5);
  EXPECT_EQ(spilled, grown);
  EXPECT_TRUE((V{1, 2}) < (V{1, 3}));
  EXPECT_TRUE((V{1, 2}) < (V{1, 2, 0}));
  EXPECT_FALSE((V{1, 2}) < (V{1, 2}));
}

TEST(SmallVector, InsertsAndErases) {
  V v{1, 2, 3};
  auto it = v.insert(v.begin() + 1, 9);
  EXPECT_EQ(*it, 9);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{1, 9, 2, 3}));
  v.insert(v.end(), 4);  // spills
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{1, 9, 2, 3, 4}));
  v.insert(v.begin(), 2, 0);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{0, 0, 1, 9, 2, 3, 4}));
  const std::vector<int64_t> more{7, 8};
  v.insert(v.begin() + 3, more.begin(), more.end());
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{0, 0, 1, 7, 8, 9, 2, 3, 4}));
  it = v.erase(v.begin() + 3);
  EXPECT_EQ(*it, 8);
  v.erase(v.begin(), v.begin() + 2);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{1, 8, 9, 2, 3, 4}));
  v.erase(v.end() - 1);
  EXPECT_EQ(as_vector(v), (std::vector<int64_t>{1, 8, 9, 2, 3}));
  V w{5};
  w.insert(w.begin(), {1, 2});
  EXPECT_EQ(as_vector(w), (std::vector<int64_t>{1, 2, 5}));
  std::vector<int64_t> rev(w.rbegin(), w.rend());
  EXPECT_EQ(rev, (std::vector<int64_t>{5, 2, 1}));
}

}  // namespace
