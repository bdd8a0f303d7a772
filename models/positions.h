// pelab — position IDs of a block of tokens (docs/model.md, "Position IDs"). The model uses them in
// place of the token indices 0..L-1 in every positional scheme: rows == 1 is one ID vector shared by
// every batch row (the default 0..L-1, a KV cache's offsets, randomized positions); rows == B gives
// each batch row its own IDs (IDs supplied by the task, e.g. position coupling), [B, len] row-major.
// A task with two-level IDs (multi_addition's digit and operand IDs) fills ids2 too, laid out as
// ids; only a scheme that declares a second channel reads it (models/pe/pe.h,
// PEScheme::position_channels). Every operation below carries it along.
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
  std::vector<int64_t> ids;   // rows * len, row-major
  std::vector<int64_t> ids2;  // the second ID level, as ids; empty = one level

  Positions() = default;
  // Shared by every batch row (implicit: a position vector is a Positions).
  Positions(std::vector<int64_t> shared)  // NOLINT(google-explicit-constructor)
      : rows(1), len(static_cast<int64_t>(shared.size())), ids(std::move(shared)) {}
  Positions(std::initializer_list<int64_t> shared)  // NOLINT(google-explicit-constructor)
      : Positions(std::vector<int64_t>(shared)) {}
  // One row of `len` IDs per batch row (rows >= 1; rows == 1 is shared).
  // ids2_: the second ID level (empty = none), as many as ids.
  Positions(int64_t rows_, int64_t len_, std::vector<int64_t> ids_,
            std::vector<int64_t> ids2_ = {})
      : rows(rows_), len(len_), ids(std::move(ids_)), ids2(std::move(ids2_)) {
    PELAB_CHECK(rows >= 1 && len >= 0 && static_cast<int64_t>(ids.size()) == rows * len,
                "Positions: ", ids.size(), " IDs for ", rows, " rows of ", len);
    PELAB_CHECK(ids2.empty() || ids2.size() == ids.size(), "Positions: ", ids2.size(),
                " second-level IDs for ", ids.size(), " IDs");
  }

  bool shared() const { return rows == 1; }
  // 2 with a second ID level, else 1 (an empty block has the levels of its IDs: 1).
  int64_t levels() const { return ids2.empty() || len == 0 ? 1 : 2; }
  // The second-level ID of token j of batch row `row`; requires levels() == 2.
  int64_t at2(int64_t row, int64_t j) const {
    return ids2[static_cast<size_t>((shared() ? 0 : row) * len + j)];
  }
  // Batch row `r` alone as a shared block, both levels (row ignored when shared).
  Positions row_block(int64_t r) const {
    const int64_t first = (shared() ? 0 : r) * len;
    std::vector<int64_t> a(ids.begin() + first, ids.begin() + first + len), b;
    if (!ids2.empty()) b.assign(ids2.begin() + first, ids2.begin() + first + len);
    return Positions(1, len, std::move(a), std::move(b));
  }
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
    auto cut = [&](const std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      if (v.empty()) return out;
      out.reserve(static_cast<size_t>(rows * (to - from)));
      for (int64_t r = 0; r < rows; ++r)
        out.insert(out.end(), v.begin() + r * len + from, v.begin() + r * len + to);
      return out;
    };
    return Positions(rows, to - from, cut(ids), cut(ids2));
  }
  // The rows `which` (batch rows of this block) in that order; a shared block stays shared.
  Positions select_rows(const std::vector<size_t>& which) const {
    if (shared()) return *this;
    auto pick = [&](const std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      if (v.empty()) return out;
      out.reserve(which.size() * static_cast<size_t>(len));
      for (size_t r : which) {
        PELAB_CHECK(static_cast<int64_t>(r) < rows, "Positions: row ", r, " of ", rows);
        out.insert(out.end(), v.begin() + static_cast<int64_t>(r) * len,
                   v.begin() + static_cast<int64_t>(r + 1) * len);
      }
      return out;
    };
    return Positions(static_cast<int64_t>(which.size()), len, pick(ids), pick(ids2));
  }
  // This block's rows broadcast to `batch` rows (a shared block repeated).
  Positions expanded(int64_t batch) const {
    if (!shared()) {
      PELAB_CHECK(rows == batch, "Positions: ", rows, " rows for a batch of ", batch);
      return *this;
    }
    auto repeat = [&](const std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      if (v.empty()) return out;
      out.reserve(static_cast<size_t>(batch * len));
      for (int64_t r = 0; r < batch; ++r) out.insert(out.end(), v.begin(), v.end());
      return out;
    };
    return Positions(batch, len, repeat(ids), repeat(ids2));
  }
  // This block followed by `more` (the same rows, or either shared: broadcast to the other's rows;
  // both with a second ID level or neither).
  void append(const Positions& more) {
    if (len == 0 && shared()) {
      *this = more;
      return;
    }
    PELAB_CHECK(ids2.empty() == more.ids2.empty(), "Positions: appending a block with ",
                more.ids2.empty() ? "one ID level" : "two ID levels", " to one with ",
                ids2.empty() ? "one" : "two");
    if (shared() && more.shared()) {
      ids.insert(ids.end(), more.ids.begin(), more.ids.end());
      ids2.insert(ids2.end(), more.ids2.begin(), more.ids2.end());
      len += more.len;
      return;
    }
    const int64_t b = shared() ? more.rows : rows;
    const Positions a = expanded(b), m = more.expanded(b);
    auto join = [&](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
      std::vector<int64_t> out;
      if (x.empty()) return out;
      out.reserve(static_cast<size_t>(b * (a.len + m.len)));
      for (int64_t r = 0; r < b; ++r) {
        out.insert(out.end(), x.begin() + r * a.len, x.begin() + (r + 1) * a.len);
        out.insert(out.end(), y.begin() + r * m.len, y.begin() + (r + 1) * m.len);
      }
      return out;
    };
    *this = Positions(b, a.len + m.len, join(a.ids, m.ids), join(a.ids2, m.ids2));
  }
  // The largest first-level ID (-1 when there is none).
  int64_t max() const { return ids.empty() ? -1 : *std::max_element(ids.begin(), ids.end()); }
  bool operator==(const Positions& o) const {
    return rows == o.rows && len == o.len && ids == o.ids && ids2 == o.ids2;
  }
  bool operator!=(const Positions& o) const { return !(*this == o); }
};

}  // namespace pelab::models
