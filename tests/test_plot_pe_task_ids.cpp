// pelab — `pelab plot-pe --run` on a run whose task gives the positions (task.position_ids,
// docs/tasks.md): the attention maps must be those of the model on the task's IDs, the positions
// it was trained and evaluated on. Before the fix plot-pe fed 0..L-1 to such a model and drew the
// attention (and decoded the output) of a model the run never was, silently. Checked here: the
// drawn probabilities equal a forward pass with the example's IDs (decoder_position_ids) and
// differ from one with 0..L-1 (the fault), the decoded answer is the evaluation's, and --input
// (a bare text, which has no IDs) is refused with one line naming the keys.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/batch.h"
#include "models/transformer.h"
#include "pelab/autograd.h"
#include "tests/run_test_util.h"
#include "tests/test_util.h"
#include "train/run_folder.h"
#include "train/study/plot_pe.h"
#include "train/task_data.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {
namespace {

class PlotPeTaskIds : public pelab::testing::TempDirTest {
 protected:
  PlotPeTaskIds() : TempDirTest("pelab_plot_pe_task_ids") {}
};

TEST_F(PlotPeTaskIds, DecoderAttentionMapsUseTheTasksPositionIds) {
  const Config cfg = pelab::testing::tiny_run_config(
      {"task.name=addition_reversed", "task.formulation=decoder", "task.train_max_len=3",
       "task.test_lengths=[4]", "task.num_eval_examples=4", "task.position_ids=coupled",
       "model.arch=decoder", "model.d_model=16", "model.heads=2", "model.d_ff=32",
       "model.decoder_layers=1", "pe.scheme=shaw", "pe.shaw_k=2", "train.steps=20",
       "train.batch_size=8", "train.warmup=2", "train.lr=0.01", "train.eval_every=0",
       "train.threads=1", "eval.batch_size=4"},
      dir_, "coupled", {});
  const TrainResult run = train(cfg, pelab::testing::quiet_train());
  ASSERT_TRUE(run.finished);

  PlotPeOptions o;
  o.out = (dir_ / "pe").string();
  o.run = run.run_dir;
  o.run_only = true;
  o.plots = false;
  plot_pe(o);
  const auto drawn =
      pelab::testing::read_attention_csv(dir_ / "pe" / "attention_decoder_self_layer0.csv");
  ASSERT_FALSE(drawn.empty());

  // The same model on the first example of the longest test length (the one plot-pe draws),
  // decoded greedily and run forward with the task's IDs, and with 0..L-1.
  LoadedModel lm = load_model(cfg, latest_checkpoint(run.run_dir));
  const data::Example& ex = lm.data->tests().back().examples.front();
  ASSERT_FALSE(ex.src_pos.empty());
  std::vector<int64_t> seq = data::decoder_prompt(ex.src);
  const int64_t budget = static_cast<int64_t>(ex.tgt.size()) + 1;
  models::GreedyPositions gp;
  gp.tgt = models::Positions(data::decoder_position_ids(ex, budget));
  const models::GreedyResult g = models::greedy_decode(*lm.model, {seq}, budget, true, {}, &gp);
  for (int64_t t : g.tokens[0]) seq.push_back(t);
  const int64_t L = static_cast<int64_t>(seq.size());
  auto probs = [&](const models::Positions* pos) {
    NoGradGuard ng;
    lm.model->eval();
    auto& attn = *lm.model->decoder->layers->at<models::DecoderLayer>(0).self_attn;
    attn.keep_probs = true;
    (void)lm.model->forward_decoder(Tensor::from_ints(seq, {1, L}), Tensor(), pos);
    attn.keep_probs = false;
    return attn.last_probs.to_vector();  // [1, H, L, L]
  };
  const models::Positions ids(data::decoder_position_ids(ex, L - static_cast<int64_t>(ex.src_pos.size())));
  const std::vector<double> with_ids = probs(&ids), sequential = probs(nullptr);
  double worst = 0, differs = 0;
  for (int h = 0; h < 2; ++h)
    for (int64_t q = 0; q < L; ++q)
      for (int64_t k = 0; k <= q; ++k) {
        const auto it = drawn.find({h + 1, static_cast<int>(q), static_cast<int>(k)});
        ASSERT_NE(it, drawn.end()) << "head " << h + 1 << " query " << q << " key " << k;
        const size_t i = static_cast<size_t>((h * L + q) * L + k);
        worst = std::max(worst, std::fabs(it->second - with_ids[i]));
        differs = std::max(differs, std::fabs(it->second - sequential[i]));
      }
  EXPECT_LE(worst, 1e-5) << "plot-pe did not draw the attention on the task's IDs";
  EXPECT_GT(differs, 1e-3) << "0..L-1 and the task's IDs give the same maps: the test proves nothing";

  // --input has no IDs: refused, naming the keys.
  o.input = "12+34";
  try {
    plot_pe(o);
    FAIL() << "--input accepted for a run with task position IDs";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--input cannot be used"), std::string::npos) << m;
    EXPECT_NE(m.find("task.position_ids coupled"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace pelab
