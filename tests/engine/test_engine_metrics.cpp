// The engine's tick telemetry (EngineOptions::metrics, engine/engine_metrics.hpp): off costs nothing and
// refuses a snapshot; on, every answered tick of step() and run() is timed and counted, a failed one
// counted lost, the backend's counts folded in as deltas every kFoldEvery ticks and at reset/backtest
// (never per tick), a swap counted and named.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/random_model.hpp"
#include "engine/engine.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/gpu.hpp"
#include "model/zoo.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

using test_support::random_model;

EngineOptions cpu_options(bool metrics) {
  EngineOptions o;
  o.backend = BackendKind::cpu;
  o.mode = Mode::streaming;
  o.warm = false;  // not what is checked here
  o.metrics = metrics;
  return o;
}

std::vector<float> inputs(size_t ticks, int I) {
  std::vector<float> x(ticks * size_t(I));
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(std::sin(0.37 * double(k)));
  return x;
}

// A ref backend that reports the counts a cuda backend with a CPU fallback would: a fallback answer
// and a GPU timeout on every other tick, and lease renewals as the test sets them. It counts its
// counters() calls, and fails (BackendError) on tick fail_at.
class CountingBackend final : public Backend {
 public:
  CountingBackend(const Model& m, const BackendOptions& o)
      : Backend(m.config, o), inner_(make_backend(BackendKind::ref, m, o)) {}
  std::string name() const override { return "counting"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return Precision::fp64; }
  long long ticks() const override { return inner_->ticks(); }
  void step(std::span<const float> x, std::span<float> out) override {
    if (inner_->ticks() == fail_at) {
      inner_->step(x, out);  // consumed, not answered
      throw BackendError("no answer to tick " + std::to_string(fail_at));
    }
    inner_->step(x, out);
    if (++stepped_ % 2 == 0) ++late_;
  }
  void finish_precompute() override { inner_->finish_precompute(); }
  void reset() override { inner_->reset(); }
  std::map<std::string, double> counters() const override {
    ++counters_calls;
    return {{"fallback_answers", double(late_)}, {"timeouts", double(late_)},
            {"lease_renewals", double(lease_renewals)}, {"late_gpu_answers", double(late_)}};
  }
  void clear_counters() override { late_ = 0; }
  long long fail_at = -1;
  long long lease_renewals = 0;
  mutable long long counters_calls = 0;

 private:
  std::unique_ptr<Backend> inner_;
  long long stepped_ = 0, late_ = 0;
};

TEST(EngineMetrics, OffHasNoneAndRefusesASnapshot) {
  const Model m = *zoo_model("vollo_tiny");
  Engine e(m, cpu_options(false));
  EXPECT_EQ(e.metrics(), nullptr);
  try {
    (void)e.metrics_snapshot();
    FAIL() << "a snapshot of an engine without metrics";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("metrics"), std::string::npos) << err.what();
  }
  std::vector<float> z(size_t(e.output_size()));
  e.step(inputs(1, e.input_size()), z);  // and ticks as ever
}

TEST(EngineMetrics, EveryAnsweredTickOfStepAndRunIsRecorded) {
  const Model m = *zoo_model("vollo_tiny");
  Engine e(m, cpu_options(true));
  ASSERT_NE(e.metrics(), nullptr);
  telemetry::Snapshot s = e.metrics_snapshot();
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.model_id, e.model_id());
  EXPECT_EQ(s.backend, "cpu");
  EXPECT_EQ(s.variant, e.variant());

  const int I = e.input_size(), O = e.output_size();
  const auto x = inputs(300, I);
  std::vector<float> z(static_cast<size_t>(O));
  for (int t = 0; t < 100; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, size_t(I)), z);
  std::vector<float> zf(100 * size_t(O));
  e.run(std::span<const float>(x).subspan(100 * size_t(I), 100 * size_t(I)), 100, zf);
  std::vector<double> zd(100 * size_t(O));
  e.run(std::span<const float>(x).subspan(200 * size_t(I), 100 * size_t(I)), 100, std::span<double>(zd));

  s = e.metrics_snapshot();
  EXPECT_EQ(s.count, 300u);
  EXPECT_EQ(s.answered, 300u);
  EXPECT_EQ(s.cumulative.back(), 300u);
  EXPECT_GT(s.sum_ns, 0u);
  EXPECT_EQ(s.lost + s.late + s.fallback + s.gpu_timeouts + s.swaps, 0u);
  const double p50 = telemetry::quantile(s, 0.5), p99 = telemetry::quantile(s, 0.99);
  EXPECT_GT(p50, 0);
  EXPECT_LE(p50, p99);
  EXPECT_LE(p99, telemetry::kBucketUpperNs[telemetry::kFiniteBuckets - 1]);
  for (int i = 1; i < telemetry::kBuckets; ++i) EXPECT_LE(s.cumulative[i - 1], s.cumulative[i]);
  // A backtest is throughput, not ticks: nothing recorded (and it leaves the engine reset).
  std::vector<float> zb(50 * size_t(O));
  e.backtest(std::span<const float>(x).subspan(0, 50 * size_t(I)), 1, 50, zb);
  EXPECT_EQ(e.metrics_snapshot().count, 300u);
}

