// The persistent LSTM kernel (see lstm_params.hpp for the roles of the blocks).
//
// Critical block (block 0), warps:
//   [0, compute_warps)           compute: wait for the precompute round, prefetch (P_l, c_l) into shared
//                                memory, report `ready`, wait for the tick's input, run the layers on
//                                the tensor cores (W_ih fragments resident in shared memory), the head,
//                                and write the output chunks the moment they exist.
//   [compute_warps, +poll_warps) pollers: one lane per 16-byte input chunk (mailbox.cuh).
//   last                         service: forwards the input to the precompute and watches the lease.
// Precompute blocks (1..np): hidden units [b*U, b*U+U) of every layer, all open windows; grid barriers
// (a monotonic counter) between layers; publish P and c of the next completing window.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <exception>
#include <iterator>

#include "cuda/device.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/precompute.cuh"

namespace hotpath::cuda {
namespace {

using dev::CtaFlags;
using dev::precompute_block;
using dev::record_tick_timing;
using dev::smem_at;
using dev::split_store;
using dev::stall_if;

// ---------------------------------------------------------------------------------------------------
// critical block

// Gate pre-activations W_ih,l . in for unit group q (two m16 tiles), two accumulator chains per tile.
// Lane (g, t=0) returns rows g and g+8 of both tiles: gates i, f (tile 0) and g, o (tile 1) of unit 8q+g.
// The first KREG k-tiles come from registers (wr), the remaining kt (even) from shared memory.
template <bool BF16, int KREG>
__device__ __forceinline__ void group_gates(const uint4* frag, int kt, const uint32_t* xin32, int stride32,
                                            float (&y)[4], const uint4 (&wr)[2][KREG > 0 ? KREG : 1],
                                            bool second_tile = true) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float acc[2][2][4] = {};
  const uint32_t* bcol = xin32 + (g & 1) * stride32;
  const bool bvalid = g < 2;
#pragma unroll
  for (int k = 0; k < KREG; ++k) {
    const uint32_t b0 = bvalid ? bcol[k * 8 + t] : 0u;
    const uint32_t b1 = bvalid ? bcol[k * 8 + 4 + t] : 0u;
    dev::mma16816<BF16>(acc[0][k & 1], wr[0][k], b0, b1);
    dev::mma16816<BF16>(acc[1][k & 1], wr[1][k], b0, b1);
  }
  bcol += KREG * 8;
#pragma unroll 2
  for (int k = 0; k < kt; k += 2) {
#pragma unroll
    for (int ch = 0; ch < 2; ++ch) {
      const int kk = k + ch;
      const uint32_t b0 = bvalid ? bcol[kk * 8 + t] : 0u;
      const uint32_t b1 = bvalid ? bcol[kk * 8 + 4 + t] : 0u;
      const uint4 a0 = frag[kk * 32 + lane];
      dev::mma16816<BF16>(acc[0][ch], a0, b0, b1);
      if (second_tile) {
        const uint4 a1 = frag[(kt + kk) * 32 + lane];
        dev::mma16816<BF16>(acc[1][ch], a1, b0, b1);
      }
    }
  }
  // columns 0 (hi) and 1 (lo) of rows g and g+8
  y[0] = (acc[0][0][0] + acc[0][0][1]) + (acc[0][1][0] + acc[0][1][1]);
  y[1] = (acc[0][0][2] + acc[0][0][3]) + (acc[0][1][2] + acc[0][1][3]);
  y[2] = (acc[1][0][0] + acc[1][0][1]) + (acc[1][1][0] + acc[1][1][1]);
  y[3] = (acc[1][0][2] + acc[1][0][3]) + (acc[1][1][2] + acc[1][1][3]);
}

// STALL: the test-only instantiation (CudaOptions::stall_tick); production kernels are STALL = false and
// carry no trace of the hook.
template <bool BF16, int KREG, bool STALL>
__device__ void critical_compute(const LstmParams& p, char* smem, volatile CtaFlags* f) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nct = p.compute_warps * 32;
  const uint4* frags = smem_at<const uint4>(smem, p.s_frags);
  uint16_t* xin = smem_at<uint16_t>(smem, p.s_xin);
  const unsigned* seqw = smem_at<const unsigned>(smem, p.s_seqw);
  float* sP = smem_at<float>(smem, p.s_P);
  float* sc = smem_at<float>(smem, p.s_c);
  float* sz = smem_at<float>(smem, p.s_z);
  const int H = p.H, L = p.L;
  const int stride = p.xin_stride;  // halves per hi/lo row
  const int g = lane >> 2, t = lane & 3;

