// Ctrl-C for a benchmark run: the first SIGINT (or SIGTERM) asks the run to stop sending and finish
// what is in flight, so that every output is still written (marked interrupted); a second one ends
// the process at once.
#pragma once
#include <atomic>

namespace hotpath::llm {

// A stop request that a signal handler can make and an epoll loop can wait on: an eventfd that
// becomes readable (and stays so) once request() was called.
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  void request() noexcept;  // async-signal-safe
  bool requested() const noexcept { return flag_.load(std::memory_order_acquire); }
  int fd() const noexcept { return fd_; }

 private:
  int fd_ = -1;
  std::atomic<bool> flag_{false};
};

// While alive, SIGINT and SIGTERM request `stop` the first time (with a note on stderr) and exit
// the process with status 128 + signal the second time. The previous handlers come back after.
// One at a time per process.
class InterruptScope {
 public:
  explicit InterruptScope(StopSignal& stop);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct Saved;
  Saved* saved_;
};

}  // namespace hotpath::llm
