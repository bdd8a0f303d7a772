// pelab — CPU memory: 64-byte aligned allocation through the caching allocator (caching_pool.h:
// exact-size free lists behind a mutex, sizes rounded up to 64 bytes, at most 4 GiB cached), so
// repeated training steps do not hit malloc.
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "caching_pool.h"
#include "cpu/cpu_backend.h"

namespace pelab {
namespace {

constexpr size_t kAlign = 64;

struct CpuMemory {
  using Status = int;  // 0 or ENOMEM
  static constexpr Status kOk = 0;
  // Above this many cached bytes, freed blocks go straight back to the system.
  static constexpr size_t kMaxCached = size_t(4) << 30;

  static size_t bucket(size_t n) { return n == 0 ? kAlign : (n + kAlign - 1) / kAlign * kAlign; }
  static void* raw_allocate(size_t bytes, Status* status) {
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) *status = ENOMEM;
    return p;
  }
  static bool out_of_memory(Status status) { return status == ENOMEM; }
  [[noreturn]] static void allocate_failed(size_t bytes, size_t, Status, const CachingPoolStats&) {
    fail("cpu allocate: out of memory allocating ", bytes, " bytes");
  }
  static Status raw_free(void* p) {
    std::free(p);
    return kOk;
  }
};

// Never destroyed: storages released during static destruction must still find a live allocator.
CachingPool<CpuMemory>& allocator() {
  static CachingPool<CpuMemory>* a = new CachingPool<CpuMemory>();
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

size_t CpuBackend::cached_bytes() { return allocator().stats().cached; }

}  // namespace pelab
