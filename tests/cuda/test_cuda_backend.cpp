// The cuda backend against the float64 reference. Every GPU test skips (saying why) without a usable
// CUDA device; NoDevice checks the error then instead.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/common/mailbox_layout.hpp"
#include "engine/engine.hpp"
#include "engine/fallback.hpp"
#include "engine/warm.hpp"
#include "common/golden.hpp"
#include "model/loader.hpp"
#include "model/safetensors.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "refusal.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

bool have_gpu(std::string* why = nullptr) { return cuda::device_available(why); }

#define REQUIRE_GPU()                                                    \
  do {                                                                   \
    std::string why_;                                                    \
    if (!have_gpu(&why_)) GTEST_SKIP() << "no usable CUDA device: " << why_; \
  } while (0)

BackendOptions opts(Mode mode, int window, Precision p = Precision::fp16) {
  BackendOptions o;
  o.mode = mode;
  o.window = window;
  o.precision = p;
  o.gpu.timeout_us = 2'000'000;
  return o;
}

// A backend of critical-step variant `variant` (through BackendOptions::variant), or null when that
// variant refuses the model (UnsupportedError naming why, printed): the caller skips. `fallback`: wrapped
// as the engine wraps it for --fallback cpu (a CPU backend shadows every tick).
std::unique_ptr<Backend> make_variant(const Model& m, BackendOptions o, const std::string& variant,
                                      const CudaOptions& c = {}, bool fallback = false) {
  // "cluster" and "grid" name kernel families (their one critical-step variant; "cluster-mbarrier" the
  // cluster kernel with its other exchange), the rest cta variants
  CudaOptions cc = c;
  if (variant == "cluster" || variant == "grid") o.gpu.kernel = util::parse_name<CudaKernel>(variant);
  else if (variant == "cluster-mbarrier") o.gpu.kernel = CudaKernel::cluster, cc.cluster_async_exchange = true;
  else o.gpu.variant = util::parse_name<CudaVariant>(variant);
  try {
    auto b = make_cuda_backend(m, o, cc);
    if (!fallback) return b;
    BackendOptions co = o;
    co.precision.reset();
    co.gpu = GpuOptions{};
    return engine::with_fallback(std::move(b), make_backend(BackendKind::cpu, m, co), -1);
  } catch (const UnsupportedError& e) {
    // these serve every tested model
    if (variant == "smem" || variant == "auto" || variant == "cluster" || variant == "cluster-mbarrier" ||
        variant == "grid")
      throw;
    std::printf("[variant %s] refused: %s\n", variant.c_str(), e.what());
    return nullptr;
  }
}

#define MAKE_OR_SKIP(var, ...)                                              \
  auto var = make_variant(__VA_ARGS__);                                     \
  if (!var) GTEST_SKIP() << "variant refuses this model (printed above)"

using reference::normal_inputs;

// Runs `ticks` ticks through the backend and the float64 reference; returns the error
// max|z - z_ref| / max(1, max|z_ref|) over all of them (docs/model.md).
double run_against_reference(Backend& b, const Model& m, bool streaming, int window, const std::vector<float>& xs,
                             size_t ticks) {
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<float> got(ticks * O);
  for (size_t t = 0; t < ticks; ++t)
    b.process(std::span<const float>(&xs[t * I], I), std::span<float>(&got[t * O], O));
  const auto z = reference::outputs_on_every_core(m, streaming, window, xs, ticks);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "output " << i;
    max_diff = std::max(max_diff, std::fabs(double(got[i]) - z[i]));
    max_ref = std::max(max_ref, std::fabs(z[i]));
  }
  return max_diff / std::max(1.0, max_ref);
}

