// The layering of the source tree (README.md, "Layout"), checked on the #include lines of every
// source file: framework/ <- models/, data/ <- train/ (the training core) <- train/study/ <-
// train/app/. A file may include files of its own layer and of the layers below it, never above:
// the core never includes train/study/ or train/app/, the studies never include train/app/,
// models/ and data/ never include train/, the framework never includes models/, data/ or train/.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

// Layers bottom up; 0 = not layered (tests, bench, tools).
enum Layer { kNone = 0, kFramework, kModelsData, kCore, kStudy, kApp, kLayers };
const char* const kLayerName[kLayers] = {"",
                                         "framework/",
                                         "models/ and data/",
                                         "the training core (train/)",
                                         "train/study/",
                                         "train/app/"};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// `rel`: a path relative to the source root, with '/' separators.
Layer layer_of(const std::string& rel) {
  if (starts_with(rel, "framework/")) return kFramework;
  if (starts_with(rel, "models/") || starts_with(rel, "data/")) return kModelsData;
  if (starts_with(rel, "train/app/")) return kApp;
  if (starts_with(rel, "train/study/")) return kStudy;
  if (starts_with(rel, "train/")) return kCore;
  return kNone;
}

struct Scan {
  std::vector<std::string> violations;      // "FILE:LINE includes TARGET: ..."
  std::array<int, kLayers> files{};         // source files read, per layer
  std::array<std::array<int, kLayers>, kLayers> edges{};  // resolved includes, [from][to]
};

// The file an include names, relative to `root` ("" when it is not in the tree: a system header).
// Searched as the compiler does: "..." first beside the including file, then the include
// directories of the build (the root, framework/include, framework/src).
std::string resolve(const fs::path& root, const fs::path& includer, const std::string& name,
                    bool quoted) {
  std::vector<fs::path> dirs;
  if (quoted) dirs.push_back(includer.parent_path());
  for (const char* d : {"", "framework/include", "framework/src"}) dirs.push_back(root / d);
  for (const auto& d : dirs) {
    std::error_code ec;
    const fs::path p = (d / name).lexically_normal();
    if (fs::is_regular_file(p, ec)) return p.lexically_relative(root).generic_string();
  }
  return "";
}

Scan scan_layers(const fs::path& root) {
  Scan s;
  static const std::regex include_re(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  for (const char* top : {"framework", "models", "data", "train"}) {
    std::error_code ec;
    if (!fs::is_directory(root / top, ec)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".hpp" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")
        continue;
      const std::string rel = entry.path().lexically_relative(root).generic_string();
      const Layer from = layer_of(rel);
      ++s.files[from];
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        const std::string target = resolve(root, entry.path(), m[2].str(), m[1].str() == "\"");
        if (target.empty()) continue;
        const Layer to = layer_of(target);
        ++s.edges[from][to];
        if (to > from)
          s.violations.push_back(rel + ":" + std::to_string(n) + " includes " + target + ": " +
                                 kLayerName[from] + " may not include " + kLayerName[to] +
                                 " (layers bottom up: framework/, models/ and data/, train/, "
                                 "train/study/, train/app/; README.md, Layout)");
      }
    }
  }
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += x + "\n";
  return out;
}

}  // namespace

// The tree as it is: no include points up, and the scan really read every layer and resolved
// includes between neighbouring layers (so an empty or misplaced scan cannot pass).
TEST(Layout, IncludesPointDownTheLayers) {
  const Scan s = scan_layers(pelab::testing::source_dir());
  EXPECT_TRUE(s.violations.empty()) << joined(s.violations);
  for (int l = kFramework; l < kLayers; ++l) EXPECT_GT(s.files[l], 0) << kLayerName[l];
  EXPECT_GT(s.edges[kApp][kStudy], 0);
  EXPECT_GT(s.edges[kApp][kCore], 0);
  EXPECT_GT(s.edges[kStudy][kCore], 0);
  EXPECT_GT(s.edges[kCore][kModelsData], 0);
  EXPECT_GT(s.edges[kModelsData][kFramework], 0);
}

// The scanner on a small tree with one forbidden include of each kind (and allowed ones beside
// them): each forbidden one is reported with its file and line, nothing else is.
class LayoutScan : public pelab::testing::TempDirTest {
 protected:
  LayoutScan() : TempDirTest("layout") {}
  void put(const std::string& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    pelab::testing::write_file(dir_ / rel, text);
  }
};

