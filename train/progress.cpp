// pelab — progress bar and log lines (progress.h).
#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "pelab/error.h"

namespace pelab {

Progress::Progress(int mode_request, const std::string& log_path, int64_t total_steps)
    : total_(total_steps) {
  if (mode_request == 2)
    mode_ = Mode::Silent;
  else if (mode_request == 1 || (mode_request < 0 && ::isatty(STDERR_FILENO)))
    mode_ = Mode::Bar;
  else
    mode_ = Mode::Lines;
  if (!log_path.empty()) {
    log_.open(log_path, std::ios::app);
    PELAB_CHECK(log_.good(), "cannot open log file ", log_path);
  }
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
  if (log_.is_open()) log_ << msg << "\n" << std::flush;
  if (mode_ == Mode::Silent) return;
  clear_bar();
  std::cerr << msg << "\n";
  if (mode_ == Mode::Bar && !last_bar_.empty()) {
    std::cerr << last_bar_ << std::flush;
    bar_shown_ = true;
  }
}

void Progress::train_line(const std::string& msg) {
  if (log_.is_open()) log_ << msg << "\n" << std::flush;
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
  std::snprintf(buf, sizeof buf, "[%s] %lld/%lld loss %.4f lr %.2e %.0f tok/s ETA %s",
                bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_), loss,
                lr, tokens_per_s, format_duration(eta_s).c_str());
  std::string text = buf;
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
