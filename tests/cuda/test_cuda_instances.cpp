// Many model instances on one GPU (docs/cuda.md): SM partitions (green contexts), one tick kernel in
// each, driven at the same time from threads of their own, each checked against the float64 reference
// (docs/model.md's bound for fp16); one instance's bad input, close and restart leave the others
// answering correctly; a backtest runs in the SMs the instances leave. The split's granularity is
// printed.
//
// Passed on the lent H200 (2026-12-02, bench/results/2026-12-02-h200-instances/run5-green-beside):
// 8 instances in 8-SM partitions and 8 in 2-SM ones (the fine split), worst error 2.3e-05; the fault
// test in 8.4 s. Closing one engine while others run used to hang (cudaFree waits for every kernel on
// the device: cuda/memory.hpp), and so did a backtest started beside them (its kernels were loaded
// lazily, which waits for the running ones: prepare_batch_kernels now loads them all first).
// The shared-launch tests (mechanism b) passed there too (run 8: 8 instances placed by SM and by block
// index, worst error 2.2e-05; the fault test), and once under compute-sanitizer memcheck with 2
// instances, 0 errors (it found two bugs first: a kernel reading memory made after its launch, and
// an unsynchronised block rank).
// HOTPATH_TEST_INSTANCES=N sets the instance count, HOTPATH_TEST_TRACE=1 prints every 500th tick.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/batch_runner.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/shared_launch.hpp"
#include "cuda/sm_partition.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

bool gpu(std::string* why) { return cuda::device_available(why); }

// HOTPATH_TEST_TRACE=1: progress on stderr (unbuffered), to see where a run that never ends stands.
template <class... A>
void trace(const char* format, A... args) {
  if (!std::getenv("HOTPATH_TEST_TRACE")) return;
  std::fprintf(stderr, "[trace] ");
  if constexpr (sizeof...(A) == 0) std::fputs(format, stderr);
  else std::fprintf(stderr, format, args...);
  std::fprintf(stderr, "\n");
}

std::unique_ptr<Backend> instance(const Model& m, std::shared_ptr<cuda::SmPartition> part) {
  BackendOptions bo;
  bo.mode = Mode::window;
  bo.window = *m.config.window;
  bo.precision = Precision::fp16;
  CudaOptions co;
  co.partition = std::move(part);
  return make_cuda_backend(m, bo, co);
}

// One instance's run: its own inputs (from its seed) and what it answered.
struct Drive {
  uint64_t seed = 0;
  size_t ticks = 0;
  std::vector<float> x;
  std::vector<float> z;
  std::string failed;
};

// `ticks` ticks of the instance's own inputs through `b` (on the calling thread), outputs kept for
// the check after every thread is done (the float64 reference is slow: it runs afterwards, on every core).
void drive(Backend& b, const Model& m, Drive& d) {
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  d.x = reference::normal_inputs(d.ticks * I, d.seed);
  d.z.assign(d.ticks * O, 0.f);
  try {
    for (size_t t = 0; t < d.ticks; ++t) {
      b.step(std::span<const float>(&d.x[t * I], I), std::span<float>(&d.z[t * O], O));
      if (t % 500 == 0) trace("seed %llu tick %zu", (unsigned long long)d.seed, t);
    }
  } catch (const std::exception& e) {
    d.failed = e.what();
  }
}

// The normalized error of a drive's outputs once the first window is full, against the float64 reference.
double drive_error(const Model& m, const Drive& d) {
  const size_t O = size_t(m.config.output_size), W = size_t(*m.config.window);
  const auto want = reference::outputs_on_every_core(m, false, int(W), d.x, d.ticks);
  const std::vector<double> got(d.z.begin() + long((W - 1) * O), d.z.end());
  return reference::normalized_error(got, std::span<const double>(want).subspan((W - 1) * O));
}

TEST(SmPartitions, SplitsOfNothingAreRefusedBeforeTheDevice) {
  // Checked before the driver is asked: no GPU needed.
  EXPECT_THROW(cuda::SmSplit(0, 0, 8, false, false), Error);
  EXPECT_THROW(cuda::SmSplit(0, 2, 0, true, false), Error);
}

