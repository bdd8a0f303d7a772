// pelab — the trainer (trainer.h): training loop, periodic evaluation, run directory, metrics,
// checkpoints and exact resume.
#include "train/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "data/rng.h"
#include "models/pe/pe.h"
#include "pelab/autograd.h"
#include "pelab/blas_kernels.h"
#include "pelab/clock.h"
#include "pelab/optim.h"
#include "pelab/parallel.h"
#include "pelab/strings.h"
#include "train/distributed.h"
#include "train/memory_estimate.h"
#include "train/model_from_config.h"
#include "train/progress.h"
#include "train/run_folder.h"
#include "train/stop_signal.h"
#include "train/text_file.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

// ---------------- small helpers ----------------

// Keys that say where a run is, not how it trains: the trainer sets them from the run directory
// it resumes.
bool run_location_key(const std::string& key) {
  return key == "train.run_dir" || key == "train.run_name" || key == "train.resume";
}

bool all_finite(const std::vector<Tensor>& params) {
  for (const auto& p : params)
    for (double v : p.to_vector())
      if (!std::isfinite(v)) return false;
  return true;
}

// The model's and the randomized-position generator's counters for micro-batch k of a step (k over
// all ranks' micro-batches, in the order of the equivalent single process) start at the step's
// offset + k * kMicroBatchStride, so a rank draws what the single process would without knowing the
// other micro-batches' draws. A step with one micro-batch draws as before.
constexpr uint64_t kMicroBatchStride = uint64_t{1} << 40;

// counters/train_positions of a checkpoint (0 when it predates it).
int64_t stored_train_positions(const CheckpointData& ck) {
  auto it = ck.counters.find("train_positions");
  return it == ck.counters.end() ? 0 : it->second;
}

// The wall clock of a run as this process trains it: the throughput since the last training row,
// the estimated time to train.steps, and the run's elapsed seconds (those trained before a resume
// included). Timing only: nothing of it decides what is trained.
struct StepClock {
  double before = 0;    // seconds trained before this process (a resume restores it)
  double start = 0;     // when this process began training
  double now = 0;       // at the end of the last step
  double last_row = 0;  // at the last training row
  int64_t tokens = 0;   // trained since the last training row
  int64_t steps = 0;    // steps trained by this process
  double tokens_per_s = 0, eta_s = 0;

  void begin() { start = last_row = now = now_s(); }
  void stepped(int64_t step, int64_t total) {  // after step `step` of `total`
    ++steps;
    now = now_s();
    eta_s = (now - start) / static_cast<double>(steps) * static_cast<double>(total - step);
    tokens_per_s = static_cast<double>(tokens) / std::max(1e-9, now - last_row);
  }
  void row_written() {
    last_row = now;
    tokens = 0;
  }
  double elapsed_at_step() const { return before + now - start; }  // at the end of the last step
  double elapsed() const { return before + now_s() - start; }
};

// ---------------- the trainer ----------------

class Trainer {
 public:
  Trainer(const Config& cfg, const TrainOptions& opt)
      : cfg_(cfg), opt_(opt), comm_(opt.comm ? *opt.comm : single_process()),
        stop_(cfg.train.stop_when) {}
  TrainResult run();

 private:
  bool root() const { return comm_.is_root(); }
  // run(): the steps around the loop
  void start();
  void announce();
  bool catch_up_validation();
  bool signalled() const;
  bool eval_due() const;
  bool checkpoint_due() const;
  bool train_row_due() const;
  bool records_needed() const;
  void train_row();
  bool validate_and_save();
  TrainResult finish(bool interrupted);
  void report_training_end();
  void refuse_a_run_without_result();
  TrainResult stopped(TrainResult res);
  Convergence record_convergence();
  TrainResult final_evaluation(TrainResult res);
  std::vector<EvalResult> evaluate_final();

  std::string resume_request() const;
  void check_ranks() const;
  void join_run();
  bool validate_everywhere();
  std::function<bool()> stop_check(const char* point);
  void open_run();
  void create_run();
  void resume_run(const std::string& resume);
  void setup_model(const std::vector<std::string>& vocab, int64_t train_positions = 0);
  void keep_best_of_this_timeline();
  void restore(const CheckpointData& ck, const std::string& path);
  void train_step(int64_t& tokens);
  void reduce_over_ranks(const Tensor& rec, const View& loss_slot, int64_t& tok, uint64_t ends[2]);
  void settle();
  Tensor micro_loss(int64_t j, int64_t& tokens);
  std::vector<int64_t> positions_for(int64_t L);
  void add_row(const MetricRow& row);
  void rewrite_metrics_files();
  EvalResult validate();
  Convergence convergence() const;
  void save(const std::string& path);
  void save_step_checkpoint();
  bool healthy() const;
  void after_skipped_step(int64_t step, double loss);
  [[noreturn]] void diverged(int64_t step, const std::string& why);

  Config cfg_;
  TrainOptions opt_;
  Communicator& comm_;
  std::string resumed_from_;   // the checkpoint a resume loaded (rank 0; broadcast to the others)
  bool peer_signal_ = false;   // a rank was signalled during the last step (MPI)
  // The validation of step_ was interrupted by a signal and is still to be done (a checkpoint
  // written then says so: counters/validation_pending, and a resume runs it first).
  bool pending_validation_ = false;
  double comm_s_ = 0;          // seconds in the gradient and loss reductions (this process)
  std::string dir_;
  std::unique_ptr<TaskData> data_;
  std::unique_ptr<models::Transformer> model_;
  std::unique_ptr<Optimizer> optim_;
  LRSchedule schedule_;
  Generator randpos_{0};
  std::unique_ptr<Progress> progress_;
  std::vector<MetricRow> rows_;

  int64_t step_ = 0;
  int64_t data_position_ = 0;  // micro-batches consumed
  int64_t skipped_steps_ = 0;  // steps with a non-finite loss or gradient norm (no update)
  int64_t consecutive_skipped_ = 0;  // of them, the latest in a row (0: the last step updated)
  int64_t last_finite_step_ = -1;    // newest checkpoint written from a healthy model (kept)
  int64_t last_skip_report_ = -1;    // step of the last "skipped" log line (rate limit)
  RunDirLock lock_;
  double log_loss_sum_ = 0;    // since the last train row
  int64_t log_loss_count_ = 0;
  double best_ = std::numeric_limits<double>::quiet_NaN();
  int64_t best_step_ = -1;
  double last_lr_ = 0, last_grad_norm_ = 0;
  // A step is decided on the model's device and reads nothing back (Optimizer::guarded_step):
  // its loss, gradient sum of squares and norm go to row `pending_` of history_ (Float64
  // [window, 3] there), which settle() reads, one read for the steps since the last, at every
  // training row, validation, checkpoint and end of training (and when the window is full).
  Tensor history_;
  int64_t pending_ = 0;        // steps trained since the last settle()
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();  // of the last settled step
  StepClock clock_;
  int64_t stop_at_ = 0;        // train.steps, or --stop-after when it is sooner
  int64_t saved_step_ = -1;    // step of the newest checkpoint on disk
  int64_t train_positions_ = 0;  // what the model was built for (stored in checkpoints)
  std::vector<std::vector<int64_t>> step_positions_;
  EvalResult last_valid_;
  int64_t last_valid_step_ = -1;
  StopCriterion stop_;  // train.stop_when
};

// Where to resume from, if anywhere ("" = a fresh run).
std::string Trainer::resume_request() const {
  std::string resume = opt_.resume;
  if (resume.empty() && !cfg_.train.resume.empty())
    resume = cfg_.train.resume == "latest" ? run_directory(cfg_) : cfg_.train.resume;
  return resume;
}

