// tests/test_task_positions.cpp - position IDs from the task (issue 30): the arithmetic tasks in
// the papers' formats (addition_reversed, multiplication), coupled / abacus IDs, index hints,
// training-time offsets, their batching and config rules (docs/tasks.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/error.h"
#include "data/rng.h"
#include "data/tasks.h"
#include "data/vocab.h"
#include "run_test_util.h"
#include "test_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/trainer.h"
#include "train/task_data.h"

using namespace pelab::data;

namespace {

TaskSpec arith(const std::string& name, const std::string& ids, int64_t hints = 0,
               int64_t min_len = 1, int64_t max_len = 5) {
  TaskSpec s;
  s.name = name;
  s.num_symbols = 10;
  s.train_min_len = min_len;
  s.train_max_len = max_len;
  s.position_ids = ids;
  s.index_hints = hints;
  return s;
}

// Digit values of a run of digit tokens.
std::vector<int64_t> digits(const std::vector<int64_t>& toks, size_t from, size_t to) {
  std::vector<int64_t> d;
  for (size_t i = from; i < to; ++i) d.push_back(toks[i] - Vocab::kNumSpecial);
  return d;
}

int64_t value(const std::vector<int64_t>& msb_first) {
  int64_t v = 0;
  for (int64_t d : msb_first) v = 10 * v + d;
  return v;
}

// The first example of stream `seed` over [lo, hi] whose operands have lengths la and lb
// (addition_reversed writes them zero-padded, so the lengths are read from the leading zeros).
Example find_pair(const Task& t, int64_t lo, int64_t hi, int64_t la, int64_t lb) {
  for (int64_t k = 0; k < 10000; ++k) {
    Example ex = t.example_at(7, k, lo, hi);
    const size_t n = (ex.src.size() - 1) / 2;
    auto len = [&](size_t from) {
      size_t z = 0;
      while (z + 1 < n && ex.src[from + z] == Vocab::kNumSpecial) ++z;
      return static_cast<int64_t>(n - z);
    };
    if (len(0) == la && len(n + 1) == lb && ex.src[0] != Vocab::kNumSpecial &&
        ex.src[n + 1 + (n - static_cast<size_t>(lb))] != Vocab::kNumSpecial)
      return ex;
  }
  ADD_FAILURE() << "no example with operand lengths " << la << ", " << lb;
  return {};
}

// A decoder-only addition_reversed run over coupled IDs read by a learned table, one layer, one
// thread, evaluated at the end only; `sets` add the lengths, sizes and steps.
pelab::Config coupled_learned_run(const std::filesystem::path& dir, const std::string& name,
                                  const std::vector<std::string>& sets) {
  std::vector<std::string> base = {"task.name=addition_reversed", "task.formulation=decoder",
                                   "task.position_ids=coupled", "model.arch=decoder",
                                   "model.decoder_layers=1", "pe.scheme=learned",
                                   "train.threads=1", "train.eval_every=0"};
  base.insert(base.end(), sets.begin(), sets.end());
  return pelab::testing::tiny_run_config(base, dir, name, {});
}

}  // namespace

