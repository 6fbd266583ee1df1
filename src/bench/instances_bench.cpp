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
#include "telemetry/prometheus_exporter.hpp"
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
  Engine* engine = nullptr;  // the telemetry's (record_answered / record_lost: nothing when it is off)
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

// The backtest run over and over beside the instances (--beside-backtest), on the SMs they leave, at the
// lowest stream priority; its first call's outputs are checked against the float64 reference first.
class BesideBacktest {
 public:
  BesideBacktest(engine::InstanceSet& set, const Model& model, const EngineOptions& eo, uint64_t seed, double bound,
                 int sms)
      : bt_(set.beside_engine()), model_(model), eo_(eo), bound_(bound), sms_(sms) {
    const size_t I = size_t(model.config.input_size), O = size_t(model.config.output_size);
    bx_.resize(kSeries * kTicks * I);
    bz_.resize(kSeries * kTicks * O);
    for (size_t s = 0; s < kSeries; ++s)
      for (size_t t = 0; t < kTicks; ++t)
        tick_input(instance_seed(seed, -2) + s, (long long)t, std::span<float>(&bx_[(s * kTicks + t) * I], I));
  }

  void start() {
    bt_->backtest(bx_, kSeries, kTicks, bz_);  // once before the clock: its plan and buffers exist, and it is checked
    error_ = first_series_error();
    started_ = Clock::now();
    worker_ = std::thread([this] {
      try {
        while (!stop_.load()) {
          bt_->backtest(bx_, kSeries, kTicks, bz_);
          ++calls_;
        }
      } catch (const std::exception& e) {
        failure_ = e.what();
      }
    });
  }

  nlohmann::json stop() {
    stop_.store(true);
    worker_.join();
    const double s = us_between(started_, Clock::now()) * 1e-6;
    const double windows = double(calls_.load()) * double(kSeries * kTicks);
    return {{"series", kSeries},     {"ticks", kTicks},
            {"calls", calls_.load()}, {"seconds", s},
            {"windows_per_s", s > 0 ? windows / s : 0.0},
            {"sms", sms_},           {"error_normalized", error_},
            {"error_bound", bound_}, {"error", failure_}};
  }

  // Why the backtest beside does not pass; empty: it passes.
  std::string verdict() const {
    if (!failure_.empty()) return "the backtest beside failed: " + failure_;
    if (!(error_ >= 0 && error_ <= bound_)) return "the backtest beside exceeds the error bound";
    if (calls_.load() == 0) return "the backtest beside completed no call while the instances ran";
    return "";
  }
  double error() const { return error_; }

 private:
  static constexpr size_t kSeries = 64, kTicks = 512;

  // Series 0's first ticks against the float64 reference backend (the same backtest semantics, scaler
  // included).
  double first_series_error() const {
    EngineOptions ro = eo_;
    ro.backend = BackendKind::ref;
    ro.precision.reset();
    ro.gpu = GpuOptions{};  // cuda's own options: the reference has none
    ro.warm = false;
    Engine ref(model_, ro);
    const size_t I = size_t(model_.config.input_size), O = size_t(model_.config.output_size);
    const size_t Tc = std::min<size_t>(kTicks, 128);
    std::vector<double> zr(Tc * O);
    ref.backtest(std::span<const float>(bx_.data(), Tc * I), 1, Tc, std::span<double>(zr));
    double max_abs = 0, max_ref = 0;
    for (size_t k = 0; k < Tc * O; ++k) {
      max_abs = std::max(max_abs, std::abs(double(bz_[k]) - zr[k]));
      max_ref = std::max(max_ref, std::abs(zr[k]));
    }
    return max_abs / std::max(1.0, max_ref);
  }

  std::unique_ptr<Engine> bt_;
  const Model& model_;
  const EngineOptions& eo_;
  const double bound_;
  const int sms_;
  std::vector<float> bx_, bz_;
  std::atomic<bool> stop_{false};
  std::atomic<long long> calls_{0};
  std::string failure_;
  std::thread worker_;
  Clock::time_point started_;
  double error_ = -1;
};

// The benchmark in named parts: set up (the floor, then the instances), describe, measure each phase
// (drive, check, summarize), report.
class InstancesRun {
 public:
  InstancesRun(const BenchOptions& o, nlohmann::json& report, std::ostream& out)
      : o_(o), report_(report), out_(out), n_(*o.instances), model_(open_model(o.model, o.load)), cfg_(model_.config) {}

