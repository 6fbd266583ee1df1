// Latency distributions: every sample is kept; percentiles are nearest-rank over all of them.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::bench {

struct Summary {
  long long count = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, min = 0, mean = 0;
};

// Sorts a copy; an empty input gives a zero summary with count 0.
Summary summarize(std::vector<double> samples);
nlohmann::json to_json(const Summary& s);

}  // namespace hotpath::bench
