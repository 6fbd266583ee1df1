// Host-only checks of the cuda backend's decisions and helpers: grid sizing, which GPUs a build serves,
// late-answer counting, the CPU shadow, resource owners. Run on every machine, GPU or not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>

#include "cpu/cpu_backend.hpp"
#include "cuda/cpu_shadow.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/mailbox_host.hpp"
#include "model/zoo.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

// ---- grid sizing: the SMs of the launch's context, never the whole device's ---------------------------

TEST(CudaGridSizing, TheNarrowestReportedScopeWins) {
  EXPECT_EQ(cuda::launch_sm_count({.green_ctx_sms = 16, .ctx_sms = 132, .device_sms = 132}), 16);  // green ctx
  EXPECT_EQ(cuda::launch_sm_count({.green_ctx_sms = -1, .ctx_sms = 66, .device_sms = 132}), 66);   // MPS limit
  EXPECT_EQ(cuda::launch_sm_count({.green_ctx_sms = -1, .ctx_sms = -1, .device_sms = 132}), 132);  // old driver
  EXPECT_EQ(cuda::launch_sm_count({.green_ctx_sms = 0, .ctx_sms = 8, .device_sms = 132}), 8);
  EXPECT_THROW(cuda::launch_sm_count({}), Error);
}

TEST(CudaGridSizing, CoresidentBlocksAreOccupancyTimesContextSms) {
  EXPECT_EQ(cuda::coresident_blocks(1, 16), 16);
  EXPECT_EQ(cuda::coresident_blocks(2, 66), 132);
  EXPECT_EQ(cuda::coresident_blocks(0, 132), 0);  // the kernel does not fit an SM at all
  EXPECT_EQ(cuda::coresident_blocks(1, 0), 0);
  EXPECT_EQ(cuda::coresident_blocks(-1, 132), 0);
  const int big = std::numeric_limits<int>::max();
  EXPECT_EQ(cuda::coresident_blocks(big, big), (long long)big * big);  // no int overflow
}

TEST(CudaGridSizing, ThePlanFitsAGreenContextPartition) {
  const Model m = *zoo_model("lstm_s");
  for (int sms : {16, 33, 66, 132}) {
    cuda::DeviceLimits lim;
    lim.sm_count = cuda::launch_sm_count({.green_ctx_sms = sms, .ctx_sms = 132, .device_sms = 132});
    lim.smem_per_block_optin = 227 * 1024;
    const auto plan = cuda::plan_lstm(m, Precision::fp16, Mode::window, 50, {}, lim);
    // One block per SM at the kernel's occupancy of 1: the grid must be co-resident in the partition.
    EXPECT_LE(plan.params.grid(), cuda::coresident_blocks(1, sms)) << sms << " SMs";
    EXPECT_GE(plan.params.np, 1);
  }
  // A partition too small for the model's precompute is refused (naming the limit), never overfilled.
  for (int sms : {1, 2}) {
    cuda::DeviceLimits small;
    small.sm_count = sms;
    small.smem_per_block_optin = 227 * 1024;
    EXPECT_THROW(cuda::plan_lstm(m, Precision::fp16, Mode::window, 50, {}, small), UnsupportedError) << sms;
  }
}

// ---- which GPUs a build serves --------------------------------------------------------------------

TEST(CudaArchitecture, Sm90aServesHopperOnlyAndNamesTheRefusedDevice) {
  EXPECT_EQ(cuda::architecture_refusal("90a", 9, 0, "NVIDIA H200"), "");
  EXPECT_EQ(cuda::architecture_refusal("90a", 8, 0, "NVIDIA A100-SXM4-80GB"),
            "this build serves sm_90a (H100/H200); device NVIDIA A100-SXM4-80GB is sm_80");
  EXPECT_EQ(cuda::architecture_refusal("90a", 10, 0, "NVIDIA B200"),
            "this build serves sm_90a (H100/H200); device NVIDIA B200 is sm_100");
  EXPECT_NE(cuda::architecture_refusal("90a", 8, 9, "NVIDIA L4"), "");
}

TEST(CudaArchitecture, RealVirtualAndFamilyEntries) {
  // SASS (-real) runs on the same major at an equal or newer minor; PTX is JIT-compiled for newer ones.
  EXPECT_EQ(cuda::architecture_refusal("80-real,90a", 8, 6, "A10"), "");
  EXPECT_EQ(cuda::architecture_refusal("80-real,90a", 9, 0, "H100"), "");
  EXPECT_NE(cuda::architecture_refusal("80-real,90a", 12, 0, "RTX 5090"), "");
  EXPECT_EQ(cuda::architecture_refusal("80", 12, 0, "RTX 5090"), "");  // "80" carries PTX too
  EXPECT_EQ(cuda::architecture_refusal("90-virtual", 10, 0, "B200"), "");
  EXPECT_NE(cuda::architecture_refusal("90-virtual", 8, 9, "L4"), "");
  EXPECT_EQ(cuda::architecture_refusal("100f", 10, 3, "B300"), "");
  EXPECT_NE(cuda::architecture_refusal("100f", 12, 0, "RTX 5090"), "");
  EXPECT_EQ(cuda::architecture_refusal("native", 7, 5, "T4"), "");  // decided when it was built
  EXPECT_EQ(cuda::served_gpus("80-real,90a"), "sm_80 (A100/A30), sm_90a (H100/H200)");
  EXPECT_EQ(cuda::served_gpus("90"), "sm_90 (H100/H200) and newer");
}

