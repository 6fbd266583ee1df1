#include "llm/thread.hpp"

#include <atomic>
#include <cerrno>
#include <system_error>

namespace hotpath::llm {

namespace {
std::atomic<int> g_fail_countdown{-1};  // >= 0: starts left before the one that fails
}

std::thread start_thread(std::function<void()> body) {
  if (g_fail_countdown.load(std::memory_order_relaxed) >= 0 &&
      g_fail_countdown.fetch_sub(1, std::memory_order_relaxed) == 0)
    throw std::system_error(EAGAIN, std::generic_category(), "thread creation refused (test hook)");
  return std::thread(std::move(body));
}

void fail_thread_start_for_test(int n) { g_fail_countdown.store(n < 0 ? -1 : n, std::memory_order_relaxed); }

}  // namespace hotpath::llm
