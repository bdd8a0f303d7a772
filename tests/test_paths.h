// Where the tests find the source tree, the pelab binary and python3. CMake compiles in the build's
// paths (PELAB_SOURCE_DIR, PELAB_BINARY); an environment variable of the same name overrides each at
// run time, so a test binary copied elsewhere (tools/gpu_check.sh's bundle, run on a GPU host) reads
// its data from the copied tree. PELAB_PYTHON overrides /usr/bin/python3 (a host whose h5py lives in
// another interpreter).
#pragma once
#include <cstdlib>
#include <string>

namespace pelab::testing {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

inline std::string source_dir() { return env_or("PELAB_SOURCE_DIR", PELAB_SOURCE_DIR); }
inline std::string pelab_binary() { return env_or("PELAB_BINARY", PELAB_BINARY); }
inline std::string python3() { return env_or("PELAB_PYTHON", "/usr/bin/python3"); }

}  // namespace pelab::testing
