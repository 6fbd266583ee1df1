// The latency harness's own pieces: percentiles, cpusets, inputs, pacing and checking.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "bench/checker.hpp"
#include "common/host_lockstep.hpp"
#include "common/random_model.hpp"
#include "llm/loopback_socket.hpp"
#include "bench/instances_bench.hpp"
#include "bench/latency_bench.hpp"
#include "engine/engine.hpp"
#include "engine/warm.hpp"
#include "model/loader.hpp"
#include "bench/machine.hpp"
#include "bench/stats.hpp"
#include "cpu/cpu_backend.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

using namespace hotpath;

namespace {

// A run of the float64 reference on the tiny golden model: quick, and exact against the checker.
bench::BenchOptions on_tiny(Mode mode) {
  bench::BenchOptions o;
  o.model = std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors";
  o.engine.backend = BackendKind::ref;
  o.engine.mode = mode;
  o.check_every = 1;
  return o;
}

}  // namespace

TEST(Stats, NearestRankPercentiles) {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);  // 1..1000, shuffled order must not matter
  std::reverse(v.begin(), v.end());
  const auto s = bench::summarize(v);
  EXPECT_EQ(s.count, 1000);
  EXPECT_EQ(s.p50, 500);
  EXPECT_EQ(s.p90, 900);
  EXPECT_EQ(s.p99, 990);
  EXPECT_EQ(s.p999, 999);
  EXPECT_EQ(s.max, 1000);
  EXPECT_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.mean, 500.5);
  const auto one = bench::summarize({7.0});
  EXPECT_EQ(one.p50, 7);
  EXPECT_EQ(one.p999, 7);
  EXPECT_EQ(bench::summarize({}).count, 0);
}

TEST(Inputs, DeterministicVaryingNormal) {
  std::vector<float> a(33), b(33), c(33);
  bench::tick_input(5, 100, a);
  bench::tick_input(5, 100, b);
  bench::tick_input(5, 101, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Roughly standard normal over many ticks, never all zeros.
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int t = 0; t < n / 33; ++t) {
    bench::tick_input(9, t, a);
    for (float x : a) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += double(x) * x;
    }
  }
  const double count = double(n / 33 * 33), mean = sum / count, var = sq / count - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.05);
}

// Pacing is checked by what it does, not by a rate: every tick is due on the schedule (due times
// period apart), never sent before it is due, so the active time covers the whole schedule; late ticks
// are counted, never more than were sent. (The rate itself is a measurement: a busy machine sends late.)
TEST(Bench, ReferenceRunChecksEveryTickAndPaces) {
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 50;
  o.warmup = 5;
  o.rate_hz = 2000;  // 0.5 ms apart
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_EQ(r["count"], 50);
  // Every tick, the first ticks and the warm-up included.
  EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 55);
  EXPECT_EQ(r["error"]["checks_due"], bench::kFirstTicks + 55);
  EXPECT_EQ(r["error"]["unchecked_ticks"], 0);
  EXPECT_TRUE(r["error"]["pass"].get<bool>());
  EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  const auto& p = r["pacing"];
  EXPECT_EQ(p["rate_hz"], 2000.0);
  EXPECT_NEAR(p["schedule_s"].get<double>(), 49 / 2000.0, 1e-9);  // the 50th tick is due 49 periods in
  EXPECT_GE(p["active_s"].get<double>(), p["schedule_s"].get<double>());
  EXPECT_GE(p["late_ticks"].get<long long>(), 0);
  EXPECT_LE(p["late_ticks"].get<long long>(), 50);
  EXPECT_NE(out.str().find("PASS"), std::string::npos);
  // Unpaced, there is no schedule.
  o.rate_hz.reset();
  EXPECT_EQ(bench::run_bench(o, out)["pacing"]["schedule_s"], 0.0);
}

