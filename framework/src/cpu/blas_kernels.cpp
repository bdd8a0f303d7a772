// pelab — choosing OpenBLAS's kernels against what the CPU supports (pelab/blas_kernels.h).
#include "pelab/blas_kernels.h"

#include <cblas.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <vector>

#include "pelab/strings.h"

extern char** environ;

namespace pelab {

namespace {

const char* const kPolicyVar = "PELAB_BLAS_CORETYPE";
const char* const kCoretypeVar = "OPENBLAS_CORETYPE";
const char* const kMarkerVar = "PELAB_BLAS_SELECTION";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

bool same_name(const std::string& a, const std::string& b) { return lower(a) == lower(b); }

// The marker's fields: "try|POLICY|NAME|DEFAULT" (this process re-executed itself to test NAME;
// DEFAULT is OpenBLAS's own choice) or "done|POLICY|CORETYPE|NOTE" (decided; CORETYPE is the
// OPENBLAS_CORETYPE it goes with, "" for none). '|' never occurs in a valid policy or kernel name.
std::vector<std::string> fields(const std::string& marker, size_t n) {
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() + 1 < n) {
    const size_t bar = marker.find('|', at);
    if (bar == std::string::npos) return {};
    out.push_back(marker.substr(at, bar - at));
    at = bar + 1;
  }
  out.push_back(marker.substr(at));
  return out;
}

std::string done_marker(const std::string& policy, const std::string& coretype,
                        const std::string& note) {
  return "done|" + policy + "|" + coretype + "|" + note;
}

// OpenBLAS's own choice, for the notes: "OpenBLAS's own choice, Prescott".
std::string own_choice(const std::string& corename) {
  return "OpenBLAS's own choice, " + corename;
}

const char* const kKernelExamples = "SkylakeX, Haswell, Zen, Sandybridge or Prescott";

// The kernels auto tries when an OpenBLAS lacks `name` (an older one without Cooperlake, say): the
// next one down that the same CPU runs, "" below Sandybridge.
std::string next_lower_coretype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "cooperlake") return "SkylakeX";
  if (n == "skylakex" || n == "zen") return "Haswell";
  if (n == "haswell") return "Sandybridge";
  return "";
}

// ---------------- self-test ----------------

uint64_t lcg(uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return s >> 11;
}

template <class T>
std::string check_gemm(const GemmFn<T>& gemm, const char* name, int M, int N, int K, bool ta,
                       bool tb) {
  uint64_t s = 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(M * 131 + N * 17 + K + ta * 2 + tb);
  auto fill = [&](std::vector<T>& v) {
    for (T& x : v) x = static_cast<T>(static_cast<double>(lcg(s) % 2001) / 1000.0 - 1.0);
  };
  // Stored row-major: op(A) is M x K, so A is K x M when transposed; likewise B.
  const int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  std::vector<T> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N),
      C(static_cast<size_t>(M) * N);
  fill(A);
  fill(B);
  fill(C);
  const std::vector<T> C0 = C;
  const T alpha = static_cast<T>(0.75), beta = static_cast<T>(-0.5);
  gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const double eps = std::is_same<T, float>::value ? 1.2e-7 : 2.3e-16;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const double b = tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        ref += a * b;
        mag += std::fabs(a * b);
      }
      const double c0 = C0[static_cast<size_t>(i) * ldc + j];
      ref = 0.75 * ref - 0.5 * c0;
      mag = 0.75 * mag + 0.5 * std::fabs(c0);
      const double got = C[static_cast<size_t>(i) * ldc + j];
      // A dot product of K terms rounds to within K eps of the sum of magnitudes; 4x margin.
      if (!(std::fabs(got - ref) <= 4.0 * (K + 2) * eps * mag + 1e-30)) {
        std::ostringstream os;
        os.precision(9);
        os << name << " " << M << "x" << N << "x" << K << " " << (ta ? "A^T" : "A") << " "
           << (tb ? "B^T" : "B") << ": C[" << i << "," << j << "] = " << got << ", expected "
           << ref;
        return os.str();
      }
    }
  return "";
}

