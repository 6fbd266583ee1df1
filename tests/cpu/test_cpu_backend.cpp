// The cpu backend against the float64 reference (docs/model.md): golden PyTorch cases, awkward shapes,
// long runs, reset, refused ticks, threads, every ISA path this CPU can run, and run_batch.
//
// Tolerances (normalized error, docs/model.md): fp32 1e-5 and bf16 2e-3 against the unrounded reference.
// bf16 is also held against its own rounding figure: the reference run on the bf16-rounded weights
// gives the error weight rounding alone causes (`rounding`), and the backend must stay within
// 2 x rounding + 1e-4 of the unrounded reference: fp32 state and accumulation add little on top,
// and a bf16 activation rounding (vdpbf16ps path) about as much again as the weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/isa_choice.hpp"
#include "model/loader.hpp"
#include "model/safetensors.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

using namespace hotpath;
using namespace hotpath::cputest;

namespace {

using hotpath::test_support::Golden;
using hotpath::test_support::load_golden;

// Every weight and bias rounded to bf16: the reference on it isolates the weight-rounding error.
Model round_to_bf16(Model m) {
  auto r = [](std::vector<double>& v) {
    for (auto& x : v) x = bf16_to_float(float_to_bf16(float(x)));
  };
  for (auto& l : m.layers) r(l.w_ih), r(l.w_hh), r(l.b_ih), r(l.b_hh);
  r(m.head_w), r(m.head_b);
  return m;
}

double bound(Precision p) { return p == Precision::bf16 ? 2e-3 : 1e-5; }

std::vector<double> tail(const std::vector<double>& v, size_t from_tick, int O) {
  return std::vector<double>(v.begin() + long(from_tick) * O, v.end());
}

// ---------------------------------------------------------------------------------------------------
// Golden PyTorch cases, both precisions, both modes, on every ISA path.

class Golden_ : public ::testing::TestWithParam<std::tuple<std::string, Precision, Variant>> {};

TEST_P(Golden_, MatchesPyTorch) {
  const auto& [name, prec, variant] = GetParam();
  IsaScope isa(variant);
  const Golden g = load_golden(name);
  const int O = g.model.config.output_size;
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    BackendOptions opt;
    opt.mode = mode;
    opt.window = g.window;
    opt.precision = prec;
    auto b = make_cpu_backend(g.model, opt);
    EXPECT_EQ(b->variant().rfind(variant.isa, 0), 0u) << b->variant();
    const std::vector<double> z = run_ticks(*b, g.inputs, g.ticks);
    double err;
    if (mode == Mode::window) {
      ASSERT_EQ(g.window_expected.size(), (g.ticks - g.window + 1) * O);
      err = reference::normalized_error(tail(z, g.window - 1, O), g.window_expected);
      // The ticks before W-1 (a window still filling up) against the float64 reference.
      const auto ref = reference::sliding_window(g.model, g.inputs, g.ticks, g.window);
      err = std::max(err, reference::normalized_error(z, ref));
    } else {
      err = reference::normalized_error(z, g.streaming_expected);
    }
    double rounding = 0;
    if (prec == Precision::bf16) {
      const Model r = round_to_bf16(g.model);
      const auto zr = mode == Mode::window ? reference::sliding_window(r, g.inputs, g.ticks, g.window)
                                           : reference::streaming(r, g.inputs, g.ticks);
      const auto exact = mode == Mode::window ? reference::sliding_window(g.model, g.inputs, g.ticks, g.window)
                                              : reference::streaming(g.model, g.inputs, g.ticks);
      rounding = reference::normalized_error(zr, exact);
      EXPECT_LE(err, 2 * rounding + 1e-4) << "rounding figure " << rounding;
    }
    std::printf("[golden] %-10s %-9s %-4s %-16s error %.3g (bf16 weight rounding alone %.3g)\n", name.c_str(),
                mode_name(mode), precision_name(prec), b->variant().c_str(), err, rounding);
    EXPECT_LE(err, bound(prec));
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Golden_,
                         ::testing::Combine(::testing::Values("tiny", "small2x128", "multi_out"),
                                            ::testing::Values(Precision::fp32, Precision::bf16),
                                            ::testing::ValuesIn(available_variants())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + precision_name(std::get<1>(info.param)) + "_" +
                                  std::get<2>(info.param).label;
                         });

// ---------------------------------------------------------------------------------------------------
// Awkward shapes against reference::sliding_window / streaming on random data.

struct Shape {
  int I, H, L, O, W;
  bool bias, head_bias;
};

std::string shape_name(const Shape& s) {
  return "I" + std::to_string(s.I) + "_H" + std::to_string(s.H) + "_L" + std::to_string(s.L) + "_O" +
         std::to_string(s.O) + "_W" + std::to_string(s.W) + (s.bias ? "" : "_nobias") + (s.head_bias ? "" : "_noheadbias");
}

const Shape kShapes[] = {
    {1, 1, 1, 1, 1, true, true},     {1, 7, 2, 1, 2, true, false},  {7, 7, 1, 7, 3, false, true},
    {7, 65, 3, 65, 50, true, true},  {65, 1, 2, 2, 5, true, true},  {3, 17, 3, 5, 2, false, false},
    {32, 128, 2, 1, 50, true, true}, {128, 128, 2, 32, 1, true, true}, {33, 40, 1, 4, 7, true, true},
};

class Shapes_ : public ::testing::TestWithParam<std::tuple<Shape, Precision, Variant>> {};

TEST_P(Shapes_, MatchesReference) {
  const auto& [s, prec, variant] = GetParam();
  IsaScope isa(variant);
  const Model m = random_model(s.I, s.H, s.L, s.O, s.bias, s.head_bias, 1234 + s.I * 7 + s.H);
  const size_t T = size_t(s.W) + 40;
  const auto x = random_inputs(T, s.I, 99);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    BackendOptions opt;
    opt.mode = mode;
    opt.window = s.W;
    opt.precision = prec;
    auto b = make_cpu_backend(m, opt);
    const auto z = run_ticks(*b, x, T);
    const auto ref = mode == Mode::window ? reference::sliding_window(m, x, T, s.W) : reference::streaming(m, x, T);
    const double err = reference::normalized_error(z, ref);
    EXPECT_LE(err, bound(prec)) << b->variant();
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Shapes_,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::Values(Precision::fp32, Precision::bf16),
                                            ::testing::ValuesIn(available_variants())),
                         [](const auto& info) {
                           return shape_name(std::get<0>(info.param)) + "_" + precision_name(std::get<1>(info.param)) +
                                  "_" + std::get<2>(info.param).label;
                         });

