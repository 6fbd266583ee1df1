// The cuda backend's throughput path: backtests [S, T, I] -> [S, T, O] (window and streaming)
// and fresh windows [B, W, I] -> [B, O] on the batch kernels, against the float64 reference.
//
// Tolerance: the precision's bound in docs/model.md (fp16 3e-4, bf16 2e-3): h is rounded to the half type
// between steps as the weights are; c, the gates and the accumulation stay fp32, and x enters exactly
// (hi + lo halves). Chunks are forced small (128 rows) in most cases so that windows of one series
// straddle chunks, a chunk holds several series, and a streaming series continues across chunks.
// The packing layout is checked without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "common/random_model.hpp"
#include "cuda/batch_chunks.hpp"
#include "cuda/batch_runner.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/batch/lstm_batch.hpp"
#include "cuda/lstm_plan.hpp"
#include "engine/engine.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

Model random_model(int I, int H, int L, int O, bool bias, uint64_t seed) {
  return test_support::random_model(I, H, L, O, bias, bias, seed);
}

std::vector<double> reference_series(const Model& m, int W, const std::vector<float>& x, size_t S, size_t T) {
  const size_t I = size_t(m.config.input_size);
  std::vector<double> all;
  for (size_t s = 0; s < S; ++s) {
    const std::span<const float> xs(x.data() + s * T * I, T * I);
    const auto z = W > 0 ? reference::sliding_window(m, xs, T, W) : reference::streaming(m, xs, T);
    all.insert(all.end(), z.begin(), z.end());
  }
  return all;
}

bool gpu(std::string* why) { return cuda::device_available(why); }

// --- host only --------------------------------------------------------------------------------------

