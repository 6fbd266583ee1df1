#include "cli/engine_flags.hpp"

#include <string>

#include "scaling/input_scaler.hpp"
#include "util/cli_names.hpp"
#include "util/cli_number.hpp"

namespace hotpath::cli {

void add_engine_flags(CLI::App* cmd, EngineOptions& o, EngineFlagSet set) {
  using util::add_name_option;
  add_name_option<BackendKind>(cmd, "--backend", o.backend,
                               "Backend: auto (cuda if usable, else cpu); built here: " + built_backend_names())
      ->default_str(util::name_of(o.backend));
  add_name_option<Precision>(cmd, "--precision", o.precision,
                             "Weight precision: fp32|bf16|int8 (cpu), fp16|bf16 (cuda), fp64 (ref); default per backend");
  // Given (even empty) or not: "--cpuset ''" is an error, not absent.
  cmd->add_option_function<std::string>(
      "--cpuset", [&o](const std::string& v) { o.cpuset = parse_cpuset(v); },
      "Cores, e.g. 2-5: the first runs the critical step, the rest precompute");
  util::add_int_option(cmd, "--device", o.gpu.device, "cuda: the device's ordinal", 0, 1 << 16)->capture_default_str();
  add_name_option<CudaVariant>(cmd, "--variant", o.gpu.variant,
                               "cuda: the one-SM kernel's critical step (auto: regs where compiled for the model, "
                               "else smem)")
      ->default_str(util::name_of(o.gpu.variant));
  add_name_option<CudaKernel>(cmd, "--kernel", o.gpu.kernel,
                              "cuda kernel family (auto: the smallest that holds the model: one SM, one cluster, "
                              "then the grid)")
      ->default_str(util::name_of(o.gpu.kernel));
  util::add_int_option(cmd, "--batch-rows", o.gpu.batch_rows,
                       "cuda: rows of the chunks a backtest or a batch of fresh windows computes at once (rounded up "
                       "to 128; default: sized to the device's SMs)",
                       1, kMaxBatchRows);
  util::add_int_option(cmd, "--batch-copy-threads", o.gpu.batch_copy_threads,
                       "cuda: host threads that copy a backtest's or a batch's chunks into and out of pinned memory "
                       "(default: half the cores, up to 8)",
                       1, kMaxBatchCopyThreads);
  cmd->add_option_function<std::string>(
      "--scaler", [&o](const std::string& v) { o.scaler = parse_scaler(v); },
      "Input scaling: none, model (the file's input_scaler tensors; the default when it has them) or rolling:N "
      "(mean and std of the past N ticks only)");
  // Both write CpuOptions: the keys --cpu-options names over what --crit-cores set, and the other way round.
  cmd->add_option_function<std::string>(
      "--cpu-options", [&o](const std::string& v) { o.cpu = parse_cpu_options(v, cpu_options_or_env(o.cpu)); },
      "The cpu backend's knobs (and cuda's --fallback cpu's), comma-separated key=value over the environment's:\n" +
          cpu_options_help());
  util::add_int_option_function<int>(
      cmd, "--crit-cores",
      [&o](int n) {
        CpuOptions c = cpu_options_or_env(o.cpu);
        c.crit_cores = n;
        o.cpu = c;
      },
      "cpu: the cores the critical step is split over, the cpuset's first (--cpu-options crit_cores=N; default: "
      "from the model's size)",
      1, kMaxCriticalCores);
  if (!set.live) return;
  util::add_float_option(cmd, "--timeout-us", o.gpu.timeout_us, "cuda: give up on an output after this long", 1,
                         kMaxTimeoutUs)
      ->capture_default_str();
  add_name_option<Fallback>(cmd, "--fallback", o.fallback,
                            "cuda: cpu answers from the CPU backend when the GPU is late")
      ->default_str(util::name_of(o.fallback));
  cmd->add_flag_callback("--no-warm", [&o] { o.warm = false; },
                         "Do not warm the engine on creation (its first 10 ticks, reported apart, then meet it cold)");
  cmd->add_flag_callback("--tick-trace", [&o] { o.gpu.tick_trace = true; },
                         "cuda, grid kernel: split each tick's latency into the input side, the kernel's span and the "
                         "output side (counters tick_trace_*; two clock reads a tick)");
}

}  // namespace hotpath::cli
