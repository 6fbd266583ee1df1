#include "bench/latency_bench.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <iomanip>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/checker.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "cpu/cpu_backend.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
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
  if (!in(o.timeout_us, 1, kMaxTimeoutUs)) throw between("--timeout-us", 1, kMaxTimeoutUs);
  if (o.mode == Mode::batch) throw Error("hotpath bench measures tick latency: --mode must be window or streaming");
  if (o.floats && (*o.floats < 1 || *o.floats > kMaxFloats)) throw between("--floats", 1, kMaxFloats);
  gpu::check_kernel(o.kernel);
  if (o.window && (*o.window < 1 || *o.window > kMaxWindow)) throw between("--window", 1, kMaxWindow);
  if (o.report_every_s && !in(*o.report_every_s, kMinIntervalSeconds, kMaxSeconds))
    throw between("--report-every", kMinIntervalSeconds, kMaxSeconds);
  if (o.report_every_s && !o.samples_path.empty())
    throw Error("--samples keeps every sample, --report-every keeps histograms: use one of them");
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

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write '" + path + "'");
  f << text;
  if (!f.flush()) throw Error("cannot write '" + path + "'");
}

nlohmann::json start_report(const BenchOptions& o) {
  validate(o);
  util::clear_pin_failures();
  return {{"schema_version", kSchemaVersion},
          {"hotpath_version", git_version()},
          {"date", utc_now()},
          {"command", o.command_line},
          {"machine", machine_json(o.cpuset)}};
}

TickRateEstimate estimate_tick_rate(const ModelConfig& c, Mode mode, int window, int precompute_cores) {
  // fp32 GFLOP/s a core keeps up in the precompute's matrix-vector products (L2-resident weights):
  // lstm_s window fp32, W = 50, took 28.6 us a tick on 12 workers of the lent Xeon (55 a core, their
  // sync included) and 126 us on 1 worker of a 2-core AVX-512 VM (150); AVX2 has half the lanes, the
  // portable kernels no vectors of their own.
  const cpu::CpuFeatures f = cpu::cpu_features();
  TickRateEstimate e;
  e.isa = f.avx2_fma && f.avx512 ? "avx512" : f.avx2_fma ? "avx2" : "generic";
  e.gflops_per_core = e.isa == "avx512" ? 60.0 : e.isa == "avx2" ? 30.0 : 5.0;
  e.precompute_cores = std::max(1, precompute_cores);
  const double I = c.input_size, H = c.hidden_size, L = c.num_layers, O = c.output_size, G = 4 * H;
  e.answer_flops = 2 * G * (I + H * (L - 1)) + 2 * O * H;
  e.precompute_flops = mode == Mode::window ? 2 * G * I + double(std::max(window - 1, 0)) * 2 * G * H * (2 * L - 1)
                                            : 2 * G * H * L;
  e.answer_us = e.answer_flops / (e.gflops_per_core * 1e3);
  e.precompute_us = e.precompute_flops / (e.gflops_per_core * 1e3 * e.precompute_cores);
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
          {"isa", e.isa}};
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


EngineOptions engine_options(const BenchOptions& o) {
  EngineOptions eo;
  eo.backend = o.backend;
  eo.mode = o.mode;
  eo.window = o.mode == Mode::window ? o.window.value_or(0) : 0;
  eo.precision = o.precision;
  eo.cpuset = o.cpuset;
  eo.timeout_us = o.timeout_us;
  eo.fallback = o.fallback;
  eo.variant = o.variant;
  eo.kernel = o.kernel;
  eo.scaler = o.scaler;
  eo.cpu = o.cpu;
  eo.warm = o.warm;
  return eo;
}

nlohmann::json model_json(const Model& model, Mode mode, int window) {
  const ModelConfig& cfg = model.config;
  return {{"name", model.name},           {"input_size", cfg.input_size},
          {"hidden_size", cfg.hidden_size}, {"num_layers", cfg.num_layers},
          {"output_size", cfg.output_size}, {"window", mode == Mode::window ? window : 0},
          {"parameters", cfg.parameter_count()}, {"dtype", dtype_name(model.dtype)}};
}