  // Why the run does not pass; empty: it passes.
  std::string run() {
    set_up();
    make_instances();
    describe();
    std::string failure;
    PhaseResult alone = phase(o_.beside_backtest ? "alone" : "instances", nullptr);
    phases_.push_back(alone.json);
    failure = alone.failure;
    if (o_.beside_backtest) {
      const std::string beside = phase_beside_backtest();
      if (failure.empty()) failure = beside;
    }
    report_["phases"] = phases_;
    report_["facts"] = nlohmann::json::object();
    for (auto& [k, v] : engines_[0]->backend().facts()) report_["facts"][k] = v;
    report_["seed"] = o_.seed;
    report_["check_every"] = o_.check_every;
    if (metrics_server_) {
      // What each instance's telemetry holds at the end (the scrape's numbers, for the report's reader).
      nlohmann::json per = nlohmann::json::array();
      for (Engine* e : engines_) {
        const telemetry::Snapshot sn = e->metrics_snapshot();
        per.push_back({{"answered", sn.answered}, {"lost", sn.lost}, {"count", sn.count}});
      }
      report_["metrics"]["per_instance"] = per;
      if (o_.metrics_hold_s > 0) {
        out_ << "metrics: serving the final counts for " << fmt(o_.metrics_hold_s) << " s" << std::endl;
        std::this_thread::sleep_for(std::chrono::duration<double>(o_.metrics_hold_s));
      }
    }
    return failure;
  }

 private:
  void set_up() {
    eo_ = o_.engine;
    eo_.cpuset.clear();  // --cpuset places the driver threads; the engines' own threads stay unpinned
    eo_.metrics = o_.metrics_port.has_value();
    bo_ = backend_options(model_, eo_);
    window_ = o_.engine.mode == Mode::window ? bo_.window : 1;
    io_.count = n_;
    io_.isolation = o_.isolation;
    io_.sms_each = o_.sms_per_instance;
    io_.placement = o_.placement;
    io_.beside = o_.beside_backtest;

    report_["kind"] = "instances";
    report_["model"] = model_json(model_, o_.engine.mode, window_);
    report_["mode"] = mode_name(o_.engine.mode);
    report_["instances"] = n_;

    // Drivers: one thread per instance where cores allow; past that a thread drives several in turn.
    all_cores_ = util::allowed_cores();
    driver_cores_ = o_.engine.cpuset.empty() ? all_cores_ : o_.engine.cpuset;
    threads_ = std::max(1, std::min<int>(n_, int(driver_cores_.size())));
    pinned_ = !o_.engine.cpuset.empty();

    // The instances: an InstanceSet on the GPU, or (tests) backends from the make_backend hook, which
    // share nothing to isolate (no ping-pong, no backtest beside them).
    hooked_ = bool(o_.make_backend);
    if (hooked_ && o_.beside_backtest) throw Error("--beside-backtest needs the GPU's instance set, not a test backend");
    if (!hooked_) {
      std::string why;
      if (!gpu::available(&why, eo_.gpu.device)) throw UnsupportedError("--instances: no usable CUDA device: " + why);
      for (auto& [k, v] : gpu::facts(eo_.gpu.device)) report_["machine"]["gpu"][k] = v;
      // The floor, in this process, before any instance exists (one thread, on the first driver core).
      if (!o_.skip_pingpong) {
        report_["pingpong"] = pingpong_json(o_.floats.value_or(cfg_.input_size), std::min<long long>(o_.ticks, 200000),
                                            std::min<long long>(o_.warmup, 10000), o_.engine.cpuset, &pp_);
        have_pp_ = true;
      }
    }
  }