// Under MPI every rank takes train.batch_size / ranks examples of each micro-batch.
void Trainer::check_ranks() const {
  const int64_t B = cfg_.train.batch_size, N = comm_.size();
  PELAB_CHECK(B % N == 0, "train.batch_size=", B, " does not divide by the ", N,
              " MPI ranks (every rank takes an equal share of each micro-batch); set "
              "train.batch_size to a multiple of ", N, " (e.g. --set train.batch_size=",
              std::max<int64_t>(N, B / N * N), ") or start a number of ranks that divides ", B);
}

// Ranks other than 0: the same model and training state as rank 0, and no file written. A resume
// loads the checkpoint rank 0 chose (all ranks see the run directory: a shared file system).
void Trainer::join_run() {
  if (resumed_from_.empty()) {
    setup_model({});
    return;
  }
  const CheckpointData ck = load_checkpoint(resumed_from_);
  setup_model(ck.vocab, stored_train_positions(ck));
  restore(ck, resumed_from_);
}

// The check an evaluation makes before each batch and decoding step: a stop signal (and the test
// hook of `point`, stop_signal.h).
std::function<bool()> Trainer::stop_check(const char* point) {
  return [this, point] {
    stop_test_point(point, comm_.rank());
    return stop_signal() != 0;
  };
}

// The validation of step_: rank 0 validates; whether a signal interrupted it and whether
// train.stop_when was met are its decisions, for every rank (one reduction, which also tells every
// rank whether any rank has a signal by now: they then stop after this step together). Returns
// false when the validation was interrupted (pending_validation_ is then set on every rank).
bool Trainer::validate_everywhere() {
  pending_validation_ = false;  // best.h5, written inside, is of a validated step
  bool interrupted = false;
  if (root()) interrupted = validate().interrupted;
  else stop_test_point("validation", comm_.rank());  // the others wait for rank 0 here
  if (comm_.size() > 1) {
    std::vector<double> v = {root() ? static_cast<double>(stop_.met_step()) : 0.0,
                             interrupted ? 1.0 : 0.0, stop_signal() ? 1.0 : 0.0};
    comm_.allreduce_sum(v.data(), v.size());
    stop_.set_met_step(static_cast<int64_t>(v[0]));
    interrupted = v[1] > 0;
    peer_signal_ = v[2] > 0;
  }
  pending_validation_ = interrupted;
  return !interrupted;
}

void Trainer::open_run() {
  const std::string resume = resume_request();
  if (resume.empty())
    create_run();
  else
    resume_run(resume);
}

// A fresh run: its model, then its run directory (locked; an old run there only with
// --overwrite), config.yaml and empty metrics files.
void Trainer::create_run() {
  std::error_code ec;
  setup_model({});  // data and model first: a config or data error leaves no run directory
  record_data_revision(cfg_);  // the revision of the examples it trains on, in config.yaml
  const fs::path dir = run_directory(cfg_);
  fs::create_directories(dir, ec);
  PELAB_CHECK(!ec, "cannot create run directory ", dir.string(), ": ", ec.message());
  lock_.acquire(dir);
  clean_temporaries(dir);  // only once the lock is held: no other process is writing
  if (holds_a_run(dir)) {
    PELAB_CHECK(opt_.overwrite || run_without_checkpoint(dir), "run directory ", dir.string(),
                " already holds a run; continue it with --resume ", dir.string(),
                ", start over with --overwrite, or choose another --set train.run_name=NAME");
    clear_run_files(dir);
  }
  make_own_folder((dir / "checkpoints").string());  // (a link there: refused)
  dir_ = dir.string();
  Config stored = cfg_;
  stored.train.resume = "";
  write_text_file(dir_ + "/config.yaml", "# pelab run config (resolved): " + cfg_.source +
                                             "\n" + config_to_yaml(stored, true));
  write_text_file(dir_ + "/metrics.jsonl", "");
  write_text_file(dir_ + "/metrics.csv", metrics_csv_header() + "\n");
}

// A resumed run: `resume` is a run directory or a checkpoint file in its checkpoints/. Locked
// before anything of the run is read, so a second process cannot pick the same checkpoint; the
// config must equal the run's (but for resume_may_change()); its state is restored and the files
// of the discarded future (newer checkpoints, a best.h5 of them) removed.
void Trainer::resume_run(const std::string& resume) {
  lock_.acquire(resolve_resume(resume).run_dir);
  const ResumeTarget target = resolve_resume(resume);
  const std::string ckpt_path = target.checkpoint;
  const fs::path run_dir = target.run_dir;
  // checkpoints/ is written and pruned: a link there (to someone else's folder) is refused before
  // anything in it is read, written or deleted.
  make_own_folder((run_dir / "checkpoints").string());
  clean_temporaries(run_dir);
  const CheckpointData ck = load_checkpoint(ckpt_path);  // the one checkpoint read of a resume
  resumed_from_ = ckpt_path;
  const std::string mixed = mixed_randomized_batches(ck.config_yaml);
  PELAB_CHECK(mixed.empty(), "--resume ", run_dir.string(), ": the run was ", mixed,
              "; it cannot be continued as it was trained: train it afresh");
  const Config run_cfg = load_config_string(ck.config_yaml, ckpt_path + ": config");
  const std::string data_change = data_revision_change(run_cfg);
  PELAB_CHECK(data_change.empty(), "--resume ", run_dir.string(), ": the run was ", data_change,
              "; it cannot be continued on other examples than it trained on: train it afresh");
  record_data_revision(cfg_);
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    if (resume_may_change(k) || run_location_key(k)) continue;
    const std::string a = config_value_text(run_cfg, k), b = config_value_text(cfg_, k);
    PELAB_CHECK(a == b, "--resume ", run_dir.string(), ": config key ", k, " is ", b,
                " but the run was trained with ", a, " (only ", resume_changeable_keys(),
                " may change)");
  }
  // Checked before anything is written: a refused resume leaves the run as it was.
  PELAB_CHECK(cfg_.train.steps >= ck.step, "--resume ", run_dir.string(), ": the run is at step ",
              ck.step, " but train.steps is ", cfg_.train.steps,
              "; to continue it, set train.steps to ", ck.step, " or more (--set train.steps=N)");
  check_checkpoints_after_removable(run_dir.string(), ck.step);
  const fs::path norm = run_dir.lexically_normal();
  cfg_.train.run_dir = norm.parent_path().empty() ? "." : norm.parent_path().string();
  cfg_.train.run_name = norm.filename().string();
  cfg_.train.resume = "";
  dir_ = run_dir.string();
  setup_model(ck.vocab, stored_train_positions(ck));
  restore(ck, ckpt_path);
  // Only a resume that can go on rewrites config.yaml (with the new train.steps etc.).
  write_text_file(dir_ + "/config.yaml",
                  "# pelab run config (resolved): " + cfg_.source + "\n" + config_to_yaml(cfg_, true));
  // Checkpoints newer than the one resumed from belong to a future this run no longer has.
  remove_checkpoints_after(dir_, step_);
  keep_best_of_this_timeline();
  update_last_link(dir_);
  rewrite_metrics_files();
}