TEST(EngineMetrics, ABadInputIsNeitherAnsweredNorLost) {
  const Model m = *zoo_model("vollo_tiny");
  Engine e(m, cpu_options(true));
  std::vector<float> x(size_t(e.input_size()), std::numeric_limits<float>::quiet_NaN()), z(size_t(e.output_size()));
  EXPECT_THROW(e.step(x, z), TickError);
  const auto s = e.metrics_snapshot();
  EXPECT_EQ(s.count + s.answered + s.lost, 0u);
}

TEST(EngineMetrics, BackendCountsAreFoldedEvery1024TicksAndAtReset) {
  const Model m = *zoo_model("vollo_tiny");
  BackendOptions bo;
  bo.mode = Mode::streaming;
  auto backend = std::make_unique<CountingBackend>(m, bo);
  CountingBackend* b = backend.get();
  Engine e(m, std::move(backend), /*metrics=*/true);
  const long long calls_at_creation = b->counters_calls;
  EXPECT_EQ(e.metrics_snapshot().backend, "counting");

  const int I = e.input_size(), O = e.output_size();
  const auto x = inputs(engine::kFoldEvery, I);
  std::vector<float> z(size_t(engine::kFoldEvery) * O);
  b->lease_renewals = 3;
  e.run(std::span<const float>(x).subspan(0, size_t(engine::kFoldEvery - 1) * I), engine::kFoldEvery - 1,
        std::span<float>(z).subspan(0, size_t(engine::kFoldEvery - 1) * O));
  auto s = e.metrics_snapshot();
  EXPECT_EQ(b->counters_calls, calls_at_creation) << "counters() on the tick path before the fold is due";
  EXPECT_EQ(s.fallback + s.gpu_timeouts + s.lease_renewals, 0u);
  EXPECT_EQ(s.answered, std::uint64_t(engine::kFoldEvery - 1));

  e.step(std::span<const float>(x).subspan(size_t(engine::kFoldEvery - 1) * I, size_t(I)),
         std::span<float>(z).subspan(0, size_t(O)));  // tick 1024: the fold
  s = e.metrics_snapshot();
  EXPECT_EQ(b->counters_calls, calls_at_creation + 1);
  EXPECT_EQ(s.fallback, std::uint64_t(engine::kFoldEvery / 2));
  EXPECT_EQ(s.gpu_timeouts, std::uint64_t(engine::kFoldEvery / 2));  // late_gpu_answers not counted again
  EXPECT_EQ(s.lease_renewals, 3u);

  // 10 more ticks (5 more late), then a reset folds them at once; the lease renewals as deltas.
  e.run(std::span<const float>(x).subspan(0, 10 * size_t(I)), 10, std::span<float>(z).subspan(0, 10 * size_t(O)));
  b->lease_renewals = 5;
  e.reset();
  s = e.metrics_snapshot();
  EXPECT_EQ(s.fallback, std::uint64_t(engine::kFoldEvery / 2 + 5));
  EXPECT_EQ(s.lease_renewals, 5u);

  // Counts that restart from zero (clear_counters) are new counts, not a negative delta.
  e.backend().clear_counters();
  e.run(std::span<const float>(x).subspan(0, 4 * size_t(I)), 4, std::span<float>(z).subspan(0, 4 * size_t(O)));
  e.reset();
  EXPECT_EQ(e.metrics_snapshot().fallback, std::uint64_t(engine::kFoldEvery / 2 + 5 + 2));
}

