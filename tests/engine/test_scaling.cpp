// Input scaling through the engine, on every backend: the leak test ("change every input
// after t, outputs up to t stay bit-identical"), the fixed scaler against pre-scaled inputs, the fast
// paths against the float64 reference fed the same scaled inputs, batch, and refused ticks.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

// The backends and precisions the leak test covers. A new precision (int8) is one line here.
struct BackendCase {
  const char* label;
  const char* backend;
  std::optional<Precision> precision;
};
const BackendCase kBackends[] = {
    {"ref", "ref", std::nullopt},
    {"cpu_fp32", "cpu", Precision::fp32},
    {"cpu_bf16", "cpu", Precision::bf16},
    {"cpu_int8", "cpu", Precision::int8},
    {"cuda_fp16", "cuda", Precision::fp16},  // skipped where there is no usable GPU
};
const char* const kScalers[] = {"none", "model", "rolling:5"};

// lstm_s (I 32) with a scaler of its own: means of order 10, scales 0.5..4.
Model scaled_model() {
  Model m = *zoo_model("lstm_s");
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mean(5.0, 15.0), scale(0.5, 4.0);
  InputNormalization n;
  for (int i = 0; i < m.config.input_size; ++i) {
    n.mean.push_back(mean(rng));
    n.scale.push_back(scale(rng));
  }
  m.input_scaler = n;
  m.validate();
  return m;
}

// T ticks of inputs around the model scaler's means (so that scaling matters).
std::vector<float> series(size_t T, size_t I, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(10.0f, 3.0f);
  std::vector<float> x(T * I);
  for (auto& v : x) v = g(rng);
  return x;
}

EngineOptions options(const BackendCase& b, Mode mode, const std::string& scaler) {
  EngineOptions o;
  o.backend = util::parse_name<BackendKind>(b.backend);
  o.precision = b.precision;
  o.mode = mode;
  o.window = 8;
  o.scaler = parse_scaler(scaler);
  return o;
}

// Skips (with the reason) a backend this machine cannot run.
std::unique_ptr<Engine> open_or_skip(const Model& m, const EngineOptions& o, std::string* skip) {
  if (o.backend == BackendKind::cuda) {
    std::string why;
    if (!gpu::available(&why)) {
      *skip = "no usable GPU: " + why;
      return nullptr;
    }
  }
  try {
    return std::make_unique<Engine>(m, o);
  } catch (const UnsupportedError& e) {
    *skip = e.what();
    return nullptr;
  }
}

using LeakParam = std::tuple<BackendCase, Mode, const char*>;

class Leak : public ::testing::TestWithParam<LeakParam> {};

