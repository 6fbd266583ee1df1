// `--precision int8` on the cpu backend: the rounding rule, and the backend against its
// per-model bound on the golden cases and on awkward shapes (odd sizes, W = 1, no bias), with both
// activation widths, on the AVX-512 VNNI kernels where the CPU has them and on the portable table
// (which emulates vpdpbusd) everywhere.
//
// The bound (backend.hpp): 1.5 x the error that float64 arithmetic with the int8-rounded weights alone
// makes (reference on model/quantize.hpp's int8_rounded model, against the exact reference), and
// never above 2e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "cpu/cpu_backend.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"
#include "util/warn.hpp"

using namespace hotpath;
using namespace hotpath::cputest;

namespace {

using hotpath::test_support::Golden;
using hotpath::test_support::load_golden;

TEST(Int8Rounding, PerRowSymmetric) {
  // row 0: max 2.54 -> scale 0.02; row 1 all zero; row 2 ties and the clamp at the row's own max
  const std::vector<double> w = {2.54, -1.0, 0.01, 0.0, 0.0, 0.0, -0.5, 0.25, 0.125};
  const Int8Rows q = quantize_rows_int8(w, 3, 3);
  EXPECT_FLOAT_EQ(q.scale[0], 0.02f);
  EXPECT_EQ(q.q[0], 127);
  EXPECT_EQ(q.q[1], -50);
  EXPECT_EQ(q.q[2], 1);  // 0.01 / 0.02 = 0.5 rounds away from zero
  EXPECT_EQ(q.scale[1], 0.0f);
  EXPECT_EQ(q.q[3], 0);
  EXPECT_EQ(q.q[6], -127);
  EXPECT_EQ(q.q[7], 64);  // 63.5 -> 64
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(q.value(r, c), w[r * 3 + c], q.scale[r] / 2 + 1e-12);
}

TEST(Int8Rounding, RoundedModelKeepsBiases) {
  const Model m = random_model(5, 9, 2, 3, true, true, 3);
  const Model r = int8_rounded(m);
  EXPECT_EQ(r.layers[1].b_hh, m.layers[1].b_hh);
  EXPECT_EQ(r.head_b, m.head_b);
  EXPECT_NE(r.layers[0].w_ih, m.layers[0].w_ih);
  EXPECT_NE(r.head_w, m.head_w);
}

TEST(Int8Bound, FactorFloorAndCap) {
  EXPECT_DOUBLE_EQ(int8_error_bound(1e-4), 1.5e-4);
  EXPECT_DOUBLE_EQ(int8_error_bound(5e-3), 2e-3);
  EXPECT_DOUBLE_EQ(int8_error_bound(0.0), error_bound(Precision::fp32));
  EXPECT_EQ(parse_precision("int8"), Precision::int8);
  EXPECT_STREQ(precision_name(Precision::int8), "int8");
}

struct Int8Path {
  std::string isa, act, label;
};

std::vector<Int8Path> int8_paths() {
  std::vector<Int8Path> v = {{"generic", "8", "generic_a8"}, {"generic", "16", "generic_a16"}};
  if (cpu_has_avx512vnni()) {
    v.push_back({"avx512", "8", "avx512_a8"});
    v.push_back({"avx512", "16", "avx512_a16"});
  } else if (cpu_has_neon_ext() || cpu_has_sve_table()) {
    if (cpu_has_neon_ext()) {
      v.push_back({"neon", "8", "neon_a8"});
      v.push_back({"neon", "16", "neon_a16"});
    }
    if (cpu_has_sve_table()) {
      v.push_back({"sve", "8", "sve_a8"});
      v.push_back({"sve", "16", "sve_a16"});
    }
  } else {
    std::printf("[int8] this CPU has neither AVX512_VNNI nor FEAT_I8MM: only the portable int8 kernels are tested here\n");
  }
  return v;
}

std::vector<double> reference_run(const Model& m, Mode mode, const std::vector<float>& x, size_t T, int W) {
  return mode == Mode::window ? reference::sliding_window(m, x, T, W) : reference::streaming(m, x, T);
}

// 16-bit activations (the default) must meet the bound; 8-bit ones (HOTPATH_CPU_INT8_ACT=8, offered
// for speed) take the error to 1.0-2.5x the weight rounding's on these cases (the int8 head of O = 65
// the worst), so they do not meet the bound in general (verify and bench then say so); they are held
// here to 3x it (the fp32 floor where the rounding is 0), which still catches a broken kernel.
double allowed(const Int8Path& p, const struct Verdict& v);

// Runs the int8 backend over x in `mode`; returns {error, bound, weight-rounding error}.
struct Verdict {
  double err, bound, rounding;
};
double allowed(const Int8Path& p, const Verdict& v) {
  return p.act == "16" ? v.bound : std::max(3 * v.rounding, error_bound(Precision::fp32));
}

Verdict check(const Model& m, Mode mode, const std::vector<float>& x, size_t T, int W, const Int8Path& path,
              const std::vector<int>& cpuset = {}) {
  IsaScope isa({path.isa, "", path.label});
  EnvScope act("HOTPATH_CPU_INT8_ACT", path.act);
  BackendOptions opt;
  opt.mode = mode;
  opt.window = W;
  opt.precision = Precision::int8;
  opt.cpuset = cpuset;
  auto b = make_cpu_backend(m, opt);
  EXPECT_EQ(b->precision(), Precision::int8);
  EXPECT_NE(b->variant().find("int8"), std::string::npos) << b->variant();
  EXPECT_EQ(b->variant().rfind(path.isa, 0), 0u) << b->variant();
  const auto z = run_ticks(*b, x, T);
  const auto exact = reference_run(m, mode, x, T, W);
  const auto rounded = reference_run(int8_rounded(m), mode, x, T, W);
  const double rounding = reference::normalized_error(rounded, exact);
  return {reference::normalized_error(z, exact), int8_error_bound(rounding), rounding};
}

class Int8Golden_ : public ::testing::TestWithParam<std::tuple<std::string, Int8Path>> {};

TEST_P(Int8Golden_, WithinItsBound) {
  const auto& [name, path] = GetParam();
  const Golden g = load_golden(name);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    const Verdict v = check(g.model, mode, g.inputs, g.ticks, g.window, path);
    std::printf("[int8] %-10s %-9s %-11s error %.3g  bound %.3g  (weight rounding alone %.3g, ratio %.2f)\n",
                name.c_str(), mode_name(mode), path.label.c_str(), v.err, v.bound, v.rounding, v.err / v.rounding);
    EXPECT_GT(v.rounding, 0.0);
    EXPECT_LE(v.err, allowed(path, v));
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Int8Golden_,
                         ::testing::Combine(::testing::Values("tiny", "small2x128", "multi_out"),
                                            ::testing::ValuesIn(int8_paths())),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).label; });