// ---------------------------------------------------------------------------------------------------
// Long runs with inputs varying every tick, against the incremental float64 reference; inline and
// with a 2-core cpuset (one precompute worker).

class LongRun_ : public ::testing::TestWithParam<std::tuple<Precision, bool>> {};

TEST_P(LongRun_, TwoThousandTicks) {
  const auto& [prec, threaded] = GetParam();
  const Model m = random_model(8, 24, 2, 3, true, true, 77);
  const int W = 20;
  const size_t T = 2000;
  const auto x = random_inputs(T, 8, 5);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    SCOPED_TRACE(mode_name(mode));
    BackendOptions opt;
    opt.mode = mode;
    opt.window = W;
    opt.precision = prec;
    if (threaded) opt.cpuset = two_cores();
    auto b = make_cpu_backend(m, opt);
    reference::Incremental ref(m, mode == Mode::streaming, W);
    std::vector<double> z, zr;
    std::vector<float> out(3);
    for (size_t t = 0; t < T; ++t) {
      const std::span<const float> xt(x.data() + t * 8, 8);
      b->process(xt, out);
      z.insert(z.end(), out.begin(), out.end());
      const auto r = ref.tick(xt);
      zr.insert(zr.end(), r.begin(), r.end());
    }
    EXPECT_EQ(b->ticks(), (long long)T);
    EXPECT_LE(reference::normalized_error(z, zr), bound(prec)) << b->variant();
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, LongRun_,
                         ::testing::Combine(::testing::Values(Precision::fp32, Precision::bf16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(precision_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_cpuset2" : "_inline");
                         });

// lstm_s itself, window mode, 150 ticks (the ring of 50 windows wraps twice), threaded.
TEST(CpuBackend, LstmSWindowThreaded) {
  const Model m = *zoo_model("lstm_s", 3);
  const size_t T = 150;
  const auto x = random_inputs(T, 32, 8);
  const auto ref = reference::sliding_window(m, x, T, 50);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    BackendOptions opt;
    opt.window = 50;
    opt.precision = p;
    opt.cpuset = two_cores();
    auto b = make_cpu_backend(m, opt);
    const double err = reference::normalized_error(run_ticks(*b, x, T), ref);
    std::printf("[lstm_s] window %-4s %-14s error %.3g\n", precision_name(p), b->variant().c_str(), err);
    EXPECT_LE(err, bound(p));
  }
}

// Threads change where the work runs, never the arithmetic: outputs are bitwise those of the inline run.
TEST(CpuBackend, ThreadedIsBitwiseInline) {
  const Model m = random_model(5, 33, 3, 2, true, true, 4);
  const size_t T = 90;
  const auto x = random_inputs(T, 5, 6);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    BackendOptions a, t;
    a.mode = t.mode = mode;
    a.window = t.window = 11;
    t.cpuset = two_cores();
    auto ba = make_cpu_backend(m, a), bt = make_cpu_backend(m, t);
    EXPECT_EQ(run_ticks(*ba, x, T), run_ticks(*bt, x, T)) << mode_name(mode);
    const auto c = bt->counters();
    EXPECT_EQ(c.at("precompute_workers"), 1.0);
    EXPECT_EQ(bt->facts().at("cpu_critical_core"), std::to_string(t.cpuset[0]));
  }
}

