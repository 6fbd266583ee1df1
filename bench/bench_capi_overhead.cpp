// What the C ABI adds to a tick: hotpath_engine_step (include/hotpath/hotpath.h) against the C++
// Engine::step it wraps, on ONE engine, in one run. Calls alternate tick by tick (C++ then C, then C then
// C++, ...) so drift and cache state hit both alike; each call is timed alone with the TSC (lfence'd
// rdtsc/rdtscp, the same pair in both, so its cost cancels in the difference).
//
// Two workloads:
//   model    the model and options given (default lstm_s, window mode, cpu backend): the real tick,
//            critical step and precompute, where 50 ns is small against the tick and the noise
//   no-op    an engine whose backend does nothing: the call overhead alone, without the noise of a real
//            tick (each sample the mean of 100 calls in a row: one call is below the TSC's resolution)
// and, with --shared (default: the libhotpath.so this tree built), the C call through the shared
// library as a consumer makes it (dlopen'd: an indirect call like the PLT's), on its own engine with the
// same options, interleaved with the other two.
//
//   bench_capi_overhead [--model lstm_s] [--backend cpu] [--precision fp32] [--mode window] [--window W]
//                       [--cpuset LIST] [--ticks 5000] [--warmup 500] [--pin CORE] [--shared PATH|none]
//                       [--json FILE]
#include <CLI/CLI.hpp>
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "capi/handles.hpp"
#include "engine/engine.hpp"
#include "tsc.hpp"
#include "hotpath/hotpath.h"
#include "util/error.hpp"
#include "util/stats.hpp"
#include "util/threads.hpp"

using namespace hotpath;

namespace {

using bench::calibrate_tsc_per_ns;
using bench::tsc_begin;
using bench::tsc_end;

struct Summary {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};
Summary summarize(const std::vector<double>& ns) {
  const util::Summary u = util::summarize(ns, util::Percentile::nearest_rank);  // as `hotpath bench`
  Summary s{u.p50, u.p90, u.p99, 0};
  for (double x : ns) s.mean += x / double(ns.size());  // x / n summed, as before (util's mean divides the sum)
  return s;
}
nlohmann::json to_json(const Summary& s) { return {{"p50_ns", s.p50}, {"p90_ns", s.p90}, {"p99_ns", s.p99}, {"mean_ns", s.mean}}; }

// The engine's call overhead alone: a backend that answers zeros.
class NoopBackend : public Backend {
 public:
  explicit NoopBackend(const ModelConfig& config) : Backend(config, options()) {}
  std::string name() const override { return "noop"; }
  std::string variant() const override { return "noop"; }
  Precision precision() const override { return Precision::fp32; }
  void step(std::span<const float>, std::span<float> out) override {
    for (float& z : out) z = 0;
    ++ticks_;
  }
  void finish_precompute() override {}
  void reset() override { ticks_ = 0; }
  long long ticks() const override { return ticks_; }

 private:
  static BackendOptions options() {
    BackendOptions o;
    o.mode = Mode::streaming;
    return o;
  }
  long long ticks_ = 0;
};

// The C ABI of a dlopen'd libhotpath.so (only what the benchmark calls).
struct SharedLibrary {
  void* handle = nullptr;
  decltype(&hotpath_model_open) model_open = nullptr;
  decltype(&hotpath_model_close) model_close = nullptr;
  decltype(&hotpath_engine_open) engine_open = nullptr;
  decltype(&hotpath_engine_step) engine_step = nullptr;
  decltype(&hotpath_engine_close) engine_close = nullptr;
  decltype(&hotpath_last_error) last_error = nullptr;

