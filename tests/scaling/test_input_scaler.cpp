// The input scaler (src/scaling): the forms of --scaler, the rolling statistics against a direct
// computation over the past N raw ticks only, the fixed scaler, reset, batch, and the fit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/zoo.hpp"
#include "scaling/input_scaler.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

Model small_model(int I) {
  auto m = *zoo_model("lstm_s");
  // Only the input size matters to a scaler.
  m.config.input_size = I;
  return m;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ScalerChoice, ParsesTheThreeFormsAndNamesBadOnes) {
  EXPECT_EQ(parse_scaler("none").kind, ScalerKind::none);
  EXPECT_EQ(parse_scaler("model").kind, ScalerKind::model);
  EXPECT_EQ(parse_scaler("rolling:2"), (ScalerChoice{ScalerKind::rolling, 2}));
  EXPECT_EQ(scaler_name(parse_scaler("rolling:250")), "rolling:250");
  // N is read as every integer of a flag is: decimal, an optional sign.
  EXPECT_EQ(parse_scaler("rolling:010"), (ScalerChoice{ScalerKind::rolling, 10}));
  EXPECT_EQ(parse_scaler("rolling:+5"), (ScalerChoice{ScalerKind::rolling, 5}));
  for (const char* bad : {"", "rolling", "rolling:", "rolling:5x", "rolling:0x10", "rolling:1e3", "rolling:5.0",
                          "rolling: 5", "rolling:99999999999", "Model", "zscore"}) {
    const std::string e = error_of([&] { parse_scaler(bad); });
    EXPECT_NE(e.find("expected none, model or rolling:N"), std::string::npos) << bad << ": " << e;
  }
  // A rolling scaler whose N is a number out of range: the bound it breaks, not "unknown scaler".
  for (const char* small : {"rolling:1", "rolling:0", "rolling:-5"})
    EXPECT_EQ(error_of([&] { parse_scaler(small); }),
              std::string("scaler '") + small + "': N must be >= 2 (fewer ticks have no spread) (rolling:N with N in 2..1000000)");
  EXPECT_NO_THROW(parse_scaler("rolling:" + std::to_string(kMaxRollingWindow)));
  EXPECT_EQ(error_of([&] { parse_scaler("rolling:" + std::to_string(kMaxRollingWindow + 1)); }),
            "scaler 'rolling:1000001': N must be <= 1000000 (rolling:N with N in 2..1000000)");
}

TEST(ScalerChoice, DefaultIsTheModelsScalerAndModelNeedsOne) {
  Model m = small_model(3);
  EXPECT_EQ(resolve_scaler(m, std::nullopt).kind, ScalerKind::none);
  EXPECT_NE(error_of([&] { resolve_scaler(m, ScalerChoice{ScalerKind::model, 0}); }).find("carries no input scaler"),
            std::string::npos);
  m.input_scaler = InputNormalization{{0, 0, 0}, {1, 1, 1}, ""};
  EXPECT_EQ(resolve_scaler(m, std::nullopt).kind, ScalerKind::model);
  EXPECT_EQ(resolve_scaler(m, ScalerChoice{ScalerKind::none, 0}).kind, ScalerKind::none);
  // The ring of a rolling scaler is bounded.
  Model wide = small_model(1 << 20);
  EXPECT_NE(error_of([&] { resolve_scaler(wide, ScalerChoice{ScalerKind::rolling, 1000}); }).find("1 GiB"),
            std::string::npos);
}

// The statistics tick t is scaled with, straight from the definition: the raw inputs of ticks
// max(0, t-N) .. t-1, mean and population standard deviation (two passes, float64).
void direct_stats(const std::vector<std::vector<float>>& raw, long long t, int N, size_t i, double* mean, double* mul) {
  const long long from = std::max(0LL, t - N);
  const long long n = t - from;
  *mean = 0;
  *mul = 1;
  if (n == 0) return;
  double s = 0;
  for (long long r = from; r < t; ++r) s += raw[size_t(r)][i];
  *mean = s / double(n);
  if (n < 2) return;
  double ss = 0;
  for (long long r = from; r < t; ++r) ss += (raw[size_t(r)][i] - *mean) * (raw[size_t(r)][i] - *mean);
  const double std = std::sqrt(ss / double(n));
  if (std > 1e-12 * std::max(1.0, std::abs(*mean))) *mul = 1.0 / std;
}

