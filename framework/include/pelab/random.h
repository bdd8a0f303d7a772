// pelab — seeded, counter-based randomness. A Generator is (seed, offset): each draw of n numbers
// takes the next n counters, so results are identical across thread counts and devices, and the
// whole state is two integers (saved in checkpoints).
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define PELAB_HD __host__ __device__
#else
#define PELAB_HD
#endif

namespace pelab {

PELAB_HD inline uint64_t rng_mix(uint64_t seed, uint64_t counter) {
  // splitmix64 finaliser over (seed, counter): a well-mixed 64-bit hash.
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + counter * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
// uniform in [0, 1) with 53 random bits
PELAB_HD inline double rng_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(rng_mix(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}
// standard normal from counters 2i and 2i+1 (Box-Muller)
PELAB_HD inline double rng_normal(uint64_t seed, uint64_t i) {
  double u1 = rng_uniform(seed, 2 * i);
  double u2 = rng_uniform(seed, 2 * i + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserve n counters; returns the first.
  uint64_t take(uint64_t n) { uint64_t o = offset_; offset_ += n; return o; }
  // Host-side scalar draws (take one counter each).
  double uniform() { return rng_uniform(seed_, take(1)); }
  double normal() { return rng_normal(seed_, take(1)); }
  // integer in [0, n)
  uint64_t randint(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)) % n; }

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

}  // namespace pelab