  explicit SharedLibrary(const std::string& path) {
    // RTLD_LOCAL: its hotpath_* stay apart from this executable's (statically linked) ones.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error("cannot load " + path + ": " + dlerror());
    load(model_open, "hotpath_model_open");
    load(model_close, "hotpath_model_close");
    load(engine_open, "hotpath_engine_open");
    load(engine_step, "hotpath_engine_step");
    load(engine_close, "hotpath_engine_close");
    load(last_error, "hotpath_last_error");
  }
  ~SharedLibrary() {
    if (handle) dlclose(handle);
  }
  template <class F>
  void load(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    if (!f) throw Error(std::string("libhotpath.so lacks ") + name);
  }
};

struct Flags {
  std::string model = "lstm_s", backend = "cpu", precision, mode = "window", cpuset, json, shared = HOTPATH_SHARED_LIBRARY;
  int window = 0, pin = -1;
  long long ticks = 5000, warmup = 500;
};

hotpath_engine_options c_options(const Flags& f) {
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = f.backend.c_str();
  o.precision = f.precision.empty() ? nullptr : f.precision.c_str();
  o.mode = f.mode.c_str();
  o.window = f.window;
  o.cpuset = f.cpuset.empty() ? nullptr : f.cpuset.c_str();
  return o;
}

void check(hotpath_status s, const char* what, const char* message) {
  if (s != HOTPATH_OK) throw Error(std::string(what) + ": " + message);
}

// Times `calls` (each a lambda running one tick of input t) alternately, starting with a different one
// each round; samples[k] collects call k's time per tick in ns. A sample times `per_sample` calls in a
// row and divides: 1 for real ticks; many for calls shorter than the TSC's granularity (the no-op).
template <class... Calls>
std::vector<std::vector<double>> interleave(long long warmup, long long rounds, int per_sample, double tsc_per_ns,
                                            Calls&... calls) {
  constexpr size_t n = sizeof...(Calls);
  std::vector<std::vector<double>> samples(n);
  for (auto& s : samples) s.reserve(size_t(rounds));
  std::function<void(size_t)> fns[] = {[&calls](size_t t) { calls(t); }...};
  size_t tick = 0;
  for (long long r = 0; r < warmup + rounds; ++r) {
    for (size_t k = 0; k < n; ++k) {
      const size_t which = (size_t(r) + k) % n;  // rotate the order round by round
      const auto& fn = fns[which];
      const uint64_t t0 = tsc_begin();
      for (int i = 0; i < per_sample; ++i) fn(tick + size_t(i));
      const uint64_t t1 = tsc_end();
      if (r >= warmup) samples[which].push_back(double(t1 - t0) / tsc_per_ns / per_sample);
    }
    tick += size_t(per_sample);
  }
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The C ABI's overhead over Engine::step (one engine, both calls, interleaved)"};
  Flags f;
  app.add_option("--model", f.model, "Model file or zoo name")->capture_default_str();
  app.add_option("--backend", f.backend, "ref, cpu, cuda or auto")->capture_default_str();
  app.add_option("--precision", f.precision, "The backend's precision (default: its own)");
  app.add_option("--mode", f.mode, "window or streaming")->capture_default_str();
  app.add_option("--window", f.window, "W (0: the model's)")->capture_default_str();
  app.add_option("--cpuset", f.cpuset, "Cores for the backend (the first runs the critical step)");
  app.add_option("--ticks", f.ticks, "Measured ticks per call path")->check(CLI::Range(1LL, 100000000LL))->capture_default_str();
  app.add_option("--warmup", f.warmup, "Unmeasured ticks first")->check(CLI::Range(0LL, 100000000LL))->capture_default_str();
  app.add_option("--pin", f.pin, "Pin the calling thread to this core (-1: not pinned)")->capture_default_str();
  app.add_option("--shared", f.shared,
                 "libhotpath.so to time through as well, or 'none' (its engine is opened without --cpuset: two "
                 "engines' spinning precompute pools on the same cores starve each other)")
      ->capture_default_str();
  app.add_option("--json", f.json, "Write the results to this file as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    if (f.pin >= 0) util::pin_thread(pthread_self(), {f.pin}, "bench_capi_overhead");
    const double tsc_per_ns = calibrate_tsc_per_ns();
    nlohmann::json report = {{"benchmark", "capi_overhead"}, {"version", hotpath_version()},
                             {"ticks", f.ticks}, {"warmup", f.warmup}, {"pin", f.pin}, {"tsc_ghz", tsc_per_ns}};

    // ---- the model workload: one C handle; its engine is the C++ path -----------------------------
    hotpath_model* model = nullptr;
    // Each call before its last_error() (an argument list has no order of evaluation).
    const hotpath_status model_opened = hotpath_model_open(f.model.c_str(), nullptr, nullptr, &model);
    check(model_opened, "model", hotpath_last_error());
    hotpath_engine* handle = nullptr;
    const hotpath_engine_options options = c_options(f);
    const hotpath_status engine_opened = hotpath_engine_open(model, &options, &handle);
    check(engine_opened, "engine", hotpath_last_error());
    Engine& engine = handle->engine;
    const size_t I = size_t(engine.input_size()), O = size_t(engine.output_size());
    constexpr size_t kInputs = 1024;
    std::vector<float> x(kInputs * I);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<float> out(O);
    auto input = [&](size_t t) { return x.data() + (t % kInputs) * I; };

    auto cpp_call = [&](size_t t) { engine.step({input(t), I}, out); };
    auto c_call = [&](size_t t) {
      if (hotpath_engine_step(handle, input(t), I, out.data(), O) != HOTPATH_OK) throw Error(hotpath_last_error());
    };
    std::unique_ptr<SharedLibrary> shared;
    hotpath_engine* shared_engine = nullptr;
    if (f.shared != "none") {
      shared = std::make_unique<SharedLibrary>(f.shared);
      hotpath_model* m = nullptr;
      const hotpath_status shared_model = shared->model_open(f.model.c_str(), nullptr, nullptr, &m);
      check(shared_model, "shared model", shared->last_error());
      // Without the cpuset: its precompute pool would spin on the first engine's cores (on the H200 with
      // --cpuset 2-5 the run crawled past 4 minutes for 200 k ticks).
      hotpath_engine_options unpinned = options;
      unpinned.cpuset = nullptr;
      const hotpath_status opened = shared->engine_open(m, &unpinned, &shared_engine);
      check(opened, "shared engine", shared->last_error());
      shared->model_close(m);
    }
    std::vector<float> shared_out(O);
    auto shared_call = [&](size_t t) {
      if (shared->engine_step(shared_engine, input(t), I, shared_out.data(), O) != HOTPATH_OK)
        throw Error(shared->last_error());
    };

    std::vector<std::vector<double>> samples;
    if (shared)
      samples = interleave(f.warmup, f.ticks, 1, tsc_per_ns, cpp_call, c_call, shared_call);
    else
      samples = interleave(f.warmup, f.ticks, 1, tsc_per_ns, cpp_call, c_call);
    const Summary cpp = summarize(samples[0]), c = summarize(samples[1]);
    std::printf("model workload: %s, backend %s (%s, %s), %s mode, W=%d, %lld ticks per path (+%lld warm-up)\n",
                f.model.c_str(), engine.backend_name().c_str(), engine.variant().c_str(),
                precision_name(engine.precision()), mode_name(engine.mode()), engine.window(), f.ticks, f.warmup);
    std::printf("  %-34s %12s %12s %12s %12s\n", "ns per tick", "p50", "p90", "p99", "mean");
    auto row = [](const char* name, const Summary& s) {
      std::printf("  %-34s %12.1f %12.1f %12.1f %12.1f\n", name, s.p50, s.p90, s.p99, s.mean);
    };
    row("C++ Engine::step", cpp);
    row("C hotpath_engine_step", c);
    std::printf("  %-34s %12.1f %12.1f %12.1f %12.1f\n", "C - C++", c.p50 - cpp.p50, c.p90 - cpp.p90, c.p99 - cpp.p99,
                c.mean - cpp.mean);
    report["model"] = {{"model", f.model},         {"backend", engine.backend_name()},
                       {"variant", engine.variant()}, {"precision", precision_name(engine.precision())},
                       {"mode", mode_name(engine.mode())}, {"window", engine.window()},
                       {"cpp", to_json(cpp)},       {"c", to_json(c)},
                       {"c_minus_cpp_p50_ns", c.p50 - cpp.p50}, {"c_minus_cpp_p99_ns", c.p99 - cpp.p99}};
    if (shared) {
      const Summary so = summarize(samples[2]);
      row("C via libhotpath.so (own engine)", so);
      std::printf("  %-34s %12.1f %12.1f %12.1f %12.1f\n", "libhotpath.so - C++", so.p50 - cpp.p50, so.p90 - cpp.p90,
                  so.p99 - cpp.p99, so.mean - cpp.mean);
      report["model"]["shared"] = to_json(so);
      report["model"]["shared_library"] = f.shared;
      report["model"]["shared_minus_cpp_p50_ns"] = so.p50 - cpp.p50;
      report["model"]["shared_minus_cpp_p99_ns"] = so.p99 - cpp.p99;
      shared->engine_close(shared_engine);
    }
    hotpath_engine_close(handle);

    // ---- the no-op workload: the calls alone ------------------------------------------------------
    Model noop_model = std::move(model->model);
    hotpath_model_close(model);
    const ModelConfig config = noop_model.config;
    hotpath_engine* noop = new hotpath_engine(std::move(noop_model), std::make_unique<NoopBackend>(config));
    Engine& noop_engine = noop->engine;
    auto noop_cpp = [&](size_t t) { noop_engine.step({input(t), I}, out); };
    auto noop_c = [&](size_t t) {
      if (hotpath_engine_step(noop, input(t), I, out.data(), O) != HOTPATH_OK) throw Error(hotpath_last_error());
    };
    // Calls of ~10 ns are below the TSC pair's resolution here: each sample times 100 calls in a row.
    constexpr int kPerSample = 100;
    const long long noop_samples_n = 20000;
    const auto noop_samples = interleave(100, noop_samples_n, kPerSample, tsc_per_ns, noop_cpp, noop_c);
    const Summary ncpp = summarize(noop_samples[0]), nc = summarize(noop_samples[1]);
    std::printf("no-op backend (the calls alone): %lld samples per path, each the mean of %d calls in a row\n",
                noop_samples_n, kPerSample);
    std::printf("  %-34s %12s %12s %12s %12s\n", "ns per call", "p50", "p90", "p99", "mean");
    row("C++ Engine::step", ncpp);
    row("C hotpath_engine_step", nc);
    std::printf("  %-34s %12.1f %12.1f %12.1f %12.1f\n", "C - C++", nc.p50 - ncpp.p50, nc.p90 - ncpp.p90,
                nc.p99 - ncpp.p99, nc.mean - ncpp.mean);
    report["noop"] = {{"samples", noop_samples_n},   {"calls_per_sample", kPerSample},
                      {"cpp", to_json(ncpp)},         {"c", to_json(nc)},
                      {"c_minus_cpp_p50_ns", nc.p50 - ncpp.p50}, {"c_minus_cpp_p99_ns", nc.p99 - ncpp.p99}};
    hotpath_engine_close(noop);

    if (!f.json.empty()) {
      std::ofstream(f.json) << report.dump(2) << "\n";
      std::printf("JSON: %s\n", f.json.c_str());
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_capi_overhead: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
