// pelab — StopSignalScope (train/stop_signal.h): the one signal scope of the trainer and compare.
#include <gtest/gtest.h>

#include <csignal>

#include "train/stop_signal.h"

namespace {

using pelab::stop_signal;
using pelab::StopSignalScope;

void (*current_handler(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

void marker_handler(int) {}

TEST(StopSignalScope, RecordsTheSignalAndRestoresThePreviousHandlers) {
  struct sigaction mark {}, old_int {}, old_term {}, old_hup {};
  mark.sa_handler = marker_handler;
  sigemptyset(&mark.sa_mask);
  sigaction(SIGINT, &mark, &old_int);
  sigaction(SIGTERM, &mark, &old_term);
  sigaction(SIGHUP, &mark, &old_hup);
  {
    StopSignalScope scope;
    EXPECT_EQ(stop_signal(), 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) EXPECT_NE(current_handler(sig), marker_handler) << sig;
    std::raise(SIGTERM);
    EXPECT_EQ(stop_signal(), SIGTERM);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) EXPECT_EQ(current_handler(sig), marker_handler) << sig;
  {
    StopSignalScope again;  // a new outermost scope starts without a signal
    EXPECT_EQ(stop_signal(), 0);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
}

// Training inside an in-process comparison: the inner scope shares the outer one's signal (a signal
// before or during training stops both) and leaves the outer handlers in place when it ends.
TEST(StopSignalScope, AnInnerScopeSharesTheOuterSignalAndHandlers) {
  StopSignalScope outer;
  std::raise(SIGINT);
  {
    StopSignalScope inner;
    EXPECT_EQ(stop_signal(), SIGINT);  // not cleared by the inner scope
    std::raise(SIGHUP);
    EXPECT_EQ(stop_signal(), SIGHUP);
  }
  std::raise(SIGTERM);  // still caught: the outer scope's handler is in place
  EXPECT_EQ(stop_signal(), SIGTERM);
}

}  // namespace
