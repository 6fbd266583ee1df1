// Host-only checks of the kernel plan: run on every machine, GPU or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <set>

#include "common/golden.hpp"
#include "cuda/device_error.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/kernels/cluster/cluster_policy.hpp"
#include "cuda/kernels/common/cycle_histogram.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/tick_trace.hpp"
#include "model/zoo.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace hotpath {
namespace {

Model random_model(int I, int H, int L, int O, uint64_t seed) {
  Model m;
  m.config.input_size = I;
  m.config.hidden_size = H;
  m.config.num_layers = L;
  m.config.output_size = O;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-0.5, 0.5);
  auto fill = [&](std::vector<double>& v, size_t n) {
    v.resize(n);
    for (double& x : v) x = d(rng);
  };
  m.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    fill(m.layers[l].w_ih, size_t(4 * H) * m.config.layer_input_size(l));
    fill(m.layers[l].w_hh, size_t(4 * H) * H);
    fill(m.layers[l].b_ih, 4 * H);
    fill(m.layers[l].b_hh, 4 * H);
  }
  fill(m.head_w, size_t(O) * H);
  fill(m.head_b, O);
  return m;
}

cuda::DeviceLimits h200_like() {
  cuda::DeviceLimits lim;
  lim.sm_count = 132;
  lim.smem_per_block_optin = 227 * 1024;
  lim.max_cluster_size = 16;
  lim.warpgroup_registers = true;
  lim.name = "test device";
  return lim;
}

struct Shape {
  int I, H, L, O;
};

class FragmentPacking : public ::testing::TestWithParam<Shape> {};

