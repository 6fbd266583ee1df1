// Time stamp counter reads for the micro-benchmarks, ordered against the timed code (lfence before,
// rdtscp + lfence after): ~10 ns a pair where a clock_gettime pair costs more.
#pragma once
#include <x86intrin.h>

#include <chrono>
#include <cstdint>

namespace hotpath::bench {

inline uint64_t tsc_begin() {
  _mm_lfence();
  return __rdtsc();
}
inline uint64_t tsc_end() {
  unsigned aux;
  const uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
}

// TSC ticks per nanosecond, against steady_clock over 200 ms.
inline double calibrate_tsc_per_ns() {
  using clock = std::chrono::steady_clock;
  const auto c0 = clock::now();
  const uint64_t t0 = tsc_begin();
  while (clock::now() - c0 < std::chrono::milliseconds(200)) {
  }
  const uint64_t t1 = tsc_end();
  const auto c1 = clock::now();
  return double(t1 - t0) / double(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count());
}

}  // namespace hotpath::bench
