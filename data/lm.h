// data/lm.h - character-level language modelling: corpus loading (default: Debian's 'fortunes'),
// contiguous train/valid/test split, random training windows and non-overlapping eval windows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/vocab.h"

namespace pelab::data {

// The default corpus: the directory /usr/share/games/fortunes (Debian package 'fortunes' or
// 'fortunes-min'), or $PELAB_FORTUNES_DIR when set (a copy elsewhere: tools/gpu_check.sh's bundle
// carries one for hosts without the package); DataError if it does not exist.
std::string default_corpus_path();

// Reads a corpus. A regular file is returned as it is. A directory is read as a fortune collection:
// every regular file whose name has no extension (skips *.dat, *.u8 and dot-files) in sorted name
// order, concatenated, with the fortune separator lines ("%") removed. DataError if missing/empty.
std::string read_corpus(const std::string& path);

enum class LmSplit { Train, Valid, Test };
LmSplit parse_lm_split(const std::string& name);  // "train" | "valid" | "test"
std::string lm_split_name(LmSplit split);

// One window of length L: target[i] is the token that follows input[i] in the corpus.
struct LmWindow {
  std::vector<int64_t> input, target;
};

// A tokenised corpus. Tokens are UTF-8 characters (an invalid byte is its own token). The token
// sequence is split contiguously: train = first floor(n * train_frac) tokens, valid = the next
// floor(n * valid_frac), test = the rest.
class LmCorpus {
 public:
  // Vocabulary built from the whole text (so evaluation never sees <unk>), sorted.
  explicit LmCorpus(const std::string& text, double train_frac = 0.9, double valid_frac = 0.05);
  // With a given vocabulary (e.g. restored from a checkpoint); unknown characters become <unk>.
  LmCorpus(const std::string& text, const Vocab& vocab, double train_frac = 0.9,
           double valid_frac = 0.05);

  const Vocab& vocab() const { return vocab_; }
  const std::vector<int64_t>& tokens(LmSplit split) const;
  int64_t total_tokens() const;
  int64_t num_unknown() const { return num_unknown_; }  // characters mapped to <unk>

 private:
  void split(const std::vector<int64_t>& ids, double train_frac, double valid_frac);
  Vocab vocab_;
  std::vector<int64_t> train_, valid_, test_;
  int64_t num_unknown_ = 0;
};

// Training window k of the stream `seed`: start uniform in [0, n - L - 1]; a pure function of
// (tokens, L, seed, k). Needs n >= L + 1.
LmWindow lm_window_at(const std::vector<int64_t>& tokens, int64_t L, uint64_t seed, int64_t k);

// Infinite stream of random training windows, resumable exactly from position() (an int64 counter).
// The token vector must outlive the stream.
class LmWindowStream {
 public:
  LmWindowStream(const std::vector<int64_t>& tokens, int64_t L, uint64_t seed,
                 int64_t position = 0);
  LmWindow at(int64_t k) const { return lm_window_at(*tokens_, L_, seed_, k); }
  LmWindow next() { return at(position_++); }
  std::vector<LmWindow> next_batch(int64_t n);
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  int64_t window_length() const { return L_; }

 private:
  const std::vector<int64_t>* tokens_;
  int64_t L_;
  uint64_t seed_;
  int64_t position_ = 0;
};

// Non-overlapping evaluation windows: window i has input tokens[i*L, (i+1)*L) and targets shifted
// by one. All full windows are returned; the first token of each window is predicted without
// context. dropped_tokens = predictable tokens not covered = (n - 1) - windows.size() * L.
struct LmEvalWindows {
  std::vector<LmWindow> windows;
  int64_t dropped_tokens = 0;
};
LmEvalWindows lm_eval_windows(const std::vector<int64_t>& tokens, int64_t L);

}  // namespace pelab::data
