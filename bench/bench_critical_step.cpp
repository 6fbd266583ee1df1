// Google Benchmark micro-benchmark of the cpu backend's critical step: step() alone (input copy, the
// last LSTM step of the completing window layer by layer, the head, the output written), timed per
// call with manual timing; finish_precompute() runs between calls, outside the timed region.
// Percentiles of every sample are reported as counters (p50_us ... max_us), and the error of the
// same backend against the float64 reference (docs/model.md) as `error`.
//
//   bench_critical_step [--cpuset=LIST] [google benchmark flags]
// With a cpuset of 2, 4 or 8 cores or more, lstm_m and stac_b also run with their step split over the
// first 2, 4, 8 (crit_cores; the rest precompute), and `split_barrier` times the split's own cost: the
// helpers' go signal and one barrier a layer, no work (per_barrier_ns beside the step's times).
// --cpuset: the first core runs the critical step, the rest the precompute (as `hotpath bench`); without
// it the precompute runs inline on the calling thread between samples (it then also evicts the
// critical weights from the caches of a model as large as lstm_m). HOTPATH_CPU_ISA / HOTPATH_CPU_BF16 /
// HOTPATH_CPU_PREFETCH choose the kernel path (cpu/isa_choice.cpp, cpu/cpu_backend.cpp).
//
// After the timed samples, a second pass of the same length / 4 counts hardware events on the
// critical thread around step() only (perf_counters.hpp; user mode): per tick, cycles, instructions,
// L1D misses (x 64 B: the bytes that came from L2 or further, beside crit_KiB, the weights the step
// reads), L2 misses (Intel), LLC misses and dTLB misses. The counting pass is apart so that its
// ioctls never sit inside a timed sample; counters missing on the machine are reported as perf_why.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "engine/engine.hpp"
#include "perf_counters.hpp"
#include "tsc.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/part_barrier.hpp"
#include "cpu/spin_pool.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/stats.hpp"
#include "util/threads.hpp"

using namespace hotpath;

