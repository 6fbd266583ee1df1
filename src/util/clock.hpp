// steady_clock's reading in nanoseconds, for stamps that are compared with each other (deadlines, spans,
// the tick trace's send and answer). The hot paths that need a cheaper read use telemetry/tick_clock.hpp.
#pragma once
#include <chrono>
#include <cstdint>

namespace hotpath::util {

inline std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace hotpath::util
