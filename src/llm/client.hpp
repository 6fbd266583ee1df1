// The measuring client: libcurl's multi interface driven by its socket API from one epoll loop per
// thread, so hundreds of streams cost one thread and no per-transfer polling. Needs libcurl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "llm/dataset.hpp"
#include "llm/report.hpp"

namespace hotpath::llm {

enum class Mode { batch, interactive };

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
  std::string dataset_path;         // echoed into the report
  std::vector<std::string> headers;  // extra HTTP headers, "Name: value" (--header)
  LiveCounters* live = nullptr;      // when set, the client counts sends and ends here as they happen
  // Called on the calling thread just before the measured phase starts and just after it ends
  // (after any warm-up): a server monitor samples exactly the measured phase.
  std::function<void()> on_measured_start, on_measured_end;
};

// Base URL + "/chat/completions" or "/completions"; throws hotpath::Error for a URL that is not
// http(s).
std::string endpoint_url(const std::string& base, Api api);

struct BenchResult {
  RunInfo info;
  std::vector<RequestRecord> records;
  nlohmann::json report;
};

// Runs one measured phase (after the warm-up, if any). Throws hotpath::Error for bad settings.
BenchResult run_bench(const BenchConfig& config, const std::vector<DatasetItem>& dataset);

nlohmann::json config_json(const BenchConfig& c);

}  // namespace hotpath::llm