TEST(SmPartitions, SplitFactsAndRefusals) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const cuda::SmSplitFacts f = cuda::sm_split_facts(0);
  std::printf("[instances] %d SMs: plain split groups of %d (co-scheduled alignment %d); fine split groups of %d "
              "(%d of them)\n", f.sm_count, f.min_partition, f.alignment, f.fine_min_partition, f.fine_groups);
  EXPECT_GT(f.min_partition, 0);
  EXPECT_GE(f.min_partition, f.fine_min_partition);
  EXPECT_THROW(cuda::SmSplit(0, f.sm_count + 1, 1, true, false), UnsupportedError);
  {
    cuda::SmSplit split(0, 2, f.min_partition, false, true);
    ASSERT_EQ(split.partitions().size(), 2u);
    EXPECT_GE(split.partitions()[0]->sm_count(), f.min_partition);
    ASSERT_TRUE(split.rest());
    EXPECT_EQ(split.partitions()[0]->sm_count() + split.partitions()[1]->sm_count() + split.rest()->sm_count(),
              f.sm_count);
    // A second split of the same GPU while the first lives would share its SMs.
    EXPECT_THROW(cuda::SmSplit(0, 1, f.min_partition, false, false), UnsupportedError);
  }
  cuda::SmSplit again(0, 1, f.min_partition, false, false);  // the first is gone: allowed
}

TEST(SmPartitions, InstancesAnswerTogetherEachCorrect) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const cuda::SmSplitFacts f = cuda::sm_split_facts(0);
  for (const bool fine : {false, true}) {
    const int sms = fine ? std::max(f.fine_min_partition, 2) : f.min_partition;
    int n = std::min(8, f.sm_count / sms - 1);
    if (const char* env = std::getenv("HOTPATH_TEST_INSTANCES")) n = std::max(1, std::atoi(env));
    trace("%s split: %d partitions of %d SMs asked", fine ? "fine" : "plain", n, sms);
    cuda::SmSplit split(0, n, sms, fine, true);
    trace("split made: %zu partitions, rest %d SMs", split.partitions().size(), split.rest() ? split.rest()->sm_count() : 0);
    std::vector<std::unique_ptr<Backend>> engines;
    for (const auto& p : split.partitions()) {
      trace("starting an engine on %s", p->describe().c_str());
      engines.push_back(instance(m, p));
      std::fprintf(stderr, "[instances] %s started\n", p->describe().c_str());
    }
    // Two engines on one partition, or one on the whole GPU beside them, are refused at once.
    EXPECT_THROW(instance(m, split.partitions()[0]), UnsupportedError);
    EXPECT_THROW(instance(m, nullptr), UnsupportedError);
    std::vector<Drive> runs(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k) {
      runs[size_t(k)].seed = 100 + uint64_t(k);
      runs[size_t(k)].ticks = 600;
      threads.emplace_back([&, k] { drive(*engines[size_t(k)], m, runs[size_t(k)]); });
    }
    for (auto& t : threads) t.join();
    std::vector<double> err;
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(runs[size_t(k)].failed, "") << "instance " << k;
      err.push_back(drive_error(m, runs[size_t(k)]));
      EXPECT_LE(err.back(), error_bound(Precision::fp16)) << "instance " << k;
    }
    std::printf("[instances] %s split: %d instances of lstm_s on %d SMs each (%s), worst error %.2e\n",
                fine ? "fine" : "plain", n, split.partitions()[0]->sm_count(), engines[0]->variant().c_str(),
                *std::max_element(err.begin(), err.end()));
    std::fflush(stdout);  // a run killed later still shows it
    trace("closing the engines");
    engines.clear();
    trace("engines closed");
  }
}

