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
#define HOTPATH_CPU_SCALAR_BODY
#include "cpu/kernels_scalar.hpp"

struct Emu16 : ScalarActivations {
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
  // absmax, quant8, quant16 (the activation bytes) and cvt_pairs: ScalarActivations'.
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
