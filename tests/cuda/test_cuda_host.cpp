// Host-only checks of the cuda backend's decisions and helpers: grid sizing, which GPUs a build serves,
// late-answer counting, resource owners. Run on every machine, GPU or not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "cuda/cuda_raii.hpp"
#include "cuda/device.hpp"
#include "cuda/hybrid_precompute.hpp"
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
  // Two SMs: one precompute block holds every unit; its weights and window state no longer fit shared
  // memory, so they live in global memory (slower precompute, the same grid of 2). One SM is refused.
  cuda::DeviceLimits small;
  small.smem_per_block_optin = 227 * 1024;
  small.sm_count = 2;
  const auto two = cuda::plan_lstm(m, Precision::fp16, Mode::window, 50, {}, small);
  EXPECT_EQ(two.params.grid(), 2);
  EXPECT_EQ(two.params.pre_global, 1);
  EXPECT_GT(two.pre_state_floats, 0);
  EXPECT_LE(two.params.smem_bytes, small.smem_per_block_optin);
  small.sm_count = 1;
  EXPECT_THROW(cuda::plan_lstm(m, Precision::fp16, Mode::window, 50, {}, small), UnsupportedError);
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

// ---- the mailbox's input layout: every width up to kMaxInputFloats --------------------------------

TEST(CudaMailboxLayout, TheWidestInputInBothChunkLayouts) {
  ASSERT_EQ(cuda::kMaxInputFloats, 1024);
  const cuda::InputLayout three = cuda::input_layout(1024, false);  // {seq, f0, f1, f2}
  EXPECT_EQ(three.floats_per_chunk, 3);
  EXPECT_EQ(three.chunks, 342);
  EXPECT_EQ(three.stride, 344);  // whole 64-byte lines (4 chunks) per ring slot
  const cuda::InputLayout dual = cuda::input_layout(1024, true);    // {seq, f0, f1, seq}
  EXPECT_EQ(dual.floats_per_chunk, 2);
  EXPECT_EQ(dual.chunks, 512);
  EXPECT_EQ(dual.chunks, cuda::kMaxInputChunks);
  EXPECT_EQ(dual.stride, 512);
  // Awkward widths: one float, one past a line, the old 256 limit and one past it.
  EXPECT_EQ(cuda::input_layout(1, false).chunks, 1);
  EXPECT_EQ(cuda::input_layout(1, false).stride, 4);
  EXPECT_EQ(cuda::input_layout(13, false).chunks, 5);
  EXPECT_EQ(cuda::input_layout(13, false).stride, 8);
  EXPECT_EQ(cuda::input_layout(257, false).chunks, 86);
  EXPECT_EQ(cuda::input_layout(1023, true).chunks, 512);
}

TEST(CudaMailboxLayout, WidthsOutsideOneTo1024AreRefused) {
  for (bool dual : {false, true}) {
    EXPECT_THROW(cuda::input_layout(0, dual), Error);
    EXPECT_THROW(cuda::input_layout(-1, dual), Error);
    // Too wide is a model the kernels cannot serve (auto then falls back to the cpu), named with its limit.
    try {
      cuda::input_layout(1025, dual);
      FAIL() << "1025 floats accepted";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
    }
  }
  // The ping-pong refuses a bad width before it looks for a device: Error, not "no usable CUDA device".
  for (int floats : {0, 1025}) {
    cuda::PingPongOptions o;
    o.floats = floats;
    try {
      cuda::pingpong_us(o);
      FAIL() << floats << " floats accepted";
    } catch (const UnsupportedError& e) {
      FAIL() << "looked for a device first: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("1..1024"), std::string::npos) << e.what();
    }
  }
}

TEST(CudaMailboxLayout, PollSetsShrinkToFitTheBlock) {
  // Beside the responder and the service warp, within 640 threads (20 warps).
  EXPECT_EQ(cuda::fit_poll_sets(512, 1, 2, 640), 1);   // 16 poller warps + 2
  EXPECT_EQ(cuda::fit_poll_sets(512, 4, 2, 640), 1);
  EXPECT_EQ(cuda::fit_poll_sets(342, 2, 2, 640), 1);   // 11 warps a set: two would be 24
  EXPECT_EQ(cuda::fit_poll_sets(128, 4, 2, 640), 4);   // 4 a set: 16 + 2
  EXPECT_EQ(cuda::fit_poll_sets(129, 4, 2, 640), 3);   // 5 a set
  EXPECT_EQ(cuda::fit_poll_sets(11, 2, 2, 640), 2);
  EXPECT_EQ(cuda::fit_poll_sets(11, 0, 2, 640), 1);    // never fewer than one
}

