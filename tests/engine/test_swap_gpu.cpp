// Live model swap on the cuda backend (engine/swap_room.hpp): a cuda engine's kernel holds every SM it
// is given, so a swap is refused unless the engine keeps a swap room (two halves of the GPU), where the
// next model comes up on the half the serving one leaves. Window mode bit-identical to an engine that
// served the new model from the start (on a half of the same size), across kernel shapes and
// precisions; streaming from the warmed state asked. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "common/random_model.hpp"
#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "engine/swap_test_support.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

using test_support::fresh_run;
using test_support::random_model;
using test_support::same_bits;
using test_support::series;

EngineOptions cuda_options(Mode mode, int window, bool room, std::optional<Precision> p = std::nullopt) {
  EngineOptions o;
  o.backend = BackendKind::cuda;
  o.mode = mode;
  o.window = window;
  o.precision = p;
  o.swap_room = room;
  return o;
}

#define SKIP_WITHOUT_GPU()                                        \
  do {                                                            \
    std::string why;                                              \
    if (!gpu::available(&why)) GTEST_SKIP() << "no usable GPU: " << why; \
  } while (0)

// First in this file, so that no earlier test has loaded the second family's kernel: lstm_s on the cta
// family, lstm_m on the cluster family, its kernel never run in this process before the swap (the swap
// room loads every kernel before the first one starts: a kernel loaded beside a running persistent one
// waits for it forever). Then the fresh engine of lstm_m, for the bits.
TEST(CudaSwap, AcrossKernelFamiliesWithAKernelNotYetRun) {
  SKIP_WITHOUT_GPU();
  const Model a = open_model("lstm_s"), b = open_model("lstm_m");
  const int I = a.config.input_size, O = a.config.output_size, W = 8, T = 30, N = 60;
  ASSERT_EQ(b.config.input_size, I);
  ASSERT_EQ(b.config.output_size, O);
  const auto x = series(N, I, 13);
  std::vector<float> got(size_t(N) * O);
  std::string family_a, family_b;
  {
    Engine e(a, cuda_options(Mode::window, W, true));
    family_a = e.facts().at("kernel_family");
    std::vector<float> z(O);
    for (int t = 0; t < N; ++t) {
      if (t == T) e.swap(b);
      e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
      std::copy(z.begin(), z.end(), got.begin() + long(t) * O);
    }
    EXPECT_EQ(e.swaps(), 1);
    family_b = e.facts().at("kernel_family");
  }
  EXPECT_NE(family_a, family_b) << "the two models ran on one family: this test checks a swap across two";
  const auto zb = fresh_run(b, cuda_options(Mode::window, W, true), x, 0, N);
  for (int t = T + 1; t < N; ++t) ASSERT_TRUE(same_bits(&got[size_t(t) * O], &zb[size_t(t) * O], O)) << "tick " << t;
}

