#include "reference/reference.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace hotpath::reference {
namespace {

std::vector<double> to_double(std::span<const float> x) { return {x.begin(), x.end()}; }

}  // namespace

LstmState::LstmState(const ModelConfig& cfg)
    : h(cfg.num_layers, std::vector<double>(cfg.hidden_size, 0.0)),
      c(cfg.num_layers, std::vector<double>(cfg.hidden_size, 0.0)) {}

void LstmState::clear() {
  for (auto& v : h) std::fill(v.begin(), v.end(), 0.0);
  for (auto& v : c) std::fill(v.begin(), v.end(), 0.0);
}

void lstm_step(const Model& m, std::span<const double> x, LstmState& state) {
  const int H = m.config.hidden_size;
  std::vector<double> in(x.begin(), x.end());
  std::vector<double> gates(4 * size_t(H));
  for (int l = 0; l < m.config.num_layers; ++l) {
    const LstmLayer& w = m.layers[l];
    const size_t n_in = in.size();
    assert(n_in == size_t(m.config.layer_input_size(l)));
    for (size_t r = 0; r < gates.size(); ++r) {
      double s = w.b_ih.empty() ? 0.0 : w.b_ih[r] + w.b_hh[r];
      for (size_t k = 0; k < n_in; ++k) s += w.w_ih[r * n_in + k] * in[k];
      for (int k = 0; k < H; ++k) s += w.w_hh[r * H + k] * state.h[l][k];
      gates[r] = s;
    }
    // PyTorch gate order: i, f, g, o.
    for (int j = 0; j < H; ++j) {
      const double i = sigmoid(gates[j]);
      const double f = sigmoid(gates[H + j]);
      const double g = std::tanh(gates[2 * H + j]);
      const double o = sigmoid(gates[3 * H + j]);
      state.c[l][j] = f * state.c[l][j] + i * g;
      state.h[l][j] = o * std::tanh(state.c[l][j]);
    }
    in = state.h[l];
  }
}

std::vector<double> head(const Model& m, const LstmState& state) {
  const int H = m.config.hidden_size;
  const auto& h = state.h.back();
  std::vector<double> z(m.config.output_size);
  for (int o = 0; o < m.config.output_size; ++o) {
    double s = m.head_b.empty() ? 0.0 : m.head_b[o];
    for (int k = 0; k < H; ++k) s += m.head_w[size_t(o) * H + k] * h[k];
    z[o] = s;
  }
  return z;
}

std::vector<double> sliding_window(const Model& m, std::span<const float> inputs, size_t ticks, int window) {
  const size_t I = m.config.input_size, O = m.config.output_size;
  assert(inputs.size() == ticks * I && window >= 1);
  std::vector<double> out(ticks * O);
  LstmState state(m.config);
  for (size_t t = 0; t < ticks; ++t) {
    // Every window from zero state: the plain definition, O(T * W) steps.
    state.clear();
    const size_t start = t + 1 >= size_t(window) ? t + 1 - window : 0;
    for (size_t s = start; s <= t; ++s) lstm_step(m, to_double(inputs.subspan(s * I, I)), state);
    const auto z = head(m, state);
    std::copy(z.begin(), z.end(), out.begin() + t * O);
  }
  return out;
}

std::vector<double> streaming(const Model& m, std::span<const float> inputs, size_t ticks) {
  const size_t I = m.config.input_size, O = m.config.output_size;
  assert(inputs.size() == ticks * I);
  std::vector<double> out(ticks * O);
  LstmState state(m.config);
  for (size_t t = 0; t < ticks; ++t) {
    lstm_step(m, to_double(inputs.subspan(t * I, I)), state);
    const auto z = head(m, state);
    std::copy(z.begin(), z.end(), out.begin() + t * O);
  }
  return out;
}

std::vector<double> batch(const Model& m, std::span<const float> inputs, size_t batch_size, size_t window) {
  return batch(m, std::span<const double>(to_double(inputs)), batch_size, window);
}

