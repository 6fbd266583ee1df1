// An engine's tick telemetry (EngineOptions::metrics; docs/production.md, "Telemetry"): the TickMetrics
// it writes, and what the engine folds into it beside each tick's latency. The backends count their own
// events in counters(), a std::map built per call: too dear for every tick, so those counts are folded
// in as deltas every kFoldEvery ticks, at a reset or backtest, and just before a swap takes over (the
// old backend's last counts, before it goes).
#pragma once
#include <cstdint>
#include <memory>

#include "engine/swap.hpp"
#include "telemetry/tick_clock.hpp"
#include "telemetry/tick_metrics.hpp"

namespace hotpath::engine {

// A power of two, so the countdown is a decrement and a predictable branch.
inline constexpr int kFoldEvery = 1024;

class EngineMetrics {
 public:
  // Names the serving model and backend, and takes the backend's counts so far as the baseline.
  explicit EngineMetrics(const SwappableBackend& served);

  const std::shared_ptr<telemetry::TickMetrics>& metrics() const { return metrics_; }
  // What the engine times each tick with (its rate measured when the first engine with telemetry was made).
  const telemetry::TickClock& clock() const { return clock_; }

  // The tick thread, once a tick is answered (its output written) and its precompute finished:
  // `latency_ns` from entry into the backend's step to the answer.
  void tick(std::int64_t latency_ns, const SwappableBackend& served) noexcept {
    metrics_->record_tick(latency_ns);
    metrics_->count_answered();
    if (served.swaps() != swaps_seen_) [[unlikely]] swapped(served);
    if (--until_fold_ == 0) [[unlikely]] fold(served);
  }
  // A tick the backend consumed and failed to answer (BackendError): never answered.
  void lost() noexcept { metrics_->count_lost(); }
  // The backend's counters, as deltas since the last fold. Never throws: telemetry must not fail a tick.
  void fold(const SwappableBackend& served) noexcept;

 private:
  // A swap took over: counted, the info names the new model, and the new backend's counters (which
  // start from its own zero) become the ones folded.
  void swapped(const SwappableBackend& served) noexcept;

  std::shared_ptr<telemetry::TickMetrics> metrics_;
  const telemetry::TickClock clock_ = telemetry::TickClock::get();  // a copy: one load less a read
  int until_fold_ = kFoldEvery;
  long long swaps_seen_ = 0;
  // The backend's counts at the last fold.
  std::uint64_t fallback_ = 0, gpu_timeouts_ = 0, lease_renewals_ = 0;
};

}  // namespace hotpath::engine