TEST(BatchWeights, PermutedGateColumnsPaddedAndTheInputTwice) {
  const Model m = random_model(3, 5, 2, 2, true, 7);
  const auto b = cuda::pack_batch_weights(m, Precision::bf16);
  EXPECT_EQ(b.Ip, cuda::kBatchInputAlign);
  EXPECT_EQ(b.Hp, cuda::kBatchUnitGroup);
  EXPECT_EQ(b.Np, 4 * b.Hp);
  const auto bits = [](double v) { return cuda::round_weight(v, true); };
  const auto as_float = [](uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const int H = 5, I = 3, Hp = b.Hp, Ip = b.Ip;
  for (int u = 0; u < Hp; ++u)
    for (int q = 0; q < 4; ++q) {
      const size_t n = size_t(cuda::batch_column(u, q));
      for (int i = 0; i < Ip; ++i) {
        const double want = u < H && i < I ? bits(m.layers[0].w_ih[(size_t(q) * H + u) * I + i]) : 0.0;
        EXPECT_EQ(as_float(b.w0[n * 2 * Ip + i]), want);
        EXPECT_EQ(as_float(b.w0[n * 2 * Ip + Ip + i]), want);
      }
      for (int j = 0; j < Hp; ++j) {
        const double hh0 = u < H && j < H ? bits(m.layers[0].w_hh[(size_t(q) * H + u) * H + j]) : 0.0;
        const double ih1 = u < H && j < H ? bits(m.layers[1].w_ih[(size_t(q) * H + u) * H + j]) : 0.0;
        const double hh1 = u < H && j < H ? bits(m.layers[1].w_hh[(size_t(q) * H + u) * H + j]) : 0.0;
        EXPECT_EQ(as_float(b.w[0][n * Hp + j]), hh0);
        EXPECT_EQ(as_float(b.w[1][n * 2 * Hp + j]), ih1);
        EXPECT_EQ(as_float(b.w[1][n * 2 * Hp + Hp + j]), hh1);
      }
      const double bias1 = u < H ? m.layers[1].b_ih[size_t(q) * H + u] + m.layers[1].b_hh[size_t(q) * H + u] : 0.0;
      EXPECT_FLOAT_EQ(b.bias[1][n], float(bias1));
    }
  // Every column is one (unit, gate): the permutation is a bijection onto 0 .. Np-1.
  std::vector<int> seen(size_t(b.Np), 0);
  for (int u = 0; u < Hp; ++u)
    for (int q = 0; q < 4; ++q) ++seen[size_t(cuda::batch_column(u, q))];
  for (int v : seen) EXPECT_EQ(v, 1);
}

// The cluster kernel's launch refuses a plan that does not fit the shape before it touches the device (runs
// without a GPU): a cluster size that does not divide the 32-column groups, too many threads, and a plan whose
// shared memory is not this shape's layout (a plan made for another shape would read past its regions).
TEST(BatchCluster, TheLaunchRefusesAPlanMadeForAnotherShape) {
  cuda::BatchTile t;
  t.I = 32, t.Ip = 32, t.Hp = 128, t.Np = 512, t.L = 2, t.O = 1, t.H = 128;
  t.rows = 64, t.steps = 50;
  cuda::BatchCluster plan;
  plan.cluster = 3, plan.row_groups = 2, plan.smem = 200'000;  // 16 column groups: 3 does not divide them
  EXPECT_EQ(cuda::launch_batch_cluster(t, plan, nullptr), cudaErrorInvalidValue);
  plan.cluster = 2, plan.row_groups = 4;  // 8 column groups x 4 row groups: 1,024 threads
  EXPECT_EQ(cuda::launch_batch_cluster(t, plan, nullptr), cudaErrorInvalidValue);
  plan.cluster = 4, plan.row_groups = 2, plan.smem = 1;  // the right form, another shape's shared memory
  EXPECT_EQ(cuda::launch_batch_cluster(t, plan, nullptr), cudaErrorInvalidValue);
  t.Ip = 40;  // inputs not padded to whole k16 tiles
  EXPECT_EQ(cuda::launch_batch_cluster(t, plan, nullptr), cudaErrorInvalidValue);
  t.rows = 0;  // nothing to run: nothing launched, whatever the plan
  EXPECT_EQ(cuda::launch_batch_cluster(t, plan, nullptr), cudaSuccess);
}

TEST(BatchWeights, RefusesPrecisionsTheKernelsDoNotHave) {
  const Model m = random_model(3, 5, 1, 1, true, 7);
  EXPECT_THROW(cuda::pack_batch_weights(m, Precision::fp32), UnsupportedError);
  EXPECT_THROW(cuda::pack_batch_weights(m, Precision::int8), UnsupportedError);
}

// The chunk plans, emulated: every output of the workload comes from exactly one row, and every row
// reads, step by step, exactly the ticks its sequence consumes (the window rule: t-W+1 .. t with the
// steps before tick 0 left at zero state; streaming: its series' ticks in order; fresh: its window's W
// ticks).
struct Staged {
  std::vector<long long> tick;  // staged tick -> workload tick (series * T + t), -1 where nothing was copied
};
Staged stage(const cuda::BatchChunk& ch) {
  Staged st{std::vector<long long>(size_t(ch.n_in), -1)};
  for (const auto& c : ch.in)
    for (size_t i = 0; i < c.n; ++i) {
      EXPECT_LT(c.dst + i, size_t(ch.n_in));
      EXPECT_EQ(st.tick[c.dst + i], -1) << "a staged tick copied twice";
      st.tick[c.dst + i] = (long long)(c.src + i);
    }
  for (long long v : st.tick) EXPECT_GE(v, 0) << "a staged tick never copied";
  return st;
}

TEST(BatchChunks, WindowPlansCoverEveryOutputOnceWithItsOwnTicks) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t S = 1 + rng() % 5, T = 1 + rng() % 90, W = 1 + rng() % 20, R = 1 + rng() % 70;
    const size_t P = R + W - 1 + rng() % 40;
    std::vector<int> seen(S * T, 0);
    auto next = cuda::window_chunks(S, T, W, R, P);
    cuda::BatchChunk ch;
    size_t done = 0, chunks = 0;
    while (next(ch)) {
      ASSERT_LT(++chunks, S * T + 2) << "the plan does not end";
      ASSERT_GT(ch.rows, 0);
      EXPECT_LE(size_t(ch.rows), R);
      EXPECT_LE(size_t(ch.n_in), P);
      EXPECT_EQ(size_t(ch.steps), W);
      EXPECT_TRUE(ch.reset && !ch.emit_every);
      ASSERT_EQ(ch.row_p0.size(), size_t(ch.rows));
      ASSERT_EQ(ch.row_first.size(), size_t(ch.rows));
      const Staged st = stage(ch);
      for (const auto& c : ch.out)
        for (size_t i = 0; i < c.n; ++i) {
          const size_t r = c.src + i, g = c.dst + i, s = g / T, t = g % T;
          ASSERT_LT(r, size_t(ch.rows));
          ++seen[g];
          for (size_t k = 0; k < W; ++k) {
            const long long tau = (long long)t - (long long)W + 1 + (long long)k;
            if (tau < 0) {
              EXPECT_LT((long long)k, ch.row_first[r]) << "a step before tick 0 must keep zero state";
              continue;
            }
            ASSERT_GE((long long)k, ch.row_first[r]);
            const long long at = ch.row_p0[r] + (long long)k;
            ASSERT_TRUE(at >= 0 && at < ch.n_in);
            EXPECT_EQ(st.tick[size_t(at)], (long long)(s * T) + tau) << "S" << S << " T" << T << " W" << W << " R" << R;
          }
        }
      done += ch.done;
    }
    EXPECT_EQ(done, S * T);
    for (int v : seen) ASSERT_EQ(v, 1);
  }
}

