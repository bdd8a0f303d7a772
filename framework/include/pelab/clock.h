// pelab — the one monotonic clock of every timing (run times, step times, child wall times):
// seconds since an arbitrary fixed point, so only differences mean anything.
#pragma once
#include <chrono>

namespace pelab {

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace pelab
