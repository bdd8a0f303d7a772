// tests/test_multi_addition.cpp - multi_addition (Cho et al. 2025): the scratchpad format and its
// two-level coupled IDs against the rule of docs/tasks.md, the sampled operand counts and lengths,
// the test splits of both axes, the second ID level through the batch and Positions, the config
// rules, and a two-level model that builds, trains and decodes (cached = full forward).
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
#include "data/multi_addition.h"
#include "data/tasks.h"
#include "data/vocab.h"
#include "models/positions.h"
#include "run_test_util.h"
#include "test_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/task_data.h"
#include "train/trainer.h"

using namespace pelab::data;

namespace {

TaskSpec multi(const std::string& ids, int64_t min_ops = 2, int64_t max_ops = 5,
               int64_t min_len = 1, int64_t max_len = 5) {
  TaskSpec s;
  s.name = kMultiAdditionTask;
  s.position_ids = ids;
  s.train_min_len = min_len;
  s.train_max_len = max_len;
  s.train_min_operands = min_ops;
  s.train_max_operands = max_ops;
  return s;
}

std::vector<int64_t> toks(const std::string& text, int64_t plus, int64_t next) {
  std::vector<int64_t> out;
  for (char c : text)
    out.push_back(c == '+' ? plus : c == '>' ? next : Vocab::kNumSpecial + (c - '0'));
  return out;
}

// The paper's rule, checked on any example: every scratchpad digit S_k[i] (k >= 1) is the digit
// of a_k[i] + S_{k-1}[i] + carry, and a_k[i] and S_{k-1}[i] are exactly the tokens whose IDs are
// (digit ID of S_k[i], operand ID of S_k[i] - 1) in the source and in the scratchpad.
void expect_coupling_rule(const Example& ex, int64_t plus, int64_t next) {
  ASSERT_EQ(ex.src_pos.size(), ex.src.size() + 2);
  ASSERT_EQ(ex.src_pos2.size(), ex.src.size() + 2);
  ASSERT_EQ(ex.tgt_pos.size(), ex.tgt.size());
  ASSERT_EQ(ex.tgt_pos2.size(), ex.tgt.size());
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> src_at, tgt_at;  // (id1, id2) -> digits
  for (size_t t = 0; t < ex.src.size(); ++t)
    if (ex.src[t] != plus) src_at[{ex.src_pos[t + 1], ex.src_pos2[t + 1]}].push_back(ex.src[t]);
  for (size_t t = 0; t < ex.tgt.size(); ++t)
    if (ex.tgt[t] != next) tgt_at[{ex.tgt_pos[t], ex.tgt_pos2[t]}].push_back(ex.tgt[t]);
  for (const auto& [key, v] : src_at) EXPECT_EQ(v.size(), 1u) << "source IDs must be unique";
  for (const auto& [key, v] : tgt_at) EXPECT_EQ(v.size(), 1u) << "scratchpad IDs must be unique";
  int64_t carry = 0;
  for (size_t t = 0; t < ex.tgt.size(); ++t) {
    if (ex.tgt[t] == next) {
      EXPECT_EQ(carry, 0);
      carry = 0;
      continue;
    }
    const int64_t i1 = ex.tgt_pos[t], i2 = ex.tgt_pos2[t];
    if (i2 == 1) {  // S_0
      EXPECT_EQ(ex.tgt[t], Vocab::kNumSpecial);
      continue;
    }
    ASSERT_TRUE(src_at.count({i1, i2 - 1})) << "no operand digit at (" << i1 << ", " << i2 - 1 << ")";
    ASSERT_TRUE(tgt_at.count({i1, i2 - 1})) << "no running-sum digit at (" << i1 << ", " << i2 - 1 << ")";
    const int64_t s = src_at[{i1, i2 - 1}][0] + tgt_at[{i1, i2 - 1}][0] -
                      2 * Vocab::kNumSpecial + carry;
    EXPECT_EQ(ex.tgt[t] - Vocab::kNumSpecial, s % 10);
    carry = s / 10;
  }
}

}  // namespace