template <class T>
std::string check_all(const GemmFn<T>& gemm, const char* name) {
  // A small product (OpenBLAS's small-matrix path on some kernels) and one past the register
  // blocks in every dimension, with odd edges; every transpose of both.
  const int shapes[][3] = {{5, 7, 3}, {97, 83, 71}};
  for (const auto& sh : shapes)
    for (int t = 0; t < 4; ++t) {
      const std::string r = check_gemm<T>(gemm, name, sh[0], sh[1], sh[2], t & 1, t & 2);
      if (!r.empty()) return r;
    }
  return "";
}

// ---------------- this process ----------------

std::string& process_note() {
  static std::string note;
  return note;
}

// The crash guard of the self-test: a kernel that faults (an instruction the CPU lacks, a bad
// access) re-executes the program on OpenBLAS's own choice, from the signal handler (execve is
// async-signal-safe); everything it needs is prepared before the test.
struct CrashGuard {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  char** argv = nullptr;
  std::string message;
};
CrashGuard* g_guard = nullptr;

void on_crash(int sig) {
  if (g_guard != nullptr) {
    const ssize_t w = ::write(2, g_guard->message.data(), g_guard->message.size());
    (void)w;
    sigset_t all;
    sigemptyset(&all);
    sigaddset(&all, sig);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    ::signal(sig, SIG_DFL);
    ::execve("/proc/self/exe", g_guard->argv, g_guard->envp.data());
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

// ---------------- CPU ----------------

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.amd = __builtin_cpu_is("amd");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512cd");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

std::string best_openblas_coretype(const CpuFeatures& f) {
  if (f.avx512) return f.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (f.avx2 && f.fma) return f.amd ? "Zen" : "Haswell";
  if (f.avx) return "Sandybridge";
  return "";
}

int openblas_kernel_level(const std::string& corename) {
  const std::string n = lower(corename);
  if (n == "skylakex" || n == "cooperlake" || n == "sapphirerapids") return 3;
  if (n == "haswell" || n == "zen" || n == "excavator" || n == "steamroller") return 2;
  if (n == "sandybridge" || n == "bulldozer" || n == "piledriver") return 1;
  return 0;
}

// ---------------- self-test ----------------

std::string blas_self_test(const GemmFn<float>& sgemm, const GemmFn<double>& dgemm) {
  std::string r = check_all<float>(sgemm, "sgemm");
  return r.empty() ? check_all<double>(dgemm, "dgemm") : r;
}

std::string blas_self_test() {
  const auto tr = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  return blas_self_test(
      [&](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
        cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      },
      [&](bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
        cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      });
}

// ---------------- the decision ----------------

BlasStep plan_blas_kernels(const BlasEnv& e, const BlasFacts& facts,
                           const std::function<std::string()>& self_test) {
  BlasStep step;
  const std::string policy = e.policy && !e.policy->empty() ? *e.policy : "auto";
  const bool named = policy != "auto" && policy != "keep";
  if (named && (policy.size() > 32 ||
                policy.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                         "0123456789_") != std::string::npos)) {
    step.kind = BlasStep::Error;
    step.error = std::string(kPolicyVar) + "='" + policy +
                 "': expected auto, keep or an OpenBLAS kernel name such as " + kKernelExamples;
    return step;
  }
  const std::string coretype = e.openblas_coretype.value_or("");
  auto done = [&](const std::string& note) {
    step.kind = BlasStep::Continue;
    step.note = note;
    step.marker = done_marker(policy, coretype, note);
    return step;
  };
  // deflt "": OpenBLAS's own choice is not known yet (the user's OPENBLAS_CORETYPE was loaded).
  auto fall_back = [&](const std::string& name, const std::string& deflt, const std::string& why) {
    step.kind = BlasStep::Reexec;
    step.set_coretype = "";
    const std::string note = name + " kernels " + why + "; running " +
                             (deflt.empty() ? std::string("OpenBLAS's own choice") : own_choice(deflt));
    step.marker = done_marker(policy, "", note);
    step.warning = "pelab: warning: OpenBLAS's " + note;
    return step;
  };

  // A decision this process (or its parent) made for the same settings.
  if (e.marker) {
    const std::vector<std::string> d = fields(*e.marker, 4);
    if (d.size() == 4 && d[0] == "done" && d[1] == policy && d[2] == coretype) return done(d[3]);
    if (d.size() == 4 && d[0] == "try" && d[1] == policy && d[2] == coretype && !coretype.empty()) {
      const std::string& deflt = d[3];
      if (named && !same_name(facts.corename, d[2])) {
        step.kind = BlasStep::Error;
        // OpenBLAS loads others without a word both for a name it lacks and for kernels this CPU
        // cannot run (0.3.21 on an AMD Zen 3 asked for Cooperlake loads Haswell)
        step.error = std::string(kPolicyVar) + "=" + d[2] + ": this OpenBLAS (" + facts.config +
                     ") did not load kernels of that name (it loaded " + facts.corename +
                     "): it has none, or they need instructions this CPU lacks; use auto, keep or "
                     "one it has that this CPU runs, e.g. " + kKernelExamples;
        return step;
      }
      if (openblas_kernel_level(facts.corename) < openblas_kernel_level(d[2])) {
        // auto, and this OpenBLAS does not have them: the next ones down, while they beat its own.
        const std::string next = next_lower_coretype(d[2]);
        if (!next.empty() && openblas_kernel_level(next) > openblas_kernel_level(deflt)) {
          step.kind = BlasStep::Reexec;
          step.set_coretype = next;
          step.marker = "try|" + policy + "|" + next + "|" + deflt;
          return step;
        }
        return fall_back(d[2], deflt, "are not in this OpenBLAS (it loaded " + facts.corename + ")");
      }
      // What OpenBLAS loaded for the name (the same kernels, or others of their level) is tested.
      const std::string& name = facts.corename;
      const std::string failed = self_test();
      if (!failed.empty()) return fall_back(name, deflt, "failed pelab's numeric self-test (" + failed + ")");
      return done(named ? std::string(kPolicyVar) + "=" + name + " (OpenBLAS chose " + deflt +
                              "), passed pelab's numeric self-test"
                        : "auto: OpenBLAS chose " + deflt + ", this CPU supports " + name +
                              ", which passed pelab's numeric self-test");
    }
  }
  // A fresh decision.
  if (e.openblas_coretype) {
    // The user's choice, kept, but tested like pelab's own: OpenBLAS loads what it likes for an
    // empty or unknown name, or one this CPU cannot run, without a word; say what it loaded.
    const std::string set = std::string(kCoretypeVar) + "='" + coretype + "' from the environment";
    const bool loaded = !coretype.empty() && same_name(facts.corename, coretype);
    const std::string failed = self_test();
    if (!failed.empty())
      return fall_back(facts.corename, "",
                       "(" + set + ") failed pelab's numeric self-test (" + failed + ")");
    if (loaded)
      return done(std::string(kCoretypeVar) + "=" + coretype +
                  " from the environment, kept, passed pelab's numeric self-test");
    step.warning = "pelab: warning: " + set + " names no kernels this OpenBLAS (" + facts.config +
                   ") loaded: it loaded " + facts.corename +
                   " instead; unset it, or name kernels it has and this CPU runs, e.g. " +
                   kKernelExamples;
    return done(set + " names no kernels it loaded: " + facts.corename +
                ", which passed pelab's numeric self-test");
  }
  if (policy == "keep") return done(std::string(kPolicyVar) + "=keep, " + own_choice(facts.corename));
  if (facts.config.find("DYNAMIC_ARCH") == std::string::npos) {
    if (named) {
      step.kind = BlasStep::Error;
      step.error = std::string(kPolicyVar) + "=" + policy + ": this OpenBLAS (" + facts.config +
                   ") is built for one CPU type (no DYNAMIC_ARCH) and cannot change kernels; "
                   "unset it or use keep";
      return step;
    }
    return done("this OpenBLAS is built for one CPU type (no DYNAMIC_ARCH): " +
                own_choice(facts.corename));
  }
  std::string target = policy;
  if (!named) {
    if (facts.best.empty() || openblas_kernel_level(facts.corename) >= openblas_kernel_level(facts.best))
      return done("auto: " + own_choice(facts.corename) + ", is the best this CPU supports");
    target = facts.best;
  } else if (same_name(facts.corename, policy)) {
    return done(std::string(kPolicyVar) + "=" + policy + ", " + own_choice(facts.corename));
  }
  step.kind = BlasStep::Reexec;
  step.set_coretype = target;
  step.marker = "try|" + policy + "|" + target + "|" + facts.corename;
  return step;
}

// ---------------- this process ----------------

std::string blas_corename() { return openblas_get_corename(); }

void select_blas_kernels(char** argv) {
  const BlasEnv e{env(kCoretypeVar), env(kPolicyVar), env(kMarkerVar)};
  const BlasFacts facts{blas_corename(), openblas_get_config(),
                        best_openblas_coretype(cpu_features())};
  CrashGuard guard;
  const auto guarded_test = [&]() {
    // Prepared as a fall-back would be: OPENBLAS_CORETYPE removed, the marker saying why.
    // The kernels under test: those a re-execution tried (the marker's NAME, OpenBLAS's own being
    // DEFAULT), or what OpenBLAS loaded for the user's OPENBLAS_CORETYPE.
    const std::vector<std::string> d = fields(e.marker.value_or(""), 4);
    const bool tried = d.size() == 4 && d[0] == "try";
    const std::string policy = e.policy && !e.policy->empty() ? *e.policy : "auto";
    const std::string note = (tried ? d[2] : facts.corename) +
                             " kernels crashed in pelab's numeric self-test; running " +
                             (tried ? own_choice(d[3]) : std::string("OpenBLAS's own choice"));
    for (char** p = environ; *p != nullptr; ++p) {
      const std::string kv = *p;
      if (kv.rfind(std::string(kCoretypeVar) + "=", 0) == 0 ||
          kv.rfind(std::string(kMarkerVar) + "=", 0) == 0)
        continue;
      guard.env_strings.push_back(kv);
    }
    guard.env_strings.push_back(std::string(kMarkerVar) + "=" + done_marker(policy, "", note));
    for (auto& s : guard.env_strings) guard.envp.push_back(s.data());
    guard.envp.push_back(nullptr);
    guard.argv = argv;
    guard.message = "pelab: warning: OpenBLAS's " + note + "\n";
    g_guard = &guard;
    struct sigaction sa {}, old[4];
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    const int sigs[4] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
    for (int i = 0; i < 4; ++i) sigaction(sigs[i], &sa, &old[i]);
    const std::string r = blas_self_test();
    for (int i = 0; i < 4; ++i) sigaction(sigs[i], &old[i], nullptr);
    g_guard = nullptr;
    return r;
  };
  const BlasStep step = plan_blas_kernels(e, facts, guarded_test);
  if (step.kind == BlasStep::Error) {
    std::fprintf(stderr, "pelab: error: %s\n", step.error.c_str());
    std::exit(2);
  }
  if (step.kind == BlasStep::Continue) {
    if (!step.warning.empty()) std::fprintf(stderr, "%s\n", step.warning.c_str());
    ::setenv(kMarkerVar, step.marker.c_str(), 1);
    process_note() = step.note;
    return;
  }
  // Re-execute with the new OPENBLAS_CORETYPE (or none).
  const bool falling_back = step.set_coretype && step.set_coretype->empty();
  if (step.set_coretype && !step.set_coretype->empty())
    ::setenv(kCoretypeVar, step.set_coretype->c_str(), 1);
  else
    ::unsetenv(kCoretypeVar);
  ::setenv(kMarkerVar, step.marker.c_str(), 1);
  if (!step.warning.empty()) std::fprintf(stderr, "%s\n", step.warning.c_str());
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv);
  const std::string why = std::strerror(errno);
  if (falling_back) {  // still on the kernels that failed: nothing may run on them
    std::fprintf(stderr,
                 "pelab: error: cannot re-execute /proc/self/exe (%s) to leave OpenBLAS's failed "
                 "kernels; set %s=keep\n",
                 why.c_str(), kPolicyVar);
    std::exit(1);
  }
  // Still on OpenBLAS's own choice, untouched: say so and go on.
  ::unsetenv(kCoretypeVar);
  const std::string policy = e.policy && !e.policy->empty() ? *e.policy : "auto";
  process_note() = "could not re-execute /proc/self/exe (" + why + ") to change kernels: " +
                   own_choice(facts.corename);
  ::setenv(kMarkerVar, done_marker(policy, "", process_note()).c_str(), 1);
}

std::string blas_kernels_summary() {
  const std::string config = openblas_get_config();
  std::istringstream words(config);
  std::string name, version;
  words >> name >> version;
  const int par = openblas_get_parallel();
  const char* variant = par == 0 ? "serial" : par == 1 ? "pthread" : par == 2 ? "openmp" : "unknown";
  std::string note = process_note();
  if (note.empty()) note = "kernels not checked against the CPU: select_blas_kernels() was not called";
  return name + " " + version + " (" + variant + " build), " + blas_corename() + " kernels; " + note;
}

}  // namespace pelab
