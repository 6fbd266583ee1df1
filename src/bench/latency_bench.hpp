// `hotpath bench`: the latency benchmark (docs/model.md, "Latency"). One tick at a time, timed from the
// instant it is due to the instant its output is visible to the caller; precompute timed on its own;
// outputs checked against a float64 reference off the timed path.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "bench/checker.hpp"  // tick_input: the inputs every benchmark sends
#include "bench/report.hpp"
#include "bench/stats.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "engine/instances.hpp"
#include "model/loader.hpp"
#include "util/names.hpp"
#include "util/progress_bar.hpp"

namespace hotpath::bench {


// Limits of the options (the CLI's flags say them in --help). Every measured sample is kept unless
// per-interval reports are asked for (16 bytes a tick), hence the cap on --ticks.
inline constexpr long long kMaxTicks = 100'000'000;
inline constexpr long long kMaxWarmup = 100'000'000;
inline constexpr double kMaxSeconds = 1e6;       // --seconds/--duration, --report-every, --idle-every-s
inline constexpr double kMinIntervalSeconds = 1e-3;
inline constexpr double kMaxIdleSeconds = 3600;  // --idle-s
inline constexpr double kMaxGapUs = 1e9;
inline constexpr double kMaxRateHz = 1e8;
inline constexpr int kMaxCheckThreads = 64;
inline constexpr int kMaxInstances = 1024;  // --instances: far above what any GPU holds
inline constexpr int kMaxFloats = gpu::kMaxInputFloats;  // --floats: what the mailbox carries
// Per-interval reports beyond this many: the last interval runs to the end of the run.
inline constexpr size_t kMaxIntervals = 10'000;
// A backend that fails this many ticks in a row (no answer, or an error getting ready) ends the run.
inline constexpr int kMaxFailuresInRow = 100;
// The first ticks after the engine is made, before the warm-up: timed and checked like measured ticks,
// reported apart (`first_ticks`), never in the steady-state percentiles.
inline constexpr int kFirstTicks = 10;
// With --swap-every-s: the ticks after a switch still counted as the swap's (the new model's caches
// warming), beside every tick from the swap's call to its switch.
inline constexpr long long kTicksAfterSwitch = 100;

// Where a float64 check after the loop steps its states (BenchOptions::check_on).
enum class CheckOn { automatic, cpu, gpu };
constexpr auto name_table(CheckOn) {
  return util::make_names<CheckOn>("checker device", {{CheckOn::automatic, "auto"}, {CheckOn::cpu, "cpu"}, {CheckOn::gpu, "gpu"}});
}

struct BenchOptions {
  std::string model;          // path or zoo name
  LoadOptions load;
  // The engine's options (backend, mode, window, precision, cores, scaling, the backends' own parts),
  // as every front end gives them; mode is window or streaming here. Default backend: cpu.
  EngineOptions engine = [] {
    EngineOptions e;
    e.backend = BackendKind::cpu;
    return e;
  }();
  long long ticks = 100000;   // measured ticks (ignored when seconds is set)
  std::optional<double> seconds;  // measure for this long (--seconds, --duration)
  long long warmup = 1000;       // ticks after the first kFirstTicks, before measuring
  double gap_us = 0;
  std::optional<double> rate_hz;
  uint64_t seed = 1;
  int check_every = 16;
  // Float64 checker threads: window mode, threads taking turns over the checked ticks; streaming, the
  // threads each reference step is split over (as many as the model's size makes worthwhile). 0: one per
  // spare core.
  int check_threads = 0;
  // The checker runs after the timed loop (its threads' cores and memory traffic then stay out of the
  // timings, as they are out of the ping-pong's) when the run has a tick count and its checked outputs fit
  // CheckedOutputs' buffer; check_during (or an open-ended --seconds run) runs it beside the loop.
  bool check_during = false;
  // Where a run checked after the loop steps its float64 states (streaming, 4,096 ticks or more: its chunks;
  // window mode without a rolling scaler: every checked window): automatic, on the GPU when the run's
  // backend was cuda (its engine is closed first: the persistent kernel holds the SMs) and on the host's
  // cores otherwise; cpu; gpu (refused before the run without a usable GPU, or with the check beside the
  // loop). A GPU that cannot take them (its memory) leaves them to the host's cores, and the report says why.
  CheckOn check_on = CheckOn::automatic;
  // Makes the lockstep states instead of gpu::lockstep_f64 (tests: states stepped on the host).
  reference::LockstepF64Maker make_lockstep;
  // The checker's progress on stderr while it finishes after the timed loop (automatic: when stdout and
  // stderr are terminals, and only if it takes a couple of seconds).
  util::ProgressMode progress = util::ProgressMode::automatic;
  std::string json_path;
  std::string samples_path;
  bool pingpong = false;         // only the bare signalling floor, no model
  std::optional<int> floats;     // ping-pong payload; default the model's I, else 32
  bool skip_pingpong = false;    // cuda: do not run the same-process ping-pong
  std::string command_line;
  // Long (soak) runs: a report every report_every_s seconds of measuring (latency from histograms, so
  // memory does not grow with the run), and idle gaps: every idle_every_s seconds, no tick for idle_s.
  std::optional<double> report_every_s;
  double idle_every_s = 0, idle_s = 0;
  // Live model swaps during the run (window mode, docs/production.md): every swap_every_s seconds of
  // measuring, a thread swaps swap_model in (then --model back, and so on); the report splits the ticks
  // answered while a swap was under way from the steady ones. Every checked tick is checked against the
  // model that answered it.
  std::string swap_model;
  double swap_every_s = 0;
  // Tick telemetry served to Prometheus during the run (docs/production.md, "Telemetry"): on
  // metrics_host:metrics_port (0: a port the kernel picks, printed), and for metrics_hold_s seconds
  // after the run (a scraper's last look at the final counts).
  std::optional<int> metrics_port;
  std::string metrics_host = "127.0.0.1";
  double metrics_hold_s = 0;
  // Many instances on one GPU (instances_bench.hpp): set, the instances bench runs.
  std::optional<int> instances;
  bool lockstep = false;          // every instance's tick r is sent together
  engine::Isolation isolation = engine::Isolation::green;
  int sms_per_instance = 0;       // 0: the largest equal share
  engine::Placement placement = engine::Placement::sm;  // shared: where an instance's blocks go
  bool beside_backtest = false;   // measure again with a backtest on the SMs the instances leave
  // Makes the backend instead of the registry (tests: a backend that fails on chosen ticks).
  std::function<std::unique_ptr<Backend>(const Model&, const BackendOptions&)> make_backend;
};

// The bare signalling floor (ping-pong) in this process, on the cpuset's first core: its report, and
// its summary in *summary. Throws UnsupportedError without a usable device.
nlohmann::json pingpong_json(int floats, long long count, long long warmup, const std::vector<int>& cpuset,
                             Summary* summary);
// The model's shape for a report.
nlohmann::json model_json(const Model& model, Mode mode, int window);

// The tick rate the cpu backend can sustain, estimated from the model's size alone. Each tick is the
// answer (the critical step: W_ih·in for every layer, the head) and then the precompute, which must end
// before the next tick can be answered: in window mode the W-1 open windows each advance one step
// (W_hh,0·h, then W_ih,l·h and W_hh,l·h for every later layer: (2L-1) products of 4H x H) plus the
// shared W_ih,0·x; in streaming mode W_hh,l·h for every layer. The precompute is split over
// `precompute_cores` (the cpuset's cores after the first; 1 when it runs inline on the critical core)
// and every core is taken to do `gflops_per_core` (set by the ISA the fp32 kernels use here, from the
// measurements estimate_tick_rate cites). rate = 1 / (answer + precompute). An estimate: within a factor of ~2 of the measured rate
// on the machines of BENCHMARKS.md; `bench` reports the measured rate beside it.
struct TickRateEstimate {
  double hz = 0;
  double answer_us = 0, precompute_us = 0;
  double answer_flops = 0, precompute_flops = 0;
  int precompute_cores = 1;
  double gflops_per_core = 0;             // the answer's
  double precompute_gflops_per_core = 0;  // the precompute's: gflops_per_core, or AMX's with amx
  std::string isa;  // whose gflops_per_core
};
// `amx`: the backend's bf16 products run on AMX tiles (facts "cpu_gemm"), which the precompute's rate takes.
TickRateEstimate estimate_tick_rate(const ModelConfig& config, Mode mode, int window, int precompute_cores,
                                    bool amx = false);
// The cores a cpuset of `cpuset_cores` gives the precompute: those after the first (none or one: 1, inline).
int precompute_cores_for_cpuset(size_t cpuset_cores);
// estimate_tick_rate with those cores.
TickRateEstimate estimate_tick_rate_for_cpuset(const ModelConfig& config, Mode mode, int window, size_t cpuset_cores);
nlohmann::json to_json(const TickRateEstimate& e);

// The header every report of a latency benchmark starts with (report_header), once the options are
// checked (hotpath::Error naming a bad one); clears the record of failed pins.
nlohmann::json start_report(const BenchOptions& options);

// Runs the benchmark of one engine (many: instances_bench.hpp), prints the table to `out`, writes
// JSON/samples when asked, returns the report.
// Throws hotpath::Error for bad options. The report's `pass` is false, and `failure` says why in one
// line, when a tick got no answer, a check was skipped, the error exceeds the bound, or nothing was
// measured or checked at all.
nlohmann::json run_bench(const BenchOptions& options, std::ostream& out);

}  // namespace hotpath::bench
