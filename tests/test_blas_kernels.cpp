// pelab never computes on OpenBLAS's generic kernels when the CPU has better ones (issue 31 item 1;
// pelab/blas_kernels.h): the CPU's best kernels by its features, the numeric self-test (it must
// catch a wrong GEMM), every path of the decision with fake environments, CPUs and self-test
// outcomes (a failing self-test falls back to OpenBLAS's own choice), and the pelab binary run with
// the environment forced each way (OPENBLAS_CORETYPE set by the user, unset, PELAB_BLAS_CORETYPE
// keep / a name / a bad name), whatever this CPU is.
#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "pelab/blas_kernels.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using pelab::BlasEnv;
using pelab::BlasFacts;
using pelab::BlasStep;
using pelab::testing::quote;

const char* const kDynamic = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP Prescott MAX_THREADS=64";

// A self-test that must not run (the decision needs none); it fails the test if called.
std::string no_self_test() {
  ADD_FAILURE() << "the self-test ran";
  return "";
}

void sgemm_ok(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void dgemm_ok(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
              const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

TEST(BlasKernels, BestKernelsFollowTheCpuFeatures) {
  pelab::CpuFeatures f;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "");  // SSE only: nothing beats the generic kernels
  f.avx = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "Sandybridge");
  f.avx2 = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "Sandybridge");  // AVX2 without FMA
  f.fma = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "Haswell");
  f.amd = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "Zen");
  f.avx512 = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "SkylakeX");
  f.amd = false;
  f.avx512_bf16 = true;
  EXPECT_EQ(pelab::best_openblas_coretype(f), "Cooperlake");
  EXPECT_EQ(pelab::openblas_kernel_level("Prescott"), 0);
  EXPECT_EQ(pelab::openblas_kernel_level("sandybridge"), 1);
  EXPECT_EQ(pelab::openblas_kernel_level("Haswell"), 2);
  EXPECT_EQ(pelab::openblas_kernel_level("ZEN"), 2);
  EXPECT_EQ(pelab::openblas_kernel_level("SkylakeX"), 3);
  EXPECT_EQ(pelab::openblas_kernel_level("Cooperlake"), 3);
}

