// NEON kernels with the Armv8.6 extensions (built with +dotprod+i8mm+bf16; called only when the CPU has
// FEAT_I8MM and FEAT_BF16, as Neoverse V1/V2 and Grace do): the bf16 pair dot (BFDOT) and the int8
// kernels (USDOT), besides fp32 and widened bf16.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

#if !defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC) || !defined(__ARM_FEATURE_MATMUL_INT8)
#error "kernels_neon_ext.cpp needs -march=armv8.2-a+dotprod+i8mm+bf16 (src/cpu/CMakeLists.txt)"
#endif

namespace hotpath::cpu::neon_ext {

#define HOTPATH_CPU_SCALAR_BODY
#include "cpu/kernels_scalar.hpp"
#define HOTPATH_CPU_NEON_TRAITS_BODY
#include "cpu/kernels_neon_traits.hpp"
#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::neon_ext

namespace hotpath::cpu {
const KernelTable* kernels_neon_ext(bool bf16_dot) {
  static const KernelTable dot = neon_ext::make_table<neon_ext::Neon8<true>, true>("neon");
  static const KernelTable cvt = neon_ext::make_table<neon_ext::Neon8<false>, false>("neon");
  return bf16_dot ? &dot : &cvt;
}
}  // namespace hotpath::cpu
