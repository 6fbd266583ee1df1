// SVE kernels for 512-bit vectors (16 lanes; built with -msve-vector-bits=512 +sve+bf16+i8mm, called only
// where the CPU's SVE vectors are 512 bits and it has SVE's BF16 and I8MM): fp32, bf16 (BFDOT or widened),
// int8 (USDOT). The traits are kernels_sve_traits.hpp's.
#include <arm_sve.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

#if __ARM_FEATURE_SVE_BITS != 512
#error "kernels_sve512.cpp needs -msve-vector-bits=512 (src/cpu/CMakeLists.txt)"
#endif

namespace hotpath::cpu::sve512 {

#define HOTPATH_CPU_SCALAR_BODY
#include "cpu/kernels_scalar.hpp"
#define HOTPATH_CPU_SVE_TRAITS_BODY
#include "cpu/kernels_sve_traits.hpp"
#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::sve512

namespace hotpath::cpu {
const KernelTable* kernels_sve512(bool bf16_dot) {
  static const KernelTable dot = sve512::make_table<sve512::SveFixed<true>, true>("sve");
  static const KernelTable cvt = sve512::make_table<sve512::SveFixed<false>, false>("sve");
  return bf16_dot ? &dot : &cvt;
}
}  // namespace hotpath::cpu