  // Layer-0 tiles held in registers for the whole life of the kernel (KREG > 0: one group per warp).
  uint4 wr[2][KREG > 0 ? KREG : 1];
  const uint4 (&no_regs)[2][1] = *reinterpret_cast<const uint4(*)[2][1]>(wr);
  if constexpr (KREG > 0) {
    const uint4* src = static_cast<const uint4*>(p.frags) + p.reg_off + warp * 2 * KREG * 32 + lane;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int k = 0; k < KREG; ++k) wr[m][k] = warp < p.groups ? __ldg(src + (m * KREG + k) * 32) : make_uint4(0, 0, 0, 0);
  }
  (void)no_regs;

  // head bias of the rows this lane answers (warp 0, t == 0)
  float hb[4] = {0.f, 0.f, 0.f, 0.f};
  if (warp == 0 && t == 0) {
    const int rows[4] = {g, g + 8, 16 + g, 24 + g};
#pragma unroll
    for (int i = 0; i < 4; ++i) hb[i] = rows[i] < p.O ? p.head_b[rows[i]] : 0.f;
  }

  // Every exit decision is taken by one thread and read by all compute warps after a named barrier,
  // so no warp can leave while another waits at the barrier.
  unsigned long long s = 0;
  for (;; ++s) {
    // (1) the precompute round that prepares tick s
    if (dev::wait_precompute_round(p, s, nct, f)) break;
    // (2) prefetch P_l and c_l of the completing window
    for (int i = tid; i < L * 4 * H; i += nct) sP[i] = __ldcg(p.pub_P + i);
    for (int i = tid; i < L * H; i += nct) sc[i] = __ldcg(p.pub_c + i);
    dev::named_barrier(nct);
    if (tid == 0) dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(s), unsigned(s), kServing, 0));
    // (3) the input: warp 0 watches the pollers' words and decides; with keep_warm every compute warp
    // watches too, issuing a dummy mma each turn so the tensor cores are awake when the input lands.
    const unsigned seq = wire_seq(s);
    long long t_seen = 0;
    if (warp == 0 || p.keep_warm) {
      float dummy[4] = {0.f, 0.f, 0.f, 0.f};
      const uint4 za = make_uint4(0, 0, 0, 0);
      bool ok;
      for (;;) {
        if (dev::tick_arrived(seqw, p.mb.n_in, seq)) {
          ok = true;
          t_seen = clock64();
          break;
        }
        if (f->quit) {
          ok = false;
          break;
        }
        if (p.keep_warm) dev::mma16816<BF16>(dummy, za, 0u, 0u);
      }
      __threadfence_block();
      asm volatile("" ::"f"(dummy[0]));
      if (warp == 0 && lane == 0) f->decision = ok ? 0u : 1u;
      __syncwarp();
    }
    dev::named_barrier(nct);
    if (f->decision) break;
    const long long t_in = clock64();
    long long t_l0 = t_in;
    if constexpr (STALL) stall_if(p, s);
    // (4) layers
    for (int l = 0; l < L; ++l) {
      const int kt = p.kt[l] - (l == 0 ? KREG : 0);
      const uint32_t* in32 = reinterpret_cast<const uint32_t*>(xin + l * 2 * stride);
      uint16_t* out = xin + (l + 1) * 2 * stride;
      for (int q = warp; q < p.groups; q += p.compute_warps) {
        float y[4];
        if (l == 0) {
          group_gates<BF16, KREG>(frags + p.frag_off[l] + q * 2 * kt * 32, kt, in32, stride / 2, y, wr);
        } else {
          group_gates<BF16, 0>(frags + p.frag_off[l] + q * 2 * kt * 32, kt, in32, stride / 2, y, no_regs);
        }
        const int u = q * kUnitsPerGroup + g;
        if (t == 0 && u < H) {
          const float* P = sP + l * 4 * H;
          float c = sc[l * H + u];
          const float h = dev::lstm_cell(y[0] + P[u], y[1] + P[H + u], y[2] + P[2 * H + u], y[3] + P[3 * H + u], c);
          split_store<BF16>(out + u, out + stride + u, h);
        }
      }
      dev::named_barrier(nct);
      if (l == 0) {
        t_l0 = clock64();
        if (tid == 0) f->consumed = s + 1;  // every compute warp has read this tick's input
      }
    }
    const long long t_layers = clock64();
    // (5) head and output
    if (warp == 0) {
      float y[4];
      group_gates<BF16, 0>(frags + p.frag_off[L], p.kt[L], reinterpret_cast<const uint32_t*>(xin + L * 2 * stride),
                           stride / 2, y, no_regs, p.O > 16);
      if (t == 0) {
        const int rows[4] = {g, g + 8, 16 + g, 24 + g};
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (rows[i] < p.O) sz[rows[i]] = y[i] + hb[i];
      }
      __syncwarp();
      const long long t_head = clock64();
      if (lane < p.mb.n_out) {
        const int o = lane * kOutFloatsPerChunk;
        uint4 v;
        v.x = seq;
        v.y = __float_as_uint(o < p.O ? sz[o] : 0.f);
        v.z = __float_as_uint(o + 1 < p.O ? sz[o + 1] : 0.f);
        v.w = seq;
        dev::st_volatile_v4(p.mb.out + lane, v);
      }
      if (lane == 0) record_tick_timing(p.words, {t_seen, t_in, t_l0, t_layers, t_head, clock64()});
      __syncwarp();
      if (lane == 0) f->answered = s + 1;
    }
  }
  if (tid == 0) {
    __threadfence_system();
    dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(s), unsigned(s), f->quit, 0));
  }
}

