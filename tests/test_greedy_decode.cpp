// pelab — the one greedy decoder (models::greedy_decode, both architectures, with or without the
// KV cache and with optional explicit positions) and randomized-position evaluation as an option
// of evaluate_set (EvalOptions::random_positions; compare's `randpos` variant asks for it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/rng.h"
#include "data/vocab.h"
#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/pelab.h"
#include "tests/pe_test_util.h"
#include "tests/test_util.h"
#include "train/study/compare.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::tiny_model;

// The reference: a plain greedy loop that reruns the full forward each step on the whole sequence
// (no cache) at positions pos[0..L) (0..L-1 when pos is null) and takes the argmax of the last
// logit row. Rows stop at eos; every row of `seq` has the same length.
models::GreedyResult reference_greedy(models::Transformer& m, std::vector<std::vector<int64_t>> seq,
                                      const Tensor* memory, const Tensor& src_mask,
                                      const models::Positions* src_pos,
                                      const models::Positions* pos, int64_t max_len,
                                      int64_t eos) {
  NoGradGuard ng;
  const size_t B = seq.size();
  models::GreedyResult r;
  r.tokens.resize(B);
  r.finished.assign(B, false);
  for (int64_t t = 0; t < max_len; ++t) {
    const int64_t L = static_cast<int64_t>(seq[0].size());
    std::vector<int64_t> flat;
    models::Positions p;
    for (const auto& row : seq) flat.insert(flat.end(), row.begin(), row.end());
    if (pos) p = pos->columns(0, L);
    Tensor ids = Tensor::from_ints(flat, {static_cast<int64_t>(B), L});
    Tensor logits = memory ? m.decode(ids, Tensor(), *memory, src_mask, pos ? &p : nullptr, src_pos)
                           : m.forward_decoder(ids, Tensor(), pos ? &p : nullptr);
    const int64_t V = logits.size(2);
    const std::vector<double> v = logits.to_vector();
    bool all = true;
    for (size_t b = 0; b < B; ++b) {
      const double* row = v.data() + (b * L + (L - 1)) * V;
      const int64_t next = std::max_element(row, row + V) - row;
      seq[b].push_back(next);
      if (!r.finished[b]) {
        if (next == eos)
          r.finished[b] = true;
        else
          r.tokens[b].push_back(next);
      }
      all = all && r.finished[b];
    }
    if (all) break;
  }
  return r;
}

// A sorted list of n distinct positions in [0, 40) that is not 0..n-1.
std::vector<int64_t> spread_positions(int64_t n) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(3 * i + (i % 2));
  return p;
}

// ---------------- (a) the one decoder equals a full-forward argmax loop ----------------

TEST(OneGreedy, Seq2seqEqualsFullForwardArgmaxCachedAndUncached) {
  for (const auto& scheme : models::pe_names()) {
    models::Transformer m(tiny_model("seq2seq", scheme));
    Tensor src = Tensor::from_ints({5, 6, 7, 8, 9, 6, 5, 7, 0, 0, 9, 9, 9, 9, 9}, {3, 5});
    Tensor src_mask = Tensor::from_ints({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {3, 5});
    Tensor memory;
    {
      NoGradGuard ng;
      memory = m.encode(src, src_mask);
    }
    // eos -1: every row runs the whole budget; then row 0's third token as eos (an early stop).
    const models::GreedyResult all =
        reference_greedy(m, {{1}, {1}, {1}}, &memory, src_mask, nullptr, nullptr, 8, -1);
    for (const int64_t eos : {int64_t{-1}, all.tokens[0][2]}) {
      const models::SpecialIds ids{0, 1, eos};
      const models::GreedyResult want =
          reference_greedy(m, {{1}, {1}, {1}}, &memory, src_mask, nullptr, nullptr, 8, eos);
      for (const bool cache : {true, false}) {
        const models::GreedyResult got = models::greedy_decode(m, src, src_mask, 8, cache, ids);
        EXPECT_EQ(got.tokens, want.tokens) << scheme << " cache " << cache << " eos " << eos;
        EXPECT_EQ(got.finished, want.finished) << scheme << " cache " << cache;
      }
    }
    EXPECT_EQ(all.tokens[0].size(), 8u);
  }
}

TEST(OneGreedy, DecoderOnlyEqualsFullForwardArgmaxCachedAndUncached) {
  for (const auto& scheme : models::pe_names()) {
    models::Transformer m(tiny_model("decoder", scheme));
    // Rows of two prompt lengths: decoded per length group, each row as if alone.
    const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6, 4}, {1, 7, 4}, {1, 8, 9, 4}};
    for (const int64_t eos : {int64_t{-1}, int64_t{5}}) {
      const models::SpecialIds ids{0, 1, eos};
      for (const bool cache : {true, false}) {
        const models::GreedyResult got = models::greedy_decode(m, prompts, 7, cache, ids);
        for (size_t r = 0; r < prompts.size(); ++r) {
          const models::GreedyResult want =
              reference_greedy(m, {prompts[r]}, nullptr, Tensor(), nullptr, nullptr, 7, eos);
          EXPECT_EQ(got.tokens[r], want.tokens[0]) << scheme << " row " << r << " cache " << cache;
          EXPECT_EQ(got.finished[r], want.finished[0]) << scheme << " row " << r;
        }
      }
    }
  }
}

