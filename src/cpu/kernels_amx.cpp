// The matrix products of the precompute and the throughput path on AMX tiles: bf16 (TDPBF16PS) for the
// AVX-512 pair-dot table, with the same packed weights, the same rounding of the activations to bf16, fp32
// accumulation; and int8 (TDPBSSD/TDPBUSD, below) on the critical step's int8 weights. Compiled with
// -mamx-tile -mamx-bf16 -mamx-int8 and the AVX-512 flags; called only when the CPU has AMX-BF16 / AMX-INT8
// and the kernel granted its tile data (arch::IsaFlags::amx_bf16, amx_int8).
//
// One product: C [n columns][16 units] += A [n columns][32 k] x B [32 k][16 units]. A is the columns'
// activations, rounded to bf16 pairs into the scratch, one row a column; B is one gate of one block of the
// packed weights (kernels.hpp's bf16 layout: per block [ceil(K/2)][4][16] pairs), 16 k-pairs of one gate
// being 16 rows 256 bytes apart, which a strided tile load reads in place. Tiles 0-3 accumulate the four
// gates of a block; 4/5 are A and B for whole 16-pair steps of k, 6/7 for the last, shorter one. A call
// cuts its columns into groups of at most 16 of even sizes (49: 13, 12, 12, 12) rather than 16, 16, 16
// and a leftover: a tile product costs nearly the same with 12 rows as with 16 (9.5 ns with 8 rows, 12.7
// with 16 on the development VM), while a leftover column on the vector kernel read every weight again
// (lstm_m's 49 open windows: 25 -> 22 us a product of 16 blocks there). Fewer than kAmxMinCols columns
// in all go to the vector kernel, on which one tile row of sixteen would do more work than it saves.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"

