#include "engine/warm.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace hotpath::engine {

long long warm_ticks(const BackendOptions& options) {
  switch (options.mode) {
    case Mode::batch: return 0;
    case Mode::streaming: return kWarmTicks;
    case Mode::window: return std::max<long long>(kWarmTicks, (long long)options.window + 1);
  }
  return 0;
}

void warm_input(long long t, std::span<float> x) {
  // |x| <= 1, never 0 (the phase is never a multiple of pi in float), varying by tick and feature.
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(0.9 * std::sin(0.61 * double(k) + 1.7 * double(t) + 0.3));
}

// Cost, 64 ticks (W = 50 in window mode), cpu backend without a cpuset (the precompute inline on the
// caller), on the 2-core development VM (Xeon, AVX-512): lstm_s fp32 window 7 ms, streaming 0.7 ms;
// bf16 17 / 0.6 ms; lstm_m fp32 window 100-113 ms, streaming 25 ms; bf16 140-145 / 12-15 ms. With
// precompute workers (--cpuset) the window-mode cost falls with their number.
WarmUp warm(Backend& backend) {
  using Clock = std::chrono::steady_clock;
  const long long n = warm_ticks(backend.options());
  if (n == 0) return {};
  const auto t0 = Clock::now();
  std::vector<float> x(size_t(backend.config().input_size)), z(size_t(backend.config().output_size));
  std::string why;
  long long t = 0;
  while (t < n && (t < kMinWarmTicks || Clock::now() - t0 < kWarmBudget)) {
    warm_input(t, x);
    ++t;
    if (!backend.try_step(x, z, &why) || !backend.try_finish_precompute(&why)) break;
  }
  backend.reset();
  backend.clear_counters();
  return {t, std::chrono::duration<double>(Clock::now() - t0).count()};
}

}  // namespace hotpath::engine
