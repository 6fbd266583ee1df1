// Portable kernels: 16 lanes of plain C++ that mirror the AVX-512 path lane for lane (the same
// layout, accumulation order and, with bf16_dot, the same bf16 rounding of activations), so that
// path's logic is tested on machines without AVX-512. Also the fallback on CPUs without AVX2.
#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

namespace hotpath::cpu::generic {

inline float bits_to_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
// Round to nearest even (activations are finite here).
inline uint32_t bf16_bits(float f) {
  uint32_t u = float_to_bits(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

struct Emu16 {
  static constexpr int L = 16;
  static constexpr int kMaxCols = 4;
  static constexpr bool kHasDot = true;
  static constexpr bool kHasVnni = true;
  struct V { float v[L]; };
  struct VI { uint32_t v[L]; };
#define HOTPATH_EMU_LOOP for (int i = 0; i < L; ++i)
  static V zero() { V r; HOTPATH_EMU_LOOP r.v[i] = 0.0f; return r; }
  static V set1(float f) { V r; HOTPATH_EMU_LOOP r.v[i] = f; return r; }
  static V loadu(const float* p) { V r; HOTPATH_EMU_LOOP r.v[i] = p[i]; return r; }
  static V load(const float* p) { return loadu(p); }
  static void storeu(float* p, V a) { HOTPATH_EMU_LOOP p[i] = a.v[i]; }
  static V add(V a, V b) { HOTPATH_EMU_LOOP a.v[i] += b.v[i]; return a; }
  static V sub(V a, V b) { HOTPATH_EMU_LOOP a.v[i] -= b.v[i]; return a; }
  static V mul(V a, V b) { HOTPATH_EMU_LOOP a.v[i] *= b.v[i]; return a; }
  static V fma(V a, V b, V c) { HOTPATH_EMU_LOOP c.v[i] += a.v[i] * b.v[i]; return c; }
  static V min(V a, V b) { HOTPATH_EMU_LOOP a.v[i] = b.v[i] < a.v[i] ? b.v[i] : a.v[i]; return a; }
  static V max(V a, V b) { HOTPATH_EMU_LOOP a.v[i] = b.v[i] > a.v[i] ? b.v[i] : a.v[i]; return a; }
  static V rcp(V a) { HOTPATH_EMU_LOOP a.v[i] = 1.0f / a.v[i]; return a; }
  static float hsum(V a) {  // pairwise, as a vector reduction would
    for (int w = L / 2; w > 0; w /= 2)
      for (int i = 0; i < w; ++i) a.v[i] += a.v[i + w];
    return a.v[0];
  }
  static VI loadi(const uint32_t* p) { VI r; HOTPATH_EMU_LOOP r.v[i] = p[i]; return r; }
  static V lo(VI w) { V r; HOTPATH_EMU_LOOP r.v[i] = bits_to_float(w.v[i] << 16); return r; }
  static V hi(VI w) { V r; HOTPATH_EMU_LOOP r.v[i] = bits_to_float(w.v[i] & 0xffff0000u); return r; }
  static VI bcast_pair(uint32_t p) { VI r; HOTPATH_EMU_LOOP r.v[i] = p; return r; }
  // vdpbf16ps: products of bf16 are exact in fp32; the odd pair's product is added first.
  static V dot(V acc, VI w, VI x) {
    HOTPATH_EMU_LOOP {
      acc.v[i] += bits_to_float(w.v[i] & 0xffff0000u) * bits_to_float(x.v[i] & 0xffff0000u);
      acc.v[i] += bits_to_float(w.v[i] << 16) * bits_to_float(x.v[i] << 16);
    }
    return acc;
  }
  static void cvt_pairs(const float* x, int n, uint32_t* out) {
    for (int k = 0; k < n; k += 2) out[k / 2] = bf16_bits(x[k]) | (k + 1 < n ? bf16_bits(x[k + 1]) << 16 : 0u);
  }
  // int8: vpdpbusd and the activation bytes, exactly as the AVX-512 unit computes them.
  static VI zeroi() { VI r; HOTPATH_EMU_LOOP r.v[i] = 0; return r; }
  static VI addi(VI a, VI b) { HOTPATH_EMU_LOOP a.v[i] += b.v[i]; return a; }
  static VI subi(VI a, VI b) { HOTPATH_EMU_LOOP a.v[i] -= b.v[i]; return a; }
  static V cvti(VI a) { V r; HOTPATH_EMU_LOOP r.v[i] = float(int32_t(a.v[i])); return r; }
  static VI loadui(const int32_t* p) { VI r; HOTPATH_EMU_LOOP r.v[i] = uint32_t(p[i]); return r; }
  static VI dpbusd(VI acc, VI a, VI b) {
    HOTPATH_EMU_LOOP {
      int32_t s = int32_t(acc.v[i]);
      for (int q = 0; q < 4; ++q) s += int32_t((a.v[i] >> (8 * q)) & 255u) * int32_t(int8_t((b.v[i] >> (8 * q)) & 255u));
      acc.v[i] = uint32_t(s);
    }
    return acc;
  }
  static float absmax(const float* x, int n) {
    float m = 0.0f;
    for (int k = 0; k < n; ++k) m = __builtin_fabsf(x[k]) > m ? __builtin_fabsf(x[k]) : m;
    return m;
  }
  static int32_t round_even(float v) { return int32_t(__builtin_rintf(v)); }  // cvtps2dq's rounding
  static void quant8(const float* x, int n, float inv, uint8_t* out, int padded) {
    for (int k = 0; k < (padded + 15) / 16 * 16; ++k) {
      int32_t q = k < n ? round_even(x[k] * inv) : 0;
      q = q > 127 ? 127 : q < -128 ? -128 : q;
      out[k] = uint8_t(q + 128);
    }
  }
  static void quant16(const float* x, int n, float inv, uint8_t* hi, uint8_t* lo, int padded) {
    for (int k = 0; k < (padded + 15) / 16 * 16; ++k) {
      const int32_t q = k < n ? round_even(x[k] * inv) : 0;
      hi[k] = uint8_t((q >> 8) + 128);
      lo[k] = uint8_t(q & 255);
    }
  }
#undef HOTPATH_EMU_LOOP
};

#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::generic

namespace hotpath::cpu {
const KernelTable* kernels_generic(bool bf16_dot) {
  static const KernelTable dot = generic::make_table<generic::Emu16, true>("generic");
  static const KernelTable cvt = generic::make_table<generic::Emu16, false>("generic");
  return bf16_dot ? &dot : &cvt;
}
}  // namespace hotpath::cpu