// Explicit (non-contiguous) positions: the cached and uncached decoders equal the reference run
// at those positions, for both architectures.
TEST(OneGreedy, ExplicitPositionsEqualTheFullForwardAtThosePositions) {
  for (const auto& scheme : models::pe_names()) {
    {
      models::Transformer m(tiny_model("seq2seq", scheme));
      Tensor src = Tensor::from_ints({5, 6, 7, 8, 9, 6, 5, 7}, {2, 4});
      models::GreedyPositions gp{spread_positions(4), spread_positions(9)};
      Tensor memory;
      {
        NoGradGuard ng;
        memory = m.encode(src, Tensor(), &gp.src);
      }
      const models::GreedyResult want =
          reference_greedy(m, {{1}, {1}}, &memory, Tensor(), &gp.src, &gp.tgt, 9, -1);
      for (const bool cache : {true, false})
        EXPECT_EQ(models::greedy_decode(m, src, Tensor(), 9, cache, {0, 1, -1}, &gp).tokens,
                  want.tokens)
            << scheme << " seq2seq cache " << cache;
    }
    {
      models::Transformer m(tiny_model("decoder", scheme));
      const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6, 4}, {1, 8, 9, 4}};
      models::GreedyPositions gp{{}, spread_positions(4 + 6 - 1)};
      const models::GreedyResult want =
          reference_greedy(m, prompts, nullptr, Tensor(), nullptr, &gp.tgt, 6, -1);
      for (const bool cache : {true, false})
        EXPECT_EQ(models::greedy_decode(m, prompts, 6, cache, {0, 1, -1}, &gp).tokens, want.tokens)
            << scheme << " decoder cache " << cache;
    }
  }
}

// ---------------- (c) explicit positions 0..n-1 reproduce the default ----------------

TEST(OneGreedy, PositionsZeroToNMinusOneReproduceTheDefault) {
  for (const auto& scheme : models::pe_names()) {
    for (const bool cache : {true, false}) {
      models::Transformer s2s(tiny_model("seq2seq", scheme));
      Tensor src = Tensor::from_ints({5, 6, 7, 8, 9, 6, 5, 0}, {2, 4});
      Tensor sm = Tensor::from_ints({1, 1, 1, 1, 1, 1, 1, 0}, {2, 4});
      models::GreedyPositions gp{{0, 1, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7}};
      const models::GreedyResult a = models::greedy_decode(s2s, src, sm, 8, cache, {0, 1, -1});
      const models::GreedyResult b = models::greedy_decode(s2s, src, sm, 8, cache, {0, 1, -1}, &gp);
      EXPECT_EQ(a.tokens, b.tokens) << scheme << " seq2seq cache " << cache;
      EXPECT_EQ(a.tokens[0].size(), 8u);

      models::Transformer dec(tiny_model("decoder", scheme));
      const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6, 4}, {1, 7, 4}};
      models::GreedyPositions dp{{}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};  // 4 + 6 - 1 fed tokens
      EXPECT_EQ(models::greedy_decode(dec, prompts, 6, cache, {0, 1, -1}).tokens,
                models::greedy_decode(dec, prompts, 6, cache, {0, 1, -1}, &dp).tokens)
          << scheme << " decoder cache " << cache;
    }
  }
}

