// data/lm.cpp - character-level language-modelling data.
#include "data/lm.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "data/error.h"
#include "data/rng.h"
#include "pelab/strings.h"

namespace pelab::data {

namespace fs = std::filesystem;

std::string default_corpus_path() {
  const char* env = std::getenv("PELAB_FORTUNES_DIR");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string dir = from_env ? env : "/usr/share/games/fortunes";
  std::error_code ec;
  PELAB_DATA_CHECK(fs::is_directory(dir, ec), "lm corpus: default corpus '", dir, "' not found (",
                   from_env ? "PELAB_FORTUNES_DIR names no directory"
                            : "install the Debian package 'fortunes', or give a corpus path",
                   ")");
  return dir;
}

namespace {
std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  PELAB_DATA_CHECK(in.good(), "lm corpus: cannot open file '", p.string(), "'");
  std::ostringstream os;
  os << in.rdbuf();
  PELAB_DATA_CHECK(!in.bad(), "lm corpus: read error in '", p.string(), "'");
  std::string text = os.str();
  strip_utf8_bom(text);  // a byte-order mark is not a character of the corpus
  return text;
}

// Drops the lines that are exactly "%" (fortune separators); keeps everything else byte for byte.
std::string strip_fortune_separators(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    const size_t end = j == std::string::npos ? text.size() : j + 1;
    std::string line = text.substr(i, end - i);
    std::string bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r')) bare.pop_back();
    if (bare != "%") out += line;
    i = end;
  }
  return out;
}
}  // namespace

std::string read_corpus(const std::string& path) {
  std::error_code ec;
  std::string text;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    fs::directory_iterator it(path, ec);
    PELAB_DATA_CHECK(!ec, "lm corpus: cannot list directory '", path, "': ", ec.message());
    for (const auto& e : it) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.' || e.path().has_extension()) continue;
      if (fs::is_regular_file(e.path(), ec)) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string t = strip_fortune_separators(read_file(f));
      if (!t.empty() && t.back() != '\n') t += '\n';
      text += t;
    }
  } else {
    PELAB_DATA_CHECK(fs::is_regular_file(path, ec), "lm corpus: '", path,
                     "' does not exist or is not a regular file or directory");
    text = read_file(path);
  }
  PELAB_DATA_CHECK(!text.empty(), "lm corpus: '", path, "' contains no text");
  return text;
}

LmSplit parse_lm_split(const std::string& name) {
  if (name == "train") return LmSplit::Train;
  if (name == "valid") return LmSplit::Valid;
  if (name == "test") return LmSplit::Test;
  data_fail("lm: unknown split '", name, "' (expected train, valid or test)");
}

std::string lm_split_name(LmSplit split) {
  switch (split) {
    case LmSplit::Train:
      return "train";
    case LmSplit::Valid:
      return "valid";
    case LmSplit::Test:
      return "test";
  }
  return "?";
}

namespace {
std::vector<int64_t> encode_chars(const std::string& text, const Vocab& vocab,
                                  int64_t* num_unknown) {
  int64_t byte_id[256];  // fast path for single-byte characters
  for (int b = 0; b < 256; ++b) byte_id[b] = vocab.id(std::string(1, static_cast<char>(b)));
  std::unordered_map<std::string, int64_t> cache;  // multi-byte characters
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for_each_utf8_char(text, [&](size_t i, size_t n) {
    int64_t id;
    if (n == 1) {
      id = byte_id[static_cast<unsigned char>(text[i])];
    } else {
      std::string s = text.substr(i, n);
      auto it = cache.find(s);
      if (it == cache.end()) it = cache.emplace(s, vocab.id(s)).first;
      id = it->second;
    }
    ids.push_back(id);
    if (id == Vocab::kUnk) ++*num_unknown;
  });
  return ids;
}

Vocab corpus_vocab(const std::string& text) {
  std::set<std::string> symbols;
  bool seen[256] = {};
  for_each_utf8_char(text, [&](size_t i, size_t n) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (n == 1 && seen[b]) return;
    if (n == 1) seen[b] = true;
    symbols.insert(text.substr(i, n));
  });
  Vocab v;
  for (const auto& s : symbols) v.add(s);
  return v;
}
}  // namespace

