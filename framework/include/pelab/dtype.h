// pelab — element types and devices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "pelab/error.h"

namespace pelab {

// Float32/Float64 are the differentiable types; Int64 holds token ids, indices and targets.
enum class DType : uint8_t { Float32, Float64, Int64 };

inline size_t dtype_size(DType t) { return t == DType::Float32 ? 4 : 8; }
inline bool is_floating(DType t) { return t != DType::Int64; }
// The largest finite value of a floating dtype (float32: 3.4028234663852886e38): a setting that
// becomes a value of this type (an init std, a learning rate) must not exceed it.
inline double dtype_max(DType t) {
  return t == DType::Float32 ? static_cast<double>(std::numeric_limits<float>::max())
                             : std::numeric_limits<double>::max();
}
const char* dtype_name(DType t);  // "float32", "float64", "int64"
DType dtype_from_name(const std::string& name);  // throws on unknown

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  static Device cpu() { return Device{}; }
  static Device cuda(int i = 0) { return Device{DeviceType::CUDA, i}; }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"; throws on unknown
};

// Dispatch a floating dtype to a template lambda: PELAB_DISPATCH_FLOAT(dt, "op", [&](auto tag){ using T = decltype(tag); ... });
#define PELAB_DISPATCH_FLOAT(dt, opname, ...)                                                  \
  [&] {                                                                                       \
    switch (dt) {                                                                             \
      case ::pelab::DType::Float32: { auto f_ = __VA_ARGS__; return f_(float{}); }            \
      case ::pelab::DType::Float64: { auto f_ = __VA_ARGS__; return f_(double{}); }           \
      default: ::pelab::fail(opname, ": expected a floating dtype, got ", ::pelab::dtype_name(dt)); \
    }                                                                                         \
  }()

#define PELAB_DISPATCH_ALL(dt, opname, ...)                                                    \
  [&] {                                                                                       \
    switch (dt) {                                                                             \
      case ::pelab::DType::Float32: { auto f_ = __VA_ARGS__; return f_(float{}); }            \
      case ::pelab::DType::Float64: { auto f_ = __VA_ARGS__; return f_(double{}); }           \
      case ::pelab::DType::Int64: { auto f_ = __VA_ARGS__; return f_(int64_t{}); }            \
    }                                                                                         \
    ::pelab::fail(opname, ": bad dtype");                                                     \
  }()

}  // namespace pelab