// The self-test passes on this process's OpenBLAS and catches a GEMM wrong in one entry at a block
// edge, or one that ignores beta.
TEST(BlasKernels, SelfTestCatchesAWrongGemm) {
  EXPECT_EQ(pelab::blas_self_test(), "");
  EXPECT_EQ(pelab::blas_self_test(sgemm_ok, dgemm_ok), "");
  const auto edge_wrong = [](bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                             int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    sgemm_ok(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (M > 64 && tb) C[static_cast<size_t>(M - 1) * ldc + N - 1] *= 1.001f;
  };
  const std::string s = pelab::blas_self_test(edge_wrong, dgemm_ok);
  EXPECT_NE(s.find("sgemm 97x83x71 A B^T: C[96,82]"), std::string::npos) << s;
  const auto no_beta = [](bool ta, bool tb, int M, int N, int K, double alpha, const double* A,
                          int lda, const double* B, int ldb, double, double* C, int ldc) {
    dgemm_ok(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0, C, ldc);
  };
  const std::string d = pelab::blas_self_test(sgemm_ok, no_beta);
  EXPECT_EQ(d.rfind("dgemm 5x7x3 A B: C[0,0]", 0), 0u) << d;
}

// Auto on a CPU whose best kernels OpenBLAS did not pick: re-execute with them, test them there,
// keep them when they pass; when they fail, re-execute on OpenBLAS's own choice and say why.
TEST(BlasKernels, AutoTestsTheBetterKernelsAndFallsBackWhenTheyFail) {
  BlasEnv env;
  const BlasStep first = pelab::plan_blas_kernels(env, {"Prescott", kDynamic, "SkylakeX"}, no_self_test);
  ASSERT_EQ(first.kind, BlasStep::Reexec);
  EXPECT_EQ(first.set_coretype, std::optional<std::string>("SkylakeX"));
  EXPECT_EQ(first.marker, "try|auto|SkylakeX|Prescott");
  EXPECT_TRUE(first.warning.empty());

  // The re-executed process: OpenBLAS loaded SkylakeX.
  env.openblas_coretype = "SkylakeX";
  env.marker = first.marker;
  const BlasFacts loaded{"SkylakeX", kDynamic, "SkylakeX"};
  int tests = 0;
  const BlasStep pass = pelab::plan_blas_kernels(env, loaded, [&] {
    ++tests;
    return std::string();
  });
  EXPECT_EQ(tests, 1);
  ASSERT_EQ(pass.kind, BlasStep::Continue);
  EXPECT_EQ(pass.note, "auto: OpenBLAS chose Prescott, this CPU supports SkylakeX, which passed "
                       "pelab's numeric self-test");
  EXPECT_EQ(pass.marker, "done|auto|SkylakeX|" + pass.note);
  // Its children (pelab compare --jobs) inherit the decision and test nothing.
  env.marker = pass.marker;
  const BlasStep child = pelab::plan_blas_kernels(env, loaded, no_self_test);
  EXPECT_EQ(child.kind, BlasStep::Continue);
  EXPECT_EQ(child.note, pass.note);

  // The injected fault: the kernels compute a wrong entry.
  env.marker = first.marker;
  const BlasStep fail = pelab::plan_blas_kernels(
      env, loaded, [] { return std::string("sgemm 97x83x71 A B: C[1,2] = 5, expected 4"); });
  ASSERT_EQ(fail.kind, BlasStep::Reexec);
  EXPECT_EQ(fail.set_coretype, std::optional<std::string>(""));  // OPENBLAS_CORETYPE removed
  EXPECT_NE(fail.warning.find("SkylakeX kernels failed pelab's numeric self-test (sgemm 97x83x71"),
            std::string::npos)
      << fail.warning;
  EXPECT_NE(fail.warning.find("running OpenBLAS's own choice, Prescott"), std::string::npos);
  // ... and the process re-executed on OpenBLAS's own choice stays there, saying why.
  env.openblas_coretype.reset();
  env.marker = fail.marker;
  const BlasStep after = pelab::plan_blas_kernels(env, {"Prescott", kDynamic, "SkylakeX"}, no_self_test);
  EXPECT_EQ(after.kind, BlasStep::Continue);
  EXPECT_NE(after.note.find("failed pelab's numeric self-test"), std::string::npos) << after.note;

  // An OpenBLAS without the kernels (an older one without Cooperlake: it loaded its own choice
  // again): the next ones down are tried, while they beat its own choice ...
  env.openblas_coretype = "Cooperlake";
  env.marker = "try|auto|Cooperlake|Prescott";
  const BlasStep lower = pelab::plan_blas_kernels(env, {"Prescott", kDynamic, "Cooperlake"}, no_self_test);
  ASSERT_EQ(lower.kind, BlasStep::Reexec);
  EXPECT_EQ(lower.set_coretype, std::optional<std::string>("SkylakeX"));
  EXPECT_EQ(lower.marker, "try|auto|SkylakeX|Prescott");
  EXPECT_TRUE(lower.warning.empty());
  // ... then back to its own choice, with a warning.
  env.openblas_coretype = "Sandybridge";
  env.marker = "try|auto|Sandybridge|Prescott";
  const BlasStep none = pelab::plan_blas_kernels(env, {"Prescott", kDynamic, "Cooperlake"}, no_self_test);
  EXPECT_EQ(none.kind, BlasStep::Reexec);
  EXPECT_EQ(none.set_coretype, std::optional<std::string>(""));
  EXPECT_NE(none.warning.find("Sandybridge kernels are not in this OpenBLAS (it loaded Prescott)"),
            std::string::npos)
      << none.warning;
  // Kernels of the same level under the name are tested and kept, under their own name.
  env.openblas_coretype = "Cooperlake";
  env.marker = "try|auto|Cooperlake|Prescott";
  int ran = 0;
  const BlasStep same = pelab::plan_blas_kernels(env, {"SkylakeX", kDynamic, "Cooperlake"}, [&] {
    ++ran;
    return std::string();
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(same.kind, BlasStep::Continue);
  EXPECT_NE(same.note.find("this CPU supports SkylakeX, which passed"), std::string::npos) << same.note;
}

TEST(BlasKernels, NothingChangesWhenOpenBLASAlreadyHasTheBestOrTheUserChose) {
  // OpenBLAS's choice is as good as the best (same level) or the CPU has nothing better.
  for (const BlasFacts& f : {BlasFacts{"SkylakeX", kDynamic, "Cooperlake"},
                             BlasFacts{"Zen", kDynamic, "Haswell"}, BlasFacts{"Prescott", kDynamic, ""}}) {
    const BlasStep s = pelab::plan_blas_kernels({}, f, no_self_test);
    EXPECT_EQ(s.kind, BlasStep::Continue) << f.corename;
    EXPECT_NE(s.note.find("is the best this CPU supports"), std::string::npos) << s.note;
  }
  // OPENBLAS_CORETYPE set by the user is kept, whatever pelab's setting and an old marker say,
  // once the kernels OpenBLAS loaded for it pass the self-test (run once; children inherit it).
  BlasEnv user;
  user.openblas_coretype = "Prescott";
  user.marker = "done|auto|SkylakeX|from a parent with other settings";
  int ran = 0;
  const BlasStep u = pelab::plan_blas_kernels(user, {"Prescott", kDynamic, "SkylakeX"}, [&] {
    ++ran;
    return std::string();
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(u.kind, BlasStep::Continue);
  EXPECT_EQ(u.note, "OPENBLAS_CORETYPE=Prescott from the environment, kept, passed pelab's numeric "
                    "self-test");
  EXPECT_EQ(u.marker, "done|auto|Prescott|" + u.note);
  EXPECT_EQ(u.warning, "");
  user.marker = u.marker;  // a child of that process
  EXPECT_EQ(pelab::plan_blas_kernels(user, {"Prescott", kDynamic, "SkylakeX"}, no_self_test).note,
            u.note);
  // keep
  BlasEnv keep;
  keep.policy = "keep";
  const BlasStep k = pelab::plan_blas_kernels(keep, {"Prescott", kDynamic, "SkylakeX"}, no_self_test);
  EXPECT_EQ(k.kind, BlasStep::Continue);
  EXPECT_EQ(k.note, "PELAB_BLAS_CORETYPE=keep, OpenBLAS's own choice, Prescott");
  // A marker of another setting does not count: PELAB_BLAS_CORETYPE changed since.
  keep.marker = "done|auto||auto: decided before";
  EXPECT_EQ(pelab::plan_blas_kernels(keep, {"Prescott", kDynamic, "SkylakeX"}, no_self_test).note,
            k.note);
  // An OpenBLAS built for one CPU cannot change kernels.
  const BlasStep fixed = pelab::plan_blas_kernels(
      {}, {"Haswell", "OpenBLAS 0.3.21 NO_AFFINITY HASWELL MAX_THREADS=64", "SkylakeX"}, no_self_test);
  EXPECT_EQ(fixed.kind, BlasStep::Continue);
  EXPECT_NE(fixed.note.find("no DYNAMIC_ARCH"), std::string::npos);
}

// Issue 51 item 15: an empty or unknown OPENBLAS_CORETYPE (or one this CPU cannot run) makes
// OpenBLAS load kernels of its own choosing without a word, and pelab reported them as "kept from
// the environment", untested. Now what was loaded is named, self-tested and warned about; kernels
// that fail the test fall back to OpenBLAS's own choice as pelab's own choices do.
TEST(BlasKernels, AUserCoretypeIsReportedAsLoadedAndSelfTested) {
  for (const std::string v : {"", "NoSuchKernels", "Cooperlake"}) {
    BlasEnv user;
    user.openblas_coretype = v;
    int ran = 0;
    const BlasStep s = pelab::plan_blas_kernels(user, {"Haswell", kDynamic, "Haswell"}, [&] {
      ++ran;
      return std::string();
    });
    EXPECT_EQ(ran, 1) << v;
    EXPECT_EQ(s.kind, BlasStep::Continue) << v;
    EXPECT_EQ(s.note, "OPENBLAS_CORETYPE='" + v + "' from the environment names no kernels it "
                      "loaded: Haswell, which passed pelab's numeric self-test");
    EXPECT_EQ(s.warning.rfind("pelab: warning: OPENBLAS_CORETYPE='" + v + "' from the environment "
                              "names no kernels this OpenBLAS (" + std::string(kDynamic) +
                              ") loaded: it loaded Haswell instead", 0),
              0u)
        << s.warning;
    EXPECT_EQ(s.marker, "done|auto|" + v + "|" + s.note);
  }
  // Kernels that fail the self-test: back to OpenBLAS's own choice (OPENBLAS_CORETYPE removed).
  BlasEnv user;
  user.openblas_coretype = "Prescott";
  const BlasStep f = pelab::plan_blas_kernels(user, {"Prescott", kDynamic, "SkylakeX"},
                                              [] { return std::string("sgemm 5x7x3: wrong"); });
  EXPECT_EQ(f.kind, BlasStep::Reexec);
  EXPECT_EQ(f.set_coretype, std::optional<std::string>(""));
  EXPECT_EQ(f.warning, "pelab: warning: OpenBLAS's Prescott kernels (OPENBLAS_CORETYPE='Prescott' "
                       "from the environment) failed pelab's numeric self-test (sgemm 5x7x3: "
                       "wrong); running OpenBLAS's own choice");
  // The re-executed process (no OPENBLAS_CORETYPE) takes the decision without another test.
  BlasEnv child;
  child.marker = f.marker;
  const BlasStep c = pelab::plan_blas_kernels(child, {"Haswell", kDynamic, "SkylakeX"}, no_self_test);
  EXPECT_EQ(c.kind, BlasStep::Continue);
  EXPECT_NE(c.note.find("failed pelab's numeric self-test"), std::string::npos) << c.note;
}

TEST(BlasKernels, NamedKernelsAreTestedAndABadNameIsOneError) {
  BlasEnv env;
  env.policy = "Haswell";
  const BlasStep s = pelab::plan_blas_kernels(env, {"Prescott", kDynamic, "SkylakeX"}, no_self_test);
  ASSERT_EQ(s.kind, BlasStep::Reexec);
  EXPECT_EQ(s.set_coretype, std::optional<std::string>("Haswell"));
  env.openblas_coretype = "Haswell";
  env.marker = s.marker;
  const BlasStep ok = pelab::plan_blas_kernels(env, {"Haswell", kDynamic, "SkylakeX"}, [] { return std::string(); });
  EXPECT_EQ(ok.kind, BlasStep::Continue);
  EXPECT_EQ(ok.note, "PELAB_BLAS_CORETYPE=Haswell (OpenBLAS chose Prescott), passed pelab's numeric self-test");
  // A name this OpenBLAS does not have (it silently loads others).
  env.policy = env.openblas_coretype = "Skylake";
  env.marker = "try|Skylake|Skylake|Prescott";
  const BlasStep bad = pelab::plan_blas_kernels(env, {"Cooperlake", kDynamic, "SkylakeX"}, no_self_test);
  EXPECT_EQ(bad.kind, BlasStep::Error);
  EXPECT_NE(bad.error.find("PELAB_BLAS_CORETYPE=Skylake: this OpenBLAS"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("did not load kernels of that name (it loaded Cooperlake): it has none, "
                           "or they need instructions this CPU lacks"),
            std::string::npos)
      << bad.error;
  // Not a name at all; and a name on an OpenBLAS built for one CPU.
  BlasEnv junk;
  junk.policy = "a;b";
  EXPECT_EQ(pelab::plan_blas_kernels(junk, {"Prescott", kDynamic, ""}, no_self_test).kind, BlasStep::Error);
  BlasEnv named;
  named.policy = "Haswell";
  EXPECT_EQ(pelab::plan_blas_kernels(named, {"Prescott", "OpenBLAS 0.3.21 PRESCOTT", ""}, no_self_test).kind,
            BlasStep::Error);
  // The name OpenBLAS chose anyway (any case): nothing to do.
  named.policy = "prescott";
  EXPECT_EQ(pelab::plan_blas_kernels(named, {"Prescott", kDynamic, ""}, no_self_test).kind,
            BlasStep::Continue);
}

// ---------------- the pelab binary, the environment forced each way ----------------

namespace {

class BlasKernelsCli : public pelab::testing::TempDirTest {
 protected:
  BlasKernelsCli() : TempDirTest("blas_kernels") {}
  // `pelab --version` with the BLAS variables removed, then `assignments` ("VAR=value ...").
  pelab::testing::CommandResult version(const std::string& assignments) {
    return pelab::testing::run_captured(
        "env -u OPENBLAS_CORETYPE -u PELAB_BLAS_CORETYPE -u PELAB_BLAS_SELECTION " + assignments +
            " " + quote(pelab::testing::pelab_binary()) + " --version",
        dir_ / "out.txt", dir_ / "err.txt");
  }
  // The kernels named by the BLAS line: "..., NAME kernels; ...".
  static std::string kernels(const std::string& out) {
    const size_t end = out.find(" kernels; ");
    if (end == std::string::npos) return "";
    const size_t start = out.rfind(' ', end - 1);
    return out.substr(start + 1, end - start - 1);
  }
};

}  // namespace

TEST_F(BlasKernelsCli, VersionReportsTheKernelsChosenForEachSetting) {
  // OpenBLAS's own choice on this CPU, and what auto makes of it.
  const auto own = version("PELAB_BLAS_CORETYPE=keep");
  ASSERT_EQ(own.rc, 0) << own.err;
  EXPECT_NE(own.out.find("\nBLAS: OpenBLAS "), std::string::npos) << own.out;
  const std::string deflt = kernels(own.out);
  ASSERT_FALSE(deflt.empty()) << own.out;
  const std::string best = pelab::best_openblas_coretype(pelab::cpu_features());
  const auto autom = version("");
  ASSERT_EQ(autom.rc, 0) << autom.err;
  EXPECT_TRUE(autom.err.empty()) << autom.err;
  const std::string chosen = kernels(autom.out);
  EXPECT_EQ(pelab::openblas_kernel_level(chosen),
            std::max(pelab::openblas_kernel_level(deflt), pelab::openblas_kernel_level(best)))
      << autom.out << "(OpenBLAS's own: " << deflt << ", CPU's best: " << best << ")";
  if (pelab::openblas_kernel_level(deflt) < pelab::openblas_kernel_level(best)) {
    EXPECT_NE(autom.out.find(best + " kernels; auto: OpenBLAS chose " + deflt +
                             ", this CPU supports " + best + ", which passed pelab's numeric self-test"),
              std::string::npos)
        << autom.out;
  }

  // The user's OPENBLAS_CORETYPE is kept, self-tested.
  const auto user = version("OPENBLAS_CORETYPE=Prescott");
  ASSERT_EQ(user.rc, 0) << user.err;
  EXPECT_NE(user.out.find("Prescott kernels; OPENBLAS_CORETYPE=Prescott from the environment, "
                          "kept, passed pelab's numeric self-test"),
            std::string::npos)
      << user.out;
  EXPECT_TRUE(user.err.empty()) << user.err;
  // An empty or unknown one: OpenBLAS loads kernels of its choosing (this 0.3.21 its build's
  // target, Haswell, not the Zen it picks for this CPU when unset); the line names what it loaded,
  // tested, and one warning says so.
  for (const std::string v : {"", "NoSuchKernels"}) {
    const auto odd = version("OPENBLAS_CORETYPE=" + v);
    ASSERT_EQ(odd.rc, 0) << odd.err;
    const std::string loaded = kernels(odd.out);
    ASSERT_FALSE(loaded.empty()) << odd.out;
    EXPECT_NE(odd.out.find(loaded + " kernels; OPENBLAS_CORETYPE='" + v + "' from the environment "
                           "names no kernels it loaded: " + loaded + ", which passed pelab's "
                           "numeric self-test"),
              std::string::npos)
        << odd.out;
    EXPECT_EQ(odd.err.rfind("pelab: warning: OPENBLAS_CORETYPE='" + v + "' from the environment "
                            "names no kernels this OpenBLAS",
                            0),
              0u)
        << odd.err;
    EXPECT_EQ(odd.err.find('\n'), odd.err.size() - 1) << odd.err;
  }

  // A name: OpenBLAS is loaded with those kernels and they pass the self-test (two SSE-only ones,
  // so that one differs from OpenBLAS's own choice on any x86-64 CPU).
  const std::string name = deflt == "Prescott" ? "Core2" : "Prescott";
  const auto named = version("PELAB_BLAS_CORETYPE=" + name);
  ASSERT_EQ(named.rc, 0) << named.err;
  EXPECT_NE(named.out.find(name + " kernels; PELAB_BLAS_CORETYPE=" + name + " (OpenBLAS chose " +
                           deflt + "), passed pelab's numeric self-test"),
            std::string::npos)
      << named.out;

  // A name this OpenBLAS does not have: one error line, exit status 2.
  const auto bad = version("PELAB_BLAS_CORETYPE=NoSuchKernels");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err.rfind("pelab: error: PELAB_BLAS_CORETYPE=NoSuchKernels: this OpenBLAS", 0), 0u)
      << bad.err;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << bad.err;
}
