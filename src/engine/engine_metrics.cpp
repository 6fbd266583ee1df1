#include "engine/engine_metrics.hpp"

#include <cmath>
#include <map>
#include <string>

namespace hotpath::engine {
namespace {

// A backend's count by name, 0 when it keeps none (ref and cpu keep none of these).
std::uint64_t count_of(const std::map<std::string, double>& counters, const char* name) {
  const auto it = counters.find(name);
  return it == counters.end() || !(it->second > 0) ? 0 : std::uint64_t(std::llround(it->second));
}

// What a cumulative count added since `*last`, which it then becomes. A count below the last one
// restarted from zero (clear_counters after a warm-up, a new backend): all of it is new.
std::uint64_t delta(std::uint64_t now, std::uint64_t* last) {
  const std::uint64_t d = now >= *last ? now - *last : now;
  *last = now;
  return d;
}

}  // namespace

EngineMetrics::EngineMetrics(const SwappableBackend& served)
    : metrics_(std::make_shared<telemetry::TickMetrics>()), swaps_seen_(served.swaps()) {
  metrics_->set_info(served.serving_id(), served.name(), served.variant());
  fold(served);
}

void EngineMetrics::fold(const SwappableBackend& served) noexcept {
  until_fold_ = kFoldEvery;
  try {
    const auto c = served.counters();
    // The backends' names for them: the CPU fallback's answers (engine/fallback.cpp); cuda's GPU
    // answers and precomputes past timeout_us, and its heartbeat's lease renewals. cuda's
    // late_gpu_answers are those same timed-out ticks answered after the host gave up: not counted
    // again.
    metrics_->count_fallback(delta(count_of(c, "fallback_answers"), &fallback_));
    metrics_->count_gpu_timeout(delta(count_of(c, "timeouts"), &gpu_timeouts_));
    metrics_->count_lease_renewal(delta(count_of(c, "lease_renewals"), &lease_renewals_));
  } catch (...) {
    // Out of memory building the map: these counts are folded at the next fold instead.
  }
}

void EngineMetrics::swapped(const SwappableBackend& served) noexcept {
  metrics_->count_swap(std::uint64_t(served.swaps() - swaps_seen_));
  swaps_seen_ = served.swaps();
  try {
    metrics_->set_info(served.serving_id(), served.name(), served.variant());
  } catch (...) {
    // Out of memory copying three short strings: the info names the old model until the next swap.
  }
  fallback_ = gpu_timeouts_ = lease_renewals_ = 0;
  fold(served);
}

}  // namespace hotpath::engine