// 12 + 345 + 6: three operands of up to 3 digits, W = digits of 3 x 999 = 4. The tokens and both
// ID levels written out by hand from the rule of docs/tasks.md (Cho et al. 2025's layout):
// digit ID = significance + 2, '+' '>' sep 1; operand ID = j for a_j and the '+' after it, k + 1
// for S_k and the '>' before it, 1 for sep; bos 0 and 0.
TEST(MultiAddition, ExactTokensAndBothIdLevels) {
  auto t = make_task(multi("coupled"));
  const int64_t plus = t->vocab().id("+"), next = t->vocab().id(">");
  EXPECT_EQ(multi_addition_width(3, 3, 10), 4);
  EXPECT_EQ(multi_addition_width(5, 5, 10), 6);     // 5 x 99999 = 499995
  EXPECT_EQ(multi_addition_width(10, 10, 10), 11);  // 10 x (10^10 - 1)
  EXPECT_EQ(multi_addition_width(1, 10, 10), 2);    // 90
  EXPECT_EQ(multi_addition_width(1, 11, 10), 2);    // 99
  EXPECT_EQ(multi_addition_width(3, 1, 2), 3);      // base 2: 111
  const Example ex = multi_addition_layout({{1, 2}, {3, 4, 5}, {6}}, 10, true, plus, next);
  EXPECT_EQ(ex.src, toks("0012+0345+0006", plus, next));
  EXPECT_EQ(ex.tgt, toks("0000>2100>7530>3630", plus, next));  // 0, 12, 357, 363 reversed
  //                        bos 0  0  1  2  +  0  3  4  5  +  0  0  0  6 sep
  EXPECT_EQ(ex.src_pos, (std::vector<int64_t>{0, 5, 4, 3, 2, 1, 5, 4, 3, 2, 1, 5, 4, 3, 2, 1}));
  EXPECT_EQ(ex.src_pos2, (std::vector<int64_t>{0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 1}));
  EXPECT_EQ(ex.tgt_pos, (std::vector<int64_t>{2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3,
                                              4, 5}));
  EXPECT_EQ(ex.tgt_pos2, (std::vector<int64_t>{1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4,
                                               4, 4}));
  expect_coupling_rule(ex, plus, next);
  // Sequential: the same tokens, no IDs; a digit outside the base is refused.
  const Example plain = multi_addition_layout({{1, 2}, {3, 4, 5}, {6}}, 10, false, plus, next);
  EXPECT_EQ(plain.src, ex.src);
  EXPECT_FALSE(plain.has_positions() || plain.has_second_positions());
  EXPECT_THROW(multi_addition_layout({{1, 12}}, 10, true, plus, next), DataError);
  EXPECT_EQ(t->position_channels(), 2);
  EXPECT_EQ(make_task(multi("sequential"))->position_channels(), 1);
}

// Sampled examples: counts uniform over the training range, each operand's digits uniform and
// independent, the task length the longest operand's, the rule and the sums right every time;
// the bounds hold every example; test splits of one count.
TEST(MultiAddition, SampledRangesAndBounds) {
  auto t = make_task(multi("coupled", 2, 5, 1, 5));
  const int64_t plus = t->vocab().id("+"), next = t->vocab().id(">");
  std::map<int64_t, int> counts, lens;
  for (int64_t k = 0; k < 2000; ++k) {
    const Example ex = t->example_at(3, k, 1, 5);
    const int64_t m = std::count(ex.src.begin(), ex.src.end(), plus) + 1;
    ++counts[m];
    const int64_t L = t->length_at(3, k, 1, 5);
    ++lens[L];
    EXPECT_LE(static_cast<int64_t>(ex.src.size()), t->max_source_len(L));
    EXPECT_LE(static_cast<int64_t>(ex.tgt.size()), t->max_target_len(L));
    EXPECT_LE(t->top_position(ex), t->max_position_id(L));
    EXPECT_EQ(std::count(ex.tgt.begin(), ex.tgt.end(), next), m);  // S_0 .. S_m
    if (k < 300) expect_coupling_rule(ex, plus, next);
  }
  EXPECT_EQ(counts.size(), 4u);  // 2..5
  for (const auto& [m, n] : counts) EXPECT_NEAR(n, 500, 90) << m;
  EXPECT_EQ(lens.size(), 5u);  // the longest of m uniform lengths: mostly 5
  EXPECT_GT(lens[5], lens[1]);
  // One length (a test split): every operand has L digits.
  for (int64_t k = 0; k < 50; ++k) {
    const Example ex = t->example_at(4, k, 4, 4);
    // Every operand has 4 digits: zero padding above significance 3 (digit ID 5), no leading
    // zero at it.
    for (size_t i = 0; i < ex.src.size(); ++i) {
      if (ex.src_pos[i + 1] > 5) {
        EXPECT_EQ(ex.src[i], Vocab::kNumSpecial);
      } else if (ex.src_pos[i + 1] == 5) {
        EXPECT_NE(ex.src[i], Vocab::kNumSpecial);
      }
    }
  }
  // One-length batches keep the operand count range and condition on the longest operand.
  for (int64_t k = 0; k < 50; ++k) {
    const Example ex = t->example_of_length(5, k, 3, 1, 5);
    EXPECT_EQ(*std::max_element(ex.src_pos.begin(), ex.src_pos.end()),
              multi_addition_width(3, std::count(ex.src.begin(), ex.src.end(), plus) + 1, 10) + 1);
  }
  // Bounds cover the test counts too.
  TaskSpec s = multi("coupled", 2, 5);
  s.test_operands = {10};
  auto wide = make_task(s);
  EXPECT_EQ(wide->max_position_id(10), multi_addition_width(10, 10, 10) + 1);
  EXPECT_EQ(wide->max_source_len(10), 10 * 11 + 9);
  EXPECT_EQ(wide->max_target_len(10), 11 * 11 + 10);
  EXPECT_EQ(t->max_position_id(5), 7);
}

