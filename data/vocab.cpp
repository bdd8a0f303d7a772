// data/vocab.cpp - Vocab and tokenisation.
#include "data/vocab.h"

#include <algorithm>
#include <set>

#include "data/error.h"

namespace pelab::data {

Tokenization parse_tokenization(const std::string& name) {
  if (name == "char") return Tokenization::Char;
  if (name == "space") return Tokenization::Space;
  data_fail("tokenization: unknown value '", name, "' (expected 'char' or 'space')");
}

std::string tokenization_name(Tokenization tok) {
  return tok == Tokenization::Char ? "char" : "space";
}

namespace {
// Length of the valid UTF-8 sequence starting at s[i], or 1 for an invalid byte.
size_t utf8_len(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {  // no overlong forms, no surrogates
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {  // no overlong forms, nothing above U+10FFFF
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  if (i + n > s.size()) return 1;
  if (b(i + 1) < lo || b(i + 1) > hi) return 1;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 1;
  return n;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
}  // namespace

void for_each_utf8_char(const std::string& text, const std::function<void(size_t, size_t)>& fn) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_len(text, i);
    fn(i, n);
    i += n;
  }
}

std::vector<std::string> tokenize(const std::string& text, Tokenization tok) {
  std::vector<std::string> out;
  if (tok == Tokenization::Char) {
    for_each_utf8_char(text, [&](size_t i, size_t n) { out.push_back(text.substr(i, n)); });
    return out;
  }
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

const std::vector<std::string>& Vocab::special_tokens() {
  static const std::vector<std::string> specials = {"<pad>", "<bos>", "<eos>", "<unk>", "<sep>"};
  return specials;
}

Vocab::Vocab() {
  for (const auto& s : special_tokens()) add(s);
}

Vocab::Vocab(const std::vector<std::string>& tokens) {
  const auto& sp = special_tokens();
  PELAB_DATA_CHECK(tokens.size() >= sp.size(), "vocab: token list has ", tokens.size(),
                   " entries, expected at least the ", sp.size(), " special tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i < sp.size())
      PELAB_DATA_CHECK(tokens[i] == sp[i], "vocab: token list entry ", i, " is '", tokens[i],
                       "', expected '", sp[i], "'");
    PELAB_DATA_CHECK(!contains(tokens[i]), "vocab: token list entry ", i, " ('", tokens[i],
                     "') is a duplicate");
    add(tokens[i]);
  }
}

int64_t Vocab::add(const std::string& symbol) {
  auto it = index_.find(symbol);
  if (it != index_.end()) return it->second;
  const int64_t id = size();
  tokens_.push_back(symbol);
  index_.emplace(symbol, id);
  return id;
}

int64_t Vocab::id(const std::string& symbol) const {
  auto it = index_.find(symbol);
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Vocab::symbol(int64_t id) const {
  PELAB_DATA_CHECK(id >= 0 && id < size(), "vocab: id ", id, " out of range [0, ", size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& symbols,
                                   int64_t* num_unknown) const {
  std::vector<int64_t> ids;
  ids.reserve(symbols.size());
  for (const auto& s : symbols) {
    ids.push_back(id(s));
    if (num_unknown && ids.back() == kUnk && s != special_tokens()[kUnk]) ++*num_unknown;
  }
  return ids;
}

std::vector<int64_t> Vocab::encode_text(const std::string& text, Tokenization tok,
                                        int64_t* num_unknown) const {
  return encode(tokenize(text, tok), num_unknown);
}

std::string Vocab::decode(const std::vector<int64_t>& ids, const std::string& joiner,
                          bool skip_special) const {
  std::string out;
  bool first = true;
  for (int64_t i : ids) {
    if (skip_special && is_special(i)) continue;
    if (!first) out += joiner;
    out += symbol(i);
    first = false;
  }
  return out;
}

Vocab build_vocab(const std::vector<std::string>& texts, Tokenization tok) {
  std::set<std::string> symbols;
  for (const auto& t : texts)
    for (auto& s : tokenize(t, tok)) symbols.insert(std::move(s));
  Vocab v;
  for (const auto& s : symbols) v.add(s);
  return v;
}

}  // namespace pelab::data