TEST(BatchChunks, StreamingPlansCarryEachSeriesAcrossSlices) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t S = 1 + rng() % 9, T = 1 + rng() % 60, R = 1 + rng() % 6, P = 1 + rng() % 50;
    std::vector<int> seen(S * T, 0);
    std::vector<size_t> next_tick(S, 0);  // each series' ticks in order, state reset only at tick 0
    auto next = cuda::streaming_chunks(S, T, R, P);
    cuda::BatchChunk ch;
    size_t chunks = 0;
    while (next(ch)) {
      ASSERT_LT(++chunks, S * T + 2);
      EXPECT_LE(size_t(ch.rows), R);
      EXPECT_LE(size_t(ch.n_in), std::max(P, size_t(ch.rows)));
      EXPECT_TRUE(ch.emit_every);
      EXPECT_TRUE(ch.row_first.empty());
      const Staged st = stage(ch);
      for (const auto& c : ch.out) {
        const size_t r = c.src / size_t(ch.steps), s = c.dst / T, t0 = c.dst % T;
        EXPECT_EQ(c.n, size_t(ch.steps));
        EXPECT_EQ(t0, next_tick[s]);
        EXPECT_EQ(ch.reset, t0 == 0);
        for (size_t k = 0; k < c.n; ++k) {
          ++seen[c.dst + k];
          EXPECT_EQ(st.tick[size_t(ch.row_p0[r]) + k], (long long)(c.dst + k));
        }
        next_tick[s] += c.n;
      }
    }
    for (int v : seen) ASSERT_EQ(v, 1);
  }
}

TEST(BatchChunks, FreshPlansGiveEachWindowItsOwnTicks) {
  for (size_t B : {1, 7, 64, 65})
    for (size_t R : {1, 8, 64}) {
      const size_t W = 5;
      auto next = cuda::fresh_chunks(B, W, R);
      cuda::BatchChunk ch;
      std::vector<int> seen(B, 0);
      while (next(ch)) {
        EXPECT_LE(size_t(ch.rows), R);
        const Staged st = stage(ch);
        for (const auto& c : ch.out)
          for (size_t i = 0; i < c.n; ++i) {
            ++seen[c.dst + i];
            for (size_t k = 0; k < W; ++k)
              EXPECT_EQ(st.tick[size_t(ch.row_p0[c.src + i]) + k], (long long)((c.dst + i) * W + k));
          }
      }
      for (int v : seen) ASSERT_EQ(v, 1);
    }
  EXPECT_THROW(cuda::window_chunks(1, 10, 5, 8, 8), Error);  // no room for a chunk and its history
}

// The device path's copies (arrays already in GPU memory): the runs copy_runs() gathers give back exactly
// the pieces, in order, with rows that never overlap (a 2D copy's pitch at least its width); a streaming
// chunk's pieces are one run, a fresh chunk's one piece.
std::vector<cuda::BatchChunk::Copy> unrolled(const std::vector<cuda::CopyRun>& runs) {
  std::vector<cuda::BatchChunk::Copy> v;
  for (const auto& r : runs) {
    EXPECT_GE(r.count, 1u);
    if (r.count > 1) {
      EXPECT_GE(r.src_step, r.n);
      EXPECT_GE(r.dst_step, r.n);
    }
    for (size_t k = 0; k < r.count; ++k) v.push_back({r.src + k * r.src_step, r.dst + k * r.dst_step, r.n});
  }
  return v;
}
// The narrow kernel's launch refuses a plan that does not fit the shape, as the cluster form's does.
TEST(BatchNarrow, TheLaunchRefusesAPlanMadeForAnotherShape) {
  cuda::BatchTile t;
  t.I = 32, t.Ip = 32, t.Hp = 128, t.Np = 512, t.L = 2, t.O = 1, t.H = 128;
  t.rows = 1, t.steps = 50;
  cuda::BatchNarrow plan;
  plan.cluster = 3, plan.smem = 200'000;  // 16 column groups: 3 does not divide them
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaErrorInvalidValue);
  plan.cluster = 1;  // 16 column groups x 2 layers: 1,024 threads
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaErrorInvalidValue);
  plan.cluster = 16, plan.ksplit = 0;  // no warp a group
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaErrorInvalidValue);
  plan.ksplit = 1;
  plan.cluster = 4, plan.smem = 1;  // the right form, another shape's shared memory
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaErrorInvalidValue);
  t.Ip = 48;  // inputs not padded to whole k32 steps
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaErrorInvalidValue);
  t.rows = 0;  // nothing to run: nothing launched, whatever the plan
  EXPECT_EQ(cuda::launch_batch_narrow(t, plan, nullptr), cudaSuccess);
}

