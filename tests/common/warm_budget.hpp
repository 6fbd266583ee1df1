// The engine's warm-up runs all its ticks unless its time budget (engine::kWarmBudget) runs out first, as
// on a host many times slower than a real one (the aarch64 job under qemu, a sanitizer): then it has run
// at least its minimum (engine::kMinWarmTicks). Tests that count the warm-up's ticks ask this first.
#pragma once
#include <chrono>

#include "engine/warm.hpp"

namespace hotpath::test_support {

// True when a warm-up that took `seconds` may have been stopped by its budget.
inline bool warm_cut_by_budget(double seconds) {
  return seconds >= 0.9 * std::chrono::duration<double>(engine::kWarmBudget).count();
}

}  // namespace hotpath::test_support
