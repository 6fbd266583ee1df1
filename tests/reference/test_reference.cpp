// The float64 reference against PyTorch's own float64 nn.LSTM (the golden files), and the incremental,
// transposed and split float64 variants against the plain one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "model/loader.hpp"
#include "model/safetensors.hpp"
#include "common/golden.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "reference/reference_backend.hpp"
#include "reference/split_f64.hpp"
#include "util/error.hpp"

using namespace hotpath;

namespace {

using hotpath::test_support::Golden;
using hotpath::test_support::load_golden;

// Random model with PyTorch-like weights, for awkward shapes the golden files do not cover.
Model random_model(int I, int H, int L, int O, bool bias, bool head_bias, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0 / std::sqrt(H), 1.0 / std::sqrt(H));
  Model m;
  m.config = {I, H, L, O, bias, head_bias, std::nullopt};
  for (int l = 0; l < L; ++l) {
    LstmLayer w;
    const int in = l == 0 ? I : H;
    for (int k = 0; k < 4 * H * in; ++k) w.w_ih.push_back(u(rng));
    for (int k = 0; k < 4 * H * H; ++k) w.w_hh.push_back(u(rng));
    if (bias)
      for (int k = 0; k < 4 * H; ++k) w.b_ih.push_back(u(rng)), w.b_hh.push_back(u(rng));
    m.layers.push_back(w);
  }
  for (int k = 0; k < O * H; ++k) m.head_w.push_back(u(rng));
  if (head_bias)
    for (int k = 0; k < O; ++k) m.head_b.push_back(u(rng));
  return m;
}

}  // namespace

class GoldenCase : public ::testing::TestWithParam<std::string> {};

// PyTorch computed the golden outputs in float64 on the same float32 weights: only summation order and
// libm differ, so 1e-9 is many orders above the expected ~1e-15 and far below any real bug.
TEST_P(GoldenCase, SlidingWindowMatchesPyTorchFloat64) {
  const Golden g = load_golden(GetParam());
  const auto out = reference::sliding_window(g.model, g.inputs, g.ticks, g.window);
  const size_t O = g.model.config.output_size, first = size_t(g.window - 1);
  ASSERT_EQ(g.window_expected.size(), (g.ticks - first) * O);
  EXPECT_LE(reference::normalized_error(std::span(out).subspan(first * O), g.window_expected), 1e-9);
}

TEST_P(GoldenCase, StreamingMatchesPyTorchFloat64) {
  const Golden g = load_golden(GetParam());
  const auto out = reference::streaming(g.model, g.inputs, g.ticks);
  ASSERT_EQ(out.size(), g.streaming_expected.size());
  EXPECT_LE(reference::normalized_error(out, g.streaming_expected), 1e-9);
}

