// The kernel tables of the other architecture: built only for their own (src/cpu/CMakeLists.txt), so
// here they say "not on this machine" and choose_isa refuses them by name.
#include "cpu/kernels.hpp"

namespace hotpath::cpu {
#if !(defined(__x86_64__) || defined(__i386__))
const KernelTable* kernels_avx512(bool) { return nullptr; }
const KernelTable* kernels_avx2() { return nullptr; }
const KernelTable* kernels_avx512_amx() { return nullptr; }
const KernelTable* kernels_avx512_amx_i8(bool) { return nullptr; }
#endif
#if !defined(__aarch64__)
const KernelTable* kernels_neon_base() { return nullptr; }
const KernelTable* kernels_neon_ext(bool) { return nullptr; }
const KernelTable* kernels_sve256(bool) { return nullptr; }
const KernelTable* kernels_sve512(bool) { return nullptr; }
#endif
}  // namespace hotpath::cpu
