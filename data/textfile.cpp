// data/textfile.cpp - parsing of "source<TAB>target" files.
#include "data/textfile.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "data/error.h"
#include "pelab/strings.h"

namespace pelab::data {

std::vector<TextPair> read_pairs(const std::string& path) {
  std::error_code ec;
  PELAB_DATA_CHECK(std::filesystem::is_regular_file(path, ec), "text data: file '", path,
                   "' does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  PELAB_DATA_CHECK(in.good(), "text data: cannot open file '", path, "'");
  std::vector<TextPair> pairs;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1) strip_utf8_bom(line);  // not a symbol of the first source
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    PELAB_DATA_CHECK(tab != std::string::npos, path, ":", lineno,
                     ": missing TAB between source and target");
    PELAB_DATA_CHECK(line.find('\t', tab + 1) == std::string::npos, path, ":", lineno,
                     ": more than one TAB (expected 'source<TAB>target')");
    pairs.push_back(TextPair{line.substr(0, tab), line.substr(tab + 1), lineno});
  }
  PELAB_DATA_CHECK(!in.bad(), "text data: read error in '", path, "'");
  PELAB_DATA_CHECK(!pairs.empty(), path, ": no examples in file");
  return pairs;
}

namespace {
// Tokenises one side of a pair, checking for reserved names.
std::vector<std::string> side_tokens(const std::string& path, const TextPair& p, bool source,
                                     Tokenization tok) {
  auto symbols = tokenize(source ? p.src : p.tgt, tok);
  if (source) PELAB_DATA_CHECK(!symbols.empty(), path, ":", p.line, ": empty source");
  for (const auto& s : symbols)
    for (const auto& sp : Vocab::special_tokens())
      PELAB_DATA_CHECK(s != sp, path, ":", p.line, ": token '", s,
                       "' is reserved for the special token of that name");
  return symbols;
}
}  // namespace

Vocab build_vocab_from_files(const std::vector<std::string>& paths, Tokenization tok) {
  PELAB_DATA_CHECK(!paths.empty(), "text data: no training files given");
  std::set<std::string> symbols;
  for (const auto& path : paths)
    for (const auto& p : read_pairs(path))
      for (bool source : {true, false})
        for (auto& s : side_tokens(path, p, source, tok)) symbols.insert(std::move(s));
  Vocab v;
  for (const auto& s : symbols) v.add(s);
  return v;
}

std::vector<Example> load_examples(const std::string& path, const Vocab& vocab, Tokenization tok,
                                   LoadReport* report) {
  std::vector<Example> out;
  LoadReport r;
  for (const auto& p : read_pairs(path)) {
    Example ex;
    for (bool source : {true, false}) {
      const std::vector<std::string> symbols = side_tokens(path, p, source, tok);
      if (r.num_unknown == 0)
        for (const auto& s : symbols)
          if (!vocab.contains(s)) {
            r.first_unknown_line = p.line;
            r.first_unknown = s;
            break;
          }
      (source ? ex.src : ex.tgt) = vocab.encode(symbols, &r.num_unknown);
    }
    out.push_back(std::move(ex));
    r.lines.push_back(p.line);
  }
  if (report) *report = std::move(r);
  return out;
}

TextData::TextData(const std::vector<std::string>& train_files, Tokenization tok)
    : tok_(tok), vocab_(build_vocab_from_files(train_files, tok)) {
  for (const auto& f : train_files) {
    auto ex = load_examples(f, vocab_, tok_);
    train_.insert(train_.end(), ex.begin(), ex.end());
  }
}

}  // namespace pelab::data
