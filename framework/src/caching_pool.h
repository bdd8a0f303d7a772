// pelab — the caching allocator both backends put in front of their device allocator: freed blocks
// are kept on the free list of their size bucket and handed to the next request of the same bucket,
// so repeated training steps do not reach malloc / cudaMalloc. Thread safe (one mutex); plain C++17,
// so nvcc-compiled files can use it. Tested with a fake device in tests/test_caching_pool.cpp.
//
// The device side is a Policy with static members:
//   using Status = ...;  static constexpr Status kOk;   the raw calls' result (e.g. cudaError_t)
//   static size_t bucket(size_t nbytes);        the block size serving a request (>= nbytes, > 0)
//   static constexpr size_t kMaxCached;         freed blocks that would take the cache past this
//                                               many bytes go straight back to raw_free
//   static void* raw_allocate(size_t bytes, Status* status);  nullptr (and *status) on failure
//   static bool out_of_memory(Status status);   a failure worth retrying once after release_all()
//   [[noreturn]] static void allocate_failed(size_t bytes, size_t requested, Status status,
//                                            const CachingPoolStats& held);  throws
//   static Status raw_free(void* p);
#pragma once
#include <algorithm>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace pelab {

void note_backend_alloc(bool raw);  // pelab/backend.h: counted per thread (BackendCounts)

struct CachingPoolStats {
  size_t cached = 0;     // bytes of freed blocks kept for reuse
  size_t allocated = 0;  // bytes of blocks currently handed out
  size_t peak = 0;       // maximum of `allocated` since the last reset_peak()
};

template <class Policy>
class CachingPool {
 public:
  using Status = typename Policy::Status;

  void* allocate(size_t nbytes) {
    const size_t sz = Policy::bucket(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_lists_.find(sz);
      if (it != free_lists_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached -= sz;
        note_allocated(sz);
        note_backend_alloc(false);
        return p;
      }
    }
    note_backend_alloc(true);
    Status status = Policy::kOk;
    void* p = Policy::raw_allocate(sz, &status);
    if (!p && Policy::out_of_memory(status)) {
      release_all();  // give the cached blocks back and retry once
      p = Policy::raw_allocate(sz, &status);
    }
    if (!p) Policy::allocate_failed(sz, nbytes, status, stats());
    std::lock_guard<std::mutex> lock(mu_);
    note_allocated(sz);
    return p;
  }

  // Never throws: called from Storage destructors.
  void deallocate(void* p, size_t nbytes) noexcept {
    if (!p) return;
    const size_t sz = Policy::bucket(nbytes);
    try {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated -= std::min(stats_.allocated, sz);
      if (sz <= Policy::kMaxCached - stats_.cached) {
        free_lists_[sz].push_back(p);
        stats_.cached += sz;
        return;
      }
    } catch (...) {
      // bookkeeping failed (out of host memory): give the block back instead
    }
    Policy::raw_free(p);
  }

  // Frees every cached block; returns the first failure of raw_free.
  Status release_all() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : free_lists_)
        for (void* p : kv.second) blocks.push_back(p);
      free_lists_.clear();
      stats_.cached = 0;
    }
    Status first = Policy::kOk;
    for (void* p : blocks) {
      const Status s = Policy::raw_free(p);
      if (s != Policy::kOk && first == Policy::kOk) first = s;
    }
    return first;
  }

  CachingPoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.allocated;
  }

 private:
  void note_allocated(size_t sz) {  // under mu_
    stats_.allocated += sz;
    stats_.peak = std::max(stats_.peak, stats_.allocated);
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_lists_;
  CachingPoolStats stats_;
};

}  // namespace pelab
