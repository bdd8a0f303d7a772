// tests/test_paths.h: the environment overrides the compiled-in source folder, pelab binary and
// python3 (what lets tools/gpu_check.sh's bundle run the tests from another folder), and an unset or
// empty variable leaves the compiled-in value.
#include "tests/test_paths.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

namespace {

// Sets (or unsets) one variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(TestPaths, EnvironmentOverridesCompiledInPaths) {
  {
    ScopedEnv a("PELAB_SOURCE_DIR", nullptr), b("PELAB_BINARY", nullptr), c("PELAB_PYTHON", nullptr);
    EXPECT_EQ(pelab::testing::source_dir(), PELAB_SOURCE_DIR);
    EXPECT_EQ(pelab::testing::pelab_binary(), PELAB_BINARY);
    EXPECT_EQ(pelab::testing::python3(), "/usr/bin/python3");
  }
  {
    ScopedEnv a("PELAB_SOURCE_DIR", "/moved/src"), b("PELAB_BINARY", "/moved/bin/pelab"),
        c("PELAB_PYTHON", "/opt/py/bin/python3");
    EXPECT_EQ(pelab::testing::source_dir(), "/moved/src");
    EXPECT_EQ(pelab::testing::pelab_binary(), "/moved/bin/pelab");
    EXPECT_EQ(pelab::testing::python3(), "/opt/py/bin/python3");
  }
  {
    ScopedEnv a("PELAB_SOURCE_DIR", "");
    EXPECT_EQ(pelab::testing::source_dir(), PELAB_SOURCE_DIR);
  }
}

}  // namespace
