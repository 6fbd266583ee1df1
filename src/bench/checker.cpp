#include "bench/checker.hpp"

#include "util/rng.hpp"

namespace hotpath::bench {

using util::splitmix64;

std::vector<int> checker_cores(const std::vector<int>& allowed, const std::vector<int>& cpuset, bool engine_uses_cpuset) {
  const std::vector<int> taken = engine_uses_cpuset || cpuset.empty() ? cpuset : std::vector<int>{cpuset.front()};
  std::vector<int> cores;
  for (int c : allowed)
    if (std::find(taken.begin(), taken.end(), c) == taken.end()) cores.push_back(c);
  if (cores.empty())
    for (int c : allowed)
      if (cpuset.empty() || c != cpuset.front()) cores.push_back(c);
  if (cores.empty()) cores = allowed;
  return cores;
}

void tick_input(uint64_t seed, long long t, std::span<float> x) {
  // Box-Muller on a counter-based generator: any tick's input can be regenerated on any thread.
  const uint64_t base = splitmix64(seed ^ 0xA5A5A5A5ull) + uint64_t(t) * 0x100000001B3ull;
  for (size_t k = 0; k < x.size(); k += 2) {
    const uint64_t a = splitmix64(base + k), b = splitmix64(base + k + 1 + (uint64_t(1) << 40));
    const double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(b >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    x[k] = float(r * std::cos(2 * M_PI * u2));
    if (k + 1 < x.size()) x[k + 1] = float(r * std::sin(2 * M_PI * u2));
  }
}

}  // namespace hotpath::bench
