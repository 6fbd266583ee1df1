// A random model with PyTorch-like weights (uniform in +-1/sqrt(H), each a float), shared by the
// backends' tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>

#include "model/model.hpp"

namespace hotpath::test_support {

inline Model random_model(int I, int H, int L, int O, bool bias, bool head_bias, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0 / std::sqrt(H), 1.0 / std::sqrt(H));
  auto f = [&] { return double(float(u(rng))); };
  Model m;
  m.config = {I, H, L, O, bias, head_bias, std::nullopt};
  m.name = "random";
  for (int l = 0; l < L; ++l) {
    LstmLayer w;
    const int in = l == 0 ? I : H;
    for (int k = 0; k < 4 * H * in; ++k) w.w_ih.push_back(f());
    for (int k = 0; k < 4 * H * H; ++k) w.w_hh.push_back(f());
    if (bias)
      for (int k = 0; k < 4 * H; ++k) w.b_ih.push_back(f()), w.b_hh.push_back(f());
    m.layers.push_back(w);
  }
  for (int k = 0; k < O * H; ++k) m.head_w.push_back(f());
  if (head_bias)
    for (int k = 0; k < O; ++k) m.head_b.push_back(f());
  return m;
}

}  // namespace hotpath::test_support
