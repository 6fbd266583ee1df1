#include "cuda/kernels/hybrid/lstm_hybrid.hpp"

#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/precompute.cuh"

namespace hotpath::cuda {
namespace {

// The feeder (warp 0 of the last block): tick s's input chunks -> p.xbuf, then x_seq = s + 1. It hands tick s
// on only once round s - 1 is published (every precompute block has read x_{s-1} from xbuf by then). Leaves on
// the host's stop request or a lapsed lease, telling every block through words->quit and the host through the
// status chunk.
__device__ void hybrid_feeder(const LstmParams& p) {
  const int lane = int(threadIdx.x & 31);
  if (threadIdx.x >= 32) return;
  dev::LeaseWatch watch;
  if (lane == 0) watch.start(p.mb);
  unsigned reason = 0;
  auto leave_now = [&]() {  // whole warp
    unsigned r = lane == 0 ? watch.poll(p.mb) : 0u;
    reason = __shfl_sync(0xffffffffu, r, 0);
    return reason != 0;
  };
  const unsigned long long np = (unsigned long long)p.np;
  bool leaving = false;
  // started once tick 0's state (every window fresh) is out
  while (dev::ld_acquire_u64(&p.words->published) < np)
    if ((leaving = leave_now())) break;
  if (!leaving && lane == 0) dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(0), 0u, kServing, 0u));
  for (long long s = 0; !leaving; ++s) {
    while (dev::ld_acquire_u64(&p.words->published) < (unsigned long long)(s + 1) * np)
      if ((leaving = leave_now())) break;
    if (leaving) break;
    const unsigned seq = wire_seq(s);
    const Chunk* slot = p.mb.in + (s % kInputRing) * p.mb.in_stride;
    for (int c0 = 0; c0 < p.mb.n_in && !leaving; c0 += 32) {
      const int c = c0 + lane;
      bool have = c >= p.mb.n_in;
      for (;;) {
        if (!have) {
          const uint4 v = dev::ld_volatile_v4(slot + c);
          if (v.x == seq && (!p.mb.in_dual || v.w == seq)) {
            have = true;
            const float xs[3] = {__uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
            for (int i = 0; i < 3; ++i) {
              const int k = p.mb.in_fpc * c + i;
              if (i < p.mb.in_fpc && k < p.I) __stcg(p.xbuf + k, xs[i]);
            }
          }
        }
        if (__all_sync(0xffffffffu, have)) break;
        if ((leaving = leave_now())) break;
      }
    }
    if (leaving) break;
    __threadfence();
    __syncwarp();
    if (lane == 0) dev::st_release_u64(&p.words->x_seq, (unsigned long long)(s + 1));
  }
  if (lane == 0) {
    dev::st_volatile_u32(&p.words->quit, reason);
    __threadfence();
    dev::st_volatile_v4(p.mb.status, make_uint4(0u, 0u, reason, 0u));
    __threadfence_system();
  }
}

__global__ void __launch_bounds__(kHybridThreads, 1) lstm_hybrid(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  if (int(blockIdx.x) < p.np)
    dev::precompute_block(p, smem, int(blockIdx.x));
  else
    hybrid_feeder(p);
}

}  // namespace

cudaError_t launch_hybrid(const LstmParams& p, cudaStream_t stream, long long* max_coresident) {
  if (!p.export_state || !p.export_seq || p.export_lanes < 1 || p.np < 1 || !p.words || !p.xbuf || !p.h_state ||
      !p.pre_w || !p.mb.in || !p.mb.status || !p.mb.control)
    return cudaErrorInvalidValue;
  const void* fn = reinterpret_cast<const void*>(&lstm_hybrid);
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
  if (e != cudaSuccess) return e;
  int per_sm = 0, device = 0, sms = 0;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kHybridThreads, p.smem_bytes)) != cudaSuccess) return e;
  if ((e = cudaGetDevice(&device)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return e;
  const long long grid = (long long)p.np + 1, fits = (long long)per_sm * sms;
  if (max_coresident) *max_coresident = fits;
  if (fits < grid) return cudaErrorCooperativeLaunchTooLarge;
  LstmParams arg = p;
  void* args[] = {&arg};
  return cudaLaunchCooperativeKernel(fn, dim3(unsigned(grid)), dim3(kHybridThreads), args, size_t(p.smem_bytes), stream);
}

}  // namespace hotpath::cuda
