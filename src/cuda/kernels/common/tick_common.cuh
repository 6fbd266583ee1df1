// Pieces every critical-step variant and kernel family shares: shared-memory addressing, the hi/lo
// split of a layer input, the per-tick timing record, the stall test hook, and the tick protocol's
// block-side steps (pollers into shared memory, the input forwarded to the precompute, the control check).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/device_util.cuh"
#include "cuda/kernels/common/lstm_params.hpp"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/tagged_words.cuh"

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
// last layer, after the head, after the output store. Always the same thread, so its SM's clock64 and
// the globaltimer read here give the SM clock over the ticks (SharedWords::clock_*).
// Returns the %globaltimer it read (right after the output's store: the tick trace's stamp).
__device__ __forceinline__ unsigned long long record_tick_timing(SharedWords* w, const long long (&marks)[6]) {
  const unsigned long long ns = dev::globaltimer_ns(), cycles = (unsigned long long)marks[5];
  if (w->clock_prev_ns != 0) {
    w->clock_ns_sum += ns - w->clock_prev_ns;
    w->clock_cycles_sum += cycles - w->clock_prev_cycles;
    w->clock_hist[clock_bucket(cycles - w->clock_prev_cycles, ns - w->clock_prev_ns)] += 1;
  }
  w->clock_prev_ns = ns;
  w->clock_prev_cycles = cycles;
  const unsigned long long dt = (unsigned long long)(marks[5] - marks[1]);
  w->compute_cycles_sum += dt;
  if (dt > w->compute_cycles_max) w->compute_cycles_max = dt;
  w->ticks_timed += 1;
  w->tick_hist[cycle_bucket((unsigned long long)(marks[5] - marks[0]))] += 1;
#pragma unroll
  for (int i = 0; i < 5; ++i) {
    const unsigned long long seg = (unsigned long long)(marks[i + 1] - marks[i]);
    w->seg_sum[i] += seg;
    if (seg > w->seg_max[i]) w->seg_max[i] = seg;
  }
  return ns;
}

// Test hook (the cta family's STALL instantiations; the cluster kernel's block 0, one compare a tick):
// the critical step stalls stall_ns before answering tick stall_tick (tests of the host's deadline and
// fallback).
__device__ __forceinline__ void stall_if(const LstmParams& p, unsigned long long s) {
  if ((long long)s != p.stall_tick) return;
  const unsigned long long until = dev::globaltimer_ns() + p.stall_ns;
  while (dev::globaltimer_ns() < until) {
  }
}


// Poller warp pw: the tick's input chunks -> x32 (fp32, for the precompute) and the layer-0 buffer as hi
// and lo halves (row stride `stride` halves). gate_forward: a tick is polled only once the previous one
// was forwarded (x32 is read by the forwarder); gate_answered: only once it was answered. words (the grid
// family's tagged input words, LstmParams::grid_pollers_publish; null: none): each element also goes out as
// its word, hi | lo << 16 under the tick's seq, the moment its chunk arrives. The words are one copy that
// every block reads, so with them a tick is always polled only once the previous one was answered: by then
// every block has read the previous tick's words (its head partial sums, which the answer waited for, come
// after).
template <bool BF16>
__device__ __forceinline__ void poll_input(const LstmParams& p, int pw, unsigned* seqw, unsigned* claim, float* x32,
                                           uint16_t* xin0, volatile CtaFlags* f, bool gate_forward,
                                           bool gate_answered, unsigned long long* words = nullptr) {
  gate_answered = gate_answered || words != nullptr;  // the one copy of the words: see above
  const int per_set = (p.mb.n_in + 31) / 32;
  const int I = p.I, stride = p.xin_stride, fpc = p.mb.in_fpc;
  poll_loop<PollLoad::volatile_v4>(
      p.mb, pw % per_set, seqw, claim, f, gate_forward, p.gate_sleep_ns,
      [&](int c, uint4 v) {
        const float xs[3] = {__uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
        for (int i = 0; i < 3; ++i) {
          const int k = fpc * c + i;
          if (i < fpc && k < I) {
            x32[k] = xs[i];
            if (words) {
              const uint32_t hl = hi_lo<BF16>(xs[i]);  // hi | lo << 16, split_store's halves
              xin0[k] = uint16_t(hl);
              xin0[stride + k] = uint16_t(hl >> 16);
              st_word_gpu(words + k, tagged(v.x, hl));  // v.x: the tick's seq
            } else {
              split_store<BF16>(xin0 + k, xin0 + stride + k, xs[i]);
            }
          }
        }
      },
      gate_answered);
}

// The service warp (whole warp): passes tick fwd's input (x32) to the precompute blocks and counts it
// in f->forwarded. The caller has decided that tick fwd's input is complete and read.
__device__ __forceinline__ void forward_input(const LstmParams& p, const float* x32, unsigned long long& fwd,
                                              volatile CtaFlags* f) {
  const int lane = threadIdx.x & 31;
  __threadfence_block();
  for (int i = lane; i < p.I; i += 32) __stcg(p.xbuf + i, x32[i]);
  __threadfence();
  __syncwarp();
  if (lane == 0) st_release_u64(&p.words->x_seq, fwd + 1);
  ++fwd;
  __syncwarp();
  if (lane == 0) f->forwarded = fwd;
}

// The service warp (whole warp): the control check; on a stop request or a lapsed lease it makes every
// block leave and returns true.
__device__ __forceinline__ bool control_says_leave(const LstmParams& p, LeaseWatch& watch, volatile CtaFlags* f) {
  const int lane = threadIdx.x & 31;
  unsigned reason = lane == 0 ? watch.poll(p.mb) : 0u;
  reason = __shfl_sync(0xffffffffu, reason, 0);
  if (!reason) return false;
  if (lane == 0) {
    f->quit = reason;
    st_volatile_u32(&p.words->quit, reason);
    __threadfence();
  }
  return true;
}

// Compute warps (nct threads), step 1 of every tick: thread 0 waits for the precompute round that
// prepares tick s (np blocks publish it) or for the block to quit; every compute warp reads the decision
// after a named barrier, so none leaves while another waits there. True: leave.
__device__ __forceinline__ bool wait_precompute_round(const LstmParams& p, unsigned long long s, int nct,
                                                      volatile CtaFlags* f) {
  if (threadIdx.x == 0) {
    const unsigned long long target = (s + 1) * (unsigned long long)p.np;
    while (ld_acquire_u64(&p.words->published) < target && !f->quit) {
    }
    f->decision = f->quit ? 1u : 0u;
  }
  named_barrier(nct);
  return f->decision != 0;
}

// The multi-block families, every compute thread (nct of them): this block's slice of the published
// round, P_l [L][4 gates][Ub] and c_l [L][Ub] of units [u0, u0 + Ub) (zero past H).
__device__ __forceinline__ void load_pc_slice(const LstmParams& p, int u0, int Ub, float* sP, float* sc, int nct) {
  const int H = p.H, L = p.L;
  for (int i = int(threadIdx.x); i < L * 4 * Ub; i += nct) {
    const int l = i / (4 * Ub), r = i % (4 * Ub), gate = r / Ub, j = r % Ub;
    sP[i] = u0 + j < H ? __ldcg(p.pub_P + l * 4 * H + gate * H + u0 + j) : 0.f;
  }
  for (int i = int(threadIdx.x); i < L * Ub; i += nct) {
    const int l = i / Ub, j = i % Ub;
    sc[i] = u0 + j < H ? __ldcg(p.pub_c + l * H + u0 + j) : 0.f;
  }
}

}  // namespace hotpath::cuda::dev
