// pelab — progress bar and log lines (progress.h).
#include "train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "pelab/error.h"
#include "train/metrics.h"

namespace pelab {

Progress::Progress(int mode_request, const std::string& log_path, int64_t total_steps)
    : total_(total_steps) {
  if (mode_request == 2)
    mode_ = Mode::Silent;
  else if (mode_request == 1 || (mode_request < 0 && ::isatty(STDERR_FILENO)))
    mode_ = Mode::Bar;
  else
    mode_ = Mode::Lines;
  log_path_ = log_path;
  if (!log_path_.empty()) append_to_file(log_path_, "");  // fails early when it cannot be written
}

int Progress::terminal_columns() {
  struct winsize ws {};
  if (::isatty(STDERR_FILENO) && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v > 0 && v < 100000) return static_cast<int>(v);
  }
  return 80;
}

void Progress::log(const std::string& msg) {
  if (!log_path_.empty()) append_to_file(log_path_, msg + "\n");
}

Progress::~Progress() { finish(); }

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

void Progress::clear_bar() {
  if (!bar_shown_) return;
  std::cerr << "\r" << std::string(last_bar_.size(), ' ') << "\r";
  bar_shown_ = false;
}

void Progress::line(const std::string& msg) {
  log(msg);
  if (mode_ != Mode::Silent) show(msg);
}

void Progress::notice(const std::string& msg) {
  log(msg);
  show(msg);
}

void Progress::log_only(const std::string& msg) { log(msg); }

void Progress::show(const std::string& msg) {
  clear_bar();
  std::cerr << msg << "\n";
  if (mode_ == Mode::Bar && !last_bar_.empty()) {
    std::cerr << last_bar_ << std::flush;
    bar_shown_ = true;
  }
}

void Progress::train_line(const std::string& msg) {
  log(msg);
  if (mode_ == Mode::Lines) std::cerr << msg << "\n" << std::flush;
}

void Progress::update(int64_t step, double loss, double lr, double tokens_per_s, double eta_s,
                      bool force) {
  if (mode_ != Mode::Bar) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && bar_shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int width = 24;
  const double frac = total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar += std::string(static_cast<size_t>(width - filled), '.');
  char buf[256];
  std::snprintf(buf, sizeof buf, "[%s] %lld/%lld loss %s lr %.2e %.0f tok/s ETA %s",
                bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_),
                format_metric(loss, 4).c_str(), lr, tokens_per_s, format_duration(eta_s).c_str());
  std::string text = buf;
  // One column short of the width: a line that fills the terminal wraps, and every redraw would
  // then start a new line.
  const size_t cols = static_cast<size_t>(std::max(1, terminal_columns() - 1));
  if (text.size() > cols) text.resize(cols);
  if (last_bar_.size() > cols) last_bar_.resize(cols);
  std::string pad = last_bar_.size() > text.size() ? std::string(last_bar_.size() - text.size(), ' ')
                                                   : std::string();
  std::cerr << "\r" << text << pad << std::flush;
  last_bar_ = text;
  bar_shown_ = true;
}

void Progress::finish() {
  if (mode_ == Mode::Bar && bar_shown_) std::cerr << "\n" << std::flush;
  bar_shown_ = false;
  last_bar_.clear();
}

}  // namespace pelab
