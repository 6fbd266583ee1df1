// The signalling floor: the LSTM kernel's mailbox machinery with no model. single_warp (the regs
// critical block's path): warp 0 polls and answers. Otherwise (smem's path): warps [0, poll_warps) poll,
// then the responder, then the service warp.
#include <cuda_runtime.h>

#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/common/mailbox.cuh"

namespace hotpath::cuda {
namespace {

// Every input width the mailbox carries: 512 chunks (dual_seq) is 16 poller warps + responder + service.
static_assert(32 * (chunks_for(kMaxInputChunks, 32) + 2) <= kMaxBlockThreads, "one poll set of the widest input fits");

template <dev::PollLoad LOAD>
__global__ void __launch_bounds__(kMaxBlockThreads, 1) pingpong_kernel(const __grid_constant__ PingPongParams p) {
  __shared__ unsigned seqw[kMaxInputChunks];
  __shared__ unsigned claim[kMaxInputChunks];
  __shared__ float x32[kMaxInputChunks * 3];  // chunk c's floats at fpc * c: 3 a chunk for fewer chunks
  __shared__ dev::CtaFlags flags;
  volatile dev::CtaFlags* f = &flags;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // The answer: two output chunks {seq, v0, v1, seq}: x[0], x[n-1] | xor of all input bits, 0.
  auto respond = [&](unsigned seq) {
    unsigned x = 0;
    for (int i = lane; i < p.floats; i += 32) x ^= __float_as_uint(x32[i]);
    x = __reduce_xor_sync(0xffffffffu, x);
    if (lane < 2) {
      const uint4 v = lane == 0 ? make_uint4(seq, __float_as_uint(x32[0]), __float_as_uint(x32[p.floats - 1]), seq)
                                : make_uint4(seq, x, 0u, seq);
      dev::st_volatile_v4(p.mb.out + lane, v);
    }
  };
  const int per_set = (p.mb.n_in + 31) / 32;
  const int poll_warps = per_set * p.mb.poll_sets;
  for (int i = tid; i < kMaxInputChunks; i += blockDim.x) seqw[i] = claim[i] = 0;
  if (tid == 0) dev::reset_flags(f);
  __syncthreads();
  if (p.single_warp) {
    // The regs variant's path: warp 0 polls its chunks (lane c <-> chunk c), answers, and watches the
    // lease between looks (every 16th), with no other warp and no shared-memory hand-off.
    if (warp != 0) return;
    dev::LeaseWatch watch;
    if (lane == 0) watch.start(p.mb);
    unsigned checks = 0;
    const int fpc = p.mb.in_fpc;
    for (unsigned long long s = 0;; ++s) {
      const unsigned seq = wire_seq(s);
      const bool ok = dev::warp_poll_tick(
          p.mb, p.mb.in + (s % kInputRing) * p.mb.in_stride, seq,
          [&](uint4 v) {
            x32[fpc * lane] = __uint_as_float(v.y);
            x32[fpc * lane + 1] = __uint_as_float(v.z);
            if (fpc == 3) x32[3 * lane + 2] = __uint_as_float(v.w);
          },
          [&] {
            unsigned reason = 0;
            if (lane == 0 && (++checks & 15u) == 0) reason = watch.poll(p.mb);
            return __shfl_sync(0xffffffffu, reason, 0) != 0;
          });
      if (!ok) return;
      __syncwarp();
      respond(seq);
      __syncwarp();
    }
  }
  if (warp < poll_warps) {
    const int fpc = p.mb.in_fpc;
    dev::poll_loop<LOAD>(p.mb, warp % per_set, seqw, claim, f, false, 0, [&](int c, uint4 v) {
      x32[fpc * c] = __uint_as_float(v.y);
      x32[fpc * c + 1] = __uint_as_float(v.z);
      if (fpc == 3) x32[3 * c + 2] = __uint_as_float(v.w);
    });
  } else if (warp == poll_warps) {
    for (unsigned long long s = 0;; ++s) {
      const unsigned seq = wire_seq(s);
      if (!dev::wait_tick(seqw, p.mb.n_in, seq, f)) break;
      respond(seq);
      __syncwarp();
      if (lane == 0) f->consumed = s + 1;
      __syncwarp();
    }
  } else {
    dev::LeaseWatch watch;
    if (lane == 0) {
      watch.start(p.mb);
      unsigned reason = 0;
      while (!(reason = watch.poll(p.mb))) __nanosleep(1000);
      f->quit = reason;
    }
  }
}

}  // namespace

cudaError_t launch_pingpong(const PingPongParams& p, cudaStream_t stream) {
  if (p.floats < 1 || p.floats > kMaxInputFloats || p.mb.n_in != chunks_for(p.floats, p.mb.in_fpc))
    return cudaErrorInvalidValue;
  if (p.single_warp && (p.mb.n_in > 32 || p.mb.poll_sets != 1)) return cudaErrorInvalidValue;
  const int threads = p.single_warp ? 32 : 32 * (((p.mb.n_in + 31) / 32) * p.mb.poll_sets + 2);
  if (threads > kMaxBlockThreads) return cudaErrorInvalidValue;
  if (p.load_kind == 1) {
    pingpong_kernel<dev::PollLoad::relaxed_sys_v4><<<1, threads, 0, stream>>>(p);
  } else {
    pingpong_kernel<dev::PollLoad::volatile_v4><<<1, threads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace hotpath::cuda