TEST(CudaNoDevice, RefusesWithTheReason) {
  std::string why;
  if (have_gpu(&why)) GTEST_SKIP() << "a CUDA device is present; this checks the no-device error";
  const Model m = *zoo_model("lstm_s");
  try {
    make_cuda_backend(m, opts(Mode::window, 50));
    FAIL() << "created a cuda backend without a device";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device: "), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::pingpong_us({}), UnsupportedError);
  EXPECT_THROW(cuda::device_facts(), UnsupportedError);
}

TEST(CudaOptionsCheck, StallHookClusterSizeAndFallbackAreChecked) {
  // Both refused before any device is touched: they run (and pass) without a GPU too.
  const Model m = *zoo_model("lstm_s");
  CudaOptions c;
  c.stall_tick = 3;
  EXPECT_THROW(make_cuda_backend(m, opts(Mode::window, 50, Precision::bf16), c), UnsupportedError);
  // a cluster size with another kernel family asked for
  CudaOptions sized;
  sized.cluster_blocks = 8;
  BackendOptions grid = opts(Mode::window, 50);
  grid.gpu.kernel = CudaKernel::grid;
  expect_refused(m, grid, sized, "cluster_blocks sets the cluster kernel's size; the grid kernel has none",
                 "cluster_blocks with --kernel grid");
  // the grid's cell-warp lanes: 1, 2 or 4 a unit (0 automatic)
  CudaOptions lanes;
  lanes.grid_cell_lanes = 3;
  expect_refused(m, grid, lanes, "grid_cell_lanes is 1, 2 or 4 lanes a unit (0: automatic), not 3", "grid_cell_lanes 3");
}

// ---- golden cases (PyTorch float64 outputs) ---------------------------------------------------------

using hotpath::test_support::Golden;
using hotpath::test_support::load_golden;

class CudaGolden : public ::testing::TestWithParam<std::tuple<std::string, Precision, std::string>> {};

// Bounds are docs/model.md's (fp16 3e-4, bf16 2e-3). Rounding the weights alone moves these outputs by up
// to 4e-5 (fp16) / 4.2e-4 (bf16); inputs travel as hi+lo halves and everything else is fp32, so the
// measured error should be a small multiple of that, and it is printed.
TEST_P(CudaGolden, WindowAndStreamingMatchPyTorch) {
  REQUIRE_GPU();
  const auto [name, precision, variant] = GetParam();
  const Golden g = load_golden(name);
  const int I = g.model.config.input_size, O = g.model.config.output_size;
  for (Mode mode : {Mode::window, Mode::streaming}) {
    MAKE_OR_SKIP(b, g.model, opts(mode, g.window, precision), variant);
    std::vector<float> out(O);
    double max_diff = 0, max_ref = 0;
    for (size_t t = 0; t < g.ticks; ++t) {
      b->process(std::span<const float>(&g.inputs[t * I], I), out);
      const double* want = nullptr;
      if (mode == Mode::streaming) want = &g.streaming_expected[t * O];
      else if (t + 1 >= size_t(g.window)) want = &g.window_expected[(t + 1 - g.window) * O];
      if (!want) continue;
      for (int o = 0; o < O; ++o) {
        max_diff = std::max(max_diff, std::fabs(double(out[o]) - want[o]));
        max_ref = std::max(max_ref, std::fabs(want[o]));
      }
    }
    const double err = max_diff / std::max(1.0, max_ref);
    std::printf("[golden] %s %s %s %s error %.3g (bound %.g)\n", name.c_str(), mode_name(mode), precision_name(precision),
                b->variant().c_str(), err, error_bound(precision));
    RecordProperty(name + "_" + mode_name(mode) + "_" + precision_name(precision) + "_" + variant, std::to_string(err));
    EXPECT_LE(err, error_bound(precision)) << name << " " << mode_name(mode);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaGolden,
                         ::testing::Combine(::testing::Values("tiny", "small2x128", "multi_out"),
                                            ::testing::Values(Precision::fp16, Precision::bf16),
                                            ::testing::Values(std::string("smem"), std::string("regs"),
                                                              std::string("cluster"), std::string("cluster-mbarrier"),
                                                              std::string("grid"))),
                         [](const auto& info) {
                           std::string v = std::get<2>(info.param);
                           for (char& ch : v)
                             if (ch == '-') ch = '_';
                           return std::get<0>(info.param) + "_" + precision_name(std::get<1>(info.param)) + "_" + v;
                         });

// The tests below run once per critical-step variant of the cta kernel, and on the cluster kernel (the
// lifecycle, deadlines and catch-up are each kernel's own code).
class CudaVariant : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Variants, CudaVariant,
                         ::testing::Values(std::string("smem"), std::string("regs"), std::string("cluster"),
                                           std::string("cluster-mbarrier")),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// ---- long runs against the incremental reference ----------------------------------------------------

TEST_P(CudaVariant, LstmSWindow10kTicksVaryingInputs) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const size_t ticks = 10'000;
  const auto xs = normal_inputs(ticks * m.config.input_size, 11);
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    MAKE_OR_SKIP(b, m, opts(Mode::window, 50, p), GetParam());
    const double err = run_against_reference(*b, m, false, 50, xs, ticks);
    std::printf("[long] lstm_s window %s %s 10k ticks error %.3g\n", precision_name(p), b->variant().c_str(), err);
    EXPECT_LE(err, error_bound(p));
  }
}

