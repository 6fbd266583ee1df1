// What one engine (or one instance of it) did, kept for a desk to watch: tick latency as a histogram of
// log-spaced buckets, the tick counters, the precompute backlog and which model serves. Written by the
// tick thread without a lock or a read-modify-write (one writer: a relaxed load and store per field),
// read at any time by another thread (a Prometheus scrape, telemetry/prometheus_exporter.hpp).
// Telemetry is off unless a front end makes one of these: an engine holds a pointer, null when off, so
// the tick path then pays one untaken branch.
// record_tick's cost (bench_telemetry, 2-core Xeon VM): 1.7 ns a tick back to back, 8 ns timed alone
// with its lines in L1, 14 ns in L2, ~70 ns once 4 MiB of the tick's own reads have pushed them past L2
// (~170 ns after 32 MiB). Call it once the answer is published: it then delays only a next tick
// already due.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>

namespace hotpath::telemetry {

// --- latency buckets ---------------------------------------------------------------------------------
// Four buckets per power of two: bounds 2^e * {1.25, 1.5, 1.75, 2} ns (each at most 1.25x the one below),
// the first bucket (0, 128 ns], the last finite one ending at 2^34 ns (17.2 s), then +Inf. A bucket holds
// (lower, upper]: the `le` of a Prometheus histogram.
inline constexpr int kSubBucketBits = 2;                 // 4 buckets per octave
inline constexpr int kFirstOctave = 7;                   // 2^7 = 128 ns: the first bucket's bound
inline constexpr int kOctaves = 27;                      // 2^7 .. 2^34 ns
inline constexpr int kFiniteBuckets = 1 + (kOctaves << kSubBucketBits);  // 109
inline constexpr int kBuckets = kFiniteBuckets + 1;      // and the +Inf bucket
inline constexpr std::uint64_t kTopBoundNs = std::uint64_t{1} << (kFirstOctave + kOctaves);

// The bucket holding a latency of `ns` nanoseconds, from the bits of ns - 1 (a bucket is closed above):
// the leading bit's position picks the octave, the two bits below it the quarter. No loop, no log().
constexpr int bucket_index(std::uint64_t ns) noexcept {
  const std::uint64_t below = ns == 0 ? 0 : ns - 1;
  // Everything at or below 128 ns lands where 127 does: the first bucket.
  const std::uint64_t m = std::max<std::uint64_t>(below, (std::uint64_t{1} << kFirstOctave) - 1);
  const int octave = std::bit_width(m) - 1;
  const int quarter = int(m >> (octave - kSubBucketBits)) & ((1 << kSubBucketBits) - 1);
  const int index = (octave << kSubBucketBits) + quarter - ((kFirstOctave << kSubBucketBits) - 1);
  return std::min(index, kFiniteBuckets);
}

// Bucket i's upper bound in ns (+Inf for the last): exact in a double.
constexpr double bucket_upper_ns(int i) noexcept {
  if (i >= kFiniteBuckets) return std::numeric_limits<double>::infinity();
  const int v = i + (kFirstOctave << kSubBucketBits) - 1;  // the octave and quarter bucket_index read
  const int octave = v >> kSubBucketBits, quarter = v & ((1 << kSubBucketBits) - 1);
  return double(std::uint64_t((1 << kSubBucketBits) + quarter + 1) << (octave - kSubBucketBits));
}

inline constexpr std::array<double, kBuckets> kBucketUpperNs = [] {
  std::array<double, kBuckets> a{};
  for (int i = 0; i < kBuckets; ++i) a[i] = bucket_upper_ns(i);
  return a;
}();
static_assert(kBucketUpperNs[0] == 128 && kBucketUpperNs[1] == 160 && kBucketUpperNs[4] == 256);
static_assert(kBucketUpperNs[kFiniteBuckets - 1] == double(kTopBoundNs));
static_assert(bucket_index(128) == 0 && bucket_index(129) == 1 && bucket_index(kTopBoundNs) == kFiniteBuckets - 1 &&
              bucket_index(kTopBoundNs + 1) == kFiniteBuckets);

// --- what a reader sees ------------------------------------------------------------------------------
// One reading of a TickMetrics. Each field is exact at the instant it was read, the fields a few
// nanoseconds apart: `count` always equals the buckets' total, `sum_ns` may include a tick or two more
// or fewer. Consistent enough for monitoring, never torn.
struct Snapshot {
  std::array<std::uint64_t, kBuckets> cumulative{};  // ticks with latency <= kBucketUpperNs[i]
  std::uint64_t count = 0;                            // ticks recorded: cumulative.back()
  std::uint64_t sum_ns = 0;                           // their latencies added (each capped at kTopBoundNs)
  std::uint64_t answered = 0, late = 0, lost = 0, fallback = 0, gpu_timeouts = 0;
  std::uint64_t lease_renewals = 0, swaps = 0;
  std::int64_t precompute_backlog = 0;
  std::string model_id, backend, variant;
};

// PromQL's histogram_quantile(q) over the snapshot's buckets, in ns: linear interpolation inside the
// bucket holding rank q * count, the first bucket starting at 0, a rank in the +Inf bucket giving the
// highest finite bound. NaN with no ticks (or q NaN); -Inf below q = 0, +Inf above q = 1. So a test (or a
// report) gets the number Prometheus would give for the same counts.
double quantile(const Snapshot& s, double q);

// --- the writer's side -------------------------------------------------------------------------------
class TickMetrics {
 public:
  TickMetrics() = default;
  TickMetrics(const TickMetrics&) = delete;
  TickMetrics& operator=(const TickMetrics&) = delete;