// Several checker threads split the checked windows; each must see its own ticks and agree exactly.
// The checker's threads keep off the engine's cores: those of the cpuset, except where the engine runs
// only the timed thread there (cuda without a CPU fallback), whose other cpuset cores are then free.
TEST(Bench, CheckerCoresLeaveTheEngineItsCores) {
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(bench::checker_cores(all, {2, 3, 4, 5, 6, 7}, true), (std::vector<int>{0, 1}));
  EXPECT_EQ(bench::checker_cores(all, {2, 3, 4, 5, 6, 7}, false), (std::vector<int>{0, 1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(bench::checker_cores(all, {}, true), all);  // no cpuset: nothing is pinned
  // a cpuset of every core: every core but the timed thread's
  EXPECT_EQ(bench::checker_cores(all, all, true), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(bench::checker_cores({3}, {3}, true), (std::vector<int>{3}));  // one core: share it
}

TEST(Bench, ManyCheckerThreadsAgreeWithTheReference) {
  bench::BenchOptions o;
  o.model = std::string(HOTPATH_GOLDEN_DIR) + "/multi_out.model.safetensors";
  o.engine.backend = BackendKind::ref;
  o.engine.mode = Mode::window;
  o.engine.window = 20;
  o.ticks = 400;
  o.warmup = 0;
  o.check_every = 1;
  o.check_threads = 5;
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 400);
  EXPECT_EQ(r["error"]["ticks_over_bound"], 0);
  EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
}

TEST(Bench, BadOptionsAreRefused) {
  bench::BenchOptions o;
  o.model = "lstm_s";
  o.engine.backend = BackendKind::ref;
  std::ostringstream out;
  auto refused = [&](auto change, const std::string& needle) {
    auto c = o;
    change(c);
    try {
      bench::run_bench(c, out);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const double nan = std::nan("");
  refused([](auto& c) { c.ticks = 0; }, "--ticks");
  refused([](auto& c) { c.ticks = bench::kMaxTicks + 1; }, "100000000");
  refused([](auto& c) { c.ticks = std::numeric_limits<long long>::max(); }, "--ticks");
  refused([](auto& c) { c.warmup = -1; }, "--warmup");
  refused([](auto& c) { c.warmup = std::numeric_limits<long long>::max(); }, "--warmup");  // warm-up + ticks wrapped
  refused([](auto& c) { c.rate_hz = -5; }, "--rate");
  refused([&](auto& c) { c.rate_hz = nan; }, "--rate");
  refused([&](auto& c) { c.seconds = nan; }, "--seconds");
  refused([&](auto& c) { c.gap_us = nan; }, "--gap-us");
  refused([&](auto& c) { c.engine.gpu.timeout_us = nan; }, "--timeout-us");
  refused([](auto& c) { c.engine.gpu.timeout_us = 0; }, "--timeout-us");
  refused([](auto& c) { c.engine.window = -1; }, "--window");  // 0: the model's
  refused([](auto& c) { c.engine.window = 10'000'000; }, "--window");
  refused([](auto& c) { c.check_threads = bench::kMaxCheckThreads + 1; }, "--check-threads");
  refused([](auto& c) { c.report_every_s = 0; }, "--report-every");
  refused([](auto& c) {
    c.report_every_s = 1;
    c.samples_path = "x.csv";
  }, "--samples");
  refused([](auto& c) { c.idle_s = 1; }, "--idle-every-s");
  refused([](auto& c) { c.idle_every_s = 1; }, "--idle-s");
  refused([](auto& c) { c.model = ""; }, "--model");
  refused([](auto& c) { c.model = "nonexistent"; }, "nonexistent");
  refused([](auto& c) { c.engine.mode = Mode::batch; }, "--mode");
  refused([](auto& c) { c.swap_model = "lstm_m"; }, "--swap-every-s");
  refused([](auto& c) { c.swap_every_s = 1; }, "--swap-model");
  refused([](auto& c) {
    c.swap_model = "lstm_m";
    c.swap_every_s = 1;
    c.engine.mode = Mode::streaming;
  }, "window mode");
  refused([](auto& c) {
    c.swap_model = "lstm_m";
    c.swap_every_s = 1;
    c.report_every_s = 1;
  }, "--report-every");
  refused([](auto& c) {
    c.swap_model = "lstm_s";
    c.swap_every_s = 0.5;
  }, "same weights");
  refused([](auto& c) { c.metrics_port = 70000; }, "--metrics-port");
  refused([](auto& c) { c.metrics_hold_s = 1; }, "--metrics-hold-s");
  refused([](auto& c) {
    c.swap_model = "vollo_tiny";
    c.swap_every_s = 0.5;
  }, "a swap keeps both");
}

// Live swaps under a paced feed: lstm_s and lstm_m take turns; every checked tick is checked against the
// model that answered it (two checkers, each skipping the other's ticks), and they account for every
// tick due for checking between them.
TEST(Bench, SwapsCheckEachTickAgainstItsModel) {
  // Two small models (another H and L, the same I and O), so that the feed is easy to keep up with under
  // AddressSanitizer too; from files, as a desk's would be.
  const std::string a_path = ::testing::TempDir() + "swap-a.safetensors", b_path = ::testing::TempDir() + "swap-b.safetensors";
  save_model_file(test_support::random_model(6, 24, 2, 2, true, true, 5), a_path);
  save_model_file(test_support::random_model(6, 40, 1, 2, true, true, 6), b_path);
  bench::BenchOptions o;
  o.model = a_path;
  o.swap_model = b_path;
  o.swap_every_s = 0.3;
  o.engine.backend = BackendKind::cpu;
  o.engine.mode = Mode::window;
  o.engine.window = 8;
  o.engine.precision = Precision::fp32;
  o.ticks = 4000;  // 4 s at 1 kHz: a dozen swaps, at least one however busy the host
  o.warmup = 100;
  o.rate_hz = 1000;
  o.check_every = 4;
  o.progress = util::ProgressMode::off;
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"] << "\n" << out.str();
  const auto& sw = r["swap"];
  EXPECT_GE(sw["switches"].get<long long>(), 1);
  EXPECT_GE(sw["calls"].get<long long>(), sw["switches"].get<long long>());
  EXPECT_GT(sw["check"]["checked_ticks"].get<long long>(), 0);
  EXPECT_GT(r["error"]["checked_ticks"].get<long long>(), 0);
  EXPECT_EQ(r["error"]["unchecked_ticks"], 0);
  EXPECT_EQ(r["error"]["checked_ticks"].get<long long>() + sw["check"]["checked_ticks"].get<long long>(),
            r["error"]["checks_due"].get<long long>());
  EXPECT_EQ(sw["model_id"], model_id(open_model(b_path)));
  EXPECT_EQ(r["counters"]["swaps"].get<double>(), sw["switches"].get<double>());
  EXPECT_GT(sw["during_swaps_latency_us"]["count"].get<long long>(), 0);
  EXPECT_NE(out.str().find("took over"), std::string::npos);
}

TEST(Stats, HistogramPercentilesBoundTheExactOnes) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(1.5, 0.8);  // microseconds, a long tail
  std::vector<double> v(100000);
  bench::Histogram h, a, b;
  for (size_t k = 0; k < v.size(); ++k) {
    v[k] = d(rng);
    h.add(v[k]);
    (k % 2 ? a : b).add(v[k]);
  }
  a.merge(b);
  const auto exact = bench::summarize(v);
  for (const auto& s : {h.summary(), a.summary()}) {
    EXPECT_EQ(s.count, exact.count);
    EXPECT_EQ(s.min, exact.min);
    EXPECT_EQ(s.max, exact.max);
    EXPECT_NEAR(s.mean, exact.mean, 1e-9 * exact.mean);
    for (auto [got, want] : {std::pair{s.p50, exact.p50}, {s.p90, exact.p90}, {s.p99, exact.p99}, {s.p999, exact.p999}}) {
      EXPECT_GE(got, want);
      EXPECT_LE(got, want * (1 + 1.0 / 1024) + 0.001);  // one bin: 1/1024 relative, 1 ns absolute
    }
  }
  h.clear();
  EXPECT_EQ(h.summary().count, 0);
  h.add(1e12);  // beyond the last bin: counted, reported as the exact maximum
  EXPECT_EQ(h.summary().p50, 1e12);
}

namespace {

// The reference backend, except that step() throws on chosen ticks (a GPU that misses its deadline):
// the bench must count those ticks as lost, never as checked, and never pass.
class FlakyBackend final : public Backend {
 public:
  FlakyBackend(const Model& m, const BackendOptions& o, std::function<bool(long long)> fails, double skew = 0)
      : Backend(m.config, o), inner_(make_backend(BackendKind::ref, m, o)), fails_(std::move(fails)), skew_(skew) {}
  std::string name() const override { return "flaky"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return Precision::fp32; }  // float outputs: the fp32 bound
  void step(std::span<const float> x, std::span<float> out) override {
    const long long t = t_++;
    inner_->step(x, out);  // state advances: the tick was sent, its answer is what is lost
    if (fails_(t)) throw Error("no answer to tick " + std::to_string(t));
    for (auto& v : out) v += float(skew_);
  }
  void finish_precompute() override { inner_->finish_precompute(); }
  void reset() override {
    inner_->reset();
    t_ = 0;
  }
  long long ticks() const override { return t_; }

 private:
  std::unique_ptr<Backend> inner_;
  std::function<bool(long long)> fails_;
  double skew_;
  long long t_ = 0;
};

bench::BenchOptions flaky_options(std::function<bool(long long)> fails, double skew = 0) {
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 200;
  o.warmup = 10;
  o.make_backend = [fails, skew](const Model& m, const BackendOptions& bo) {
    return std::make_unique<FlakyBackend>(m, bo, fails, skew);
  };
  return o;
}

}  // namespace

// Streaming: the checker's steps split over several threads give the very verdict and errors of one
// thread (every row sums in the same order on any thread): a passing run, and one with a lost tick and
// every answer wrong. lstm_s is large enough for three threads (a tiny model stays on one).
TEST(Bench, StreamingCheckSplitOverThreadsGivesTheSameVerdict) {
  for (const double skew : {0.0, 1e-3}) {
    nlohmann::json by_threads[2];
    for (int k = 0; k < 2; ++k) {
      bench::BenchOptions o = flaky_options([skew](long long t) { return skew > 0 && t == 37; }, skew);
      o.model = "lstm_s";
      o.ticks = 150;
      o.check_every = 3;
      o.check_threads = k == 0 ? 1 : 3;
      std::ostringstream out;
      by_threads[k] = bench::run_bench(o, out);
      EXPECT_EQ(by_threads[k]["checker"]["threads"], o.check_threads) << out.str();
      EXPECT_EQ(by_threads[k]["checker"]["reference"], "split");
    }
    const auto &one = by_threads[0], &three = by_threads[1];
    EXPECT_EQ(one["error"], three["error"]) << "skew " << skew;
    EXPECT_EQ(one["pass"], three["pass"]);
    EXPECT_EQ(one["failure"], three["failure"]);
    EXPECT_EQ(one["pass"].get<bool>(), skew == 0) << one["failure"];
    EXPECT_GT(one["error"]["checked_ticks"].get<long long>(), 0);
    if (skew > 0) EXPECT_EQ(one["error"]["lost_checks"], 0);  // tick 37 is not due (37 % 3 != 0)
  }
}

// The split check is fed the inputs the backend was fed, scaled the same way: a rolling scaler (whose
// statistics follow every tick) through ticks made in batches by the checker's threads.
TEST(Bench, TheSplitStreamingCheckScalesItsInputsAsTheBackendDoes) {
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.model = "lstm_s";
  o.ticks = 200;  // more than one batch of inputs between the first checks
  o.warmup = 0;
  o.check_every = 70;
  o.check_threads = 3;
  o.engine.scaler = ScalerChoice{ScalerKind::rolling, 8};
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["checker"]["threads"], 3);
  EXPECT_EQ(r["error"]["checked_ticks"], 3);  // ticks 0, 70 and 140 of 0 .. 209
  EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
}

// The report says how the check was computed and how long it took: in all, and after the run ended.
TEST(Bench, TheReportSaysHowLongCheckingTook) {
  for (const Mode mode : {Mode::streaming, Mode::window}) {
    bench::BenchOptions o = on_tiny(mode);
    o.engine.window = 4;
    o.ticks = 100;
    o.warmup = 0;
    o.check_threads = 2;
    const std::string path = ::testing::TempDir() + "check-timing.json";
    std::remove(path.c_str());
    o.json_path = path;
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path;
    const auto c = nlohmann::json::parse(f)["checker"];
    ASSERT_TRUE(c.is_object()) << mode_name(mode);
    EXPECT_EQ(c["reference"], mode == Mode::streaming ? "split" : "per_window");
    // The tiny model is not worth splitting; window mode uses the threads asked.
    EXPECT_EQ(c["threads"], mode == Mode::streaming ? 1 : 2);
    // Streaming steps through every tick once; a window of 4 costs up to 4 steps a checked tick.
    const long long ticks = bench::kFirstTicks + 100;
    if (mode == Mode::streaming) EXPECT_EQ(c["steps"], ticks);
    else EXPECT_EQ(c["steps"], 4 * ticks - (1 + 2 + 3));
    EXPECT_GE(c["after_run_s"].get<double>(), 0.0);
    EXPECT_GT(c["busy_s"].get<double>(), 0.0);
    EXPECT_GT(c["checked_ticks_per_s"].get<double>(), 0.0);
    EXPECT_GT(c["steps_per_s"].get<double>(), 0.0);
    EXPECT_NE(out.str().find("float64 checker: "), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("run after the timed loop, "), std::string::npos) << out.str();
  }
}

// A run with a tick count is checked after its timed loop (every thread's work then falls inside the time
// from the loop's end to the last check); asked, or open-ended, the checker runs beside the loop instead.
// Both check every due tick.
// The window checker, batched (windows stepped together) and one window at a time (a window whose inputs
// pass the batch's cap), files the same verdict and the same errors: the outputs handed to it are the
// float64 reference's own (error 0), then one of them off by 1e-3 (found, and named by its tick).
TEST(Bench, TheWindowCheckerBatchedAndOneAtATimeAgree) {
  const Model m = load_model_file(std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors");
  const int I = m.config.input_size, O = m.config.output_size, W = 5, every = 3;
  const long long ticks = 200;
  std::vector<float> xs(size_t(ticks) * I);
  for (long long t = 0; t < ticks; ++t) bench::tick_input(7, t, std::span<float>(xs.data() + t * I, size_t(I)));
  const auto z = reference::sliding_window(m, xs, size_t(ticks), W);
  for (const bool wrong : {false, true}) {
    std::vector<bench::CheckTotals> got;
    for (const size_t cap : {size_t(64) << 20, size_t(1)}) {
      bench::CheckedOutputs outs(O, 3, true);
      bench::IntervalStarts intervals(0);
      bench::Checker checker(m, Mode::window, W, 7, every, outs, intervals, ScalerChoice{});
      checker.set_window_batch_bytes(cap);
      checker.set_bound(1e-9);
      for (long long t = 0; t < ticks; t += every) {
        double* slot = outs.next_slot();
        ASSERT_NE(slot, nullptr);
        for (int o = 0; o < O; ++o) slot[o] = z[size_t(t) * O + o] + (wrong && t == 99 ? 1e-3 : 0.0);
        outs.publish(slot, false);
      }
      checker.start(3, {});
      got.push_back(checker.finish());
    }
    const long long checked = (ticks + every - 1) / every;
    for (const auto& g : got) {
      EXPECT_EQ(g.all.checked, checked);
      EXPECT_EQ(g.all.over_bound, wrong ? 1 : 0);
      if (wrong) EXPECT_EQ(g.all.worst_tick, 99);
      EXPECT_LE(g.all.max_abs, wrong ? 1.001e-3 : 1e-12);
      if (wrong) EXPECT_GE(g.all.max_abs, 0.999e-3);
    }
    EXPECT_EQ(got[0].all.max_abs, got[1].all.max_abs);  // the same bits either way
    EXPECT_EQ(got[0].timing.steps, got[1].timing.steps);
  }
}

// Streaming, checked after the run: the ticks in chunks side by side, each chunk's start confirmed by the
// previous chunk's end, agree with one float64 state carried from tick 0 (the split checker beside the
// loop): the same ticks checked, the same verdict, the errors within 1e-12; an answer off by 1e-3 is found
// and named by its tick either way. A model that forgets fast needs no chunk checked again; one whose
// forget gates are held open (bias +20: c keeps everything) has its chunks' starts refused and checked
// again from the previous chunk's end, and still agrees. The chunks on a lockstep (the GPU's interface)
// give the team's verdict (its bits on x86-64); a lockstep that cannot be made, fails part-way or makes
// fewer states leaves them to the team, which says why.
TEST(Bench, TheStreamingCheckInChunksAgreesWithOneStateFromTickZero) {
  const int I = 5, H = 24, O = 2, every = 7;
  const long long ticks = 3000;
  for (const bool long_memory : {false, true}) {
    Model m = test_support::random_model(I, H, 2, O, true, true, 21);
    if (long_memory)
      for (auto& layer : m.layers)
        for (int j = H; j < 2 * H; ++j) layer.b_ih[size_t(j)] = 20.0;  // the forget gate's rows
    std::vector<float> xs(size_t(ticks) * I);
    for (long long t = 0; t < ticks; ++t) bench::tick_input(7, t, std::span<float>(xs.data() + t * I, size_t(I)));
    const auto z = reference::streaming(m, xs, size_t(ticks));
    for (const bool wrong : {false, true}) {
      SCOPED_TRACE(std::string(long_memory ? "long memory" : "forgets fast") + (wrong ? ", tick 1001 off" : ""));
      // one state from tick 0; the chunks on the team; on a lockstep (the GPU's interface, here the host's:
      // the team's arithmetic); a lockstep that cannot be made, one that fails part-way, one that makes fewer
      // states than asked (the team then, each time, and the timing says why)
      enum How { one, team, lockstep, refused, fails, fewer };
      bench::CheckTotals got[6];
      std::atomic<long long> lock_steps{0};
      for (const How how : {one, team, lockstep, refused, fails, fewer}) {
        bench::CheckedOutputs outs(O, 1, true);
        bench::IntervalStarts intervals(0);
        bench::Checker checker(m, Mode::streaming, 0, 7, every, outs, intervals, ScalerChoice{});
        checker.set_bound(1e-9);
        checker.set_chunking(/*washout=*/64, /*min_ticks=*/256);  // 2,995 ticks: 11 chunks
        if (how == lockstep) checker.set_lockstep(test_support::host_lockstep(&lock_steps));
        if (how == refused) checker.set_lockstep(test_support::refusing_lockstep());
        if (how == fails) checker.set_lockstep(test_support::failing_lockstep(100));
        if (how == fewer) checker.set_lockstep([](const Model& mm, int s) { return test_support::host_lockstep()(mm, s - 1); });
        for (long long t = 0; t < ticks; t += every) {
          double* slot = outs.next_slot();
          ASSERT_NE(slot, nullptr);
          for (int o = 0; o < O; ++o) slot[o] = z[size_t(t) * O + o] + (wrong && t == 1001 ? 1e-3 : 0.0);
          outs.publish(slot, false);
        }
        checker.start(2, {}, /*all_published=*/how != one);
        got[how] = checker.finish();
      }
      const auto &first = got[one], &chunked = got[team];
      EXPECT_EQ(first.timing.chunks, 0);
      EXPECT_EQ(chunked.timing.chunks, 11);
      if (long_memory) EXPECT_GT(chunked.timing.chunks_redone, 0);
      else EXPECT_EQ(chunked.timing.chunks_redone, 0);
      EXPECT_EQ(chunked.all.checked, (ticks + every - 1) / every);
      EXPECT_EQ(chunked.all.checked, first.all.checked);
      EXPECT_EQ(chunked.all.over_bound, wrong ? 1 : 0);
      EXPECT_EQ(chunked.all.over_bound, first.all.over_bound);
      if (wrong) EXPECT_EQ(chunked.all.worst_tick, 1001);
      EXPECT_NEAR(chunked.all.max_abs, first.all.max_abs, 1e-12);
      EXPECT_LE(chunked.all.max_abs, wrong ? 1.001e-3 : 1e-11);
      // every tick stepped once, and each chunk after the first 64 more (or again, from its start)
      EXPECT_GE(chunked.timing.steps, ticks - every + 1);
      EXPECT_EQ(got[lockstep].timing.lockstep_where, "host (test)");
      EXPECT_TRUE(got[lockstep].timing.lockstep_refused.empty());
      EXPECT_TRUE(got[refused].timing.lockstep_where.empty());
      EXPECT_NE(got[refused].timing.lockstep_refused.find("1 MiB are free"), std::string::npos);
      EXPECT_NE(got[fails].timing.lockstep_refused.find("fell off the bus"), std::string::npos);
      EXPECT_NE(got[fewer].timing.lockstep_refused.find("made 10 states, not the 11 asked for"), std::string::npos)
          << got[fewer].timing.lockstep_refused;
      // the longest chunk's steps (2,995 / 11 + 64), each one lockstep step
      EXPECT_EQ(lock_steps.load(), (ticks - every + 1 + 10) / 11 + 64);
      for (const How how : {lockstep, refused, fails, fewer}) {  // the team's chunks
        SCOPED_TRACE(int(how));
        const auto& r = got[how];
        EXPECT_EQ(r.timing.chunks, chunked.timing.chunks);
        EXPECT_EQ(r.timing.chunks_redone, chunked.timing.chunks_redone);
        EXPECT_EQ(r.all.checked, chunked.all.checked);
        EXPECT_EQ(r.all.over_bound, chunked.all.over_bound);
        EXPECT_EQ(r.all.worst_tick, chunked.all.worst_tick);
        // the team's own bits where it stepped them; the host lockstep's FastF64 has the team's bits on
        // x86-64 only (split_f64.hpp), elsewhere within float64 rounding
        if (how == lockstep) EXPECT_NEAR(r.all.max_abs, chunked.all.max_abs, 1e-12);
        else EXPECT_EQ(r.all.max_abs, chunked.all.max_abs);
        EXPECT_EQ(r.timing.steps, chunked.timing.steps);
      }
    }
  }
}

// Through the bench: a streaming run long enough for two chunks is checked in chunks after the loop, and
// says so; it passes, also with a rolling scaler (each chunk's scaler first takes the ticks its window
// needs before the chunk's first).
TEST(Bench, ALongStreamingRunIsCheckedInChunks) {
  for (const bool rolling : {false, true}) {
    SCOPED_TRACE(rolling ? "rolling scaler" : "no scaler");
    bench::BenchOptions o = on_tiny(Mode::streaming);
    o.ticks = 5000;
    o.warmup = 0;
    o.check_every = 5;
    o.check_threads = 2;
    if (rolling) o.engine.scaler = ScalerChoice{ScalerKind::rolling, 8};
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
    EXPECT_EQ(r["checker"]["reference"], "chunks") << r["checker"].dump();
    EXPECT_GE(r["checker"]["chunks"].get<int>(), 2);
    EXPECT_EQ(r["checker"]["chunks_redone"], 0);
    EXPECT_EQ(r["checker"]["threads"], 2);
    EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
    EXPECT_NE(out.str().find("chunks side by side"), std::string::npos) << out.str();
  }
}

// Through the bench: --check-on gpu steps a long streaming run's chunks on the lockstep (here the host's;
// the engine is closed first), and the report says where; a lockstep that cannot be made leaves them to the
// host's cores and the report says why, still passing. --check-on gpu is refused beside the loop and
// (without a usable GPU) before the run.
TEST(Bench, CheckOnGpuStepsTheChunksOnTheLockstepAndSaysWhere) {
  {  // window mode: every checked window on the lockstep
    bench::BenchOptions o = on_tiny(Mode::window);
    o.engine.window = 6;
    o.ticks = 300;
    o.warmup = 0;
    o.check_every = 3;
    o.check_threads = 2;
    o.check_on = bench::CheckOn::gpu;
    std::atomic<long long> steps{0};
    o.make_lockstep = test_support::host_lockstep(&steps);
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
    EXPECT_EQ(r["checker"]["reference"], "per_window");
    EXPECT_EQ(r["checker"]["stepped_on"], "host (test)") << r["checker"].dump();
    EXPECT_EQ(steps.load(), 6);  // one batch of every whole window, W steps
    EXPECT_EQ(r["error"]["checked_ticks"].get<long long>(), (bench::kFirstTicks + 300 + 2) / 3);
    EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
    EXPECT_NE(out.str().find("stepped on host (test)"), std::string::npos) << out.str();
  }
  for (const bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "made");
    bench::BenchOptions o = on_tiny(Mode::streaming);
    o.ticks = 5000;
    o.warmup = 0;
    o.check_every = 5;
    o.check_threads = 2;
    o.check_on = bench::CheckOn::gpu;
    std::atomic<long long> steps{0};
    o.make_lockstep = refuse ? test_support::refusing_lockstep() : test_support::host_lockstep(&steps);
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
    const auto& c = r["checker"];
    EXPECT_EQ(c["reference"], "chunks") << c.dump();
    EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12);
    EXPECT_EQ(r["error"]["unchecked_ticks"].get<long long>(), 0);
    if (refuse) {
      EXPECT_EQ(c["stepped_on"], "cpu");
      EXPECT_NE(c["gpu_refused"].get<std::string>().find("1 MiB are free"), std::string::npos);
      EXPECT_NE(out.str().find("on the host's cores, not the GPU (the float64 check on the test GPU needs"), std::string::npos) << out.str();
      EXPECT_EQ(steps.load(), 0);
    } else {
      EXPECT_EQ(c["stepped_on"], "host (test)");
      EXPECT_FALSE(c.contains("gpu_refused"));
      EXPECT_GT(steps.load(), 0);
      EXPECT_NE(out.str().find("stepped on host (test)"), std::string::npos) << out.str();
      // the summary's backend parts were taken before the engine closed
      EXPECT_NE(out.str().find("| backend ref (float64-plain, fp64)"), std::string::npos) << out.str();
    }
  }
  // asked for and not used: the report says why (a rolling scaler in window mode; a streaming run too short
  // for chunks)
  for (const Mode mode : {Mode::window, Mode::streaming}) {
    bench::BenchOptions o = on_tiny(mode);
    o.engine.window = 6;
    o.ticks = 300;
    o.warmup = 0;
    o.check_every = 3;
    o.check_on = bench::CheckOn::gpu;
    o.make_lockstep = test_support::host_lockstep();
    if (mode == Mode::window) o.engine.scaler = ScalerChoice{ScalerKind::rolling, 8};
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
    EXPECT_EQ(r["checker"]["stepped_on"], "cpu");
    EXPECT_NE(r["checker"]["gpu_refused"].get<std::string>().find(mode == Mode::window ? "rolling scaler" : "fewer than 4096 ticks"),
              std::string::npos)
        << r["checker"].dump();
  }
  auto refused = [](auto change, const std::string& needle) {
    bench::BenchOptions o = on_tiny(Mode::streaming);
    o.ticks = 100;
    o.check_on = bench::CheckOn::gpu;
    o.make_lockstep = test_support::host_lockstep();
    change(o);
    std::ostringstream out;
    try {
      bench::run_bench(o, out);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([](auto& o) { o.check_during = true; }, "after the timed loop");
  refused([](auto& o) { o.seconds = 0.05; }, "after the timed loop");
  if (!gpu::available()) refused([](auto& o) { o.make_lockstep = nullptr; }, "--check-on gpu: ");
}

// Window mode on a lockstep (the GPU's interface; here on the host, FastF64's bits): every checked window a
// state stepped from zero with the windows of its batch, the run's first windows (shorter than W) and its
// lost ticks beside them, give the host threads' own verdict and bits; batches smaller than the windows
// (a lockstep of 7 states) change nothing. A refused lockstep leaves the windows to the threads and says why.
TEST(Bench, TheWindowsOnALockstepAgreeWithTheThreadsOwn) {
  const int I = 3, H = 20, O = 2, W = 9, every = 4;
  const long long ticks = 400;
  const Model m = test_support::random_model(I, H, 2, O, true, true, 5);
  std::vector<float> xs(size_t(ticks) * I);
  for (long long t = 0; t < ticks; ++t) bench::tick_input(3, t, std::span<float>(xs.data() + t * I, size_t(I)));
  const auto z = reference::sliding_window(m, xs, size_t(ticks), W);
  for (const bool wrong : {false, true}) {
    SCOPED_TRACE(wrong ? "tick 200 off" : "right");
    bench::CheckTotals got[5];
    std::atomic<long long> steps{0};
    for (int how = 0; how < 5; ++how) {  // the threads; a lockstep of 2,048 and of 7 states; refused; failing
      bench::CheckedOutputs outs(O, 2, true);
      bench::IntervalStarts intervals(0);
      bench::Checker checker(m, Mode::window, W, 3, every, outs, intervals, ScalerChoice{});
      checker.set_bound(1e-9);
      if (how == 1) checker.set_lockstep(test_support::host_lockstep(&steps));
      if (how == 2)
        checker.set_lockstep([](const Model& mm, int) { return test_support::host_lockstep()(mm, 7); });
      if (how == 3) checker.set_lockstep(test_support::refusing_lockstep());
      if (how == 4) checker.set_lockstep(test_support::failing_lockstep(5));  // part-way through the first batch
      for (long long t = 0; t < ticks; t += every) {
        double* slot = outs.next_slot();
        ASSERT_NE(slot, nullptr);
        for (int o = 0; o < O; ++o) slot[o] = z[size_t(t) * O + o] + (wrong && t == 200 ? 1e-3 : 0.0);
        outs.publish(slot, t == 100);  // one lost tick
      }
      checker.start(2, {}, /*all_published=*/true);
      got[how] = checker.finish();
    }
    const auto& threads = got[0];
    EXPECT_EQ(got[1].timing.lockstep_where, "host (test)");
    EXPECT_EQ(got[2].timing.lockstep_where, "host (test)");
    EXPECT_TRUE(got[3].timing.lockstep_where.empty());
    EXPECT_NE(got[3].timing.lockstep_refused.find("1 MiB are free"), std::string::npos);
    EXPECT_TRUE(got[4].timing.lockstep_where.empty());
    EXPECT_NE(got[4].timing.lockstep_refused.find("fell off the bus"), std::string::npos);
    // one batch of the 98 whole windows (ticks 8, 12, ..., 396 less the lost 100), W steps each
    EXPECT_EQ(steps.load(), W);
    EXPECT_EQ(threads.all.checked, ticks / every - 1);
    EXPECT_EQ(threads.all.lost, 1);
    for (int how = 1; how < 5; ++how) {
      SCOPED_TRACE(how);
      EXPECT_EQ(got[how].all.checked, threads.all.checked);
      EXPECT_EQ(got[how].all.lost, threads.all.lost);
      EXPECT_EQ(got[how].all.over_bound, threads.all.over_bound);
      EXPECT_EQ(got[how].all.worst_tick, threads.all.worst_tick);
      EXPECT_EQ(got[how].all.max_abs, threads.all.max_abs);  // the same bits
    }
    EXPECT_EQ(threads.all.over_bound, wrong ? 1 : 0);
    if (wrong) EXPECT_EQ(got[2].all.worst_tick, 200);
  }
}

TEST(Bench, TheCheckRunsAfterTheTimedLoopUnlessAskedOrOpenEnded) {
  for (const Mode mode : {Mode::streaming, Mode::window}) {
    for (const int how : {0, 1, 2}) {  // default, check_during, --seconds
      bench::BenchOptions o = on_tiny(mode);
      o.engine.window = 4;
      o.warmup = 0;
      o.check_threads = 2;
      o.check_every = 3;
      if (how == 2) o.seconds = 0.05;
      else o.ticks = 300;
      o.check_during = how == 1;
      std::ostringstream out;
      const auto r = bench::run_bench(o, out);
      ASSERT_TRUE(r["pass"].get<bool>()) << r["failure"];
      const auto& c = r["checker"];
      const std::string label = std::string(mode_name(mode)) + " case " + std::to_string(how);
      EXPECT_EQ(c["when"], how == 0 ? "after" : "during") << label;
      EXPECT_EQ(r["error"]["unchecked_ticks"].get<long long>(), 0) << label;
      if (how != 2) EXPECT_EQ(r["error"]["checked_ticks"].get<long long>(), (bench::kFirstTicks + 300 + 2) / 3) << label;
      else EXPECT_GT(r["error"]["checked_ticks"].get<long long>(), 0) << label;
      if (how == 0) EXPECT_GE(c["after_run_s"].get<double>(), c["busy_s"].get<double>()) << label;
      EXPECT_NE(out.str().find(how == 0 ? "run after the timed loop, " : "beside the timed loop, done "), std::string::npos)
          << label << "\n" << out.str();
    }
  }
}

// The tick-rate estimate counts lstm_s's FLOPs (I 32, H 128, L 2, O 1; W 50) as its comment says, splits
// only the precompute over the cores, and takes the per-core rate of the ISA the CPU is said to have.
TEST(TickRateEstimate, FromTheModelsSizeAndTheCores) {
  ModelConfig c;
  c.input_size = 32;
  c.hidden_size = 128;
  c.num_layers = 2;
  c.output_size = 1;
  cpu::CpuFeatures avx512;
  avx512.avx2_fma = avx512.avx512 = true;
  cpu::override_cpu_features(avx512);
  const auto one = bench::estimate_tick_rate(c, Mode::window, 50, 1);
  const auto four = bench::estimate_tick_rate(c, Mode::window, 50, 4);
  const auto streaming = bench::estimate_tick_rate(c, Mode::streaming, 1, 1);
  cpu::CpuFeatures avx2;
  avx2.avx2_fma = true;
  cpu::override_cpu_features(avx2);
  const auto slower = bench::estimate_tick_rate(c, Mode::window, 50, 1);
  cpu::override_cpu_features(std::nullopt);
  EXPECT_EQ(one.isa, "avx512");
  EXPECT_EQ(one.gflops_per_core, 60.0);
  EXPECT_EQ(one.answer_flops, 2.0 * 512 * (32 + 128) + 2.0 * 128);
  EXPECT_EQ(one.precompute_flops, 2.0 * 512 * 32 + 49 * 2.0 * 512 * 128 * 3);
  EXPECT_DOUBLE_EQ(one.precompute_us, one.precompute_flops / 60e3);
  EXPECT_DOUBLE_EQ(one.hz, 1e6 / (one.answer_us + one.precompute_us));
  EXPECT_DOUBLE_EQ(four.precompute_us, one.precompute_us / 4);
  EXPECT_DOUBLE_EQ(four.answer_us, one.answer_us);
  EXPECT_EQ(streaming.precompute_flops, 2.0 * 512 * 128 * 2);
  EXPECT_GT(streaming.hz, 10 * one.hz);
  EXPECT_EQ(slower.isa, "avx2");
  EXPECT_DOUBLE_EQ(slower.hz, one.hz / 2);
  // bf16 on AMX tiles: the precompute at AMX's rate, the answer at the vector kernels'
  cpu::override_cpu_features(avx512);
  const auto amx = bench::estimate_tick_rate(c, Mode::window, 50, 1, /*amx=*/true);
  cpu::override_cpu_features(std::nullopt);
  EXPECT_DOUBLE_EQ(amx.precompute_us, one.precompute_flops / 400e3);
  EXPECT_DOUBLE_EQ(amx.answer_us, one.answer_us);
  EXPECT_EQ(one.precompute_gflops_per_core, one.gflops_per_core);
  // A cpuset's first core answers; the rest precompute; none or one core: inline, on that core.
  EXPECT_EQ(bench::estimate_tick_rate_for_cpuset(c, Mode::window, 50, 0).precompute_cores, 1);
  EXPECT_EQ(bench::estimate_tick_rate_for_cpuset(c, Mode::window, 50, 1).precompute_cores, 1);
  EXPECT_EQ(bench::estimate_tick_rate_for_cpuset(c, Mode::window, 50, 5).precompute_cores, 4);
}

TEST(Bench, LostTicksAreCountedAndNeverPass) {
  std::ostringstream out;
  const auto r = bench::run_bench(flaky_options([](long long t) { return t == 37 || t == 120; }), out);
  EXPECT_EQ(r["lost_ticks"], 2);
  EXPECT_EQ(r["ticks_run"], bench::kFirstTicks + 210);
  EXPECT_EQ(r["count"], 198);                       // measured ticks that were answered
  EXPECT_EQ(r["error"]["lost_checks"], 2);          // due for checking, nothing to check
  EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 208);
  EXPECT_EQ(r["error"]["unchecked_ticks"], 0);
  EXPECT_EQ(r["error"]["ticks_over_bound"], 0);     // the others are right: records stay aligned
  EXPECT_FALSE(r["pass"].get<bool>());
  EXPECT_NE(r["failure"].get<std::string>().find("2 ticks got no answer"), std::string::npos) << r["failure"];
  EXPECT_NE(r["failure"].get<std::string>().find("tick 120"), std::string::npos) << r["failure"];
  EXPECT_NE(out.str().find("FAIL"), std::string::npos);
}

TEST(Bench, WrongAnswersFail) {
  std::ostringstream out;
  const auto r = bench::run_bench(flaky_options([](long long) { return false; }, 1e-3), out);
  EXPECT_EQ(r["error"]["ticks_over_bound"], bench::kFirstTicks + 210);
  EXPECT_FALSE(r["error"]["pass"].get<bool>());
  EXPECT_FALSE(r["pass"].get<bool>());
  EXPECT_NE(r["failure"].get<std::string>().find("exceeds the bound"), std::string::npos);
}

// A backend that stops answering ends the run (it does not spin through every remaining tick), and a
// run in which no tick was measured never passes.
TEST(Bench, ABackendThatStopsAnsweringEndsTheRunWithoutPassing) {
  std::ostringstream out;
  const auto r = bench::run_bench(flaky_options([](long long t) { return t >= 3; }), out);
  EXPECT_EQ(r["ticks_run"], 3 + bench::kMaxFailuresInRow);
  EXPECT_EQ(r["count"], 0);
  EXPECT_FALSE(r["pass"].get<bool>());
  EXPECT_NE(r["failure"].get<std::string>().find("in a row"), std::string::npos) << r["failure"];
  // One that never answered at all is an error, as before.
  EXPECT_THROW(bench::run_bench(flaky_options([](long long) { return true; }), out), Error);
}

namespace {

// The reference backend, busy for `slow_us` on each of its first `slow_ticks` ticks since creation (a
// cold start the bench must report apart, never in the steady state).
class SlowStartBackend final : public Backend {
 public:
  SlowStartBackend(const Model& m, const BackendOptions& o, long long slow_ticks, double slow_us)
      : Backend(m.config, o), inner_(make_backend(BackendKind::ref, m, o)), slow_ticks_(slow_ticks), slow_us_(slow_us) {}
  std::string name() const override { return "slow-start"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return Precision::fp64; }
  void step(std::span<const float> x, std::span<float> out) override {
    if (since_creation_++ < slow_ticks_) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(slow_us_);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    inner_->step(x, out);
  }
  std::span<const double> last_output_f64() const override { return inner_->last_output_f64(); }
  void finish_precompute() override { inner_->finish_precompute(); }
  void reset() override { inner_->reset(); }
  long long ticks() const override { return inner_->ticks(); }

 private:
  std::unique_ptr<Backend> inner_;
  long long slow_ticks_, since_creation_ = 0;
  double slow_us_;
};

}  // namespace

// int8's bound is measured by the checker only when int8 was asked for: a harness backend that turns out
// int8 anyway is refused (its error could not be judged), not checked against a bound that is not its own.
TEST(Bench, ABackendOfAnotherPrecisionThanAskedIsRefused) {
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 20;
  o.make_backend = [](const Model& m, const BackendOptions& bo) {
    BackendOptions int8 = bo;
    int8.precision = Precision::int8;
    return make_backend(BackendKind::cpu, m, int8);
  };
  std::ostringstream out;
  try {
    bench::run_bench(o, out);
    ADD_FAILURE() << "an int8 backend benchmarked without --precision int8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from the one asked for"), std::string::npos) << e.what();
  }
}

// The first kFirstTicks ticks after the engine is made are timed, checked and reported apart: slow ones
// there show in first_ticks and never in the steady-state summary.
TEST(Bench, TheFirstTicksAreReportedApartFromTheSteadyState) {
  static constexpr double kSlowUs = 20'000;  // far above a tick of the tiny model on the reference backend
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 100;
  o.warmup = 0;
  o.make_backend = [](const Model& m, const BackendOptions& bo) {
    return std::make_unique<SlowStartBackend>(m, bo, bench::kFirstTicks, kSlowUs);
  };
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  const auto& f = r["first_ticks"];
  ASSERT_EQ(f["latency_us"].size(), size_t(bench::kFirstTicks));
  ASSERT_EQ(f["precompute_us"].size(), size_t(bench::kFirstTicks));
  for (const auto& v : f["latency_us"]) EXPECT_GE(v.get<double>(), kSlowUs);
  EXPECT_GE(f["max_us"].get<double>(), kSlowUs);
  EXPECT_EQ(f["lost"], 0);
  EXPECT_EQ(r["count"], 100);
  EXPECT_LT(r["latency_us"]["max"].get<double>(), kSlowUs);  // the steady state holds none of them
  EXPECT_EQ(f["steady_p99_us"], r["latency_us"]["p99"]);
  EXPECT_FALSE(r["first_tick_within_p99"].get<bool>());
  EXPECT_FALSE(f["max_within_p99"].get<bool>());
  EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 100);  // checked like the others
  EXPECT_EQ(r["warm"]["ticks"], 0);  // a backend made by the harness is not warmed by the engine
  EXPECT_NE(out.str().find("first 10 ticks: max "), std::string::npos) << out.str();
}

