// Input scaling, one definition for every backend (ref, cpu, cuda) and every checker: at tick t the
// LSTM sees x'_t = (x_t - m_t) * (1 / s_t), with (m_t, s_t)
//   none        0, 1
//   model       the model file's input_scaler.mean / .scale (fixed; fitted on data before the span used)
//   rolling:N   mean and population standard deviation of the raw inputs of ticks t-N .. t-1 (never
//               tick t itself, never a later one), in float64
// so no output depends on a later input. The statistics for tick t are prepared after tick t-1 was
// answered (prepare(), off the critical path); the critical step only does the fused (x - m) * (1/s)
// while copying x (scale()).
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace hotpath {

enum class ScalerKind { none, model, rolling };

struct ScalerChoice {
  ScalerKind kind = ScalerKind::none;
  int window = 0;  // rolling: N past ticks
  bool operator==(const ScalerChoice&) const = default;
};

// rolling:N keeps the last N raw inputs (N x I floats): N in 2..kMaxRollingWindow (a day of one-second
// ticks is 86,400), and the ring at most kMaxRollingBytes.
inline constexpr int kMaxRollingWindow = 1'000'000;
inline constexpr double kMaxRollingBytes = double(1ull << 30);

// "none" | "model" | "rolling:N"; throws hotpath::Error naming the value and the valid forms.
ScalerChoice parse_scaler(const std::string& text);
std::string scaler_name(const ScalerChoice& choice);
// The scaler in force: `choice`, else (unset) `model` when the model carries one and `none` otherwise.
// Throws hotpath::Error for `model` on a model without one, or a rolling ring over kMaxRollingBytes.
ScalerChoice resolve_scaler(const Model& model, const std::optional<ScalerChoice>& choice);

// One tick stream's scaler. Not thread-safe (one per backend, used by the thread that steps it).
class InputScaler {
 public:
  InputScaler(const Model& model, const std::optional<ScalerChoice>& choice);

  const ScalerChoice& choice() const { return choice_; }
  bool active() const { return choice_.kind != ScalerKind::none; }

  // The next tick's statistics as shift and multiplier: x' = (x - shift) * mul. [I] each.
  std::span<const double> shift() const { return shift_; }
  std::span<const double> mul() const { return mul_; }

  // out[i] = (x[i] - shift[i]) * mul[i] for the next tick (x unchanged with `none`), and x taken as that
  // tick's raw input (observe). Call only for a tick the backend accepted (no NaN/Inf). Computed in
  // float64 on the float paths too, then rounded once: a feature with a large level and a small spread
  // (1e4 +- 0.01) would lose most of its digits to a float shift.
  void scale(std::span<const float> x, float* out);
  void scale(std::span<const float> x, double* out);
  // Takes x as the next tick's raw input when the caller scales it itself (shift/mul).
  void observe(std::span<const float> x);
  // Brings the statistics up to date with every observed tick (the next tick's m, s). Cheap when there
  // is nothing new; scale()/observe() call it first if the caller did not.
  void prepare();
  // Forgets the history: the next tick is t = 0.
  void reset();

  // Backtest: S series of T ticks x [S, T, I] scaled into out (same size) as step() would scale each
  // series, the history starting over with every series (a rolling scaler's statistics for tick t come
  // from that series' ticks before t). Leaves the history at the end of the last series.
  void scale_series(std::span<const float> x, size_t series, size_t ticks, float* out);

  // Batch (fresh windows): the fixed scaler applied to every element of x into out (same size). Throws
  // hotpath::Error for rolling, which needs a tick stream.
  void scale_batch(std::span<const float> x, float* out) const;
  void scale_batch(std::span<const float> x, double* out) const;

 private:
  void set_stats();            // shift/mul from the running sums
  void recompute_sums();       // sums exactly from the ring, about the current mean (drift-free)
  void check_batch() const;

  ScalerChoice choice_;
  size_t I_ = 0;
  std::vector<double> shift_, mul_;
  // rolling: the ring of the last N raw inputs (slot = tick % N), the staged tick not yet in it, and per
  // feature sums of (x - k) and (x - k)^2 over the ring about a reference k (set at each recompute, so
  // the sums do not cancel catastrophically when the mean is large against the spread).
  std::vector<float> ring_, staged_;
  bool pending_ = false;
  long long count_ = 0;  // ticks in the history (including the ones that left the ring)
  std::vector<double> k_, s1_, s2_;
};

}  // namespace hotpath

namespace hotpath {

// `hotpath scaler fit`: mean and population standard deviation per feature of rows [0, rows) of a
// row-major [*, cols] array, in float64; only those rows are read. A feature whose deviation is
// negligible (the rolling scaler's rule) gets scale 1, and is listed in *constant. The caller checks
// that the rows are finite.
InputNormalization fit_normalization(std::span<const double> values, size_t rows, size_t cols,
                                     std::vector<size_t>* constant = nullptr);

}  // namespace hotpath
