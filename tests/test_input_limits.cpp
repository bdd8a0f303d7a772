// pelab — issue 16, input hardening: unknown symbols in evaluation files (item 7), length caps
// and the memory estimate (11), Shaw's cost beyond the sequence length (12), config rules that
// agree with the model build (13), dynamic NTK per sequence (15), documented layouts (17).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "data/vocab.h"
#include "models/pe/pe.h"
#include "models/pe/t5_buckets.h"
#include "models/transformer.h"
#include "pelab/pelab.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/memory_estimate.h"
#include "train/model_from_config.h"
#include "train/task_data.h"
#include "train/trainer.h"
#include "tests/run_test_util.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

using pelab::testing::quiet_train;

namespace {

using pelab::testing::slurp;

// Markdown text with every run of spaces and newlines as one space (independent of wrapping).
std::string flat(const std::string& s) {
  std::string out;
  for (char c : s) {
    const char x = c == '\n' ? ' ' : c;
    if (x == ' ' && !out.empty() && out.back() == ' ') continue;
    out += x;
  }
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class HardeningInput : public pelab::testing::TempDirTest {
 protected:
  HardeningInput() : TempDirTest("pelab_hinput") {}

  // A tiny run: 1+1 layers, d_model 16, batch 8, 2 steps.
  Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> all = {
        "task.num_symbols=4",       "task.train_min_len=1",     "task.train_max_len=5",
        "task.test_lengths=[3, 7]", "task.num_eval_examples=6", "model.d_model=16",
        "model.heads=2",            "model.d_ff=32",            "model.encoder_layers=1",
        "model.decoder_layers=1",   "train.steps=2",            "train.batch_size=8",
        "train.warmup=1",           "train.log_every=1",        "train.eval_every=0",
        "train.checkpoint_every=0", "train.threads=1",          "eval.batch_size=4"};
    return pelab::testing::tiny_run_config(std::move(all), dir_, name, sets);
  }

  // A textfile task over train.tsv ("ab" -> "ba" style lines) with the given valid/test files.
  std::vector<std::string> textfile_sets(const std::vector<std::string>& extra) {
    const std::string train = write("train.tsv", "abc\tcba\nab\tba\nbca\tacb\ncab\tbac\n");
    std::vector<std::string> s = {"task.name=textfile", "task.train_file=" + train};
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  }
};

// ---------------------------------------------------------------- item 7: unknown symbols

TEST_F(HardeningInput, UnknownSymbolsInEvalFilesAreAnErrorByDefault) {
  const std::string valid = write("valid.tsv", "ab\tba\nabz\tzba\nzz\ta\n");
  try {
    TaskData d(tiny("u", textfile_sets({"task.valid_file=" + valid})));
    FAIL() << "unknown symbols in the valid file were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, valid + ":2: symbol 'z' is not in the vocabulary")) << m;
    EXPECT_TRUE(contains(m, "the file has 4 unknown symbols")) << m;
    EXPECT_TRUE(contains(m, "task.unknown_symbols: map_to_unk")) << m;
  }
  // The same for a test file.
  const std::string test = write("extra.tsv", "ab\tba\nq\tq\n");
  try {
    TaskData d(tiny("u2", textfile_sets({"task.test_files=[" + test + "]"})));
    FAIL() << "unknown symbols in a test file were accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), test + ":2: symbol 'q'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "2 unknown symbols")) << e.what();
  }
  // Known symbols only: no error.
  const std::string ok = write("ok.tsv", "cab\tbac\n");
  TaskData d(tiny("u3", textfile_sets({"task.valid_file=" + ok})));
  EXPECT_EQ(d.valid().unknown_symbols, 0);
}

TEST_F(HardeningInput, UnknownSymbolsMappedToUnkAreCountedAndReported) {
  const std::string valid = write("valid.tsv", "ab\tba\nabz\tzba\n");
  const std::string test = write("extra.tsv", "q\tq\nab\tba\n");
  Config cfg = tiny("mapped", textfile_sets({"task.valid_file=" + valid,
                                             "task.test_files=[" + test + "]",
                                             "task.unknown_symbols=map_to_unk"}));
  {
    TaskData d(cfg);
    EXPECT_EQ(d.valid().unknown_symbols, 2);
    ASSERT_EQ(d.tests().size(), 1u);
    EXPECT_EQ(d.tests()[0].unknown_symbols, 2);
    // They are scored as <unk>.
    EXPECT_EQ(d.valid().examples[1].src.back(), data::Vocab::kUnk);
  }
  TrainResult r = train(cfg, quiet_train());
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.final_eval.size(), 2u);
  EXPECT_EQ(r.final_eval[0].unknown_symbols, 2);
  EXPECT_EQ(r.final_eval[1].unknown_symbols, 2);
  const std::string js = slurp(fs::path(r.run_dir) / "eval.json");
  EXPECT_TRUE(contains(js, "\"unknown_symbols\": 2")) << js;
  const std::string log = slurp(fs::path(r.run_dir) / "train.log");
  EXPECT_TRUE(contains(log, "valid: 2 symbols not in the vocabulary scored as <unk>")) << log;
  EXPECT_TRUE(contains(log, "extra: 2 symbols not in the vocabulary scored as <unk>")) << log;
}