TEST(SmPartitions, OneInstancesFaultsLeaveTheOthersRunning) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const cuda::SmSplitFacts f = cuda::sm_split_facts(0);
  const int n = 3;
  cuda::SmSplit split(0, n, f.min_partition, false, true);
  cuda::preload_batch_kernels(0);  // the backtest below starts beside running tick kernels
  std::vector<std::unique_ptr<Backend>> engines;
  for (const auto& p : split.partitions()) engines.push_back(instance(m, p));
  std::vector<Drive> runs(n);
  // Instances 1 and 2 serve ticks throughout; instance 0 meets a NaN, is closed, restarted on its
  // partition, and serves again; a backtest then runs in the SMs left over.
  std::vector<std::thread> threads;
  for (int k = 1; k < n; ++k) {
    runs[size_t(k)].seed = 200 + uint64_t(k);
    runs[size_t(k)].ticks = 3000;
    threads.emplace_back([&, k] { drive(*engines[size_t(k)], m, runs[size_t(k)]); });
  }
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<float> bad(static_cast<size_t>(I), 0.f), out(static_cast<size_t>(O));
  bad[3] = std::nanf("");
  EXPECT_THROW(engines[0]->step(bad, out), Error);
  engines[0].reset();  // close it while the others run
  engines[0] = instance(m, split.partitions()[0]);
  runs[0].seed = 300;
  runs[0].ticks = 600;
  drive(*engines[0], m, runs[0]);
  // A backtest in the rest partition (its own engine there, low priority), beside the live instances.
  std::vector<float> bx;
  std::vector<double> bz;
  const size_t S = 4, T = 150;
  {
    BackendOptions bo;
    bo.mode = Mode::window;
    bo.window = *m.config.window;
    bo.precision = Precision::fp16;
    CudaOptions co;
    co.partition = split.rest();
    co.batch_priority = cuda::kLowestStreamPriority;
    co.throughput_only = true;  // no tick kernel of its own
    auto bt = make_cuda_backend(m, bo, co);
    bx = reference::normal_inputs(S * T * size_t(I), 400);
    bz.assign(S * T * size_t(O), 0.0);
    bt->backtest(bx, S, T, Backend::BacktestOutput{nullptr, bz.data()}, nullptr);
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(runs[size_t(k)].failed, "") << "instance " << k;
    EXPECT_LE(drive_error(m, runs[size_t(k)]), error_bound(Precision::fp16)) << "instance " << k;
  }
  for (size_t s = 0; s < S; ++s) {
    const std::vector<float> xs(bx.begin() + long(s * T * size_t(I)), bx.begin() + long((s + 1) * T * size_t(I)));
    const auto want = reference::outputs_on_every_core(m, false, *m.config.window, xs, T);
    EXPECT_LE(reference::normalized_error(std::span<const double>(bz).subspan(s * T * size_t(O), T * size_t(O)), want),
              error_bound(Precision::fp16))
        << "backtest series " << s;
  }
}

// ---------------------------------------------------------------------------------------------------
// Mechanism (b): one persistent launch serving every instance (cuda/shared_launch.hpp).

std::unique_ptr<Backend> shared_instance(const Model& m, std::shared_ptr<cuda::SharedLaunch> launch, int slot,
                                         bool heartbeat = true, double lease_ms = 1000) {
  BackendOptions bo;
  bo.mode = Mode::window;
  bo.window = *m.config.window;
  bo.precision = Precision::fp16;
  CudaOptions co;
  co.shared = std::move(launch);
  co.slot = slot;
  co.heartbeat = heartbeat;
  co.lease_ms = lease_ms;
  return make_cuda_backend(m, bo, co);
}

std::shared_ptr<cuda::SharedLaunch> shared_launch(const Model& m, int count, const std::string& placement = "sm") {
  BackendOptions bo;
  bo.mode = Mode::window;
  bo.window = *m.config.window;
  bo.precision = Precision::fp16;
  cuda::SharedLaunchOptions so;
  so.by_sm = placement == "sm";
  return std::make_shared<cuda::SharedLaunch>(m, bo, so, count);
}