void Trainer::setup_model(const std::vector<std::string>& vocab, int64_t train_positions) {
  // This process's stream of micro-batches: train.batch_size / ranks examples each (rank r takes
  // batch (g * ranks + r) of it for the step's micro-batch g, see train_step).
  Config rank_cfg = cfg_;
  rank_cfg.train.batch_size = cfg_.train.batch_size / comm_.size();
  // Host memory, from the config before anything is built: the data, and on the CPU the
  // parameters, training state, one micro-batch and the largest evaluation batch (CUDA keeps those
  // on the GPU); again once the data is built (a text file's lengths, the lm corpus's vocabulary).
  const MemoryUse use = training_memory_use(cfg_);
  check_run_memory(rank_cfg, use, machine_memory_bytes());
  data_ = std::make_unique<TaskData>(rank_cfg, vocab);
  train_positions_ = train_positions > 0 ? train_positions : data_->train_positions();
  check_run_memory(rank_cfg, use, machine_memory_bytes(), data_.get());
  model_ = build_model(cfg_, *data_, train_positions_);
  model_->train();
  const TrainConfig& t = cfg_.train;
  if (t.optimizer == "sgd")
    optim_ = std::make_unique<SGD>(model_->parameters(), t.lr,
                                   SGDOptions{t.momentum, 0.0, t.weight_decay, false});
  else
    optim_ = std::make_unique<AdamW>(model_->parameters(), t.lr,
                                     AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay});
  schedule_.kind = t.schedule;
  schedule_.base_lr = t.lr;
  schedule_.min_lr = t.min_lr;
  schedule_.warmup = t.warmup;
  schedule_.total = std::max<int64_t>(1, t.steps);
  randpos_.set_state(data::derive_seed(static_cast<uint64_t>(t.seed), "randomized_positions"), 0);
  data_position_ = 0;
}

void Trainer::restore(const CheckpointData& ck, const std::string& path) {
  PELAB_CHECK(ck.scheme == cfg_.model.pe.scheme && ck.arch == cfg_.model.arch, "checkpoint ", path,
              ": scheme/arch ", ck.scheme, "/", ck.arch, " do not match the config's ",
              cfg_.model.pe.scheme, "/", cfg_.model.arch);
  load_parameters(*model_, ck, path);
  PELAB_CHECK(ck.optimizer == cfg_.train.optimizer, "checkpoint ", path, ": optimizer ",
              ck.optimizer, " but the config says train.optimizer ", cfg_.train.optimizer);
  restore_optimizer(*optim_, ck, path);
  auto counter = [&](const char* name) {
    auto it = ck.counters.find(name);
    PELAB_CHECK(it != ck.counters.end(), "checkpoint ", path, ": dataset counters/", name,
                " is missing (not a training checkpoint?)");
    return it->second;
  };
  auto value = [&](const char* name) {
    auto it = ck.values.find(name);
    PELAB_CHECK(it != ck.values.end(), "checkpoint ", path, ": dataset values/", name,
                " is missing (not a training checkpoint?)");
    return it->second;
  };
  step_ = ck.step;
  PELAB_CHECK(counter("schedule_step") == step_, "checkpoint ", path,
              ": counters/schedule_step disagrees with /step");
  // Every counter within its range before any is used (a resume deletes newer checkpoints only
  // after this): a crafted /step or a negative position is refused, naming the file.
  check_training_counters(ck, path);
  data_position_ = counter("data_position");
  // Each step consumes train.grad_accum micro-batches (train_step), which a resume cannot change.
  PELAB_CHECK(data_position_ / cfg_.train.grad_accum == step_ &&
                  data_position_ % cfg_.train.grad_accum == 0,
              "checkpoint ", path, ": dataset counters/data_position is ", data_position_,
              ", but ", step_, " steps of train.grad_accum ", cfg_.train.grad_accum, " consume ",
              "exactly ", step_, " x ", cfg_.train.grad_accum, " micro-batches");
  model_->rng().set_state(static_cast<uint64_t>(counter("model_rng_seed")),
                          static_cast<uint64_t>(counter("model_rng_offset")));
  randpos_.set_state(static_cast<uint64_t>(counter("randpos_rng_seed")),
                     static_cast<uint64_t>(counter("randpos_rng_offset")));
  skipped_steps_ = counter("skipped_steps");
  // Written since the divergence limits (older checkpoints: a streak of 0, and the checkpoint
  // itself is the last finite one when its parameters are finite).
  auto c1 = ck.counters.find("consecutive_skipped");
  consecutive_skipped_ = c1 != ck.counters.end() ? c1->second : 0;
  auto c2 = ck.counters.find("last_finite_step");
  last_finite_step_ = c2 != ck.counters.end() ? c2->second
                      : all_finite(model_->parameters()) ? step_ : -1;
  log_loss_count_ = counter("log_loss_count");
  best_step_ = counter("best_step");
  log_loss_sum_ = value("log_loss_sum");
  best_ = best_step_ >= 0 ? value("best_metric") : std::numeric_limits<double>::quiet_NaN();
  last_lr_ = value("last_lr");
  last_grad_norm_ = value("last_grad_norm");
  clock_.before = value("elapsed_s");
  stop_.restore(ck);
  auto it = ck.counters.find("validation_pending");
  pending_validation_ = it != ck.counters.end() && it->second != 0;
  rows_ = parse_metrics_jsonl(ck.metrics_jsonl, path + ": metrics");
  saved_step_ = step_;
}

// best.h5 must be the best checkpoint of the timeline being continued: after a resume from an older
// checkpoint it may come from the discarded future. It is kept only when its /step is the resumed
// state's best_step; else it is re-derived from the checkpoint of that step when one is still on disk
// (the resumed checkpoint itself when best_step is its step), else removed (eval then uses the newest
// checkpoint until validation improves again).
void Trainer::keep_best_of_this_timeline() {
  const fs::path best = fs::path(dir_) / "checkpoints" / "best.h5";
  std::error_code ec;
  if (!fs::exists(best, ec)) return;
  int64_t best_file_step = -1;
  try {
    best_file_step = checkpoint_step(best.string());
  } catch (const Error&) {
    // unreadable: replaced or removed below
  }
  if (best_step_ >= 0 && best_file_step == best_step_) return;
  for (const auto& [s, p] : step_checkpoints(dir_))
    if (best_step_ >= 0 && s == best_step_) {
      copy_checkpoint(p, best.string());
      return;
    }
  fs::remove(best, ec);
  PELAB_CHECK(!ec, "cannot remove ", best.string(), " (a best checkpoint of a discarded timeline): ",
              ec.message());
}

std::vector<int64_t> Trainer::positions_for(int64_t L) {
  const int64_t maxp = cfg_.model.pe.randomized_max_position;
  PELAB_CHECK(L <= maxp, "pe.randomized_max_position (", maxp, ") is smaller than a training ",
              "sequence of ", L, " tokens");
  std::vector<int64_t> p = random_positions(randpos_, L, maxp);
  step_positions_.push_back(p);
  return p;
}

