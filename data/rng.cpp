// data/rng.cpp - seed derivation for the portable RNG.
#include "data/rng.h"

namespace pelab::data {

uint64_t derive_seed(uint64_t seed, const std::string& tag) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (unsigned char c : tag) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return mix64(seed ^ mix64(h));
}

}  // namespace pelab::data
