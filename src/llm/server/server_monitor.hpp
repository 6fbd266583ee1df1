// The server-side view, part 2: what `hotpath llm bench --metrics-url/--nvml` samples during the
// measured phase, and how it lands in the report (`server`) and the console. The /metrics scraper
// is the only libcurl user here (HOTPATH_HAVE_CURL); the rest builds everywhere. docs/llm.md,
// "Server-side view".
#pragma once
#include <iosfwd>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "llm/server/nvml_monitor.hpp"

namespace hotpath::llm {

inline constexpr double kMinMetricsIntervalS = 0.05, kMaxMetricsIntervalS = 60;  // --metrics-interval
inline constexpr long kScrapeTimeoutMs = 2000, kScrapeConnectTimeoutMs = 1000;    // per /metrics GET

struct ServerViewOptions {
  std::string metrics_url;  // --metrics-url: empty = none, "auto", or an http(s) URL
  double interval_s = 1;    // --metrics-interval, for the scrapes and the NVML readings
  bool nvml = false;        // --nvml: sample this machine's GPUs even for a remote endpoint
  bool no_nvml = false;     // --no-nvml
  bool insecure = false;    // https without certificate checks (as --insecure)
  std::string nvml_library = util::kNvmlLibrary;  // tests point it at a library that does not exist
};

// `--metrics-url auto`: the endpoint without trailing slashes, minus a trailing "/v1", plus
// "/metrics" (http://h:8000/v1 -> http://h:8000/metrics), where vLLM, SGLang and TGI serve them.
std::string auto_metrics_url(const std::string& endpoint);
// Whether the endpoint's host is this machine: localhost, 127.0.0.0/8 or [::1].
bool endpoint_is_loopback(const std::string& endpoint);

// Samples the server during each measured phase: call measured_start()/measured_end() from
// BenchConfig's hooks, then add_to_report() on that run's report. Reusable across the runs of a
// sweep (each start forgets the previous run).
class ServerView {
 public:
  // Throws hotpath::Error for a bad --metrics-url or --metrics-interval, or both --nvml and --no-nvml.
  ServerView(const ServerViewOptions& options, const std::string& endpoint);
  ~ServerView();
  ServerView(const ServerView&) = delete;
  ServerView& operator=(const ServerView&) = delete;

  bool active() const;  // scraping or sampling GPUs at all
  // A baseline scrape and GPU reading, then a sampler thread for each; throws hotpath::Error when a
  // thread cannot be started.
  void measured_start();
  // Stops the samplers, then a final scrape and GPU reading.
  void measured_end();
  // report["server"] = {"metrics": {...}, "nvml": {...}}, each key only when it is on.
  void add_to_report(nlohmann::json& report) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The console lines for report["server"] (nothing when the report has none).
void print_server_summary(const nlohmann::json& report, std::ostream& os);

}  // namespace hotpath::llm
