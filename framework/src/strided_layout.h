// pelab — the host side of the backends' strided layouts (cpu/cpu_strided.h, cuda/cuda_common.cuh):
// N views broadcast to one shape, size-1 axes dropped and adjacent axes merged wherever every
// operand allows. Plain C++17, so nvcc-compiled files can use it; each backend stores the axes in
// its own layout struct.
#pragma once
#include <array>
#include <cstdint>

#include "backend_checks.h"
#include "pelab/backend.h"

namespace pelab {

// Checks that each of the N views broadcasts to `shape` (numpy rules: size-1 or missing axes get
// stride 0), sets base[k] to view k's data and walks shape's axes from the innermost outwards,
// merging an axis into the one inside it when every operand's stride allows. Calls
// emit(size, strides) once per collapsed axis, innermost first (strides: std::array<int64_t, N>,
// element strides). Returns the element count of `shape`.
template <int N, class Emit>
int64_t collapse_axes(const Shape& shape, const View* const (&views)[N], const char* op,
                      char* (&base)[N], Emit&& emit) {
  const int R = static_cast<int>(shape.size());
  for (int k = 0; k < N; ++k) {
    const View& v = *views[k];
    check_broadcast_operand(v, shape, op);
    base[k] = static_cast<char*>(v.data);
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  bool pending = false;  // an axis collected but not emitted yet, as it may still merge
  int64_t size = 1;
  std::array<int64_t, N> st{};
  for (int d = R - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s{};
    for (int k = 0; k < N; ++k) {
      const View& v = *views[k];
      const int off = R - static_cast<int>(v.shape.size());
      if (d < off) {
        s[k] = 0;
      } else {
        s[k] = v.shape[d - off] == 1 ? 0 : v.strides[d - off];
      }
    }
    bool merge = pending;
    for (int k = 0; k < N && merge; ++k) merge = s[k] == st[k] * size;
    if (merge) {
      size *= shape[d];
    } else {
      if (pending) emit(size, st);
      pending = true;
      size = shape[d];
      st = s;
    }
  }
  if (pending) emit(size, st);
  return numel;
}

}  // namespace pelab
