// Google Benchmark micro-benchmark of what telemetry costs the tick thread (telemetry/tick_metrics.hpp;
// the budget: 20 ns a tick). A tick's latency is drawn from 4096 recorded-like values (2 us .. 200 us,
// log-uniform), so the bucket changes from tick to tick as it does in a run.
//   record_tick          the bucket found from the bits, its count and the sum: a relaxed load and store each
//   record_tick_double   the same from a double (NaN, sign and rounding handled first)
//   tick_telemetry       what an engine's tick adds: record_tick, answered, and the backlog gauge
//   record_tick_fetch_add  the same histogram with atomic read-modify-writes (lock xadd on x86): the
//                        alternative one writer does not need, kept to show the difference
//   telemetry_off        an engine's null TickMetrics pointer: the cost when off
//   record_tick_scraped  record_tick while another thread takes snapshots without pause (a scrape
//                        every few seconds in practice: this is the worst case of lines moving away)
//   engine_tick/M/W      Engine::step over a backend that does nothing (W 0) or a dependent chain of W
//                        multiply-adds (W 1000: ~1-2 us, a tick's work), telemetry off (M 0) and on (M 1):
//                        what telemetry costs a tick through the engine, its two clock reads included
//                        (telemetry/tick_clock.hpp); clock_read: one read of that clock, and
//                        steady_clock_read: one steady_clock::now(), for comparison
//   record_tick_cold/B   one record_tick timed alone (TSC pair, its own cost taken off) after B bytes of
//                        other data were read, as a tick's weights push the histogram's lines out of
//                        L1 or L2: its cost in a tick whose work is that large; p50_ns / p99_ns of every sample
//
//   bench_telemetry [google benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "telemetry/tick_clock.hpp"
#include "telemetry/tick_metrics.hpp"
#include "tsc.hpp"

using namespace hotpath::telemetry;

namespace {

constexpr std::size_t kLatencies = 4096;

const std::array<std::int64_t, kLatencies>& latencies() {
  static const auto values = [] {
    std::array<std::int64_t, kLatencies> v{};
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> log_ns(std::log(2'000.0), std::log(200'000.0));
    for (auto& x : v) x = std::int64_t(std::exp(log_ns(rng)));
    return v;
  }();
  return values;
}

void BM_RecordTick(benchmark::State& state) {
  TickMetrics m;
  const auto& lat = latencies();
  std::size_t t = 0;
  for (auto _ : state) {
    m.record_tick(lat[t++ & (kLatencies - 1)]);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(m.snapshot().count);
}

void BM_RecordTickDouble(benchmark::State& state) {
  TickMetrics m;
  std::array<double, kLatencies> lat{};
  for (std::size_t i = 0; i < kLatencies; ++i) lat[i] = double(latencies()[i]) + 0.5;
  std::size_t t = 0;
  for (auto _ : state) {
    m.record_tick(lat[t++ & (kLatencies - 1)]);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(m.snapshot().count);
}

void BM_TickTelemetry(benchmark::State& state) {
  TickMetrics m;
  const auto& lat = latencies();
  std::size_t t = 0;
  for (auto _ : state) {
    m.record_tick(lat[t & (kLatencies - 1)]);
    m.count_answered();
    m.set_precompute_backlog(std::int64_t(t & 1));
    ++t;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(m.snapshot().count);
}

// TickMetrics' histogram with fetch_add in place of the single writer's load and store.
struct FetchAddHistogram {
  std::array<std::atomic<std::uint64_t>, kBuckets> buckets{};
  std::atomic<std::uint64_t> sum_ns{0};
  void record_tick(std::int64_t ns) noexcept {
    const std::uint64_t u = ns < 0 ? 0 : std::uint64_t(ns);
    buckets[bucket_index(u)].fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(std::min(u, kTopBoundNs), std::memory_order_relaxed);
  }
};

void BM_RecordTickFetchAdd(benchmark::State& state) {
  FetchAddHistogram h;
  const auto& lat = latencies();
  std::size_t t = 0;
  for (auto _ : state) {
    h.record_tick(lat[t++ & (kLatencies - 1)]);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(h.sum_ns.load());
}

void BM_TelemetryOff(benchmark::State& state) {
  TickMetrics* metrics = nullptr;
  benchmark::DoNotOptimize(metrics);  // the compiler cannot know it is null
  const auto& lat = latencies();
  std::size_t t = 0;
  for (auto _ : state) {
    if (metrics) metrics->record_tick(lat[t & (kLatencies - 1)]);
    ++t;
    benchmark::ClobberMemory();
  }
}

void BM_RecordTickScraped(benchmark::State& state) {
  TickMetrics m;
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load(std::memory_order_relaxed)) benchmark::DoNotOptimize(m.snapshot().count);
  });
  const auto& lat = latencies();
  std::size_t t = 0;
  for (auto _ : state) {
    m.record_tick(lat[t++ & (kLatencies - 1)]);
    benchmark::ClobberMemory();
  }
  stop.store(true);
  scraper.join();
}

// A backend that answers zeros at once: the engine's own cost per tick.
class NoopBackend : public hotpath::Backend {
 public:
  NoopBackend(const hotpath::ModelConfig& config, int work) : Backend(config, options()), work_(work) {}
  std::string name() const override { return "noop"; }
  std::string variant() const override { return "noop"; }
  hotpath::Precision precision() const override { return hotpath::Precision::fp32; }
  void step(std::span<const float>, std::span<float> out) override {
    double acc = 1.0;
    for (int i = 0; i < work_; ++i) acc = acc * 0.999999 + 1e-9;  // each step waits for the last
    for (float& z : out) z = float(acc - 1.0);
    ++ticks_;
  }
  void finish_precompute() override {}
  void reset() override { ticks_ = 0; }
  long long ticks() const override { return ticks_; }

 private:
  int work_;
  static hotpath::BackendOptions options() {
    hotpath::BackendOptions o;
    o.mode = hotpath::Mode::streaming;
    return o;
  }
  long long ticks_ = 0;
};

void BM_EngineTick(benchmark::State& state) {
  hotpath::Model model = hotpath::open_model("lstm_s");
  const hotpath::ModelConfig config = model.config;
  hotpath::Engine engine(std::move(model), std::make_unique<NoopBackend>(config, int(state.range(1))),
                         state.range(0) != 0);
  std::vector<float> x(std::size_t(config.input_size), 0.5f), z(std::size_t(config.output_size));
  for (auto _ : state) {
    engine.step(x, z);
    benchmark::ClobberMemory();
  }
  state.counters["counter_clock"] = hotpath::telemetry::TickClock::get().uses_counter() ? 1 : 0;
}

void BM_ClockRead(benchmark::State& state) {
  const auto& clock = hotpath::telemetry::TickClock::get();
  for (auto _ : state) benchmark::DoNotOptimize(clock.now());
}

void BM_SteadyClockRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, std::size_t(q * double(v.size())))];
}

