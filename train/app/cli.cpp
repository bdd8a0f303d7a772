// pelab — command-line verbs (cli.h).
#include "train/app/cli.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "data/batch.h"
#include "data/error.h"
#include "models/info.h"
#include "models/pe/pe.h"
#include "pelab/blas_kernels.h"
#include "pelab/pelab.h"
#include "pelab/strings.h"
#include "train/command_line.h"
#include "train/config.h"
#include "train/distributed.h"
#include "train/evaluate.h"
#include "train/study/compare.h"
#include "train/study/literature.h"
#include "train/study/plot_pe.h"
#include "train/study/suite.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

const char* kUsage =
    "usage: pelab <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG             train a model as described by a YAML config (or --resume RUN_DIR)\n"
    "  eval CONFIG|RUN_DIR      evaluate a trained model on every test split\n"
    "  generate RUN_DIR         greedy-decode one source per line of stdin\n"
    "  info CONFIG|RUN_DIR      parameter count per module and a config summary\n"
    "  config-reference         print every config key (markdown; docs/config.md)\n"
    "  demo                     train a tiny MLP on XOR with the engine (smoke test)\n"
    "  compare CONFIG           train and evaluate several schemes, write a report (tables, plots);\n"
    "                           --emit-slurm DIR: the same as a Slurm job array\n"
    "  plot-pe                  pictures of the positional encodings (and of a trained run)\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help (pelab COMMAND --help for a command)\n"
    "  --version                print the version\n"
    "\n"
    "Config values can be overridden with --set section.key=value (repeatable), e.g.\n"
    "  pelab train configs/reverse.yaml --set pe.scheme=rope --set train.steps=500\n";

const char* kTrainHelp =
    "usage: pelab train CONFIG [--set section.key=value]... [--stop-after N] [--overwrite]\n"
    "                   [--progress auto|bar|lines|none]\n"
    "       pelab train [CONFIG] --resume RUN_DIR|CHECKPOINT [--set section.key=value]...\n"
    "                   [--stop-after N] [--progress auto|bar|lines|none]\n"
    "\n"
    "Trains the model described by CONFIG in the run directory <train.run_dir>/<train.run_name>\n"
    "(config.yaml, metrics.jsonl, metrics.csv, eval.json, eval.csv, train.log, checkpoints/).\n"
    "A resumed run continues with its own stored config (RUN_DIR/config.yaml); CONFIG is then\n"
    "optional and not used for settings, and --set may change only train.steps, the logging,\n"
    "evaluation and checkpoint cadence, threads, device, divergence limits, tags and eval.*.\n"
    "Exit status: 0 finished or stopped by --stop-after, 130 interrupted (SIGINT, SIGTERM,\n"
    "SIGHUP; a checkpoint is written), 1 an error (divergence, a failed write), 2 a usage error.\n"
    "\n"
    "options:\n"
    "  --set section.key=value  override a config key (repeatable)\n"
    "  --resume PATH            continue the run in PATH (a run directory: its newest checkpoint;\n"
    "                           or RUN_DIR/checkpoints/FILE); results equal an uninterrupted run\n"
    "  --stop-after N           stop after N steps in total with a checkpoint (exit status 0;\n"
    "                           continue with --resume)\n"
    "  --overwrite              replace an existing run in the run directory\n"
    "  --progress MODE          auto (bar on a terminal, else lines), bar, lines or none\n"
    "  -h, --help               show this help\n";

const char* kEvalHelp =
    "usage: pelab eval CONFIG|RUN_DIR [--set section.key=value]... [--checkpoint best|last|PATH]\n"
    "                  [--out DIR] [--no-cache]\n"
    "\n"
    "Evaluates a trained model on the validation split and every test split (token accuracy,\n"
    "exact match by greedy decoding, loss, perplexity) and prints a table. With a run directory\n"
    "its config.yaml is used; with a config file, the run directory it names. Eval-time overrides\n"
    "(e.g. --set pe.rope_scaling=yarn --set pe.rope_scaling_factor=2, or task.test_lengths) need no\n"
    "retraining; overrides that change parameter shapes give a checkpoint error.\n"
    "\n"
    "options:\n"
    "  --set section.key=value  override a config key (repeatable)\n"
    "  --checkpoint C           best (default: best.h5 if present, else the newest), last, or a path\n"
    "  --out DIR                also write eval.json and eval.csv to DIR\n"
    "  --no-cache               greedy decoding without the KV cache (slower; same results\n"
    "                           except rope dynamic_ntk beyond pe.rope_train_length, see\n"
    "                           docs/model.md)\n"
    "  -h, --help               show this help\n";

