// FastF64's steps (step() is a batch of one): the gate sums of many independent states at once (the bench
// checker's windows), block by block of kRowBlock gate rows. A block's weights are one contiguous [k][16]
// stream: read from memory once for the batch (later groups of states find it in cache) and from there
// once for every group of up to eight states, whose 16 accumulators each stay in registers.
//
// Compiled without FMA contraction (CMakeLists.txt): every gate row's sum is the bias, then w_ih[r][k] x[k]
// for k = 0, 1, ..., then w_hh[r][k] h[k], a multiply and an add each, in one accumulator, whatever the
// vector width and the batch: the same bits for a state stepped alone or in any batch.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "reference/reference.hpp"

namespace hotpath::reference {
namespace {

static_assert(FastF64::kRowBlock == 16, "the kernels below hold a block as two vectors of eight");

// Eight doubles through any double pointer (8-byte alignment is enough). Macros, not functions: each clone
// below maps them onto its own registers.
typedef double d8 __attribute__((vector_size(64), aligned(8), may_alias));
#define LOAD8(p) (*reinterpret_cast<const d8*>(p))
#define STORE8(p, v) (*reinterpret_cast<d8*>(p) = (v))

#if defined(__x86_64__)
#define HOTPATH_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOTPATH_VECTOR_CLONES
#endif

// rows16_N: for N states, acc_s[0..16) += w[k][0..16) * v_s[k] for k = 0 .. n-1 in order, where w is one
// block ([n][16]), v_s = v + s * vstride, acc_s = acc + s * astride.
#define HOTPATH_DEFINE_ROWS16(N)                                                                                 \
  HOTPATH_VECTOR_CLONES void rows16_##N(const double* w, size_t n, const double* v, size_t vstride, double* acc, \
                                        size_t astride) {                                                       \
    d8 a[N][2];                                                                                                  \
    for (int s = 0; s < N; ++s) {                                                                                \
      a[s][0] = LOAD8(acc + s * astride);                                                                        \
      a[s][1] = LOAD8(acc + s * astride + 8);                                                                    \
    }                                                                                                            \
    for (size_t k = 0; k < n; ++k) {                                                                             \
      const d8 w0 = LOAD8(w + k * 16), w1 = LOAD8(w + k * 16 + 8);                                               \
      for (int s = 0; s < N; ++s) {                                                                              \
        const double x = v[s * vstride + k];                                                                     \
        a[s][0] += w0 * x;                                                                                       \
        a[s][1] += w1 * x;                                                                                       \
      }                                                                                                          \
    }                                                                                                            \
    for (int s = 0; s < N; ++s) {                                                                                \
      STORE8(acc + s * astride, a[s][0]);                                                                        \
      STORE8(acc + s * astride + 8, a[s][1]);                                                                    \
    }                                                                                                            \
  }
HOTPATH_DEFINE_ROWS16(1)
HOTPATH_DEFINE_ROWS16(2)
HOTPATH_DEFINE_ROWS16(4)
HOTPATH_DEFINE_ROWS16(8)

// For every block of a packed [blocks][n][16] matrix and `states` states (any number): their sums, states in
// groups of 8, 4, 2, 1.
// The columns k of a block are taken kColumnChunk at a time, every group of states over one piece before
// the next: eight states' inputs of a piece (8 KB) and its weights (16 KB) stay in L1 for all the groups,
// where a wide layer's whole rows (vollo_large: 960 columns, 61 KB of inputs for eight states) would not.
// Each row's sum still runs over k in order, its accumulator stored and loaded between pieces (exactly).
constexpr size_t kColumnChunk = 128;

void add_products(const double* w, size_t blocks, size_t n, const double* v, size_t vstride, size_t states,
                  double* acc, size_t astride) {
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t k0 = 0; k0 < n; k0 += kColumnChunk) {
      const size_t kn = std::min(kColumnChunk, n - k0);
      const double* wb = w + (b * n + k0) * 16;
      for (size_t s = 0; s < states;) {
        const size_t left = states - s;
        const double* vs = v + s * vstride + k0;
        double* as = acc + s * astride + b * 16;
        if (left >= 8) {
          rows16_8(wb, kn, vs, vstride, as, astride);
          s += 8;
        } else if (left >= 4) {
          rows16_4(wb, kn, vs, vstride, as, astride);
          s += 4;
        } else if (left >= 2) {
          rows16_2(wb, kn, vs, vstride, as, astride);
          s += 2;
        } else {
          rows16_1(wb, kn, vs, vstride, as, astride);
          s += 1;
        }
      }
    }
  }
}

}  // namespace

void FastF64::step_batch(std::span<const double* const> xs, std::span<LstmState* const> states) const {
  if (xs.size() != states.size()) throw std::invalid_argument("FastF64::step_batch: one input per state");
  const size_t n = states.size(), H = cfg_.hidden_size, I = cfg_.input_size;
  const size_t rows = blocks_ * kRowBlock, width = std::max(I, H);
  // Scratch on this call's frame: threads share one FastF64.
  std::vector<double> in(n * width), h(n * H), gates(n * rows);
  for (size_t s = 0; s < n; ++s) std::copy(xs[s], xs[s] + I, in.begin() + ptrdiff_t(s * width));
  size_t n_in = I;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    for (size_t s = 0; s < n; ++s) {
      std::copy(bias_[l].begin(), bias_[l].end(), gates.begin() + ptrdiff_t(s * rows));
      std::copy(states[s]->h[l].begin(), states[s]->h[l].end(), h.begin() + ptrdiff_t(s * H));
    }
    add_products(w_ih_b_[l].data(), blocks_, n_in, in.data(), width, n, gates.data(), rows);
    add_products(w_hh_b_[l].data(), blocks_, H, h.data(), H, n, gates.data(), rows);
    for (size_t s = 0; s < n; ++s) {
      LstmState& st = *states[s];
      const double* g = gates.data() + s * rows;
      for (size_t j = 0; j < H; ++j) {
        const double i = sigmoid(g[j]), f = sigmoid(g[H + j]), c = std::tanh(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
        st.c[l][j] = f * st.c[l][j] + i * c;
        st.h[l][j] = o * std::tanh(st.c[l][j]);
        in[s * width + j] = st.h[l][j];
      }
    }
    n_in = H;
  }
}

}  // namespace hotpath::reference
