#include "bench/throughput_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
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

// One throughput run, phase by phase, in the order run() calls them: set up (the engine and the sizes),
// the probe that sizes the measured run (unmeasured; it also warms the backend), the measured runs, the
// check against float64 (off the timed path), the report (JSON) and the summary (text). The state a
// phase hands to the next is the class's; each phase's code is what run_throughput ran inline before.
class ThroughputRun {
 public:
  ThroughputRun(const ThroughputOptions& o, std::ostream& out)
      : o_(o), out_(out), model_(open_model(o.model, o.load)), cfg_(model_.config),
        fresh_(o.workload == Workload::fresh), streaming_(o.workload == Workload::backtest_streaming) {}

  nlohmann::json run() {
    set_up();
    size_the_run();
    measure();
    check();
    report_and_print();
    if (!o_.json_path.empty()) write_text(o_.json_path, report_.dump(2) + "\n");
    return report_;
  }

 private:
  void set_up() {
    eo_ = o_.engine;
    eo_.mode = fresh_ ? Mode::batch : streaming_ ? Mode::streaming : Mode::window;
    eo_.warm = false;  // throughput: the unmeasured first run warms it
    if (fresh_) {
      // The batch backends take W per call; the engine's window rule (metadata, range) still applies.
      EngineOptions wo = eo_;
      wo.mode = Mode::window;
      eo_.window = backend_options(model_, wo).window;
    }
    if (o_.make_backend)
      engine_.emplace(model_, o_.make_backend(model_, backend_options(model_, eo_)));
    else
      engine_.emplace(model_, eo_);
    note_ = engine_->choice_note();
    I_ = size_t(cfg_.input_size);
    O_ = size_t(cfg_.output_size);
    W_ = streaming_ ? 1 : size_t(fresh_ ? eo_.window : engine_->window());
    flops_per_output_ = streaming_ ? layer_step_flops(cfg_) + head_flops(cfg_)
                                   : double(W_) * layer_step_flops(cfg_) + head_flops(cfg_);
    S_ = fresh_ ? 1 : size_t(o_.batch > 0 ? o_.batch : 1);
    B_ = fresh_ ? size_t(o_.batch > 0 ? o_.batch : 1024) : 0;

    report_ = report_header(o_.command_line, o_.engine.cpuset);
    report_["kind"] = "throughput";
    if (engine_->backend_name() == "cuda")
      for (auto& [k, v] : gpu::facts(eo_.gpu.device)) report_["machine"]["gpu"][k] = v;

    // The float64 reference backend's backtest outputs are kept in float64 (its bound is below float's
    // rounding); run_batch answers in float32 only.
    f64_out_ = !fresh_ && engine_->precision() == Precision::fp64;
    if (o_.device_arrays && engine_->backend_name() != "cuda")
      throw Error("--device-arrays needs the cuda backend (the engine runs on " + engine_->backend_name() + ")");
    // The outputs of the last run: z (float32; fresh: the last call's) or z64 (the ref backend's backtest).
    z_.resize(fresh_ ? B_ * O_ : 0);
  }