// Run a random series, then (after reset) the same series with every input after t replaced by other
// random values: outputs 0..t must be bit-identical. Outputs after t must change (the test would
// otherwise prove nothing).
TEST_P(Leak, NoOutputDependsOnALaterInput) {
  const auto& [b, mode, scaler] = GetParam();
  const Model m = scaled_model();
  std::string skip;
  auto engine = open_or_skip(m, options(b, mode, scaler), &skip);
  if (!engine) GTEST_SKIP() << skip;
  const size_t T = 40, I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const auto a = series(T, I, 1);
  const auto other = series(T, I, 2);
  for (const size_t t : {size_t(0), size_t(3), size_t(19)}) {
    std::vector<float> changed = a;
    std::copy(other.begin() + std::ptrdiff_t((t + 1) * I), other.end(), changed.begin() + std::ptrdiff_t((t + 1) * I));
    std::vector<float> za(T * O), zb(T * O);
    engine->reset();
    engine->run(a, T, std::span<float>(za));
    engine->reset();
    engine->run(changed, T, std::span<float>(zb));
    EXPECT_EQ(std::memcmp(za.data(), zb.data(), (t + 1) * O * sizeof(float)), 0)
        << b.label << " " << mode_name(mode) << " " << scaler << ": an output up to tick " << t
        << " changed with the inputs after it";
    EXPECT_NE(std::memcmp(za.data() + (t + 1) * O, zb.data() + (t + 1) * O, (T - t - 1) * O * sizeof(float)), 0)
        << "the changed inputs changed no output";
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryBackend, Leak,
    ::testing::Combine(::testing::ValuesIn(kBackends), ::testing::Values(Mode::window, Mode::streaming),
                       ::testing::ValuesIn(kScalers)),
    [](const ::testing::TestParamInfo<LeakParam>& info) {
      std::string s = std::string(std::get<0>(info.param).label) + "_" + mode_name(std::get<1>(info.param)) + "_" +
                      std::get<2>(info.param);
      for (char& c : s)
        if (c == ':') c = '_';
      return s;
    });

// ---- scaled outputs against the float64 reference ---------------------------------------------------

std::vector<double> run_f64(Engine& e, const std::vector<float>& x, size_t T) {
  std::vector<double> z(T * size_t(e.output_size()));
  e.run(x, T, std::span<double>(z));
  return z;
}

TEST(ScaledReference, FixedScalerEqualsPreScaledInputs) {
  // Means on a 1/16 grid, scales powers of two, inputs on a 1/256 grid: (x - mean) / scale is exact in
  // float and double, so the two runs must agree bit for bit.
  Model m = *zoo_model("lstm_s");
  const size_t I = size_t(m.config.input_size), T = 30;
  InputNormalization n;
  for (size_t i = 0; i < I; ++i) {
    n.mean.push_back(double(int(i % 7) - 3) / 16.0 + 8.0);
    n.scale.push_back(std::ldexp(1.0, int(i % 4) - 1));
  }
  m.input_scaler = n;
  std::mt19937_64 rng(5);
  std::vector<float> x(T * I), pre(T * I);
  for (size_t k = 0; k < x.size(); ++k) {
    x[k] = float(int(rng() % 4096)) / 256.0f;
    pre[k] = float((double(x[k]) - n.mean[k % I]) / n.scale[k % I]);
  }
  for (const Mode mode : {Mode::window, Mode::streaming}) {
    EngineOptions o;
    o.backend = BackendKind::ref;
    o.mode = mode;
    o.window = 6;
    Engine scaled(m, o);  // the default: the model's scaler
    EXPECT_EQ(scaled.scaler().kind, ScalerKind::model);
    o.scaler = ScalerChoice{ScalerKind::none, 0};
    Engine plain(m, o);
    EXPECT_EQ(run_f64(scaled, x, T), run_f64(plain, pre, T)) << mode_name(mode);
  }
  // Batch (fresh windows): the fixed scaler applies to every element.
  EngineOptions o;
  o.backend = BackendKind::ref;
  o.mode = Mode::batch;
  o.window = 5;
  Engine scaled(m, o);
  o.scaler = ScalerChoice{ScalerKind::none, 0};
  Engine plain(m, o);
  std::vector<float> za(6 * m.config.output_size), zb(za.size());
  scaled.run_batch(std::span(x).first(6 * 5 * I), 6, 5, za);
  plain.run_batch(std::span(pre).first(6 * 5 * I), 6, 5, zb);
  EXPECT_EQ(za, zb);
}

TEST(ScaledReference, CpuWithinTheFp32BoundOfTheScaledReference) {
  const Model m = scaled_model();
  const size_t T = 60, I = size_t(m.config.input_size);
  const auto x = series(T, I, 7);
  for (const Mode mode : {Mode::window, Mode::streaming})
    for (const char* scaler : {"model", "rolling:9"}) {
      Engine ref(m, options(kBackends[0], mode, scaler));
      Engine cpu(m, options(kBackends[1], mode, scaler));
      const auto zr = run_f64(ref, x, T), zc = run_f64(cpu, x, T);
      EXPECT_LE(reference::normalized_error(zc, zr), error_bound(Precision::fp32)) << mode_name(mode) << " " << scaler;
      // And the scaler matters: without it the outputs are elsewhere.
      Engine unscaled(m, options(kBackends[0], mode, "none"));
      EXPECT_GT(reference::normalized_error(run_f64(unscaled, x, T), zr), 1e-3) << mode_name(mode) << " " << scaler;
    }
}

TEST(ScaledReference, RollingIsTheReferenceOnRollingStatistics) {
  // rolling:N by hand: tick t scaled by the mean and population std of ticks t-N..t-1, then the plain
  // float64 reference on those inputs.
  const Model m = scaled_model();
  const size_t T = 25, I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const int N = 4;
  const auto x = series(T, I, 9);
  reference::Incremental inc(m, true, 1);
  std::vector<double> expected;
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> xs(I);
    const size_t from = t >= size_t(N) ? t - N : 0, n = t - from;
    for (size_t i = 0; i < I; ++i) {
      double mean = 0, ss = 0;
      for (size_t r = from; r < t; ++r) mean += x[r * I + i];
      if (n > 0) mean /= double(n);
      for (size_t r = from; r < t; ++r) ss += (x[r * I + i] - mean) * (x[r * I + i] - mean);
      const double scale = n >= 2 ? std::sqrt(ss / double(n)) : 1.0;
      xs[i] = (double(x[t * I + i]) - mean) / scale;
    }
    const auto z = inc.tick(std::span<const double>(xs));
    expected.insert(expected.end(), z.begin(), z.end());
  }
  Engine ref(m, options(kBackends[0], Mode::streaming, "rolling:4"));
  const auto got = run_f64(ref, x, T);
  ASSERT_EQ(got.size(), T * O);
  EXPECT_LE(reference::normalized_error(got, expected), 1e-12);
}

