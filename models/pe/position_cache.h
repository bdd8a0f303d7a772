// pelab — a small bounded cache of what a scheme builds on the host from a site's positions (a
// distance table, cos/sin tables, bucket ids), keyed by the query and key positions, one integer
// form flag (causal or not, q or k, ...), the dtype and the device. Attention calls each layer with
// the same positions, so the layers of a stack and the repeated calls of an evaluation share one
// entry; the oldest of `capacity` entries is dropped. Used by kerple.cpp, fire.cpp and xpos.cpp.
#pragma once
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "pelab/dtype.h"

namespace pelab::models {

template <class Value>
class PositionCache {
 public:
  explicit PositionCache(size_t capacity = 4) : capacity_(capacity) {}

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
