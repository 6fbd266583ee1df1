// Seeded random numbers whose streams are the same on every platform and standard library.
// std::normal_distribution and std::gamma_distribution are implementation-defined, so a schedule or a
// synthetic data set drawn with them would differ between libstdc++ and libc++; these do not.
#pragma once
#include <cmath>
#include <cstdint>

namespace hotpath::util {

// SplitMix64: a one-line mixer, also used to hash (seed, index) into an independent stream.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 53 bits of a hash of (seed, index, salt). Stateless, so fault
// injection gives the same decisions for request k whatever order requests arrive in.
inline double hash_uniform(std::uint64_t seed, std::uint64_t index, std::uint64_t salt) {
  const std::uint64_t h = splitmix64(splitmix64(seed ^ (salt * 0xd1342543de82ef95ULL)) + index);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// xoshiro256** seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (int i = 0; i < 4; ++i) s_[i] = splitmix64(seed + static_cast<std::uint64_t>(i) * 0x632be59bd9b4e019ULL);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe under log().
  double uniform_pos() { return 1.0 - uniform(); }
  // Standard normal by the Box-Muller transform (one draw per call; the twin is discarded so the
  // stream position depends only on the number of calls).
  double normal() {
    const double u1 = uniform_pos();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  // Gamma(shape, scale=1) by Marsaglia and Tsang (2000); shape < 1 through the boost
  // Gamma(k) = Gamma(k + 1) * U^(1/k).
  double gamma(double shape) {
    if (shape < 1.0) {
      const double u = uniform_pos();
      return gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = 0.0;
      double v = 0.0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform_pos();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

}  // namespace hotpath::util
