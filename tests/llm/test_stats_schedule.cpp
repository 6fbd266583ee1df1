#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "llm/report/stats.hpp"
#include "llm/workloads/schedule.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace hotpath::llm {
namespace {

TEST(LlmStats, PercentilesMatchNumpyLinear) {
  // numpy.percentile([1..10], [50, 90, 95, 99]) = 5.5, 9.1, 9.55, 9.91
  std::vector<double> v(10);
  std::iota(v.begin(), v.end(), 1.0);
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.p50, 5.5);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_NEAR(s.p95, 9.55, 1e-12);
  EXPECT_NEAR(s.p99, 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_EQ(summarize({}).count, 0u);
  EXPECT_DOUBLE_EQ(summarize({7}).p99, 7);
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double cv(const std::vector<double>& v) {
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / (v.size() - 1)) / m;
}

TEST(LlmRng, GammaMomentsForSeveralShapes) {
  // 200k draws: the standard error of the mean is sqrt(k/n) ~ 0.2% of k for k = 1, so 2% bounds are
  // ten standard errors wide (never flaky; the stream is fixed by the seed anyway).
  for (double k : {0.3, 1.0, 2.5, 9.0}) {
    util::Rng rng(42);
    std::vector<double> v(200000);
    for (double& x : v) x = rng.gamma(k);
    EXPECT_NEAR(mean(v) / k, 1.0, 0.02) << "shape " << k;
    EXPECT_NEAR(cv(v) * std::sqrt(k), 1.0, 0.03) << "shape " << k;
  }
}

std::vector<double> gaps(const std::vector<double>& t) {
  std::vector<double> g;
  for (std::size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}

TEST(LlmSchedule, PoissonMeanRateAndUnitCv) {
  const auto t = interactive_schedule(/*rate=*/50, /*K=*/1, /*seed=*/7, 20000, 0);
  ASSERT_EQ(t.size(), 20000u);
  EXPECT_DOUBLE_EQ(t[0], 0.0);
  for (std::size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  const auto g = gaps(t);
  EXPECT_NEAR(mean(g) * 50, 1.0, 0.03);
  EXPECT_NEAR(cv(g), 1.0, 0.03);
}

TEST(LlmSchedule, BurstinessSetsCoefficientOfVariation) {
  for (double k : {0.25, 4.0}) {
    const auto g = gaps(interactive_schedule(10, k, 3, 20000, 0));
    EXPECT_NEAR(mean(g) * 10, 1.0, 0.04) << k;
    EXPECT_NEAR(cv(g), 1.0 / std::sqrt(k), 0.05 / std::sqrt(k)) << k;
  }
}

TEST(LlmSchedule, SeededAndReproducible) {
  EXPECT_EQ(interactive_schedule(5, 1, 11, 100, 0), interactive_schedule(5, 1, 11, 100, 0));
  EXPECT_NE(interactive_schedule(5, 1, 11, 100, 0), interactive_schedule(5, 1, 12, 100, 0));
}

TEST(LlmSchedule, DurationBoundsArrivals) {
  const auto t = interactive_schedule(100, 1, 1, 0, 2.0);
  EXPECT_GT(t.size(), 150u);  // ~200 expected; Poisson sd ~14
  EXPECT_LT(t.size(), 250u);
  EXPECT_LT(t.back(), 2.0);
  EXPECT_EQ(interactive_schedule(100, 1, 1, 10, 2.0).size(), 10u);  // whichever limit comes first
}

TEST(LlmSchedule, BadInputThrows) {
  EXPECT_THROW(interactive_schedule(0, 1, 1, 10, 0), Error);
  EXPECT_THROW(interactive_schedule(1, 0, 1, 10, 0), Error);
  EXPECT_THROW(interactive_schedule(1, 1, 1, 0, 0), Error);
  const auto b = batch_schedule(5);
  EXPECT_EQ(b, std::vector<double>(5, 0.0));
}

}  // namespace
}  // namespace hotpath::llm