TEST_P(GoldenCase, IncrementalEqualsPlainWindow) {
  const Golden g = load_golden(GetParam());
  const auto plain = reference::sliding_window(g.model, g.inputs, g.ticks, g.window);
  reference::Incremental inc(g.model, false, g.window);
  const size_t I = g.model.config.input_size, O = g.model.config.output_size;
  for (size_t t = 0; t < g.ticks; ++t) {
    const auto z = inc.tick(std::span(g.inputs).subspan(t * I, I));
    for (size_t o = 0; o < O; ++o) ASSERT_EQ(z[o], plain[t * O + o]) << "tick " << t;  // same arithmetic
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenCase, ::testing::Values("tiny", "small2x128", "multi_out"));

// Awkward sizes on purpose: 1, 7, 65 and window lengths 1, 2, 50.
TEST(Reference, IncrementalMatchesPlainOnAwkwardShapes) {
  struct Shape { int I, H, L, O, W; bool bias, head_bias; };
  for (const Shape s : {Shape{1, 1, 1, 1, 1, true, true}, Shape{7, 7, 2, 3, 2, false, true},
                        Shape{65, 7, 3, 65, 5, true, false}, Shape{3, 65, 1, 1, 50, false, false}}) {
    const Model m = random_model(s.I, s.H, s.L, s.O, s.bias, s.head_bias, 42 + s.I);
    const size_t T = 70;
    const auto x = reference::normal_inputs(T * s.I, 7);
    const auto plain = reference::sliding_window(m, x, T, s.W);
    reference::Incremental inc(m, false, s.W);
    for (size_t t = 0; t < T; ++t) {
      const auto z = inc.tick(std::span(x).subspan(t * s.I, s.I));
      for (int o = 0; o < s.O; ++o) ASSERT_EQ(z[o], plain[t * s.O + o]) << "I=" << s.I << " tick " << t;
    }
    inc.reset();
    const auto z0 = inc.tick(std::span(x).subspan(0, s.I));
    for (int o = 0; o < s.O; ++o) EXPECT_EQ(z0[o], plain[o]) << "after reset";
  }
}

TEST(Reference, WindowOfOneIsAStepFromZero) {
  const Model m = random_model(4, 8, 2, 2, true, true, 3);
  const auto x = reference::normal_inputs(10 * 4, 5);
  const auto w1 = reference::sliding_window(m, x, 10, 1);
  for (size_t t = 0; t < 10; ++t) {
    const auto b = reference::batch(m, std::span(x).subspan(t * 4, 4), 1, 1);
    EXPECT_EQ(b[0], w1[t * 2]);
    EXPECT_EQ(b[1], w1[t * 2 + 1]);
  }
}

TEST(Reference, BatchEqualsFullWindows) {
  const Model m = random_model(5, 9, 2, 3, true, true, 11);
  const int W = 6;
  const size_t T = 20;
  const auto x = reference::normal_inputs(T * 5, 13);
  const auto win = reference::sliding_window(m, x, T, W);
  // Batch of every complete window [T-W+1, W, I].
  std::vector<float> b;
  for (size_t t = W - 1; t < T; ++t) b.insert(b.end(), x.begin() + (t - W + 1) * 5, x.begin() + (t + 1) * 5);
  const auto out = reference::batch(m, b, T - W + 1, W);
  for (size_t k = 0; k < out.size(); ++k) EXPECT_EQ(out[k], win[(W - 1) * 3 + k]);
}

// FastF64 only changes summation order: agreement to float64 rounding.
TEST(Reference, TransposedFloat64AgreesWithPlain) {
  for (auto [I, H, L, O] : {std::tuple{1, 1, 1, 1}, std::tuple{7, 65, 3, 2}, std::tuple{32, 128, 2, 1}}) {
    const Model m = random_model(I, H, L, O, true, I != 7, 99);
    const size_t T = 40;
    const auto x = reference::normal_inputs(T * I, 17);
    const auto plain = reference::streaming(m, x, T);
    reference::FastF64 fast(m);
    reference::LstmState s(m.config);
    std::vector<double> z(O);
    for (size_t t = 0; t < T; ++t) {
      fast.step(std::span(x).subspan(t * I, I), s);
      fast.head(s, z);
      for (int o = 0; o < O; ++o) ASSERT_NEAR(z[o], plain[t * O + o], 1e-12) << "H=" << H << " tick " << t;
    }
  }
}

// The batched step (the bench checker's windows, several at once) makes the same bits as step() on each
// state: states of different histories, batches that are not a multiple of its group of eight, gate rows
// that are not a multiple of its 16-row blocks (H = 65, 13), float64 inputs.
TEST(Reference, BatchedStepsAreTheSameBitsAsOneAtATime) {
  for (auto [I, H, L, O] : {std::tuple{7, 65, 3, 2}, std::tuple{1, 13, 1, 1}, std::tuple{32, 128, 2, 1}}) {
    const Model m = random_model(I, H, L, O, true, I != 7, 41);
    const reference::FastF64 fast(m);
    for (const size_t n : {size_t(1), size_t(5), size_t(8), size_t(17)}) {
      std::vector<reference::LstmState> one(n, reference::LstmState(m.config)), many(n, reference::LstmState(m.config));
      const auto x = reference::normal_inputs(40 * n * size_t(I), 7 + int(n));
      std::vector<double> xd(x.begin(), x.end());
      for (size_t t = 0; t < 6; ++t) {
        // state s joins at step s % 3 (a window that starts later), and takes its own inputs
        std::vector<const double*> xs;
        std::vector<reference::LstmState*> ps;
        for (size_t s = 0; s < n; ++s) {
          if (t < s % 3) continue;
          const double* xi = xd.data() + (t * n + s) * size_t(I);
          fast.step(std::span<const double>(xi, size_t(I)), one[s]);
          xs.push_back(xi);
          ps.push_back(&many[s]);
        }
        fast.step_batch(xs, ps);
      }
      for (size_t s = 0; s < n; ++s)
        for (int l = 0; l < L; ++l)
          for (int j = 0; j < H; ++j) {
            ASSERT_EQ(many[s].h[l][j], one[s].h[l][j]) << "H=" << H << " n=" << n << " state " << s << " layer " << l;
            ASSERT_EQ(many[s].c[l][j], one[s].c[l][j]) << "H=" << H << " n=" << n << " state " << s << " layer " << l;
          }
    }
  }
  // one input per state, or no step at all
  const Model m = random_model(3, 5, 1, 1, true, true, 2);
  const reference::FastF64 fast(m);
  reference::LstmState s(m.config);
  const std::vector<double> x(3, 0.5);
  const std::vector<const double*> two = {x.data(), x.data()};
  const std::vector<reference::LstmState*> one = {&s};
  EXPECT_THROW(fast.step_batch(two, one), std::invalid_argument);
  for (const auto& h : s.h)
    for (double v : h) EXPECT_EQ(v, 0.0);
}

TEST(Reference, NormalizedErrorIsAbsoluteBelowOneAndRelativeAbove) {
  const std::vector<double> ref_small = {0.5, -0.25}, ref_big = {10.0, -4.0};
  EXPECT_DOUBLE_EQ(reference::normalized_error(std::vector<double>{0.5, -0.2}, ref_small), 0.05);
  EXPECT_DOUBLE_EQ(reference::normalized_error(std::vector<double>{10.5, -4.0}, ref_big), 0.05);
  EXPECT_EQ(reference::normalized_error(std::vector<double>{NAN, 0.0}, ref_small), INFINITY);
  EXPECT_EQ(reference::normalized_error(std::vector<double>{0.5, NAN}, ref_small), INFINITY);
}

TEST(Zoo, ShapesAndParameterCountsMatchTheSpec) {
  EXPECT_EQ(zoo().size(), 13u);
  const auto s = zoo_model("lstm_s");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->config.parameter_count(), 215169u);  // ~215 K
  EXPECT_EQ(zoo_model("vollo_tiny")->config.parameter_count(), 268320u);  // ~268 K
  // Shapes (I, H, L, O, W) that must match exactly: nv_* are NVIDIA's reference models; stac_* the audited
  // benchmark's, with one bias per layer (bias_hh zero, as a Keras model converted to PyTorch holds it),
  // so their parameter counts include the zero bias_hh.
  struct Exact {
    const char* name;
    int i, h, l, o, w;
    size_t params;
    bool keras_bias;
  };
  for (const Exact& x : {Exact{"nv_small", 128, 96, 2, 1, 64, 161377u, false},         // ~160 K
                         Exact{"nv_medium", 192, 160, 3, 1, 96, 638881u, false},       // ~635 K
                         Exact{"nv_large", 512, 736, 4, 1, 128, 16699105u, false},     // ~16.7 M
                         Exact{"stac_a", 100, 100, 2, 1, 50, 161701u, true},           // ~161 K
                         Exact{"stac_b", 250, 200, 3, 1, 100, 1005001u, true},         // ~1.0 M
                         Exact{"stac_c", 500, 1000, 4, 1, 100, 30033001u, true}}) {   // ~30 M
    const ZooEntry* e = find_zoo(x.name);
    ASSERT_TRUE(e) << x.name;
    const ModelConfig& c = e->config;
    EXPECT_EQ(c.input_size, x.i) << x.name;
    EXPECT_EQ(c.hidden_size, x.h) << x.name;
    EXPECT_EQ(c.num_layers, x.l) << x.name;
    EXPECT_EQ(c.output_size, x.o) << x.name;
    EXPECT_EQ(c.window, x.w) << x.name;
    EXPECT_EQ(c.parameter_count(), x.params) << x.name;
    EXPECT_EQ(e->keras_bias, x.keras_bias) << x.name;
  }
  {
    const auto a = zoo_model("stac_a", 1);
    ASSERT_TRUE(a);
    EXPECT_NO_THROW(a->validate());
    for (const auto& layer : a->layers) {
      for (double b : layer.b_hh) ASSERT_EQ(b, 0.0);
      EXPECT_NE(layer.b_ih, std::vector<double>(layer.b_ih.size(), 0.0));
    }
  }
  const auto nv = zoo_model("nv_small");
  ASSERT_TRUE(nv);
  EXPECT_NO_THROW(nv->validate());
  EXPECT_EQ(nv->layers[1].w_ih.size(), 4u * 96 * 96);
  EXPECT_FALSE(zoo_model("nope"));
  // Seeded: same seed same weights, other seed other weights; all within PyTorch's ±1/sqrt(H).
  EXPECT_EQ(zoo_model("lstm_s", 3)->layers[1].w_hh, zoo_model("lstm_s", 3)->layers[1].w_hh);
  EXPECT_NE(zoo_model("lstm_s", 3)->layers[1].w_hh, zoo_model("lstm_s", 4)->layers[1].w_hh);
  for (double w : s->layers[0].w_ih) ASSERT_LE(std::abs(w), 1.0 / std::sqrt(128.0));
  EXPECT_NO_THROW(s->validate());
}