  // The tick thread only (one writer at a time: its increments are a plain load and store).
  // A negative latency (a clock read on another core, behind) counts as 0; one above kTopBoundNs lands
  // in the +Inf bucket and adds kTopBoundNs to the sum, so one bogus reading cannot wrap the sum.
  template <std::integral Ns>
  void record_tick(Ns latency_ns) noexcept {
    if constexpr (std::is_signed_v<Ns>) {
      record_ns(latency_ns < 0 ? 0 : std::uint64_t(latency_ns));
    } else {
      record_ns(std::uint64_t(latency_ns));
    }
  }
  // As above, rounded up to a whole ns (a bucket is closed above); NaN counts as a tick slower than any
  // bucket (+Inf: a latency that could not be measured is never hidden from a p99 alert).
  void record_tick(double latency_ns) noexcept {
    if (!(latency_ns <= double(kTopBoundNs))) return record_ns(kTopBoundNs + 1);  // NaN, huge
    if (!(latency_ns > 0)) return record_ns(0);
    std::uint64_t ns = std::uint64_t(latency_ns);
    ns += double(ns) < latency_ns;
    record_ns(ns);
  }
  void count_answered(std::uint64_t n = 1) noexcept { bump(answered_, n); }
  void count_late(std::uint64_t n = 1) noexcept { bump(late_, n); }
  void count_lost(std::uint64_t n = 1) noexcept { bump(lost_, n); }
  void count_fallback(std::uint64_t n = 1) noexcept { bump(fallback_, n); }
  void count_gpu_timeout(std::uint64_t n = 1) noexcept { bump(gpu_timeouts_, n); }

  // Any thread (rare events: an atomic add, no single-writer rule).
  void count_lease_renewal(std::uint64_t n = 1) noexcept { lease_renewals_.fetch_add(n, std::memory_order_relaxed); }
  void count_swap(std::uint64_t n = 1) noexcept { swaps_.fetch_add(n, std::memory_order_relaxed); }
  void set_precompute_backlog(std::int64_t ticks) noexcept { backlog_.store(ticks, std::memory_order_relaxed); }
  // Which model and backend serve, for the info metric; off the tick path (takes a lock).
  void set_info(std::string model_id, std::string backend, std::string variant);

  // Any thread, at any time.
  Snapshot snapshot() const;

 private:
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void record_ns(std::uint64_t ns) noexcept {
    bump(buckets_[bucket_index(ns)], 1);
    bump(sum_ns_, std::min(ns, kTopBoundNs));
  }

  static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int64_t>::is_always_lock_free);
  // The tick thread's fields share lines with no field another thread writes.
  alignas(64) std::array<std::atomic<std::uint64_t>, kBuckets> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> answered_{0}, late_{0}, lost_{0}, fallback_{0}, gpu_timeouts_{0};
  alignas(64) std::atomic<std::uint64_t> lease_renewals_{0}, swaps_{0};
  std::atomic<std::int64_t> backlog_{0};
  alignas(64) mutable std::mutex info_mutex_;
  std::string model_id_, backend_, variant_;
};

}  // namespace hotpath::telemetry