TEST(OneGreedy, TooFewExplicitPositionsIsOneClearError) {
  models::Transformer s2s(tiny_model("seq2seq", models::pe_names().front()));
  Tensor src = Tensor::from_ints({5, 6, 7}, {1, 3});
  models::GreedyPositions gp{{0, 1, 2}, {0, 1, 2}};
  const std::string e = pelab::testing::error_of(
      [&] { models::greedy_decode(s2s, src, Tensor(), 4, true, {}, &gp); });
  EXPECT_NE(e.find("3 explicit target positions for a decode that feeds 4 tokens"),
            std::string::npos)
      << e;
  models::Transformer dec(tiny_model("decoder", models::pe_names().front()));
  models::GreedyPositions dp{{}, {0, 1, 2, 3, 4}};  // prompt 3 + 4 - 1 = 6 needed
  const std::string d = pelab::testing::error_of([&] {
    models::greedy_decode(dec, {{1, 5, 4}}, 4, true, {}, &dp);
  });
  EXPECT_NE(d.find("5 explicit target positions for a decode that feeds 6 tokens"),
            std::string::npos)
      << d;
  models::GreedyPositions bad{{0}, {0, 1, 2, 3, 4, 5}};
  EXPECT_NE(pelab::testing::error_of([&] {
              models::greedy_decode(dec, {{1, 5, 4}}, 4, true, {}, &bad);
            }).find("has no source"),
            std::string::npos);
}

// ---------------- (b) random-position evaluation through evaluate ----------------

class OneGreedyRandpos : public pelab::testing::TempDirTest {
 protected:
  OneGreedyRandpos() : TempDirTest("pelab_one_greedy") {}

  // A tiny rope model with randomized positions (Ruoss et al.), trained 200 steps on reversal of
  // lengths 1-4 and compared with the randpos variant.
  std::string config(const std::string& arch) {
    return write(arch + ".yaml",
                 "task: {name: reverse, num_symbols: 2, train_min_len: 1, train_max_len: 4,\n"
                 "       test_lengths: [2, 4, 6], num_eval_examples: 12, formulation: " +
                     arch +
                     "}\n"
                     "model: {arch: " +
                     arch +
                     ", d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1,\n"
                     "        decoder_layers: 1}\n"
                     "pe: {scheme: rope, randomized_positions: true, randomized_max_position: 32}\n"
                     "train: {steps: 200, batch_size: 8, lr: 0.01, warmup: 2, log_every: 100,\n"
                     "        eval_every: 0, checkpoint_every: 200, threads: 1}\n"
                     "eval: {batch_size: 5}\n"
                     "compare:\n  title: tiny\n  seeds: [1]\n  jobs: 1\n  schemes: [rope]\n"
                     "  variants: [randpos]\n");
  }

  std::vector<ResultRow> compare(const std::string& arch) {
    CompareOptions o;
    o.out = (dir_ / ("report_" + arch)).string();
    o.progress = 2;
    o.log = &log_;
    o.jobs = 1;
    o.plots = false;
    run_compare(load_compare(config(arch)), o);
    return pelab::testing::results_without_timing(fs::path(o.out) / "results.csv");
  }

  std::ostringstream log_;
};

