// pelab — what several schemes build on the host from a site's positions (AttnSite::q_pos, k_pos):
//   site_distances  the query–key distance table of a bias scheme (alibi, kerple, fire);
//   PositionCache   a small bounded cache of such host-built tables (alibi, t5, kerple, fire and
//                   xpos: distances, bucket ids, cos/sin tables), keyed by the query and key
//                   positions, one integer form flag (causal or not, q or k, ...), the dtype and
//                   the device. Attention calls every layer with the same positions, so the layers
//                   of a stack and the repeated calls of an evaluation share one entry; the oldest
//                   of `capacity` entries is dropped.
#pragma once
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "pelab/dtype.h"

namespace pelab::models {

// d[i·Lk + j] for queries at qp and keys at kp: causal sites p_i − p_j for keys at or before the
// query and 0 for later keys (which the causal mask blocks); non-causal sites |p_i − p_j|.
inline std::vector<double> site_distances(const std::vector<int64_t>& qp,
                                          const std::vector<int64_t>& kp, bool causal) {
  std::vector<double> d(qp.size() * kp.size());
  for (size_t i = 0; i < qp.size(); ++i)
    for (size_t j = 0; j < kp.size(); ++j) {
      const int64_t diff = qp[i] - kp[j];
      d[i * kp.size() + j] =
          static_cast<double>(causal ? (diff > 0 ? diff : 0) : (diff < 0 ? -diff : diff));
    }
  return d;
}

// The sites a scheme's cache of position tables keeps (the newest; the memory estimate counts
// that many tables of a site's size: training lengths vary from batch to batch).
constexpr size_t kPositionCacheEntries = 4;

template <class Value>
class PositionCache {
 public:
  explicit PositionCache(size_t capacity = kPositionCacheEntries) : capacity_(capacity) {}

  // The entry for these keys, or null.
  const Value* find(const std::vector<int64_t>& q, const std::vector<int64_t>& k, int64_t form,
                    DType dtype, Device device) const {
    for (const Entry& e : entries_)
      if (e.form == form && e.dtype == dtype && e.device == device && e.q == q && e.k == k)
        return &e.value;
    return nullptr;
  }

  // Stores `value` (dropping the oldest entry when full) and returns it.
  const Value& put(const std::vector<int64_t>& q, const std::vector<int64_t>& k, int64_t form,
                   DType dtype, Device device, Value value) {
    if (entries_.size() >= capacity_) entries_.pop_front();
    entries_.push_back({q, k, form, dtype, device, std::move(value)});
    return entries_.back().value;
  }

 private:
  struct Entry {
    std::vector<int64_t> q, k;
    int64_t form;
    DType dtype;
    Device device;
    Value value;
  };
  size_t capacity_;
  std::deque<Entry> entries_;
};

}  // namespace pelab::models