TEST_P(CudaVariant, StreamingAndOddWindows) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const size_t ticks = 3000;
  const auto xs = normal_inputs(ticks * m.config.input_size, 12);
  {
    MAKE_OR_SKIP(b, m, opts(Mode::streaming, 0), GetParam());
    const double err = run_against_reference(*b, m, true, 0, xs, ticks);
    std::printf("[long] lstm_s streaming fp16 %s 3k ticks error %.3g\n", b->variant().c_str(), err);
    EXPECT_LE(err, error_bound(Precision::fp16));
  }
  for (int w : {1, 2, 7}) {
    MAKE_OR_SKIP(b, m, opts(Mode::window, w), GetParam());
    const double err = run_against_reference(*b, m, false, w, xs, 500);
    EXPECT_LE(err, error_bound(Precision::fp16)) << "window " << w;
  }
}

TEST_P(CudaVariant, VolloTinyStreamingOrRefusedNamingTheLimit) {
  REQUIRE_GPU();
  const Model m = *zoo_model("vollo_tiny");
  std::unique_ptr<Backend> b;
  try {
    b = make_variant(m, opts(Mode::streaming, 0), GetParam());
  } catch (const UnsupportedError& e) {
    std::printf("[vollo_tiny] %s refused: %s\n", GetParam().c_str(), e.what());
    EXPECT_NE(std::string(e.what()).find("KiB"), std::string::npos);
    return;
  }
  if (!b) return;  // regs: refused naming the variant (printed)
  const size_t ticks = 3000;
  const auto xs = normal_inputs(ticks * m.config.input_size, 13);
  const double err = run_against_reference(*b, m, true, 0, xs, ticks);
  std::printf("[long] vollo_tiny streaming fp16 error %.3g\n", err);
  EXPECT_LE(err, error_bound(Precision::fp16));
}

// ---- input checks, lifecycle ------------------------------------------------------------------------

TEST_P(CudaVariant, NanAndInfTicksAreRefusedWithStateUntouched) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const int I = m.config.input_size;
  MAKE_OR_SKIP(b, m, opts(Mode::window, 50), GetParam());
  reference::Incremental ref(m, false, 50);
  const auto xs = normal_inputs(200 * I, 14);
  std::vector<float> out(1);
  double max_diff = 0;
  for (size_t t = 0; t < 200; ++t) {
    std::span<const float> x(&xs[t * I], I);
    if (t == 60 || t == 61) {
      std::vector<float> bad(x.begin(), x.end());
      bad[t == 60 ? 3 : I - 1] = t == 60 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
      EXPECT_THROW(b->step(bad, out), TickError);
      EXPECT_EQ(b->ticks(), (long long)t);
    }
    b->process(x, out);
    max_diff = std::max(max_diff, std::fabs(out[0] - ref.tick(x)[0]));
  }
  EXPECT_LE(max_diff, error_bound(Precision::fp16));
}

TEST_P(CudaVariant, StartStopRestartCycles) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const auto xs = normal_inputs(300 * m.config.input_size, 15);
  for (int cycle = 0; cycle < 3; ++cycle) {
    // cycle 1: with the fallback, whose CPU shadow is reset beside the kernel
    MAKE_OR_SKIP(b, m, opts(Mode::window, 50), GetParam(), CudaOptions{}, cycle == 1);
    EXPECT_LE(run_against_reference(*b, m, false, 50, xs, 120), error_bound(Precision::fp16));
    b->reset();
    EXPECT_EQ(b->ticks(), 0);
    EXPECT_LE(run_against_reference(*b, m, false, 50, xs, 120), error_bound(Precision::fp16)) << "after reset";
    EXPECT_EQ(b->counters().at("launches"), 2.0);
  }
}

