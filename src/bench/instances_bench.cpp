// `hotpath bench --instances N`: many instances of one model on one GPU. See
// instances_bench.hpp for what is measured and how.
#include "bench/instances_bench.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <optional>
#include <thread>

#include "bench/checker.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "engine/instances.hpp"
#include "util/error.hpp"
#include "util/progress_bar.hpp"
#include "util/threads.hpp"

namespace hotpath::bench {
namespace {

// Instance k's inputs come from their own seed, so no two instances see the same stream.
uint64_t instance_seed(uint64_t seed, int k) { return seed + 0x9E3779B97F4A7C15ull * uint64_t(k + 1); }

// A spin barrier for --lockstep: every driving thread starts round r together.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    const long long gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.store(gen + 1, std::memory_order_release);
      return;
    }
    while (gen_.load(std::memory_order_acquire) == gen && !broken_.load(std::memory_order_relaxed)) {
    }
  }
  // A thread that leaves early (its instances failed) releases the others for good.
  void break_all() { broken_.store(true, std::memory_order_release); }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<long long> gen_{0};
  std::atomic<bool> broken_{false};
};

// One instance through one phase: its samples, failures and checked outputs.
struct InstanceRun {
  Backend* backend = nullptr;
  uint64_t seed = 0;
  long long next_tick = 0;  // the instance's next tick (0 at the start of each phase)
  std::vector<double> lat, pre;
  long long lost = 0, failures = 0;
  std::string last_failure;
  std::unique_ptr<CheckedOutputs> outs;
  std::unique_ptr<IntervalStarts> no_intervals;
  std::unique_ptr<Checker> checker;
};

struct PhaseResult {
  nlohmann::json json;
  std::string failure;
};

}  // namespace