struct Shape {
  int I, H, L, O, W;
  bool bias, head_bias;
};

const Shape kShapes[] = {
    {1, 1, 1, 1, 1, true, true},     {7, 65, 3, 65, 50, true, true}, {3, 17, 3, 5, 2, false, false},
    {33, 40, 1, 4, 7, true, true},   {13, 31, 2, 3, 1, false, true}, {32, 128, 2, 1, 50, true, true},
    {128, 128, 2, 32, 1, true, true}, {9, 100, 2, 2, 12, true, false},
};

class Int8Shapes_ : public ::testing::TestWithParam<std::tuple<Shape, Int8Path>> {};

TEST_P(Int8Shapes_, WithinItsBound) {
  const auto& [s, path] = GetParam();
  const Model m = random_model(s.I, s.H, s.L, s.O, s.bias, s.head_bias, 4321 + s.I * 7 + s.H);
  const size_t T = size_t(s.W) + 40;
  const auto x = random_inputs(T, s.I, 17);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    const Verdict v = check(m, mode, x, T, s.W, path);
    EXPECT_LE(v.err, allowed(path, v)) << "weight rounding alone " << v.rounding;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Int8Shapes_, ::testing::Combine(::testing::ValuesIn(kShapes), ::testing::ValuesIn(int8_paths())),
                         [](const auto& info) {
                           const Shape& s = std::get<0>(info.param);
                           return "I" + std::to_string(s.I) + "_H" + std::to_string(s.H) + "_L" + std::to_string(s.L) +
                                  "_O" + std::to_string(s.O) + "_W" + std::to_string(s.W) + (s.bias ? "" : "_nobias") +
                                  "_" + std::get<1>(info.param).label;
                         });

// The threaded precompute (a worker on another core) gives the same outputs as the inline one.
TEST(CpuInt8, ThreadedPrecomputeMatchesInline) {
  const Model m = random_model(6, 40, 2, 2, true, true, 9);
  const auto x = random_inputs(300, 6, 4);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    BackendOptions opt;
    opt.mode = mode;
    opt.window = 20;
    opt.precision = Precision::int8;
    auto inline_b = make_cpu_backend(m, opt);
    opt.cpuset = two_cores();
    auto threaded = make_cpu_backend(m, opt);
    EXPECT_EQ(run_ticks(*inline_b, x, 300), run_ticks(*threaded, x, 300)) << mode_name(mode);
  }
}