// ---------------------------------------------------------------------------------------------------
// Reset, refused ticks, lifetime.

TEST(CpuBackend, ResetStartsOver) {
  const Model m = random_model(4, 20, 2, 1, true, true, 8);
  const auto x = random_inputs(60, 4, 9);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    for (bool threaded : {false, true}) {
      BackendOptions opt;
      opt.mode = mode;
      opt.window = 7;
      if (threaded) opt.cpuset = two_cores();
      auto b = make_cpu_backend(m, opt);
      const auto first = run_ticks(*b, x, 60);
      std::vector<float> out(1);
      b->step(std::span<const float>(x.data(), 4), out);  // left pending on purpose
      b->reset();
      EXPECT_EQ(b->ticks(), 0);
      EXPECT_EQ(run_ticks(*b, x, 60), first) << mode_name(mode) << (threaded ? " threaded" : "");
    }
  }
}

TEST(CpuBackend, NonFiniteTickIsRefusedAndStateKept) {
  const Model m = random_model(6, 19, 2, 2, true, true, 10);
  const size_t T = 40;
  const int W = 9;
  const auto x = random_inputs(T, 6, 11);
  for (Mode mode : {Mode::window, Mode::streaming}) {
    for (bool threaded : {false, true}) {
      SCOPED_TRACE(std::string(mode_name(mode)) + (threaded ? " threaded" : ""));
      BackendOptions opt;
      opt.mode = mode;
      opt.window = W;
      if (threaded) opt.cpuset = two_cores();
      auto b = make_cpu_backend(m, opt);
      std::vector<double> z;
      std::vector<float> out(2, 0.0f);
      for (size_t t = 0; t < T; ++t) {
        const std::span<const float> xt(x.data() + t * 6, 6);
        if (t == 5 || t == 20) {
          // With the previous tick's precompute still pending, and without it.
          if (t == 20) b->finish_precompute();
          for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
            std::vector<float> xb(xt.begin(), xt.end());
            xb[t % 6] = bad;
            out.assign(2, 42.0f);
            try {
              b->step(xb, out);
              ADD_FAILURE() << "tick with " << bad << " accepted";
            } catch (const TickError& e) {
              EXPECT_NE(std::string(e.what()).find("tick " + std::to_string(t)), std::string::npos) << e.what();
            }
            EXPECT_EQ(b->ticks(), (long long)t);
            EXPECT_EQ(out[0], 42.0f);  // output untouched
          }
        }
        b->step(xt, out);
        z.insert(z.end(), out.begin(), out.end());
        if (t % 3 != 0) b->finish_precompute();  // sometimes leave it pending until the next step
      }
      b->finish_precompute();
      const auto ref = mode == Mode::window ? reference::sliding_window(m, x, T, W) : reference::streaming(m, x, T);
      EXPECT_LE(reference::normalized_error(z, ref), 1e-5);
    }
  }
}

