// pelab — the one scope for the signals that stop a training run or a comparison cleanly
// (SIGINT, SIGTERM and SIGHUP: a closed terminal stops like SIGTERM). The trainer checks
// stop_signal() between steps (and writes one checkpoint), compare between runs and evaluations.
#pragma once

namespace pelab {

// While at least one scope is alive, SIGINT, SIGTERM and SIGHUP set the stop signal instead of
// their previous handlers; the outermost scope clears it when it begins and restores the previous
// handlers when it ends. A scope inside another (training inside an in-process comparison) shares
// the outer one's handlers and signal, so a signal stops both.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;
};

// The signal received inside the current scopes (0 = none).
int stop_signal();

}  // namespace pelab
