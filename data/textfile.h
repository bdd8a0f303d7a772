// data/textfile.h - user seq2seq data: text files of "source<TAB>target" lines.
//
// Format: one example per line, exactly one TAB between source and target; a trailing '\r' is
// dropped; completely empty lines are skipped. The source must not be empty (after tokenisation);
// the target may be. Bytes are taken as they are (invalid UTF-8 bytes become single symbols).
// Errors (missing file, no TAB, several TABs, empty source, a reserved token such as "<pad>" with
// space tokenisation, a file without examples) throw DataError naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tasks.h"
#include "data/vocab.h"

namespace pelab::data {

// One parsed line (text, not yet tokenised).
struct TextPair {
  std::string src, tgt;
  int64_t line = 0;  // 1-based line number in the file
};

// Parses a file into pairs (format above).
std::vector<TextPair> read_pairs(const std::string& path);

// Specials + every symbol of the source and target sides of the given files, sorted.
Vocab build_vocab_from_files(const std::vector<std::string>& paths, Tokenization tok);

// What load_examples saw besides the examples.
struct LoadReport {
  int64_t num_unknown = 0;         // symbols not in the vocabulary (encoded as <unk>)
  int64_t first_unknown_line = 0;  // line of the first of them; 0 = none
  std::string first_unknown;       // that symbol
  std::vector<int64_t> lines;      // the line of each example
};

// Loads a file with a fixed vocabulary; unknown symbols become <unk> (the caller decides whether
// that is allowed) and are reported in *report when given.
std::vector<Example> load_examples(const std::string& path, const Vocab& vocab, Tokenization tok,
                                   LoadReport* report = nullptr);

// A text-file dataset: the vocabulary is built from the training file(s), which are loaded as the
// training set; other splits (validation, one file per test length, ...) are loaded with load().
class TextData {
 public:
  TextData(const std::vector<std::string>& train_files, Tokenization tok);

  const Vocab& vocab() const { return vocab_; }
  Tokenization tokenization() const { return tok_; }
  const std::vector<Example>& train() const { return train_; }
  std::vector<Example> load(const std::string& path, int64_t* num_unknown = nullptr) const {
    LoadReport r;
    std::vector<Example> ex = load_examples(path, vocab_, tok_, &r);
    if (num_unknown) *num_unknown += r.num_unknown;
    return ex;
  }
  // Ids -> text ("" joiner for char tokenisation, " " for space).
  std::string render(const std::vector<int64_t>& ids) const {
    return vocab_.decode(ids, tok_ == Tokenization::Char ? "" : " ");
  }

 private:
  Tokenization tok_;
  Vocab vocab_;
  std::vector<Example> train_;
};

}  // namespace pelab::data
