// The cpu backend's backtest path: S series [S, T, I] -> [S, T, O] on tiles of windows (or
// series) advanced in lockstep, checked against the float64 reference series by series, on the golden
// PyTorch cases, on awkward shapes (T below, at and above W; W = 1), with the scalers, threaded and
// inline, and through the engine's input checks.
//
// Tolerances: the precision's bound in docs/model.md (fp32 1e-5, bf16 2e-3); int8's per-model bound
// (1.5 x the error its weight rounding alone makes). The golden bf16 cases are also held to 2 x their
// weight-rounding figure + 1e-4, as the step path's tests are.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "cpu/cpu_backend.hpp"
#include "engine/engine.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"

using namespace hotpath;
using namespace hotpath::cputest;

namespace {

// The float64 reference of every series in turn: [S, T, O].
std::vector<double> reference_series(const Model& m, Mode mode, int W, const std::vector<float>& x, size_t S,
                                     size_t T) {
  const size_t I = size_t(m.config.input_size);
  std::vector<double> all;
  for (size_t s = 0; s < S; ++s) {
    const std::span<const float> xs(x.data() + s * T * I, T * I);
    const auto z = mode == Mode::window ? reference::sliding_window(m, xs, T, W) : reference::streaming(m, xs, T);
    all.insert(all.end(), z.begin(), z.end());
  }
  return all;
}

std::vector<double> backtest(Backend& b, const std::vector<float>& x, size_t S, size_t T,
                             std::atomic<size_t>* done = nullptr) {
  std::vector<double> z(S * T * size_t(b.config().output_size), std::nan(""));
  b.backtest(x, S, T, Backend::BacktestOutput{nullptr, z.data()}, done);
  return z;
}

double bound_for(const Model& m, Precision p, Mode mode, int W, const std::vector<float>& x, size_t S, size_t T) {
  if (p != Precision::int8) return error_bound(p);
  const auto exact = reference_series(m, mode, W, x, S, T);
  const auto rounded = reference_series(int8_rounded(m), mode, W, x, S, T);
  return int8_error_bound(reference::normalized_error(rounded, exact));
}

struct Case {
  int I, H, L, O, W;
  size_t S, T;
};

std::string case_name(const Case& c) {
  return "I" + std::to_string(c.I) + "_H" + std::to_string(c.H) + "_L" + std::to_string(c.L) + "_O" +
         std::to_string(c.O) + "_W" + std::to_string(c.W) + "_S" + std::to_string(c.S) + "_T" + std::to_string(c.T);
}

// T below W (only partial windows), T = W, W = 1 (no head), several tiles per series and a last
// partial tile, one series and several (more than a tile's columns, and not a multiple of them).
const Case kCases[] = {
    {3, 5, 1, 1, 7, 1, 4},     {3, 5, 2, 2, 7, 3, 7},       {7, 17, 2, 3, 1, 5, 23},
    {9, 33, 3, 5, 13, 6, 61},  {32, 64, 2, 1, 50, 2, 130},  {16, 40, 1, 33, 4, 9, 19},
};

class CpuBacktest_ : public ::testing::TestWithParam<std::tuple<Case, Precision, Variant>> {};

TEST_P(CpuBacktest_, EverySeriesMatchesTheReference) {
  const auto& [c, prec, variant] = GetParam();
  if (prec == Precision::int8 && variant.isa == "avx2")
    GTEST_SKIP() << "the cpu backend refuses int8 on AVX2 (no int8 dot product; tested in test_cpu_int8)";
  IsaScope isa(variant);
  const Model m = random_model(c.I, c.H, c.L, c.O, true, true, 77 + c.H);
  const auto x = random_inputs(c.S * c.T, c.I, 5 + c.T);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    BackendOptions opt;
    opt.mode = mode;
    opt.window = c.W;
    opt.precision = prec;
    auto b = make_cpu_backend(m, opt);
    std::atomic<size_t> done{0};
    const auto z = backtest(*b, x, c.S, c.T, &done);
    EXPECT_EQ(done.load(), c.S * c.T);  // every row counted once
    const auto ref = reference_series(m, mode, c.W, x, c.S, c.T);
    const double err = reference::normalized_error(z, ref);  // NaN (a row never written) fails too
    EXPECT_LE(err, bound_for(m, prec, mode, c.W, x, c.S, c.T)) << b->variant();
    // The backtest leaves the tick state reset: a step now is tick 0 of a fresh stream.
    EXPECT_EQ(b->ticks(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuBacktest_,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Precision::fp32, Precision::bf16, Precision::int8),
                                            ::testing::ValuesIn(available_variants())),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) + "_" + precision_name(std::get<1>(info.param)) +
                                  "_" + std::get<2>(info.param).label;
                         });

