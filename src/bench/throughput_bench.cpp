#include "bench/throughput_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>

#include "bench/checker.hpp"  // tick_input: the inputs every benchmark sends
#include "bench/report.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
#include "scaling/input_scaler.hpp"
#include "util/error.hpp"

namespace hotpath::bench {

const char* workload_name(Workload w) {
  switch (w) {
    case Workload::backtest: return "backtest";
    case Workload::backtest_streaming: return "backtest-streaming";
    case Workload::fresh: return "fresh";
  }
  return "?";
}

std::optional<Workload> parse_workload(const std::string& mode) {
  for (Workload w : {Workload::backtest, Workload::backtest_streaming, Workload::fresh})
    if (mode == workload_name(w)) return w;
  return std::nullopt;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Multiply-adds x 2 of one step through every layer (the gate products; the cell's elementwise work is
// not counted), and of the head.
double layer_step_flops(const ModelConfig& c) {
  double f = 0;
  for (int l = 0; l < c.num_layers; ++l) f += 2.0 * 4 * c.hidden_size * ((l == 0 ? c.input_size : c.hidden_size) + c.hidden_size);
  return f;
}
double head_flops(const ModelConfig& c) { return 2.0 * c.output_size * c.hidden_size; }

// Series s's tick t: the latency benchmark's inputs under a per-series seed.
uint64_t series_seed(uint64_t seed, size_t s) { return seed * 0x9E3779B97F4A7C15ull + s + 1; }

std::string with_commas(double v) {
  std::string s = std::to_string(static_cast<long long>(std::llround(v)));
  for (int i = int(s.size()) - 3; i > (s[0] == '-' ? 1 : 0); i -= 3) s.insert(size_t(i), ",");
  return s;
}

std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void validate(const ThroughputOptions& o) {
  if (o.model.empty()) throw Error("--model is required (a file or a zoo name)");
  if (o.windows && (*o.windows < 1 || *o.windows > kMaxThroughputWindows))
    throw Error("--ticks (windows) must be in 1.." + std::to_string(kMaxThroughputWindows));
  if (o.batch < 0 || o.batch > kMaxBatch) throw Error("--batch must be in 1.." + std::to_string(kMaxBatch));
  if (o.repeats < 1 || o.repeats > kMaxRepeats) throw Error("--repeat must be in 1.." + std::to_string(kMaxRepeats));
  if (!(o.target_seconds > 0 && o.target_seconds <= 3600)) throw Error("the target run time must be in (0, 3600] s");
}

}  // namespace

nlohmann::json run_throughput(const ThroughputOptions& o, std::ostream& out) {
  validate(o);
  const Model model = open_model(o.model, o.load);
  const ModelConfig& cfg = model.config;
  const bool fresh = o.workload == Workload::fresh;
  const bool streaming = o.workload == Workload::backtest_streaming;
  EngineOptions eo;
  eo.backend = o.backend;
  eo.mode = fresh ? Mode::batch : streaming ? Mode::streaming : Mode::window;
  eo.window = o.window.value_or(0);
  eo.precision = o.precision;
  eo.cpuset = o.cpuset;
  eo.variant = o.variant;
  eo.kernel = o.kernel;
  eo.batch_rows = o.batch_rows;
  eo.scaler = o.scaler;
  eo.cpu = o.cpu;
  eo.warm = false;  // throughput: the unmeasured first run warms it
  if (fresh) {
    // The batch backends take W per call; the engine's window rule (metadata, range) still applies.
    EngineOptions wo = eo;
    wo.mode = Mode::window;
    eo.window = backend_options(model, wo).window;
  }
  Engine engine = o.make_backend ? Engine(model, o.make_backend(model, backend_options(model, eo))) : Engine(model, eo);
  const std::string note = engine.choice_note();
  const size_t I = size_t(cfg.input_size), O = size_t(cfg.output_size);
  const size_t W = streaming ? 1 : size_t(fresh ? eo.window : engine.window());
  const double flops_per_output = streaming ? layer_step_flops(cfg) + head_flops(cfg)
                                            : double(W) * layer_step_flops(cfg) + head_flops(cfg);
  const size_t S = fresh ? 1 : size_t(o.batch > 0 ? o.batch : 1);
  const size_t B = fresh ? size_t(o.batch > 0 ? o.batch : 1024) : 0;

  nlohmann::json report = report_header(o.command_line, o.cpuset);
  report["kind"] = "throughput";
  if (engine.backend_name() == "cuda")
    for (auto& [k, v] : gpu::facts(eo.device)) report["machine"]["gpu"][k] = v;

  // The float64 reference backend's backtest outputs are kept in float64 (its bound is below float's
  // rounding); run_batch answers in float32 only.
  const bool f64_out = !fresh && engine.precision() == Precision::fp64;

  // Inputs for `windows` outputs: backtest S series of T ticks; fresh, distinct batches of B windows
  // cycled over the calls (at most 16, within the input memory limit). A backtest's inputs and outputs
  // are checked against the limit together, before either is allocated.
  auto series_inputs = [&](size_t T) {
    const double bytes = double(S) * double(T) * (double(I) * 4 + double(O) * (f64_out ? 8 : 4));
    if (bytes > kMaxThroughputInputBytes)
      throw Error(with_commas(double(S) * double(T)) + " ticks of " + std::to_string(I) + " inputs need " +
                  sci(bytes / 1e9) + " GB of inputs and outputs, over the benchmark's " +
                  sci(kMaxThroughputInputBytes / 1e9) + " GB: ask for fewer --ticks");
    std::vector<float> x(S * T * I);
    for (size_t s = 0; s < S; ++s)
      for (size_t t = 0; t < T; ++t) tick_input(series_seed(o.seed, s), (long long)t, std::span<float>(x).subspan((s * T + t) * I, I));
    return x;
  };
  auto fresh_inputs = [&](size_t calls) {
    const double batch_bytes = double(B) * double(W) * double(I) * 4;
    if (batch_bytes > kMaxThroughputInputBytes)
      throw Error("--batch " + std::to_string(B) + " windows of " + std::to_string(W) + " x " + std::to_string(I) +
                  " inputs need " + sci(batch_bytes / 1e9) + " GB, over the benchmark's " +
                  sci(kMaxThroughputInputBytes / 1e9) + " GB");
    const size_t k = std::max<size_t>(1, std::min({calls, size_t(16), size_t(kMaxThroughputInputBytes / batch_bytes)}));
    std::vector<std::vector<float>> batches(k, std::vector<float>(B * W * I));
    for (size_t b = 0; b < k; ++b)
      for (size_t w = 0; w < B; ++w)
        for (size_t t = 0; t < W; ++t)
          tick_input(series_seed(o.seed, b * B + w), (long long)t,
                     std::span<float>(batches[b]).subspan((w * W + t) * I, I));
    return batches;
  };

  // Sizing: a probe run (unmeasured; it also warms the backend) gives the rate, and the measured run is
  // sized to about target_seconds, unless --ticks fixed it.
  // The outputs of the last run: z (float32; fresh: the last call's) or z64 (the ref backend's backtest).
  std::vector<float> z(fresh ? B * O : 0);
  std::vector<double> z64;
  auto run_backtest = [&](const std::vector<float>& x, size_t T) {
    const size_t n = S * T * O;
    f64_out ? z64.resize(n) : z.resize(n);  // sized once for the run, before the clock starts
    const auto t0 = Clock::now();
    if (f64_out) engine.backtest(x, S, T, std::span<double>(z64));
    else engine.backtest(x, S, T, std::span<float>(z));
    return seconds_since(t0);
  };
  auto run_fresh_calls = [&](const std::vector<std::vector<float>>& batches, size_t calls,
                             std::vector<double>* lat_us) {
    const auto t0 = Clock::now();
    for (size_t c = 0; c < calls; ++c) {
      const auto c0 = Clock::now();
      engine.run_batch(batches[c % batches.size()], B, W, std::span<float>(z));
      if (lat_us) lat_us->push_back(std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
    }
    return seconds_since(t0);
  };
  const size_t per_unit = fresh ? B : S;  // outputs per call / per tick across the series
  size_t units = 0;                       // ticks per series, or calls
  double probe_rate = 0;
  {
    // The probe: at least one window's worth of ticks per series, and a few calls.
    // A probe much shorter than the target is repeated 8x larger (within the memory limit): a small
    // run on a GPU measures its fixed costs, not its rate, and would size the measured runs far too short.
    size_t probe_units = fresh ? 2 : std::max<size_t>(W + 7, std::min<size_t>(4096, (2048 + S - 1) / S));
    const double unit_bytes = fresh ? double(B) * double(W) * double(I) * 4
                                    : double(S) * (double(I) * 4 + double(O) * (f64_out ? 8 : 4));
    const size_t max_probe = size_t(std::max(1.0, std::min(kMaxThroughputInputBytes / 4 / unit_bytes,
                                                           double(kMaxThroughputWindows) / 10 / double(fresh ? B : S))));
    double secs;
    for (;;) {
      if (fresh) {
        const auto b = fresh_inputs(probe_units);
        secs = run_fresh_calls(b, probe_units, nullptr);
      } else {
        secs = run_backtest(series_inputs(probe_units), probe_units);
      }
      if (o.windows || secs >= 0.1 * o.target_seconds || probe_units * 8 > max_probe) break;
      probe_units *= 8;
    }
    probe_rate = double(probe_units * per_unit) / std::max(secs, 1e-9);
    const double want = o.windows ? double(*o.windows) : probe_rate * o.target_seconds;
    units = size_t(std::max(1.0, std::ceil(std::min(want, double(kMaxThroughputWindows)) / double(per_unit))));
  }

  const size_t outputs = units * per_unit;
  std::vector<double> run_seconds, lat_us;
  std::vector<float> x;
  std::vector<std::vector<float>> batches;
  if (fresh) {
    batches = fresh_inputs(units);
    lat_us.reserve(units);
    run_seconds.push_back(run_fresh_calls(batches, units, &lat_us));
  } else {
    x = series_inputs(units);
    for (int r = 0; r < o.repeats; ++r) run_seconds.push_back(run_backtest(x, units));
  }

  // The check, off the timed path. Backtest: the first rows of the first and last series (the partial
  // windows and the head tiles), then random later rows from their own window alone (fixed scalers
  // only: a rolling one needs the history). Fresh: random windows of the last call's batch.
  const Precision prec = engine.precision();
  const bool int8 = bound_is_per_model(prec);
  const ScalerChoice scaler = engine.scaler();
  std::vector<double> got, exact, rounded;
  auto output = [&](size_t k) { return f64_out ? z64[k] : double(z[k]); };  // value k of the last run
  const Model rounded_model = int8 ? int8_rounded(model) : Model();
  std::mt19937_64 rng(o.seed ^ 0xC0FFEEull);
  const size_t want_rows = size_t(std::max(1, o.check_rows));
  // Float64 work budget: about 1e9 flops per model checked.
  const size_t budget_rows = std::max<size_t>(1, size_t(1e9 / std::max(1.0, flops_per_output)));
  const size_t prefix = std::min<size_t>(units, budget_rows);
  // The float64 truth: `exact`, and for int8's own bound `rounded` (the int8-rounded weights).
  // The first n ticks of one series, from a ref engine with the same mode, window and scaler.
  auto check_prefix = [&](std::span<const float> xs, size_t n) {
    EngineOptions r;
    r.backend = "ref";
    r.mode = streaming ? Mode::streaming : Mode::window;
    r.window = int(W);
    r.scaler = scaler;
    r.warm = false;
    std::vector<double> zr(n * O);
    Engine(model, r).backtest(xs, 1, n, std::span<double>(zr));
    exact.insert(exact.end(), zr.begin(), zr.end());
    if (int8) {
      Engine(rounded_model, r).backtest(xs, 1, n, std::span<double>(zr));
      rounded.insert(rounded.end(), zr.begin(), zr.end());
    }
  };
  // Whole windows on their own (W steps from zero state), scaled in float64 as the backends scale them.
  auto check_windows = [&](const std::vector<float>& windows, size_t n) {
    std::vector<double> xd(windows.size());
    InputScaler(model, scaler).scale_batch(windows, xd.data());
    const auto zr = reference::batch(model, xd, n, W);
    exact.insert(exact.end(), zr.begin(), zr.end());
    if (int8) {
      const auto zq = reference::batch(rounded_model, xd, n, W);
      rounded.insert(rounded.end(), zq.begin(), zq.end());
    }
  };
  if (!fresh) {
    const size_t T = units;
    for (const size_t s : S > 1 ? std::vector<size_t>{0, S - 1} : std::vector<size_t>{0}) {
      const size_t n = std::min(prefix, std::max<size_t>(1, want_rows / 2));
      check_prefix(std::span<const float>(x.data() + s * T * I, n * I), n);
      for (size_t k = 0; k < n * O; ++k) got.push_back(output(s * T * O + k));
    }
    if (!streaming && scaler.kind != ScalerKind::rolling && T > W) {
      std::uniform_int_distribution<size_t> pick_s(0, S - 1), pick_t(W - 1, T - 1);
      std::vector<float> windows;
      const size_t n = std::min(want_rows / 2, budget_rows);
      for (size_t k = 0; k < n; ++k) {
        const size_t s = pick_s(rng), t = pick_t(rng);
        windows.insert(windows.end(), x.begin() + long((s * T + t + 1 - W) * I), x.begin() + long((s * T + t + 1) * I));
        for (size_t j = 0; j < O; ++j) got.push_back(output((s * T + t) * O + j));
      }
      check_windows(windows, n);
    }
  } else {
    const auto& last = batches[(units - 1) % batches.size()];
    std::uniform_int_distribution<size_t> pick(0, B - 1);
    const size_t n = std::min({want_rows, B, budget_rows});
    std::vector<float> windows;
    for (size_t k = 0; k < n; ++k) {
      const size_t w = n == B ? k : pick(rng);
      windows.insert(windows.end(), last.begin() + long(w * W * I), last.begin() + long((w + 1) * W * I));
      for (size_t j = 0; j < O; ++j) got.push_back(output(w * O + j));
    }
    check_windows(windows, n);
  }
  const double error = reference::normalized_error(got, exact);
  // run_batch answers in float32: fresh outputs carry float's own rounding (2^-24 relative, so below
  // 1.2e-7 on the normalized scale) whatever the backend computes in.
  const double bound = std::max(int8 ? int8_error_bound(reference::normalized_error(rounded, exact)) : error_bound(prec),
                                fresh ? 1.2e-7 : 0.0);
  const bool pass = std::isfinite(error) && error <= bound;

  const double med_s = median(run_seconds), best_s = *std::min_element(run_seconds.begin(), run_seconds.end());
  const double rate = double(outputs) / med_s, best_rate = double(outputs) / best_s;
  const double in_bytes = fresh ? double(units) * double(B) * double(W) * double(I) * 4 : double(outputs) * double(I) * 4;
  const double out_bytes = double(outputs) * double(O) * 4;

  report["workload"] = workload_name(o.workload);
  report["model"] = {{"name", model.name}, {"input_size", cfg.input_size}, {"hidden_size", cfg.hidden_size},
                     {"num_layers", cfg.num_layers}, {"output_size", cfg.output_size}};
  report["backend"] = {{"name", engine.backend_name()}, {"variant", engine.variant()}, {"precision", precision_name(prec)},
                       {"choice_note", note}, {"facts", engine.facts()}};
  report["window"] = streaming ? nlohmann::json(nullptr) : nlohmann::json(W);
  report["scaler"] = scaler_name(scaler);
  if (fresh) {
    report["batch"] = B;
    report["calls"] = units;
    report["distinct_batches"] = batches.size();
    report["latency_per_call_us"] = to_json(summarize(lat_us));
  } else {
    report["series"] = S;
    report["ticks_per_series"] = units;
    report["repeats"] = o.repeats;
  }
  report["outputs_per_run"] = outputs;
  report["run_seconds"] = run_seconds;
  report["windows_per_s"] = rate;
  report["windows_per_s_best"] = best_rate;
  report["probe_windows_per_s"] = probe_rate;
  report["flops_per_window"] = flops_per_output;
  report["flops_counted_as"] = streaming ? "one step through every layer and the head per output"
                                         : "W steps through every layer and the head once, per window";
  report["tflops"] = rate * flops_per_output / 1e12;
  // The GPU's dense fp16 peak (device facts) and the share of it achieved, where known.
  double peak_tflops = 0;
  if (report["machine"].contains("gpu") && report["machine"]["gpu"].contains("dense_fp16_peak_tflops"))
    peak_tflops = std::atof(report["machine"]["gpu"]["dense_fp16_peak_tflops"].get<std::string>().c_str());
  report["dense_fp16_peak_tflops"] = peak_tflops > 0 ? nlohmann::json(peak_tflops) : nlohmann::json(nullptr);
  report["peak_fraction"] = peak_tflops > 0 ? nlohmann::json(rate * flops_per_output / 1e12 / peak_tflops) : nlohmann::json(nullptr);
  report["backend"]["counters"] = engine.counters();
  report["bytes_in_per_run"] = in_bytes;
  report["bytes_out_per_run"] = out_bytes;
  report["error"] = {{"max_normalized", error}, {"bound", bound}, {"values_checked", got.size()}};
  report["pass"] = pass;
  report["failure"] = pass ? nlohmann::json(nullptr)
                           : nlohmann::json("error " + sci(error) + " over " + std::to_string(got.size()) +
                                            " checked output values exceeds the bound " + sci(bound));

  out << "hotpath bench: " << workload_name(o.workload) << (streaming ? "" : " W=" + std::to_string(W)) << ", "
      << model.name << ", " << engine.backend_name() << " " << engine.variant() << " " << precision_name(prec) << ", ";
  if (fresh) out << "calls of " << B << " windows x " << units << "\n";
  else out << S << " series x " << with_commas(double(units)) << " ticks\n";
  if (!note.empty()) out << "  (" << note << ")\n";
  out << "  rate      " << with_commas(rate) << " windows/s";
  if (!fresh) out << " (median of " << run_seconds.size() << " runs; best " << with_commas(best_rate) << ")";
  out << "\n";
  if (fresh) {
    const Summary l = summarize(lat_us);
    out << "  per call  p50 " << sci(l.p50) << " us, p99 " << sci(l.p99) << " us, max " << sci(l.max) << " us over "
        << l.count << " calls\n";
  }
  out << "  compute   " << sci(rate * flops_per_output / 1e12) << " TFLOP/s (" << sci(flops_per_output / 1e6)
      << " MFLOP per window: " << report["flops_counted_as"].get<std::string>() << ")\n";
  if (peak_tflops > 0)
    out << "  peak      " << sci(100.0 * rate * flops_per_output / 1e12 / peak_tflops) << " % of the GPU's dense fp16 peak ("
        << sci(peak_tflops) << " TFLOP/s at the max SM clock)\n";
  {
    const auto c = engine.counters();
    if (c.count("batch_copy_overlap"))
      out << "  copies    " << sci(c.at("batch_copy_bytes") / 1e6) << " MB over " << c.at("batch_chunks")
          << " chunks in the last run; " << sci(100.0 * c.at("batch_copy_overlap"))
          << " % of copy time hidden under compute (h2d " << sci(c.at("batch_h2d_s") * 1e3) << " ms, d2h "
          << sci(c.at("batch_d2h_s") * 1e3) << " ms, compute " << sci(c.at("batch_compute_s") * 1e3) << " ms, wall "
          << sci(c.at("batch_wall_s") * 1e3) << " ms)\n";
  }
  out << "  data      in " << sci(in_bytes / 1e6) << " MB, out " << sci(out_bytes / 1e6) << " MB per run ("
      << sci((in_bytes + out_bytes) / med_s / 1e9) << " GB/s)\n";
 out << "  error     " << sci(error) << " over " << got.size() << " checked output values (bound " << sci(bound) << "): "
      << (pass ? "PASS" : "FAIL") << "\n";

  if (!o.json_path.empty()) write_text(o.json_path, report.dump(2) + "\n");
  return report;
}

}  // namespace hotpath::bench
