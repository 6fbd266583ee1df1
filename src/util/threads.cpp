#include "util/threads.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>
#include <utility>

#include "util/error.hpp"

namespace hotpath::util {
namespace {

std::mutex g_pin_mutex;
std::vector<PinFailure> g_pin_failures;
std::atomic<int> g_fail_countdown{-1};  // >= 0: starts left before the one that fails

}  // namespace

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

bool core_usable(int core) {
  const std::vector<int> mine = allowed_cores();
  if (std::find(mine.begin(), mine.end(), core) != mine.end()) return true;
  if (mine.empty() || core < 0 || core >= CPU_SETSIZE) return false;
  const bool ok = set_thread_cores(pthread_self(), {core}) == 0;
  if (ok) set_thread_cores(pthread_self(), mine);
  return ok;
}

int set_thread_cores(pthread_t thread, const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) {
    if (c < 0 || c >= CPU_SETSIZE) return EINVAL;
    CPU_SET(c, &set);
  }
  if (CPU_COUNT(&set) == 0) return EINVAL;
  return pthread_setaffinity_np(thread, sizeof set, &set);
}

std::string cores_text(const std::vector<int>& cores) {
  std::string s = cores.size() == 1 ? "cpu " : "cpus ";
  for (size_t i = 0; i < cores.size(); ++i) s += (i ? "," : "") + std::to_string(cores[i]);
  return cores.empty() ? "no cpus" : s;
}

void pin_thread(pthread_t thread, const std::vector<int>& cores, const std::string& who) {
  if (const int err = set_thread_cores(thread, cores))
    throw Error(who + ": cannot pin a thread to " + cores_text(cores) + " (" + std::strerror(err) +
                "); --cpuset must name cores this process may run on");
}

ScopedPin::ScopedPin(const std::vector<int>& cores, const std::string& who, bool required) {
  if (cores.empty()) return;
  old_ = allowed_cores();
  if (required) {
    pin_thread(pthread_self(), cores, who);
    pinned_ = !old_.empty();
  } else {
    pinned_ = try_pin_thread(pthread_self(), cores, who) && !old_.empty();
  }
}

ScopedPin::~ScopedPin() {
  if (pinned_) set_thread_cores(pthread_self(), old_);
}

bool try_pin_thread(pthread_t thread, const std::vector<int>& cores, const std::string& who) {
  const int err = set_thread_cores(thread, cores);
  if (err == 0) return true;
  std::lock_guard lock(g_pin_mutex);
  g_pin_failures.push_back({who, cores, std::strerror(err)});
  return false;
}

std::vector<PinFailure> pin_failures() {
  std::lock_guard lock(g_pin_mutex);
  return g_pin_failures;
}

void clear_pin_failures() {
  std::lock_guard lock(g_pin_mutex);
  g_pin_failures.clear();
}

Error thread_start_error(const std::string& what, const std::system_error& e) {
  return Error("cannot start " + what + ": " + e.code().message() +
               "; the process may be at its thread limit (ulimit -u)");
}

std::thread start_thread(std::function<void()> body) {
  if (g_fail_countdown.load(std::memory_order_relaxed) >= 0 &&
      g_fail_countdown.fetch_sub(1, std::memory_order_relaxed) == 0)
    throw std::system_error(EAGAIN, std::generic_category(), "thread creation refused (test hook)");
  return std::thread(std::move(body));
}

void fail_thread_start_for_test(int n) { g_fail_countdown.store(n < 0 ? -1 : n, std::memory_order_relaxed); }

void ThreadGroup::start(const std::string& what, std::function<void()> fn) {
  try {
    threads_.emplace_back(std::move(fn));
  } catch (const std::system_error& e) {
    throw thread_start_error(what, e);
  }
}

void ThreadGroup::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void ThreadGroup::stop_and_join() {
  if (stop_) std::exchange(stop_, nullptr)();
  join();
}

}  // namespace hotpath::util
