#include "llm/schedule.hpp"

#include <cmath>

#include "llm/limits.hpp"
#include "llm/rng.hpp"
#include "util/error.hpp"

namespace hotpath::llm {

std::vector<double> interactive_schedule(double rate, double burstiness, std::uint64_t seed,
                                         std::size_t max_count, double duration_s) {
  if (!(rate >= kMinRate && rate <= kMaxRate))
    throw Error("--rate must be in [0.001, 1000000] requests/s in interactive mode");
  if (!(burstiness >= kMinBurstiness && burstiness <= kMaxBurstiness)) throw Error("--burstiness must be in [0.01, 100]");
  if (max_count == 0 && !(duration_s > 0)) throw Error("interactive schedule needs a request count or a duration");
  if (max_count > kMaxRequests) throw Error("--requests must be at most 10000000");
  Rng rng(seed);
  const double scale = 1.0 / (rate * burstiness);  // gamma(K, scale) has mean K * scale = 1/rate
  std::vector<double> t;
  double now = 0.0;
  for (;;) {
    if (max_count && t.size() >= max_count) break;
    if (duration_s > 0 && now >= duration_s) break;
    // A typo such as --rate 1e6 --duration 3600 fails instead of eating all memory.
    if (t.size() >= kMaxRequests) throw Error("schedule exceeds 10000000 requests; lower --rate or --duration");
    t.push_back(now);
    now += rng.gamma(burstiness) * scale;
  }
  return t;
}

std::vector<double> batch_schedule(std::size_t count) { return std::vector<double>(count, 0.0); }

}  // namespace hotpath::llm
