// The precompute blocks every kernel family shares: they own the recurrent state (the W-1 open windows,
// or the single streaming state) and publish P_l = W_hh,l h_l + b_l and c_l of the window that completes
// next, for the critical step of the next tick.
#pragma once
#include "cuda/kernels/common/tick_common.cuh"

namespace hotpath::cuda::dev {

// ---------------------------------------------------------------------------------------------------
// precompute blocks

// Eight dot products of length K over one warp: rows 0-3 from A, rows 4-7 from B (either may be null),
// all against `in` (shared or global memory). Returns, in every lane, the sum of row (lane >> 2) & 7:
// a transposing butterfly (9 shuffles instead of 40).
template <bool IN_GLOBAL>
__device__ __forceinline__ float gemv8(const float* A, const float* B, const float* in, int K) {
  const int lane = threadIdx.x & 31;
  float v[8] = {};
  auto step = [&](int k, float x) {
    if (A) {
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = fmaf(A[r * K + k], x, v[r]);
    }
    if (B) {
#pragma unroll
      for (int r = 0; r < 4; ++r) v[4 + r] = fmaf(B[r * K + k], x, v[4 + r]);
    }
  };
  int k = lane;
  if constexpr (IN_GLOBAL) {
    // The input comes from L2: 8 loads issued before using any (one L2 latency per 8, not per element).
    for (; k + 7 * 32 < K; k += 8 * 32) {
      float x[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = __ldcg(in + k + j * 32);
#pragma unroll
      for (int j = 0; j < 8; ++j) step(k + j * 32, x[j]);
    }
  }
  for (; k < K; k += 32) step(k, IN_GLOBAL ? __ldcg(in + k) : in[k]);
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float send = b4 ? v[i] : v[i + 4];
    const float keep = b4 ? v[i + 4] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float send = b3 ? v[i] : v[i + 2];
    const float keep = b3 ? v[i + 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  {
    const float send = b2 ? v[0] : v[1];
    const float keep = b2 ? v[1] : v[0];
    v[0] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
  }
  v[0] += __shfl_xor_sync(0xffffffffu, v[0], 2);
  v[0] += __shfl_xor_sync(0xffffffffu, v[0], 1);
  return v[0];
}

// One precompute round's parts into SharedWords::pre_sum (PrecomputeStat), SM cycles; one thread of
// block 0 (the separate precompute's, or the grid's own).
__device__ __forceinline__ void record_precompute_round(SharedWords* words, long long layer0, long long barrier,
                                                        long long layers, long long publish, long long total) {
  unsigned long long* w = words->pre_sum;
  w[kPreRounds] += 1;
  w[kPreLayer0] += (unsigned long long)layer0;
  w[kPreBarrier] += (unsigned long long)barrier;
  w[kPreLayers] += (unsigned long long)layers;
  w[kPrePublish] += (unsigned long long)publish;
  w[kPreTotal] += (unsigned long long)total;
}

// Monotonic-counter grid barrier over the precompute blocks; false when the kernel is quitting.
// LstmParams::hy_release_barrier (the hybrid's variant): the arrival a red.release and the wait's acquire
// loads order the blocks' writes, with no fence on either side.
__device__ __forceinline__ bool pre_barrier(const LstmParams& p, unsigned long long& epoch, volatile unsigned* quit) {
  __syncthreads();
  ++epoch;
  if (threadIdx.x == 0) {
    if (p.hy_release_barrier) {
      dev::red_release_add_u64(&p.words->barrier, 1ull);
    } else {
      __threadfence();
      atomicAdd(&p.words->barrier, 1ull);
    }
    const unsigned long long target = epoch * (unsigned long long)p.np;
    while (dev::ld_acquire_u64(&p.words->barrier) < target) {
      if (dev::ld_volatile_u32(&p.words->quit)) {
        *quit = 1;
        break;
      }
    }
    if (!p.hy_release_barrier) __threadfence();
  }
  __syncthreads();
  return *quit == 0;
}

// The hybrid backend's publish (LstmParams::export_*), every thread of a precompute block owning units [u0, u0 + nu):
// P(l, r) (r = 4 u + gate) and c(l, u) of the window that completes at `tick` into mapped host memory in the CPU
// step's layout; the round's last block then stores tick + 1 into export_seq, then into words->exported.
template <class PF, class CF>
__device__ __forceinline__ void export_state(const LstmParams& p, int u0, int nu, long long tick, PF&& P, CF&& c) {
  const int tid = threadIdx.x, nthreads = blockDim.x, L = p.L, lanes = p.export_lanes;
  float* dst = p.export_state + size_t(tick & 1) * size_t(p.export_tick_floats);
  for (int i = tid; i < L * 4 * nu; i += nthreads) {
    const int l = i / (4 * nu), r = i % (4 * nu), unit = u0 + (r >> 2), gate = r & 3;
    dst[l * p.export_layer_floats + (unit / lanes) * 4 * lanes + gate * lanes + unit % lanes] = P(l, r);
  }
  for (int i = tid; i < L * nu; i += nthreads) {
    const int l = i / nu, u = i % nu;
    dst[l * p.export_layer_floats + p.export_gate_floats + u0 + u] = c(l, u);
  }
  __syncthreads();
  if (tid == 0) {
    // This block's part is in host memory before it counts itself; or (LstmParams::hy_round_fence) ordered at
    // gpu scope before its count, which the last block's system-scope fence below then carries to the host
    // (causality is transitive across the two scopes in the PTX memory model).
    if (p.hy_round_fence)
      __threadfence();
    else
      __threadfence_system();
    const unsigned long long done = atomicAdd(&p.words->published, 1ull) + 1ull;
    if (done == (unsigned long long)(tick + 1) * (unsigned long long)p.np) {  // the round's last block
      __threadfence_system();
      *(volatile unsigned long long*)p.export_seq = (unsigned long long)(tick + 1);
      __threadfence_system();
      dev::st_release_u64(&p.words->exported, (unsigned long long)(tick + 1));
    }
  }
}

// The pieces of a precompute round that both forms of the block share (this file's fp32 one, the hybrid's mma
// one in kernels/hybrid/). Window state: Q [L][nslots][4U] (W_hh h + b of each open window, row 4u + gate), c
// [L][nslots][U]; the biases at sw + p.pre_b[l].

// A fresh window in `slot`: Q = b, c = 0 (every thread of the block).
__device__ __forceinline__ void fresh_window(const LstmParams& p, float* sQ, float* sc, const float* sw, int slot) {
  const int tid = threadIdx.x, nthreads = blockDim.x, L = p.L, U = p.U, nslots = p.nslots;
  for (int i = tid; i < L * 4 * U; i += nthreads) {
    const int l = i / (4 * U), r = i % (4 * U);
    sQ[(l * nslots + slot) * 4 * U + r] = sw[p.pre_b[l] + r];
  }
  for (int i = tid; i < L * U; i += nthreads) sc[(i / U * nslots + slot) * U + i % U] = 0.f;
}

// Thread 0 waits for round t's input (x_seq > t) or the kernel's quit; false (in every thread) when leaving.
__device__ __forceinline__ bool wait_round_input(const LstmParams& p, long long t, volatile unsigned* quit) {
  if (threadIdx.x == 0) {
    while (dev::ld_acquire_u64(&p.words->x_seq) < (unsigned long long)(t + 1)) {
      if (dev::ld_volatile_u32(&p.words->quit)) {
        *quit = 1;
        break;
      }
    }
  }
  __syncthreads();
  return *quit == 0;
}

// The windows round t advances by x_t: those starting in [lo, t] (window mode; none when W = 1), or the one
// stream; the window starting at t takes the slot of the one that completed at t (fresh says which, -1: none).
struct RoundWindows {
  int nw = 1, nslots = 1;
  int first = 0;  // lo's slot: one 64-bit modulo a round, not one per window and element (slot() is in inner loops)
  int fresh = -1;
  __device__ int slot(int i) const {  // i < nw <= nslots
    const int s = first + i;
    return s < nslots ? s : s - nslots;
  }
};
__device__ __forceinline__ RoundWindows round_windows(const LstmParams& p, long long t) {
  RoundWindows r;
  r.nslots = p.nslots;
  if (p.window_mode) {
    if (p.W == 1) {
      r.nw = 0;
    } else {
      const long long lo = t - p.W + 2 > 0 ? t - p.W + 2 : 0;
      r.nw = int(t - lo + 1);
      r.first = int(lo % p.nslots);
      r.fresh = int(t % p.nslots);
    }
  }
  return r;
}

// The window that completes at tick t + 1 once round t is done: its slot, or a fresh one (W = 1).
__device__ __forceinline__ int completing_slot(const LstmParams& p, long long t, bool* fresh) {
  *fresh = p.window_mode && p.W == 1;
  if (!p.window_mode || p.W == 1) return 0;
  const long long start = t + 2 - p.W > 0 ? t + 2 - p.W : 0;
  return int(start % p.nslots);
}

__device__ inline void precompute_block(const LstmParams& p, char* smem, int b) {
  if (b >= p.np) return;  // a cluster launch rounds the grid up to whole clusters
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int H = p.H, L = p.L, U = p.U, I = p.I, nslots = p.nslots;
  const int u0 = b * U, nu = min(U, H - u0);
  // Weights and window state live in shared memory where they fit, else in global memory (L2/HBM):
  // slower, and the sustainable tick rate says so, but every model runs.
  const float* src = p.pre_w + size_t(b) * p.pre_block_floats;
  const float* sw = p.pre_global ? src : smem_at<const float>(smem, p.s_pw);
  float* const state = p.pre_state ? p.pre_state + size_t(b) * p.pre_state_floats : nullptr;
  float* sQ = state ? state : smem_at<float>(smem, p.s_Q);                                // [L][nslots][4U]
  float* scs = state ? state + size_t(L) * nslots * 4 * U : smem_at<float>(smem, p.s_pc);  // [L][nslots][U]
  float* sx = smem_at<float>(smem, p.s_px);
  float* sg0 = smem_at<float>(smem, p.s_g0);
  volatile unsigned* quit = smem_at<volatile unsigned>(smem, p.s_pflags);
  auto Q = [&](int l, int slot) { return sQ + (l * nslots + slot) * 4 * U; };
  auto C = [&](int l, int slot) { return scs + (l * nslots + slot) * U; };
  auto hstate = [&](int l, int slot) { return p.h_state + (size_t(l) * nslots + slot) * H; };

  if (!p.pre_global)
    for (int i = tid; i < p.pre_block_floats; i += nthreads) smem_at<float>(smem, p.s_pw)[i] = __ldg(src + i);
  if (tid == 0) *quit = 0;
  __syncthreads();
  for (int slot = 0; slot < nslots; ++slot) fresh_window(p, sQ, scs, sw, slot);
  __syncthreads();

  // Publish P and c of window slot `slot` (or of a fresh window) for tick `tick`.
  auto publish = [&](int slot, bool fresh, long long tick) {
    if (p.export_state) {  // the hybrid backend: straight into the CPU's layout in host memory
      export_state(
          p, u0, nu, tick, [&](int l, int r) { return fresh ? sw[p.pre_b[l] + r] : Q(l, slot)[r]; },
          [&](int l, int u) { return fresh ? 0.f : C(l, slot)[u]; });
      return;
    }
    for (int i = tid; i < L * 4 * nu; i += nthreads) {
      const int l = i / (4 * nu), r = i % (4 * nu), u = r >> 2, gate = r & 3;
      p.pub_P[l * 4 * H + gate * H + u0 + u] = fresh ? sw[p.pre_b[l] + r] : Q(l, slot)[r];
    }
    for (int i = tid; i < L * nu; i += nthreads) {
      const int l = i / nu, u = i % nu;
      p.pub_c[l * H + u0 + u] = fresh ? 0.f : C(l, slot)[u];
    }
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      atomicAdd(&p.words->published, 1ull);
    }
  };
  publish(0, true, 0);  // tick 0: every window starts from zero

  unsigned long long epoch = 0;
  for (long long t = 0;; ++t) {
    if (!wait_round_input(p, t, quit)) return;
    // the round's parts, as this block lives them (block 0 records them: SharedWords::pre_sum)
    const long long t_start = clock64();
    long long t_barrier = 0;
    auto barrier = [&]() {
      const long long t = clock64();
      const bool ok = pre_barrier(p, epoch, quit);
      t_barrier += clock64() - t;
      return ok;
    };
    for (int i = tid; i < I; i += nthreads) sx[i] = __ldcg(p.xbuf + i);

    const RoundWindows wins = round_windows(p, t);
    const int nw = wins.nw;
    if (wins.fresh >= 0) fresh_window(p, sQ, scs, sw, wins.fresh);
    auto slot_of = [&](int i) { return wins.slot(i); };
    __syncthreads();

    // layer 0: W_ih,0 x_t is shared by every window
    for (int u = warp; u < nu; u += nwarps) {
      const float v = gemv8<false>(sw + p.pre_ih[0] + 4 * u * I, nullptr, sx, I);
      if ((lane & 3) == 0 && lane < 16) sg0[4 * u + (lane >> 2)] = v;
    }
    __syncthreads();
    for (int i = tid; i < nw * nu; i += nthreads) {
      const int wi = i / nu, u = i % nu, slot = slot_of(wi);
      const float* q = Q(0, slot) + 4 * u;
      float c = C(0, slot)[u];
      const float h = dev::lstm_cell(sg0[4 * u] + q[0], sg0[4 * u + 1] + q[1], sg0[4 * u + 2] + q[2],
                                     sg0[4 * u + 3] + q[3], c);
      C(0, slot)[u] = c;
      __stcg(hstate(0, slot) + u0 + u, h);
    }
    const long long t_layer0 = clock64();
    if (!barrier()) return;

    // layers 1..L-1, plus Q_{l-1} = W_hh,l-1 h_{l-1} + b for the next tick from the same input vector
    for (int l = 1; l <= L; ++l) {
      const bool last = l == L;
      for (int i = warp; i < nw * nu; i += nwarps) {
        const int wi = i / nu, u = i % nu, slot = slot_of(wi);
        const float* in = hstate(l - 1, slot);
        const float v = gemv8<true>(last ? nullptr : sw + p.pre_ih[l] + 4 * u * H, sw + p.pre_hh[l - 1] + 4 * u * H,
                                    in, H);
        const int r = (lane >> 2) & 7;
        if (r >= 4 && (lane & 3) == 0) Q(l - 1, slot)[4 * u + r - 4] = v + sw[p.pre_b[l - 1] + 4 * u + r - 4];
        if (!last) {
          const float gf = __shfl_sync(0xffffffffu, v, 4), gg = __shfl_sync(0xffffffffu, v, 8),
                      go = __shfl_sync(0xffffffffu, v, 12);
          if (lane == 0) {
            const float* q = Q(l, slot) + 4 * u;
            float c = C(l, slot)[u];
            const float h = dev::lstm_cell(v + q[0], gf + q[1], gg + q[2], go + q[3], c);
            C(l, slot)[u] = c;
            __stcg(hstate(l, slot) + u0 + u, h);
          }
        }
      }
      if (!last && !barrier()) return;
    }
    __syncthreads();
    const long long t_layers = clock64();

    bool fresh;
    const int done = completing_slot(p, t, &fresh);
    publish(done, fresh, t + 1);
    if (b == 0 && tid == 0) {
      const long long t_end = clock64();
      record_precompute_round(p.words, t_layer0 - t_start, t_barrier, t_layers - t_layer0 - t_barrier, t_end - t_layers,
                              t_end - t_start);
    }
  }
}


}  // namespace hotpath::cuda::dev
