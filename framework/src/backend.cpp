// pelab — backend registry and View helpers.
#include "pelab/backend.h"
#include "pelab/host_reads.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>
#ifdef PELAB_WITH_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#endif

namespace pelab {

void register_cpu_backend();  // framework/src/cpu/cpu_register.cpp
std::unique_ptr<Backend> counting_backend(std::unique_ptr<Backend> inner);  // backend_counts.cpp

namespace {
std::array<std::unique_ptr<Backend>, 2>& slots() {
  static std::array<std::unique_ptr<Backend>, 2> s;
  return s;
}
std::once_flag cpu_once;
#ifdef PELAB_WITH_CUDA
std::once_flag cuda_once;
bool cuda_failed = false;
std::string cuda_error;

// The CUDA backend is the shared library libpelab_cuda.so (CMakeLists.txt), loaded the first time a
// CUDA device is asked for, so that a CPU run maps neither it nor cudart / cuBLAS / cuBLASLt. It is
// looked for next to the executable (the build tree), then by the loader's search (a bundle's
// ../lib through the executable's RPATH, LD_LIBRARY_PATH). Its engine symbols resolve against the
// executable, which exports them. Throws with the loader's reason when it cannot be loaded.
void load_cuda_backend() {
  const char* const kName = "libpelab_cuda.so";
  std::string tried;
  void* lib = nullptr;
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    lib = ::dlopen((dir + kName).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) tried = ::dlerror();
  }
  if (lib == nullptr) lib = ::dlopen(kName, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    fail("no CUDA device: cannot load the CUDA backend ", kName, ": ", why ? why : "?",
         tried.empty() ? "" : " (next to the executable: " + tried + ")");
  }
  using Register = void (*)();
  auto reg = reinterpret_cast<Register>(::dlsym(lib, "pelab_register_cuda_backend"));
  if (reg == nullptr) fail("no CUDA device: ", kName, " has no pelab_register_cuda_backend");
  reg();  // throws "no CUDA device: ..." without a usable GPU
}
#endif
}  // namespace

// Every backend is used through the counting layer (backend_counts.cpp).
void register_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  slots()[static_cast<size_t>(type)] = backend ? counting_backend(std::move(backend)) : nullptr;
}

static void ensure(DeviceType type) {
  if (type == DeviceType::CPU) {
    std::call_once(cpu_once, [] { register_cpu_backend(); });
  }
#ifdef PELAB_WITH_CUDA
  if (type == DeviceType::CUDA) {
    std::call_once(cuda_once, [] {
      try {
        load_cuda_backend();
      } catch (const std::exception& e) {
        cuda_failed = true;
        cuda_error = e.what();
      }
    });
  }
#endif
}

bool backend_available(DeviceType type) {
  ensure(type);
  return slots()[static_cast<size_t>(type)] != nullptr;
}

Backend& backend_for(Device device) {
  ensure(device.type);
  auto& b = slots()[static_cast<size_t>(device.type)];
  if (!b) {
#ifdef PELAB_WITH_CUDA
    if (device.is_cuda()) fail("device ", device.str(), " is not available: ", cuda_error);
#endif
    fail("device ", device.str(), " is not available: pelab was built without its backend");
  }
  return *b;
}

bool View::contiguous() const {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

void Backend::attention(const AttentionArgs&) {
  fail("attention: the ", name(), " backend has no fused attention kernel");
}

void Backend::attention_backward(const AttentionArgs&, const View&, const AttentionGrads&) {
  fail("attention_backward: the ", name(), " backend has no fused attention kernel");
}

View view_of(const Tensor& t) {
  View v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.strides = t.strides();
  return v;
}

View view_broadcast(const Tensor& t, const Shape& to) {
  const Shape& s = t.shape();
  PELAB_CHECK(s.size() <= to.size(), "broadcast: cannot broadcast ", shape_str(s), " to ",
              shape_str(to));
  View v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.shape = to;
  v.strides.assign(to.size(), 0);
  const size_t lead = to.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == to[lead + i]) {
      v.strides[lead + i] = s[i] == 1 ? 0 : t.strides()[i];
    } else {
      PELAB_CHECK(s[i] == 1, "broadcast: cannot broadcast ", shape_str(s), " to ", shape_str(to));
    }
  }
  return v;
}

namespace {
std::atomic<bool> g_emulate_device_reads{false};
}

bool step_may_read_host(Device device) { return device.is_cpu() && !g_emulate_device_reads.load(); }

bool set_emulate_device_reads(bool on) { return g_emulate_device_reads.exchange(on); }

}  // namespace pelab
