// The latency harness's own pieces: percentiles, cpusets, inputs, pacing and checking.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "bench/latency_bench.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "util/error.hpp"

using namespace hotpath;

TEST(Stats, NearestRankPercentiles) {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);  // 1..1000, shuffled order must not matter
  std::reverse(v.begin(), v.end());
  const auto s = bench::summarize(v);
  EXPECT_EQ(s.count, 1000);
  EXPECT_EQ(s.p50, 500);
  EXPECT_EQ(s.p90, 900);
  EXPECT_EQ(s.p99, 990);
  EXPECT_EQ(s.p999, 999);
  EXPECT_EQ(s.max, 1000);
  EXPECT_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.mean, 500.5);
  const auto one = bench::summarize({7.0});
  EXPECT_EQ(one.p50, 7);
  EXPECT_EQ(one.p999, 7);
  EXPECT_EQ(bench::summarize({}).count, 0);
}

TEST(Machine, CpusetParsing) {
  EXPECT_EQ(bench::parse_cpuset("3"), (std::vector<int>{3}));
  EXPECT_EQ(bench::parse_cpuset("2-5"), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(bench::parse_cpuset("7,0-1,7"), (std::vector<int>{7, 0, 1}));  // first listed stays first
  for (const char* bad : {"", "a", "3-1", "1,,2", "-1", "1-", "99999999"})
    EXPECT_THROW(bench::parse_cpuset(bad), Error) << bad;
}

TEST(Inputs, DeterministicVaryingNormal) {
  std::vector<float> a(33), b(33), c(33);
  bench::tick_input(5, 100, a);
  bench::tick_input(5, 100, b);
  bench::tick_input(5, 101, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Roughly standard normal over many ticks, never all zeros.
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int t = 0; t < n / 33; ++t) {
    bench::tick_input(9, t, a);
    for (float x : a) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += double(x) * x;
    }
  }
  const double count = double(n / 33 * 33), mean = sum / count, var = sq / count - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(Bench, ReferenceRunChecksEveryTickAndPaces) {
  bench::BenchOptions o;
  o.model = std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors";  // tiny: the reference keeps up
  o.backend = "ref";
  o.mode = Mode::streaming;
  o.ticks = 50;
  o.warmup = 5;
  o.check_every = 1;
  o.rate_hz = 2000;  // 0.5 ms apart
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_EQ(r["count"], 50);
  EXPECT_EQ(r["error"]["checked_ticks"], 55);
  EXPECT_TRUE(r["error"]["pass"].get<bool>());
  EXPECT_NEAR(r["tick_rate_hz"].get<double>(), 2000, 400);
  EXPECT_NE(out.str().find("PASS"), std::string::npos);
}

// Several checker threads split the checked windows; each must see its own ticks and agree exactly.
TEST(Bench, ManyCheckerThreadsAgreeWithTheReference) {
  bench::BenchOptions o;
  o.model = std::string(HOTPATH_GOLDEN_DIR) + "/multi_out.model.safetensors";
  o.backend = "ref";
  o.mode = Mode::window;
  o.window = 20;
  o.ticks = 400;
  o.warmup = 0;
  o.check_every = 1;
  o.check_threads = 5;
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_EQ(r["error"]["checked_ticks"], 400);
  EXPECT_EQ(r["error"]["ticks_over_bound"], 0);
  EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
}

TEST(Bench, BadOptionsAreRefused) {
  bench::BenchOptions o;
  o.model = "lstm_s";
  o.backend = "ref";
  std::ostringstream out;
  auto with = [&](auto change) {
    auto c = o;
    change(c);
    return c;
  };
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.ticks = 0; }), out), Error);
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.warmup = -1; }), out), Error);
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.rate_hz = -5; }), out), Error);
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.model = ""; }), out), Error);
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.model = "nonexistent"; }), out), Error);
  EXPECT_THROW(bench::run_bench(with([](auto& c) { c.mode = Mode::batch; }), out), Error);
}
