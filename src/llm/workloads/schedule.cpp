#include "llm/workloads/schedule.hpp"

#include <cmath>

#include "llm/common/limits.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace hotpath::llm {

double ramp_time(double expected, double rate, const RateRamp& ramp) {
  if (!(ramp.seconds > 0)) return expected / rate;
  // Lambda(t) = r0 t + (r - r0) t^2 / (2 S) up to S, then Lambda(S) + r (t - S).
  const double r0 = ramp.from, S = ramp.seconds;
  const double at_end = 0.5 * (r0 + rate) * S;
  if (expected >= at_end) return S + (expected - at_end) / rate;
  if (expected <= 0) return 0;
  const double a = (rate - r0) / (2 * S), b = r0;
  // The root of a t^2 + b t - L = 0 written without cancellation, for a ramp up, down or flat.
  return 2 * expected / (b + std::sqrt(b * b + 4 * a * expected));
}

std::vector<double> interactive_schedule(double rate, double burstiness, std::uint64_t seed,
                                         std::size_t max_count, double duration_s, RateRamp ramp) {
  if (!(rate >= kMinRate && rate <= kMaxRate))
    throw Error("--rate must be in [0.001, 1000000] requests/s in interactive mode");
  if (!(burstiness >= kMinBurstiness && burstiness <= kMaxBurstiness)) throw Error("--burstiness must be in [0.01, 100]");
  if (max_count == 0 && !(duration_s > 0)) throw Error("interactive schedule needs a request count or a duration");
  if (max_count > kMaxRequests) throw Error("--requests must be at most 10000000");
  if (!(ramp.seconds >= 0 && ramp.seconds <= kMaxDurationS)) throw Error("--ramp-up must be in [0, 10000000] seconds");
  if (ramp.seconds > 0 && !(ramp.from >= 0 && ramp.from <= kMaxRate))
    throw Error("--ramp-from must be in [0, 1000000] requests/s");
  util::Rng rng(seed);
  const double scale = 1.0 / (rate * burstiness);  // gamma(K, scale) has mean K * scale = 1/rate
  std::vector<double> t;
  double virt = 0.0;  // time on the axis of the constant rate; the ramp maps it to real time
  for (;;) {
    const double now = ramp.seconds > 0 ? ramp_time(virt * rate, rate, ramp) : virt;
    if (max_count && t.size() >= max_count) break;
    if (duration_s > 0 && now >= duration_s) break;
    // A typo such as --rate 1e6 --duration 3600 fails instead of eating all memory.
    if (t.size() >= kMaxRequests) throw Error("schedule exceeds 10000000 requests; lower --rate or --duration");
    t.push_back(now);
    virt += rng.gamma(burstiness) * scale;
  }
  return t;
}

std::vector<double> batch_schedule(std::size_t count) { return std::vector<double>(count, 0.0); }

}  // namespace hotpath::llm
