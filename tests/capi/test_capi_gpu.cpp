// The C ABI on the GPU: backend cuda (and auto choosing it) through hotpath_engine_*, against the float64
// reference, a NaN tick refused with the state unchanged, and counters read back. Without a usable GPU
// only the refusal is checked (HOTPATH_ERROR_UNSUPPORTED, named), and the test says it skipped the rest.
#include <gtest/gtest.h>

#include <limits>
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

TEST(CapiGpu, CudaThroughTheCAbi) {
  const auto g = hotpath::test_support::load_golden("small2x128");
  const std::string path = std::string(HOTPATH_GOLDEN_DIR) + "/small2x128.model.safetensors";
  hotpath_model* raw = nullptr;
  ASSERT_EQ(hotpath_model_open(path.c_str(), nullptr, nullptr, &raw), HOTPATH_OK) << hotpath_last_error();
  const std::unique_ptr<hotpath_model, void (*)(hotpath_model*)> model(raw, hotpath_model_close);

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

}  // namespace