TEST(SharedLaunch, InstancesOfOneLaunchAnswerTogetherEachCorrect) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  int n = 8;
  if (const char* env = std::getenv("HOTPATH_TEST_INSTANCES")) n = std::max(1, std::atoi(env));
  for (const std::string placement : {"sm", "block"}) {
  SCOPED_TRACE("placement " + placement);
  auto launch = shared_launch(m, n, placement);
  trace("shared launch of %d instances made (%s, placed by %s)", n, launch->variant().c_str(), placement.c_str());
  std::vector<std::unique_ptr<Backend>> engines;
  for (int k = 0; k < n; ++k) engines.push_back(shared_instance(m, launch, k));
  trace("instances started");
  // One engine per instance, and no engine of its own on the GPU the launch holds.
  EXPECT_THROW(shared_instance(m, launch, 0), UnsupportedError);
  EXPECT_THROW(instance(m, nullptr), UnsupportedError);
  std::vector<Drive> runs(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    runs[size_t(k)].seed = 500 + uint64_t(k);
    runs[size_t(k)].ticks = 600;
    threads.emplace_back([&, k] { drive(*engines[size_t(k)], m, runs[size_t(k)]); });
  }
  for (auto& t : threads) t.join();
  double worst = 0;
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(runs[size_t(k)].failed, "") << "instance " << k;
    const double e = drive_error(m, runs[size_t(k)]);
    worst = std::max(worst, e);
    EXPECT_LE(e, error_bound(Precision::fp16)) << "instance " << k;
  }
  std::printf("[instances] one launch: %d instances of lstm_s (%s, placed by %s), worst error %.2e\n", n,
              engines[0]->variant().c_str(), placement.c_str(), worst);
  std::fflush(stdout);
  trace("closing the instances");
  engines.clear();
  launch.reset();
  trace("launch closed");
  }
}

// In one launch: an instance's bad input, its close and restart, and another's lapsed lease leave the
// others serving, correct; a backtest on an instance is refused (the launch holds the SMs).
TEST(SharedLaunch, OneInstancesFaultsLeaveTheOthersServing) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const int n = 4;
  auto launch = shared_launch(m, n);
  std::vector<std::unique_ptr<Backend>> engines;
  for (int k = 0; k < n - 1; ++k) engines.push_back(shared_instance(m, launch, k));
  engines.push_back(shared_instance(m, launch, n - 1, /*heartbeat=*/false, /*lease_ms=*/300));
  std::vector<Drive> runs(n);
  std::vector<std::thread> threads;
  for (int k = 1; k < n - 1; ++k) {
    runs[size_t(k)].seed = 600 + uint64_t(k);
    runs[size_t(k)].ticks = 3000;
    threads.emplace_back([&, k] { drive(*engines[size_t(k)], m, runs[size_t(k)]); });
  }
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<float> bad(static_cast<size_t>(I), 0.f), out(static_cast<size_t>(O));
  bad[3] = std::nanf("");
  EXPECT_THROW(engines[0]->step(bad, out), Error);
  std::vector<double> bz(size_t(O) * 60);
  EXPECT_THROW(engines[0]->backtest(reference::normal_inputs(size_t(I) * 60, 1), 1, 60,
                                    Backend::BacktestOutput{nullptr, bz.data()}, nullptr),
               UnsupportedError);
  trace("closing instance 0 while 1 and 2 serve");
  engines[0].reset();
  engines[0] = shared_instance(m, launch, 0);
  trace("instance 0 restarted");
  runs[0].seed = 700;
  runs[0].ticks = 600;
  drive(*engines[0], m, runs[0]);
  // The last instance never beats: its lease lapses and it stops alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  std::string late_why;
  EXPECT_FALSE(engines[size_t(n - 1)]->try_step(std::vector<float>(size_t(I), 0.1f), out, &late_why));
  EXPECT_NE(late_why.find("lease"), std::string::npos) << late_why;
  for (auto& t : threads) t.join();
  for (int k = 0; k < n - 1; ++k) {
    EXPECT_EQ(runs[size_t(k)].failed, "") << "instance " << k;
    EXPECT_LE(drive_error(m, runs[size_t(k)]), error_bound(Precision::fp16)) << "instance " << k;
  }
  engines.clear();
  launch.reset();
}

}  // namespace
}  // namespace hotpath
