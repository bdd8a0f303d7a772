// pelab — length-extrapolation comparisons (`pelab compare`, docs/experiments.md): one config
// names a task, a list of schemes (each a set of overrides on the base config), seeds and
// eval-time variants; every scheme × seed is trained the same way (finished runs are reused,
// interrupted ones resumed), evaluated at every test length, and a report is written
// (train/report.h).
//
// The config is a normal run config (task/model/pe/train/eval, train/config.h) plus a `compare:`
// section:
//
//   compare:
//     title: "Reverse, train 1-16"     # optional
//     out: reports/quick               # report directory (default reports/<config stem>)
//     seeds: [1, 2]                    # train.seed of each run (default [train.seed])
//     metric: auto                     # auto (exact_match; perplexity for lm) | exact_match |
//                                      # token_accuracy | perplexity | loss
//     unconverged: report              # runs that missed their stop criterion (train.stop_when):
//                                      #   report = keep them, marked † in every table and as
//                                      #   open points in the plots; exclude = leave them out of
//                                      #   means and intervals (the tables say how many); fail =
//                                      #   write the report, then fail naming them (exit 1)
//     schemes:                         # rows; a plain name means {name: X, set: {pe.scheme: X}}
//       - rope
//       - {name: learned, set: {pe.scheme: learned, pe.max_positions: 24}}
//       - {name: rope+rand, set: {pe.scheme: rope, pe.randomized_positions: true}}
//       - {name: none, set: {pe.scheme: none}, expect: cannot_learn,
//          why: "no positions in an encoder-decoder"}   # still run and shown, marked ‡ with the
//                                      #   reason; never excluded and never a cause of `fail`
//     variants:                        # eval-time variants (no retraining)
//       - pi                           # pi | ntk | dynamic_ntk | yarn: {pe.rope_scaling: X,
//                                      #   pe.rope_scaling_factor: auto} for every rope scheme
//       - {name: yarn2, set: {pe.rope_scaling: yarn, pe.rope_scaling_factor: 2}, schemes: [rope]}
//       - randpos                      # = {name: randpos, positions: random}: schemes trained with
//                                      # randomized positions, evaluated with random positions too
//
// `pe.rope_scaling_factor: auto` = (positions of the longest test sequence) / (positions of the
// longest training sequence). A variant without `schemes:` applies to every scheme whose pe.scheme
// is rope. Command-line `--set section.key=value` overrides change the base config (before the
// per-scheme settings); `--set compare.seeds=[1]`, `compare.out=DIR`, `compare.title=T` change the
// compare section.
//
// Layout of the report directory:
//   results.csv, report.md, table_<metric>.csv, <metric>_vs_length.{png,dat,csv},
//   train_loss.{png,dat,csv}, compare.yaml (the config as given), runs/<scheme>_seed<N>/ (a normal
//   run directory plus compare_eval/<variant>.csv, the cached evaluation).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/report.h"

namespace pelab {

struct CompareScheme {
  std::string name;
  std::vector<std::string> sets;  // "section.key=value" applied to the base config
  std::string where;              // "FILE:LINE" of the entry (messages)
  // `expect: cannot_learn` with `why:` — the scheme cannot learn the task by construction.
  bool cannot_learn = false;
  std::string why;
};

struct CompareVariant {
  std::string name;
  std::vector<std::string> sets;     // eval-time overrides ("pe.rope_scaling_factor=auto" allowed)
  std::vector<std::string> schemes;  // scheme names it applies to; empty = every rope scheme
                                     // (every scheme trained with randomized positions for
                                     // `positions: random`)
  // "random": evaluate with the positions drawn as in training with pe.randomized_positions (a
  // sorted random subset of [0, pe.randomized_max_position) per batch and stack), as Ruoss et al.
  // (2023) do at test time; "" = positions 0..L-1 (pelab eval's protocol).
  std::string positions;
};

struct CompareSpec {
  Config base;              // base config with the command-line overrides applied
  std::string source;       // the config file
  std::string config_text;  // the file as given
  std::vector<std::string> cli_sets;
  std::string title, out, metric = "auto";
  std::string unconverged = "report";  // compare.unconverged: report | exclude | fail
  std::vector<int64_t> seeds;
  std::vector<CompareScheme> schemes;
  std::vector<CompareVariant> variants;
};

// Loads a compare config (a run config plus a `compare:` section). `overrides` are
// "section.key=value" (compare.* keys included). Throws ConfigError naming FILE:LINE or the key.
CompareSpec load_compare(const std::string& path, const std::vector<std::string>& overrides = {});
CompareSpec load_compare_string(const std::string& yaml, const std::string& source,
                                const std::vector<std::string>& overrides = {});

// An eval-time variant of one run: its name, the evaluation config, the position protocol.
struct ComparePlanVariant {
  std::string name;
  Config cfg;
  bool random_positions = false;
};
// One run of the plan: its config (train.seed, train.run_dir, train.run_name set).
struct ComparePlanRun {
  std::string scheme;
  int64_t seed = 0;
  Config cfg;
  std::vector<ComparePlanVariant> variants;
};
// Resolves every scheme × seed (and its variants) without training anything; validates them all.
std::vector<ComparePlanRun> compare_plan(const CompareSpec& spec, const std::string& out_dir);

struct CompareOptions {
  std::string out;       // report directory ("" = compare.out)
  int progress = -1;     // per-run progress: TrainOptions::progress
  bool retrain = false;  // train every run afresh (overwrite)
  bool plots = true;
  std::string command;  // the command line, recorded in report.md
  // Test hook: the first run that needs training stops after this many steps in total, and the
  // comparison stops there as if interrupted (-1 = off).
  int64_t stop_after = -1;
  std::ostream* log = nullptr;  // progress lines ("[3/14] training shaw seed 2 ..."); null = stderr
};

struct CompareResult {
  std::string out_dir;
  bool interrupted = false;
  int64_t trained = 0, resumed = 0, reused = 0;  // runs trained afresh / resumed / reused
  int64_t evaluated = 0, eval_cached = 0;        // run × variant evaluations done / from the cache
  std::vector<ResultRow> rows;
  ReportFiles report;
  // Runs ("scheme seed N") that missed their stop criterion, schemes expected not to learn left
  // out; with compare.unconverged: fail, compare_cli fails naming them (after the report).
  std::vector<std::string> unconverged;
};

CompareResult run_compare(const CompareSpec& spec, const CompareOptions& opt = {});

// `pelab compare` and `pelab plot-pe` (args: argv[1..], args[0] is the verb). Return the exit
// status; usage errors print "pelab: error: ..." and return 2, other errors are thrown.
int compare_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace pelab