Tensor Trainer::micro_loss(int64_t j, int64_t& tokens) {
  const Device dev = model_->parameters().front().device();
  const bool rp = cfg_.model.pe.randomized_positions;
  const double ls = cfg_.train.label_smoothing;
  if (data_->is_lm()) {
    data::LmBatch b = data::make_lm_batch(data_->lm_train_batch(j));
    models::Positions pos;
    if (rp) pos = positions_for(b.L);
    Tensor logits = model_->forward_decoder(ids_tensor(b.input, b.B, b.L, dev), Tensor(),
                                            rp ? &pos : nullptr);
    tokens += b.B * b.L;
    return cross_entropy(logits, ids_tensor(b.target, b.B, b.L, dev), kIgnoreIndex, ls);
  }
  const std::vector<data::Example> batch = data_->train_batch(j);
  if (data_->is_decoder()) {
    data::DecoderBatch b = data::make_decoder_batch(batch);
    models::Positions pos;
    if (rp) pos = positions_for(b.L);
    if (!b.pos.empty()) pos = models::Positions(b.B, b.L, b.pos, b.pos2);  // the task's IDs, offset
    const bool explicit_pos = rp || !b.pos.empty();
    Tensor logits = model_->forward_decoder(ids_tensor(b.input, b.B, b.L, dev),
                                            mask_tensor(b.mask, b.B, b.L, dev),
                                            explicit_pos ? &pos : nullptr);
    for (int64_t n : b.seq_len) tokens += n;
    return cross_entropy(logits, targets_tensor(b.target, b.loss_mask, b.B, b.L, dev), kIgnoreIndex,
                         ls);
  }
  data::Seq2SeqBatch b = data::make_seq2seq_batch(batch);
  models::Positions src_pos, tgt_pos;
  if (rp) {
    src_pos = positions_for(b.S);
    tgt_pos = positions_for(b.T);
  }
  Tensor logits = model_->forward_seq2seq(
      ids_tensor(b.src, b.B, b.S, dev), mask_tensor(b.src_mask, b.B, b.S, dev),
      ids_tensor(b.tgt_in, b.B, b.T, dev), mask_tensor(b.tgt_mask, b.B, b.T, dev),
      rp ? &src_pos : nullptr, rp ? &tgt_pos : nullptr);
  for (size_t i = 0; i < b.src_len.size(); ++i) tokens += b.src_len[i] + b.tgt_len[i];
  return cross_entropy(logits, targets_tensor(b.tgt_out, b.tgt_mask, b.B, b.T, dev), kIgnoreIndex,
                       ls);
}

// One optimizer step: K = train.grad_accum x ranks micro-batches, this rank's being k = a * ranks +
// rank (a < grad_accum). The step's gradient is the sum of the micro-batch gradients (each of the
// loss / K) in k order, ((g_0 + g_1) + g_2) + ...: each micro-batch's gradient is formed whole and
// then added, locally and then over ranks in rank order, so with one micro-batch per rank the
// result is bit for bit that of one process with train.grad_accum = ranks.
void Trainer::train_step(int64_t& tokens) {
  const int accum = cfg_.train.grad_accum;
  const int N = comm_.size(), r = comm_.rank();
  const uint64_t K = static_cast<uint64_t>(accum) * static_cast<uint64_t>(N);
  last_lr_ = schedule_.lr_at(step_);
  optim_->set_lr(last_lr_);
  optim_->zero_grad();
  step_positions_.clear();
  Generator& drop = model_->rng();
  const uint64_t drop0 = drop.offset(), pos0 = randpos_.offset();
  const std::vector<Tensor>& params = optim_->params();
  std::vector<Tensor> held(params.size());
  // This step's record: [0] its loss, the micro-batch losses added in order in double on the
  // device (as `loss += l.item()` would on the host), [1] and [2] the gradients' sum of squares
  // and norm (guarded_step).
  const Device dev = params.front().device();
  const int64_t window = std::clamp<int64_t>(cfg_.train.log_every, 1, 1024);
  if (!history_.defined()) history_ = Tensor::zeros({window, 3}, DType::Float64, dev);
  const Tensor rec = reshape(slice(history_, 0, pending_, pending_ + 1), {3});
  View loss_slot = view_of(rec);
  loss_slot.shape = {};
  loss_slot.strides = {};
  Backend& be = backend_for(dev);
  int64_t tok = 0;
  for (int a = 0; a < accum; ++a) {
    const uint64_t k = static_cast<uint64_t>(a) * static_cast<uint64_t>(N) + static_cast<uint64_t>(r);
    drop.set_state(drop.seed(), drop0 + k * kMicroBatchStride);
    randpos_.set_state(randpos_.seed(), pos0 + k * kMicroBatchStride);
    if (a > 0)
      for (size_t i = 0; i < params.size(); ++i) {
        held[i] = params[i].grad();
        Tensor(params[i]).set_grad(Tensor());
      }
    Tensor l = micro_loss((data_position_ + a) * N + r, tok);
    if (K > 1) l = l * (1.0 / static_cast<double>(K));
    l.backward();
    if (a > 0)
      for (size_t i = 0; i < params.size(); ++i) {
        if (!held[i].defined()) continue;
        Tensor g = params[i].grad();
        if (g.defined())
          g.add_(held[i]);
        else
          Tensor(params[i]).set_grad(held[i]);
        held[i] = Tensor();
      }
    if (a == 0) be.copy(loss_slot, view_of(l));
    else be.axpy(loss_slot, view_of(l), 1.0);
    PELAB_CHECK(drop.offset() - (drop0 + k * kMicroBatchStride) < kMicroBatchStride &&
                    randpos_.offset() - (pos0 + k * kMicroBatchStride) < kMicroBatchStride,
                "a micro-batch drew 2^40 random numbers or more; reduce train.batch_size");
  }
  data_position_ += accum;
  stop_test_point("step", r);
  if (opt_.position_hook && cfg_.model.pe.randomized_positions) opt_.position_hook(step_, step_positions_);
  if (opt_.grad_hook) opt_.grad_hook(step_, optim_->params());
  // The generators continue from the step's last micro-batch (on the last rank); one that drew
  // nothing stays where it was.
  uint64_t ends[2] = {drop.offset(), randpos_.offset()};
  const uint64_t last = (K - 1) * kMicroBatchStride;
  if (ends[0] == drop0 + last) ends[0] = drop0;
  if (ends[1] == pos0 + last) ends[1] = pos0;
  if (N > 1) reduce_over_ranks(rec, loss_slot, tok, ends);
  drop.set_state(drop.seed(), ends[0]);
  randpos_.set_state(randpos_.seed(), ends[1]);
  tokens += tok;
  const double clip = cfg_.train.grad_clip > 0 ? cfg_.train.grad_clip
                                               : std::numeric_limits<double>::infinity();
  // The clip, and the update only where the norm and the loss are finite, decided on the device;
  // a skipped step is counted, reported and limited when settle() reads the record.
  optim_->guarded_step(rec, clip);
  optim_->zero_grad();
  ++step_;
  ++pending_;
}

// Under MPI, after each rank's micro-batches: the gradients summed over the ranks in rank order,
// and one reduction besides that carries the step's loss (into `loss_slot`) and tokens, whether a
// rank was signalled, and the last rank's generator offsets `ends` (as exact 32-bit halves).
void Trainer::reduce_over_ranks(const Tensor& rec, const View& loss_slot, int64_t& tok,
                                uint64_t ends[2]) {
  const int N = comm_.size(), r = comm_.rank();
  const double t0 = now_s();
  const bool last_rank = r == N - 1;
  auto half = [&](uint64_t v, int hi) {
    return last_rank ? static_cast<double>(hi ? v >> 32 : v & 0xffffffffu) : 0.0;
  };
  stop_test_point("reduction", r);
  std::vector<double> sums = {rec.to_vector()[0], static_cast<double>(tok), stop_signal() ? 1.0 : 0.0,
                              half(ends[0], 1), half(ends[0], 0), half(ends[1], 1),
                              half(ends[1], 0)};
  allreduce_gradients(comm_, optim_->params(), &sums);
  backend_for(rec.device()).fill(loss_slot, sums[0]);
  tok = static_cast<int64_t>(sums[1]);
  peer_signal_ = sums[2] > 0;
  ends[0] = (static_cast<uint64_t>(sums[3]) << 32) | static_cast<uint64_t>(sums[4]);
  ends[1] = (static_cast<uint64_t>(sums[5]) << 32) | static_cast<uint64_t>(sums[6]);
  comm_s_ += now_s() - t0;
}

