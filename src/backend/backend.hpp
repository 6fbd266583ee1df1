// One interface for every backend (ref, cpu, cuda). A backend is created for a model, a workload and
// options, takes tick inputs and returns outputs. The critical step (step) is kept apart from the
// precompute (finish_precompute) so the benchmark can keep precompute off the critical path
// (docs/model.md, "The critical step and the precompute").
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/options.hpp"
#include "model/model.hpp"

namespace hotpath {

// The bounds on max|z - z_ref| / max(1, max|z_ref|) with fp32 accumulation and state (docs/model.md,
// "The error measure and its bounds"). int8's bound is per model (int8_error_bound); here it is that
// bound's cap.
double error_bound(Precision p);
// int8: 1.5 x the error that float64 arithmetic with the int8-rounded weights alone
// (model/quantize.hpp) makes on the same inputs, and never above 2e-3. The 1.5 leaves room for the
// per-tick activation rounding and fp32 state on top of the weight rounding, and no more. Where the
// rounding moves nothing (weights int8 holds exactly: a 1-column row) the fp32 bound is the floor:
// fp32 state and accumulation are all that is left.
inline constexpr double kInt8BoundFactor = 1.5;
inline constexpr double kInt8BoundCap = 2e-3;
double int8_error_bound(double weight_rounding_error);
// True where the bound depends on the model and inputs (int8): verify and bench then measure it.
inline bool bound_is_per_model(Precision p) { return p == Precision::int8; }

// The longest window any command accepts is model.hpp's kMaxWindow (one limit for --window and for a
// model's or golden file's metadata). Window state (the W open windows) a backend may allocate.
inline constexpr double kMaxWindowStateBytes = double(1ull << 30);
// Backends call this before allocating their window state: throws hotpath::Error naming the window, its
// limit and the memory it would take when the window is outside 1..kMaxWindow or `bytes` exceeds
// kMaxWindowStateBytes.
void check_window_state(const std::string& backend, long long window, double bytes);

// The TickError a backtest's input gets for `value` (NaN or Inf) at index k of x [S, ticks, inputs]: its
// series, tick and input named, and that nothing was computed.
[[noreturn]] void throw_backtest_input_error(size_t k, size_t ticks, size_t inputs, float value);

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;     // "ref", "cpu", "cuda", "hybrid"
  virtual std::string variant() const = 0;  // e.g. "avx512-bf16", "persistent-1block"
  virtual Precision precision() const = 0;

  const ModelConfig& config() const { return config_; }
  const BackendOptions& options() const { return options_; }

  // The critical step of the next tick: on return out[0..O) holds z_t. A tick whose input holds NaN or
  // Inf throws hotpath::TickError naming the tick, and leaves state and windows exactly as before.
  // Call finish_precompute() before the next step().
  virtual void step(std::span<const float> x, std::span<float> out) = 0;
  // The critical step of a backend that can be late (cuda: no answer within timeout_us, or its kernel
  // stopped): false, with *why saying why, instead of throwing; the tick still counts as consumed and
  // the backend carries on (or keeps failing) from there. A bad input still throws TickError. The
  // engine's fallback wrapper answers from a shadow backend on false. Default: step(), true.
  virtual bool try_step(std::span<const float> x, std::span<float> out, std::string* why) {
    (void)why;
    step(x, out);
    return true;
  }
  // Brings state up to date for the next tick: the open windows consume x_t (window mode), or W_hh·h+b
  // is prepared (streaming). Backends with background workers only wait for them here.
  virtual void finish_precompute() = 0;
  // finish_precompute() that returns false (with *why) when a backend that can be late is not ready in
  // time; the next try_step() then answers late or not at all. Default: finish_precompute(), true.
  virtual bool try_finish_precompute(std::string* why) {
    (void)why;
    finish_precompute();
    return true;
  }
  // Forget all state: the next tick is t = 0.
  virtual void reset() = 0;
  // step() then finish_precompute().
  void process(std::span<const float> x, std::span<float> out) {
    step(x, out);
    finish_precompute();
  }
  // Backends that compute in float64 (ref) also expose the last output unrounded; others return empty.
  virtual std::span<const double> last_output_f64() const { return {}; }
  // Ticks consumed since the last reset.
  virtual long long ticks() const = 0;

