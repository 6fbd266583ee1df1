#include "bench/latency_bench.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <iomanip>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <thread>

#include "bench/checker.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "cpu/cpu_backend.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
#include "telemetry/prometheus_exporter.hpp"
#include "util/error.hpp"
#include "util/progress_bar.hpp"
#include "util/threads.hpp"

namespace hotpath::bench {
namespace {

// Every limit of the options, each message naming the flag and its range (NaN fails every test).
void validate(const BenchOptions& o) {
  auto in = [](double v, double lo, double hi) { return v >= lo && v <= hi; };
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.12g", v);
    return std::string(buf);
  };
  auto between = [&](const std::string& flag, double lo, double hi) {
    return Error(flag + " must be between " + num(lo) + " and " + num(hi));
  };
  if (o.ticks < 1 || o.ticks > kMaxTicks) throw between("--ticks", 1, double(kMaxTicks));
  if (o.seconds && !(in(*o.seconds, 0, kMaxSeconds) && *o.seconds > 0))
    throw Error("--seconds/--duration must be a positive number of seconds up to " + num(kMaxSeconds));
  if (o.warmup < 0 || o.warmup > kMaxWarmup) throw between("--warmup", 0, double(kMaxWarmup));
  if (!in(o.gap_us, 0, kMaxGapUs)) throw between("--gap-us", 0, kMaxGapUs);
  if (o.rate_hz && !(in(*o.rate_hz, 0, kMaxRateHz) && *o.rate_hz > 0))
    throw Error("--rate must be a positive tick rate in Hz up to " + num(kMaxRateHz));
  if (o.rate_hz && o.gap_us > 0) throw Error("--rate and --gap-us exclude each other");
  if (o.check_every < 1) throw Error("--check-every must be at least 1");
  if (o.instances && (*o.instances < 1 || *o.instances > kMaxInstances)) throw between("--instances", 1, kMaxInstances);
  if (o.sms_per_instance < 0) throw Error("--sms-per-instance must be at least 1");
  if (o.check_threads < 0 || o.check_threads > kMaxCheckThreads) throw between("--check-threads", 1, kMaxCheckThreads);
  if (!in(o.engine.gpu.timeout_us, 1, kMaxTimeoutUs)) throw between("--timeout-us", 1, kMaxTimeoutUs);
  if (o.engine.mode == Mode::batch) throw Error("hotpath bench measures tick latency: --mode must be window or streaming");
  if (o.floats && (*o.floats < 1 || *o.floats > kMaxFloats)) throw between("--floats", 1, kMaxFloats);
  if (o.engine.window < 0 || o.engine.window > kMaxWindow) throw between("--window", 1, kMaxWindow);
  if (o.report_every_s && !in(*o.report_every_s, kMinIntervalSeconds, kMaxSeconds))
    throw between("--report-every", kMinIntervalSeconds, kMaxSeconds);
  if (o.report_every_s && !o.samples_path.empty())
    throw Error("--samples keeps every sample, --report-every keeps histograms: use one of them");
  if (!o.swap_model.empty() || o.swap_every_s != 0) {
    if (o.swap_model.empty() || !in(o.swap_every_s, kMinIntervalSeconds, kMaxSeconds))
      throw Error("--swap-every-s (between " + num(kMinIntervalSeconds) + " and " + num(kMaxSeconds) +
                  " s) and --swap-model come together");
    if (o.engine.mode != Mode::window)
      throw Error("--swap-every-s is for window mode: a streaming model's state after a swap is not the reference's "
                  "(the swap tests check streaming swaps)");
    if (o.report_every_s) throw Error("--swap-every-s keeps every sample (to split the swaps' ticks): not with --report-every");
    if (o.make_backend) throw Error("--swap-every-s needs an engine made from options");
    if (o.instances) throw Error("--swap-every-s swaps the model of one engine: not with --instances");
  }
  if (o.metrics_port && (*o.metrics_port < 0 || *o.metrics_port > 65535)) throw between("--metrics-port", 0, 65535);
  if (!in(o.metrics_hold_s, 0, kMaxIdleSeconds)) throw between("--metrics-hold-s", 0, kMaxIdleSeconds);
  if (o.metrics_hold_s > 0 && !o.metrics_port) throw Error("--metrics-hold-s keeps the --metrics-port server up: give both");
  if (o.idle_every_s != 0 || o.idle_s != 0) {
    if (!in(o.idle_every_s, kMinIntervalSeconds, kMaxSeconds))
      throw Error("--idle-every-s must be between " + num(kMinIntervalSeconds) + " and " + num(kMaxSeconds) +
                  " (and comes with --idle-s)");
    if (!(in(o.idle_s, 0, kMaxIdleSeconds) && o.idle_s > 0))
      throw Error("--idle-s must be a positive number of seconds up to " + num(kMaxIdleSeconds) +
                  " (and comes with --idle-every-s)");
  }
}

}  // namespace

nlohmann::json start_report(const BenchOptions& o) {
  validate(o);
  util::clear_pin_failures();
  return report_header(o.command_line, o.engine.cpuset);
}

TickRateEstimate estimate_tick_rate(const ModelConfig& c, Mode mode, int window, int precompute_cores, bool amx) {
  // fp32 GFLOP/s a core keeps up in the precompute's matrix-vector products (L2-resident weights):
  // lstm_s window fp32, W = 50, took 28.6 us a tick on 12 workers of the lent Xeon (55 a core, their
  // sync included) and 126 us on 1 worker of a 2-core AVX-512 VM (150); AVX2 has half the lanes, the
  // portable kernels no vectors of their own. NEON: AVX2's figure, not measured (a Neoverse V2 core has
  // four 128-bit FMA pipes, AVX2's two 256-bit ones).
  const cpu::CpuFeatures f = cpu::cpu_features();
  TickRateEstimate e;
  e.isa = f.avx2_fma && f.avx512 ? "avx512" : f.avx2_fma ? "avx2" : f.neon ? "neon" : "generic";
  e.gflops_per_core = e.isa == "avx512" ? 60.0 : e.isa == "avx2" || e.isa == "neon" ? 30.0 : 5.0;
  // bf16 on AMX tiles (all open windows as the columns of one product): lstm_m's 129 MFLOP a tick took
  // 280 us on one core of the AMX VM (~460 GFLOP/s), lstm_s's 19.3 MFLOP 35 us (~550): 400, below both.
  e.precompute_gflops_per_core = amx ? 400.0 : e.gflops_per_core;
  if (amx) e.isa += " (precompute: amx bf16)";
  e.precompute_cores = std::max(1, precompute_cores);
  const double I = c.input_size, H = c.hidden_size, L = c.num_layers, O = c.output_size, G = 4 * H;
  e.answer_flops = 2 * G * (I + H * (L - 1)) + 2 * O * H;
  e.precompute_flops = mode == Mode::window ? 2 * G * I + double(std::max(window - 1, 0)) * 2 * G * H * (2 * L - 1)
                                            : 2 * G * H * L;
  e.answer_us = e.answer_flops / (e.gflops_per_core * 1e3);
  e.precompute_us = e.precompute_flops / (e.precompute_gflops_per_core * 1e3 * e.precompute_cores);
  e.hz = 1e6 / (e.answer_us + e.precompute_us);
  return e;
}

int precompute_cores_for_cpuset(size_t cpuset_cores) { return cpuset_cores > 1 ? int(cpuset_cores - 1) : 1; }