// A first tick that got no answer is null in first_ticks, counted lost, and not within the p99. (Tick 0
// itself cannot be lost: a backend that never answered is an error, as before.)
TEST(Bench, ALostFirstTickIsNullAndCounted) {
  std::ostringstream out;
  const auto r = bench::run_bench(flaky_options([](long long t) { return t == 2 || t == 4; }), out);
  const auto& f = r["first_ticks"];
  ASSERT_EQ(f["latency_us"].size(), size_t(bench::kFirstTicks));
  for (int k = 0; k < bench::kFirstTicks; ++k)
    EXPECT_EQ(f["latency_us"][k].is_null(), k == 2 || k == 4) << "tick " << k;
  EXPECT_EQ(f["lost"], 2);
  EXPECT_FALSE(f["max_within_p99"].get<bool>());
  EXPECT_EQ(r["lost_ticks"], 2);
  EXPECT_FALSE(r["pass"].get<bool>());
  EXPECT_NE(out.str().find(" lost "), std::string::npos) << out.str();
}

// The engine the bench makes is warmed unless --no-warm; either way its first tick is the series' tick 0
// (the outputs are checked against the float64 reference from tick 0).
TEST(Bench, TheEngineIsWarmedUnlessAskedNot) {
  for (const bool warm : {true, false}) {
    bench::BenchOptions o = on_tiny(Mode::window);
    o.engine.backend = BackendKind::cpu;
    o.engine.window = 5;
    o.ticks = 30;
    o.warmup = 0;
    o.engine.warm = warm;
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
    EXPECT_EQ(r["warm"]["ticks"], warm ? engine::kWarmTicks : 0);
    EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 30);
    EXPECT_EQ(r["counters"]["precompute_ticks"], bench::kFirstTicks + 30);  // the warm-up's are not counted
  }
}

