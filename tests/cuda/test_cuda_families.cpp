// Every zoo model through every kernel family that can hold it (a small model on the cluster and grid
// kernels too: the three families must agree), window and streaming, fp16 and bf16, against the float64
// reference. The error is judged twice: against the precision's bound (error_bound), and against the
// error that rounding the weights to the half type alone makes (float64 arithmetic on the rounded
// weights): the kernels add fp32 accumulation and hi+lo inputs on top of that, which must stay small.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "common/random_model.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/memory.hpp"
#include "engine/engine.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "refusal.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

// Kernel error beyond the weights' rounding: at most this multiple of the rounding error plus an
// absolute floor for fp32 accumulation over up to ~2,000-term dot products (~1e-6 each, through the
// sigmoid/tanh gains of 1 layer after another).
constexpr double kRoundingFactor = 2.0;
constexpr double kArithmeticFloor = 2e-5;

Model rounded(const Model& m, bool bf16) {
  Model r = m;
  auto round_all = [&](std::vector<double>& v) {
    for (double& w : v) w = cuda::round_weight(w, bf16);
  };
  for (auto& l : r.layers) {
    round_all(l.w_ih);
    round_all(l.w_hh);
  }
  round_all(r.head_w);
  return r;
}

using reference::normal_inputs;

// Float64 outputs of the checked ticks only (all of them in streaming mode; in window mode each is its
// window run from a zero state, in parallel): the big models' windows cost ~3 GFLOP each in float64.
std::vector<double> reference_at(const Model& m, bool streaming, int window, const std::vector<float>& xs,
                                 const std::vector<size_t>& ticks) {
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<double> z(ticks.size() * O);
  if (streaming) {
    reference::Incremental ref(m, true, 0);
    size_t k = 0;
    for (size_t t = 0; k < ticks.size(); ++t) {
      const auto out = ref.tick(std::span<const float>(&xs[t * I], I));
      if (t == ticks[k]) std::copy(out.begin(), out.end(), z.begin() + (k++) * O);
    }
    return z;
  }
  std::vector<std::thread> pool;
  for (size_t k = 0; k < ticks.size(); ++k)
    pool.emplace_back([&, k] {
      reference::Incremental ref(m, true, 0);  // the window = a stream over its W inputs from zero
      const size_t t = ticks[k], from = t + 1 >= size_t(window) ? t + 1 - window : 0;
      std::vector<double> out;
      for (size_t u = from; u <= t; ++u) out = ref.tick(std::span<const float>(&xs[u * I], I));
      std::copy(out.begin(), out.end(), z.begin() + k * O);
    });
  for (auto& th : pool) th.join();
  return z;
}

struct FamilyCase {
  std::string model;
  std::string kernel;
};

class CudaFamily : public ::testing::TestWithParam<FamilyCase> {};