TickRateEstimate estimate_tick_rate_for_cpuset(const ModelConfig& c, Mode mode, int window, size_t cpuset_cores) {
  return estimate_tick_rate(c, mode, window, precompute_cores_for_cpuset(cpuset_cores));
}

nlohmann::json to_json(const TickRateEstimate& e) {
  return {{"hz", e.hz},
          {"answer_us", e.answer_us},
          {"precompute_us", e.precompute_us},
          {"answer_flops", e.answer_flops},
          {"precompute_flops", e.precompute_flops},
          {"precompute_cores", e.precompute_cores},
          {"gflops_per_core", e.gflops_per_core},
          {"precompute_gflops_per_core", e.precompute_gflops_per_core},
          {"isa", e.isa}};
}

// Room for n appends, its pages written now: the timed loop's appends then never fault a fresh page (a
// fault waits while another thread holds the process's memory map, mapping or pinning memory, as a
// swap's preparation does: milliseconds, measured as the tick's own latency).
template <class T>
void reserve_touched(std::vector<T>& v, size_t n) {
  v.assign(n, T{});
  v.clear();
}

nlohmann::json pingpong_json(int floats, long long count, long long warmup, const std::vector<int>& cpuset,
                             Summary* summary) {
  gpu::PingPongRequest p;
  p.floats = floats;
  p.count = count;
  p.warmup = warmup;
  p.cpu = cpuset.empty() ? -1 : cpuset.front();
  const gpu::PingPongResult r = gpu::pingpong(p);
  *summary = summarize(r.samples_us);
  return {{"floats", floats}, {"path", r.path}, {"latency_us", to_json(*summary)}};
}


nlohmann::json model_json(const Model& model, Mode mode, int window) {
  const ModelConfig& cfg = model.config;
  return {{"name", model.name},           {"input_size", cfg.input_size},
          {"hidden_size", cfg.hidden_size}, {"num_layers", cfg.num_layers},
          {"output_size", cfg.output_size}, {"window", mode == Mode::window ? window : 0},
          {"parameters", cfg.parameter_count()}, {"dtype", dtype_name(model.dtype)}};
}

namespace {

// One latency run of one engine, phase by phase, in the order run() calls them: set up (the model, the
// backend chosen, the ping-pong, the checker, then the engine), the timed loop, the checks left, the
// verdict, the report (JSON), the summary (text), the samples file. The state a phase hands to the next
// is the class's; each phase's code is what run_bench ran inline before.
class LatencyRun {
 public:
  LatencyRun(const BenchOptions& o, nlohmann::json& report, std::ostream& out)
      : o_(o), report_(report), out_(out), model_(open_model(o.model, o.load)), cfg_(model_.config) {}

  // Why the run does not pass; empty: it passes.
  std::string run() {
    set_up();
    timed_loop();
    check();
    const std::string failure = verdict();
    write_report();
    print_summary();
    write_samples();
    return failure;
  }

 private:
  // The interval being measured (with --report-every).
  struct Interval {
    Clock::time_point begin;
    long long first_tick = 0, late = 0, lost = 0, failures = 0;
    double idle_s = 0;
  };

