// A guard against hangs (not a speed test): runs `fn` and, should it not return within `seconds`,
// records a failure and ends the test program, since a stuck parse or child cannot be cancelled.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <utility>

namespace hotpath::test_support {

template <typename F>
void within_seconds(int seconds, F&& fn) {
  auto done = std::async(std::launch::async, std::forward<F>(fn));
  if (done.wait_for(std::chrono::seconds(seconds)) == std::future_status::timeout) {
    ADD_FAILURE() << "did not finish within " << seconds << " s (hang or super-linear time)";
    std::fflush(stdout);
    std::_Exit(1);
  }
  done.get();
}

}  // namespace hotpath::test_support
