#include "backend/backend.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "util/error.hpp"

namespace hotpath {

double error_bound(Precision p) {
  switch (p) {
    // float64 against float64 (PyTorch's own float64 LSTM): only summation order differs.
    case Precision::fp64: return 1e-9;
    // float32 weights, sums and state: ~100x float32's 2^-24 over a few hundred chained sums and steps.
    case Precision::fp32: return 1e-5;
    // weights rounded to fp16 (2^-11): the golden cases move by up to ~4e-5 from that alone; ~7x margin.
    case Precision::fp16: return 3e-4;
    // weights rounded to bf16 (2^-8, 3 fewer mantissa bits): the golden cases move by up to ~4.2e-4; ~5x.
    case Precision::bf16: return 2e-3;
    case Precision::int8: return kInt8BoundCap;
  }
  return 0;
}

double int8_error_bound(double weight_rounding_error) {
  return std::min(std::max(kInt8BoundFactor * weight_rounding_error, error_bound(Precision::fp32)), kInt8BoundCap);
}

void check_window_state(const std::string& backend, long long window, double bytes) {
  if (window < 1 || window > kMaxWindow)
    throw Error(backend + " backend: window " + std::to_string(window) + " is outside 1.." + std::to_string(kMaxWindow));
  if (bytes > kMaxWindowStateBytes) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", bytes / double(1ull << 30));
    throw Error(backend + " backend: window " + std::to_string(window) + " needs " + gib +
                " GiB of window state, over the 1 GiB limit; use a shorter window");
  }
}

namespace {
// The first NaN or Inf of x, x.size() when there is none. Every value is looked at with bit operations
// and no exit, which the compiler vectorizes (a loop that stops at the first is not), then the first is
// looked for only when there is one: every tick's input passes through here before it is sent.
size_t first_non_finite(std::span<const float> x) {
  uint32_t bad = 0;
  for (const float v : x) bad |= uint32_t((std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
  if (!bad) return x.size();
  for (size_t k = 0; k < x.size(); ++k)
    if (!std::isfinite(x[k])) return k;
  return x.size();
}
}  // namespace

void Backend::check_tick_input(std::span<const float> x, long long tick) const {
  if (x.size() != size_t(config_.input_size))
    throw TickError("tick " + std::to_string(tick) + ": input has " + std::to_string(x.size()) +
                    " values, the model takes " + std::to_string(config_.input_size));
  if (const size_t k = first_non_finite(x); k < x.size())
    throw TickError("tick " + std::to_string(tick) + ": input value " + std::to_string(k) + " is " +
                    (std::isnan(x[k]) ? "NaN" : "Inf") + "; the tick was refused and the state left unchanged");
}

void Backend::check_batch_input(std::span<const float> x, size_t window) const {
  if (const size_t i = first_non_finite(x); i < x.size()) throw_batch_input_error(i, window);
}

void Backend::throw_batch_input_error(size_t k, size_t window) const {
  const size_t I = size_t(config_.input_size);
  throw TickError(name() + " backend: run_batch input of window " + std::to_string(k / (window * I)) + ", step " +
                  std::to_string(k / I % window) + " holds NaN or Inf");
}

void throw_backtest_input_error(size_t k, size_t ticks, size_t inputs, float value) {
  throw TickError("backtest input: series " + std::to_string(k / inputs / ticks) + ", tick " +
                  std::to_string(k / inputs % ticks) + ", input " + std::to_string(k % inputs) + " is " +
                  (std::isnan(value) ? "NaN" : "Inf") + "; nothing was computed");
}

void Backend::run_batch(std::span<const float>, size_t, size_t, std::span<float>) {
  throw UnsupportedError("backend " + name() + " does not run the batch workload");
}

void Backend::backtest_on_device(const float*, size_t, size_t, float*, std::atomic<size_t>*) {
  throw UnsupportedError(name() + " backend: arrays in GPU memory need the cuda backend (this one takes host arrays)");
}

void Backend::run_batch_on_device(const float*, size_t, size_t, float*) {
  throw UnsupportedError(name() + " backend: arrays in GPU memory need the cuda backend (this one takes host arrays)");
}

void Backend::backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                       std::atomic<size_t>* done) {
  const size_t I = size_t(config_.input_size), O = size_t(config_.output_size);
  std::vector<float> z(O);
  for (size_t s = 0; s < series && !out.stopped(); ++s) {
    reset();
    for (size_t t = 0; t < ticks && !out.stopped(); ++t) {
      const size_t row = s * ticks + t;
      step(x.subspan(row * I, I), z);
      finish_precompute();
      if (out.f32) {
        std::copy(z.begin(), z.end(), out.f32 + row * O);
      } else {
        const auto exact = last_output_f64();
        for (size_t o = 0; o < O; ++o) out.f64[row * O + o] = exact.empty() ? double(z[o]) : exact[o];
      }
      if (done) done->fetch_add(1, std::memory_order_relaxed);
    }
  }
  reset();
}

}  // namespace hotpath
