// Pieces every critical-step variant shares: shared-memory addressing, the hi/lo split of a layer input,
// the per-tick timing record and the stall test hook.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/device_util.cuh"
#include "cuda/kernels/lstm_params.hpp"

namespace hotpath::cuda::dev {

template <class T>
__device__ __forceinline__ T* smem_at(char* base, int off) {
  return reinterpret_cast<T*>(base + off);
}

// hi + lo split of x in 16-bit floats: the tensor cores then see x to ~22 (fp16) / 16 (bf16) bits,
// leaving weight rounding as the only half-precision error (B columns 0 and 1 of the mma).
template <bool BF16>
__device__ __forceinline__ void split_store(uint16_t* hi, uint16_t* lo, float x) {
  if constexpr (BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    const __nv_bfloat16 l = __float2bfloat16_rn(x - __bfloat162float(h));
    *hi = __bfloat16_as_ushort(h);
    *lo = __bfloat16_as_ushort(l);
  } else {
    const __half h = __float2half_rn(x);
    const __half l = __float2half_rn(x - __half2float(h));
    *hi = __half_as_ushort(h);
    *lo = __half_as_ushort(l);
  }
}

// Instrumentation of one answered tick, written by one thread after the output is stored (off the
// critical path). marks: clock64 at input seen (warp 0), past the barrier, after layer 0, after the
// last layer, after the head, after the output store; ns_in: globaltimer past the barrier.
__device__ __forceinline__ void record_tick_timing(SharedWords* w, const long long (&marks)[6], unsigned long long ns_in) {
  const unsigned long long ns = dev::globaltimer_ns() - ns_in;
  const unsigned long long dt = (unsigned long long)(marks[5] - marks[1]);
  w->compute_cycles_sum += dt;
  w->compute_ns_sum += ns;
  if (dt > w->compute_cycles_max) w->compute_cycles_max = dt;
  w->ticks_timed += 1;
#pragma unroll
  for (int i = 0; i < 5; ++i) {
    const unsigned long long seg = (unsigned long long)(marks[i + 1] - marks[i]);
    w->seg_sum[i] += seg;
    if (seg > w->seg_max[i]) w->seg_max[i] = seg;
  }
}

// Test hook of the STALL instantiations only: the critical block stalls stall_ns before answering tick
// stall_tick (tests of the host's deadline and fallback).
__device__ __forceinline__ void stall_if(const LstmParams& p, unsigned long long s) {
  if ((long long)s != p.stall_tick) return;
  const unsigned long long until = dev::globaltimer_ns() + p.stall_ns;
  while (dev::globaltimer_ns() < until) {
  }
}


}  // namespace hotpath::cuda::dev
