// The layering of the source tree (README.md, "Layout"), checked on the #include lines of every
// source file: framework/ <- models/, data/ <- train/ (the training core) <- train/study/ <-
// train/app/. A file may include files of its own layer and of the layers below it, never above:
// the core never includes train/study/ or train/app/, the studies never include train/app/,
// models/ and data/ never include train/, the framework never includes models/, data/ or train/.
// And nothing outside models/pe/ names a positional-encoding scheme: no string literal there equals
// a registered scheme's name or key, no include reaches a scheme's own header. And the documents
// of the add-a-scheme checklist follow the registry: README.md lists exactly the registered
// schemes, docs/model.md §7 has one section per scheme (SchemeChecklist.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "models/pe/pe.h"
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

// The engine's shared code (framework/src and framework/src/ops, outside cpu/ and cuda/: the ops,
// the backend registry, the argument checks both backends call) includes no backend's header: a
// backend is reached through the Backend interface only (issue 53: backend_checks.cpp included
// cpu/cpu_backend.h).
TEST(Layout, SharedEngineCodeIncludesNoBackend) {
  const fs::path src = fs::path(pelab::testing::source_dir()) / "framework" / "src";
  std::vector<std::string> found;
  int files = 0;
  for (const fs::path& dir : {src, src / "ops"}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (starts_with(line, "#include \"cpu/") || starts_with(line, "#include \"cuda/"))
          found.push_back(e.path().filename().string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  EXPECT_GT(files, 10);
  EXPECT_TRUE(found.empty()) << joined(found);
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

// ---------------------------------------------------------------------------------------------
// Nothing outside models/pe/ names a scheme (README.md, "Layout"; docs/model.md §7): code asks the
// registry (models/pe/pe.h) instead of comparing pe.scheme with a name or reading a scheme's key.

namespace {

// A string literal of a source file (its text between the quotes, escapes not decoded).
struct Literal {
  int line = 0;
  std::string text;
};

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The string literals of a C++ / CUDA source (python = false) or a Python source, comments
// skipped. C++: // and /* */ comments, "..." with escapes, raw strings R"d(...)d", character
// literals ('"' is no string) and digit separators (1'000). Python: # comments, '...', "...",
// and triple-quoted strings (any prefix; a backslash always escapes the next character).
std::vector<Literal> string_literals(const std::string& s, bool python) {
  std::vector<Literal> out;
  const size_t n = s.size();
  int line = 1;
  auto skip_to = [&](size_t from, size_t to) {  // counts the newlines in [from, to)
    for (size_t k = from; k < to && k < n; ++k) line += s[k] == '\n';
    return std::min(to, n);
  };
  size_t i = 0;
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (python ? c == '#' : s.compare(i, 2, "//") == 0) {
      i = std::min(s.find('\n', i), n);
    } else if (!python && s.compare(i, 2, "/*") == 0) {
      const size_t end = s.find("*/", i + 2);
      i = skip_to(i, end == std::string::npos ? n : end + 2);
    } else if (!python && c == '"' && i > 0 && s[i - 1] == 'R' &&
               (i < 2 || !ident_char(s[i - 2]) || std::strchr("8uUL", s[i - 2]) != nullptr)) {
      const size_t open = s.find('(', i);
      if (open == std::string::npos) break;
      const std::string close = ")" + s.substr(i + 1, open - i - 1) + "\"";
      const size_t end = s.find(close, open);
      const int at = line;
      const size_t stop = end == std::string::npos ? n : end;
      out.push_back({at, s.substr(open + 1, stop - open - 1)});
      i = skip_to(i, end == std::string::npos ? n : end + close.size());
    } else if (c == '"' || c == '\'') {
      if (!python && c == '\'' && i > 0 && std::isxdigit(static_cast<unsigned char>(s[i - 1]))) {
        ++i;  // a digit separator
        continue;
      }
      const size_t q = python && s.compare(i, 3, std::string(3, c)) == 0 ? 3 : 1;
      const std::string quote(q, c);
      size_t k = i + q;
      while (k < n && s.compare(k, q, quote) != 0 && (q == 3 || s[k] != '\n'))
        k += s[k] == '\\' ? 2 : 1;
      if (c == '"' || python) out.push_back({line, s.substr(i + q, std::min(k, n) - i - q)});
      i = skip_to(i, std::min(k + q, n));
    } else {
      ++i;
    }
  }
  return out;
}

// A place allowed to hold a scheme's name or key: `literal` in `file` when `near` is on the
// literal's line or one of the three lines before it ("" = anywhere in the file); literal "" =
// every name and key in the file. `why` says what makes the place legitimately generic or
// legitimately about one scheme.
struct AllowedName {
  const char* file;
  const char* literal;
  const char* near;
  const char* why;
};

const AllowedName kAllowedNames[] = {
    {"models/transformer.cpp", "none", "embed_scale",
     "model.embed_scale's value none (no embedding multiplier), not the scheme"},
    {"train/command_line.cpp", "none", "progress", "the --progress mode none (no progress output)"},
    {"train/study/compare_children.cpp", "none", "--progress", "the --progress mode none"},
    {"bench/bench_shaw_memory.cpp", "", "",
     "the benchmark of one scheme's relative terms by design: Shaw's memory against the seed "
     "implementation's R_k and R_v"},
    {"bench/bench_train.cpp", "max_positions", "",
     "the training bench sizes a learned table to its length (the other schemes ignore the key; "
     "bench_torch.py sets the same value)"},
    {"bench/bench_cuda.cpp", "max_positions", "",
     "the CUDA bench sizes a learned table to its length (the other schemes ignore the key)"},
    {"bench/peer_position_coupling.py", "learned", "abs_learned",
     "the name of the authors' own variant (their position_encoding_type abs_learned) in the peer "
     "script that runs their code, not pelab's pe.scheme"},
    {"tools/torch_reference.py", "", "",
     "the independent PyTorch reference: one class per scheme reading its keys, by design "
     "(Golden.* and BenchTorchSchemes.* hold it to the registry)"},
};

struct NameScan {
  std::vector<std::string> violations;  // "FILE:LINE: ..."
  std::vector<int> allowed_used;        // per entry of the allow list: the literals it let pass
  int files = 0, literals = 0;
};

// The sources outside models/pe/: framework/, models/ (but models/pe/), data/, train/
// (recursively; C++ and CUDA) and the top level of bench/ and tools/ (C++ and Python). Each
// string literal equal to a scheme name in `names`, or to a key in `keys` as `key`, `pe.key` or
// `pe.key=...`, is a violation unless `allowed` lets it pass, and so is an include of a header of
// models/pe/ other than the interface (pe.h, pe_config.h).
NameScan scan_scheme_names(const fs::path& root, const std::vector<std::string>& names,
                           const std::vector<std::string>& keys,
                           const std::vector<AllowedName>& allowed) {
  NameScan s;
  s.allowed_used.assign(allowed.size(), 0);
  std::map<std::string, std::string> named;  // literal -> what it names
  for (const auto& k : keys) named[k] = named["pe." + k] = "names pe." + k + ", a key a scheme declares";
  for (const auto& n : names) named[n] = "names pe.scheme " + n;
  std::vector<fs::path> files;
  for (const char* top : {"framework", "models", "data", "train", "bench", "tools"}) {
    std::error_code ec;
    if (!fs::is_directory(root / top, ec)) continue;
    const bool deep = std::string(top) != "bench" && std::string(top) != "tools";
    auto take = [&](const fs::directory_entry& e) {
      const std::string ext = e.path().extension().string();
      const bool cxx = ext == ".h" || ext == ".hpp" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
      if (e.is_regular_file() && (cxx || (!deep && ext == ".py"))) files.push_back(e.path());
    };
    if (deep)
      for (const auto& e : fs::recursive_directory_iterator(root / top)) take(e);
    else
      for (const auto& e : fs::directory_iterator(root / top)) take(e);
  }
  std::sort(files.begin(), files.end());
  static const std::regex include_re(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  for (const fs::path& path : files) {
    const std::string rel = path.lexically_relative(root).generic_string();
    if (starts_with(rel, "models/pe/")) continue;
    ++s.files;
    const std::string text = pelab::testing::slurp(path);
    std::vector<std::string> lines;
    {
      std::istringstream in(text);
      for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    const bool python = path.extension() == ".py";
    for (const Literal& lit : string_literals(text, python)) {
      ++s.literals;
      auto it = named.find(lit.text);
      if (it == named.end() && starts_with(lit.text, "pe.") && lit.text.find('=') != std::string::npos)
        it = named.find(lit.text.substr(0, lit.text.find('=')));  // "pe.<key>=value"
      if (it == named.end()) continue;
      const std::string& what = it->second;
      bool passed = false;
      for (size_t a = 0; a < allowed.size() && !passed; ++a) {
        const AllowedName& al = allowed[a];
        if (rel != al.file || (*al.literal != '\0' && lit.text != al.literal)) continue;
        bool near = *al.near == '\0';
        for (int l = std::max(1, lit.line - 3); l <= lit.line && !near; ++l)
          near = l <= static_cast<int>(lines.size()) &&
                 lines[l - 1].find(al.near) != std::string::npos;
        if (near) ++s.allowed_used[a], passed = true;
      }
      if (!passed)
        s.violations.push_back(rel + ":" + std::to_string(lit.line) + ": \"" + lit.text + "\" " +
                               what + " outside models/pe/ (ask the registry, models/pe/pe.h, "
                               "instead; docs/model.md §7)");
    }
    if (python) continue;
    for (size_t l = 0; l < lines.size(); ++l) {
      std::smatch m;
      if (lines[l].find("include") == std::string::npos || !std::regex_search(lines[l], m, include_re))
        continue;
      const std::string target = resolve(root, path, m[2].str(), m[1].str() == "\"");
      if (starts_with(target, "models/pe/") && target != "models/pe/pe.h" &&
          target != "models/pe/pe_config.h")
        s.violations.push_back(rel + ":" + std::to_string(l + 1) + ": includes " + target +
                               ", a scheme's own header (outside models/pe/ only pe.h and "
                               "pe_config.h, the interface)");
    }
  }
  return s;
}

std::vector<std::string> registered_key_names() {
  std::vector<std::string> out;
  for (const pelab::models::PEKey* k : pelab::models::pe_keys()) out.push_back(k->name);
  return out;
}

}  // namespace

// The tree as it is, against the registry's names and keys: no violation; every entry of the allow
// list still lets something pass (so none outlives its reason); the scan read the layers, bench/
// and tools/ and found literals (so an empty or misplaced scan cannot pass).
TEST(Layout, NoCodeOutsideModelsPeNamesAScheme) {
  const std::vector<std::string> names = pelab::models::pe_names();
  ASSERT_FALSE(names.empty());
  const std::vector<AllowedName> allowed(std::begin(kAllowedNames), std::end(kAllowedNames));
  const NameScan s =
      scan_scheme_names(pelab::testing::source_dir(), names, registered_key_names(), allowed);
  EXPECT_TRUE(s.violations.empty()) << joined(s.violations);
  for (size_t a = 0; a < allowed.size(); ++a)
    EXPECT_GT(s.allowed_used[a], 0) << "unused allow-list entry " << allowed[a].file << " \""
                                    << allowed[a].literal << "\" (" << allowed[a].why
                                    << "): remove it";
  EXPECT_GT(s.files, 100);
  EXPECT_GT(s.literals, 5000);
}

// The scanner on a small tree with names planted in each form it reports, beside look-alikes it
// must not report (comments, help text, a longer key, models/pe/ itself, a deeper bench folder,
// an allowed place): each planted one is reported with its file and line, nothing else is.
TEST_F(LayoutScan, ReportsEverySchemeNameOutsideModelsPe) {
  put("models/pe/pe.h", "#pragma once\n");
  put("models/pe/rope_math.h", "#pragma once\n");
  put("models/pe/rope.cpp", "#include \"models/pe/rope_math.h\"\nconst char* n = \"rope\";\n");
  put("framework/src/x.cpp",
      "// if (scheme == \"rope\") a comment\n"           // 1
      "/* \"t5\"\n   \"t5\" */ int a = 1'000;\n"         // 2-3
      "char q = '\"'; bool r = scheme == \"rope\";\n"     // 4: reported
      "const char* raw = R\"(rope)\";\n"                  // 5: reported
      "const char* raw2 = R\"x(a \"rope\" b)x\";\n"       // 6: not the name itself
      "const char* e = \"say \\\"t5\\\"\"; auto t = \"t5\";\n");  // 7: reported once
  put("models/m.cpp",
      "#include \"pe/pe.h\"\n#include \"pe/rope_math.h\"\n"  // 2: reported
      "if (embed_scale == \"none\") {}\n"                  // 3: allowed
      "\n\n\n\nif (x == \"none\") {}\n");                  // 8: reported (not near embed_scale)
  put("train/t.cpp",
      "double b = pe.get_float(\"rope_base\");\n"          // 1: reported
      "args.push_back(\"pe.rope_base=2\");\n"              // 2: reported
      "std::string h = \"--set pe.scheme=rope\", k = \"pe.rope_based\";\n");
  put("tools/x.py",
      "\"\"\"Docstring: rope.\"\"\"\nscheme = 'rope'  # \"t5\"\n"  // 2: reported
      "other = '''t5'''\n");                               // 3: reported
  put("bench/b.cpp", "const char* s = \"t5\";\n");         // allowed: the whole file
  put("bench/sub/deep.cpp", "const char* s = \"rope\";\n");  // not scanned
  put("data/d.h", "const char* s = \"rope_dims\";\n");
  const std::vector<AllowedName> allowed = {
      {"models/m.cpp", "none", "embed_scale", "a value of another key"},
      {"bench/b.cpp", "", "", "about one scheme"},
      {"train/t.cpp", "none", "", "an entry nothing uses"}};
  const NameScan s = scan_scheme_names(dir_, {"none", "rope", "t5"}, {"rope_base"}, allowed);
  auto reported = [&](const std::string& where, const std::string& what) {
    for (const auto& v : s.violations)
      if (starts_with(v, where + ": ") && v.find(what) != std::string::npos) return true;
    return false;
  };
  const std::vector<std::pair<std::string, std::string>> planted = {
      {"framework/src/x.cpp:4", "\"rope\" names pe.scheme rope"},
      {"framework/src/x.cpp:5", "\"rope\" names pe.scheme rope"},
      {"framework/src/x.cpp:7", "\"t5\" names pe.scheme t5"},
      {"models/m.cpp:2", "includes models/pe/rope_math.h"},
      {"models/m.cpp:8", "\"none\" names pe.scheme none"},
      {"train/t.cpp:1", "names pe.rope_base"},
      {"train/t.cpp:2", "names pe.rope_base"},
      {"tools/x.py:2", "\"rope\" names pe.scheme rope"},
      {"tools/x.py:3", "\"t5\" names pe.scheme t5"}};
  for (const auto& [where, what] : planted)
    EXPECT_TRUE(reported(where, what)) << where << ": " << what << " not reported in\n"
                                       << joined(s.violations);
  EXPECT_EQ(s.violations.size(), planted.size()) << joined(s.violations);
  EXPECT_EQ(s.allowed_used, (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(s.files, 6);  // not models/pe/, not bench/sub/
}

// ---------------------------------------------------------------------------------------------
// The add-a-scheme checklist (docs/model.md §7 "Adding a scheme", CONTRIBUTING.md): the README's
// list of schemes and docs/model.md's §7 sections are held to the registry, so a scheme cannot
// register without them and a list cannot keep a scheme that is gone.

namespace {

// The names between backticks in `text`.
std::vector<std::string> backticked(const std::string& text) {
  std::vector<std::string> out;
  for (size_t a = text.find('`'); a != std::string::npos; a = text.find('`', a)) {
    const size_t b = text.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(text.substr(a + 1, b - a - 1));
    a = b + 1;
  }
  return out;
}

// What differs between a list of scheme names (`where`) and the registry's: each registered name
// it lacks, each name it has that is not registered, each name it repeats.
std::vector<std::string> list_vs_registry(const std::string& where, std::vector<std::string> listed,
                                          const std::vector<std::string>& names) {
  std::vector<std::string> problems;
  std::sort(listed.begin(), listed.end());
  for (size_t i = 1; i < listed.size(); ++i)
    if (listed[i] == listed[i - 1] && (i < 2 || listed[i - 2] != listed[i]))
      problems.push_back(where + ": lists `" + listed[i] + "` more than once");
  for (const auto& n : names)
    if (!std::binary_search(listed.begin(), listed.end(), n))
      problems.push_back(where + ": lacks the registered scheme `" + n + "`");
  for (size_t i = 0; i < listed.size(); ++i)
    if ((i == 0 || listed[i] != listed[i - 1]) &&
        std::find(names.begin(), names.end(), listed[i]) == names.end())
      problems.push_back(where + ": lists `" + listed[i] + "`, which no scheme registers (" +
                         "registered: " + [&] {
                           std::string s;
                           for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
                           return s;
                         }() + ")");
  return problems;
}

// README.md's list of the schemes: the backticked names of the `models/` bullet of its
// introduction ("- `models/` — ... config switch: `a`, `b`, ... ."), from "config switch:" to the
// end of that sentence, against the registry's `names`.
std::vector<std::string> readme_scheme_problems(const std::string& readme,
                                                const std::vector<std::string>& names) {
  const std::string bullet = "\n- `models/`", lead = "config switch:";
  const size_t at = readme.find(bullet);
  const size_t end_of_bullet = at == std::string::npos ? at : readme.find("\n- ", at + 1);
  const std::string item = at == std::string::npos ? "" : readme.substr(at, end_of_bullet - at);
  const size_t from = item.find(lead);
  if (from == std::string::npos)
    return {"README.md: no scheme list found (the bullet \"- `models/` ...\" of the introduction, "
            "\"config switch: `name`, ...\" up to the end of the sentence)"};
  size_t to = from;
  while ((to = item.find('.', to + 1)) != std::string::npos &&
         !(to + 1 == item.size() || item[to + 1] == ' ' || item[to + 1] == '\n')) {
  }
  return list_vs_registry("README.md's scheme list (the `models/` bullet)",
                          backticked(item.substr(from + lead.size(),
                                                 to == std::string::npos ? to : to - from - lead.size())),
                          names);
}

// docs/model.md §7 against the registry: `scheme_keys` maps each registered name to the keys it
// declares (without "pe."). §7 runs from "## 7." to the next "## " heading; each scheme has one
// section "### 7.N `name` (Author et al. YEAR...) ...", N = 1, 2, ... in order; the section
// (to the next heading) names each of its keys as pe.<key>.
std::vector<std::string> model_md_scheme_problems(
    const std::string& md, const std::map<std::string, std::vector<std::string>>& scheme_keys) {
  std::vector<std::string> lines;
  {
    std::istringstream in(md);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  size_t first = lines.size();
  for (size_t i = 0; i < lines.size() && first == lines.size(); ++i)
    if (starts_with(lines[i], "## 7.")) first = i + 1;
  if (first == lines.size())
    return {"docs/model.md: no section \"## 7. ...\" (the positional-encoding schemes)"};
  std::vector<std::string> problems;
  static const std::regex heading_re(R"(^### 7\.(\d+) `([^`]+)`(.*)$)");
  static const std::regex citation_re(
      R"(\([^)]*\b[A-Z][A-Za-z-]+( et al\.| and [A-Z][A-Za-z-]+)? (19|20)\d\d\b)");
  struct Section {
    std::string name, body;
    int line = 0;
  };
  std::vector<Section> sections;
  int expect_n = 1;
  for (size_t i = first; i < lines.size() && !starts_with(lines[i], "## "); ++i) {
    const std::string where = "docs/model.md:" + std::to_string(i + 1);
    if (starts_with(lines[i], "### ")) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, heading_re)) {
        problems.push_back(where + ": a §7 heading not of the form \"### 7.N `scheme` (Author et "
                           "al. YEAR) ...\"");
        sections.push_back({"", "", static_cast<int>(i + 1)});
        continue;
      }
      if (std::stoi(m[1].str()) != expect_n)
        problems.push_back(where + ": section 7." + m[1].str() + " where 7." +
                           std::to_string(expect_n) + " comes next");
      expect_n = std::stoi(m[1].str()) + 1;
      const std::string rest = m[3].str();
      if (!std::regex_search(rest, citation_re))
        problems.push_back(where + ": the heading of `" + m[2].str() +
                           "` cites no paper (\"(Author et al. YEAR)\" after the name)");
      sections.push_back({m[2].str(), "", static_cast<int>(i + 1)});
    } else if (!sections.empty()) {
      sections.back().body += lines[i] + "\n";
    }
  }
  std::vector<std::string> listed, names;
  for (const auto& s : sections)
    if (!s.name.empty()) listed.push_back(s.name);
  for (const auto& [name, keys] : scheme_keys) names.push_back(name);
  for (auto& p : list_vs_registry("docs/model.md §7's sections", listed, names))
    problems.push_back(std::move(p));
  for (const auto& s : sections) {
    auto it = scheme_keys.find(s.name);
    if (it == scheme_keys.end()) continue;
    const std::string where = "docs/model.md:" + std::to_string(s.line) + ": section of `" + s.name + "`";
    if (s.body.find_first_not_of(" \n") == std::string::npos) problems.push_back(where + " is empty");
    for (const auto& key : it->second) {
      const std::string full = "pe." + key;
      bool named = false;
      for (size_t p = s.body.find(full); p != std::string::npos && !named; p = s.body.find(full, p + 1))
        named = (p == 0 || !ident_char(s.body[p - 1])) &&
                (p + full.size() == s.body.size() || !ident_char(s.body[p + full.size()]));
      if (!named) problems.push_back(where + " does not name its key " + full);
    }
  }
  return problems;
}

std::map<std::string, std::vector<std::string>> registered_scheme_keys() {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& n : pelab::models::pe_names()) out[n];
  for (const pelab::models::PEKey* k : pelab::models::pe_keys()) out[k->scheme].push_back(k->name);
  return out;
}

}  // namespace

TEST(SchemeChecklist, ReadmeListsExactlyTheRegisteredSchemes) {
  const std::vector<std::string> names = pelab::models::pe_names();
  ASSERT_FALSE(names.empty());
  const std::vector<std::string> problems = readme_scheme_problems(
      pelab::testing::slurp(fs::path(pelab::testing::source_dir()) / "README.md"), names);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(SchemeChecklist, ModelMdHasASectionPerRegisteredScheme) {
  const auto scheme_keys = registered_scheme_keys();
  ASSERT_FALSE(scheme_keys.empty());
  const std::vector<std::string> problems = model_md_scheme_problems(
      pelab::testing::slurp(fs::path(pelab::testing::source_dir()) / "docs" / "model.md"), scheme_keys);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

namespace {

// `got` is one problem per entry of `want`, in order, each containing that entry.
void expect_problems(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  ASSERT_EQ(got.size(), want.size()) << joined(got);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NE(got[i].find(want[i]), std::string::npos) << "problem " << i << ": " << got[i]
                                                        << "\nexpected to contain: " << want[i];
}

}  // namespace

// The two checks on small texts with each fault planted, beside text they must accept.
TEST(SchemeChecklist, ReportsEveryPlantedFault) {
  const std::vector<std::string> names = {"alpha", "beta", "gamma"};
  const std::string intro = "# x\n\n- `framework/` — an engine: `alpha` is not here.\n";
  auto readme = [&](const std::string& list) {
    return intro + "- `models/` — a toy whose encoding is a\n  config switch: " + list +
           ". Each scheme is one file (`models/pe/`).\n- `data/` — `delta`.\n";
  };
  expect_problems(readme_scheme_problems(readme("`alpha`, `beta`,\n  `gamma`"), names), {});
  // Order does not matter; the list ends with its sentence (`models/pe/` after it is no name).
  expect_problems(readme_scheme_problems(readme("`gamma`, `beta`, `alpha`"), names), {});
  expect_problems(readme_scheme_problems(readme("`alpha`, `gamma`, `gamma`, `delta`"), names),
                  {"lists `gamma` more than once", "lacks the registered scheme `beta`",
                   "lists `delta`, which no scheme registers"});
  expect_problems(readme_scheme_problems(intro + "- `models/` — no list.\n", names),
                  {"no scheme list found"});

  const std::map<std::string, std::vector<std::string>> keys = {
      {"alpha", {"alpha_k"}}, {"beta", {}}, {"gamma", {"gamma_a", "gamma_b"}}};
  const std::string head = "# m\n\n## 6. Info\n\n### 6.1 `alpha` (Old et al. 1999)\n\n## 7. Schemes\n\ntext\n\n";
  const std::string alpha = "### 7.1 `alpha` (Vaswani et al. 2017) — hook 1\n\nmath `k = pe.alpha_k`.\n\n";
  const std::string beta = "### 7.2 `beta` (NoPE; Haviv et al. 2022)\n\nno term.\n\n";
  const std::string gamma =
      "### 7.3 `gamma` (Chi et al. 2022, KERPLE) — hook 3\n\n`pe.gamma_a` and pe.gamma_b.\n\n";
  const std::string tail = "## 8. Loading\n\n### 8.1 `delta` (x)\n\npe.alpha_k\n";
  expect_problems(model_md_scheme_problems(head + alpha + beta + gamma + tail, keys), {});
  const std::string gamma_bad =  // 7.4 for 7.3, no citation, pe.gamma_bb is not pe.gamma_b
      "### 7.4 `gamma` (KERPLE) — hook 3\n\n`pe.gamma_a`, pe.gamma_bb.\n\n";
  const std::string extra = "### 7.5 `delta` (Doe et al. 2020)\n\nx\n\n### 7.6 Not a scheme\n\n";
  expect_problems(model_md_scheme_problems(head + alpha + gamma_bad + extra + tail, keys),
                  {":15: section 7.4 where 7.2 comes next", ":15: the heading of `gamma` cites no paper",
                   ":23: a §7 heading not of the form", "lacks the registered scheme `beta`",
                   "lists `delta`, which no scheme registers",
                   ":15: section of `gamma` does not name its key pe.gamma_b"});
  const std::string alpha_empty = "### 7.1 `alpha` (Vaswani et al. 2017)\n\n";
  expect_problems(model_md_scheme_problems(head + alpha_empty + beta + gamma + tail, keys),
                  {":11: section of `alpha` is empty", ":11: section of `alpha` does not name its key pe.alpha_k"});
  expect_problems(model_md_scheme_problems("# m\n\n## 8. x\n", keys), {"no section \"## 7."});
}