// Fills blocks of the engines' allocator pool (cuda/memory.hpp: stream-ordered, freed blocks reused by the
// next allocation) with 0xff bytes (NaN as fp16, bf16 and fp32) and frees them, so the next engine's
// buffers start as NaN: a buffer a kernel reads before writing (padding included) then turns the answer
// into NaN or inf. Called before every engine of these tests.
void poison_freed_device_memory() {
  std::vector<void*> blocks;
  for (size_t bytes = 64; bytes <= (size_t(1) << 26); bytes *= 2)
    for (int k = 0; k < 3; ++k) blocks.push_back(cuda::device_alloc(bytes + size_t(k) * 48));
  size_t i = 0;
  for (size_t bytes = 64; bytes <= (size_t(1) << 26); bytes *= 2)
    for (int k = 0; k < 3; ++k) ASSERT_EQ(cudaMemset(blocks[i++], 0xff, bytes + size_t(k) * 48), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cuda::device_free(*it);  // no sync: reused at once
}

// One engine of `kernel` over the ticks xs, its outputs at `checked` against the float64 reference z:
// the error and its bound (the precision's, or twice what the weights' rounding alone makes plus the floor).
struct Judged {
  double err, rounding, bound;
};
Judged run_family(const Model& m, const std::string& kernel, Mode mode, int W, Precision p, const std::vector<float>& xs,
                  const std::vector<size_t>& checked, const std::vector<double>& z) {
  const int I = m.config.input_size, O = m.config.output_size;
  const size_t ticks = xs.size() / size_t(I);
  BackendOptions o;
  o.mode = mode;
  o.window = W;
  o.precision = p;
  // "grid-flags", "grid-counters": the grid family with its other exchanges (lstm_params.hpp, GridExchange;
  // "grid" has the tagged words); "grid-separate" and "grid-own": its precompute on blocks of their own, or
  // in the critical blocks (GridPrecompute; "grid" places it automatically); "grid-shared": its tiles read
  // from shared memory as their MMAs run ("grid" holds them in registers where the plan allows, GridTiles);
  // "grid-quiet", "grid-nap": the precompute in the critical blocks, each block's round held until the answer
  // is out (CudaOptions::grid_quiet_answer), or blocks 1.. napping between looks at the input's words
  // (grid_input_nap_ns); "grid-trace": the tick trace on (CudaOptions::tick_trace); "grid-warm": the L2
  // layers' tiles loaded and waited for before each tick's "ready" (CudaOptions::grid_warm_l2_tiles);
  // "grid-give": block 0's warp 0 stores the input's words once the whole input is in (grid_pollers_publish
  // off; by default the pollers store each as its chunk comes)
  const bool flags = kernel == "grid-flags", counters = kernel == "grid-counters", separate = kernel == "grid-separate",
             quiet = kernel == "grid-quiet", nap = kernel == "grid-nap", own = kernel == "grid-own" || quiet || nap,
             shared = kernel == "grid-shared", trace = kernel == "grid-trace", warm = kernel == "grid-warm",
             give = kernel == "grid-give";
  o.gpu.kernel = util::parse_name<CudaKernel>(flags || counters || separate || own || shared || trace || warm || give ? "grid" : kernel);
  o.gpu.timeout_us = 5'000'000;
  CudaOptions c;
  if (flags) c.grid_exchange = cuda::GridExchange::flags;
  if (counters) c.grid_exchange = cuda::GridExchange::counters;
  if (separate) c.grid_precompute = cuda::GridPrecompute::separate;
  if (own) c.grid_precompute = cuda::GridPrecompute::in_critical;
  if (shared) c.grid_tiles = cuda::GridTiles::shared;
  c.grid_quiet_answer = quiet;
  c.tick_trace = trace;  // "grid-trace": the tick trace on (its counters checked below)
  if (nap) c.grid_input_nap_ns = 200;
  c.grid_warm_l2_tiles = warm;
  c.grid_pollers_publish = !give;
  poison_freed_device_memory();  // every zoo model too: nothing it reads before writing may be left over
  auto b = make_cuda_backend(m, o, c);
  EXPECT_EQ(b->facts().at("kernel_family"), util::name_of(o.gpu.kernel));
  if (o.gpu.kernel == CudaKernel::grid) {
    EXPECT_EQ(b->facts().at("grid_exchange"), flags ? "flags" : counters ? "counters" : "tagged");
    if (separate || own) EXPECT_EQ(b->facts().at("grid_precompute"), separate ? "separate" : "in_critical");
    if (shared) EXPECT_EQ(b->facts().at("grid_tiles"), "shared");
    EXPECT_EQ(b->facts().at("grid_quiet_answer"), quiet ? "1" : "0");
    EXPECT_EQ(b->facts().at("grid_input_nap_ns"), nap ? "200" : "0");
    // each knob's fact says whether it acts: warming where layers are read from L2, the pollers' words with
    // the tagged exchange
    EXPECT_EQ(b->facts().at("grid_warm_l2_tiles"), warm && b->facts().at("critical_layers_in_l2") != "0" ? "1" : "0");
    EXPECT_EQ(b->facts().at("grid_pollers_publish"), give || flags || counters ? "0" : "1");
    std::printf("[family] %s %s: tiles in %s, %s compute warps\n", kernel.c_str(), mode_name(mode),
                b->facts().at("grid_tiles").c_str(), b->facts().at("grid_compute_warps").c_str());
  }
  std::vector<float> out(O), got;
  for (size_t t = 0, k = 0; t < ticks; ++t) {
    b->process(std::span<const float>(&xs[t * I], I), out);
    if (k < checked.size() && checked[k] == t) {
      got.insert(got.end(), out.begin(), out.end());
      ++k;
    }
  }
  if (trace) {  // every tick traced: each split into parts that add up to its latency
    const auto c = b->counters();
    EXPECT_EQ(c.count("tick_trace_ticks") ? c.at("tick_trace_ticks") : -1.0, double(ticks));
    for (const char* part : {"total", "kernel", "input_excess", "output_and_floors"})
      EXPECT_TRUE(c.count(std::string("tick_trace_") + part + "_us_p99")) << part;
    if (c.count("tick_trace_total_us_p50")) {
      EXPECT_GT(c.at("tick_trace_kernel_us_p50"), 0.0);
      EXPECT_LT(c.at("tick_trace_kernel_us_p50"), c.at("tick_trace_total_us_p50"));
      EXPECT_GE(c.at("tick_trace_input_excess_us_p99"), 0.0);
    }
  }
  if (o.gpu.kernel == CudaKernel::grid) {
    // the kernel times the parts of its ticks in every block (GridLayerStat): each layer's marks come in the
    // order its warps pass them (a mean over the ticks, then over the blocks, keeps that order). Only marks
    // read on one warp's clock, or the same warps', are compared: the warps' clocks of one SM disagree by up
    // to a few hundred cycles (H200: the last warp's gate sums read up to ~500 cycles after the barrier that
    // follows them, on warp 0's clock). The cell warp marks the meeting and, with tagged words, a hidden
    // layer's words sent; with the other exchanges compute warp 0 sends them (another clock)
    const auto c = b->counters();
    const int L = m.config.num_layers;
    for (int l = 0; l <= L; ++l) {
      const std::string at = l == L ? std::string("grid_head_") : "grid_layer" + std::to_string(l) + "_";
      auto mark = [&](const char* part) {
        const auto it = c.find(at + part + "_cycles_mean");
        EXPECT_NE(it, c.end()) << at + part;
        return it == c.end() ? -1.0 : it->second;
      };
      if (l < L) {
        EXPECT_LE(mark("words_first"), mark("words_last")) << at;
        EXPECT_LE(mark("words_last"), mark("tiles_last")) << at;  // each warp's words before its sums
        // the cell warp passes its marks in order on its own clock (the head's sent: it may not)
        EXPECT_LE(mark("meet"), mark("sums")) << at;
        EXPECT_LE(mark("sums"), mark("cell")) << at;
        if (!flags && !counters && l < L - 1)
          EXPECT_LE(mark("cell"), mark("sent")) << at;
        else
          EXPECT_GT(mark("sent"), 0.0) << at;
        if (l > 0 && !flags && !counters) {  // every warp looked at its words at least once, its slowest lane too
          const auto polls = c.find(at + "warp_polls_mean"), most = c.find(at + "warp_polls_max_mean");
          EXPECT_NE(polls, c.end()) << at;
          EXPECT_NE(most, c.end()) << at;
          if (polls != c.end() && most != c.end()) {
            EXPECT_GE(polls->second, 1.0) << at;
            EXPECT_LE(polls->second, most->second) << at;
          }
        }
        if (l > 0) {  // each warp's own wait and tiles, on its own clock: a block's mean within its largest
          EXPECT_LE(mark("warp_wait_mean"), mark("warp_wait_max")) << at;
          EXPECT_LE(mark("warp_tiles_mean"), mark("warp_tiles_max")) << at;
          EXPECT_GT(mark("warp_tiles_max"), 0.0) << at;
        }
      } else {  // the head: block 0 gathers the words; every block sends (block 0: the answer)
        EXPECT_LE(mark("words_first"), mark("words_last")) << at;
        EXPECT_GT(mark("sent"), 0.0) << at;
      }
    }
  }
  const bool streaming = mode == Mode::streaming;
  Judged j;
  j.err = reference::normalized_error(std::vector<double>(got.begin(), got.end()), z);
  j.rounding = reference::normalized_error(reference_at(rounded(m, p == Precision::bf16), streaming, W, xs, checked), z);
  j.bound = std::min(error_bound(p), kRoundingFactor * j.rounding + kArithmeticFloor);
  return j;
}

TEST_P(CudaFamily, MatchesTheReferenceWithinTheWeightRounding) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const auto [name, kernel] = GetParam();
  const auto zm = zoo_model(name);
  ASSERT_TRUE(zm) << "no zoo model " << name;
  const Model& m = *zm;
  const int I = m.config.input_size;
  const bool big = m.config.hidden_size >= 480;
  for (Mode mode : {Mode::window, Mode::streaming}) {
    const bool streaming = mode == Mode::streaming;
    // The big models' window precompute takes milliseconds a tick (docs/cuda.md): they are checked over a
    // short window (the kernel is the same; the window only sets how many open windows the precompute keeps).
    const int W = streaming ? 0 : big ? std::min(8, m.config.window.value_or(1)) : m.config.window.value_or(1);
    // enough ticks for every window to have filled and slid; fewer for the big models (float64 reference)
    const size_t ticks = size_t(streaming ? (big ? 40 : 300) : W + (big ? 30 : 200));
    const auto xs = normal_inputs(ticks * I, 21);
    // checked: every tick, or (big models, window mode) the first two, the first full window and the last
    std::vector<size_t> checked;
    for (size_t t = 0; t < ticks; ++t)
      if (!big || streaming || t < 2 || t + 1 == size_t(W) || t + 3 >= ticks) checked.push_back(t);
    const auto z = reference_at(m, streaming, W, xs, checked);
    for (Precision p : {Precision::fp16, Precision::bf16}) {
      const auto [err, rounding, bound] = run_family(m, kernel, mode, W, p, xs, checked, z);
      std::printf("[family] %s %s %s %s: error %.3g, weight rounding alone %.3g (ratio %.2f), bound %.3g\n",
                  name.c_str(), kernel.c_str(), mode_name(mode), precision_name(p), err, rounding,
                  rounding > 0 ? err / rounding : 0.0, bound);
      EXPECT_LE(err, bound) << name << " " << kernel << " " << mode_name(mode) << " " << precision_name(p);
    }
  }
}