TEST(CpuBackend, WrongSizesAreErrors) {
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  BackendOptions opt;
  opt.window = 4;
  auto b = make_cpu_backend(m, opt);
  std::vector<float> x(4, 0.5f), out(2);
  EXPECT_THROW(b->step(x, out), TickError);
  std::vector<float> x3(3, 0.5f), out1(1);
  EXPECT_THROW(b->step(x3, out1), Error);
  EXPECT_EQ(b->ticks(), 0);
}

TEST(CpuBackend, DestroyWithPendingPrecompute) {
  const Model m = random_model(4, 30, 2, 1, true, true, 2);
  for (int i = 0; i < 20; ++i) {
    BackendOptions opt;
    opt.window = 12;
    opt.cpuset = two_cores();
    auto b = make_cpu_backend(m, opt);
    std::vector<float> x(4, 0.25f), out(1);
    for (int t = 0; t < i; ++t) b->process(x, out);
    b->step(x, out);  // destroyed with this tick's precompute in flight
  }
}

TEST(CpuBackend, OptionErrors) {
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  BackendOptions opt;
  opt.window = 4;
  opt.precision = Precision::fp16;
  try {
    make_cpu_backend(m, opt);
    ADD_FAILURE() << "fp16 accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
  opt.precision = Precision::fp64;
  EXPECT_THROW(make_cpu_backend(m, opt), UnsupportedError);
  opt.precision = Precision::fp32;
  opt.cpuset = {0, 0};
  EXPECT_THROW(make_cpu_backend(m, opt), Error);
  opt.cpuset = {0, 100000};
  EXPECT_THROW(make_cpu_backend(m, opt), Error);
  opt.cpuset = {};
  opt.window = 0;
  EXPECT_THROW(make_cpu_backend(m, opt), Error);
  opt.window = 4;
  {
    IsaScope bad(Variant{"bogus", "", "bogus"});
    EXPECT_THROW(make_cpu_backend(m, opt), Error);
  }
  if (!cpu_has_avx512()) {
    IsaScope v(Variant{"avx512", "", "avx512"});
    EXPECT_THROW(make_cpu_backend(m, opt), UnsupportedError);
  }
  opt.mode = Mode::batch;
  auto b = make_cpu_backend(m, opt);
  std::vector<float> x(3, 0.1f), out(2);
  EXPECT_THROW(b->step(x, out), Error);
}

// The cpu backend's own options (backend/cpu_options.hpp): one text form for every front end, the
// environment as the layer under it, and a backend made with them does as they say.
TEST(CpuOptions, TextEnvironmentAndBackend) {
  const CpuOptions d;
  EXPECT_EQ(cpu_options_text(d), "isa=auto,bf16=auto,amx=auto,int8_act=16,prefetch=auto,rewarm=1,hugepages=1,crit_cores=auto,pre_split=auto,pre_cores=auto,pre_row_cores=auto");
  const CpuOptions o = parse_cpu_options("isa=generic,prefetch=0,hugepages=0");
  EXPECT_EQ(o.isa, CpuIsa::generic);
  EXPECT_EQ(o.prefetch_bytes, 0);
  EXPECT_FALSE(o.huge_pages);
  EXPECT_EQ(o.bf16, CpuBf16::automatic);  // keys not named keep their value
  EXPECT_TRUE(o.rewarm);
  const CpuOptions all = parse_cpu_options("isa=avx2,bf16=cvt,int8_act=8,prefetch=512,rewarm=0,hugepages=0,crit_cores=3");
  EXPECT_EQ(all.crit_cores, 3);
  const CpuOptions split = parse_cpu_options("amx=off,pre_split=rows,pre_cores=12");
  EXPECT_EQ(split.amx, CpuAmx::off);
  EXPECT_EQ(split.pre_split, CpuPrecomputeSplit::rows);
  EXPECT_EQ(split.pre_cores, 12);
  EXPECT_EQ(cpu_options_text(parse_cpu_options(cpu_options_text(split))), cpu_options_text(split));
  EXPECT_EQ(cpu_options_text(parse_cpu_options(cpu_options_text(all))), cpu_options_text(all));
  EXPECT_EQ(cpu_options_text(parse_cpu_options("")), cpu_options_text(d));
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      (void)parse_cpu_options(text);
      ADD_FAILURE() << text << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("isa=sse", "isa=sse (isa takes auto, avx512, avx2, neon, sve or generic)");
  refused("speed=11", "unknown key 'speed' (keys: isa, bf16, amx, int8_act, prefetch, rewarm, hugepages, crit_cores, pre_split, pre_cores, pre_row_cores)");
  refused("crit_cores=0", "crit_cores takes auto or 1..8");
  refused("crit_cores=9", "crit_cores takes auto or 1..8");
  refused("amx=yes", "amx=yes (amx takes auto, on or off)");
  refused("pre_split=cols", "pre_split=cols (pre_split takes auto, windows or rows)");
  refused("pre_cores=0", "pre_cores takes auto or 1..256");
  refused("pre_cores=257", "pre_cores takes auto or 1..256");
  refused("isa", "'isa' has no value");
  refused("isa=avx2,,bf16=dot", "an empty pair");
  refused("prefetch=70000", "prefetch takes auto or bytes 0..65536");
  refused("int8_act=12", "int8_act takes 16 or 8");
  refused("rewarm=yes", "rewarm takes 0 or 1");
  {
    EnvScope isa("HOTPATH_CPU_ISA", "generic"), prefetch("HOTPATH_CPU_PREFETCH", "256");
    const CpuOptions env = cpu_options_from_env();
    EXPECT_EQ(env.isa, CpuIsa::generic);
    EXPECT_EQ(env.prefetch_bytes, 256);
    const CpuOptions over = parse_cpu_options("prefetch=0", env);  // the option over the environment
    EXPECT_EQ(over.isa, CpuIsa::generic);
    EXPECT_EQ(over.prefetch_bytes, 0);
  }
  {
    EnvScope bad("HOTPATH_CPU_INT8_ACT", "12");
    EXPECT_THROW((void)cpu_options_from_env(), Error);
  }
  // A backend made with options does as they say, whatever the environment says.
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  BackendOptions opt;
  opt.window = 3;
  opt.cpu = parse_cpu_options("isa=generic,prefetch=0,rewarm=0,hugepages=0");
  EnvScope isa("HOTPATH_CPU_ISA", "bogus");  // not read: the options are given
  auto b = make_cpu_backend(m, opt);
  EXPECT_EQ(b->variant(), "generic-fp32");
  EXPECT_EQ(b->facts().at("cpu_options"), "isa=generic,bf16=auto,amx=auto,int8_act=16,prefetch=0,rewarm=0,hugepages=0,crit_cores=auto,pre_split=auto,pre_cores=auto,pre_row_cores=auto");
  opt.cpu.reset();
  EXPECT_THROW(make_cpu_backend(m, opt), Error);  // now the environment's (bogus) is read
}

TEST(CpuBackend, VariantNamesThePath) {
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  for (const Variant& v : available_variants()) {
    IsaScope s(v);
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      BackendOptions opt;
      opt.window = 3;
      opt.precision = p;
      auto b = make_cpu_backend(m, opt);
      EXPECT_EQ(b->name(), "cpu");
      EXPECT_EQ(b->precision(), p);
      EXPECT_EQ(b->variant().rfind(v.isa + "-", 0), 0u) << b->variant();
      EXPECT_NE(b->variant().find(precision_name(p)), std::string::npos) << b->variant();
    }
  }
  // Default (auto): the best path this CPU has.
  BackendOptions opt;
  opt.window = 3;
  auto b = make_cpu_backend(m, opt);
  EXPECT_EQ(b->variant(), cpu_has_avx512()    ? "avx512-fp32"
                          : cpu_has_avx2()      ? "avx2-fp32"
                          : cpu_has_sve_table() ? "sve-fp32"
                          : cpu_has_neon()      ? "neon-fp32"
                                                : "generic-fp32");
}