// The service warp: forwards each tick's input to the precompute blocks (after they have consumed the
// previous one) and checks the control chunk; on stop or lease expiry it makes every block leave.
__device__ void critical_service(const LstmParams& p, char* smem, volatile CtaFlags* f) {
  const int lane = threadIdx.x & 31;
  const float* x32 = smem_at<const float>(smem, p.s_x32);
  dev::LeaseWatch watch;
  if (lane == 0) watch.start(p.mb);
  unsigned long long fwd = 0;
  for (;;) {
    // Tick fwd's input is complete and every compute warp has read it (so the compute warps have also
    // prefetched the previous precompute round, which the next round would overwrite).
    const unsigned long long done = p.forward_after_output ? f->answered : f->consumed;
    if (__shfl_sync(0xffffffffu, done > fwd, 0)) {  // one lane decides for the warp
      dev::forward_input(p, x32, fwd, f);
      continue;
    }
    if (dev::control_says_leave(p, watch, f)) return;
    __nanosleep(100);
  }
}

template <bool BF16, int KREG, bool STALL>
__device__ void critical_block(const LstmParams& p, char* smem) {
  const int tid = threadIdx.x, warp = tid >> 5;
  volatile CtaFlags* f = smem_at<volatile CtaFlags>(smem, p.s_flags);
  // weights -> shared memory, input buffers and flags cleared
  {
    const uint4* src = static_cast<const uint4*>(p.frags);
    uint4* dst = smem_at<uint4>(smem, p.s_frags);
    for (int i = tid; i < p.frag_total; i += blockDim.x) dst[i] = __ldg(src + i);
    uint32_t* xin = smem_at<uint32_t>(smem, p.s_xin);
    for (int i = tid; i < (p.L + 1) * p.xin_stride; i += blockDim.x) xin[i] = 0;
    unsigned* seqw = smem_at<unsigned>(smem, p.s_seqw);
    unsigned* claim = smem_at<unsigned>(smem, p.s_claim);
    for (int i = tid; i < p.mb.n_in; i += blockDim.x) seqw[i] = claim[i] = 0;
    if (tid == 0) dev::reset_flags(f);
  }
  __syncthreads();
  if (warp < p.compute_warps) {
    critical_compute<BF16, KREG, STALL>(p, smem, f);
  } else if (warp < p.compute_warps + p.poll_warps) {
    dev::poll_input<BF16>(p, warp - p.compute_warps, smem_at<unsigned>(smem, p.s_seqw), smem_at<unsigned>(smem, p.s_claim),
                          smem_at<float>(smem, p.s_x32), smem_at<uint16_t>(smem, p.s_xin), f, true, false);
  } else {
    critical_service(p, smem, f);
  }
}

template <bool BF16, int KREG, bool STALL>
__global__ void __launch_bounds__(kMaxBlockThreads, 1) lstm_persistent(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  if (blockIdx.x == 0) {
    critical_block<BF16, KREG, STALL>(p, smem);
  } else {
    precompute_block(p, smem, int(blockIdx.x) - 1);
  }
}


// ---------------------------------------------------------------------------------------------------
// critical block, variant "regs" (kVariantRegs): every W_ih fragment lives in registers, so the matrix
// part reads no shared memory for A (the "smem" variant streams 160 KiB of fragments through the
// 128 B/clk shared-memory pipe each tick for lstm_s: >= 1 300 cycles of the 2 700 measured).

// Half-word position of input element k in one B column buffer, swizzled so that lane t reads the B
// registers of two k16 tiles with one LDS.128: uint4 [k16 pair j][t] = {b0(2j), b1(2j), b0(2j+1), b1(2j+1)}
// (b0 = rows 2t, 2t+1 of the tile, b1 = rows 2t+8, 2t+9).
__device__ __forceinline__ int bpos(int k) {
  const int kk = k >> 4, r = k & 15, w = r >> 1;
  const int slot = (w >> 2) + 2 * (kk & 1);
  return ((((kk >> 1) * 4 + (w & 3)) * 4 + slot) << 1) + (r & 1);
}

