// The in-kernel tick time's histogram (SharedWords::tick_hist): one layout for the kernels that fill it and
// the host that reads its percentiles, so a tail can be placed inside the kernel or outside it.
//
// Log-linear buckets of SM cycles: below 1,024 cycles 32 buckets of 32 cycles; from 2^e (e >= 10) on, 32
// buckets of 2^(e-5) cycles each, so every bucket is at most 1/32 (~3 %) of its value wide, up to 2^26
// cycles (tens of milliseconds); one last bucket counts everything beyond.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define HOTPATH_CYCLES_HD __host__ __device__
#else
#define HOTPATH_CYCLES_HD
#endif

namespace hotpath::cuda {

inline constexpr int kCycleSubBuckets = 32;  // buckets a power of two
inline constexpr int kCycleLinearBits = 10;  // below 2^10 cycles: linear
inline constexpr int kCycleTopBits = 26;     // at and beyond 2^26 cycles: the last bucket
inline constexpr int kCycleBuckets = kCycleSubBuckets + (kCycleTopBits - kCycleLinearBits) * kCycleSubBuckets + 1;

HOTPATH_CYCLES_HD inline int cycle_bucket(unsigned long long cycles) {
  if (cycles < (1ull << kCycleLinearBits)) return int(cycles >> (kCycleLinearBits - 5));
  int e = 63;  // floor(log2(cycles)): a loop, as clz has no one spelling on host and device
  while (!(cycles >> e)) --e;
  if (e >= kCycleTopBits) return kCycleBuckets - 1;
  const int sub = int((cycles >> (e - 5)) & (kCycleSubBuckets - 1));
  return kCycleSubBuckets + (e - kCycleLinearBits) * kCycleSubBuckets + sub;
}

// The cycles a bucket starts at, and where the next starts (the last bucket's end is its start's double).
HOTPATH_CYCLES_HD inline unsigned long long cycle_bucket_lo(int b) {
  if (b < kCycleSubBuckets) return (unsigned long long)b << (kCycleLinearBits - 5);
  const int e = kCycleLinearBits + (b - kCycleSubBuckets) / kCycleSubBuckets;
  const int sub = (b - kCycleSubBuckets) % kCycleSubBuckets;
  return (1ull << e) + ((unsigned long long)sub << (e - 5));
}
HOTPATH_CYCLES_HD inline unsigned long long cycle_bucket_hi(int b) {
  return b + 1 < kCycleBuckets ? cycle_bucket_lo(b + 1) : 2 * cycle_bucket_lo(b);
}

// The SM clock between consecutive ticks' records (SharedWords::clock_hist): kClockBucketMhz-wide buckets
// from 0, the last counting everything above. Its low percentiles say whether the clock dipped while
// serving, which the cycle counts above cannot show.
inline constexpr int kClockBucketMhz = 16;
inline constexpr int kClockBuckets = 4096 / kClockBucketMhz;
HOTPATH_CYCLES_HD inline int clock_bucket(unsigned long long cycles, unsigned long long ns) {
  if (ns == 0) return kClockBuckets - 1;
  const unsigned long long mhz = cycles * 1000 / ns;
  return mhz / kClockBucketMhz < (unsigned long long)kClockBuckets ? int(mhz / kClockBucketMhz) : kClockBuckets - 1;
}

// The value below which a fraction q of the counts lie, interpolated within its bucket, for buckets
// [lo(b), hi(b)) (host side; -1 when nothing was counted).
template <int N, class Lo, class Hi>
double bucket_quantile(const unsigned long long (&counts)[N], double q, Lo lo, Hi hi) {
  unsigned long long total = 0;
  for (unsigned long long c : counts) total += c;
  if (total == 0) return -1;
  const double want = q * double(total);
  double below = 0;
  for (int b = 0; b < N; ++b) {
    const double here = double(counts[b]);
    if (here > 0 && below + here >= want) return double(lo(b)) + (want - below) / here * double(hi(b) - lo(b));
    below += here;
  }
  return double(hi(N - 1));
}
inline double cycle_quantile(const unsigned long long (&counts)[kCycleBuckets], double q) {
  return bucket_quantile(counts, q, cycle_bucket_lo, cycle_bucket_hi);
}
inline double clock_quantile_mhz(const unsigned long long (&counts)[kClockBuckets], double q) {
  return bucket_quantile(counts, q, [](int b) { return b * kClockBucketMhz; }, [](int b) { return (b + 1) * kClockBucketMhz; });
}

static_assert(kCycleSubBuckets == 32, "the sub-bucket shift above is log2(kCycleSubBuckets) = 5");

}  // namespace hotpath::cuda
