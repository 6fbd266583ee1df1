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
// Connected, then reset or closed before any response byte (e.g. a full listen backlog, a proxy):
// the request failed; `cut_stream` is for a response that started and ended early.
inline constexpr const char* request_error = "request_error";
inline constexpr const char* timeout = "timeout";                  // --timeout reached
inline constexpr const char* cut_stream = "cut_stream";            // ended before `data: [DONE]`
inline constexpr const char* malformed_event = "malformed_event";  // an event that is not a chunk
inline constexpr const char* server_error_event = "server_error_event";  // {"error": ...} in stream
inline constexpr const char* oversized_event = "oversized_event";  // a line/event over kMaxEventBytes
inline constexpr const char* client_error = "client_error";        // any other transfer error
// Still in flight when the grace period after an interrupt (Ctrl-C) ran out; not a server fault.
inline constexpr const char* abandoned = "abandoned";
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
  // Multi-turn runs: the conversation and the turn (0-based) of this request; kNoSession otherwise.
  static constexpr std::size_t kNoSession = static_cast<std::size_t>(-1);
  std::size_t session = kNoSession;
  int turn = 0;
};

struct RunInfo {
  nlohmann::json config;      // echoed into the report
  std::string started_at;     // ISO 8601 UTC
  double wall_s = 0;          // the measured phase, start to last event
  std::size_t warmup_sent = 0, warmup_failed = 0;
  bool ignore_eos = false;
  double client_cpu_s = -1;       // CPU time of the client threads in the measured phase (< 0: unknown)
  std::size_t client_threads = 1;
  bool interrupted = false;       // stopped early by Ctrl-C (SIGINT) or SIGTERM
  double think_time_s = 0;        // multi-turn: the pause between a reply and the next turn
};

// What one request's stamps give (docs/llm.md, "What is measured"); NaN where the request has no
// such number. The one definition behind the report, the CSV and the SLO checks (slo.hpp).
struct RequestMetrics {
  double rt_ms = kNaN, rt_send_ms = kNaN, e2e_ms = kNaN, slot_ms = kNaN, lag_ms = kNaN;
  double wps = kNaN, iwl_ms = kNaN, tpot_ms = kNaN, overhead_us = kNaN, pre_us = kNaN, post_us = kNaN;
};
RequestMetrics request_metrics(const RequestRecord& r);

nlohmann::json make_report(const RunInfo& info, const std::vector<RequestRecord>& records);
// A report number for a console line: fixed(v, prec), or "-" when it is null or absent.
std::string fixed_or_dash(const nlohmann::json& v, int prec);
// Multi-turn runs: sessions completed / broken (a turn failed, the rest not sent), session duration,
// and RT / E2E / input words per turn index; null when no record belongs to a session.
nlohmann::json conversation_report(const std::vector<RequestRecord>& records, double think_time_s);
// `rate_column`: a sweep's leading column, the swept value, headed `axis` ("rate" or
// "concurrency"); `repetition`: a second leading column, the repetition (with --repeat).
void write_csv(const std::vector<RequestRecord>& records, const std::string& path,
               std::optional<double> rate_column = std::nullopt, bool append = false,
               const std::string& axis = "rate", std::optional<std::size_t> repetition = std::nullopt);

// One row of a sweep: the value of the swept setting (`axis`: "rate" in requests/s or
// "concurrency" in client slots) and the report of its run.
struct SweepPoint {
  double rate = 0;  // the swept value (named for the first axis; see `axis`)
  nlohmann::json report;
  std::string axis = "rate";
  // Every repetition's report when the point ran more than once (--repeat; `report` is then the
  // first): the sweep table and plot give their means.
  std::vector<nlohmann::json> repeats;
};

// The headline numbers of a run that a repeated sweep point gives as mean and 95% CI (the sweep
// CSV's *_ci95 columns, the sweep JSON's `points[].stats`), in that order: rps, wps_total,
// goodput_rps (only with --slo), rt_p50_ms, rt_p90_ms, iwl_p50_ms.
// {"KEY": {"n", "mean", "ci95_half_width", "ci95_low", "ci95_high", "values": [...]}, ...}; a run
// without the number (no IWL, no --slo) is left out of its n.
nlohmann::json repetition_stats(const std::vector<nlohmann::json>& reports);
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
// Pretty JSON; bytes that are not UTF-8 (a --model, server text) are replaced, not thrown on.
void write_json(const nlohmann::json& j, const std::string& path);

}  // namespace hotpath::llm
