#include "scaling/input_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.hpp"
#include "util/number.hpp"

namespace hotpath {
namespace {

// A spread this small against the mean is a constant feature (or rounding noise): scale 1, so that a
// constant input is not blown up into noise.
bool negligible(double std, double mean) { return !(std > 1e-12 * std::max(1.0, std::abs(mean))); }

}  // namespace

ScalerChoice parse_scaler(const std::string& text) {
  auto bad = [&] {
    return Error("unknown scaler '" + text + "' (expected none, model or rolling:N with N in 2.." +
                 std::to_string(kMaxRollingWindow) + ")");
  };
  if (text == "none") return {ScalerKind::none, 0};
  if (text == "model") return {ScalerKind::model, 0};
  const std::string prefix = "rolling:";
  if (text.compare(0, prefix.size(), prefix) != 0) throw bad();
  const auto n = util::parse_int<int>(std::string_view(text).substr(prefix.size()));
  if (!n) throw bad();
  // A rolling scaler with N out of range is a known scaler with a bad N: say which bound.
  if (*n < 2 || *n > kMaxRollingWindow)
    throw Error("scaler '" + text + "': N must be " +
                (*n < 2 ? std::string(">= 2 (fewer ticks have no spread)") : "<= " + std::to_string(kMaxRollingWindow)) +
                " (rolling:N with N in 2.." + std::to_string(kMaxRollingWindow) + ")");
  return {ScalerKind::rolling, *n};
}

std::string scaler_name(const ScalerChoice& c) {
  switch (c.kind) {
    case ScalerKind::none: return "none";
    case ScalerKind::model: return "model";
    case ScalerKind::rolling: return "rolling:" + std::to_string(c.window);
  }
  return "?";
}

ScalerChoice resolve_scaler(const Model& model, const std::optional<ScalerChoice>& choice) {
  if (!choice) return {model.input_scaler ? ScalerKind::model : ScalerKind::none, 0};
  if (choice->kind == ScalerKind::model && !model.input_scaler)
    throw Error("scaler model: the model '" + model.name + "' carries no input scaler (tensors " + kScalerMeanKey +
                " and " + kScalerScaleKey + "; hotpath scaler fit writes them)");
  if (choice->kind == ScalerKind::rolling) {
    if (choice->window < 2 || choice->window > kMaxRollingWindow)
      throw Error("scaler rolling:" + std::to_string(choice->window) + ": N must be in 2.." +
                  std::to_string(kMaxRollingWindow));
    if (double(choice->window) * model.config.input_size * sizeof(float) > kMaxRollingBytes)
      throw Error("scaler rolling:" + std::to_string(choice->window) + " keeps " + std::to_string(choice->window) +
                  " x " + std::to_string(model.config.input_size) + " inputs, over the 1 GiB limit; use a shorter N");
  }
  return *choice;
}

InputScaler::InputScaler(const Model& model, const std::optional<ScalerChoice>& choice)
    : choice_(resolve_scaler(model, choice)), I_(size_t(model.config.input_size)) {
  shift_.assign(I_, 0.0);
  mul_.assign(I_, 1.0);
  if (choice_.kind == ScalerKind::model) {
    // Model::validate guarantees [I], finite, scale > 0.
    shift_ = model.input_scaler->mean;
    for (size_t i = 0; i < I_; ++i) mul_[i] = 1.0 / model.input_scaler->scale[i];
  }
  if (choice_.kind == ScalerKind::rolling) {
    ring_.assign(size_t(choice_.window) * I_, 0.0f);
    staged_.assign(I_, 0.0f);
    k_.assign(I_, 0.0);
    s1_.assign(I_, 0.0);
    s2_.assign(I_, 0.0);
  }
  set_stats();
}

void InputScaler::set_stats() {
  if (choice_.kind == ScalerKind::rolling) {
    const long long n = std::min<long long>(count_, choice_.window);
    for (size_t i = 0; i < I_; ++i) {
      if (n == 0) {
        shift_[i] = 0.0;
        mul_[i] = 1.0;
        continue;
      }
      const double d = s1_[i] / double(n);
      const double mean = k_[i] + d;
      shift_[i] = mean;
      mul_[i] = 1.0;
      if (n >= 2) {
        const double var = std::max(0.0, s2_[i] / double(n) - d * d);  // population variance
        const double std = std::sqrt(var);
        if (!negligible(std, mean)) mul_[i] = 1.0 / std;
      }
    }
  }
  for (size_t i = 0; i < I_; ++i) {
  }
}

void InputScaler::recompute_sums() {
  const long long n = std::min<long long>(count_, choice_.window);
  for (size_t i = 0; i < I_; ++i) {
    // The reference point: the current mean, summed exactly over the ring in slot order.
    double s = 0;
    for (long long r = 0; r < n; ++r) s += double(ring_[size_t(r) * I_ + i]);
    k_[i] = n > 0 ? s / double(n) : 0.0;
    double a = 0, b = 0;
    for (long long r = 0; r < n; ++r) {
      const double d = double(ring_[size_t(r) * I_ + i]) - k_[i];
      a += d;
      b += d * d;
    }
    s1_[i] = a;
    s2_[i] = b;
  }
}

void InputScaler::prepare() {
  if (!pending_) return;
  pending_ = false;
  const long long N = choice_.window;
  float* slot = ring_.data() + size_t(count_ % N) * I_;
  const bool full = count_ >= N;
  // Until the first restart, the sums are about the first tick (not 0: a level of 1e4 with a spread of
  // 1e-2 would cancel away in s2/n - d^2).
  if (count_ == 0)
    for (size_t i = 0; i < I_; ++i) k_[i] = double(staged_[i]);
  for (size_t i = 0; i < I_; ++i) {
    const double in = double(staged_[i]) - k_[i];
    s1_[i] += in;
    s2_[i] += in * in;
    if (full) {
      const double out = double(slot[i]) - k_[i];
      s1_[i] -= out;
      s2_[i] -= out * out;
    }
  }
  std::memcpy(slot, staged_.data(), I_ * sizeof(float));
  ++count_;
  // Every N ticks the sums start again from the ring: no drift, whatever the length of the stream.
  if (count_ % N == 0) recompute_sums();
  set_stats();
}

void InputScaler::observe(std::span<const float> x) {
  if (choice_.kind != ScalerKind::rolling) return;
  prepare();
  std::memcpy(staged_.data(), x.data(), I_ * sizeof(float));
  pending_ = true;
}

void InputScaler::scale(std::span<const float> x, float* out) {
  switch (choice_.kind) {
    case ScalerKind::none:
      std::memcpy(out, x.data(), I_ * sizeof(float));
      return;
    case ScalerKind::model:
      for (size_t i = 0; i < I_; ++i) out[i] = float((double(x[i]) - shift_[i]) * mul_[i]);
      return;
    case ScalerKind::rolling: {
      prepare();
      // One pass: the scaled copy for the step and the raw copy for the history.
      const double* s = shift_.data();
      const double* m = mul_.data();
      float* raw = staged_.data();
      for (size_t i = 0; i < I_; ++i) {
        raw[i] = x[i];
        out[i] = float((double(x[i]) - s[i]) * m[i]);
      }
      pending_ = true;
      return;
    }
  }
}

void InputScaler::scale(std::span<const float> x, double* out) {
  if (choice_.kind == ScalerKind::none) {
    for (size_t i = 0; i < I_; ++i) out[i] = double(x[i]);
    return;
  }
  observe(x);
  for (size_t i = 0; i < I_; ++i) out[i] = (double(x[i]) - shift_[i]) * mul_[i];
}

void InputScaler::reset() {
  if (choice_.kind != ScalerKind::rolling) return;
  pending_ = false;
  count_ = 0;
  std::fill(ring_.begin(), ring_.end(), 0.0f);
  std::fill(k_.begin(), k_.end(), 0.0);
  std::fill(s1_.begin(), s1_.end(), 0.0);
  std::fill(s2_.begin(), s2_.end(), 0.0);
  set_stats();
}

void InputScaler::check_batch() const {
  if (choice_.kind == ScalerKind::rolling)
    throw Error("scaler " + scaler_name(choice_) +
                " needs a tick stream; batch windows are independent (use --scaler none or model)");
}

void InputScaler::scale_series(std::span<const float> x, size_t series, size_t ticks, float* out) {
  for (size_t s = 0; s < series; ++s) {
    reset();
    for (size_t t = 0; t < ticks; ++t) scale(x.subspan((s * ticks + t) * I_, I_), out + (s * ticks + t) * I_);
  }
}

void InputScaler::scale_batch(std::span<const float> x, float* out) const {
  check_batch();
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t i = e % I_;
    out[e] = choice_.kind == ScalerKind::none ? x[e] : float((double(x[e]) - shift_[i]) * mul_[i]);
  }
}

void InputScaler::scale_batch(std::span<const float> x, double* out) const {
  check_batch();
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t i = e % I_;
    out[e] = (double(x[e]) - shift_[i]) * mul_[i];
  }
}

InputNormalization fit_normalization(std::span<const double> values, size_t rows, size_t cols,
                                     std::vector<size_t>* constant) {
  InputNormalization n;
  n.mean.assign(cols, 0.0);
  n.scale.assign(cols, 1.0);
  if (rows == 0) return n;
  // Two passes (mean, then squared deviations from it): no cancellation whatever the mean.
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < cols; ++i) n.mean[i] += values[r * cols + i];
  for (size_t i = 0; i < cols; ++i) n.mean[i] /= double(rows);
  std::vector<double> ss(cols, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < cols; ++i) {
      const double d = values[r * cols + i] - n.mean[i];
      ss[i] += d * d;
    }
  for (size_t i = 0; i < cols; ++i) {
    const double std = std::sqrt(ss[i] / double(rows));
    if (negligible(std, n.mean[i])) {
      if (constant) constant->push_back(i);
    } else {
      n.scale[i] = std;
    }
  }
  return n;
}

}  // namespace hotpath