void BM_RecordTickCold(benchmark::State& state) {
  static const double tsc_per_ns = hotpath::bench::calibrate_tsc_per_ns();
  // The timing pair's own cost: the median of empty pairs.
  std::vector<double> empty(10'000);
  for (auto& e : empty) {
    const auto t0 = hotpath::bench::tsc_begin();
    e = double(hotpath::bench::tsc_end() - t0) / tsc_per_ns;
  }
  const double pair_ns = percentile(empty, 0.5);
  TickMetrics m;
  std::vector<std::uint64_t> other(std::size_t(state.range(0)) / sizeof(std::uint64_t) + 1, 1);
  const auto& lat = latencies();
  std::vector<double> samples;
  std::size_t t = 0;
  for (auto _ : state) {
    std::uint64_t read = 0;
    for (const auto v : other) read += v;
    benchmark::DoNotOptimize(read);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // nothing of the sweep still in flight
    const auto t0 = hotpath::bench::tsc_begin();
    m.record_tick(lat[t++ & (kLatencies - 1)]);
    const auto t1 = hotpath::bench::tsc_end();
    const double ns = std::max(0.0, double(t1 - t0) / tsc_per_ns - pair_ns);
    samples.push_back(ns);
    state.SetIterationTime(ns * 1e-9);
  }
  state.counters["p50_ns"] = percentile(samples, 0.5);
  state.counters["p99_ns"] = percentile(samples, 0.99);
  state.counters["pair_ns"] = pair_ns;
}

}  // namespace

BENCHMARK(BM_RecordTick);
BENCHMARK(BM_RecordTickDouble);
BENCHMARK(BM_TickTelemetry);
BENCHMARK(BM_RecordTickFetchAdd);
BENCHMARK(BM_TelemetryOff);
BENCHMARK(BM_RecordTickScraped);
BENCHMARK(BM_EngineTick)->Args({0, 0})->Args({1, 0})->Args({0, 1000})->Args({1, 1000});
BENCHMARK(BM_ClockRead);
BENCHMARK(BM_SteadyClockRead);
// A fixed count of samples: the manual time is a few ns each, which the default run length would not reach.
BENCHMARK(BM_RecordTickCold)->UseManualTime()->Iterations(2000)->Arg(0)->Arg(256 << 10)->Arg(4 << 20)->Arg(32 << 20);
BENCHMARK_MAIN();
