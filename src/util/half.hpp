// IEEE binary16 and bfloat16 conversions on the host, round-to-nearest-even, exact for NaN/Inf/subnormals.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

namespace hotpath {

inline float bf16_to_float(uint16_t v) { return std::bit_cast<float>(uint32_t(v) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      out = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(out);
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;           // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;          // overflow (>= 65520) -> Inf
  if (a < 0x38800000u) {                                // below the smallest normal: subnormal or zero
    if (a < 0x33000000u) return sign;                   // < 2^-25 rounds to zero
    const uint32_t man = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(a >> 23);               // 14 + (113 - exp)
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t r = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    if (rem > half_ulp || (rem == half_ulp && (r & 1u))) ++r;
    return sign | uint16_t(r);
  }
  uint32_t r = a - 0x38000000u;                         // rebias exponent 127 -> 15 (in place)
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | uint16_t(r >> 13);
}

}  // namespace hotpath