  void set_up() {
    eo_ = o_.engine;
    // Resolved and checked (window, cpuset, fallback) before anything runs.
    bo_ = backend_options(model_, eo_);
    window_ = o_.engine.mode == Mode::window ? bo_.window : 1;

    report_["kind"] = "latency";
    report_["model"] = model_json(model_, o_.engine.mode, window_);
    report_["mode"] = mode_name(o_.engine.mode);
    report_["instances"] = 1;

    // "auto" is resolved first (a probe), so that the ping-pong below runs alone on the GPU.
    std::string note;
    if (!o_.make_backend) choose_backend(model_, &eo_, &note);
    if (!note.empty()) out_ << note << "\n";

    // Threads the backend starts (a heartbeat, workers) inherit the creating thread's cores: create
    // the backend, and the checker, with the process's cores, and pin the timed thread afterwards.
    const std::vector<int> all_cores = util::allowed_cores();
    const std::vector<int> first_core = o_.engine.cpuset.empty() ? std::vector<int>{} : std::vector<int>{o_.engine.cpuset.front()};
    // The checker's cores (checker_cores): its threads spin while they work.
    spare_cores_ = checker_cores(all_cores, o_.engine.cpuset, !(eo_.backend == BackendKind::cuda && eo_.fallback == Fallback::none));

    if (eo_.backend == BackendKind::hybrid && gpu::available(nullptr, eo_.gpu.device))
      for (auto& [k, v] : gpu::facts(eo_.gpu.device)) report_["machine"]["gpu"][k] = v;
    if (eo_.backend == BackendKind::cuda) {
      std::string why;
      if (!gpu::available(&why, eo_.gpu.device)) throw UnsupportedError("backend cuda: no usable CUDA device: " + why);
      for (auto& [k, v] : gpu::facts(eo_.gpu.device)) report_["machine"]["gpu"][k] = v;
      if (!o_.skip_pingpong) {
        const util::ScopedPin pin(first_core, "bench timed thread", true);
        report_["pingpong"] = pingpong_json(o_.floats.value_or(cfg_.input_size), o_.seconds ? 200000 : o_.ticks,
                                            o_.warmup, o_.engine.cpuset, &pp_);
        have_pp_ = true;
      }
    }

    // What the timed loop uses is made before the engine (the checker's float64 weights and threads, the
    // first block of checked outputs, the histograms: megabytes of stores on this thread, and thread
    // starts), so that the engine's warm-up is the last thing to touch the caches before its first tick
    // (lstm_s on the 2-core VM: first tick 5-7 us, 10-14 us with the checker started after the engine).
    // int8 is never chosen implicitly, so whether its per-model bound applies is known from the options.
    scaler_ = resolve_scaler(model_, bo_.scaler);
    per_model_bound_ = eo_.precision && bound_is_per_model(*eo_.precision);
    const int spare = std::max(1, int(spare_cores_.size()) - 1);
    // every spare core: on the H200 host, vollo_small streaming with --cpuset 2-15 (200 k ticks, 6.6 s) left
    // 8.8 s of checking after the run with 8 threads, 1.2 s with 12, none with 13 (BENCHMARKS.md)
    check_threads_ = o_.check_threads > 0 ? o_.check_threads : std::min(spare, kMaxCheckThreads);
    intervals_on_ = o_.report_every_s.has_value();
    outs_.emplace(cfg_.output_size, Checker::threads_for(o_.engine.mode, check_threads_), o_.engine.mode == Mode::window);
    interval_starts_.emplace(intervals_on_ ? kMaxIntervals : 0);
    checker_.emplace(model_, o_.engine.mode, window_, o_.seed, o_.check_every, *outs_, *interval_starts_, scaler_,
                     per_model_bound_ ? std::make_optional(int8_rounded(model_)) : std::nullopt);
    if (!o_.swap_model.empty()) {
      // The swapped-in model: its own checker files the ticks it answers (each checker skips the other's).
      swap_model_.emplace(open_model(o_.swap_model, o_.load));
      swap_id_ = model_id(*swap_model_);
      if (swap_id_ == model_id(model_))
        throw Error("--swap-model holds the same weights as --model (id " + swap_id_ + "): nothing would change");
      const ModelConfig& sc = swap_model_->config;
      if (sc.input_size != cfg_.input_size || sc.output_size != cfg_.output_size)
        throw Error("--swap-model '" + swap_model_->name + "' takes " + std::to_string(sc.input_size) +
                    " inputs a tick and gives " + std::to_string(sc.output_size) + " outputs, --model " +
                    std::to_string(cfg_.input_size) + " and " + std::to_string(cfg_.output_size) +
                    ": a swap keeps both");
      swap_scaler_ = resolve_scaler(*swap_model_, bo_.scaler);
      swap_outs_.emplace(cfg_.output_size, Checker::threads_for(o_.engine.mode, check_threads_), true);
      swap_checker_.emplace(*swap_model_, o_.engine.mode, window_, o_.seed, o_.check_every, *swap_outs_,
                            *interval_starts_, swap_scaler_,
                            per_model_bound_ ? std::make_optional(int8_rounded(*swap_model_)) : std::nullopt);
    }
    // After the timed loop when every checked output fits the buffer (BenchOptions::check_during): the
    // float64 steps stream the model's weights through the host's caches and memory, which would slow the
    // timed thread's mailbox traffic that the ping-pong above measured without them.
    const long long due_checks = (kFirstTicks + o_.warmup + o_.ticks + o_.check_every - 1) / o_.check_every;
    check_after_ =
        !o_.check_during && !o_.seconds && due_checks <= (long long)CheckedOutputs::max_records(cfg_.output_size);
    if (o_.check_on == CheckOn::gpu) {
      if (!check_after_)
        throw Error("--check-on gpu: the GPU checks after the timed loop (drop --check-during and --seconds)");
      std::string why;
      if (!o_.make_lockstep && !gpu::available(&why, eo_.gpu.device)) throw Error("--check-on gpu: " + why);
    }
    if (!check_after_) {
      checker_->start(check_threads_, spare_cores_);  // on cores outside the cpuset where there are any
      if (swap_checker_) swap_checker_->start(check_threads_, spare_cores_);
    }

    // Samples: every one kept (exact percentiles, --samples), or with --report-every histograms per
    // interval, merged into the run's.
    keep_samples_ = !intervals_on_;
    x_.resize(cfg_.input_size);
    z_.resize(cfg_.output_size);
    if (keep_samples_) {
      const size_t n = size_t(o_.seconds ? 1 << 20 : o_.ticks);
      reserve_touched(lat_, n);
      reserve_touched(pre_, n);
      if (!o_.swap_model.empty()) reserve_touched(sample_kind_, n);
    }
    // The first kFirstTicks ticks (NaN: no answer), then the bench's warm-up, then the measured ticks.
    first_lat_.assign(kFirstTicks, NAN);
    first_pre_.assign(kFirstTicks, NAN);
    unmeasured_ = kFirstTicks + o_.warmup;

    if (o_.metrics_port) eo_.metrics = true;
    // A swap on cuda brings the next model up on the other half of the GPU (engine/swap_room.hpp).
    if (!o_.swap_model.empty() && eo_.backend == BackendKind::cuda) eo_.swap_room = true;
    if (o_.make_backend)
      engine_.emplace(model_, o_.make_backend(model_, bo_), eo_.metrics);
    else
      engine_.emplace(model_, eo_);
    if (o_.metrics_port) {
      // Served from here on (the warm-up is over); each measured tick is recorded as the table counts it.
      metrics_server_.emplace(o_.metrics_host + ":" + std::to_string(*o_.metrics_port));
      metrics_server_->add(engine_->metrics(), {{"engine", "0"}});
      report_["metrics"] = {{"url", metrics_server_->url()}, {"port", metrics_server_->port()}};
      out_ << "metrics: " << metrics_server_->url() << std::endl;
    }
    backend_ = &engine_->backend();  // timed as step() and finish_precompute() apart
    report_["warm"] = {{"ticks", engine_->warm_up().ticks}, {"seconds", engine_->warm_up().seconds}};
    backend_name_ = engine_->backend_name();
    report_["backend"] = backend_->name();
    report_["variant"] = backend_->variant();
    report_["kernel_asked"] = util::name_of(o_.engine.gpu.kernel);
    report_["precision"] = precision_name(backend_->precision());
    report_["scaler"] = scaler_name(scaler_);
    if (bound_is_per_model(backend_->precision()) != per_model_bound_)
      throw Error("the backend's precision " + std::string(precision_name(backend_->precision())) +
                  " differs from the one asked for; its error bound cannot be checked");
    checker_->set_bound(error_bound(backend_->precision()));
    if (swap_checker_) swap_checker_->set_bound(error_bound(backend_->precision()));
    main_id_ = engine_->model_id();
    if (!o_.engine.cpuset.empty()) util::pin_thread(pthread_self(), {o_.engine.cpuset.front()}, "bench timed thread");
  }

  void close_interval(Clock::time_point now, long long next_tick, bool last) {
    const Summary ls = lat_iv_.summary(), ps = pre_iv_.summary();
    const long long rss = rss_bytes();
    nlohmann::json j = {{"index", intervals_.size()},
                        {"start_s", us_between(start_, iv_.begin) * 1e-6},
                        {"end_s", us_between(start_, now) * 1e-6},
                        {"first_tick", iv_.first_tick},
                        {"ticks", ls.count},
                        {"latency_us", to_json(ls)},
                        {"precompute_us", to_json(ps)},
                        {"late_ticks", iv_.late},
                        {"lost_ticks", iv_.lost},
                        {"backend_errors", iv_.failures},
                        {"idle_s", iv_.idle_s},
                        {"rss_bytes", rss}};
    if (backend_name_ == "cuda") j["gpu_memory_used_bytes"] = gpu::memory_used_bytes(eo_.gpu.device);
    intervals_.push_back(std::move(j));
    out_ << "interval " << intervals_.size() - 1 << ": " << ls.count << " ticks, p50 " << fmt(ls.p50) << " p99 "
         << fmt(ls.p99) << " p99.9 " << fmt(ls.p999) << " max " << fmt(ls.max) << " us, " << iv_.lost << " lost, rss "
         << fmt(double(rss) / double(1 << 20)) << " MiB" << std::endl;
    lat_all_.merge(lat_iv_);
    pre_all_.merge(pre_iv_);
    lat_iv_.clear();
    pre_iv_.clear();
    iv_ = Interval{now, next_tick};
    if (!last) interval_starts_->open(next_tick);
  }

