// pelab — which OpenBLAS kernels a pelab process computes with. An OpenBLAS built with DYNAMIC_ARCH
// picks its kernels when it is loaded, from its own CPU table: Debian's 0.3.21 does not know recent
// Intel Xeons (family 6 model 207) and runs its generic SSE3 "Prescott" kernels there, 3-5x slower
// than the AVX-512 ones the CPU has. select_blas_kernels(), called first in every pelab program's
// main(), compares OpenBLAS's choice with what the CPU supports and, when it falls short, re-executes
// the program once with OPENBLAS_CORETYPE set to the best kernels (OpenBLAS reads it only at load);
// the new process checks those kernels with a numeric self-test before anything else runs and goes
// back to OpenBLAS's own choice, saying so, if they fail it. Override: PELAB_BLAS_CORETYPE = auto
// (the default) | keep (OpenBLAS's own choice) | a kernel name (e.g. SkylakeX); an OPENBLAS_CORETYPE
// set by the user is kept, but what OpenBLAS loaded for it is self-tested the same way (a failure
// falls back to OpenBLAS's own choice) and a value it did not load (empty, unknown, or kernels this
// CPU cannot run) is a warning naming what it loaded. docs/performance.md, "BLAS kernels".
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace pelab {

// What the CPU supports, as far as the choice of BLAS kernels goes (instruction sets the OS has
// enabled: __builtin_cpu_supports checks XCR0).
struct CpuFeatures {
  bool amd = false;
  bool avx = false, avx2 = false, fma = false;
  bool avx512 = false;       // avx512f + bw + vl + dq + cd: OpenBLAS's SkylakeX kernels
  bool avx512_bf16 = false;  // with avx512: OpenBLAS's Cooperlake kernels
};
CpuFeatures cpu_features();  // this CPU's (all false off x86-64)

// The best OpenBLAS kernels (an OPENBLAS_CORETYPE name) for a CPU with `f`, or "" when none is
// better than OpenBLAS's generic ones: Cooperlake, SkylakeX, Haswell (Zen on AMD), Sandybridge.
std::string best_openblas_coretype(const CpuFeatures& f);
// The vector level of OpenBLAS kernels by name (any case): 3 AVX-512, 2 AVX2 + FMA, 1 AVX, 0 other.
int openblas_kernel_level(const std::string& corename);

// Row-major GEMM as cblas_?gemm computes it: C = alpha op(A) op(B) + beta C.
template <class T>
using GemmFn = std::function<void(bool ta, bool tb, int M, int N, int K, T alpha, const T* A,
                                  int lda, const T* B, int ldb, T beta, T* C, int ldc)>;
// Checks sgemm and dgemm against a naive float64 reference on small and medium shapes, every
// transpose, alpha and a non-zero beta. Returns "" when every entry is within rounding, else what
// differed first ("sgemm 97x83x71 A^T B: C[3,5] = ... expected ..."). The defaults are OpenBLAS's.
std::string blas_self_test(const GemmFn<float>& sgemm, const GemmFn<double>& dgemm);
std::string blas_self_test();

// The decision of select_blas_kernels as a function of the environment and of what this process's
// OpenBLAS and CPU are, so that every path can be tested without the CPU that takes it.
struct BlasEnv {
  std::optional<std::string> openblas_coretype;  // OPENBLAS_CORETYPE
  std::optional<std::string> policy;             // PELAB_BLAS_CORETYPE
  std::optional<std::string> marker;             // PELAB_BLAS_SELECTION (pelab's own, internal)
};
struct BlasFacts {
  std::string corename;  // openblas_get_corename() of the loaded library
  std::string config;    // openblas_get_config()
  std::string best;      // best_openblas_coretype(cpu_features())
};
struct BlasStep {
  enum Kind { Continue, Reexec, Error } kind = Continue;
  std::optional<std::string> set_coretype;  // Reexec: the OPENBLAS_CORETYPE to set ("" = unset)
  std::string marker;                       // PELAB_BLAS_SELECTION to set (Continue and Reexec)
  std::string note;                         // Continue: how the kernels were chosen
  // Printed (stderr) before a Reexec that falls back, or on Continue with an OPENBLAS_CORETYPE that
  // OpenBLAS did not load.
  std::string warning;
  std::string error;                        // Error: one line, without "pelab: error: "
};
// `self_test` runs only on kernels to be checked: in the re-executed process, or in this one on
// what OpenBLAS loaded for a user's OPENBLAS_CORETYPE (once: children inherit the decision).
BlasStep plan_blas_kernels(const BlasEnv& env, const BlasFacts& facts,
                           const std::function<std::string()>& self_test);

// Call first in main(): may re-execute the program (/proc/self/exe with `argv`), and exits with one
// error line on a bad PELAB_BLAS_CORETYPE. Children started later inherit the choice.
void select_blas_kernels(char** argv);

// "OpenBLAS 0.3.21 (openmp build), Cooperlake kernels; auto: ...": for --version, train.log, the
// benches and the reports.
std::string blas_kernels_summary();
// openblas_get_corename() of the loaded library, as OpenBLAS spells it in its config ("Prescott").
std::string blas_corename();

}  // namespace pelab
