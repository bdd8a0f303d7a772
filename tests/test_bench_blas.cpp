// The training benchmark records which BLAS each side actually loaded (issue 16 item 18):
// bench_train's "blas" record (mapped shared objects from /proc/self/maps, OpenBLAS's config,
// variant and threads) must name the very libopenblas the dynamic loader resolves for it; PyTorch's
// record (bench/bench_torch.py, bench/blas_info.py) and run_bench.py's md / csv / json.xz must carry
// the same. The PyTorch tests skip when torch cannot be imported.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using pelab::testing::quote;
using pelab::testing::run_captured;
using pelab::testing::slurp;

class BenchBlas : public pelab::testing::TempDirTest {
 protected:
  BenchBlas() : TempDirTest("bench_blas") {}

  // bench_train, built next to the pelab binary (pelab_tests depends on it).
  static std::string bench_train() {
    return (fs::path(pelab::testing::pelab_binary()).parent_path() / "bench_train").string();
  }

  pelab::testing::CommandResult run(const std::string& cmd) {
    return run_captured(cmd, dir_ / "out.txt", dir_ / "err.txt");
  }

  static bool torch_present() { return pelab::testing::python_has_module("torch"); }

  // A file the driver writes xz-compressed, unpacked ("" and a failure when xz cannot read it).
  std::string unxz(const std::string& path) {
    const auto r = run("xz -dc " + quote(path));
    EXPECT_EQ(r.rc, 0) << path << ": " << r.err;
    return r.out;
  }
};

// The string value of "key" in a flat JSON text ("" when absent or not a string).
std::string json_str(const std::string& json, const std::string& key) {
  std::smatch m;
  if (std::regex_search(json, m, std::regex("\"" + key + "\": \"([^\"]*)\""))) return m[1];
  return "";
}

// The integer value of "key" (-1 when absent).
long json_int(const std::string& json, const std::string& key) {
  std::smatch m;
  if (std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9]+)"))) return std::stol(m[1]);
  return -1;
}

// The paths of the record's "libs" list.
std::vector<std::string> json_libs(const std::string& json) {
  std::smatch m;
  std::vector<std::string> libs;
  if (!std::regex_search(json, m, std::regex("\"libs\": \\[([^\\]]*)\\]"))) return libs;
  const std::string list = m[1];
  const std::regex item("\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), item); it != std::sregex_iterator();
       ++it)
    libs.push_back((*it)[1]);
  return libs;
}

// The first recorded library whose file name contains `part` ("" when none).
std::string lib_named(const std::vector<std::string>& libs, const std::string& part) {
  for (const auto& p : libs)
    if (fs::path(p).filename().string().find(part) != std::string::npos) return p;
  return "";
}

// Checks one OpenBLAS record: a real mapped libopenblas file, OpenBLAS's own config string, a
// variant that agrees with that config, and `threads` threads (0: any positive count).
void expect_openblas_record(const std::string& rec, long threads) {
  const auto libs = json_libs(rec);
  const std::string openblas = lib_named(libs, "openblas");
  ASSERT_FALSE(openblas.empty()) << rec;
  EXPECT_TRUE(fs::is_regular_file(openblas)) << openblas;
  EXPECT_NE(openblas.find(".so"), std::string::npos) << openblas;
  const std::string config = json_str(rec, "openblas_config");
  EXPECT_EQ(config.rfind("OpenBLAS ", 0), 0u) << rec;
  const std::string variant = json_str(rec, "openblas_parallel");
  EXPECT_TRUE(variant == "serial" || variant == "pthread" || variant == "openmp") << rec;
  if (config.find("USE_OPENMP") != std::string::npos) {
    EXPECT_EQ(variant, "openmp") << rec;
  }
  if (threads > 0) {
    EXPECT_EQ(json_int(rec, "openblas_threads"), threads) << rec;
  } else {
    EXPECT_GT(json_int(rec, "openblas_threads"), 0) << rec;
  }
}