// The kernel choice from an Arm CPU's features, on any machine (choose_isa reads only what it is given):
// NEON by default, the extension table (BFDOT, USDOT) only with FEAT_DotProd + FEAT_I8MM + FEAT_BF16,
// int8 on the portable kernels without them (saying why), what a CPU lacks refused by name. Where the
// chosen table is another architecture's, the choice names it and the backend refuses it.
TEST(CpuIsaChoice, ArmFeaturesChooseNeon) {
  cpu::CpuFeatures base;
  base.neon = true;
  cpu::CpuFeatures ext = base;
  ext.neon_dot = ext.neon_i8mm = ext.neon_bf16 = true;
  const CpuOptions automatic;
  EXPECT_EQ(cpu::choose_isa(Precision::fp32, base, automatic).variant, "neon-fp32");
  EXPECT_EQ(cpu::choose_isa(Precision::bf16, base, automatic).variant, "neon-bf16cvt");
  EXPECT_EQ(cpu::choose_isa(Precision::bf16, ext, automatic).variant, "neon-bf16");
  EXPECT_EQ(cpu::choose_isa(Precision::bf16, ext, parse_cpu_options("bf16=cvt")).variant, "neon-bf16cvt");
  const cpu::IsaChoice slow = cpu::choose_isa(Precision::int8, base, automatic);
  EXPECT_EQ(slow.variant, "generic-int8");
  EXPECT_NE(slow.int8_slow.find("this CPU lacks FEAT_I8MM"), std::string::npos) << slow.int8_slow;
  const cpu::IsaChoice fast = cpu::choose_isa(Precision::int8, ext, automatic);
  EXPECT_EQ(fast.variant, "neon-int8");
  EXPECT_EQ(fast.int8_slow, "");
  ext.neon_bf16 = false;  // the extension unit needs all three
  EXPECT_EQ(cpu::choose_isa(Precision::int8, ext, automatic).variant, "generic-int8");
  const CpuOptions neon = parse_cpu_options("isa=neon");
  auto refused = [](Precision p, const cpu::CpuFeatures& f, const CpuOptions& o, const std::string& needle) {
    try {
      (void)cpu::choose_isa(p, f, o);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(Precision::int8, base, neon, "--precision int8 with cpu option isa=neon: this CPU lacks FEAT_I8MM");
  refused(Precision::bf16, base, parse_cpu_options("isa=neon,bf16=dot"), "bf16=dot with isa=neon: this CPU lacks FEAT_BF16");
  cpu::CpuFeatures x86;
  x86.avx2_fma = x86.avx512 = true;
  refused(Precision::fp32, x86, neon, "isa=neon: this CPU is not an aarch64 one");
  // SVE: its tables where the vectors are 256 or 512 bits, by default ahead of NEON; 128-bit SVE (Grace)
  // stays on NEON.
  cpu::CpuFeatures sve = ext;
  sve.neon_bf16 = true;
  sve.sve = sve.sve2 = sve.sve_i8mm = sve.sve_bf16 = true;
  for (const int bits : {256, 512}) {
    sve.sve_bits = bits;
    EXPECT_EQ(cpu::choose_isa(Precision::fp32, sve, automatic).variant, "sve-fp32");
    EXPECT_EQ(cpu::choose_isa(Precision::bf16, sve, automatic).variant, "sve-bf16");
    EXPECT_EQ(cpu::choose_isa(Precision::int8, sve, automatic).variant, "sve-int8");
    EXPECT_EQ(cpu::choose_isa(Precision::fp32, sve, neon).variant, "neon-fp32");
  }
  sve.sve_bits = 128;
  EXPECT_EQ(cpu::choose_isa(Precision::fp32, sve, automatic).variant, "neon-fp32");
  refused(Precision::fp32, sve, parse_cpu_options("isa=sve"), "isa=sve: this CPU lacks SVE with 256- or 512-bit vectors");
  sve.sve_bits = 512;
  sve.sve_i8mm = false;
  EXPECT_EQ(cpu::choose_isa(Precision::fp32, sve, automatic).variant, "neon-fp32");
  // This build has its own architecture's tables, and not the other's.
  const cpu::IsaChoice arm = cpu::choose_isa(Precision::fp32, base, automatic);
  const cpu::IsaChoice intel = cpu::choose_isa(Precision::fp32, x86, automatic);
  EXPECT_EQ(intel.variant, "avx512-fp32");
  const bool on_arm = std::string(arch::kName) == "aarch64";
  EXPECT_EQ(arm.table != nullptr, on_arm);
  EXPECT_EQ(intel.table != nullptr, std::string(arch::kName) == "x86_64");
  const cpu::IsaChoice& unbuilt = on_arm ? intel : arm;
  EXPECT_EQ(unbuilt.table, nullptr);
  EXPECT_NE(unbuilt.unbuilt.find("its kernels are not built for " + std::string(arch::kName)), std::string::npos)
      << unbuilt.unbuilt;
  // A backend made on the other architecture's features is refused by name, not run.
  const Model m = random_model(3, 8, 1, 2, true, true, 1);
  BackendOptions opt;
  opt.window = 3;
  cpu::override_cpu_features(on_arm ? x86 : base);
  EXPECT_THROW(make_cpu_backend(m, opt), UnsupportedError);
  cpu::override_cpu_features(std::nullopt);
}

// ---------------------------------------------------------------------------------------------------
// Batch workload.

TEST(CpuBackend, RunBatchMatchesReference) {
  const Model m = random_model(9, 21, 2, 3, true, true, 12);
  const size_t B = 23, W = 13;
  const auto x = random_inputs(B * W, 9, 13);
  const auto ref = reference::batch(m, x, B, W);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    for (bool threaded : {false, true}) {
      BackendOptions opt;
      opt.mode = Mode::batch;
      opt.precision = p;
      if (threaded) opt.cpuset = two_cores();
      auto b = make_cpu_backend(m, opt);
      std::vector<float> out(B * 3);
      b->run_batch(x, B, W, out);
      EXPECT_LE(reference::normalized_error(std::vector<double>(out.begin(), out.end()), ref), bound(p));
    }
  }
  BackendOptions opt;
  opt.mode = Mode::batch;
  auto b = make_cpu_backend(m, opt);
  std::vector<float> bad = x, out(B * 3);
  bad[5 * W * 9 + 2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(b->run_batch(bad, B, W, out), TickError);
  try {
    b->run_batch(bad, B, W, out);
  } catch (const TickError& e) {
    EXPECT_STREQ(e.what(), "cpu backend: run_batch input of window 5, step 0 holds NaN or Inf");
  }
  EXPECT_THROW(b->run_batch(x, B, W + 1, out), Error);
}

// A tick's input is refused at its first NaN or Inf, named by index and kind, wherever it sits (the check
// looks at every value before it looks for the first: backend.cpp's first_non_finite), and the state is
// left as it was: the next good tick answers as if the refused one had not been sent.
TEST(CpuBackendTickInput, TheFirstNonFiniteValueIsNamed) {
  const int I = 37;  // not a multiple of any vector width
  const Model m = random_model(I, 8, 1, 1, true, true, 5);
  BackendOptions opt;
  opt.mode = Mode::streaming;
  const auto good = random_inputs(2, I, 6);
  const std::span<const float> x0(good.data(), size_t(I)), x1(good.data() + I, size_t(I));
  auto plain = make_cpu_backend(m, opt);
  std::vector<float> want(1), got(1);
  plain->step(x0, want);
  plain->step(x1, want);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Bad {
    std::vector<std::pair<int, float>> at;
    std::string named;
  };
  for (const Bad& bad : {Bad{{{0, nan}}, "input value 0 is NaN"}, Bad{{{I - 1, inf}}, "input value 36 is Inf"},
                         Bad{{{20, -inf}, {3, nan}}, "input value 3 is NaN"}, Bad{{{17, inf}, {30, nan}}, "input value 17 is Inf"}}) {
    auto b = make_cpu_backend(m, opt);
    b->step(x0, got);
    std::vector<float> x(x1.begin(), x1.end());
    for (const auto& [k, v] : bad.at) x[size_t(k)] = v;
    try {
      b->step(x, got);
      FAIL() << bad.named << ": accepted";
    } catch (const TickError& e) {
      EXPECT_EQ(std::string(e.what()), "tick 1: " + bad.named + "; the tick was refused and the state left unchanged");
    }
    b->step(x1, got);
    EXPECT_EQ(got[0], want[0]) << bad.named;
  }
}

}  // namespace

// A window whose state would take gigabytes is refused, naming the window and the limit, before any of
// it is allocated (once, a golden window of 10^6..2^31 allocated >1 GiB or ran out of memory).
TEST(CpuBackend, HugeWindowIsRefusedBeforeAllocating) {
  const Model m = *zoo_model("lstm_s", 3);
  BackendOptions opt;
  for (int w : {1'000'000, std::numeric_limits<int>::max()}) {
    opt.window = w;
    try {
      make_cpu_backend(m, opt);
      ADD_FAILURE() << "window " << w << " accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("window " + std::to_string(w)), std::string::npos) << what;
      EXPECT_NE(what.find("1.." + std::to_string(kMaxWindow)), std::string::npos) << what;
    }
  }
  opt.window = 1000;  // a long but sane window still works
  EXPECT_NO_THROW(make_cpu_backend(m, opt));
  // Within the window limit a wide, deep model can still need gigabytes: the state itself is checked.
  try {
    check_window_state("cpu", kMaxWindow, 2.0 * double(1ull << 30));
    ADD_FAILURE() << "2 GiB of window state accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2.0 GiB of window state, over the 1 GiB limit"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_window_state("cpu", kMaxWindow, 0.5 * double(1ull << 30)));
}

// A precompute worker that cannot be pinned (or started) leaves no joinable thread behind: the
// constructor throws a hotpath::Error and the workers already started are joined (no std::terminate).
TEST(CpuBackend, AWorkerThatCannotBePinnedIsACleanError) {
  const Model m = random_model(4, 30, 2, 1, true, true, 2);
  BackendOptions opt;
  opt.window = 8;
  const auto cores = two_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs two usable cores";
  opt.cpuset = {cores[0], cores[1], CPU_SETSIZE - 1};  // the last worker's core does not exist
  try {
    make_cpu_backend(m, opt);
    ADD_FAILURE() << "an impossible core accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(CPU_SETSIZE - 1)), std::string::npos) << e.what();
  }
}