// compare's randpos rows are evaluate_set with EvalOptions::random_positions on the run's
// checkpoint, the test splits in order, one generator seeded derive_seed(train.seed,
// "compare_eval_positions"): compare only asks evaluate for it. (Before the move into evaluate,
// compare.cpp had its own evaluate_random_positions and greedy loop; results.csv of randpos
// comparisons was checked identical before and after with the two binaries, and the written-out
// reference of the next test is that algorithm. Values recorded from one binary are not used
// here: a sanitizer build trains the model to slightly different weights.)
TEST_F(OneGreedyRandpos, CompareRandposRowsAreEvaluateWithRandomPositions) {
  for (const std::string arch : {"seq2seq", "decoder"}) {
    std::vector<ResultRow> rows;
    for (const auto& r : compare(arch))
      if (r.variant == "randpos") rows.push_back(r);
    Config cfg = load_compare(config(arch)).base;
    LoadedModel lm = load_model(
        cfg,
        (dir_ / ("report_" + arch) / "runs" / "rope_seed1" / "checkpoints" / "last.h5").string());
    Generator gen(data::derive_seed(static_cast<uint64_t>(cfg.train.seed), "compare_eval_positions"));
    EvalOptions opt;
    opt.random_positions = &gen;
    opt.random_max_position = cfg.model.pe.randomized_max_position;
    const std::vector<EvalSet> tests = lm.data->tests();
    ASSERT_EQ(rows.size(), tests.size()) << arch;
    for (size_t i = 0; i < tests.size(); ++i) {
      const EvalResult e = evaluate_set(*lm.model, *lm.data, tests[i], cfg, opt);
      const std::string what = arch + " length " + std::to_string(e.length);
      EXPECT_EQ(rows[i].length, e.length) << what;
      EXPECT_EQ(rows[i].status, "ok") << what;
      EXPECT_EQ(rows[i].status, e.status) << what;
      EXPECT_DOUBLE_EQ(rows[i].loss, e.loss) << what;
      EXPECT_DOUBLE_EQ(rows[i].token_accuracy, e.token_accuracy) << what;
      EXPECT_DOUBLE_EQ(rows[i].exact_match, e.exact_match) << what;
    }
    // A second evaluation draws other positions: the rows are not a re-run with a fresh seed.
    Generator other(data::derive_seed(static_cast<uint64_t>(cfg.train.seed) + 1,
                                      "compare_eval_positions"));
    EvalOptions o2 = opt;
    o2.random_positions = &other;
    double diff = 0;
    for (size_t i = 0; i < tests.size(); ++i)
      diff += std::abs(evaluate_set(*lm.model, *lm.data, tests[i], cfg, o2).loss - rows[i].loss);
    EXPECT_GT(diff, 0.0) << arch;
  }
}