// Reads the records of the steps trained since the last read (one device->host read) and does for
// each, in order, what its loss and gradient norm decide on the host: the skipped-step counts,
// their log lines and the divergence limits (naming the step where a limit was reached), the
// training loss of the log window and the logged norm. A device error that the read reports (an
// index or target out of range in those steps) names the steps. Parameters are never wrong for
// the late read: a skipped step changed nothing on the device, and a checkpoint is written only
// after this.
void Trainer::settle() {
  if (pending_ == 0) return;
  const int64_t n = pending_, first = step_ - n + 1;
  std::vector<double> rec;
  try {
    rec = slice(history_, 0, 0, n).to_vector();
  } catch (const Error& e) {
    fail(n == 1 ? "step " + std::to_string(first)
                : "steps " + std::to_string(first) + "-" + std::to_string(step_),
         " (read back at step ", step_, "): ", e.what());
  }
  pending_ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double loss = rec[3 * i], norm = rec[3 * i + 2];
    last_grad_norm_ = norm;
    last_loss_ = loss;
    if (std::isfinite(norm) && std::isfinite(loss)) {
      consecutive_skipped_ = 0;
    } else {
      ++skipped_steps_;
      ++consecutive_skipped_;
      after_skipped_step(first + i, loss);
    }
    log_loss_sum_ += loss;
    ++log_loss_count_;
  }
}

void Trainer::add_row(const MetricRow& row) {
  if (!root()) return;
  rows_.push_back(row);
  append_to_file(dir_ + "/metrics.jsonl", row.json() + "\n");
  append_to_file(dir_ + "/metrics.csv", metrics_csv_line(row) + "\n");
}

// A model is healthy when its last step updated it (no skipped streak) and every parameter is
// finite. Only a healthy model becomes best.h5 or the protected last finite checkpoint.
bool Trainer::healthy() const {
  return consecutive_skipped_ == 0 && all_finite(model_->parameters());
}

void Trainer::diverged(int64_t step, const std::string& why) {
  std::string msg = "step " + std::to_string(step) + ": " + why + "; the run diverged";
  if (last_finite_step_ >= 0)
    msg += " (last finite checkpoint: " +
           (fs::path(dir_) / "checkpoints" / checkpoint_name(last_finite_step_)).string() + ")";
  msg += "; start a new run with a lower train.lr or a longer train.warmup";
  // Every rank diverges at the same step (they apply the same updates); rank 0 reports it.
  comm_.failure_is_collective = true;
  if (!root()) throw PeerFailure();
  try {
    progress_->log_only("pelab: error: " + msg);
  } catch (const std::exception&) {
    // The log cannot be written (e.g. a full disk); the error itself still reaches the user.
  }
  fail(msg);
}

// After step `step` was skipped (settle()): a log line (the first skipped step, then at most one
// every train.log_every steps) and the divergence limits.
void Trainer::after_skipped_step(int64_t step, double loss) {
  const TrainConfig& t = cfg_.train;
  if (last_skip_report_ < 0 || step - last_skip_report_ >= t.log_every) {
    progress_->line("step " + std::to_string(step) + " skipped: non-finite " +
                    (std::isfinite(loss) ? "gradient norm" : "loss") + " (" +
                    count_text(consecutive_skipped_, "step") + " in a row, " +
                    std::to_string(skipped_steps_) + " skipped in total)");
    last_skip_report_ = step;
  }
  if (t.max_consecutive_skipped > 0 && consecutive_skipped_ >= t.max_consecutive_skipped)
    diverged(step, count_text(consecutive_skipped_, "consecutive step") +
             " skipped for a non-finite loss or gradient norm (train.max_consecutive_skipped = " +
             std::to_string(t.max_consecutive_skipped) + ")");
  if (t.max_skipped_steps > 0 && skipped_steps_ >= t.max_skipped_steps)
    diverged(step, count_text(skipped_steps_, "step") +
             " skipped in total for a non-finite loss or gradient norm (train.max_skipped_steps = " +
             std::to_string(t.max_skipped_steps) + ")");
}

void Trainer::rewrite_metrics_files() {
  std::string js, csv = metrics_csv_header() + "\n";
  for (const auto& r : rows_) {
    js += r.json() + "\n";
    csv += metrics_csv_line(r) + "\n";
  }
  write_text_file(dir_ + "/metrics.jsonl", js);
  write_text_file(dir_ + "/metrics.csv", csv);
}

EvalResult Trainer::validate() {
  Generator positions;
  EvalOptions vo;
  set_validation_positions(cfg_, positions, vo);  // train.valid_positions
  vo.stop = stop_check("validation");
  EvalResult r = evaluate_set(*model_, *data_, data_->valid(), cfg_, vo);
  if (r.interrupted) return r;  // nothing of it is recorded: a resume validates this step again
  last_valid_ = r;
  last_valid_step_ = step_;
  stop_.update(r, step_);
  if (!r.available()) return r;
  MetricRow row;
  row.set("type", "eval").set("step", step_).set("split", r.split).set("loss", r.loss);
  row.set("perplexity", r.perplexity).set("token_accuracy", r.token_accuracy);
  row.set("exact_match", r.exact_match);
  if (cfg_.train.stop_when.per_length)
    row.set("worst_length_exact_match", r.worst_length_exact_match());
  row.set("elapsed_s", clock_.elapsed());
  const std::string metric = effective_best_metric(cfg_);
  const double v = metric_of(r, metric);
  bool best = false;
  if (std::isfinite(v) && std::isfinite(r.loss) && healthy() &&
      (best_step_ < 0 || (higher_is_better(metric) ? v > best_ : v < best_))) {
    best_ = v;
    best_step_ = step_;
    best = true;
  }
  add_row(row);
  std::string msg = "eval step " + std::to_string(step_) + " " + r.split + ": loss " +
                    format_metric(r.loss, 4) + " ppl " + format_metric(r.perplexity, 3) +
                    " token_acc " + format_metric(r.token_accuracy, 4);
  if (std::isfinite(r.exact_match)) msg += " exact_match " + format_metric(r.exact_match, 4);
  if (cfg_.train.stop_when.per_length)
    msg += " (worst length " + format_metric(r.worst_length_exact_match(), 4) + ")";
  if (best) msg += " (best " + metric + ")";
  msg += stop_.progress_note();
  progress_->line(msg);
  if (stop_.met_step() == step_) progress_->line(stop_.met_line(step_));
  if (best) save(dir_ + "/checkpoints/best.h5");
  return r;
}

Convergence Trainer::convergence() const { return stop_.convergence(step_); }

