#include "bench/latency_bench.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/device.hpp"
#endif

namespace hotpath::bench {
namespace {

using Clock = std::chrono::steady_clock;
double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Outputs of the checked ticks, appended by the timed loop and read by the checker threads while the
// loop runs. Storage comes in fixed blocks whose pointers are reserved up front, so readers never see a
// reallocation; `published` says how many records are complete.
class CheckedOutputs {
 public:
  explicit CheckedOutputs(int outputs) : outputs_(outputs) { blocks_.resize(kMaxBlocks); }
  // Called by the timed loop between ticks (never inside the timed region).
  double* next_slot() {
    const size_t n = count_;
    if (n / kBlock >= kMaxBlocks) return nullptr;  // beyond ~1e11 records: stop recording
    auto& block = blocks_[n / kBlock];
    if (!block) block = std::make_unique<double[]>(kBlock * size_t(outputs_));
    return block.get() + (n % kBlock) * size_t(outputs_);
  }
  void publish() { published_.store(++count_, std::memory_order_release); }
  size_t published() const { return published_.load(std::memory_order_acquire); }
  const double* record(size_t k) const { return blocks_[k / kBlock].get() + (k % kBlock) * size_t(outputs_); }

 private:
  static constexpr size_t kBlock = 1 << 16, kMaxBlocks = 1 << 20;
  int outputs_;
  size_t count_ = 0;
  std::vector<std::unique_ptr<double[]>> blocks_;
  std::atomic<size_t> published_{0};
};

struct CheckResult {
  double max_abs = 0, max_ref = 0;
  long long checked = 0;
  long long over_bound = 0;   // checked ticks whose own error exceeds the bound
  long long worst_tick = -1;  // tick of max_abs
};

// Float64 check of every `every`-th tick (tick t is checked when t % every == 0). Window mode recomputes
// each checked window from zero state (W steps); streaming advances one float64 state through every
// tick. Threads split the checked ticks (window) or there is one (streaming).
class Checker {
 public:
  Checker(const Model& model, Mode mode, int window, uint64_t seed, int every, const CheckedOutputs& outs,
          int threads, const std::vector<int>& cores, double bound)
      : f64_(model), mode_(mode), window_(window), seed_(seed), every_(every), bound_(bound), outs_(outs) {
    const int n = mode == Mode::streaming ? 1 : std::max(1, threads);
    results_.resize(n);
    for (int k = 0; k < n; ++k)
      threads_.emplace_back([this, k, n, cores] {
        try {
          if (!cores.empty()) set_thread_cores(cores);
        } catch (const Error&) {  // not fatal: the check still runs, only less politely placed
        }
        run(k, n);
      });
  }
  // An error mid-run must not leave running threads behind (std::terminate).
  ~Checker() { stop(); }
  // Call once the timed loop is done: checks what was published, then joins.
  CheckResult finish() {
    stop();
    CheckResult r;
    for (const auto& p : results_) {
      if (p.max_abs > r.max_abs || r.worst_tick < 0) {
        r.max_abs = p.max_abs;
        r.worst_tick = p.worst_tick;
      }
      r.max_ref = std::max(r.max_ref, p.max_ref);
      r.checked += p.checked;
      r.over_bound += p.over_bound;
    }
    return r;
  }