  void timed_loop() {
    // Pacing: at --rate, tick i of a stretch between idle gaps is due at origin + i * period.
    const double period_ns = o_.rate_hz ? 1e9 / *o_.rate_hz : 0;
    const auto gap = std::chrono::nanoseconds(llround(o_.gap_us * 1000));
    const bool idle_on = o_.idle_s > 0;
    const auto idle_every = std::chrono::duration<double>(o_.idle_every_s);
    const auto idle_for = std::chrono::duration<double>(o_.idle_s);
    // Failures: a tick whose step() throws got no answer (lost); finish_precompute() throwing is a
    // backend error too. Both are counted and the run goes on, up to kMaxFailuresInRow in a row.
    long long failures_in_row = 0;
    bool answered_any = false;
    Clock::time_point origin{}, idle_end{};
    long long origin_i = 0;
    double schedule_done_s = 0;
    CheckedOutputs& outs = *outs_;

    const long long total_cap = o_.seconds ? std::numeric_limits<long long>::max() : unmeasured_ + o_.ticks;
    long long t = 0;
    for (; t < total_cap; ++t) {
      const bool measured = t >= unmeasured_;
      const long long i = t - unmeasured_;  // measured index
      if (t == unmeasured_) {
        if (swap_model_) start_swapper();
        start_ = origin = idle_end = Clock::now();
        if (intervals_on_) {
          iv_ = Interval{start_, t};
          interval_starts_->open(t);
        }
      }
      if (measured && idle_on && Clock::now() - idle_end >= idle_every) {
        // An idle gap: no tick for idle_s. At --rate the schedule starts again after it.
        const auto a = Clock::now();
        std::this_thread::sleep_for(idle_for);
        idle_end = Clock::now();
        const double slept = us_between(a, idle_end) * 1e-6;
        ++idle_gaps_;
        idle_total_s_ += slept;
        iv_.idle_s += slept;
        schedule_done_s = schedule_s_;
        origin = idle_end;
        origin_i = i;
      }
      tick_input(o_.seed, t, x_);  // off the clock: the tick is due once its values exist
      Clock::time_point due;
      if (o_.rate_hz) {
        due = measured ? origin + std::chrono::nanoseconds(llround(period_ns * double(i - origin_i))) : Clock::now();
        Clock::time_point now;
        while ((now = Clock::now()) < due) {
        }
        const double late_us = us_between(due, now);
        if (measured) {
          schedule_s_ = schedule_done_s + period_ns * 1e-9 * double(i - origin_i);
          if (late_us > 1.0) {
            engine_->record_late();
            ++late_;
            ++iv_.late;
            max_late_us_ = std::max(max_late_us_, late_us);
          }
        }
      } else {
        if (gap.count() > 0) {
          const auto until = Clock::now() + gap;
          while (Clock::now() < until) {
          }
        }
        due = Clock::now();
      }
      bool no_answer = false, failed = false;
      try {
        backend_->step(x_, z_);
      } catch (const Error& e) {
        if (!answered_any) throw;  // the backend never worked: that is the error to report
        no_answer = failed = true;
        last_failure_ = e.what();
      }
      const auto answered = Clock::now();
      try {
        backend_->finish_precompute();
      } catch (const Error& e) {
        if (!answered_any) throw;
        failed = true;
        last_failure_ = e.what();
      }
      const auto ready = Clock::now();
      if (failed) {
        ++failures_;
        ++failures_in_row;
        lost_ += no_answer;
        if (measured) {
          ++iv_.failures;
          iv_.lost += no_answer;
        }
      } else {
        failures_in_row = 0;
        answered_any = true;
      }
      if (t < kFirstTicks && !no_answer) {
        first_lat_[size_t(t)] = us_between(due, answered);
        first_pre_[size_t(t)] = us_between(answered, ready);
      }
      // Which model answered (a live swap switches after a tick's precompute: this tick's answer is
      // the model the engine names now, unless the switch came in this tick's finish).
      bool other = false;
      if (swap_model_) {
        const std::string& id = engine_->answering_model_id();
        other = id == swap_id_;
        if (id != last_id_) {  // a switch
          if (!last_id_.empty()) {
            ++switches_;
            after_switch_ = kTicksAfterSwitch;
            swap_open_.store(false, std::memory_order_release);
          }
          last_id_ = id;
        }
      }
      if (measured) {
        if (no_answer) engine_->record_lost();
        else engine_->record_answered(std::chrono::duration_cast<std::chrono::nanoseconds>(answered - due).count());
      }
      if (measured && !no_answer) {
        const double l = us_between(due, answered), p = us_between(answered, ready);
        if (swap_model_) {
          const bool during = swap_open_.load(std::memory_order_acquire) || after_switch_ > 0;
          // Where in the swap: being prepared, the first few ticks of the new model, or the rest after.
          const char part = after_switch_ == 0                                       ? kPreparing
                            : after_switch_ > kTicksAfterSwitch - kFirstTicksAfterSwitch ? kFirstAfterSwitch
                                                                                         : 0;
          sample_kind_.push_back(char((during ? kDuringSwap | part : 0) | (other ? kSwapModel : 0)));
          if (after_switch_ > 0) --after_switch_;
        }
        if (keep_samples_) {
          lat_.push_back(l);
          pre_.push_back(p);
        } else {
          lat_iv_.add(l);
          pre_iv_.add(p);
        }
      }
      if (t % o_.check_every == 0) {
        if (double* slot = outs.next_slot()) {
          if (!no_answer) {
            const auto exact = backend_->last_output_f64();  // ref: unrounded float64 outputs
            if (exact.empty()) std::copy(z_.begin(), z_.end(), slot);
            else std::copy(exact.begin(), exact.end(), slot);
          }
          if (swap_outs_) {
            double* mine = swap_outs_->next_slot();
            if (!mine) {
              stopped_ = "the float64 checker of --swap-model fell 1 GiB of outputs behind; raise --check-every";
              ++t;
              break;
            }
            std::copy(slot, slot + z_.size(), mine);
            swap_outs_->publish(mine, no_answer ? CheckedOutputs::Kind::lost
                                      : other   ? CheckedOutputs::Kind::answer
                                                : CheckedOutputs::Kind::other_model);
            outs.publish(slot, no_answer ? CheckedOutputs::Kind::lost
                               : other   ? CheckedOutputs::Kind::other_model
                                         : CheckedOutputs::Kind::answer);
          } else {
            outs.publish(slot, no_answer);
          }
        } else {
          stopped_ = "the float64 checker fell 1 GiB of outputs behind (it cannot keep up); lower --rate, raise "
                     "--check-every or --check-threads";
          ++t;
          break;
        }
      }
      if (failures_in_row >= kMaxFailuresInRow) {
        stopped_ =
            "the backend failed " + std::to_string(failures_in_row) + " ticks in a row; the last: " + last_failure_;
        ++t;
        break;
      }
      if (intervals_on_ && measured && interval_starts_->size() < interval_starts_->capacity() &&
          ready - iv_.begin >= std::chrono::duration<double>(*o_.report_every_s))
        close_interval(ready, t + 1, false);
      if (o_.seconds && measured && us_between(start_, ready) >= *o_.seconds * 1e6) {
        ++t;
        break;
      }
      if (keep_samples_ && o_.seconds && (long long)lat_.size() >= kMaxTicks) {
        out_ << "stopped at " << kMaxTicks
             << " measured ticks, the most whose samples are kept (--report-every keeps none)\n";
        ++t;
        break;
      }
    }
    end_ = Clock::now();
    ticks_run_ = t;
    stop_swapper();
    if (metrics_server_ && o_.metrics_hold_s > 0) {
      out_ << "metrics: serving the final counts for " << fmt(o_.metrics_hold_s) << " s" << std::endl;
      std::this_thread::sleep_for(std::chrono::duration<double>(o_.metrics_hold_s));
    }
    // The last interval is kept whenever a tick was sent or an idle gap fell in it (lost ticks and
    // failures count there too), so the intervals' counts add up to the run's.
    if (intervals_on_ && (t > iv_.first_tick || iv_.idle_s > 0 || intervals_.empty())) close_interval(end_, t, true);
  }