TEST_F(BenchBlas, PelabRecordNamesTheOpenBLASTheLoaderResolved) {
  const auto r = run(quote(bench_train()) + " --blas-info --threads 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_openblas_record(r.out, 1);
  EXPECT_EQ(json_int(r.out, "omp_max_threads"), 1) << r.out;
  // ldd resolves bench_train's libopenblas the way the loader does: the record must name that file.
  const auto ldd = run("ldd " + quote(bench_train()));
  ASSERT_EQ(ldd.rc, 0) << ldd.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ldd.out, m, std::regex("libopenblas[^ ]* => ([^ ]+)"))) << ldd.out;
  EXPECT_EQ(fs::canonical(std::string(m[1])),
            fs::canonical(lib_named(json_libs(r.out), "openblas")))
      << ldd.out << r.out;
}

TEST_F(BenchBlas, EveryTrainingAndSgemmLineCarriesTheRecord) {
  const auto t = run(quote(bench_train()) +
                     " --steps 1 --warmup 0 --batch 2 --len 4 --d_model 8 --heads 2 --d_ff 16"
                     " --layers 1 --vocab 8 --threads 1");
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("\"median_ms\""), std::string::npos) << t.out;
  expect_openblas_record(t.out.substr(t.out.find("\"blas\"")), 1);
  const auto s = run(quote(bench_train()) + " --sgemm 16 --threads 1");
  ASSERT_EQ(s.rc, 0) << s.err;
  ASSERT_NE(s.out.find("\"blas\""), std::string::npos) << s.out;
  expect_openblas_record(s.out.substr(s.out.find("\"blas\"")), 1);
}

// `--products` times the products of one training step alone (the ceiling of the step's share of
// the sgemm peak): exactly the products, and so the FLOPs, that bench/run_bench.py's train_flops
// counts for the same config. The FLOPs here are written out independently of both.
TEST_F(BenchBlas, ProductsModeTimesTheStepsCountedProducts) {
  const long D = 8, F = 24, layers = 2, B = 3, L = 5, V = 11, N = B * L;
  const auto r = run(quote(bench_train()) + " --products --d_model 8 --heads 2 --d_ff 24 --layers 2"
                     " --batch 3 --len 5 --vocab 11 --steps 2 --warmup 1 --threads 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  // Per linear layer forward, dX and dW; per attention site six per-head products.
  const long linears = layers * (4 + 8) + 2 * layers * 2 + 1, sites = layers * 3;
  EXPECT_EQ(json_int(r.out, "products"), 3 * linears + 6 * sites) << r.out;
  const long proj = 2 * N * D * D * layers * 12, ff = 2 * 2 * N * D * F * layers * 2,
             attn = 2 * 2 * B * L * L * D * sites, head = 2 * N * D * V;
  EXPECT_EQ(json_int(r.out, "flops"), 3 * (proj + ff + attn + head)) << r.out;
  // The four kinds (forward, dX, dW, attention) are timed apart too; their FLOPs add up.
  const std::regex kind_flops(
      "\"(forward_x_wt|dx_g_w|dw_gt_x|attention)\": \\{\"flops\": ([0-9]+)");
  long kinds = 0, kind_sum = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), kind_flops);
       it != std::sregex_iterator(); ++it, ++kinds)
    kind_sum += std::stol((*it)[2]);
  EXPECT_EQ(kinds, 4) << r.out;
  EXPECT_EQ(kind_sum, 3 * (proj + ff + attn + head)) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("\"gflops\": ([0-9.]+)"))) << r.out;
  EXPECT_GT(std::stod(m[1]), 0.0) << r.out;
  expect_openblas_record(r.out.substr(r.out.find("\"blas\"")), 2);
  const auto py = run(pelab::testing::python3() + " -c " +
                      quote("import sys; sys.path.insert(0, '" + pelab::testing::source_dir() +
                            "/bench'); from run_bench import train_flops; "
                            "print(train_flops(11, 8, 2, 24, 2, 3, 5))"));
  ASSERT_EQ(py.rc, 0) << py.err;
  EXPECT_EQ(std::stol(py.out), json_int(r.out, "flops")) << py.out;
  const auto bad = run(quote(bench_train()) + " --products --d_model 10 --heads 4");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err, "bench_train: --products needs positive sizes, d_model divisible by heads, "
                     "steps >= 1 and warmup >= 0\n");
}

TEST_F(BenchBlas, OptionWithoutValueIsOneClearError) {
  const auto r = run(quote(bench_train()) + " --threads");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "bench_train: option --threads needs a value\n");
}