TEST(RollingScaler, StatisticsOfThePastNTicksOnly) {
  constexpr int I = 4, N = 7;
  const Model m = small_model(I);
  InputScaler sc(m, ScalerChoice{ScalerKind::rolling, N});
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> raw;
  // Feature 0: a large mean against its spread (cancellation); 1: plain; 2: constant (std 0: scale 1);
  // 3: a drifting level. Many times N ticks, so the sums are restarted from the ring several times.
  for (long long t = 0; t < 20 * N + 3; ++t) {
    const std::vector<float> x = {10000.0f + 0.01f * g(rng), g(rng), 2.5f, 0.1f * float(t) + g(rng)};
    // The statistics tick t will be scaled with (prepare() may not have run yet: scale() runs it).
    InputScaler view = sc;
    view.prepare();
    for (size_t i = 0; i < I; ++i) {
      double mean, mul;
      direct_stats(raw, t, N, i, &mean, &mul);
      EXPECT_NEAR(view.shift()[i], mean, 1e-12 * std::max(1.0, std::abs(mean))) << "tick " << t << " feature " << i;
      EXPECT_NEAR(view.mul()[i], mul, 1e-7 * mul) << "tick " << t << " feature " << i;
    }
    if (t >= 2) EXPECT_EQ(view.mul()[2], 1.0) << "a constant feature keeps scale 1";
    // Tick t scaled with the statistics of the ticks before it, in float and in float64.
    float out[I];
    double outd[I];
    InputScaler copy = sc;
    copy.scale(x, outd);
    sc.scale(x, out);
    for (size_t i = 0; i < I; ++i) {
      EXPECT_EQ(out[i], float(outd[i])) << "the float path rounds the float64 result once";
      EXPECT_EQ(outd[i], (double(x[i]) - view.shift()[i]) * view.mul()[i]);
    }
    raw.push_back(x);
    if (t % 3 == 0) sc.prepare();  // scale() of the next tick prepares when the caller did not
  }
}

TEST(RollingScaler, ResetForgetsTheHistory) {
  const Model m = small_model(2);
  InputScaler a(m, ScalerChoice{ScalerKind::rolling, 3});
  InputScaler fresh = a;
  const std::vector<float> x = {4.0f, -1.0f}, y = {6.0f, 3.0f};
  float o[2];
  a.scale(x, o);
  a.prepare();
  a.scale(y, o);
  a.prepare();
  EXPECT_NE(a.shift()[0], 0.0);
  a.reset();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a.shift()[i], fresh.shift()[i]);
    EXPECT_EQ(a.mul()[i], fresh.mul()[i]);
  }
  a.scale(y, o);  // the first tick after reset is not scaled: no history
  EXPECT_EQ(o[0], 6.0f);
  EXPECT_EQ(o[1], 3.0f);
}

TEST(FixedScaler, ModelMeanAndScaleAndBatch) {
  Model m = small_model(3);
  m.input_scaler = InputNormalization{{1.0, -2.0, 100.0}, {2.0, 0.5, 4.0}, ""};
  InputScaler sc(m, std::nullopt);
  EXPECT_TRUE(sc.active());
  const std::vector<float> x = {5.0f, -1.0f, 96.0f};
  float o[3];
  sc.scale(x, o);
  EXPECT_EQ(o[0], 2.0f);
  EXPECT_EQ(o[1], 2.0f);
  EXPECT_EQ(o[2], -1.0f);
  sc.prepare();
  sc.scale(x, o);  // fixed: the same every tick
  EXPECT_EQ(o[0], 2.0f);
  // Batch: every element, row by row.
  const std::vector<float> rows = {5.0f, -1.0f, 96.0f, 1.0f, -2.0f, 100.0f};
  std::vector<float> out(6);
  sc.scale_batch(rows, out.data());
  EXPECT_EQ(out, (std::vector<float>{2.0f, 2.0f, -1.0f, 0.0f, 0.0f, 0.0f}));
  // none copies x unchanged.
  InputScaler none(m, ScalerChoice{ScalerKind::none, 0});
  none.scale(x, o);
  EXPECT_EQ(o[2], 96.0f);
  // rolling has no meaning for independent windows.
  InputScaler rolling(m, ScalerChoice{ScalerKind::rolling, 5});
  EXPECT_NE(error_of([&] { rolling.scale_batch(rows, out.data()); }).find("needs a tick stream"), std::string::npos);
}

TEST(FitNormalization, MeanAndPopulationStdOfTheFirstRowsOnly) {
  // rows 0..2 are fitted; row 3 is huge and must not matter.
  const std::vector<double> v = {1, 10, 5, 2, 20, 5, 3, 30, 5, 1e9, -1e9, 1e9};
  std::vector<size_t> constant;
  const InputNormalization n = fit_normalization(v, 3, 3, &constant);
  EXPECT_DOUBLE_EQ(n.mean[0], 2.0);
  EXPECT_DOUBLE_EQ(n.mean[1], 20.0);
  EXPECT_DOUBLE_EQ(n.scale[0], std::sqrt(2.0 / 3.0));
  EXPECT_DOUBLE_EQ(n.scale[1], std::sqrt(200.0 / 3.0));
  EXPECT_EQ(n.mean[2], 5.0);
  EXPECT_EQ(n.scale[2], 1.0);
  EXPECT_EQ(constant, std::vector<size_t>{2});
}

}  // namespace
}  // namespace hotpath