// The soak run's pieces: a report per interval (from histograms, so memory does not grow with the run)
// that together cover every measured tick and every check, and idle gaps in which no tick is sent.
TEST(Bench, IntervalsCoverEveryTickAndIdleGapsHappen) {
  bench::BenchOptions o = on_tiny(Mode::window);
  o.engine.window = 6;
  o.warmup = 7;
  o.check_threads = 2;
  o.seconds = 0.6;
  o.report_every_s = 0.1;
  o.idle_every_s = 0.2;
  o.idle_s = 0.05;
  std::ostringstream out;
  const auto r = bench::run_bench(o, out);
  EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["percentiles"], "histogram");
  EXPECT_GE(r["pacing"]["idle_gaps"].get<long long>(), 1);
  const auto& iv = r["intervals"];
  ASSERT_TRUE(iv.is_array());
  ASSERT_GE(iv.size(), 1u);
  long long ticks = 0, checked = 0;
  double idle = 0;
  for (size_t k = 0; k < iv.size(); ++k) {
    EXPECT_EQ(iv[k]["index"], k);
    EXPECT_EQ(iv[k]["ticks"], iv[k]["latency_us"]["count"]);
    EXPECT_GT(iv[k]["rss_bytes"].get<long long>(), 0);
    EXPECT_EQ(iv[k]["lost_ticks"], 0);
    EXPECT_EQ(iv[k]["error"]["ticks_over_bound"], 0);
    if (k > 0) EXPECT_EQ(iv[k]["first_tick"].get<long long>(), iv[k - 1]["first_tick"].get<long long>() + iv[k - 1]["ticks"].get<long long>());
    ticks += iv[k]["ticks"].get<long long>();
    checked += iv[k]["error"]["checked_ticks"].get<long long>();
    idle += iv[k]["idle_s"].get<double>();
  }
  EXPECT_EQ(iv[0]["first_tick"], bench::kFirstTicks + 7);
  EXPECT_EQ(ticks, r["count"].get<long long>());
  // The first ticks' and the warm-up's checks belong to no interval.
  EXPECT_EQ(checked, r["error"]["checked_ticks"].get<long long>() - bench::kFirstTicks - 7);
  EXPECT_NEAR(idle, r["pacing"]["idle_total_s"].get<double>(), 1e-9);
  EXPECT_EQ(r["error"]["unchecked_ticks"], 0);
  EXPECT_NE(out.str().find("interval 0:"), std::string::npos);
}

