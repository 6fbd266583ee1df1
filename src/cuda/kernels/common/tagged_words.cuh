// The tagged word, the exchange primitive of the cluster and grid kernels. Every value a block hands to
// another (an input element, a hidden unit's h, a head partial sum) travels as one 8-byte word, the value
// in the low 32 bits and the tick's wire seq in the high 32, written with one 64-bit store (single-copy
// atomic): straight into the consumer's shared memory (cluster kernel) or into global memory, where the
// consumers on other SMs read it from L2 (grid kernel). The consumer spins on exactly the words it reads
// until their tags have reached its tick: the "ready" signal is folded into the data, so no flag, fence,
// barrier or counter sits on the critical path. What each exchange costs: docs/cuda.md.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hotpath::cuda::dev {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// The address of the same shared-memory location in block `rank` of this cluster.
__device__ __forceinline__ uint32_t peer_smem(uint32_t local, unsigned rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned long long tagged(unsigned seq, uint32_t value) {
  return ((unsigned long long)seq << 32) | value;
}
__device__ __forceinline__ uint32_t tag_of(unsigned long long w) { return uint32_t(w >> 32); }
__device__ __forceinline__ uint32_t value_of(unsigned long long w) { return uint32_t(w); }
// A tag has reached seq: this tick's word, or (never in a correct run: a peer cannot pass a tick whose
// words this block has not yet read) a later one; a wait never hangs on an overwritten word.
__device__ __forceinline__ bool reached(uint32_t tag, unsigned seq) { return int(tag - seq) >= 0; }

// One word into shared memory of cluster block `rank` (its shared::cluster address), relaxed at cluster
// scope: the consumer's loads of the same word see it whole.
__device__ __forceinline__ void st_word(uint32_t cluster_addr, unsigned long long w) {
  asm volatile("st.relaxed.cluster.shared::cluster.u64 [%0], %1;" ::"r"(cluster_addr), "l"(w) : "memory");
}
// Two adjacent words of this block's shared memory (16-byte aligned), each read whole.
__device__ __forceinline__ void ld_words2(const unsigned long long* p, unsigned long long& a, unsigned long long& b) {
  asm volatile("ld.relaxed.cluster.shared::cta.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "r"(smem_u32(p)) : "memory");
}
__device__ __forceinline__ unsigned long long ld_word(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.cluster.shared::cta.u64 %0, [%1];" : "=l"(v) : "r"(smem_u32(p)) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_word_remote(uint32_t cluster_addr) {
  unsigned long long v;
  asm volatile("ld.relaxed.cluster.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(cluster_addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_u32_remote(uint32_t cluster_addr, unsigned v) {
  asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}

// The same words in global memory, relaxed at gpu scope (coherent in L2: another SM's loads of a word see
// it whole, and the loads bypass the L1 that would keep a stale copy).
__device__ __forceinline__ void st_word_gpu(unsigned long long* p, unsigned long long w) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ void st_words2_gpu(unsigned long long* p, unsigned long long a, unsigned long long b) {
  asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ unsigned long long ld_word_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Two adjacent words (16-byte aligned), each read whole.
__device__ __forceinline__ void ld_words2_gpu(const unsigned long long* p, unsigned long long& a, unsigned long long& b) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// A value's hi and lo 16-bit halves in one 32-bit word (hi | lo << 16): the tensor cores then see it to
// ~22 (fp16) / 16 (bf16) bits, leaving weight rounding as the only half-precision error. On sm_80+ through
// the packing conversion (cvt.rn.f16x2.f32 / bf16x2: a's half in the upper 16 bits, b's in the lower), an
// ALU instruction where the scalar conversions take the slower F2F and a pack: the same bits, a shorter
// chain on the cells' critical path.
template <bool BF16>
__device__ __forceinline__ uint32_t hi_lo(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t h, hl;
  if constexpr (BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(0.f), "f"(x));
    const float l = x - __uint_as_float(h << 16);
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hl) : "f"(l), "f"(x));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(0.f), "f"(x));
    const float l = x - __half2float(__ushort_as_half(uint16_t(h)));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hl) : "f"(l), "f"(x));
  }
  return hl;
#else
  if constexpr (BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    const __nv_bfloat16 l = __float2bfloat16_rn(x - __bfloat162float(h));
    return uint32_t(__bfloat16_as_ushort(h)) | (uint32_t(__bfloat16_as_ushort(l)) << 16);
  } else {
    const __half h = __float2half_rn(x);
    const __half l = __float2half_rn(x - __half2float(h));
    return uint32_t(__half_as_ushort(h)) | (uint32_t(__half_as_ushort(l)) << 16);
  }
#endif
}

// The B register of an m16n8k16 fragment from the words of two consecutive k: their hi halves (even
// columns of B) or their lo halves (odd columns), chosen by `sel` (0x5410 hi, 0x7632 lo).
__device__ __forceinline__ uint32_t b_pair(uint32_t w0, uint32_t w1, uint32_t sel) { return __byte_perm(w0, w1, sel); }

}  // namespace hotpath::cuda::dev
