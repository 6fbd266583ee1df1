#include "bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hotpath::bench {

Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = static_cast<long long>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest sample with at least q of all samples at or below it.
  auto rank = [&](double q) {
    const size_t r = std::max<size_t>(1, size_t(std::ceil(q * double(v.size()))));  // 1-based rank
    return v[std::min(r, v.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.p999 = rank(0.999);
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {{"count", s.count}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"p999", s.p999},
          {"max", s.max},     {"min", s.min}, {"mean", s.mean}};
}

}  // namespace hotpath::bench