 private:
  void stop() {
    done_.store(true, std::memory_order_release);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  // Waits for record k; false when the loop ended without producing it.
  bool wait_for(size_t k) {
    while (outs_.published() <= k) {
      if (done_.load(std::memory_order_acquire) && outs_.published() <= k) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
  void compare(const double* z, std::span<const double> ref, long long tick, CheckResult& r) {
    double tick_abs = 0, tick_ref = 0;
    for (size_t o = 0; o < ref.size(); ++o) {
      const double d = std::abs(z[o] - ref[o]);
      tick_abs = std::isnan(d) ? INFINITY : std::max(tick_abs, d);
      tick_ref = std::max(tick_ref, std::abs(ref[o]));
    }
    if (tick_abs > r.max_abs || r.worst_tick < 0) {
      r.max_abs = tick_abs;
      r.worst_tick = tick;
    }
    r.max_ref = std::max(r.max_ref, tick_ref);
    if (tick_abs / std::max(1.0, tick_ref) > bound_) ++r.over_bound;
    ++r.checked;
  }
  void run(int id, int n) {
    const auto& cfg = f64_.config();
    reference::LstmState state(cfg);
    std::vector<float> x(cfg.input_size);
    std::vector<double> z(cfg.output_size);
    CheckResult& r = results_[id];
    if (mode_ == Mode::streaming) {
      for (size_t k = 0;; ++k) {
        if (!wait_for(k)) return;
        const long long last = (long long)(k) * every_;
        for (long long t = (k == 0 ? 0 : last - every_ + 1); t <= last; ++t) {
          tick_input(seed_, t, x);
          f64_.step(x, state);
        }
        f64_.head(state, z);
        compare(outs_.record(k), z, last, r);
      }
    }
    for (size_t k = id;; k += n) {
      if (!wait_for(k)) return;
      const long long t = (long long)(k) * every_;
      state.clear();
      for (long long s = std::max(0LL, t - window_ + 1); s <= t; ++s) {
        tick_input(seed_, s, x);
        f64_.step(x, state);
      }
      f64_.head(state, z);
      compare(outs_.record(k), z, t, r);
    }
  }

  reference::FastF64 f64_;
  Mode mode_;
  long long window_;
  uint64_t seed_;
  long long every_;
  double bound_;
  const CheckedOutputs& outs_;
  std::atomic<bool> done_{false};
  std::vector<CheckResult> results_;
  std::vector<std::thread> threads_;
};

void validate(const BenchOptions& o) {
  if (o.ticks < 1) throw Error("--ticks must be at least 1");
  if (o.seconds && !(*o.seconds > 0 && *o.seconds < 1e6)) throw Error("--seconds must be a positive number");
  if (o.warmup < 0) throw Error("--warmup must be >= 0");
  if (!(o.gap_us >= 0 && o.gap_us < 1e9)) throw Error("--gap-us must be >= 0");
  if (o.rate_hz && !(*o.rate_hz > 0 && *o.rate_hz <= 1e8)) throw Error("--rate must be a positive tick rate in Hz");
  if (o.rate_hz && o.gap_us > 0) throw Error("--rate and --gap-us exclude each other");
  if (o.check_every < 1) throw Error("--check-every must be at least 1");
  if (o.check_threads < 0 || o.check_threads > 256) throw Error("--check-threads must be between 1 and 256");
  if (o.mode == Mode::batch) throw Error("hotpath bench measures tick latency: --mode must be window or streaming");
  if (o.floats && (*o.floats < 1 || *o.floats > 1 << 16)) throw Error("--floats must be between 1 and 65536");
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

void print_row(std::ostream& out, const std::string& what, const Summary& s) {
  out << std::left << std::setw(22) << what << std::right;
  for (double v : {s.p50, s.p90, s.p99, s.p999, s.max, s.mean}) out << std::setw(10) << fmt(v);
  out << std::setw(10) << s.count << "\n";
}

void print_header(std::ostream& out) {
  out << std::left << std::setw(22) << "(microseconds)" << std::right;
  for (const char* h : {"p50", "p90", "p99", "p99.9", "max", "mean", "count"}) out << std::setw(10) << h;
  out << "\n";
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write '" + path + "'");
  f << text;
  if (!f.flush()) throw Error("cannot write '" + path + "'");
}

#ifdef HOTPATH_HAVE_CUDA
nlohmann::json pingpong_json(int floats, long long count, long long warmup, const std::vector<int>& cpuset,
                             Summary* summary) {
  cuda::PingPongOptions p;
  p.floats = floats;
  p.count = count;
  p.warmup = warmup;
  p.cpu = cpuset.empty() ? -1 : cpuset.front();
  *summary = summarize(cuda::pingpong_us(p));
  return {{"floats", floats}, {"path", cuda::pingpong_path_name(p)}, {"latency_us", to_json(*summary)}};
}
#endif

}  // namespace

void tick_input(uint64_t seed, long long t, std::span<float> x) {
  // Box-Muller on a counter-based generator: any tick's input can be regenerated on any thread.
  const uint64_t base = splitmix64(seed ^ 0xA5A5A5A5ull) + uint64_t(t) * 0x100000001B3ull;
  for (size_t k = 0; k < x.size(); k += 2) {
    const uint64_t a = splitmix64(base + k), b = splitmix64(base + k + 1 + (uint64_t(1) << 40));
    const double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(b >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    x[k] = float(r * std::cos(2 * M_PI * u2));
    if (k + 1 < x.size()) x[k + 1] = float(r * std::sin(2 * M_PI * u2));
  }
}

bool report_passed(const nlohmann::json& report) {
  if (!report.contains("error") || report["error"]["checked_ticks"].get<long long>() == 0) return true;
  return report["error"]["pass"].get<bool>();
}

nlohmann::json run_bench(const BenchOptions& o, std::ostream& out) {
  validate(o);
  nlohmann::json report = {{"schema_version", kSchemaVersion},
                           {"hotpath_version", git_version()},
                           {"date", utc_now()},
                           {"command", o.command_line},
                           {"machine", machine_json(o.cpuset)}};

  if (o.pingpong) {
#ifdef HOTPATH_HAVE_CUDA
    std::string why;
    if (!cuda::device_available(&why)) throw UnsupportedError("no usable CUDA device: " + why);
    for (auto& [k, v] : cuda::device_facts()) report["machine"]["gpu"][k] = v;
    if (!o.cpuset.empty()) pin_current_thread(o.cpuset.front());
    Summary s;
    report["kind"] = "pingpong";
    report["pingpong"] = pingpong_json(o.floats.value_or(32), o.seconds ? 200000 : o.ticks, o.warmup, o.cpuset, &s);
    print_header(out);
    print_row(out, "ping-pong " + std::to_string(o.floats.value_or(32)) + " floats", s);
#else
    throw UnsupportedError("--pingpong needs CUDA: this hotpath was built without CUDA (no usable CUDA device)");
#endif
  } else {
    if (o.model.empty()) throw Error("--model is required (a file or a zoo name; `hotpath models` lists the zoo)");
    const Model model = resolve_model(o.model, o.load);
    const ModelConfig& cfg = model.config;
    BackendOptions bo;
    bo.mode = o.mode;
    bo.precision = o.precision;
    bo.cpuset = o.cpuset;
    bo.timeout_us = o.timeout_us;
    bo.fallback = o.fallback;
    bo.variant = o.variant;
    const int window = o.mode == Mode::window ? o.window.value_or(cfg.window.value_or(0)) : 1;
    if (o.mode == Mode::window && window < 1)
      throw Error("window mode needs --window: the model '" + model.name + "' carries no window in its metadata");
    bo.window = window;

    report["kind"] = "latency";
    report["model"] = {{"name", model.name},           {"input_size", cfg.input_size},
                       {"hidden_size", cfg.hidden_size}, {"num_layers", cfg.num_layers},
                       {"output_size", cfg.output_size}, {"window", o.mode == Mode::window ? window : 0},
                       {"parameters", cfg.parameter_count()}, {"dtype", dtype_name(model.dtype)}};
    report["mode"] = mode_name(o.mode);
    report["instances"] = 1;

    // "auto": the GPU when one is usable and the model fits its kernel, else the CPU.
    std::string backend_name = o.backend;
    if (backend_name == "auto") {
      backend_name = "cpu";
#ifdef HOTPATH_HAVE_CUDA
      if (cuda::device_available()) {
        try {
          make_backend("cuda", model, bo);  // probe only: the ping-pong below must run alone on the GPU
          backend_name = "cuda";
        } catch (const UnsupportedError& e) {
          out << "auto backend: cuda unavailable for this model (" << e.what() << "), using cpu\n";
        }
      }
#endif
    }

    // Threads the backend starts (a heartbeat, workers) inherit the creating thread's cores: create
    // the backend, and the checker, with the process's cores, and pin the timed thread afterwards.
    const std::vector<int> all_cores = thread_cores();
    for (int c : o.cpuset)
      if (std::find(all_cores.begin(), all_cores.end(), c) == all_cores.end())
        throw Error("--cpuset names cpu " + std::to_string(c) + ", which this process may not use (allowed: " +
                    std::to_string(all_cores.size()) + " cpus)");
    std::vector<int> spare_cores;  // cores outside the cpuset, for the checker
    for (int c : all_cores)
      if (std::find(o.cpuset.begin(), o.cpuset.end(), c) == o.cpuset.end()) spare_cores.push_back(c);
    if (spare_cores.empty()) spare_cores = all_cores;

    Summary pp;
    bool have_pp = false;
    if (backend_name == "cuda") {
#ifdef HOTPATH_HAVE_CUDA
      std::string why;
      if (!cuda::device_available(&why)) throw UnsupportedError("backend cuda: no usable CUDA device: " + why);
      for (auto& [k, v] : cuda::device_facts()) report["machine"]["gpu"][k] = v;
      if (!o.skip_pingpong) {
        if (!o.cpuset.empty()) pin_current_thread(o.cpuset.front());
        report["pingpong"] = pingpong_json(o.floats.value_or(cfg.input_size), o.seconds ? 200000 : o.ticks,
                                           o.warmup, o.cpuset, &pp);
        have_pp = true;
        set_thread_cores(all_cores);
      }
#else
      throw UnsupportedError("backend cuda: this hotpath was built without CUDA (no usable CUDA device)");
#endif
    }

    auto backend = make_backend(backend_name, model, bo);
    report["backend"] = backend->name();
    report["variant"] = backend->variant();
    report["precision"] = precision_name(backend->precision());

    // Checker threads go on cores outside the cpuset where there are any.
    const int spare = std::max(1, int(spare_cores.size()) - 1);
    const int check_threads = o.check_threads > 0 ? o.check_threads : std::min(spare, 8);
    CheckedOutputs outs(cfg.output_size);
    Checker checker(model, o.mode, window, o.seed, o.check_every, outs, check_threads, spare_cores,
                    error_bound(backend->precision()));
    if (!o.cpuset.empty()) pin_current_thread(o.cpuset.front());

    std::vector<float> x(cfg.input_size), z(cfg.output_size);
    std::vector<double> lat, pre;
    const long long planned = o.seconds ? 0 : o.ticks;
    lat.reserve(o.seconds ? 1 << 20 : planned);
    pre.reserve(o.seconds ? 1 << 20 : planned);
    long long late = 0;
    double max_late_us = 0;
    Clock::time_point start{}, end{};
    const auto gap = std::chrono::nanoseconds(llround(o.gap_us * 1000));
    const long long total_cap = o.seconds ? (1LL << 62) : o.warmup + o.ticks;
    const double period_ns = o.rate_hz ? 1e9 / *o.rate_hz : 0;
    long long t = 0;
    for (; t < total_cap; ++t) {
      const bool measured = t >= o.warmup;
      tick_input(o.seed, t, x);  // off the clock: the tick is due once its values exist
      Clock::time_point due;
      if (t == o.warmup) start = Clock::now();
      if (o.rate_hz) {
        const long long i = measured ? t - o.warmup : 0;
        due = measured ? start + std::chrono::nanoseconds(llround(period_ns * double(i))) : Clock::now();
        Clock::time_point now;
        while ((now = Clock::now()) < due) {
        }
        const double late_us = us_between(due, now);
        if (measured && late_us > 1.0) {
          ++late;
          max_late_us = std::max(max_late_us, late_us);
        }
      } else {
        if (gap.count() > 0) {
          const auto until = Clock::now() + gap;
          while (Clock::now() < until) {
          }
        }
        due = Clock::now();
      }
      backend->step(x, z);
      const auto answered = Clock::now();
      backend->finish_precompute();
      const auto ready = Clock::now();
      if (measured) {
        lat.push_back(us_between(due, answered));
        pre.push_back(us_between(answered, ready));
      }
      if (t % o.check_every == 0) {
        if (double* slot = outs.next_slot()) {
          const auto exact = backend->last_output_f64();  // ref: unrounded float64 outputs
          if (exact.empty()) std::copy(z.begin(), z.end(), slot);
          else std::copy(exact.begin(), exact.end(), slot);
          outs.publish();
        }
      }
      if (o.seconds && measured && (t - o.warmup) % 1024 == 0 && us_between(start, Clock::now()) >= *o.seconds * 1e6) {
        ++t;
        break;
      }
    }
    end = Clock::now();
    const CheckResult check = checker.finish();

    const Summary ls = summarize(lat), ps = summarize(pre);
    const double elapsed_s = us_between(start, end) * 1e-6;
    const double normalized = check.max_abs / std::max(1.0, check.max_ref);
    const double bound = error_bound(backend->precision());
    report["count"] = ls.count;
    report["warmup"] = o.warmup;
    report["latency_us"] = to_json(ls);
    report["precompute_us"] = to_json(ps);
    report["tick_rate_hz"] = elapsed_s > 0 ? double(ls.count) / elapsed_s : 0.0;
    report["pacing"] = {{"gap_us", o.gap_us},
                        {"rate_hz", o.rate_hz ? nlohmann::json(*o.rate_hz) : nlohmann::json(nullptr)},
                        {"late_ticks", late},
                        {"max_late_us", max_late_us}};
    report["error"] = {{"max_abs", check.max_abs},  {"normalized", normalized},
                       {"bound", bound},            {"pass", normalized <= bound},
                       {"checked_ticks", check.checked}, {"check_every", o.check_every},
                       {"ticks_over_bound", check.over_bound}, {"worst_tick", check.worst_tick}};
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
    if (have_pp) print_row(out, "ping-pong " + std::to_string(o.floats.value_or(cfg.input_size)) + " floats", pp);
    out << "tick rate " << fmt(report["tick_rate_hz"].get<double>()) << " Hz";
    if (o.rate_hz) out << " (asked " << fmt(*o.rate_hz) << " Hz; " << late << " ticks sent late, max " << fmt(max_late_us) << " us)";
    out << "\nerror vs float64 reference: max abs " << std::scientific << std::setprecision(3) << check.max_abs
        << ", normalized " << normalized << " (bound " << bound << ") over " << check.checked << " checked ticks "
        << (normalized <= bound ? "PASS" : "FAIL") << std::defaultfloat << "\n";
    if (check.over_bound > 0)
      out << check.over_bound << " checked ticks over the bound; the worst is tick " << check.worst_tick << "\n";
    for (auto& [k, v] : backend->counters()) out << k << ": " << v << "\n";

    if (!o.samples_path.empty()) {
      std::ostringstream s;
      s << "latency_us,precompute_us\n";
      for (size_t k = 0; k < lat.size(); ++k) s << lat[k] << "," << pre[k] << "\n";
      write_text(o.samples_path, s.str());
    }
  }
  if (!o.json_path.empty()) write_text(o.json_path, report.dump(2) + "\n");
  return report;
}

}  // namespace hotpath::bench
