// pelab — the one scope for the signals that stop a training run or a comparison cleanly
// (SIGINT, SIGTERM and SIGHUP: a closed terminal stops like SIGTERM). The trainer checks
// stop_signal() between steps and inside evaluations (and writes one checkpoint), compare between
// runs and evaluations.
#pragma once

namespace pelab {

// While at least one scope is alive, SIGINT, SIGTERM and SIGHUP set the stop signal instead of
// their previous handlers; the outermost scope clears it when it begins and restores the previous
// handlers when it ends. A scope inside another (training inside an in-process comparison) shares
// the outer one's handlers and signal, so a signal stops both.
//
// A second stop signal (the user insisting: Ctrl-C twice) ends the process at once by that signal's
// default action; checkpoints are written atomically, so the last one on disk stays good. A signal
// from the parent process does not count as insisting: `compare --jobs` and `mpirun` pass on a
// stop to their children, which may already have it from the terminal or the batch system.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;
};

// The signal received inside the current scopes (0 = none).
int stop_signal();

// Test hook (docs/testing.md): makes a signal land at a named point of the trainer every time, not
// by luck. PELAB_TEST_SIGNAL_AT=POINT[@RANK][+MS] raises SIGTERM in this process the first time it
// reaches POINT within the outermost signal scope (on MPI rank RANK only, when given); with +MS,
// another thread raises it MS milliseconds later, so that it lands inside whatever follows the
// point (e.g. a collective). PELAB_TEST_PAUSE_AT (same form) sleeps MS milliseconds there instead.
// The points: startup (pelab train, right after its signal scope is in place, before MPI starts),
// step (mid-step: after the backward passes, before the reduction and the update), reduction
// (just before the step's reductions, MPI only), validation (rank 0: at the first check inside
// the validation; the other ranks: as they start waiting for it) and final_eval (at the first
// check inside the final evaluation). Unset: nothing happens.
void stop_test_point(const char* point, int rank);

}  // namespace pelab