  void check() {
    // What the report needs of the backend, as the run left it: the engine may be closed below.
    after_.name = backend_->name();
    after_.variant = backend_->variant();
    after_.precision = backend_->precision();
    after_.counters = backend_->counters();
    after_.facts = backend_->facts();
    after_.warm_up = engine_->warm_up();
    bound_ = error_bound(after_.precision);
    const auto check_begin = Clock::now();
    if (lockstep_check()) {
      // The chunks' float64 states on the GPU, which the run's persistent kernel holds until its engine is
      // closed (its tick loop is over; nothing below reads the backend).
      backend_ = nullptr;
      metrics_server_.reset();  // it reads the engine's metrics (its final counts were served above)
      engine_.reset();
      const int device = eo_.gpu.device;
      checker_->set_lockstep(o_.make_lockstep ? o_.make_lockstep : [device](const Model& m, int states) {
        return gpu::lockstep_f64(m, states, device);
      });
    }
    if (check_after_) {
      checker_->start(check_threads_, spare_cores_, /*all_published=*/true);
      if (swap_checker_) swap_checker_->start(check_threads_, spare_cores_, /*all_published=*/true);
    }
    {
      // What is left to check after the run, with its progress on a terminal (a long streaming run can
      // leave the checker minutes behind); the bar ends its line before the summary.
      std::optional<util::ProgressBar> bar;
      if (util::progress_wanted(o_.progress))
        bar.emplace(checker_->filed(), outs_->published(), stderr,
                    util::ProgressBar::Options{o_.progress == util::ProgressMode::on ? 0.0 : 2.0, 0.25, "checks"});
      totals_ = checker_->finish(&bound_, &int8_error_bound);
      if (swap_checker_) {
        swap_bound_ = error_bound(after_.precision);
        swap_totals_ = swap_checker_->finish(&swap_bound_, &int8_error_bound);
      }
    }
    if (check_after_) totals_.timing.after_run_s = us_between(check_begin, Clock::now()) * 1e-6;  // the whole check
    ls_ = keep_samples_ ? summarize(lat_) : lat_all_.summary();
    ps_ = keep_samples_ ? summarize(pre_) : pre_all_.summary();
  }

  // A run checked after the loop steps its float64 states on the GPU (BenchOptions::check_on): asked for,
  // or by default after a cuda run (whose GPU is then free; the host's cores alone take several times the
  // run for a large model).
  bool lockstep_check() const {
    if (!check_after_) return false;
    if (o_.check_on == CheckOn::automatic) return after_.name == "cuda";
    return o_.check_on == CheckOn::gpu;
  }

  std::string verdict() {
    const CheckResult& check = totals_.all;
    normalized_ = check.normalized();
    error_pass_ = check.checked > 0 && normalized_ <= bound_;
    // Every tick t < ticks_run with t % check_every == 0 was due for checking.
    checks_due_ = (ticks_run_ + o_.check_every - 1) / o_.check_every;
    unchecked_ = checks_due_ - check.checked - check.lost - swap_totals_.all.checked - swap_totals_.all.lost;
    if (!stopped_.empty()) return stopped_;
    if (ls_.count == 0) return "no tick was measured";
    if (lost_ > 0) return std::to_string(lost_) + " ticks got no answer (lost); the last error: " + last_failure_;
    if (failures_ > 0) return std::to_string(failures_) + " ticks failed in the backend; the last error: " + last_failure_;
    if (check.checked == 0) return "no tick was checked against the float64 reference";
    if (unchecked_ > 0)
      return std::to_string(unchecked_) + " ticks due for checking were not checked (the float64 checker fell too far "
             "behind: use a larger --check-every or more --check-threads)";
    if (!error_pass_) return "the error against the float64 reference exceeds the bound";
    if (swap_model_) {
      if (!swap_error_.empty()) return swap_error_;
      if (switches_ == 0) return "--swap-every-s: no swap took over during the run (make the run longer than --swap-every-s)";
      if (swap_totals_.all.checked == 0) return "no tick answered by --swap-model was checked (raise --ticks or lower --check-every)";
      if (swap_totals_.all.normalized() > swap_bound_)
        return "the error of --swap-model's ticks against the float64 reference exceeds the bound";
    }
    return "";
  }

