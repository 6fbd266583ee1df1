// The measuring client: libcurl's multi interface driven by its socket API from one epoll loop per
// thread, so hundreds of streams cost one thread and no per-transfer polling. Needs libcurl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <iosfwd>
#include <string>
#include <vector>

#include "llm/report/report.hpp"
#include "llm/workloads/dataset.hpp"

namespace hotpath::llm {

// batch: all due at t = 0 (closed loop under the cap); interactive: open-loop arrivals at a rate;
// trace: open-loop arrivals at the times of a recorded trace (trace.hpp).
enum class Mode { batch, interactive, trace };

class StopSignal;

struct BenchConfig {
  std::string endpoint;  // base URL, e.g. http://127.0.0.1:8000/v1
  std::string model;
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
  Api api = Api::chat;
  Mode mode = Mode::batch;
  double rate = 0;          // interactive: mean requests/s
  double burstiness = 1;    // interactive: gamma shape of the gaps (1 = Poisson)
  std::size_t max_concurrency = 0;  // 0 = no cap
  std::size_t requests = 0;         // 0 = the whole data set (interactive + duration: until then)
  double duration_s = 0;            // 0 = no limit; otherwise no request is sent after it
  std::size_t warmup = 0;           // unmeasured requests first
  double timeout_s = 600;           // per request, from the moment it is sent
  std::uint64_t seed = 0;
  bool ignore_eos = false;
  bool insecure = false;            // https without certificate checks
  std::size_t threads = 1;          // client threads (requests and the cap are split between them)
  bool busy_poll = false;           // spin instead of sleeping: needs a core per client thread
  double spin_us = 0;               // wake this long before each scheduled send and spin to it
  std::string dataset_path;         // echoed into the report
  std::vector<std::string> headers;  // extra HTTP headers, "Name: value" (--header)
  LiveCounters* live = nullptr;      // when set, the client counts sends and ends here as they happen
  // Called on the calling thread just before the measured phase starts and just after it ends
  // (after any warm-up): a server monitor samples exactly the measured phase.
  std::function<void()> on_measured_start, on_measured_end;
  // Ctrl-C: once `stop` is requested no request is sent; those in flight get `grace_s` seconds to
  // finish, then are abandoned (counted). The result says it was interrupted.
  StopSignal* stop = nullptr;
  double grace_s = 10;
  // Load shape: interactive mode ramps the rate linearly from `ramp_from` to `rate` over the first
  // `ramp_s` seconds; batch mode ramps the cap from 1 to --max-concurrency over them.
  double ramp_s = 0, ramp_from = 0;
  // Trace mode: request i (dataset item i) is due at trace_times[i].
  std::vector<double> trace_times;
  std::string trace_path;
  double trace_speed = 1;
  // Multi-turn conversations: each session sends `turns` requests, each turn's messages carrying the
  // earlier turns and the replies actually received, the next turn sent `think_time_s` after a reply.
  // --requests then counts sessions; session s takes data set items s*turns ... s*turns+turns-1.
  std::size_t turns = 1;
  double think_time_s = 0;
};

// Base URL + "/chat/completions" or "/completions"; throws hotpath::Error for a URL that is not
// http(s) (the scheme in any case).
std::string endpoint_url(const std::string& base, Api api);

// Throws hotpath::Error for a --header that is not 'Name: value' or that names a header the client
// sets itself: the body's framing (Content-Length, Transfer-Encoding), Host, and the hop-by-hop
// headers (Connection, Keep-Alive, Proxy-Connection, TE, Upgrade).
void check_headers(const std::vector<std::string>& headers);

struct BenchResult {
  RunInfo info;
  std::vector<RequestRecord> records;
  nlohmann::json report;
};

// The sessions (first requests; one request each unless --turns) a run of `c` schedules on a data
// set of `dataset_size` items: the trace's records (at most --requests), --requests, or the data set
// once in sessions of --turns items; nullopt for an interactive run bounded by --duration alone.
std::optional<std::size_t> planned_sessions(const BenchConfig& c, std::size_t dataset_size);

// A client whose connections outlive a run: the warm-up, and every point of a sweep, leave their
// keep-alive connections open for the next run, so a run against a keep-alive server opens at most
// --max-concurrency connections in all. The endpoint, API, headers, threads and TLS settings are
// fixed at construction; each run() takes its load (mode, rate, cap, requests, ...) from `point`.
class BenchClient {
 public:
  BenchClient(const BenchConfig& config, const std::vector<DatasetItem>& dataset);  // throws hotpath::Error
  ~BenchClient();
  BenchClient(const BenchClient&) = delete;
  BenchClient& operator=(const BenchClient&) = delete;
  // The warm-up (config.warmup requests, batch, under the cap) runs before the first run only.
  BenchResult run(const BenchConfig& point);

 private:
  struct Impl;
  Impl* impl_;
};

// One run on a fresh client: the warm-up, if any, then the measured phase. Throws hotpath::Error for
// bad settings.
BenchResult run_bench(const BenchConfig& config, const std::vector<DatasetItem>& dataset);

nlohmann::json config_json(const BenchConfig& c);

}  // namespace hotpath::llm
