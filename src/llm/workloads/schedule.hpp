// Send schedules, computed up front from a seeded generator so a run can be repeated exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotpath::llm {

// Interactive (open-loop) arrivals: gaps drawn from a gamma distribution with shape `burstiness`
// (K) and mean 1/rate, so K = 1 is a Poisson process, K < 1 burstier, K > 1 more regular (the gap
// coefficient of variation is 1/sqrt(K)). The first request is sent at t = 0. Stops at `max_count`
// arrivals (0 = no count limit) or at the first arrival at or after `duration_s` (0 = no limit);
// at least one limit must be set.
//
// With a ramp (`ramp_s` > 0) the rate rises (or falls) linearly from `ramp_from` to `rate` over the
// first `ramp_s` seconds and then holds: the same gaps are drawn and laid on the time axis through
// the inverse of the cumulative rate (time rescaling), so K keeps its meaning and a ramp of 0 gives
// exactly the schedule without one.
struct RateRamp {
  double from = 0;     // requests/s at t = 0
  double seconds = 0;  // 0 = no ramp
};
std::vector<double> interactive_schedule(double rate, double burstiness, std::uint64_t seed,
                                         std::size_t max_count, double duration_s, RateRamp ramp = {});

// Time at which the cumulative number of expected arrivals of a ramped rate reaches `expected`.
double ramp_time(double expected, double rate, const RateRamp& ramp);

// Batch: every request is due at t = 0.
std::vector<double> batch_schedule(std::size_t count);

}  // namespace hotpath::llm