bool same_pieces(const std::vector<cuda::BatchChunk::Copy>& a, const std::vector<cuda::BatchChunk::Copy>& b) {
  std::vector<cuda::BatchChunk::Copy> nonempty;
  for (const auto& c : a)
    if (c.n > 0) nonempty.push_back(c);
  if (nonempty.size() != b.size()) return false;
  for (size_t i = 0; i < b.size(); ++i)
    if (nonempty[i].src != b[i].src || nonempty[i].dst != b[i].dst || nonempty[i].n != b[i].n) return false;
  return true;
}

TEST(BatchChunks, CopyRunsGiveBackEveryPieceInOrder) {
  using Copy = cuda::BatchChunk::Copy;
  // hand-made: a regular run, a change of length, a step that would overlap, an empty piece, a step change
  const std::vector<Copy> pieces = {{0, 0, 4},    {10, 4, 4},  {20, 8, 4},  {30, 12, 3}, {31, 15, 3},
                                    {40, 30, 0},  {50, 40, 3}, {60, 50, 3}, {80, 60, 3}};
  const auto runs = cuda::copy_runs(pieces);
  EXPECT_TRUE(same_pieces(pieces, unrolled(runs)));
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].count, 3u);  // 0, 10, 20 -> 0, 4, 8
  EXPECT_EQ(runs[1].count, 1u);  // 30 alone: 31 is 1 away, its rows would overlap
  EXPECT_EQ(runs[2].count, 2u);  // 31, 50 (the empty piece skipped); 60 is another step
  EXPECT_EQ(runs[3].count, 2u);  // 60, 80
  EXPECT_EQ(runs[3].src_step, 20u);
  EXPECT_EQ(runs[3].dst_step, 10u);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t S = 1 + rng() % 9, T = 1 + rng() % 60, R = 1 + rng() % 6, P = 1 + rng() % 50, W = 1 + rng() % 9;
    auto stream = cuda::streaming_chunks(S, T, R, P);
    cuda::BatchChunk ch;
    while (stream(ch)) {
      EXPECT_TRUE(same_pieces(ch.in, unrolled(cuda::copy_runs(ch.in))));
      EXPECT_TRUE(same_pieces(ch.out, unrolled(cuda::copy_runs(ch.out))));
      EXPECT_EQ(cuda::copy_runs(ch.in).size(), 1u);
      EXPECT_EQ(cuda::copy_runs(ch.out).size(), 1u);
    }
    auto win = cuda::window_chunks(S, T, W, R + W, R + 2 * W + P);
    while (win(ch)) {
      EXPECT_TRUE(same_pieces(ch.in, unrolled(cuda::copy_runs(ch.in))));
      EXPECT_TRUE(same_pieces(ch.out, unrolled(cuda::copy_runs(ch.out))));
    }
  }
}


// --- GPU --------------------------------------------------------------------------------------------

struct Case {
  int I, H, L, O, W;  // W = 0: streaming
  size_t S, T;
  long long rows;  // rows per chunk (0: the default)
};

std::string case_name(const Case& c) {
  return "I" + std::to_string(c.I) + "_H" + std::to_string(c.H) + "_L" + std::to_string(c.L) + "_O" +
         std::to_string(c.O) + (c.W ? "_W" + std::to_string(c.W) : std::string("_stream")) + "_S" +
         std::to_string(c.S) + "_T" + std::to_string(c.T) + "_R" + std::to_string(c.rows);
}

// T below W, several chunks per series, chunks holding several series, W = 1, unpadded shapes (H not a
// multiple of 32, I not of 32), outputs > 1, streaming across chunks, default chunk sizes.
const Case kCases[] = {
    {3, 5, 1, 1, 7, 3, 4, 128},       {7, 17, 2, 3, 1, 5, 300, 128},    {9, 33, 3, 5, 13, 6, 200, 128},
    {32, 64, 2, 1, 50, 2, 300, 128},  {40, 100, 2, 2, 20, 300, 9, 256}, {32, 128, 2, 1, 50, 1, 400, 0},
    {3, 5, 2, 2, 0, 3, 300, 128},     {16, 40, 1, 33, 0, 200, 50, 128}, {32, 128, 2, 1, 0, 1, 2000, 0},
};