// The benchmark's checker threads share one FastF64: concurrent steps must not disturb each other.
TEST(Reference, TransposedFloat64IsSafeToShareBetweenThreads) {
  const Model m = random_model(32, 64, 2, 2, true, true, 5);
  const reference::FastF64 fast(m);
  const size_t T = 200;
  const auto x = reference::normal_inputs(T * 32, 23);
  const auto expected = reference::streaming(m, x, T);
  std::vector<std::thread> threads;
  std::vector<double> worst(4, 0.0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      reference::LstmState s(m.config);
      std::vector<double> z(2);
      for (size_t t = 0; t < T; ++t) {
        fast.step(std::span(x).subspan(t * 32, 32), s);
        fast.head(s, z);
        for (int o = 0; o < 2; ++o) worst[k] = std::max(worst[k], std::abs(z[o] - expected[t * 2 + o]));
      }
    });
  for (auto& t : threads) t.join();
  for (double w : worst) EXPECT_LE(w, 1e-12);
}

namespace {

// |a - b| within 1e-12 of max(1, |b|): float64 rounding of a different summation, with room.
::testing::AssertionResult close_f64(double a, double b) {
  if (std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " (diff " << std::abs(a - b) << ")";
}

// SplitF64 on `threads` workers against the plain streaming reference and FastF64, outputs and states,
// over T ticks; then reset() starts from zero state again. Returns every output, for comparing thread
// counts.
std::vector<double> split_against_plain(const Model& m, int threads, size_t T, uint64_t seed) {
  const int I = m.config.input_size, O = m.config.output_size;
  const auto x = reference::normal_inputs(T * I, seed);
  const auto plain = reference::streaming(m, x, T);
  const reference::FastF64 fast(m);
  reference::LstmState fs(m.config);
  reference::F64Team team(threads);
  reference::SplitF64 split(m, team);
  EXPECT_EQ(split.threads(), threads);
  std::vector<double> z(O), all;
  for (size_t t = 0; t < T; ++t) {
    const auto xt = std::span(x).subspan(t * I, I);
    split.step(xt);
    fast.step(xt, fs);
    split.head(z);
    for (int o = 0; o < O; ++o) EXPECT_TRUE(close_f64(z[o], plain[t * O + o])) << "tick " << t << " output " << o;
    all.insert(all.end(), z.begin(), z.end());
    const reference::LstmState ss = split.state();
    for (int l = 0; l < m.config.num_layers; ++l)
      for (int j = 0; j < m.config.hidden_size; ++j) {
        EXPECT_TRUE(close_f64(ss.h[l][j], fs.h[l][j])) << "tick " << t << " h[" << l << "][" << j << "]";
        EXPECT_TRUE(close_f64(ss.c[l][j], fs.c[l][j])) << "tick " << t << " c[" << l << "][" << j << "]";
      }
  }
  split.reset();
  split.step(std::span(x).subspan(0, I));
  split.head(z);
  for (int o = 0; o < O; ++o) EXPECT_TRUE(close_f64(z[o], plain[o])) << "after reset, output " << o;
  return all;
}

}  // namespace

// Awkward shapes: I = 1, H not a multiple of the 4-unit blocks (or of 8), one to four layers, more
// outputs than one 16-row head block, no biases; more threads than blocks (idle workers still sync).
TEST(Reference, SplitFloat64AgreesWithPlainOnAwkwardShapes) {
  struct Shape { int I, H, L, O; bool bias, head_bias; };
  for (const Shape s : {Shape{1, 1, 1, 1, true, true}, Shape{1, 13, 4, 3, true, false}, Shape{7, 65, 3, 2, false, true},
                        Shape{5, 30, 2, 17, true, true}, Shape{33, 9, 1, 1, false, false}}) {
    const Model m = random_model(s.I, s.H, s.L, s.O, s.bias, s.head_bias, 1000 + s.H);
    std::vector<double> one;
    for (int threads : {1, 2, 3, 5}) {
      SCOPED_TRACE("I=" + std::to_string(s.I) + " H=" + std::to_string(s.H) + " L=" + std::to_string(s.L) +
                   " O=" + std::to_string(s.O) + " threads=" + std::to_string(threads));
      const auto all = split_against_plain(m, threads, 30, 31);
      // A row's sum is the same whichever thread and lane computes it: the same bits for every count.
      if (threads == 1) one = all;
      else EXPECT_EQ(all, one);
    }
  }
}

// A zoo model as the checker meets it: vollo_tiny (I = H = 128, O = 32) on 3 threads.
TEST(Reference, SplitFloat64AgreesWithPlainOnAZooModel) {
  const Model m = *zoo_model("vollo_tiny", 5);
  split_against_plain(m, 3, 12, 41);
}

// A model whose weights are not all floats: SplitF64 keeps them as doubles (its other path).
Model off_the_float_grid(Model m) {
  for (auto& layer : m.layers)
    for (size_t k = 0; k < layer.w_hh.size(); k += 3) layer.w_hh[k] += layer.w_hh[k] * 0x1p-40;
  return m;
}

// The double-weight path against the plain reference too.
TEST(Reference, SplitFloat64AgreesWithPlainWithDoubleWeights) {
  const Model m = off_the_float_grid(random_model(7, 65, 3, 2, true, true, 77));
  split_against_plain(m, 3, 20, 32);
}

// step_many over batches of every size (a tail of 1-3 ticks after whole fours, a lone tick) gives the
// bits of step() tick by tick: states and outputs equal, not close; weights kept as floats and as doubles.
TEST(Reference, SplitFloat64StepManyIsStepTickByTick) {
  struct Shape { int I, H, L, O; };
  for (const Shape sh : {Shape{1, 13, 4, 3}, Shape{7, 65, 3, 2}, Shape{33, 9, 1, 1}, Shape{5, 30, 2, 17}})
    for (const bool floats : {true, false}) {
      const Model base = random_model(sh.I, sh.H, sh.L, sh.O, true, true, 500 + sh.H);
      const Model m = floats ? base : off_the_float_grid(base);
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE("I=" + std::to_string(sh.I) + " H=" + std::to_string(sh.H) + " L=" + std::to_string(sh.L) +
                     (floats ? " float" : " double") + " weights, threads=" + std::to_string(threads));
        const int I = sh.I, O = sh.O;
        const std::vector<int> batches = {1, 4, 3, 9, 8, 2, 5, 1, 16};
        size_t T = 0;
        for (int b : batches) T += size_t(b);
        const auto x = reference::normal_inputs(T * I, 900 + sh.H);
        std::vector<double> xd(x.begin(), x.end());
        reference::F64Team team_a(threads), team_b(threads);
        reference::SplitF64 one(m, team_a), many(m, team_b);
        std::vector<double> za(O), zb(O);
        size_t t = 0;
        for (int b : batches) {
          for (int i = 0; i < b; ++i, ++t) one.step(std::span<const double>(xd).subspan(t * I, I));
          many.step_many(std::span<const double>(xd).subspan((t - b) * I, size_t(b) * I));
          one.head(za);
          many.head(zb);
          EXPECT_EQ(za, zb) << "after tick " << t - 1;
          const reference::LstmState sa = one.state(), sb = many.state();
          for (int l = 0; l < sh.L; ++l) {
            EXPECT_EQ(sa.h[l], sb.h[l]) << "h of layer " << l << " after tick " << t - 1;
            EXPECT_EQ(sa.c[l], sb.c[l]) << "c of layer " << l << " after tick " << t - 1;
          }
        }
      }
    }
}

