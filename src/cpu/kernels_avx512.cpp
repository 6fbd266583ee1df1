// AVX-512 kernels (16 lanes). Compiled with -mavx512f/bw/dq/vl/bf16 -mfma; called only when the CPU
// has AVX-512F/BW/DQ/VL (and AVX512_BF16 for the pair-dot table).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

namespace hotpath::cpu::avx512 {

template <bool kDot>
struct T16 {
  static constexpr int L = 16;
  static constexpr int kMaxCols = 4;  // 32 zmm registers: 16 accumulators + weights + broadcasts
  static constexpr bool kHasDot = kDot;
  using V = __m512;
  using VI = __m512i;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_load_ps(p); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V a) { _mm512_storeu_ps(p, a); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // rcp14 + one Newton step: ~2^-27 relative, below fp32 rounding.
  static V rcp(V q) {
    const V r = _mm512_rcp14_ps(q);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(1.0f)), r);
  }
  static float hsum(V a) { return _mm512_reduce_add_ps(a); }
  static VI loadi(const uint32_t* p) { return _mm512_load_si512(p); }
  static V lo(VI w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
  static V hi(VI w) { return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int(0xffff0000u)))); }
  static VI bcast_pair(uint32_t p) { return _mm512_set1_epi32(int(p)); }
  static V dot(V acc, VI w, VI x) {
    if constexpr (kDot) {
      return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
    } else {
      return acc;
    }
  }
  // 32 floats -> 32 bf16 (16 pairs) per instruction, round to nearest even; zero padded.
  static void cvt_pairs(const float* x, int n, uint32_t* out) {
    if constexpr (kDot) {
      for (int k = 0; k < n; k += 32, out += 16) {
        const int left = n - k;
        const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
        const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1u);
        const __m512 a = _mm512_maskz_loadu_ps(m0, x + k);
        const __m512 b = _mm512_maskz_loadu_ps(m1, x + k + 16);
        _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(b, a));
      }
    }
  }
};

#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::avx512

namespace hotpath::cpu {
const KernelTable* kernels_avx512(bool bf16_dot) {
  static const KernelTable dot = avx512::make_table<avx512::T16<true>, true>("avx512");
  static const KernelTable cvt = avx512::make_table<avx512::T16<false>, false>("avx512");
  return bf16_dot ? &dot : &cvt;
}
}  // namespace hotpath::cpu
