// `hotpath bench --mode backtest | backtest-streaming | fresh`: the throughput workloads (docs/model.md,
// "The three workloads").
//   backtest            S recorded series [S, T, I] -> every tick's output by the window rule (window W)
//   backtest-streaming  the same by the streaming rule (state carried through each series)
//   fresh               calls of B independent windows [B, W, I] -> [B, O], each from zero state,
//                       every call with new inputs; latency per call and windows per second
// Inputs are the latency benchmark's (tick_input), different every tick and every series. A sample of
// outputs is checked against the float64 reference off the timed path.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "engine/engine.hpp"
#include "model/loader.hpp"

namespace hotpath::bench {

enum class Workload { backtest, backtest_streaming, fresh };
const char* workload_name(Workload w);
// "backtest" | "backtest-streaming" | "fresh"; nullopt for anything else (the latency modes).
std::optional<Workload> parse_workload(const std::string& mode);

// Limits (the CLI's flags say them in --help).
inline constexpr long long kMaxThroughputWindows = 1'000'000'000;
inline constexpr long long kMaxBatch = 1'000'000;
inline constexpr int kMaxRepeats = 1000;
// Inputs held for one measured run (S x T x I floats and a backtest's S x T x O outputs, or the fresh
// mode's distinct batches).
inline constexpr double kMaxThroughputInputBytes = double(4ull << 30);

struct ThroughputOptions {
  std::string model;  // path or zoo name
  LoadOptions load;
  // The engine's options as every front end gives them (mode is set from the workload; warm is not
  // used: the unmeasured first run warms the backend).
  EngineOptions engine;
  Workload workload = Workload::backtest;
  // Windows (outputs) per measured run; unset: sized from a short probe so that a run takes about
  // target_seconds.
  std::optional<long long> windows;
  double target_seconds = 3;
  long long batch = 0;  // backtest: series S (default 1); fresh: windows per call B (default 1024)
  int repeats = 3;      // measured runs (backtest) after one unmeasured one; fresh: all calls are samples
  uint64_t seed = 1;
  int check_rows = 64;  // outputs checked against float64
  // cuda: inputs and outputs in GPU memory (uploaded before the clock, read back after it), through
  // Engine::backtest_on_device / run_batch_on_device: the rate without the host link.
  bool device_arrays = false;
  std::string json_path;
  std::string command_line;
  // Makes the backend instead of the registry (tests: a backend that answers wrongly).
  std::function<std::unique_ptr<Backend>(const Model&, const BackendOptions&)> make_backend;
};

// Runs the benchmark, prints a summary to `out`, writes JSON when asked, returns the report. Throws
// hotpath::Error for bad options. `pass` is false (and `failure` says why) when the checked error
// exceeds the precision's bound.
nlohmann::json run_throughput(const ThroughputOptions& options, std::ostream& out);

}  // namespace hotpath::bench