// The golden PyTorch cases as three series (the golden inputs, the same reversed in time, the golden
// inputs again): the first and last must give PyTorch's outputs, and exactly the same numbers.
TEST(CpuBacktest, GoldenCasesAsSeveralSeries) {
  for (const char* name : {"tiny", "small2x128", "multi_out"}) {
    const auto g = test_support::load_golden(name);
    const size_t T = g.ticks, I = size_t(g.model.config.input_size), O = size_t(g.model.config.output_size);
    std::vector<float> x = g.inputs;
    for (size_t t = 0; t < T; ++t) x.insert(x.end(), g.inputs.begin() + long((T - 1 - t) * I), g.inputs.begin() + long((T - t) * I));
    x.insert(x.end(), g.inputs.begin(), g.inputs.end());
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      for (Mode mode : {Mode::window, Mode::streaming}) {
        SCOPED_TRACE(std::string(name) + " " + precision_name(p) + " " + mode_name(mode));
        BackendOptions opt;
        opt.mode = mode;
        opt.window = g.window;
        opt.precision = p;
        auto b = make_cpu_backend(g.model, opt);
        const auto z = backtest(*b, x, 3, T);
        const std::vector<double> first(z.begin(), z.begin() + long(T * O));
        const std::vector<double> last(z.begin() + long(2 * T * O), z.end());
        EXPECT_EQ(first, last);
        const size_t from = mode == Mode::window ? size_t(g.window - 1) * O : 0;
        const std::vector<double> got(first.begin() + long(from), first.end());
        const auto& expected = mode == Mode::window ? g.window_expected : g.streaming_expected;
        EXPECT_LE(reference::normalized_error(got, expected), error_bound(p));
        EXPECT_LE(reference::normalized_error(z, reference_series(g.model, mode, g.window, x, 3, T)), error_bound(p));
      }
    }
  }
}

// Work spread over a cpuset's workers (and the caller) gives the same numbers as one thread: each
// column is computed alone whatever tile and thread it lands in.
TEST(CpuBacktest, ThreadedIsBitwiseInline) {
  const Model m = random_model(8, 48, 2, 2, true, true, 3);
  const size_t S = 5, T = 97;
  const auto x = random_inputs(S * T, 8, 4);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    BackendOptions opt;
    opt.mode = mode;
    opt.window = 20;
    auto inline_b = make_cpu_backend(m, opt);
    opt.cpuset = two_cores();
    auto threaded = make_cpu_backend(m, opt);
    EXPECT_EQ(backtest(*inline_b, x, S, T), backtest(*threaded, x, S, T)) << mode_name(mode);
  }
}

// A rolling scaler restarts with every series, as a fresh stream would; the model's fixed scaler
// applies to every tick. The float64 reference backend stepping each series is the truth.
TEST(CpuBacktest, ScalersAsStepWouldApplyThem) {
  Model m = random_model(4, 24, 2, 1, true, true, 8);
  m.input_scaler = InputNormalization{{0.5, -1, 2, 0}, {2, 0.5, 1, 3}, ""};
  const size_t S = 3, T = 40;
  auto x = random_inputs(S * T, 4, 9);
  for (auto& v : x) v = v * 3 + 10;
  for (const char* scaler : {"model", "rolling:5"}) {
    for (Mode mode : {Mode::window, Mode::streaming}) {
      SCOPED_TRACE(std::string(scaler) + " " + mode_name(mode));
      EngineOptions eo;
      eo.mode = mode;
      eo.window = 6;
      eo.scaler = parse_scaler(scaler);
      eo.backend = BackendKind::ref;
      Engine ref(m, eo);
      eo.backend = BackendKind::cpu;
      Engine cpu(m, eo);
      std::vector<double> zr(S * T), zc(S * T);
      ref.backtest(x, S, T, std::span<double>(zr));
      cpu.backtest(x, S, T, std::span<double>(zc));
      EXPECT_LE(reference::normalized_error(zc, zr), error_bound(Precision::fp32));
      // The reference backend's backtest is its own step loop: series 1 equals a fresh run of it alone.
      ref.reset();
      std::vector<double> alone(T);
      ref.run(std::span<const float>(x.data() + T * 4, T * 4), T, std::span<double>(alone));
      EXPECT_EQ(std::vector<double>(zr.begin() + long(T), zr.begin() + long(2 * T)), alone);
    }
  }
}

