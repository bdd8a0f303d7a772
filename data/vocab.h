// data/vocab.h - token vocabulary with fixed special tokens, plus char/space tokenisation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pelab::data {

// How text is split into symbols: Char = one UTF-8 character per symbol (an invalid byte is its own
// symbol), Space = whitespace-separated words.
enum class Tokenization { Char, Space };
Tokenization parse_tokenization(const std::string& name);  // "char" | "space", else DataError
std::string tokenization_name(Tokenization tok);

// Calls fn(start, length) for each UTF-8 character of `text` (invalid bytes: length 1).
void for_each_utf8_char(const std::string& text, const std::function<void(size_t, size_t)>& fn);
// Splits text into symbols.
std::vector<std::string> tokenize(const std::string& text, Tokenization tok);

class Vocab {
 public:
  // Special ids, always the first five entries.
  static constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3, kSep = 4, kNumSpecial = 5;
  // "<pad>", "<bos>", "<eos>", "<unk>", "<sep>".
  static const std::vector<std::string>& special_tokens();
  static bool is_special(int64_t id) { return id >= 0 && id < kNumSpecial; }

  Vocab();  // specials only
  // Restores a vocabulary saved with tokens(); checks the specials and that entries are unique.
  explicit Vocab(const std::vector<std::string>& tokens);

  // Adds a symbol (no-op if present); returns its id.
  int64_t add(const std::string& symbol);
  bool contains(const std::string& symbol) const { return index_.count(symbol) != 0; }
  int64_t id(const std::string& symbol) const;  // kUnk if unknown
  const std::string& symbol(int64_t id) const;  // DataError if out of range
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // All entries in id order (the checkpoint format).
  const std::vector<std::string>& tokens() const { return tokens_; }

  // Symbols -> ids (unknown -> kUnk; counts them into *num_unknown when given).
  std::vector<int64_t> encode(const std::vector<std::string>& symbols,
                              int64_t* num_unknown = nullptr) const;
  std::vector<int64_t> encode_text(const std::string& text, Tokenization tok,
                                   int64_t* num_unknown = nullptr) const;
  // Ids -> text joined with `joiner`; special tokens are skipped when skip_special.
  std::string decode(const std::vector<int64_t>& ids, const std::string& joiner = "",
                     bool skip_special = true) const;

  bool operator==(const Vocab& o) const { return tokens_ == o.tokens_; }
  bool operator!=(const Vocab& o) const { return !(*this == o); }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> index_;
};

// Specials + the distinct symbols of all texts, in byte-wise sorted order (independent of text
// order).
Vocab build_vocab(const std::vector<std::string>& texts, Tokenization tok);

}  // namespace pelab::data