TEST(EngineMetrics, ATickTheBackendFailsIsLost) {
  const Model m = *zoo_model("vollo_tiny");
  BackendOptions bo;
  bo.mode = Mode::streaming;
  auto backend = std::make_unique<CountingBackend>(m, bo);
  backend->fail_at = 2;
  Engine e(m, std::move(backend), true);
  const int I = e.input_size();
  const auto x = inputs(3, I);
  std::vector<float> z(3 * size_t(e.output_size()));
  EXPECT_THROW(e.run(x, 3, z), BackendError);
  const auto s = e.metrics_snapshot();
  EXPECT_EQ(s.answered, 2u);
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.lost, 1u);
}

TEST(EngineMetrics, ASwapIsCountedAndTheInfoNamesTheNewModel) {
  const Model a = random_model(4, 16, 1, 2, true, true, 1), b = random_model(4, 16, 1, 2, true, true, 2);
  Engine e(a, cpu_options(true));
  const std::string first = e.model_id();
  const auto x = inputs(8, 4);
  std::vector<float> z(2);
  for (int t = 0; t < 3; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * 4, 4), z);
  const std::string id = e.swap(b);
  ASSERT_NE(id, first);
  EXPECT_EQ(e.metrics_snapshot().model_id, first) << "the old model serves until the tick boundary";
  for (int t = 3; t < 6; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * 4, 4), z);
  ASSERT_EQ(e.swaps(), 1);
  const auto s = e.metrics_snapshot();
  EXPECT_EQ(s.swaps, 1u);
  EXPECT_EQ(s.model_id, id);
  EXPECT_EQ(s.answered, 6u);
}

// The cuda backend's own counts reach the telemetry: its heartbeat's lease renewals (one every 20 ms by
// default), folded at a reset; with the CPU fallback every tick is still answered. Also prints what the
// fold's counters() call costs on the tick thread (it reads the kernel's timing words from the GPU).
// Skips without a usable GPU.
TEST(EngineMetrics, CudaLeaseRenewalsAreFolded) {
  std::string why;
  if (!gpu::available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const Model m = *zoo_model("lstm_s");
  EngineOptions o;
  o.backend = BackendKind::cuda;
  o.mode = Mode::streaming;
  o.fallback = Fallback::cpu;
  o.metrics = true;
  Engine e(m, o);
  const int I = e.input_size();
  const auto x = inputs(1, I);
  std::vector<float> z(size_t(e.output_size()));
  std::uint64_t ticks = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    e.step(x, z);
    ++ticks;
  }
  std::vector<double> fold_us;
  for (int k = 0; k < 200; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)e.counters();
    fold_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(fold_us.begin(), fold_us.end());
  std::printf("cuda counters() (the fold's read): p50 %.1f us, max %.1f us; %llu ticks, p50 %.0f ns\n",
              fold_us[100], fold_us.back(), (unsigned long long)ticks, telemetry::quantile(e.metrics_snapshot(), 0.5));
  e.reset();
  const auto s = e.metrics_snapshot();
  EXPECT_EQ(s.answered, ticks);
  EXPECT_EQ(s.lost, 0u);
  EXPECT_EQ(s.backend, "cuda");
  EXPECT_GE(s.lease_renewals, 5u) << "300 ms of a 20 ms heartbeat";
  EXPECT_LE(s.fallback, ticks);
}

// A reader on another thread (a Prometheus scrape) while the tick thread records: every snapshot is
// consistent (count is the buckets' total) and the counts only grow.
TEST(EngineMetrics, SnapshotsFromAnotherThreadWhileTicking) {
  const Model m = *zoo_model("vollo_tiny");
  Engine e(m, cpu_options(true));
  const std::shared_ptr<const telemetry::TickMetrics> metrics = e.metrics();
  std::atomic<bool> done{false};
  std::uint64_t last = 0, snapshots = 0;
  bool grew = true;
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const auto s = metrics->snapshot();
      grew = grew && s.count >= last && s.count == s.cumulative.back();
      last = s.count;
      ++snapshots;
    }
  });
  const int I = e.input_size();
  const auto x = inputs(2000, I);
  std::vector<float> z(2000 * size_t(e.output_size()));
  e.run(x, 2000, z);
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_TRUE(grew);
  EXPECT_GT(snapshots, 0u);
  EXPECT_EQ(metrics->snapshot().answered, 2000u);
}

}  // namespace
}  // namespace hotpath
