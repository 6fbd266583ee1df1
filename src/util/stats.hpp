// Distribution summaries for every harness: percentiles, min, max and mean of kept samples, and the
// mean of repeated runs with its confidence interval. Latency is a distribution: report percentiles,
// max and mean together, never a mean alone.
#pragma once
#include <cstddef>
#include <vector>

namespace hotpath::util {

// How a percentile picks its value from the sorted samples. The harnesses differ on purpose, and
// each keeps its rule so its numbers stay comparable with the ones it has published.
enum class Percentile {
  // The smallest sample with at least q of all samples at or below it: a reported p99 is a sample
  // that was measured (the latency and throughput benches).
  nearest_rank,
  // Linear interpolation between the closest ranks, numpy.percentile's default, so the LLM report
  // can be checked against numpy on its per-request CSV.
  linear,
  // The sample at 0-based index floor(q * n): the CUDA sweep's tables.
  index_floor,
};

// q in [0, 1]; `sorted` ascending. An empty input gives 0.
double percentile_sorted(const std::vector<double>& sorted, double q, Percentile rule);

struct Summary {
  std::size_t count = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0, max = 0, min = 0, mean = 0;
};

// Sorts `samples` (taken by value); an empty input gives a zero summary with count 0.
Summary summarize(std::vector<double> samples, Percentile rule);

// Mean of repeated runs' numbers and the half width of its two-sided 95% confidence interval,
// Student t with n - 1 degrees of freedom: t * sd / sqrt(n) (sd with n - 1). half_width is NaN
// for n < 2 (no spread to estimate); mean is NaN for n = 0.
struct MeanCi {
  std::size_t n = 0;
  double mean = 0, half_width = 0;
};
MeanCi mean_ci95(const std::vector<double>& values);
// The 0.975 quantile of Student's t with `df` degrees of freedom (df >= 1).
double student_t975(std::size_t df);

}  // namespace hotpath::util