void Trainer::save(const std::string& path) {
  CheckpointData d;
  d.step = step_;
  d.scheme = cfg_.model.pe.scheme;
  d.arch = cfg_.model.arch;
  d.config_yaml = config_to_yaml(cfg_);
  for (const auto& r : rows_) d.metrics_jsonl += r.json() + "\n";
  d.vocab = data_->vocab().tokens();
  capture_parameters(*model_, d);
  capture_optimizer(*optim_, cfg_.train.optimizer, d);
  d.counters["schedule_step"] = step_;
  d.counters["data_position"] = data_position_;
  d.counters["data_seed"] = static_cast<int64_t>(train_stream_seed(cfg_));
  d.counters["model_rng_seed"] = static_cast<int64_t>(model_->rng().seed());
  d.counters["model_rng_offset"] = static_cast<int64_t>(model_->rng().offset());
  d.counters["randpos_rng_seed"] = static_cast<int64_t>(randpos_.seed());
  d.counters["randpos_rng_offset"] = static_cast<int64_t>(randpos_.offset());
  d.counters["skipped_steps"] = skipped_steps_;
  d.counters["consecutive_skipped"] = consecutive_skipped_;
  d.counters["last_finite_step"] = last_finite_step_;
  d.counters["log_loss_count"] = log_loss_count_;
  d.counters["best_step"] = best_step_;
  d.counters["train_positions"] = train_positions_;
  if (pending_validation_) d.counters["validation_pending"] = 1;
  stop_.save(d);
  d.values["log_loss_sum"] = log_loss_sum_;
  d.values["best_metric"] = best_step_ >= 0 ? best_ : 0.0;
  d.values["last_lr"] = last_lr_;
  d.values["last_grad_norm"] = last_grad_norm_;
  d.values["elapsed_s"] = clock_.elapsed();
  // The proof pruning asks for (run_folder.h), noted before the file has its name.
  save_checkpoint(path, d, [&](const std::string& tmp) { note_written_checkpoint(path, tmp); });
}

void Trainer::save_step_checkpoint() {
  if (!root()) {  // rank 0 writes the run's checkpoints
    saved_step_ = step_;
    return;
  }
  const fs::path ckdir = fs::path(dir_) / "checkpoints";
  const std::string name = checkpoint_name(step_);
  if (healthy()) last_finite_step_ = step_;  // before save(): the checkpoint records it
  save((ckdir / name).string());
  saved_step_ = step_;
  // The newest train.keep_checkpoints, and the last finite one however old (after a divergence
  // the newest are all diverged models).
  rotate_checkpoints(dir_, cfg_.train.keep_checkpoints, last_finite_step_);
  update_last_link(dir_);
}


// ---------------- the run: set-up, the step loop, the end ----------------

// The step loop. Everything around a step is a named step of the Trainer: start() opens or
// resumes the run (every MPI rank agreeing), train_step() trains one step on every rank, settle()
// reads the steps' records where the host needs them (skipped steps, divergence limits),
// validate_and_save() validates (train.stop_when) and checkpoints, and finish() stops, or
// evaluates a finished run.
TrainResult Trainer::run() {
  StopSignalScope signals;  // from the start: a signal during set-up stops the run before a step
  set_num_threads(cfg_.train.threads);
  start();
  bool interrupted = !catch_up_validation();
  while (!interrupted && step_ < stop_at_ && !stop_.ends_training()) {
    if ((interrupted = signalled())) break;
    train_step(clock_.tokens);
    clock_.stepped(step_, cfg_.train.steps);
    if (records_needed()) settle();
    progress_->update(step_, last_loss_, last_lr_, clock_.tokens_per_s, clock_.eta_s,
                      step_ == cfg_.train.steps);  // (the loss of the last step read back)
    if (train_row_due()) train_row();
    interrupted = !validate_and_save();
  }
  settle();  // the steps since the last read (a stop by signal, --stop-after)
  return finish(interrupted);
}

// Every rank checks, rank 0 opens the run directory (the others build the same model and write
// nothing); a failure anywhere stops every rank here, before any step. Then the progress display,
// the run's first lines, and (MPI) the ranks' agreement on a signal received meanwhile.
void Trainer::start() {
  comm_.agreed([&] {
    check_ranks();
    if (root()) open_run();
  });
  if (comm_.size() > 1) {
    comm_.broadcast_string(resumed_from_, 0);
    comm_.agreed([&] {
      if (!root()) join_run();
    });
  }
  progress_ = std::make_unique<Progress>(root() ? opt_.progress : 2,
                                         root() ? dir_ + "/train.log" : "", cfg_.train.steps);
  announce();
  clock_.begin();
  stop_at_ = opt_.stop_after >= 0 ? std::min(opt_.stop_after, cfg_.train.steps) : cfg_.train.steps;
  // Under MPI the ranks agree on a signal received while the run was set up (one reduction); after
  // that each step's reduction, and each validation's, carries it, so all ranks stop together.
  if (comm_.size() > 1) {
    double any = stop_signal() ? 1.0 : 0.0;
    comm_.allreduce_sum(&any, 1);
    peer_signal_ = any > 0;
  }
}

// The run's first lines: what it trains (or where it resumes), the BLAS kernels, the notes of
// the command line, the ranks, the data's unknown symbols, and the criterion.
void Trainer::announce() {
  const int64_t total = cfg_.train.steps;
  const bool fresh = step_ == 0 && rows_.empty();
  if (fresh)
    progress_->line("pelab train: run " + dir_ + ": task " + cfg_.task.name + ", pe " +
                    cfg_.model.pe.scheme + ", " + count_text(model_->num_parameters(), "parameter") +
                    ", " + count_text(total, "step") + ", " + count_text(num_threads(), "thread"));
  else
    progress_->line("pelab train: resumed " + dir_ + " at step " + std::to_string(step_) + " of " +
                    std::to_string(total));
  progress_->line("pelab train: BLAS: " + blas_kernels_summary());
  for (const auto& note : opt_.notes) progress_->line(note);
  if (comm_.size() > 1)
    progress_->line("pelab train: data-parallel over " + comm_.describe() + ": " +
                    std::to_string(cfg_.train.batch_size / comm_.size()) +
                    " examples per rank per micro-batch; rank 0 writes the run");
  if (data_->train_unknown_symbols() > 0)
    progress_->line("pelab train: " + std::to_string(data_->train_unknown_symbols()) +
                    " symbols of task.train_file are not in the checkpoint's vocabulary and are "
                    "trained as <unk> (task.unknown_symbols: map_to_unk)");
  if (cfg_.train.stop_when.enabled() && fresh)
    progress_->line("pelab train: stop when " + cfg_.train.stop_when.describe() + " (at most " +
                    std::to_string(total) + " steps)");
  if (stop_.ends_training())
    progress_->line("pelab train: criterion already met at step " +
                    std::to_string(stop_.met_step()) + "; not training further");
}

// A run interrupted during a validation resumes with it (the uninterrupted run did it here), then
// its checkpoint. False when a signal interrupted it again.
bool Trainer::catch_up_validation() {
  return !pending_validation_ || signalled() || validate_and_save();
}

// A stop signal, as every rank sees it (under MPI: as the last reduction carried it).
bool Trainer::signalled() const { return comm_.size() > 1 ? peer_signal_ : stop_signal() != 0; }

bool Trainer::eval_due() const {
  const TrainConfig& t = cfg_.train;
  return (t.eval_every > 0 && step_ % t.eval_every == 0) || step_ == t.steps;
}

bool Trainer::checkpoint_due() const {
  const TrainConfig& t = cfg_.train;
  return (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0) || step_ == t.steps ||
         stop_.ends_at(step_);
}

bool Trainer::train_row_due() const {
  return step_ % cfg_.train.log_every == 0 || step_ == cfg_.train.steps;
}

// The steps' records are read where the host needs them: a training row, a validation, a
// checkpoint, a full window (and the end of training, after the loop); the other steps read
// nothing back and wait for nothing.
bool Trainer::records_needed() const {
  const TrainConfig& t = cfg_.train;
  return train_row_due() || pending_ == history_.size(0) ||
         (t.eval_every > 0 && step_ % t.eval_every == 0) ||
         (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0);
}

