// data/error.h - DataError, the exception type of the data library (no engine dependency).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pelab::data {

// Thrown for every invalid input to the data library. Messages name the task, file, line or key.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates the arguments with operator<< and throws DataError.
template <class... A>
[[noreturn]] void data_fail(const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw DataError(os.str());
}

}  // namespace pelab::data

// Throws DataError with the concatenated message when `cond` is false.
#define PELAB_DATA_CHECK(cond, ...)                     \
  do {                                                  \
    if (!(cond)) ::pelab::data::data_fail(__VA_ARGS__); \
  } while (0)
