// pelab — length-extrapolation comparisons (`pelab compare`, docs/experiments.md): one config
// names a task, a list of schemes (each a set of overrides on the base config), seeds and
// eval-time variants; every scheme × seed is trained the same way (finished runs are reused,
// interrupted ones resumed), evaluated at every test length, and a report is written
// (train/study/report.h).
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
//     jobs: 2                          # runs trained at once, each in its own process
//                                      # (default: the number of cores; --jobs N overrides)
//     search:                          # optional hyper-parameter grid (product of the lists),
//       train.lr: [5e-4, 1e-3, 2e-3]   # every candidate trained with every seed, chosen per
//                                      # scheme on the in-distribution validation split only
//
// `compare.jobs` / `--jobs N`: independent runs are trained concurrently by child processes
// (`pelab compare CONFIG --only I` of the running binary, output in runs/<run>/compare.log); the
// report is the one `--jobs 1` writes (each run is deterministic for its train.threads). Ctrl-C
// or SIGTERM is forwarded to the children (they checkpoint) and the comparison exits 130.
// `--plan` lists the runs (index, name, seed, config digest) and trains nothing; `--only I,J`
// trains and evaluates just those runs (1-based, as --plan numbers them) and writes no report;
// `--report-only` writes the report from the finished runs and fails naming the missing ones.
// `--merge DIR...` (CompareOptions::merge) gathers the records (train/study/run_record.h) of slices
// run into other output folders into this one and writes the report as --report-only does.
// `--archive` then also writes the folder's records.tar.xz (its finished runs' records in one
// file), which stands for the runs its runs/ lacks wherever a folder's runs are read.
// `--emit-slurm DIR` writes the same comparison as a Slurm job array (train/study/slurm.h; resources in
// the optional compare.slurm section).
//
// `compare.search` keys may only change training (model.*, pe.* except the eval-time RoPE
// scaling keys, train.* except seed/run_dir/run_name/resume/stop_when and the logging,
// checkpoint, thread and device keys); task.*, eval.* and compare.* are rejected. Each candidate's
// runs are runs/<scheme>@<key>=<value>[,...]_seed<N>. A candidate's score is the mean over seeds
// of the task's primary metric on the run's final `valid` split (eval.json: exact_match, loss for
// lm); equal scores go to the candidate with more runs that met train.stop_when, then fewer steps
// to it, then the one listed first. Only the chosen candidate's runs are evaluated on
// the test lengths; they are the scheme's rows of the report, which also gets a table of every
// candidate's validation score.
//
// A top-level `literature:` section (train/study/literature.h) adds the papers' figures next to ours
// (report.md "Against the literature", literature.csv); it never enters a run's config.
//
// `pe.rope_scaling_factor: auto` = (positions of the longest test sequence) / (positions of the
// longest training sequence). A variant without `schemes:` applies to every scheme whose pe.scheme
// is rope. Command-line `--set section.key=value` overrides change the base config (before the
// per-scheme settings); `--set compare.seeds=[1]`, `compare.out=DIR`, `compare.title=T`,
// `compare.jobs=N` change the compare section.
//
// Layout of the report directory:
//   results.csv, report.md, table_<metric>.csv, <metric>_vs_length.{png,dat,csv}, literature.csv,
//   train_loss.{png,dat,csv}, compare.yaml (the config as given), runs/<scheme>_seed<N>/ (a normal
//   run directory plus compare_eval/<variant>.csv, the cached evaluation, record.json, the run's
//   record (run_record.h: a run without checkpoints/ is reused from it), and compare.log, the
//   output of the child process that trained it with --jobs > 1).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/study/literature.h"
#include "train/study/report.h"
#include "train/study/slurm.h"

namespace YAML {
class Node;
}

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
  std::vector<std::string> schemes;  // scheme names it applies to; empty = every scheme that
                                     // declares the pe.* keys it sets (every scheme trained with
                                     // randomized positions for `positions: random`)
  // "random": evaluate with the positions drawn as in training with pe.randomized_positions (a
  // sorted random subset of [0, pe.randomized_max_position) per batch and stack), as Ruoss et al.
  // (2023) do at test time; "" = positions 0..L-1 (pelab eval's protocol).
  std::string positions;
};

// One key of compare.search and the values it takes.
struct CompareSearchKey {
  std::string key;                  // "train.lr"
  std::vector<std::string> values;  // YAML text of each value, as written
  std::string where;                // "FILE:LINE"
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
  std::vector<CompareSearchKey> search;  // compare.search (empty = none)
  int64_t jobs = 0;                      // compare.jobs (0 = not set: the number of cores)
  std::vector<std::string> overrides;    // every --set as given (compare.* included)
  SlurmSettings slurm;                   // compare.slurm (train/study/slurm.h; --emit-slurm only)
  // The top-level `literature:` section (train/study/literature.h): never part of a run's config.
  std::vector<LiteratureEntry> literature;
};

// Loads a compare config (a run config plus a `compare:` section). `overrides` are
// "section.key=value" (compare.* keys included). Throws ConfigError naming FILE:LINE or the key.
CompareSpec load_compare(const std::string& path, const std::vector<std::string>& overrides = {});
CompareSpec load_compare_string(const std::string& yaml, const std::string& source,
                                const std::vector<std::string>& overrides = {});
// The same from the file already parsed (parse_config_yaml, train/config.h): `root` holds the run
// config's sections, compare: and an optional literature:; `text` is the config shown in the
// report.
CompareSpec load_compare_node(const YAML::Node& root, const std::string& text,
                              const std::string& source,
                              const std::vector<std::string>& overrides = {});

// The report's row names: every scheme, then scheme+variant for each eval-time variant that
// applies to it (as compare_plan decides), in report order.
std::vector<std::string> compare_row_labels(const CompareSpec& spec);