std::vector<FamilyCase> family_cases() {
  std::vector<FamilyCase> v;
  for (const char* m : {"lstm_s", "nv_small", "vollo_tiny", "stac_a"})
    for (const char* k : {"cta", "cluster", "grid", "grid-flags", "grid-counters", "grid-separate", "grid-own", "grid-shared"})
      v.push_back({m, k});
  for (const char* m : {"lstm_m", "nv_medium", "vollo_small", "stac_b"})
    for (const char* k : {"cluster", "grid", "grid-flags", "grid-counters", "grid-separate", "grid-own", "grid-shared"})
      v.push_back({m, k});
  // the big ones with the automatic placement (in_critical, but vollo_med: separate) and vollo_med with the
  // other, lstm_l with the counters; the flags exchange's code is the same at every size: checked on the
  // models above
  for (const char* m : {"vollo_med", "lstm_l", "nv_large", "vollo_large", "stac_c"}) v.push_back({m, "grid"});
  v.push_back({"vollo_med", "grid-own"});
  v.push_back({"lstm_l", "grid-counters"});
  v.push_back({"lstm_l", "grid-shared"});
  v.push_back({"stac_c", "grid-shared"});
  for (const char* m : {"lstm_s", "stac_b", "lstm_l", "stac_c"})
    for (const char* k : {"grid-quiet", "grid-nap"}) v.push_back({m, k});
  v.push_back({"lstm_s", "grid-trace"});
  v.push_back({"stac_c", "grid-trace"});
  for (const char* m : {"lstm_s", "lstm_l", "stac_c"}) v.push_back({m, "grid-warm"});  // lstm_s: no L2 layer
  // inputs of a few chunks, of many, and of more than one poll warp covers
  for (const char* m : {"lstm_s", "vollo_tiny", "stac_c", "vollo_large"}) v.push_back({m, "grid-give"});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Zoo, CudaFamily, ::testing::ValuesIn(family_cases()),
                         [](const auto& info) {
                           std::string k = info.param.kernel;
                           std::replace(k.begin(), k.end(), '-', '_');
                           return info.param.model + "_" + k;
                         });