TEST_F(BenchBlas, TorchRecordNamesItsMappedBLAS) {
  if (!torch_present()) GTEST_SKIP() << "torch cannot be imported by " << pelab::testing::python3();
  const auto r = run(pelab::testing::python3() + " " +
                     quote(pelab::testing::source_dir() + "/bench/bench_torch.py") +
                     " --blas-info --threads 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(json_str(r.out, "torch_version").empty()) << r.out;
  EXPECT_EQ(json_int(r.out, "torch_threads"), 1) << r.out;
  const auto libs = json_libs(r.out);
  const std::string blas = lib_named(libs, "blas");
  ASSERT_FALSE(blas.empty()) << r.out;
  EXPECT_TRUE(fs::is_regular_file(blas)) << blas;
  // torch.set_num_threads sets OpenMP's count, not OpenBLAS's own (which follows OMP_NUM_THREADS
  // at start-up): the record says what OpenBLAS reports, whatever it is.
  if (!lib_named(libs, "openblas").empty()) expect_openblas_record(r.out, 0);
}

TEST_F(BenchBlas, DriverWritesEachSidesBLASAndTheLoad) {
  if (!torch_present()) GTEST_SKIP() << "torch cannot be imported by " << pelab::testing::python3();
  const std::string out = (dir_ / "tb").string();
  // The smallest run the driver allows: one sweep point (L 4, batch 2), one step, one rep.
  const auto r = run(pelab::testing::python3() + " " +
                     quote(pelab::testing::source_dir() + "/bench/run_bench.py") + " --bin " +
                     quote(bench_train()) + " --python " + quote(pelab::testing::python3()) +
                     " --configs sweep --sweep 4 --sweep_tokens 8 --schemes none --reps 1"
                     " --steps 1 --warmup 0 --policies passive --threads 1 --out " + quote(out));
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("BLAS loaded"), std::string::npos) << r.out;
  const std::string csv = unxz(out + ".csv.xz");  // written compressed
  EXPECT_NE(csv.find("pelab_blas"), std::string::npos) << csv;
  EXPECT_NE(csv.find("debian_blas"), std::string::npos) << csv;  // the default peer
  EXPECT_NE(csv.find("load_min"), std::string::npos) << csv;
  EXPECT_NE(csv.find("products_pct_peak"), std::string::npos) << csv;  // the products' ceiling
  const std::string md = slurp(out + ".md");
  EXPECT_NE(md.find("The step's products alone"), std::string::npos) << md;
  EXPECT_NE(md.find("products alone: % peak"), std::string::npos) << md;
  EXPECT_NE(md.find("pelab: OpenBLAS "), std::string::npos) << md;
  EXPECT_NE(md.find("PyTorch debian (eager): "), std::string::npos) << md;
  EXPECT_NE(md.find("Load average"), std::string::npos) << md;
  const std::string json = unxz(out + ".json.xz");
  // Both sides' measurements carry a record naming a mapped file; the conditions the load and CPU.
  EXPECT_NE(json.find("\"impl\": \"pelab\""), std::string::npos);
  EXPECT_NE(json.find("\"impl\": \"torch\""), std::string::npos);
  EXPECT_NE(json.find("\"torch_version\""), std::string::npos);
  EXPECT_NE(json.find("\"loadavg\""), std::string::npos);
  EXPECT_NE(json.find("\"cpu_model\""), std::string::npos);
  EXPECT_NE(json.find("\"OMP_WAIT_POLICY\": \"PASSIVE\""), std::string::npos);
  std::smatch m;
  // The path ends at a space: a CUDA-enabled build appends " + cuBLAS mapped (CUDA build)".
  ASSERT_TRUE(
      std::regex_search(csv, m, std::regex("/ (/[^,\\n ]*openblas[^,\\n ]*\\.so[^,\\n ]*)")))
      << csv;
  EXPECT_TRUE(fs::is_regular_file(std::string(m[1]))) << m[1];
}

