// The activations' scalar conversions that the portable, NEON and SVE traits share (the x86 traits use
// their own instructions): fp32 -> bf16 pairs, and the int8 activation bytes, exactly as the AVX-512
// kernels make them. They run once per matrix product, O(inputs), beside O(inputs x rows) of products.
// Included INSIDE each kernel unit's namespace (each unit's copy is its own, built with its flags); no
// standard library, as in kernels_impl.hpp.
#ifndef HOTPATH_CPU_SCALAR_BODY
#error "include kernels_scalar.hpp only from a kernels_<isa>.cpp, inside its namespace"
#endif
#undef HOTPATH_CPU_SCALAR_BODY

struct ScalarActivations {
  // Round to nearest even (activations are finite here).
  static uint32_t bf16_bits(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
  }
  // n floats -> ceil(n / 2) bf16 pairs (low half the even element), the last one zero padded.
  static void cvt_pairs(const float* x, int n, uint32_t* out) {
    for (int k = 0; k < n; k += 2) out[k / 2] = bf16_bits(x[k]) | (k + 1 < n ? bf16_bits(x[k + 1]) << 16 : 0u);
  }
  static float absmax(const float* x, int n) {
    float m = 0.0f;
    for (int k = 0; k < n; ++k) m = __builtin_fabsf(x[k]) > m ? __builtin_fabsf(x[k]) : m;
    return m;
  }
  static int32_t round_even(float v) { return int32_t(__builtin_rintf(v)); }  // cvtps2dq's rounding
  // Bytes q + 128, q = round(x * inv) clamped to int8; 128 past n, up to `padded` rounded up to 16.
  static void quant8(const float* x, int n, float inv, uint8_t* out, int padded) {
    for (int k = 0; k < (padded + 15) / 16 * 16; ++k) {
      int32_t q = k < n ? round_even(x[k] * inv) : 0;
      q = q > 127 ? 127 : q < -128 ? -128 : q;
      out[k] = uint8_t(q + 128);
    }
  }
  // q = round(x * inv) (|q| <= 32767) as hi = (q >> 8) + 128 and lo = q & 255.
  static void quant16(const float* x, int n, float inv, uint8_t* hi, uint8_t* lo, int padded) {
    for (int k = 0; k < (padded + 15) / 16 * 16; ++k) {
      const int32_t q = k < n ? round_even(x[k] * inv) : 0;
      hi[k] = uint8_t((q >> 8) + 128);
      lo[k] = uint8_t(q & 255);
    }
  }
};
