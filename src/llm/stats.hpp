// Distribution summaries. Latency is a distribution: every sample is kept and the report gives
// percentiles, max and mean together, never a mean alone.
#pragma once
#include <cstddef>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hotpath::llm {

struct Summary {
  std::size_t count = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0, min = 0, mean = 0;
};

// Percentile by linear interpolation between closest ranks (numpy's default "linear" method), so
// numbers can be checked against numpy.percentile on the per-request CSV.
double percentile_sorted(const std::vector<double>& sorted, double q);
Summary summarize(std::vector<double> samples);
// {"count", "p50", "p90", "p95", "p99", "max", "min", "mean"}; the numbers are null when count is 0.
nlohmann::json to_json(const Summary& s);

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

}  // namespace hotpath::llm
