// pelab — pictures of the positional encodings (`pelab plot-pe`, docs/experiments.md), computed
// with pelab's own PE modules (make_pe) and, with a trained run, from its checkpoint: each picture
// is a PNG (gnuplot) next to the CSV behind it.
//
//   sinusoidal_heatmap     PE[position, dim] of the sinusoidal table
//   rope_decay             RoFormer's long-range decay bound (1/(d/2))·Σ_j |Σ_{i<j} e^{i·r·θ_i}| vs
//                          relative distance r, for plain RoPE and its pi / ntk / yarn scalings,
//                          and the score q'·k'/d of constant q = k through the rope module
//   t5_buckets             relative position -> bucket (bidirectional and unidirectional)
//   alibi_bias             the ALiBi bias −m_h·(i − j) per head vs distance
//   with --run RUN_DIR (a trained run; pictures for its scheme):
//   t5_bias_<stack>        learned T5 bias per head vs relative position
//   shaw_<stack>           Shaw key/value tables per layer ([2k+1] × head_dim heatmaps)
//   learned_positions      the learned absolute table and the cosine similarity of its positions
//   attention_<stack>_<kind>_layer<l>  attention probabilities per head for --input (default: the
//                          first example of the run's longest test length)
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace pelab {

struct Config;

struct PlotPeOptions {
  std::string out = "reports/pe";
  std::string run;         // a run directory ("" = only the scheme pictures)
  std::string input;       // source text for the attention maps ("" = a test example)
  std::string checkpoint;  // "" = the run's newest checkpoint
  bool plots = true;       // call gnuplot (else only the CSV / .dat files)
  bool run_only = false;   // with a run: skip the scheme pictures that do not depend on it
  // The most the attention maps of a run may write (CSV + .dat; --max-output-mb): they grow with
  // the square of the input's length, so a long --input (or a received run's long test length) is
  // refused before anything is decoded or written.
  double max_output_bytes = 256e6;
  // Sizes of the scheme pictures without a run.
  int64_t positions = 128, d_model = 128, heads = 8, rotation_dims = 128, distance = 1024;
};

struct PlotPeResult {
  std::vector<std::string> pngs, csvs;
  std::string note;  // plots skipped and why
  std::vector<std::string> failed;  // plots gnuplot could not draw, each with its reason
};

PlotPeResult plot_pe(const PlotPeOptions& opt);

// Bytes the attention maps of a sequence of `source` + `target` positions (decoder-only: source 0)
// write for a model with cfg's layers and heads: every layer's (and seq2seq: encoder, decoder self
// and cross) [heads, Lq, Lk] probabilities, each entry a CSV row and a .dat number
// (kAttentionMapEntryBytes at most).
constexpr double kAttentionMapEntryBytes = 64;
double attention_maps_bytes(const Config& cfg, int64_t source, int64_t target);

// `pelab plot-pe` (args[0] == "plot-pe"; parsed by train/command_line.h). Returns the exit status;
// usage errors print "pelab: error: ..." and return 2, other errors are thrown (a plot that gnuplot
// could not draw among them, after the files that were written are listed).
int plot_pe_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace pelab
