// The cpu backend fed its window state (cpu/window_feed.hpp, the hybrid backend's CPU half): a feed that
// computes each tick's state in float64 from the inputs the backend hands it stands in for the GPU, so the
// critical step's reading of a foreign state (its layout, the first ticks, streaming, reset) is checked
// against the float64 reference on any machine; and a feed that withholds its state checks that a tick is
// then never answered from stale data.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/golden.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/window_feed.hpp"
#include "model/quantize.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath {
namespace {

using cpu::CriticalStateLayout;
using cpu::WindowStateFeed;
using cputest::run_ticks;
using test_support::Golden;
using test_support::load_golden;

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Every open window's h and c in float64; the state of the completing window in the layout asked for.
class ReferenceFeed final : public WindowStateFeed {
 public:
  struct Control {
    long long withhold_from = -1;  // >= 0: from this tick on, wait() gives nothing (a producer that stopped)
    long long consumed = 0;        // consume() calls seen
    bool early = false;            // input_before_step(): x_t comes before the critical step
  };
  ReferenceFeed(const Model& m, Mode mode, int W, const CriticalStateLayout& layout, Control* control)
      : m_(m), streaming_(mode == Mode::streaming), W_(W), layout_(layout), control_(control),
        state_(layout.tick_floats()) {
    reset();
  }
  const float* wait(long long t, std::chrono::nanoseconds, bool* waited, std::string* why) override {
    *waited = false;
    if (control_->withhold_from >= 0 && t >= control_->withhold_from) {
      if (why) *why = "test feed: no state for tick " + std::to_string(t);
      return nullptr;
    }
    EXPECT_EQ(t, next_) << "the backend asked for a tick the feed has not been brought to";
    const long long s = streaming_ ? 0 : std::max(0LL, t - W_ + 1);
    const auto it = windows_.find(s);
    const Window w = it == windows_.end() ? fresh() : it->second;
    std::fill(state_.begin(), state_.end(), 0.f);
    const int H = m_.config.hidden_size;
    for (int l = 0; l < layout_.layers; ++l) {
      float* dst = state_.data() + size_t(l) * layout_.layer_floats;
      const LstmLayer& ly = m_.layers[size_t(l)];
      const std::vector<double> b = ly.bias_sum(H);
      for (int g = 0; g < 4; ++g)
        for (int u = 0; u < H; ++u) {
          const size_t row = size_t(g) * H + u;
          double p = b[row];
          for (int k = 0; k < H; ++k) p += ly.w_hh[row * H + k] * w.h[size_t(l)][size_t(k)];
          dst[layout_.p_index(u, g)] = float(p);
        }
      for (int u = 0; u < H; ++u) dst[layout_.gate_floats + size_t(u)] = float(w.c[size_t(l)][size_t(u)]);
    }
    return state_.data();
  }
  bool input_before_step() const override { return control_->early; }
  void consume(std::span<const float> x, long long t) override {
    ++control_->consumed;
    // what wait() gave is no longer valid: a step that still read it would answer NaN
    std::fill(state_.begin(), state_.end(), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(long(x.size()), long(m_.config.input_size));
    EXPECT_EQ(t, next_);
    if (streaming_) {
      advance(windows_[0], x);
    } else {
      const long long lo = std::max(0LL, t - W_ + 2);
      for (auto it = windows_.begin(); it != windows_.end();) it = it->first < lo ? windows_.erase(it) : std::next(it);
      if (lo <= t) windows_.emplace(t, fresh());  // the window starting at t (a no-op for an open one)
      for (auto& [s, w] : windows_) advance(w, x);
    }
    next_ = t + 1;
  }
  void reset() override {
    windows_.clear();
    if (streaming_) windows_[0] = fresh();
    next_ = 0;
  }
  std::string describe() const override { return "a float64 test feed"; }

 private:
  struct Window {
    std::vector<std::vector<double>> h, c;
  };
  Window fresh() const {
    const size_t L = m_.layers.size(), H = size_t(m_.config.hidden_size);
    return {std::vector<std::vector<double>>(L, std::vector<double>(H)), std::vector<std::vector<double>>(L, std::vector<double>(H))};
  }
  void advance(Window& w, std::span<const float> x) const {
    const int H = m_.config.hidden_size;
    std::vector<double> in(x.begin(), x.end());
    for (size_t l = 0; l < m_.layers.size(); ++l) {
      const LstmLayer& ly = m_.layers[l];
      const std::vector<double> b = ly.bias_sum(H);
      const size_t K = in.size();
      std::vector<double> gates(size_t(4) * H);
      for (size_t row = 0; row < gates.size(); ++row) {
        double v = b[row];
        for (size_t k = 0; k < K; ++k) v += ly.w_ih[row * K + k] * in[k];
        for (int k = 0; k < H; ++k) v += ly.w_hh[row * H + k] * w.h[l][size_t(k)];
        gates[row] = v;
      }
      for (int u = 0; u < H; ++u) {
        const double i = sigmoid(gates[size_t(u)]), f = sigmoid(gates[size_t(H + u)]),
                     g = std::tanh(gates[size_t(2 * H + u)]), o = sigmoid(gates[size_t(3 * H + u)]);
        w.c[l][size_t(u)] = f * w.c[l][size_t(u)] + i * g;
        w.h[l][size_t(u)] = o * std::tanh(w.c[l][size_t(u)]);
      }
      in = w.h[l];
    }
  }
  const Model& m_;
  const bool streaming_;
  const int W_;
  const CriticalStateLayout layout_;
  Control* control_;
  std::map<long long, Window> windows_;
  std::vector<float> state_;
  long long next_ = 0;
};

std::unique_ptr<Backend> fed_backend(const Model& m, Mode mode, int W, Precision p, ReferenceFeed::Control* control,
                                     CriticalStateLayout* seen = nullptr, int crit_cores = 0) {
  BackendOptions o;
  o.mode = mode;
  o.window = W;
  o.precision = p;
  o.gpu.timeout_us = 2000;
  if (crit_cores > 0) {
    CpuOptions c;
    c.crit_cores = crit_cores;
    o.cpu = c;
  }
  return make_cpu_backend_fed(m, o, "fedtest", [&, mode, W](const CriticalStateLayout& layout) {
    if (seen) *seen = layout;
    return std::make_unique<ReferenceFeed>(m, mode, W, layout, control);
  });
}

std::vector<double> reference_run(const Model& m, Mode mode, const std::vector<float>& x, size_t T, int W) {
  return mode == Mode::window ? reference::sliding_window(m, x, T, W) : reference::streaming(m, x, T);
}

// The golden cases in window and streaming mode, every precision the cpu has: the error against the float64
// reference within the precision's bound (the feed's state is float64, so only the critical step rounds).
TEST(CpuFed, GoldensWithinTheirBounds) {
  for (const std::string name : {"tiny", "small2x128", "multi_out"}) {
    const Golden g = load_golden(name);
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      // the float64 references once a case and mode (the slow part under emulation), for every run below
      const auto exact = reference_run(g.model, mode, g.inputs, g.ticks, g.window);
      const double int8_bound = int8_error_bound(
          reference::normalized_error(reference_run(int8_rounded(g.model), mode, g.inputs, g.ticks, g.window), exact));
      for (const bool early : {false, true})
      for (const Precision p : {Precision::fp32, Precision::bf16, Precision::int8}) {
        SCOPED_TRACE(name + " " + mode_name(mode) + " " + precision_name(p) + (early ? " input early" : ""));
        ReferenceFeed::Control control;
        control.early = early;
        auto b = fed_backend(g.model, mode, g.window, p, &control);
        EXPECT_EQ(b->name(), "fedtest");
        const auto z = run_ticks(*b, g.inputs, g.ticks);
        EXPECT_LE(reference::normalized_error(z, exact), p == Precision::int8 ? int8_bound : error_bound(p));
        EXPECT_EQ(control.consumed, (long long)g.ticks);  // every tick's input went to the feed
        const auto c = b->counters();
        EXPECT_EQ(c.at("precompute_workers"), 0);  // no CPU precompute beside a feed
        EXPECT_EQ(c.at("fed_late_ticks"), 0);
        EXPECT_EQ(c.at("fed_timeouts"), 0);
        EXPECT_NE(b->facts().at("cpu_precompute_cores").find("a float64 test feed"), std::string::npos);
      }
    }
  }
}

// Awkward shapes (padding units, one unit, window 1 and 2, three layers) and the layout the feed is told.
TEST(CpuFed, ShapesAndLayout) {
  struct Shape {
    int I, H, L, O, W;
  };
  for (const Shape s : {Shape{1, 1, 1, 1, 1}, Shape{3, 17, 3, 5, 2}, Shape{7, 65, 2, 3, 9}, Shape{33, 40, 1, 4, 7}}) {
    SCOPED_TRACE("I" + std::to_string(s.I) + " H" + std::to_string(s.H) + " L" + std::to_string(s.L) + " W" +
                 std::to_string(s.W));
    const Model m = test_support::random_model(s.I, s.H, s.L, s.O, true, true, 5);
    const size_t T = 3 * size_t(s.W) + 5;
    std::vector<float> x(T * size_t(s.I));
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    for (float& v : x) v = d(rng);
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      ReferenceFeed::Control control;
      CriticalStateLayout layout;
      auto b = fed_backend(m, mode, s.W, Precision::fp32, &control, &layout, 1);
      EXPECT_EQ(layout.layers, s.L);
      EXPECT_EQ(layout.hidden, s.H);
      EXPECT_EQ(layout.input, s.I);
      EXPECT_GE(layout.padded, s.H);
      EXPECT_EQ(layout.padded, layout.blocks * layout.lanes);
      EXPECT_EQ(layout.gate_floats, size_t(layout.blocks) * 4 * size_t(layout.lanes));
      EXPECT_GE(layout.layer_floats, layout.gate_floats + size_t(layout.padded));
      const auto z = run_ticks(*b, x, T);
      EXPECT_LE(reference::normalized_error(z, reference_run(m, mode, x, T, s.W)), error_bound(Precision::fp32));
      // reset: the same inputs give the same answers again
      b->reset();
      const auto again = run_ticks(*b, x, T);
      EXPECT_EQ(again, z);
      // over two cores (unpinned helpers), each part copies its own share of the state: the same answers
      if (util::allowed_cores().size() >= 2 && layout.blocks >= 2) {
        ReferenceFeed::Control control2;
        auto split = fed_backend(m, mode, s.W, Precision::fp32, &control2, nullptr, 2);
        EXPECT_EQ(run_ticks(*split, x, T), z) << "critical step over 2 cores";
      }
    }
  }
}

