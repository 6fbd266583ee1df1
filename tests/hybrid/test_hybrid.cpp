// The hybrid backend (docs/hybrid.md): the CPU critical step fed by the GPU's precompute. Without a GPU it is
// refused with a one-line reason; with one, every tick is checked against the float64 reference within the
// CPU precision's bound (the GPU's precompute rounds finer than the critical step: fp32 weights, fp16 hi + lo
// halves, or for the bf16 and int8 steps plain fp16 operands, so the critical step's rounding is the error's
// main source), in window and streaming mode, on the goldens and zoo models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "common/random_model.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "model/quantize.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

using test_support::Golden;
using test_support::load_golden;

std::vector<double> reference_run(const Model& m, Mode mode, const std::vector<float>& x, size_t T, int W) {
  return mode == Mode::window ? reference::sliding_window(m, x, T, W) : reference::streaming(m, x, T);
}

// The CPU precision's bound (int8: 1.5x its weight rounding's own error on these inputs, as the cpu backend's).
double bound_for(const Model& m, Mode mode, Precision p, const std::vector<float>& x, size_t T, int W,
                 const std::vector<double>& exact) {
  if (p != Precision::int8) return error_bound(p);
  return int8_error_bound(reference::normalized_error(reference_run(int8_rounded(m), mode, x, T, W), exact));
}

// T ticks of I normal inputs.
std::vector<float> random_inputs(size_t T, size_t I, unsigned seed) {
  std::vector<float> x(T * I);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : x) v = d(rng);
  return x;
}

// step() then finish_precompute() each tick (finish: false, step() alone: it waits for the state itself).
std::vector<double> run(Backend& b, const std::vector<float>& x, size_t T, bool finish = true) {
  const size_t I = size_t(b.config().input_size), O = size_t(b.config().output_size);
  std::vector<float> out(O);
  std::vector<double> z;
  for (size_t t = 0; t < T; ++t) {
    b.step(std::span<const float>(x.data() + t * I, I), out);
    if (finish) b.finish_precompute();
    z.insert(z.end(), out.begin(), out.end());
  }
  return z;
}

std::unique_ptr<Backend> hybrid(const Model& m, Mode mode, int W, Precision p) {
  BackendOptions o;
  o.mode = mode;
  o.window = W;
  o.precision = p;
  return make_backend(BackendKind::hybrid, m, o);
}

TEST(Hybrid, TheNameIsABackend) {
  EXPECT_EQ(util::parse_name<BackendKind>("hybrid"), BackendKind::hybrid);
  EXPECT_STREQ(util::name_of(BackendKind::hybrid), "hybrid");
}

TEST(Hybrid, RefusedWithoutAGpu) {
  std::string why;
  if (gpu::available(&why)) GTEST_SKIP() << "a GPU is here (the GPU cases below run instead)";
  const Golden g = load_golden("tiny");
  try {
    hybrid(g.model, Mode::window, g.window, Precision::fp32);
    ADD_FAILURE() << "made a hybrid backend without a GPU";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("hybrid"), std::string::npos) << e.what();
  }
}

TEST(Hybrid, CudaOptionsAndBatchAreRefused) {
  const Golden g = load_golden("tiny");
  BackendOptions o;
  o.mode = Mode::window;
  o.window = g.window;
  o.gpu.kernel = CudaKernel::grid;
  EXPECT_THROW(make_backend(BackendKind::hybrid, g.model, o), Error);
  o.gpu.kernel = CudaKernel::automatic;
  o.mode = Mode::batch;
  EXPECT_THROW(make_backend(BackendKind::hybrid, g.model, o), Error);
}