  void write_report() {
    const CheckResult& check = totals_.all;
    const CheckTiming& timing = totals_.timing;
    const double elapsed_s = us_between(start_, end_) * 1e-6;
    active_s_ = elapsed_s - idle_total_s_;
    // The first ticks beside the steady state: tick 0 within the steady p99 is the aim of the
    // warm-up (engine/warm.hpp). A lost tick (NaN) is null in the JSON and within nothing.
    auto number_or_null = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    long long first_lost = 0;
    nlohmann::json first_lat_json = nlohmann::json::array(), first_pre_json = nlohmann::json::array();
    for (int k = 0; k < kFirstTicks; ++k) {
      first_lat_json.push_back(number_or_null(first_lat_[k]));
      first_pre_json.push_back(number_or_null(first_pre_[k]));
      if (std::isnan(first_lat_[k])) ++first_lost;
      else first_max_ = std::isnan(first_max_) ? first_lat_[k] : std::max(first_max_, first_lat_[k]);
    }
    steady_ = ls_.count > 0;
    first_within_ = steady_ && first_lat_[0] <= ls_.p99;  // false for NaN
    report_["first_ticks"] = {{"count", kFirstTicks},
                              {"latency_us", first_lat_json},
                              {"precompute_us", first_pre_json},
                              {"max_us", number_or_null(first_max_)},
                              {"lost", first_lost},
                              {"steady_p99_us", steady_ ? nlohmann::json(ls_.p99) : nlohmann::json(nullptr)},
                              {"max_within_p99", steady_ && first_lost == 0 && first_max_ <= ls_.p99}};
    report_["first_tick_within_p99"] = first_within_;

    report_["count"] = ls_.count;
    report_["warmup"] = o_.warmup;
    report_["ticks_run"] = ticks_run_;
    report_["percentiles"] = keep_samples_ ? "exact" : "histogram";
    report_["latency_us"] = to_json(ls_);
    report_["precompute_us"] = to_json(ps_);
    report_["tick_rate_hz"] = active_s_ > 0 ? double(ls_.count) / active_s_ : 0.0;
    // The rate a tick stream can keep without queueing: every tick needs its answer and then the
    // precompute before the next one (window mode: the open windows, on the precompute's cores). Means,
    // not medians: a queue keeps up with the mean service time, tails included.
    const bool cpu_backend = after_.name == "cpu";
    // the cpu backend's own count (crit_cores and pre_cores move it), else the cpuset's cores after the first
    const auto& counters = after_.counters;
    const auto workers = counters.find("precompute_workers");
    const bool own_count = cpu_backend && workers != counters.end();
    const int pre_cores = own_count ? std::max(1, int(workers->second)) : precompute_cores_for_cpuset(o_.engine.cpuset.size());
    const bool pre_inline = own_count ? workers->second == 0 : o_.engine.cpuset.size() <= 1;
    nlohmann::json sustainable = {{"hz", ls_.mean + ps_.mean > 0 ? 1e6 / (ls_.mean + ps_.mean) : 0.0},
                                  {"rule", "1e6 / (latency_us.mean + precompute_us.mean)"},
                                  {"precompute_cores", pre_cores},
                                  {"precompute_inline", pre_inline}};
    if (cpu_backend) {
      const auto& facts = after_.facts;
      const auto gemm = facts.find("cpu_gemm");
      const bool amx = gemm != facts.end() && gemm->second.rfind("amx", 0) == 0;
      sustainable["estimate"] = to_json(estimate_tick_rate(cfg_, o_.engine.mode, window_, pre_cores, amx));
    }
    if (after_.name == "hybrid") {  // the open windows advance on the GPU: precompute_us is the wait for its state
      sustainable["precompute_cores"] = 0;
      sustainable["precompute_inline"] = false;
      sustainable["precompute_on"] = "gpu";
    }
    report_["sustainable_tick_rate"] = sustainable;
    report_["elapsed_s"] = elapsed_s;
    report_["pacing"] = {{"gap_us", o_.gap_us},
                         {"rate_hz", o_.rate_hz ? nlohmann::json(*o_.rate_hz) : nlohmann::json(nullptr)},
                         {"late_ticks", late_},
                         {"max_late_us", max_late_us_},
                         {"schedule_s", schedule_s_},
                         {"active_s", active_s_},
                         {"idle_every_s", o_.idle_every_s},
                         {"idle_s", o_.idle_s},
                         {"idle_gaps", idle_gaps_},
                         {"idle_total_s", idle_total_s_}};
    report_["lost_ticks"] = lost_;
    report_["backend_errors"] = failures_;
    report_["last_backend_error"] = last_failure_;
    report_["error"] = {{"max_abs", check.max_abs},  {"normalized", normalized_},
                        {"bound", bound_},           {"pass", error_pass_},
                        {"checked_ticks", check.checked}, {"check_every", o_.check_every},
                        {"checks_due", checks_due_}, {"lost_checks", check.lost},
                        {"unchecked_ticks", unchecked_},
                        {"ticks_over_bound", check.over_bound}, {"worst_tick", check.worst_tick}};
    const double busy_s = timing.busy_s;
    const bool chunked = timing.chunks > 0;
    report_["checker"] = {{"reference", chunked ? "chunks" : o_.engine.mode == Mode::streaming ? "split" : "per_window"},
                          {"threads", timing.threads},
                          {"steps", timing.steps},
                          {"busy_s", busy_s},
                          {"after_run_s", timing.after_run_s},
                          {"when", check_after_ ? "after" : "during"},
                          {"checked_ticks_per_s", busy_s > 0 ? double(check.checked) / busy_s : 0.0},
                          {"steps_per_s", busy_s > 0 ? double(timing.steps) / busy_s : 0.0}};
    if (chunked) {
      report_["checker"]["chunks"] = timing.chunks;
      report_["checker"]["chunks_redone"] = timing.chunks_redone;
    }
    report_["checker"]["stepped_on"] = timing.lockstep_where.empty() ? "cpu" : timing.lockstep_where;
    if (!timing.lockstep_refused.empty()) report_["checker"]["gpu_refused"] = timing.lockstep_refused;
    if (per_model_bound_) {
      report_["error"]["bound_rule"] = "int8: 1.5 x the weight rounding's own error (floor 1e-5, cap 2e-3)";
      report_["error"]["weight_rounding_error"] = check.rounding_normalized();
    }
    if (intervals_on_) {
      for (size_t k = 0; k < intervals_.size(); ++k) {
        const CheckResult c = k < totals_.intervals.size() ? totals_.intervals[k] : CheckResult{};
        intervals_[k]["error"] = {{"checked_ticks", c.checked}, {"lost_checks", c.lost}, {"max_abs", c.max_abs},
                                  {"normalized", c.normalized()}, {"ticks_over_bound", c.over_bound}};
      }
      report_["report_every_s"] = *o_.report_every_s;
      report_["intervals"] = std::move(intervals_);
    }
    if (swap_model_) write_swap_report();
    report_["seed"] = o_.seed;
    for (auto& [k, v] : after_.counters) report_["counters"][k] = v;
    for (auto& [k, v] : after_.facts) report_["facts"][k] = v;
  }

  // The swapper: every swap_every_s seconds of measuring, the other model is swapped in. It marks the
  // swap open before the call (the tick thread closes it at the switch); a refused swap ends the swaps.
  void start_swapper() {
    swapper_ = util::start_jthread("the bench's swap thread", [this](std::stop_token stop) {
      // Off the critical core, which this thread would inherit from the timed one: a swap call validates,
      // hashes and copies the new model on its caller (milliseconds of a medium model's weights), which
      // on the critical core would be time taken from the ticks.
      if (!spare_cores_.empty()) util::try_pin_thread(pthread_self(), spare_cores_, "the bench's swap thread");
      const auto every = std::chrono::duration<double>(o_.swap_every_s);
      auto next = Clock::now() + every;
      bool to_swap_model = true;
      while (!stop.stop_requested()) {
        while (Clock::now() < next && !stop.stop_requested())
          std::this_thread::sleep_for(std::chrono::microseconds(500));
        if (stop.stop_requested()) return;
        const auto called = Clock::now();
        swap_open_.store(true, std::memory_order_release);
        try {
          engine_->swap(to_swap_model ? *swap_model_ : model_);
        } catch (const Error& e) {
          swap_open_.store(false, std::memory_order_release);
          std::lock_guard<std::mutex> lock(swap_mutex_);
          swap_error_ = std::string("a swap failed: ") + e.what();
          return;
        }
        {
          std::lock_guard<std::mutex> lock(swap_mutex_);
          swap_prepare_s_.push_back(std::chrono::duration<double>(Clock::now() - called).count());
        }
        to_swap_model = !to_swap_model;
        next = Clock::now() + every;
      }
    });
  }
  void stop_swapper() {
    if (!swapper_.joinable()) return;
    swapper_.request_stop();
    swapper_.join();
  }
  void write_swap_report() {
    // Steady: the ticks outside every swap, by the model that answered them (the two models' own
    // latencies differ); the swaps' worst tick is set against the slower model's steady p99.
    std::vector<double> during, steady[2], preparing, first_after, rest_after;
    for (size_t k = 0; k < lat_.size() && k < sample_kind_.size(); ++k) {
      const char kind = sample_kind_[k];
      if (kind & kDuringSwap) {
        during.push_back(lat_[k]);
        (kind & kPreparing ? preparing : kind & kFirstAfterSwitch ? first_after : rest_after).push_back(lat_[k]);
      } else {
        steady[(kind & kSwapModel) ? 1 : 0].push_back(lat_[k]);
      }
    }
    const Summary d = summarize(during), st = summarize(steady[0]), sb = summarize(steady[1]);
    const double steady_p99 = std::max(st.count ? st.p99 : 0.0, sb.count ? sb.p99 : 0.0);
    std::vector<double> prep = swap_prepare_s_;
    std::sort(prep.begin(), prep.end());
    const CheckResult& c = swap_totals_.all;
    const double worst = d.count ? d.max : 0.0;
    report_["swap"] = {{"model", swap_model_->name},
                       {"model_id", swap_id_},
                       {"first_model_id", main_id_},
                       {"every_s", o_.swap_every_s},
                       {"calls", (long long)swap_prepare_s_.size()},
                       {"switches", switches_},
                       {"error", swap_error_},
                       {"prepare_s", {{"min", prep.empty() ? 0.0 : prep.front()},
                                      {"median", prep.empty() ? 0.0 : prep[prep.size() / 2]},
                                      {"max", prep.empty() ? 0.0 : prep.back()}}},
                       {"ticks_after_switch_counted", kTicksAfterSwitch},
                       {"during_swaps_latency_us", to_json(d)},
                       {"during_swaps_parts_latency_us",
                        {{"preparing", to_json(summarize(preparing))},
                         {"first_ticks_after_switch", to_json(summarize(first_after))},
                         {"first_ticks_counted", kFirstTicksAfterSwitch},
                         {"later_ticks_after_switch", to_json(summarize(rest_after))}}},
                       {"steady_latency_us", to_json(st)},
                       {"steady_swap_model_latency_us", to_json(sb)},
                       {"steady_p99_us", steady_p99},
                       {"worst_during_swaps_over_steady_p99", steady_p99 > 0 ? worst / steady_p99 : 0.0},
                       {"check", {{"checked_ticks", c.checked}, {"lost_checks", c.lost}, {"max_abs", c.max_abs},
                                  {"normalized", c.normalized()}, {"bound", swap_bound_},
                                  {"ticks_over_bound", c.over_bound}}}};
  }

