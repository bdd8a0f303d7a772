// pelab — one knob for threads: OpenMP kernels and OpenBLAS both follow set_num_threads().
#pragma once
#include <cstdint>

namespace pelab {

void set_num_threads(int n);  // n <= 0: all hardware threads
int num_threads();

// Work below this many elements runs on one thread (thread start-up costs more than it saves).
constexpr int64_t kParallelGrain = 16384;

}  // namespace pelab
