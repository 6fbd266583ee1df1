// Every thread src/llm starts goes through start_thread(), so a test can make a start fail the way
// it does under `ulimit -u` and check that the owner joins what it started and says why (a
// std::thread destroyed while joinable calls std::terminate).
#pragma once
#include <functional>
#include <thread>

namespace hotpath::llm {

// Starts `body` on a new thread; throws std::system_error when the thread cannot be created.
std::thread start_thread(std::function<void()> body);

// For tests: the (n+1)-th start_thread() from now throws std::system_error (EAGAIN) instead of
// starting a thread; a negative n disarms it.
void fail_thread_start_for_test(int n);

}  // namespace hotpath::llm
