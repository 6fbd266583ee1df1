// The server-side view, part 1 (no libcurl here, so it is tested in every build): a parser of the
// Prometheus text exposition format (version 0.0.4), the histogram arithmetic of PromQL's
// increase() and histogram_quantile(), and the recorder that turns the /metrics bodies scraped
// during a measured phase into time series and a server-side TTFT. docs/llm.md, "Server-side view".
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::llm {

// Bounds on what a /metrics body can make the harness hold.
inline constexpr std::size_t kMaxMetricsBodyBytes = 16u << 20;  // a scrape larger than this is an error
inline constexpr std::size_t kMaxLabelsPerSample = 128;
inline constexpr std::size_t kMaxNamesSeen = 50;             // metric names kept for the report
inline constexpr std::size_t kMaxSeriesSamples = 10'000;     // samples kept per time series

struct PromSample {
  std::string_view name;                                   // valid during the callback only
  const std::vector<std::pair<std::string_view, std::string>>* labels = nullptr;  // name, unescaped value
  double value = 0;                                        // may be +-Inf or NaN
  std::optional<std::int64_t> timestamp_ms;
  const std::string* label(std::string_view key) const;    // nullptr when absent
};

// Parses a body line by line, calling on_sample for each sample and on_type for each `# TYPE`
// line. Returns an empty string when the body is well formed, else "line N: what is wrong" (the
// callbacks may already have run for earlier lines). Accepts: `#` comments, HELP/TYPE lines, label
// values with \\ \" \n escapes, a trailing comma in a label set, +Inf/-Inf/NaN, an optional
// integer timestamp, CRLF line ends, and an OpenMetrics exemplar (`# {...} v`) or `# EOF`.
std::string parse_prometheus(std::string_view body, const std::function<void(const PromSample&)>& on_sample,
                             const std::function<void(std::string_view name, std::string_view type)>& on_type = {});

// A histogram as cumulative buckets (upper bound `le`, count of observations <= le), ascending.
struct Histogram {
  std::vector<std::pair<double, double>> buckets;
  double sum = 0, count = 0;
  bool has_inf() const;
  double total() const;  // the +Inf bucket's count (0 when there is none)
};

// last - first bucket by bucket (PromQL's increase() over the two scrapes). A bucket missing from
// `first` counts as 0 there. When any bucket went down (a counter reset: the server restarted),
// the result is `last` itself and *reset is set.
Histogram histogram_increase(const Histogram& first, const Histogram& last, bool* reset = nullptr);

// PromQL's histogram_quantile(q): linear interpolation inside the bucket holding rank q * total;
// the lowest bucket starts at 0 (when its bound is > 0); a rank in the +Inf bucket gives the
// highest finite bound. NaN when there are no observations or no +Inf bucket. `lo`/`hi`, when given,
// receive the bounds of the bucket used (hi = +Inf for the +Inf bucket).
double histogram_quantile(const Histogram& h, double q, double* lo = nullptr, double* hi = nullptr);

// The metric names tried for each series, in order; the first one a server exposes is used.
struct MetricNames {
  std::vector<std::string> running = {"vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"};
  std::vector<std::string> waiting = {"vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"};
  std::vector<std::string> kv_cache = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"};
  std::vector<std::string> ttft = {"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"};
};

// What one body holds of the names above: each gauge summed over its label sets, each histogram
// summed over its label sets bucket by bucket (same `le`), and the first kMaxNamesSeen metric names
// (a histogram's _bucket/_sum/_count under its own name).
struct ScrapeDigest {
  std::map<std::string, double> gauges;
  std::map<std::string, Histogram> histograms;
  std::vector<std::string> names;
  bool names_truncated = false;
};
// Empty string on success, else the parse error (out is then unusable).
std::string digest_scrape(std::string_view body, const MetricNames& names, ScrapeDigest& out);

// One time series of a gauge: every scrape feeds min/mean/max; at most kMaxSeriesSamples (t, value)
// pairs are kept (past that every other one is dropped and the stride doubles).
struct GaugeSeries {
  std::string metric;  // the name the values came from
  std::size_t count = 0;
  double min = 0, max = 0, sum = 0;
  std::vector<std::pair<double, double>> samples;
  std::size_t stride = 1, skipped = 0;
  void add(double t, double v);
  nlohmann::json to_json() const;
};

// Collects the scrapes of one measured phase; t is seconds since that phase began.
class MetricsRecorder {
 public:
  MetricsRecorder(std::string url, double interval_s, MetricNames names = {});
  void add_body(double t, std::string_view body);  // a parse error counts as a failed scrape
  void add_error(double t, const std::string& what);
  std::size_t ok() const { return ok_; }
  std::size_t failed() const { return failed_; }
  // The `server.metrics` object; `client_rt_from_send` is the report's metrics.rt_from_send_ms
  // summary, put beside the server's TTFT.
  nlohmann::json to_json(const nlohmann::json& client_rt_from_send) const;

 private:
  void pick(std::optional<GaugeSeries>& s, const std::vector<std::string>& cands, const ScrapeDigest& d, double t);
  std::string url_;
  double interval_s_;
  MetricNames names_;
  std::size_t ok_ = 0, failed_ = 0;
  std::string first_error_;
  std::optional<GaugeSeries> running_, waiting_, kv_;
  std::string ttft_metric_;
  std::optional<std::pair<double, std::map<std::string, Histogram>>> first_scrape_;  // t, histograms
  std::optional<std::pair<double, Histogram>> ttft_last_;
  std::vector<std::string> names_seen_;
  bool names_truncated_ = false;
};

}  // namespace hotpath::llm