// ---------------------------------------------------------------- item 11: lengths and memory

TEST_F(HardeningInput, OverlongTsvLineIsAnErrorNamingFileAndLine) {
  for (size_t n : {size_t(2000), size_t(200000)}) {
    const std::string train = write("long.tsv", "ab\tba\nabc\tcba\n" + std::string(n, 'a') +
                                                    "\t" + std::string(n, 'b') + "\n");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      TaskData d(tiny("long", {"task.name=textfile", "task.train_file=" + train}));
      FAIL() << "a line of " << n << " characters was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_TRUE(contains(m, train + ":3: this example needs " + std::to_string(n + 1) +
                                  " positions")) << m;
      EXPECT_TRUE(contains(m, "task.max_example_len = 512")) << m;
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  }
  // Raising the cap admits it; the decoder layout counts source + target + 2.
  const std::string train = write("mid.tsv", "ab\tba\n" + std::string(600, 'a') + "\tb\n");
  const std::string valid = write("valid.tsv", "ab\tba\n");
  TaskData ok(tiny("mid", {"task.name=textfile", "task.train_file=" + train,
                           "task.valid_file=" + valid, "task.max_example_len=601"}));
  EXPECT_EQ(ok.train_positions(), 601);
  try {
    TaskData d(tiny("dec", {"task.name=textfile", "task.train_file=" + train,
                            "task.valid_file=" + valid, "task.max_example_len=602", "task.formulation=decoder",
                            "model.arch=decoder"}));
    FAIL() << "decoder: 603 positions passed a cap of 602";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), ":2: this example needs 603 positions")) << e.what();
  }
}

TEST_F(HardeningInput, MemoryEstimateCountsTheModelsParametersExactly) {
  struct Case {
    std::vector<std::string> sets;
  };
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"model.tie_embeddings=true"},
      {"model.arch=decoder", "task.formulation=decoder"},
      {"model.arch=decoder", "task.formulation=decoder", "model.tie_embeddings=true"},
      {"model.bias=false", "model.norm=post"},
      {"pe.scheme=learned", "pe.max_positions=40"},
      {"pe.scheme=shaw", "pe.shaw_k=5", "pe.shaw_per_head=true"},
      {"pe.scheme=shaw", "pe.shaw_values=false"},
      {"pe.scheme=t5", "pe.t5_per_layer=true", "model.encoder_layers=2"},
      {"pe.scheme=t5", "model.dtype=float64"},
      {"pe.scheme=rope"},
      {"pe.scheme=alibi"},
  };
  for (const auto& sets : cases) {
    Config cfg = tiny("m", sets);
    TaskData data(cfg);
    models::Transformer model(to_model_config(cfg, data.vocab().size(), data.train_positions()));
    const MemoryEstimate e = estimate_memory(cfg, data.vocab().size(), data.train_positions());
    EXPECT_EQ(e.parameters, static_cast<double>(model.num_parameters())) << ::testing::PrintToString(sets);
    EXPECT_EQ(e.parameter_bytes,
              e.parameters * (cfg.model.dtype == "float64" ? 8.0 : 4.0));
    EXPECT_GT(e.activation_bytes, 0.0);
  }
}