  // Batch workload: x [B, W, I] row-major -> out [B, O], every window from zero state.
  virtual void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out);

  // Backtest workload (docs/model.md, "Backtests"): x [S, T, I] row-major -> out [S, T, O], every series
  // from zero state, by the backend's mode (window: the window rule with its W, the first W-1 outputs
  // from the partial windows that start at tick 0; streaming: the streaming rule). Exactly one of
  // out.f32, out.f64 is set. The engine has checked the sizes and that every input is finite; the backend
  // scales as step() would, a rolling scaler starting over with each series. `done` (may be null) is
  // advanced by the outputs rows ([O] each) finished, for a progress display on another thread. Leaves
  // the tick state reset. `stop` (may be null), set by another thread, ends the backtest early: the ref
  // and cpu backends look at it before every step and return with the outputs incomplete (still reset);
  // cuda runs to the end. Default: step() over each series in turn (exact float64 outputs where
  // last_output_f64 has them).
  struct BacktestOutput {
    float* f32 = nullptr;
    double* f64 = nullptr;
    const std::atomic<bool>* stop = nullptr;
    bool stopped() const { return stop && stop->load(std::memory_order_relaxed); }
  };
  virtual void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                        std::atomic<size_t>* done);

  // The backtest and batch workloads with their arrays in the memory of the backend's GPU, float32: x
  // [S, T, I] -> out [S, T, O] (as backtest, leaving the tick state reset), x [B, W, I] -> out [B, O] (as
  // run_batch). The cuda backend's throughput path copies them on the device, never through the host. The
  // engine has checked that both are memory of that GPU and hold the sizes; the backend checks the inputs
  // (a NaN/Inf is named as the host calls name it, nothing computed). Device arrays must be ready when the
  // call starts (work on them finished, or queued on the legacy default stream); the outputs are complete
  // when it returns. Default: UnsupportedError (host arrays only).
  virtual void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done);
  virtual void run_batch_on_device(const float* x, size_t batch, size_t window, float* out);

  // Counters worth reporting (e.g. "fallback_answers", "late_gpu_answers"), name -> value.
  virtual std::map<std::string, double> counters() const { return {}; }
  // Puts counters() back to what a new backend reports: the engine's warm-up (engine/warm.hpp) calls it
  // after reset(), so that its synthetic ticks are not counted. Default: no counters to clear.
  virtual void clear_counters() {}
  // Free-form facts for the report (e.g. "sm_clock_mhz", "gpu_name"), name -> value.
  virtual std::map<std::string, std::string> facts() const { return {}; }
  // A backend made with BackendOptions::staging_cores (a live swap's new model, made beside the serving
  // one) moves its own threads onto their cpuset cores: called once it serves and the old backend is gone.
  // Any thread, while another steps. Default: no threads of its own to move.
  virtual void settle_threads() {}

 protected:
  Backend(const ModelConfig& config, const BackendOptions& options) : config_(config), options_(options) {}
  // Throws TickError if x has the wrong length or holds NaN/Inf; `tick` is named in the message.
  void check_tick_input(std::span<const float> x, long long tick) const;
  // Throws TickError naming the window and step of the first NaN/Inf of fresh windows x [B, window, I].
  void check_batch_input(std::span<const float> x, size_t window) const;
  // The same TickError for the NaN/Inf at index k of x [B, window, I].
  [[noreturn]] void throw_batch_input_error(size_t k, size_t window) const;

 private:
  ModelConfig config_;
  BackendOptions options_;
};

// The registry of backends (make_backend, built_backends) is the engine layer's: src/engine/engine.hpp.

}  // namespace hotpath
