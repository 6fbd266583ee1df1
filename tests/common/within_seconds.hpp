// A guard against hangs (not a speed test): runs `fn` and, should it not return within `seconds`,
// records a failure and ends the test program, since a stuck parse or child cannot be cancelled.
// HOTPATH_TEST_TIME_SCALE (a number >= 1) multiplies the limit on hosts many times slower than the one
// the limits were set on: the aarch64 job under qemu-user sets it (scripts/test-aarch64.sh).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <utility>

namespace hotpath::test_support {

inline double time_scale() {
  const char* s = std::getenv("HOTPATH_TEST_TIME_SCALE");
  const double v = s ? std::atof(s) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

template <typename F>
void within_seconds(int seconds, F&& fn) {
  auto done = std::async(std::launch::async, std::forward<F>(fn));
  const double limit = seconds * time_scale();
  if (done.wait_for(std::chrono::duration<double>(limit)) == std::future_status::timeout) {
    ADD_FAILURE() << "did not finish within " << limit << " s (hang or super-linear time)";
    std::fflush(stdout);
    std::_Exit(1);
  }
  done.get();
}

}  // namespace hotpath::test_support