// Gate pre-activations of this warp's unit group from register-resident fragments w (two m16 tiles),
// CH accumulator chains per tile (k16 tiles alternate between them: CH = 2 halves the dependent HMMA
// chain of a deep layer). Every B column carries the layer input, hi in the even columns and lo in the
// odd ones (N = 8 is paid for anyway), so EVERY lane (g, t) ends with all four gates of unit g:
// y = {i, f, g, o} (rows g, g+8 of both tiles, hi + lo). col0: the input buffer's hi row; lo at +stride.
template <bool BF16, int KT, int CH>
__device__ __forceinline__ void gates_regs(const uint4 (&w)[2][KT], const uint16_t* col0, int stride, float (&y)[4]) {
  static_assert(CH == 1 || CH == 2, "one or two chains per tile");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint4* b = reinterpret_cast<const uint4*>(col0 + (g & 1) * stride) + t;
  float a0[CH][4] = {}, a1[CH][4] = {};
  uint4 v[KT / 2];
#pragma unroll
  for (int j = 0; j < KT / 2; ++j) v[j] = b[j * 4];
#pragma unroll
  for (int j = 0; j < KT / 2; ++j) {
    dev::mma16816_nv<BF16>(a0[0], w[0][2 * j], v[j].x, v[j].y);
    dev::mma16816_nv<BF16>(a1[0], w[1][2 * j], v[j].x, v[j].y);
    dev::mma16816_nv<BF16>(a0[CH - 1], w[0][2 * j + 1], v[j].z, v[j].w);
    dev::mma16816_nv<BF16>(a1[CH - 1], w[1][2 * j + 1], v[j].z, v[j].w);
  }
  // columns 2t (hi) and 2t+1 (lo) of rows g (gate i / g) and g+8 (gate f / o)
  y[0] = a0[0][0] + a0[0][1];
  y[1] = a0[0][2] + a0[0][3];
  y[2] = a1[0][0] + a1[0][1];
  y[3] = a1[0][2] + a1[0][3];
  if constexpr (CH == 2) {
    y[0] += a0[1][0] + a0[1][1];
    y[1] += a0[1][2] + a0[1][3];
    y[2] += a1[1][0] + a1[1][1];
    y[3] += a1[1][2] + a1[1][3];
  }
}

