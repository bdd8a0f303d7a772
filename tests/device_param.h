// pelab — device-parametrized tests: a test body written once against a Device and instantiated
// for every device this machine can run, "cpu" always and "cuda" where a CUDA device is usable. The
// same body runs on the CPU in CI and on the GPU where there is one (tools/gpu_check.sh), so a test
// of what runs on a device (training, checkpoints, decoding, error paths) cannot rot unrun. Without
// a usable device there is no cuda instance (nothing is skipped that would look passed);
// DeviceParam.ListsTheDevicesItRunsOn says which devices the tests run on, and why not cuda.
//
//   class MyTest : public pelab::testing::DeviceTest {};
//   TEST_P(MyTest, Works) { Tensor t = Tensor::ones({2}, DType::Float32, device()); ... }
//   PELAB_INSTANTIATE_DEVICE_TESTS(MyTest);     // MyTest.Works/cpu, MyTest.Works/cuda
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "pelab/backend.h"
#include "pelab/tensor.h"
#include "tests/op_driver.h"

namespace pelab::testing {

// Why cuda is not a test device here ("" when it is). The CUDA backend is probed only where an
// NVIDIA driver is present, so a test process on a machine without one never loads the CUDA
// libraries.
inline const std::string& cuda_unavailable_reason() {
  static const std::string why = [] {
#ifndef PELAB_WITH_CUDA
    return std::string("this build has no CUDA backend (PELAB_CUDA=OFF or no nvcc)");
#else
    std::error_code ec;
    if (!std::filesystem::exists("/dev/nvidiactl", ec) &&
        !std::filesystem::exists("/proc/driver/nvidia/version", ec))
      return std::string("no NVIDIA driver on this machine (no /dev/nvidiactl)");
    if (backend_available(DeviceType::CUDA)) return std::string();
    try {
      backend_for(Device::cuda());
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("the CUDA backend is not available");
#endif
  }();
  return why;
}

// The devices device-parametrized tests run on, as Device::parse names them.
inline std::vector<std::string> test_devices() {
  std::vector<std::string> d = {"cpu"};
  if (cuda_unavailable_reason().empty()) d.push_back("cuda");
  return d;
}

class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  Device device() const { return Device::parse(GetParam()); }
  Backend& backend() const { return backend_for(device()); }
};

inline std::string device_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// ---- comparing a device's results with the CPU's ----
// EXPECTs that got (a device's) matches ref (the CPU's) within tol (scaled_error); `what` names
// the check.
inline void expect_close(const Values& ref, const Values& got, double tol,
                         const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  size_t worst = 0;
  const double err = scaled_error(ref, got, &worst);
  EXPECT_LE(err, tol) << what << ": the device differs from the CPU at flat index " << worst
                      << ": " << (got.empty() ? 0.0 : got[worst]) << " vs "
                      << (ref.empty() ? 0.0 : ref[worst]);
}
inline void expect_close(const Tensor& ref, const Tensor& got, double tol,
                         const std::string& what) {
  ASSERT_EQ(ref.shape(), got.shape()) << what;
  ASSERT_EQ(ref.dtype(), got.dtype()) << what;
  expect_close(ref.to_vector(), got.to_vector(), tol, what);
}
// Identical values (same bits, so -0 != +0); any NaN matches any NaN (payloads may differ).
inline bool bit_equal(const Tensor& a, const Tensor& b) {
  const Values x = a.to_vector(), y = b.to_vector();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != x[i] && y[i] != y[i]) continue;
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0) return false;
  }
  return true;
}

}  // namespace pelab::testing

#define PELAB_INSTANTIATE_DEVICE_TESTS(suite)                                          \
  INSTANTIATE_TEST_SUITE_P(Devices, suite,                                              \
                           ::testing::ValuesIn(::pelab::testing::test_devices()),     \
                           ::pelab::testing::device_param_name)