TEST(Reference, SplitFloat64UsesOnlyThreadsWorthABarrier) {
  ModelConfig tiny{3, 4, 1, 1, true, true, std::nullopt};
  EXPECT_EQ(reference::SplitF64::useful_threads(tiny, 8), 1);
  const ModelConfig vollo_small = zoo_model("vollo_small")->config;
  EXPECT_EQ(reference::SplitF64::useful_threads(vollo_small, 8), 8);
  EXPECT_EQ(reference::SplitF64::useful_threads(vollo_small, 1), 1);
  // Never more threads than blocks of 4 hidden units.
  ModelConfig wide{20000, 9, 1, 1, true, true, std::nullopt};
  EXPECT_EQ(reference::SplitF64::useful_threads(wide, 64), 3);
}

// FastF64's values and SplitStatesF64's: the same bits on x86-64, where both are compiled without FMA
// contraction (split_f64.hpp); elsewhere (aarch64 contracts FastF64's multiply-adds) within float64 rounding.
static void same_as_fast(const std::vector<double>& fast, const std::vector<double>& split, const std::string& what) {
#if defined(__x86_64__)
  EXPECT_EQ(fast, split) << what;
#else
  ASSERT_EQ(fast.size(), split.size()) << what;
  for (size_t i = 0; i < fast.size(); ++i) EXPECT_TRUE(close_f64(split[i], fast[i])) << what << " [" << i << "]";
#endif
}

