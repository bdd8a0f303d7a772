// pelab — StopSignalScope (stop_signal.h).
#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

namespace pelab {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_hook_raised{false}, g_hook_paused{false};  // stop_test_point fired (this scope)
int g_depth = 0;  // scopes are opened and closed on the main thread
struct sigaction g_old_int {}, g_old_term{}, g_old_hup{};

// Async-signal-safe: an atomic store, or (a second signal, not from the parent) the default action.
void on_signal(int sig, siginfo_t* info, void*) {
  const bool from_parent = info != nullptr && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (g_signal.load() != 0 && !from_parent) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // delivered when this handler returns (the signal is blocked inside it)
    return;
  }
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);  // the first signal is the one reported
}

// POINT[@RANK][+MS] of a test hook variable matches `point` on `rank`: sets ms (0 when absent).
bool hook_matches(const char* var, const char* point, int rank, long& ms) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return false;
  const std::string s = v;
  const size_t at = s.find('@'), plus = s.find('+');
  if (s.substr(0, std::min(at, plus)) != point) return false;
  if (at != std::string::npos && std::atoi(s.c_str() + at + 1) != rank) return false;
  ms = plus != std::string::npos ? std::atol(s.c_str() + plus + 1) : 0;
  return true;
}

}  // namespace

StopSignalScope::StopSignalScope() {
  if (g_depth++ > 0) return;
  g_signal.store(0);
  g_hook_raised.store(false);
  g_hook_paused.store(false);
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
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

void stop_test_point(const char* point, int rank) {
  long ms = 0;
  if (!g_hook_paused.load() && hook_matches("PELAB_TEST_PAUSE_AT", point, rank, ms)) {
    g_hook_paused.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (!g_hook_raised.load() && hook_matches("PELAB_TEST_SIGNAL_AT", point, rank, ms)) {
    g_hook_raised.store(true);
    if (ms <= 0) {
      ::raise(SIGTERM);
      return;
    }
    const pid_t self = ::getpid();
    std::thread([self, ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ::kill(self, SIGTERM);
    }).detach();
  }
}

}  // namespace pelab