TEST_F(LayoutScan, ReportsEveryIncludeThatPointsUp) {
  put("framework/include/pelab/tensor.h", "#pragma once\n");
  put("framework/src/ops/op_util.h", "#pragma once\n");
  put("framework/src/ops/add.cpp",
      "#include \"op_util.h\"\n#include \"pelab/tensor.h\"\n#include \"models/m.h\"\n");
  put("framework/src/cuda/k.cu", "#include \"ops/op_util.h\"\n  # include <data/d.h>\n");
  put("models/m.h", "#pragma once\n#include \"pelab/tensor.h\"\n#include \"data/d.h\"\n");
  put("models/pe/x.cpp", "#include \"../m.h\"\n#include \"train/config.h\"\n");
  put("data/d.h", "#pragma once\n#include <vector>\n");
  put("data/d.cpp", "#include \"data/d.h\"\n#include <train/config.h>\n");
  put("train/config.h", "#pragma once\n#include \"models/m.h\"\n");
  put("train/trainer.cpp",
      "#include \"train/config.h\"\n// #include \"train/app/cli.h\" (a comment, not an include)\n"
      "#include \"train/study/report.h\"\n#include \"study/report.h\"\n");
  put("train/study/report.h", "#pragma once\n#include \"train/config.h\"\n");
  put("train/study/compare.cpp", "#include \"report.h\"\n#include \"train/app/cli.h\"\n");
  put("train/app/cli.h", "#pragma once\n");
  put("train/app/cli.cpp",
      "#include \"train/app/cli.h\"\n#include \"train/study/report.h\"\n#include \"train/config.h\"\n");
  const Scan s = scan_layers(dir_);
  auto reported = [&](const std::string& where, const std::string& target) {
    for (const auto& v : s.violations)
      if (starts_with(v, where + " includes " + target + ": ")) return true;
    return false;
  };
  EXPECT_TRUE(reported("framework/src/ops/add.cpp:3", "models/m.h")) << joined(s.violations);
  EXPECT_TRUE(reported("framework/src/cuda/k.cu:2", "data/d.h")) << joined(s.violations);
  EXPECT_TRUE(reported("models/pe/x.cpp:2", "train/config.h")) << joined(s.violations);
  EXPECT_TRUE(reported("data/d.cpp:2", "train/config.h")) << joined(s.violations);
  EXPECT_TRUE(reported("train/trainer.cpp:3", "train/study/report.h")) << joined(s.violations);
  // Resolved beside the including file, as the compiler does: train/study/report.h again.
  EXPECT_TRUE(reported("train/trainer.cpp:4", "train/study/report.h")) << joined(s.violations);
  EXPECT_TRUE(reported("train/study/compare.cpp:2", "train/app/cli.h")) << joined(s.violations);
  EXPECT_EQ(s.violations.size(), 7u) << joined(s.violations);
  EXPECT_NE(s.violations.front().find("may not include"), std::string::npos);
}

// The attention hooks of a positional encoding (models/pe/pe.h: transform_qk, the score and value
// terms, the relative tables) are called by one function of the model, the attention forward in
// models/attention.cpp, for full and KV-cache decoding alike; the rest of models/ outside the
// schemes never calls them (the KV-cache path once did, a second copy of the forward).
TEST(Layout, AttentionHooksAreCalledFromTheAttentionForwardOnly) {
  const fs::path root = pelab::testing::source_dir();
  static const std::regex hook_re(
      R"((\.|->)(transform_qk|keyed_score_term|score_term|value_term|relative_tables)\s*\()");
  std::vector<std::string> callers;
  int in_attention = 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "models")) {
    const std::string rel = fs::relative(e.path(), root).generic_string();
    if (!e.is_regular_file() || rel.rfind("models/pe/", 0) == 0) continue;
    if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
    std::ifstream in(e.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const size_t comment = line.find("//");
      if (!std::regex_search(comment == std::string::npos ? line : line.substr(0, comment), hook_re))
        continue;
      if (rel == "models/attention.cpp")
        ++in_attention;
      else
        callers.push_back(rel + ":" + std::to_string(n));
    }
  }
  EXPECT_TRUE(callers.empty()) << joined(callers);
  EXPECT_GE(in_attention, 4);  // transform_qk, relative_tables, keyed_score_term, value_term
}