namespace hotpath::cpu {
namespace {

constexpr int kRows = kAmxTileRows;  // columns of the product a tile holds (its rows)
constexpr int kPairs = 16;           // k-pairs a tile step takes (64 bytes of bf16 a row)
constexpr int kAmxMinCols = 4;
constexpr int kL = 16;                   // units of a block (the AVX-512 table's lanes)
constexpr size_t kBStride = 4 * kL * 4;  // bytes between a gate's B rows (4 gates x 16 words)

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// n rows of A and C; `tail` k-pairs in the last, shorter k step (0: none).
void configure(int n, int tail) {
  TileConfig c;
  for (int t = 0; t < 4; ++t) c.colsb[t] = 64, c.rows[t] = uint8_t(n);  // C: n x 16 floats
  c.colsb[4] = 64, c.rows[4] = uint8_t(n);                               // A: n x 16 pairs
  c.colsb[5] = 64, c.rows[5] = kPairs;                                   // B: 16 pairs x 16 units
  if (tail > 0) {
    c.colsb[6] = uint16_t(4 * tail), c.rows[6] = uint8_t(n);  // A: n x tail pairs
    c.colsb[7] = 64, c.rows[7] = uint8_t(tail);               // B: tail pairs x 16 units
  }
  _tile_loadconfig(&c);
}

// x (kdim floats) as bf16 pairs, round to nearest even (vcvtne2ps2bf16, as the pair-dot kernels), zero to
// `words` pairs.
void to_pairs(const float* x, int kdim, uint32_t* out, int words) {
  for (int k = 0; k < 2 * words; k += 32, out += 16) {
    const int left = kdim - k;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1u);
    const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(m0, x + k);
    const __m512 b = _mm512_maskz_loadu_ps(m1, x + k + 16);
    _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
}

// One k step of a block's four gates: A (into tile TA) once, then each gate's B (into TB) and its product
// into that gate's accumulator, tiles 0-3. The B rows of one gate are 4 gates x 16 units of pairs apart.
// A macro, not a template: the tile intrinsics paste their tile numbers into the assembly as literals.
#define HOTPATH_AMX_GATES_STEP(TA, TB, a, a_stride, w)   \
  do {                                                   \
    constexpr size_t b_stride_ = 4 * 16 * 4;             \
    _tile_loadd(TA, (a), (a_stride));                    \
    _tile_loadd(TB, (w), b_stride_);                     \
    _tile_dpbf16ps(0, TA, TB);                           \
    _tile_loadd(TB, (w) + 16, b_stride_);                \
    _tile_dpbf16ps(1, TA, TB);                           \
    _tile_loadd(TB, (w) + 32, b_stride_);                \
    _tile_dpbf16ps(2, TA, TB);                           \
    _tile_loadd(TB, (w) + 48, b_stride_);                \
    _tile_dpbf16ps(3, TA, TB);                           \
  } while (0)

// Columns [c0, c0 + n) of the product, n <= 16, blocks [b0, b1).
void gemm_rows(const uint32_t* W, int kdim, int b0, int b1, int n, const float* const* X, const float* const* add,
               float* const* out, uint32_t* scratch) {
  constexpr int L = 16;
  const int nkp = (kdim + 1) / 2, full = nkp / kPairs, tail = nkp % kPairs;
  const int row_words = (full + (tail > 0)) * kPairs;  // A's row: whole steps of pairs, zero padded
  const long bstride = bf16_block_words(kdim, L);
  uint32_t* a = scratch;
  alignas(64) float cbuf[kRows * 4 * L];  // the block's gates, [column][gate][unit]
  for (int r = 0; r < n; ++r) to_pairs(X[r], kdim, a + r * row_words, row_words);
  configure(n, tail);
  const size_t a_stride = size_t(row_words) * 4;  // bytes between A's rows
  for (int b = b0; b < b1; ++b) {
    const uint32_t* w = W + b * bstride;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int s = 0; s < full; ++s) HOTPATH_AMX_GATES_STEP(4, 5, a + s * kPairs, a_stride, w + long(s) * kPairs * 4 * L);
    if (tail > 0) HOTPATH_AMX_GATES_STEP(6, 7, a + full * kPairs, a_stride, w + long(full) * kPairs * 4 * L);
    _tile_stored(0, cbuf, 4 * L * 4);
    _tile_stored(1, cbuf + L, 4 * L * 4);
    _tile_stored(2, cbuf + 2 * L, 4 * L * 4);
    _tile_stored(3, cbuf + 3 * L, 4 * L * 4);
    const int o = b * 4 * L;
    for (int r = 0; r < n; ++r)
      for (int g = 0; g < 4; ++g) {
        __m512 v = _mm512_load_ps(cbuf + r * 4 * L + g * L);
        if (add[r]) v = _mm512_add_ps(v, _mm512_loadu_ps(add[r] + o + g * L));
        _mm512_storeu_ps(out[r] + o + g * L, v);
      }
  }
}

#undef HOTPATH_AMX_GATES_STEP

const KernelTable* vector_table() { return kernels_avx512(true); }

// `ncols` columns cut into groups of at most a tile's rows, of even sizes (49: 13, 12, 12, 12):
// run(first column, columns) for each, in order; then the tiles released (no tile state left for the
// scheduler to save).
template <class Run>
void in_groups(int ncols, Run run) {
  const int groups = (ncols + kRows - 1) / kRows, base = ncols / groups, extra = ncols % groups;
  for (int g = 0, c = 0; g < groups; ++g) {
    const int n = base + (g < extra ? 1 : 0);
    run(c, n);
    c += n;
  }
  _tile_release();
}

// Each group of columns over all the blocks. Unlike the vector kernels, the weights are not taken a chunk
// at a time: a group's activations are converted to bf16 once a pass, and a 32 KB chunk (one block of
// lstm_m) would convert them again for every block (lstm_m's bf16 backtest on the VM: 5,534-5,661 windows/s
// with one pass a group, 4,432-4,526 with chunks).
void gemm_bf16_amx(const uint32_t* W, int kdim, int b0, int b1, int ncols, const float* const* X,
                   const float* const* add, float* const* out, uint32_t* scratch) {
  if (ncols < kAmxMinCols) {
    vector_table()->gemm_bf16(W, kdim, b0, b1, ncols, X, add, out, scratch);
    return;
  }
  in_groups(ncols, [&](int c, int n) { gemm_rows(W, kdim, b0, b1, n, X + c, add + c, out + c, scratch); });
}

// int8 (AMX-INT8). One tile product: C [n columns][16 units] int32 += A [n][64 k bytes] x B [16 k-quads][16
// units x 4 bytes]. B is one gate of one block of the critical step's int8 layout ([nb][KQ][4][16][4]: the
// quads of one gate 256 bytes apart, in place for a strided tile load, like bf16's pairs). A column's 16-bit
// activations q = hi * 256 + lo travel as two rows of bytes: hi signed (TDPBSSD), lo unsigned (TDPBUSD), so
// the block's four gates take two passes of two gates, tiles 0/1 the gates' hi sums, 2/3 their lo sums, 4/5
// A's hi and lo rows, 6/7 the gates' B. The last, shorter step takes its B rows from a zero-padded copy,
// and A's rows are zero past kdim, so every step is a whole one and no load reads past the block.
constexpr int kQuads = 16;  // k-quads a tile step takes (64 bytes of int8 a row)

void configure_i8(int n) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = uint8_t(t < 6 ? n : kQuads);
  _tile_loadconfig(&c);
}

// x (kdim floats) as q = round(x * 32767 / max|x|) (nearest even, as the critical step's 16-bit
// activations): hi = q >> 8 (signed) and lo = q & 255 bytes, zero up to `bytes`. Returns max|x| / 32767.
float to_hi_lo(const float* x, int kdim, int8_t* hi, uint8_t* lo, int bytes) {
  auto mask = [&](int k) {
    const int left = kdim - k;
    return left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1u);
  };
  __m512 m = _mm512_setzero_ps();
  for (int k = 0; k < kdim; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(mask(k), x + k)));
  const float amax = _mm512_reduce_max_ps(m);
  const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
  for (int k = 0; k < bytes; k += 16) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask(k), x + k), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k), _mm512_cvtepi32_epi8(_mm512_srai_epi32(q, 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + k), _mm512_cvtepi32_epi8(q));
  }
  return amax / 32767.0f;
}