nlohmann::json run_instances_bench(const BenchOptions& o, std::ostream& out) {
  nlohmann::json report = start_report(o);
  const int n = *o.instances;
  if (o.pingpong) throw Error("--instances measures model instances: drop --pingpong");
  if (o.report_every_s || o.idle_s > 0 || !o.samples_path.empty())
    throw Error("--report-every, --idle-every-s/--idle-s and --samples are for one instance, not --instances");
  if (!o.fallback.empty()) throw Error("--fallback is not available with --instances");
  if (o.model.empty()) throw Error("--model is required (a file or a zoo name; `hotpath models` lists the zoo)");
  const Model model = open_model(o.model, o.load);
  const ModelConfig& cfg = model.config;
  EngineOptions eo = engine_options(o);
  eo.cpuset.clear();  // --cpuset places the driver threads; the engines' own threads stay unpinned
  const BackendOptions bo = backend_options(model, eo);
  const int window = o.mode == Mode::window ? bo.window : 1;
  engine::InstanceOptions io;
  io.count = n;
  io.isolation = o.isolation;
  io.sms_each = o.sms_per_instance;
  io.placement = o.placement;
  io.beside = o.beside_backtest;

  report["kind"] = "instances";
  report["model"] = model_json(model, o.mode, window);
  report["mode"] = mode_name(o.mode);
  report["instances"] = n;

  // Drivers: one thread per instance where cores allow; past that a thread drives several in turn.
  const std::vector<int> all_cores = util::allowed_cores();
  const std::vector<int>& driver_cores = o.cpuset.empty() ? all_cores : o.cpuset;
  const int threads = std::max(1, std::min<int>(n, int(driver_cores.size())));
  const bool pinned = !o.cpuset.empty();

  // The instances: an InstanceSet on the GPU, or (tests) backends from the make_backend hook, which
  // share nothing to isolate (no ping-pong, no backtest beside them).
  const bool hooked = bool(o.make_backend);
  if (hooked && o.beside_backtest) throw Error("--beside-backtest needs the GPU's instance set, not a test backend");
  Summary pp;
  bool have_pp = false;
  if (!hooked) {
    std::string why;
    if (!gpu::available(&why, eo.device)) throw UnsupportedError("--instances: no usable CUDA device: " + why);
    for (auto& [k, v] : gpu::facts(eo.device)) report["machine"]["gpu"][k] = v;
    // The floor, in this process, before any instance exists (one thread, on the first driver core).
    if (!o.skip_pingpong) {
      report["pingpong"] = pingpong_json(o.floats.value_or(cfg.input_size), std::min<long long>(o.ticks, 200000),
                                         std::min<long long>(o.warmup, 10000), o.cpuset, &pp);
      have_pp = true;
    }
  }

  const auto made = Clock::now();
  std::unique_ptr<engine::InstanceSet> set;
  std::vector<std::unique_ptr<Engine>> hooked_engines;
  std::vector<Engine*> engines;
  engine::InstanceLayout lay;
  if (hooked) {
    for (int k = 0; k < n; ++k) engines.push_back(hooked_engines.emplace_back(std::make_unique<Engine>(model, o.make_backend(model, bo))).get());
    lay.isolation = "none (test backends)";
    lay.count = n;
  } else {
    set = std::make_unique<engine::InstanceSet>(model, eo, io);
    for (size_t k = 0; k < set->size(); ++k) engines.push_back(&(*set)[k]);
    lay = set->layout();
  }
  const double make_s = us_between(made, Clock::now()) * 1e-6;
  Backend& first = engines[0]->backend();
  const ScalerChoice scaler = resolve_scaler(model, bo.scaler);
  report["backend"] = first.name();
  report["variant"] = first.variant();
  report["precision"] = precision_name(first.precision());
  report["scaler"] = scaler_name(scaler);
  report["isolation"] = {{"mechanism", lay.isolation},     {"sms_per_instance", lay.sms_each},
                         {"fine_split", lay.fine},         {"split_granularity", lay.granularity},
                         {"rest_sms", lay.rest_sms},       {"device_sms", lay.device_sms},
                         {"launch_sms", lay.launch_sms},   {"placement", lay.placement},
                         {"setup_s", make_s}};
  report["driving"] = {{"threads", threads},
                       {"pinned", pinned},
                       {"cores", pinned ? nlohmann::json(std::vector<int>(o.cpuset.begin(), o.cpuset.begin() + threads))
                                        : nlohmann::json(nullptr)},
                       {"instances_per_thread_max", (n + threads - 1) / threads},
                       {"lockstep", o.lockstep},
                       {"how", "thread j drives instances j, j+T, ...: it sends each its tick in turn and waits "
                               "for that tick's answer, then waits for each one's precompute; a tick is timed from "
                               "the moment its thread sends it (after the previous instance's answer) to its "
                               "answer being visible to the thread"}};
  if (eo.precision && bound_is_per_model(*eo.precision))
    throw Error("--instances checks against the precision's fixed bound; int8 needs the single-instance bench");
  const double bound = error_bound(first.precision());

  std::vector<InstanceRun> runs(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    runs[size_t(k)].backend = &engines[size_t(k)]->backend();
    runs[size_t(k)].seed = instance_seed(o.seed, k);
  }

  // Float64 checker threads per instance (they run after the timed part, on every core); the outputs'
  // readers are laid out for them (streaming: one reader, its steps split over the threads).
  const int check_threads = o.check_threads > 0 ? o.check_threads : std::max(1, int(all_cores.size()) / n);
  const int check_readers = Checker::threads_for(o.mode, check_threads);

  // One phase: warm-up then `ticks` measured ticks per instance (or `seconds`), every instance checked.
  auto phase = [&](const std::string& name, const std::function<void()>& beside_start,
                   const std::function<nlohmann::json()>& beside_stop) -> PhaseResult {
    for (auto& r : runs) {
      // Each phase starts every instance afresh (tick 0, zero state): the checker counts from tick 0.
      if (r.next_tick > 0) r.backend->reset();
      r.next_tick = 0;
      r.lat.clear();
      r.pre.clear();
      r.lost = r.failures = 0;
      r.last_failure.clear();
      r.outs = std::make_unique<CheckedOutputs>(cfg.output_size, check_readers, o.mode == Mode::window);
      r.no_intervals = std::make_unique<IntervalStarts>(0);
      r.checker = std::make_unique<Checker>(model, o.mode, window, r.seed, o.check_every, *r.outs, *r.no_intervals, scaler);
      r.checker->set_bound(bound);
      r.lat.reserve(size_t(o.seconds ? 1 << 18 : o.ticks));
      r.pre.reserve(size_t(o.seconds ? 1 << 18 : o.ticks));
    }
    SpinBarrier barrier(threads);
    std::atomic<bool> stop{false};
    std::atomic<int> measuring{0};
    Clock::time_point start{};
    std::vector<std::string> thread_errors(static_cast<size_t>(threads));
    const long long warm = o.warmup;
    const auto seconds = o.seconds ? std::chrono::duration<double>(*o.seconds) : std::chrono::duration<double>(0);
    auto drive = [&](int j) {
      if (pinned) util::pin_thread(pthread_self(), {driver_cores[size_t(j)]}, "instance driver thread");
      std::vector<InstanceRun*> mine;
      for (int k = j; k < n; k += threads) mine.push_back(&runs[size_t(k)]);
      std::vector<float> x(size_t(cfg.input_size)), z(size_t(cfg.output_size));
      std::vector<char> answered(mine.size());
      const auto gap = std::chrono::nanoseconds(llround(o.gap_us * 1000));
      try {
        for (long long i = 0;; ++i) {
          const bool measured = i >= warm;
          if (i == warm) {
            // Every thread starts measuring together; the clock of --seconds starts once all have.
            if (measuring.fetch_add(1) + 1 == threads) start = Clock::now();
            while (measuring.load() < threads) {
            }
          }
          if (measured && o.seconds) {
            if (stop.load(std::memory_order_relaxed)) break;
            if (j == 0 && Clock::now() - start >= seconds) {
              stop.store(true);
              barrier.break_all();  // lockstep: nobody waits for thread 0's next round
              break;
            }
          } else if (measured && i - warm >= o.ticks) {
            break;
          }
          if (o.lockstep) barrier.arrive_and_wait();
          if (gap.count() > 0) {
            const auto until = Clock::now() + gap;
            while (Clock::now() < until) {
            }
          }
          // Each instance's tick in turn, then each one's precompute.
          for (size_t m = 0; m < mine.size(); ++m) {
            InstanceRun& r = *mine[m];
            const long long t = r.next_tick;
            tick_input(r.seed, t, x);
            const auto due = Clock::now();
            bool ok = true;
            try {
              r.backend->step(x, z);
            } catch (const Error& e) {
              ok = false;
              ++r.lost;
              ++r.failures;
              r.last_failure = e.what();
            }
            const auto got = Clock::now();
            answered[m] = ok;
            if (measured && ok) r.lat.push_back(us_between(due, got));
            if (t % o.check_every == 0) {
              double* slot = r.outs->next_slot();
              if (!slot) throw Error("the float64 checker's buffer is full; raise --check-every");
              if (ok) {
                const auto exact = r.backend->last_output_f64();
                if (exact.empty()) std::copy(z.begin(), z.end(), slot);
                else std::copy(exact.begin(), exact.end(), slot);
              }
              r.outs->publish(slot, !ok);
            }
            ++r.next_tick;
          }
          for (size_t m = 0; m < mine.size(); ++m) {
            InstanceRun& r = *mine[m];
            const auto a = Clock::now();
            try {
              r.backend->finish_precompute();
              if (measured && answered[m]) r.pre.push_back(us_between(a, Clock::now()));
            } catch (const Error& e) {
              ++r.failures;
              r.last_failure = e.what();
            }
            if (r.failures >= kMaxFailuresInRow) throw Error("an instance failed " + std::to_string(r.failures) +
                                                             " ticks; the last: " + r.last_failure);
          }
        }
      } catch (const std::exception& e) {
        thread_errors[size_t(j)] = e.what();
        stop.store(true);
        barrier.break_all();
        measuring.fetch_add(threads);  // nobody waits for this thread at the start line
      }
    };
    if (beside_start) beside_start();
    std::vector<std::thread> pool;
    for (int j = 0; j < threads; ++j) pool.emplace_back(drive, j);
    for (auto& t : pool) t.join();
    const auto end = Clock::now();
    const nlohmann::json beside = beside_stop ? beside_stop() : nlohmann::json(nullptr);
    const double elapsed_s = start == Clock::time_point{} ? 0 : us_between(start, end) * 1e-6;

    // The float64 check, after the timed threads are done (off the clock), on every core; its progress
    // over every instance on a terminal.
    std::atomic<size_t> filed{0};
    size_t published = 0;
    for (auto& r : runs) {
      r.checker->also_count_into(&filed);
      published += r.outs->published();
    }
    const auto check_start = Clock::now();
    std::vector<CheckTotals> totals;
    {
      std::optional<util::ProgressBar> bar;
      if (util::progress_wanted(o.progress))
        bar.emplace(filed, published, stderr,
                    util::ProgressBar::Options{o.progress == util::ProgressMode::on ? 0.0 : 2.0, 0.25, "checks"});
      for (auto& r : runs) r.checker->start(check_threads, all_cores);
      for (auto& r : runs) totals.push_back(r.checker->finish());
    }
    const double check_s = us_between(check_start, Clock::now()) * 1e-6;
    PhaseResult res;
    nlohmann::json per_instance = nlohmann::json::array();
    std::vector<double> all_lat, all_pre;
    double worst_p99 = 0, best_p99 = INFINITY, worst_err = 0;
    int worst_k = -1;
    for (int k = 0; k < n; ++k) {
      InstanceRun& r = runs[size_t(k)];
      const CheckResult& c = totals[size_t(k)].all;
      const long long due = (r.next_tick + o.check_every - 1) / o.check_every;
      const long long unchecked = due - c.checked - c.lost;
      const Summary ls = summarize(r.lat), ps = summarize(r.pre);
      all_lat.insert(all_lat.end(), r.lat.begin(), r.lat.end());
      all_pre.insert(all_pre.end(), r.pre.begin(), r.pre.end());
      if (ls.count > 0 && ls.p99 > worst_p99) {
        worst_p99 = ls.p99;
        worst_k = k;
      }
      if (ls.count > 0) best_p99 = std::min(best_p99, ls.p99);
      const double err = c.normalized();
      worst_err = std::max(worst_err, err);
      const bool pass = c.checked > 0 && err <= bound && r.lost == 0 && r.failures == 0 && unchecked == 0 && ls.count > 0;
      per_instance.push_back({{"index", k},
                              {"seed", r.seed},
                              {"latency_us", to_json(ls)},
                              {"precompute_us", to_json(ps)},
                              {"tick_rate_hz", elapsed_s > 0 ? double(ls.count) / elapsed_s : 0.0},
                              {"lost_ticks", r.lost},
                              {"backend_errors", r.failures},
                              {"last_backend_error", r.last_failure},
                              {"error", {{"max_abs", c.max_abs}, {"normalized", err}, {"bound", bound},
                                         {"checked_ticks", c.checked}, {"unchecked_ticks", unchecked},
                                         {"ticks_over_bound", c.over_bound}, {"worst_tick", c.worst_tick}}},
                              {"pass", pass}});
      if (res.failure.empty() && !pass) {
        res.failure = "instance " + std::to_string(k) + ": " +
                      (ls.count == 0              ? std::string("no tick was measured")
                       : r.lost > 0               ? std::to_string(r.lost) + " ticks got no answer; the last error: " + r.last_failure
                       : r.failures > 0           ? std::to_string(r.failures) + " backend errors; the last: " + r.last_failure
                       : c.checked == 0           ? std::string("no tick was checked against the float64 reference")
                       : unchecked > 0            ? std::to_string(unchecked) + " ticks due for checking were not checked"
                                                  : std::string("the error against the float64 reference exceeds the bound"));
      }
    }
    for (const auto& e : thread_errors)
      if (res.failure.empty() && !e.empty()) res.failure = "a driver thread stopped: " + e;
    const Summary all = summarize(all_lat), allp = summarize(all_pre);
    res.json = {{"phase", name},
                {"ticks_per_instance", o.seconds ? nlohmann::json(nullptr) : nlohmann::json(o.ticks)},
                {"elapsed_s", elapsed_s},
                {"latency_us", to_json(all)},
                {"precompute_us", to_json(allp)},
                {"worst_instance_p99_us", worst_p99},
                {"worst_instance", worst_k},
                {"best_instance_p99_us", std::isfinite(best_p99) ? best_p99 : 0.0},
                {"tick_rate_hz_all", elapsed_s > 0 ? double(all.count) / elapsed_s : 0.0},
                {"error_normalized_max", worst_err},
                {"checker", {{"reference", o.mode == Mode::streaming ? "split" : "per_window"},
                             {"threads_per_instance", totals.empty() ? 0 : totals[0].timing.threads},
                             {"seconds", check_s}}},
                {"per_instance", per_instance},
                {"pass", res.failure.empty()},
                {"failure", res.failure}};
    if (!beside.is_null()) res.json["beside"] = beside;
    print_header(out, name + " (us)");
    print_row(out, "  all ticks", all);
    out << "  worst instance p99 " << fmt(worst_p99) << " us (instance " << worst_k << "), best " << fmt(res.json["best_instance_p99_us"].get<double>())
        << "; precompute p50 " << fmt(allp.p50) << " us; worst error " << std::scientific << std::setprecision(3)
        << worst_err << std::defaultfloat << " (bound " << bound << ")\n";
    out << "  float64 check after the timed part: " << fmt(check_s) << " s, "
        << (totals.empty() ? 0 : totals[0].timing.threads) << " threads per instance"
        << (o.mode == Mode::streaming ? " (each step split by hidden units)" : "") << "\n";
    return res;
  };

  std::vector<nlohmann::json> phases;
  std::string failure;
  out << "hotpath bench: " << n << " instances of " << model.name << " | " << first.variant() << " | "
      << lay.isolation << ": " << lay.sms_each << " SMs each" << (lay.fine ? " (fine split)" : "")
      << (lay.launch_sms > 0 ? ", one launch on " + std::to_string(lay.launch_sms) + " SMs (placed by " + lay.placement + ")" : "")
      << (lay.rest_sms > 0 ? ", " + std::to_string(lay.rest_sms) + " SMs beside" : "") << " | " << threads
      << " driver threads" << (pinned ? " (pinned)" : "") << (o.lockstep ? " | lockstep" : "") << "\n";
  if (have_pp) out << "ping-pong p50 " << fmt(pp.p50) << " p99 " << fmt(pp.p99) << " us (same process, before the instances)\n";
  {
    PhaseResult r = phase(o.beside_backtest ? "alone" : "instances", nullptr, nullptr);
    phases.push_back(r.json);
    if (failure.empty()) failure = r.failure;
  }
  if (o.beside_backtest) {
    // A backtest on the SMs the instances leave, at the lowest stream priority, run over and over while
    // the instances are measured again; its first call's outputs are checked against float64.
    auto bt = set->beside_engine();
    const size_t S = 64, T = 512, I = size_t(cfg.input_size), O = size_t(cfg.output_size);
    std::vector<float> bx(S * T * I), bz(S * T * O);
    for (size_t s = 0; s < S; ++s)
      for (size_t t = 0; t < T; ++t) tick_input(instance_seed(o.seed, -2) + s, (long long)t, std::span<float>(&bx[(s * T + t) * I], I));
    std::atomic<bool> stop_bt{false};
    std::atomic<long long> calls{0};
    std::string bt_error;
    std::thread worker;
    Clock::time_point bt_start;
    double bt_err = -1;
    auto start_bt = [&] {
      bt->backtest(bx, S, T, bz);  // once before the clock: its plan and buffers exist, and it is checked
      // Series 0's first ticks against the float64 reference backend (the same backtest semantics,
      // scaler included).
      {
        EngineOptions ro = eo;
        ro.backend = "ref";
        ro.precision.reset();
        ro.variant.clear();
        ro.kernel.clear();
        ro.warm = false;
        Engine ref(model, ro);
        const size_t Tc = std::min<size_t>(T, 128);
        std::vector<double> zr(Tc * O);
        ref.backtest(std::span<const float>(bx.data(), Tc * I), 1, Tc, std::span<double>(zr));
        double max_abs = 0, max_ref = 0;
        for (size_t k = 0; k < Tc * O; ++k) {
          max_abs = std::max(max_abs, std::abs(double(bz[k]) - zr[k]));
          max_ref = std::max(max_ref, std::abs(zr[k]));
        }
        bt_err = max_abs / std::max(1.0, max_ref);
      }
      bt_start = Clock::now();
      worker = std::thread([&] {
        try {
          while (!stop_bt.load()) {
            bt->backtest(bx, S, T, bz);
            ++calls;
          }
        } catch (const std::exception& e) {
          bt_error = e.what();
        }
      });
    };
    auto stop_bt_fn = [&]() -> nlohmann::json {
      stop_bt.store(true);
      worker.join();
      const double s = us_between(bt_start, Clock::now()) * 1e-6;
      const double windows = double(calls.load()) * double(S * T);
      return {{"series", S},
              {"ticks", T},
              {"calls", calls.load()},
              {"seconds", s},
              {"windows_per_s", s > 0 ? windows / s : 0.0},
              {"sms", lay.rest_sms},
              {"error_normalized", bt_err},
              {"error_bound", bound},
              {"error", bt_error}};
    };
    PhaseResult r = phase("beside", start_bt, stop_bt_fn);
    const nlohmann::json& b = r.json["beside"];
    out << "  backtest beside: " << b["calls"] << " calls, " << fmt(b["windows_per_s"].get<double>() * 1e-6)
        << " M windows/s on " << lay.rest_sms << " SMs, error " << std::scientific << std::setprecision(3) << bt_err
        << std::defaultfloat << "\n";
    if (failure.empty()) failure = r.failure;
    if (failure.empty() && !bt_error.empty()) failure = "the backtest beside failed: " + bt_error;
    if (failure.empty() && !(bt_err >= 0 && bt_err <= bound)) failure = "the backtest beside exceeds the error bound";
    if (failure.empty() && calls.load() == 0) failure = "the backtest beside completed no call while the instances ran";
    const double alone = phases[0]["worst_instance_p99_us"].get<double>(), with = r.json["worst_instance_p99_us"].get<double>();
    const double alone_all = phases[0]["latency_us"]["p99"].get<double>(), with_all = r.json["latency_us"]["p99"].get<double>();
    out << "  p99 of all ticks: " << fmt(alone_all) << " us alone, " << fmt(with_all) << " us beside the backtest ("
        << std::showpos << fmt(100 * (with_all / alone_all - 1)) << std::noshowpos << "%); worst instance "
        << fmt(alone) << " -> " << fmt(with) << " us\n";
    phases.push_back(r.json);
  }
  report["phases"] = phases;
  report["facts"] = nlohmann::json::object();
  for (auto& [k, v] : first.facts()) report["facts"][k] = v;
  report["seed"] = o.seed;
  report["check_every"] = o.check_every;
  finish_report(report, failure, out, o.json_path);
  return report;
}

}  // namespace hotpath::bench