TEST(Threads, PinFailuresAreRecordedAndNamed) {
  util::clear_pin_failures();
  EXPECT_TRUE(util::try_pin_thread(pthread_self(), util::allowed_cores(), "test thread"));
  EXPECT_FALSE(util::try_pin_thread(pthread_self(), {CPU_SETSIZE - 1}, "test thread"));
  EXPECT_FALSE(util::try_pin_thread(pthread_self(), {-1}, "test thread"));
  const auto f = util::pin_failures();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].thread, "test thread");
  EXPECT_EQ(f[0].cores, std::vector<int>{CPU_SETSIZE - 1});
  EXPECT_FALSE(f[0].reason.empty());
  try {
    util::pin_thread(pthread_self(), {CPU_SETSIZE - 1}, "bench timed thread");
    ADD_FAILURE() << "pinned to a core that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu " + std::to_string(CPU_SETSIZE - 1)), std::string::npos) << e.what();
  }
  util::clear_pin_failures();
  EXPECT_TRUE(util::pin_failures().empty());
  // A run reports its failures (none here) in the JSON.
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 5;
  std::ostringstream out;
  EXPECT_TRUE(bench::run_bench(o, out)["pin_failures"].is_array());
}

// The group joins what started, whatever happens: its stop function runs first, once.
TEST(Threads, GroupStopsAndJoins) {
  std::atomic<bool> stop{false};
  std::atomic<int> ran{0};
  int stops = 0;
  {
    util::ThreadGroup g([&] {
      ++stops;
      stop = true;
    });
    for (int k = 0; k < 3; ++k)
      g.start("test thread", [&] {
        while (!stop) std::this_thread::yield();
        ++ran;
      });
    EXPECT_EQ(g.size(), 3u);
  }
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(stops, 1);
}