// A second code path for random-position evaluation, written out here from the public model API:
// batches of one source length (ascending, eval.batch_size each), per batch a draw of the source
// then the target positions (seq2seq) or of the sequence's (decoder-only), teacher-forced scores
// at those positions, and a full-forward greedy loop at the drawn positions. evaluate_set with
// EvalOptions::random_positions (cached and uncached decoding) gives the same loss, accuracy,
// exact match and decoded outputs, on the valid split (mixed lengths) and the test splits.
TEST_F(OneGreedyRandpos, EvaluateRandomPositionsEqualsAWrittenOutReference) {
  for (const std::string arch : {"seq2seq", "decoder"}) {
    compare(arch);
    Config cfg = load_compare(config(arch)).base;
    LoadedModel lm = load_model(
        cfg,
        (dir_ / ("report_" + arch) / "runs" / "rope_seed1" / "checkpoints" / "last.h5").string());
    models::Transformer& m = *lm.model;
    const TaskData& data = *lm.data;
    const int64_t maxp = cfg.model.pe.randomized_max_position, EB = cfg.eval.batch_size;
    std::vector<EvalSet> sets = data.tests();
    sets.insert(sets.begin(), data.valid());
    int exact_seen = 0;
    for (const EvalSet& set : sets) {
      // The reference.
      Generator rg(99);
      double loss_sum = 0;
      int64_t tokens = 0, correct = 0, exact = 0;
      std::vector<std::string> outputs;
      std::map<size_t, std::vector<data::Example>> by_len;
      for (const auto& ex : set.examples) by_len[ex.src.size()].push_back(ex);
      {
        NoGradGuard ng;
        for (const auto& [len, group] : by_len) {
          for (size_t i0 = 0; i0 < group.size(); i0 += static_cast<size_t>(EB)) {
            std::vector<data::Example> batch(
                group.begin() + i0,
                group.begin() + std::min(group.size(), i0 + static_cast<size_t>(EB)));
            Tensor logits, targets;
            models::GreedyResult g;
            if (arch == "seq2seq") {
              data::Seq2SeqBatch b = data::make_seq2seq_batch(batch);
              const models::Positions sp = random_positions(rg, b.S, maxp);
              const models::Positions tp = random_positions(rg, b.T, maxp);
              Tensor src = ids_tensor(b.src, b.B, b.S, Device::cpu()),
                     sm = mask_tensor(b.src_mask, b.B, b.S, Device::cpu());
              logits =
                  m.forward_seq2seq(src, sm, ids_tensor(b.tgt_in, b.B, b.T, Device::cpu()),
                                    mask_tensor(b.tgt_mask, b.B, b.T, Device::cpu()), &sp, &tp);
              targets = targets_tensor(b.tgt_out, b.tgt_mask, b.B, b.T, Device::cpu());
              Tensor memory = m.encode(src, sm, &sp);
              g = reference_greedy(m, std::vector<std::vector<int64_t>>(batch.size(), {1}), &memory,
                                   sm, &sp, &tp, b.T, data::Vocab::kEos);
            } else {
              data::DecoderBatch b = data::make_decoder_batch(batch);
              const models::Positions pos = random_positions(rg, b.L, maxp);
              logits = m.forward_decoder(ids_tensor(b.input, b.B, b.L, Device::cpu()),
                                         mask_tensor(b.mask, b.B, b.L, Device::cpu()), &pos);
              targets = targets_tensor(b.target, b.loss_mask, b.B, b.L, Device::cpu());
              std::vector<std::vector<int64_t>> prompts;
              for (const auto& ex : batch) prompts.push_back(data::decoder_prompt(ex.src));
              const int64_t P = static_cast<int64_t>(prompts[0].size());
              g = reference_greedy(m, prompts, nullptr, Tensor(), nullptr, &pos, b.L - P + 1,
                                   data::Vocab::kEos);
            }
            const std::vector<int64_t> tg = targets.to_int_vector();
            const std::vector<int64_t> am = argmax(logits, -1).to_int_vector();
            int64_t n = 0;
            for (size_t i = 0; i < tg.size(); ++i) {
              n += tg[i] != kIgnoreIndex;
              correct += tg[i] != kIgnoreIndex && am[i] == tg[i];
            }
            loss_sum +=
                cross_entropy(logits, targets, kIgnoreIndex, 0.0).item() * static_cast<double>(n);
            tokens += n;
            for (size_t i = 0; i < batch.size(); ++i) {
              exact += g.finished[i] && g.tokens[i] == batch[i].tgt;
              outputs.push_back(data.render(g.tokens[i]));
            }
          }
        }
      }
      exact_seen += exact > 0;
      for (const bool cache : {true, false}) {
        Generator eg(99);
        EvalOptions opt;
        opt.use_cache = cache;
        opt.keep_predictions = true;
        opt.random_positions = &eg;
        opt.random_max_position = maxp;
        const EvalResult r = evaluate_set(m, data, set, cfg, opt);
        const std::string what = arch + " " + set.name + " cache " + std::to_string(cache);
        ASSERT_EQ(r.status, "ok") << what;
        EXPECT_EQ(r.tokens, tokens) << what;
        EXPECT_NEAR(r.loss, loss_sum / static_cast<double>(tokens), 1e-12) << what;
        EXPECT_DOUBLE_EQ(r.token_accuracy,
                         static_cast<double>(correct) / static_cast<double>(tokens))
            << what;
        EXPECT_DOUBLE_EQ(r.exact_match,
                         static_cast<double>(exact) / static_cast<double>(r.examples))
            << what;
        ASSERT_EQ(r.predictions.size(), outputs.size()) << what;
        for (size_t i = 0; i < outputs.size(); ++i)
          EXPECT_EQ(r.predictions[i].output, outputs[i]) << what;
        if (!set.example_lengths.empty()) {  // per-length scores follow the regrouped examples
          double sum = 0;
          for (const auto& [len, e] : r.exact_by_length)
            sum += e * static_cast<double>(
                           std::count(set.example_lengths.begin(), set.example_lengths.end(), len));
          EXPECT_NEAR(sum / static_cast<double>(r.examples), r.exact_match, 1e-12) << what;
        }
      }
    }
    EXPECT_GT(exact_seen, 0) << arch << ": the check needs some examples decoded right";
  }
}

TEST_F(OneGreedyRandpos, SplitBeyondTheRandomRangeIsNotAvailable) {
  Config cfg = load_compare(config("decoder")).base;
  cfg.task.test_lengths = {20};  // 20 + 20 + 2 positions > 32
  cfg.train.run_dir = (dir_ / "fresh").string();
  LoadedModel lm = load_model(cfg);
  Generator g(1);
  EvalOptions opt;
  opt.random_positions = &g;
  opt.random_max_position = cfg.model.pe.randomized_max_position;
  const EvalResult r = evaluate_set(*lm.model, *lm.data, lm.data->tests().front(), cfg, opt);
  EXPECT_EQ(r.status, kNaRandomMaxPosition);
  EXPECT_TRUE(std::isnan(r.loss));
}

}  // namespace