// The engine checks every input before anything runs: a NaN names its series, tick and input, and
// the output buffer is untouched; sizes that do not add up are errors naming both.
TEST(CpuBacktest, EngineRefusesBadSeriesBeforeRunning) {
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  EngineOptions eo;
  eo.backend = BackendKind::cpu;
  eo.window = 4;
  Engine e(m, eo);
  const size_t S = 2, T = 10;
  auto x = random_inputs(S * T, 3, 2);
  x[(1 * T + 7) * 3 + 2] = std::numeric_limits<float>::infinity();
  std::vector<float> out(S * T * 2, -7.0f);
  try {
    e.backtest(x, S, T, std::span<float>(out));
    ADD_FAILURE() << "no error";
  } catch (const TickError& err) {
    EXPECT_NE(std::string(err.what()).find("series 1, tick 7, input 2 is Inf"), std::string::npos) << err.what();
  }
  for (float v : out) EXPECT_EQ(v, -7.0f);
  x[(1 * T + 7) * 3 + 2] = 0;
  EXPECT_THROW(e.backtest(std::span<const float>(x).first(x.size() - 1), S, T, std::span<float>(out)), Error);
  std::vector<float> small(out.size() - 1);
  EXPECT_THROW(e.backtest(x, S, T, std::span<float>(small)), Error);
  e.backtest(x, S, T, std::span<float>(out));
  for (float v : out) EXPECT_TRUE(std::isfinite(v) && v != -7.0f);
  // Nothing to do is not an error.
  std::vector<float> none;
  e.backtest(std::span<const float>(), 0, T, std::span<float>(none));
  e.backtest(std::span<const float>(), S, 0, std::span<float>(none));
}

// `stop`, set by another thread, ends a backtest early (what Python's Ctrl-C does): already set, nothing
// is computed; set once rows are coming, the call returns long before the end. Either way the engine is
// left reset, and its next backtest gives what a fresh engine's does, bit for bit. `done` moves within
// a tile too: one streaming series is one tile of T steps.
TEST(CpuBacktest, StopEndsItEarlyAndLeavesTheEngineUsable) {
  const Model m = random_model(8, 32, 2, 1, true, true, 31);
  const size_t T = 400000;
  const auto x = random_inputs(T, 8, 32);
  const std::span<const float> head(x.data(), 300 * 8);
  for (const char* backend : {"cpu", "ref"}) {
    for (Mode mode : {Mode::streaming, Mode::window}) {
      SCOPED_TRACE(std::string(backend) + " " + mode_name(mode));
      EngineOptions eo;
      eo.backend = util::parse_name<BackendKind>(backend);
      eo.mode = mode;
      eo.window = 20;
      Engine e(m, eo), fresh(m, eo);
      std::vector<float> out(T, -7.0f);
      std::atomic<size_t> done{0};
      std::atomic<bool> stop{true};
      e.backtest(x, 1, T, std::span<float>(out), &done, &stop);
      EXPECT_EQ(done.load(), 0u);
      for (float v : std::span<float>(out).first(1000)) ASSERT_EQ(v, -7.0f);
      stop = false;
      std::thread stopper([&] {
        while (done.load() == 0) std::this_thread::yield();
        stop = true;
      });
      e.backtest(x, 1, T, std::span<float>(out), &done, &stop);
      stopper.join();
      EXPECT_GT(done.load(), 0u);
      EXPECT_LT(done.load(), T / 2);
      EXPECT_EQ(e.ticks(), 0);
      std::vector<float> again(300), expected(300);
      e.backtest(head, 1, 300, std::span<float>(again));
      fresh.backtest(head, 1, 300, std::span<float>(expected));
      EXPECT_EQ(again, expected);
    }
  }
}

// A long series (many tiles per thread), against the reference in float64.
TEST(CpuBacktest, LongSeries) {
  const Model m = random_model(16, 32, 2, 1, true, true, 21);
  const size_t T = 6000;
  const auto x = random_inputs(T, 16, 22);
  BackendOptions opt;
  opt.window = 30;
  auto b = make_cpu_backend(m, opt);
  const auto z = backtest(*b, x, 1, T);
  EXPECT_LE(reference::normalized_error(z, reference::sliding_window(m, x, T, 30)), error_bound(Precision::fp32));
}

}  // namespace