TEST_F(HardeningInput, HugeConfigurationsAreRefusedBeforeAllocating) {
  // The case: model.d_model 1e9 (vocabulary 15 of reverse over 10 symbols).
  Config big = tiny("big", {"task.num_symbols=10", "model.d_model=1000000000", "model.heads=1"});
  try {
    check_parameter_memory(big, 15, 17, 24e9);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("model.d_model=1000000000", 0), 0u) << m;
    EXPECT_TRUE(contains(m, "the parameters alone need")) << m;
    EXPECT_TRUE(contains(m, "this machine has 24.0 GB")) << m;
  }
  // The whole path (train) refuses it before building the model: no allocation of 60 GB.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    train(big, quiet_train());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.d_model=1000000000", 0), 0u) << e.what();
    EXPECT_TRUE(contains(e.what(), "the parameters alone need")) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // Activations: a small model whose micro-batch of long sequences cannot fit.
  Config longseq = tiny("long", {"train.batch_size=64"});
  check_training_memory(longseq, 10, 2001, 64e9);  // fits
  try {
    check_training_memory(longseq, 10, 2001, 1e6);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("train.batch_size=64 with sequences of 2001 positions", 0),
              0u)
        << e.what();
  }
  EXPECT_GT(machine_memory_bytes(), 1e8);
}

// ---------------------------------------------------------------- item 12: Shaw's k

TEST_F(HardeningInput, ShawTablesCostNoMoreThanTheSequenceNeeds) {
  models::PEConfig pc;
  pc.scheme = "shaw";
  pc.set("shaw_k", 100000);
  models::StackInfo si;
  si.layers = 1;
  si.d_model = 8;
  si.heads = 2;
  si.dtype = DType::Float64;
  for (bool per_head : {false, true}) {
    pc.set("shaw_per_head", per_head);
    Generator gen(7);
    auto pe = models::make_pe(pc, si, gen);
    std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6};
    models::AttnSite site;
    site.q_pos = pos;
    site.k_pos = pos;
    const auto t = pe->relative_tables(site);
    const int64_t R = per_head ? t.keys.size(1) : t.keys.size(0);
    EXPECT_EQ(R, 13) << "rows of the keys table handed to attention (2 * 7 - 1)";
    EXPECT_EQ(per_head ? t.values.size(1) : t.values.size(0), 13);
    // The parameters keep all 2k + 1 rows.
    EXPECT_EQ(pe->parameter("layers.0.rel_k").size(per_head ? 1 : 0), 200001);
  }
}

TEST_F(HardeningInput, ShawWithKBeyondTheLengthEqualsTheFullTableMath) {
  // k = 50 > L: the sliced tables give the same attention output and the same table gradients as
  // the full [2k+1] tables looked up with clip(d, -k, k) + k (the math before the change).
  for (bool per_head : {false, true}) {
    models::PEConfig pc;
    pc.scheme = "shaw";
    pc.set("shaw_k", 50);
    pc.set("shaw_per_head", per_head);
    models::StackInfo si;
    si.layers = 1;
    si.d_model = 8;
    si.heads = 2;
    si.dtype = DType::Float64;
    Generator gen(11);
    auto pe = models::make_pe(pc, si, gen);
    // Queries at 3..5 against keys 0..5 (a cached step), then a full self-attention site.
    for (int c = 0; c < 2; ++c) {
      std::vector<int64_t> qp = c == 0 ? std::vector<int64_t>{3, 4, 5}
                                       : std::vector<int64_t>{0, 1, 2, 3, 4, 5};
      std::vector<int64_t> kp = {0, 1, 2, 3, 4, 5};
      models::AttnSite site;
      site.q_pos = qp;
      site.k_pos = kp;
      const int64_t Lq = static_cast<int64_t>(qp.size()), Lk = 6, B = 2, H = 2, dh = 4;
      Generator g2(3);
      auto rnd = [&](const Shape& s) {
        Tensor x = Tensor::empty(s, DType::Float64);
        init::normal_(x, 0.0, 1.0, g2);
        return x;
      };
      const Tensor q = rnd({B, H, Lq, dh}), k = rnd({B, H, Lk, dh}), v = rnd({B, H, Lk, dh});
      const Tensor w = rnd({B, H, Lq, dh});
      std::vector<int64_t> full(static_cast<size_t>(Lq * Lk));
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j)
          full[i * Lk + j] = std::max<int64_t>(-50, std::min<int64_t>(50, kp[j] - qp[i])) + 50;
      Tensor rk = pe->parameter("layers.0.rel_k"), rv = pe->parameter("layers.0.rel_v");
      auto run = [&](bool sliced) {
        rk.zero_grad();
        rv.zero_grad();
        Tensor idx, keys, values;
        if (sliced) {
          const auto t = pe->relative_tables(site);
          idx = t.index, keys = t.keys, values = t.values;
        } else {
          idx = Tensor::from_ints(full, {Lq, Lk}), keys = rk, values = rv;
        }
        Tensor out = scaled_dot_attention(q, k, v, Tensor(), Tensor(), 0.5, -1e9, idx, keys,
                                          values);
        sum(mul(out, w)).backward();
        std::vector<double> all = out.to_vector();
        for (double g : rk.grad().to_vector()) all.push_back(g);
        for (double g : rv.grad().to_vector()) all.push_back(g);
        return all;
      };
      const std::vector<double> a = run(true), b = run(false);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-13) << i;
    }
  }
}

