#include "cli/commands.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "bench/instances_bench.hpp"
#include "bench/latency_bench.hpp"
#include "bench/throughput_bench.hpp"
#include "cli/engine_flags.hpp"
#include "cli/run_io.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/loader.hpp"
#include "model/quantize.hpp"
#include "model/safetensors.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/atomic_file.hpp"
#include "util/cli_names.hpp"
#include "util/cli_number.hpp"
#include "util/error.hpp"
#include "util/output_paths.hpp"
#include "util/progress_bar.hpp"
#include "util/threads.hpp"

namespace hotpath::cli {

namespace {
std::string g_command_line;
}  // namespace
void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int k = 0; k < argc; ++k) g_command_line += (k ? " " : "") + std::string(k == 0 ? "hotpath" : argv[k]);
}
const std::string& command_line() { return g_command_line; }

void add_load_options(CLI::App* cmd, LoadOptions& load) {
  cmd->add_option("--lstm-prefix", load.lstm_prefix, "Key prefix of the nn.LSTM tensors (default: detected)");
  cmd->add_option("--head-prefix", load.head_prefix, "Key prefix of the nn.Linear head (default: detected)");
  cmd->add_option_function<std::string>(
      "--ignore-tensors", [&load](const std::string& v) { load.ignore = split_ignore_list(v, "--ignore-tensors"); },
      "Tensors of the model file that the module does not use, comma-separated (a name, or a prefix ending in "
      "'.'); any other tensor the model does not use is an error");
}

