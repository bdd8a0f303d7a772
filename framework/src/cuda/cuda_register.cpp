// pelab — registers the CUDA backend (called lazily by backend_for() in backend.cpp, through
// pelab_register_cuda_backend once it has loaded this shared library, libpelab_cuda.so). Throws
// "no CUDA device: ..." when the runtime finds no usable GPU (no driver, no device, or device 0
// cannot be initialised); backend.cpp turns that into "device cuda:0 is not available: ...".
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/cuda_backend.cuh"

namespace pelab {

void register_cuda_backend() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("no CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorName(e), ": ",
         cudaGetErrorString(e));
  }
  if (count == 0) fail("no CUDA device: cudaGetDeviceCount returned 0");
  try {
    register_backend(DeviceType::CUDA, std::make_unique<CudaBackend>());
  } catch (const Error& err) {
    fail("no CUDA device: initialising cuda:0 failed: ", err.what());
  }
}

}  // namespace pelab

// The entry point backend.cpp looks up with dlsym (an unmangled name).
extern "C" __attribute__((visibility("default"))) void pelab_register_cuda_backend() {
  pelab::register_cuda_backend();
}