const char* kGenerateHelp =
    "usage: pelab generate RUN_DIR [--set section.key=value]... [--checkpoint best|last|PATH]\n"
    "                      [--max-len N]\n"
    "\n"
    "Reads one source per line on stdin and prints the greedy decoded output, one line each.\n"
    "Sources are written like the task's data: symbols of a synthetic task (one character each\n"
    "when every symbol is one character, e.g. 31415 for reverse; else space-separated), text of a\n"
    "textfile task (task.tokenization), or a prompt for the lm task (its continuation is printed,\n"
    "with newlines written as \\n).\n"
    "\n"
    "options:\n"
    "  --set section.key=value  override a config key (repeatable)\n"
    "  --checkpoint C           best (default), last, or a checkpoint path\n"
    "  --max-len N              longest output (default eval.max_decode_len, or 2*length+8; lm 100)\n"
    "  -h, --help               show this help\n";

const char* kInfoHelp =
    "usage: pelab info CONFIG|RUN_DIR [--set section.key=value]... [--yaml]\n"
    "\n"
    "Prints a summary of the resolved config and the model's parameter count per module.\n"
    "\n"
    "options:\n"
    "  --set section.key=value  override a config key (repeatable)\n"
    "  --yaml                   print the full resolved config (YAML) as well\n"
    "  -h, --help               show this help\n";

const char* kConfigRefHelp =
    "usage: pelab config-reference\n"
    "\n"
    "Prints the reference of every config key (type, default, range, meaning), the cross-field\n"
    "rules and the --set syntax, as markdown (this is docs/config.md).\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help\n";

const char* kDemoHelp =
    "usage: pelab demo\n"
    "\n"
    "Trains a tiny MLP on XOR with the engine (a smoke test); exit status 0 when it learns.\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help\n";

const CommandSpec kTrainSpec{"train", {"--resume", "--stop-after", "--progress"}, {"--overwrite"}, true};
const CommandSpec kEvalSpec{"eval", {"--checkpoint", "--out"}, {"--no-cache"}, true};
const CommandSpec kGenerateSpec{"generate", {"--checkpoint", "--max-len"}, {}, true};
const CommandSpec kInfoSpec{"info", {}, {"--yaml"}, true};
const CommandSpec kConfigRefSpec{"config-reference", {}, {}, false};
const CommandSpec kDemoSpec{"demo", {}, {}, false};

// A config file, or the config.yaml of a run directory. Sets *run_dir for a run directory.
Config load_target(const std::string& verb, const std::string& target,
                   const std::vector<std::string>& sets, std::string* run_dir) {
  std::error_code ec;
  if (fs::is_directory(target, ec)) {
    if (!is_run_directory(target))
      throw Error(verb + ": " + target + " is a directory but not a run directory (no config.yaml)");
    if (run_dir) *run_dir = target;
    return load_config((fs::path(target) / "config.yaml").string(), sets);
  }
  if (!fs::exists(target, ec))
    throw Error(verb + ": no such config file or run directory: " + target);
  Config cfg = load_config(target, sets);
  if (run_dir) *run_dir = run_directory(cfg);
  return cfg;
}

std::string choose_checkpoint(const std::string& verb, const std::string& run_dir,
                              const std::string& choice) {
  std::string path;
  if (choice.empty() || choice == "best")
    path = best_or_latest_checkpoint(run_dir);
  else if (choice == "last")
    path = latest_checkpoint(run_dir);
  else
    return choice;
  if (path.empty())
    throw Error(verb + ": no checkpoint in " + run_dir +
                "/checkpoints (train first, or pass --checkpoint PATH)");
  return path;
}

std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "; ";
    else if (c != '\r')
      out += c;
  }
  return out;
}