// Past a few blocks of checked outputs the checker's buffers are reused (memory follows the backlog,
// not the run): every record must still be read before it is overwritten, by one thread (streaming)
// or several taking turns (window).
TEST(Bench, LongRunsReuseTheCheckersBuffersWithoutLosingARecord) {
  for (const Mode mode : {Mode::streaming, Mode::window}) {
    bench::BenchOptions o = on_tiny(mode);
    o.engine.window = 3;
    o.ticks = 200'000;  // O = 1: 65,536 records a block, so four blocks
    o.warmup = 0;
    o.check_threads = 3;
    std::ostringstream out;
    const auto r = bench::run_bench(o, out);
    EXPECT_EQ(r["error"]["checked_ticks"], bench::kFirstTicks + 200'000) << mode_name(mode);
    EXPECT_EQ(r["error"]["ticks_over_bound"], 0) << mode_name(mode);
    EXPECT_LE(r["error"]["max_abs"].get<double>(), 1e-12) << mode_name(mode);
    EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  }
}

// ---------------------------------------------------------------------------------------------------
// The throughput modes: backtest, backtest-streaming, fresh.

#include "bench/throughput_bench.hpp"

namespace {

bench::ThroughputOptions throughput_on_tiny(bench::Workload w, const std::string& backend) {
  bench::ThroughputOptions o;
  o.model = std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors";
  o.engine.backend = util::parse_name<BackendKind>(backend);
  o.workload = w;
  o.engine.window = 5;  // the golden model's file carries none
  o.windows = 200;
  o.batch = 3;
  o.repeats = 2;
  return o;
}

// Answers every backtest and batch with the cpu backend's outputs plus `offset`.
class OffsetBackend final : public Backend {
 public:
  OffsetBackend(const Model& m, const BackendOptions& o, float offset)
      : Backend(m.config, o), inner_(make_backend(BackendKind::cpu, m, o)), offset_(offset) {}
  std::string name() const override { return "offset"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return inner_->precision(); }
  void step(std::span<const float> x, std::span<float> out) override { inner_->step(x, out); }
  void finish_precompute() override { inner_->finish_precompute(); }
  void reset() override { inner_->reset(); }
  long long ticks() const override { return inner_->ticks(); }
  void run_batch(std::span<const float> x, size_t b, size_t w, std::span<float> out) override {
    inner_->run_batch(x, b, w, out);
    for (auto& v : out) v += offset_;
  }
  void backtest(std::span<const float> x, size_t s, size_t t, BacktestOutput out, std::atomic<size_t>* done) override {
    inner_->backtest(x, s, t, out, done);
    for (size_t k = 0; k < s * t * size_t(config().output_size); ++k) out.f32[k] += offset_;
  }

 private:
  std::unique_ptr<Backend> inner_;
  float offset_;
};

}  // namespace

TEST(ThroughputBench, EveryWorkloadOnTheTinyModelPasses) {
  for (const char* backend : {"cpu", "ref"}) {
    for (auto w : {bench::Workload::backtest, bench::Workload::backtest_streaming, bench::Workload::fresh}) {
      SCOPED_TRACE(std::string(backend) + " " + bench::workload_name(w));
      std::ostringstream out;
      const auto r = bench::run_throughput(throughput_on_tiny(w, backend), out);
      EXPECT_TRUE(r["pass"].get<bool>()) << r.dump(1);
      EXPECT_EQ(r["kind"], "throughput");
      EXPECT_EQ(r["workload"], bench::workload_name(w));
      EXPECT_EQ(r["backend"]["name"], backend);
      EXPECT_GT(r["windows_per_s"].get<double>(), 0);
      EXPECT_GT(r["error"]["values_checked"].get<size_t>(), 0u);
      EXPECT_LE(r["error"]["max_normalized"].get<double>(), r["error"]["bound"].get<double>());
      EXPECT_GT(r["flops_per_window"].get<double>(), 0);
      if (w == bench::Workload::fresh) {
        // 200 windows in calls of 3: 67 calls, each timed.
        EXPECT_EQ(r["calls"], 67);
        EXPECT_EQ(r["latency_per_call_us"]["count"], 67);
        EXPECT_EQ(r["outputs_per_run"], 201);
      } else {
        EXPECT_EQ(r["series"], 3);
        EXPECT_EQ(r["ticks_per_series"], 67);
        EXPECT_EQ(r["run_seconds"].size(), 2u);
      }
      EXPECT_NE(out.str().find("windows/s"), std::string::npos) << out.str();
      EXPECT_NE(out.str().find("PASS"), std::string::npos) << out.str();
    }
  }
}

// Outputs off by 1e-3 fail every workload's check (fp32 bound 1e-5), naming the error and the bound.
TEST(ThroughputBench, WrongAnswersFail) {
  for (auto w : {bench::Workload::backtest, bench::Workload::backtest_streaming, bench::Workload::fresh}) {
    auto o = throughput_on_tiny(w, "cpu");
    o.make_backend = [](const Model& m, const BackendOptions& bo) { return std::make_unique<OffsetBackend>(m, bo, 1e-3f); };
    std::ostringstream out;
    const auto r = bench::run_throughput(o, out);
    EXPECT_FALSE(r["pass"].get<bool>()) << bench::workload_name(w);
    EXPECT_NE(r["failure"].get<std::string>().find("exceeds the bound"), std::string::npos);
    EXPECT_NE(out.str().find("FAIL"), std::string::npos);
  }
}

TEST(ThroughputBench, BadOptionsAreRefused) {
  std::ostringstream out;
  auto o = throughput_on_tiny(bench::Workload::backtest, "cpu");
  o.windows = 0;
  EXPECT_THROW(bench::run_throughput(o, out), Error);
  o = throughput_on_tiny(bench::Workload::backtest, "cpu");
  o.repeats = 0;
  EXPECT_THROW(bench::run_throughput(o, out), Error);
  o = throughput_on_tiny(bench::Workload::fresh, "cpu");
  o.batch = bench::kMaxBatch + 1;
  EXPECT_THROW(bench::run_throughput(o, out), Error);
  o = throughput_on_tiny(bench::Workload::backtest, "cpu");
  o.model = "no_such_model";
  EXPECT_THROW(bench::run_throughput(o, out), Error);
  o = throughput_on_tiny(bench::Workload::backtest, "cpu");
  o.target_seconds = 4000;
  EXPECT_THROW(bench::run_throughput(o, out), Error);
  // A run whose inputs would pass the memory limit is refused before they are allocated, naming it.
  o = throughput_on_tiny(bench::Workload::backtest, "cpu");
  o.windows = bench::kMaxThroughputWindows;
  try {
    bench::run_throughput(o, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GB of inputs and outputs, over the benchmark's"), std::string::npos) << e.what();
  }
  EXPECT_EQ(bench::parse_workload("window"), std::nullopt);
  EXPECT_EQ(bench::parse_workload("backtest-streaming"), bench::Workload::backtest_streaming);
}

namespace {

// `n` instances of the tiny model (streaming, every tick checked); instance k is FlakyBackend with
// fails(k, t) and skew(k).
bench::BenchOptions instances_options(int n, std::function<bool(int, long long)> fails = nullptr,
                                      std::function<double(int)> skew = nullptr) {
  bench::BenchOptions o = on_tiny(Mode::streaming);
  o.ticks = 150;
  o.warmup = 5;
  o.instances = n;
  auto made = std::make_shared<std::atomic<int>>(0);
  o.make_backend = [made, fails, skew](const Model& m, const BackendOptions& bo) -> std::unique_ptr<Backend> {
    const int k = (*made)++;
    auto f = [fails, k](long long t) { return fails ? fails(k, t) : false; };
    return std::make_unique<FlakyBackend>(m, bo, f, skew ? skew(k) : 0.0);
  };
  return o;
}

}  // namespace

// Every instance is timed and checked on its own; the aggregate holds every measured tick.
TEST(InstancesBench, EveryInstanceIsMeasuredAndCheckedApart) {
  for (const bool lockstep : {false, true}) {
    for (const Mode mode : {Mode::streaming, Mode::window}) {
      std::ostringstream out;
      bench::BenchOptions o = instances_options(3);
      o.engine.mode = mode;
      if (mode == Mode::window) o.engine.window = 5;
      o.lockstep = lockstep;
      const auto r = bench::run_instances_bench(o, out);
      EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"] << out.str();
      EXPECT_EQ(r["kind"], "instances");
      ASSERT_EQ(r["phases"].size(), 1u);
      const auto& ph = r["phases"][0];
      ASSERT_EQ(ph["per_instance"].size(), 3u);
      EXPECT_EQ(ph["latency_us"]["count"], 3 * 150);
      double worst = 0;
      std::set<uint64_t> seeds;
      for (const auto& i : ph["per_instance"]) {
        EXPECT_EQ(i["latency_us"]["count"], 150);
        EXPECT_EQ(i["error"]["checked_ticks"], 155);  // warm-up ticks are checked too
        EXPECT_EQ(i["error"]["unchecked_ticks"], 0);
        EXPECT_TRUE(i["pass"].get<bool>());
        worst = std::max(worst, i["latency_us"]["p99"].get<double>());
        seeds.insert(i["seed"].get<uint64_t>());
      }
      EXPECT_EQ(seeds.size(), 3u);  // each instance its own input stream
      EXPECT_EQ(ph["worst_instance_p99_us"].get<double>(), worst);
      EXPECT_GE(ph["checker"]["seconds"].get<double>(), 0.0);
      EXPECT_EQ(ph["checker"]["reference"], mode == Mode::streaming ? "split" : "per_window");
      EXPECT_EQ(r["driving"]["lockstep"].get<bool>(), lockstep);
    }
  }
}

#ifdef HOTPATH_HAVE_PROMETHEUS
// --metrics-port with --instances: one server, each instance's telemetry under its own engine label,
// its counts those of the run's measured ticks (and in the report).
TEST(InstancesBench, TheMetricsPortServesEveryInstance) {
  std::uint16_t port = 0;
  close(llm::test::listen_loopback(port, "a free port"));  // one the kernel just gave out
  bench::BenchOptions o = instances_options(3);
  o.metrics_port = port;
  o.metrics_hold_s = 3;  // the final counts stay served this long after the run; the scrape waits for them
  nlohmann::json r;
  std::ostringstream out;
  std::thread run([&] { r = bench::run_instances_bench(o, out); });
  auto served = [](const std::string& body, int k) {
    return body.find("hotpath_ticks_answered_total{engine=\"" + std::to_string(k) + "\"} 150") != std::string::npos;
  };
  std::string body;
  for (int i = 0; i < 600 && !(served(body, 0) && served(body, 1) && served(body, 2)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int fd = llm::test::connect_loopback(port);
    if (fd < 0) continue;
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    body.clear();
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) body.append(buf, size_t(n));
    }
    close(fd);
  }
  run.join();
  EXPECT_TRUE(r["pass"].get<bool>()) << r["failure"];
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(served(body, k)) << "instance " << k << ":\n" << body;
    EXPECT_EQ(r["metrics"]["per_instance"][size_t(k)]["answered"], 150);
    EXPECT_EQ(r["metrics"]["per_instance"][size_t(k)]["count"], 150);
  }
  EXPECT_EQ(r["metrics"]["port"], port);
}
#endif

