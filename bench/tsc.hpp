// Cycle counter reads for the micro-benchmarks, ordered against the timed code: util/arch.hpp's counter
// (the TSC on x86, lfence before, rdtscp + lfence after: ~10 ns a pair where a clock_gettime pair costs
// more; CNTVCT_EL0 between ISBs on Arm).
#pragma once
#include <cstdint>

#include "util/arch.hpp"

namespace hotpath::bench {

inline uint64_t tsc_begin() { return arch::counter_begin(); }
inline uint64_t tsc_end() { return arch::counter_end(); }
// Counter ticks per nanosecond, against steady_clock over 200 ms.
inline double calibrate_tsc_per_ns() { return arch::counts_per_ns(); }

}  // namespace hotpath::bench