// The packed tensor-core fragments, read back through the documented m16n8k16 register layout, must
// give W_ih,l . x with the rounded weights: this checks the packing (row permutation, padding, hi/lo
// split) on the host. Tolerance 1e-12 relative to sum |w x|: double sums of the same products.
TEST_P(FragmentPacking, EmulatedMatVecMatchesRoundedWeights) {
  const Shape s = GetParam();
  const Model m = random_model(s.I, s.H, s.L, s.O, 7);
  for (bool bf16 : {false, true}) {
    const auto plan = cuda::plan_lstm(m, bf16 ? Precision::bf16 : Precision::fp16, Mode::window, 5, {}, h200_like());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (int l = 0; l <= s.L; ++l) {
      const int K = l == 0 ? s.I : s.H;
      const int rows = l == s.L ? s.O : 4 * s.H;
      const std::vector<double>& w = l == s.L ? m.head_w : m.layers[l].w_ih;
      std::vector<float> x(K);
      for (float& v : x) v = d(rng);
      const auto y = cuda::emulate_fragments(plan, l, x);
      ASSERT_EQ(int(y.size()), rows);
      for (int r = 0; r < rows; ++r) {
        double want = 0, scale = 0;
        for (int k = 0; k < K; ++k) {
          const double p = double(cuda::round_weight(w[size_t(r) * K + k], bf16)) * x[k];
          want += p;
          scale += std::fabs(p);
        }
        // hi+lo carries x to 2^-22 (fp16) / 2^-16 (bf16) relative
        const double tol = (bf16 ? 1e-4 : 1e-6) * scale + 1e-12;
        ASSERT_NEAR(y[r], want, tol) << "layer " << l << " row " << r << (bf16 ? " bf16" : " fp16");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FragmentPacking,
                         ::testing::Values(Shape{32, 128, 2, 1}, Shape{4, 8, 1, 1}, Shape{16, 64, 3, 4},
                                           Shape{7, 20, 2, 5}, Shape{1, 1, 1, 1}, Shape{65, 24, 1, 32},
                                           Shape{128, 128, 2, 32}),
                         [](const auto& info) {
                           const Shape s = info.param;
                           return "I" + std::to_string(s.I) + "_H" + std::to_string(s.H) + "_L" +
                                  std::to_string(s.L) + "_O" + std::to_string(s.O);
                         });

// The multi-block families pack each block's units with the same layout rule: the emulation over all
// blocks must give W_ih,l . x for every layer (the head is SIMT fp32 there, not fragments).
class MultiBlockPacking : public ::testing::TestWithParam<Shape> {};
TEST_P(MultiBlockPacking, EmulatedMatVecMatchesRoundedWeights) {
  const Shape s = GetParam();
  const Model m = random_model(s.I, s.H, s.L, s.O, 11);
  for (bool cluster : {true, false})
    for (bool bf16 : {false, true}) {
      const Precision prec = bf16 ? Precision::bf16 : Precision::fp16;
      const auto plan = cluster ? cuda::plan_cluster(m, prec, Mode::window, 5, {}, h200_like())
                                : cuda::plan_grid(m, prec, Mode::window, 5, {}, h200_like());
      const auto& p = plan.params;
      EXPECT_EQ(p.family, cluster ? cuda::KernelFamily::cluster : cuda::KernelFamily::grid);
      EXPECT_GE(p.nc * p.gpb * 8, s.H);
      EXPECT_EQ(p.compute_warps, p.gpb * p.ksplit);
      EXPECT_LE(p.smem_bytes, h200_like().smem_per_block_optin);
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> d(-1.f, 1.f);
      for (int l = 0; l < s.L; ++l) {
        const int K = l == 0 ? s.I : s.H;
        const auto& w = m.layers[l].w_ih;
        std::vector<float> x(K);
        for (float& v : x) v = d(rng);
        const auto y = cuda::emulate_fragments(plan, l, x);
        ASSERT_EQ(int(y.size()), 4 * s.H);
        for (int r = 0; r < 4 * s.H; ++r) {
          double want = 0, scale = 0;
          for (int k = 0; k < K; ++k) {
            const double prod = double(cuda::round_weight(w[size_t(r) * K + k], bf16)) * x[k];
            want += prod;
            scale += std::fabs(prod);
          }
          ASSERT_NEAR(y[r], want, (bf16 ? 1e-4 : 1e-6) * scale + 1e-12)
              << (cluster ? "cluster" : "grid") << " layer " << l << " row " << r;
        }
      }
    }
}
INSTANTIATE_TEST_SUITE_P(Shapes, MultiBlockPacking,
                         ::testing::Values(Shape{32, 256, 3, 1}, Shape{4, 8, 1, 1}, Shape{7, 20, 2, 5},
                                           Shape{192, 160, 3, 1}, Shape{65, 100, 2, 32}),
                         [](const auto& info) {
                           const Shape s = info.param;
                           return "I" + std::to_string(s.I) + "_H" + std::to_string(s.H) + "_L" +
                                  std::to_string(s.L) + "_O" + std::to_string(s.O);
                         });

// The automatic choice on an H200-like device (132 SMs, 227 KiB a block, clusters of 16): the smallest
// family that holds each zoo shape (docs/model.md), in both modes.
TEST(KernelChoice, ZooShapesGoToTheSmallestFamilyThatHoldsThem) {
  struct Case {
    const char* name;
    Shape s;
    int W;
    cuda::KernelFamily want;
  };
  const Case cases[] = {
      {"lstm_s", {32, 128, 2, 1}, 50, cuda::KernelFamily::cta},
      {"vollo_tiny", {128, 128, 2, 32}, 1, cuda::KernelFamily::cta},
      {"nv_small", {128, 96, 2, 1}, 64, cuda::KernelFamily::cta},
      {"nv_medium", {192, 160, 3, 1}, 96, cuda::KernelFamily::cluster},
      {"lstm_m", {32, 256, 3, 1}, 50, cuda::KernelFamily::cluster},
      {"vollo_small", {256, 256, 3, 32}, 1, cuda::KernelFamily::cluster},
      {"vollo_med", {480, 480, 3, 32}, 1, cuda::KernelFamily::grid},
      {"nv_large", {512, 736, 4, 1}, 128, cuda::KernelFamily::grid},
      {"lstm_l", {32, 1024, 4, 1}, 50, cuda::KernelFamily::grid},
      {"vollo_large", {960, 960, 3, 32}, 1, cuda::KernelFamily::grid},
      {"stac_a", {100, 100, 2, 1}, 50, cuda::KernelFamily::cta},
      {"stac_b", {250, 200, 3, 1}, 100, cuda::KernelFamily::cluster},
      {"stac_c", {500, 1000, 4, 1}, 100, cuda::KernelFamily::grid},
  };
  for (const Case& c : cases) {
    const Model m = random_model(c.s.I, c.s.H, c.s.L, c.s.O, 1);
    for (Mode mode : {Mode::window, Mode::streaming}) {
      const auto choice = cuda::choose_kernel(m, Precision::fp16, mode, c.W, {}, h200_like(), std::nullopt);
      EXPECT_EQ(choice.family, c.want) << c.name << ": " << choice.why;
      EXPECT_FALSE(choice.why.empty());
      EXPECT_LE(choice.plan.params.grid(), h200_like().sm_count) << c.name;
    }
  }
}

// The cluster family's plan: the fewest blocks whose warps hold every W_ih tile in registers, each warp's
// tile list covering its k-share of every layer, a size asked for or refused by name.
TEST(ClusterPlan, RegisterTilesAndClusterSizes) {
  using cuda::ClusterPolicy;
  struct Case {
    const char* name;
    Shape s;
    int blocks, gpb, slots;
  };
  for (const Case& c : {Case{"lstm_m", {32, 256, 3, 1}, 16, 2, 5}, Case{"nv_medium", {192, 160, 3, 1}, 10, 2, 6},
                        Case{"vollo_small", {256, 256, 3, 32}, 16, 2, 6}, Case{"stac_b", {250, 200, 3, 1}, 13, 2, 6},
                        Case{"lstm_s", {32, 128, 2, 1}, 2, 8, 5}, Case{"tiny", {4, 8, 1, 1}, 2, 16, 2}}) {
    const Model m = random_model(c.s.I, c.s.H, c.s.L, c.s.O, 3);
    const auto plan = cuda::plan_cluster(m, Precision::fp16, Mode::window, 50, {}, h200_like());
    const auto& p = plan.params;
    EXPECT_EQ(p.nc, c.blocks) << c.name;
    EXPECT_EQ(p.gpb, c.gpb) << c.name;
    EXPECT_EQ(p.cl.slots, c.slots) << c.name;
    EXPECT_GE(p.cl.regs, p.cl.slots) << c.name << ": every tile in registers";
    EXPECT_EQ(p.threads(), 32 * ClusterPolicy::warps) << c.name;
    EXPECT_EQ(p.gpb * p.ksplit, ClusterPolicy::warps) << c.name;
    EXPECT_GE(p.nc * p.gpb * 8, c.s.H) << c.name;
    EXPECT_EQ(p.grid() % p.nc, 0) << c.name;
    EXPECT_LE(p.grid(), h200_like().sm_count) << c.name;
    int slots = 0;
    for (int l = 0; l < c.s.L; ++l) {
      EXPECT_GE(p.cl.tiles[l] * p.ksplit, p.kt[l]) << c.name << " layer " << l << ": the k-shares cover the layer";
      EXPECT_EQ(p.cl.first[l], slots) << c.name;
      slots += p.cl.tiles[l];
    }
    EXPECT_EQ(slots, p.cl.slots) << c.name;
    EXPECT_EQ(plan.frags.size(), size_t(p.nc) * p.block_frag * 4) << c.name;
  }
  // a size asked for: lstm_m over 8 blocks (4 groups each, one tile a warp beyond the registers: read from
  // shared memory); one it cannot be split over is refused, listing those that fit
  const Model mid = random_model(32, 256, 3, 1, 4);
  const auto eight = cuda::plan_cluster(mid, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, 8);
  EXPECT_EQ(eight.params.nc, 8);
  EXPECT_EQ(eight.params.gpb, 4);
  EXPECT_EQ(eight.params.cl.slots, 9);
  EXPECT_EQ(eight.params.cl.regs, ClusterPolicy::max_reg_slots);
  try {
    (void)cuda::plan_cluster(mid, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, 3);
    FAIL() << "a cluster of 3";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster of 3 blocks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)cuda::plan_cluster(mid, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, 1), UnsupportedError);
  cuda::DeviceLimits eight_max = h200_like();
  eight_max.max_cluster_size = 8;  // a device without the non-portable size: lstm_m over 8, some tiles in shared memory
  EXPECT_EQ(cuda::plan_cluster(mid, Precision::fp16, Mode::window, 50, {}, eight_max).params.nc, 8);
}

// The audited benchmark's large model: ~27 MiB of fp16 input-side weights, a little more than the grid
// blocks' shared memory holds: auto takes the grid, layer 0's fragments left in global memory (read from
// L2 every tick) and the rest in shared memory; the packed layout is still the one frag_index defines.
TEST(KernelChoice, StacCGoesToTheGridWithLayer0InL2) {
  const Model m = random_model(500, 1000, 4, 1, 1);
  const auto choice = cuda::choose_kernel(m, Precision::fp16, Mode::window, 100, {}, h200_like(), std::nullopt);
  EXPECT_EQ(choice.family, cuda::KernelFamily::grid) << choice.why;
  const auto& p = choice.plan.params;
  EXPECT_EQ(p.grid_l2_layers, 1);
  EXPECT_EQ(p.nc, 125);  // one unit group (8 units) a block
  // the why names where the tiles are read and the cell warp's lanes (8 compute warps: two lanes a unit)
  EXPECT_NE(choice.why.find("8 compute warps a block holding each layer's tiles in registers (176 a thread"),
            std::string::npos)
      << choice.why;
  EXPECT_NE(choice.why.find("the cell warp adding each unit's k-shares in 2 lanes"), std::string::npos) << choice.why;
  EXPECT_LE(p.smem_bytes, h200_like().smem_per_block_optin);
  EXPECT_LE(p.grid(), h200_like().sm_count);
  EXPECT_EQ(choice.plan.frags.size(), size_t(p.nc) * p.block_frag * 4);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int l : {0, 3}) {
    const int K = l == 0 ? 500 : 1000;
    std::vector<float> x(K);
    for (float& v : x) v = d(rng);
    const auto y = cuda::emulate_fragments(choice.plan, l, x);
    for (int r : {0, 1, 999, 1000, 2345, 3999}) {
      double want = 0, scale = 0;
      for (int k = 0; k < K; ++k) {
        const double prod = double(cuda::round_weight(m.layers[l].w_ih[size_t(r) * K + k], false)) * x[k];
        want += prod;
        scale += std::fabs(prod);
      }
      EXPECT_NEAR(y[r], want, 1e-6 * scale + 1e-12) << "layer " << l << " row " << r;
    }
  }
}

// Models whose W_ih slices overflow shared memory even at one unit group a block keep working: more
// layers stay in L2 (2 x 2048 over 32 inputs: two groups a block, 256 KiB of layer 1's fragments each,
// so both layers' stay in L2), and the plan says how many.
TEST(GridPlan, BiggerModelsLeaveMoreLayersInL2) {
  const Model m = random_model(32, 2048, 2, 1, 2);
  const auto plan = cuda::plan_grid(m, Precision::fp16, Mode::streaming, 1, {}, h200_like());
  const auto& p = plan.params;
  EXPECT_EQ(p.grid_l2_layers, 2);
  EXPECT_LE(p.grid_l2_layers, p.L);
  EXPECT_LE(p.smem_bytes, h200_like().smem_per_block_optin);
  EXPECT_GE(p.nc * p.gpb * 8, 2048);
  // a model that fits keeps every layer in shared memory
  EXPECT_EQ(cuda::plan_grid(random_model(32, 1024, 4, 1, 2), Precision::fp16, Mode::window, 50, {}, h200_like())
                .params.grid_l2_layers,
            0);
}

// A grid block's pollers (one lane a mailbox chunk) and compute warps share its threads: the plan takes
// blocks of kGridBlockThreads (128 registers a thread) unless a wide input's pollers would leave fewer than
// MultiBlockPolicy::min_compute_warps compute warps there; each k-share's tiles are even and cover the layer.
TEST(GridPlan, WideInputsTakeTheWiderBlocks) {
  const auto narrow = cuda::plan_grid(random_model(32, 1024, 4, 1, 2), Precision::fp16, Mode::window, 50, {}, h200_like());
  EXPECT_EQ(narrow.params.grid_wide, 0);
  EXPECT_LE(narrow.params.threads(), cuda::kGridBlockThreads);
  const auto wide = cuda::plan_grid(random_model(960, 960, 3, 32, 2), Precision::fp16, Mode::streaming, 1, {}, h200_like());
  EXPECT_EQ(wide.params.grid_wide, 1);
  EXPECT_GT(wide.params.threads(), cuda::kGridBlockThreads);
  EXPECT_LE(wide.params.threads(), cuda::kMaxBlockThreads);
  for (const auto* p : {&narrow.params, &wide.params}) {
    EXPECT_GE(p->compute_warps, cuda::MultiBlockPolicy::min_compute_warps);
    for (int l = 0; l < p->L; ++l) {
      EXPECT_EQ(p->share_tiles[l] % 2, 0) << "layer " << l;
      EXPECT_GE(p->share_tiles[l] * p->ksplit, p->kt[l]) << "layer " << l;
    }
  }
}

// Where the grid's precompute runs when not asked (GridPrecompute::automatic): on precompute blocks where
// they read their weights quickly enough, else in the critical blocks between ticks.
TEST(GridPlan, AutomaticPrecomputePlacement) {
  struct Case {
    const char* name;
    Shape s;
    Mode mode;
    int W;
    cuda::GridPrecompute want;
  };
  for (const Case& c : {Case{"vollo_med", {480, 480, 3, 32}, Mode::streaming, 1, cuda::GridPrecompute::separate},
                        Case{"lstm_l", {32, 1024, 4, 1}, Mode::window, 50, cuda::GridPrecompute::in_critical},
                        Case{"lstm_l", {32, 1024, 4, 1}, Mode::streaming, 1, cuda::GridPrecompute::in_critical},
                        Case{"stac_c", {500, 1000, 4, 1}, Mode::window, 100, cuda::GridPrecompute::in_critical}}) {
    const Model m = random_model(c.s.I, c.s.H, c.s.L, c.s.O, 4);
    const auto plan = cuda::plan_grid(m, Precision::fp16, c.mode, c.W, {}, h200_like());
    const auto& p = plan.params;
    EXPECT_EQ(int(p.grid_precompute), int(c.want)) << c.name << " " << mode_name(c.mode);
    if (p.grid_precompute == cuda::GridPrecompute::in_critical) {
      EXPECT_EQ(p.np, 0) << c.name;
      EXPECT_EQ(p.grid(), p.nc) << c.name;
      EXPECT_TRUE(plan.pre_w.empty()) << c.name;
      EXPECT_EQ(plan.hh_frags.size(), size_t(p.nc) * p.hh_block_frag * 4) << c.name;
      EXPECT_EQ(p.nslots, c.mode == Mode::window ? c.W - 1 : 1) << c.name;
    } else {
      EXPECT_GT(p.np, 0) << c.name;  // vollo_med: 69 blocks, ~0.3 MB of fp32 weights each from L2 a tick
    }
  }
}

// info's estimate for the grid with its precompute in the critical blocks: a round rereads a block's W_hh
// rows once per n8 tile of open windows (so a window run reads ceil((W-1)/4) times a streaming one's), and
// the predicted rates sit near what the H200 sustained on these models (BENCHMARKS.md, "tagged words":
// lstm_l 7.8 k, nv_large 5.0 k, stac_c 4.2 k window, lstm_l 25 k streaming).
TEST(GridPlan, EstimatesTheTickRateOfTheOwnPrecompute) {
  struct Case {
    const char* name;
    Shape s;
    int W;
    double lo, hi;  // ticks/s, window mode
  };
  for (const Case& c : {Case{"lstm_l", {32, 1024, 4, 1}, 50, 5e3, 12e3}, Case{"nv_large", {512, 736, 4, 1}, 128, 3e3, 8e3},
                        Case{"stac_c", {500, 1000, 4, 1}, 100, 3e3, 7e3}}) {
    const Model m = random_model(c.s.I, c.s.H, c.s.L, c.s.O, 4);
    const auto win = cuda::plan_grid(m, Precision::fp16, Mode::window, c.W, {}, h200_like(), 0,
                                     cuda::GridPrecompute::in_critical);
    const auto str = cuda::plan_grid(m, Precision::fp16, Mode::streaming, 1, {}, h200_like(), 0,
                                     cuda::GridPrecompute::in_critical);
    const cuda::GridEstimate ew = cuda::grid_estimate(win.params), es = cuda::grid_estimate(str.params);
    EXPECT_EQ(ew.hh_bytes_per_block, es.hh_bytes_per_block * ((c.W - 1 + 3) / 4)) << c.name;
    // streaming: a block's W_hh rows once, 32 gate rows a unit group by the padded hidden size, 2 bytes each
    EXPECT_EQ(es.hh_bytes_per_block, 32LL * str.params.gpb * (16 * str.params.kt[c.s.L]) * 2 * c.s.L) << c.name;
    EXPECT_GE(ew.ticks_per_s, c.lo) << c.name;
    EXPECT_LE(ew.ticks_per_s, c.hi) << c.name;
    EXPECT_GT(es.ticks_per_s, 2 * ew.ticks_per_s) << c.name;
    if (std::string(c.name) == "lstm_l") {
      EXPECT_GE(es.ticks_per_s, 15e3);
      EXPECT_LE(es.ticks_per_s, 45e3);
    }
  }
}

// The own precompute's W_hh fragments: every element of every block's tiles is the rounded W_hh entry the
// documented m16n8k16 A layout puts there (rows: gates i, f / g, o of the block's unit groups), zero past H.
TEST(GridPlan, OwnPrecomputeFragmentsHoldTheRoundedRecurrentWeights) {
  for (const Shape s : {Shape{7, 20, 2, 1}, Shape{5, 300, 3, 2}}) {
    for (bool bf16 : {false, true}) {
      const Model m = random_model(s.I, s.H, s.L, s.O, 8);
      const auto plan = cuda::plan_grid(m, bf16 ? Precision::bf16 : Precision::fp16, Mode::window, 5, {}, h200_like(), 0,
                                        cuda::GridPrecompute::in_critical);
      const auto& p = plan.params;
      const int kt = p.kt[p.L];
      ASSERT_EQ(plan.hh_frags.size(), size_t(p.nc) * p.hh_block_frag * 4);
      for (int b = 0; b < p.nc; ++b)
        for (int l = 0; l < p.L; ++l)
          for (int ql = 0; ql < p.gpb; ++ql)
            for (int mt = 0; mt < 2; ++mt)
              for (int k = 0; k < kt; ++k)
                for (int lane = 0; lane < 32; ++lane) {
                  const size_t at = size_t(b) * p.hh_block_frag + ((size_t(l) * p.gpb + ql) * 2 + mt) * kt * 32 + size_t(k) * 32 + lane;
                  const uint32_t* o = &plan.hh_frags[at * 4];
                  const int g = lane >> 2, t = lane & 3;
                  const int rr[8] = {g, g, g + 8, g + 8, g, g, g + 8, g + 8};
                  const int cc[8] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9, 2 * t + 8, 2 * t + 9};
                  for (int e = 0; e < 8; ++e) {
                    const uint16_t bits = uint16_t(o[e / 2] >> (16 * (e & 1)));
                    const float got = bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
                    const int unit = (b * p.gpb + ql) * 8 + (rr[e] & 7), gate = 2 * mt + (rr[e] >> 3);
                    const int col = cuda::grid_tile_col(k, cc[e]);
                    const float want = unit < s.H && col < s.H
                                           ? cuda::round_weight(m.layers[l].w_hh[size_t(gate * s.H + unit) * s.H + col], bf16)
                                           : 0.f;
                    ASSERT_EQ(got, want) << "block " << b << " layer " << l << " unit " << unit << " gate " << gate << " col " << col;
                  }
                }
      ASSERT_EQ(plan.own_bias.size(), size_t(p.L) * 4 * s.H);
      for (int l = 0; l < p.L; ++l) {
        const auto bias = m.layers[l].bias_sum(s.H);
        for (int r = 0; r < 4 * s.H; ++r) ASSERT_EQ(plan.own_bias[size_t(l) * 4 * s.H + r], float(bias[r]));
      }
    }
  }
}