TEST_F(HardeningInput, ShawWithHugeKTrainsInSeconds) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainResult r = train(tiny("shawk", {"pe.scheme=shaw", "pe.shaw_k=100000", "train.steps=3",
                                       "train.batch_size=32", "task.train_max_len=12",
                                       "task.test_lengths=[12]"}),
                        quiet_train());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.finished);
  EXPECT_TRUE(std::isfinite(r.final_eval[0].loss));
  EXPECT_LT(s, 30.0) << "3 steps of shaw_k=100000 took " << s << " s";
}

// ---------------------------------------------------------------- item 13: rules = build

TEST_F(HardeningInput, T5BucketRuleAgreesWithTheModelBuild) {
  try {
    load_config_string("pe:\n  scheme: t5\n  t5_num_buckets: 2\n", "f.yaml");
    FAIL() << "t5_num_buckets 2 passed validation";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("f.yaml:3: ", 0), 0u) << e.what();
  }
  for (int nb = 2; nb <= 12; ++nb)
    for (int md = 1; md <= 8; ++md) {
      bool valid = true;
      try {
        load_config_string("pe:\n  scheme: t5\n  t5_num_buckets: " + std::to_string(nb) +
                               "\n  t5_max_distance: " + std::to_string(md) + "\n",
                           "f.yaml");
      } catch (const ConfigError&) {
        valid = false;
      }
      bool builds = nb % 2 == 0;  // even: the documented rule (the build itself accepts odd)
      try {
        models::t5_check_buckets(true, nb, md);
        models::t5_check_buckets(false, nb, md);
      } catch (const Error&) {
        builds = false;
      }
      EXPECT_EQ(valid, builds) << "num_buckets " << nb << ", max_distance " << md;
    }
}

TEST_F(HardeningInput, LearnedPositionsRuleCountsTheRealTokens) {
  // The case: decoder reverse with max_positions 17 (16 + 16 + bos + sep = 34 needed).
  const std::string yaml =
      "task:\n  formulation: decoder\nmodel:\n  arch: decoder\npe:\n  scheme: learned\n"
      "  max_positions: 17\n";
  try {
    load_config_string(yaml, "f.yaml");
    FAIL() << "max_positions 17 passed validation";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("f.yaml:7: pe.max_positions (17) must be >= 34", 0), 0u) << m;
  }
  // For every task and formulation: exactly the positions the data needs pass, one fewer fails,
  // and the model then builds and runs the longest training batch.
  for (const char* task : {"copy", "reverse", "sort", "duplicate", "addition", "count"})
    for (const char* arch : {"seq2seq", "decoder"}) {
      std::vector<std::string> sets = {std::string("task.name=") + task,
                                       std::string("task.formulation=") + arch,
                                       std::string("model.arch=") + arch, "task.train_max_len=3",
                                       "task.train_min_len=3", "pe.scheme=learned"};
      const Config probe = tiny("p", sets);
      TaskData data(probe);
      const int64_t need = data.train_positions();
      sets.push_back("pe.max_positions=" + std::to_string(need - 1));
      EXPECT_THROW(tiny("p", sets), ConfigError) << task << " " << arch;
      sets.back() = "pe.max_positions=" + std::to_string(need);
      Config cfg = tiny("p", sets);
      LoadedModel lm = load_model(cfg);
      EXPECT_NO_THROW(train(cfg, quiet_train())) << task << " " << arch;
      fs::remove_all(dir_ / "p");
    }
}

TEST_F(HardeningInput, LearnedPositionsTooShortForATextFileNameTheLine) {
  const std::string train = write("t.tsv", "ab\tba\nabcabc\tcbacba\nabc\tcba\n");
  const std::string valid = write("v.tsv", "ab\tba\n");
  for (const char* arch : {"seq2seq", "decoder"}) {
    Config cfg = tiny("tf", {"task.name=textfile", "task.train_file=" + train,
                             "task.valid_file=" + valid, "pe.scheme=learned",
                             "pe.max_positions=6", std::string("model.arch=") + arch,
                             std::string("task.formulation=") + arch});
    try {
      load_model(cfg);
      FAIL() << arch << ": 7 positions passed max_positions 6";
    } catch (const Error& e) {
      const std::string want = train + ":2: this training example needs " +
                               (std::string(arch) == "seq2seq" ? "7" : "14") + " positions";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
    }
  }
}

