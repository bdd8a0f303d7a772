// The caching pool both backends allocate through (framework/src/caching_pool.h), driven by a fake
// device whose raw allocations can be made to fail: bucket reuse, statistics, the cache bound, the
// out-of-memory retry and the failures, without a GPU (the CUDA backend's own semantics: no bound,
// peak / allocated statistics, retry on cudaErrorMemoryAllocation only).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "caching_pool.h"

namespace pelab {
namespace {

struct FakeDevice {
  enum Status { kSuccess, kNoMemory, kBroken };
  static constexpr Status kOk = kSuccess;
  static inline size_t kMaxCached = size_t(-1);  // not constexpr here, so tests can bound it
  static inline int fail_next = 0;               // raw allocations left to fail
  static inline Status fail_with = kNoMemory;
  static inline Status free_status = kSuccess;
  static inline int raw_allocs = 0, raw_frees = 0;

  static void reset() {
    kMaxCached = size_t(-1);
    fail_next = 0;
    fail_with = kNoMemory;
    free_status = kSuccess;
    raw_allocs = raw_frees = 0;
  }
  static size_t bucket(size_t n) { return n <= 128 ? 128 : (n + 127) / 128 * 128; }
  static void* raw_allocate(size_t bytes, Status* status) {
    if (fail_next > 0) {
      --fail_next;
      *status = fail_with;
      return nullptr;
    }
    ++raw_allocs;
    return std::malloc(bytes);
  }
  static bool out_of_memory(Status s) { return s == kNoMemory; }
  [[noreturn]] static void allocate_failed(size_t bytes, size_t requested, Status s,
                                           const CachingPoolStats& held) {
    throw std::runtime_error("failed " + std::to_string(bytes) + " " + std::to_string(requested) +
                             " status " + std::to_string(s) + " held " +
                             std::to_string(held.allocated) + "/" + std::to_string(held.cached));
  }
  static Status raw_free(void* p) {
    ++raw_frees;
    std::free(p);
    return free_status;
  }
};

class CachingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { FakeDevice::reset(); }
  void TearDown() override {
    pool.release_all();
    FakeDevice::reset();
  }
  CachingPool<FakeDevice> pool;
};

TEST_F(CachingPoolTest, ReusesBlocksOfTheSameBucketAndCounts) {
  void* a = pool.allocate(100);  // bucket 128
  void* b = pool.allocate(300);  // bucket 384
  EXPECT_EQ(pool.stats().allocated, 512u);
  EXPECT_EQ(pool.stats().peak, 512u);
  pool.deallocate(a, 100);
  EXPECT_EQ(pool.stats().allocated, 384u);
  EXPECT_EQ(pool.stats().cached, 128u);
  EXPECT_EQ(pool.stats().peak, 512u);
  void* c = pool.allocate(7);  // same bucket: the cached block, no raw allocation
  EXPECT_EQ(c, a);
  EXPECT_EQ(FakeDevice::raw_allocs, 2);
  EXPECT_EQ(pool.stats().cached, 0u);
  void* d = pool.allocate(200);  // another bucket (256): a new block
  EXPECT_NE(d, b);
  EXPECT_EQ(FakeDevice::raw_allocs, 3);
  EXPECT_EQ(pool.stats().peak, 768u);
  pool.deallocate(b, 300);
  pool.deallocate(c, 7);
  pool.deallocate(d, 200);
  pool.deallocate(nullptr, 100);  // ignored
  EXPECT_EQ(pool.stats().allocated, 0u);
  EXPECT_EQ(pool.stats().cached, 768u);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak, 0u);
  EXPECT_EQ(pool.release_all(), FakeDevice::kSuccess);
  EXPECT_EQ(pool.stats().cached, 0u);
  EXPECT_EQ(FakeDevice::raw_frees, 3);
}

TEST_F(CachingPoolTest, BlocksPastTheCacheBoundGoStraightBack) {
  FakeDevice::kMaxCached = 256;
  void* a = pool.allocate(128);
  void* b = pool.allocate(128);
  void* c = pool.allocate(128);
  pool.deallocate(a, 128);
  pool.deallocate(b, 128);
  EXPECT_EQ(FakeDevice::raw_frees, 0);
  pool.deallocate(c, 128);  // 384 > 256: freed at once
  EXPECT_EQ(FakeDevice::raw_frees, 1);
  EXPECT_EQ(pool.stats().cached, 256u);
  EXPECT_EQ(pool.stats().allocated, 0u);
}

TEST_F(CachingPoolTest, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  void* a = pool.allocate(128);
  pool.deallocate(a, 128);
  FakeDevice::fail_next = 1;
  void* b = pool.allocate(1000);  // fails once, the cache is released, the retry succeeds
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(FakeDevice::raw_frees, 1);
  EXPECT_EQ(pool.stats().cached, 0u);
  EXPECT_EQ(pool.stats().allocated, 1024u);
  FakeDevice::fail_next = 2;  // the retry fails too: one error naming the sizes and the holdings
  try {
    pool.allocate(130);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "failed 256 130 status 1 held 1024/0");
  }
  EXPECT_EQ(FakeDevice::fail_next, 0);
  pool.deallocate(b, 1000);
}

TEST_F(CachingPoolTest, OtherFailuresAreNotRetriedAndKeepTheCache) {
  void* a = pool.allocate(128);
  pool.deallocate(a, 128);
  FakeDevice::fail_next = 2;
  FakeDevice::fail_with = FakeDevice::kBroken;
  EXPECT_THROW(pool.allocate(1000), std::runtime_error);
  EXPECT_EQ(FakeDevice::fail_next, 1) << "one attempt only";
  EXPECT_EQ(pool.stats().cached, 128u);
  EXPECT_EQ(FakeDevice::raw_frees, 0);
}

TEST_F(CachingPoolTest, ReleaseAllFreesEveryBlockAndReportsTheFirstFailure) {
  void* a = pool.allocate(128);
  void* b = pool.allocate(256);
  pool.deallocate(a, 128);
  pool.deallocate(b, 256);
  FakeDevice::free_status = FakeDevice::kBroken;
  EXPECT_EQ(pool.release_all(), FakeDevice::kBroken);
  EXPECT_EQ(FakeDevice::raw_frees, 2);
  EXPECT_EQ(pool.stats().cached, 0u);
}

}  // namespace
}  // namespace pelab