// The grid's tile pairs: the B values lane t of an m16n8k16 MMA needs (b0: columns 2t, 2t+1 of the tile, b1:
// 2t+8, 2t+9) for tiles 2j and 2j+1 are input columns 32j + 8t .. 32j + 8t + 7 in the order b0, b1 of tile
// 2j, b0, b1 of tile 2j+1, so one 16-byte load fetches them; every input column of the pair is used once.
TEST(GridPlan, TilePairsPutALanesBValuesInOneWord) {
  for (int j = 0; j < 3; ++j) {
    std::array<int, 32> uses{};
    for (int t = 0; t < 4; ++t)
      for (int word = 0; word < 4; ++word)
        for (int half = 0; half < 2; ++half) {
          const int k = 2 * j + word / 2, c = (word % 2) * 8 + 2 * t + half;
          const int col = cuda::grid_tile_col(k, c);
          EXPECT_EQ(col, 32 * j + 8 * t + 2 * word + half) << "tile " << k << " column " << c;
          if (col >= 32 * j && col < 32 * j + 32) ++uses[col - 32 * j];
        }
    for (int c = 0; c < 32; ++c) EXPECT_EQ(uses[c], 1) << "pair " << j << " column " << c;
  }
}

// The input rows (hi, lo) of every family sit an odd multiple of 16 banks apart: a B load's hi lanes and lo
// lanes then hit different banks (one shared-memory wavefront), and each row holds every layer's k16 tiles.
TEST(Plan, InputRowsSitHalfABankRowApart) {
  std::vector<cuda::LstmPlan> plans;
  for (const Shape s : {Shape{32, 64, 2, 1}, Shape{20, 128, 2, 1}})
    plans.push_back(cuda::plan_lstm(random_model(s.I, s.H, s.L, s.O, 9), Precision::fp16, Mode::window, 5, {}, h200_like()));
  plans.push_back(cuda::plan_cluster(random_model(100, 200, 3, 1, 9), Precision::fp16, Mode::window, 5, {}, h200_like()));
  for (const Shape s : {Shape{32, 1024, 4, 1}, Shape{500, 1000, 4, 1}, Shape{512, 736, 4, 1}, Shape{7, 20, 2, 1}})
    plans.push_back(cuda::plan_grid(random_model(s.I, s.H, s.L, s.O, 9), Precision::fp16, Mode::window, 5, {}, h200_like()));
  for (const auto& plan : plans) {
    const auto& p = plan.params;
    EXPECT_EQ(p.xin_stride / 2 % 32, 16) << p.I << "x" << p.H;
    EXPECT_EQ(p.xin_stride % 8, 0) << "rows of whole 16-byte words";
    for (int l = 0; l <= p.L; ++l) EXPECT_GE(p.xin_stride, p.kt[l] * 16) << "layer " << l;
  }
}

