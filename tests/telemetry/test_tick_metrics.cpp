// TickMetrics: the bucket arithmetic at its edges, against a plain search of the bounds; what odd
// latencies (0, negative, NaN, huge) count as; quantile() against the sorted samples' own quantile;
// and one writer recording while another thread takes snapshots.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "telemetry/tick_metrics.hpp"

namespace hotpath::telemetry {
namespace {

// The truth bucket_index must agree with: the first bucket whose bound is at or above the latency.
int bucket_by_search(double ns) {
  return int(std::lower_bound(kBucketUpperNs.begin(), kBucketUpperNs.end(), ns) - kBucketUpperNs.begin());
}

double bucket_lower_ns(int i) { return i == 0 ? 0 : kBucketUpperNs[i - 1]; }

// How many ticks landed in bucket i (not cumulative).
std::uint64_t in_bucket(const Snapshot& s, int i) { return s.cumulative[i] - (i ? s.cumulative[i - 1] : 0); }

TEST(TelemetryBuckets, BoundsRiseByAtMostAQuarterFrom128NsTo17Seconds) {
  EXPECT_EQ(kBucketUpperNs[0], 128);
  EXPECT_EQ(kBucketUpperNs[kFiniteBuckets - 1], double(std::uint64_t{1} << 34));
  EXPECT_GT(kBucketUpperNs[kFiniteBuckets - 1], 10e9);  // a 10 s tick is still inside a finite bucket
  EXPECT_TRUE(std::isinf(kBucketUpperNs[kBuckets - 1]));
  for (int i = 1; i < kFiniteBuckets; ++i) {
    EXPECT_GT(kBucketUpperNs[i], kBucketUpperNs[i - 1]) << i;
    EXPECT_LE(kBucketUpperNs[i] / kBucketUpperNs[i - 1], 1.25 + 1e-12) << i;
    EXPECT_EQ(kBucketUpperNs[i], std::floor(kBucketUpperNs[i])) << "whole ns: " << i;
  }
}

TEST(TelemetryBuckets, EveryBoundAndItsNeighboursLandWhereTheSearchPutsThem) {
  EXPECT_EQ(bucket_index(0), 0);
  EXPECT_EQ(bucket_index(1), 0);
  for (int i = 0; i < kFiniteBuckets; ++i) {
    const auto bound = std::uint64_t(kBucketUpperNs[i]);
    EXPECT_EQ(bucket_index(bound), i) << "exactly on the bound: the bucket it closes";
    EXPECT_EQ(bucket_index(bound - 1), bucket_by_search(double(bound - 1))) << i;
    EXPECT_EQ(bucket_index(bound + 1), i + 1) << "one past the bound: the next bucket";
  }
  EXPECT_EQ(bucket_index(kTopBoundNs + 1), kFiniteBuckets);
  EXPECT_EQ(bucket_index(std::numeric_limits<std::uint64_t>::max()), kFiniteBuckets);
  EXPECT_EQ(bucket_index(std::uint64_t{1} << 63), kFiniteBuckets);
}

TEST(TelemetryBuckets, RandomLatenciesAgreeWithTheSearch) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log2ns(0, 40);
  for (int k = 0; k < 1'000'000; ++k) {
    const auto ns = std::uint64_t(std::exp2(log2ns(rng)));
    ASSERT_EQ(bucket_index(ns), bucket_by_search(double(ns))) << ns;
  }
}

TEST(TelemetryRecord, OddLatenciesCountWhereTheHeaderSays) {
  TickMetrics m;
  m.record_tick(0);
  m.record_tick(-5);                    // a clock behind: 0
  m.record_tick(-1.5);                  // the same, as a double
  m.record_tick(128.0);                 // on the first bound: the first bucket
  m.record_tick(128.25);                // just past it: rounded up, the second
  m.record_tick(std::nan(""));          // not measured: +Inf
  m.record_tick(std::numeric_limits<double>::infinity());
  m.record_tick(std::numeric_limits<std::int64_t>::max());
  m.record_tick(std::numeric_limits<std::uint64_t>::max());
  m.record_tick(kTopBoundNs);           // the last finite bucket
  const Snapshot s = m.snapshot();
  EXPECT_EQ(s.count, 10u);
  EXPECT_EQ(s.cumulative.back(), s.count);
  EXPECT_EQ(in_bucket(s, 0), 4u);
  EXPECT_EQ(in_bucket(s, 1), 1u);
  EXPECT_EQ(in_bucket(s, kFiniteBuckets - 1), 1u);
  EXPECT_EQ(in_bucket(s, kFiniteBuckets), 4u);
  // Each tick past the top bound (NaN included) adds the top bound, no more: the sum cannot wrap.
  EXPECT_EQ(s.sum_ns, 128u + 129u + 5 * kTopBoundNs);
}

TEST(TelemetryRecord, CountersGaugeAndInfo) {
  TickMetrics m;
  m.count_answered(3);
  m.count_late();
  m.count_lost(2);
  m.count_fallback();
  m.count_gpu_timeout(4);
  m.count_lease_renewal();
  m.count_swap(2);
  m.set_precompute_backlog(-1);
  m.set_precompute_backlog(7);
  m.set_info("lstm_s", "cuda", "cta");
  const Snapshot s = m.snapshot();
  EXPECT_EQ(s.answered, 3u);
  EXPECT_EQ(s.late, 1u);
  EXPECT_EQ(s.lost, 2u);
  EXPECT_EQ(s.fallback, 1u);
  EXPECT_EQ(s.gpu_timeouts, 4u);
  EXPECT_EQ(s.lease_renewals, 1u);
  EXPECT_EQ(s.swaps, 2u);
  EXPECT_EQ(s.precompute_backlog, 7);
  EXPECT_EQ(s.model_id, "lstm_s");
  EXPECT_EQ(s.backend, "cuda");
  EXPECT_EQ(s.variant, "cta");
  EXPECT_EQ(s.count, 0u);  // counters are not ticks
}

TEST(TelemetryQuantile, EdgesAsPromQL) {
  Snapshot empty;
  EXPECT_TRUE(std::isnan(quantile(empty, 0.5)));
  TickMetrics m;
  m.record_tick(1000);  // bucket (896, 1024]
  const Snapshot one = m.snapshot();
  EXPECT_DOUBLE_EQ(quantile(one, 0.5), 896 + 128 * 0.5);
  EXPECT_DOUBLE_EQ(quantile(one, 1.0), 1024);
  EXPECT_TRUE(std::isinf(quantile(one, 1.5)) && quantile(one, 1.5) > 0);
  EXPECT_TRUE(std::isinf(quantile(one, -0.1)) && quantile(one, -0.1) < 0);
  EXPECT_TRUE(std::isnan(quantile(one, std::nan(""))));
  TickMetrics slow;
  slow.record_tick(std::nan(""));
  EXPECT_EQ(quantile(slow.snapshot(), 0.99), double(kTopBoundNs)) << "the +Inf bucket: the highest finite bound";
  TickMetrics fast;
  fast.record_tick(10);
  EXPECT_DOUBLE_EQ(quantile(fast.snapshot(), 0.5), 64) << "the first bucket starts at 0";
}

// The sorted samples' nearest-rank quantile x is the ceil(q n)-th smallest sample; PromQL's rank q n
// falls in the bucket that holds it, so the estimate is within that one bucket's width of x.
TEST(TelemetryQuantile, WithinOneBucketOfTheSortedSamples) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> latency(std::log(4000.0), 0.6);  // ~4 us ticks with a tail
  for (const std::size_t n : {1, 7, 65, 1000, 100'000}) {
    TickMetrics m;
    std::vector<std::uint64_t> samples(n);
    for (auto& v : samples) {
      v = std::uint64_t(latency(rng));
      m.record_tick(v);
    }
    std::sort(samples.begin(), samples.end());
    const Snapshot s = m.snapshot();
    ASSERT_EQ(s.count, n);
    for (const double q : {0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      const auto rank = std::size_t(std::ceil(q * double(n)));
      const double x = double(samples[std::max<std::size_t>(rank, 1) - 1]);
      const int b = bucket_index(std::uint64_t(x));
      const double est = quantile(s, q);
      EXPECT_GE(est, bucket_lower_ns(b)) << "n " << n << " q " << q << " x " << x;
      EXPECT_LE(est, kBucketUpperNs[b]) << "n " << n << " q " << q << " x " << x;
      EXPECT_LE(std::abs(est - x), kBucketUpperNs[b] - bucket_lower_ns(b));
    }
  }
}

// One tick thread records 1e6 ticks while this thread reads: every reading's counts only grow, the
// total always equals the buckets', and the last reading is exact, bucket by bucket.
TEST(TelemetryConcurrency, OneWriterOneReaderCountsGrowAndEndExact) {
  constexpr std::uint64_t kTicks = 1'000'000;
  const auto latency = [](std::uint64_t t) { return 100 + (t * 7919) % 200'000; };  // 100 ns .. 200 us
  TickMetrics m;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (std::uint64_t t = 0; t < kTicks; ++t) {
      m.record_tick(latency(t));
      m.count_answered();
    }
    done.store(true, std::memory_order_release);
  });
  Snapshot last;
  std::size_t readings = 0;
  bool ok = true;
  while (!done.load(std::memory_order_acquire) || readings == 0) {
    const Snapshot s = m.snapshot();
    ok &= s.count == s.cumulative.back() && s.count >= last.count && s.answered >= last.answered &&
          s.sum_ns >= last.sum_ns;
    for (int i = 0; i < kBuckets; ++i) ok &= in_bucket(s, i) >= in_bucket(last, i);
    last = s;
    ++readings;
  }
  writer.join();
  EXPECT_TRUE(ok) << "a reading went back";
  const Snapshot end = m.snapshot();
  std::array<std::uint64_t, kBuckets> expect{};
  std::uint64_t sum = 0;
  for (std::uint64_t t = 0; t < kTicks; ++t) {
    ++expect[bucket_index(latency(t))];
    sum += latency(t);
  }
  EXPECT_EQ(end.count, kTicks);
  EXPECT_EQ(end.answered, kTicks);
  EXPECT_EQ(end.sum_ns, sum);
  for (int i = 0; i < kBuckets; ++i) EXPECT_EQ(in_bucket(end, i), expect[i]) << i;
  RecordProperty("readings", int(readings));
}

TEST(TelemetryConcurrency, AnyThreadCountersAddUpAcrossThreads) {
  TickMetrics m;
  constexpr int kEach = 100'000;
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        m.count_swap();
        m.count_lease_renewal();
      }
    });
  for (auto& t : threads) t.join();
  const Snapshot s = m.snapshot();
  EXPECT_EQ(s.swaps, 4u * kEach);
  EXPECT_EQ(s.lease_renewals, 4u * kEach);
}

}  // namespace
}  // namespace hotpath::telemetry
