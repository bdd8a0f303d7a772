// pelab — position IDs of a block of tokens (docs/model.md, "Position IDs"). The model uses them in
// place of the token indices 0..L-1 in every positional scheme: rows == 1 is one ID vector shared by
// every batch row (the default 0..L-1, a KV cache's offsets, randomized positions); rows == B gives
// each batch row its own IDs (IDs supplied by the task, e.g. position coupling), [B, len] row-major.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "pelab/error.h"

namespace pelab::models {

struct Positions {
  int64_t rows = 1, len = 0;
  std::vector<int64_t> ids;  // rows * len, row-major

  Positions() = default;
  // Shared by every batch row (implicit: a position vector is a Positions).
  Positions(std::vector<int64_t> shared)  // NOLINT(google-explicit-constructor)
      : rows(1), len(static_cast<int64_t>(shared.size())), ids(std::move(shared)) {}
  Positions(std::initializer_list<int64_t> shared)  // NOLINT(google-explicit-constructor)
      : Positions(std::vector<int64_t>(shared)) {}
  // One row of `len` IDs per batch row (rows >= 1; rows == 1 is shared).
  Positions(int64_t rows_, int64_t len_, std::vector<int64_t> ids_)
      : rows(rows_), len(len_), ids(std::move(ids_)) {
    PELAB_CHECK(rows >= 1 && len >= 0 && static_cast<int64_t>(ids.size()) == rows * len,
                "Positions: ", ids.size(), " IDs for ", rows, " rows of ", len);
  }

  bool shared() const { return rows == 1; }
  // The ID of token j of batch row `row` (row ignored when shared).
  int64_t at(int64_t row, int64_t j) const {
    return ids[static_cast<size_t>((shared() ? 0 : row) * len + j)];
  }
  // The IDs of batch row `row` (row ignored when shared).
  std::vector<int64_t> row(int64_t r) const {
    const auto first = ids.begin() + (shared() ? 0 : r) * len;
    return std::vector<int64_t>(first, first + len);
  }
  // Columns [from, to) of every row.
  Positions columns(int64_t from, int64_t to) const {
    PELAB_CHECK(from >= 0 && from <= to && to <= len, "Positions: columns [", from, ", ", to,
                ") of ", len);
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(rows * (to - from)));
    for (int64_t r = 0; r < rows; ++r)
      out.insert(out.end(), ids.begin() + r * len + from, ids.begin() + r * len + to);
    return Positions(rows, to - from, std::move(out));
  }
  // The rows `which` (batch rows of this block) in that order; a shared block stays shared.
  Positions select_rows(const std::vector<size_t>& which) const {
    if (shared()) return *this;
    std::vector<int64_t> out;
    out.reserve(which.size() * static_cast<size_t>(len));
    for (size_t r : which) {
      PELAB_CHECK(static_cast<int64_t>(r) < rows, "Positions: row ", r, " of ", rows);
      out.insert(out.end(), ids.begin() + static_cast<int64_t>(r) * len,
                 ids.begin() + static_cast<int64_t>(r + 1) * len);
    }
    return Positions(static_cast<int64_t>(which.size()), len, std::move(out));
  }
  // This block's rows broadcast to `batch` rows (a shared block repeated).
  Positions expanded(int64_t batch) const {
    if (!shared()) {
      PELAB_CHECK(rows == batch, "Positions: ", rows, " rows for a batch of ", batch);
      return *this;
    }
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(batch * len));
    for (int64_t r = 0; r < batch; ++r) out.insert(out.end(), ids.begin(), ids.end());
    return Positions(batch, len, std::move(out));
  }
  // This block followed by `more` (the same rows, or either shared: broadcast to the other's rows).
  void append(const Positions& more) {
    if (len == 0 && shared()) {
      *this = more;
      return;
    }
    if (shared() && more.shared()) {
      ids.insert(ids.end(), more.ids.begin(), more.ids.end());
      len += more.len;
      return;
    }
    const int64_t b = shared() ? more.rows : rows;
    const Positions a = expanded(b), m = more.expanded(b);
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(b * (a.len + m.len)));
    for (int64_t r = 0; r < b; ++r) {
      out.insert(out.end(), a.ids.begin() + r * a.len, a.ids.begin() + (r + 1) * a.len);
      out.insert(out.end(), m.ids.begin() + r * m.len, m.ids.begin() + (r + 1) * m.len);
    }
    *this = Positions(b, a.len + m.len, std::move(out));
  }
  // The largest ID (-1 when there is none).
  int64_t max() const { return ids.empty() ? -1 : *std::max_element(ids.begin(), ids.end()); }
  bool operator==(const Positions& o) const { return rows == o.rows && len == o.len && ids == o.ids; }
  bool operator!=(const Positions& o) const { return !(*this == o); }
};

}  // namespace pelab::models