// Device memory a previous engine left behind must not leak into the next one's answers: every family
// twice in one process, window then streaming and streaming then window, with two different models, over
// poisoned pool memory. The shapes are the awkward ones: L = 1..4, H not a multiple of 8, I = 1, O > 1, a
// layer input wider than H.
// The CLI's --tick-trace (GpuOptions::tick_trace) turns the grid kernel's tick trace on: every tick split,
// as with CudaOptions::tick_trace; the other families and a shared launch refuse it, naming the grid kernel.
TEST(CudaTickTrace, TheOptionReachesTheGridKernelAndTheOtherFamiliesRefuseIt) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  BackendOptions o;
  o.mode = Mode::streaming;
  o.gpu.tick_trace = true;
  o.gpu.kernel = CudaKernel::grid;
  {
    auto b = make_cuda_backend(m, o);
    std::vector<float> x(size_t(m.config.input_size), 0.5f), out(size_t(m.config.output_size));
    const int ticks = 300;
    for (int t = 0; t < ticks; ++t) b->step(x, out);
    const auto c = b->counters();
    EXPECT_EQ(c.count("tick_trace_ticks") ? c.at("tick_trace_ticks") : -1.0, double(ticks));
    EXPECT_TRUE(c.count("tick_trace_input_excess_us_p99"));
  }
  for (CudaKernel k : {CudaKernel::cta, CudaKernel::cluster}) {
    o.gpu.kernel = k;
    expect_refused(m, o, CudaOptions{}, "the tick trace is the grid kernel's", util::name_of(k));
  }
}