// The whole critical block of the regs variant: compute warps only (<= 16 warps, so each SM
// sub-partition holds <= 4 and a thread may use 128 registers; a 17th warp would cap it at 96).
//   warp 0 also polls the input chunks itself (lane c <-> chunk c, the same 16-byte ld.volatile as the
//          poller warps of the smem variant) and, in its waits, watches the lease / stop request;
//   warp 1 (warp 0 when there is one warp) forwards x_t to the precompute once the last layer is done.
template <bool BF16, int KT0, int KTH, int L, bool STALL>
__device__ void critical_block_regs(const LstmParams& p, char* smem) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  volatile CtaFlags* f = smem_at<volatile CtaFlags>(smem, p.s_flags);
  const int H = p.H, O = p.O, I = p.I;
  // fragment region: layer 0's fragments [groups][2][KT0][32] (as in global memory), then the head
  // weights [O][H] (fp32) and the partial sums [warps][kRegsMaxOutputs]
  uint4* sW0 = smem_at<uint4>(smem, p.s_frags + 16 * p.frag_off[0]);
  float* sHW = smem_at<float>(smem, p.s_frags + 16 * p.frag_off[1]);
  float* sHP = sHW + O * H;
  float* sz = smem_at<float>(smem, p.s_z);        // head bias
  float* x32 = smem_at<float>(smem, p.s_x32);
  uint16_t* xin = smem_at<uint16_t>(smem, p.s_xin);
  {
    for (int i = tid; i < O * H; i += blockDim.x) sHW[i] = __ldg(p.head_w + i);
    const uint4* w0src = static_cast<const uint4*>(p.frags) + p.frag_off[0];
    for (int i = tid; i < p.groups * 2 * KT0 * 32; i += blockDim.x) sW0[i] = __ldg(w0src + i);
    for (int i = tid; i < kMaxOutputs; i += blockDim.x) sz[i] = i < O ? __ldg(p.head_b + i) : 0.f;
    uint32_t* x = smem_at<uint32_t>(smem, p.s_xin);
    for (int i = tid; i < (p.L + 1) * p.xin_stride; i += blockDim.x) x[i] = 0;
    if (tid == 0) {
      f->quit = 0;
      f->decision = 0;
    }
  }
  __syncthreads();
  const int nct = p.compute_warps * 32;
  const float* sP = smem_at<const float>(smem, p.s_P);
  const float* sc = smem_at<const float>(smem, p.s_c);
  const int stride = p.xin_stride;
  const int g = lane >> 2, t = lane & 3;
  const int q = warp;  // one unit group per warp (compute_warps == groups)
  const int u = min(q * kUnitsPerGroup + g, H - 1);
  const bool unit_valid = q * kUnitsPerGroup + g < H;
  const int fwd_warp = p.compute_warps > 1 ? 1 : 0;
  constexpr int NH = L > 1 ? L - 1 : 1;

  // The hidden layers' fragments, for the life of the kernel: layer l [groups][2][kt][32] uint4 at
  // frag_off[l]. Layer 0's are read from shared memory each tick while the input is awaited (off the
  // critical path): their registers are then free during the hidden layers, for a second accumulator
  // chain per tile.
  uint4 wh[NH][2][KTH];
  {
    const uint4* src = static_cast<const uint4*>(p.frags);
#pragma unroll
    for (int l = 0; l < NH; ++l)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int k = 0; k < KTH; ++k)
          wh[l][m][k] = L > 1 ? __ldg(src + p.frag_off[l + 1] + ((q * 2 + m) * KTH + k) * 32 + lane)
                              : make_uint4(0u, 0u, 0u, 0u);
  }

  // One layer's cell update from the gate pre-activations y (all four in every lane). The four lanes of
  // a unit share the activations: lane t computes gate t's (sigmoid, or tanh = 2 sigmoid(2x) - 1 for
  // t = 2), so a warp issues 2 + 2 MUFU instructions per layer instead of 10 (the SM sub-partition's
  // MUFU pipe is shared by its 4 warps), and 4 shuffles hand them round. The new h goes to the next
  // layer's input buffer (lane 0: hi, lane 1: lo), or (last layer) into this warp's head partial sums:
  // lane t for output t (fp32 h, rounded head weights), reduced over the warp's 8 units.
  auto cell = [&](int l, const float (&y)[4], bool last) {
    const float pre = (t == 0 ? y[0] : t == 1 ? y[1] : t == 2 ? y[2] : y[3]) + sP[(l * 4 + t) * H + u];
    const float a = dev::sigmoid_ftz(t == 2 ? 2.f * pre : pre);
    const float act = t == 2 ? 2.f * a - 1.f : a;
    const int base = lane & ~3;
    const float ai = __shfl_sync(0xffffffffu, act, base), af = __shfl_sync(0xffffffffu, act, base + 1),
                ag = __shfl_sync(0xffffffffu, act, base + 2), ao = __shfl_sync(0xffffffffu, act, base + 3);
    const float c = af * sc[l * H + u] + ai * ag;
    const float h = ao * dev::tanh_ftz(c);
    if (!last) {
      if (unit_valid && t < 2) {
        uint16_t hi, lo;
        split_store<BF16>(&hi, &lo, h);
        xin[(l + 1) * 2 * stride + t * stride + bpos(u)] = t == 0 ? hi : lo;
      }
    } else {
      float v = unit_valid && t < O ? sHW[t * H + u] * h : 0.f;
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (lane < kRegsMaxOutputs) sHP[warp * kRegsMaxOutputs + lane] = v;
    }
  };

  dev::LeaseWatch watch;
  if (tid == 0) watch.start(p.mb);
  unsigned checks = 0;
  // tid 0 only: on a stop request or a lapsed lease, make every block leave; true when leaving
  auto lease_check = [&]() -> bool {
    if (f->quit) return true;
    if ((++checks & 15u) != 0) return false;
    const unsigned reason = watch.poll(p.mb);
    if (!reason) return false;
    f->quit = reason;
    dev::st_volatile_u32(&p.words->quit, reason);
    __threadfence();
    return true;
  };

  unsigned long long s = 0;
  for (;; ++s) {
    // (1) the precompute round that prepares tick s
    if (tid == 0) {
      const unsigned long long target = (s + 1) * (unsigned long long)p.np;
      bool quit = false;
      while (dev::ld_acquire_u64(&p.words->published) < target) {
        if ((quit = lease_check())) break;
      }
      f->decision = quit ? 1u : 0u;
    }
    dev::named_barrier(nct);
    if (f->decision) break;
    // (2) prefetch P_l and c_l of the completing window
    {
      float* wP = smem_at<float>(smem, p.s_P);
      float* wc = smem_at<float>(smem, p.s_c);
      for (int i = tid; i < L * 4 * H; i += nct) wP[i] = __ldcg(p.pub_P + i);
      for (int i = tid; i < L * H; i += nct) wc[i] = __ldcg(p.pub_c + i);
    }
    dev::named_barrier(nct);
    if (tid == 0) dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(s), unsigned(s), kServing, 0));
    // (3) the input: warp 0 polls the chunks of ring slot s % kInputRing, one lane each; meanwhile
    // (before the barrier) every warp reads its layer-0 fragments
    uint4 w0[2][KT0];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int k = 0; k < KT0; ++k) w0[m][k] = sW0[((q * 2 + m) * KT0 + k) * 32 + lane];
    const unsigned seq = wire_seq(s);
    long long t_seen = 0;
    if (warp == 0) {
      const int fpc = p.mb.in_fpc;
      const bool ok = dev::warp_poll_tick(
          p.mb, p.mb.in + (s % kInputRing) * p.mb.in_stride, seq,
          [&](uint4 v) {
            const float xs[3] = {__uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
            for (int i = 0; i < 3; ++i) {
              const int k = fpc * lane + i;
              if (i < fpc && k < I) {
                x32[k] = xs[i];
                const int pos = bpos(k);
                split_store<BF16>(xin + pos, xin + stride + pos, xs[i]);
              }
            }
          },
          [&] {
            bool quit = false;
            if (lane == 0) quit = lease_check();
            return __shfl_sync(0xffffffffu, quit, 0);
          });
      t_seen = clock64();
      if (lane == 0) f->decision = ok ? 0u : 1u;
      __syncwarp();
    }
    dev::named_barrier(nct);
    if (f->decision) break;
    const long long t_in = clock64();
    if constexpr (STALL) stall_if(p, s);
    // (4) layers; the last one leaves the head's partial sums
    {
      float y[4];
      gates_regs<BF16, KT0, 1>(w0, xin, stride, y);
      cell(0, y, L == 1);
    }
    dev::named_barrier(nct);
    const long long t_l0 = clock64();
#pragma unroll
    for (int l = 1; l < L; ++l) {
      float y[4];
      gates_regs<BF16, KTH, 2>(wh[l - 1], xin + l * 2 * stride, stride, y);
      cell(l, y, l == L - 1);
      dev::named_barrier(nct);
    }
    const long long t_layers = clock64();
    // (5) head: warp 0 adds the compute warps' partial sums (lane w*4 + o holds warp w's for output o,
    // and lane 32 + w*4 + o's too), then lanes 0 and 1 store the output chunks {seq, z0, z1, seq} and
    // {seq, z2, z3, seq}.
    if (warp == 0) {
      const int np4 = p.compute_warps * kRegsMaxOutputs;
      float v = lane < np4 ? sHP[lane] : 0.f;
      if (lane + 32 < np4) v += sHP[lane + 32];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      v += sz[lane & (kRegsMaxOutputs - 1)];  // lanes 0..3: output lane
      const float za = __shfl_sync(0xffffffffu, v, 2 * (lane & 1)), zb = __shfl_sync(0xffffffffu, v, 2 * (lane & 1) + 1);
      const long long t_head = clock64();
      dev::store_output_chunk(p.mb, seq, O, za, zb);  // n_out <= 2 (O <= kRegsMaxOutputs)
      if (lane == 0) record_tick_timing(p.words, {t_seen, t_in, t_l0, t_layers, t_head, clock64()});
    }
    // (6) x_t to the precompute (its round s-1 has published, so it no longer reads xbuf); x32 is
    // next written in tick s+1's step (3), after two more barriers.
    if (warp == fwd_warp) {
      for (int i = lane; i < I; i += 32) __stcg(p.xbuf + i, x32[i]);
      __threadfence();
      __syncwarp();
      if (lane == 0) dev::st_release_u64(&p.words->x_seq, s + 1);
    }
  }
  if (tid == 0) {
    __threadfence_system();
    dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(s), unsigned(s), f->quit, 0));
  }
}