// What the host writes into a ring slot, read back as the device reads it: every value once, in order,
// each chunk's seq where the layout puts it, zeros past the input, nothing past the chunks written.
TEST(CudaMailboxLayout, InputChunksCarryEveryValueOnce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (bool dual : {false, true}) {
    for (int n : {1, 2, 3, 4, 5, 13, 32, 100, 500, cuda::kMaxInputFloats}) {
      for (bool scaled : {false, true}) {
        for (bool whole_lines : {false, true}) {
          const cuda::InputLayout l = cuda::input_layout(n, dual);
          std::vector<float> x(static_cast<size_t>(n));
          std::vector<double> shift(static_cast<size_t>(n)), mul(static_cast<size_t>(n));
          for (int i = 0; i < n; ++i) {
            x[size_t(i)] = u(rng);
            shift[size_t(i)] = double(u(rng));
            mul[size_t(i)] = 0.5 + double(i % 7);
          }
          const uint32_t seq = 0x80000001u + uint32_t(n);
          const int count = whole_lines ? l.stride : l.chunks;
          std::vector<cuda::Chunk> slot(size_t(l.stride) + 4);
          std::memset(slot.data(), 0xAB, slot.size() * sizeof(cuda::Chunk));
          cuda::write_input_chunks(slot.data(), count, seq, x, l.floats_per_chunk, scaled ? shift.data() : nullptr,
                                   scaled ? mul.data() : nullptr, whole_lines);
          const std::string at = std::to_string(n) + " floats" + (dual ? ", dual" : "") + (scaled ? ", scaled" : "") +
                                 (whole_lines ? ", whole lines" : "");
          for (int c = 0; c < count; ++c) {
            uint32_t w[4];
            std::memcpy(w, &slot[size_t(c)], 16);
            ASSERT_EQ(w[0], seq) << at << ", chunk " << c;
            if (dual) ASSERT_EQ(w[3], seq) << at << ", chunk " << c;
            for (int j = 0; j < l.floats_per_chunk; ++j) {
              const int i = l.floats_per_chunk * c + j;
              const float want = i >= n ? 0.f : scaled ? float((double(x[size_t(i)]) - shift[size_t(i)]) * mul[size_t(i)])
                                                       : x[size_t(i)];
              uint32_t want_bits;
              std::memcpy(&want_bits, &want, 4);
              ASSERT_EQ(w[1 + j], want_bits) << at << ", value " << i;
            }
          }
          for (size_t c = size_t(count); c < slot.size(); ++c) {  // untouched
            uint32_t w[4];
            std::memcpy(w, &slot[c], 16);
            for (uint32_t v : w) ASSERT_EQ(v, 0xABABABABu) << at << ", chunk " << c << " written";
          }
        }
      }
    }
  }
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
  cuda::Stream empty;
  cuda::Stream moved = std::move(empty);
  EXPECT_FALSE(moved);
  cuda::DeviceBuffer<float> none;
  EXPECT_EQ(none.release(), nullptr);
}


// A build's own instructions for a GPU (setmaxnreg needs sm_90a's) are known by the arch-specific entry.
TEST(DeviceArchitectures, ArchSpecificCodeIsNamedByItsSuffix) {
  EXPECT_TRUE(cuda::built_arch_specific("90a", 9, 0));
  EXPECT_TRUE(cuda::built_arch_specific("80-real,90a-real", 9, 0));
  EXPECT_FALSE(cuda::built_arch_specific("90", 9, 0));
  EXPECT_FALSE(cuda::built_arch_specific("90a-virtual", 9, 0));
  EXPECT_FALSE(cuda::built_arch_specific("native", 9, 0));
  EXPECT_FALSE(cuda::built_arch_specific("90a", 10, 0));
}

}  // namespace
}  // namespace hotpath

namespace hotpath {
namespace {

// The hybrid precompute refuses a state layout that cannot hold the model's units before it looks for a device.
TEST(HybridPrecomputeHost, ALayoutTooSmallIsRefusedFirst) {
  const Model m = *zoo_model("lstm_s");  // H = 128
  for (const cuda::ExportLayout bad : {cuda::ExportLayout{0, 512, 640}, cuda::ExportLayout{16, 256, 640},
                                       cuda::ExportLayout{16, 512, 600}}) {
    try {
      cuda::HybridPrecompute gpu(m, Mode::window, 50, bad, 0, 1000);
      FAIL() << "a layout of " << bad.gate_floats << " gate floats was taken";
    } catch (const UnsupportedError& e) {
      FAIL() << "looked for a device first: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot hold 128 hidden units"), std::string::npos) << e.what();
    }
  }
}

// A tuning the C++ API takes but the precompute refuses (the environment's parse keeps to the valid values): the
// refusal names `message`, before any device is looked for.
void expect_tuning_refused_first(const cuda::HybridTuning& tuning, const std::string& message) {
  const Model m = *zoo_model("lstm_s");
  try {
    cuda::HybridPrecompute gpu(m, Mode::window, 50, cuda::ExportLayout{16, 512, 640}, 0, 1000, cuda::HybridForm::automatic,
                               tuning);
    ADD_FAILURE() << "taken: " << message;
  } catch (const UnsupportedError& e) {
    ADD_FAILURE() << "looked for a device first: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

// The staging's rows a warp outside 1..kMaxStageRows.
TEST(HybridPrecomputeHost, StageRowsOutOfRangeAreRefusedFirst) {
  for (const int rows : {0, cuda::HybridTuning::kMaxStageRows + 1}) {
    cuda::HybridTuning tuning;
    tuning.stage_rows = rows;
    expect_tuning_refused_first(tuning, "stage rows " + std::to_string(rows) + ": 1 to 4");
  }
}

// A stage cluster other than 1, 2, 4 or 8 blocks.
TEST(HybridPrecomputeHost, StageClusterOutsideItsSizesIsRefusedFirst) {
  for (const int cs : {0, 3, 16}) {
    cuda::HybridTuning tuning;
    tuning.stage_cluster = cs;
    expect_tuning_refused_first(tuning, "stage cluster " + std::to_string(cs) + ": 1, 2, 4 or 8 blocks");
  }
}

}  // namespace
}  // namespace hotpath
