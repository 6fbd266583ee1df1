// The one statistics module: each percentile rule on known inputs, and the runs' confidence interval.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "util/stats.hpp"

namespace hotpath::util {
namespace {

std::vector<double> one_to(int n) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 1.0);
  return v;
}

TEST(Stats, NearestRankIsAMeasuredSample) {
  const auto v = one_to(10);
  EXPECT_EQ(percentile_sorted(v, 0.50, Percentile::nearest_rank), 5);
  EXPECT_EQ(percentile_sorted(v, 0.90, Percentile::nearest_rank), 9);
  EXPECT_EQ(percentile_sorted(v, 0.91, Percentile::nearest_rank), 10);
  EXPECT_EQ(percentile_sorted(v, 0.0, Percentile::nearest_rank), 1);
  EXPECT_EQ(percentile_sorted(v, 1.0, Percentile::nearest_rank), 10);
}

TEST(Stats, LinearMatchesNumpy) {
  // numpy.percentile([1..10], [50, 90, 95, 99]) = 5.5, 9.1, 9.55, 9.91
  const auto v = one_to(10);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.50, Percentile::linear), 5.5);
  EXPECT_NEAR(percentile_sorted(v, 0.90, Percentile::linear), 9.1, 1e-12);
  EXPECT_NEAR(percentile_sorted(v, 0.95, Percentile::linear), 9.55, 1e-12);
  EXPECT_NEAR(percentile_sorted(v, 0.99, Percentile::linear), 9.91, 1e-12);
}

TEST(Stats, IndexFloorTakesTheSampleAtFloorQn) {
  const auto v = one_to(10);
  EXPECT_EQ(percentile_sorted(v, 0.50, Percentile::index_floor), 6);
  EXPECT_EQ(percentile_sorted(v, 0.99, Percentile::index_floor), 10);
  EXPECT_EQ(percentile_sorted(v, 1.0, Percentile::index_floor), 10);
}

TEST(Stats, SummaryOfNothingAndOfOne) {
  for (Percentile rule : {Percentile::nearest_rank, Percentile::linear, Percentile::index_floor}) {
    EXPECT_EQ(summarize({}, rule).count, 0u);
    EXPECT_EQ(percentile_sorted({}, 0.5, rule), 0.0);
    const Summary s = summarize({7}, rule);
    EXPECT_EQ(s.count, 1u);
    EXPECT_EQ(s.p50, 7);
    EXPECT_EQ(s.p999, 7);
    EXPECT_EQ(s.min, 7);
    EXPECT_EQ(s.max, 7);
    EXPECT_EQ(s.mean, 7);
  }
}

TEST(Stats, MeanAndStudentTConfidenceInterval) {
  const MeanCi m = mean_ci95({1, 2, 3, 4, 5});
  EXPECT_EQ(m.n, 5u);
  EXPECT_DOUBLE_EQ(m.mean, 3.0);
  EXPECT_NEAR(m.half_width, 2.776 * std::sqrt(2.5) / std::sqrt(5.0), 1e-9);  // t(4) = 2.776
  EXPECT_TRUE(std::isnan(mean_ci95({7}).half_width));
  EXPECT_DOUBLE_EQ(mean_ci95({7}).mean, 7.0);
  EXPECT_TRUE(std::isnan(mean_ci95({}).mean));
  EXPECT_NEAR(student_t975(1), 12.706, 1e-3);
  EXPECT_NEAR(student_t975(31), 2.0395, 1e-3);
  EXPECT_NEAR(student_t975(100), 1.9840, 1e-3);
  EXPECT_NEAR(student_t975(100000), 1.95996, 1e-4);
}

}  // namespace
}  // namespace hotpath::util
