// The precompute's and the throughput path's matrix products: on AMX tiles (CpuOptions::amx) and split
// over cores by rows (CpuOptions::pre_split, pre_cores, pre_row_cores).
//
// AMX: the tile product rounds the activations to bf16 as the pair-dot kernels do and accumulates in fp32,
// in another order; against the vector kernel it may differ by the accumulation's rounding alone:
// |AMX - vector| <= 1e-5 x sum |w x| per output (fp32's 2^-24 times up to ~100 additions either way).
// Against the float64 reference a bf16 run is held to the precision's bound (docs/model.md: 2e-3).
//
// The row split moves where each block of units is computed, never its arithmetic, on the vector kernels:
// fp32 and int8 (whose precompute is fp32) answer bitwise as the window split and as one core. bf16 on AMX
// takes a window through a tile or, left over from the tiles, the vector kernel, which differ in rounding:
// there the splits are held to the bf16 bound against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cpu/packed_model.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

using namespace hotpath;
using namespace hotpath::cputest;

namespace {

constexpr double kBf16Bound = 2e-3;

std::unique_ptr<Backend> backend(const Model& m, Mode mode, Precision p, const std::string& cpu_options,
                                 int window = 7) {
  BackendOptions o;
  o.mode = mode;
  o.window = window;
  o.precision = p;
  o.cpu = parse_cpu_options(cpu_options);
  return make_cpu_backend(m, o);
}

// The columns of one product two kernels compute side by side: random inputs, random added terms (when
// asked), each kernel's outputs starting as those terms (out aliases add), and the pointer arrays a
// KernelTable product takes.
struct TwoProducts {
  std::vector<std::vector<float>> x, add, out_a, out_b;
  std::vector<const float*> X, add_a, add_b;
  std::vector<float*> a, b;
  TwoProducts(int ncols, int kdim, size_t gate_floats, bool with_add, std::mt19937_64& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    x.assign(size_t(ncols), std::vector<float>(size_t(kdim)));
    add.assign(size_t(ncols), std::vector<float>(gate_floats));
    for (auto& c : x)
      for (auto& v : c) v = nd(rng);
    for (auto& c : add)
      for (auto& v : c) v = nd(rng);
    out_a = add, out_b = add;
    for (int j = 0; j < ncols; ++j) {
      X.push_back(x[size_t(j)].data());
      add_a.push_back(with_add ? out_a[size_t(j)].data() : nullptr);
      add_b.push_back(with_add ? out_b[size_t(j)].data() : nullptr);
      a.push_back(out_a[size_t(j)].data());
      b.push_back(out_b[size_t(j)].data());
    }
  }
};

// The AMX product against the vector one, on the packed weights of a random layer, for inputs whose width
// has no tail, a short tail and a long one, for 1..99 columns (groups of even sizes up to 16 a tile; under
// kAmxMinCols in all on the vector kernel), blocks from the middle, with and without the added term, out aliasing it.
TEST(CpuAmx, TheTileProductMatchesTheVectorOne) {
  if (!cpu_has_amx()) GTEST_SKIP() << "this CPU has no AMX-BF16 (or the kernel refused its tile data): not tested here";
  const cpu::KernelTable* amx = cpu::kernels_avx512_amx();
  const cpu::KernelTable* vec = cpu::kernels_avx512(true);
  ASSERT_TRUE(amx && amx->amx);
  std::mt19937_64 rng(11);
  for (const int kdim : {1, 31, 32, 33, 64, 250, 500}) {
    const Model m = random_model(kdim, 40, 1, 1, true, true, uint64_t(kdim));  // 40 units: 3 blocks of 16
    const cpu::PackedModel pm = cpu::pack_model(m, 16, cpu::WeightFormat::bf16);
    const cpu::PackedLayer& layer = pm.layers[0];
    const size_t G = pm.gate_floats();
    for (const int ncols : {1, 3, 4, 5, 16, 17, 19, 32, 33, 40, 49, 64, 99}) {
      for (const bool with_add : {false, true}) {
        SCOPED_TRACE("kdim " + std::to_string(kdim) + ", " + std::to_string(ncols) + " columns" +
                     (with_add ? ", added" : ""));
        const size_t width = size_t(kdim);
        TwoProducts p(ncols, kdim, G, with_add, rng);  // a: AMX, b: the vector kernel
        const auto &x = p.x, &add = p.add, &o_amx = p.out_a, &o_vec = p.out_b;
        std::vector<uint32_t> scratch(cpu::gemm_scratch_words(kdim));
        const int b0 = 1, b1 = 3;  // the last two blocks: the first must stay untouched
        amx->gemm_bf16(layer.wih16.data(), kdim, b0, b1, ncols, p.X.data(), p.add_a.data(), p.a.data(), scratch.data());
        vec->gemm_bf16(layer.wih16.data(), kdim, b0, b1, ncols, p.X.data(), p.add_b.data(), p.b.data(), scratch.data());
        for (int j = 0; j < ncols; ++j) {
          for (size_t i = 0; i < size_t(b0) * 64; ++i) ASSERT_EQ(o_amx[size_t(j)][i], add[size_t(j)][i]) << "block 0 written";
          for (size_t i = size_t(b0) * 64; i < size_t(b1) * 64; ++i) {
            // sum |w x| of this row: the bound's scale (|w| <= ~0.16 here, |x| ~ 1)
            const double scale = 1.0 + 0.2 * kdim;
            ASSERT_NEAR(o_amx[size_t(j)][i], o_vec[size_t(j)][i], 1e-5 * scale) << "column " << j << " row " << i;
          }
        }
      }
    }
  }
}

// int8's AMX product (the critical step's int8 weights, each column's activations quantized to 16 bits as
// two bytes) against the vector fp32 product on the same weights dequantized: within the activations'
// rounding, half a step of max|x| / 32767 a column, times sum |w| of the row, plus fp32's own rounding. For
// widths with and without a tail of k-quads, 1..99 columns, blocks from the middle, with and without the
// added term, out aliasing it.
TEST(CpuAmx, TheInt8TileProductMatchesTheDequantizedOne) {
  if (!cpu_has_amx_int8()) GTEST_SKIP() << "this CPU has no AMX-INT8 (or the kernel refused its tile data): not tested here";
  const cpu::KernelTable* amx = cpu::kernels_avx512_amx_i8(cpu_has_avx512bf16());
  ASSERT_TRUE(amx && amx->gemm_i8);
  std::mt19937_64 rng(12);
  for (const int kdim : {1, 7, 8, 31, 64, 65, 250, 500}) {
    const Model m = random_model(kdim, 40, 1, 1, true, true, uint64_t(100 + kdim));  // 40 units: 3 blocks of 16
    const cpu::PackedModel pm = cpu::pack_model(m, 16, cpu::WeightFormat::int8);
    const cpu::PackedLayer& layer = pm.layers[0];
    const size_t G = pm.gate_floats();
    for (const int ncols : {1, 3, 4, 16, 17, 33, 49, 99}) {
      for (const bool with_add : {false, true}) {
        SCOPED_TRACE("kdim " + std::to_string(kdim) + ", " + std::to_string(ncols) + " columns" +
                     (with_add ? ", added" : ""));
        const size_t width = size_t(kdim);
        TwoProducts p(ncols, kdim, G, with_add, rng);  // a: AMX, b: the vector kernel
        const auto &x = p.x, &add = p.add, &o_amx = p.out_a, &o_vec = p.out_b;
        std::vector<uint32_t> scratch(cpu::gemm_scratch_words(kdim));
        const int b0 = 1, b1 = 3;  // the last two blocks: the first must stay untouched
        amx->gemm_i8(layer.wih8.data(), layer.wih8_scale.data(), kdim, b0, b1, ncols, p.X.data(), p.add_a.data(),
                     p.a.data(), scratch.data());
        amx->gemm_f32(layer.wih32.data(), kdim, b0, b1, ncols, p.X.data(), p.add_b.data(), p.b.data(), scratch.data());
        for (int j = 0; j < ncols; ++j) {
          double amax = 0;
          for (const float v : x[size_t(j)]) amax = std::max(amax, double(std::fabs(v)));
          for (size_t i = 0; i < size_t(b0) * 64; ++i) ASSERT_EQ(o_amx[size_t(j)][i], add[size_t(j)][i]) << "block 0 written";
          for (size_t i = size_t(b0) * 64; i < size_t(b1) * 64; ++i) {
            // row (block b, gate g, lane l) of the fp32 layout [nb][K][4][16]
            const size_t b = i / 64, g = i % 64 / 16, l = i % 16;
            double wsum = 0, wx = 0;
            for (size_t k = 0; k < width; ++k) {
              const double w = layer.wih32[((b * width + k) * 4 + g) * 16 + l];
              wsum += std::fabs(w);
              wx += std::fabs(w * x[size_t(j)][k]);
            }
            const double bound = wsum * amax / 32767.0 * 0.5 + 1e-6 * (1.0 + wx + (with_add ? 4.0 : 0.0));
            ASSERT_NEAR(o_amx[size_t(j)][i], o_vec[size_t(j)][i], bound) << "column " << j << " row " << i;
          }
        }
      }
    }
  }
}

// amx=on where it cannot run is refused by name; auto takes AMX for bf16 and int8 where the CPU has it.
TEST(CpuAmx, TheOptionIsCheckedAndNamed) {
  const Model m = random_model(5, 20, 2, 1, true, true, 2);
  auto refused = [&](Precision p, const std::string& opts, const std::string& needle) {
    try {
      (void)backend(m, Mode::window, p, opts);
      ADD_FAILURE() << opts << " accepted";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  if (cpu_has_avx512bf16()) {
    refused(Precision::fp32, "isa=avx512,amx=on", "AMX runs the bf16 and int8 products only");
    refused(Precision::bf16, "isa=avx512,bf16=cvt,amx=on", "needs the bf16 pair-dot path");
  }
  refused(Precision::bf16, "isa=generic,amx=on", "amx=on needs isa=avx512");
  // A CPU without AMX's `flag` (its features given): on is refused by name, auto takes the vector kernels.
  auto without = [&](bool arch::IsaFlags::*flag, Precision p, const std::string& needle, const std::string& variant) {
    cpu::CpuFeatures f = arch::detect_isa();
    f.*flag = false;
    cpu::override_cpu_features(f);
    refused(p, "amx=on", needle);
    EXPECT_EQ(backend(m, Mode::window, p, "amx=auto")->variant(), variant);
    cpu::override_cpu_features(std::nullopt);
  };
  if (cpu_has_avx512bf16()) without(&arch::IsaFlags::amx_bf16, Precision::bf16, "lacks AMX-BF16", "avx512-bf16");
  if (cpu_has_amx()) {
    auto b = backend(m, Mode::window, Precision::bf16, "amx=auto");
    EXPECT_EQ(b->variant(), "avx512-bf16-amx");
    EXPECT_EQ(b->facts().at("cpu_gemm").rfind("amx", 0), 0u);
    EXPECT_EQ(backend(m, Mode::window, Precision::bf16, "amx=off")->variant(), "avx512-bf16");
    EXPECT_EQ(backend(m, Mode::window, Precision::fp32, "amx=auto")->facts().at("cpu_gemm"), "vector");
  } else {
    std::printf("[amx] this CPU has no AMX-BF16: the AMX path is not tested here\n");
  }
  // int8: AMX-INT8 where the CPU has it, refused by name where not; off keeps the vector products.
  if (cpu_has_avx512vnni()) without(&arch::IsaFlags::amx_int8, Precision::int8, "lacks AMX-INT8", "avx512-int8");
  if (cpu_has_amx_int8()) {
    auto b = backend(m, Mode::window, Precision::int8, "amx=auto");
    EXPECT_EQ(b->variant(), "avx512-int8-amx");
    EXPECT_EQ(b->facts().at("cpu_gemm").rfind("amx (int8", 0), 0u) << b->facts().at("cpu_gemm");
    auto off = backend(m, Mode::window, Precision::int8, "amx=off");
    EXPECT_EQ(off->variant(), "avx512-int8");
    EXPECT_EQ(off->facts().at("cpu_gemm"), "vector");
  } else {
    std::printf("[amx] this CPU has no AMX-INT8: int8's AMX path is not tested here\n");
  }
}

// Window mode, every precision: the row split over 2, 3 and 5 unpinned workers, in groups of 1, 2 (5 workers:
// groups of 2 and 3) and all of them (3 parts in one group leave one with no block of a 20-unit model on
// 16 lanes), against the window split and the inline precompute; across a reset (the barriers' epochs only
// grow). L = 1 and 3, W = 7 (the first ticks keep the completing window open).
TEST(CpuPrecomputeSplit, RowsAnswerAsWindowsAndInline) {
  const size_t T = 17;  // every slot of W = 7 reused twice
  for (const int L : {1, 3}) {
    const Model m = random_model(5, 20, L, 2, true, true, uint64_t(40 + L));
    const auto x = random_inputs(T, 5, uint64_t(L));
    const auto ref = reference::sliding_window(m, x, T, 7);
    for (const Precision p : {Precision::fp32, Precision::bf16, Precision::int8}) {
      auto inline_b = backend(m, Mode::window, p, "");
      const auto want = run_ticks(*inline_b, x, T);
      for (const int workers : {2, 3, 5}) {
        // row_cores: 0 auto (this small model: one core a group), 1, 2 (5 workers: groups of 2 and 3), all
        for (const int row_cores : {-1, 0, 1, 2, workers}) {
          const std::string split = row_cores < 0 ? "windows" : "rows";
          SCOPED_TRACE(std::string(precision_name(p)) + " L=" + std::to_string(L) + ", " + std::to_string(workers) +
                       " workers, " + split + ", row cores " + std::to_string(row_cores));
          auto b = backend(m, Mode::window, p,
                           "pre_split=" + split + ",pre_cores=" + std::to_string(workers) +
                               (row_cores > 0 ? ",pre_row_cores=" + std::to_string(row_cores) : ""));
          EXPECT_EQ(b->counters().at("precompute_parts"), double(workers));
          EXPECT_EQ(b->facts().at("cpu_precompute_split").rfind(split, 0), 0u) << b->facts().at("cpu_precompute_split");
          if (row_cores > 0) {
            EXPECT_EQ(b->counters().at("precompute_groups"), double(workers / row_cores));
            EXPECT_NE(b->facts().at("cpu_precompute_split").find(std::to_string(workers / row_cores) + " group"),
                      std::string::npos) << b->facts().at("cpu_precompute_split");
          }
          for (int pass = 0; pass < 2; ++pass) {
            const auto z = run_ticks(*b, x, T);
            if (p == Precision::bf16 && b->facts().at("cpu_gemm") != "vector")
              EXPECT_LE(reference::normalized_error(z, ref), kBf16Bound);
            else
              EXPECT_EQ(z, want);
            b->reset();
          }
        }
      }
    }
  }
}

// int8's open windows take an exact fp32 W_ih,0·x_t, computed once a part and tick: after a reset the same
// tick numbers come again with other inputs, and each must get its own product, not the one kept from
// before (both splits, and inline). The first windows advance at tick 1, so a reset after ticks 0 and 1
// meets the kept tick number at once.
TEST(CpuPrecomputeSplit, AResetTakesNoProductFromBeforeIt) {
  const size_t T1 = 2, T2 = 30;
  const Model m = random_model(5, 20, 2, 2, true, true, 7);
  const auto x1 = random_inputs(T1, 5, 1), x2 = random_inputs(T2, 5, 2);
  const auto want = run_ticks(*backend(m, Mode::window, Precision::int8, ""), x2, T2);
  for (const std::string opts : {"", "pre_split=windows,pre_cores=2", "pre_split=rows,pre_cores=2"}) {
    SCOPED_TRACE(opts);
    auto b = backend(m, Mode::window, Precision::int8, opts);
    (void)run_ticks(*b, x1, T1);
    b->reset();
    EXPECT_EQ(run_ticks(*b, x2, T2), want);
  }
}

// auto: rows where the products run on AMX or the weights overflow half a core's L2, with several workers;
// streaming has no windows to split; pre_cores past the cpuset is refused.
TEST(CpuPrecomputeSplit, TheChoiceAndTheCores) {
  const Model small = random_model(5, 20, 2, 1, true, true, 3);
  EXPECT_EQ(backend(small, Mode::window, Precision::fp32, "pre_cores=2")->facts().at("cpu_precompute_split").rfind("windows", 0), 0u);
  EXPECT_EQ(backend(small, Mode::window, Precision::fp32, "")->facts().at("cpu_precompute_split"), "none (one core)");
  EXPECT_EQ(backend(small, Mode::streaming, Precision::fp32, "pre_cores=2,pre_split=rows")->facts().at("cpu_precompute_split").rfind("none", 0), 0u);
  if (cpu_has_amx())
    EXPECT_EQ(backend(small, Mode::window, Precision::bf16, "pre_cores=2")->facts().at("cpu_precompute_split").rfind("rows", 0), 0u);
  const size_t l2 = cpu::core_l2_bytes();
  if (l2 > 0 && l2 < (size_t(64) << 20)) {
    // fp32 weights past half of L2: W_ih and W_hh, 4H x (I + H) floats (PackedModel::precompute_weight_bytes)
    int H = 64;
    while (size_t(4) * H * (5 + H) * 4 <= l2 / 2) H *= 2;
    const Model big = random_model(5, H, 1, 1, true, true, 4);
    EXPECT_EQ(backend(big, Mode::window, Precision::fp32, "pre_cores=2", 3)->facts().at("cpu_precompute_split").rfind("rows", 0), 0u)
        << "H " << H << ", L2 " << l2;
  }
  const std::vector<int> cores = two_cores();
  BackendOptions o;
  o.window = 5;
  o.cpuset = cores;
  o.cpu = parse_cpu_options("pre_cores=" + std::to_string(cores.size()));
  try {
    (void)make_cpu_backend(small, o);
    ADD_FAILURE() << "pre_cores past the cpuset accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("after the critical step's 1"), std::string::npos) << e.what();
  }
}

// The backtest's tiles of 16 sequences on AMX tiles against the vector kernels (4 columns at a time), and both against
// float64: window and streaming.
TEST(CpuAmx, BacktestsAgreeWithTheVectorKernels) {
  if (!cpu_has_amx()) GTEST_SKIP() << "this CPU has no AMX-BF16 (or the kernel refused its tile data): not tested here";
  const Model m = random_model(6, 40, 2, 3, true, true, 8);
  const size_t S = 3, T = 41;
  const auto x = random_inputs(S * T, 6, 21);
  for (const Mode mode : {Mode::window, Mode::streaming}) {
    std::vector<std::vector<double>> outs;
    for (const std::string amx : {"off", "on"}) {
      auto b = backend(m, mode, Precision::bf16, "amx=" + amx, 9);
      std::vector<double> z(S * T * 3);
      b->backtest(x, S, T, Backend::BacktestOutput{.f64 = z.data()}, nullptr);
      outs.push_back(z);
    }
    for (size_t s = 0; s < S; ++s) {
      const std::span<const float> xs(x.data() + s * T * 6, T * 6);
      const auto ref = mode == Mode::window ? reference::sliding_window(m, xs, T, 9) : reference::streaming(m, xs, T);
      for (const auto& z : outs)
        EXPECT_LE(reference::normalized_error(std::span<const double>(z.data() + s * T * 3, T * 3), ref), kBf16Bound)
            << mode_name(mode);
    }
    EXPECT_LE(reference::normalized_error(outs[1], outs[0]), 1e-4) << mode_name(mode);
  }
}

}  // namespace