TEST(InstancesBench, TheReportIsWrittenAsJson) {
  const std::string path = ::testing::TempDir() + "instances-report.json";
  std::remove(path.c_str());
  bench::BenchOptions o = instances_options(2);
  o.json_path = path;
  std::ostringstream out;
  const auto r = bench::run_instances_bench(o, out);
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["kind"], "instances");
  EXPECT_EQ(j["phases"][0]["per_instance"].size(), 2u);
  EXPECT_EQ(j["pass"], r["pass"]);
}

// Instances' streaming checks run after the timed threads: long enough, each in chunks; a wrong answer of
// one instance is still found and named by its tick.
TEST(InstancesBench, LongStreamingRunsAreCheckedInChunks) {
  bench::BenchOptions o = instances_options(2, nullptr, [](int k) { return k == 1 ? 1e-3 : 0.0; });
  o.ticks = 5000;
  o.check_every = 5;
  o.check_threads = 2;
  std::ostringstream out;
  const auto r = bench::run_instances_bench(o, out);
  const auto& ph = r["phases"][0];
  EXPECT_EQ(ph["checker"]["reference"], "chunks") << ph["checker"].dump();
  EXPECT_TRUE(ph["per_instance"][0]["pass"].get<bool>());
  EXPECT_FALSE(ph["per_instance"][1]["pass"].get<bool>());
  EXPECT_FALSE(r["pass"].get<bool>());
}