// The grid's cell warp adds a unit's k-shares in the fewest lanes (1, 2, 4) whose shares each lane loads in
// one round of kGridCellSharesInFlight; a forced count wins; never more than 32 lanes over the block's units.
TEST(GridPlan, TheCellWarpTakesTheFewestLanesThatLoadInOneRound) {
  cuda::LstmParams p;
  p.gpb = 1;
  const int want[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4};  // by ksplit 0..16
  for (int ksplit = 1; ksplit <= 16; ++ksplit) {
    p.ksplit = ksplit;
    EXPECT_EQ(cuda::grid_cell_lanes(p), want[ksplit]) << ksplit << " shares";
  }
  p.ksplit = 13;
  p.grid_cell_lanes = 2;
  EXPECT_EQ(cuda::grid_cell_lanes(p), 2);
  p.grid_cell_lanes = 0;
  p.gpb = 2;  // 16 units: 2 lanes each at most
  EXPECT_EQ(cuda::grid_cell_lanes(p), 2);
  p.gpb = 4;  // 32 units: one lane each
  EXPECT_EQ(cuda::grid_cell_lanes(p), 1);
  // the zoo's large models on an H200-like device: lstm_l with its tiles in shared memory 13 compute warps
  // -> 4 lanes, in registers 8 -> 2; stac_c 8 -> 2
  cuda::GridPlanOptions shared;
  shared.tiles = cuda::GridTiles::shared;
  const auto l = cuda::plan_grid(random_model(32, 1024, 4, 1, 3), Precision::fp16, Mode::window, 50, {}, h200_like(), 0,
                                 shared);
  EXPECT_EQ(cuda::grid_cell_lanes(l.params), 4);
  const auto lr = cuda::plan_grid(random_model(32, 1024, 4, 1, 3), Precision::fp16, Mode::window, 50, {}, h200_like());
  EXPECT_EQ(cuda::grid_cell_lanes(lr.params), 2);
  const auto c = cuda::plan_grid(random_model(500, 1000, 4, 1, 3), Precision::fp16, Mode::window, 100, {}, h200_like());
  EXPECT_EQ(cuda::grid_cell_lanes(c.params), 2);
}

TEST(KernelChoice, AnImpossibleRequestNamesTheReason) {
  const Model big = random_model(32, 1024, 4, 1, 1);
  try {
    (void)cuda::choose_kernel(big, Precision::fp16, Mode::window, 50, {}, h200_like(), cuda::KernelFamily::cta);
    FAIL() << "lstm_l does not fit one SM";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda kernel 'cta' cannot serve this model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KiB"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)cuda::choose_kernel(big, Precision::fp16, Mode::window, 50, {}, h200_like(),
                                         cuda::KernelFamily::cluster),
               UnsupportedError);
  cuda::DeviceLimits no_clusters = h200_like();
  no_clusters.max_cluster_size = 0;
  const Model mid = random_model(32, 256, 3, 1, 1);
  EXPECT_THROW((void)cuda::choose_kernel(mid, Precision::fp16, Mode::window, 50, {}, no_clusters,
                                         cuda::KernelFamily::cluster),
               UnsupportedError);
  // without clusters, auto falls through to the grid
  EXPECT_EQ(cuda::choose_kernel(mid, Precision::fp16, Mode::window, 50, {}, no_clusters, std::nullopt).family,
            cuda::KernelFamily::grid);
  // a small model runs on every family (the GPU tests use that as a cross-check)
  const Model small = random_model(32, 128, 2, 1, 1);
  for (auto f : {cuda::KernelFamily::cta, cuda::KernelFamily::cluster, cuda::KernelFamily::grid})
    EXPECT_EQ(cuda::choose_kernel(small, Precision::fp16, Mode::window, 50, {}, h200_like(), f).family, f);
}

