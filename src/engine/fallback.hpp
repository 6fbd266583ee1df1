// The fallback wrapper: any backend (the primary) with a second one (the shadow, on its own core)
// following every tick, whose answer is taken when the primary is late or has stopped (try_step false).
#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace hotpath::engine {

// shadow_cpu >= 0: the shadow's worker runs on that core (on `staging` until settle_threads(), for a
// live swap's new backend). Counters: the primary's, plus fallback_answers; facts: the primary's, plus
// fallback (the shadow's name).
std::unique_ptr<Backend> with_fallback(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> shadow, int shadow_cpu,
                                       std::vector<int> staging = {});

}  // namespace hotpath::engine