  // cuda: the in-kernel part of each tick ("input complete" to "output stored", the kernel's own
  // histogram at the run's mean SM clock), beside the tick latency: what lies outside is the link's.
  void print_kernel_row() const {
    if (!report_.contains("counters") || !report_["counters"].contains("kernel_tick_us_p50")) return;
    const nlohmann::json& c = report_["counters"];
    out_ << std::left << std::setw(22) << "  in the kernel" << std::right;
    for (const char* q : {"kernel_tick_us_p50", "kernel_tick_us_p90", "kernel_tick_us_p99", "kernel_tick_us_p999"})
      out_ << std::setw(10) << fmt(c[q].get<double>());
    out_ << std::setw(10) << "-" << std::setw(10) << "-" << std::setw(10) << "-"
         << "  (input complete -> output stored, inside the GPU)\n";
  }

  // cuda, grid kernel, --tick-trace: each tick split into its parts (tick_trace.hpp), p50 / p99 / p99.9.
  void print_trace_rows() const {
    if (!report_.contains("counters") || !report_["counters"].contains("tick_trace_total_us_p50")) return;
    const nlohmann::json& c = report_["counters"];
    struct Part {
      const char *label, *key, *note;
    };
    const Part parts[] = {{"  traced: input side", "input_excess", "  (send -> input complete, above its floor)"},
                          {"  traced: kernel", "kernel", ""},
                          {"  traced: output side", "output_and_floors", "  (the answer's way back, and both floors)"}};
    for (const Part& part : parts) {
      out_ << std::left << std::setw(22) << part.label << std::right;
      const std::string k = std::string("tick_trace_") + part.key + "_us_";
      out_ << std::setw(10) << fmt(c[k + "p50"].get<double>()) << std::setw(10) << "-" << std::setw(10)
           << fmt(c[k + "p99"].get<double>()) << std::setw(10) << fmt(c[k + "p999"].get<double>()) << std::setw(10) << "-"
           << std::setw(10) << "-" << std::setw(10) << "-" << part.note << "\n";
    }
  }

  void print_summary() {
    const CheckResult& check = totals_.all;
    const CheckTiming& timing = totals_.timing;
    out_ << "hotpath bench: " << model_.name << " | backend " << after_.name << " (" << after_.variant << ", "
         << precision_name(after_.precision) << ") | mode " << mode_name(o_.engine.mode);
    if (o_.engine.mode == Mode::window) out_ << " W=" << window_;
    out_ << " | cpu " << cpu_model() << " | cpuset "
         << (o_.engine.cpuset.empty() ? std::string("none") : report_["machine"]["cpuset"].dump()) << "\n";
    if (report_["machine"].contains("gpu")) out_ << "gpu: " << report_["machine"]["gpu"].dump() << "\n";
    print_header(out_);
    print_row(out_, "tick latency", ls_);
    print_kernel_row();
    print_trace_rows();
    print_row(out_, "precompute", ps_);
    const nlohmann::json& sustainable_json = report_["sustainable_tick_rate"];
    const int pre_cores_shown = sustainable_json["precompute_cores"].get<int>();
    out_ << "sustainable tick rate: " << util::si(sustainable_json["hz"].get<double>()) << " ticks/s = 1 / (mean answer "
         << fmt(ls_.mean) << " + mean precompute " << fmt(ps_.mean) << " us)";
    if (sustainable_json.contains("estimate")) {
      out_ << (o_.engine.mode == Mode::window ? "; the precompute advances the " + std::to_string(window_ - 1) + " open windows"
                                       : std::string("; the precompute prepares W_hh·h"))
           << " on "
           << (sustainable_json["precompute_inline"].get<bool>() ? std::string("the critical core (inline: no workers)")
                                     : std::to_string(pre_cores_shown) + (pre_cores_shown == 1 ? " core" : " cores"))
           << "; estimated from the model's size: " << util::si(sustainable_json["estimate"]["hz"].get<double>())
           << " ticks/s";
    }
    out_ << "\n";
    if (have_pp_) print_row(out_, "ping-pong " + std::to_string(o_.floats.value_or(cfg_.input_size)) + " floats", pp_);
    out_ << "first " << kFirstTicks << " ticks: max " << (std::isnan(first_max_) ? std::string("-") : fmt(first_max_))
         << " us, each:";
    for (double v : first_lat_) out_ << " " << (std::isnan(v) ? std::string("lost") : fmt(v));
    out_ << "; steady p99 " << (steady_ ? fmt(ls_.p99) : std::string("-")) << " us; first tick within it: "
         << (first_within_ ? "yes" : "no") << "; engine warm-up: "
         << (after_.warm_up.ticks > 0 ? std::to_string(after_.warm_up.ticks) + " ticks in " +
                                            fmt(after_.warm_up.seconds * 1e3) + " ms"
                                          : std::string("none"))
         << "\n";
    out_ << "tick rate " << fmt(report_["tick_rate_hz"].get<double>()) << " Hz";
    if (o_.rate_hz)
      out_ << " (asked " << fmt(*o_.rate_hz) << " Hz; " << late_ << " ticks sent late, max " << fmt(max_late_us_)
           << " us)";
    if (idle_gaps_ > 0) out_ << "; " << idle_gaps_ << " idle gaps, " << fmt(idle_total_s_) << " s in all";
    out_ << "\nerror vs float64 reference"
         << (scaler_.kind == ScalerKind::none ? "" : " (inputs scaled: " + scaler_name(scaler_) + ")") << ": max abs "
         << std::scientific << std::setprecision(3) << check.max_abs << ", normalized " << normalized_ << " (bound "
         << bound_;
    if (per_model_bound_) out_ << " = 1.5 x int8 weight rounding alone " << check.rounding_normalized();
    out_ << ") over " << check.checked << " checked ticks " << (error_pass_ ? "PASS" : "FAIL") << std::defaultfloat
         << "\n";
    if (check.over_bound > 0)
      out_ << check.over_bound << " checked ticks over the bound; the worst is tick " << check.worst_tick << "\n";
    const double busy_s = timing.busy_s;
    out_ << "float64 checker: " << timing.threads << (timing.threads == 1 ? " thread" : " threads")
         << (timing.chunks > 0 ? " (the ticks in " + std::to_string(timing.chunks) + " chunks side by side" +
                                     (timing.lockstep_where.empty() ? std::string() : ", stepped on " + timing.lockstep_where) +
                                     ", " + std::to_string(timing.chunks_redone) +
                                     " checked again from the previous one's end)"
             : !timing.lockstep_where.empty()   ? " (every window stepped on " + timing.lockstep_where + ")"
             : timing.threads == 1              ? std::string()
             : o_.engine.mode == Mode::streaming ? std::string(" (each step split by hidden units)")
                                                 : std::string(" (taking turns over the windows)"))
         << ", " << timing.steps << " steps in " << fmt(busy_s) << " s of work ("
         << util::si(report_["checker"]["steps_per_s"].get<double>()) << " steps/s, "
         << util::si(report_["checker"]["checked_ticks_per_s"].get<double>()) << " checked ticks/s); "
         << (check_after_ ? "run after the timed loop, " + fmt(timing.after_run_s) + " s"
                          : "beside the timed loop, done " + fmt(timing.after_run_s) + " s after it")
         << "\n";
    if (!timing.lockstep_refused.empty())
      out_ << "float64 checker: on the host's cores, not the GPU (" << timing.lockstep_refused << ")\n";
    for (auto& [k, v] : after_.counters) out_ << k << ": " << v << "\n";
    if (swap_model_) {
      const nlohmann::json& sw = report_["swap"];
      out_ << "swaps: " << sw["switches"].get<long long>() << " took over (" << sw["calls"].get<long long>()
           << " made ready, every " << fmt(o_.swap_every_s) << " s, prepared in " << fmt(sw["prepare_s"]["median"].get<double>())
           << " s median); during swaps p99 " << fmt(sw["during_swaps_latency_us"]["p99"].get<double>()) << " max "
           << fmt(sw["during_swaps_latency_us"]["max"].get<double>()) << " us, steady p99 "
           << fmt(sw["steady_p99_us"].get<double>()) << " us (the slower model's): worst/steady p99 "
           << fmt(sw["worst_during_swaps_over_steady_p99"].get<double>()) << "; " << sw["model"].get<std::string>()
           << "'s ticks: " << sw["check"]["checked_ticks"].get<long long>() << " checked, error "
           << fmt(sw["check"]["normalized"].get<double>()) << "\n";
      if (!swap_error_.empty()) out_ << swap_error_ << "\n";
    }
  }

