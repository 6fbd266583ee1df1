// The SVE vector traits of the CPU backend's kernels (kernels_impl.hpp), for a fixed vector length: each
// unit that includes it is built with -msve-vector-bits=N (kernels_sve256.cpp, kernels_sve512.cpp) and
// with +bf16+i8mm, and is called only where the CPU's SVE vectors are exactly N bits (arch.hpp:
// IsaFlags::sve_bits) and it has SVE's BF16 and I8MM. L = N / 32 lanes in one register: 8 at 256 bits
// (Neoverse V1, Graviton3), 16 at 512 (A64FX: the AVX-512 layout). Grace's SVE2 is 128 bits, NEON's
// width, and runs the NEON tables. Included INSIDE each unit's namespace, after <arm_sve.h>; no standard
// library, as in kernels_impl.hpp.
#ifndef HOTPATH_CPU_SVE_TRAITS_BODY
#error "include kernels_sve_traits.hpp only from a kernels_sve*.cpp, inside its namespace"
#endif
#undef HOTPATH_CPU_SVE_TRAITS_BODY
#if !defined(__ARM_FEATURE_SVE_BITS) || __ARM_FEATURE_SVE_BITS == 0
#error "the SVE kernel units need -msve-vector-bits=N (src/cpu/CMakeLists.txt)"
#endif

typedef svfloat32_t SveF32 __attribute__((arm_sve_vector_bits(__ARM_FEATURE_SVE_BITS)));
typedef svuint32_t SveU32 __attribute__((arm_sve_vector_bits(__ARM_FEATURE_SVE_BITS)));

template <bool kDot>
struct SveFixed : ScalarActivations {
  static constexpr int L = __ARM_FEATURE_SVE_BITS / 32;
  static constexpr int kMaxCols = 4;  // 32 z registers: 4 columns x 4 gates of accumulators, as AVX-512
  static constexpr bool kHasDot = kDot;
  static constexpr bool kHasVnni = true;
  using V = SveF32;
  using VI = SveU32;
  static svbool_t all() { return svptrue_b32(); }
  static V zero() { return svdup_n_f32(0.0f); }
  static V set1(float f) { return svdup_n_f32(f); }
  static V loadu(const float* p) { return svld1_f32(all(), p); }
  static V load(const float* p) { return loadu(p); }
  static void storeu(float* p, V v) { svst1_f32(all(), p, v); }
  static V add(V a, V b) { return svadd_f32_x(all(), a, b); }
  static V sub(V a, V b) { return svsub_f32_x(all(), a, b); }
  static V mul(V a, V b) { return svmul_f32_x(all(), a, b); }
  static V fma(V a, V b, V c) { return svmla_f32_x(all(), c, a, b); }
  static V min(V a, V b) { return svmin_f32_x(all(), a, b); }
  static V max(V a, V b) { return svmax_f32_x(all(), a, b); }
  static V rcp(V q) { return svdiv_f32_x(all(), svdup_n_f32(1.0f), q); }  // a vector divide: exact
  static float hsum(V a) { return svaddv_f32(all(), a); }
  static VI loadi(const uint32_t* p) { return svld1_u32(all(), p); }
  static V lo(VI w) { return svreinterpret_f32_u32(svlsl_n_u32_x(all(), w, 16)); }
  static V hi(VI w) { return svreinterpret_f32_u32(svand_n_u32_x(all(), w, 0xffff0000u)); }
  static VI bcast_pair(uint32_t p) { return svdup_n_u32(p); }
  // BFDOT: each lane adds the products of its bf16 pair (the low half is element 2i, as packed).
  static V dot(V acc, VI w, VI x) {
    if constexpr (kDot) {
      return svbfdot_f32(acc, svreinterpret_bf16_u32(x), svreinterpret_bf16_u32(w));
    } else {
      (void)w;
      (void)x;
      return acc;
    }
  }
  // int8: USDOT, vpdpbusd lane for lane.
  static VI zeroi() { return svdup_n_u32(0); }
  static VI addi(VI a, VI b) { return svadd_u32_x(all(), a, b); }
  static VI subi(VI a, VI b) { return svsub_u32_x(all(), a, b); }
  static V cvti(VI a) { return svcvt_f32_s32_x(all(), svreinterpret_s32_u32(a)); }
  static VI loadui(const int32_t* p) { return svreinterpret_u32_s32(svld1_s32(all(), p)); }
  static VI dpbusd(VI acc, VI a_u8, VI b_s8) {
    return svreinterpret_u32_s32(
        svusdot_s32(svreinterpret_s32_u32(acc), svreinterpret_u8_u32(a_u8), svreinterpret_s8_u32(b_s8)));
  }
  // absmax, quant8, quant16 (the activation bytes, as the AVX-512 kernels make them) and cvt_pairs:
  // ScalarActivations'.
};