// ---------------- verbs ----------------

bool prepare_train(const std::vector<std::string>& a, TrainOptions& opt, Config& cfg);

int cmd_train(const std::vector<std::string>& a, std::ostream& out) {
  // Signals stop the run from here on (MPI start-up and reading the config included): a signal
  // before the first step stops it there, with exit status 130 (train/stop_signal.h).
  StopSignalScope signals;
  stop_test_point("startup", launcher_info([](const char* n) { return std::getenv(n); }).rank);
  // Under mpirun, every rank runs this verb; rank 0 alone prints (docs/training.md).
  Communicator& comm = world();
  TrainOptions opt;
  opt.comm = &comm;
  Config cfg;
  bool help = false;
  // Arguments and config are the same on every rank, so are their errors: one rank reports them.
  comm.agreed([&] { help = prepare_train(a, opt, cfg); });
  if (help) {
    if (comm.is_root()) out << kTrainHelp;
    return 0;
  }
  TrainResult r = train(cfg, opt);
  if (r.interrupted) return 130;
  if (!comm.is_root()) return 0;
  if (r.finished) out << "run: " << r.run_dir << "\n" << eval_table(r.final_eval);
  if (r.finished && r.criterion_set)
    out << "criterion (" << cfg.train.stop_when.describe() << "): "
        << (r.criterion_met ? "met at step " + std::to_string(r.criterion_step)
                            : "not met by the cap of " + std::to_string(cfg.train.steps) + " steps")
        << "\n";
  return 0;
}

// The arguments of `pelab train` -> options and config; true for --help.
bool prepare_train(const std::vector<std::string>& a, TrainOptions& opt, Config& cfg) {
  const CommandLine args = parse_command_line(kTrainSpec, a);
  if (args.help) return true;
  opt.resume = args.value("--resume");
  if (opt.resume.empty() || !args.positional.empty())
    args.expect_positional(1, "CONFIG (or --resume RUN_DIR)");
  if (!opt.resume.empty()) {
    std::error_code ec;
    if (!fs::exists(opt.resume, ec))
      throw Error("--resume " + opt.resume + ": no such run directory or checkpoint file");
  }
  opt.stop_after = args.integer("--stop-after", 0, opt.stop_after);
  opt.overwrite = args.has("--overwrite");
  opt.progress = args.progress();
  if (!args.positional.empty()) cfg = load_config(args.positional[0], args.sets);
  std::string resume = opt.resume;
  if (resume.empty() && !cfg.train.resume.empty())
    resume = cfg.train.resume == "latest" ? run_directory(cfg) : cfg.train.resume;
  if (!resume.empty()) {
    // A resumed run continues as it was configured: its stored config plus the --set overrides
    // that resume may change. A CONFIG given as well only locates the run; where it differs from
    // the run, say so (its values are not used).
    if (opt.overwrite)
      throw UsageError("train: --overwrite starts a run afresh; it cannot be combined with resuming");
    const ResumeTarget target = resolve_resume(resume);
    Config run_cfg = resume_config(target.run_dir, args.sets);
    if (!args.positional.empty()) {
      std::string differ;
      for (const auto& key : config_schema()) {
        const std::string k = key.full_name();
        if (k == "train.resume" || k == "train.run_dir" || k == "train.run_name") continue;
        if (config_value_text(cfg, k) != config_value_text(run_cfg, k))
          differ += (differ.empty() ? "" : ", ") + k + " (" + config_value_text(cfg, k) +
                    "; the run: " + config_value_text(run_cfg, k) + ")";
      }
      if (!differ.empty())
        opt.notes.push_back("pelab train: " + args.positional[0] + " differs from the run in " +
                            differ + "; the run's values are used (--set changes " +
                            resume_changeable_keys() + ")");
    }
    opt.resume = resume;
    cfg = run_cfg;
  }
  return false;
}