template <bool BF16, int KT0, int KTH, int L, bool STALL>
__global__ void __launch_bounds__(kRegsMaxThreads, 1) lstm_persistent_regs(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  if (blockIdx.x == 0) {
    critical_block_regs<BF16, KT0, KTH, L, STALL>(p, smem);
  } else {
    precompute_block(p, smem, int(blockIdx.x) - 1);
  }
}

// The instantiation for one of kRegsShapes (the one list of the compiled shapes), or null.
template <bool BF16, bool STALL, size_t N = 0>
const void* regs_kernel(int kt0, int kth, int L) {
  if constexpr (N < std::size(kRegsShapes)) {
    constexpr RegsShape r = kRegsShapes[N];
    if (kt0 == r.kt0 && L == r.layers && (L == 1 || kth == r.kth))
      return (const void*)&lstm_persistent_regs<BF16, r.kt0, r.kth, r.layers, STALL>;
    return regs_kernel<BF16, STALL, N + 1>(kt0, kth, L);
  }
  return nullptr;
}

// The kernel for p: the production instantiation, or (p.stall_tick >= 0) the test-only one with the
// stall hook, compiled for fp16 only. Null when none is compiled for p.
const void* lstm_kernel(const LstmParams& p) {
  const bool stall = p.stall_tick >= 0;
  if (stall && p.bf16) return nullptr;
  if (p.variant == kVariantRegs) {
    if (p.kreg != 0 || p.threads() > kRegsMaxThreads || p.O > kRegsMaxOutputs) return nullptr;
    const int kth = p.L > 1 ? p.kt[1] : 0;
    if (stall) return regs_kernel<false, true>(p.kt[0], kth, p.L);
    return p.bf16 ? regs_kernel<true, false>(p.kt[0], kth, p.L) : regs_kernel<false, false>(p.kt[0], kth, p.L);
  }
  switch (p.kreg) {
    case 0:
      if (stall) return (const void*)&lstm_persistent<false, 0, true>;
      return p.bf16 ? (const void*)&lstm_persistent<true, 0, false> : (const void*)&lstm_persistent<false, 0, false>;
    case 4:
      if (stall) return (const void*)&lstm_persistent<false, 4, true>;
      return p.bf16 ? (const void*)&lstm_persistent<true, 4, false> : (const void*)&lstm_persistent<false, 4, false>;
    default: return nullptr;
  }
}

