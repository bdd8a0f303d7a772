// pelab — canonical T5 relative-position bucketing (Raffel et al. 2020; the bucketing of the original
// Mesh-TensorFlow T5 and of HF transformers' `T5Attention._relative_position_bucket`).
//
//   relative_position = key_pos − query_pos.
//   Bidirectional (encoder self-attention): half the buckets per direction; keys after the query
//     (relative_position > 0) get +num_buckets/2; n = |relative_position|.
//   Unidirectional (decoder self-attention): keys after the query fall in bucket 0;
//     n = max(−relative_position, 0).
//   With nb the buckets of one direction and max_exact = nb/2: n < max_exact -> bucket n (exact);
//   otherwise max_exact + trunc(log(n / max_exact) / log(max_distance / max_exact) · (nb − max_exact)),
//   capped at nb − 1. The log branch is only evaluated where n >= max_exact (log(0) cast to an integer
//   is undefined behaviour). As in the canonical implementations, the log term is computed in float32.
//
// For num_buckets = 32, max_distance = 128: bidirectional saturates at |d| >= 91 and never uses
// bucket 16 (d > 0 starts at 16 + 1); unidirectional saturates at d <= −113.
#pragma once
#include <cmath>
#include <cstdint>

#include "pelab/error.h"

namespace pelab::models {

// Throws pelab::Error unless (num_buckets, max_distance) give a well-defined bucketing.
inline void t5_check_buckets(bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  const int64_t nb = bidirectional ? num_buckets / 2 : num_buckets;
  PELAB_CHECK(nb >= 2, "pe.t5_num_buckets: need at least ", bidirectional ? 4 : 2,
              " buckets (", bidirectional ? "bidirectional" : "unidirectional", "), got ",
              num_buckets);
  PELAB_CHECK(max_distance > nb / 2, "pe.t5_max_distance: must exceed the exact range ", nb / 2,
              " (num_buckets ", num_buckets, ", ", bidirectional ? "bidirectional" : "unidirectional",
              "), got ", max_distance);
}

// Bucket id in [0, num_buckets) for relative_position = key − query. Arguments are validated
// (cheaply) on every call; callers filling an L×L table may call t5_check_buckets once instead.
inline int64_t t5_relative_bucket(int64_t relative_position, bool bidirectional,
                                   int64_t num_buckets, int64_t max_distance) {
  t5_check_buckets(bidirectional, num_buckets, max_distance);
  int64_t bucket = 0;
  int64_t nb = num_buckets;
  int64_t n;
  if (bidirectional) {
    nb /= 2;
    if (relative_position > 0) bucket += nb;
    n = relative_position < 0 ? -relative_position : relative_position;
  } else {
    n = relative_position < 0 ? -relative_position : 0;
  }
  const int64_t max_exact = nb / 2;
  if (n < max_exact) return bucket + n;
  // float32 as in HF/Mesh-TF: log(n / max_exact) / log(max_distance / max_exact) * (nb - max_exact)
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const float scale = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float x = std::log(ratio) / scale * static_cast<float>(nb - max_exact);
  // x >= 0 here; clamp before the cast so huge distances cannot overflow the conversion.
  const float cap = static_cast<float>(nb);
  int64_t large = max_exact + static_cast<int64_t>(x < cap ? x : cap);
  if (large > nb - 1) large = nb - 1;
  return bucket + large;
}

}  // namespace pelab::models