// The golden cases run through every family in the GPU tests (CudaGolden): each must plan on all three.
TEST(KernelChoice, GoldenCasesPlanOnEveryFamily) {
  for (const char* name : {"tiny", "small2x128", "multi_out"}) {
    const auto g = test_support::load_golden(name);
    for (auto f : {cuda::KernelFamily::cta, cuda::KernelFamily::cluster, cuda::KernelFamily::grid})
      for (Mode mode : {Mode::window, Mode::streaming}) {
        const auto c = cuda::choose_kernel(g.model, Precision::fp16, mode, g.window, {}, h200_like(), f);
        EXPECT_EQ(c.family, f) << name;
        EXPECT_LE(c.plan.params.grid(), h200_like().sm_count) << name;
      }
  }
}

TEST(KernelChoice, TheOptionAsksForItsFamily) {
  EXPECT_FALSE(cuda::requested_family(CudaKernel::automatic).has_value());  // chosen from the model's size
  EXPECT_EQ(*cuda::requested_family(CudaKernel::cta), cuda::KernelFamily::cta);
  EXPECT_EQ(*cuda::requested_family(CudaKernel::cluster), cuda::KernelFamily::cluster);
  EXPECT_EQ(*cuda::requested_family(CudaKernel::grid), cuda::KernelFamily::grid);
  // each family's name in reports is its option's name
  for (const CudaKernel k : {CudaKernel::cta, CudaKernel::cluster, CudaKernel::grid})
    EXPECT_STREQ(cuda::family_name(*cuda::requested_family(k)), util::name_of(k));
}

TEST(CudaPlan, LstmSFitsAndUsesOneBlockPerHiddenUnit) {
  const auto plan = cuda::plan_lstm(random_model(32, 128, 2, 1, 1), Precision::fp16, Mode::window, 50, {}, h200_like());
  // W_ih,0 32 KiB + W_ih,1 128 KiB + head 4 KiB (two 16-row tiles) in fp16
  EXPECT_EQ(plan.critical_weight_bytes, size_t(32 + 128 + 8) * 1024);
  EXPECT_EQ(plan.params.np, 128);
  EXPECT_EQ(plan.params.U, 1);
  EXPECT_EQ(plan.params.nslots, 49);
  EXPECT_LE(plan.params.smem_bytes, 227 * 1024);
  EXPECT_LE(plan.params.threads(), cuda::kMaxBlockThreads);
}

TEST(CudaPlan, VolloTinyKeepsHalfOfLayer0InRegisters) {
  const auto plan =
      cuda::plan_lstm(random_model(128, 128, 2, 32, 1), Precision::fp16, Mode::streaming, 0, {}, h200_like());
  EXPECT_EQ(plan.params.kreg, 4);  // 64 KiB of W_ih,0 in registers: 16 warps x 32 lanes x 32 registers
  EXPECT_LE(plan.params.smem_bytes, 227 * 1024);
  EXPECT_EQ(plan.critical_weight_bytes, size_t(128 + 128 + 8) * 1024);
}

TEST(CudaPlan, SmallDeviceGetsSeveralUnitsPerPrecomputeBlock) {
  cuda::DeviceLimits lim = h200_like();
  lim.sm_count = 9;
  const auto plan = cuda::plan_lstm(random_model(32, 128, 2, 1, 1), Precision::fp16, Mode::streaming, 0, {}, lim);
  EXPECT_EQ(plan.params.U, 16);
  EXPECT_EQ(plan.params.np, 8);
  EXPECT_EQ(plan.params.nslots, 1);
}

TEST(CudaPlan, TooLargeModelNamesTheSharedMemoryLimit) {
  cuda::DeviceLimits lim = h200_like();
  try {
    cuda::plan_lstm(random_model(32, 256, 3, 1, 1), Precision::fp16, Mode::window, 50, {}, lim);
    FAIL() << "lstm_m-sized model accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("sharedMemPerBlockOptin"), std::string::npos) << e.what();
  }
}

TEST(CudaPlan, TooManyOutputsIsRefused) {
  EXPECT_THROW(cuda::plan_lstm(random_model(8, 8, 1, 33, 1), Precision::fp16, Mode::window, 5, {}, h200_like()),
               UnsupportedError);
}

TEST(CudaPlan, Fp32IsRefused) {
  EXPECT_THROW(cuda::plan_lstm(random_model(8, 8, 1, 1, 1), Precision::fp32, Mode::window, 5, {}, h200_like()),
               UnsupportedError);
}

TEST(CudaPlan, RegsVariantServesLstmSShapesAndRefusesOthersNamingWhy) {
  using namespace cuda;
  MailboxOptions mb;
  for (auto [I, H, L, O] : {std::array{32, 128, 2, 1}, std::array{16, 64, 3, 4}, std::array{4, 8, 1, 1}}) {
    const Model m = random_model(I, H, L, O, 21);
    LstmPlan plan = plan_lstm(m, Precision::fp16, Mode::window, 50, mb, h200_like());
    ASSERT_NO_THROW(use_regs_variant(plan)) << I << " " << H << " " << L;
    EXPECT_EQ(plan.params.variant, kVariantRegs);
    EXPECT_EQ(plan.params.threads(), 32 * plan.params.compute_warps);
    EXPECT_LE(plan.params.threads(), kRegsMaxThreads);
    ASSERT_EQ(plan.head_w.size(), size_t(O) * H);
    for (size_t i = 0; i < plan.head_w.size(); ++i) EXPECT_EQ(plan.head_w[i], round_weight(m.head_w[i], false));
  }
  for (auto [I, H, L, O] : {std::array{128, 128, 2, 32}, std::array{64, 128, 2, 1}, std::array{32, 96, 3, 1}, std::array{32, 128, 2, 8}}) {
    const Model m = random_model(I, H, L, O, 22);
    LstmPlan plan = plan_lstm(m, Precision::fp16, Mode::streaming, 0, mb, h200_like());
    try {
      use_regs_variant(plan);
      ADD_FAILURE() << "regs accepted " << I << " " << H << " " << L << " " << O;
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("variant 'regs'"), std::string::npos) << e.what();
    }
  }
}

// No GPU and no driver: the runtime says "driver version is insufficient", but the advice is not an update.
TEST(DeviceCountFailure, NoGpuIsToldApartFromAnOldDriver) {
  using cuda::DeviceCountFailure;
  const DeviceCountFailure no_device{cuda::kCudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected",
                                     12040, 12080};
  EXPECT_EQ(cuda::device_count_failure(no_device), "no CUDA GPU found: the NVIDIA driver sees no device (cudaErrorNoDevice)");
  const std::string insufficient = "CUDA driver version is insufficient for CUDA runtime version";
  const DeviceCountFailure no_driver{cuda::kCudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", insufficient, 0,
                                     12080};
  EXPECT_EQ(cuda::device_count_failure(no_driver),
            "no CUDA GPU found: no NVIDIA driver is installed (cudaErrorInsufficientDriver)");
  const DeviceCountFailure old_driver{cuda::kCudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", insufficient,
                                      11040, 12080};
  EXPECT_EQ(cuda::device_count_failure(old_driver),
            "the NVIDIA driver is too old: it supports CUDA 11.4, this hotpath was built with CUDA 12.8; update the "
            "driver (cudaErrorInsufficientDriver)");
  // Anything else keeps the runtime's own words.
  const DeviceCountFailure other{999, "cudaErrorUnknown", "unknown error", 12080, 12080};
  EXPECT_EQ(cuda::device_count_failure(other), "unknown error (cudaErrorUnknown)");
}