  void make_instances() {
    const auto made = Clock::now();
    if (hooked_) {
      for (int k = 0; k < n_; ++k)
        engines_.push_back(
            hooked_engines_.emplace_back(std::make_unique<Engine>(model_, o_.make_backend(model_, bo_), eo_.metrics)).get());
      lay_.count = n_;
    } else {
      set_ = std::make_unique<engine::InstanceSet>(model_, eo_, io_);
      for (size_t k = 0; k < set_->size(); ++k) engines_.push_back(&(*set_)[k]);
      lay_ = set_->layout();
    }
    const double make_s = us_between(made, Clock::now()) * 1e-6;
    Backend& first = engines_[0]->backend();
    scaler_ = resolve_scaler(model_, bo_.scaler);
    report_["backend"] = first.name();
    report_["variant"] = first.variant();
    report_["precision"] = precision_name(first.precision());
    report_["scaler"] = scaler_name(scaler_);
    report_["isolation"] = {{"mechanism", mechanism()},        {"sms_per_instance", lay_.sms_each},
                            {"fine_split", lay_.fine},         {"split_granularity", lay_.granularity},
                            {"rest_sms", lay_.rest_sms},       {"device_sms", lay_.device_sms},
                            {"launch_sms", lay_.launch_sms},   {"placement", placement()},
                            {"setup_s", make_s}};
    report_["driving"] = {
        {"threads", threads_},
        {"pinned", pinned_},
        {"cores", pinned_ ? nlohmann::json(std::vector<int>(o_.engine.cpuset.begin(), o_.engine.cpuset.begin() + threads_))
                          : nlohmann::json(nullptr)},
        {"instances_per_thread_max", (n_ + threads_ - 1) / threads_},
        {"lockstep", o_.lockstep},
        {"how", "thread j drives instances j, j+T, ...: it sends each its tick in turn and waits "
                "for that tick's answer, then waits for each one's precompute; a tick is timed from "
                "the moment its thread sends it (after the previous instance's answer) to its "
                "answer being visible to the thread"}};
    if (eo_.precision && bound_is_per_model(*eo_.precision))
      throw Error("--instances checks against the precision's fixed bound; int8 needs the single-instance bench");
    bound_ = error_bound(first.precision());

    if (o_.metrics_port) {
      // Every instance's telemetry on one server, labelled by its index (docs/production.md, "Telemetry").
      metrics_server_.emplace(o_.metrics_host + ":" + std::to_string(*o_.metrics_port));
      for (size_t k = 0; k < engines_.size(); ++k) metrics_server_->add(engines_[k]->metrics(), {{"engine", std::to_string(k)}});
      report_["metrics"] = {{"url", metrics_server_->url()}, {"port", metrics_server_->port()}};
      out_ << "metrics: " << metrics_server_->url() << " (" << engines_.size() << " instances, label engine=0.."
           << engines_.size() - 1 << ")" << std::endl;
    }
    runs_.resize(static_cast<size_t>(n_));
    for (int k = 0; k < n_; ++k) {
      runs_[size_t(k)].engine = engines_[size_t(k)];
      runs_[size_t(k)].backend = &engines_[size_t(k)]->backend();
      runs_[size_t(k)].seed = instance_seed(o_.seed, k);
    }
    // Float64 checker threads per instance (they run after the timed part, on every core); the outputs'
    // readers are laid out for them (streaming: one reader, its steps split over the threads).
    check_threads_ = o_.check_threads > 0 ? o_.check_threads : std::max(1, int(all_cores_.size()) / n_);
    check_readers_ = Checker::threads_for(o_.engine.mode, check_threads_);
  }

  // The layout's words for reports: the isolation's and the placement's names (none for test backends).
  std::string mechanism() const { return hooked_ ? "none (test backends)" : util::name_of(lay_.isolation); }
  std::string placement() const { return lay_.placement ? util::name_of(*lay_.placement) : ""; }

  void describe() {
    out_ << "hotpath bench: " << n_ << " instances of " << model_.name << " | " << engines_[0]->backend().variant() << " | "
         << mechanism() << ": " << lay_.sms_each << " SMs each" << (lay_.fine ? " (fine split)" : "")
         << (lay_.launch_sms > 0 ? ", one launch on " + std::to_string(lay_.launch_sms) + " SMs (placed by " + placement() + ")" : "")
         << (lay_.rest_sms > 0 ? ", " + std::to_string(lay_.rest_sms) + " SMs beside" : "") << " | " << threads_
         << " driver threads" << (pinned_ ? " (pinned)" : "") << (o_.lockstep ? " | lockstep" : "") << "\n";
    if (have_pp_) out_ << "ping-pong p50 " << fmt(pp_.p50) << " p99 " << fmt(pp_.p99) << " us (same process, before the instances)\n";
  }

  // One phase: warm-up then `ticks` measured ticks per instance (or `seconds`), every instance checked;
  // `beside` (when given) runs while the instances are timed.
  PhaseResult phase(const std::string& name, BesideBacktest* beside) {
    restart_runs();
    if (beside) beside->start();
    const double elapsed_s = drive_all();
    const nlohmann::json beside_json = beside ? beside->stop() : nlohmann::json(nullptr);
    const auto [totals, check_s] = check_all();
    PhaseResult res = summarize(name, elapsed_s, totals, check_s);
    if (!beside_json.is_null()) res.json["beside"] = beside_json;
    return res;
  }