TEST_P(CudaVariant, GridFitsTheSmsOfItsContext) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  MAKE_OR_SKIP(b, m, opts(Mode::window, 50), GetParam());
  const auto f = b->facts();
  const int context_sms = std::stoi(f.at("context_sm_count")), device_sms = std::stoi(f.at("sm_count"));
  const int grid = std::stoi(f.at("critical_blocks")) + std::stoi(f.at("precompute_blocks"));
  std::printf("[grid] %s: %d blocks, %d SMs in the context, %d on the device\n", GetParam().c_str(), grid,
              context_sms, device_sms);
  EXPECT_LE(context_sms, device_sms);
  EXPECT_LE(grid, context_sms);  // one block per SM (the kernels' occupancy is 1)
}

// A second kernel in the same process would wait for SMs the first never frees: refused at once, and
// the GPU is free again once the first engine is gone; `auto` then takes the CPU, saying why.
TEST(CudaBackend, OneKernelPerGpuPerProcess) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  {
    auto first = make_cuda_backend(m, opts(Mode::window, 50));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      make_cuda_backend(m, opts(Mode::window, 50));
      FAIL() << "a second kernel on the same GPU was accepted";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("already runs a hotpath kernel"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EngineOptions o;  // auto
    Engine e(m, o);
    EXPECT_EQ(e.backend_name(), "cpu");
    EXPECT_NE(e.choice_note().find("already runs"), std::string::npos) << e.choice_note();
  }
  auto again = make_cuda_backend(m, opts(Mode::window, 50));
  EXPECT_EQ(again->name(), "cuda");
}

// The engine's warm-up of the cuda backend passes ticks through the mailbox, then reset() relaunches the
// kernel (mailbox cleared: the next tick is sequence 0 again). The engine then serves a resident kernel
// whose counters are a new backend's (one launch, no answers, no late ones), answering every tick on
// time and bit for bit as an engine made without the warm-up; with the fallback too (its shadow reset).
TEST(CudaBackend, TheEngineWarmUpLeavesAFreshResidentKernel) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const size_t T = 150, I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const auto xs = normal_inputs(T * I, 23);
  for (const bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "with the cpu fallback" : "alone");
    std::vector<float> out[2];
    for (const bool warm : {true, false}) {  // one after the other: one kernel per GPU per process
      EngineOptions o;
      o.backend = BackendKind::cuda;
      o.mode = Mode::window;
      o.window = 50;
      o.gpu.timeout_us = 2'000'000;
      o.warm = warm;
      if (fallback) o.fallback = Fallback::cpu;
      const long long want_warm = warm ? engine::warm_ticks(backend_options(m, o)) : 0;
      Engine e(m, o);
      EXPECT_EQ(e.warm_up().ticks, want_warm);
      EXPECT_EQ(e.ticks(), 0);
      const auto c = e.counters();
      EXPECT_EQ(c.at("launches"), 1.0);
      EXPECT_EQ(c.at("kernel_running"), 1.0);
      EXPECT_EQ(c.at("gpu_answers"), 0.0);
      EXPECT_EQ(c.at("timeouts"), 0.0);
      EXPECT_EQ(c.at("late_gpu_answers"), 0.0);
      if (fallback) EXPECT_EQ(c.at("fallback_answers"), 0.0);
      out[warm].resize(T * O);
      e.run(xs, T, std::span<float>(out[warm]));
      const auto after = e.counters();
      EXPECT_EQ(after.at("gpu_answers"), double(T));  // every tick from the kernel, none late
      EXPECT_EQ(after.at("late_gpu_answers"), 0.0);
      EXPECT_EQ(after.at("timeouts"), 0.0);
      if (fallback) EXPECT_EQ(after.at("fallback_answers"), 0.0);
    }
    ASSERT_EQ(out[true].size(), out[false].size());
    double max_diff = 0;
    for (size_t k = 0; k < out[true].size(); ++k)
      max_diff = std::max(max_diff, std::fabs(double(out[true][k]) - double(out[false][k])));
    EXPECT_EQ(max_diff, 0.0) << "the warmed engine's outputs differ from the cold one's";
    const auto z = reference::outputs_on_every_core(m, false, 50, xs, T);
    double err = 0, ref = 0;
    for (size_t k = 0; k < z.size(); ++k) {
      err = std::max(err, std::fabs(double(out[true][k]) - z[k]));
      ref = std::max(ref, std::fabs(z[k]));
    }
    EXPECT_LE(err / std::max(1.0, ref), error_bound(Precision::fp16));
  }
}