  // Inputs for `windows` outputs: backtest S series of T ticks; fresh, distinct batches of B windows
  // cycled over the calls (at most 16, within the input memory limit). A backtest's inputs and outputs
  // are checked against the limit together, before either is allocated.
  std::vector<float> series_inputs(size_t T) const {
    const size_t S = S_, I = I_, O = O_;
    const double bytes = double(S) * double(T) * (double(I) * 4 + double(O) * (f64_out_ ? 8 : 4));
    if (bytes > kMaxThroughputInputBytes)
      throw Error(with_commas(double(S) * double(T)) + " ticks of " + std::to_string(I) + " inputs need " +
                  sci(bytes / 1e9) + " GB of inputs and outputs, over the benchmark's " +
                  sci(kMaxThroughputInputBytes / 1e9) + " GB: ask for fewer --ticks");
    std::vector<float> x(S * T * I);
    for (size_t s = 0; s < S; ++s)
      for (size_t t = 0; t < T; ++t)
        tick_input(series_seed(o_.seed, s), (long long)t, std::span<float>(x).subspan((s * T + t) * I, I));
    return x;
  }
  std::vector<std::vector<float>> fresh_inputs(size_t calls) const {
    const size_t B = B_, W = W_, I = I_;
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
          tick_input(series_seed(o_.seed, b * B + w), (long long)t,
                     std::span<float>(batches[b]).subspan((w * W + t) * I, I));
    return batches;
  }
  // --device-arrays: `x` in GPU memory (uploaded once, before the clock; again only for other inputs)
  const float* on_device(const std::vector<float>& x, size_t k = 0) {
    if (dx_.size() <= k) dx_.resize(k + 1);
    auto& d = dx_[k];
    if (!d.array || d.source != x.data() || d.array->size() != x.size()) {
      d.array.reset();  // the old one freed first: inputs of several GB
      d.array = std::make_unique<gpu::DeviceFloats>(x.size(), eo_.gpu.device);
      d.array->upload(x.data(), x.size());
      d.source = x.data();
    }
    return d.array->data();
  }
  float* device_out(size_t n) {
    if (!dz_ || dz_->size() != n) {
      dz_.reset();
      dz_ = std::make_unique<gpu::DeviceFloats>(n, eo_.gpu.device);
    }
    return dz_->data();
  }
  double run_backtest(const std::vector<float>& x, size_t T) {
    const size_t n = S_ * T * O_;
    f64_out_ ? z64_.resize(n) : z_.resize(n);  // sized once for the run, before the clock starts
    if (o_.device_arrays) {
      const float* dx = on_device(x);
      float* dz = device_out(n);
      const auto t0 = Clock::now();
      engine_->backtest_on_device(dx, S_, T, dz);
      const double secs = seconds_since(t0);
      dz_->download(z_.data(), n);  // for the check, off the clock
      return secs;
    }
    const auto t0 = Clock::now();
    if (f64_out_) engine_->backtest(x, S_, T, std::span<double>(z64_));
    else engine_->backtest(x, S_, T, std::span<float>(z_));
    return seconds_since(t0);
  }
  double run_fresh_calls(const std::vector<std::vector<float>>& batches, size_t calls, std::vector<double>* lat_us) {
    std::vector<const float*> dx;
    float* dz = nullptr;
    if (o_.device_arrays) {
      for (size_t b = 0; b < batches.size(); ++b) dx.push_back(on_device(batches[b], b));
      dz = device_out(B_ * O_);
    }
    const auto t0 = Clock::now();
    for (size_t c = 0; c < calls; ++c) {
      const auto c0 = Clock::now();
      if (dz) engine_->run_batch_on_device(dx[c % dx.size()], B_, W_, dz);
      else engine_->run_batch(batches[c % batches.size()], B_, W_, std::span<float>(z_));
      if (lat_us) lat_us->push_back(std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
    }
    const double secs = seconds_since(t0);
    if (dz) dz_->download(z_.data(), B_ * O_);  // the last call's outputs, for the check
    return secs;
  }

  // Sizing: a probe run (unmeasured; it also warms the backend) gives the rate, and the measured run is
  // sized to about target_seconds, unless --ticks fixed it.
  void size_the_run() {
    per_unit_ = fresh_ ? B_ : S_;  // outputs per call / per tick across the series
    // The probe: at least one window's worth of ticks per series, and a few calls.
    // A probe much shorter than the target is repeated 8x larger (within the memory limit): a small
    // run on a GPU measures its fixed costs, not its rate, and would size the measured runs far too short.
    size_t probe_units = fresh_ ? 2 : std::max<size_t>(W_ + 7, std::min<size_t>(4096, (2048 + S_ - 1) / S_));
    const double unit_bytes = fresh_ ? double(B_) * double(W_) * double(I_) * 4
                                     : double(S_) * (double(I_) * 4 + double(O_) * (f64_out_ ? 8 : 4));
    const size_t max_probe = size_t(std::max(1.0, std::min(kMaxThroughputInputBytes / 4 / unit_bytes,
                                                           double(kMaxThroughputWindows) / 10 / double(fresh_ ? B_ : S_))));
    double secs;
    for (;;) {
      if (fresh_) {
        const auto b = fresh_inputs(probe_units);
        secs = run_fresh_calls(b, probe_units, nullptr);
      } else {
        secs = run_backtest(series_inputs(probe_units), probe_units);
      }
      if (o_.windows || secs >= 0.1 * o_.target_seconds || probe_units * 8 > max_probe) break;
      probe_units *= 8;
    }
    probe_rate_ = double(probe_units * per_unit_) / std::max(secs, 1e-9);
    const double want = o_.windows ? double(*o_.windows) : probe_rate_ * o_.target_seconds;
    units_ = size_t(std::max(1.0, std::ceil(std::min(want, double(kMaxThroughputWindows)) / double(per_unit_))));
  }

  void measure() {
    outputs_ = units_ * per_unit_;
    if (fresh_) {
      batches_ = fresh_inputs(units_);
      lat_us_.reserve(units_);
      run_seconds_.push_back(run_fresh_calls(batches_, units_, &lat_us_));
    } else {
      x_ = series_inputs(units_);
      for (int r = 0; r < o_.repeats; ++r) run_seconds_.push_back(run_backtest(x_, units_));
    }
  }

  // The check, off the timed path. Backtest: the first rows of the first and last series (the partial
  // windows and the head tiles), then random later rows from their own window alone (fixed scalers
  // only: a rolling one needs the history). Fresh: random windows of the last call's batch.
  void check() {
    const size_t I = I_, O = O_, W = W_, S = S_, B = B_, units = units_;
    const Model& model = model_;
    const std::vector<float>& x = x_;
    prec_ = engine_->precision();
    const bool int8 = bound_is_per_model(prec_);
    scaler_ = engine_->scaler();
    const ScalerChoice scaler = scaler_;
    std::vector<double> exact, rounded;
    auto output = [&](size_t k) { return f64_out_ ? z64_[k] : double(z_[k]); };  // value k of the last run
    const Model rounded_model = int8 ? int8_rounded(model) : Model();
    std::mt19937_64 rng(o_.seed ^ 0xC0FFEEull);
    const size_t want_rows = size_t(std::max(1, o_.check_rows));
    // Float64 work budget: about 1e9 flops per model checked.
    const size_t budget_rows = std::max<size_t>(1, size_t(1e9 / std::max(1.0, flops_per_output_)));
    const size_t prefix = std::min<size_t>(units, budget_rows);
    // The float64 truth: `exact`, and for int8's own bound `rounded` (the int8-rounded weights).
    // The first n ticks of one series, from a ref engine with the same mode, window and scaler.
    auto check_prefix = [&](std::span<const float> xs, size_t n) {
      EngineOptions r;
      r.backend = BackendKind::ref;
      r.mode = streaming_ ? Mode::streaming : Mode::window;
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
    if (!fresh_) {
      const size_t T = units;
      for (const size_t s : S > 1 ? std::vector<size_t>{0, S - 1} : std::vector<size_t>{0}) {
        const size_t n = std::min(prefix, std::max<size_t>(1, want_rows / 2));
        check_prefix(std::span<const float>(x.data() + s * T * I, n * I), n);
        for (size_t k = 0; k < n * O; ++k) got_.push_back(output(s * T * O + k));
      }
      if (!streaming_ && scaler.kind != ScalerKind::rolling && T > W) {
        std::uniform_int_distribution<size_t> pick_s(0, S - 1), pick_t(W - 1, T - 1);
        std::vector<float> windows;
        const size_t n = std::min(want_rows / 2, budget_rows);
        for (size_t k = 0; k < n; ++k) {
          const size_t s = pick_s(rng), t = pick_t(rng);
          windows.insert(windows.end(), x.begin() + long((s * T + t + 1 - W) * I), x.begin() + long((s * T + t + 1) * I));
          for (size_t j = 0; j < O; ++j) got_.push_back(output((s * T + t) * O + j));
        }
        check_windows(windows, n);
      }
    } else {
      const auto& last = batches_[(units - 1) % batches_.size()];
      std::uniform_int_distribution<size_t> pick(0, B - 1);
      const size_t n = std::min({want_rows, B, budget_rows});
      std::vector<float> windows;
      for (size_t k = 0; k < n; ++k) {
        const size_t w = n == B ? k : pick(rng);
        windows.insert(windows.end(), last.begin() + long(w * W * I), last.begin() + long((w + 1) * W * I));
        for (size_t j = 0; j < O; ++j) got_.push_back(output(w * O + j));
      }
      check_windows(windows, n);
    }
    error_ = reference::normalized_error(got_, exact);
    // run_batch answers in float32: fresh outputs carry float's own rounding (2^-24 relative, so below
    // 1.2e-7 on the normalized scale) whatever the backend computes in.
    bound_ = std::max(int8 ? int8_error_bound(reference::normalized_error(rounded, exact)) : error_bound(prec_),
                      fresh_ ? 1.2e-7 : 0.0);
    pass_ = std::isfinite(error_) && error_ <= bound_;
  }

  // The report (JSON) and the summary (text).
  void report_and_print() {
    const size_t B = B_, W = W_, I = I_, O = O_, S = S_, units = units_, outputs = outputs_;
    const bool fresh = fresh_, streaming = streaming_, pass = pass_;
    const double error = error_, bound = bound_, probe_rate = probe_rate_, flops_per_output = flops_per_output_;
    const Precision prec = prec_;
    const ScalerChoice scaler = scaler_;
    const Model& model = model_;
    const ModelConfig& cfg = cfg_;
    const std::string& note = note_;
    const std::vector<double>& run_seconds = run_seconds_;
    const std::vector<double>& lat_us = lat_us_;
    const std::vector<double>& got = got_;
    const std::vector<std::vector<float>>& batches = batches_;
    Engine& engine = *engine_;
    nlohmann::json& report = report_;
    const ThroughputOptions& o = o_;
    std::ostream& out = out_;
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
    // cuda: the host link's own rate each way (measured now, the engine idle) and the share of it the
    // run's inputs and outputs took, over the whole run (copies overlapped with compute or not)
    double link_in = 0, link_out = 0;
    report["arrays"] = o.device_arrays ? "device" : "host";
    if (engine.backend_name() == "cuda" && !o.device_arrays) {
      const gpu::LinkRate link = gpu::link_rate(eo_.gpu.device);
      link_in = link.h2d_gb_per_s;
      link_out = link.d2h_gb_per_s;
      report["link"] = {{"h2d_gb_per_s", link_in}, {"d2h_gb_per_s", link_out},
                        {"measured_as", "one 64 MiB pinned copy each way, the best of 3"}};
      report["link_share"] = {{"in", in_bytes / med_s / 1e9 / link_in}, {"out", out_bytes / med_s / 1e9 / link_out}};
    }
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
        << sci((in_bytes + out_bytes) / med_s / 1e9) << " GB/s)"
        << (o.device_arrays ? ", in GPU memory (uploaded before the clock)" : "") << "\n";
    if (link_in > 0)
      out << "  link      in " << sci(in_bytes / med_s / 1e9) << " of the host link's " << sci(link_in) << " GB/s ("
          << sci(100.0 * in_bytes / med_s / 1e9 / link_in) << " %), out " << sci(out_bytes / med_s / 1e9) << " of "
          << sci(link_out) << " GB/s (" << sci(100.0 * out_bytes / med_s / 1e9 / link_out) << " %)\n";
    out << "  error     " << sci(error) << " over " << got.size() << " checked output values (bound " << sci(bound) << "): "
        << (pass ? "PASS" : "FAIL") << "\n";
  }

  const ThroughputOptions& o_;
  std::ostream& out_;
  const Model model_;
  const ModelConfig& cfg_;
  const bool fresh_, streaming_;
  // set up
  EngineOptions eo_;
  std::optional<Engine> engine_;
  std::string note_;
  size_t I_ = 0, O_ = 0, W_ = 1, S_ = 1, B_ = 0;
  double flops_per_output_ = 0;
  nlohmann::json report_;
  bool f64_out_ = false;
  std::vector<float> z_;
  std::vector<double> z64_;
  // the probe and the measured runs
  size_t per_unit_ = 1, units_ = 0, outputs_ = 0;
  double probe_rate_ = 0;
  std::vector<double> run_seconds_, lat_us_;
  std::vector<float> x_;
  std::vector<std::vector<float>> batches_;
  // --device-arrays: the inputs in GPU memory (by the host vector they came from) and the outputs
  struct DeviceInput {
    std::unique_ptr<gpu::DeviceFloats> array;
    const float* source = nullptr;
  };
  std::vector<DeviceInput> dx_;
  std::unique_ptr<gpu::DeviceFloats> dz_;
  // the check
  Precision prec_ = Precision::fp32;
  ScalerChoice scaler_;
  std::vector<double> got_;
  double error_ = 0, bound_ = 0;
  bool pass_ = false;
};

}  // namespace

nlohmann::json run_throughput(const ThroughputOptions& o, std::ostream& out) {
  validate(o);
  return ThroughputRun(o, out).run();
}

}  // namespace hotpath::bench