namespace {

std::vector<int> g_cpuset;
double g_tsc_per_ns = 0;  // calibrated once in main()

// TSC reads (bench/tsc.hpp; timer_overhead reports their cost beside clock_gettime's).
using bench::calibrate_tsc_per_ns;
using bench::tsc_begin;
using bench::tsc_end;

struct Case {
  const char* model;
  Mode mode;
  Precision precision;
  int64_t iterations;
  int crit_cores = 1;  // the cores the step is split over (the cpuset's first), CpuOptions::crit_cores
};

std::vector<float> random_inputs(size_t T, int I, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(T * I);
  for (auto& v : x) v = n(rng);
  return x;
}

double percentile(const std::vector<double>& sorted, double q) {
  return util::percentile_sorted(sorted, q, util::Percentile::nearest_rank);  // as `hotpath bench`
}

void BM_critical_step(benchmark::State& state, Case c) {
  const Model m = *zoo_model(c.model, 0);
  const int I = m.config.input_size, O = m.config.output_size;
  const int W = c.mode == Mode::window ? m.config.window.value_or(1) : 0;
  BackendOptions opt;
  opt.mode = c.mode;
  opt.window = W;
  opt.precision = c.precision;
  opt.cpuset = g_cpuset;
  CpuOptions co = cpu_options_from_env();
  co.crit_cores = c.crit_cores;
  opt.cpu = co;
  std::unique_ptr<Backend> b;
  try {
    b = make_cpu_backend(m, opt);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return;
  }
  constexpr size_t kInputs = 4096;
  const auto x = random_inputs(kInputs, I, 1);
  std::vector<float> out(O);

  // Error against the float64 reference over the first W + 10 ticks (the window ring wraps).
  {
    const size_t T = size_t(std::max(W, 1)) + 10;
    reference::Incremental ref(m, c.mode == Mode::streaming, std::max(W, 1));
    std::vector<double> z, zr;
    for (size_t t = 0; t < T; ++t) {
      const std::span<const float> xt(x.data() + t * I, I);
      b->process(xt, out);
      z.insert(z.end(), out.begin(), out.end());
      const auto r = ref.tick(xt);
      zr.insert(zr.end(), r.begin(), r.end());
    }
    state.counters["error"] = reference::normalized_error(z, zr);
  }
  for (size_t t = 0; t < 2000; ++t) b->process(std::span<const float>(x.data() + (t % kInputs) * I, I), out);

  std::vector<double> samples;
  samples.reserve(size_t(state.max_iterations));
  size_t t = 0;
  for (auto _ : state) {
    const std::span<const float> xt(x.data() + (t++ % kInputs) * I, I);
    const uint64_t t0 = tsc_begin();
    b->step(xt, out);
    const uint64_t t1 = tsc_end();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    b->finish_precompute();
    const double ns = double(t1 - t0) / g_tsc_per_ns;
    samples.push_back(ns);
    state.SetIterationTime(ns * 1e-9);
  }
  {
    bench::PerfCounters pmu;
    const size_t n = std::max<size_t>(1, samples.size() / 4);
    for (size_t k = 0; k < n; ++k) {
      const std::span<const float> xt(x.data() + (t++ % kInputs) * I, I);
      pmu.start();
      b->step(xt, out);
      pmu.stop();
      benchmark::DoNotOptimize(out.data());
      b->finish_precompute();
    }
    for (const auto& [name, count] : pmu.read()) state.counters[name + "_per_tick"] = double(count) / double(n);
    const std::string what = std::string(c.model) + " " + mode_name(c.mode) + " " + precision_name(c.precision);
    if (!pmu.available()) std::fprintf(stderr, "%s: no hardware counters (%s)\n", what.c_str(), pmu.why().c_str());
    else if (!pmu.skipped().empty()) std::fprintf(stderr, "%s: counters not available: %s\n", what.c_str(), pmu.skipped().c_str());
  }
  std::sort(samples.begin(), samples.end());
  state.counters["p50_us"] = percentile(samples, 0.50) * 1e-3;
  state.counters["p90_us"] = percentile(samples, 0.90) * 1e-3;
  state.counters["p99_us"] = percentile(samples, 0.99) * 1e-3;
  state.counters["p999_us"] = percentile(samples, 0.999) * 1e-3;
  state.counters["max_us"] = samples.empty() ? 0 : samples.back() * 1e-3;
  const auto counters = b->counters();
  if (auto it = counters.find("precompute_busy_us_mean"); it != counters.end())
    state.counters["precompute_us"] = it->second;
  if (auto it = counters.find("critical_weight_kib"); it != counters.end()) state.counters["crit_KiB"] = it->second;
  const size_t workers = g_cpuset.size() > size_t(c.crit_cores) ? g_cpuset.size() - size_t(c.crit_cores) : 0;
  state.SetLabel(b->variant() + (workers == 0 ? " inline-precompute" : " workers=" + std::to_string(workers)) +
                 (c.crit_cores > 1 ? " crit_cores=" + std::to_string(c.crit_cores) : ""));
}

// What splitting the critical step costs by itself: the go signal to the helpers and one barrier a layer
// (cpu/part_barrier.hpp), on the same pool and barrier the backend uses, with no work between them: the
// time from the signal to the last layer's barrier passed on the calling thread (the cpuset's first
// core; the helpers on the next ones). per_barrier_ns = the mean over the layers.
void BM_split_barrier(benchmark::State& state) {
  const int parts = int(state.range(0)), layers = int(state.range(1));
  cpu::SpinPool helpers(std::vector<int>(g_cpuset.begin() + 1, g_cpuset.begin() + parts), "barrier helper", false);
  cpu::PartBarrier barrier(parts);
  struct Tick {
    cpu::PartBarrier* barrier;
    int layers;
    uint64_t epoch;
    static void run(Tick& t, int part) {
      for (int l = 0; l < t.layers; ++l) {
        if (l > 0) t.barrier->wait_others(part, t.epoch + uint64_t(l));
        t.barrier->arrive(part, t.epoch + uint64_t(l) + 1);
      }
    }
    static void job(void* self, int helper, int) { run(*static_cast<Tick*>(self), helper + 1); }
  } tick{&barrier, layers, 0};
  util::pin_thread(pthread_self(), {g_cpuset[0]}, "bench_critical_step");
  std::vector<double> samples;
  samples.reserve(size_t(state.max_iterations));
  for (auto _ : state) {
    const uint64_t t0 = tsc_begin();
    helpers.start(&Tick::job, &tick);
    Tick::run(tick, 0);
    barrier.wait_others(0, tick.epoch + uint64_t(layers));
    const uint64_t t1 = tsc_end();
    helpers.wait();
    tick.epoch += uint64_t(layers);
    const double ns = double(t1 - t0) / g_tsc_per_ns;
    samples.push_back(ns);
    state.SetIterationTime(ns * 1e-9);
  }
  std::sort(samples.begin(), samples.end());
  state.counters["p50_ns"] = percentile(samples, 0.50);
  state.counters["p99_ns"] = percentile(samples, 0.99);
  state.counters["p999_ns"] = percentile(samples, 0.999);
  double sum = 0;
  for (const double s : samples) sum += s;
  state.counters["per_barrier_ns"] = samples.empty() ? 0 : sum / double(samples.size()) / layers;
  std::string cores;
  for (int k = 0; k < parts; ++k) cores += (k ? "," : "") + std::to_string(g_cpuset[size_t(k)]);
  state.SetLabel("cores " + cores);
}

// What a pair of timer reads costs (included in every sample above): the TSC pair used here, and for
// comparison a steady_clock pair.
void BM_timer_overhead(benchmark::State& state) {
  using clock = std::chrono::steady_clock;
  std::vector<double> samples, clock_samples;
  samples.reserve(size_t(state.max_iterations));
  clock_samples.reserve(size_t(state.max_iterations));
  for (auto _ : state) {
    const uint64_t t0 = tsc_begin();
    const uint64_t t1 = tsc_end();
    const auto c0 = clock::now();
    const auto c1 = clock::now();
    const double ns = double(t1 - t0) / g_tsc_per_ns;
    samples.push_back(ns);
    clock_samples.push_back(double(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count()));
    state.SetIterationTime(ns * 1e-9);
  }
  std::sort(samples.begin(), samples.end());
  std::sort(clock_samples.begin(), clock_samples.end());
  state.counters["p50_us"] = percentile(samples, 0.50) * 1e-3;
  state.counters["p99_us"] = percentile(samples, 0.99) * 1e-3;
  state.counters["clock_p50_us"] = percentile(clock_samples, 0.50) * 1e-3;
  state.counters["tsc_GHz"] = g_tsc_per_ns;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--cpuset=", 9) == 0) {
      try {
        g_cpuset = hotpath::parse_cpuset(argv[i] + 9);
      } catch (const std::exception&) {
        std::fprintf(stderr, "bad --cpuset '%s' (expected e.g. 2,3,4 or 2-15)\n", argv[i] + 9);
        return 2;
      }
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  g_tsc_per_ns = calibrate_tsc_per_ns();
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;

  // Iterations are fixed: each one also runs a precompute (W-1 window steps), which manual timing does
  // not count, so a time-based stop would run far too long.
  const Case cases[] = {
      {"lstm_s", Mode::window, Precision::fp32, 20000},      {"lstm_s", Mode::window, Precision::bf16, 20000},
      {"lstm_m", Mode::window, Precision::fp32, 5000},       {"lstm_m", Mode::window, Precision::bf16, 5000},
      {"vollo_tiny", Mode::streaming, Precision::fp32, 50000}, {"vollo_tiny", Mode::streaming, Precision::bf16, 50000},
      {"lstm_s", Mode::streaming, Precision::bf16, 50000},
      {"lstm_s", Mode::window, Precision::int8, 20000},      {"lstm_s", Mode::streaming, Precision::int8, 50000},
      {"vollo_tiny", Mode::streaming, Precision::int8, 50000}, {"lstm_m", Mode::window, Precision::int8, 5000},
  };
  std::vector<Case> all(std::begin(cases), std::end(cases));
  // The step split over the cpuset's first 2, 4 and 8 cores, where the cpuset has them (the rest
  // precompute): the models whose critical weights outgrow one core's L2.
  for (const int parts : {2, 4, 8}) {
    if (g_cpuset.size() < size_t(parts)) break;
    for (const Precision p : {Precision::fp32, Precision::bf16, Precision::int8}) {
      all.push_back({"lstm_m", Mode::window, p, 5000, parts});
      all.push_back({"stac_b", Mode::window, p, 5000, parts});
    }
  }
  for (const Case& c : all) {
    const std::string name = std::string("critical_step/") + c.model + "/" + mode_name(c.mode) + "/" +
                             precision_name(c.precision) + (c.crit_cores > 1 ? "/crit" + std::to_string(c.crit_cores) : "");
    benchmark::RegisterBenchmark(name.c_str(), BM_critical_step, c)
        ->UseManualTime()
        ->Iterations(c.iterations)
        ->Unit(benchmark::kMicrosecond);
  }
  for (int parts = 2; parts <= std::min<int>(kMaxCriticalCores, int(g_cpuset.size())); ++parts)
    benchmark::RegisterBenchmark("split_barrier", BM_split_barrier)
        ->Args({parts, 3})
        ->UseManualTime()
        ->Iterations(200000)
        ->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("timer_overhead", BM_timer_overhead)->UseManualTime()->Iterations(100000)->Unit(benchmark::kNanosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