int cmd_eval(const std::vector<std::string>& a, std::ostream& out) {
  const CommandLine args = parse_command_line(kEvalSpec, a);
  if (args.help) {
    out << kEvalHelp;
    return 0;
  }
  args.expect_positional(1, "CONFIG or RUN_DIR");
  std::string run_dir;
  const Config cfg = load_target("eval", args.positional[0], args.sets, &run_dir);
  set_num_threads(cfg.train.threads);
  const std::string ckpt = choose_checkpoint("eval", run_dir, args.value("--checkpoint"));
  LoadedModel lm = load_model(cfg, ckpt, MemoryUse::Evaluate);
  EvalOptions eo;
  eo.use_cache = !args.has("--no-cache");
  eo.keep_predictions = cfg.eval.save_predictions && args.has("--out");
  std::vector<EvalResult> results;
  {
    Generator positions;
    EvalOptions vo = eo;
    set_validation_positions(cfg, positions, vo);  // train.valid_positions, as in training
    results.push_back(evaluate_set(*lm.model, *lm.data, lm.data->valid(), cfg, vo));
  }
  for (const auto& s : lm.data->tests())
    results.push_back(evaluate_set(*lm.model, *lm.data, s, cfg, eo));
  out << "checkpoint: " << ckpt << " (step " << lm.step << ")\n" << eval_table(results);
  if (args.has("--out")) {
    const std::string dir = args.value("--out");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error("eval: cannot create " + dir + ": " + ec.message());
    // Re-evaluating a run in place keeps its train.stop_when record (a fact about the training).
    std::string convergence;
    if (!run_dir.empty() && fs::equivalent(dir, run_dir, ec) &&
        fs::exists(fs::path(run_dir) / "eval.json", ec))
      convergence = convergence_json(read_convergence(run_dir));
    write_eval_files(dir, results, lm.step, ckpt, convergence);
    write_prediction_files(dir, results);
  }
  return 0;
}

int cmd_generate(const std::vector<std::string>& a, std::istream& in, std::ostream& out) {
  const CommandLine args = parse_command_line(kGenerateSpec, a);
  if (args.help) {
    out << kGenerateHelp;
    return 0;
  }
  args.expect_positional(1, "RUN_DIR");
  const int64_t max_len = args.integer("--max-len", 0, -1);
  std::string run_dir;
  const Config cfg = load_target("generate", args.positional[0], args.sets, &run_dir);
  if (cfg.task.position_ids != "sequential")
    throw Error("generate: task.position_ids " + cfg.task.position_ids +
                ": the task gives the positions of the examples it generates, not of typed "
                "lines; evaluate the run with `pelab eval` (predictions_*.tsv with "
                "eval.save_predictions)");
  set_num_threads(cfg.train.threads);
  const std::string ckpt = choose_checkpoint("generate", run_dir, args.value("--checkpoint"));
  LoadedModel lm = load_model(cfg, ckpt);
  models::Transformer& model = *lm.model;
  const TaskData& data = *lm.data;
  const int64_t max_pos = models::pe_max_positions(cfg.model.pe);  // 0 = no limit
  const bool limited = max_pos > 0;
  const std::string max_pos_name = models::pe_max_positions_name(cfg.model.pe);
  const Device dev = model.parameters().front().device();
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) strip_utf8_bom(line);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<int64_t> src;
    try {
      src = data.encode_line(line);
    } catch (const std::exception& e) {
      throw Error("generate: stdin line " + std::to_string(n) + ": " + e.what());
    }
    const int64_t len = static_cast<int64_t>(src.size());
    int64_t budget = max_len >= 0 ? max_len : data.is_lm() ? (cfg.eval.max_decode_len > 0 ? cfg.eval.max_decode_len : 100)
                                                           : decode_budget(cfg, len);
    models::GreedyResult g;
    if (data.is_lm() || data.is_decoder()) {
      std::vector<int64_t> prompt = data.is_lm() ? src : data::decoder_prompt(src);
      if (prompt.empty()) {
        out << "\n";
        continue;
      }
      const int64_t P = static_cast<int64_t>(prompt.size());
      if (limited) {
        if (P > max_pos)
          throw Error("generate: stdin line " + std::to_string(n) + ": prompt of " +
                      std::to_string(P) + " tokens exceeds " + max_pos_name + " " +
                      std::to_string(max_pos));
        budget = std::min(budget, max_pos - P + 1);
      }
      g = models::greedy_decode(model, {prompt}, budget);
    } else {
      if (limited && len + 1 > max_pos)
        throw Error("generate: stdin line " + std::to_string(n) + ": source of " +
                    std::to_string(len + 1) + " tokens (eos included) exceeds " + max_pos_name + " " +
                    std::to_string(max_pos));
      if (limited) budget = std::min(budget, max_pos);
      data::Seq2SeqBatch b = data::make_seq2seq_batch({data::Example{src, {}, {}, {}}});
      g = models::greedy_decode(model, ids_tensor(b.src, b.B, b.S, dev),
                                mask_tensor(b.src_mask, b.B, b.S, dev), budget);
    }
    std::string text = data.render(g.tokens[0]);
    std::string esc;
    for (char c : text) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
    out << esc << "\n" << std::flush;
  }
  return 0;
}

