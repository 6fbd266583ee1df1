// The engine's tick clock (telemetry/tick_clock.hpp): the CPU's counter converted to nanoseconds agrees
// with steady_clock over a span, and a span it cannot convert (backwards, or hours) saturates.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

#include "telemetry/tick_clock.hpp"

namespace hotpath::telemetry {
namespace {

TEST(TickClock, AgreesWithSteadyClockOverASpan) {
  const TickClock& clock = TickClock::get();
  using steady = std::chrono::steady_clock;
  for (const int ms : {2, 20}) {
    const auto s0 = steady::now();
    const std::uint64_t c0 = clock.now();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const std::uint64_t c1 = clock.now();
    const auto s1 = steady::now();
    const double steady_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(s1 - s0).count());
    const double clock_ns = double(clock.ns(c0, c1));
    // The two spans differ by the reads between them (tens of ns, more on a loaded machine) and by the
    // rate's error (about 1e-5 after its 5 ms measurement): 1 % and 20 us cover both with room.
    EXPECT_NEAR(clock_ns, steady_ns, 0.01 * steady_ns + 20'000) << ms << " ms, counter " << clock.uses_counter();
    EXPECT_GE(clock_ns, ms * 1e6 * 0.99);
  }
}

TEST(TickClock, ABackwardsOrHugeSpanSaturates) {
  const TickClock& clock = TickClock::get();
  EXPECT_EQ(clock.ns(100, 100), 0);
  EXPECT_EQ(clock.ns(200, 100), std::numeric_limits<std::int64_t>::max());  // a counter that went back
  EXPECT_EQ(clock.ns(0, std::numeric_limits<std::uint64_t>::max()), std::numeric_limits<std::int64_t>::max());
  // One second's worth of counts converts to one second, within the rate's rounding.
  const std::uint64_t second = std::uint64_t(1e9 / clock.ns_per_count());
  EXPECT_NEAR(double(clock.ns(0, second)), 1e9, 1e9 * 1e-6);
}

}  // namespace
}  // namespace hotpath::telemetry
