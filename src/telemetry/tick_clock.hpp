// The clock an engine's telemetry times each tick with (docs/production.md, "What it costs a tick"): two
// reads a tick, so the read must be cheap. steady_clock costs ~18 ns a read (a vDSO call, even on the TSC
// clocksource); the CPU's own invariant counter read directly costs a few: x86's TSC by RDTSC (no fence:
// the span measured is microseconds, the reordering a few cycles), Arm's CNTVCT_EL0. Its rate is measured
// once a process against steady_clock; where the counter is not invariant (an x86 without the
// invariant-TSC bit, a VM hiding it) or the architecture has none, steady_clock's nanoseconds serve.
#pragma once
#include <chrono>
#include <cstdint>
#include <limits>

#include "util/arch.hpp"

namespace hotpath::telemetry {

class TickClock {
 public:
  // The process's clock, its rate measured at the first call (~5 ms, off any tick path: an engine
  // with telemetry asks when it is made).
  static const TickClock& get();

  std::uint64_t now() const noexcept {
    if (counter_) [[likely]] return arch::counter_now();
    return std::uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  // Nanoseconds between two now() reads: a fixed-point multiply, cheaper than the conversions to double
  // and back; a span too long for it (hours at any counter's rate, or backwards) saturates.
  std::int64_t ns(std::uint64_t from, std::uint64_t to) const noexcept {
    const std::uint64_t counts = to - from;
    if (counts > max_counts_) [[unlikely]] return std::numeric_limits<std::int64_t>::max();
    return std::int64_t((counts * ns_per_count_q24_) >> 24);
  }
  bool uses_counter() const { return counter_; }  // false: steady_clock
  double ns_per_count() const { return ns_per_count_; }

 private:
  TickClock();
  bool counter_ = false;
  double ns_per_count_ = 1.0;
  std::uint64_t ns_per_count_q24_ = std::uint64_t(1) << 24;  // ns_per_count_ in 40.24 fixed point
  std::uint64_t max_counts_ = std::numeric_limits<std::int64_t>::max() / (std::uint64_t(1) << 24);  // no overflow
};

}  // namespace hotpath::telemetry