// A feed with no state for a tick: step() throws naming why, try_step() is false, and nothing is answered
// from the state of an earlier tick; the tick still counts as consumed.
TEST(CpuFed, NoStateNoAnswer) {
  const Golden g = load_golden("tiny");
  const int I = g.model.config.input_size, O = g.model.config.output_size;
  ReferenceFeed::Control control;
  auto b = fed_backend(g.model, Mode::window, g.window, Precision::fp32, &control);
  std::vector<float> out(size_t(O), -7.f);
  auto x = [&](size_t t) { return std::span<const float>(g.inputs.data() + t * size_t(I), size_t(I)); };
  b->step(x(0), out);
  b->step(x(1), out);  // step() brings the state for tick 1 itself when finish_precompute() was not called
  control.withhold_from = 2;
  std::string why;
  EXPECT_FALSE(b->try_finish_precompute(&why));
  EXPECT_NE(why.find("no state for tick 2"), std::string::npos) << why;
  std::fill(out.begin(), out.end(), -7.f);
  EXPECT_FALSE(b->try_step(x(2), out, &why));
  for (const float v : out) EXPECT_EQ(v, -7.f);  // nothing written
  EXPECT_EQ(b->ticks(), 3);
  try {
    b->step(x(3), out);
    ADD_FAILURE() << "a tick without its state was answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no state for tick 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b->counters().at("fed_timeouts"), 2);  // ticks 2 and 3: a tick that timed out is counted once
  // the producer back, after a reset: every tick answered again
  control.withhold_from = -1;
  b->reset();
  const auto z = run_ticks(*b, g.inputs, g.ticks);
  EXPECT_LE(reference::normalized_error(z, reference::sliding_window(g.model, g.inputs, g.ticks, g.window)),
            error_bound(Precision::fp32));
}

TEST(CpuFed, BatchModeAndHalfPrecisionAreRefused) {
  const Golden g = load_golden("tiny");
  ReferenceFeed::Control control;
  BackendOptions o;
  o.mode = Mode::batch;
  o.window = g.window;
  auto maker = [&](const CriticalStateLayout& layout) {
    return std::make_unique<ReferenceFeed>(g.model, Mode::window, g.window, layout, &control);
  };
  EXPECT_THROW(make_cpu_backend_fed(g.model, o, "fedtest", maker), UnsupportedError);
  o.mode = Mode::window;
  o.precision = Precision::fp16;
  EXPECT_THROW(make_cpu_backend_fed(g.model, o, "fedtest", maker), UnsupportedError);
}

}  // namespace
}  // namespace hotpath