// ---------------------------------------------------------------- item 15: dynamic NTK

TEST_F(HardeningInput, DynamicNtkLossOfASequenceDoesNotDependOnItsBatch) {
  for (const char* arch : {"decoder", "seq2seq"}) {
    Config cfg = tiny(std::string("ntk_") + arch,
                      {std::string("model.arch=") + arch, std::string("task.formulation=") + arch,
                       "pe.scheme=rope", "pe.rope_scaling=dynamic_ntk",
                       "pe.rope_scaling_factor=2", "pe.rope_train_length=4",
                       "model.dtype=float64", "task.train_min_len=1", "task.train_max_len=9",
                       "task.num_eval_examples=12"});
    LoadedModel lm = load_model(cfg);
    lm.model->eval();
    const EvalSet& valid = lm.data->valid();  // lengths 1..9 mixed
    ASSERT_GE(valid.examples.size(), 12u);
    EvalOptions no_decode;
    no_decode.decode = false;
    // Each example alone vs. the whole set in one batch of 64: per-example losses summed over
    // tokens must agree.
    Config one = cfg, many = cfg;
    one.eval.batch_size = 1;
    many.eval.batch_size = 64;
    const EvalResult a = evaluate_set(*lm.model, *lm.data, valid, one, no_decode);
    const EvalResult b = evaluate_set(*lm.model, *lm.data, valid, many, no_decode);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_NEAR(a.loss, b.loss, 1e-12) << arch;
    EXPECT_NEAR(a.token_accuracy, b.token_accuracy, 1e-12) << arch;
    // And a single sequence gets the same loss alone as inside the batch with its mates.
    EvalSet single;
    single.name = "one";
    single.examples = {valid.examples[0]};
    EvalSet mates = single;
    for (const auto& ex : valid.examples) mates.examples.push_back(ex);
    const EvalResult s1 = evaluate_set(*lm.model, *lm.data, single, many, no_decode);
    const EvalResult s2 = evaluate_set(*lm.model, *lm.data, mates, many, no_decode);
    const EvalResult rest = evaluate_set(*lm.model, *lm.data, valid, many, no_decode);
    const double together = s2.loss * static_cast<double>(s2.tokens);
    EXPECT_NEAR(together - rest.loss * static_cast<double>(rest.tokens),
                s1.loss * static_cast<double>(s1.tokens), 1e-9)
        << arch;
  }
}

// ---------------------------------------------------------------- item 17: documented layouts

TEST_F(HardeningInput, DocsStateTheLayoutsTheCodeUses) {
  const std::string model = flat(slurp(fs::path(pelab::testing::source_dir()) / "docs" / "model.md"));
  const std::string training = flat(slurp(fs::path(pelab::testing::source_dir()) / "docs" / "training.md"));
  const std::string config = flat(slurp(fs::path(pelab::testing::source_dir()) / "docs" / "config.md"));
  // Special ids.
  const std::string ids = "`<pad>` = " + std::to_string(data::Vocab::kPad) + ", `<bos>` = " +
                          std::to_string(data::Vocab::kBos) + ", `<eos>` = " +
                          std::to_string(data::Vocab::kEos) + ", `<unk>` = " +
                          std::to_string(data::Vocab::kUnk) + ", `<sep>` = " +
                          std::to_string(data::Vocab::kSep);
  EXPECT_TRUE(contains(training, ids)) << "docs/training.md lacks: " << ids;
  // The decoder-only layout, with the position count the code uses.
  const data::DecoderBatch b = data::make_decoder_batch({data::Example{{7, 8}, {9}, {}, {}}});
  EXPECT_EQ(b.L, data::example_positions(2, 1, true));
  EXPECT_EQ(b.input, (std::vector<int64_t>{data::Vocab::kBos, 7, 8, data::Vocab::kSep, 9}));
  EXPECT_TRUE(contains(training, "`<bos>` source `<sep>` target")) << "decoder layout";
  // The lm split and tied embeddings.
  EXPECT_TRUE(contains(training, "N·(1 − 2v)")) << "lm split";
  EXPECT_TRUE(contains(config, "one tensor serves the encoder and decoder embeddings and the "
                               "output projection"))
      << "tie_embeddings";
  // Shaw's per-head tables.
  EXPECT_TRUE(contains(model, "[H, 2k+1, dh]")) << "Shaw per-head shape";
}

}  // namespace
