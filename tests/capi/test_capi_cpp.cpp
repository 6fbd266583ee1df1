// The C++ wrapper (include/hotpath/hotpath.hpp) over the C ABI: errors become hotpath::error with the
// status and the library's message, handles are move-only and closed once, outputs are the C calls'.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/hotpath.hpp"

namespace {

const std::string kTiny = std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors";

std::vector<float> inputs(size_t n) {
  std::vector<float> x(n);
  for (size_t k = 0; k < n; ++k) x[k] = float(std::cos(0.5 * double(k)));
  return x;
}

TEST(CapiCpp, ModelAndEngine) {
  EXPECT_EQ(hotpath::version(), HOTPATH_VERSION);
  const hotpath::model m = hotpath::model::open(kTiny);
  EXPECT_EQ(m.input_size(), 4);
  EXPECT_EQ(m.output_size(), 1);
  EXPECT_EQ(m.name(), kTiny);
  hotpath::engine_options o;
  o.backend = "cpu";
  o.window = 5;
  hotpath::engine e(m, o);
  EXPECT_EQ(e.backend(), "cpu");
  EXPECT_EQ(e.precision(), "fp32");
  EXPECT_EQ(e.mode(), "window");
  EXPECT_EQ(e.window(), 5);
  EXPECT_EQ(e.input_size(), 4u);
  EXPECT_EQ(e.output_size(), 1u);

  const std::vector<float> x = inputs(4 * 12);
  const std::vector<float> by_run = e.run(x);
  ASSERT_EQ(by_run.size(), 12u);
  EXPECT_EQ(e.ticks(), 12);
  e.reset();
  EXPECT_EQ(e.ticks(), 0);
  for (size_t t = 0; t < 12; ++t) {
    const std::vector<float> out = e.step(std::vector<float>(x.begin() + long(t) * 4, x.begin() + long(t + 1) * 4));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], by_run[t]) << "tick " << t;
  }
  // The same through the C ABI directly.
  float c_out = 0;
  e.reset();
  ASSERT_EQ(hotpath_engine_step(e.get(), x.data(), 4, &c_out, 1), HOTPATH_OK);
  EXPECT_EQ(c_out, by_run[0]);
  (void)e.counters();
  (void)e.facts();

  // A backtest of two series: each from zero state (the first as run() gave it, within float's rounding:
  // the throughput path has kernels of its own), the engine left reset; device pointers are refused here
  // (host memory is not GPU memory) with the status and the message.
  std::vector<float> two(x);
  two.insert(two.end(), x.begin(), x.end());
  const std::vector<float> bt = e.backtest(two, 2, 12);
  ASSERT_EQ(bt.size(), 24u);
  for (size_t t = 0; t < 12; ++t) {
    EXPECT_NEAR(bt[t], by_run[t], 1e-5) << "tick " << t;
    EXPECT_EQ(bt[12 + t], bt[t]) << "tick " << t;
  }
  EXPECT_EQ(e.ticks(), 0);
  std::vector<float> out(24);
  try {
    e.backtest_on_device(two.data(), 2, 12, out.data());
    ADD_FAILURE() << "host memory taken as device arrays";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.what()).find("not GPU memory"), std::string::npos) << err.what();
  }

  hotpath::engine moved = std::move(e);
  EXPECT_EQ(moved.ticks(), 0);
}