// Each case on the per-step GEMMs, on the fused chunk kernel (BatchTuning::tile), on its cluster form
// (BatchTuning::cluster) and on the narrow cluster kernel (BatchTuning::narrow_rows: every chunk, 8 rows a
// cluster, so the 128-row chunks run 16 clusters with a part-filled tile where the rows end): every case's
// shape fits all three.
enum class Kernels { gemm, tile, cluster, narrow, narrow_k2 };  // narrow_k2: two warps a group, each half of K
const char* kernels_suffix(Kernels k) {
  return k == Kernels::tile      ? "_tile"
         : k == Kernels::cluster ? "_cluster"
         : k == Kernels::narrow  ? "_narrow"
         : k == Kernels::narrow_k2 ? "_narrow_k2"
                                   : "";
}
class CudaBacktest : public ::testing::TestWithParam<std::tuple<Case, Precision, Kernels>> {};

TEST_P(CudaBacktest, EverySeriesMatchesTheReference) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const auto& [c, prec, kernels] = GetParam();
  const Model m = random_model(c.I, c.H, c.L, c.O, true, 11 + uint64_t(c.H));
  const auto x = reference::normal_inputs(c.S * c.T * size_t(c.I), 5);
  cuda::BatchTuning tuning{c.rows};
  tuning.tile = kernels == Kernels::tile;
  tuning.cluster = kernels == Kernels::cluster;
  const bool narrow = kernels == Kernels::narrow || kernels == Kernels::narrow_k2;
  tuning.narrow_rows = narrow ? 1LL << 40 : 0;
  tuning.narrow_ksplit = kernels == Kernels::narrow_k2 ? 2 : 1;
  cuda::BatchRunner runner(m, prec, 0, tuning);
  EXPECT_EQ(runner.tile(), kernels == Kernels::tile);
  if (kernels == Kernels::cluster) EXPECT_GE(runner.cluster(), 2) << "no cluster plan for " << case_name(c);
  if (narrow) EXPECT_GT(runner.narrow_rows(), 0) << "no narrow plan for " << case_name(c);
  std::vector<double> z(c.S * c.T * size_t(c.O), std::nan(""));
  std::atomic<size_t> done{0};
  runner.backtest(x.data(), c.S, c.T, c.W, Backend::BacktestOutput{nullptr, z.data()}, &done);
  EXPECT_EQ(done.load(), c.S * c.T);
  const auto want = reference_series(m, c.W, x, c.S, c.T);
  const double err = reference::normalized_error(z, want);
  EXPECT_LE(err, error_bound(prec)) << case_name(c);
  std::printf("[backtest] %s %s%s error %.2e over %zu outputs, %lld chunks, cluster %d\n", case_name(c).c_str(),
              precision_name(prec), kernels_suffix(kernels), err, z.size(), runner.stats().chunks, runner.cluster());
  if (c.rows == 128 && c.S * c.T > 256) EXPECT_GT(runner.stats().chunks, 1);
  EXPECT_EQ(runner.stats().narrow_chunks, narrow ? runner.stats().chunks : 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBacktest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(Precision::fp16, Precision::bf16),
                                            ::testing::Values(Kernels::gemm, Kernels::tile, Kernels::cluster, Kernels::narrow,
                                                              Kernels::narrow_k2)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) + "_" + precision_name(std::get<1>(info.param)) +
                                  kernels_suffix(std::get<2>(info.param));
                         });

