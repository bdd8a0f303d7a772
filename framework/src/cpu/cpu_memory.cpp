// pelab — CPU memory: 64-byte aligned allocation through a caching allocator (exact-size free lists
// behind a mutex, sizes rounded up to 64 bytes), so repeated training steps do not hit malloc.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "cpu/cpu_backend.h"

namespace pelab {
namespace {

constexpr size_t kAlign = 64;
// Above this many cached bytes, freed blocks go straight back to the system.
constexpr size_t kMaxCachedBytes = size_t(4) << 30;

struct CachingAllocator {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  size_t cached = 0;

  static size_t round_up(size_t n) { return n == 0 ? kAlign : (n + kAlign - 1) / kAlign * kAlign; }

  void* allocate(size_t nbytes) {
    const size_t sz = round_up(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = free_lists.find(sz);
      if (it != free_lists.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached -= sz;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, sz);
    if (!p) {
      release_all();  // give cached blocks back and retry once
      p = std::aligned_alloc(kAlign, sz);
    }
    PELAB_CHECK(p != nullptr, "cpu allocate: out of memory allocating ", sz, " bytes");
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (!p) return;
    const size_t sz = round_up(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (cached + sz <= kMaxCachedBytes) {
        free_lists[sz].push_back(p);
        cached += sz;
        return;
      }
    }
    std::free(p);
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& kv : free_lists)
      for (void* p : kv.second) std::free(p);
    free_lists.clear();
    cached = 0;
  }
};

// Never destroyed: storages released during static destruction must still find a live allocator.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void* CpuBackend::allocate(size_t nbytes) { return allocator().allocate(nbytes); }

void CpuBackend::deallocate(void* p, size_t nbytes) { allocator().deallocate(p, nbytes); }

void CpuBackend::copy_from_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes && dst != src) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes && dst != src) std::memcpy(dst, src, nbytes);
}

void CpuBackend::empty_cache() { allocator().release_all(); }

size_t CpuBackend::cached_bytes() {
  CachingAllocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.cached;
}

}  // namespace pelab