template <size_t N = 0>
cudaError_t preload_regs_kernels(cudaFuncAttributes& a) {
  if constexpr (N < std::size(kRegsShapes)) {
    constexpr RegsShape r = kRegsShapes[N];
    for (const void* fn : {(const void*)&lstm_persistent_regs<false, r.kt0, r.kth, r.layers, false>,
                           (const void*)&lstm_persistent_regs<true, r.kt0, r.kth, r.layers, false>})
      if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return e;
    return preload_regs_kernels<N + 1>(a);
  }
  return cudaSuccess;
}

cudaError_t preload_cta_kernels_here() {
  cudaFuncAttributes a{};
  for (const void* fn : {(const void*)&lstm_persistent<false, 0, false>, (const void*)&lstm_persistent<true, 0, false>,
                         (const void*)&lstm_persistent<false, 4, false>, (const void*)&lstm_persistent<true, 4, false>})
    if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return e;
  return preload_regs_kernels(a);
}

// ---------------------------------------------------------------------------------------------------
// many instances in one launch (MultiLaunch, lstm_params.hpp)

static_assert(sizeof(LstmParams) % 8 == 0, "a block copies its instance's parameters 8 bytes at a time");

// One block of a multi-instance launch: waits for its instance's next generation, copies that
// instance's parameters into shared memory, runs `run(params, role)` (role 0: the critical block, r > 0:
// precompute block r - 1), marks itself parked, and waits again; leaves on the group's stop or lease.
template <class Run>
__device__ void multi_instance_block(const MultiLaunch& m, char* smem, Run run) {
  __shared__ unsigned leave;
  __shared__ int rank;
  if (threadIdx.x == 0) rank = int(blockIdx.x);
  __syncthreads();  // every thread reads rank
  if (m.by_sm) {
    // Placement by SM: every block publishes its (SM, index) key, then takes its rank among them.
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (threadIdx.x == 0) m.sm_keys[blockIdx.x] = (sm << 16) | blockIdx.x;
    cooperative_groups::this_grid().sync();
    if (threadIdx.x == 0) {
      const unsigned mine = __ldcg(m.sm_keys + blockIdx.x);
      int r = 0;
      for (unsigned j = 0; j < gridDim.x; ++j) r += __ldcg(m.sm_keys + j) < mine;
      rank = r;
    }
    __syncthreads();
  }
  const int inst = rank / m.per_instance, role = rank % m.per_instance;
  LstmParams* p = reinterpret_cast<LstmParams*>(smem + m.params_offset);
  for (unsigned gen = 1;; ++gen) {
    if (threadIdx.x == 0) {
      // The group's lease counts from the start of each wait (a watch made here holds no registers
      // while the instance serves: the regs variant has none to spare).
      MailboxView group;
      group.control = m.control;
      group.lease_ns = m.lease_ns;
      dev::LeaseWatch watch;
      watch.start(group);
      unsigned reason = 0;
      while (dev::ld_volatile_u32(m.go + inst) < gen) {
        if ((reason = watch.poll(group)) != 0) break;
        __nanosleep(2000);
      }
      leave = reason;
    }
    __syncthreads();
    if (leave) return;
    // This generation's parameters: written by the host before it raised go (read past L1).
    const uint2* src = reinterpret_cast<const uint2*>(m.params + inst);
    uint2* dst = reinterpret_cast<uint2*>(p);
    for (int i = int(threadIdx.x); i < int(sizeof(LstmParams) / 8); i += int(blockDim.x)) dst[i] = __ldcg(src + i);
    __syncthreads();
    run(*p, role);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      dev::st_volatile_u32(m.parked + rank, gen);
    }
  }
}

