// Per-request records and what is reported from them: the JSON summary, the per-request CSV, and the
// sweep table (CSV + SVG). Independent of libcurl so it is tested in every build.
#pragma once
#include <cmath>
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::llm {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Failure reasons; every request that was sent ends as completed or with exactly one of these.
namespace reason {
inline constexpr const char* http_error = "http_error";            // HTTP status >= 400
inline constexpr const char* http_redirect = "http_redirect";      // HTTP 3xx (never followed)
inline constexpr const char* connect_error = "connect_error";      // could not resolve/connect
inline constexpr const char* timeout = "timeout";                  // --timeout reached
inline constexpr const char* cut_stream = "cut_stream";            // ended before `data: [DONE]`
inline constexpr const char* malformed_event = "malformed_event";  // an event that is not a chunk
inline constexpr const char* server_error_event = "server_error_event";  // {"error": ...} in stream
inline constexpr const char* oversized_event = "oversized_event";  // a line/event over kMaxEventBytes
inline constexpr const char* client_error = "client_error";        // any other transfer error
}  // namespace reason

enum class Outcome { not_sent, completed, failed };

// All times are seconds since the run's start (t = 0 is the first scheduled send); NaN = never.
struct RequestRecord {
  std::size_t index = 0;          // position in the run
  std::size_t dataset_index = 0;  // record of the data set it sent
  Outcome outcome = Outcome::not_sent;
  std::string reason;   // failure class (see `reason`), empty when completed
  std::string detail;   // human-readable detail of the failure
  long http_status = 0;
  double scheduled_s = kNaN;      // when the schedule said to send it
  double slot_s = kNaN;           // when a client slot was free for it (>= scheduled_s)
  double sent_s = kNaN;           // when it was handed to the HTTP client
  double first_content_s = kNaN;  // arrival of the first chunk carrying content
  double last_content_s = kNaN;   // arrival of the last chunk carrying content
  double end_s = kNaN;            // arrival of `[DONE]` (or the failure)
  std::size_t words = 0, distinct_stamps = 0;
  double first_word_s = kNaN, last_word_s = kNaN;
  int requested_tokens = 0;
  std::optional<long long> completion_tokens, prompt_tokens;  // the server's `usage`
  std::string finish_reason;
  std::size_t events = 0, content_events = 0;
  std::size_t input_words = 0;
  std::optional<double> rouge_l, word_ratio;   // when the data set gave a reference
  double sim_recv_s = kNaN, sim_sent_s = kNaN;  // serve-sim's stamps (same host, same clock)
};

struct RunInfo {
  nlohmann::json config;      // echoed into the report
  std::string started_at;     // ISO 8601 UTC
  double wall_s = 0;          // the measured phase, start to last event
  std::size_t warmup_sent = 0, warmup_failed = 0;
  bool ignore_eos = false;
  double client_cpu_s = -1;       // CPU time of the client threads in the measured phase (< 0: unknown)
  std::size_t client_threads = 1;
};

// What make_report and the CSV compute from one record (ms, or words/s for `wps`; NaN = undefined):
// RT from the schedule and from the send, E2E, slot wait, send lag, per-user words/s and IWL, TPOT,
// and the harness overhead against serve-sim (us).
struct Derived {
  double rt_ms = kNaN, rt_send_ms = kNaN, e2e_ms = kNaN, slot_ms = kNaN, lag_ms = kNaN;
  double wps = kNaN, iwl_ms = kNaN, tpot_ms = kNaN, overhead_us = kNaN, pre_us = kNaN, post_us = kNaN;
};
Derived derive(const RequestRecord& r);

nlohmann::json make_report(const RunInfo& info, const std::vector<RequestRecord>& records);
void write_csv(const std::vector<RequestRecord>& records, const std::string& path,
               std::optional<double> rate_column = std::nullopt, bool append = false);

// One row of a sweep: the value of the swept setting (`axis`: "rate" in requests/s or
// "concurrency" in client slots) and the report of its run.
struct SweepPoint {
  double rate = 0;  // the swept value (named for the first axis; see `axis`)
  nlohmann::json report;
  std::string axis = "rate";
};

// "rate 4.00 req/s" (2 decimals below 10) or "concurrency 16": how reports name a sweep point.
std::string sweep_point_label(const SweepPoint& p);

// Live counts of a run in progress, written by the client threads and read by a progress display.
struct LiveCounters {
  std::atomic<std::uint64_t> sent{0}, completed{0}, failed{0};
};
// Marks the Pareto frontier: points not beaten on both total words/s (higher is better) and on
// latency (lower is better); the latency is RT p90 or IWL p90, one frontier each.
std::vector<bool> pareto_front(const std::vector<double>& throughput, const std::vector<double>& latency);
void write_sweep_csv(const std::vector<SweepPoint>& points, const std::string& path);
std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title);
void write_text(const std::string& text, const std::string& path);

}  // namespace hotpath::llm