TEST(CudaArchitecture, TheBuildSaysWhatItCompiled) {
  const std::string built = cuda::built_architectures();
  EXPECT_FALSE(built.empty());
  EXPECT_NE(built, "unknown") << "CMake did not pass the CUDA architectures to device.cpp";
  std::printf("[arch] this build: %s = %s\n", built.c_str(), cuda::served_gpus(built).c_str());
}

// ---- late GPU answers: one width, no wrap ---------------------------------------------------------

TEST(CudaLateAnswers, CountedInOneWidthAcrossTheWrap) {
  EXPECT_EQ(cuda::late_answers(5, 5), 0);
  EXPECT_EQ(cuda::late_answers(7, 5), 2);
  EXPECT_EQ(cuda::late_answers(4, 5), 0);  // the status chunk lags an answer just taken
  const long long wrap = 1LL << 32;
  EXPECT_EQ(cuda::late_answers(7, wrap + 5), 2);  // 32-bit count 7 is 2^32 + 7
  EXPECT_EQ(cuda::late_answers(1, wrap - 1), 2);  // the count wrapped, the accepted one not yet
  EXPECT_EQ(cuda::late_answers(uint32_t(wrap - 1), wrap + 1), 0);
}

// ---- resource owners ------------------------------------------------------------------------------

TEST(CudaResources, OwnersAreMoveOnly) {
  static_assert(!std::is_copy_constructible_v<cuda::Stream> && std::is_nothrow_move_constructible_v<cuda::Stream>);
  static_assert(!std::is_copy_assignable_v<cuda::Stream> && std::is_nothrow_move_assignable_v<cuda::Stream>);
  static_assert(!std::is_copy_constructible_v<cuda::DeviceBuffer<float>> &&
                std::is_nothrow_move_constructible_v<cuda::DeviceBuffer<float>>);
  static_assert(!std::is_copy_constructible_v<cuda::CpuShadow>);
  cuda::Stream empty;
  cuda::Stream moved = std::move(empty);
  EXPECT_FALSE(moved);
  cuda::DeviceBuffer<float> none;
  EXPECT_EQ(none.release(), nullptr);
}

// ---- the CPU shadow ---------------------------------------------------------------------------------

// Runs fn on its own thread; a hang fails the whole test process (a blocked thread cannot be joined).
template <class F>
void within_10s(const char* what, F&& fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread([fn = std::forward<F>(fn), done]() mutable {
    try {
      fn();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: still waiting after 10 s (hang)\n", what);
    std::fflush(stderr);
    std::_Exit(1);
  }
  fut.get();
}

BackendOptions window_options(int window) {
  BackendOptions o;
  o.mode = Mode::window;
  o.window = window;
  return o;
}

// The shadow's answers after any number of resets equal a fresh CPU backend's on the same ticks: a reset
// that raced its worker (the old code rewound both counters while the worker read them) would make it
// skip or repeat ticks. Resets come at every fill level, with answers outstanding, full ring included.
TEST(CudaCpuShadow, ResetsStartAFreshStreamEveryTime) {
  const Model m = *zoo_model("lstm_s");
  const int I = m.config.input_size, O = m.config.output_size;
  const BackendOptions o = window_options(5);
  cuda::CpuShadow shadow(m, o, -1);
  auto ref = make_cpu_backend(m, o);
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(I), got(O), want(O);
  within_10s("shadow resets", [&] {
    for (int cycle = 0; cycle < 200; ++cycle) {
      const int ticks = 1 + cycle % (cuda::CpuShadow::kRing + 6);
      std::vector<long long> ids;
      std::vector<float> wants;
      auto check = [&](int t) {
        shadow.result(ids[t], got);
        for (int k = 0; k < O; ++k) ASSERT_EQ(got[k], wants[size_t(t) * O + k]) << "cycle " << cycle << " tick " << t;
      };
      for (int t = 0; t < ticks; ++t) {
        for (float& v : x) v = d(rng);
        ids.push_back(shadow.submit(x));
        ref->process(x, want);
        wants.insert(wants.end(), want.begin(), want.end());
        if (t + 1 >= cuda::CpuShadow::kRing) check(t + 1 - cuda::CpuShadow::kRing);  // keeps a free slot
      }
      for (int t = std::max(0, ticks + 1 - cuda::CpuShadow::kRing); t < ticks; ++t) check(t);
      if (cycle % 3 == 0) {  // the worker may still be busy with the last ticks: reset must drain it
        for (float& v : x) v = d(rng);
        shadow.submit(x);
      }
      shadow.reset();
      ref->reset();
    }
  });
}

// A failed CPU backend answers nothing more: every wait on it throws, naming the failure, instead of
// spinning forever (the old reset() and a full ring's submit() hung).
TEST(CudaCpuShadow, AFailedWorkerMakesEveryWaitThrow) {
  const Model m = *zoo_model("lstm_s");
  const int I = m.config.input_size, O = m.config.output_size;
  cuda::CpuShadow shadow(m, window_options(5), -1);
  std::vector<float> x(I, 0.5f), out(O);
  const long long good = shadow.submit(x);
  shadow.result(good, out);
  x[0] = std::numeric_limits<float>::quiet_NaN();  // the CPU backend refuses it: the worker fails
  const long long bad = shadow.submit(x);
  x[0] = 0.5f;
  within_10s("failed shadow", [&] {
    EXPECT_THROW(shadow.result(bad, out), Error);
    try {
      shadow.reset();
      ADD_FAILURE() << "reset() after a failure returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cpu backend failed"), std::string::npos) << e.what();
    }
    auto fill_ring = [&] {
      for (int t = 0; t <= cuda::CpuShadow::kRing; ++t) shadow.submit(x);
    };
    EXPECT_THROW(fill_ring(), Error);
  });
}

}  // namespace
}  // namespace hotpath
