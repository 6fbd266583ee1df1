#include "telemetry/tick_clock.hpp"

#include <algorithm>
#include <limits>

namespace hotpath::telemetry {

TickClock::TickClock() {
  if (!arch::counter_invariant()) return;
  // The rate over 5 ms of steady_clock: far inside a histogram bucket (25 %).
  const double counts_per_ns = arch::counts_per_ns(std::chrono::milliseconds(5));
  if (!(counts_per_ns > 0)) return;  // a counter that did not move: steady_clock serves
  counter_ = true;
  ns_per_count_ = 1.0 / counts_per_ns;
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
