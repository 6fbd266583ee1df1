#include "telemetry/tick_clock.hpp"

#include <algorithm>
#include <limits>
#include <thread>

namespace hotpath::telemetry {

TickClock::TickClock() {
  if (!arch::counter_invariant()) return;
  // The rate over ~5 ms of steady_clock, read between counter reads on both ends: the span's error is
  // two clock reads (~40 ns) in 5 ms, 1e-5, far inside a histogram bucket (25 %).
  using clock = std::chrono::steady_clock;
  counter_ = true;
  const auto c0 = clock::now();
  const std::uint64_t t0 = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::uint64_t t1 = now();
  const auto c1 = clock::now();
  const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count());
  if (t1 <= t0 || !(ns > 0)) {
    counter_ = false;
    return;
  }
  ns_per_count_ = ns / double(t1 - t0);
  ns_per_count_q24_ = std::max<std::uint64_t>(1, std::uint64_t(ns_per_count_ * double(1 << 24) + 0.5));
  // The longest span whose product stays below 2^63 (a 3 GHz TSC: ~9 minutes; a 25 MHz Arm timer: hours):
  // far past the histogram's top bucket (17 s), so a longer one is counted there as it would be anyway.
  max_counts_ = std::uint64_t(std::numeric_limits<std::int64_t>::max()) / ns_per_count_q24_;
}

const TickClock& TickClock::get() {
  static const TickClock clock;
  return clock;
}

}  // namespace hotpath::telemetry
