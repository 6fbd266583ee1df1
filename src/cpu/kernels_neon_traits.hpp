// The NEON vector traits of the CPU backend's kernels (kernels_impl.hpp), included by kernels_neon.cpp
// (the base architecture: fp32, bf16 widened in registers) and by kernels_neon_ext.cpp (built with
// +dotprod+i8mm+bf16: adds the bf16 pair dot, BFDOT, and the int8 kernels on USDOT), each inside its own
// namespace. 8 lanes, two 128-bit registers a vector: with 32 registers, 2 columns x 4 gates of
// accumulators (16) leave room for the weights and broadcasts, as AVX2's 8 lanes do with 16.
// Included INSIDE each unit's own namespace (after <arm_neon.h>), so that the two units' Neon8 are
// different classes; no standard library here, as in kernels_impl.hpp: an inline copy built with the
// extensions could be the one the linker keeps for both units.
#ifndef HOTPATH_CPU_NEON_TRAITS_BODY
#error "include kernels_neon_traits.hpp only from a kernels_neon*.cpp, inside its namespace"
#endif
#undef HOTPATH_CPU_NEON_TRAITS_BODY

#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC) && defined(__ARM_FEATURE_MATMUL_INT8)
#define HOTPATH_NEON_EXT 1
#else
#define HOTPATH_NEON_EXT 0
#endif

template <bool kDot>
struct Neon8 : ScalarActivations {
  static constexpr int L = 8;
  static constexpr int kMaxCols = 2;
  static constexpr bool kHasDot = kDot && HOTPATH_NEON_EXT;
  static constexpr bool kHasVnni = HOTPATH_NEON_EXT;
  struct V {
    float32x4_t a, b;
  };
  struct VI {
    uint32x4_t a, b;
  };
  static V zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static V set1(float f) { return {vdupq_n_f32(f), vdupq_n_f32(f)}; }
  static V loadu(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
  static V load(const float* p) { return loadu(p); }
  static void storeu(float* p, V v) {
    vst1q_f32(p, v.a);
    vst1q_f32(p + 4, v.b);
  }
  static V add(V x, V y) { return {vaddq_f32(x.a, y.a), vaddq_f32(x.b, y.b)}; }
  static V sub(V x, V y) { return {vsubq_f32(x.a, y.a), vsubq_f32(x.b, y.b)}; }
  static V mul(V x, V y) { return {vmulq_f32(x.a, y.a), vmulq_f32(x.b, y.b)}; }
  static V fma(V x, V y, V c) { return {vfmaq_f32(c.a, x.a, y.a), vfmaq_f32(c.b, x.b, y.b)}; }
  static V min(V x, V y) { return {vminq_f32(x.a, y.a), vminq_f32(x.b, y.b)}; }
  static V max(V x, V y) { return {vmaxq_f32(x.a, y.a), vmaxq_f32(x.b, y.b)}; }
  // AArch64 has a vector divide: exact, where x86 refines a reciprocal estimate.
  static V rcp(V q) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    return {vdivq_f32(one, q.a), vdivq_f32(one, q.b)};
  }
  static float hsum(V v) { return vaddvq_f32(vaddq_f32(v.a, v.b)); }
  static VI loadi(const uint32_t* p) { return {vld1q_u32(p), vld1q_u32(p + 4)}; }
  static V lo(VI w) { return {vreinterpretq_f32_u32(vshlq_n_u32(w.a, 16)), vreinterpretq_f32_u32(vshlq_n_u32(w.b, 16))}; }
  static V hi(VI w) {
    const uint32x4_t m = vdupq_n_u32(0xffff0000u);
    return {vreinterpretq_f32_u32(vandq_u32(w.a, m)), vreinterpretq_f32_u32(vandq_u32(w.b, m))};
  }
  static VI bcast_pair(uint32_t p) { return {vdupq_n_u32(p), vdupq_n_u32(p)}; }
  // BFDOT: each lane adds the products of its bf16 pair (the low half is element 2i, as packed).
  static V dot(V acc, VI w, VI x) {
#if HOTPATH_NEON_EXT
    if constexpr (kDot) {
      return {vbfdotq_f32(acc.a, vreinterpretq_bf16_u32(x.a), vreinterpretq_bf16_u32(w.a)),
              vbfdotq_f32(acc.b, vreinterpretq_bf16_u32(x.b), vreinterpretq_bf16_u32(w.b))};
    }
#endif
    (void)w;
    (void)x;
    return acc;
  }
  // int8: USDOT is vpdpbusd lane for lane (4 products of an unsigned and a signed byte, exact in int32).
  static VI zeroi() { return {vdupq_n_u32(0), vdupq_n_u32(0)}; }
  static VI addi(VI x, VI y) { return {vaddq_u32(x.a, y.a), vaddq_u32(x.b, y.b)}; }
  static VI subi(VI x, VI y) { return {vsubq_u32(x.a, y.a), vsubq_u32(x.b, y.b)}; }
  static V cvti(VI x) { return {vcvtq_f32_s32(vreinterpretq_s32_u32(x.a)), vcvtq_f32_s32(vreinterpretq_s32_u32(x.b))}; }
  static VI loadui(const int32_t* p) {
    return {vreinterpretq_u32_s32(vld1q_s32(p)), vreinterpretq_u32_s32(vld1q_s32(p + 4))};
  }
  static VI dpbusd(VI acc, VI a_u8, VI b_s8) {
#if HOTPATH_NEON_EXT
    return {vreinterpretq_u32_s32(vusdotq_s32(vreinterpretq_s32_u32(acc.a), vreinterpretq_u8_u32(a_u8.a),
                                              vreinterpretq_s8_u32(b_s8.a))),
            vreinterpretq_u32_s32(vusdotq_s32(vreinterpretq_s32_u32(acc.b), vreinterpretq_u8_u32(a_u8.b),
                                              vreinterpretq_s8_u32(b_s8.b)))};
#else
    (void)a_u8;
    (void)b_s8;
    return acc;  // never called: kHasVnni is false
#endif
  }
  static float absmax(const float* x, int n) {
    float32x4_t m = vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 4 <= n; k += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + k)));
    float r = vmaxvq_f32(m);
    for (; k < n; ++k) r = __builtin_fabsf(x[k]) > r ? __builtin_fabsf(x[k]) : r;
    return r;
  }
  // quant8, quant16 (the activation bytes, as the AVX-512 kernels make them) and cvt_pairs: ScalarActivations'.
};