// Fresh windows on the fused kernel and on its cluster form: the zoo's small shapes against the float64
// reference, and a shape beyond their limits (lstm_m: 1,024 gate columns for the one block; its h of three
// layers and their weights beyond a cluster's shared memory) falling back to the per-step GEMMs. Then a few
// windows (1, and 13: two tiles, the second part-filled) on the narrow kernel, the medium shapes included.
TEST(CudaBatchTile, FreshWindowsOfTheSmallZooShapes) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  for (const bool cluster : {false, true})
    for (const std::string name : {"lstm_s", "nv_small", "vollo_tiny", "stac_a", "lstm_m"}) {
      const Model m = *zoo_model(name);
      const size_t W = size_t(find_zoo(name)->config.window.value_or(1)), I = size_t(m.config.input_size),
                   O = size_t(m.config.output_size), B = name == "lstm_m" ? 40 : 200;
      const auto x = reference::normal_inputs(B * W * I, 4);
      cuda::BatchTuning tuning;
      tuning.tile = !cluster;
      tuning.cluster = cluster;
      tuning.narrow_rows = 0;
      cuda::BatchRunner runner(m, Precision::fp16, 0, tuning);
      if (cluster)
        EXPECT_EQ(runner.cluster() >= 2, name != "lstm_m") << name;
      else
        EXPECT_EQ(runner.tile(), name != "lstm_m") << name;
      std::vector<float> z(B * O, std::nanf(""));
      runner.fresh(x.data(), B, W, z.data());
      const auto want = reference::batch(m, std::span<const float>(x), B, W);
      const double err = reference::normalized_error(std::vector<double>(z.begin(), z.end()), want);
      EXPECT_LE(err, error_bound(Precision::fp16)) << name;
      std::printf("[%s] %s fresh%s: error %.2e over %zu windows\n", cluster ? "cluster" : "tile", name.c_str(),
                  runner.tile() || runner.cluster() ? "" : " (per-step GEMMs)", err, B);
    }
  for (const Precision prec : {Precision::fp16, Precision::bf16})
    for (const std::string name : {"lstm_s", "nv_small", "vollo_tiny", "stac_a", "lstm_m", "nv_medium", "stac_b"}) {
      const Model m = *zoo_model(name);
      const size_t W = size_t(find_zoo(name)->config.window.value_or(1)), I = size_t(m.config.input_size),
                   O = size_t(m.config.output_size);
      cuda::BatchRunner runner(m, prec, 0, cuda::BatchTuning{});  // the default: a few rows go narrow
      if (name != "lstm_m" && name != "nv_medium" && name != "stac_b")  // the cluster sizes of 10-16 may not fit
        EXPECT_GT(runner.narrow_rows(), 0) << name;
      for (const size_t B : {size_t(1), size_t(13)}) {
        const auto x = reference::normal_inputs(B * W * I, 9 + B);
        std::vector<float> z(B * O, std::nanf(""));
        runner.fresh(x.data(), B, W, z.data());
        const auto want = reference::batch(m, std::span<const float>(x), B, W);
        const double err = reference::normalized_error(std::vector<double>(z.begin(), z.end()), want);
        EXPECT_LE(err, error_bound(prec)) << name << " B=" << B;
        EXPECT_EQ(runner.stats().narrow_chunks, runner.narrow_rows() > 0 ? 1 : 0) << name;
        std::printf("[narrow] %s %s fresh B=%zu: error %.2e (narrow up to %lld rows)\n", name.c_str(), precision_name(prec), B,
                    err, runner.narrow_rows());
      }
    }
}

// The golden PyTorch cases through the engine: window and streaming backtests, then ticks again (the tick
// kernel parked for the backtest starts over), and fresh windows through a batch engine.
TEST(CudaBacktestGolden, EngineBacktestTicksAfterAndFreshWindows) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  for (const std::string name : {"tiny", "small2x128", "multi_out"}) {
    const auto g = test_support::load_golden(name);
    const size_t O = size_t(g.model.config.output_size), T = g.ticks, W = size_t(g.window);
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      EngineOptions eo;
      eo.backend = BackendKind::cuda;
      eo.mode = mode;
      eo.window = g.window;
      Engine engine(g.model, eo);
      std::vector<double> z(T * O);
      engine.backtest(g.inputs, 1, T, std::span<double>(z));
      std::vector<double> got, want;
      if (mode == Mode::window) {
        got.assign(z.begin() + (W - 1) * O, z.end());
        want = g.window_expected;
      } else {
        got = z;
        want = g.streaming_expected;
      }
      const double err = reference::normalized_error(got, want);
      EXPECT_LE(err, error_bound(Precision::fp16)) << name;
      std::printf("[golden] %s %s backtest error %.2e\n", name.c_str(), mode == Mode::window ? "window" : "streaming", err);
      // Ticks after the backtest: the tick kernel again, from tick 0.
      std::vector<float> out(O);
      std::vector<double> ticks;
      for (size_t t = 0; t < T; ++t) {
        engine.step(std::span<const float>(&g.inputs[t * size_t(g.model.config.input_size)], size_t(g.model.config.input_size)), out);
        if (mode == Mode::streaming || t + 1 >= W) ticks.insert(ticks.end(), out.begin(), out.end());
      }
      EXPECT_LE(reference::normalized_error(ticks, want), error_bound(Precision::fp16)) << name << " ticks after";
    }
    // Fresh windows: every window of the golden series as its own request.
    EngineOptions bo;
    bo.backend = BackendKind::cuda;
    bo.mode = Mode::batch;
    Engine batch(g.model, bo);
    const size_t I = size_t(g.model.config.input_size), B = T - W + 1;
    std::vector<float> windows;
    for (size_t b = 0; b < B; ++b) windows.insert(windows.end(), g.inputs.begin() + b * I, g.inputs.begin() + (b + W) * I);
    std::vector<float> z(B * O);
    batch.run_batch(windows, B, W, z);
    const std::vector<double> got(z.begin(), z.end());
    const double err = reference::normalized_error(got, g.window_expected);
    EXPECT_LE(err, error_bound(Precision::fp16)) << name << " fresh";
    std::printf("[golden] %s fresh error %.2e\n", name.c_str(), err);
  }
}