// The second ID level travels through the decoder batch, greedy decoding's IDs and Positions.
TEST(MultiAddition, SecondLevelThroughBatchAndPositions) {
  auto t = make_task(multi("coupled"));
  const Example a = t->example_at(1, 0, 1, 5), b = t->example_at(1, 1, 1, 5);
  const DecoderBatch d = make_decoder_batch({a, b});
  ASSERT_EQ(d.pos2.size(), d.pos.size());
  const std::vector<int64_t> a2 = decoder_position_ids(a, static_cast<int64_t>(a.tgt.size()), 2);
  EXPECT_TRUE(std::equal(a2.begin(), a2.end(), d.pos2.begin()));
  EXPECT_EQ(decoder_position_ids(a, static_cast<int64_t>(a.tgt.size()) + 2, 2).back(),
            a.tgt_pos2.back());  // past the answer: its last ID again
  Example one = a;
  one.src_pos2.clear(), one.tgt_pos2.clear();
  EXPECT_THROW(make_decoder_batch({a, one}), DataError);  // mixed levels
  EXPECT_THROW(decoder_position_ids(one, 1, 2), DataError);
  // Positions: both levels follow columns, rows, broadcasting and appends.
  using pelab::models::Positions;
  Positions p(2, 3, {1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(p.levels(), 2);
  EXPECT_EQ(p.columns(1, 3).ids2, (std::vector<int64_t>{8, 9, 11, 12}));
  EXPECT_EQ(p.row_block(1).ids2, (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(p.select_rows({1}).ids2, (std::vector<int64_t>{10, 11, 12}));
  Positions q = p.columns(0, 1);
  q.append(p.columns(1, 3));
  EXPECT_EQ(q, p);
  Positions s(1, 2, {1, 2}, {3, 4});
  EXPECT_EQ(s.expanded(2).ids2, (std::vector<int64_t>{3, 4, 3, 4}));
  EXPECT_THROW(q.append(Positions(2, 1, {1, 1})), pelab::Error);  // one level onto two
  EXPECT_THROW(Positions(1, 2, {1, 2}, {3}), pelab::Error);
}

namespace {

using pelab::testing::config_error;
constexpr auto& has = pelab::testing::contains;

const char* kMulti =
    "task:\n  name: multi_addition\n  formulation: decoder\n  position_ids: coupled\n"
    "  train_min_len: 1\n  train_max_len: 3\n  train_min_operands: 2\n  train_max_operands: 3\n"
    "  test_lengths: [3, 6]\n  test_operands: [3, 6]\n  max_position_id: 12\n"
    "model:\n  arch: decoder\n  decoder_layers: 1\n";

}  // namespace

// One clear line for each misuse: a one-level scheme under two-level IDs, counts on a task that
// takes none, a bad count range or test count, a learned table below the IDs of the test counts.
TEST(MultiAddition, ConfigRules) {
  const std::string ok = kMulti;
  EXPECT_EQ(config_error(ok + "pe:\n  scheme: learned\n  max_positions: 16\n"), "");
  EXPECT_EQ(config_error(ok + "pe:\n  scheme: shaw\n"), "");
  std::string e = config_error(ok + "pe:\n  scheme: rope\n");
  EXPECT_TRUE(has(e, "pe.scheme rope takes one position ID level; task multi_addition with "
                     "task.position_ids coupled gives 2")) << e;
  EXPECT_TRUE(has(e, "learned") && has(e, "shaw")) << e;  // the schemes that take two
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  // Without IDs any scheme will do.
  EXPECT_EQ(config_error("task:\n  name: multi_addition\n  formulation: decoder\n"
                         "  train_max_operands: 4\n  test_lengths: [3]\nmodel:\n  arch: decoder\n"
                         "pe:\n  scheme: rope\n"),
            "");
  e = config_error("task:\n  name: addition_reversed\n  formulation: decoder\n  test_operands: "
                   "[4]\nmodel:\n  arch: decoder\n");
  EXPECT_TRUE(has(e, "task 'addition_reversed' takes no operand count")) << e;
  e = config_error("task:\n  name: lm\n  formulation: decoder\n  train_max_operands: 4\nmodel:\n"
                   "  arch: decoder\n");
  EXPECT_TRUE(has(e, "task lm takes no operand count")) << e;
  e = config_error(std::string(kMulti).replace(std::string(kMulti).find("train_min_operands: 2"),
                                               21, "train_min_operands: 4") +
                   "pe:\n  scheme: shaw\n");
  EXPECT_TRUE(has(e, "train_min_operands = 4 and train_max_operands = 3 must satisfy")) << e;
  // Test counts raise the largest ID (6 operands of 6 digits: W = 7, IDs up to 8 + offset 12).
  e = config_error(ok + "pe:\n  scheme: learned\n  max_positions: 12\n");
  EXPECT_TRUE(has(e, "pe.max_positions (12) must be > 12")) << e;
  e = config_error("task:\n  name: multi_addition\n  formulation: decoder\n  position_ids: "
                   "abacus\nmodel:\n  arch: decoder\n");
  EXPECT_TRUE(has(e, "task 'multi_addition' defines no abacus position IDs (only coupled")) << e;
}

// Test splits: one per length and count, named len_L_ops_M, their examples of exactly M operands
// of L digits; without test_operands one len_L split per length.
TEST(MultiAddition, TestSplitsOfBothAxes) {
  const pelab::Config cfg =
      pelab::load_config_string(std::string(kMulti) + "pe:\n  scheme: shaw\n", "c.yaml");
  pelab::TaskData data(cfg);
  std::vector<std::string> names;
  for (const auto& s : data.tests()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"len_3_ops_3", "len_3_ops_6", "len_6_ops_3",
                                             "len_6_ops_6"}));
  const int64_t plus = data.vocab().id("+");
  for (const auto& s : data.tests()) {
    EXPECT_EQ(s.length, 0);
    const int64_t M = s.name.back() - '0', L = s.name[4] - '0';
    for (const Example& ex : s.examples) {
      EXPECT_EQ(std::count(ex.src.begin(), ex.src.end(), plus) + 1, M) << s.name;
      EXPECT_EQ(ex.tgt_pos.back(), multi_addition_width(L, M, 10) + 1) << s.name;
    }
  }
  pelab::Config plain = cfg;
  plain.task.test_operands.clear();
  pelab::TaskData d2(plain);
  ASSERT_EQ(d2.tests().size(), 2u);
  EXPECT_EQ(d2.tests()[0].name, "len_3");
  EXPECT_EQ(d2.tests()[0].length, 3);
}

// End to end with each scheme that takes two levels: the model builds with the second tables,
// trains a few steps, and its evaluation uses the second level (stripping it is refused; changing
// it changes the loss); cached greedy decoding equals the full forward.
TEST(MultiAddition, TwoLevelModelTrainsAndDecodes) {
  namespace fs = std::filesystem;
  for (const std::string scheme : {"learned", "shaw"}) {
    const fs::path dir = fs::temp_directory_path() /
                         ("pelab_multi_addition_" + scheme + std::to_string(::getpid()));
    fs::remove_all(dir);
    const pelab::Config cfg = pelab::testing::tiny_run_config(
        {"task.name=multi_addition", "task.formulation=decoder", "task.position_ids=coupled",
         "task.train_max_len=2", "task.train_min_operands=2", "task.train_max_operands=3",
         "task.test_lengths=[2, 3]", "task.test_operands=[4]", "task.max_position_id=8",
         "task.num_eval_examples=8", "model.arch=decoder", "model.decoder_layers=1",
         "model.d_model=16", "model.heads=2", "model.d_ff=32", "pe.scheme=" + scheme,
         "pe.max_positions=10", "pe.shaw_k=4", "train.steps=6", "train.batch_size=8",
         "train.warmup=0", "train.checkpoint_every=6", "train.threads=1", "train.eval_every=0"},
        dir, scheme, {});
    const pelab::TrainResult r = pelab::train(cfg, pelab::testing::quiet_train());
    ASSERT_TRUE(r.finished) << scheme;
    pelab::LoadedModel lm = pelab::load_model(cfg, r.last_checkpoint);
    int second = 0;
    for (const auto& [name, p] : lm.model->named_parameters())
      second += name.find("weight2") != std::string::npos || name.find("rel_k2") != std::string::npos;
    EXPECT_GE(second, 1) << scheme;
    const pelab::EvalSet& set = lm.data->tests().back();
    pelab::EvalOptions cached;
    cached.keep_predictions = true;
    pelab::EvalOptions full = cached;
    full.use_cache = false;
    const pelab::EvalResult a = pelab::evaluate_set(*lm.model, *lm.data, set, cfg, cached);
    const pelab::EvalResult b = pelab::evaluate_set(*lm.model, *lm.data, set, cfg, full);
    ASSERT_TRUE(a.available()) << a.status;
    ASSERT_EQ(a.predictions.size(), b.predictions.size());
    for (size_t i = 0; i < a.predictions.size(); ++i)
      EXPECT_EQ(a.predictions[i].output, b.predictions[i].output) << scheme << " " << i;
    pelab::EvalSet moved = set;  // the second level shifted: another loss
    for (Example& ex : moved.examples) {
      for (int64_t& v : ex.src_pos2) v += v > 0 ? 1 : 0;
      for (int64_t& v : ex.tgt_pos2) v += 1;
    }
    const pelab::EvalResult c = pelab::evaluate_set(*lm.model, *lm.data, moved, cfg, cached);
    EXPECT_NE(a.loss, c.loss) << scheme;
    pelab::EvalSet stripped = set;  // one level into a two-level model: refused, never ignored
    for (Example& ex : stripped.examples) ex.src_pos2.clear(), ex.tgt_pos2.clear();
    EXPECT_THROW(pelab::evaluate_set(*lm.model, *lm.data, stripped, cfg, cached), pelab::Error)
        << scheme;
    fs::remove_all(dir);
  }
}

// The operand keys came after run records were published: at their defaults the resolved config
// (and so every older run's config digest) does not list them; set, it does. Without
// omitted_at_default every published record's digest would no longer match its config.yaml.
TEST(MultiAddition, OperandKeysStayOutOfOtherRunsResolvedConfigs) {
  const pelab::Config plain = pelab::load_config_string(
      "task:\n  name: addition_reversed\n  formulation: decoder\nmodel:\n  arch: decoder\n",
      "c.yaml");
  const std::string y = pelab::config_to_yaml(plain);
  EXPECT_EQ(y.find("operands"), std::string::npos) << y;
  const pelab::Config multi =
      pelab::load_config_string(std::string(kMulti) + "pe:\n  scheme: shaw\n", "c.yaml");
  const std::string m = pelab::config_to_yaml(multi);
  EXPECT_NE(m.find("train_max_operands: 3"), std::string::npos) << m;
  EXPECT_NE(m.find("test_operands: [3, 6]"), std::string::npos) << m;
  EXPECT_EQ(m.find("train_min_operands"), std::string::npos) << m;  // 2, the default
  EXPECT_EQ(pelab::load_config_string(m, "r.yaml").task.test_operands, multi.task.test_operands);
}
