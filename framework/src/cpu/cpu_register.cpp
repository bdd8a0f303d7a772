// pelab — registers the CPU backend (called lazily by backend_for() in backend.cpp).
#include <memory>

#include "cpu/cpu_backend.h"

namespace pelab {

void register_cpu_backend() { register_backend(DeviceType::CPU, std::make_unique<CpuBackend>()); }

}  // namespace pelab
