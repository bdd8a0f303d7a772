// data/tasks.h - synthetic seq2seq tasks (copy, reverse, sort, duplicate, addition, count; the
// tasks of the literature in data/literature_tasks.cpp), the task registry, and ExampleStream: an
// infinite, exactly resumable stream of training examples. docs/tasks.md defines every task.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/rng.h"
#include "data/vocab.h"

namespace pelab::data {

// One input/output pair as token ids, without bos/eos/sep (the batchers add them).
// Task position IDs (task.position_ids coupled|abacus; decoder-only layout, docs/tasks.md): src_pos
// holds one ID per prompt token [bos, src..., sep] (|src| + 2), tgt_pos one per target token as
// the decoder is fed it (|tgt|; the final eos is a target only). Both empty = the default
// positions 0..L-1. A task with two-level IDs (multi_addition: digit and operand) gives the second
// level in src_pos2 / tgt_pos2, laid out as src_pos / tgt_pos; empty = one ID per token.
struct Example {
  std::vector<int64_t> src, tgt;
  std::vector<int64_t> src_pos, tgt_pos;
  std::vector<int64_t> src_pos2 = {}, tgt_pos2 = {};  // (initialized: aggregates may omit them)
  bool has_positions() const { return !src_pos.empty(); }
  bool has_second_positions() const { return !src_pos2.empty(); }
  bool operator==(const Example& o) const {
    return src == o.src && tgt == o.tgt && src_pos == o.src_pos && tgt_pos == o.tgt_pos &&
           src_pos2 == o.src_pos2 && tgt_pos2 == o.tgt_pos2;
  }
  bool operator!=(const Example& o) const { return !(*this == o); }
};

// A change of a task's data generator that altered the examples a run draws (its training
// batches, fixed training set, validation or test examples). docs/experiments.md, "Data
// revisions": a run records the revision of the data it trained on in its resolved config, and a
// comparison retrains (a merge refuses, a resume refuses) a run whose revision is not the current.
struct DataChange {
  std::string date;    // "2026-11-26"
  std::string commit;  // the commit that made it, "f995bd6"
  std::string what;    // what changed, for the line that retrains a run from before it
};

struct TaskSpec {
  std::string name = "copy";
  // Alphabet size: symbols "0".."N-1" for copy/reverse/sort/duplicate; the number base (2..10)
  // for addition; ignored by count.
  int64_t num_symbols = 10;
  // Base seed of the run. Sampling functions take their seed explicitly; derive per-split seeds
  // with derive_seed(seed, "train"), derive_seed(seed, "valid"), ...
  uint64_t seed = 0;
  // Training lengths are drawn uniformly from [train_min_len, train_max_len].
  int64_t train_min_len = 1, train_max_len = 16;
  // Task position IDs: "sequential" (none; the model's 0..L-1), "coupled" (Cho et al. 2024) or
  // "abacus" (McLeish et al. 2024); only tasks with provides_position_ids() accept the others.
  std::string position_ids = "sequential";
  // Index hints (Zhou et al. 2024): 0 = off, else the number of hint tokens h1..hN (tasks with
  // provides_index_hints() only), at most kMaxIndexHints.
  int64_t index_hints = 0;
  // Operand counts (multi_addition only; other tasks take none): training counts are drawn
  // uniformly from [train_min_operands, train_max_operands]; test_operands lists the counts of the
  // test splits (empty: the training range). The task's bounds (max_source_len, ...) cover both.
  int64_t train_min_operands = 2, train_max_operands = 2;
  std::vector<int64_t> test_operands;
};

// The most index hints a task takes: each is a vocabulary token, built whenever a config is
// checked. Ten thousand hints cover answers of ten thousand digits (the papers train on up to 20
// and test up to 100).
constexpr int64_t kMaxIndexHints = 10000;

// A synthetic task. "length" is the task's size parameter: number of input symbols (copy, reverse,
// sort, duplicate), digits per operand (addition), or n (count).
class Task {
 public:
  explicit Task(const TaskSpec& spec) : spec_(spec) {}
  virtual ~Task() = default;

  const std::string& name() const { return spec_.name; }
  const TaskSpec& spec() const { return spec_; }
  Vocab& vocab() { return vocab_; }
  const Vocab& vocab() const { return vocab_; }

  // Draws one example of the given length using rng (a length with a length_problem() throws).
  virtual Example sample(Rng& rng, int64_t length) const = 0;
  // "" when the task can generate examples of this length, else why not ("must be odd (numbers
  // and operators alternate)"); the default accepts every length >= 1.
  virtual std::string length_problem(int64_t length) const;
  // The lengths in [min_len, max_len] without a length_problem(), ascending.
  std::vector<int64_t> valid_lengths(int64_t min_len, int64_t max_len) const;
  // Largest target length for a given length (a decoding budget, eos excluded).
  virtual int64_t max_target_len(int64_t length) const = 0;
  // Largest source length for a given length.
  virtual int64_t max_source_len(int64_t length) const { return length; }

