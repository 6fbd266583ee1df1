#include "llm/report/stats.hpp"

#include <nlohmann/json.hpp>

namespace hotpath::llm {

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
