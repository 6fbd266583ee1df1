// AVX-512 kernels (16 lanes). Compiled with -mavx512f/bw/dq/vl/bf16/vnni -mfma; called only when the CPU
// has AVX-512F/BW/DQ/VL (and AVX512_BF16 for the pair-dot table, AVX512_VNNI for the int8 kernels).
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
  static constexpr bool kHasVnni = true;
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
  static VI zeroi() { return _mm512_setzero_si512(); }
  static VI addi(VI a, VI b) { return _mm512_add_epi32(a, b); }
  static VI subi(VI a, VI b) { return _mm512_sub_epi32(a, b); }
  static V cvti(VI a) { return _mm512_cvtepi32_ps(a); }
  static VI loadui(const int32_t* p) { return _mm512_loadu_si512(p); }
  static VI dpbusd(VI acc, VI a_u8, VI b_s8) { return _mm512_dpbusd_epi32(acc, a_u8, b_s8); }
  static __mmask16 tail(int left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u); }
  static float absmax(const float* x, int n) {
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail(n - k), x + k)));
    return _mm512_reduce_max_ps(m);
  }
  // x * inv rounded to nearest even (cvtps2dq), as bytes q + 128; 128 past n, up to `padded` (whole 16s).
  static void quant8(const float* x, int n, float inv, uint8_t* out, int padded) {
    const __m512 s = _mm512_set1_ps(inv);
    for (int k = 0; k < padded; k += 16) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail(n - k), x + k), s));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k),
                       _mm_xor_si128(_mm512_cvtsepi32_epi8(q), _mm_set1_epi8(char(0x80))));
    }
  }
  // q = x * inv rounded (|q| <= 32767) as hi = (q >> 8) + 128 and lo = q & 255.
  static void quant16(const float* x, int n, float inv, uint8_t* hi, uint8_t* lo, int padded) {
    const __m512 s = _mm512_set1_ps(inv);
    for (int k = 0; k < padded; k += 16) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail(n - k), x + k), s));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k),
                       _mm_xor_si128(_mm512_cvtepi32_epi8(_mm512_srai_epi32(q, 8)), _mm_set1_epi8(char(0x80))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + k), _mm512_cvtepi32_epi8(q));
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