std::vector<double> batch(const Model& m, std::span<const double> inputs, size_t batch, size_t window) {
  const size_t I = m.config.input_size, O = m.config.output_size;
  assert(inputs.size() == batch * window * I);
  std::vector<double> out(batch * O);
  LstmState state(m.config);
  for (size_t b = 0; b < batch; ++b) {
    state.clear();
    for (size_t s = 0; s < window; ++s) lstm_step(m, inputs.subspan((b * window + s) * I, I), state);
    const auto z = head(m, state);
    std::copy(z.begin(), z.end(), out.begin() + b * O);
  }
  return out;
}

Incremental::Incremental(const Model& m, bool streaming, int window)
    : model_(m), streaming_(streaming), window_(streaming ? 1 : window) {
  assert(window_ >= 1);
  open_.assign(streaming_ ? 1 : window_, LstmState(m.config));
}

void Incremental::reset() {
  t_ = 0;
  for (auto& s : open_) s.clear();
}

std::vector<double> Incremental::tick(std::span<const float> x) {
  const auto xd = to_double(x);
  return tick(std::span<const double>(xd));
}

std::vector<double> Incremental::tick(std::span<const double> xd) {
  if (streaming_) {
    lstm_step(model_, xd, open_[0]);
    ++t_;
    return head(model_, open_[0]);
  }
  // Slot s % W holds the window starting at s. Windows starting at max(0, t-W+1) .. t consume x_t; the
  // one starting at t begins from zero state; the oldest is complete and gives z_t.
  const long long W = window_;
  const long long oldest = std::max(0LL, t_ - W + 1);
  open_[t_ % W].clear();
  for (long long s = oldest; s <= t_; ++s) lstm_step(model_, xd, open_[s % W]);
  auto z = head(model_, open_[oldest % W]);
  ++t_;
  return z;
}

double normalized_error(std::span<const double> z, std::span<const double> z_ref) {
  assert(z.size() == z_ref.size());
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t k = 0; k < z.size(); ++k) {
    const double d = std::abs(z[k] - z_ref[k]);
    if (std::isnan(d)) return INFINITY;  // a NaN output is never within any bound
    max_diff = std::max(max_diff, d);
    max_ref = std::max(max_ref, std::abs(z_ref[k]));
  }
  return max_diff / std::max(1.0, max_ref);
}

}  // namespace hotpath::reference

namespace hotpath::reference {

FastF64::FastF64(const Model& m) : cfg_(m.config), head_w_(m.head_w), head_b_(m.head_b) {
  const size_t G = 4 * size_t(cfg_.hidden_size), H = cfg_.hidden_size;
  blocks_ = (G + kRowBlock - 1) / kRowBlock;
  // [block][k][kRowBlock]: block b's rows b*kRowBlock + j for j < kRowBlock (zero past G), k-major, so one
  // block's sums read one contiguous stream
  auto pack = [&](const std::vector<double>& w, size_t in) {
    std::vector<double> p(blocks_ * in * kRowBlock, 0.0);
    for (size_t r = 0; r < G; ++r)
      for (size_t k = 0; k < in; ++k) p[((r / kRowBlock) * in + k) * kRowBlock + r % kRowBlock] = w[r * in + k];
    return p;
  };
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const LstmLayer& w = m.layers[l];
    w_ih_b_.push_back(pack(w.w_ih, cfg_.layer_input_size(l)));
    w_hh_b_.push_back(pack(w.w_hh, H));
    std::vector<double> bias = w.bias_sum(cfg_.hidden_size);
    bias.resize(blocks_ * kRowBlock, 0.0);
    bias_.push_back(std::move(bias));
  }
}

void FastF64::step(std::span<const float> x, LstmState& state) const {
  std::vector<double> xd(x.begin(), x.end());
  step(std::span<const double>(xd), state);
}

void FastF64::step(std::span<const double> x, LstmState& state) const {
  const double* xs[1] = {x.data()};
  LstmState* states[1] = {&state};
  step_batch(xs, states);
}

void FastF64::head(const LstmState& state, std::span<double> z) const {
  const size_t H = cfg_.hidden_size;
  const auto& h = state.h.back();
  for (int o = 0; o < cfg_.output_size; ++o) {
    double s = head_b_.empty() ? 0.0 : head_b_[o];
    for (size_t k = 0; k < H; ++k) s += head_w_[o * H + k] * h[k];
    z[o] = s;
  }
}

}  // namespace hotpath::reference
