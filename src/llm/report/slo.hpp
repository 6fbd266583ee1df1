// Service-level objectives (SLOs) on a bench run and the goodput they give: how many requests (and
// their words) per second met every per-request objective. docs/llm.md, "Goodput and SLOs".
// Independent of libcurl.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/report/report.hpp"

namespace hotpath::llm {

struct Slo {
  std::string spec;                  // as written, e.g. "rt@p90:200ms"
  std::string metric;                // the report's metric name: rt_ms, ttft_ms, rt_from_send_ms,
                                     // e2e_ms, iwl_ms, tpot_ms or wps_per_user
  std::optional<double> percentile;  // in (0, 100]: the run's percentile must meet it; none: every request
  double limit = 0;                  // ms for the times, words/s for wps_per_user
  bool lower_bound = false;          // wps_per_user must be at least `limit`; times at most
};

inline constexpr std::size_t kMaxSlos = 32;

// "rt:200ms,iwl@p90:50ms,wps:20": METRIC[@pQ]:LIMIT, comma separated, no empty item. Times take a
// unit, ms or s; wps a plain number of words/s; Q and LIMIT are decimal numbers (util/number.hpp).
// Throws hotpath::Error with one line naming --slo and the problem.
std::vector<Slo> parse_slos(const std::string& spec);

// The one number an SLO checks on a request; NaN when the request has none (no content, < 2
// distinct word stamps, no usage ...).
double slo_value(const Slo& slo, const RequestMetrics& m);

// The report's `goodput` object: each SLO with its verdict, the requests meeting every per-request
// SLO, their rate and words/s over the report's `interval_s`. `report` is make_report()'s output for
// `records`.
nlohmann::json evaluate(const std::vector<Slo>& slos, const nlohmann::json& report,
                        const std::vector<RequestRecord>& records);

// Console lines for print_summary (each starts with two spaces and ends with a newline).
std::string goodput_summary(const nlohmann::json& goodput);

}  // namespace hotpath::llm
