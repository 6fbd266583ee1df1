// The float64 lockstep states on the GPU (cuda/lockstep_f64.hpp), against the host's FastF64 stepping
// each state alone: every gate row sums in the same order with the same roundings (no fused
// multiply-adds), so the states and heads differ only through the activations' last bits (CUDA's double
// exp and tanh against libm's): within 1e-12, relatively, after 60 steps. The states do not mix: a state
// stepped beside 36 others ends where it ends alone. reset() starts every state again from zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/random_model.hpp"
#include "cuda/device.hpp"
#include "cuda/lockstep_f64.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

using namespace hotpath;

namespace {

double rel(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

}  // namespace

TEST(CudaLockstepF64, StatesAndHeadsAreTheHostReferencesWithinTheActivationsUlps) {
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  struct Shape {
    int I, H, L, O;
    bool bias;
  };
  // odd sizes: H not a multiple of the 64-row tile, I = 1, a layer input wider than H, O > 1, no biases
  for (const Shape sh : {Shape{5, 24, 2, 2, true}, Shape{1, 65, 3, 3, true}, Shape{70, 33, 1, 1, false},
                         Shape{17, 130, 4, 5, true}}) {
    SCOPED_TRACE(std::to_string(sh.I) + "x" + std::to_string(sh.H) + "x" + std::to_string(sh.L) + "x" + std::to_string(sh.O));
    const Model m = test_support::random_model(sh.I, sh.H, sh.L, sh.O, sh.bias, sh.bias, 5 + uint64_t(sh.H));
    for (const int S : {1, 37, 130}) {
      auto gpu = cuda::make_lockstep_f64(m, S);
      ASSERT_EQ(gpu->states(), S);
      EXPECT_NE(gpu->where().find("gpu 0: "), std::string::npos) << gpu->where();
      const reference::FastF64 f64(m);
      std::vector<reference::LstmState> host(size_t(S), reference::LstmState(m.config));
      // before any step every state is zero
      const reference::LstmState zero = gpu->state(S - 1);
      for (const auto& h : zero.h) EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](double v) { return v == 0.0; }));
      std::vector<double> xs(size_t(S) * sh.I), z(size_t(S) * sh.O), zh(size_t(sh.O));
      double worst = 0;
      uint64_t seed = 99;
      for (int step = 0; step < 60; ++step) {
        for (auto& v : xs) {
          seed = seed * 6364136223846793005ull + 1442695040888963407ull;
          v = double(int64_t(seed >> 11) % 4001 - 2000) / 1000.0;  // [-2, 2]
        }
        gpu->step(xs.data());
        for (int s = 0; s < S; ++s) f64.step(std::span<const double>(xs.data() + size_t(s) * sh.I, size_t(sh.I)), host[size_t(s)]);
        if (step % 20 == 19) {
          gpu->heads(z.data());
          for (int s = 0; s < S; ++s) {
            f64.head(host[size_t(s)], zh);
            for (int o = 0; o < sh.O; ++o) worst = std::max(worst, rel(z[size_t(s) * sh.O + o], zh[size_t(o)]));
            const reference::LstmState st = gpu->state(s);
            for (int l = 0; l < sh.L; ++l)
              for (int j = 0; j < sh.H; ++j) {
                worst = std::max(worst, rel(st.h[size_t(l)][size_t(j)], host[size_t(s)].h[size_t(l)][size_t(j)]));
                worst = std::max(worst, rel(st.c[size_t(l)][size_t(j)], host[size_t(s)].c[size_t(l)][size_t(j)]));
              }
          }
        }
      }
      EXPECT_LE(worst, 1e-12) << S << " states";
      EXPECT_THROW(gpu->state(S), Error);
      // reset: every state zero again, and the next step is a fresh state's first
      gpu->reset();
      for (const auto& v : gpu->state(S / 2).c) EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double c) { return c == 0.0; }));
      gpu->step(xs.data());
      reference::LstmState fresh(m.config);
      f64.step(std::span<const double>(xs.data(), size_t(sh.I)), fresh);
      const reference::LstmState again = gpu->state(0);
      for (int j = 0; j < sh.H; ++j) EXPECT_LE(rel(again.h.back()[size_t(j)], fresh.h.back()[size_t(j)]), 1e-12);
    }
  }
}

// A state count outside 1 .. kMaxLockstepStates is refused by name before any device is touched (so this
// runs without a GPU too).
TEST(CudaLockstepF64, AStateCountOutsideItsRangeIsRefused) {
  const Model m = test_support::random_model(3, 8, 1, 1, true, true, 1);
  for (const int states : {0, -1, cuda::kMaxLockstepStates + 1}) {
    try {
      (void)cuda::make_lockstep_f64(m, states);
      ADD_FAILURE() << states << " states accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("takes 1 to " + std::to_string(cuda::kMaxLockstepStates) + " states, not " +
                                           std::to_string(states)),
                std::string::npos)
          << e.what();
    }
  }
}
