// Many model instances on one GPU (issue 10): SM partitions (green contexts), one tick kernel in each,
// driven at the same time from threads of their own, each checked against the float64 reference
// (SPEC §4's bound for fp16); one instance's bad input, close and restart leave the others answering
// correctly; a backtest runs in the SMs the instances leave. The split's granularity is printed.
//
// NOT YET PASSING, hence DISABLED_ (gtest lists them as disabled, never as passed): on the lent H200
// (2026-12-02) all 8 instances of lstm_s started in their 8-SM partitions, then driving them from 8
// threads hung (killed at 40 s and at 120 s, with lazy and with eager module loading); the cause is
// not found yet. HOTPATH_TEST_INSTANCES=N sets the instance count, HOTPATH_TEST_TRACE=1 prints every
// 500th tick, to find it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/sm_partition.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

bool gpu(std::string* why) { return cuda::device_available(why); }

std::vector<float> inputs(size_t ticks, int I, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(ticks * size_t(I));
  for (float& v : x) v = n(rng);
  return x;
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

// `ticks` ticks of instance k's own inputs through `b`; the normalized error of its outputs (every
// output once the first window is full) against the float64 reference.
double drive(Backend& b, const Model& m, size_t ticks, uint64_t seed) {
  const int I = m.config.input_size, O = m.config.output_size, W = *m.config.window;
  const auto x = inputs(ticks, I, seed);
  std::vector<double> got;
  std::vector<float> out(static_cast<size_t>(O));
  for (size_t t = 0; t < ticks; ++t) {
    b.step(std::span<const float>(&x[t * size_t(I)], size_t(I)), out);
    if (std::getenv("HOTPATH_TEST_TRACE") && t % 500 == 0) std::fprintf(stderr, "[trace] seed %llu tick %zu\n", (unsigned long long)seed, t);
    if (t + 1 >= size_t(W)) got.insert(got.end(), out.begin(), out.end());
  }
  const auto want = reference::sliding_window(m, x, ticks, W);
  std::vector<double> tail(want.end() - long(got.size()), want.end());
  return reference::normalized_error(got, tail);
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

TEST(SmPartitions, DISABLED_InstancesAnswerTogetherEachCorrect) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const cuda::SmSplitFacts f = cuda::sm_split_facts(0);
  for (const bool fine : {false, true}) {
    const int sms = fine ? std::max(f.fine_min_partition, 2) : f.min_partition;
    int n = std::min(8, f.sm_count / sms - 1);
    if (const char* env = std::getenv("HOTPATH_TEST_INSTANCES")) n = std::max(1, std::atoi(env));
    cuda::SmSplit split(0, n, sms, fine, true);
    std::vector<std::unique_ptr<Backend>> engines;
    for (const auto& p : split.partitions()) {
      engines.push_back(instance(m, p));
      std::fprintf(stderr, "[instances] %s started\n", p->describe().c_str());
    }
    // Two engines on one partition, or one on the whole GPU beside them, are refused at once.
    EXPECT_THROW(instance(m, split.partitions()[0]), UnsupportedError);
    EXPECT_THROW(instance(m, nullptr), UnsupportedError);
    std::vector<double> err(static_cast<size_t>(n), -1);
    std::vector<std::string> failed(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k)
      threads.emplace_back([&, k] {
        try {
          err[size_t(k)] = drive(*engines[size_t(k)], m, 3000, 100 + uint64_t(k));
        } catch (const std::exception& e) {
          failed[size_t(k)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(failed[size_t(k)], "") << "instance " << k;
      EXPECT_LE(err[size_t(k)], error_bound(Precision::fp16)) << "instance " << k;
      EXPECT_GE(err[size_t(k)], 0.0) << "instance " << k;
    }
    std::printf("[instances] %s split: %d instances of lstm_s on %d SMs each (%s), worst error %.2e\n",
                fine ? "fine" : "plain", n, split.partitions()[0]->sm_count(), engines[0]->variant().c_str(),
                *std::max_element(err.begin(), err.end()));
  }
}

TEST(SmPartitions, DISABLED_OneInstancesFaultsLeaveTheOthersRunning) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const cuda::SmSplitFacts f = cuda::sm_split_facts(0);
  const int n = 3;
  cuda::SmSplit split(0, n, f.min_partition, false, true);
  std::vector<std::unique_ptr<Backend>> engines;
  for (const auto& p : split.partitions()) engines.push_back(instance(m, p));
  std::atomic<bool> go{true};
  std::vector<double> err(n, -1);
  std::vector<std::string> failed(n);
  // Instances 1 and 2 serve ticks throughout; instance 0 meets a NaN, is closed, restarted on its
  // partition, and serves again; a backtest then runs in the SMs left over.
  std::vector<std::thread> threads;
  for (int k = 1; k < n; ++k)
    threads.emplace_back([&, k] {
      try {
        err[size_t(k)] = drive(*engines[size_t(k)], m, 20000, 200 + uint64_t(k));
      } catch (const std::exception& e) {
        failed[size_t(k)] = e.what();
      }
    });
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<float> bad(static_cast<size_t>(I), 0.f), out(static_cast<size_t>(O));
  bad[3] = std::nanf("");
  EXPECT_THROW(engines[0]->step(bad, out), Error);
  engines[0].reset();  // close it while the others run
  engines[0] = instance(m, split.partitions()[0]);
  err[0] = drive(*engines[0], m, 2000, 300);
  // A backtest in the rest partition (its own engine there), beside the live instances.
  {
    BackendOptions bo;
    bo.mode = Mode::window;
    bo.window = *m.config.window;
    bo.precision = Precision::fp16;
    CudaOptions co;
    co.partition = split.rest();
    co.batch_priority = 1;
    auto bt = make_cuda_backend(m, bo, co);
    const size_t S = 64, T = 500;
    const auto x = inputs(S * T, I, 400);
    std::vector<double> z(S * T * size_t(O));
    bt->backtest(x, S, T, Backend::BacktestOutput{nullptr, z.data()}, nullptr);
    std::vector<double> want;
    for (size_t s = 0; s < S; ++s) {
      const auto w = reference::sliding_window(m, std::span<const float>(x.data() + s * T * size_t(I), T * size_t(I)), T,
                                               *m.config.window);
      want.insert(want.end(), w.begin(), w.end());
    }
    EXPECT_LE(reference::normalized_error(z, want), error_bound(Precision::fp16));
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(failed[size_t(k)], "") << "instance " << k;
    EXPECT_GE(err[size_t(k)], 0.0) << "instance " << k;
    EXPECT_LE(err[size_t(k)], error_bound(Precision::fp16)) << "instance " << k;
  }
}

}  // namespace
}  // namespace hotpath
