// Threads the engine starts and the cores it places them on, in one place: every owner of threads
// (the bench checker, the cpu backend's spin pool and batch workers, the cuda backend's fallback worker
// and heartbeat) starts them through ThreadGroup and pins them through pin_thread / try_pin_thread.
#pragma once
#include <pthread.h>

#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace hotpath::util {

// The cores the calling thread may run on (empty if the kernel will not say).
std::vector<int> allowed_cores();
// Whether the process may run a thread on `core` (its cpuset and the machine allow it), whatever the
// calling thread is pinned to now: tried by pinning the calling thread there and back (an engine made
// by a thread that an earlier engine pinned, maybe from another copy of this code, e.g. libhotpath.so
// beside the Python module, must still be able to name the other cores).
bool core_usable(int core);

// Restricts `thread` to `cores`; returns 0 or the errno (EINVAL for an empty set or a core outside
// 0..CPU_SETSIZE-1). The one place that calls pthread_setaffinity_np.
int set_thread_cores(pthread_t thread, const std::vector<int>& cores);

// "cpu 3" or "cpus 2,3,5".
std::string cores_text(const std::vector<int>& cores);

// Pins `thread` to `cores`; throws hotpath::Error "<who>: cannot pin ... (<why>)" when it fails.
void pin_thread(pthread_t thread, const std::vector<int>& cores, const std::string& who);

// For placement that is only a preference: pins, and when that fails records the failure (see
// pin_failures) and returns false instead of throwing.
bool try_pin_thread(pthread_t thread, const std::vector<int>& cores, const std::string& who);

// Pins the calling thread to `cores` for the object's lifetime and gives it back its old cores after
// (nothing when `cores` is empty). required: a failure throws (pin_thread); else it is recorded
// (try_pin_thread) and the thread runs unpinned.
class ScopedPin {
 public:
  ScopedPin(const std::vector<int>& cores, const std::string& who, bool required);
  ~ScopedPin();
  ScopedPin(const ScopedPin&) = delete;
  ScopedPin& operator=(const ScopedPin&) = delete;

 private:
  bool pinned_ = false;
  std::vector<int> old_;  // the cores the thread had before
};

struct PinFailure {
  std::string thread;      // who asked, e.g. "bench checker 2 of 8"
  std::vector<int> cores;  // where it was to run
  std::string reason;      // strerror of the failure
};
// Failures recorded by try_pin_thread since the process started or the last clear (thread-safe).
std::vector<PinFailure> pin_failures();
void clear_pin_failures();

// The error for a thread the system refused to create (std::thread's std::system_error): names the
// thread and the likely limit, so the CLI prints one line and exits 2 instead of "internal error".
Error thread_start_error(const std::string& what, const std::system_error& e);

// Starts `body` on a new std::thread; throws std::system_error when it cannot be created. Owners that
// join their own threads (the LLM benchmark's) start them here, so that a test can make a start fail
// the way it does under `ulimit -u` and check that the owner joins what it started and says why.
std::thread start_thread(std::function<void()> body);

// For tests: the (n+1)-th start_thread() from now throws std::system_error (EAGAIN) instead of
// starting a thread; a negative n disarms it.
void fail_thread_start_for_test(int n);

// A std::jthread (joined by its destructor, so a throwing owner never terminates) whose refusal is a
// thread_start_error.
template <class F>
std::jthread start_jthread(const std::string& what, F&& fn) {
  try {
    return std::jthread(std::forward<F>(fn));
  } catch (const std::system_error& e) {
    throw thread_start_error(what, e);
  }
}

// Threads that are always joined: the destructor first calls `stop` (which must make every thread
// return soon) and then joins what started, so an owner whose constructor throws halfway (a thread
// that cannot be created, a core that cannot be pinned) never destroys a joinable std::thread
// (std::terminate). Declare it after every member its threads use, so it is destroyed first.
class ThreadGroup {
 public:
  explicit ThreadGroup(std::function<void()> stop = {}) : stop_(std::move(stop)) {}
  ~ThreadGroup() { stop_and_join(); }
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Starts fn on a new thread. When the system refuses a thread (EAGAIN under `ulimit -u`), throws
  // hotpath::Error naming `what` and the limit; threads already started keep running until
  // stop_and_join().
  void start(const std::string& what, std::function<void()> fn);
  std::thread& back() { return threads_.back(); }
  std::thread::native_handle_type native_handle(size_t i) { return threads_.at(i).native_handle(); }
  size_t size() const { return threads_.size(); }
  // Joins every thread (they must be returning on their own).
  void join();
  // Calls stop (once) and joins every thread. Idempotent.
  void stop_and_join();

 private:
  std::function<void()> stop_;
  std::vector<std::thread> threads_;
};

}  // namespace hotpath::util