template <bool BF16, int KT0, int KTH, int L>
__global__ void __launch_bounds__(kRegsMaxThreads, 1) lstm_multi_regs(const __grid_constant__ MultiLaunch m) {
  extern __shared__ __align__(16) char smem[];
  multi_instance_block(m, smem, [&](const LstmParams& p, int role) {
    if (role == 0) critical_block_regs<BF16, KT0, KTH, L, false>(p, smem);
    else precompute_block(p, smem, role - 1);
  });
}

template <bool BF16, int KREG>
__global__ void __launch_bounds__(kMaxBlockThreads, 1) lstm_multi_smem(const __grid_constant__ MultiLaunch m) {
  extern __shared__ __align__(16) char smem[];
  multi_instance_block(m, smem, [&](const LstmParams& p, int role) {
    if (role == 0) critical_block<BF16, KREG, false>(p, smem);
    else precompute_block(p, smem, role - 1);
  });
}

template <bool BF16, size_t N = 0>
const void* multi_regs_kernel(int kt0, int kth, int L) {
  if constexpr (N < std::size(kRegsShapes)) {
    constexpr RegsShape r = kRegsShapes[N];
    if (kt0 == r.kt0 && L == r.layers && (L == 1 || kth == r.kth))
      return (const void*)&lstm_multi_regs<BF16, r.kt0, r.kth, r.layers>;
    return multi_regs_kernel<BF16, N + 1>(kt0, kth, L);
  }
  return nullptr;
}

// The multi-instance kernel for p's plan (cta family, no test hooks), or null.
const void* multi_kernel(const LstmParams& p) {
  if (p.family != KernelFamily::cta || p.stall_tick >= 0) return nullptr;
  if (p.variant == kVariantRegs) {
    if (p.kreg != 0 || p.threads() > kRegsMaxThreads || p.O > kRegsMaxOutputs) return nullptr;
    const int kth = p.L > 1 ? p.kt[1] : 0;
    return p.bf16 ? multi_regs_kernel<true>(p.kt[0], kth, p.L) : multi_regs_kernel<false>(p.kt[0], kth, p.L);
  }
  switch (p.kreg) {
    case 0: return p.bf16 ? (const void*)&lstm_multi_smem<true, 0> : (const void*)&lstm_multi_smem<false, 0>;
    case 4: return p.bf16 ? (const void*)&lstm_multi_smem<true, 4> : (const void*)&lstm_multi_smem<false, 4>;
    default: return nullptr;
  }
}

}  // namespace

cudaError_t cooperative_launch(const void* fn, long long grid, int threads, int smem_bytes, void* arg,
                               cudaStream_t stream, long long* max_coresident) {
  if (!fn) return cudaErrorInvalidValue;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem_bytes)) != cudaSuccess) return e;
  int sms = 0;
  try {
    sms = launch_sm_count(query_stream_sms(stream));
  } catch (const std::exception&) {
    return cudaErrorInvalidResourceHandle;
  }
  const long long fits = coresident_blocks(per_sm, sms);
  if (max_coresident) *max_coresident = fits;
  if (fits < grid) return cudaErrorCooperativeLaunchTooLarge;
  void* args[] = {arg};
  return cudaLaunchCooperativeKernel(fn, dim3(unsigned(grid)), dim3(threads), args, smem_bytes, stream);
}

cudaError_t preload_cta_kernels() { return preload_cta_kernels_here(); }

cudaError_t launch_lstm(const LstmParams& p, cudaStream_t stream, long long* max_coresident) {
  if (p.family == KernelFamily::cluster) return launch_lstm_cluster(p, stream, max_coresident);
  if (p.family == KernelFamily::grid) return launch_lstm_grid(p, stream, max_coresident);
  LstmParams copy = p;
  return cooperative_launch(lstm_kernel(p), p.grid(), p.threads(), p.smem_bytes, &copy, stream, max_coresident);
}

cudaError_t multiblock_max_coresident(const LstmParams& p, cudaStream_t stream, long long* fits) {
  if (p.family == KernelFamily::cluster) return cluster_max_coresident(p, stream, fits);
  return grid_max_coresident(p, stream, fits);
}

cudaError_t launch_lstm_multi(const LstmParams& plan, const MultiLaunch& m, cudaStream_t stream,
                              long long* max_coresident) {
  MultiLaunch copy = m;
  return cooperative_launch(multi_kernel(plan), (long long)m.count * m.per_instance, plan.threads(), m.smem_bytes,
                            &copy, stream, max_coresident);
}

}  // namespace hotpath::cuda