// fn throws UnsupportedError whose message holds `part`.
template <class F>
void expect_unsupported(F fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "not refused; expected: " << part;
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Tiles in registers (GridTiles): the compute warps fill whole warpgroups, which take registers from the
// others' (setmaxnreg), and the plan is one the kernel is instantiated for (kGridRegWGChoices): every layer's
// k-share within the tiles a warp holds, the pollers, cell and service warps in the last warpgroups.
TEST(GridPlan, TilesInRegistersFillWholeWarpgroupsOfAnInstantiation) {
  struct Case {
    const char* name;
    int I, H, L, O, W, compute_warps;
  };
  for (const Case& c : {Case{"lstm_l", 32, 1024, 4, 1, 50, 8}, Case{"stac_c", 500, 1000, 4, 1, 100, 8},
                        Case{"nv_large", 512, 736, 4, 1, 128, 8}, Case{"vollo_med", 480, 480, 3, 32, 1, 8},
                        Case{"odd", 7, 650, 3, 3, 4, 8}}) {
    const Mode mode = c.W > 1 ? Mode::window : Mode::streaming;
    const auto plan = cuda::plan_grid(random_model(c.I, c.H, c.L, c.O, 4), Precision::fp16, mode, c.W, {}, h200_like());
    const auto& p = plan.params;
    EXPECT_EQ(p.compute_warps, c.compute_warps) << c.name;
    EXPECT_EQ(p.grid_reg_wgs * 4, p.compute_warps) << c.name;
    EXPECT_EQ(cuda::grid_register_tiles_misfit(p), "") << c.name;
    EXPECT_EQ(p.threads(), cuda::kGridBlockThreads) << c.name;
    // the other warps fit the warpgroups left: cell, pollers, service
    EXPECT_LE(p.compute_warps + cuda::kGridCellWarps + p.poll_warps + 1, p.threads() / 32) << c.name;
    // what the compute warpgroups gain, the others give: no more than the block's registers at launch
    const int hi = cuda::grid_warpgroup_registers(p.threads(), p.grid_reg_wgs), wgs = p.threads() / 128;
    EXPECT_GT(hi, cuda::grid_launch_registers(p.threads())) << c.name;
    EXPECT_LE(hi * p.grid_reg_wgs + cuda::kGridOtherRegs * (wgs - p.grid_reg_wgs),
              cuda::grid_launch_registers(p.threads()) * wgs)
        << c.name;
  }
  EXPECT_EQ(cuda::grid_warpgroup_registers(512, 2), 176);
  EXPECT_EQ(cuda::grid_warpgroup_registers(512, 3), 144);
  EXPECT_EQ(cuda::grid_warpgroup_registers(512, 4), 0);  // nothing left to give
}

// Where no instantiation holds the tiles (a wide input's 640-thread blocks; a device or build without
// setmaxnreg) the plan reads them from shared memory, as it does when asked to; asking for registers
// there is refused naming why, and compute warps that do not fit are refused.
TEST(GridPlan, TilesFallBackToSharedMemoryAndForcedChoicesAreCheckedByName) {
  const Model big_in = random_model(960, 960, 3, 32, 5), l = random_model(32, 1024, 4, 1, 5);
  const auto wide = cuda::plan_grid(big_in, Precision::fp16, Mode::streaming, 1, {}, h200_like());
  EXPECT_EQ(wide.params.grid_reg_wgs, 0);
  EXPECT_EQ(wide.params.grid_wide, 1);
  cuda::GridPlanOptions regs;
  regs.tiles = cuda::GridTiles::registers;
  expect_unsupported([&] { cuda::plan_grid(big_in, Precision::fp16, Mode::streaming, 1, {}, h200_like(), 0, regs); },
                     "cannot hold its tiles in registers here");
  cuda::DeviceLimits old = h200_like();
  old.warpgroup_registers = false;
  const auto plain = cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, old);
  EXPECT_EQ(plain.params.grid_reg_wgs, 0);
  EXPECT_EQ(plain.params.compute_warps, 13);  // every warp the pollers, cell and service warps leave
  expect_unsupported([&] { cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, old, 0, regs); }, "setmaxnreg");
  cuda::GridPlanOptions shared;
  shared.tiles = cuda::GridTiles::shared;
  const auto asked = cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, shared);
  EXPECT_EQ(asked.params.grid_reg_wgs, 0);
  EXPECT_EQ(asked.params.compute_warps, 13);
  EXPECT_EQ(asked.frags, plain.frags);
  // compute warps asked for: 8 holds lstm_l's 64 tiles a layer in two warpgroups (8 a warp), as the plan
  // chooses; 12 has no instantiation with tiles in registers, so it reads them from shared memory
  cuda::GridPlanOptions eight;
  eight.compute_warps = 8;
  const auto e = cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, eight);
  EXPECT_EQ(e.params.compute_warps, 8);
  EXPECT_EQ(e.params.grid_reg_wgs, 2);
  EXPECT_EQ(e.params.share_tiles[1], 8);
  EXPECT_EQ(e.frags, cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like()).frags);
  cuda::GridPlanOptions twelve;
  twelve.compute_warps = 12;
  const auto t = cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, twelve);
  EXPECT_EQ(t.params.compute_warps, 12);
  EXPECT_EQ(t.params.grid_reg_wgs, 0);
  twelve.tiles = cuda::GridTiles::registers;
  expect_unsupported([&] { cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, twelve); },
                     "cannot hold its tiles in registers here (8 compute warps: 12 were asked for)");
  cuda::GridPlanOptions too_many;
  too_many.compute_warps = 14;
  too_many.tiles = cuda::GridTiles::shared;
  expect_unsupported([&] { cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, too_many); },
                     "14 compute warps a block do not fit");
  too_many.compute_warps = 17;
  expect_unsupported([&] { cuda::plan_grid(l, Precision::fp16, Mode::window, 50, {}, h200_like(), 0, too_many); },
                     "grid compute warps are 1-16");
  // a plan no instantiation serves is named: 4 compute warpgroups, or a share beyond the tiles a warp holds
  auto p = e.params;
  p.grid_reg_wgs = 4;
  EXPECT_NE(cuda::grid_register_tiles_misfit(p).find("no kernel instantiation"), std::string::npos);
  p = e.params;
  p.share_tiles[2] = 10;
  EXPECT_NE(cuda::grid_register_tiles_misfit(p).find("layer 2 gives a warp 10 k16 tiles"), std::string::npos);
}

// ---- the in-kernel tick time's histogram (SharedWords::tick_hist) -------------------------------------

TEST(CycleHistogram, EveryValueLiesInItsBucketAndBucketsStayNarrow) {
  std::mt19937_64 rng(7);
  std::vector<unsigned long long> values = {0, 1, 31, 32, 1023, 1024, 1025, 2047, 2048, 13358, (1ull << 26) - 1};
  for (int i = 0; i < 20000; ++i) values.push_back(rng() >> (38 + rng() % 26));
  for (unsigned long long v : values) {
    const int b = cuda::cycle_bucket(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, cuda::kCycleBuckets);
    EXPECT_LE(cuda::cycle_bucket_lo(b), v) << v;
    EXPECT_LT(v, cuda::cycle_bucket_hi(b)) << v;
    // no wider than 32 cycles or 1/32 of where it starts
    const unsigned long long width = cuda::cycle_bucket_hi(b) - cuda::cycle_bucket_lo(b);
    EXPECT_LE(width, std::max<unsigned long long>(32, cuda::cycle_bucket_lo(b) / 32)) << v;
  }
  for (int b = 0; b + 1 < cuda::kCycleBuckets; ++b) EXPECT_EQ(cuda::cycle_bucket_hi(b), cuda::cycle_bucket_lo(b + 1));
  // at and beyond the top: the last bucket, never out of range
  EXPECT_EQ(cuda::cycle_bucket(1ull << 26), cuda::kCycleBuckets - 1);
  EXPECT_EQ(cuda::cycle_bucket(~0ull), cuda::kCycleBuckets - 1);
}