// SplitStatesF64: S states stepped together, split over the team, give each state FastF64's bits (equal,
// not close, on x86-64) whatever the thread and state counts: states in groups of four and a remainder, a state count
// below four, more threads than blocks; weights kept as floats and as doubles. A state set mid-run
// (set_state) carries on from there, and state() reads back what the steps made.
TEST(Reference, SplitStatesFloat64IsFastF64StateByState) {
  struct Shape { int I, H, L, O; };
  struct StepJob {
    reference::SplitStatesF64* split;
    const double* xs;
  };
  auto step = [](reference::F64Team& team, StepJob& job) {
    team.run([](void* ctx, int worker) {
      auto& j = *static_cast<StepJob*>(ctx);
      j.split->step_worker(worker, j.xs);
    }, &job);
  };
  for (const Shape sh : {Shape{1, 13, 4, 3}, Shape{7, 65, 3, 2}, Shape{33, 9, 1, 1}, Shape{300, 30, 2, 17}, Shape{5, 150, 2, 1}})
    for (const bool floats : {true, false}) {
      const Model base = random_model(sh.I, sh.H, sh.L, sh.O, true, true, 700 + sh.H);
      const Model m = floats ? base : off_the_float_grid(base);
      const reference::FastF64 fast(m);
      for (const int threads : {1, 2, 3})
        for (const int S : {1, 3, 4, 9}) {
          SCOPED_TRACE("I=" + std::to_string(sh.I) + " H=" + std::to_string(sh.H) + " L=" + std::to_string(sh.L) +
                       (floats ? " float" : " double") + " weights, threads=" + std::to_string(threads) +
                       " states=" + std::to_string(S));
          reference::F64Team team(threads);
          reference::SplitStatesF64 split(m, team, S);
          ASSERT_EQ(split.states(), S);
          std::vector<reference::LstmState> want(size_t(S), reference::LstmState(m.config));
          const int T = 7;
          const auto x = reference::normal_inputs(size_t(T) * S * sh.I, 800 + S);
          const std::vector<double> xd(x.begin(), x.end());
          std::vector<double> za(sh.O), zb(sh.O);
          for (int t = 0; t < T; ++t) {
            if (t == 4) {  // state S - 1 restarts from another state's h and c
              want[size_t(S) - 1] = want[0];
              split.set_state(S - 1, want[0]);
            }
            StepJob job{&split, xd.data() + size_t(t) * S * sh.I};
            step(team, job);
            for (int j = 0; j < S; ++j) {
              fast.step(std::span<const double>(job.xs + size_t(j) * sh.I, size_t(sh.I)), want[size_t(j)]);
              fast.head(want[size_t(j)], za);
              split.head(j, zb);
              same_as_fast(za, zb, "outputs, state " + std::to_string(j) + " tick " + std::to_string(t));
              const reference::LstmState got = split.state(j);
              for (int l = 0; l < sh.L; ++l) {
                same_as_fast(want[size_t(j)].h[l], got.h[l], "h of layer " + std::to_string(l) + ", state " + std::to_string(j));
                same_as_fast(want[size_t(j)].c[l], got.c[l], "c of layer " + std::to_string(l) + ", state " + std::to_string(j));
              }
            }
          }
        }
    }
}