TEST(CpuInt8, RefusedWhereItCannotRun) {
  const Model m = random_model(4, 8, 1, 1, true, true, 1);
  BackendOptions opt;
  opt.window = 4;
  opt.precision = Precision::int8;
  {
    EnvScope act("HOTPATH_CPU_INT8_ACT", "12");
    EXPECT_THROW(make_cpu_backend(m, opt), Error);
  }
  if (cpu_has_avx2()) {
    IsaScope isa({"avx2", "", "avx2"});
    EXPECT_THROW(make_cpu_backend(m, opt), UnsupportedError);
  }
}

// int8 without AVX512_VNNI runs the portable kernels, many times slower than fp32: the choice says why,
// from the CPU's features as given (so both sides are tested on any machine), and says nothing when
// the VNNI kernels serve it.
TEST(CpuInt8, SlowWithoutVnniAndSaysSo) {
  IsaScope isa({"", "", "auto"});
  cpu::CpuFeatures vnni;
  vnni.avx2_fma = vnni.avx512 = vnni.avx512_vnni = true;
  EXPECT_EQ(cpu::int8_slow_note(vnni), "");
  cpu::CpuFeatures avx512_only = vnni, avx2_only;
  avx512_only.avx512_vnni = false;
  avx2_only.avx2_fma = true;
  for (const auto& f : {avx512_only, avx2_only, cpu::CpuFeatures{}}) {
    const std::string note = cpu::int8_slow_note(f);
    EXPECT_NE(note.find("this CPU lacks AVX512_VNNI"), std::string::npos) << note;
    EXPECT_NE(note.find("slower than fp32"), std::string::npos) << note;
  }
  IsaScope generic({"generic", "", "generic"});
  EXPECT_NE(cpu::int8_slow_note(vnni).find("(cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA)"), std::string::npos);
}

// A backend made as if the CPU had no VNNI (the portable table runs anywhere) warns once per process on
// stderr and says so in its facts; fp32 and bf16 there say nothing.
TEST(CpuInt8, WarnsOnceAndSaysSoInFacts) {
  const Model m = random_model(4, 8, 1, 1, true, true, 1);
  BackendOptions opt;
  opt.window = 4;
  cpu::CpuFeatures none;
  cpu::override_cpu_features(none);
  util::forget_warnings();
  ::testing::internal::CaptureStderr();
  opt.precision = Precision::fp32;
  const auto fp32 = make_cpu_backend(m, opt);
  opt.precision = Precision::int8;
  const auto a = make_cpu_backend(m, opt);
  const auto b = make_cpu_backend(m, opt);
  const std::string err = ::testing::internal::GetCapturedStderr();
  cpu::override_cpu_features(std::nullopt);
  const std::string line = "hotpath: warning: int8 runs on the portable kernels here (this CPU lacks AVX512_VNNI";
  EXPECT_NE(err.find(line), std::string::npos) << err;
  EXPECT_EQ(err.find(line), err.rfind(line)) << "more than once: " << err;
  EXPECT_EQ(a->variant().rfind("generic-int8", 0), 0u) << a->variant();
  EXPECT_EQ(a->facts().at("cpu_int8").rfind("slow: int8 runs on the portable kernels", 0), 0u) << a->facts().at("cpu_int8");
  EXPECT_EQ(fp32->facts().count("cpu_int8"), 0u);
}

// The critical arena on huge pages (the default) or 4 KB pages: the same outputs; a bad setting refused.
TEST(CpuCriticalArena, HugePagesOrNotTheSameOutputs) {
  const Model m = random_model(6, 40, 2, 5, true, true, 12);
  const auto x = random_inputs(80, 6, 8);
  for (Precision p : {Precision::fp32, Precision::int8}) {
    BackendOptions opt;
    opt.window = 9;
    opt.precision = p;
    std::vector<double> z[2];
    for (int huge = 0; huge < 2; ++huge) {
      EnvScope env("HOTPATH_CPU_HUGEPAGES", huge ? "1" : "0");
      auto b = make_cpu_backend(m, opt);
      EXPECT_NE(b->facts().at("cpu_critical_weights").find(huge ? "huge page" : "4 KB pages"), std::string::npos);
      z[huge] = run_ticks(*b, x, 80);
    }
    EXPECT_EQ(z[0], z[1]) << precision_name(p);
  }
  EnvScope env("HOTPATH_CPU_HUGEPAGES", "yes");
  BackendOptions opt;
  opt.window = 9;
  try {
    make_cpu_backend(m, opt);
    ADD_FAILURE() << "HOTPATH_CPU_HUGEPAGES=yes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 0 or 1"), std::string::npos) << e.what();
  }
}

}  // namespace
