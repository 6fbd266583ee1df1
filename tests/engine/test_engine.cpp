// The engine layer: models from files, bytes and the zoo; backend choice (auto included); option checks;
// step / run / run_batch sizes and bad ticks; the fallback wrapper around any backend and its shadow.
// Host-only (ref and cpu backends); `auto` is checked for what this machine has.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <random>
#include <thread>

#include "common/golden.hpp"
#include "common/warm_budget.hpp"
#include "common/within_seconds.hpp"
#include "engine/engine.hpp"
#include "engine/fallback.hpp"
#include "engine/gpu.hpp"
#include "engine/shadow.hpp"
#include "engine/warm.hpp"
#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath {
namespace {

using test_support::load_golden;

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(expr, words)                                   \
  do {                                                                  \
    const std::string what_ = error_of([&] { expr; });                  \
    EXPECT_NE(what_.find(words), std::string::npos) << what_;           \
  } while (0)

// ---- models ---------------------------------------------------------------------------------------

TEST(EngineModels, FileBytesAndZooOpenTheSameWay) {
  const std::string path = std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors";
  const Model f = open_model(path);
  const Model b = open_model_bytes(file_bytes(path), "tiny-in-memory");
  EXPECT_EQ(b.name, "tiny-in-memory");
  EXPECT_EQ(b.config.input_size, f.config.input_size);
  EXPECT_EQ(b.config.hidden_size, f.config.hidden_size);
  EXPECT_EQ(b.config.window, f.config.window);
  const Model z = open_model("lstm_s");
  EXPECT_EQ(z.name, "lstm_s");
  EXPECT_ERROR_HAS(open_model("no_such_model_xyz"), "no model file or zoo model");
}

TEST(EngineModels, CorruptBytesAreNamedErrors) {
  auto bytes = file_bytes(std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors");
  EXPECT_THROW(open_model_bytes({}, "empty"), Error);
  EXPECT_ERROR_HAS(open_model_bytes(std::span(bytes).first(bytes.size() / 2), "half"), "half");
  bytes[0] = std::byte{0xff};  // header length now far past the end
  EXPECT_ERROR_HAS(open_model_bytes(bytes, "bad-length"), "bad-length");
}

// ---- engines over the golden cases ------------------------------------------------------------------

TEST(Engine, RefAndCpuMatchPyTorchOnTheGoldenCases) {
  // The engine's plumbing on two cases (each backend's own tests cover every golden case; small2x128's
  // window reference alone takes over a minute under ASan).
  for (const char* name : {"tiny", "multi_out"}) {
    const auto g = load_golden(name);
    for (const char* backend : {"ref", "cpu"}) {
      for (Mode mode : {Mode::window, Mode::streaming}) {
        EngineOptions o;
        o.backend = util::parse_name<BackendKind>(backend);
        o.mode = mode;
        o.window = mode == Mode::window ? g.window : 0;
        Engine e(g.model, o);
        EXPECT_EQ(e.backend_name(), backend);
        EXPECT_TRUE(e.choice_note().empty());
        const size_t O = size_t(e.output_size());
        std::vector<double> out(g.ticks * O);
        e.run(g.inputs, g.ticks, std::span<double>(out));
        EXPECT_EQ(e.ticks(), (long long)g.ticks);
        const size_t first = mode == Mode::window ? size_t(g.window - 1) : 0;
        const auto& want = mode == Mode::window ? g.window_expected : g.streaming_expected;
        const double err = reference::normalized_error(std::span<const double>(out).subspan(first * O), want);
        EXPECT_LE(err, error_bound(e.precision())) << name << " " << backend << " " << mode_name(mode);
        // step() after reset() gives the same outputs as run() (float outputs this time).
        e.reset();
        std::vector<float> z(O);
        for (size_t t = 0; t < g.ticks; ++t) {
          e.step(std::span<const float>(g.inputs).subspan(t * size_t(e.input_size()), size_t(e.input_size())), z);
          for (size_t k = 0; k < O; ++k) ASSERT_EQ(z[k], float(out[t * O + k])) << name << " tick " << t;
        }
      }
    }
  }
}

TEST(Engine, WindowComesFromTheModelUnlessGiven) {
  const Model m = *zoo_model("vollo_tiny");
  ASSERT_TRUE(m.config.window.has_value());
  EngineOptions o;
  o.backend = BackendKind::ref;
  Engine e(m, o);
  EXPECT_EQ(e.window(), *m.config.window);
  o.window = 3;
  EXPECT_EQ(Engine(m, o).window(), 3);
  o.mode = Mode::streaming;
  EXPECT_EQ(Engine(m, o).window(), 1);
  Model no_window = m;
  no_window.config.window.reset();
  o.mode = Mode::window;
  o.window = 0;
  EXPECT_ERROR_HAS(Engine(no_window, o), "window mode needs --window");
}

TEST(Engine, BadOptionsAreNamed) {
  const Model m = *zoo_model("vollo_tiny");
  // Every choice's name table (backend/options.hpp) refuses a name it lacks, listing the valid ones: the
  // CLI's flags, the C ABI's strings and Python's keywords all parse through it.
  EXPECT_ERROR_HAS(util::parse_name<BackendKind>("gpu9"), "unknown backend 'gpu9' (valid: auto, ref, cpu, cuda or hybrid)");
  EXPECT_ERROR_HAS(util::parse_name<Fallback>("gpu"), "unknown fallback 'gpu' (valid: none or cpu)");
  EXPECT_ERROR_HAS(util::parse_name<CudaKernel>("bogus"), "unknown cuda kernel 'bogus' (valid: auto, cta, cluster or grid)");
  EXPECT_ERROR_HAS(util::parse_name<CudaVariant>("warp"), "unknown cuda variant 'warp' (valid: auto, smem or regs)");
  EXPECT_ERROR_HAS(util::parse_name<Mode>("sideways"), "unknown mode 'sideways' (valid: window, streaming or batch)");
  EXPECT_ERROR_HAS(util::parse_name<Precision>("fp8"), "unknown precision 'fp8'");
  EXPECT_ERROR_HAS(util::parse_name<BackendKind>(""), "unknown backend ''");
  for (const BackendKind k : {BackendKind::automatic, BackendKind::ref, BackendKind::cpu, BackendKind::cuda})
    EXPECT_EQ(util::parse_name<BackendKind>(util::name_of(k)), k);  // every name reads back as its value
  for (const CudaKernel k : {CudaKernel::automatic, CudaKernel::cta, CudaKernel::cluster, CudaKernel::grid})
    EXPECT_EQ(util::parse_name<CudaKernel>(util::name_of(k)), k);
  EXPECT_STREQ(util::name_of(BackendKind::automatic), "auto");
  BackendOptions streaming;
  streaming.mode = Mode::streaming;
  EXPECT_ERROR_HAS(make_backend(BackendKind::automatic, m, streaming), "auto is resolved by the engine");
  EngineOptions o;
  o.backend = BackendKind::cpu;
  o.window = kMaxWindow + 1;
  EXPECT_ERROR_HAS(Engine(m, o), "outside 1..10000");
  o = {};
  o.backend = BackendKind::cpu;
  o.cpuset = {1 << 20};
  EXPECT_ERROR_HAS(Engine(m, o), "which this process may not use");
  o = {};
  o.gpu.timeout_us = 0;
  EXPECT_ERROR_HAS(Engine(m, o), "timeout");
  o = {};
  o.backend = BackendKind::ref;
  o.gpu.variant = CudaVariant::regs;
  EXPECT_ERROR_HAS(Engine(m, o), "no kernel variants");
  o = {};
  o.backend = BackendKind::cpu;
  o.gpu.kernel = CudaKernel::automatic;  // the default, whatever the backend
  EXPECT_NO_THROW(Engine(m, o));
  o = {};
  o.gpu.kernel = CudaKernel::cluster;
  EXPECT_EQ(backend_options(m, o).gpu.kernel, CudaKernel::cluster);  // it reaches the backend as given
  o.backend = BackendKind::cpu;
  EXPECT_ERROR_HAS(Engine(m, o), "backend cpu has no kernel families (--kernel cluster is for cuda)");
  // batch_rows: cuda's chunk size, range-checked before any device; a cpu or ref backend has no chunks
  o = {};
  for (long long bad : {-1LL, kMaxBatchRows + 1}) {
    o.gpu.batch_rows = bad;
    EXPECT_ERROR_HAS(backend_options(m, o), "batch rows " + std::to_string(bad) + " is outside 1..65536");
    EXPECT_ERROR_HAS(Engine(m, o), "is outside 1..65536");
  }
  o.gpu.batch_rows = 4096;
  EXPECT_EQ(backend_options(m, o).gpu.batch_rows, 4096);  // it reaches the backend as given
  for (const char* b : {"cpu", "ref"}) {
    o.backend = util::parse_name<BackendKind>(b);
    EXPECT_ERROR_HAS(Engine(m, o), std::string("backend ") + b + " has no batch chunks (--batch-rows 4096 is for cuda)");
  }
  // batch_copy_threads: the host threads of cuda's chunk copies, likewise
  o = {};
  for (int bad : {-1, kMaxBatchCopyThreads + 1}) {
    o.gpu.batch_copy_threads = bad;
    EXPECT_ERROR_HAS(backend_options(m, o), "batch copy threads " + std::to_string(bad) + " is outside 1..64");
  }
  o.gpu.batch_copy_threads = 3;
  EXPECT_EQ(backend_options(m, o).gpu.batch_copy_threads, 3);
  for (const char* b : {"cpu", "ref"}) {
    o.backend = util::parse_name<BackendKind>(b);
    EXPECT_ERROR_HAS(Engine(m, o), std::string("backend ") + b +
                                       " has no batch chunks to copy (--batch-copy-threads 3 is for cuda)");
  }
  // tick_trace: the grid kernel's, refused where there is no tick kernel
  o = {};
  o.gpu.tick_trace = true;
  for (const char* b : {"cpu", "ref"}) {
    o.backend = util::parse_name<BackendKind>(b);
    EXPECT_ERROR_HAS(Engine(m, o), std::string("backend ") + b +
                                       " has no tick kernel to trace (--tick-trace is for cuda's grid kernel)");
  }
  EXPECT_THROW(Engine(m, std::unique_ptr<Backend>()), Error);
}

TEST(Engine, AutoTakesTheGpuOnlyWhenItIsUsable) {
  const Model m = *zoo_model("vollo_tiny");
  EngineOptions o;  // backend auto
  Engine e(m, o);
  std::string why;
  if (!gpu::available(&why)) {
    EXPECT_EQ(e.backend_name(), "cpu");
    EXPECT_NE(e.choice_note().find("no usable GPU"), std::string::npos) << e.choice_note();
    EngineOptions probe = o;
    probe.fallback = Fallback::cpu;
    EXPECT_EQ(choose_backend(m, &probe), BackendKind::cpu);
    EXPECT_EQ(probe.backend, BackendKind::cpu);
    EXPECT_EQ(probe.fallback, Fallback::none);  // what the Engine would drop: the bench makes its engine from it
    EngineOptions rows = o;
    rows.gpu.batch_rows = 4096;
    std::string note;
    EXPECT_EQ(choose_backend(m, &rows, &note), BackendKind::cpu);
    EXPECT_EQ(rows.gpu.batch_rows, 0);  // cuda's chunk size dropped with the GPU, and said so
    EXPECT_NE(note.find("--batch-rows 4096 dropped"), std::string::npos) << note;
    std::printf("[auto] no GPU here (%s): cpu chosen, as it should be\n", why.c_str());
  } else {
    EXPECT_EQ(e.backend_name(), "cuda") << e.choice_note();
  }
  o.backend = BackendKind::ref;
  EXPECT_EQ(choose_backend(m, &o), BackendKind::ref);
}

TEST(Engine, SizesAndBadTicksAreRefusedWithoutTouchingTheState) {
  const Model m = *zoo_model("vollo_tiny");
  EngineOptions o;
  o.backend = BackendKind::cpu;
  Engine e(m, o);
  const size_t I = size_t(e.input_size()), O = size_t(e.output_size());
  std::vector<float> x(I, 0.25f), z(O), z2(O);
  e.step(x, z);
  std::vector<float> short_out(O + 1);
  EXPECT_ERROR_HAS(e.step(x, short_out), "output buffer holds");
  EXPECT_THROW(e.step(std::span<const float>(x).first(I - 1), z), TickError);
  auto nan = x;
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(e.step(nan, z), TickError);
  EXPECT_EQ(e.ticks(), 1);
  std::vector<float> series(3 * I, 0.5f), out(3 * O);
  EXPECT_ERROR_HAS(e.run(series, 4, out), "series holds");
  EXPECT_ERROR_HAS(e.run(series, 3, std::span<float>(out).first(2 * O)), "output buffer holds");
  EXPECT_ERROR_HAS(e.run(series, size_t(-1) / 2, out), "series holds");
  EXPECT_EQ(e.ticks(), 1);
  std::vector<float> batch(2 * 4 * I, 0.1f), bout(2 * O);
  e.run_batch(batch, 2, 4, bout);
  EXPECT_ERROR_HAS(e.run_batch(batch, 3, 4, bout), "batch input holds");
  EXPECT_ERROR_HAS(e.run_batch(batch, 2, 0, bout), "batch window 0");
  EXPECT_EQ(e.ticks(), 1);
}

TEST(Engine, CpusetParsing) {
  EXPECT_EQ(parse_cpuset("3"), (std::vector<int>{3}));
  EXPECT_EQ(parse_cpuset("2-5"), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(parse_cpuset("7,0-1,7"), (std::vector<int>{7, 0, 1}));  // first listed stays first
  EXPECT_EQ(parse_cpuset("010-011"), (std::vector<int>{10, 11}));  // decimal, as every number of a flag
  for (const char* bad :
       {"", "a", "3-1", "1,,2", "1,", ",1", "-1", "1-", "99999999", "0x1", "0b1", "1e1", "1.0", " 1", "1-2-3"})
    EXPECT_THROW(parse_cpuset(bad), Error) << bad;
}

// The one scoped pin (ping-pong, bench): the thread gets its old cores back, and a refused pin either
// throws (required) or is recorded.
TEST(UtilScopedPin, GivesTheThreadItsCoresBack) {
  const std::vector<int> before = util::allowed_cores();
  ASSERT_FALSE(before.empty());
  {
    const util::ScopedPin pin({before.front()}, "test thread", true);
    EXPECT_EQ(util::allowed_cores(), std::vector<int>{before.front()});
  }
  EXPECT_EQ(util::allowed_cores(), before);
  EXPECT_THROW(util::ScopedPin({1 << 20}, "test thread", true), Error);
  util::clear_pin_failures();
  { const util::ScopedPin pin({1 << 20}, "test thread", false); }
  EXPECT_EQ(util::pin_failures().size(), 1u);
  EXPECT_EQ(util::allowed_cores(), before);
  util::clear_pin_failures();
}

// ---- the fallback wrapper ----------------------------------------------------------------------------

// A primary that computes every tick (its state follows the stream) but says it was late on chosen
// ticks, writing garbage: the wrapper must answer those from the shadow.
class LateBackend final : public Backend {
 public:
  LateBackend(const Model& m, const BackendOptions& o, std::function<bool(long long)> late)
      : Backend(m.config, o), inner_(make_backend(BackendKind::ref, m, o)), late_(std::move(late)) {}
  std::string name() const override { return "late"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return Precision::fp64; }
  long long ticks() const override { return inner_->ticks(); }
  void step(std::span<const float> x, std::span<float> out) override {
    std::string why;
    if (!try_step(x, out, &why)) throw Error(why);
  }
  bool try_step(std::span<const float> x, std::span<float> out, std::string* why) override {
    const long long t = inner_->ticks();
    if (t == throw_at) throw std::runtime_error("device lost");
    inner_->step(x, out);
    if (!late_(t)) return true;
    for (float& v : out) v = 1e30f;
    *why = "late on tick " + std::to_string(t);
    return false;
  }
  void finish_precompute() override { inner_->finish_precompute(); }
  void reset() override { inner_->reset(); }
  std::span<const double> last_output_f64() const override { return inner_->last_output_f64(); }
  std::map<std::string, double> counters() const override { return {{"primary_counter", 7}}; }
  long long throw_at = -1;  // this tick fails outright (not late): the wrapper must stop there

 private:
  std::unique_ptr<Backend> inner_;
  std::function<bool(long long)> late_;
};

// The primary's exact float64 outputs come through the wrapper when it answered; after a primary that
// failed outright (not late) the shadow is a tick ahead, so the wrapper refuses until reset().
TEST(EngineFallback, ExactOutputsPassAndAFailedPrimaryStopsItUntilReset) {
  const Model m = *zoo_model("vollo_tiny");
  BackendOptions bo;
  bo.mode = Mode::streaming;
  bo.window = 1;
  auto late = std::make_unique<LateBackend>(m, bo, [](long long t) { return t == 2; });
  LateBackend* primary = late.get();
  Engine e(m, engine::with_fallback(std::move(late), make_backend(BackendKind::cpu, m, bo), -1));
  auto ref = make_backend(BackendKind::ref, m, bo);
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  std::vector<float> series(4 * I);
  for (size_t k = 0; k < series.size(); ++k) series[k] = float(std::sin(0.37 * double(k)));
  std::vector<double> got(4 * O);
  e.run(series, 4, std::span<double>(got));
  std::vector<float> z(O);
  for (size_t t = 0; t < 4; ++t) {
    ref->process(std::span<const float>(series).subspan(t * I, I), z);
    const auto exact = ref->last_output_f64();
    for (size_t k = 0; k < O; ++k) {
      if (t == 2) EXPECT_EQ(got[t * O + k], double(float(got[t * O + k]))) << "the shadow's answer is a float";
      else EXPECT_EQ(got[t * O + k], exact[k]) << "tick " << t;  // the primary's float64, unrounded
    }
  }
  primary->throw_at = 4;
  std::vector<float> x(I, 0.25f);
  EXPECT_THROW(e.step(x, z), std::runtime_error);
  EXPECT_ERROR_HAS(e.step(x, z), "reset the engine");
  EXPECT_THROW(e.step(x, z), BackendError);
  primary->throw_at = -1;
  e.reset();
  e.step(x, z);
  EXPECT_EQ(e.ticks(), 1);
}

TEST(EngineFallback, TheShadowAnswersTheLateTicksOfAnyBackend) {
  const Model m = *zoo_model("vollo_tiny");
  BackendOptions bo;
  bo.mode = Mode::streaming;
  bo.window = 1;
  auto wrapped = engine::with_fallback(std::make_unique<LateBackend>(m, bo, [](long long t) { return t % 5 == 3; }),
                                       make_backend(BackendKind::cpu, m, bo), -1);
  Engine e(m, std::move(wrapped));
  auto want = make_backend(BackendKind::ref, m, bo);
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> x(I), z(O), w(O);
  for (int round = 0; round < 2; ++round) {
    for (int t = 0; t < 40; ++t) {
      for (float& v : x) v = d(rng);
      if (t == 10) {  // a bad tick reaches neither backend
        auto bad = x;
        bad[0] = std::numeric_limits<float>::infinity();
        EXPECT_THROW(e.step(bad, z), TickError);
      }
      e.step(x, z);
      want->process(x, w);
      for (size_t k = 0; k < O; ++k) EXPECT_NEAR(z[k], w[k], error_bound(Precision::fp32) * 10) << "tick " << t;
    }
    e.reset();
    want->reset();
  }
  const auto c = e.counters();
  EXPECT_EQ(c.at("fallback_answers"), 16.0);  // ticks 3, 8, ..., 38 of two rounds
  EXPECT_EQ(c.at("primary_counter"), 7.0);
  EXPECT_EQ(e.facts().at("fallback"), "cpu");
  EXPECT_EQ(e.backend_name(), "late");
}

TEST(EngineFallback, OnlyABackendThatCanBeLateIsWrapped) {
  const Model m = *zoo_model("vollo_tiny");
  EngineOptions o;
  o.fallback = Fallback::cpu;
  for (const BackendKind b : {BackendKind::ref, BackendKind::cpu}) {
    o.backend = b;
    EXPECT_ERROR_HAS(Engine(m, o), "answers every tick itself");
  }
  if (gpu::available()) GTEST_SKIP() << "a GPU is here: auto takes cuda (test_cuda_backend covers its fallback)";
  o.backend = BackendKind::automatic;
  o.gpu.variant = CudaVariant::regs;
  o.precision = Precision::fp16;
  o.gpu.kernel = CudaKernel::grid;
  Engine e(m, o);  // auto fell to cpu: cuda's options are dropped, saying so
  EXPECT_EQ(e.backend_name(), "cpu");
  EXPECT_EQ(e.facts().count("fallback"), 0u);
  for (const char* w : {"--fallback cpu dropped", "--variant regs dropped", "fp16", "--kernel grid dropped"})
    EXPECT_NE(e.choice_note().find(w), std::string::npos) << e.choice_note();
}

// The thread that makes an engine runs its critical step on the cpuset's first core, for every backend,
// and gets its own cores back when the engine goes; with the fallback (cuda) the shadow's core is the
// shadow worker's, never the caller's.
TEST(EngineCpuset, TheCallerRunsOnTheFirstCoreAndGetsItsCoresBack) {
  const std::vector<int> before = util::allowed_cores();
  if (before.size() < 2) GTEST_SKIP() << "needs two cores";
  const Model m = *zoo_model("vollo_tiny");
  std::vector<std::string> backends = {"ref", "cpu"};
  if (gpu::available()) backends.push_back("cuda");
  for (const auto& b : backends) {
    for (bool fallback : {false, true}) {
      if (fallback && b != "cuda") continue;
      SCOPED_TRACE(b + (fallback ? " + fallback" : ""));
      EngineOptions o;
      o.backend = util::parse_name<BackendKind>(b);
      o.cpuset = {before[1], before[0]};
      if (fallback) o.fallback = Fallback::cpu;
      {
        Engine e(m, o);
        EXPECT_EQ(util::allowed_cores(), std::vector<int>{before[1]});
        std::vector<float> x(size_t(e.input_size()), 0.1f), z(size_t(e.output_size()));
        e.step(x, z);
        EXPECT_EQ(util::allowed_cores(), std::vector<int>{before[1]});
      }
      if (b != "cpu") EXPECT_EQ(util::allowed_cores(), before);  // cpu: restored by the backend, same thread
      util::set_thread_cores(pthread_self(), before);
    }
  }
  // A core outside what the thread now has, but inside what the process has, is still accepted.
  {
    const util::ScopedPin pin({before[0]}, "test thread", true);
    EngineOptions o;
    o.backend = BackendKind::ref;
    o.cpuset = {before[1]};
    EXPECT_NO_THROW(Engine(m, o));
  }
}

// ---- the warm-up ----------------------------------------------------------------------------------

// Records what is done to it: 's' step, 'f' finish_precompute, 'r' reset, 'c' clear_counters, and the
// inputs of the ticks. try_step is late (false) on tick late_at.
class RecordingBackend final : public Backend {
 public:
  RecordingBackend(const Model& m, const BackendOptions& o) : Backend(m.config, o) {}
  std::string name() const override { return "recording"; }
  std::string variant() const override { return "test"; }
  Precision precision() const override { return Precision::fp32; }
  long long ticks() const override { return t_; }
  void step(std::span<const float> x, std::span<float> out) override {
    check_tick_input(x, t_);
    calls += 's';
    inputs.emplace_back(x.begin(), x.end());
    std::fill(out.begin(), out.end(), 0.f);
    ++t_;
  }
  bool try_step(std::span<const float> x, std::span<float> out, std::string* why) override {
    step(x, out);
    if (t_ - 1 != late_at) return true;
    *why = "late";
    return false;
  }
  void finish_precompute() override { calls += 'f'; }
  void reset() override {
    calls += 'r';
    t_ = 0;
  }
  void clear_counters() override { calls += 'c'; }
  std::string calls;
  std::vector<std::vector<float>> inputs;
  long long late_at = -1;

 private:
  long long t_ = 0;
};

std::string repeat(const std::string& s, long long n) {
  std::string r;
  for (long long k = 0; k < n; ++k) r += s;
  return r;
}

// The warm-up runs its ticks through the tick path (step, then finish_precompute), at least W + 1 in
// window mode, on finite, non-zero inputs that change from tick to tick, and ends with reset() then
// clear_counters(); the batch workload has no ticks to warm.
TEST(EngineWarm, TicksThroughTheTickPathThenResetsAndClears) {
  const Model m = *zoo_model("vollo_tiny");
  for (const auto& [mode, window] : std::vector<std::pair<Mode, int>>{
           {Mode::window, 1}, {Mode::window, 7}, {Mode::window, 200}, {Mode::streaming, 1}}) {
    SCOPED_TRACE(std::string(mode_name(mode)) + " W=" + std::to_string(window));
    BackendOptions o;
    o.mode = mode;
    o.window = window;
    RecordingBackend b(m, o);
    const long long n = engine::warm_ticks(o);
    EXPECT_GE(n, engine::kWarmTicks);
    if (mode == Mode::window) EXPECT_GE(n, window + 1);
    const engine::WarmUp w = engine::warm(b);
    EXPECT_EQ(w.ticks, n);
    EXPECT_EQ(b.calls, repeat("sf", n) + "rc");
    ASSERT_EQ(b.inputs.size(), size_t(n));
    for (size_t t = 0; t < b.inputs.size(); ++t) {
      const auto& x = b.inputs[t];
      ASSERT_EQ(x.size(), size_t(m.config.input_size));
      for (float v : x) {
        EXPECT_TRUE(std::isfinite(v) && v != 0.f && std::fabs(v) <= 1.f) << "tick " << t << ": " << v;
      }
      if (t > 0) EXPECT_NE(x, b.inputs[t - 1]) << "tick " << t;
    }
    EXPECT_EQ(b.ticks(), 0);
  }
  BackendOptions batch;
  batch.mode = Mode::batch;
  RecordingBackend b(m, batch);
  EXPECT_EQ(engine::warm(b).ticks, 0);
  EXPECT_EQ(b.calls, "");
}

// A late tick (a GPU that missed its deadline) ends the warm-up's ticks there: reset() starts afresh.
TEST(EngineWarm, ALateTickEndsTheTicksAndStillResets) {
  const Model m = *zoo_model("vollo_tiny");
  BackendOptions o;
  o.mode = Mode::streaming;
  o.window = 1;
  RecordingBackend b(m, o);
  b.late_at = 3;
  EXPECT_EQ(engine::warm(b).ticks, 4);
  EXPECT_EQ(b.calls, "sfsfsfsrc");
}

// A warmed cpu engine answers every tick bit for bit as an engine that was not warmed (the warm-up
// leaves no state behind: t = 0, fresh windows), its counters start as a new backend's, for fp32 and
// bf16, window (W = 1, and W = 7 over several wraps of the slot ring) and streaming, with the
// precompute inline and (two cores) on a worker.
TEST(EngineWarm, AWarmedCpuEngineAnswersAsAColdOne) {
  const Model m = *zoo_model("vollo_tiny");
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const std::vector<int> cores = util::allowed_cores();
  std::vector<std::vector<int>> cpusets = {{}};
  if (cores.size() >= 2) cpusets.push_back({cores[0], cores[1]});
  std::mt19937 rng(41);
  std::normal_distribution<float> d;
  for (const Precision p : {Precision::fp32, Precision::bf16})
    for (const auto& [mode, window] :
         std::vector<std::pair<Mode, int>>{{Mode::window, 1}, {Mode::window, 7}, {Mode::streaming, 0}})
      for (const auto& cpuset : cpusets) {
        SCOPED_TRACE(std::string(precision_name(p)) + " " + mode_name(mode) + " W=" + std::to_string(window) +
                     " cpuset " + util::cores_text(cpuset));
        const size_t T = size_t(3 * std::max(window, 1) + 5);
        std::vector<float> series(T * I);
        for (float& v : series) v = d(rng);
        std::vector<float> out[2];
        std::map<std::string, double> fresh[2], after[2];
        long long warm_ticks[2] = {}, want_warm_ticks = 0;
        double warm_seconds = 0;
        for (const bool warm : {true, false}) {
          EngineOptions o;
          o.backend = BackendKind::cpu;
          o.precision = p;
          o.mode = mode;
          o.window = window;
          o.cpuset = cpuset;
          o.warm = warm;
          if (warm) want_warm_ticks = engine::warm_ticks(backend_options(m, o));
          Engine e(m, o);
          EXPECT_EQ(e.ticks(), 0);
          fresh[warm] = e.counters();
          warm_ticks[warm] = e.warm_up().ticks;
          if (warm) warm_seconds = e.warm_up().seconds;
          out[warm].resize(T * O);
          e.run(series, T, std::span<float>(out[warm]));
          after[warm] = e.counters();
          EXPECT_EQ(e.ticks(), (long long)T);
        }
        if (!cpuset.empty()) util::set_thread_cores(pthread_self(), cores);
        if (!test_support::warm_cut_by_budget(warm_seconds))
          EXPECT_EQ(warm_ticks[true], want_warm_ticks);
        else
          EXPECT_GE(warm_ticks[true], engine::kMinWarmTicks);
        EXPECT_LE(warm_ticks[true], want_warm_ticks);
        EXPECT_EQ(warm_ticks[false], 0);
        EXPECT_EQ(fresh[true], fresh[false]);  // e.g. precompute_ticks 0, no means yet
        EXPECT_EQ(after[true].at("precompute_ticks"), double(T));
        EXPECT_EQ(after[false].at("precompute_ticks"), double(T));
        ASSERT_EQ(out[true].size(), out[false].size());
        EXPECT_EQ(std::memcmp(out[true].data(), out[false].data(), out[true].size() * sizeof(float)), 0)
            << "the warmed engine's outputs differ from the cold one's";
      }
}

// ---- the fallback's shadow -----------------------------------------------------------------------

BackendOptions window_options(int window) {
  BackendOptions o;
  o.mode = Mode::window;
  o.window = window;
  return o;
}

// The shadow's answers after any number of resets equal a fresh CPU backend's on the same ticks: a reset
// that raced its worker (the old code rewound both counters while the worker read them) would make it
// skip or repeat ticks. Resets come at every fill level, with answers outstanding, full ring included.
TEST(EngineShadow, ResetsStartAFreshStreamEveryTime) {
  const Model m = *zoo_model("vollo_tiny");
  const int I = m.config.input_size, O = m.config.output_size;
  const BackendOptions o = window_options(5);
  engine::Shadow shadow(make_backend(BackendKind::cpu, m, o), -1);
  auto ref = make_backend(BackendKind::cpu, m, o);
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(I), got(O), want(O);
  test_support::within_seconds(30, [&] {
    for (int cycle = 0; cycle < 140; ++cycle) {
      const int ticks = 1 + cycle % (engine::Shadow::kRing + 6);
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
        if (t + 1 >= engine::Shadow::kRing) check(t + 1 - engine::Shadow::kRing);  // keeps a free slot
      }
      for (int t = std::max(0, ticks + 1 - engine::Shadow::kRing); t < ticks; ++t) check(t);
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
TEST(EngineShadow, AFailedWorkerMakesEveryWaitThrow) {
  const Model m = *zoo_model("vollo_tiny");
  const int I = m.config.input_size, O = m.config.output_size;
  engine::Shadow shadow(make_backend(BackendKind::cpu, m, window_options(5)), -1);
  std::vector<float> x(I, 0.5f), out(O);
  const long long good = shadow.submit(x);
  shadow.result(good, out);
  x[0] = std::numeric_limits<float>::quiet_NaN();  // the CPU backend refuses it: the worker fails
  const long long bad = shadow.submit(x);
  x[0] = 0.5f;
  test_support::within_seconds(30, [&] {
    EXPECT_THROW(shadow.result(bad, out), Error);
    try {
      shadow.reset();
      ADD_FAILURE() << "reset() after a failure returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cpu backend failed"), std::string::npos) << e.what();
    }
    auto fill_ring = [&] {
      for (int t = 0; t <= engine::Shadow::kRing; ++t) shadow.submit(x);
    };
    EXPECT_THROW(fill_ring(), Error);
  });
}

}  // namespace
}  // namespace hotpath