TEST(CudaBackend, FactsNameTheDevice) {
  REQUIRE_GPU();
  const auto f = cuda::device_facts();
  EXPECT_FALSE(f.at("gpu_name").empty());
  EXPECT_GT(std::stoi(f.at("sm_count")), 1);
  std::printf("[facts] %s driver %s sm_clock %s MHz, %s SMs\n", f.at("gpu_name").c_str(), f.at("driver_version").c_str(),
              f.at("sm_clock_mhz").c_str(), f.at("sm_count").c_str());
}

// ---- deadlines, lease, fallback -------------------------------------------------------------------

TEST_P(CudaVariant, TimeoutThrowsAndTheLateKernelCatchesUp) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const int I = m.config.input_size;
  CudaOptions c;
  c.stall_tick = 5;
  c.stall_us = 100'000;
  BackendOptions o = opts(Mode::window, 50);
  o.gpu.timeout_us = 10'000;
  MAKE_OR_SKIP(b, m, o, GetParam(), c);
  reference::Incremental ref(m, false, 50);
  const auto xs = normal_inputs(40 * I, 16);
  std::vector<float> out(1);
  for (size_t t = 0; t < 40; ++t) {
    std::span<const float> x(&xs[t * I], I);
    const double want = ref.tick(x)[0];
    if (t == 5) {
      try {
        b->step(x, out);
        FAIL() << "a stalled tick answered";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no answer to tick 5"), std::string::npos) << e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    b->process(x, out);
    EXPECT_NEAR(out[0], want, error_bound(Precision::fp16)) << "tick " << t;
  }
  const auto cnt = b->counters();
  EXPECT_EQ(cnt.at("timeouts"), 1.0);
  EXPECT_EQ(cnt.at("late_gpu_answers"), 1.0);
}

// A one-layer model on the cluster kernel (its only exchanges: the input and the head), two ticks in a
// row given up by the host while the kernel stalls, then every later answer exact: the late ticks are
// computed in order from the input ring and no word of one tick is taken for another's.
TEST(CudaCluster, OneLayerAfterTwoTimeoutsStaysExact) {
  REQUIRE_GPU();
  const auto g = load_golden("tiny");
  const Model& m = g.model;
  ASSERT_EQ(m.config.num_layers, 1);
  const int I = m.config.input_size, O = m.config.output_size;
  CudaOptions c;
  c.stall_tick = 5;
  c.stall_us = 100'000;
  BackendOptions o = opts(Mode::window, 4);
  o.gpu.kernel = CudaKernel::cluster;
  o.gpu.timeout_us = 10'000;
  auto b = make_cuda_backend(m, o, c);
  reference::Incremental ref(m, false, 4);
  const auto xs = normal_inputs(60 * I, 19);
  std::vector<float> out(O);
  int timeouts = 0;
  for (size_t t = 0; t < 60; ++t) {
    std::span<const float> x(&xs[t * I], I);
    const auto want = ref.tick(x);
    if (t == 5 || t == 6) {
      try {
        b->step(x, out);
        ADD_FAILURE() << "tick " << t << " answered inside the stall";
      } catch (const Error& e) {
        ++timeouts;
      }
      if (t == 6) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    b->process(x, out);
    for (int k = 0; k < O; ++k) EXPECT_NEAR(out[k], want[k], error_bound(Precision::fp16)) << "tick " << t;
  }
  EXPECT_EQ(timeouts, 2);
  EXPECT_EQ(b->counters().at("late_gpu_answers"), 2.0);
}

TEST_P(CudaVariant, FallbackAnswersFromTheCpuWhenTheGpuIsLate) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const int I = m.config.input_size;
  CudaOptions c;
  c.stall_tick = 7;
  c.stall_us = 20'000;  // a few ticks fall back, then the GPU catches up from its input ring
  BackendOptions o = opts(Mode::window, 50);
  o.gpu.timeout_us = 5'000;
  MAKE_OR_SKIP(b, m, o, GetParam(), c, true);
  reference::Incremental ref(m, false, 50);
  const auto xs = normal_inputs(60 * I, 17);
  std::vector<float> out(1);
  for (size_t t = 0; t < 60; ++t) {
    std::span<const float> x(&xs[t * I], I);
    b->process(x, out);
    EXPECT_NEAR(out[0], ref.tick(x)[0], error_bound(Precision::fp16)) << "tick " << t;
  }
  const auto cnt = b->counters();
  EXPECT_GE(cnt.at("fallback_answers"), 1.0);
  EXPECT_GE(cnt.at("late_gpu_answers"), 1.0);
  EXPECT_EQ(cnt.at("kernel_running"), 1.0);
  EXPECT_GE(cnt.at("gpu_answers"), 40.0) << "the GPU did not take over again";
}

TEST_P(CudaVariant, LeaseLapsesWithoutHeartbeatButIdleIsFineWithIt) {
  REQUIRE_GPU();
  const Model m = *zoo_model("lstm_s");
  const auto xs = normal_inputs(20 * m.config.input_size, 18);
  std::vector<float> out(1);
  {  // heartbeat on, short lease, long idle: still serving
    CudaOptions c;
    c.lease_ms = 100;
    c.heartbeat_ms = 10;
    MAKE_OR_SKIP(b, m, opts(Mode::window, 50), GetParam(), c);
    b->process(std::span<const float>(xs.data(), m.config.input_size), out);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(b->counters().at("kernel_running"), 1.0);
    b->process(std::span<const float>(xs.data() + m.config.input_size, m.config.input_size), out);
  }
  for (bool fallback : {false, true}) {  // no heartbeat: the kernel leaves by itself
    CudaOptions c;
    c.lease_ms = 100;
    c.heartbeat = false;
    BackendOptions o = opts(Mode::window, 50);
    o.gpu.timeout_us = 20'000;
    MAKE_OR_SKIP(b, m, o, GetParam(), c, fallback);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(b->counters().at("kernel_running"), 0.0);
    std::span<const float> x(xs.data(), m.config.input_size);
    if (!fallback) {
      try {
        b->step(x, out);
        FAIL() << "answered after the lease lapsed";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("lease"), std::string::npos) << e.what();
      }
    } else {
      b->process(x, out);
      reference::Incremental ref(m, false, 50);
      EXPECT_NEAR(out[0], ref.tick(x)[0], 1e-4);
      EXPECT_EQ(b->counters().at("fallback_answers"), 1.0);
    }
  }
}

