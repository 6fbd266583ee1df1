// `hotpath bench`: the latency benchmark of SPEC §5. One tick at a time, timed from the instant it is
// due to the instant its output is visible to the caller; precompute timed on its own; outputs checked
// against a float64 reference off the timed path.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "model/loader.hpp"

namespace hotpath::bench {

inline constexpr int kSchemaVersion = 1;

struct BenchOptions {
  std::string model;          // path or zoo name
  LoadOptions load;
  std::string backend = "cpu";
  Mode mode = Mode::window;
  std::optional<int> window;  // default: the model's
  std::optional<Precision> precision;
  long long ticks = 100000;   // measured ticks (ignored when seconds is set)
  std::optional<double> seconds;
  long long warmup = 1000;
  double gap_us = 0;
  std::optional<double> rate_hz;
  std::vector<int> cpuset;
  uint64_t seed = 1;
  int check_every = 16;
  int check_threads = 0;         // float64 checker threads (window mode); 0: one per spare core, up to 8
  std::string json_path;
  std::string samples_path;
  double timeout_us = 1'000'000;
  std::string fallback;
  std::string variant;           // backend kernel variant ("" = the backend's default)
  bool pingpong = false;         // only the bare signalling floor, no model
  std::optional<int> floats;     // ping-pong payload; default the model's I, else 32
  bool skip_pingpong = false;    // cuda: do not run the same-process ping-pong
  std::string command_line;
};

// Tick t's input: I standard-normal values from (seed, t) alone, so the checker can regenerate them.
void tick_input(uint64_t seed, long long t, std::span<float> x);

// Runs the benchmark, prints the table to `out`, writes JSON/samples when asked, returns the report.
// Throws hotpath::Error for bad options.
nlohmann::json run_bench(const BenchOptions& options, std::ostream& out);

// True when the report's error is within the backend's bound (or nothing was checked).
bool report_passed(const nlohmann::json& report);

}  // namespace hotpath::bench
