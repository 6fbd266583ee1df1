// The documented limits of every number `hotpath llm` takes from a flag, a data set or a server.
// Each one bounds what a typo or a hostile server can make the harness allocate or wait for; the
// CLI refuses values outside them (exit 2, naming the flag and the limit) and the library checks
// them again for callers that skip the CLI. docs/llm.md lists them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hotpath::llm {

// Requests in one run (--requests, --warmup, an interactive schedule, dataset synth --requests).
// Each costs ~0.4 KB of records, so the cap keeps a run under ~4 GB.
inline constexpr std::size_t kMaxRequests = 10'000'000;
// Requests in flight per run (--max-concurrency; also the hard ceiling when no cap is given): each
// is a socket and a libcurl handle.
inline constexpr std::size_t kMaxConcurrency = 100'000;
inline constexpr std::size_t kMaxThreads = 256;  // --threads
inline constexpr std::size_t kMaxTurns = 1000;
inline constexpr double kMaxSpinUs = 10'000;      // --spin-us   // --turns: requests per conversation
// Interactive arrival rate (--rate, --sweep), requests/s, and the gamma shape (--burstiness).
inline constexpr double kMinRate = 0.001, kMaxRate = 1e6;
inline constexpr double kMinBurstiness = 0.01, kMaxBurstiness = 100;
inline constexpr double kMinTimeoutS = 0.001, kMaxTimeoutS = 1e6;  // --timeout (1 ms resolution)
inline constexpr double kMaxDurationS = 1e7;                       // --duration (bench and serve-sim)
// Requested output per request (dataset `output_tokens`, sent as max_tokens, an int32 on servers).
inline constexpr std::int64_t kMaxOutputTokens = 2'147'483'647;
// dataset synth: prompt words per request, and words in the whole file (~10 bytes each in memory).
inline constexpr double kMaxInputWords = 1e6;
inline constexpr double kMaxSynthWords = 1e8;
// What a server can make the client hold: one SSE line or event (its `data:` joined), and the text
// kept per request for ROUGE-L (which reads at most 4096 words anyway).
inline constexpr std::size_t kMaxEventBytes = 4u << 20;
inline constexpr std::size_t kMaxKeptTextBytes = 1u << 20;
// serve-sim: delays (ms) and words split over tokens.
inline constexpr double kMaxSimDelayMs = 600'000;
inline constexpr int kMaxTokensPerWord = 1000;

}  // namespace hotpath::llm