// One instance's lost ticks or wrong answers fail the run, naming that instance; the others pass.
TEST(InstancesBench, OneInstancesFaultsFailTheRunAndNameIt) {
  {
    std::ostringstream out;
    const auto r = bench::run_instances_bench(instances_options(3, [](int k, long long t) { return k == 1 && t == 40; }), out);
    EXPECT_FALSE(r["pass"].get<bool>());
    EXPECT_NE(r["failure"].get<std::string>().find("instance 1: 1 ticks got no answer"), std::string::npos) << r["failure"];
    const auto& per = r["phases"][0]["per_instance"];
    EXPECT_TRUE(per[0]["pass"].get<bool>());
    EXPECT_FALSE(per[1]["pass"].get<bool>());
    EXPECT_EQ(per[1]["lost_ticks"], 1);
    EXPECT_TRUE(per[2]["pass"].get<bool>());
  }
  {
    std::ostringstream out;
    const auto r = bench::run_instances_bench(instances_options(3, nullptr, [](int k) { return k == 2 ? 1e-3 : 0.0; }), out);
    EXPECT_FALSE(r["pass"].get<bool>());
    EXPECT_NE(r["failure"].get<std::string>().find("instance 2: the error"), std::string::npos) << r["failure"];
    EXPECT_TRUE(r["phases"][0]["per_instance"][0]["pass"].get<bool>());
  }
}

TEST(InstancesBench, BadOptionsAreRefused) {
  std::ostringstream out;
  bench::BenchOptions o = instances_options(2);
  o.instances = 0;
  EXPECT_THROW(bench::run_instances_bench(o, out), Error);
  o = instances_options(2);
  o.report_every_s = 1;
  EXPECT_THROW(bench::run_instances_bench(o, out), Error);
  o = instances_options(2);
  o.beside_backtest = true;  // needs the GPU's instance set
  EXPECT_THROW(bench::run_instances_bench(o, out), Error);
  o = instances_options(2);
  o.pingpong = true;  // the floor has no instances
  EXPECT_THROW(bench::run_instances_bench(o, out), Error);
  o = instances_options(2);
  o.engine.fallback = Fallback::cpu;
  EXPECT_THROW(bench::run_instances_bench(o, out), Error);
  o = instances_options(2);
  o.check_on = bench::CheckOn::gpu;  // the GPU holds the instances; their checks stay on the host
  try {
    bench::run_instances_bench(o, out);
    ADD_FAILURE() << "--check-on gpu accepted with --instances";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--check-on gpu is for one engine's run"), std::string::npos) << e.what();
  }
  o = instances_options(2);  // one engine's swaps only
  o.swap_model = "lstm_m";
  o.swap_every_s = 1;
  o.engine.mode = Mode::window;  // what the swaps need besides, so that --instances is what is refused
  o.make_backend = nullptr;
  try {
    bench::run_instances_bench(o, out);
    ADD_FAILURE() << "--swap-every-s accepted with --instances";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("with --instances"), std::string::npos) << e.what();
  }
  o = on_tiny(Mode::streaming);
  o.lockstep = true;  // without --instances
  EXPECT_THROW(bench::run_bench(o, out), Error);
  o = on_tiny(Mode::streaming);
  o.placement = engine::Placement::block;  // without --instances
  try {
    bench::run_bench(o, out);
    FAIL() << "--placement ran without --instances";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--placement need --instances"), std::string::npos) << e.what();
  }
}