// The training row of the steps since the last one: their mean loss, the last lr and gradient
// norm, the throughput; in metrics.jsonl/.csv and as a progress line.
void Trainer::train_row() {
  const int64_t total = cfg_.train.steps;
  const double mean = log_loss_sum_ / static_cast<double>(log_loss_count_);
  MetricRow row;
  row.set("type", "train").set("step", step_).set("loss", mean).set("lr", last_lr_);
  row.set("grad_norm", last_grad_norm_).set("tokens_per_s", clock_.tokens_per_s);
  row.set("elapsed_s", clock_.elapsed_at_step());
  add_row(row);
  progress_->train_line("step " + std::to_string(step_) + "/" + std::to_string(total) + " loss " +
                        format_metric(mean, 4) + " lr " + printf_number("%.3e", last_lr_) +
                        " grad_norm " + format_metric(last_grad_norm_, 3) + " tok/s " +
                        printf_number("%.0f", clock_.tokens_per_s) + " elapsed " +
                        Progress::format_duration(clock_.elapsed_at_step()) + " eta " +
                        Progress::format_duration(clock_.eta_s));
  log_loss_sum_ = 0;
  log_loss_count_ = 0;
  clock_.row_written();
}

// What follows a step's training: its validation, then its checkpoint. False when a signal
// interrupted the validation (pending_validation_: the checkpoint written then says so).
bool Trainer::validate_and_save() {
  if (eval_due() && !validate_everywhere()) return false;
  // A run stopped by its criterion logs the steps since the last training row, as the last
  // step of train.steps does (after the validation that decided it).
  if (stop_.ends_at(step_) && log_loss_count_ > 0) train_row();
  if (checkpoint_due()) save_step_checkpoint();
  return true;
}

// After the loop: the run's closing lines, then a stopped run's checkpoint, or a finished run's
// final evaluation (finished by reaching train.steps or by meeting train.stop_when, possibly
// already on resume).
TrainResult Trainer::finish(bool interrupted) {
  progress_->finish();
  report_training_end();
  refuse_a_run_without_result();
  TrainResult res;
  res.run_dir = dir_;
  res.interrupted = interrupted;
  res.skipped_steps = skipped_steps_;
  res.criterion_set = cfg_.train.stop_when.enabled();
  res.criterion_met = stop_.met();
  res.criterion_step = stop_.met_step();
  if (interrupted || (step_ < cfg_.train.steps && !stop_.ends_training())) return stopped(res);
  if (cfg_.train.steps == 0 && saved_step_ != 0) {  // a run of 0 steps: its step 0, validated
    if (!validate_everywhere()) {
      res.interrupted = true;
      return stopped(res);
    }
    save_step_checkpoint();
    res.criterion_met = stop_.met();
    res.criterion_step = stop_.met_step();
  }
  res.step = step_;
  if (!root()) {  // the final evaluation and its files are rank 0's
    res.finished = true;
    return res;
  }
  return final_evaluation(res);
}

// The lines that close the training: the time in the MPI reductions, the skipped steps.
void Trainer::report_training_end() {
  const double seconds = now_s() - clock_.start;
  if (comm_.size() > 1 && clock_.steps > 0)
    progress_->line("pelab train: " + printf_number("%.3f", comm_s_) + " s of " +
                    printf_number("%.3f", seconds) + " s in the gradient/loss reductions (" +
                    printf_number("%.1f", 100 * comm_s_ / std::max(1e-9, seconds)) +
                    " %, rank 0, waiting for the other ranks included)");
  if (skipped_steps_ > 0)
    progress_->line("pelab train: " + std::to_string(skipped_steps_) + " of " +
                    count_text(step_, "step") +
                    " skipped for a non-finite loss or gradient norm (no update)");
}

// A run that ends with parameters that are not finite, or that never updated its model (every
// step skipped: e.g. an initialisation whose loss overflows), has no result: an error, not exit 0
// (the skip limits catch this in a long run; this catches it in a short one).
void Trainer::refuse_a_run_without_result() {
  if (clock_.steps == 0 || healthy()) return;
  if (!all_finite(model_->parameters()))
    diverged(step_, "the parameters are not finite after the last update (learning rate too large?)");
  if (consecutive_skipped_ >= step_)
    diverged(step_, "all " + count_text(step_, "step") +
             " skipped for a non-finite loss or gradient norm: the model never updated (check "
             "model.init_std and the pe.* initial values)");
}

// A run stopped before its end (a signal, --stop-after): its checkpoint, and how to continue.
TrainResult Trainer::stopped(TrainResult res) {
  // Rank 0 writes the checkpoint while the others wait for it here: no rank ends (which makes
  // mpirun end the job) before it is on disk, and a failed write is every rank's error.
  comm_.agreed([&] {
    if (saved_step_ != step_) save_step_checkpoint();
  });
  res.step = step_;
  res.last_checkpoint = latest_checkpoint(dir_);
  // Shown in every progress mode: it says how to continue.
  if (root())
    progress_->notice(std::string("pelab train: ") + (res.interrupted ? "interrupted" : "stopped") +
                      " at step " + std::to_string(step_) +
                      (pending_validation_ ? " during its validation" : "") +
                      "; continue with --resume " + dir_);
  return res;
}

// The run's record of its criterion (a "convergence" row, and a line when it was not met).
Convergence Trainer::record_convergence() {
  const StopWhen& crit = cfg_.train.stop_when;
  const Convergence conv = convergence();
  if (!conv.has_criterion()) return conv;
  // A resumed finished run restored its rows from the final checkpoint, which was written
  // before this row, so the row appears once.
  add_row(convergence_row(conv, crit, step_));
  if (!conv.met()) progress_->line(stop_.not_met_line(cfg_.train.steps));
  return conv;
}

// A finished run (rank 0): valid + every test split with the final parameters, in eval.json/.csv
// (with the convergence record) and train.log.
TrainResult Trainer::final_evaluation(TrainResult res) {
  const Convergence conv = record_convergence();
  std::vector<EvalResult> results = evaluate_final();
  res.last_checkpoint = latest_checkpoint(dir_);
  if (results.back().interrupted) {
    // The checkpoint of this step is on disk; a resume of the finished run evaluates it.
    res.interrupted = true;
    progress_->notice("pelab train: interrupted at step " + std::to_string(step_) +
                      " during the final evaluation; continue with --resume " + dir_ +
                      " (it runs the final evaluation)");
    return res;
  }
  write_eval_files(dir_, results, step_, "checkpoints/" + checkpoint_name(step_),
                   convergence_json(conv));
  if (cfg_.eval.save_predictions) write_prediction_files(dir_, results);
  // The table goes to train.log; `pelab train` prints it on stdout (on a terminal, stdout and
  // stderr are the same screen: printed on both it would show twice).
  std::istringstream table(eval_table(results));
  std::string line;
  progress_->log_only("final evaluation at step " + std::to_string(step_) +
                      (conv.met() ? " (criterion met)" : "") + ":");
  while (std::getline(table, line)) progress_->log_only("  " + line);
  // What this process held at its peak, next to the estimate it was admitted by.
  progress_->log_only("memory: peak resident " + gigabytes(peak_resident_bytes()) + "; estimated " +
                      run_memory_text(cfg_, training_memory_use(cfg_), data_.get()));
  res.finished = true;
  res.final_eval = std::move(results);
  return res;
}