// Cho et al.'s format: operands most significant digit first, zero-padded to the longer one's
// width n; '+'; the sum zero-padded to n + 1 digits and reversed. Coupled IDs: a digit of
// significance i gets n + 1 - i in both operands and the answer, '+' and sep n + 2, bos 0.
TEST(TaskPositions, AdditionReversedFormatAndCoupledIds) {
  auto t = make_task(arith("addition_reversed", "coupled"));
  EXPECT_TRUE(t->provides_position_ids());
  const int64_t plus = t->vocab().id("+");
  const Example ex = find_pair(*t, 2, 3, 3, 2);  // a has 3 digits, b 2 (written 0 b1 b0)
  ASSERT_EQ(ex.src.size(), 7u);
  EXPECT_EQ(ex.src[3], plus);
  EXPECT_EQ(ex.src[4], Vocab::kNumSpecial);  // b's padding zero
  const int64_t a = value(digits(ex.src, 0, 3)), b = value(digits(ex.src, 4, 7));
  EXPECT_GE(a, 100);
  EXPECT_GE(b, 10);
  EXPECT_LT(b, 100);
  // The answer: 4 digits, least significant first.
  ASSERT_EQ(ex.tgt.size(), 4u);
  std::vector<int64_t> sum = digits(ex.tgt, 0, 4);
  std::reverse(sum.begin(), sum.end());
  EXPECT_EQ(value(sum), a + b);
  EXPECT_EQ(ex.src_pos, (std::vector<int64_t>{0, 2, 3, 4, 5, 2, 3, 4, 5}));
  EXPECT_EQ(ex.tgt_pos, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(t->max_position_id(3), 5);
  EXPECT_EQ(t->top_position(ex), 5);
  // At one length (the test sets) both operands have exactly that many digits.
  for (int64_t k = 0; k < 50; ++k) {
    const Example e = t->example_at(3, k, 6, 6);
    ASSERT_EQ(e.src.size(), 13u);
    EXPECT_NE(e.src[0], Vocab::kNumSpecial);
    EXPECT_NE(e.src[7], Vocab::kNumSpecial);
    EXPECT_EQ(t->length_at(3, k, 6, 6), 6);
  }
  // Drawn from a range, each operand's length is drawn independently: both orders occur, and the
  // task length is the longer one's.
  bool a_longer = false, b_longer = false;
  for (int64_t k = 0; k < 200; ++k) {
    const Example e = t->example_at(5, k, 1, 5);
    const int64_t n = static_cast<int64_t>(e.src.size() - 1) / 2;
    EXPECT_EQ(t->length_at(5, k, 1, 5), n);
    a_longer |= e.src[static_cast<size_t>(n) + 1] == Vocab::kNumSpecial && n > 1;
    b_longer |= e.src[0] == Vocab::kNumSpecial && n > 1;
  }
  EXPECT_TRUE(a_longer && b_longer);
}

TEST(TaskPositions, AdditionIsCorrectAtEveryLength) {
  auto t = make_task(arith("addition_reversed", "sequential"));
  for (int64_t k = 0; k < 300; ++k) {
    const Example e = t->example_at(11, k, 1, 9);
    EXPECT_TRUE(e.src_pos.empty() && e.tgt_pos.empty());  // sequential: no IDs
    const size_t n = (e.src.size() - 1) / 2;
    ASSERT_EQ(e.tgt.size(), n + 1);
    std::vector<int64_t> sum = digits(e.tgt, 0, n + 1);
    std::reverse(sum.begin(), sum.end());
    EXPECT_EQ(value(sum), value(digits(e.src, 0, n)) + value(digits(e.src, n + 1, 2 * n + 1)));
  }
}

// Abacus (McLeish et al.): each digit's significance within its own number + 1; '+', sep, bos 0.
TEST(TaskPositions, AbacusIds) {
  auto t = make_task(arith("addition_reversed", "abacus"));
  const Example ex = find_pair(*t, 2, 3, 3, 2);
  EXPECT_EQ(ex.src_pos, (std::vector<int64_t>{0, 3, 2, 1, 0, 3, 2, 1, 0}));
  EXPECT_EQ(ex.tgt_pos, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(t->max_position_id(3), 4);
}

// Index hints (Zhou et al.): hint h_{W-i} before every digit of significance i (W = answer width).
TEST(TaskPositions, IndexHints) {
  auto t = make_task(arith("addition_reversed", "sequential", 6));
  const int64_t h1 = t->vocab().id("h1"), plus = t->vocab().id("+");
  EXPECT_EQ(t->vocab().id("h6"), h1 + 5);
  const Example ex = t->example_at(2, 0, 3, 3);  // n = 3, W = 4
  ASSERT_EQ(ex.src.size(), 13u);
  ASSERT_EQ(ex.tgt.size(), 8u);
  const std::vector<int64_t> src_hints = {ex.src[0], ex.src[2], ex.src[4], ex.src[6],
                                          ex.src[7], ex.src[9], ex.src[11]};
  EXPECT_EQ(src_hints, (std::vector<int64_t>{h1 + 1, h1 + 2, h1 + 3, plus, h1 + 1, h1 + 2,
                                             h1 + 3}));
  const std::vector<int64_t> tgt_hints = {ex.tgt[0], ex.tgt[2], ex.tgt[4], ex.tgt[6]};
  EXPECT_EQ(tgt_hints, (std::vector<int64_t>{h1 + 3, h1 + 2, h1 + 1, h1}));
  EXPECT_TRUE(ex.src_pos.empty());
  EXPECT_EQ(t->top_position(ex), 4);
  EXPECT_EQ(t->max_position_id(3), 4);
  // Offsets move the hints (and would move IDs) and stop at h6.
  Example shifted = ex;
  t->shift_positions(shifted, 2);
  EXPECT_EQ(shifted.tgt[0], h1 + 5);
  EXPECT_EQ(shifted.tgt[1], ex.tgt[1]);  // digits stay
  EXPECT_EQ(t->top_position(shifted), 6);
  Example too_far = ex;
  EXPECT_THROW(t->shift_positions(too_far, 3), DataError);
  // A length whose answer needs more hints than there are is not generated.
  EXPECT_FALSE(t->length_problem(6).empty());
  EXPECT_THROW(t->example_at(1, 0, 6, 6), DataError);
}

// One-length training batches (randomized positions train on them) draw each example as the
// training distribution does, given its task length: at length n of the range 1..5 the operand
// lengths (la, lb) are the 2n - 1 pairs with max(la, lb) = n, equally likely (each operand's length
// is uniform and independent). The fault: until 2026-11-26 both operands had n digits, so such
// runs never trained on the zero-padded shorter operand that validation holds.
TEST(TaskPositions, OneLengthBatchesKeepTheTrainingOperandLengths) {
  auto t = make_task(arith("addition_reversed", "sequential"));
  const ExampleStream stream(*t, 11);
  for (int64_t n : {1, 3, 5}) {
    std::map<std::pair<int64_t, int64_t>, int> pairs;
    const int draws = 900 * static_cast<int>(2 * n - 1);
    for (int k = 0; k < draws; ++k) {
      const Example ex = stream.at_length(k, n);
      ASSERT_EQ(static_cast<int64_t>(ex.src.size()), 2 * n + 1) << "task length " << n;
      auto len = [&](size_t from) {  // digits of the operand at from (zero-padded to n)
        int64_t z = 0;
        while (z + 1 < n && ex.src[from + static_cast<size_t>(z)] == Vocab::kNumSpecial) ++z;
        return n - z;
      };
      ++pairs[{len(0), len(static_cast<size_t>(n) + 1)}];
    }
    EXPECT_EQ(static_cast<int64_t>(pairs.size()), 2 * n - 1) << "task length " << n;
    for (const auto& [p, count] : pairs) {
      EXPECT_EQ(std::max(p.first, p.second), n);
      EXPECT_NEAR(count, 900, 130) << "operand lengths " << p.first << ", " << p.second;
    }
  }
  // The answer is the sum whatever the operands' widths.
  const Example ex = stream.at_length(3, 5);
  EXPECT_EQ(value(digits(ex.src, 0, 5)) + value(digits(ex.src, 6, 11)),
            value([&] {
              std::vector<int64_t> d = digits(ex.tgt, 0, 6);
              std::reverse(d.begin(), d.end());
              return d;
            }()));
  EXPECT_THROW(stream.at_length(0, 6), DataError);  // outside the training range
}

// Offsets shift every ID >= 1; 0 (bos, abacus's non-digits) stays.
TEST(TaskPositions, OffsetsShiftIdsAboveZero) {
  auto t = make_task(arith("addition_reversed", "abacus"));
  Example ex = find_pair(*t, 2, 3, 3, 2);
  t->shift_positions(ex, 10);
  EXPECT_EQ(ex.src_pos, (std::vector<int64_t>{0, 13, 12, 11, 0, 13, 12, 11, 0}));
  EXPECT_EQ(ex.tgt_pos, (std::vector<int64_t>{11, 12, 13, 14}));
}

// N x 2 multiplication (Cho et al.): a (N digits) '*' b (2 digits, zero-padded), the product
// zero-padded to N + 2 digits and reversed; coupled IDs as for addition with W = N + 2.
TEST(TaskPositions, MultiplicationFormatAndIds) {
  auto t = make_task(arith("multiplication", "coupled"));
  const int64_t star = t->vocab().id("*");
  for (int64_t k = 0; k < 200; ++k) {
    const Example e = t->example_at(9, k, 1, 6);
    const size_t n = e.src.size() - 3;
    ASSERT_EQ(e.src[n], star);
    ASSERT_EQ(e.tgt.size(), n + 2);
    std::vector<int64_t> prod = digits(e.tgt, 0, n + 2);
    std::reverse(prod.begin(), prod.end());
    EXPECT_EQ(value(prod), value(digits(e.src, 0, n)) * value(digits(e.src, n + 1, n + 3)));
  }
  const Example e = t->example_at(9, 0, 3, 3);  // W = 5
  EXPECT_EQ(e.src_pos, (std::vector<int64_t>{0, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(e.tgt_pos, (std::vector<int64_t>{5, 4, 3, 2, 1}));
}

// The exact layout of one N x 2 example, 123 * 45 = 5535, token for token and ID for ID, as
// Cho et al.'s N x M coupled dataset (NxMMultiplicationDatasetWithCoupledPositions, M = 2) writes
// it: the first operand unpadded, the second zero-padded to 2 digits, the product zero-padded to
// N + 2 = 5 digits and reversed (05535 -> 5 3 5 5 0); the units digits of both operands and of the
// product share the largest digit ID (W = 5), '*' and '=' (<sep>) the ID above it, and each
// higher significance one ID less, down to the product's leading (padding) digit at ID 1.
TEST(TaskPositions, MultiplicationLayoutOf123Times45) {
  auto t = make_task(arith("multiplication", "coupled"));
  const int64_t star = t->vocab().id("*"), d0 = Vocab::kNumSpecial;
  const std::vector<int64_t> src = {d0 + 1, d0 + 2, d0 + 3, star, d0 + 4, d0 + 5};
  Example e;
  int64_t k = 0;
  for (; k < 3000000; ++k) {  // 1 in 90000 length-3 examples is 123 * 45
    e = t->example_at(1, k, 3, 3);
    if (e.src == src) break;
  }
  ASSERT_EQ(e.src, src) << "no 123 * 45 among the first " << k << " examples";
  EXPECT_EQ(e.tgt, (std::vector<int64_t>{d0 + 5, d0 + 3, d0 + 5, d0 + 5, d0 + 0}));
  //                                    <bos>  1  2  3  *  4  5  <sep>
  EXPECT_EQ(e.src_pos, (std::vector<int64_t>{0, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(e.tgt_pos, (std::vector<int64_t>{5, 4, 3, 2, 1}));  // 5 3 5 5 0
  // A one-digit second operand is written with its leading zero: 7 -> 07, and a product that
  // fills fewer digits is padded: the first example with b < 10 has a 0 as its second-last src
  // token and the product still has N + 2 digits.
  bool seen = false;
  for (int64_t j = 0; j < 1000 && !seen; ++j) {
    const Example f = t->example_at(1, j, 3, 3);
    if (f.src[4] != d0) continue;
    seen = true;
    EXPECT_EQ(f.src.size(), 6u);
    EXPECT_EQ(f.tgt.size(), 5u);
  }
  EXPECT_TRUE(seen);
}

// A task without IDs or hints refuses them, naming the tasks that have them.
TEST(TaskPositions, TasksWithoutIdsRefuseThem) {
  TaskSpec s = arith("copy", "coupled");
  try {
    make_task(s);
    FAIL() << "copy accepted coupled IDs";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("task 'copy' defines no coupled position IDs (tasks "
                                         "with them: addition_reversed, multiplication, multi_addition)"),
              std::string::npos)
        << e.what();
  }
  s = arith("copy", "sequential", 8);
  EXPECT_THROW(make_task(s), DataError);
  s = arith("addition_reversed", "shifted");
  EXPECT_THROW(make_task(s), DataError);
}

// The decoder batch carries the IDs of its input tokens (bos src sep tgt), padded with 0; the
// decoding IDs repeat the last answer ID past the answer.
TEST(TaskPositions, DecoderBatchCarriesIds) {
  Example a{{5, 6}, {7, 8}, {0, 3, 2, 4}, {3, 2}};
  Example b{{5}, {7}, {0, 9, 8}, {9}};
  const DecoderBatch d = make_decoder_batch({a, b});
  ASSERT_EQ(d.L, 6);
  EXPECT_EQ(d.pos, (std::vector<int64_t>{0, 3, 2, 4, 3, 2, 0, 9, 8, 9, 0, 0}));
  EXPECT_EQ(decoder_position_ids(a, 4), (std::vector<int64_t>{0, 3, 2, 4, 3, 2, 2, 2}));
  EXPECT_TRUE(make_decoder_batch({Example{{5}, {7}, {}, {}}}).pos.empty());
  EXPECT_THROW(make_decoder_batch({a, Example{{5}, {7}, {}, {}}}), DataError);  // mixed
  EXPECT_THROW(decoder_position_ids(Example{{5}, {7}, {0, 1}, {1}}, 1), DataError);  // short
}

namespace {

using pelab::testing::config_error;
constexpr auto& has = pelab::testing::contains;

const char* kCoupled =
    "task:\n  name: addition_reversed\n  formulation: decoder\n  position_ids: coupled\n"
    "  train_min_len: 1\n  train_max_len: 5\n  test_lengths: [5, 30]\n  max_position_id: 40\n"
    "model:\n  arch: decoder\n  decoder_layers: 1\n";

}  // namespace

// Cross-field rules of the task IDs: one clear line each, at config time.
TEST(TaskPositions, ConfigRules) {
  const std::string ok = kCoupled;
  EXPECT_EQ(config_error(ok + "pe:\n  scheme: learned\n  max_positions: 64\n"), "");
  EXPECT_EQ(config_error(ok + "pe:\n  scheme: rope\n"), "");
  // Coupling asked of a task without IDs.
  std::string e = config_error(
      "task:\n  name: copy\n  formulation: decoder\n  position_ids: coupled\nmodel:\n  arch: "
      "decoder\n");
  EXPECT_TRUE(has(e, "task 'copy' defines no coupled position IDs (tasks with them: "
                     "addition_reversed, multiplication, multi_addition)")) << e;
  e = config_error("task:\n  name: lm\n  formulation: decoder\n  index_hints: 8\nmodel:\n  arch: "
                   "decoder\n");
  EXPECT_TRUE(has(e, "task.index_hints needs a synthetic task that defines them")) << e;
  // IDs need the decoder formulation.
  e = config_error("task:\n  name: addition_reversed\n  position_ids: abacus\n");
  EXPECT_TRUE(has(e, "task.position_ids abacus needs task.formulation decoder")) << e;
  // A scheme that refuses task IDs (CoPE's positions are contextual).
  e = config_error(ok + "pe:\n  scheme: cope\n");
  EXPECT_TRUE(has(e, "pe.scheme cope does not take position IDs from the task")) << e;
  // Task IDs and randomized positions exclude each other.
  e = config_error(ok + "pe:\n  scheme: rope\n  randomized_positions: true\n"
                        "  randomized_max_position: 64\n");
  EXPECT_TRUE(has(e, "pe.randomized_positions would replace them")) << e;
  // IDs (offsets up to max_position_id, the longest test length) beyond a learned table.
  e = config_error(ok + "pe:\n  scheme: learned\n  max_positions: 40\n");
  EXPECT_TRUE(has(e, "pe.max_positions (40) must be > 40, the largest task position ID")) << e;
  e = config_error(ok + "pe:\n  scheme: learned\n  max_positions: 41\n");
  EXPECT_EQ(e, "");
  const std::string longer = std::string(kCoupled).replace(
      std::string(kCoupled).find("[5, 30]"), 7, "[5, 45]");
  e = config_error(longer + "pe:\n  scheme: learned\n  max_positions: 41\n");
  EXPECT_TRUE(has(e, "must be > 47, the largest task position ID (task.test_lengths 45")) << e;
  // The offset range must hold the longest training example's IDs.
  e = config_error(std::string(kCoupled).replace(std::string(kCoupled).find("40"), 2, "6"));
  EXPECT_TRUE(has(e, "task.max_position_id (6) must be >= 7, the largest position ID of a "
                     "training example at task.train_max_len 5")) << e;
  // An offset with nothing to offset; hints that offsets would overrun.
  e = config_error("task:\n  name: addition_reversed\n  formulation: decoder\n  max_position_id: "
                   "10\nmodel:\n  arch: decoder\n");
  EXPECT_TRUE(has(e, "but the task has neither")) << e;
  e = config_error("task:\n  name: addition_reversed\n  formulation: decoder\n  index_hints: 12\n"
                   "  train_max_len: 5\n  test_lengths: [10]\n  max_position_id: 20\nmodel:\n"
                   "  arch: decoder\n");
  EXPECT_TRUE(has(e, "task.index_hints (12) must be >= task.max_position_id (20)")) << e;
  e = config_error("task:\n  name: addition_reversed\n  formulation: decoder\n  index_hints: 12\n"
                   "  train_max_len: 5\n  test_lengths: [20]\nmodel:\n  arch: decoder\n");
  EXPECT_TRUE(has(e, "cannot generate length 20: it needs index hints up to h21")) << e;
}

// Training offsets: per example, a pure function of (seeds, batch index, row), covering [0, M -
// largest ID]; validation and test examples have none.
TEST(TaskPositions, TrainingOffsetsAreDeterministicAndBounded) {
  const pelab::Config cfg = pelab::load_config_string(
      std::string(kCoupled) + "pe:\n  scheme: learned\n  max_positions: 64\ntrain:\n"
                              "  batch_size: 16\n");
  pelab::TaskData data(cfg);
  std::set<int64_t> tops;
  for (int64_t j = 0; j < 20; ++j) {
    const std::vector<Example> b = data.train_batch(j);
    EXPECT_EQ(b, data.train_batch(j));  // resume sees the same offsets
    for (const Example& ex : b) {
      int64_t top = 0, low = 1000;
      for (int64_t v : ex.tgt_pos) top = std::max(top, v), low = std::min(low, v);
      EXPECT_LE(ex.src_pos.back(), 40);  // sep carries the largest ID, W + 1 + offset
      EXPECT_EQ(ex.src_pos.back(), top + 1);
      EXPECT_EQ(ex.src_pos.front(), 0);  // bos stays 0
      tops.insert(ex.src_pos.back());
      // The offset is the answer's lowest ID - 1 (unshifted it is 1).
      EXPECT_GE(low, 1);
    }
  }
  EXPECT_GT(tops.size(), 20u);  // the offsets spread over the range
  EXPECT_TRUE(tops.count(40) > 0 || *tops.rbegin() >= 35);
  for (const Example& ex : data.valid().examples) EXPECT_EQ(ex.tgt_pos.back(), 1);
  for (const auto& set : data.tests())
    for (const Example& ex : set.examples) EXPECT_EQ(ex.tgt_pos.back(), 1);
  // Another training seed draws other offsets.
  pelab::Config other = cfg;
  other.train.seed = 2;
  pelab::TaskData data2(other);
  EXPECT_NE(data.train_batch(0), data2.train_batch(0));
}

// End to end: a short coupled run; its evaluation feeds the task's IDs (stripping them changes the
// scores), and KV-cache greedy decoding with the task's per-row IDs gives exactly the outputs of
// the full forward at every step.
TEST(TaskPositions, TrainedIdsReachTheModelAndCachedDecodingIsExact) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("pelab_task_positions_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const pelab::Config cfg = coupled_learned_run(
      dir, "coupled",
      {"task.train_max_len=3", "task.test_lengths=[3, 6]", "task.max_position_id=10",
       "task.num_eval_examples=24", "model.d_model=32", "model.d_ff=64", "pe.max_positions=16",
       "train.steps=120", "train.batch_size=16", "train.lr=0.003", "train.warmup=10",
       "train.checkpoint_every=120"});
  const pelab::TrainResult r = pelab::train(cfg, pelab::testing::quiet_train());
  ASSERT_TRUE(r.finished);
  pelab::LoadedModel lm = pelab::load_model(cfg, r.last_checkpoint);
  for (const pelab::EvalSet& set : lm.data->tests()) {
    pelab::EvalOptions cached;
    cached.keep_predictions = true;
    pelab::EvalOptions full = cached;
    full.use_cache = false;
    const pelab::EvalResult a = pelab::evaluate_set(*lm.model, *lm.data, set, cfg, cached);
    const pelab::EvalResult b = pelab::evaluate_set(*lm.model, *lm.data, set, cfg, full);
    ASSERT_TRUE(a.available()) << a.status;
    ASSERT_EQ(a.predictions.size(), b.predictions.size());
    for (size_t i = 0; i < a.predictions.size(); ++i)
      EXPECT_EQ(a.predictions[i].output, b.predictions[i].output) << set.name << " example " << i;
    EXPECT_EQ(a.exact_match, b.exact_match);
    EXPECT_EQ(a.loss, b.loss);
    // The same examples at positions 0..L-1 (IDs stripped) score differently: the IDs are used.
    pelab::EvalSet plain = set;
    for (Example& ex : plain.examples) ex.src_pos.clear(), ex.tgt_pos.clear();
    const pelab::EvalResult c = pelab::evaluate_set(*lm.model, *lm.data, plain, cfg, cached);
    EXPECT_NE(a.loss, c.loss) << set.name;
  }
  fs::remove_all(dir);
}

// A learned table over the task's IDs needs a row per ID, not per token (issue 51, item 9): with
// pe.max_positions 40, task.max_position_id 32 and task.train_max_len 15 the training sequences
// are 49 tokens long but their IDs stop at 32, so the model is built and trains. The model's own
// check (a table at or below the largest ID, past the config rule) names the IDs.
TEST(TaskPositions, LearnedTableOverTaskIdsIsSizedByTheIdsNotTheSequence) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("pelab_task_ids_table_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  pelab::Config cfg = coupled_learned_run(
      dir, "ids",
      {"task.train_max_len=15", "task.test_lengths=[15]", "task.max_position_id=32",
       "task.num_eval_examples=2", "model.d_model=16", "model.heads=2", "model.d_ff=32",
       "pe.max_positions=40", "train.steps=2", "train.batch_size=4", "train.warmup=0",
       "train.checkpoint_every=2"});
  {
    pelab::TaskData data(cfg);
    EXPECT_EQ(data.train_positions(), 49);
    EXPECT_EQ(data.largest_train_position_id(), 32);
    EXPECT_NO_THROW(pelab::build_model(cfg, data));
    pelab::Config below = cfg;  // past the config rule: the model's own check
    below.model.pe.set("max_positions", int64_t{32});
    const std::string e = pelab::testing::error_of([&] { pelab::build_model(below, data); });
    EXPECT_NE(e.find("pe.max_positions (32) must be > 32, the largest task position ID"),
              std::string::npos) << e;
  }
  const pelab::TrainResult r = pelab::train(cfg, pelab::testing::quiet_train());
  EXPECT_TRUE(r.finished);
  fs::remove_all(dir);
}
