#include "telemetry/tick_metrics.hpp"

#include <cmath>
#include <utility>

namespace hotpath::telemetry {

void TickMetrics::set_info(std::string model_id, std::string backend, std::string variant) {
  std::lock_guard lock(info_mutex_);
  model_id_ = std::move(model_id);
  backend_ = std::move(backend);
  variant_ = std::move(variant);
}

Snapshot TickMetrics::snapshot() const {
  Snapshot s;
  // Each bucket only grows, and one thread's relaxed reads of one atomic never go back in its
  // modification order: every bucket, and so their total, is monotone from snapshot to snapshot.
  std::uint64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  s.answered = answered_.load(std::memory_order_relaxed);
  s.late = late_.load(std::memory_order_relaxed);
  s.lost = lost_.load(std::memory_order_relaxed);
  s.fallback = fallback_.load(std::memory_order_relaxed);
  s.gpu_timeouts = gpu_timeouts_.load(std::memory_order_relaxed);
  s.lease_renewals = lease_renewals_.load(std::memory_order_relaxed);
  s.swaps = swaps_.load(std::memory_order_relaxed);
  s.precompute_backlog = backlog_.load(std::memory_order_relaxed);
  std::lock_guard lock(info_mutex_);
  s.model_id = model_id_;
  s.backend = backend_;
  s.variant = variant_;
  return s;
}

// Prometheus' bucketQuantile (promql/quantile.go), on buckets that are already sorted, distinct and
// monotone.
double quantile(const Snapshot& s, double q) {
  if (std::isnan(q)) return std::nan("");
  if (q < 0) return -std::numeric_limits<double>::infinity();
  if (q > 1) return std::numeric_limits<double>::infinity();
  if (s.count == 0) return std::nan("");
  const double rank = q * double(s.count);
  int b = 0;  // the first finite bucket whose cumulative count reaches the rank, else the +Inf one
  while (b < kFiniteBuckets && double(s.cumulative[b]) < rank) ++b;
  if (b == kFiniteBuckets) return kBucketUpperNs[kFiniteBuckets - 1];
  const double start = b == 0 ? 0 : kBucketUpperNs[b - 1];
  const double below = b == 0 ? 0 : double(s.cumulative[b - 1]);
  return start + (kBucketUpperNs[b] - start) * ((rank - below) / (double(s.cumulative[b]) - below));
}

}  // namespace hotpath::telemetry