TEST(ScaledEngine, RollingRefusedForBatchAndModelNeedsAScaler) {
  const Model m = scaled_model();
  for (const char* backend : {"ref", "cpu"}) {
    EngineOptions o;
    o.backend = util::parse_name<BackendKind>(backend);
    o.mode = Mode::batch;
    o.window = 4;
    o.scaler = parse_scaler("rolling:3");
    Engine e(m, o);
    std::vector<float> x(2 * 4 * size_t(m.config.input_size), 1.0f), z(2 * size_t(m.config.output_size));
    try {
      e.run_batch(x, 2, 4, z);
      ADD_FAILURE() << backend << ": rolling ran a batch";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("needs a tick stream"), std::string::npos) << err.what();
    }
  }
  EngineOptions o;
  o.backend = BackendKind::ref;
  o.window = 4;
  o.scaler = parse_scaler("model");
  try {
    Engine e(*zoo_model("lstm_s"), o);
    ADD_FAILURE() << "scaler model on a model without one";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("carries no input scaler"), std::string::npos) << err.what();
  }
}

TEST(ScaledEngine, ARefusedTickIsNotObserved) {
  // A NaN tick is refused and leaves the rolling history exactly as before: the run with it (refused)
  // equals the run without it, bit for bit.
  const Model m = scaled_model();
  const size_t T = 20, I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const auto x = series(T, I, 4);
  for (const BackendCase& b : {kBackends[0], kBackends[1], kBackends[2]})
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      Engine e(m, options(b, mode, "rolling:3"));
      std::vector<float> clean(T * O), with_bad(T * O), bad(I, 1.0f);
      bad[5] = std::numeric_limits<float>::quiet_NaN();
      e.run(x, T, std::span<float>(clean));
      e.reset();
      for (size_t t = 0; t < T; ++t) {
        if (t == 7) EXPECT_THROW(e.step(bad, std::span<float>(with_bad).subspan(t * O, O)), TickError);
        e.step(std::span(x).subspan(t * I, I), std::span<float>(with_bad).subspan(t * O, O));
      }
      EXPECT_EQ(clean, with_bad) << b.label << " " << mode_name(mode);
    }
}

}  // namespace
}  // namespace hotpath