  // Example k of the stream `seed` with its length drawn uniformly from valid_lengths(min_len,
  // max_len) (every length of the range for most tasks): a pure function. DataError when the range
  // has no valid length.
  // (virtual: a task may draw more than one size from the range, e.g. each operand's digits)
  virtual Example example_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const;
  // The task length example_at(seed, k, min_len, max_len) is drawn with.
  virtual int64_t length_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const;
  // Example k of the stream `seed` drawn as example_at(seed, k, min_len, max_len) draws it,
  // conditioned on its task length being `length` (in [min_len, max_len]): the examples of a
  // one-length training batch. The default, example_at(seed, k, length, length), is exact for the
  // tasks whose length is their only size; a task that draws more than one size from the range
  // (addition_reversed: each operand's digits) overrides it.
  virtual Example example_of_length(uint64_t seed, int64_t k, int64_t length, int64_t min_len,
                                    int64_t max_len) const;
  // The changes of this task's generator that altered the examples a run of this spec draws
  // (with one-length training batches or not), oldest first; none by default. Whoever changes what
  // a task generates appends one here (never edits or removes one), and only for the runs whose
  // examples change: pelab compare retrains the runs trained before it and no other run.
  virtual std::vector<DataChange> data_changes(bool one_length_batches) const;
  // The revision of the examples a run of this spec draws: 1 + data_changes(one_length_batches).
  int data_revision(bool one_length_batches) const;
  // Examples 0..count-1 of the stream `seed` (deterministic; use a fixed length with min == max).
  std::vector<Example> make_split(uint64_t seed, int64_t count, int64_t min_len,
                                  int64_t max_len) const;
  // Ids -> readable text (symbols joined with "" when all are single characters, else " ").
  std::string render(const std::vector<int64_t>& ids) const;

  // ---- task position IDs and index hints (docs/tasks.md, "Position IDs from the task")
  // Whether the task defines coupled / abacus IDs, index hints.
  virtual bool provides_position_ids() const { return false; }
  // ID channels of an example under this spec: 2 when it has two-level IDs (Example::src_pos2),
  // 1 otherwise; the model must take that many (models/pe/pe.h, PEScheme::position_channels).
  virtual int64_t position_channels() const { return 1; }
  // Whether the task takes an operand count (TaskSpec's train/test operands).
  virtual bool takes_operand_counts() const { return false; }
  virtual bool provides_index_hints() const { return false; }
  // The largest position ID or hint index an example of this length has without an offset
  // (0 when it has neither).
  virtual int64_t max_position_id(int64_t /*length*/) const { return 0; }
  // The largest position ID (either level) or hint index of ex (0 when it has neither).
  virtual int64_t top_position(const Example& ex) const;
  // Training-time offset: adds `offset` to every ID >= 1 of ex, both levels (ID 0 marks tokens
  // without a position: bos, and abacus's non-digits) and to every index hint. DataError when a hint would
  // leave h1..hN.
  virtual void shift_positions(Example& ex, int64_t offset) const;

 protected:
  // The digits 0..B-1 of a number task in base B = num_symbols, added to the vocabulary (the
  // arithmetic tasks' first symbols); DataError unless B is in [2, 10].
  void add_digits();
  // Draws example k's length from rng (example_at and length_at); DataError on a bad k or range.
  int64_t draw_length(Rng& rng, int64_t k, int64_t min_len, int64_t max_len) const;
  TaskSpec spec_;
  Vocab vocab_;
};

using TaskFactory = std::function<std::unique_ptr<Task>(const TaskSpec&)>;

// Validates the spec (name, num_symbols, train lengths: the range must hold a length the task can
// generate) and builds the task; DataError otherwise.
std::unique_ptr<Task> make_task(const TaskSpec& spec);
// Registered task names, sorted.
std::vector<std::string> task_names();
// Adds (or replaces) a task factory; built-in tasks are registered in tasks.cpp.
void register_task(const std::string& name, TaskFactory factory);

// Infinite stream of training examples where example k is a pure function of (seed, k), so a run is
// resumed exactly by saving position() (an int64 counter) and calling set_position().
// Two sources: a task (lengths uniform in the task's training range), or a finite dataset that is
// reshuffled every epoch (epoch e's order is a pure function of (seed, e)). The task or dataset
// must outlive the stream. Not thread-safe (caches the current epoch's permutation).
class ExampleStream {
 public:
  ExampleStream(const Task& task, uint64_t seed, int64_t position = 0);
  ExampleStream(const std::vector<Example>& dataset, uint64_t seed, int64_t position = 0);

  Example at(int64_t k) const;  // example k, independent of the current position
  // Task streams only (DataError for a dataset): example k drawn at the given length instead of
  // one drawn from the task's training range, and the length of one-length batch j, drawn
  // uniformly from the task's valid training lengths; both pure functions of (seed, k / j).
  Example at_length(int64_t k, int64_t length) const;
  int64_t batch_length(int64_t j) const;
  bool from_task() const { return task_ != nullptr; }
  Example next() { return at(position_++); }
  std::vector<Example> next_batch(int64_t n);  // n examples from the current position
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  uint64_t seed() const { return seed_; }

 private:
  const Task* task_ = nullptr;
  const std::vector<Example>* dataset_ = nullptr;
  uint64_t seed_;
  int64_t position_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// Deterministic Fisher-Yates permutation of 0..n-1.
std::vector<int64_t> permutation(int64_t n, Rng& rng);

}  // namespace pelab::data