TEST(CudaSwap, RefusedWithoutASwapRoomBeforeAnythingIsMade) {
  SKIP_WITHOUT_GPU();
  const int I = 4, O = 2, W = 6;
  const Model a = random_model(I, 16, 1, O, true, true, 1), b = random_model(I, 24, 2, O, true, true, 2);
  Engine e(a, cuda_options(Mode::window, W, false));
  const auto x = series(20, I, 3);
  std::vector<float> z(O);
  for (int t = 0; t < 10; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  try {
    e.swap(b);
    FAIL() << "a cuda swap without a swap room was not refused";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("swap_room"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.swaps(), 0);
  EXPECT_FALSE(e.swap_pending());
  for (int t = 10; t < 20; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  EXPECT_EQ(e.answering_model_id(), model_id(a));
}

// a serves, b takes over before tick T1+1 (on the other half), a again before tick T2+1 (back on the
// first): each tick bit-identical to a fresh engine of the model that answered it, on a half of its own.
void check_window_swaps(const Model& a, const Model& b, std::optional<Precision> pa, std::optional<Precision> pb) {
  const int I = a.config.input_size, O = a.config.output_size, W = 9, T1 = 23, T2 = 61, N = 100;
  const auto x = series(N, I, 7);
  const auto za = fresh_run(a, cuda_options(Mode::window, W, true, pa), x, 0, N);
  const auto zb = fresh_run(b, cuda_options(Mode::window, W, true, pb), x, 0, N);
  Engine e(a, cuda_options(Mode::window, W, true, pa));
  EXPECT_NE(e.facts().at("swap_room").find("serving on half 0"), std::string::npos) << e.facts().at("swap_room");
  std::vector<float> z(O);
  for (int t = 0; t < N; ++t) {
    if (t == T1) {
      SwapOptions so;
      so.precision = pb;
      EXPECT_EQ(e.swap(b, so), model_id(b));
    }
    if (t == T2) {
      SwapOptions so;
      so.precision = pa;
      EXPECT_EQ(e.swap(a, so), model_id(a));
    }
    e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    const bool on_b = t > T1 && t <= T2;
    EXPECT_EQ(e.answering_model_id(), on_b ? model_id(b) : model_id(a)) << "tick " << t;
    ASSERT_TRUE(same_bits(z.data(), on_b ? &zb[size_t(t) * O] : &za[size_t(t) * O], O))
        << "tick " << t << " (swaps before ticks " << T1 << " and " << T2 << ")";
    if (t == T1 + 1)
      EXPECT_NE(e.facts().at("swap_room").find("serving on half 1"), std::string::npos) << e.facts().at("swap_room");
  }
  EXPECT_EQ(e.swaps(), 2);
  EXPECT_EQ(e.swap_failure(), "");
}

TEST(CudaSwap, WindowBitIdenticalAcrossShapes) {
  SKIP_WITHOUT_GPU();
  // another H, L and head: the same kernel family on the other half
  check_window_swaps(random_model(5, 32, 1, 2, true, true, 11), random_model(5, 48, 2, 2, true, false, 12),
                     std::nullopt, std::nullopt);
}

TEST(CudaSwap, WindowBitIdenticalAcrossPrecisions) {
  SKIP_WITHOUT_GPU();
  const Model a = random_model(5, 32, 2, 1, true, true, 21), b = random_model(5, 32, 2, 1, true, true, 22);
  check_window_swaps(a, b, Precision::fp16, Precision::bf16);
}

TEST(CudaSwap, StreamingFromTheWarmedState) {
  SKIP_WITHOUT_GPU();
  const int I = 3, O = 2, T = 40, N = 30;
  const Model a = random_model(I, 32, 2, O, true, true, 31), b = random_model(I, 40, 1, O, true, true, 32);
  const auto x = series(T + N, I, 5);
  const EngineOptions o = cuda_options(Mode::streaming, 0, true);
  for (long long k : {0LL, 8LL}) {
    const int from = int(std::max<long long>(0, T + 1 - k));
    const auto zb = fresh_run(b, o, x, from, T + N);
    Engine e(a, o);
    std::vector<float> z(O);
    for (int t = 0; t < T; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    SwapOptions so;
    so.warm_ticks = k;
    e.swap(b, so);
    for (int t = T; t < T + N; ++t) {
      e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
      if (t > T) ASSERT_TRUE(same_bits(z.data(), &zb[size_t(t - from) * O], O)) << "k " << k << " tick " << t;
    }
    EXPECT_EQ(e.swaps(), 1);
  }
}

// A model that cannot be made leaves the old one serving on its half, and the next swap still works.
TEST(CudaSwap, AFailedSwapLeavesTheOldModelServing) {
  SKIP_WITHOUT_GPU();
  const int I = 4, O = 1, W = 5;
  const Model a = random_model(I, 16, 1, O, true, true, 41), b = random_model(I, 24, 1, O, true, true, 42);
  Model bad = b;
  bad.layers[0].w_ih[3] = std::numeric_limits<float>::quiet_NaN();
  Engine e(a, cuda_options(Mode::window, W, true));
  const auto x = series(40, I, 9);
  std::vector<float> z(O);
  for (int t = 0; t < 10; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  EXPECT_THROW(e.swap(bad), Error);
  for (int t = 10; t < 20; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  EXPECT_EQ(e.answering_model_id(), model_id(a));
  e.swap(b);
  for (int t = 20; t < 40; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  EXPECT_EQ(e.answering_model_id(), model_id(b));
  EXPECT_EQ(e.swaps(), 1);
}

TEST(CudaSwap, ASwapRoomIsForCuda) {
  const Model a = random_model(3, 8, 1, 1, true, true, 51);
  EngineOptions o;
  o.backend = BackendKind::cpu;
  o.mode = Mode::streaming;
  o.swap_room = true;
  o.warm = false;
  try {
    Engine e(a, o);
    FAIL() << "swap_room was taken for the cpu backend";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("swap_room is for cuda"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace hotpath
