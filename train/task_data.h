// pelab — the data side of a run, built from the `task:` section: the vocabulary, the training
// batches (a pure function of the batch index, so a run resumes exactly), the validation set and the
// test sets, for the three task kinds (synthetic tasks, user TSV files, character-level LM).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/lm.h"
#include "data/tasks.h"
#include "data/vocab.h"
#include "train/config.h"

namespace pelab {

// One evaluation split: examples (seq2seq / decoder formulations) or windows (lm).
struct EvalSet {
  std::string name;    // "valid", "len_24" (synthetic test length), file stem (textfile), "ctx_128"
  int64_t length = 0;  // the task length (synthetic) or window length (lm); 0 for textfile
  // Synthetic valid split (lengths drawn from the training range): each example's task length,
  // for per-length scores (train.stop_when.per_length); empty elsewhere.
  std::vector<int64_t> example_lengths;
  std::vector<data::Example> examples;
  std::vector<data::LmWindow> windows;
  int64_t dropped_tokens = 0;  // lm: predictable tokens not covered by full windows
  int64_t unknown_symbols = 0;  // textfile: symbols scored as <unk> (task.unknown_symbols)
  bool empty() const { return examples.empty() && windows.empty(); }
};

class TaskData {
 public:
  // Builds everything from cfg.task (reads files / the corpus). Text files: an example longer than
  // task.max_example_len positions, or (with task.unknown_symbols error) a symbol missing from the
  // vocabulary, is an error naming file:line. With vocab_tokens (e.g. from a
  // checkpoint) the vocabulary is restored instead of built; for synthetic tasks it must equal the
  // task's own vocabulary. Throws pelab::Error / data::DataError.
  explicit TaskData(const Config& cfg, const std::vector<std::string>& vocab_tokens = {});
  TaskData(const TaskData&) = delete;
  TaskData& operator=(const TaskData&) = delete;

  const data::Vocab& vocab() const { return *vocab_; }
  bool is_lm() const { return lm_; }
  bool is_decoder() const { return decoder_; }  // decoder-only formulation (lm included)

  // Micro-batch j of training (a pure function of j and the seeds).
  std::vector<data::Example> train_batch(int64_t j) const;
  std::vector<data::LmWindow> lm_train_batch(int64_t j) const;

  const EvalSet& valid() const { return valid_; }
  const std::vector<EvalSet>& tests() const { return tests_; }
  int64_t num_train_examples() const { return static_cast<int64_t>(train_.size()); }
  // textfile with a checkpoint's vocabulary and task.unknown_symbols map_to_unk: symbols of
  // task.train_file mapped to <unk> (0 when the vocabulary is built from that file).
  int64_t train_unknown_symbols() const { return train_unknown_symbols_; }

  // Longest training sequence in tokens (what the model's positions cover in training): seq2seq
  // max(|src|, |tgt|) + 1, decoder |src| + |tgt| + 2, lm task.lm_train_len.
  int64_t train_positions() const { return train_positions_; }
  // The largest position ID a training sequence gives the model where the task supplies the IDs
  // (task.position_ids coupled|abacus): the largest at task.train_max_len, or task.max_position_id
  // when training offsets reach further. -1 when the task supplies none (a sequence of n tokens
  // then asks for positions 0..n-1, n <= train_positions()).
  int64_t largest_train_position_id() const { return largest_train_position_id_; }
  // textfile: "FILE:LINE" of the (first) training example with train_positions(); else "".
  const std::string& longest_train_example() const { return longest_train_example_; }

  // Ids -> text as the task writes it.
  std::string render(const std::vector<int64_t>& ids) const;
  // One line of user input -> source ids (synthetic: symbols, one character each when every symbol
  // is one character (spaces ignored), else space-separated; textfile: task.tokenization; lm:
  // characters). Unknown symbols are an error naming them.
  std::vector<int64_t> encode_line(const std::string& line) const;

 private:
  // The constructor's parts, by task: lm, textfile, synthetic; then the training stream.
  void load_corpus(const std::vector<std::string>& vocab_tokens);
  void load_text_files(const std::vector<std::string>& vocab_tokens,
                       std::vector<int64_t>& train_lines);
  std::vector<data::Example> load_text_file(const std::string& path, int64_t* unknown,
                                            bool checkpoint_vocab,
                                            std::vector<int64_t>* lines = nullptr) const;
  void make_task_splits(const std::vector<std::string>& vocab_tokens);
  void open_training_stream(const std::vector<int64_t>& train_lines);

  const Config cfg_;
  bool lm_ = false, decoder_ = false;
  std::unique_ptr<data::Task> task_;
  std::unique_ptr<data::Vocab> vocab_;
  std::unique_ptr<data::LmCorpus> corpus_;
  std::vector<data::Example> train_;  // fixed training set (textfile, train_examples > 0)
  std::unique_ptr<data::BatchSampler> sampler_;
  uint64_t lm_seed_ = 0;
  EvalSet valid_;
  std::vector<EvalSet> tests_;
  int64_t train_positions_ = 0;
  int64_t largest_train_position_id_ = -1;
  int64_t train_unknown_symbols_ = 0;
  std::string longest_train_example_;
  data::Tokenization tok_ = data::Tokenization::Char;
  bool single_char_symbols_ = true;
};

// Seed of the training batch stream: depends on task.seed and train.seed.
uint64_t train_stream_seed(const Config& cfg);

// ---- data revisions (docs/experiments.md, "Data revisions")
// The revision of the examples a run of cfg draws now: its task's data_revision with or without
// one-length batches (data::Task::data_changes); 1 for textfile and lm. Throws as make_task.
int data_revision(const Config& cfg);
// Sets cfg.task.data_revision to data_revision(cfg): the config of a run that trains now, which
// its resolved config (config.yaml, checkpoints) records.
void record_data_revision(Config& cfg);
// "" when the run whose resolved config is `run` trained on the examples such a run draws now (its
// recorded task.data_revision, 1 when it has none, is data_revision(run)); else why not, one line:
// "trained on data revision 1 of task addition_reversed (one-length batches), from before
// 2026-11-26 (f995bd6): <what changed>; this pelab draws revision 2".
std::string data_revision_change(const Config& run);

}  // namespace pelab
