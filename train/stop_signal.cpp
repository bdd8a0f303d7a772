// pelab — StopSignalScope (stop_signal.h).
#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace pelab {

namespace {

std::atomic<int> g_signal{0};
int g_depth = 0;  // scopes are opened and closed on the main thread
struct sigaction g_old_int {}, g_old_term{}, g_old_hup{};

void on_signal(int sig) { g_signal.store(sig); }

}  // namespace

StopSignalScope::StopSignalScope() {
  if (g_depth++ > 0) return;
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGHUP, &sa, &g_old_hup);
}

StopSignalScope::~StopSignalScope() {
  if (--g_depth > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGHUP, &g_old_hup, nullptr);
}

int stop_signal() { return g_signal.load(); }

}  // namespace pelab