nlohmann::json run_bench(const BenchOptions& o, std::ostream& out) {
  if (o.instances) throw Error("--instances: many instances are run_instances_bench's (bench/instances_bench.hpp)");
  nlohmann::json report = start_report(o);
  std::string failure;  // why the run does not pass; empty: it passes
  if (o.lockstep || o.beside_backtest || o.sms_per_instance != 0 || o.isolation != "green" || o.placement != "sm")
    throw Error("--lockstep, --beside-backtest, --sms-per-instance, --isolation and --placement need --instances");

  if (o.pingpong) {
    std::string why;
    if (!gpu::available(&why)) throw UnsupportedError("--pingpong: no usable CUDA device: " + why);
    for (auto& [k, v] : gpu::facts()) report["machine"]["gpu"][k] = v;
    if (!o.cpuset.empty()) util::pin_thread(pthread_self(), {o.cpuset.front()}, "bench timed thread");
    Summary s;
    report["kind"] = "pingpong";
    report["pingpong"] = pingpong_json(o.floats.value_or(32), o.seconds ? 200000 : o.ticks, o.warmup, o.cpuset, &s);
    print_header(out);
    print_row(out, "ping-pong " + std::to_string(o.floats.value_or(32)) + " floats", s);
    if (s.count == 0) failure = "no round trip was measured";
  } else {
    if (o.model.empty()) throw Error("--model is required (a file or a zoo name; `hotpath models` lists the zoo)");
    const Model model = open_model(o.model, o.load);
    const ModelConfig& cfg = model.config;
    EngineOptions eo = engine_options(o);
    // Resolved and checked (window, cpuset, fallback) before anything runs.
    const BackendOptions bo = backend_options(model, eo);
    const int window = o.mode == Mode::window ? bo.window : 1;

    report["kind"] = "latency";
    report["model"] = model_json(model, o.mode, window);
    report["mode"] = mode_name(o.mode);
    report["instances"] = 1;

    // "auto" is resolved first (a probe), so that the ping-pong below runs alone on the GPU.
    std::string note;
    if (!o.make_backend) choose_backend(model, &eo, &note);
    if (!note.empty()) out << note << "\n";

    // Threads the backend starts (a heartbeat, workers) inherit the creating thread's cores: create
    // the backend, and the checker, with the process's cores, and pin the timed thread afterwards.
    const std::vector<int> all_cores = util::allowed_cores();
    const std::vector<int> first_core = o.cpuset.empty() ? std::vector<int>{} : std::vector<int>{o.cpuset.front()};
    // The checker's cores (checker_cores): its threads spin while they work.
    const std::vector<int> spare_cores = checker_cores(all_cores, o.cpuset, !(eo.backend == "cuda" && eo.fallback.empty()));

    Summary pp;
    bool have_pp = false;
    if (eo.backend == "cuda") {
      std::string why;
      if (!gpu::available(&why, eo.device)) throw UnsupportedError("backend cuda: no usable CUDA device: " + why);
      for (auto& [k, v] : gpu::facts(eo.device)) report["machine"]["gpu"][k] = v;
      if (!o.skip_pingpong) {
        const util::ScopedPin pin(first_core, "bench timed thread", true);
        report["pingpong"] = pingpong_json(o.floats.value_or(cfg.input_size), o.seconds ? 200000 : o.ticks,
                                           o.warmup, o.cpuset, &pp);
        have_pp = true;
      }
    }

    // What the timed loop uses is made before the engine (the checker's float64 weights and threads, the
    // first block of checked outputs, the histograms: megabytes of stores on this thread, and thread
    // starts), so that the engine's warm-up is the last thing to touch the caches before its first tick
    // (lstm_s on the 2-core VM: first tick 5-7 us, 10-14 us with the checker started after the engine).
    // int8 is never chosen implicitly, so whether its per-model bound applies is known from the options.
    const ScalerChoice scaler = resolve_scaler(model, bo.scaler);
    const bool per_model_bound = eo.precision && bound_is_per_model(*eo.precision);
    const int spare = std::max(1, int(spare_cores.size()) - 1);
    // every spare core: on the H200 host, vollo_small streaming with --cpuset 2-15 (200 k ticks, 6.6 s) left
    // 8.8 s of checking after the run with 8 threads, 1.2 s with 12, none with 13 (BENCHMARKS.md)
    const int check_threads = o.check_threads > 0 ? o.check_threads : std::min(spare, kMaxCheckThreads);
    const bool intervals_on = o.report_every_s.has_value();
    CheckedOutputs outs(cfg.output_size, Checker::threads_for(o.mode, check_threads), o.mode == Mode::window);
    IntervalStarts interval_starts(intervals_on ? kMaxIntervals : 0);
    Checker checker(model, o.mode, window, o.seed, o.check_every, outs, interval_starts, scaler,
                    per_model_bound ? std::make_optional(int8_rounded(model)) : std::nullopt);
    // After the timed loop when every checked output fits the buffer (BenchOptions::check_during): the
    // float64 steps stream the model's weights through the host's caches and memory, which would slow the
    // timed thread's mailbox traffic that the ping-pong above measured without them.
    const long long due_checks = (kFirstTicks + o.warmup + o.ticks + o.check_every - 1) / o.check_every;
    const bool check_after =
        !o.check_during && !o.seconds && due_checks <= (long long)CheckedOutputs::max_records(cfg.output_size);
    if (!check_after) checker.start(check_threads, spare_cores);  // on cores outside the cpuset where there are any

    // Samples: every one kept (exact percentiles, --samples), or with --report-every histograms per
    // interval, merged into the run's.
    const bool keep_samples = !intervals_on;
    std::vector<float> x(cfg.input_size), z(cfg.output_size);
    std::vector<double> lat, pre;
    if (keep_samples) {
      lat.reserve(o.seconds ? 1 << 20 : o.ticks);
      pre.reserve(o.seconds ? 1 << 20 : o.ticks);
    }
    Histogram lat_iv, pre_iv, lat_all, pre_all;
    // The first kFirstTicks ticks (NaN: no answer), then the bench's warm-up, then the measured ticks.
    std::vector<double> first_lat(kFirstTicks, NAN), first_pre(kFirstTicks, NAN);
    const long long unmeasured = kFirstTicks + o.warmup;

    Engine engine = o.make_backend ? Engine(model, o.make_backend(model, bo)) : Engine(model, eo);
    Backend* backend = &engine.backend();  // timed as step() and finish_precompute() apart
    report["warm"] = {{"ticks", engine.warm_up().ticks}, {"seconds", engine.warm_up().seconds}};
    const std::string backend_name = engine.backend_name();
    report["backend"] = backend->name();
    report["variant"] = backend->variant();
    report["kernel_asked"] = o.kernel.empty() ? "auto" : o.kernel;
    report["precision"] = precision_name(backend->precision());
    report["scaler"] = scaler_name(scaler);
    if (bound_is_per_model(backend->precision()) != per_model_bound)
      throw Error("the backend's precision " + std::string(precision_name(backend->precision())) +
                  " differs from the one asked for; its error bound cannot be checked");
    checker.set_bound(error_bound(backend->precision()));
    if (!o.cpuset.empty()) util::pin_thread(pthread_self(), {o.cpuset.front()}, "bench timed thread");

    // Pacing: at --rate, tick i of a stretch between idle gaps is due at origin + i * period.
    long long late = 0;
    double max_late_us = 0, schedule_s = 0, schedule_done_s = 0;
    const double period_ns = o.rate_hz ? 1e9 / *o.rate_hz : 0;
    const auto gap = std::chrono::nanoseconds(llround(o.gap_us * 1000));
    const bool idle_on = o.idle_s > 0;
    const auto idle_every = std::chrono::duration<double>(o.idle_every_s);
    const auto idle_for = std::chrono::duration<double>(o.idle_s);
    long long idle_gaps = 0;
    double idle_total_s = 0;

    // Failures: a tick whose step() throws got no answer (lost); finish_precompute() throwing is a
    // backend error too. Both are counted and the run goes on, up to kMaxFailuresInRow in a row.
    long long lost = 0, failures = 0, failures_in_row = 0;
    bool answered_any = false;
    std::string last_failure, stopped;

    Clock::time_point start{}, end{}, origin{}, idle_end{};
    long long origin_i = 0;

    // The interval being measured (with --report-every).
    struct Interval {
      Clock::time_point begin;
      long long first_tick = 0, late = 0, lost = 0, failures = 0;
      double idle_s = 0;
    } iv;
    nlohmann::json intervals = nlohmann::json::array();
    auto close_interval = [&](Clock::time_point now, long long next_tick, bool last) {
      const Summary ls = lat_iv.summary(), ps = pre_iv.summary();
      const long long rss = rss_bytes();
      nlohmann::json j = {{"index", intervals.size()},
                          {"start_s", us_between(start, iv.begin) * 1e-6},
                          {"end_s", us_between(start, now) * 1e-6},
                          {"first_tick", iv.first_tick},
                          {"ticks", ls.count},
                          {"latency_us", to_json(ls)},
                          {"precompute_us", to_json(ps)},
                          {"late_ticks", iv.late},
                          {"lost_ticks", iv.lost},
                          {"backend_errors", iv.failures},
                          {"idle_s", iv.idle_s},
                          {"rss_bytes", rss}};
      if (backend_name == "cuda") j["gpu_memory_used_bytes"] = gpu::memory_used_bytes(eo.device);
      intervals.push_back(std::move(j));
      out << "interval " << intervals.size() - 1 << ": " << ls.count << " ticks, p50 " << fmt(ls.p50) << " p99 "
          << fmt(ls.p99) << " p99.9 " << fmt(ls.p999) << " max " << fmt(ls.max) << " us, " << iv.lost << " lost, rss "
          << fmt(double(rss) / double(1 << 20)) << " MiB" << std::endl;
      lat_all.merge(lat_iv);
      pre_all.merge(pre_iv);
      lat_iv.clear();
      pre_iv.clear();
      iv = Interval{now, next_tick};
      if (!last) interval_starts.open(next_tick);
    };

    const long long total_cap = o.seconds ? std::numeric_limits<long long>::max() : unmeasured + o.ticks;
    long long t = 0;
    for (; t < total_cap; ++t) {
      const bool measured = t >= unmeasured;
      const long long i = t - unmeasured;  // measured index
      if (t == unmeasured) {
        start = origin = idle_end = Clock::now();
        if (intervals_on) {
          iv = Interval{start, t};
          interval_starts.open(t);
        }
      }
      if (measured && idle_on && Clock::now() - idle_end >= idle_every) {
        // An idle gap: no tick for idle_s. At --rate the schedule starts again after it.
        const auto a = Clock::now();
        std::this_thread::sleep_for(idle_for);
        idle_end = Clock::now();
        const double slept = us_between(a, idle_end) * 1e-6;
        ++idle_gaps;
        idle_total_s += slept;
        iv.idle_s += slept;
        schedule_done_s = schedule_s;
        origin = idle_end;
        origin_i = i;
      }
      tick_input(o.seed, t, x);  // off the clock: the tick is due once its values exist
      Clock::time_point due;
      if (o.rate_hz) {
        due = measured ? origin + std::chrono::nanoseconds(llround(period_ns * double(i - origin_i))) : Clock::now();
        Clock::time_point now;
        while ((now = Clock::now()) < due) {
        }
        const double late_us = us_between(due, now);
        if (measured) {
          schedule_s = schedule_done_s + period_ns * 1e-9 * double(i - origin_i);
          if (late_us > 1.0) {
            ++late;
            ++iv.late;
            max_late_us = std::max(max_late_us, late_us);
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
        backend->step(x, z);
      } catch (const Error& e) {
        if (!answered_any) throw;  // the backend never worked: that is the error to report
        no_answer = failed = true;
        last_failure = e.what();
      }
      const auto answered = Clock::now();
      try {
        backend->finish_precompute();
      } catch (const Error& e) {
        if (!answered_any) throw;
        failed = true;
        last_failure = e.what();
      }
      const auto ready = Clock::now();
      if (failed) {
        ++failures;
        ++failures_in_row;
        lost += no_answer;
        if (measured) {
          ++iv.failures;
          iv.lost += no_answer;
        }
      } else {
        failures_in_row = 0;
        answered_any = true;
      }
      if (t < kFirstTicks && !no_answer) {
        first_lat[size_t(t)] = us_between(due, answered);
        first_pre[size_t(t)] = us_between(answered, ready);
      }
      if (measured && !no_answer) {
        const double l = us_between(due, answered), p = us_between(answered, ready);
        if (keep_samples) {
          lat.push_back(l);
          pre.push_back(p);
        } else {
          lat_iv.add(l);
          pre_iv.add(p);
        }
      }
      if (t % o.check_every == 0) {
        if (double* slot = outs.next_slot()) {
          if (!no_answer) {
            const auto exact = backend->last_output_f64();  // ref: unrounded float64 outputs
            if (exact.empty()) std::copy(z.begin(), z.end(), slot);
            else std::copy(exact.begin(), exact.end(), slot);
          }
          outs.publish(slot, no_answer);
        } else {
          stopped = "the float64 checker fell 1 GiB of outputs behind (it cannot keep up); lower --rate, raise "
                    "--check-every or --check-threads";
          ++t;
          break;
        }
      }
      if (failures_in_row >= kMaxFailuresInRow) {
        stopped = "the backend failed " + std::to_string(failures_in_row) + " ticks in a row; the last: " + last_failure;
        ++t;
        break;
      }
      if (intervals_on && measured && interval_starts.size() < interval_starts.capacity() &&
          ready - iv.begin >= std::chrono::duration<double>(*o.report_every_s))
        close_interval(ready, t + 1, false);
      if (o.seconds && measured && us_between(start, ready) >= *o.seconds * 1e6) {
        ++t;
        break;
      }
      if (keep_samples && o.seconds && (long long)lat.size() >= kMaxTicks) {
        out << "stopped at " << kMaxTicks << " measured ticks, the most whose samples are kept (--report-every keeps none)\n";
        ++t;
        break;
      }
    }
    end = Clock::now();
    // The last interval is kept whenever a tick was sent or an idle gap fell in it (lost ticks and
    // failures count there too), so the intervals' counts add up to the run's.
    if (intervals_on && (t > iv.first_tick || iv.idle_s > 0 || intervals.empty())) close_interval(end, t, true);
    double bound = error_bound(backend->precision());
    CheckTotals totals;
    const auto check_begin = Clock::now();
    if (check_after) checker.start(check_threads, spare_cores);
    {
      // What is left to check after the run, with its progress on a terminal (a long streaming run can
      // leave the checker minutes behind); the bar ends its line before the summary.
      std::optional<util::ProgressBar> bar;
      if (util::progress_wanted(o.progress))
        bar.emplace(checker.filed(), outs.published(), stderr,
                    util::ProgressBar::Options{o.progress == util::ProgressMode::on ? 0.0 : 2.0, 0.25, "checks"});
      totals = checker.finish(&bound, &int8_error_bound);
    }
    if (check_after) totals.timing.after_run_s = us_between(check_begin, Clock::now()) * 1e-6;  // the whole check
    const CheckResult& check = totals.all;
    const CheckTiming& timing = totals.timing;

    const Summary ls = keep_samples ? summarize(lat) : lat_all.summary();
    const Summary ps = keep_samples ? summarize(pre) : pre_all.summary();
    const double elapsed_s = us_between(start, end) * 1e-6, active_s = elapsed_s - idle_total_s;
    const double normalized = check.normalized();
    const bool error_pass = check.checked > 0 && normalized <= bound;
    // Every tick t < ticks_run with t % check_every == 0 was due for checking.
    const long long ticks_run = t, checks_due = (ticks_run + o.check_every - 1) / o.check_every;
    const long long unchecked = checks_due - check.checked - check.lost;

    if (!stopped.empty()) failure = stopped;
    else if (ls.count == 0) failure = "no tick was measured";
    else if (lost > 0) failure = std::to_string(lost) + " ticks got no answer (lost); the last error: " + last_failure;
    else if (failures > 0) failure = std::to_string(failures) + " ticks failed in the backend; the last error: " + last_failure;
    else if (check.checked == 0) failure = "no tick was checked against the float64 reference";
    else if (unchecked > 0)
      failure = std::to_string(unchecked) + " ticks due for checking were not checked (the float64 checker fell too far "
                "behind: use a larger --check-every or more --check-threads)";
    else if (!error_pass) failure = "the error against the float64 reference exceeds the bound";

    // The first ticks beside the steady state: tick 0 within the steady p99 is the aim of the
    // warm-up (engine/warm.hpp). A lost tick (NaN) is null in the JSON and within nothing.
    auto number_or_null = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    double first_max = NAN;
    long long first_lost = 0;
    nlohmann::json first_lat_json = nlohmann::json::array(), first_pre_json = nlohmann::json::array();
    for (int k = 0; k < kFirstTicks; ++k) {
      first_lat_json.push_back(number_or_null(first_lat[k]));
      first_pre_json.push_back(number_or_null(first_pre[k]));
      if (std::isnan(first_lat[k])) ++first_lost;
      else first_max = std::isnan(first_max) ? first_lat[k] : std::max(first_max, first_lat[k]);
    }
    const bool steady = ls.count > 0;
    const bool first_within = steady && first_lat[0] <= ls.p99;  // false for NaN
    report["first_ticks"] = {{"count", kFirstTicks},
                             {"latency_us", first_lat_json},
                             {"precompute_us", first_pre_json},
                             {"max_us", number_or_null(first_max)},
                             {"lost", first_lost},
                             {"steady_p99_us", steady ? nlohmann::json(ls.p99) : nlohmann::json(nullptr)},
                             {"max_within_p99", steady && first_lost == 0 && first_max <= ls.p99}};
    report["first_tick_within_p99"] = first_within;

    report["count"] = ls.count;
    report["warmup"] = o.warmup;
    report["ticks_run"] = ticks_run;
    report["percentiles"] = keep_samples ? "exact" : "histogram";
    report["latency_us"] = to_json(ls);
    report["precompute_us"] = to_json(ps);
    report["tick_rate_hz"] = active_s > 0 ? double(ls.count) / active_s : 0.0;
    // The rate a tick stream can keep without queueing: every tick needs its answer and then the
    // precompute before the next one (window mode: the open windows, on the precompute's cores). Means,
    // not medians: a queue keeps up with the mean service time, tails included.
    const bool cpu_backend = backend->name() == "cpu";
    const int pre_cores = precompute_cores_for_cpuset(o.cpuset.size());
    nlohmann::json sustainable = {{"hz", ls.mean + ps.mean > 0 ? 1e6 / (ls.mean + ps.mean) : 0.0},
                                  {"rule", "1e6 / (latency_us.mean + precompute_us.mean)"},
                                  {"precompute_cores", pre_cores},
                                  {"precompute_inline", o.cpuset.size() <= 1}};
    if (cpu_backend) sustainable["estimate"] = to_json(estimate_tick_rate(cfg, o.mode, window, pre_cores));
    report["sustainable_tick_rate"] = sustainable;
    report["elapsed_s"] = elapsed_s;
    report["pacing"] = {{"gap_us", o.gap_us},
                        {"rate_hz", o.rate_hz ? nlohmann::json(*o.rate_hz) : nlohmann::json(nullptr)},
                        {"late_ticks", late},
                        {"max_late_us", max_late_us},
                        {"schedule_s", schedule_s},
                        {"active_s", active_s},
                        {"idle_every_s", o.idle_every_s},
                        {"idle_s", o.idle_s},
                        {"idle_gaps", idle_gaps},
                        {"idle_total_s", idle_total_s}};
    report["lost_ticks"] = lost;
    report["backend_errors"] = failures;
    report["last_backend_error"] = last_failure;
    report["error"] = {{"max_abs", check.max_abs},  {"normalized", normalized},
                       {"bound", bound},            {"pass", error_pass},
                       {"checked_ticks", check.checked}, {"check_every", o.check_every},
                       {"checks_due", checks_due},  {"lost_checks", check.lost},
                       {"unchecked_ticks", unchecked},
                       {"ticks_over_bound", check.over_bound}, {"worst_tick", check.worst_tick}};
    const double busy_s = timing.busy_s;
    report["checker"] = {{"reference", o.mode == Mode::streaming ? "split" : "per_window"},
                         {"threads", timing.threads},
                         {"steps", timing.steps},
                         {"busy_s", busy_s},
                         {"after_run_s", timing.after_run_s},
                         {"when", check_after ? "after" : "during"},
                         {"checked_ticks_per_s", busy_s > 0 ? double(check.checked) / busy_s : 0.0},
                         {"steps_per_s", busy_s > 0 ? double(timing.steps) / busy_s : 0.0}};
    if (per_model_bound) {
      report["error"]["bound_rule"] = "int8: 1.5 x the weight rounding's own error (floor 1e-5, cap 2e-3)";
      report["error"]["weight_rounding_error"] = check.rounding_normalized();
    }
    if (intervals_on) {
      for (size_t k = 0; k < intervals.size(); ++k) {
        const CheckResult c = k < totals.intervals.size() ? totals.intervals[k] : CheckResult{};
        intervals[k]["error"] = {{"checked_ticks", c.checked}, {"lost_checks", c.lost}, {"max_abs", c.max_abs},
                                 {"normalized", c.normalized()}, {"ticks_over_bound", c.over_bound}};
      }
      report["report_every_s"] = *o.report_every_s;
      report["intervals"] = std::move(intervals);
    }
    report["seed"] = o.seed;
    for (auto& [k, v] : backend->counters()) report["counters"][k] = v;
    for (auto& [k, v] : backend->facts()) report["facts"][k] = v;

    out << "hotpath bench: " << model.name << " | backend " << backend->name() << " (" << backend->variant()
        << ", " << precision_name(backend->precision()) << ") | mode " << mode_name(o.mode);
    if (o.mode == Mode::window) out << " W=" << window;
    out << " | cpu " << cpu_model() << " | cpuset "
        << (o.cpuset.empty() ? std::string("none") : report["machine"]["cpuset"].dump()) << "\n";
    if (report["machine"].contains("gpu")) out << "gpu: " << report["machine"]["gpu"].dump() << "\n";
    print_header(out);
    print_row(out, "tick latency", ls);
    print_row(out, "precompute", ps);
    const nlohmann::json& sustainable_json = report["sustainable_tick_rate"];
    const int pre_cores_shown = sustainable_json["precompute_cores"].get<int>();
    out << "sustainable tick rate: " << util::si(sustainable_json["hz"].get<double>()) << " ticks/s = 1 / (mean answer "
        << fmt(ls.mean) << " + mean precompute " << fmt(ps.mean) << " us)";
    if (sustainable_json.contains("estimate")) {
      out << (o.mode == Mode::window ? "; the precompute advances the " + std::to_string(window - 1) + " open windows"
                                     : std::string("; the precompute prepares W_hh·h"))
          << " on " << (o.cpuset.size() <= 1 ? std::string("the critical core (inline: no --cpuset workers)")
                                             : std::to_string(pre_cores_shown) + (pre_cores_shown == 1 ? " core" : " cores"))
          << "; estimated from the model's size: " << util::si(sustainable_json["estimate"]["hz"].get<double>())
          << " ticks/s";
    }
    out << "\n";
    if (have_pp) print_row(out, "ping-pong " + std::to_string(o.floats.value_or(cfg.input_size)) + " floats", pp);
    out << "first " << kFirstTicks << " ticks: max " << (std::isnan(first_max) ? std::string("-") : fmt(first_max))
        << " us, each:";
    for (double v : first_lat) out << " " << (std::isnan(v) ? std::string("lost") : fmt(v));
    out << "; steady p99 " << (steady ? fmt(ls.p99) : std::string("-")) << " us; first tick within it: "
        << (first_within ? "yes" : "no") << "; engine warm-up: "
        << (engine.warm_up().ticks > 0 ? std::to_string(engine.warm_up().ticks) + " ticks in " +
                                             fmt(engine.warm_up().seconds * 1e3) + " ms"
                                       : std::string("none"))
        << "\n";
    out << "tick rate " << fmt(report["tick_rate_hz"].get<double>()) << " Hz";
    if (o.rate_hz) out << " (asked " << fmt(*o.rate_hz) << " Hz; " << late << " ticks sent late, max " << fmt(max_late_us) << " us)";
    if (idle_gaps > 0) out << "; " << idle_gaps << " idle gaps, " << fmt(idle_total_s) << " s in all";
    out << "\nerror vs float64 reference"
        << (scaler.kind == ScalerKind::none ? "" : " (inputs scaled: " + scaler_name(scaler) + ")") << ": max abs "
        << std::scientific << std::setprecision(3) << check.max_abs << ", normalized " << normalized << " (bound " << bound;
    if (per_model_bound) out << " = 1.5 x int8 weight rounding alone " << check.rounding_normalized();
    out << ") over " << check.checked << " checked ticks " << (error_pass ? "PASS" : "FAIL") << std::defaultfloat << "\n";
    if (check.over_bound > 0)
      out << check.over_bound << " checked ticks over the bound; the worst is tick " << check.worst_tick << "\n";
    out << "float64 checker: " << timing.threads << (timing.threads == 1 ? " thread" : " threads")
        << (timing.threads == 1             ? ""
            : o.mode == Mode::streaming ? " (each step split by hidden units)"
                                        : " (taking turns over the windows)")
        << ", " << timing.steps << " steps in " << fmt(busy_s) << " s of work ("
        << util::si(report["checker"]["steps_per_s"].get<double>()) << " steps/s, "
        << util::si(report["checker"]["checked_ticks_per_s"].get<double>()) << " checked ticks/s); "
        << (check_after ? "run after the timed loop, " + fmt(timing.after_run_s) + " s"
                        : "beside the timed loop, done " + fmt(timing.after_run_s) + " s after it")
        << "\n";
    for (auto& [k, v] : backend->counters()) out << k << ": " << v << "\n";

    if (!o.samples_path.empty()) {
      std::ostringstream s;
      s << "latency_us,precompute_us\n";
      for (size_t k = 0; k < lat.size(); ++k) s << lat[k] << "," << pre[k] << "\n";
      write_text(o.samples_path, s.str());
    }
  }

  // Placement that was only a preference and failed (the checker's cores, ...): said, not fatal.
  report["pin_failures"] = nlohmann::json::array();
  for (const auto& f : util::pin_failures()) {
    report["pin_failures"].push_back({{"thread", f.thread}, {"cores", f.cores}, {"reason", f.reason}});
    out << "warning: " << f.thread << " could not be pinned to " << util::cores_text(f.cores) << ": " << f.reason << "\n";
  }
  report["pass"] = failure.empty();
  report["failure"] = failure;
  if (!failure.empty()) out << "FAIL: " << failure << "\n";
  if (!o.json_path.empty()) write_text(o.json_path, report.dump(2) + "\n");
  return report;
}

}  // namespace hotpath::bench
