// Small device helpers: explicit-width/ordering loads and stores, the global timer, named barriers,
// the m16n8k16 tensor-core step and the activations shared by the critical block and the precompute.
#pragma once
#include <cstdint>

namespace hotpath::cuda::dev {

__device__ __forceinline__ uint4 ld_volatile_v4(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_relaxed_sys_v4(const void* p) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile_v4(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ unsigned long long ld_acquire_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
// An arrival that orders everything before it (this thread's writes and those it has seen, e.g. through
// bar.sync) before the add, without a separate fence; no value back, so no round trip waited for.
__device__ __forceinline__ void red_release_add_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_volatile_u32(const unsigned* p) { return *(const volatile unsigned*)p; }
__device__ __forceinline__ void st_volatile_u32(unsigned* p, unsigned v) { *(volatile unsigned*)p = v; }

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// bar.sync on barrier 1 among the first `threads` threads (the compute warps), leaving barrier 0
// (__syncthreads) and the other warps alone.
__device__ __forceinline__ void named_barrier(int threads) {
  asm volatile("bar.sync 1, %0;" :: "r"(threads) : "memory");
}

// D += A(16x16) B(16x8), fp32 accumulation.
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

// mma.sync without `volatile`: pure register arithmetic the compiler may schedule freely.
template <bool BF16>
__device__ __forceinline__ void mma16816_nv(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

// __expf (ex2.approx, ~2 ulp): within ~1e-7 absolute of the float64 reference,
// far under the half-precision weight rounding (docs/model.md). tanh.approx (2^-11 relative) would not
// be. __fdividef (rcp.approx, 2 ulp; 1/inf = 0 gives the right limit) instead of the IEEE division
// routine.
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float tanh_(float x) { return 2.0f * sigmoid(2.0f * x) - 1.0f; }

// The same through the flush-to-zero forms of ex2 and rcp: one MUFU instruction each and no range
// fix-ups (__expf/__fdividef add a compare and two multiplies around each). ex2.approx.ftz: 2^-22
// relative; rcp.approx.ftz: 1 ulp; the flushed range (|x| > 87) returns exactly 0 or 1, as it should.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float sigmoid_ftz(float x) { return rcp_ftz(1.0f + ex2_ftz(-1.4426950408889634f * x)); }
__device__ __forceinline__ float tanh_ftz(float x) { return 2.0f * sigmoid_ftz(2.0f * x) - 1.0f; }

// One LSTM cell update; returns h', updates c.
__device__ __forceinline__ float lstm_cell(float gi, float gf, float gg, float go, float& c) {
  c = sigmoid(gf) * c + sigmoid(gi) * tanh_(gg);
  return sigmoid(go) * tanh_(c);
}
// The same through the flush-to-zero forms (a shorter dependency chain on a critical path).
__device__ __forceinline__ float lstm_cell_ftz(float gi, float gf, float gg, float go, float& c) {
  c = sigmoid_ftz(gf) * c + sigmoid_ftz(gi) * tanh_ftz(gg);
  return sigmoid_ftz(go) * tanh_ftz(c);
}

}  // namespace hotpath::cuda::dev
