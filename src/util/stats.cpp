#include "util/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace hotpath::util {

double percentile_sorted(const std::vector<double>& v, double q, Percentile rule) {
  if (v.empty()) return 0.0;
  switch (rule) {
    case Percentile::nearest_rank: {
      const std::size_t rank = std::max<std::size_t>(1, std::size_t(std::ceil(q * double(v.size()))));  // 1-based
      return v[std::min(rank, v.size()) - 1];
    }
    case Percentile::linear: {
      const double pos = q * static_cast<double>(v.size() - 1);
      const auto lo = static_cast<std::size_t>(std::floor(pos));
      const std::size_t hi = std::min(lo + 1, v.size() - 1);
      const double frac = pos - static_cast<double>(lo);
      return v[lo] + (v[hi] - v[lo]) * frac;
    }
    case Percentile::index_floor:
      return v[std::min(v.size() - 1, std::size_t(q * double(v.size())))];
  }
  return 0.0;
}

Summary summarize(std::vector<double> v, Percentile rule) {
  Summary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = percentile_sorted(v, 0.50, rule);
  s.p90 = percentile_sorted(v, 0.90, rule);
  s.p95 = percentile_sorted(v, 0.95, rule);
  s.p99 = percentile_sorted(v, 0.99, rule);
  s.p999 = percentile_sorted(v, 0.999, rule);
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

double student_t975(std::size_t df) {
  // Exact to 3 decimals up to 30; past it the Cornish-Fisher expansion around the normal quantile
  // (error < 1e-4 for df > 30).
  static constexpr double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                     2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                     2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return std::numeric_limits<double>::quiet_NaN();
  if (df <= 30) return table[df - 1];
  const double z = 1.959963984540054, n = static_cast<double>(df);
  const double z3 = z * z * z, z5 = z3 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n);
}

MeanCi mean_ci95(const std::vector<double>& values) {
  MeanCi m;
  m.n = values.size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (m.n == 0) return {0, nan, nan};
  m.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(m.n);
  if (m.n < 2) {
    m.half_width = nan;
    return m;
  }
  double ss = 0;
  for (double v : values) ss += (v - m.mean) * (v - m.mean);
  const double sd = std::sqrt(ss / static_cast<double>(m.n - 1));
  m.half_width = student_t975(m.n - 1) * sd / std::sqrt(static_cast<double>(m.n));
  return m;
}

}  // namespace hotpath::util