// An environment variable set for the scope's life.
class EnvScope {
 public:
  EnvScope(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~EnvScope() { unsetenv(name_); }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  const char* name_;
};

// A bad HOTPATH_HYBRID_PRECOMPUTE, HOTPATH_HYBRID_SEND or HOTPATH_HYBRID_TUNE is named, before any GPU is looked for (where the
// build has the GPU half).
TEST(Hybrid, ABadKnobIsNamed) {
  const auto built = built_backends();
  if (std::find(built.begin(), built.end(), BackendKind::hybrid) == built.end())
    GTEST_SKIP() << "built without CUDA: RefusedWithoutAGpu covers it";
  const Golden g = load_golden("tiny");
  struct Knob {
    const char *name, *value, *message;
  };
  const Knob knobs[] = {
      {"HOTPATH_HYBRID_PRECOMPUTE", "tensor", "HOTPATH_HYBRID_PRECOMPUTE='tensor': auto, fp32 or mma"},
      {"HOTPATH_HYBRID_SEND", "tensor", "HOTPATH_HYBRID_SEND='tensor': early or late"},
      {"HOTPATH_HYBRID_TUNE", "tensor", "HOTPATH_HYBRID_TUNE='tensor': 'tensor' (comma-separated rows=1..4"},
      {"HOTPATH_HYBRID_TUNE", "rows=2,rows=5", "HOTPATH_HYBRID_TUNE='rows=2,rows=5': 'rows=5'"},
      {"HOTPATH_HYBRID_TUNE", "fence=round,barrier=acquire", "'barrier=acquire' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "rows=2,", "HOTPATH_HYBRID_TUNE='rows=2,': '' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "rows=", "'rows=' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "cluster=3", "'cluster=3' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "cluster=16", "'cluster=16' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "stage=dma", "'stage=dma' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "stage=tma,stage=", "'stage=' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "products=bf16", "'products=bf16' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "products=fp16", "'products=fp16' with the fp32 critical step"},
      {"HOTPATH_HYBRID_TUNE", "blocks=0", "'blocks=0' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "blocks=-3", "'blocks=-3' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "blocks=5000", "'blocks=5000' (comma-separated"},
      {"HOTPATH_HYBRID_TUNE", "blocks=8x", "'blocks=8x' (comma-separated"}};
  for (const Knob& k : knobs) {
    SCOPED_TRACE(std::string(k.name) + "=" + k.value);
    const EnvScope scope(k.name, k.value);
    try {
      hybrid(g.model, Mode::window, g.window, Precision::fp32);
      ADD_FAILURE() << "a bad value was taken";
    } catch (const UnsupportedError& e) {
      ADD_FAILURE() << "looked for a device first: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.message), std::string::npos) << e.what();
    }
  }
}

class HybridGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu::available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

// The GPU precompute's form (HOTPATH_HYBRID_PRECOMPUTE) for the scope's life.
class FormScope : public EnvScope {
 public:
  explicit FormScope(const char* form) : EnvScope("HOTPATH_HYBRID_PRECOMPUTE", form) {}
};

// The mma form with each staging (the warps' loads, the bulk copies) and each form of its products (hi + lo
// halves, the default; plain fp16 operands asked, for the bf16 and int8 critical steps only): one row
// (streaming), one window tile (tiny), several.
TEST_F(HybridGpu, GoldensWithinTheirBounds) {
  const std::pair<const char*, const char*> forms[] = {
      {"fp32", "stage=loads"}, {"mma", "stage=loads"}, {"mma", "stage=tma"}, {"mma", "stage=tma,products=fp16"}};
  for (const auto& [form, tune] : forms)
  for (const std::string name : {"tiny", "small2x128", "multi_out"}) {
    const std::string f = form, t = tune;
    const FormScope scope(form);
    const EnvScope staging("HOTPATH_HYBRID_TUNE", tune);
    const Golden g = load_golden(name);
    for (const Mode mode : {Mode::window, Mode::streaming})
      for (const Precision p : {Precision::fp32, Precision::bf16, Precision::int8}) {
        if (p == Precision::fp32 && t.find("products=fp16") != std::string::npos) continue;  // refused (ABadKnobIsNamed)
        SCOPED_TRACE(f + " " + t + " " + name + " " + mode_name(mode) + " " + precision_name(p));
        auto b = hybrid(g.model, mode, g.window, p);
        EXPECT_EQ(b->name(), "hybrid");
        const auto z = run(*b, g.inputs, g.ticks);
        const auto exact = reference_run(g.model, mode, g.inputs, g.ticks, g.window);
        const double err = reference::normalized_error(z, exact);
        EXPECT_LE(err, bound_for(g.model, mode, p, g.inputs, g.ticks, g.window, exact));
        const auto c = b->counters();
        EXPECT_EQ(c.at("fed_late_ticks"), 0);  // finish_precompute() waited each time, never the step
        EXPECT_EQ(c.at("fed_timeouts"), 0);
        EXPECT_EQ(c.at("gpu_precompute_launches"), 1);
        EXPECT_EQ(c.at("gpu_precompute_mma"), f == "fp32" ? 0 : 1);
        EXPECT_EQ(c.at("gpu_precompute_stage_tma"), f == "mma" && t.find("stage=tma") != std::string::npos ? 1 : 0);
        EXPECT_EQ(c.at("gpu_precompute_fp16_products"), f == "mma" && t.find("products=fp16") != std::string::npos ? 1 : 0);
        EXPECT_NE(b->facts().at("cpu_precompute_cores").find("cuda precompute"), std::string::npos);
        std::printf("[hybrid] %-4s %-26s %-10s %-9s %-4s error %.3g\n", form, tune, name.c_str(), mode_name(mode),
                    precision_name(p), err);
      }
  }
}

// The medium zoo models (the hybrid's purpose), window mode, ticks past two windows; and a reset that gives
// the same answers again.
TEST_F(HybridGpu, ZooModelsAndReset) {
  for (const std::string name : {"lstm_s", "lstm_m", "stac_b"}) {
    const Model m = *zoo_model(name);
    const int W = m.config.window.value_or(32);
    const size_t T = 2 * size_t(W) + 20;
    const std::vector<float> x = random_inputs(T, size_t(m.config.input_size), 5);
    // the float64 references once a model (each is seconds of host time), for both forms
    const auto exact = reference_run(m, Mode::window, x, T, W);
    const Precision precisions[] = {Precision::bf16, Precision::int8};
    double bounds[2];
    for (int i = 0; i < 2; ++i) bounds[i] = bound_for(m, Mode::window, precisions[i], x, T, W, exact);
    // the mma form's default products (plain fp16 for these precisions) and its hi + lo halves
    for (const char* form : {"fp32", "mma", "mma products=exact"})
    for (int i = 0; i < 2; ++i) {
      const Precision p = precisions[i];
      const std::string f = form;
      const FormScope scope(f.substr(0, f.find(' ')).c_str());
      const EnvScope products("HOTPATH_HYBRID_TUNE", f == "mma" ? "products=fp16" : "products=exact");
      SCOPED_TRACE(f + " " + name + " " + precision_name(p));
      auto b = hybrid(m, Mode::window, W, p);
      const auto z = run(*b, x, T);
      EXPECT_LE(reference::normalized_error(z, exact), bounds[i]);
      b->reset();
      EXPECT_EQ(run(*b, x, T), z);  // the GPU's fp32 sums run in a fixed order: the same state, the same answers
      EXPECT_EQ(b->counters().at("gpu_precompute_launches"), 2);
    }
  }
}

// step() alone, tick after tick: each waits for its own state (counted late), none is answered from an older one;
// with x_t sent to the GPU before the critical step (the default) and after it.
TEST_F(HybridGpu, StepsWithoutFinishWaitForTheirState) {
  const Golden g = load_golden("small2x128");
  for (const char* send : {"early", "late"})
  for (const char* form : {"fp32", "mma"})
  for (const Mode mode : {Mode::window, Mode::streaming}) {
    const FormScope scope(form);
    const EnvScope sending("HOTPATH_HYBRID_SEND", send);
    SCOPED_TRACE(std::string(send) + " " + form + " " + mode_name(mode));
    auto b = hybrid(g.model, mode, g.window, Precision::fp32);
    EXPECT_EQ(b->counters().at("gpu_input_before_step"), std::string(send) == "early" ? 1 : 0);
    const auto z = run(*b, g.inputs, g.ticks, /*finish=*/false);
    EXPECT_LE(reference::normalized_error(z, reference_run(g.model, mode, g.inputs, g.ticks, g.window)),
              error_bound(Precision::fp32));
    EXPECT_LE(b->counters().at("fed_late_ticks"), double(g.ticks));
  }
}

// The kernel's variants (HOTPATH_HYBRID_TUNE) change where and when the state moves, not one sum: each answers
// bit for bit as the default, in both forms, and in the mma form with either products (hi + lo halves, the
// default, and plain fp16).
TEST_F(HybridGpu, TunedVariantsAnswerAsTheDefault) {
  const Model m = *zoo_model("lstm_m");
  const int W = m.config.window.value_or(32);
  const size_t T = 2 * size_t(W) + 20;
  const std::vector<float> x = random_inputs(T, size_t(m.config.input_size), 9);
  for (const char* form_products : {"fp32", "mma", "mma products=fp16"}) {
    const std::string fp = form_products;
    const std::string form = fp.substr(0, fp.find(' ')), products = fp == "mma products=fp16" ? "products=fp16" : "";
    const FormScope scope(form.c_str());
    std::vector<double> base;
    double default_tma = 0;  // whether the default stages by bulk copies
    {
      const EnvScope tuned("HOTPATH_HYBRID_TUNE", products.c_str());
      auto b = hybrid(m, Mode::window, W, Precision::bf16);  // one hybrid engine at a time: gone before the next
      base = run(*b, x, T);
      default_tma = b->counters().at("gpu_precompute_stage_tma");
      EXPECT_EQ(b->counters().at("gpu_precompute_fp16_products"), products.empty() ? 0 : 1);
    }
    // each knob's other value than the default's, the earlier default whole, and the shared staging
    for (const char* tune : {"rows=1", "rows=2", "fence=block", "barrier=fence", "input=feeder", "last=whole",
                             "rows=2,fence=block,barrier=fence,input=feeder", "cluster=2", "cluster=4", "cluster=8",
                             "cluster=8,rows=3,last=whole", "stage=tma", "stage=loads", "stage=tma,last=whole",
                             "stage=tma,cluster=2", "blocks=32", "blocks=32,stage=loads"}) {
      const std::string t = products.empty() ? std::string(tune) : products + "," + tune;
      // 8 units a block in the hi + lo form need more shared memory than a block has (twice the fragments)
      if (form == "mma" && products.empty() && t.find("blocks=") != std::string::npos) continue;
      SCOPED_TRACE(form + " " + t);
      const EnvScope tuned("HOTPATH_HYBRID_TUNE", t.c_str());
      auto b = hybrid(m, Mode::window, W, Precision::bf16);
      EXPECT_EQ(run(*b, x, T), base);
      const auto c = b->counters();
      const bool mma = form == "mma";
      EXPECT_EQ(c.at("gpu_precompute_fp16_products"), products.empty() ? 0 : 1);
      // fewer blocks of more units: lstm_m's 256 units in 32 blocks (8 units, two m16 tiles, in the mma form)
      if (t.find("blocks=32") != std::string::npos) EXPECT_EQ(c.at("gpu_precompute_blocks"), 32);
      EXPECT_EQ(c.at("gpu_precompute_round_fence"), t.find("fence=block") == std::string::npos ? 1 : 0);
      EXPECT_EQ(c.at("gpu_precompute_release_barrier"), t.find("barrier=fence") == std::string::npos ? 1 : 0);
      // the mirror and the shared staging are the mma form's: the fp32 form reads the feeder's buffer as before
      EXPECT_EQ(c.at("gpu_precompute_input_mirror"), mma && t.find("input=feeder") == std::string::npos ? 1 : 0);
      // lstm_m's 64 mma blocks split into whole clusters of 2, 4 and 8
      const size_t at = t.find("cluster=");
      EXPECT_EQ(c.at("gpu_precompute_stage_cluster"), mma ? (at == std::string::npos ? 1 : t[at + 8] - '0') : 0);
      // the bulk copies where asked (or the default), in the mma form, with the block's own staging (H = 256)
      const bool tma_asked =
          t.find("stage=tma") != std::string::npos || (t.find("stage=loads") == std::string::npos && default_tma == 1);
      EXPECT_EQ(c.at("gpu_precompute_stage_tma"), mma && tma_asked && at == std::string::npos ? 1 : 0);
    }
  }
}

// The bulk copies move whole 16-byte rows: with hi + lo products and H not a multiple of 4 the mma form stages
// by its warps' loads instead, and says so; with plain fp16 products the rows are padded to whole 16 bytes and
// it copies them. Either way the answers are the loads' (and H = 30 leaves the last k16 step half padding).
TEST_F(HybridGpu, BulkCopyStagingFallsBackWhereRowsAreNotWhole) {
  const Model m = test_support::random_model(6, 30, 2, 2, true, true, 17);
  const int W = 12;
  const size_t T = 3 * size_t(W);
  const std::vector<float> x = random_inputs(T, 6, 3);
  const FormScope scope("mma");
  const auto exact = reference_run(m, Mode::window, x, T, W);
  for (const std::string products : {"products=exact", "products=fp16"}) {
    SCOPED_TRACE(products);
    std::vector<double> base;
    {
      const EnvScope loads("HOTPATH_HYBRID_TUNE", ("stage=loads," + products).c_str());
      base = run(*hybrid(m, Mode::window, W, Precision::bf16), x, T);
    }
    const EnvScope tma("HOTPATH_HYBRID_TUNE", ("stage=tma," + products).c_str());
    auto b = hybrid(m, Mode::window, W, Precision::bf16);
    EXPECT_EQ(b->counters().at("gpu_precompute_mma"), 1);
    EXPECT_EQ(b->counters().at("gpu_precompute_stage_tma"), products == "products=fp16" ? 1 : 0);
    EXPECT_EQ(run(*b, x, T), base);
    EXPECT_LE(reference::normalized_error(base, exact), error_bound(Precision::bf16));
  }
}

// The staging shared over thread-block clusters, stopped mid-run and started again: each stop finds the blocks
// wherever the quit reaches them (the GPU still in the round of a tick whose state nobody waited for), each
// block first passing the cluster barriers a peer may still reach; none hangs or faults, and after the last start
// the answers are the default's bit for bit. lstm_m (64 blocks: clusters of 2, 4 and 8, with the split last pass)
// and stac_b (50 blocks: clusters of 2).
TEST_F(HybridGpu, SharedStagingStopsAndStartsAgain) {
  const std::pair<const char*, std::vector<int>> cases[] = {{"lstm_m", {2, 4, 8}}, {"stac_b", {2}}};
  for (const auto& [name, sizes] : cases) {
    const Model m = *zoo_model(name);
    const int W = m.config.window.value_or(32);
    const size_t T = 2 * size_t(W) + 20;
    const std::vector<float> x = random_inputs(T, size_t(m.config.input_size), 21);
    const FormScope scope("mma");
    const auto base = run(*hybrid(m, Mode::window, W, Precision::bf16), x, T);
    // and the float64 reference, within the bf16 critical step's bound (as ZooModelsAndReset checks the default)
    const auto exact = reference_run(m, Mode::window, x, T, W);
    const double bound = bound_for(m, Mode::window, Precision::bf16, x, T, W, exact);
    for (const int cs : sizes) {
      SCOPED_TRACE(std::string(name) + " cluster=" + std::to_string(cs));
      const std::string tune = "cluster=" + std::to_string(cs);
      const EnvScope tuned("HOTPATH_HYBRID_TUNE", tune.c_str());
      auto b = hybrid(m, Mode::window, W, Precision::bf16);
      EXPECT_EQ(b->counters().at("gpu_precompute_stage_cluster"), cs);
      for (int stop = 0; stop < 3; ++stop) {
        (void)run(*b, x, size_t(W) + 7 * size_t(stop), /*finish=*/false);
        b->reset();
      }
      const auto z = run(*b, x, T);
      EXPECT_EQ(z, base);
      EXPECT_LE(reference::normalized_error(z, exact), bound);
      EXPECT_EQ(b->counters().at("gpu_precompute_launches"), 4);
    }
  }
}

// The default's ordering of the state's stores (fence=round, barrier=release, input=mirror) over many ticks,
// against the fenced forms (fence=block, barrier=fence, input=feeder) bit for bit: a block's state arriving
// after the round's sequence word would show as a differing answer. HOTPATH_HYBRID_STRESS_TICKS sets the ticks (default 20,000, a few seconds;
// docs/hybrid.md asks for millions on a host before fence=round is trusted).
TEST_F(HybridGpu, OrderingVariantsHoldOverManyTicks) {
  const char* env = std::getenv("HOTPATH_HYBRID_STRESS_TICKS");
  const size_t T = env ? size_t(std::strtoull(env, nullptr, 10)) : 20000;
  ASSERT_GT(T, 0u) << "HOTPATH_HYBRID_STRESS_TICKS=" << env;
  const Model m = *zoo_model("lstm_m");
  const int W = m.config.window.value_or(32);
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size), period = 10007;  // prime
  const std::vector<float> x = random_inputs(period, I, 13);
  auto answers = [&](Backend& b) {
    std::vector<float> z(T * O);
    for (size_t t = 0; t < T; ++t) {
      b.step(std::span<const float>(x.data() + (t % period) * I, I), std::span<float>(z.data() + t * O, O));
      b.finish_precompute();
    }
    return z;
  };
  const FormScope scope("mma");
  const auto base = answers(*hybrid(m, Mode::window, W, Precision::bf16));
  const EnvScope tuned("HOTPATH_HYBRID_TUNE", "fence=block,barrier=fence,input=feeder");
  const auto z = answers(*hybrid(m, Mode::window, W, Precision::bf16));
  size_t differ = 0, first = T;
  for (size_t t = 0; t < T; ++t)
    if (std::memcmp(z.data() + t * O, base.data() + t * O, O * sizeof(float)) != 0 && differ++ == 0) first = t;
  EXPECT_EQ(differ, 0u) << "ticks answered differently, the first at " << first << " of " << T;
  std::printf("[hybrid] ordering variants: %zu ticks, %zu differ\n", T, differ);
}

// Two hybrid engines cannot share the GPU's SMs in one process: the second is refused at once, naming why.
TEST_F(HybridGpu, ASecondOneIsRefused) {
  const Golden g = load_golden("tiny");
  auto a = hybrid(g.model, Mode::window, g.window, Precision::fp32);
  try {
    auto b = hybrid(g.model, Mode::window, g.window, Precision::fp32);
    ADD_FAILURE() << "two hybrid backends on one GPU";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("already runs a hotpath kernel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath
