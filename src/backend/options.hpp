// What a backend is made with, defined once: the workload (mode, window, precision, cores, scaling), and
// the part only one backend reads (CpuOptions for the cpu backend, GpuOptions for cuda). Each choice is an
// enum with one name table (util/names.hpp): the CLI's flags, the C ABI's strings and Python's keywords
// are parsed by it, and --help, errors and JSON reports write its names. The engine's options
// (engine/engine.hpp) are these plus which backend serves and its fallback.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu_options.hpp"
#include "scaling/input_scaler.hpp"
#include "util/names.hpp"

namespace hotpath {

enum class Mode { window, streaming, batch };
enum class Precision { fp64, fp32, fp16, bf16, int8 };
// Which backend serves: auto (cuda when a GPU is usable and the model fits its kernels, else cpu), the
// float64 reference, the CPU, the GPU, or the CPU's critical step fed by the GPU's precompute (hybrid,
// docs/hybrid.md; chosen by name only).
enum class BackendKind { automatic, ref, cpu, cuda, hybrid };
// Who answers a tick the primary backend misses: nobody (it is counted lost), or a CPU backend beside it.
enum class Fallback { none, cpu };
// The cuda kernel family (cuda/kernel_choice.hpp): auto (the smallest that holds the model), one SM, one
// thread-block cluster, or blocks on most SMs.
enum class CudaKernel { automatic, cta, cluster, grid };
// The cta kernel's critical step: auto (regs where it is compiled for the model, else smem), W_ih
// fragments in shared memory (any model that fits), or all in registers (compiled for a few shapes).
// H200, lstm_s window fp16 (BENCHMARKS.md, run 10): regs 4.05 / 4.77 us p50 / p99, smem 5.58 / 6.77.
enum class CudaVariant { automatic, smem, regs };

constexpr auto name_table(Mode) {
  return util::make_names<Mode>("mode", {{Mode::window, "window"}, {Mode::streaming, "streaming"},
                                         {Mode::batch, "batch"}});
}
constexpr auto name_table(Precision) {
  return util::make_names<Precision>("precision", {{Precision::fp64, "fp64"}, {Precision::fp32, "fp32"},
                                                   {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"},
                                                   {Precision::int8, "int8"}});
}
constexpr auto name_table(BackendKind) {
  return util::make_names<BackendKind>("backend", {{BackendKind::automatic, "auto"}, {BackendKind::ref, "ref"},
                                                   {BackendKind::cpu, "cpu"}, {BackendKind::cuda, "cuda"},
                                                   {BackendKind::hybrid, "hybrid"}});
}
constexpr auto name_table(Fallback) {
  return util::make_names<Fallback>("fallback", {{Fallback::none, "none"}, {Fallback::cpu, "cpu"}});
}
constexpr auto name_table(CudaKernel) {
  return util::make_names<CudaKernel>("cuda kernel", {{CudaKernel::automatic, "auto"}, {CudaKernel::cta, "cta"},
                                                      {CudaKernel::cluster, "cluster"}, {CudaKernel::grid, "grid"}});
}
constexpr auto name_table(CudaVariant) {
  return util::make_names<CudaVariant>("cuda variant", {{CudaVariant::automatic, "auto"}, {CudaVariant::smem, "smem"},
                                                        {CudaVariant::regs, "regs"}});
}

inline const char* mode_name(Mode m) { return util::name_of(m); }
inline const char* precision_name(Precision p) { return util::name_of(p); }
inline Mode parse_mode(const std::string& s) { return util::parse_name<Mode>(s); }  // throws naming the value
inline Precision parse_precision(const std::string& s) { return util::parse_name<Precision>(s); }

// The most rows a batch run's chunk may take (the runner's working set: ~4 KiB a row for a 1024-unit
// layer, so a few hundred MB at this size).
inline constexpr long long kMaxBatchRows = 1 << 16;
inline constexpr int kMaxBatchCopyThreads = 64;  // GpuOptions::batch_copy_threads
// The longest a cuda backend waits for an output (an hour: past it a run is stuck, not slow).
inline constexpr double kMaxTimeoutUs = 3.6e9;

// What only the cuda backend reads (ref and cpu refuse a kernel, variant or batch rows asked of them,
// and ignore the device and the timeout).
struct GpuOptions {
  int device = 0;                          // CUDA device ordinal
  double timeout_us = 1'000'000;           // give up on an output after this long, (0, kMaxTimeoutUs]
  CudaKernel kernel = CudaKernel::automatic;
  CudaVariant variant = CudaVariant::automatic;
  // Rows of the chunks a batch run (backtest, fresh windows) computes at once, 1..kMaxBatchRows (rounded
  // up to the GEMM's row tile); 0: sized to the device's SMs (cuda/batch_runner.hpp).
  long long batch_rows = 0;
  // Host threads that copy a batch run's chunks into and out of pinned memory, 1..kMaxBatchCopyThreads;
  // 0: half the machine's cores, 1 to 8.
  int batch_copy_threads = 0;
  // The grid kernel's tick trace (docs/cuda.md, "Where the grid kernel's tail lies"): each tick's latency
  // split into the input side, the kernel's span and the output side (counters tick_trace_*). Costs two
  // clock reads a tick; the other kernel families refuse it.
  bool tick_trace = false;
};

struct BackendOptions {
  Mode mode = Mode::window;
  int window = 0;                        // W: required (>= 1) in window mode by a backend; an engine's 0
                                         // is the model's metadata window
  std::optional<Precision> precision;    // unset: the backend's default
  std::vector<int> cpuset;               // cores; the first runs the critical step, the rest precompute
  // Set by a live swap (engine/swap.hpp) for a backend made beside a serving one on the same cpuset: until
  // Backend::settle_threads(), its threads (the caller's critical step included) run on these cores
  // instead, so the serving backend keeps its cores to itself. Empty: on the cpuset from the start.
  std::vector<int> staging_cores;
  // Input scaling (scaling/input_scaler.hpp); unset: the model's scaler when it has one, else none.
  // Each backend scales with an InputScaler of its own, in step(), fused into its copy of x.
  std::optional<ScalerChoice> scaler;
  // The cpu backend's own options (backend/cpu_options.hpp; a cuda backend's CPU fallback reads them
  // too); unset: the environment's (cpu_options_from_env).
  std::optional<CpuOptions> cpu;
  GpuOptions gpu;
};

}  // namespace hotpath