  // Each phase starts every instance afresh (tick 0, zero state): the checker counts from tick 0.
  void restart_runs() {
    for (auto& r : runs_) {
      if (r.next_tick > 0) r.backend->reset();
      r.next_tick = 0;
      r.lat.clear();
      r.pre.clear();
      r.lost = r.failures = 0;
      r.last_failure.clear();
      r.outs = std::make_unique<CheckedOutputs>(cfg_.output_size, check_readers_, o_.engine.mode == Mode::window);
      r.no_intervals = std::make_unique<IntervalStarts>(0);
      r.checker = std::make_unique<Checker>(model_, o_.engine.mode, window_, r.seed, o_.check_every, *r.outs, *r.no_intervals, scaler_);
      r.checker->set_bound(bound_);
      r.lat.reserve(size_t(o_.seconds ? 1 << 18 : o_.ticks));
      r.pre.reserve(size_t(o_.seconds ? 1 << 18 : o_.ticks));
    }
    thread_errors_.assign(static_cast<size_t>(threads_), std::string());
  }

  // The driver threads, from the common start line to the end of the measured ticks; the measured seconds.
  double drive_all() {
    Drive d(threads_);
    std::vector<std::thread> pool;
    for (int j = 0; j < threads_; ++j) pool.emplace_back([this, &d, j] { drive(d, j); });
    for (auto& t : pool) t.join();
    const auto end = Clock::now();
    return d.start == Clock::time_point{} ? 0 : us_between(d.start, end) * 1e-6;
  }

  // What the driver threads share in a phase.
  struct Drive {
    explicit Drive(int threads) : barrier(threads) {}
    SpinBarrier barrier;
    std::atomic<bool> stop{false};
    std::atomic<int> measuring{0};
    Clock::time_point start{};
  };

  // Thread j: its instances' ticks in turn, then each one's precompute, round after round.
  void drive(Drive& d, int j) {
    if (pinned_) util::pin_thread(pthread_self(), {driver_cores_[size_t(j)]}, "instance driver thread");
    std::vector<InstanceRun*> mine;
    for (int k = j; k < n_; k += threads_) mine.push_back(&runs_[size_t(k)]);
    std::vector<float> x(size_t(cfg_.input_size)), z(size_t(cfg_.output_size));
    std::vector<char> answered(mine.size());
    const auto gap = std::chrono::nanoseconds(llround(o_.gap_us * 1000));
    const long long warm = o_.warmup;
    const auto seconds = o_.seconds ? std::chrono::duration<double>(*o_.seconds) : std::chrono::duration<double>(0);
    try {
      for (long long i = 0;; ++i) {
        const bool measured = i >= warm;
        if (i == warm) {
          // Every thread starts measuring together; the clock of --seconds starts once all have.
          if (d.measuring.fetch_add(1) + 1 == threads_) d.start = Clock::now();
          while (d.measuring.load() < threads_) {
          }
        }
        if (measured && o_.seconds) {
          if (d.stop.load(std::memory_order_relaxed)) break;
          if (j == 0 && Clock::now() - d.start >= seconds) {
            d.stop.store(true);
            d.barrier.break_all();  // lockstep: nobody waits for thread 0's next round
            break;
          }
        } else if (measured && i - warm >= o_.ticks) {
          break;
        }
        if (o_.lockstep) d.barrier.arrive_and_wait();
        if (gap.count() > 0) {
          const auto until = Clock::now() + gap;
          while (Clock::now() < until) {
          }
        }
        for (size_t m = 0; m < mine.size(); ++m) answered[m] = tick(*mine[m], measured, x, z);
        for (size_t m = 0; m < mine.size(); ++m) wait_precompute(*mine[m], measured && answered[m]);
      }
    } catch (const std::exception& e) {
      thread_errors_[size_t(j)] = e.what();
      d.stop.store(true);
      d.barrier.break_all();
      d.measuring.fetch_add(threads_);  // nobody waits for this thread at the start line
    }
  }

