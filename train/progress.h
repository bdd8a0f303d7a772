// pelab — training progress on stderr and the run's train.log: a progress bar redrawn with '\r'
// when stderr is a terminal (step, loss, LR, tokens/s, ETA; cut to the terminal's width), plain
// periodic lines otherwise. Every write to train.log is checked: a failed write throws
// pelab::Error naming the file (the run stops rather than going on without its log).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace pelab {

class Progress {
 public:
  enum class Mode { Bar, Lines, Silent };
  // mode_request: -1 auto (Bar when isatty(stderr)), 0 Lines, 1 Bar, 2 Silent. log_path: the
  // train.log file (appended to).
  Progress(int mode_request, const std::string& log_path, int64_t total_steps);
  ~Progress();
  Mode mode() const { return mode_; }

  // A message line: written to train.log and shown on stderr (above the bar in Bar mode).
  void line(const std::string& msg);
  // A line that is shown on stderr in every mode, Silent included (how to continue a stopped run).
  void notice(const std::string& msg);
  // A line for train.log only (the final table, which `pelab train` prints on stdout).
  void log_only(const std::string& msg);
  // A periodic training line (every train.log_every steps): to train.log; on stderr in Lines mode.
  void train_line(const std::string& msg);
  // Redraws the bar (Bar mode; at most ~10 times a second unless `force`).
  void update(int64_t step, double loss, double lr, double tokens_per_s, double eta_s,
              bool force = false);
  void finish();  // ends the bar's line

  static std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
  // Columns of the terminal on stderr (TIOCGWINSZ), else $COLUMNS, else 80.
  static int terminal_columns();

 private:
  void clear_bar();
  void log(const std::string& msg);
  void show(const std::string& msg);
  Mode mode_;
  std::string log_path_;
  int64_t total_;
  bool bar_shown_ = false;
  std::string last_bar_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace pelab