// batch_rows sets the runner's chunk (rounded up to its 128-row tile) and the answers stay the same: a
// backtest of many series in small chunks against one in the default's.
TEST(CudaBacktestGolden, BatchRowsSetTheChunkAndKeepTheAnswers) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const auto g = test_support::load_golden("multi_out");
  const size_t O = size_t(g.model.config.output_size), T = g.ticks, S = 300;
  std::vector<float> xs;
  for (size_t s = 0; s < S; ++s) xs.insert(xs.end(), g.inputs.begin(), g.inputs.end());  // S copies of the series
  std::vector<std::vector<double>> z;
  std::vector<double> chunk;
  for (long long rows : {0LL, 130LL}) {
    EngineOptions eo;
    eo.backend = BackendKind::cuda;
    eo.window = g.window;
    eo.gpu.batch_rows = rows;
    Engine engine(g.model, eo);
    z.emplace_back(S * T * O);
    engine.backtest(xs, S, T, std::span<double>(z.back()));
    const auto c = engine.counters();
    ASSERT_TRUE(c.count("batch_rows_per_chunk")) << rows;
    chunk.push_back(c.at("batch_rows_per_chunk"));
  }
  EXPECT_EQ(chunk[1], 256.0);  // 130 rounded up to the tile
  EXPECT_GT(chunk[0], 0.0);
  // the same answers (the chunk changes only which windows share a GEMM), and right against PyTorch's
  EXPECT_LE(reference::normalized_error(z[0], z[1]), 1e-6);
  const size_t W = size_t(g.window);
  for (size_t s : {size_t(0), S - 1}) {
    const std::vector<double> got(z[1].begin() + (s * T + W - 1) * O, z[1].begin() + (s + 1) * T * O);
    EXPECT_LE(reference::normalized_error(got, g.window_expected), error_bound(Precision::fp16)) << "series " << s;
  }
}

// The zoo's shapes (fresh windows of every size class, so the large GEMMs run too), a sample against
// the float64 reference.
TEST(CudaFresh, ZooModelsMatchTheReference) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  for (const std::string name : {"lstm_s", "nv_small", "nv_medium", "lstm_l", "vollo_large"}) {
    const Model m = *zoo_model(name);
    const size_t W = size_t(find_zoo(name)->config.window.value_or(1)), I = size_t(m.config.input_size), O = size_t(m.config.output_size);
    const size_t B = 300;
    const auto x = reference::normal_inputs(B * W * I, 3);
    BackendOptions bo;
    bo.mode = Mode::batch;
    bo.window = int(W);
    auto backend = make_cuda_backend(m, bo);
    std::vector<float> z(B * O);
    backend->run_batch(x, B, W, z);
    // The reference on a sample of windows (the large models cost GFLOPs each in float64).
    const size_t n = m.config.hidden_size >= 512 ? 4 : 12;  // float64 windows of the big models cost GFLOPs
    std::vector<float> sample;
    std::vector<double> got;
    for (size_t k = 0; k < n; ++k) {
      const size_t b = k * (B / n);
      sample.insert(sample.end(), x.begin() + b * W * I, x.begin() + (b + 1) * W * I);
      got.insert(got.end(), z.begin() + b * O, z.begin() + (b + 1) * O);
    }
    const auto want = reference::batch(m, std::span<const float>(sample), n, W);
    const double err = reference::normalized_error(got, want);
    EXPECT_LE(err, error_bound(Precision::fp16)) << name;
    std::printf("[fresh] %s %s error %.2e over %zu windows\n", name.c_str(), backend->variant().c_str(), err, n);
  }
}

// --- arrays in GPU memory (Engine::backtest_on_device, run_batch_on_device) ----------------------------