int cmd_info(const std::vector<std::string>& a, std::ostream& out) {
  const CommandLine args = parse_command_line(kInfoSpec, a);
  if (args.help) {
    out << kInfoHelp;
    return 0;
  }
  args.expect_positional(1, "CONFIG or RUN_DIR");
  const Config cfg = load_target("info", args.positional[0], args.sets, nullptr);
  LoadedModel lm = load_model(cfg);
  const TaskConfig& t = cfg.task;
  const TrainConfig& tr = cfg.train;
  out << "config: " << cfg.source << "\n";
  out << "task: " << t.name << " (" << t.formulation << ")";
  if (t.name == "lm") {
    out << ", corpus " << (t.corpus.empty() ? "<fortunes>" : t.corpus) << ", train length "
        << t.lm_train_len << ", eval lengths";
    for (int L : t.lm_eval_lengths) out << " " << L;
  } else if (t.name == "textfile") {
    out << ", train file " << t.train_file << ", " << lm.data->num_train_examples()
        << " training examples";
  } else {
    out << ", " << t.num_symbols << " symbols, train lengths " << t.train_min_len << ".."
        << t.train_max_len << ", test lengths";
    for (int L : t.test_lengths) out << " " << L;
  }
  out << "\nvocabulary: " << lm.data->vocab().size() << " tokens; longest training sequence "
      << lm.train_positions << " tokens\n";
  out << "pe: " << cfg.model.pe.scheme << (cfg.model.pe.randomized_positions ? " (randomized positions)" : "")
      << "\n";
  out << "train: " << count_text(tr.steps, "step") << ", batch " << tr.batch_size << " x " << tr.grad_accum
      << ", " << tr.optimizer << " lr " << tr.lr << " (" << tr.schedule << ", warmup " << tr.warmup
      << "), seed " << tr.seed << ", " << count_text(tr.threads, "thread") << ", device "
      << tr.device << "\n";
  if (tr.stop_when.enabled())
    out << "stop when: " << tr.stop_when.describe() << " (validation every "
        << count_text(tr.eval_every, "step") << "; train.steps is the cap)\n";
  out << "run directory: " << run_directory(cfg) << "\n";
  out << "memory (estimated, docs/training.md): "
      << run_memory_text(cfg, training_memory_use(cfg), lm.data.get())
      << "; this machine has " << gigabytes(machine_memory_bytes()) << "\n\n";
  out << models::model_info(*lm.model);
  if (args.has("--yaml")) out << "\n" << config_to_yaml(cfg, true);
  return 0;
}

int cmd_demo(const std::vector<std::string>& a, std::ostream& out) {
  const CommandLine args = parse_command_line(kDemoSpec, a);
  if (args.help) {
    out << kDemoHelp;
    return 0;
  }
  args.expect_positional(0, "");
  set_num_threads(2);
  Generator gen(42);
  Linear l1(2, 16, gen), l2(16, 1, gen);
  std::vector<Tensor> params = l1.parameters();
  for (auto& p : l2.parameters()) params.push_back(p);
  AdamW opt(params, 0.05, AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = Tensor::from_vector({0, 1, 1, 0}, {4, 1});
  double loss_v = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor h = tanh(l1.forward(x));
    Tensor d = l2.forward(h) - y;
    Tensor loss = mean(d * d);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_v = loss.item();
    if (step % 100 == 0) out << "demo: step " << step << " mse " << loss_v << "\n";
  }
  out << "demo: XOR mse after 300 AdamW steps: " << loss_v << "\n";
  return loss_v < 1e-2 ? 0 : 1;
}

