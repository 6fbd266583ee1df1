// What the swap tests on every backend share (test_swap.cpp, test_swap_gpu.cpp): an input series, a fresh
// engine's outputs over it, and a bitwise compare.
#pragma once
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "engine/engine.hpp"

namespace hotpath::test_support {

// `ticks` rows of I standard normal inputs.
inline std::vector<float> series(int ticks, int I, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(size_t(ticks) * I);
  for (float& v : x) v = n(rng);
  return x;
}

// Outputs of a fresh engine over ticks [from, to) of x, each row [O].
inline std::vector<float> fresh_run(const Model& m, const EngineOptions& o, const std::vector<float>& x, int from,
                                    int to) {
  Engine e(m, o);
  const int I = e.input_size(), O = e.output_size();
  std::vector<float> z(size_t(to - from) * O);
  e.run(std::span<const float>(x).subspan(size_t(from) * I, size_t(to - from) * I), size_t(to - from), z);
  return z;
}

inline bool same_bits(const float* a, const float* b, int n) {
  return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0;
}

}  // namespace hotpath::test_support