namespace {

namespace st = hotpath::safetensors;

// Flags shared by every subcommand that takes --model.
struct ModelFlags {
  std::string model;
  LoadOptions load;
  void add(CLI::App* cmd) {
    cmd->add_option("--model", model, "Model file (safetensors state_dict) or zoo name")->required();
    add_load_options(cmd, load);
  }
  Model resolve() const { return open_model(model, load); }
};

[[noreturn]] void exit_with(int code) { throw CLI::RuntimeError(code); }

// A float tensor [T, I] from a safetensors file, checked against the model.
std::vector<float> read_inputs(const st::File& file, const std::string& key, int input_size, size_t* ticks) {
  const st::TensorInfo* t = &float_tensor(file, key);
  if (t->shape.size() != 2 || t->shape[1] != input_size) {
    std::string shape;
    for (auto d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw Error(file.source() + ": tensor '" + key + "' has shape [" + shape + "], the model needs [T, " +
                std::to_string(input_size) + "]");
  }
  *ticks = size_t(t->shape[0]);
  return file.read_f32(*t);
}

// Runs an engine over a whole series from a fresh state (the window mode output at t uses the window
// ending at t, partial while t < W-1), in float64 (exact from the ref backend).
std::vector<double> run_series(Engine& e, std::span<const float> inputs, size_t ticks) {
  std::vector<double> out(ticks * size_t(e.output_size()));
  e.run(inputs, ticks, std::span<double>(out));
  return out;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the built-in model zoo");
  cmd->callback([] {
    std::cout << std::left << std::setw(14) << "name" << std::right << std::setw(6) << "I" << std::setw(6) << "H"
              << std::setw(4) << "L" << std::setw(5) << "O" << std::setw(5) << "W" << std::setw(13) << "parameters"
              << "\n";
    for (const auto& e : zoo()) {
      const auto& c = e.config;
      std::cout << std::left << std::setw(14) << e.name << std::right << std::setw(6) << c.input_size << std::setw(6)
                << c.hidden_size << std::setw(4) << c.num_layers << std::setw(5) << c.output_size << std::setw(5)
                << c.window.value_or(0) << std::setw(13) << c.parameter_count() << "\n";
    }
  });
}

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a model's detected shape, dtype, parameters and key prefixes; "
                                         "with --backend cuda, the kernel family that would serve it");
  struct Flags {
    ModelFlags model;
    std::optional<BackendKind> backend;
    std::optional<Precision> precision;
    CudaKernel kernel = CudaKernel::automatic;
    Mode mode = Mode::window;
    std::string cpuset;
    int window = 0;
  };
  auto f = std::make_shared<Flags>();
  f->model.add(cmd);
  util::add_name_option<BackendKind>(cmd, "--backend", f->backend,
                                     "cuda: also say which kernel family would serve the model, and why");
  cmd->add_option("--cpuset", f->cpuset,
                  "Cores for the cpu tick-rate estimate, as bench --cpuset (default: every core this process may use)");
  util::add_name_option<CudaKernel>(cmd, "--kernel", f->kernel,
                                    "With --backend cuda: the kernel family asked for (auto: the smallest that holds "
                                    "the model)");
  util::add_name_option<Precision>(cmd, "--precision", f->precision, "With --backend cuda: fp16 (default) or bf16");
  util::add_name_option<Mode>(cmd, "--mode", f->mode, "With --backend cuda: window or streaming")->default_str("window");
  util::add_int_option(cmd, "--window", f->window, "Window length for the tick-rate estimate and --backend cuda (default: the model's)", 1,
                       kMaxWindow);
  cmd->callback([f] {
    const bool cuda = f->backend == BackendKind::cuda;
    if (f->backend && !cuda)
      throw Error("info --backend takes cuda (the kernel family that would serve the model); ref and cpu have none");
    const Precision precision = f->precision.value_or(Precision::fp16);
    if (cuda && precision != Precision::fp16 && precision != Precision::bf16)
      throw Error(std::string("info --backend cuda takes --precision fp16 or bf16, not ") + precision_name(precision));
    const Mode mode = f->mode;
    if (mode == Mode::batch) throw Error("info --mode must be window or streaming");
    const std::vector<int> cores = f->cpuset.empty() ? util::allowed_cores() : parse_cpuset(f->cpuset);
    const Model m = f->model.resolve();
    int window = 1;
    if (cuda) {  // the engine's rule, checked before anything is printed
      EngineOptions eo;
      eo.mode = mode;
      eo.window = f->window;
      window = backend_options(m, eo).window;
    }
    const auto& c = m.config;
    std::cout << "model:        " << m.name << "\n"
              << "input_size:   " << c.input_size << "\n"
              << "hidden_size:  " << c.hidden_size << "\n"
              << "num_layers:   " << c.num_layers << "\n"
              << "output_size:  " << c.output_size << "\n"
              << "window:       " << (c.window ? std::to_string(*c.window) : std::string("unknown")) << "\n"
              << "lstm bias:    " << (c.lstm_bias ? "yes" : "no") << "\n"
              << "head bias:    " << (c.head_bias ? "yes" : "no") << "\n"
              << "dtype:        " << dtype_name(m.dtype) << "\n"
              << "parameters:   " << c.parameter_count() << "\n"
              << "lstm_prefix:  " << m.lstm_prefix << "\n"
              << "head_prefix:  " << m.head_prefix << "\n"
              << "input scaler: "
              << (!m.input_scaler ? std::string("none")
                                  : std::string("yes (input_scaler.mean, input_scaler.scale)") +
                                        (m.input_scaler->fitted_on.empty() ? "" : "; fitted on " + m.input_scaler->fitted_on))
              << "\n";
    // Window mode's tick rate is the precompute's, not the answer's: say what these cores would sustain.
    if (const int w = f->window > 0 ? f->window : m.config.window.value_or(0); w > 0) {
      const auto given = bench::estimate_tick_rate_for_cpuset(c, Mode::window, w, cores.size());
      const auto inline_pre = bench::estimate_tick_rate_for_cpuset(c, Mode::window, w, 1);
      std::string listed;
      for (int core : cores) listed += (listed.empty() ? "" : ",") + std::to_string(core);
      std::cout << "tick rate:    window W=" << w << " on cpu, estimated: ~" << util::si(given.hz) << " ticks/s with --cpuset "
                << listed << " (the precompute on " << given.precompute_cores
                << (given.precompute_cores == 1 ? " core" : " cores") << "), ~" << util::si(inline_pre.hz)
                << " ticks/s without one (inline); from " << util::si(given.precompute_flops)
                << " FLOP of precompute a tick (" << (w - 1) << " open windows) and " << util::si(given.answer_flops)
                << " in the answer, at " << given.gflops_per_core << " GFLOP/s a core (" << given.isa
                << " fp32, an assumption: bench measures it)\n";
    } else {
      std::cout << "tick rate:    window length unknown (give --window for an estimate)\n";
    }
    // Where int8 would be many times slower than fp32, say so before anyone benchmarks it.
    try {
      const std::string slow = cpu_int8_note();
      std::cout << "cpu int8:     " << (slow.empty() ? std::string("AVX512_VNNI kernels") : "slow here: " + slow) << "\n";
    } catch (const Error& e) {
      std::cout << "cpu int8:     none here: " << e.what() << "\n";
    }
    try {
      const bool amx = cpu_has_amx();
      std::cout << "cpu amx:      "
                << (amx ? "AMX-BF16 tiles for --precision bf16's products of several columns (window precompute, "
                          "backtests, batches)"
                        : "none here: bf16's products run on the vector kernels")
                << "\n";
    } catch (const Error& e) {
      std::cout << "cpu amx:      none here: " << e.what() << "\n";
    }
    if (!cuda) return;
    // Informational: no device, or a model no family can serve, is one line and exit 0.
    std::string why;
    if (!gpu::available(&why)) {
      std::cout << "cuda kernel:  none here: no usable CUDA device (" << why << ")\n";
      return;
    }
    try {
      const gpu::KernelReport k = gpu::kernel_for(m, precision, mode, window, f->kernel);
      std::cout << "cuda kernel:  " << k.family << " \u2014 " << k.why << "\n";
    } catch (const UnsupportedError& e) {
      std::cout << "cuda kernel:  none: " << e.what() << "\n";
    }
  });
}

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Backtest: a recorded series [T, I] -> every output [T, O], or S series [S, T, I] -> [S, T, O]");
  struct Flags {
    ModelFlags model;
    EngineOptions engine;
    std::string inputs, inputs_key = "inputs", mode = "window", out, out_dtype = "f64";
    int window = 0;
    bool progress = false, no_progress = false;
  };
  auto f = std::make_shared<Flags>();
  f->model.add(cmd);
  cmd->add_option("--inputs", f->inputs,
                  "Input series [T, I] or [S, T, I]: .npy (float32/float64, C order) or .safetensors (a float tensor)")
      ->required();
  cmd->add_option("--inputs-key", f->inputs_key, "Tensor name of the inputs in a .safetensors file")->capture_default_str();
  cmd->add_option("--mode", f->mode, "window or streaming")->capture_default_str();
  util::add_int_option(cmd, "--window", f->window,
                       "Window length (default: the model's metadata; at most the series length); ignored in streaming mode",
                       1, kMaxWindow);
  f->engine.backend = BackendKind::ref;
  add_engine_flags(cmd, f->engine);
  cmd->add_option("--out", f->out,
                  "Output file, .npy or .safetensors (tensor `outputs`): [T, O], or [S, T, O] for [S, T, I] inputs; "
                  "written whole or not at all")
      ->required();
  cmd->add_option("--out-dtype", f->out_dtype, "f32 or f64")->capture_default_str();
  cmd->add_flag("--progress", f->progress, "Progress bar on stderr from the start, even when not on a terminal")
      ->excludes(cmd->add_flag("--no-progress", f->no_progress, "No progress bar"));
  cmd->callback([f] {
    const Mode mode = parse_mode(f->mode);
    if (mode == Mode::batch) throw Error("hotpath run takes --mode window or streaming");
    if (f->out_dtype != "f32" && f->out_dtype != "f64") throw Error("--out-dtype must be f32 or f64");
    file_format(f->inputs, "--inputs");  // both extensions checked before any file is read
    const FileFormat out_format = file_format(f->out, "--out");
    const util::FileArg ins[] = {{"--inputs", f->inputs}, {"--model", f->model.model}}, outs[] = {{"--out", f->out}};
    util::check_output_files(ins, outs);
    const Model m = f->model.resolve();
    EngineOptions eo = f->engine;
    eo.mode = mode;
    eo.window = f->window;
    eo.window = backend_options(m, eo).window;  // the engine's rule
    const int window = eo.window;
    Series in = read_series(f->inputs, f->inputs_key, m.config.input_size);
    const size_t S = in.series, T = in.ticks, O = size_t(m.config.output_size);
    // A window longer than the series gives nothing but partial windows: refused before the backend
    // allocates the window state.
    if (mode == Mode::window && size_t(window) > T)
      throw Error((f->window > 0 ? "--window " : "the model's window ") + std::to_string(window) +
                  " is longer than the series (" + std::to_string(T) + " ticks in '" + f->inputs + "')");
    Engine engine(m, eo);
    if (!engine.choice_note().empty()) std::cerr << engine.choice_note() << "\n";
    // Made before the run, so that a folder that cannot take the file is named before the work; removed
    // if anything fails before commit().
    util::AtomicFile out(f->out);
    const bool f64 = f->out_dtype == "f64";
    std::vector<float> z32(f64 ? 0 : S * T * O);
    std::vector<double> z64(f64 ? S * T * O : 0);
    std::atomic<size_t> done{0};
    const auto t0 = std::chrono::steady_clock::now();
    {
      const auto mode_flag = f->progress      ? util::ProgressMode::on
                             : f->no_progress ? util::ProgressMode::off
                                              : util::ProgressMode::automatic;
      std::optional<util::ProgressBar> bar;
      // On a terminal only runs longer than a couple of seconds show it; --progress shows it from the start.
      if (util::progress_wanted(mode_flag))
        bar.emplace(done, S * T, stderr, util::ProgressBar::Options{f->progress ? 0.0 : 2.0, 0.25, "rows"});
      try {
        if (f64) engine.backtest(in.values, S, T, std::span<double>(z64), &done);
        else engine.backtest(in.values, S, T, std::span<float>(z32), &done);
      } catch (const TickError& e) {
        throw TickError(f->inputs + ": " + e.what());
      }
    }  // the bar's last state and its newline come before anything else is printed
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    in.values = {};  // the inputs are not needed to write the outputs
    const std::vector<int64_t> shape = in.batched ? std::vector<int64_t>{int64_t(S), int64_t(T), int64_t(O)}
                                                  : std::vector<int64_t>{int64_t(T), int64_t(O)};
    const std::map<std::string, std::string> meta = {
        {"mode", mode_name(mode)},          {"window", std::to_string(window)},
        {"backend", engine.backend_name()}, {"precision", precision_name(engine.precision())},
        {"model", m.name},                  {"scaler", scaler_name(engine.scaler())}};
    if (f64) write_outputs<double>(out, out_format, shape, z64, meta);
    else write_outputs<float>(out, out_format, shape, z32, meta);
    out.commit();
    char elapsed[32];
    std::snprintf(elapsed, sizeof elapsed, "%.3f s", seconds);
    std::cerr << "hotpath run: " << S << " series x " << T << " ticks, " << mode_name(mode) << " mode"
              << (mode == Mode::window ? " W=" + std::to_string(window) : std::string()) << ", backend "
              << engine.backend_name() << ": " << S * T << " rows in " << elapsed << " ("
              << util::si(seconds > 0 ? double(S * T) / seconds : 0.0) << " rows/s) -> " << f->out << "\n";
  });
}