TEST(CudaFamilyReuse, EveryFamilyTwiceInOneProcessInBothOrders) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  struct Shape {
    int I, H, L, O;
  };
  const int W = 5;
  const size_t ticks = 40;
  for (const Shape s : {Shape{7, 65, 3, 3}, Shape{1, 13, 1, 2}, Shape{40, 20, 2, 5}, Shape{5, 300, 4, 1}}) {
    const Model a = test_support::random_model(s.I, s.H, s.L, s.O, true, true, 31 + uint64_t(s.H));
    const Model b = test_support::random_model(s.I, s.H, s.L, s.O, true, false, 77 + uint64_t(s.H));
    const auto xs = normal_inputs(ticks * size_t(s.I), 9);
    std::vector<size_t> checked(ticks);
    for (size_t t = 0; t < ticks; ++t) checked[t] = t;
    for (const char* kernel : {"cta", "cluster", "grid", "grid-counters", "grid-own"}) {
      for (const bool window_first : {true, false}) {
        for (int k = 0; k < 2; ++k) {
          const Model& m = k == 0 ? a : b;
          const Mode mode = (k == 0) == window_first ? Mode::window : Mode::streaming;
          const int w = mode == Mode::window ? W : 0;
          Judged j{};
          try {
            j = run_family(m, kernel, mode, w, Precision::fp16, xs, checked,
                           reference_at(m, mode == Mode::streaming, w, xs, checked));
          } catch (const UnsupportedError& e) {
            // the cta kernel holds a model only where it fits one SM; the refusal names why
            std::printf("[reuse] %dx%dx%dx%d %s: refused (%s)\n", s.I, s.H, s.L, s.O, kernel, e.what());
            EXPECT_STREQ(kernel, "cta") << e.what();
            break;
          }
          std::printf("[reuse] %dx%dx%dx%d %s %s (%s first, model %c): error %.3g, bound %.3g\n", s.I, s.H, s.L, s.O,
                      kernel, mode_name(mode), window_first ? "window" : "streaming", k == 0 ? 'a' : 'b', j.err, j.bound);
          EXPECT_LE(j.err, j.bound) << s.I << "x" << s.H << "x" << s.L << "x" << s.O << " " << kernel << " "
                                    << mode_name(mode) << (window_first ? " after window" : " after streaming");
        }
      }
    }
  }
}

