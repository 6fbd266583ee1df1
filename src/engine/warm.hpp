// The warm-up an engine gives its backend on creation: synthetic ticks through the
// path a real tick takes (step, then finish_precompute, on the calling thread: the critical core when
// pinned), then reset() and clear_counters(), so that the first real tick starts from a fresh backend's
// state (t = 0, zero state, counters as new) with its memory touched, its code and data in the caches,
// its branch predictors trained and (cuda) its kernel resident and the mailbox path exercised.
#pragma once
#include <chrono>

#include "backend/backend.hpp"

namespace hotpath::engine {

// At least this many ticks, and at least W + 1 in window mode (every window slot is the completing one
// once, and the slot ring wraps around).
inline constexpr long long kWarmTicks = 64;
// Past this, the warm-up stops after the tick in flight (once it has run kMinWarmTicks): it bounds the
// cost of very long windows, whose W + 1 ticks each advance W open windows (W^2 window steps).
inline constexpr std::chrono::milliseconds kWarmBudget{250};
inline constexpr long long kMinWarmTicks = 2;  // t = 0, and a tick after a precompute

struct WarmUp {
  long long ticks = 0;   // synthetic ticks run (0: not warmed)
  double seconds = 0;    // what it took, reset included
};

// The ticks a warm-up of a backend with `options` aims at: 0 for the batch workload (no tick stream).
long long warm_ticks(const BackendOptions& options);

// Tick t's synthetic input: deterministic, finite, non-zero, of the size of standardized data.
void warm_input(long long t, std::span<float> x);

// Warms `backend` as described above. A tick that is late (try_step / try_finish_precompute false)
// ends the ticks early: reset() then starts the backend afresh (cuda relaunches its kernel). Errors of
// reset() (a kernel that will not start) are thrown.
WarmUp warm(Backend& backend);

}  // namespace hotpath::engine