// A device buffer for the tests (cudaMalloc: an allocation of exactly `n` floats, so that the extent
// checks see its end).
struct DeviceFloats {
  float* p = nullptr;
  size_t n = 0;
  explicit DeviceFloats(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), cudaSuccess); }
  DeviceFloats(const std::vector<float>& v) : DeviceFloats(v.size()) {
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  std::vector<float> host() const {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// The same kernels and chunks as the host arrays' path: the outputs equal bit for bit, window and
// streaming, with and without a rolling scaler (which takes the inputs through the host), over chunks small
// enough that series and windows span several; the done count reaches every row.
TEST(CudaDeviceArrays, BacktestEqualsTheHostArraysBitForBit) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = random_model(7, 65, 2, 3, true, 41);
  const size_t S = 37, T = 90, I = 7, O = 3;
  const auto xs = reference::normal_inputs(S * T * I, 8);
  const DeviceFloats dx(xs);
  for (const int W : {0, 17}) {
    for (const bool rolling : {false, true}) {
      EngineOptions eo;
      eo.backend = BackendKind::cuda;
      eo.mode = W > 0 ? Mode::window : Mode::streaming;
      eo.window = W;
      eo.gpu.batch_rows = 128;
      if (rolling) eo.scaler = ScalerChoice{ScalerKind::rolling, 8};
      Engine engine(m, eo);
      std::vector<float> host(S * T * O);
      engine.backtest(xs, S, T, std::span<float>(host));
      EXPECT_EQ(engine.counters().at("batch_device_arrays"), 0.0);
      DeviceFloats dz(S * T * O);
      std::atomic<size_t> done{0};
      engine.backtest_on_device(dx.p, S, T, dz.p, &done);
      EXPECT_EQ(done.load(), S * T);
      // the scaler's way goes through the host: its copies are the host path's
      EXPECT_EQ(engine.counters().at("batch_device_arrays"), rolling ? 0.0 : 1.0);
      const auto got = dz.host();
      EXPECT_EQ(std::memcmp(got.data(), host.data(), host.size() * sizeof(float)), 0)
          << "W " << W << (rolling ? " rolling" : "");
      EXPECT_EQ(engine.ticks(), 0);  // left reset
    }
  }
}

TEST(CudaDeviceArrays, FreshWindowsEqualTheHostArraysBitForBit) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = random_model(5, 40, 2, 2, true, 43);
  const size_t B = 700, W = 9, I = 5, O = 2;
  const auto xs = reference::normal_inputs(B * W * I, 9);
  EngineOptions eo;
  eo.backend = BackendKind::cuda;
  eo.mode = Mode::batch;
  eo.window = int(W);
  eo.gpu.batch_rows = 256;
  Engine engine(m, eo);
  std::vector<float> host(B * O);
  engine.run_batch(xs, B, W, host);
  const DeviceFloats dx(xs);
  DeviceFloats dz(B * O);
  engine.run_batch_on_device(dx.p, B, W, dz.p);
  const auto got = dz.host();
  EXPECT_EQ(std::memcmp(got.data(), host.data(), host.size() * sizeof(float)), 0);
  EXPECT_EQ(engine.counters().at("batch_device_arrays"), 1.0);
}

// Bad device arrays: a NaN named as the host arrays' call names it (nothing computed, the output
// untouched), a host pointer, an allocation shorter than the sizes, overlapping arrays, another backend.
TEST(CudaDeviceArrays, BadArraysAreRefusedByName) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = random_model(4, 16, 1, 2, true, 44);
  const size_t S = 3, T = 20, I = 4, O = 2;
  auto xs = reference::normal_inputs(S * T * I, 10);
  xs[(2 * T + 13) * I + 1] = std::numeric_limits<float>::quiet_NaN();
  EngineOptions eo;
  eo.backend = BackendKind::cuda;
  eo.mode = Mode::streaming;
  Engine engine(m, eo);
  std::string host_message, device_message;
  std::vector<float> host(S * T * O);
  try {
    engine.backtest(xs, S, T, std::span<float>(host));
  } catch (const TickError& e) {
    host_message = e.what();
  }
  const DeviceFloats dx(xs);
  DeviceFloats dz(std::vector<float>(S * T * O, 7.f));
  try {
    engine.backtest_on_device(dx.p, S, T, dz.p);
  } catch (const TickError& e) {
    device_message = e.what();
  }
  EXPECT_NE(host_message.find("series 2, tick 13, input 1 is NaN"), std::string::npos) << host_message;
  EXPECT_EQ(device_message, host_message);
  for (float v : dz.host()) ASSERT_EQ(v, 7.f) << "an output written before the NaN was found";

  const auto good = reference::normal_inputs(S * T * I, 11);
  const DeviceFloats gx(good);
  auto refused = [&](auto&& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused([&] { engine.backtest_on_device(good.data(), S, T, dz.p); }, "backtest input: the pointer is not GPU memory");
  refused([&] { engine.backtest_on_device(gx.p, S, T, host.data()); }, "backtest output: the pointer is not GPU memory");
  DeviceFloats short_out(S * T * O - 1);
  refused([&] { engine.backtest_on_device(gx.p, S, T, short_out.p); }, "backtest output: its allocation holds");
  DeviceFloats both(S * T * I + 8);
  refused([&] { engine.backtest_on_device(both.p, S, T, both.p + 8); }, "overlaps");
  EXPECT_EQ(engine.ticks(), 0);

  EngineOptions co;
  co.backend = BackendKind::cpu;
  co.mode = Mode::streaming;
  Engine cpu(m, co);
  EXPECT_THROW(cpu.backtest_on_device(gx.p, S, T, dz.p), UnsupportedError);
}

}  // namespace
}  // namespace hotpath