// The same through the engine, as `hotpath verify --mode both` runs it: one model, a window engine (warmed,
// then reset: a relaunch) over the series, then a streaming engine over it, every family, warmed or not.
class CudaEngineReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineReuse, WindowThenStreamingEnginesOfOneModel) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const std::string kernel = GetParam();
  const Model m = test_support::random_model(7, 65, 3, 3, true, true, 5);
  const int W = 17;
  const size_t ticks = 64;
  const auto xs = normal_inputs(ticks * 7, 3);
  std::vector<size_t> checked(ticks);
  for (size_t t = 0; t < ticks; ++t) checked[t] = t;
  const auto z_window = reference_at(m, false, W, xs, checked), z_stream = reference_at(m, true, 0, xs, checked);
  {
    for (const bool warm : {true, false}) {
      for (const Mode mode : {Mode::window, Mode::streaming}) {
        EngineOptions o;
        o.backend = BackendKind::cuda;
        o.gpu.kernel = util::parse_name<CudaKernel>(kernel);
        o.precision = Precision::fp16;
        o.mode = mode;
        o.window = mode == Mode::window ? W : 0;
        o.warm = warm;
        poison_freed_device_memory();
        Engine e(m, o);
        std::vector<double> out(ticks * 3);
        e.run(xs, ticks, std::span<double>(out));
        const double err = reference::normalized_error(out, mode == Mode::window ? z_window : z_stream);
        std::printf("[reuse] engine %s %s %s: error %.3g\n", kernel.c_str(), warm ? "warm" : "cold", mode_name(mode), err);
        EXPECT_LE(err, error_bound(Precision::fp16)) << kernel << (warm ? " warm " : " cold ") << mode_name(mode);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaEngineReuse, ::testing::Values("cta", "cluster", "grid"),
                         [](const auto& info) { return info.param; });

// The cluster kernel split over 8 and over 16 blocks (other k-shares, other reduction orders), and with
// its other exchange (st.async + mbarrier: the head's partials added in another order): the same answers
// to fp32 rounding (1e-5 absolute: ~1e-7 per sum through three layers). vollo_small: 32 outputs.
TEST(CudaFamilyChoice, ClusterSizesAndExchangesAgree) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  struct Config {
    int blocks;
    bool async;
  };
  for (const char* name : {"lstm_m", "vollo_small"}) {
    const Model m = *zoo_model(name);
    const int I = m.config.input_size, O = m.config.output_size;
    const size_t T = 120;
    const auto xs = normal_inputs(T * size_t(I), 5);
    std::vector<float> first;
    for (const Config cfg : {Config{16, false}, Config{8, false}, Config{16, true}, Config{8, true}}) {
      BackendOptions o;
      o.mode = Mode::streaming;
      o.gpu.kernel = CudaKernel::cluster;
      CudaOptions c;
      c.cluster_blocks = cfg.blocks;
      c.cluster_async_exchange = cfg.async;
      auto be = make_cuda_backend(m, o, c);
      EXPECT_EQ(be->facts().at("critical_blocks"), std::to_string(cfg.blocks));
      std::vector<float> out(O), all;
      for (size_t t = 0; t < T; ++t) {
        be->process(std::span<const float>(&xs[t * I], I), out);
        all.insert(all.end(), out.begin(), out.end());
      }
      if (first.empty()) {
        first = all;
        continue;
      }
      ASSERT_EQ(all.size(), first.size());
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_NEAR(all[i], first[i], 1e-5) << name << " " << cfg.blocks << " blocks" << (cfg.async ? " mbarrier" : "")
                                            << " output " << i;
    }
  }
  const Model m = *zoo_model("lstm_m");
  // a size the model cannot be split over is refused by name, before anything runs
  BackendOptions o;
  o.mode = Mode::window;
  o.window = 50;
  o.gpu.kernel = CudaKernel::cluster;
  CudaOptions c;
  c.cluster_blocks = 3;
  expect_refused(m, o, c, "cluster of 3 blocks", "a cluster of 3 for 32 unit groups");
}

// An impossible choice is refused naming why, before anything runs on the device.
TEST(CudaFamilyChoice, AModelTooBigForTheFamilyAskedForIsRefused) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  BackendOptions o;
  o.mode = Mode::window;
  o.window = 50;
  o.gpu.kernel = CudaKernel::cta;
  expect_refused(*zoo_model("lstm_l"), o, {}, "cta", "lstm_l on one SM");
  // the cta kernel's variants are not the multi-block families', nor is the stall test hook the grid's
  o.gpu.kernel = CudaKernel::cluster;
  o.gpu.variant = CudaVariant::regs;
  expect_refused(*zoo_model("lstm_s"), o, {}, "variant of the cta kernel", "regs on the cluster kernel");
  o.gpu.variant = CudaVariant::automatic;
  o.gpu.kernel = CudaKernel::grid;
  CudaOptions stall;
  stall.stall_tick = 3;
  expect_refused(*zoo_model("lstm_s"), o, stall, "cta and cluster kernels only", "the stall hook on the grid kernel");
}

}  // namespace
}  // namespace hotpath