  void write_samples() const {
    if (o_.samples_path.empty()) return;
    std::ostringstream s;
    s << "latency_us,precompute_us\n";
    for (size_t k = 0; k < lat_.size(); ++k) s << lat_[k] << "," << pre_[k] << "\n";
    write_text(o_.samples_path, s.str());
  }

  const BenchOptions& o_;
  nlohmann::json& report_;
  std::ostream& out_;
  const Model model_;
  const ModelConfig& cfg_;
  // set up
  EngineOptions eo_;
  BackendOptions bo_;
  int window_ = 1;
  std::vector<int> spare_cores_;
  Summary pp_;
  bool have_pp_ = false;
  ScalerChoice scaler_;
  bool per_model_bound_ = false, intervals_on_ = false, check_after_ = false, keep_samples_ = true;
  int check_threads_ = 1;
  std::optional<CheckedOutputs> outs_;
  std::optional<IntervalStarts> interval_starts_;
  std::optional<Checker> checker_;
  std::vector<float> x_, z_;
  long long unmeasured_ = 0;
  std::optional<Engine> engine_;
  Backend* backend_ = nullptr;
  // The backend as the timed loop left it, for the report (check() may close the engine).
  struct AfterRun {
    std::string name, variant;
    Precision precision = Precision::fp32;
    std::map<std::string, double> counters;
    std::map<std::string, std::string> facts;
    engine::WarmUp warm_up;
  } after_;
  std::string backend_name_;
  // the timed loop
  std::vector<double> lat_, pre_, first_lat_, first_pre_;
  Histogram lat_iv_, pre_iv_, lat_all_, pre_all_;
  Interval iv_;
  nlohmann::json intervals_ = nlohmann::json::array();
  Clock::time_point start_{}, end_{};
  long long ticks_run_ = 0, late_ = 0, idle_gaps_ = 0, lost_ = 0, failures_ = 0;
  double max_late_us_ = 0, schedule_s_ = 0, idle_total_s_ = 0;
  std::string last_failure_, stopped_;
  // the checks and the verdict
  double bound_ = 0, normalized_ = 0, active_s_ = 0, first_max_ = NAN;
  CheckTotals totals_;
  Summary ls_, ps_;
  bool error_pass_ = false, steady_ = false, first_within_ = false;
  long long checks_due_ = 0, unchecked_ = 0;
  // --swap-every-s
  std::optional<Model> swap_model_;
  std::string swap_id_, main_id_, last_id_;
  ScalerChoice swap_scaler_;
  std::optional<CheckedOutputs> swap_outs_;
  std::optional<Checker> swap_checker_;
  CheckTotals swap_totals_;
  double swap_bound_ = 0;
  std::atomic<bool> swap_open_{false};
  long long after_switch_ = 0, switches_ = 0;
  std::vector<char> sample_kind_;  // per measured sample: kDuringSwap | kSwapModel | kPreparing | kFirstAfterSwitch
  static constexpr char kDuringSwap = 1, kSwapModel = 2, kPreparing = 4, kFirstAfterSwitch = 8;
  static constexpr long long kFirstTicksAfterSwitch = 3;
  std::mutex swap_mutex_;
  std::vector<double> swap_prepare_s_;
  std::string swap_error_;
  std::optional<telemetry::MetricsServer> metrics_server_;
  std::jthread swapper_;  // last: stopped and joined before what it uses
};

// --pingpong: the round trip alone.
std::string run_pingpong(const BenchOptions& o, nlohmann::json& report, std::ostream& out) {
  std::string why;
  if (!gpu::available(&why)) throw UnsupportedError("--pingpong: no usable CUDA device: " + why);
  for (auto& [k, v] : gpu::facts()) report["machine"]["gpu"][k] = v;
  if (!o.engine.cpuset.empty()) util::pin_thread(pthread_self(), {o.engine.cpuset.front()}, "bench timed thread");
  Summary s;
  report["kind"] = "pingpong";
  report["pingpong"] = pingpong_json(o.floats.value_or(32), o.seconds ? 200000 : o.ticks, o.warmup, o.engine.cpuset, &s);
  print_header(out);
  print_row(out, "ping-pong " + std::to_string(o.floats.value_or(32)) + " floats", s);
  return s.count == 0 ? "no round trip was measured" : "";
}

}  // namespace

nlohmann::json run_bench(const BenchOptions& o, std::ostream& out) {
  if (o.instances) throw Error("--instances: many instances are run_instances_bench's (bench/instances_bench.hpp)");
  nlohmann::json report = start_report(o);
  if (o.lockstep || o.beside_backtest || o.sms_per_instance != 0 || o.isolation != engine::Isolation::green ||
      o.placement != engine::Placement::sm)
    throw Error("--lockstep, --beside-backtest, --sms-per-instance, --isolation and --placement need --instances");
  std::string failure;  // why the run does not pass; empty: it passes
  if (o.pingpong) {
    failure = run_pingpong(o, report, out);
  } else {
    if (o.model.empty()) throw Error("--model is required (a file or a zoo name; `hotpath models` lists the zoo)");
    failure = LatencyRun(o, report, out).run();
  }
  finish_report(report, failure, out, o.json_path);
  return report;
}

}  // namespace hotpath::bench