LmCorpus::LmCorpus(const std::string& text, double train_frac, double valid_frac)
    : LmCorpus(text, corpus_vocab(text), train_frac, valid_frac) {}

LmCorpus::LmCorpus(const std::string& text, const Vocab& vocab, double train_frac,
                   double valid_frac)
    : vocab_(vocab) {
  PELAB_DATA_CHECK(
      train_frac > 0 && train_frac <= 1 && valid_frac >= 0 && train_frac + valid_frac <= 1 + 1e-12,
      "lm corpus: invalid split fractions train = ", train_frac, ", valid = ", valid_frac,
      " (need 0 < train, 0 <= valid, train + valid <= 1)");
  split(encode_chars(text, vocab_, &num_unknown_), train_frac, valid_frac);
}

void LmCorpus::split(const std::vector<int64_t>& ids, double train_frac, double valid_frac) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t n_train = std::min<int64_t>(n, static_cast<int64_t>(n * train_frac));
  const int64_t n_valid = std::min<int64_t>(n - n_train, static_cast<int64_t>(n * valid_frac));
  train_.assign(ids.begin(), ids.begin() + n_train);
  valid_.assign(ids.begin() + n_train, ids.begin() + n_train + n_valid);
  test_.assign(ids.begin() + n_train + n_valid, ids.end());
}

const std::vector<int64_t>& LmCorpus::tokens(LmSplit split) const {
  return split == LmSplit::Train ? train_ : split == LmSplit::Valid ? valid_ : test_;
}

int64_t LmCorpus::total_tokens() const {
  return static_cast<int64_t>(train_.size() + valid_.size() + test_.size());
}

LmWindow lm_window_at(const std::vector<int64_t>& tokens, int64_t L, uint64_t seed, int64_t k) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  PELAB_DATA_CHECK(L >= 1, "lm: window length ", L, " must be >= 1");
  PELAB_DATA_CHECK(n >= L + 1, "lm: window length ", L, " needs at least ", L + 1,
                   " tokens, the split has ", n);
  PELAB_DATA_CHECK(k >= 0, "lm: window index ", k, " must be >= 0");
  Rng rng = Rng::for_index(seed, static_cast<uint64_t>(k));
  const auto start = tokens.begin() + rng.uniform_int(0, n - L - 1);
  return LmWindow{std::vector<int64_t>(start, start + L),
                  std::vector<int64_t>(start + 1, start + L + 1)};
}

LmWindowStream::LmWindowStream(const std::vector<int64_t>& tokens, int64_t L, uint64_t seed,
                               int64_t position)
    : tokens_(&tokens), L_(L), seed_(seed) {
  PELAB_DATA_CHECK(L >= 1 && static_cast<int64_t>(tokens.size()) >= L + 1, "lm: window length ", L,
                   " needs at least ", L + 1, " tokens, the split has ", tokens.size());
  set_position(position);
}

void LmWindowStream::set_position(int64_t position) {
  PELAB_DATA_CHECK(position >= 0, "lm: stream position ", position, " must be >= 0");
  position_ = position;
}

std::vector<LmWindow> LmWindowStream::next_batch(int64_t n) {
  PELAB_DATA_CHECK(n >= 0, "lm: batch size ", n, " must be >= 0");
  std::vector<LmWindow> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

LmEvalWindows lm_eval_windows(const std::vector<int64_t>& tokens, int64_t L) {
  PELAB_DATA_CHECK(L >= 1, "lm: eval window length ", L, " must be >= 1");
  const int64_t predictable = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - 1);
  const int64_t count = predictable / L;
  LmEvalWindows out;
  out.windows.reserve(static_cast<size_t>(count));
  for (int64_t w = 0; w < count; ++w) {
    const auto start = tokens.begin() + w * L;
    out.windows.push_back(LmWindow{std::vector<int64_t>(start, start + L),
                                   std::vector<int64_t>(start + 1, start + L + 1)});
  }
  out.dropped_tokens = predictable - count * L;
  return out;
}

}  // namespace pelab::data
