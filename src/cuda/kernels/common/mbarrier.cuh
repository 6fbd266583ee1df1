// The shared-memory mbarrier and the asynchronous copies that complete bytes on it: the cluster kernel's
// st.async exchange and the hybrid precompute's bulk copies from global memory both count their bytes on
// one, and the waiting threads see the data once its phase has completed.
#pragma once
#include <cstdint>

#include "cuda/kernels/common/tagged_words.cuh"

namespace hotpath::cuda::dev {

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// One arrival that also adds `bytes` to the transfers the current phase waits for.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// Whether the phase of this parity has completed (acquire at cluster scope: the bytes counted on it, from
// this block's copies or a peer's stores, are visible to the caller).
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, unsigned parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into this block's shared
// memory by the copy engine, counted on `bar` (this block's) when they land.
__device__ __forceinline__ void bulk_copy_to_smem(uint32_t dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
// A 16-byte / 4-byte store into the shared memory of a block of this cluster (its shared::cluster address),
// counted on that block's mbarrier `bar` (its shared::cluster address too) when it lands.
__device__ __forceinline__ void st_async_v4(uint32_t addr, uint4 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_b32(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr), "r"(v), "r"(bar)
               : "memory");
}
// Orders this thread's generic-proxy accesses (its own, and those it has synchronized with: another SM's
// stores seen through an acquire, this block's through bar.sync) before its later async-proxy copies: the
// bulk copy then reads the data the generic stores wrote, and overwrites shared memory only after the generic
// reads of it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async;" ::: "memory"); }
// A newly initialized mbarrier visible to the async proxy (the copies completing on it) and the cluster.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

}  // namespace hotpath::cuda::dev
