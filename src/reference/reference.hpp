// The float64 reference (docs/model.md, "The error measure and its bounds"): the truth every backend is
// checked against. Kept obviously correct rather than fast: plain loops, libm sigmoid/tanh, every sliding
// window recomputed from zero state.
#pragma once
#include <cmath>
#include <span>
#include <vector>

#include "model/model.hpp"

namespace hotpath::reference {

// The logistic function of every float64 path here (lstm_step, FastF64, SplitF64): libm's exp, one
// definition, so all of them round it alike.
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// h and c of every layer, each [L][H].
struct LstmState {
  std::vector<std::vector<double>> h, c;
  explicit LstmState(const ModelConfig& cfg);
  void clear();
};

// One LSTM time step of all layers on input x (I values); returns nothing, updates state.
void lstm_step(const Model& m, std::span<const double> x, LstmState& state);
// The head applied to the last layer's h: O values.
std::vector<double> head(const Model& m, const LstmState& state);

// inputs [T, I] row-major. Outputs [T, O]: at tick t, the window x_{max(0,t-W+1)} .. x_t from zero state.
std::vector<double> sliding_window(const Model& m, std::span<const float> inputs, size_t ticks, int window);
// inputs [T, I] -> [T, O], state carried from t = 0.
std::vector<double> streaming(const Model& m, std::span<const float> inputs, size_t ticks);
// inputs [B, W, I] -> [B, O], each window from zero state.
std::vector<double> batch(const Model& m, std::span<const float> inputs, size_t batch, size_t window);
// The same on float64 inputs (e.g. scaled by an InputScaler).
std::vector<double> batch(const Model& m, std::span<const double> inputs, size_t batch, size_t window);

// Incremental float64 sliding window / streaming, one tick at a time (for checking long benchmark runs):
// keeps the W-1 open windows, so each tick costs W LSTM steps instead of recomputing W^2.
class Incremental {
 public:
  Incremental(const Model& m, bool streaming, int window);
  std::vector<double> tick(std::span<const float> x);  // z_t, O values
  std::vector<double> tick(std::span<const double> x);  // the same on a float64 input (e.g. scaled)
  void reset();

 private:
  const Model& model_;
  bool streaming_;
  int window_;
  long long t_ = 0;
  std::vector<LstmState> open_;  // ring of W window states, slot = start % W
};

// The error measure (docs/model.md): max |z - z_ref| / max(1, max |z_ref|). Sizes must match.
double normalized_error(std::span<const double> z, std::span<const double> z_ref);

}  // namespace hotpath::reference

namespace hotpath::reference {

// A float64 LSTM for checking long benchmark runs: the same arithmetic as lstm_step in float64, with
// the weights packed in blocks of gate rows so that the inner loops vectorise without reassociating any
// sum (each gate row keeps its own accumulator: the bias, then w_ih[r][k] x[k] for k = 0, 1, ..., then
// w_hh[r][k] h[k], a multiply and an add each). Only the summation order differs from lstm_step, so the
// two agree to float64 rounding (tested to 1e-12).
// Const member functions are safe to call from several threads at once (the checker's threads share one).
class FastF64 {
 public:
  explicit FastF64(const Model& m);
  void step(std::span<const float> x, LstmState& state) const;
  void step(std::span<const double> x, LstmState& state) const;  // a float64 input (e.g. scaled)
  // One step of each of several independent states, state s on input xs[s] (I values): the same bits as
  // step() on each (batch_f64.cpp; step() is a batch of one), each block of weights read from memory once
  // for the whole batch and from registers' reach once for every eight states.
  void step_batch(std::span<const double* const> xs, std::span<LstmState* const> states) const;
  void head(const LstmState& state, std::span<double> z) const;
  const ModelConfig& config() const { return cfg_; }

  // Gate rows a block of the packed weights holds (batch_f64.cpp).
  static constexpr size_t kRowBlock = 16;

 private:
  ModelConfig cfg_;
  size_t blocks_ = 0;                                 // ceil(4H / kRowBlock)
  std::vector<std::vector<double>> w_ih_b_, w_hh_b_;  // [blocks][in][kRowBlock], [blocks][H][kRowBlock]
  std::vector<std::vector<double>> bias_;             // [blocks * kRowBlock]: b_ih + b_hh, zero past 4H
  std::vector<double> head_w_, head_b_;
};

}  // namespace hotpath::reference
