// NEON kernels of the base architecture (8 lanes): fp32, and bf16 weights widened in registers. Built on
// aarch64 only; every aarch64 CPU has Advanced SIMD.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"

namespace hotpath::cpu::neon {

#define HOTPATH_CPU_SCALAR_BODY
#include "cpu/kernels_scalar.hpp"
#define HOTPATH_CPU_NEON_TRAITS_BODY
#include "cpu/kernels_neon_traits.hpp"
#define HOTPATH_CPU_KERNELS_IMPL_BODY
#include "cpu/kernels_impl.hpp"

}  // namespace hotpath::cpu::neon

namespace hotpath::cpu {
const KernelTable* kernels_neon_base() {
  static const KernelTable t = neon::make_table<neon::Neon8<false>, false>("neon");
  return &t;
}
}  // namespace hotpath::cpu