int cmd_config_reference(const std::vector<std::string>& a, std::ostream& out) {
  const CommandLine args = parse_command_line(kConfigRefSpec, a);
  if (args.help) {
    out << kConfigRefHelp;
    return 0;
  }
  args.expect_positional(0, "");
  out << config_reference_markdown(
      {compare_reference_section(), suite_reference_section(), literature_reference_section()});
  return 0;
}

// Every verb: its name and what runs it (args[0] is the verb).
using VerbFunction = int (*)(const std::vector<std::string>& args, std::istream& in,
                             std::ostream& out, std::ostream& err);
const std::vector<std::pair<std::string, VerbFunction>>& verbs() {
  static const std::vector<std::pair<std::string, VerbFunction>> v = {
      {"train", [](const auto& a, auto&, auto& out, auto&) { return cmd_train(a, out); }},
      {"eval", [](const auto& a, auto&, auto& out, auto&) { return cmd_eval(a, out); }},
      {"generate", [](const auto& a, auto& in, auto& out, auto&) { return cmd_generate(a, in, out); }},
      {"info", [](const auto& a, auto&, auto& out, auto&) { return cmd_info(a, out); }},
      {"config-reference",
       [](const auto& a, auto&, auto& out, auto&) { return cmd_config_reference(a, out); }},
      {"demo", [](const auto& a, auto&, auto& out, auto&) { return cmd_demo(a, out); }},
      {"compare", [](const auto& a, auto&, auto& out, auto& err) { return compare_cli(a, out, err); }},
      {"plot-pe", [](const auto& a, auto&, auto& out, auto& err) { return plot_pe_cli(a, out, err); }},
  };
  return v;
}

}  // namespace

namespace {

// An error's line and exit status. Under a multi-rank MPI launch: nothing for PeerFailure (another
// rank reports the error); an error that only this rank saw (the others may be waiting for it)
// names the rank and ends every rank with MPI_Abort.
int report_error(std::ostream& err, const std::exception& e, int status) {
  Communicator* w = started_world();
  const bool ranks = w != nullptr && w->size() > 1;
  if (ranks && dynamic_cast<const PeerFailure*>(&e) != nullptr) return 1;
  err << "pelab: error: " << (ranks && !w->is_root() ? "rank " + std::to_string(w->rank()) + ": " : "")
      << one_line(e.what()) << "\n";
  if (ranks && !w->failure_is_collective) {
    err.flush();
    w->abort(status);
  }
  return status;
}

}  // namespace

std::vector<std::string> cli_verbs() {
  std::vector<std::string> names;
  for (const auto& v : verbs()) names.push_back(v.first);
  return names;
}

int run_cli(const std::vector<std::string>& a, std::istream& in, std::ostream& out,
            std::ostream& err) {
  // Started by mpirun as several processes: only a train of an MPI build can be one of them.
  const LauncherInfo launch = launcher_info([](const char* n) { return std::getenv(n); });
  const std::string refusal =
      launch_refusal(launch, built_with_mpi(), a.empty() ? std::string("(no command)") : a[0]);
  if (!refusal.empty()) {
    if (launch.rank == 0) err << "pelab: error: " << refusal << "\n";
    return 2;
  }
  try {
    if (a.empty()) {
      err << kUsage;
      return 2;
    }
    const std::string& cmd = a[0];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      out << kUsage;
      return 0;
    }
    if (cmd == "--version") {
      out << "pelab " << version() << "\nBLAS: " << blas_kernels_summary() << "\n";
      return 0;
    }
    for (const auto& v : verbs())
      if (v.first == cmd) return v.second(a, in, out, err);
    std::string msg = "unknown command '" + cmd + "'";
    const std::string near = nearest_name(cmd, cli_verbs());
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    throw UsageError(msg + " (see pelab --help)");
  } catch (const UsageError& e) {
    return report_error(err, e, 2);
  } catch (const std::exception& e) {
    return report_error(err, e, 1);
  }
}

}  // namespace pelab