TEST(CudaPingPong, BothKernelPathsCarryThePayload) {
  REQUIRE_GPU();
  for (auto path : {cuda::PingPongPath::single_warp, cuda::PingPongPath::poller_warps}) {
    cuda::PingPongOptions o;
    o.floats = 32;
    o.warmup = 100;
    o.count = 3000;
    o.path = path;
    const auto s = cuda::pingpong_us(o);  // every answer's payload is checked inside; a wrong one throws
    EXPECT_EQ(s.size(), 3000u) << cuda::pingpong_path_name(o);
  }
  cuda::PingPongOptions too_wide;
  too_wide.floats = 129;  // 43 chunks: more than one warp's lanes
  too_wide.path = cuda::PingPongPath::single_warp;
  EXPECT_THROW(cuda::pingpong_us(too_wide), Error);
  too_wide.path = cuda::PingPongPath::automatic;
  EXPECT_EQ(cuda::pingpong_path_name(too_wide), "poller_warps");
}

TEST(CudaPingPong, SanityAndPayloadChecked) {
  REQUIRE_GPU();
  for (int floats : {1, 32, 129, 1024}) {
    cuda::PingPongOptions o;
    o.floats = floats;
    o.warmup = 200;
    o.count = 3000;
    const auto s = cuda::pingpong_us(o);
    ASSERT_EQ(s.size(), 3000u);
    std::vector<double> v = s;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    std::printf("[pingpong] %d floats: p50 %.2f us\n", floats, v[v.size() / 2]);
    EXPECT_GT(v[v.size() / 2], 0.1);
    EXPECT_LT(v[v.size() / 2], 1000.0);
  }
}

// The widest input in both chunk layouts: 342 chunks of 3 floats, 512 of 2 (16 poller warps); four poll
// sets asked for shrink to what fits the block.
TEST(CudaPingPong, TheWidestInputInBothLayouts) {
  REQUIRE_GPU();
  for (bool dual : {false, true}) {
    for (int sets : {1, 4}) {
      cuda::PingPongOptions o;
      o.floats = cuda::kMaxInputFloats;
      o.mailbox.dual_seq_input = dual;
      o.mailbox.poll_sets = sets;
      o.warmup = 100;
      o.count = 2000;
      EXPECT_EQ(cuda::pingpong_us(o).size(), 2000u) << "dual_seq " << dual << ", poll sets " << sets;
    }
  }
}

}  // namespace
}  // namespace hotpath
