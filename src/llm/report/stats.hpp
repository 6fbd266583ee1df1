// The LLM report's distributions: util/stats with linear percentiles (numpy's default, so the
// per-request CSV can be checked against numpy.percentile), and their JSON form.
#pragma once
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/stats.hpp"

namespace hotpath::llm {

using util::MeanCi;
using util::mean_ci95;
using util::Summary;  // p999 is not reported here

inline Summary summarize(std::vector<double> samples) {
  return util::summarize(std::move(samples), util::Percentile::linear);
}
// {"count", "p50", "p90", "p95", "p99", "max", "min", "mean"}; the numbers are null when count is 0.
nlohmann::json to_json(const Summary& s);

}  // namespace hotpath::llm
