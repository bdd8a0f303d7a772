// pelab — error handling. Every failure is a pelab::Error naming the op (or file/key) and the
// offending shapes or values; nothing in the engine aborts.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pelab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// "[2, 3, 4]" (tensor.h adds the overload for Shape)
std::string shape_str(const int64_t* dims, size_t n);
inline std::string shape_str(const std::vector<int64_t>& shape) {
  return shape_str(shape.data(), shape.size());
}

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <class T, class... R>
void stream_all(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  stream_all(os, rest...);
}
}  // namespace detail

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::stream_all(os, args...);
  throw Error(os.str());
}

}  // namespace pelab

// PELAB_CHECK(cond, "matmul: inner dimensions differ: ", shape_str(a), " vs ", shape_str(b));
#define PELAB_CHECK(cond, ...)                       \
  do {                                               \
    if (!(cond)) ::pelab::fail(__VA_ARGS__);         \
  } while (0)