// The final evaluation's results: valid (the final step's validation when it ran and no
// predictions are kept), then every test split; the last is interrupted when a signal stopped it.
std::vector<EvalResult> Trainer::evaluate_final() {
  const bool keep = cfg_.eval.save_predictions;
  EvalOptions eo;
  eo.keep_predictions = keep;
  eo.stop = stop_check("final_eval");
  std::vector<EvalResult> results;
  if (last_valid_step_ == step_ && !keep) {
    results.push_back(last_valid_);  // the validation run of the final step
  } else {
    Generator positions;
    EvalOptions vo = eo;
    set_validation_positions(cfg_, positions, vo);  // as validate() does
    results.push_back(evaluate_set(*model_, *data_, data_->valid(), cfg_, vo));
  }
  for (const auto& s : data_->tests()) {
    if (results.back().interrupted) break;
    results.push_back(evaluate_set(*model_, *data_, s, cfg_, eo));
  }
  return results;
}

}  // namespace

// ---------------- public API ----------------

std::unique_ptr<models::Transformer> build_model(const Config& cfg, const TaskData& data,
                                                 int64_t train_positions) {
  const int64_t tp = train_positions > 0 ? train_positions : data.train_positions();
  const int64_t max_pos = models::pe_max_positions(cfg.model.pe);  // 0 = no limit
  const std::string max_pos_name = models::pe_max_positions_name(cfg.model.pe);
  // The positions the model is asked for in training: the task's IDs where it supplies them (a
  // sequence may be longer than its IDs go: digits of equal significance share one), else
  // 0..tp-1 for a sequence of tp tokens.
  const int64_t top_id = data.largest_train_position_id();
  if (max_pos > 0 && top_id >= 0 && top_id >= max_pos)
    fail(max_pos_name, " (", max_pos, ") must be > ", top_id,
         ", the largest task position ID in training (task.position_ids ", cfg.task.position_ids,
         ", task.max_position_id ", cfg.task.max_position_id, ", task.train_max_len ",
         cfg.task.train_max_len, "); raise ", max_pos_name, " or lower task.max_position_id");
  if (max_pos > 0 && top_id < 0 && tp > max_pos) {
    // Synthetic and lm tasks are refused by the config rule already; text files here, by line.
    if (train_positions <= 0 && !data.longest_train_example().empty())
      fail(data.longest_train_example(), ": this training example needs ",
           data.train_positions(), " positions (bos/eos/separator included), more than ",
           max_pos_name, " ", max_pos,
           " (pe.scheme ", cfg.model.pe.scheme, "); raise ", max_pos_name, " or shorten the line");
    fail(max_pos_name, " (", max_pos, ") must cover the longest training sequence: ",
         tp, " tokens (bos/eos/separator included)");
  }
  // Refuse a model whose parameters cannot fit before allocating any of them.
  check_parameter_memory(cfg, data.vocab().size(), tp, machine_memory_bytes());
  auto model = std::make_unique<models::Transformer>(to_model_config(cfg, data.vocab().size(), tp));
  const Device dev = Device::parse(cfg.train.device);
  if (dev != Device::cpu()) model->to(dev);
  return model;
}

TrainResult train(const Config& cfg, const TrainOptions& opt) {
  Trainer t(cfg, opt);
  return t.run();
}

bool resume_may_change(const std::string& key) {
  static const std::set<std::string> ok = {
      "train.steps",           "train.log_every",        "train.eval_every",
      "train.checkpoint_every", "train.keep_checkpoints", "train.threads",
      "train.device",          "train.tags",             "train.max_consecutive_skipped",
      "train.max_skipped_steps"};
  return ok.count(key) || key.rfind("eval.", 0) == 0;
}

std::string resume_changeable_keys() {
  return "train.steps, train.log_every, train.eval_every, train.checkpoint_every, "
         "train.keep_checkpoints, train.threads, train.device, train.tags, "
         "train.max_consecutive_skipped, train.max_skipped_steps and eval.*";
}

ResumeTarget resolve_resume(const std::string& path) {
  std::error_code ec;
  ResumeTarget t;
  if (fs::is_directory(path, ec)) {
    PELAB_CHECK(is_run_directory(path), "--resume ", path,
                ": not a run directory (no config.yaml in it)");
    t.run_dir = path;
    t.checkpoint = latest_checkpoint(path);
    PELAB_CHECK(!t.checkpoint.empty(), "--resume ", path, ": no checkpoint in ", path,
                "/checkpoints (nothing to resume)");
    return t;
  }
  PELAB_CHECK(fs::exists(path, ec), "--resume ", path, ": no such run directory or checkpoint file");
  // A checkpoint file belongs to the run whose checkpoints/ directory holds it; a file anywhere
  // else has no run (its grandparent directory is not one), and resuming "into" a guessed
  // directory would overwrite that directory's files.
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const fs::path run = abs.parent_path().parent_path();
  PELAB_CHECK(abs.parent_path().filename() == "checkpoints" && is_run_directory(run.string()),
              "--resume ", path,
              ": not a checkpoint in a run directory's checkpoints/ folder; resume a run with "
              "--resume RUN_DIR (or RUN_DIR/checkpoints/step_N.h5)");
  t.run_dir = run.string();
  t.checkpoint = path;
  return t;
}

Config resume_config(const std::string& run_dir, const std::vector<std::string>& overrides) {
  const std::string path = (fs::path(run_dir) / "config.yaml").string();
  const Config stored = load_config(path);
  Config c = load_config(path, overrides);
  for (const auto& key : config_schema()) {
    const std::string k = key.full_name();
    if (k == "train.resume" || resume_may_change(k)) continue;
    const std::string a = config_value_text(stored, k), b = config_value_text(c, k);
    PELAB_CHECK(a == b, "--resume ", run_dir, ": --set ", k, "=", b,
                " would change the run, which was trained with ", k, "=", a, "; on resume only ",
                resume_changeable_keys(), " may change (start a new run to change anything else)");
  }
  c.train.resume = "";
  return c;
}

LoadedModel load_model(const Config& cfg, const std::string& checkpoint, MemoryUse use) {
  LoadedModel lm;
  lm.cfg = cfg;
  // The model stays on the host until build_model moves it: the host holds it all at first.
  check_run_memory(cfg, use, machine_memory_bytes());
  if (checkpoint.empty()) {
    lm.data = std::make_unique<TaskData>(cfg);
    check_run_memory(cfg, use, machine_memory_bytes(), lm.data.get());
    lm.model = build_model(cfg, *lm.data);
    lm.train_positions = lm.data->train_positions();
    return lm;
  }
  CheckpointData ck = load_checkpoint(checkpoint);
  PELAB_CHECK(ck.scheme == cfg.model.pe.scheme, "checkpoint ", checkpoint, ": trained with pe.scheme ",
              ck.scheme, " but the config says pe.scheme ", cfg.model.pe.scheme);
  PELAB_CHECK(ck.arch == cfg.model.arch, "checkpoint ", checkpoint, ": trained with model.arch ",
              ck.arch, " but the config says model.arch ", cfg.model.arch);
  lm.data = std::make_unique<TaskData>(cfg, ck.vocab);
  check_run_memory(cfg, use, machine_memory_bytes(), lm.data.get());
  const int64_t stored = stored_train_positions(ck);
  lm.train_positions = stored > 0 ? stored : lm.data->train_positions();
  lm.model = build_model(cfg, *lm.data, lm.train_positions);
  load_parameters(*lm.model, ck, checkpoint);
  lm.checkpoint = checkpoint;
  lm.step = ck.step;
  return lm;
}

}  // namespace pelab