// The team: every worker runs each job, sync() holds every worker until all arrive, helpers start with
// on_start, and a team can be made and destroyed without running anything.
TEST(Reference, TeamRunsEveryWorkerAndSyncs) {
  { reference::F64Team idle(4); }
  std::atomic<int> started{0};
  reference::F64Team team(4, [&](int k) { started.fetch_add(k); });
  struct Ctx {
    reference::F64Team* team;
    std::atomic<int> before{0}, wrong{0}, runs{0};
  } ctx{&team};
  for (int r = 0; r < 200; ++r) {
    ctx.before = 0;
    team.run(
        [](void* p, int) {
          auto& c = *static_cast<Ctx*>(p);
          c.before.fetch_add(1);
          c.team->sync();
          if (c.before.load() != 4) c.wrong.fetch_add(1);  // someone passed sync() early
          c.runs.fetch_add(1);
        },
        &ctx);
    if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the helpers fall asleep
  }
  EXPECT_EQ(ctx.runs.load(), 800);
  EXPECT_EQ(ctx.wrong.load(), 0);
  EXPECT_EQ(started.load(), 1 + 2 + 3);
}

// The reference backend keeps W float64 window states: a window whose state would take gigabytes is
// refused, naming the window, before it is allocated; an unset window is an error, not a crash.
TEST(ReferenceBackend, HugeOrMissingWindowIsRefused) {
  const hotpath::Model m = *hotpath::zoo_model("lstm_s", 1);
  hotpath::BackendOptions opt;
  for (int w : {0, 1'000'000, std::numeric_limits<int>::max()}) {
    opt.window = w;
    try {
      hotpath::make_reference_backend(m, opt);
      ADD_FAILURE() << "window " << w << " accepted";
    } catch (const hotpath::Error& e) {
      EXPECT_NE(std::string(e.what()).find("window " + std::to_string(w)), std::string::npos) << e.what();
    }
  }
  opt.window = 50;
  EXPECT_NO_THROW(hotpath::make_reference_backend(m, opt));
}
