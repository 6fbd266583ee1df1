// The C ABI on the GPU: backend cuda (and auto choosing it) through hotpath_engine_*, against the float64
// reference, a NaN tick refused with the state unchanged, and counters read back. Without a usable GPU
// only the refusal is checked (HOTPATH_ERROR_UNSUPPORTED, named), and the test says it skipped the rest.
#include <gtest/gtest.h>

#include <limits>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "common/golden.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "hotpath/hotpath.h"
#include "reference/reference.hpp"

namespace {

struct EngineCloser {
  void operator()(hotpath_engine* e) const { hotpath_engine_close(e); }
};
using EnginePtr = std::unique_ptr<hotpath_engine, EngineCloser>;

using ModelPtr = std::unique_ptr<hotpath_model, void (*)(hotpath_model*)>;

// The golden case small2x128's model, through the C ABI.
ModelPtr open_golden_model() {
  const std::string path = std::string(HOTPATH_GOLDEN_DIR) + "/small2x128.model.safetensors";
  hotpath_model* raw = nullptr;
  EXPECT_EQ(hotpath_model_open(path.c_str(), nullptr, nullptr, &raw), HOTPATH_OK) << hotpath_last_error();
  return ModelPtr(raw, hotpath_model_close);
}

TEST(CapiGpu, CudaThroughTheCAbi) {
  const auto g = hotpath::test_support::load_golden("small2x128");
  const ModelPtr model = open_golden_model();
  ASSERT_NE(model, nullptr);

  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cuda";
  o.window = g.window;
  std::string why;
  if (!hotpath::gpu::available(&why)) {
    hotpath_engine* e = nullptr;
    EXPECT_EQ(hotpath_engine_open(model.get(), &o, &e), HOTPATH_ERROR_UNSUPPORTED) << hotpath_last_error();
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(hotpath_last_error()).find("cuda"), std::string::npos) << hotpath_last_error();
    GTEST_SKIP() << "no usable GPU (" << why << "): checked only that backend cuda is refused, by name";
  }

  // auto chooses cuda here.
  o.backend = "auto";
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(model.get(), &o, &e), HOTPATH_OK) << hotpath_last_error();
  const EnginePtr engine(e);
  hotpath_engine_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_engine_get_info(e, &info), HOTPATH_OK);
  EXPECT_STREQ(info.backend, "cuda");
  const hotpath::Precision precision = hotpath::parse_precision(info.precision);

  const size_t I = 32, O = 1, T = g.ticks;
  std::vector<float> out(T * O);
  for (size_t t = 0; t < T; ++t) {
    if (t == 60) {  // a NaN tick: refused, nothing changes
      std::vector<float> bad(g.inputs.begin() + long(t * I), g.inputs.begin() + long((t + 1) * I));
      bad[3] = std::numeric_limits<float>::quiet_NaN();
      float z = 0;
      EXPECT_EQ(hotpath_engine_step(e, bad.data(), I, &z, O), HOTPATH_ERROR_TICK);
      EXPECT_NE(std::string(hotpath_last_error()).find("NaN"), std::string::npos) << hotpath_last_error();
    }
    ASSERT_EQ(hotpath_engine_step(e, g.inputs.data() + t * I, I, out.data() + t * O, O), HOTPATH_OK)
        << hotpath_last_error();
  }
  const std::vector<double> got(out.begin() + long(g.window - 1), out.end());
  EXPECT_LE(hotpath::reference::normalized_error(got, g.window_expected), hotpath::error_bound(precision));

  size_t n = 0;
  ASSERT_EQ(hotpath_engine_counters(e, &n), HOTPATH_OK) << hotpath_last_error();
  for (size_t k = 0; k < n; ++k) {
    const char* name = nullptr;
    double value = 0;
    ASSERT_EQ(hotpath_engine_counter(e, k, &name, &value), HOTPATH_OK);
    EXPECT_NE(name, nullptr);
  }
}

// Many instances through the C ABI: a set of 4 (green contexts, and one shared launch), each
// engine driven from its own thread with its own series, each checked against float64; one restarted
// while the others serve; closing an instance's engine handle leaves it to the set. Without a GPU only
// the refusal is checked.
TEST(CapiGpu, InstancesThroughTheCAbi) {
  const auto g = hotpath::test_support::load_golden("small2x128");
  const ModelPtr model = open_golden_model();
  ASSERT_NE(model, nullptr);
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cuda";
  o.window = g.window;
  hotpath_instances_options io = HOTPATH_INSTANCES_OPTIONS_INIT;
  io.count = 4;
  std::string why;
  if (!hotpath::gpu::available(&why)) {
    hotpath_instances* set = nullptr;
    EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_UNSUPPORTED) << hotpath_last_error();
    EXPECT_EQ(set, nullptr);
    GTEST_SKIP() << "no usable GPU (" << why << "): checked only that a set of instances is refused";
  }
  const size_t I = 32, O = 1, T = g.ticks;
  for (const char* isolation : {"green", "shared"}) {
    SCOPED_TRACE(isolation);
    io.isolation = isolation;
    hotpath_instances* set = nullptr;
    ASSERT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_OK) << hotpath_last_error();
    const std::unique_ptr<hotpath_instances, void (*)(hotpath_instances*)> owner(set, hotpath_instances_close);
    size_t n = 0;
    ASSERT_EQ(hotpath_instances_count(set, &n), HOTPATH_OK);
    ASSERT_EQ(n, 4u);
    hotpath_engine* e = nullptr;
    EXPECT_EQ(hotpath_instances_engine(set, 4, &e), HOTPATH_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(hotpath_instances_restart(set, 0), HOTPATH_OK) << hotpath_last_error();  // before any tick
    std::vector<std::vector<float>> outs(n, std::vector<float>(T * O));
    std::vector<int> failed(n, 0);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < n; ++k) {
      hotpath_engine* ek = nullptr;
      ASSERT_EQ(hotpath_instances_engine(set, k, &ek), HOTPATH_OK) << hotpath_last_error();
      threads.emplace_back([&, k, ek] {
        // Instance k first takes 11k ticks of its own constant input, then the golden series: the
        // instances see different inputs at any moment, and from the golden series' first full window
        // on, each one's outputs are the golden ones only if no other instance's state reached it.
        const std::vector<float> own(I, 0.1f * float(k + 1));
        float z = 0;
        for (size_t t = 0; t < 11 * k; ++t)
          if (hotpath_engine_step(ek, own.data(), I, &z, O) != HOTPATH_OK) {
            failed[k] = 1;
            return;
          }
        for (size_t t = 0; t < T; ++t)
          if (hotpath_engine_step(ek, g.inputs.data() + t * I, I, outs[k].data() + t * O, O) != HOTPATH_OK) {
            failed[k] = 1;
            return;
          }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(failed[k], 0) << "instance " << k;
      const std::vector<double> got(outs[k].begin() + long(g.window - 1), outs[k].end());
      EXPECT_LE(hotpath::reference::normalized_error(got, g.window_expected), hotpath::error_bound(hotpath::Precision::fp16))
          << "instance " << k;
    }
    hotpath_engine* e1 = nullptr;
    ASSERT_EQ(hotpath_instances_engine(set, 1, &e1), HOTPATH_OK);
    hotpath_engine_close(e1);  // the set's: still serves
    float z = 0;
    EXPECT_EQ(hotpath_engine_step(e1, g.inputs.data(), I, &z, O), HOTPATH_OK) << hotpath_last_error();
  }
}

}  // namespace
