#include "llm/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

namespace hotpath::llm {

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::vector<double> samples) {
  Summary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.p50 = percentile_sorted(samples, 50);
  s.p90 = percentile_sorted(samples, 90);
  s.p95 = percentile_sorted(samples, 95);
  s.p99 = percentile_sorted(samples, 99);
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  return s;
}

nlohmann::json to_json(const Summary& s) {
  nlohmann::json j;
  j["count"] = s.count;
  const auto put = [&](const char* k, double v) {
    if (s.count == 0) j[k] = nullptr; else j[k] = v;
  };
  put("p50", s.p50);
  put("p90", s.p90);
  put("p95", s.p95);
  put("p99", s.p99);
  put("max", s.max);
  put("min", s.min);
  put("mean", s.mean);
  return j;
}

}  // namespace hotpath::llm