  // One instance's next tick: sent, timed, filed for the checker. False when it got no answer.
  bool tick(InstanceRun& r, bool measured, std::vector<float>& x, std::vector<float>& z) {
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
    if (measured && ok) r.lat.push_back(us_between(due, got));
    if (measured) {
      if (ok) r.engine->record_answered(std::chrono::duration_cast<std::chrono::nanoseconds>(got - due).count());
      else r.engine->record_lost();
    }
    if (t % o_.check_every == 0) {
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
    return ok;
  }

  void wait_precompute(InstanceRun& r, bool timed) {
    const auto a = Clock::now();
    try {
      r.backend->finish_precompute();
      if (timed) r.pre.push_back(us_between(a, Clock::now()));
    } catch (const Error& e) {
      ++r.failures;
      r.last_failure = e.what();
    }
    if (r.failures >= kMaxFailuresInRow)
      throw Error("an instance failed " + std::to_string(r.failures) + " ticks; the last: " + r.last_failure);
  }

  // The float64 check, after the timed threads are done (off the clock), on every core; its progress
  // over every instance on a terminal. Each instance's totals, and the seconds it took.
  std::pair<std::vector<CheckTotals>, double> check_all() {
    std::atomic<size_t> filed{0};
    size_t published = 0;
    for (auto& r : runs_) {
      r.checker->also_count_into(&filed);
      published += r.outs->published();
    }
    const auto check_start = Clock::now();
    std::vector<CheckTotals> totals;
    {
      std::optional<util::ProgressBar> bar;
      if (util::progress_wanted(o_.progress))
        bar.emplace(filed, published, stderr,
                    util::ProgressBar::Options{o_.progress == util::ProgressMode::on ? 0.0 : 2.0, 0.25, "checks"});
      for (auto& r : runs_) r.checker->start(check_threads_, all_cores_, /*all_published=*/true);
      for (auto& r : runs_) totals.push_back(r.checker->finish());
    }
    return {std::move(totals), us_between(check_start, Clock::now()) * 1e-6};
  }

  // Each instance's figures and verdict, the phase's over all ticks, and its lines of the table.
  PhaseResult summarize(const std::string& name, double elapsed_s, const std::vector<CheckTotals>& totals, double check_s) {
    PhaseResult res;
    nlohmann::json per_instance = nlohmann::json::array();
    std::vector<double> all_lat, all_pre;
    double worst_p99 = 0, best_p99 = INFINITY, worst_err = 0;
    int worst_k = -1;
    for (int k = 0; k < n_; ++k) {
      InstanceRun& r = runs_[size_t(k)];
      const CheckResult& c = totals[size_t(k)].all;
      const long long due = (r.next_tick + o_.check_every - 1) / o_.check_every;
      const long long unchecked = due - c.checked - c.lost;
      const Summary ls = bench::summarize(r.lat), ps = bench::summarize(r.pre);
      all_lat.insert(all_lat.end(), r.lat.begin(), r.lat.end());
      all_pre.insert(all_pre.end(), r.pre.begin(), r.pre.end());
      if (ls.count > 0 && ls.p99 > worst_p99) {
        worst_p99 = ls.p99;
        worst_k = k;
      }
      if (ls.count > 0) best_p99 = std::min(best_p99, ls.p99);
      const double err = c.normalized();
      worst_err = std::max(worst_err, err);
      const bool pass = c.checked > 0 && err <= bound_ && r.lost == 0 && r.failures == 0 && unchecked == 0 && ls.count > 0;
      per_instance.push_back({{"index", k},
                              {"seed", r.seed},
                              {"latency_us", to_json(ls)},
                              {"precompute_us", to_json(ps)},
                              {"tick_rate_hz", elapsed_s > 0 ? double(ls.count) / elapsed_s : 0.0},
                              {"lost_ticks", r.lost},
                              {"backend_errors", r.failures},
                              {"last_backend_error", r.last_failure},
                              {"error", {{"max_abs", c.max_abs}, {"normalized", err}, {"bound", bound_},
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
    for (const auto& e : thread_errors_)
      if (res.failure.empty() && !e.empty()) res.failure = "a driver thread stopped: " + e;
    const Summary all = bench::summarize(all_lat), allp = bench::summarize(all_pre);
    res.json = {{"phase", name},
                {"ticks_per_instance", o_.seconds ? nlohmann::json(nullptr) : nlohmann::json(o_.ticks)},
                {"elapsed_s", elapsed_s},
                {"latency_us", to_json(all)},
                {"precompute_us", to_json(allp)},
                {"worst_instance_p99_us", worst_p99},
                {"worst_instance", worst_k},
                {"best_instance_p99_us", std::isfinite(best_p99) ? best_p99 : 0.0},
                {"tick_rate_hz_all", elapsed_s > 0 ? double(all.count) / elapsed_s : 0.0},
                {"error_normalized_max", worst_err},
                {"checker", {{"reference", !totals.empty() && totals[0].timing.chunks > 0 ? "chunks"
                                           : o_.engine.mode == Mode::streaming            ? "split"
                                                                                          : "per_window"},
                             {"threads_per_instance", totals.empty() ? 0 : totals[0].timing.threads},
                             {"seconds", check_s}}},
                {"per_instance", per_instance},
                {"pass", res.failure.empty()},
                {"failure", res.failure}};
    print_header(out_, name + " (us)");
    print_row(out_, "  all ticks", all);
    out_ << "  worst instance p99 " << fmt(worst_p99) << " us (instance " << worst_k << "), best "
         << fmt(res.json["best_instance_p99_us"].get<double>()) << "; precompute p50 " << fmt(allp.p50)
         << " us; worst error " << std::scientific << std::setprecision(3) << worst_err << std::defaultfloat
         << " (bound " << bound_ << ")\n";
    out_ << "  float64 check after the timed part: " << fmt(check_s) << " s, "
         << (totals.empty() ? 0 : totals[0].timing.threads) << " threads per instance"
         << (o_.engine.mode == Mode::streaming ? " (each step split by hidden units)" : "") << "\n";
    return res;
  }

  // --beside-backtest's second phase: the instances measured again beside the backtest; the verdict of both.
  std::string phase_beside_backtest() {
    BesideBacktest bt(*set_, model_, eo_, o_.seed, bound_, lay_.rest_sms);
    PhaseResult r = phase("beside", &bt);
    const nlohmann::json& b = r.json["beside"];
    out_ << "  backtest beside: " << b["calls"] << " calls, " << fmt(b["windows_per_s"].get<double>() * 1e-6)
         << " M windows/s on " << lay_.rest_sms << " SMs, error " << std::scientific << std::setprecision(3) << bt.error()
         << std::defaultfloat << "\n";
    std::string failure = r.failure;
    if (failure.empty()) failure = bt.verdict();
    const double alone = phases_[0]["worst_instance_p99_us"].get<double>(), with = r.json["worst_instance_p99_us"].get<double>();
    const double alone_all = phases_[0]["latency_us"]["p99"].get<double>(), with_all = r.json["latency_us"]["p99"].get<double>();
    out_ << "  p99 of all ticks: " << fmt(alone_all) << " us alone, " << fmt(with_all) << " us beside the backtest ("
         << std::showpos << fmt(100 * (with_all / alone_all - 1)) << std::noshowpos << "%); worst instance "
         << fmt(alone) << " -> " << fmt(with) << " us\n";
    phases_.push_back(r.json);
    return failure;
  }

  const BenchOptions& o_;
  nlohmann::json& report_;
  std::ostream& out_;
  const int n_;
  const Model model_;
  const ModelConfig& cfg_;
  EngineOptions eo_;
  BackendOptions bo_;
  engine::InstanceOptions io_;
  int window_ = 1;
  std::vector<int> all_cores_, driver_cores_;
  int threads_ = 1;
  bool pinned_ = false, hooked_ = false, have_pp_ = false;
  Summary pp_;
  std::unique_ptr<engine::InstanceSet> set_;
  std::vector<std::unique_ptr<Engine>> hooked_engines_;
  std::vector<Engine*> engines_;
  engine::InstanceLayout lay_;
  std::optional<telemetry::MetricsServer> metrics_server_;  // declared after the engines: stopped first
  ScalerChoice scaler_{};
  double bound_ = 0;
  std::vector<InstanceRun> runs_;
  int check_threads_ = 1, check_readers_ = 1;
  std::vector<std::string> thread_errors_;
  std::vector<nlohmann::json> phases_;
};

}  // namespace

nlohmann::json run_instances_bench(const BenchOptions& o, std::ostream& out) {
  nlohmann::json report = start_report(o);
  if (o.pingpong) throw Error("--instances measures model instances: drop --pingpong");
  if (o.report_every_s || o.idle_s > 0 || !o.samples_path.empty())
    throw Error("--report-every, --idle-every-s/--idle-s and --samples are for one instance, not --instances");
  if (o.engine.fallback != Fallback::none) throw Error("--fallback is not available with --instances");
  if (o.check_on == CheckOn::gpu)
    throw Error("--check-on gpu is for one engine's run: --instances checks on the host's cores, beside the GPU's instances");
  if (o.model.empty()) throw Error("--model is required (a file or a zoo name; `hotpath models` lists the zoo)");
  const std::string failure = InstancesRun(o, report, out).run();
  finish_report(report, failure, out, o.json_path);
  return report;
}

}  // namespace hotpath::bench