// Columns X[0..n), n <= 16, blocks [b0, b1).
void gemm_i8_rows(const int8_t* W, const float* scale, int kdim, int b0, int b1, int n, const float* const* X,
                  const float* const* add, float* const* out, uint32_t* scratch) {
  const int KQ = int8_quads(kdim), full = KQ / kQuads, tail = KQ % kQuads;
  const size_t row_bytes = int8_tile_row_bytes(kdim);  // whole steps of 64 k: the scratch's own measure
  const int steps = int(row_bytes / 64);
  int8_t* hi = reinterpret_cast<int8_t*>(scratch);
  uint8_t* lo = reinterpret_cast<uint8_t*>(scratch) + size_t(n) * row_bytes;
  float xs[kRows];
  for (int r = 0; r < n; ++r) xs[r] = to_hi_lo(X[r], kdim, hi + r * row_bytes, lo + r * row_bytes, int(row_bytes));
  const long bwords = int8_block_words(kdim, kL);  // a block, in uint32 words of four bytes
  constexpr long kStepWords = long(kQuads) * 4 * kL;
  alignas(64) uint32_t btail[kStepWords];  // the last step's B rows of the four gates, then zero rows
  if (tail > 0) std::memset(btail, 0, sizeof btail);
  alignas(64) int32_t chi[kRows * 4 * kL], clo[kRows * 4 * kL];  // [column][gate][unit]
  configure_i8(n);
  for (int b = b0; b < b1; ++b) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(W) + b * bwords;
    if (tail > 0) std::memcpy(btail, w + full * kStepWords, size_t(tail) * kBStride);
    auto bsrc = [&](int s, int g) -> const void* { return (s < full ? w + s * kStepWords : btail) + g * kL; };
    for (int g = 0; g < 4; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int s = 0; s < steps; ++s) {
        _tile_loadd(4, hi + s * 64, row_bytes);
        _tile_loadd(6, bsrc(s, g), kBStride);
        _tile_dpbssd(0, 4, 6);
        _tile_loadd(5, lo + s * 64, row_bytes);
        _tile_dpbusd(2, 5, 6);
        _tile_loadd(7, bsrc(s, g + 1), kBStride);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbusd(3, 5, 7);
      }
      _tile_stored(0, chi + g * kL, kBStride);
      _tile_stored(1, chi + (g + 1) * kL, kBStride);
      _tile_stored(2, clo + g * kL, kBStride);
      _tile_stored(3, clo + (g + 1) * kL, kBStride);
    }
    const int o = b * 4 * kL;
    const __m512 k256 = _mm512_set1_ps(256.0f);
    for (int r = 0; r < n; ++r) {
      const __m512 s = _mm512_set1_ps(xs[r]);
      for (int g = 0; g < 4; ++g) {
        const __m512 h = _mm512_cvtepi32_ps(_mm512_load_si512(chi + (r * 4 + g) * kL));
        const __m512 l = _mm512_cvtepi32_ps(_mm512_load_si512(clo + (r * 4 + g) * kL));
        const __m512 ws = _mm512_mul_ps(_mm512_loadu_ps(scale + o + g * kL), s);
        __m512 v = _mm512_mul_ps(_mm512_fmadd_ps(h, k256, l), ws);
        if (add[r]) v = _mm512_add_ps(v, _mm512_loadu_ps(add[r] + o + g * kL));
        _mm512_storeu_ps(out[r] + o + g * kL, v);
      }
    }
  }
}

// As gemm_bf16_amx: the columns in groups of even sizes up to 16, each group over all the blocks. Every
// column count takes the tiles (a vector fallback would need the dequantized weights).
void gemm_i8_amx(const int8_t* W, const float* scale, int kdim, int b0, int b1, int ncols, const float* const* X,
                 const float* const* add, float* const* out, uint32_t* scratch) {
  in_groups(ncols, [&](int c, int n) { gemm_i8_rows(W, scale, kdim, b0, b1, n, X + c, add + c, out + c, scratch); });
}

}  // namespace

const KernelTable* kernels_avx512_amx_i8(bool bf16_dot) {
  static const KernelTable dot = [] {
    KernelTable k = *kernels_avx512(true);
    k.gemm_i8 = &gemm_i8_amx;
    k.amx = true;
    return k;
  }();
  static const KernelTable cvt = [] {
    KernelTable k = *kernels_avx512(false);
    k.gemm_i8 = &gemm_i8_amx;
    k.amx = true;
    return k;
  }();
  return bf16_dot ? &dot : &cvt;
}

const KernelTable* kernels_avx512_amx() {
  static const KernelTable t = [] {
    KernelTable k = *vector_table();
    k.gemm_bf16 = &gemm_bf16_amx;
    k.amx = true;
    return k;
  }();
  return &t;
}

}  // namespace hotpath::cpu
