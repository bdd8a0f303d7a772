// data/rng.h - small portable RNG (SplitMix64) with our own integer mapping, so that every
// generated example is bit-identical on every platform and standard library.
#pragma once

#include <cstdint>
#include <string>

#include "data/error.h"

namespace pelab::data {

// SplitMix64 finaliser: a bijective 64-bit mixing function.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A seed derived from `seed` and a tag, e.g. derive_seed(seed, "valid"); FNV-1a over the tag.
uint64_t derive_seed(uint64_t seed, const std::string& tag);

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(mix64(seed ^ 0x6a09e667f3bcc909ULL)) {}
  // Independent generator for item `index` of the stream `seed`: item k is a pure function of
  // (seed, k).
  static Rng for_index(uint64_t seed, uint64_t index) {
    return Rng(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ mix64(index ^ 0xd1b54a32d192ed03ULL));
  }

  uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  // Uniform integer in [lo, hi] (inclusive), unbiased by rejection. Requires lo <= hi.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    PELAB_DATA_CHECK(lo <= hi, "Rng::uniform_int: empty range [", lo, ", ", hi, "]");
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    if (range == 0) return static_cast<int64_t>(next_u64());  // full 64-bit range
    const uint64_t threshold = (0 - range) % range;
    uint64_t x = next_u64();
    while (x < threshold) x = next_u64();
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % range);
  }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace pelab::data
