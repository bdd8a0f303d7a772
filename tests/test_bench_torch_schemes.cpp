// The PyTorch peer of the training benchmark (bench/bench_torch.py) trains every registered PE scheme
// with the classes of tools/torch_reference.py (issue 18 item 4): for each scheme in the registry it
// runs two training steps of a tiny config and its --check-against-reference mode (the bench's
// nn.Module and the reference's Model on the same float64 parameters and batch: logits, loss and
// gradients within 1e-10); a scheme pelab does not register is one error line and a non-zero exit,
// never a model without positional encoding. Skips when python3 cannot import torch.
#include <gtest/gtest.h>

#include <string>

#include "models/pe/pe.h"
#include "tests/test_util.h"

namespace {

using pelab::testing::quote;

class BenchTorchSchemes : public pelab::testing::TempDirTest {
 protected:
  BenchTorchSchemes() : TempDirTest("bench_torch_schemes") {}

  void SetUp() override {
    TempDirTest::SetUp();  // dir_
    if (!pelab::testing::python_has_module("torch"))
      GTEST_SKIP() << "torch cannot be imported by " << pelab::testing::python3();
  }

  // bench_torch.py on a tiny model with pelab's defaults, one thread.
  pelab::testing::CommandResult bench(const std::string& scheme, const std::string& extra) {
    const std::string cmd = pelab::testing::python3() + " " +
                            quote(pelab::testing::source_dir() + "/bench/bench_torch.py") +
                            " --pelab " + quote(pelab::testing::pelab_binary()) + " --scheme " +
                            quote(scheme) +
                            " --d_model 8 --heads 2 --d_ff 16 --layers 2 --batch 2 --len 5"
                            " --vocab 9 --threads 1 " +
                            extra;
    return pelab::testing::run_captured(cmd, dir_ / "out.txt", dir_ / "err.txt");
  }
};

TEST_F(BenchTorchSchemes, EveryRegisteredSchemeTrainsAndMatchesTheReference) {
  const auto schemes = pelab::models::pe_names();
  ASSERT_GE(schemes.size(), 11u);
  for (const auto& scheme : schemes) {
    SCOPED_TRACE(scheme);
    const auto t = bench(scheme, "--steps 2 --warmup 0");
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_NE(t.out.find("\"scheme\": \"" + scheme + "\""), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("\"median_ms\""), std::string::npos) << t.out;
    const auto c = bench(scheme, "--check-against-reference");
    ASSERT_EQ(c.rc, 0) << c.out << c.err;
    EXPECT_NE(c.out.find("\"check\": \"reference\""), std::string::npos) << c.out;
  }
}

TEST_F(BenchTorchSchemes, UnknownSchemeIsOneErrorLine) {
  const auto r = bench("nosuchscheme", "--steps 2 --warmup 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("bench_torch.py: unknown scheme 'nosuchscheme' (pelab registers: ", 0), 0u)
      << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line
}

TEST_F(BenchTorchSchemes, WithoutThePelabBinaryIsOneErrorLine) {
  const auto r = pelab::testing::run_captured(
      pelab::testing::python3() + " " +
          quote(pelab::testing::source_dir() + "/bench/bench_torch.py") + " --scheme rope --steps 1",
      dir_ / "out.txt", dir_ / "err.txt");
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.rfind("bench_torch.py: --pelab PATH is needed", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

}  // namespace
