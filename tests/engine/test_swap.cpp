// Live model swap (engine/swap.hpp): the new model takes over at a tick boundary, no tick lost, none
// answered by a mix of the two; window mode bit-identical to an engine that served the new model from the
// start; streaming from zero or warmed state as asked; a failed swap leaves the old model serving.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/random_model.hpp"
#include "common/within_seconds.hpp"
#include "engine/engine.hpp"
#include "engine/swap_test_support.hpp"
#include "engine/swap.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath {
namespace {

using test_support::fresh_run;
using test_support::random_model;
using test_support::same_bits;
using test_support::series;
using test_support::within_seconds;

EngineOptions cpu_options(Mode mode, int window, std::optional<Precision> p = std::nullopt) {
  EngineOptions o;
  o.backend = BackendKind::cpu;
  o.mode = mode;
  o.window = window;
  o.precision = p;
  o.warm = false;  // not what is checked here, and slow beside spinning precompute workers on a small host
  return o;
}

// Ticks 0..T-1 of x on a, a swap to b between ticks, ticks T..T+N-1: from T+1 on (tick T is still a's)
// bit-identical to a fresh engine of b over every input.
void expect_swap_matches_fresh(const Model& a, const Model& b, const EngineOptions& o, const std::vector<float>& x,
                               int T, int N) {
  const int I = a.config.input_size, O = a.config.output_size;
  const auto zb = fresh_run(b, o, x, 0, T + N);
  Engine e(a, o);
  std::vector<float> z(O);
  for (int t = 0; t < T; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  e.swap(b);
  for (int t = T; t < T + N; ++t) {
    e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    if (t > T) ASSERT_TRUE(same_bits(z.data(), &zb[size_t(t) * O], O)) << "swap at " << T << ", tick " << t;
  }
}

TEST(SwapReplay, TicksFedToTheNewModel) {
  engine::ReplayPlan w;
  w.mode = Mode::window;
  w.window = 5;
  // every input while there are fewer than W-1, then W-1 .. 2W-2, congruent to the tick count mod W
  EXPECT_EQ(engine::replay_ticks(w, 0, 3), 0);
  EXPECT_EQ(engine::replay_ticks(w, 3, 3), 3);
  EXPECT_EQ(engine::replay_ticks(w, 4, 3), 4);
  EXPECT_EQ(engine::replay_ticks(w, 5, 3), 5);
  EXPECT_EQ(engine::replay_ticks(w, 8, 3), 8);
  EXPECT_EQ(engine::replay_ticks(w, 9, 3), 4);
  EXPECT_EQ(engine::replay_ticks(w, 1003, 3), 8);
  for (long long t = 4; t < 200; ++t) {
    const long long r = engine::replay_ticks(w, t, 3);
    EXPECT_EQ((t - r) % 5, 0) << t;
    EXPECT_GE(r, 4);
    EXPECT_LE(r, 8);
  }
  w.history = 12;  // a rolling scaler's N: the period is lcm(5, 12) = 60
  EXPECT_EQ(engine::replay_period(w, 3), 60);
  EXPECT_EQ(engine::replay_ticks(w, 11, 3), 11);
  EXPECT_EQ(engine::replay_ticks(w, 71, 3), 71);
  EXPECT_EQ(engine::replay_ticks(w, 72, 3), 12);
  EXPECT_EQ(engine::replay_ticks(w, 1000, 3), 12 + (1000 - 12) % 60);
  for (long long t = 13; t < 400; ++t) {
    const long long r = engine::replay_ticks(w, t, 3);
    EXPECT_EQ((t - r) % 60, 0) << t;
    EXPECT_GE(r, 12);
  }
  w.history = 999'983;  // a prime: lcm(5, N) of 3 inputs takes ~57 MiB, of 4 ~76 MiB (past the limit)
  EXPECT_EQ(engine::replay_period(w, 3), 5 * 999'983LL);
  EXPECT_EQ(engine::replay_period(w, 4), 5);
  engine::ReplayPlan s;
  s.mode = Mode::streaming;
  EXPECT_EQ(engine::replay_ticks(s, 100, 3), 0);
  s.warm_ticks = 30;
  EXPECT_EQ(engine::replay_ticks(s, 100, 3), 30);
  EXPECT_EQ(engine::replay_ticks(s, 10, 3), 10);
}

TEST(ModelId, ContentNotName) {
  Model a = random_model(3, 8, 2, 1, true, true, 7);
  Model b = a;
  b.name = "elsewhere.safetensors";
  EXPECT_EQ(model_id(a), model_id(b));
  EXPECT_EQ(model_id(a).size(), 16u);
  b.layers[1].w_hh[5] += 1e-12;
  EXPECT_NE(model_id(a), model_id(b));
  EXPECT_NE(model_id(random_model(3, 8, 2, 1, true, true, 8)), model_id(a));
}

struct WindowCase {
  std::optional<Precision> precision_a, precision_b;
  int swap_at;
};

// Ticks 0..T-1 on model a, swap between ticks, tick T still a's, T+1 on b's: bit-identical to a fresh
// engine of b over every input, and every tick says which model answered it.
void check_window_swap(const WindowCase& c, const std::optional<CpuOptions>& cpu = std::nullopt) {
  const int I = 4, O = 2, W = 7, T = c.swap_at, N = 40;
  const Model a = random_model(I, 16, 2, O, true, true, 11);
  const Model b = random_model(I, 24, 3, O, true, false, 12);  // another H, L, head
  const auto x = series(T + N, I, 3);
  EngineOptions oa = cpu_options(Mode::window, W, c.precision_a);
  oa.cpu = cpu;
  EngineOptions ob = cpu_options(Mode::window, W, c.precision_b);
  ob.cpu = cpu;
  const auto za = fresh_run(a, oa, x, 0, T + N);
  const auto zb = fresh_run(b, ob, x, 0, T + N);
  Engine e(a, oa);
  std::vector<float> z(O);
  for (int t = 0; t < T; ++t) {
    e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    ASSERT_TRUE(same_bits(z.data(), &za[size_t(t) * O], O)) << "tick " << t;
  }
  SwapOptions so;
  so.precision = c.precision_b;
  const std::string id = e.swap(b, so);
  EXPECT_EQ(id, model_id(b));
  EXPECT_TRUE(e.swap_pending());
  for (int t = T; t < T + N; ++t) {
    e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    const bool new_model = t > T;
    EXPECT_EQ(e.answering_model_id(), new_model ? model_id(b) : model_id(a)) << "tick " << t;
    ASSERT_TRUE(same_bits(z.data(), new_model ? &zb[size_t(t) * O] : &za[size_t(t) * O], O))
        << "tick " << t << " (swap before tick " << T << ")";
  }
  EXPECT_FALSE(e.swap_pending());
  EXPECT_EQ(e.swaps(), 1);
  EXPECT_EQ(e.ticks(), T + N);
  EXPECT_EQ(e.model().config.hidden_size, 24);
  EXPECT_EQ(e.facts().at("model_id"), model_id(b));
}

TEST(EngineSwap, WindowBitIdenticalAtEveryPhase) {
  // before the first full window, at it, and at every phase of the window ring after it
  for (int at : {0, 1, 5, 6, 7, 8, 13, 20, 21, 22, 23, 24, 25, 26})
    check_window_swap({std::nullopt, std::nullopt, at});
}

TEST(EngineSwap, WindowBitIdenticalAcrossPrecisions) {
  for (const auto& [pa, pb] : std::vector<std::pair<Precision, Precision>>{{Precision::fp32, Precision::bf16},
                                                                           {Precision::bf16, Precision::int8},
                                                                           {Precision::int8, Precision::fp32}})
    for (int at : {3, 30, 33}) check_window_swap({pa, pb, at});
}

TEST(EngineSwap, WindowBitIdenticalWithPrecomputeWorkers) {
  for (const char* split : {"windows", "rows"}) {
    CpuOptions cpu;
    cpu.pre_split = std::string(split) == "rows" ? CpuPrecomputeSplit::rows : CpuPrecomputeSplit::windows;
    cpu.pre_cores = 2;  // two unpinned workers (no cpuset)
    check_window_swap({Precision::bf16, Precision::bf16, 30}, cpu);
  }
}

// With a cpuset and cores beyond it, the new model is made and replayed on those (staged), and its
// threads move onto the cpuset once it serves: the same bits, and the tick thread stays on its core.
TEST(EngineSwap, StagedBesideTheCpusetThenSettled) {
  const std::vector<int> before = util::allowed_cores();
  if (before.size() < 2) GTEST_SKIP() << "needs two cores (one for the cpuset, one beyond it)";
  const int I = 4, O = 2, W = 6, T = 20, N = 20;
  const Model a = random_model(I, 16, 2, O, true, true, 61), b = random_model(I, 20, 1, O, true, true, 62);
  EngineOptions o = cpu_options(Mode::window, W, Precision::fp32);
  o.cpuset = {before.back()};
  expect_swap_matches_fresh(a, b, o, series(T + N, I, 63), T, N);
  {
    Engine e(a, o);
    std::vector<float> z(O), x(size_t(I), 0.25f);
    for (int t = 0; t < T; ++t) e.step(x, z);
    e.swap(b);
    for (int t = 0; t < 5; ++t) e.step(x, z);
    EXPECT_EQ(e.swaps(), 1);
    EXPECT_EQ(util::allowed_cores(), std::vector<int>{before.back()}) << "the tick thread on the critical core";
  }
  EXPECT_EQ(util::allowed_cores(), before) << "the creating thread gets its cores back";
}

// A rolling scaler's statistics span the last N raw inputs: the replay covers them too.
TEST(EngineSwap, WindowBitIdenticalWithARollingScaler) {
  const int I = 3, O = 1, W = 5, N = 40;
  const Model a = random_model(I, 8, 2, O, true, true, 81), b = random_model(I, 12, 1, O, true, true, 82);
  EngineOptions o = cpu_options(Mode::window, W);
  o.scaler = ScalerChoice{ScalerKind::rolling, 12};
  for (int T : {4, 11, 12, 13, 29, 30, 31, 32, 33})
    expect_swap_matches_fresh(a, b, o, series(T + N, I, 10 + uint64_t(T)), T, N);
}

TEST(EngineSwap, ReferenceBackend) {
  const int I = 3, O = 1, W = 5, T = 17, N = 20;
  const Model a = random_model(I, 8, 1, O, true, true, 21), b = random_model(I, 12, 2, O, true, true, 22);
  EngineOptions o = cpu_options(Mode::window, W);
  o.backend = BackendKind::ref;
  expect_swap_matches_fresh(a, b, o, series(T + N, I, 4), T, N);
}

TEST(EngineSwap, StreamingStartsFromZeroOrWarmedState) {
  const int I = 3, O = 2, T = 50, N = 30;
  const Model a = random_model(I, 16, 2, O, true, true, 31), b = random_model(I, 20, 1, O, true, true, 32);
  const auto x = series(T + N, I, 5);
  const EngineOptions o = cpu_options(Mode::streaming, 0, Precision::fp32);
  for (long long k : {0LL, 1LL, 10LL, 51LL}) {
    Engine e(a, o);
    std::vector<float> z(O);
    for (int t = 0; t < T; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    SwapOptions so;
    so.warm_ticks = k;
    e.swap(b, so);
    // tick T is a's; b's state at tick T+1: from zero over the last K inputs before it (ticks up to T)
    const int from = int(std::max<long long>(0, T + 1 - k));
    const auto zb = fresh_run(b, o, x, from, T + N);
    for (int t = T; t < T + N; ++t) {
      e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
      if (t > T) ASSERT_TRUE(same_bits(z.data(), &zb[size_t(t - from) * O], O)) << "k " << k << " tick " << t;
    }
  }
  Engine e(a, o);
  SwapOptions too_many;
  too_many.warm_ticks = kMaxSwapWarmTicks + 1;
  EXPECT_THROW(e.swap(b, too_many), Error);
  Engine w(a, cpu_options(Mode::window, 5));
  SwapOptions warm;
  warm.warm_ticks = 3;
  EXPECT_THROW(w.swap(b, warm), Error);  // window mode rebuilds its windows exactly: nothing to choose
}

// A refused swap leaves the old model serving, unchanged, and says why in one line.
TEST(EngineSwap, RefusalsLeaveTheOldModelServing) {
  const int I = 4, O = 2, W = 6, T = 12, N = 12;
  const Model a = random_model(I, 16, 2, O, true, true, 41);
  const auto x = series(T + N, I, 6);
  const EngineOptions o = cpu_options(Mode::window, W);
  const auto za = fresh_run(a, o, x, 0, T + N);
  Engine e(a, o);
  std::vector<float> z(O);
  for (int t = 0; t < T; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  auto refused = [&](Model m, const std::string& says) {
    try {
      e.swap(std::move(m));
      ADD_FAILURE() << "swap accepted; expected a refusal saying " << says;
    } catch (const Error& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  refused(random_model(I + 1, 16, 2, O, true, true, 42), "inputs a tick");
  refused(random_model(I, 16, 2, O + 1, true, true, 42), "outputs a tick");
  Model nan = random_model(I, 16, 2, O, true, true, 43);
  nan.layers[0].w_hh[3] = std::numeric_limits<double>::quiet_NaN();
  refused(nan, "NaN");
  Model bad = random_model(I, 16, 2, O, true, true, 44);
  bad.layers[1].w_ih.pop_back();
  refused(bad, "");
  EXPECT_FALSE(e.swap_pending());
  EXPECT_EQ(e.swaps(), 0);
  for (int t = T; t < T + N; ++t) {
    e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
    ASSERT_TRUE(same_bits(z.data(), &za[size_t(t) * O], O)) << t;
    EXPECT_EQ(e.answering_model_id(), model_id(a));
  }
  // an engine given its backend has no options to make another
  Engine given(a, make_backend(BackendKind::cpu, a, backend_options(a, o)));
  EXPECT_THROW(given.swap(a), Error);
}

// A swap made ready, then a reset before its tick: the new model takes over from the reset's fresh
// start, still bit-identical to an engine that served it since the reset.
TEST(EngineSwap, ResetWhileASwapWaits) {
  const int I = 3, O = 1, W = 5, N = 60;
  const Model a = random_model(I, 8, 2, O, true, true, 51), b = random_model(I, 10, 2, O, true, true, 52);
  const auto x = series(20 + N, I, 7);
  const EngineOptions o = cpu_options(Mode::window, W);
  Engine e(a, o);
  std::vector<float> z(O);
  for (int t = 0; t < 20; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  e.swap(b);
  e.reset();
  const auto za = fresh_run(a, o, x, 20, 20 + N), zb = fresh_run(b, o, x, 20, 20 + N);
  within_seconds(60, [&] {
    int switched = -1;
    for (int t = 0; t < N; ++t) {
      e.step(std::span<const float>(x).subspan(size_t(20 + t) * I, I), z);
      const bool is_b = e.answering_model_id() == model_id(b);
      if (is_b && switched < 0) switched = t;
      if (switched >= 0) ASSERT_TRUE(is_b) << "back to a at " << t;
      ASSERT_TRUE(same_bits(z.data(), is_b ? &zb[size_t(t) * O] : &za[size_t(t) * O], O)) << t;
      if (switched < 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the worker re-chases
    }
    EXPECT_GE(switched, 1);
  });
}

TEST(EngineSwap, ALaterSwapReplacesOneThatWaits) {
  const int I = 3, O = 1, W = 4;
  const Model a = random_model(I, 8, 1, O, true, true, 61), b = random_model(I, 8, 1, O, true, true, 62),
              c = random_model(I, 9, 1, O, true, true, 63);
  const auto x = series(30, I, 8);
  Engine e(a, cpu_options(Mode::window, W));
  std::vector<float> z(O);
  for (int t = 0; t < 10; ++t) e.step(std::span<const float>(x).subspan(size_t(t) * I, I), z);
  e.swap(b);
  e.swap(c);
  e.step(std::span<const float>(x).subspan(10 * size_t(I), I), z);
  e.step(std::span<const float>(x).subspan(11 * size_t(I), I), z);
  EXPECT_EQ(e.answering_model_id(), model_id(c));
  EXPECT_EQ(e.swaps(), 1);
}

// The desk's case: one thread ticks without pause while another swaps, back and forth. Every output is
// exactly one model's (a fresh engine's of that model over the same inputs), each tick names it, the
// switches happen where the ids change, and no tick is lost.
TEST(EngineSwap, FromAnotherThreadWhileTicking) {
  const int I = 4, O = 2, W = 8, kMaxTicks = 60000, kSwaps = 4;
  const Model a = random_model(I, 16, 2, O, true, true, 71), b = random_model(I, 12, 1, O, true, true, 72);
  const auto x = series(kMaxTicks, I, 9);
  const EngineOptions o = cpu_options(Mode::window, W);
  Engine e(a, o);
  std::vector<float> out(size_t(kMaxTicks) * O);
  std::vector<std::string> ids(kMaxTicks);
  std::atomic<int> ticked{0};
  std::atomic<bool> swapped_all{false};
  int T = 0;
  within_seconds(120, [&] {
    std::thread swapper([&] {
      for (int k = 0; k < kSwaps; ++k) {
        const int after = ticked.load() + 300;  // each swap a few hundred ticks into the last one's model
        while (ticked.load() < after) std::this_thread::yield();
        e.swap(k % 2 == 0 ? b : a);
      }
      swapped_all.store(true);
    });
    // Ticks until the last swap has been ready for a while (however slow this host is), then a few more.
    int extra = 0;
    for (T = 0; T < kMaxTicks && extra < 300; ++T) {
      e.step(std::span<const float>(x).subspan(size_t(T) * I, I), std::span<float>(out).subspan(size_t(T) * O, O));
      ids[size_t(T)] = e.answering_model_id();
      ticked.store(T + 1);
      if (swapped_all.load()) ++extra;
      if (T % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // a feed, not a flood
    }
    swapper.join();
  });
  ASSERT_LT(T, kMaxTicks) << "the swaps did not finish within the ticks prepared";
  const auto za = fresh_run(a, o, x, 0, T), zb = fresh_run(b, o, x, 0, T);
  int switches = 0;
  for (int t = 0; t < T; ++t) {
    const bool is_b = ids[size_t(t)] == model_id(b);
    ASSERT_TRUE(is_b || ids[size_t(t)] == model_id(a)) << t;
    ASSERT_TRUE(same_bits(&out[size_t(t) * O], is_b ? &zb[size_t(t) * O] : &za[size_t(t) * O], O)) << "tick " << t;
    if (t > 0 && ids[size_t(t)] != ids[size_t(t) - 1]) ++switches;
  }
  EXPECT_EQ(switches, kSwaps);
  EXPECT_EQ(e.swaps(), kSwaps);
  EXPECT_EQ(e.ticks(), T);
}

}  // namespace
}  // namespace hotpath