// The test splits an evaluation covers, in the order the task builds them: (split, length), e.g.
// ("len_24", 24), ("ctx_128", 128), (a test file's stem, 0). A cached evaluation holds exactly these.
using PlannedTests = std::vector<std::pair<std::string, int64_t>>;
// An eval-time variant of one run: its name, the evaluation config, the position protocol, its
// tests.
struct ComparePlanVariant {
  std::string name;
  Config cfg;
  bool random_positions = false;
  PlannedTests tests;
};
// One run of the plan: its config (train.seed, train.run_dir, train.run_name set).
struct ComparePlanRun {
  std::string scheme;
  int64_t seed = 0;
  // compare.search: the candidate's label ("lr=0.001"), its index in the grid and its settings;
  // "" / 0 / {} without a search.
  std::string candidate;
  size_t candidate_index = 0;
  std::vector<std::string> candidate_sets;
  Config cfg;
  PlannedTests tests;  // of the run as trained
  std::vector<ComparePlanVariant> variants;
};
// Resolves every scheme × search candidate × seed (and its variants) without training anything;
// validates them all.
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
  // Runs trained at once by child processes (0 = compare.jobs, else the number of cores); 1 =
  // every run in this process, one after another.
  int64_t jobs = 0;
  // The pelab binary the children run ("" = the one set_compare_child_binary() registered; with
  // neither, every run is trained in this process whatever `jobs` says).
  std::string exe;
  // Indexes (0-based) of the only runs to train and evaluate; no report is written. Empty = all.
  std::vector<size_t> only;
  // --expect-config DIGEST (with exactly one --only run): train nothing unless that run's config
  // digest (as --plan prints it) is DIGEST. A comparison gives its child processes the digest it
  // planned, so a config file edited while the comparison runs makes its child fail, never train
  // another run in the planned one's place.
  std::string expect_config;
  bool report_only = false;  // train nothing: report the finished runs, list the missing ones
  // --merge DIR...: output folders of slices of this comparison made elsewhere. The records
  // (train/study/run_record.h) of the plan's finished runs in each DIR/runs/ (or its
  // records.tar.xz) are checked and copied into out/runs/, then the report is written as with
  // report_only. Never written to.
  std::vector<std::string> merge;
  // The folder inside each --merge folder that holds this comparison's runs/ ("" = none; a suite's
  // task name), opened without following a link as the rest of a merged folder.
  std::string merge_sub;
  // --archive: once the report is written, also write out/records.tar.xz, the records of its
  // finished runs (train/study/run_record.h), which --merge, reuse and --report-only read back.
  bool archive = false;
};

struct CompareResult {
  std::string out_dir;
  bool interrupted = false;
  int64_t trained = 0, resumed = 0, reused = 0;  // runs trained afresh / resumed / reused
  int64_t evaluated = 0, eval_cached = 0;        // run × variant evaluations done / from the cache
  std::vector<ResultRow> rows;
  ReportFiles report;
  std::vector<std::string> missing;  // report_only: the runs that are not finished
  // --merge: one line per record refused (another config or pelab version, a symbolic link, an
  // unreadable or out-of-range file); no report is written when there is any.
  std::vector<std::string> refused;
  // compare.search: the chosen candidate's label per scheme.
  std::map<std::string, std::string> chosen;
  // Runs ("scheme seed N") that missed their stop criterion, schemes expected not to learn left
  // out; with compare.unconverged: fail, compare_cli fails naming them (after the report).
  std::vector<std::string> unconverged;
};

// `--plan`: one line per run (index, run name, scheme, seed, config digest, state).
std::string compare_plan_text(const CompareSpec& spec, const std::string& out_dir);

// The binary whose `compare CONFIG --only I` trains one run as a child process (--jobs > 1). The
// pelab executable's main() registers itself ("/proc/self/exe"); other programs calling
// run_compare / compare_cli (the test binary) do not, so they never start copies of themselves.
void set_compare_child_binary(const std::string& path);
const std::string& compare_child_binary();  // "" when none was set

CompareResult run_compare(const CompareSpec& spec, const CompareOptions& opt = {});

// --merge (train/study/compare_merge.cpp): the lines refusing it when the report folder `out_dir`
// lies in (or is) one of the merged folders `dirs` — pelab would write into it; empty when none
// does. run_compare and run_suite check it before they create anything.
std::vector<std::string> merge_out_problems(const std::vector<std::string>& dirs,
                                            const std::string& out_dir);

// For train/study/suite.cpp: parses a `set:` mapping of section.key: value into
// "section.key=value" strings (errors name FILE:LINE and `what`); tells whether a name can name a
// directory (letters, digits, _ - + .; not "." or "..").
std::vector<std::string> parse_config_set_map(const YAML::Node& n, const std::string& source,
                                              const std::string& what);
bool safe_run_name(const std::string& s);
// The name of a list entry ({name, set, ...}), after checking its keys: each one of `valid`, else
// one line naming FILE:LINE, `what` ("suite.tasks[2]"), the key and the nearest valid one; a
// missing or non-scalar name is "WHAT needs a name" at the entry's FILE:LINE.
std::string entry_name(const YAML::Node& e, const std::vector<std::string>& valid,
                       const std::string& what, const std::string& source);

// The `compare:` section's keys for docs/config.md (`pelab config-reference`), as compare_spec.cpp
// declares and reads them (train/config_schema.h).
ConfigReferenceSection compare_reference_section();

// `pelab compare` (train/study/compare_cli.cpp; args: argv[1..], args[0] is the verb; parsed by
// train/command_line.h). Returns the exit status; usage errors print "pelab: error: ..." and
// return 2, other errors are thrown.
int compare_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace pelab
