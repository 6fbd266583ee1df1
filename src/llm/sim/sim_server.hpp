// serve-sim: an OpenAI-compatible streaming server on loopback with known timing and injected
// faults. One epoll thread serves every connection; token times come from a timerfd, not from
// sleeps, so hundreds of concurrent streams keep their schedule.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace hotpath::llm {

struct SimConfig {
  std::string host = "127.0.0.1";  // loopback only (127.0.0.0/8, ::1 or localhost)
  std::uint16_t port = 0;          // 0: the kernel picks one; read it back with port()
  double ttft_ms = 20;             // request received -> first content token
  double tpot_ms = 5;              // between content tokens
  int output_tokens = 0;           // > 0: always this many tokens, whatever max_tokens says
  int default_tokens = 16;         // when a request gives no max_tokens
  int eos_tokens = 0;              // > 0: the "model" stops after this many unless ignore_eos
  int tokens_per_word = 1;         // > 1 splits each word over that many tokens
  bool role_chunk = true;          // chat: send {"role":"assistant","content":""} on receipt
  bool stamps = true;              // add "hotpath_sim": {recv_ns, sent_ns} to the first content chunk
  double error_rate = 0;           // fraction of requests answered with HTTP `error_status`
  int error_status = 500;
  double cut_rate = 0;             // fraction of streams cut (connection closed) half way
  double malformed_rate = 0;       // fraction of streams that get a non-JSON event half way
  double reset_rate = 0;           // fraction of requests whose connection is reset (RST) on receipt
  bool busy_poll = false;          // spin instead of sleeping (token times to the microsecond)
  std::uint64_t seed = 0;          // fault k is decided by hash(seed, request number k)
  // GET /metrics: vllm:kv_cache_usage_perc = tokens held by requests in progress (prompt words +
  // tokens generated so far) / this capacity, at most 1: a synthetic figure that rises with load.
  long long kv_capacity_tokens = 100'000;
};

struct SimStats {
  std::uint64_t requests = 0;        // completion requests received
  std::uint64_t streams_done = 0;    // streams that reached [DONE]
  std::uint64_t http_errors = 0;     // injected HTTP errors
  std::uint64_t cuts = 0;            // injected cuts
  std::uint64_t malformed = 0;       // injected malformed events
  std::uint64_t resets = 0;          // injected connection resets (before any response byte)
  std::uint64_t max_concurrent = 0;  // most responses in progress at once
  std::uint64_t connections = 0;     // connections accepted
};

// serve-sim's TTFT histogram buckets (vLLM's, in seconds) and its GET /metrics body format:
// vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc and
// vllm:time_to_first_token_seconds (receipt -> first content token), labelled model_name="sim".
inline constexpr double kSimTtftBuckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};

// Which injected fault request number k (0-based, in order of arrival) gets; exposed so tests
// can predict exact counts.
enum class SimFault { none, http_error, cut, malformed, reset };
SimFault sim_fault_for(const SimConfig& c, std::uint64_t k);
// The text of output token k.
std::string sim_token_text(std::uint64_t k, int tokens_per_word);

class SimServer {
 public:
  explicit SimServer(SimConfig config);
  ~SimServer();
  SimServer(const SimServer&) = delete;
  SimServer& operator=(const SimServer&) = delete;

  // Binds, listens and starts the event-loop thread; throws hotpath::Error when it cannot.
  void start();
  // Stops the loop and closes every connection; idempotent.
  void stop();
  std::uint16_t port() const;
  // "http://127.0.0.1:PORT/v1", what `--endpoint` takes.
  std::string base_url() const;
  SimStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::llm