TEST(CycleHistogram, QuantilesComeWithinABucketOfTheExactOnes) {
  unsigned long long counts[cuda::kCycleBuckets] = {};
  EXPECT_EQ(cuda::cycle_quantile(counts, 0.5), -1);  // nothing counted
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> ticks(std::log(13000.0), 0.15);
  std::vector<double> exact;
  for (int i = 0; i < 100000; ++i) {
    const auto v = (unsigned long long)ticks(rng);
    exact.push_back(double(v));
    counts[cuda::cycle_bucket(v)] += 1;
  }
  std::sort(exact.begin(), exact.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double want = exact[size_t(q * double(exact.size()))];
    EXPECT_NEAR(cuda::cycle_quantile(counts, q), want, want / 32) << q;
  }
}

TEST(CycleHistogram, TheClockBucketsHoldMhzAndTheirPercentiles) {
  EXPECT_EQ(cuda::clock_bucket(1980, 1000), 1980 / cuda::kClockBucketMhz);  // 1,980 cycles in 1 us
  EXPECT_EQ(cuda::clock_bucket(1, 0), cuda::kClockBuckets - 1);             // no time: never out of range
  EXPECT_EQ(cuda::clock_bucket(1000000, 1), cuda::kClockBuckets - 1);
  unsigned long long counts[cuda::kClockBuckets] = {};
  for (int i = 0; i < 990; ++i) counts[cuda::clock_bucket(1980, 1000)] += 1;
  for (int i = 0; i < 10; ++i) counts[cuda::clock_bucket(1500, 1000)] += 1;  // 1 % of spans at 1,500 MHz
  EXPECT_NEAR(cuda::clock_quantile_mhz(counts, 0.5), 1980, cuda::kClockBucketMhz);
  EXPECT_NEAR(cuda::clock_quantile_mhz(counts, 0.005), 1500, cuda::kClockBucketMhz);
}
// The tick trace's split: ticks with known input and output delays, the GPU's clock off the host's by an
// offset that drifts 20 ppm (0.6 us over a stretch of 1,000 ticks): each tick's parts add up to its latency, the input side's excess over its floor
// is recovered within the drift a stretch allows, and entries of other ticks (a ring wrapped, a tick never
// answered) are left out.
TEST(TickTrace, SplitsEachTickIntoInputKernelAndOutput) {
  const long long ring_ticks = 1 << 12, ticks = 10000;  // the ring wrapped: the last 4,096 ticks are read
  const double ns_per_cycle = 0.5;
  const size_t n = static_cast<size_t>(ring_ticks);
  std::vector<unsigned long long> ring(3 * n);
  std::vector<long long> send(n), recv(n);
  std::mt19937_64 rng(3);
  std::vector<double> want_in(static_cast<size_t>(ticks)), want_kernel(static_cast<size_t>(ticks));
  long long host = 1'000'000'000;
  for (long long t = 0; t < ticks; ++t) {
    const size_t k = size_t(t) & size_t(ring_ticks - 1);
    const double in = 1000 + double(rng() % 200) + (t % 97 == 0 ? 5000 : 0);  // ns; every 97th tick late
    const double kernel = 7000 + double(rng() % 300), out = 1500 + double(rng() % 100);
    const double offset = 5e8 + 20e-6 * double(host - 1'000'000'000);  // the GPU's clock: offset + drift
    send[k] = host;
    const double stamp = double(host) + in + kernel + offset;
    ring[3 * k] = (unsigned long long)t + 1;
    ring[3 * k + 1] = (unsigned long long)stamp;
    ring[3 * k + 2] = (unsigned long long)(kernel / ns_per_cycle);
    recv[k] = host + (long long)(in + kernel + out);
    want_in[size_t(t)] = in, want_kernel[size_t(t)] = kernel;
    host += 30'000;
  }
  // tick ticks - 5 was never answered; tick ticks - 9's entry is an older tick's
  recv[size_t(ticks - 5) & size_t(ring_ticks - 1)] = 0;
  ring[3 * (size_t(ticks - 9) & size_t(ring_ticks - 1))] = 7;
  const auto split = cuda::split_tick_trace(ring.data(), ring_ticks, send.data(), recv.data(), ticks, ns_per_cycle, 1000);
  ASSERT_EQ(split.total.size(), size_t(ring_ticks - 2));
  size_t i = 0;
  for (long long t = ticks - ring_ticks; t < ticks; ++t) {
    if (t == ticks - 5 || t == ticks - 9) continue;
    const size_t k = size_t(t) & size_t(ring_ticks - 1);
    EXPECT_NEAR(split.total[i], double(recv[k] - send[k]) * 1e-3, 1e-9);
    EXPECT_NEAR(split.kernel[i], want_kernel[size_t(t)] * 1e-3, 1e-3);
    EXPECT_NEAR(split.total[i], split.kernel[i] + split.input_excess[i] + split.output_and_floors[i], 1e-9);
    // the floor: a line through each stretch's fastest input (1,000 ns and a little); the drift (0.6 ns a
    // tick, 0.6 us a stretch) followed
    EXPECT_NEAR(split.input_excess[i], (want_in[size_t(t)] - 1000) * 1e-3, 0.02) << "tick " << t;
    ++i;
  }
  const auto late = std::max_element(split.input_excess.begin(), split.input_excess.end());
  EXPECT_GT(*late, 4.9);  // a late input is on the input side
  EXPECT_LT(*std::max_element(split.output_and_floors.begin(), split.output_and_floors.end()), 3.0);
}

}  // namespace
}  // namespace hotpath