// bench/run_bench.py's peers (issue 31 item 3): a peer name it does not know, or a PyPI peer without
// the venv's python, is one error line before anything runs.
TEST_F(BenchBlas, UnknownOrVenvlessPeerIsOneClearError) {
  const std::string driver = quote(pelab::testing::source_dir() + "/bench/run_bench.py");
  const std::string base = pelab::testing::python3() + " " + driver + " --bin " +
                           quote(bench_train()) + " --out " + quote((dir_ / "tb").string());
  const auto u = run(base + " --peers debian,pytorch-nightly");
  EXPECT_NE(u.rc, 0);
  EXPECT_EQ(u.err,
            "run_bench.py: unknown peer 'pytorch-nightly' in --peers (known: debian, pypi-eager, "
            "pypi-compile)\n");
  const auto v = run(base + " --peers debian,pypi-compile");
  EXPECT_NE(v.rc, 0);
  EXPECT_EQ(v.err.find("run_bench.py: peer pypi-compile needs --venv-python"), 0u) << v.err;
  EXPECT_EQ(std::count(v.err.begin(), v.err.end(), '\n'), 1) << v.err;
  EXPECT_FALSE(fs::exists(dir_ / "tb.csv.xz"));
}

// The tiny config (the lab's own model size) runs on one thread whatever --threads says, and its
// row says so; the sgemm peak it is compared with is measured at that thread count.
TEST_F(BenchBlas, TinyConfigRunsOnOneThread) {
  if (!torch_present()) GTEST_SKIP() << "torch cannot be imported by " << pelab::testing::python3();
  const std::string out = (dir_ / "tb").string();
  const auto r = run(pelab::testing::python3() + " " +
                     quote(pelab::testing::source_dir() + "/bench/run_bench.py") + " --bin " +
                     quote(bench_train()) + " --python " + quote(pelab::testing::python3()) +
                     " --configs tiny --schemes none --reps 1 --steps 1 --warmup 0"
                     " --policies passive --threads 2 --out " + quote(out));
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  const std::string csv = unxz(out + ".csv.xz");  // written compressed
  EXPECT_EQ(csv.rfind("config,scheme,B,L,D,threads,", 0), 0u) << csv;
  EXPECT_NE(csv.find("\ntiny,none,32,8,64,1,"), std::string::npos) << csv;
  const std::string json = unxz(out + ".json.xz");
  EXPECT_NE(json.find("\"sgemm_gflops\": {\n  \"1\": ["), std::string::npos) << json;
  EXPECT_EQ(json.find("\n  \"2\": ["), std::string::npos) << json;  // no 2-thread sgemm
}

// PyPI's torch links MKL into libtorch_cpu.so (no MKL file mapped) while numpy maps its own
// OpenBLAS: the label must name torch's MKL and its kernels, not numpy's OpenBLAS as torch's BLAS.
TEST_F(BenchBlas, LinkedInMKLIsTheLabelNotAnotherModulesOpenBLAS) {
  const fs::path script = dir_ / "label.py";
  {
    std::ofstream f(script);
    f << "import sys\nsys.path.insert(0, sys.argv[1])\nimport blas_info\n"
         "print(blas_info.describe({'libs': ['/v/numpy.libs/libscipy_openblas64_-32a4b2a6.so', "
         "'/v/torch/lib/libgomp.so.1'], 'openblas_config': None, 'torch_version': '2.15.0', "
         "'torch_threads': 2, 'torch_blas_info': 'mkl', 'torch_mkl_version': '2024.2', "
         "'torch_cpu_capability': 'AVX512'}))\n";
  }
  const auto r = run(pelab::testing::python3() + " " + quote(script.string()) + " " +
                     quote(pelab::testing::source_dir() + "/bench"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "MKL 2024.2 linked into torch 2.15.0 / ATen AVX512 kernels / 2 threads (also mapped: "
            "libscipy_openblas64_-32a4b2a6.so)\n");
}

// --compile needs torch.compile (torch >= 2): under a torch without it (Debian's 1.13) it is one
// error line, not a traceback or an eager run labelled compiled.
TEST_F(BenchBlas, CompileWithoutTorchCompileIsOneError) {
  if (!torch_present()) GTEST_SKIP() << "torch cannot be imported by " << pelab::testing::python3();
  if (pelab::testing::python_has_module("torch._dynamo"))
    GTEST_SKIP() << pelab::testing::python3() << "'s torch has torch.compile";
  const auto r = run(pelab::testing::python3() + " " +
                     quote(pelab::testing::source_dir() + "/bench/bench_torch.py") +
                     " --compile --steps 1 --warmup 0 --pelab " +
                     quote(pelab::testing::pelab_binary()));
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.find("bench_torch.py: --compile needs torch >= 2 (torch.compile); this is torch "),
            0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
