// AVX2 + FMA kernels (8 lanes). Compiled with -mavx2 -mfma; called only when the CPU has both.
// bf16 weights are widened in registers (shift / mask of the packed pairs): activations stay fp32.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

namespace hotpath::cpu::avx2 {

struct T8 {
  static constexpr int L = 8;
  static constexpr int kMaxCols = 2;  // 16 ymm registers: 2 columns x 4 gates of accumulators
  static constexpr bool kHasDot = false;
  static constexpr bool kHasVnni = false;  // int8 runs on the portable table on AVX2-only CPUs
  using V = __m256;
  using VI = __m256i;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_load_ps(p); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // rcpps (12 bits) + one Newton step: ~2^-23 relative.
  static V rcp(V q) {
    const V r = _mm256_rcp_ps(q);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(q, r, _mm256_set1_ps(1.0f)), r);
  }
  static float hsum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static VI loadi(const uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static V lo(VI w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
  static V hi(VI w) { return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0xffff0000u)))); }
  // Never called (kHasDot is false); present so the shared template compiles.
  static VI bcast_pair(uint32_t p) { return _mm256_set1_epi32(int(p)); }
  static V dot(V acc, VI, VI) { return acc; }
  static void cvt_pairs(const float*, int, uint32_t*) {}
};

#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::avx2

namespace hotpath::cpu {
const KernelTable* kernels_avx2() {
  static const KernelTable t = avx2::make_table<avx2::T8, false>("avx2");
  return &t;
}
}  // namespace hotpath::cpu