void add_verify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "Compare a backend with PyTorch's golden outputs");
  struct Flags {
    ModelFlags model;
    EngineOptions engine;
    std::string golden, mode = "both";
  };
  auto f = std::make_shared<Flags>();
  f->model.add(cmd);
  cmd->add_option("--golden", f->golden, "Golden file: inputs, tacana_expected, streaming_expected")->required();
  f->engine.backend = BackendKind::ref;
  add_engine_flags(cmd, f->engine);
  cmd->add_option("--mode", f->mode, "window, streaming or both")->capture_default_str();
  cmd->callback([f] {
    if (f->mode != "window" && f->mode != "streaming" && f->mode != "both")
      throw Error("--mode must be window, streaming or both");
    const Model m = f->model.resolve();
    const st::File golden = st::File::open(f->golden);
    size_t ticks = 0;
    const auto inputs = read_inputs(golden, "inputs", m.config.input_size, &ticks);
    // A bad golden file is bad input: named, exit 2 (never a comparison that passes on nothing).
    require_finite(inputs, golden.source() + ": tensor 'inputs'");
    if (ticks == 0) throw Error(golden.source() + ": tensor 'inputs' holds 0 ticks: nothing to compare");
    bool all_pass = true;
    std::string failed;
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      if (f->mode != "both" && f->mode != mode_name(mode)) continue;
      int window = 1;
      const char* key = mode == Mode::window ? "tacana_expected" : "streaming_expected";
      if (mode == Mode::window) {
        // Parsed as the loader parses the model's window, and checked against the ticks before a
        // backend allocates anything for it.
        if (const auto w = metadata_int(golden, "window", 1, kMaxWindow)) window = *w;
        else if (m.config.window) window = *m.config.window;
        else throw Error(golden.source() + ": no window in the golden file's metadata nor the model's");
        if (size_t(window) > ticks)
          throw Error(golden.source() + ": window " + std::to_string(window) + " is longer than the " +
                      std::to_string(ticks) + " ticks of tensor 'inputs': nothing to compare");
      }
      const st::TensorInfo& exp_t = golden.at(key);
      const size_t first = mode == Mode::window ? size_t(window - 1) : 0;
      const size_t rows = ticks > first ? ticks - first : 0;
      if (exp_t.shape.size() != 2 || size_t(exp_t.shape[0]) != rows || exp_t.shape[1] != m.config.output_size)
        throw Error(golden.source() + ": tensor '" + key + "' should have shape [" + std::to_string(rows) + ", " +
                    std::to_string(m.config.output_size) + "]");
      const auto expected = golden.read_f64(exp_t);
      require_finite(expected, golden.source() + ": tensor '" + key + "'");
      EngineOptions eo = f->engine;
      eo.mode = mode;
      eo.window = window;
      Engine engine(m, eo);
      const auto out = run_series(engine, inputs, ticks);
      const size_t O = m.config.output_size;
      const std::span<const double> got(out.data() + first * O, rows * O);
      // PyTorch's golden outputs are for the raw inputs: with a scaler the truth is the float64 reference
      // fed the same scaled inputs (the same InputScaler, in float64).
      const ScalerChoice scaler = engine.scaler();
      auto reference_run = [&](const Model& model) {
        EngineOptions ro;
        ro.backend = BackendKind::ref;
        ro.mode = mode;
        ro.window = window;
        ro.scaler = scaler;
        Engine ref(model, ro);
        const auto r = run_series(ref, inputs, ticks);
        return std::vector<double>(r.begin() + std::ptrdiff_t(first * O), r.end());
      };
      std::vector<double> scaled_ref;
      if (scaler.kind != ScalerKind::none) scaled_ref = reference_run(m);
      const std::span<const double> truth = scaled_ref.empty() ? std::span<const double>(expected) : scaled_ref;
      const double err = reference::normalized_error(got, truth);
      double bound = error_bound(engine.precision());
      std::string why;
      if (bound_is_per_model(engine.precision())) {
        // int8: the bound follows from what the rounded weights alone do to these outputs, against the
        // float64 reference of the model itself (not the golden file: a wrong golden output would move
        // both errors and the bound with them).
        const std::vector<double> exact = scaled_ref.empty() ? reference_run(m) : scaled_ref;
        const double rounding = reference::normalized_error(reference_run(int8_rounded(m)), exact);
        bound = int8_error_bound(rounding);
        why = " (1.5 x int8 weight rounding alone " + sci(rounding) + ")";
      }
      const bool pass = err <= bound;
      all_pass = all_pass && pass;
      if (!pass) failed += (failed.empty() ? "" : ", ") + std::string(mode_name(mode));
      std::cout << std::left << std::setw(10) << mode_name(mode) << " backend " << engine.backend_name() << " ("
                << precision_name(engine.precision()) << "): error " << sci(err) << "  bound " << sci(bound) << why
                << "  " << (pass ? "PASS" : "FAIL")
                << (scaled_ref.empty() ? std::string()
                                       : "  (scaler " + scaler_name(scaler) + ": against the float64 reference)")
                << "\n";
    }
    if (!all_pass) {
      std::cerr << "hotpath verify: error against the golden outputs exceeds the bound (" << failed << " mode)"
                << (f->engine.precision == Precision::int8
                        ? "; int8 expects inputs scaled to about unit size (raw features of ~100 go over its "
                          "bound): give it --scaler rolling:N, or a model with a fitted scaler (hotpath scaler fit)"
                        : "")
                << "\n";
      exit_with(1);
    }
  });
}

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a zoo model as a PyTorch-style state_dict safetensors file");
  struct Flags {
    std::string model, out, dtype = "f32";
    uint64_t seed = 0;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--model", f->model, "Zoo name (hotpath models)")->required();
  cmd->add_option("--out", f->out, "Output file")->required();
  cmd->add_option("--dtype", f->dtype, "f32, f16, bf16 or f64")->capture_default_str();
  util::add_int_option(cmd, "--seed", f->seed, "Seed of the random weights", 0, UINT64_MAX)->capture_default_str();
  cmd->callback([f] {
    const auto m = zoo_model(f->model, f->seed);
    if (!m) throw Error("unknown zoo model '" + f->model + "' (hotpath models lists the zoo)");
    DType d;
    if (f->dtype == "f32") d = DType::F32;
    else if (f->dtype == "f16") d = DType::F16;
    else if (f->dtype == "bf16") d = DType::BF16;
    else if (f->dtype == "f64") d = DType::F64;
    else throw Error("--dtype must be f32, f16, bf16 or f64");
    const util::FileArg outs[] = {{"--out", f->out}};
    util::check_output_files({}, outs);
    save_model_file(*m, f->out, d);
    std::cerr << "hotpath export: " << f->model << " -> " << f->out << "\n";
  });
}

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Tick latency benchmark (docs/model.md, \"Latency\"), or --pingpong for the signalling floor");
  struct Flags {
    bench::BenchOptions o;
    std::string mode = "window";
    int floats = 0, check_threads = 0, instances = 0, metrics_port = 0;
    double rate = 0, seconds = 0, report_every = 0;
    int64_t seed = 1;
    bool progress = false, no_progress = false, device_arrays = false;
    long long batch = 0;
    int repeats = 3;
  };
  auto f = std::make_shared<Flags>();
  using util::add_float_option;
  using util::add_int_option;
  cmd->add_option("--model", f->o.model, "Model file or zoo name");
  add_load_options(cmd, f->o.load);
  f->o.engine.backend = BackendKind::automatic;
  add_engine_flags(cmd, f->o.engine, {.live = true});
  cmd->add_option("--mode", f->mode,
                  "window or streaming (tick latency); backtest, backtest-streaming or fresh (throughput: windows/s)")
      ->capture_default_str();
  add_int_option(cmd, "--window", f->o.engine.window, "Window length (default: the model's)", 1, kMaxWindow);
  auto* ticks = add_int_option(cmd, "--ticks", f->o.ticks,
                               "Measured ticks (each sample is kept: 16 bytes a tick); in the throughput modes, "
                               "windows (outputs) per run, default: sized to about --seconds (3) from a probe",
                               1, bench::kMaxTicks)
                    ->capture_default_str();
  add_int_option(cmd, "--batch", f->batch,
                 "Throughput modes: backtest series S (default 1), or fresh windows per call B (default 1024)", 1,
                 bench::kMaxBatch);
  add_int_option(cmd, "--repeat", f->repeats, "Backtest modes: measured runs (the rate is their median)", 1,
                 bench::kMaxRepeats)
      ->capture_default_str();
  add_float_option(cmd, "--seconds,--duration", f->seconds, "Measure for this long (seconds) instead of --ticks", 1e-6,
                   bench::kMaxSeconds)
      ->excludes(ticks);
  add_int_option(cmd, "--warmup", f->o.warmup, "Unmeasured ticks first", 0, bench::kMaxWarmup)->capture_default_str();
  auto* gap = add_float_option(cmd, "--gap-us", f->o.gap_us, "Pause after precompute before the next tick", 0,
                               bench::kMaxGapUs)
                  ->capture_default_str();
  add_float_option(cmd, "--rate", f->rate, "Fixed tick rate in Hz; latency counts from each tick's scheduled time", 1e-6,
                   bench::kMaxRateHz)
      ->excludes(gap);
  add_int_option(cmd, "--seed", f->seed, "Seed of the random inputs", 0, std::numeric_limits<int64_t>::max())
      ->capture_default_str();
  add_int_option(cmd, "--check-every", f->o.check_every, "Check every K-th tick against float64 (1: all)", 1,
                 std::numeric_limits<int>::max())
      ->capture_default_str();
  add_int_option(cmd, "--check-threads", f->check_threads,
                 "Float64 checker threads: window mode, they take turns over the checked windows; streaming, "
                 "each reference step is split over them (default: one per spare core)",
                 1, bench::kMaxCheckThreads);
  util::add_name_option<bench::CheckOn>(cmd, "--check-on", f->o.check_on,
                                        "Where the float64 check after the loop steps its states (streaming runs of 4,096 "
                                        "ticks or more, in chunks; window mode's checked windows without a rolling scaler): "
                                        "auto: the GPU after a cuda run, its engine closed first; else the host's cores")
      ->default_str("auto");
  cmd->add_flag("--check-during", f->o.check_during,
                "Run the float64 checker beside the timed loop (default: after it, when the run has a tick count, so "
                "that its threads stay out of the timings)");
  cmd->add_flag("--progress", f->progress,
                "The checker's progress on stderr once the timed loop ends, from the start, even when not on a terminal")
      ->excludes(cmd->add_flag("--no-progress", f->no_progress, "No progress bar for the checker"));
  add_float_option(cmd, "--report-every", f->report_every,
                   "Report every this many seconds (count, percentiles, errors, RSS; JSON `intervals`); "
                   "percentiles then come from histograms, so memory stays flat over long runs",
                   bench::kMinIntervalSeconds, bench::kMaxSeconds);
  auto* idle_every = add_float_option(cmd, "--idle-every-s", f->o.idle_every_s,
                                      "Every this many seconds of measuring, an idle gap", bench::kMinIntervalSeconds,
                                      bench::kMaxSeconds);
  auto* idle = add_float_option(cmd, "--idle-s", f->o.idle_s, "Length of each idle gap in seconds: no tick is sent", 1e-6,
                                bench::kMaxIdleSeconds);
  idle_every->needs(idle);
  idle->needs(idle_every);
  auto* swap_every = add_float_option(cmd, "--swap-every-s", f->o.swap_every_s,
                                      "Window mode: every this many seconds of measuring, swap --swap-model into the "
                                      "running engine (then --model back, ...); the report splits the ticks during "
                                      "swaps from the steady ones (docs/production.md)",
                                      bench::kMinIntervalSeconds, bench::kMaxSeconds);
  auto* swap_model = cmd->add_option("--swap-model", f->o.swap_model,
                                     "The model --swap-every-s swaps in: a file or a zoo name with --model's input "
                                     "and output sizes");
  swap_every->needs(swap_model);
  swap_model->needs(swap_every);
  add_int_option(cmd, "--metrics-port", f->metrics_port,
                 "Serve tick telemetry to Prometheus (GET /metrics) on 127.0.0.1:PORT during the run (0: a free port, "
                 "printed); docs/production.md, \"Telemetry\"",
                 0, 65535);
  add_float_option(cmd, "--metrics-hold-s", f->o.metrics_hold_s,
                   "Keep serving --metrics-port this many seconds after the run (a scraper's look at the final counts)",
                   0, bench::kMaxIdleSeconds);
  cmd->add_option("--json", f->o.json_path, "Write the report as JSON (schema: bench/SCHEMA.md)");
  cmd->add_option("--samples", f->o.samples_path, "Write every raw latency sample (CSV)");
  cmd->add_flag("--pingpong", f->o.pingpong, "Measure only the host->GPU->host floor over the mailbox, no model");
  add_int_option(cmd, "--floats", f->floats, "Ping-pong payload in floats (default: the model's I, else 32)", 1,
                 bench::kMaxFloats);
  cmd->add_flag("--no-pingpong", f->o.skip_pingpong, "cuda: skip the same-process ping-pong");
  add_int_option(cmd, "--instances", f->instances,
                 "cuda: N independent instances on one GPU, each on SMs of its own; latency per instance and "
                 "over all (docs/cuda.md, \"Many instances\")",
                 1, bench::kMaxInstances);
  cmd->add_flag("--lockstep", f->o.lockstep, "--instances: every instance's tick r is sent together");
  util::add_name_option<engine::Isolation>(cmd, "--isolation", f->o.isolation,
                                           "--instances: how instances share the GPU (green: an SM partition and a "
                                           "kernel each; shared: one persistent launch serving all, a critical and "
                                           "precompute blocks each)")
      ->default_str("green");
  add_int_option(cmd, "--sms-per-instance", f->o.sms_per_instance,
                 "--instances: SMs in each instance's partition (default: the largest equal share)", 1, 1 << 16);
  util::add_name_option<engine::Placement>(cmd, "--placement", f->o.placement,
                                           "--isolation shared: where an instance's blocks go (sm: neighbouring SMs, "
                                           "as a partition; block: by block index, spread over the GPU)")
      ->default_str("sm");
  cmd->add_flag("--beside-backtest", f->o.beside_backtest,
                "--instances: measure again while a backtest runs on the SMs the instances leave, at low priority");
  cmd->add_flag("--device-arrays", f->device_arrays,
                "Throughput modes, cuda: inputs and outputs in GPU memory (uploaded before the clock): the rate "
                "without the host link");
  cmd->callback([f, cmd] {
    auto& o = f->o;
    {
      const util::FileArg ins[] = {{"--model", o.model}, {"--swap-model", o.swap_model}},
                          outs[] = {{"--json", o.json_path}};
      util::check_output_files(ins, outs);  // before the run, not after it
    }
    if (const auto workload = bench::parse_workload(f->mode)) {
      // The throughput modes share the model, engine and input flags; the latency-only ones are refused.
      std::vector<const char*> latency_only = {"--warmup", "--gap-us", "--rate", "--check-every", "--check-threads",
                                               "--check-during", "--check-on", "--progress", "--no-progress", "--report-every",
                                               "--idle-every-s", "--idle-s", "--samples", "--pingpong", "--floats",
                                               "--no-pingpong", "--instances", "--lockstep", "--isolation",
                                               "--sms-per-instance", "--placement", "--beside-backtest",
                                               "--swap-every-s", "--swap-model", "--metrics-port",
                                               "--metrics-hold-s"};
      latency_only.insert(latency_only.end(), std::begin(kLiveEngineFlags), std::end(kLiveEngineFlags));
      for (const char* flag : latency_only)
        if (cmd->count(flag))
          throw Error(std::string(flag) + " is for the latency modes (window, streaming), not --mode " + f->mode);
      bench::ThroughputOptions t;
      t.model = o.model;
      t.load = o.load;
      t.engine = o.engine;
      t.workload = *workload;
      if (cmd->count("--ticks")) t.windows = o.ticks;
      if (cmd->count("--seconds")) t.target_seconds = f->seconds;
      t.batch = f->batch;
      if (cmd->count("--repeat") && *workload == bench::Workload::fresh)
        throw Error("--repeat is for the backtest modes (fresh times every call)");
      t.repeats = f->repeats;
      t.device_arrays = f->device_arrays;
      t.seed = uint64_t(f->seed);
      t.json_path = o.json_path;
      t.command_line = command_line();
      const auto report = bench::run_throughput(t, std::cout);
      if (!report["pass"].get<bool>()) {
        std::cerr << "hotpath bench: FAIL: " << report["failure"].get<std::string>() << "\n";
        exit_with(1);
      }
      return;
    }
    if (cmd->count("--batch") || cmd->count("--repeat") || cmd->count("--batch-rows") || cmd->count("--batch-copy-threads") ||
        cmd->count("--device-arrays"))
      throw Error("--batch, --batch-rows, --batch-copy-threads, --device-arrays and --repeat are for the throughput modes "
                  "(backtest, backtest-streaming, fresh)");
    o.engine.mode = parse_mode(f->mode);
    // Flags given are range-checked by their validators; unset ones keep the library's defaults.
    if (cmd->count("--floats")) o.floats = f->floats;
    if (cmd->count("--check-threads")) o.check_threads = f->check_threads;
    if (cmd->count("--rate")) o.rate_hz = f->rate;
    if (cmd->count("--seconds")) o.seconds = f->seconds;
    if (cmd->count("--report-every")) o.report_every_s = f->report_every;
    if (cmd->count("--instances")) o.instances = f->instances;
    if (cmd->count("--metrics-port")) o.metrics_port = f->metrics_port;
    o.seed = uint64_t(f->seed);
    o.progress = f->progress ? util::ProgressMode::on : f->no_progress ? util::ProgressMode::off : util::ProgressMode::automatic;
    if (o.pingpong && !o.model.empty()) throw Error("--pingpong measures the floor without a model: drop --model");
    o.command_line = command_line();
    const auto report = o.instances ? bench::run_instances_bench(o, std::cout) : bench::run_bench(o, std::cout);
    if (!report["pass"].get<bool>()) {
      std::cerr << "hotpath bench: FAIL: " << report["failure"].get<std::string>() << "\n";
      exit_with(1);
    }
  });
}

}  // namespace hotpath::cli