namespace hotpath {
namespace {

// The hybrid backend's precompute plans. fp32: every zoo model of the medium row fits the precompute blocks of
// all SMs but the feeder's, with the model's exact weights as fp32. mma (what auto takes where it fits): units
// in whole tiles of 4, each weight the tensor cores take stored as fp16 hi + lo halves whose sum is the weight
// to ~2^-22 of it, W_ih,0 and the biases exact. A model whose block cannot hold the mma form falls back to fp32
// (auto) or is refused (mma asked); batch mode and a one-SM device are refused by name.
TEST(HybridPlan, BothFormsHoldTheWeights) {
  const cuda::DeviceLimits lim = h200_like();
  for (const std::string name : {"lstm_s", "lstm_m", "stac_b", "vollo_tiny", "nv_medium"}) {
    SCOPED_TRACE(name);
    const Model m = *zoo_model(name);
    const Mode mode = m.config.window ? Mode::window : Mode::streaming;
    const int W = m.config.window.value_or(1);
    {
      const cuda::LstmPlan plan = cuda::plan_hybrid(m, mode, W, cuda::MailboxOptions{}, lim, 0, cuda::HybridForm::fp32);
      const cuda::LstmParams& p = plan.params;
      EXPECT_EQ(p.hy_mma, 0);
      EXPECT_LE(p.np, lim.sm_count - 1);
      EXPECT_GE(p.np * p.U, p.H);
      EXPECT_LE(p.smem_bytes, lim.smem_per_block_optin);
      EXPECT_EQ(p.nslots, mode == Mode::window ? std::max(1, W - 1) : 1);
      // block 0's unit 0, gate g: W_hh row g*H, every column, exactly the model's value as a float
      for (int g = 0; g < 4; ++g)
        for (int k = 0; k < p.H; ++k)
          ASSERT_EQ(plan.pre_w[size_t(p.pre_hh[0] + g * p.H + k)], float(m.layers[0].w_hh[size_t(g) * p.H * p.H + k]));
    }
    const cuda::LstmPlan plan = cuda::plan_hybrid(m, mode, W, cuda::MailboxOptions{}, lim);
    const cuda::LstmParams& p = plan.params;
    ASSERT_EQ(p.hy_mma, 1);
    EXPECT_EQ(p.U % 4, 0);
    EXPECT_LE(p.np, lim.sm_count - 1);
    EXPECT_GE(p.np * p.U, p.H);
    EXPECT_LE(p.smem_bytes, lim.smem_per_block_optin);
    // the staged h's rows (words) 8 or 24 banks apart: a half-warp's 8-byte B loads conflict-free; rows, the
    // staged block and the mbarrier aligned for the bulk copies; h_state's rows the H hi_lo words
    EXPECT_EQ(p.hy_fp16, 0);
    EXPECT_EQ(p.hy_kpad % 16, 8);
    EXPECT_EQ(p.hy_row_words, p.H);
    EXPECT_EQ(p.s_hyb % 16, 0);
    EXPECT_EQ(p.s_hymb % 8, 0);
    EXPECT_GE(p.s_hymb, p.s_hyb + 4 * p.hy_ncols * p.hy_kpad);
    EXPECT_LE(p.s_hymb + 8, p.smem_bytes);
    {
      // plain fp16 operands: two halves a word, rows 4, 12, 20 or 28 banks apart (a warp's 8 rows x 4 words of
      // 4-byte B loads on 32 banks), 16-byte aligned, holding every k16 step; h_state's rows whole 16 bytes
      const cuda::LstmParams f = cuda::plan_hybrid(m, mode, W, cuda::MailboxOptions{}, lim, 0, cuda::HybridForm::automatic,
                                                   /*fp16_products=*/true).params;
      ASSERT_EQ(f.hy_mma, 1);
      EXPECT_EQ(f.hy_fp16, 1);
      EXPECT_EQ(f.hy_kpad % 8, 4);
      EXPECT_EQ(f.hy_kpad * 4 % 16, 0);
      EXPECT_GE(2 * f.hy_kpad, 16 * f.hy_kt);
      EXPECT_EQ(f.hy_row_words % 4, 0);
      EXPECT_GE(2 * f.hy_row_words, f.H);
      EXPECT_LE(f.hy_row_words, f.hy_kpad);
      EXPECT_GE(f.s_hymb, f.s_hyb + 4 * f.hy_ncols * f.hy_kpad);
      EXPECT_LE(f.smem_bytes, p.smem_bytes);
      std::set<int> banks;
      for (int row = 0; row < 8; ++row)
        for (int w = 0; w < 4; ++w) banks.insert((row * f.hy_kpad + w) % 32);
      EXPECT_EQ(banks.size(), 32u);
      // the fragments hold the hi halves alone: half the bytes, each W_hh weight to fp16's rounding (2^-11 of it)
      EXPECT_EQ(2 * f.hy_block_frags, p.hy_block_frags);
      const cuda::LstmPlan fplan = cuda::plan_hybrid(m, mode, W, cuda::MailboxOptions{}, lim, 0,
                                                     cuda::HybridForm::automatic, true);
      const int b = f.np - 1, l = f.L - 1, H = f.H, kt = f.hy_kt;
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < kt * 16; c += 3) {
          const int g = r & 7, t = (c % 16 & 7) >> 1, word = (c % 16 >= 8 ? 2 : 0) + (r >> 3), unit = b * f.U + (r & 3);
          const uint32_t v = fplan.frags[(size_t(b) * f.hy_block_frags + size_t(f.hy_hh_off[l]) + size_t(c / 16) * 32 +
                                          size_t(g * 4 + t)) * 4 + size_t(word)];
          const double got = fp16_to_float(uint16_t((c & 1) ? v >> 16 : v & 0xffffu));
          const double w = unit < H && c < H ? m.layers[size_t(l)].w_hh[(size_t(r >> 2) * H + unit) * H + c] : 0.0;
          ASSERT_NEAR(got, w, std::abs(w) * 0x1p-11 + 0x1p-24) << "row " << r << " col " << c;
        }
    }
    EXPECT_GE(p.hy_ncols, mode == Mode::window ? W - 1 : 1);
    const int H = p.H, I = p.I, U = p.U, kt = p.hy_kt, G = U / 4;
    // every block's W_ih,0 rows and biases exact
    for (int b = 0; b < p.np; ++b)
      for (int u = 0; u < U && b * U + u < H; ++u)
        for (int gate = 0; gate < 4; ++gate) {
          const size_t row = size_t(gate) * H + size_t(b * U + u);
          const float* w = &plan.pre_w[size_t(b) * p.pre_block_floats];
          ASSERT_EQ(w[(4 * u + gate) * I + I - 1], float(m.layers[0].w_ih[row * I + I - 1]));
          ASSERT_EQ(w[p.pre_b[p.L - 1] + 4 * u + gate], float(m.layers[size_t(p.L - 1)].bias_sum(H)[row]));
        }
    // the fragments: lane (g, t)'s word 0 holds A[g][2t], A[g][2t+1]; row r is gate r >> 2 of unit 4q + (r & 3)
    auto half_at = [&](int b, int off, int q, int k, int half, int r, int c) {
      const int g = r & 7, hi_row = r >> 3, t = (c & 7) >> 1, word = (c >= 8 ? 2 : 0) + hi_row;
      const size_t at = ((size_t(b) * p.hy_block_frags + size_t(off) + (size_t(q * kt + k) * 2 + half) * 32 + size_t(g * 4 + t)) * 4 + word);
      const uint32_t v = plan.frags[at];
      return fp16_to_float(uint16_t((c & 1) ? v >> 16 : v & 0xffffu));
    };
    for (int l = 0; l < p.L; ++l)
      for (const int b : {0, p.np - 1})
        for (int q = 0; q < G; ++q)
          for (int r = 0; r < 16; ++r) {
            const int unit = b * U + 4 * q + (r & 3);
            for (int c = 0; c < kt * 16; c += 5) {
              const double w = unit < H && c < H ? m.layers[size_t(l)].w_hh[(size_t(r >> 2) * H + unit) * H + c] : 0.0;
              const double got = double(half_at(b, p.hy_hh_off[l], q, c / 16, 0, r, c % 16)) +
                                 double(half_at(b, p.hy_hh_off[l], q, c / 16, 1, r, c % 16));
              ASSERT_NEAR(got, w, std::abs(w) * 0x1p-20 + 0x1p-24) << "layer " << l << " block " << b << " row " << r << " col " << c;
            }
          }
  }
  const Model big = *zoo_model("nv_large");
  EXPECT_EQ(cuda::plan_hybrid(big, Mode::window, 128, cuda::MailboxOptions{}, lim).params.hy_mma, 0);
  EXPECT_THROW(cuda::plan_hybrid(big, Mode::window, 128, cuda::MailboxOptions{}, lim, 0, cuda::HybridForm::mma),
               UnsupportedError);
  const Model m = *zoo_model("lstm_s");
  EXPECT_THROW(cuda::plan_hybrid(m, Mode::batch, 50, cuda::MailboxOptions{}, lim), UnsupportedError);
  cuda::DeviceLimits one = lim;
  one.sm_count = 1;
  EXPECT_THROW(cuda::plan_hybrid(m, Mode::window, 50, cuda::MailboxOptions{}, one), UnsupportedError);
}

}  // namespace
}  // namespace hotpath
