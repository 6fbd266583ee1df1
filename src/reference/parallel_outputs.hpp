// Float64 reference outputs for many ticks, computed on every core: a sliding window only depends on
// the last W inputs, so ticks [a, b) are exact from an Incremental started W-1 ticks before a. For the
// GPU tests and sweeps, which check long runs of ticks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "reference/reference.hpp"

namespace hotpath::reference {

// Inputs that vary every tick (standard normal), reproducible from the seed.
inline std::vector<float> normal_inputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<double> outputs_on_every_core(const Model& m, bool streaming, int window, const std::vector<float>& xs,
                                             size_t ticks) {
  const int I = m.config.input_size, O = m.config.output_size;
  std::vector<double> z(ticks * O);
  auto run = [&](size_t a, size_t b) {
    const size_t from = streaming ? 0 : (a >= size_t(window - 1) ? a - (window - 1) : 0);
    Incremental ref(m, streaming, window);
    for (size_t t = from; t < b; ++t) {
      const auto out = ref.tick(std::span<const float>(&xs[t * I], I));
      if (t >= a) std::copy(out.begin(), out.end(), z.begin() + t * O);
    }
  };
  const size_t threads = streaming ? 1 : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t i = 0; i < threads; ++i) {
    const size_t a = ticks * i / threads, b = ticks * (i + 1) / threads;
    if (a < b) pool.emplace_back(run, a, b);
  }
  for (auto& t : pool) t.join();
  return z;
}

}  // namespace hotpath::reference