// Telemetry through the wrapper: off throws hotpath::error, on counts the ticks.
TEST(CapiCpp, Metrics) {
  const hotpath::model m = hotpath::model::open(kTiny);
  hotpath::engine_options o;
  o.backend = "cpu";
  o.mode = "streaming";
  o.warm = false;
  {
    const hotpath::engine off(m, o);
    try {
      (void)off.metrics();
      FAIL() << "metrics of an engine made without";
    } catch (const hotpath::error& e) {
      EXPECT_EQ(e.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    }
  }
  o.metrics = true;
  hotpath::engine e(m, o);
  (void)e.run(inputs(4 * 20));
  const hotpath_metrics_snapshot s = e.metrics();
  EXPECT_EQ(s.count, 20u);
  EXPECT_EQ(s.answered, 20u);
  EXPECT_EQ(std::string(s.model_id), m.id());
  EXPECT_GT(s.p99_ns, 0);
}

TEST(CapiCpp, ScalerWarmAndInt8) {
  const hotpath::model m = hotpath::model::open(kTiny);
  hotpath::engine_options o;
  o.backend = "cpu";
  o.mode = "streaming";
  const hotpath::engine plain(m, o);
  EXPECT_EQ(plain.scaler(), "none");
  EXPECT_GT(plain.warm_ticks(), 0);
  o.scaler = "rolling:3";
  o.warm = false;
  o.precision = "int8";
  hotpath::engine e(m, o);
  EXPECT_EQ(e.scaler(), "rolling:3");
  EXPECT_EQ(e.warm_ticks(), 0);
  EXPECT_EQ(e.precision(), "int8");
  EXPECT_EQ(e.run(inputs(4 * 6)).size(), 6u);
  o.scaler = "rolling";
  try {
    hotpath::engine bad(m, o);
    FAIL() << "no exception";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.what()).find("unknown scaler 'rolling'"), std::string::npos) << err.what();
  }
  o.scaler = "";
  o.kernel = "bogus";
  try {
    hotpath::engine bad(m, o);
    FAIL() << "no exception";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.what()).find("unknown cuda kernel 'bogus'"), std::string::npos) << err.what();
  }
}

TEST(CapiCpp, ErrorsThrowWithStatusAndMessage) {
  try {
    (void)hotpath::model::open("/nonexistent/model.safetensors");
    FAIL() << "no exception";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.what()).find("/nonexistent/model.safetensors"), std::string::npos) << err.what();
  }
  const hotpath::model m = hotpath::model::open(kTiny);
  hotpath::engine_options o;
  o.backend = "cpu";
  o.precision = "fp8";
  o.window = 5;
  EXPECT_THROW(hotpath::engine(m, o), hotpath::error);
  o.precision = "";
  hotpath::engine e(m, o);
  std::vector<float> x(4, std::numeric_limits<float>::quiet_NaN());
  try {
    (void)e.step(x);
    FAIL() << "no exception";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_TICK);
    EXPECT_NE(std::string(err.what()).find("NaN"), std::string::npos) << err.what();
  }
  x.resize(3, 0.0f);
  try {
    (void)e.step(x);
    FAIL() << "no exception";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(err.what(), "hotpath_engine_step: input_len is 3, expected 4 (the model's input size I)");
  }
  // A series that is not a whole number of ticks.
  EXPECT_THROW((void)e.run(std::vector<float>(7, 0.0f)), hotpath::error);
  EXPECT_EQ(e.ticks(), 0);
}

}  // namespace

// hotpath::instances: refusals carry the C ABI's status and message; on a GPU, two instances each
// answer (their engines are views owned by the set).
TEST(CapiCpp, InstancesRefuseAndServe) {
  const hotpath::model m = hotpath::model::open("lstm_s");
  hotpath::engine_options o;
  o.backend = "cpu";
  hotpath::instances_options io;
  io.count = 2;
  try {
    hotpath::instances set(m, o, io);
    FAIL() << "a cpu instance set was made";
  } catch (const hotpath::error& err) {
    EXPECT_EQ(err.status(), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.what()).find("need the cuda backend"), std::string::npos) << err.what();
  }
  o.backend = "cuda";
  try {
    hotpath::instances set(m, o, io);
    ASSERT_EQ(set.size(), 2u);
    for (size_t k = 0; k < set.size(); ++k) {
      hotpath::engine e = set.at(k);
      EXPECT_EQ(e.backend(), "cuda");
      EXPECT_EQ(e.step(std::vector<float>(e.input_size(), 0.1f)).size(), e.output_size());
    }
    set.restart(1);
    EXPECT_EQ(set.at(1).ticks(), 0);
  } catch (const hotpath::error& err) {
    ASSERT_EQ(err.status(), HOTPATH_ERROR_UNSUPPORTED) << err.what();
    GTEST_SKIP() << "no usable GPU: checked only the refusals (" << err.what() << ")";
  }
}
