// The grid family (lstm_params.hpp: KernelFamily::grid): the critical step of one tick split over nc blocks
// by hidden units, for models whose critical-step weights do not fit one SM or one cluster. Blocks
// [0, nc) are critical, [nc, nc+np) run the shared precompute (precompute.cuh).
//
// Critical block b, warps:
//   [0, compute_warps)   compute: warp w works on unit group w % gpb, on its share w / gpb of the k16
//                        tiles (ksplit shares); the partial gate sums meet in shared memory. With the tiles
//                        in registers (GridTiles) the compute warps are the first two warpgroups, which take
//                        registers from the others (setmaxnreg), and load each layer's share while they wait.
//   next (kGridCellWarps) cells: a few lanes a unit add the sums (a shuffle tree), one of them runs the
//                        unit's cell update. Each layer's new h slice goes to global memory (L2): as
//                        tagged words (the default), or followed by an arrival counter or a per-(layer,
//                        block) flag; a block waits only for the layer it is about to compute, and its
//                        compute warps only after its own cells are sent. After the last layer each block
//                        sends block 0 the head's partial sums over its units (tagged, one pass of cells:
//                        straight from the cell warp); block 0 adds them and answers. Every block times
//                        the parts of its tick (GridLayerStat) in shared memory and adds them to its sums
//                        in global memory after the tick.
//   [.., +poll_warps)    pollers: with the `flags` exchange every critical block reads the input from the
//                        mailbox itself (no hop); otherwise block 0 alone does and passes the input on
//                        through L2 (lstm_params.hpp, GridExchange): with tagged words its pollers store
//                        each element's word as its chunk comes (grid_pollers_publish; off: warp 0 stores
//                        them once the whole input is in), with counters warp 0 copies it under a flag.
//   last                 service: block 0 forwards x_t to the precompute, reports `ready` and watches the
//                        lease; the others watch for the quit word.
//
// A tick's waits end early when the kernel quits (the tick's result is then garbage nobody reads), so no
// block ever waits at a barrier for one that has left; exits are decided only at the tick's start.
// Flags carry the tick's wire seq and are compared with "reached" (>=): a block that fell behind (its
// host gave up on a tick) never waits for a value that was overwritten by a newer tick.
#include <cuda_runtime.h>

#include <exception>
#include <iterator>

#include "cuda/device.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/precompute.cuh"
#include "cuda/kernels/common/tagged_words.cuh"

namespace hotpath::cuda {
namespace {

using dev::CtaFlags;
using dev::precompute_block;
using dev::record_tick_timing;
using dev::smem_at;
using dev::split_store;

__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ bool seq_reached(unsigned have, unsigned want) { return int(have - want) >= 0; }
// One arrival on a counter; the release orders the calling thread's earlier writes (and, after a
// __syncwarp or a barrier, its warp's or block's) before it.
__device__ __forceinline__ void red_release_gpu_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One warp waits until flags[0..n) have all reached seq, or the block quits (false): the lanes share the
// flags and poll them with relaxed loads, then one fence orders the warp's later reads of the data; the
// other compute warps wait at a named barrier (fewer spinning warps than every warp acquiring every flag).
// With n = 1 it waits on one word: a counter's arrivals or a flag's seq, compared modulo 2^32.
__device__ __forceinline__ bool wait_flags(const unsigned* flags, int n, unsigned seq, volatile CtaFlags* f) {
  const int lane = threadIdx.x & 31;
  for (;;) {
    bool ok = true;
    for (int i = lane; i < n; i += 32) ok &= seq_reached(dev::ld_volatile_u32(flags + i), seq);
    if (__all_sync(0xffffffffu, ok)) break;
    if (f->quit) return false;
  }
  __syncwarp();
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return true;
}

// The tagged exchange's consumer side: threads first, first + step, ... spin on their pairs of words
// [from, n) (an input or a layer's h, hi | lo; from even) until their tags reach seq, then write them
// into the two rows (hi, lo) of `rows` that the MMAs read. Two pairs a thread are in flight at once, so a
// thread with two pairs waits one L2 round trip, not two. `rounds` counts the thread's rounds of loads.
// False if the block quits first (the rows then hold garbage nobody reads).
__device__ __forceinline__ bool take_words(const unsigned long long* words, int from, int n, unsigned seq, uint16_t* rows,
                                           int stride, int first, int step, volatile CtaFlags* f, int& rounds,
                                           int nap_ns = 0) {
  uint32_t* const hi = reinterpret_cast<uint32_t*>(rows);
  uint32_t* const lo = hi + stride / 2;
  for (int i = from / 2 + first; 2 * i < n; i += 2 * step) {
    const int i2 = i + step;
    const bool has2 = 2 * i2 < n;
    unsigned long long w[4];
    for (;;) {
      dev::ld_words2_gpu(words + 2 * i, w[0], w[1]);
      if (has2) dev::ld_words2_gpu(words + 2 * i2, w[2], w[3]);
      ++rounds;
      bool ok = dev::reached(dev::tag_of(w[0]), seq) && (2 * i + 1 >= n || dev::reached(dev::tag_of(w[1]), seq));
      if (has2)
        ok = ok && dev::reached(dev::tag_of(w[2]), seq) && (2 * i2 + 1 >= n || dev::reached(dev::tag_of(w[3]), seq));
      if (ok) break;
      if (f->quit) return false;
      if (nap_ns > 0) __nanosleep(unsigned(nap_ns));  // grid_input_nap_ns: fewer looks at the hot lines
    }
    const uint32_t va = dev::value_of(w[0]), vb = 2 * i + 1 < n ? dev::value_of(w[1]) : 0u;
    hi[i] = dev::b_pair(va, vb, 0x5410);
    lo[i] = dev::b_pair(va, vb, 0x7632);
    if (has2) {
      const uint32_t vc = dev::value_of(w[2]), vd = 2 * i2 + 1 < n ? dev::value_of(w[3]) : 0u;
      hi[i2] = dev::b_pair(vc, vd, 0x5410);
      lo[i2] = dev::b_pair(vc, vd, 0x7632);
    }
  }
  return true;
}

// The producer side for the input: block 0's warp 0 stores the first n elements of the two rows (hi, lo)
// it polled as tagged words.
__device__ __forceinline__ void give_words(unsigned long long* words, int n, unsigned seq, const uint16_t* rows, int stride) {
  const uint32_t* const hi = reinterpret_cast<const uint32_t*>(rows);
  const uint32_t* const lo = hi + stride / 2;
  for (int i = int(threadIdx.x & 31); 2 * i < n; i += 32) {
    const uint32_t h = hi[i], l = lo[i];
    dev::st_words2_gpu(words + 2 * i, dev::tagged(seq, __byte_perm(h, l, 0x5410)), dev::tagged(seq, __byte_perm(h, l, 0x7632)));
  }
}

// Gate pre-activations of one unit group (two m16 tiles, frag = [2][kt][32] uint4) over k16 tiles
// [k0, k1), two accumulator chains per tile. Four tiles at a time: every shared-memory load of the four
// is issued before their MMAs. Lane (g, t = 0) returns rows g and g+8 of both tiles, hi + lo columns
// summed: gates i, f, g, o of unit g of the group.
inline constexpr int kTilesInFlight = 4;
static_assert(kTilesInFlight % 2 == 0, "whole pairs of tiles");
// This lane's B values of tiles 2j and 2j+1 (grid_tile_col): one 16-byte load from the hi row (g = 0), the
// lo row (g = 1) or none (zeros). row: the lane's row as uint4.
__device__ __forceinline__ uint4 b_pair(const uint4* row, int j, bool valid) {
  return valid ? row[4 * j + (threadIdx.x & 3)] : make_uint4(0, 0, 0, 0);
}
// Tile 2j + odd's two B registers out of such a word: b0, b1 of tile 2j, then of tile 2j+1.
__device__ __forceinline__ uint32_t b_lo(const uint4& pair, int odd) { return odd ? pair.z : pair.x; }
__device__ __forceinline__ uint32_t b_hi(const uint4& pair, int odd) { return odd ? pair.w : pair.y; }
// A unit group's gate sums out of its two m16 tiles' accumulators (two chains each, by tile parity): lane
// (g, t = 0) gets rows g and g+8 of both tiles, hi + lo columns summed (gates i, f, g, o of unit g).
__device__ __forceinline__ void sum_chains(const float (&acc)[2][2][4], float (&y)[4]) {
  y[0] = (acc[0][0][0] + acc[0][0][1]) + (acc[0][1][0] + acc[0][1][1]);
  y[1] = (acc[0][0][2] + acc[0][0][3]) + (acc[0][1][2] + acc[0][1][3]);
  y[2] = (acc[1][0][0] + acc[1][0][1]) + (acc[1][1][0] + acc[1][1][1]);
  y[3] = (acc[1][0][2] + acc[1][0][3]) + (acc[1][1][2] + acc[1][1][3]);
}
template <bool BF16>
__device__ __forceinline__ void gates_range(const uint4* frag, int kt, int k0, int k1, const uint32_t* xin32,
                                            int stride32, float (&y)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  float acc[2][2][4] = {};
  const uint4* brow = reinterpret_cast<const uint4*>(xin32 + (g & 1) * stride32);
  const bool bvalid = g < 2;
  for (int k = k0; k < k1; k += kTilesInFlight) {  // k0, k1 even
    uint4 a0[kTilesInFlight], a1[kTilesInFlight], b[kTilesInFlight / 2];
#pragma unroll
    for (int i = 0; i < kTilesInFlight; ++i) {
      const int kk = k + i;
      const bool ok = kk < k1;
      a0[i] = ok ? frag[kk * 32 + lane] : make_uint4(0, 0, 0, 0);
      a1[i] = ok ? frag[(kt + kk) * 32 + lane] : make_uint4(0, 0, 0, 0);
      if (i % 2 == 0) b[i / 2] = b_pair(brow, kk >> 1, ok && bvalid);
    }
#pragma unroll
    for (int i = 0; i < kTilesInFlight; ++i) {
      if (k + i >= k1) break;
      const uint32_t b0 = b_lo(b[i / 2], i % 2), b1 = b_hi(b[i / 2], i % 2);
      dev::mma16816<BF16>(acc[0][i & 1], a0[i], b0, b1);
      dev::mma16816<BF16>(acc[1][i & 1], a1[i], b0, b1);
    }
  }
  sum_chains(acc, y);
}

// The compute warps and the cell warp meet twice a layer on named barriers (1 is the compute warps' own):
// the compute warps arrive at kBarSums when their k-share sums are in shared memory and wait at kBarCells;
// the cell warp waits at kBarSums, runs the cells, sends h and arrives at kBarCells. An arrival orders the
// arriving warp's earlier shared-memory writes before the waiting warps' later reads.
inline constexpr int kBarSums = 2, kBarCells = 3;
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

inline constexpr int kSharesInFlight = kGridCellSharesInFlight;
static_assert(kSharesInFlight * 4 >= kMaxComputeWarps, "4 lanes a unit load every share in one round");

// How the cell warp adds a unit's k-share sums: `parts` lanes a unit side by side (lane j * parts + part
// adds shares part, part + parts, ...; a shuffle tree adds the lanes; lane part 0 runs the cell), a
// block's Ub units in passes of 32 / parts. parts: grid_cell_lanes (lstm_params.hpp), the fewest lanes whose
// shares each lane loads in one round (H200, same call: 8 shares in 2 lanes a unit against 4: nv_large's
// answer -210 cycles, vollo_large -170; 9-13 shares in 4 lanes against 2: vollo_med -330, lstm_l -410;
// docs/cuda.md, "The grid kernel, fourth round"); multi_cells takes it as its template argument kParts.
// With one pass and the tagged exchange the last layer's cells also send the head's partial sums (fold):
// no barrier or loop after the last layer.
__device__ __forceinline__ bool cells_fold_head(const LstmParams& p) {
  const int Ub = p.gpb * kUnitsPerGroup, parts = grid_cell_lanes(p);
  const int per_pass = 32 >> (parts == 4 ? 2 : parts == 2 ? 1 : 0);
  return p.grid_exchange == GridExchange::tagged && Ub <= per_pass;
}

// Block 0's head sums meet in sP after the last layer (one float an output).
static_assert(4 * kUnitsPerGroup >= kMaxOutputs, "sP holds at least kMaxOutputs floats");

// Shared-memory views of a multi-block critical block.
struct MultiSmem {
  const uint4* frags;
  uint16_t* xin0;   // the tick's input, [2 rows hi|lo][stride]
  uint16_t* xh;     // exchanged layer inputs, [parities][L-1][2][stride] (layer l >= 1 at l-1)
  float* x32;
  unsigned* seqw;
  float* sP;        // [L][4][Ub]
  float* sc;        // [L][Ub]
  float* red;       // [ksplit][gpb][8][4] (the own precompute: [ksplit][Ub][8])
  uint16_t* stage;  // [2][Ub]
  float* h32;       // [Ub]
  float* hw;        // [O][Ub]
  __device__ MultiSmem(const LstmParams& p, char* smem)
      : frags(smem_at<const uint4>(smem, p.s_frags)),
        xin0(smem_at<uint16_t>(smem, p.s_xin)),
        xh(smem_at<uint16_t>(smem, p.s_xin) + 2 * p.xin_stride),
        x32(smem_at<float>(smem, p.s_x32)),
        seqw(smem_at<unsigned>(smem, p.s_seqw)),
        sP(smem_at<float>(smem, p.s_P)),
        sc(smem_at<float>(smem, p.s_c)),
        red(smem_at<float>(smem, p.s_red)),
        stage(smem_at<uint16_t>(smem, p.s_stage)),
        h32(smem_at<float>(smem, p.s_h32)),
        hw(smem_at<float>(smem, p.s_hw)) {}
  // The input buffer of layer l >= 1 (a local copy of the slices in global memory).
  __device__ uint16_t* layer_in(const LstmParams& p, int l) const { return xh + size_t(l - 1) * 2 * p.xin_stride; }
};

// ---------------------------------------------------------------------------------------------------
// The grid's own precompute (GridPrecompute::in_critical). Between ticks every critical block advances the
// open windows of its Ub units by the tick's input x_t: layer 0's gates are W_ih,0 x_t, which the critical
// step has just computed for these units (sZ0), plus each window's Q_0; layer l's are W_ih,l h_{l-1} (the
// fragments this block already holds) plus Q_l; and Q_{l-1} = W_hh,l-1 h_{l-1} + b for the next tick
// (W_hh from L2). Each stage is one GEMM on the tensor cores: rows the block's gate rows, k the hidden units,
// columns the open windows' h_{l-1} as hi and lo halves (h reaches the MMA at ~22 bits, as the critical
// step's inputs do, so the weights' rounding stays the only half-precision error). Every block writes its
// units' h of every window to L2 and adds 1 to the stage's arrival counter; the next stage waits for all.

// k16 tiles whose loads a warp keeps in flight in the own precompute's GEMM: 2, chosen when the blocks had
// 640 threads (96 registers: 3 spilled 76 bytes, 4 spilled 128); the 512-thread blocks (128 registers)
// spill none at 2, more not measured.
inline constexpr int kOwnTilesInFlight = 2;
static_assert(kOwnTilesInFlight % 2 == 0, "whole pairs of tiles");

struct OwnState {
  float* Q;  // [L][nslots][4][Ub]: W_hh,l h_l + b_l of each open window
  float* C;  // [L][nslots][Ub]
  int nslots, Ub;
  __device__ float* q(int l, int slot) const { return Q + size_t(l * nslots + slot) * 4 * Ub; }
  __device__ float* c(int l, int slot) const { return C + size_t(l * nslots + slot) * Ub; }
};

__device__ __forceinline__ OwnState own_state(const LstmParams& p, int b) {
  const int Ub = p.gpb * kUnitsPerGroup;
  float* base = p.own_state + size_t(b) * p.own_state_floats;
  return {base, base + size_t(p.L) * p.nslots * 4 * Ub, p.nslots, Ub};
}

// A fresh window in `slot`: Q = the biases, c = 0 (every compute thread).
__device__ __forceinline__ void own_fresh(const LstmParams& p, const OwnState& st, int slot, int u0, int nct) {
  const int H = p.H, Ub = st.Ub;
  for (int i = int(threadIdx.x); i < p.L * 4 * Ub; i += nct) {
    const int l = i / (4 * Ub), r = i % (4 * Ub), gate = r / Ub, j = r % Ub;
    st.q(l, slot)[r] = u0 + j < H ? p.own_bias[l * 4 * H + gate * H + u0 + j] : 0.f;
  }
  for (int i = int(threadIdx.x); i < p.L * Ub; i += nct) st.c(i / Ub, slot)[i % Ub] = 0.f;
}

// P_l and c_l of the window that completes at tick s, from the block's own state (every compute thread).
__device__ __forceinline__ void own_load_pc(const LstmParams& p, const OwnState& st, unsigned long long s, float* sP,
                                            float* sc, int nct) {
  const long long start = p.window_mode ? (long long)s - p.W + 1 : 0;
  const int slot = int((start > 0 ? start : 0) % p.nslots);
  const int Ub = st.Ub;
  for (int i = int(threadIdx.x); i < p.L * 4 * Ub; i += nct) sP[i] = __ldcg(st.q(i / (4 * Ub), slot) + i % (4 * Ub));
  for (int i = int(threadIdx.x); i < p.L * Ub; i += nct) sc[i] = __ldcg(st.c(i / Ub, slot) + i % Ub);
}

// One round after tick s (x_s known): the open windows [lo, s] advance by one step. Compute warps only.
template <bool BF16>
__device__ void own_round(const LstmParams& p, char* smem, const OwnState& st, unsigned long long s, int b,
                          volatile CtaFlags* f) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nct = p.compute_warps * 32;
  const int H = p.H, L = p.L, gpb = p.gpb, Ub = st.Ub, u0 = b * Ub, nslots = p.nslots;
  const int kt = p.kt[L], hk = kt * 16;  // k16 tiles of a hidden-size input (every W_hh; W_ih of layers >= 1)
  const int g = lane >> 2, t = lane & 3;
  const float* z0 = smem_at<const float>(smem, p.s_z0);
  unsigned* const count = p.xch_count + 32 * (L + 1);  // stage l's arrivals: count + 32 l
  const unsigned want = unsigned(p.nc) * unsigned(s + 1);
  const long long t0 = clock64();
  long long t_wait = 0;

  long long lo = 0;
  int nw = 1;  // streaming: the one window, slot 0, never fresh
  if (p.window_mode) {
    if (p.W == 1) {
      nw = 0;
    } else {
      lo = (long long)s - p.W + 2 > 0 ? (long long)s - p.W + 2 : 0;
      nw = int((long long)s - lo + 1);
      own_fresh(p, st, int(s % nslots), u0, nct);  // the window starting at s replaces the one that completed at s
      dev::named_barrier(nct);
    }
  }
  auto slot_of = [&](int i) { return p.window_mode ? int((lo + i) % nslots) : 0; };
  auto h_at = [&](int l, int slot, int hilo) { return p.own_h + (size_t(l) * 2 * nslots + 2 * slot + hilo) * hk; };

  // stage 0: the cells of layer 0 (its input term is the critical step's W_ih,0 x_s)
  for (int i = tid; i < nw * Ub; i += nct) {
    const int wi = i / Ub, j = i % Ub, slot = slot_of(wi);
    if (u0 + j >= H) continue;
    const float* q = st.q(0, slot);
    float c = st.c(0, slot)[j];
    const float h = dev::lstm_cell(z0[j] + q[j], z0[Ub + j] + q[Ub + j], z0[2 * Ub + j] + q[2 * Ub + j],
                                   z0[3 * Ub + j] + q[3 * Ub + j], c);
    st.c(0, slot)[j] = c;
    split_store<BF16>(h_at(0, slot, 0) + u0 + j, h_at(0, slot, 1) + u0 + j, h);
  }
  dev::named_barrier(nct);
  if (tid == 0) red_release_gpu_add(count, 1u);
  const long long t1 = clock64();

  const int ntiles = (nw + 3) / 4;  // 4 windows (8 columns: hi, lo) an n8 tile
  // One window (streaming, or a window's first ticks): one n8 tile a unit group, so the warps split its k16
  // tiles as the critical step does (ksplit shares) and meet in shared memory (red: [ksplit][Ub][8]).
  const bool kshare = nw == 1 && p.ksplit > 1;
  float* const red = smem_at<float>(smem, p.s_red);
  for (int l = 1; l <= L; ++l) {
    const long long tw = clock64();
    if (warp == 0) wait_flags(count + 32 * (l - 1), 1, want, f);  // a quit ends it: garbage, never read
    dev::named_barrier(nct);
    t_wait += clock64() - tw;
    const bool gates = l < L;
    const uint4* ih = nullptr;
    if (gates)
      ih = l < p.grid_l2_layers ? static_cast<const uint4*>(p.frags) + size_t(b) * p.block_frag + p.bfrag_off[l]
                                : smem_at<const uint4>(smem, p.s_frags) + (p.bfrag_off[l] - p.bfrag_off[p.grid_l2_layers]);
    const float* bias = p.own_bias + (l - 1) * 4 * H;
    // Lane (g, t) of a tile's warp ends with unit 8q + g of window 4 jt + t: z[0..3] the gates' W_ih terms,
    // z[4..7] the next tick's W_hh terms (no bias). Stores them, or runs the cell.
    auto finish = [&](int w, int jj, const float (&z)[8]) {
      const int u = u0 + jj, slot = slot_of(w);
      float* qn = st.q(l - 1, slot);  // layer l-1's recurrent term for the next tick
      qn[jj] = z[4] + bias[u];
      qn[Ub + jj] = z[5] + bias[H + u];
      qn[2 * Ub + jj] = z[6] + bias[2 * H + u];
      qn[3 * Ub + jj] = z[7] + bias[3 * H + u];
      if (gates) {
        const float* ql = st.q(l, slot);
        float c = st.c(l, slot)[jj];
        const float h = dev::lstm_cell(z[0] + ql[jj], z[1] + ql[Ub + jj], z[2] + ql[2 * Ub + jj], z[3] + ql[3 * Ub + jj], c);
        st.c(l, slot)[jj] = c;
        split_store<BF16>(h_at(l, slot, 0) + u, h_at(l, slot, 1) + u, h);
      }
    };
    const int items = kshare ? p.compute_warps : gpb * ntiles;
    for (int it = warp; it < items; it += p.compute_warps) {
      const int q = it % gpb, jt = kshare ? 0 : it / gpb, ks = kshare ? it / gpb : 0;
      int k0 = 0, k1 = kt;
      if (kshare) {
        const int per = ((kt + p.ksplit - 1) / p.ksplit + 1) & ~1;
        k0 = min(kt, ks * per);
        k1 = min(kt, k0 + per);
      }
      // this lane's B column: window 4 jt + g/2, hi (g even) or lo; its values of a pair of tiles are one
      // 16-byte word (grid_tile_col)
      const int wb = 4 * jt + (g >> 1);
      const bool bval = wb < nw;
      const uint4* brow = reinterpret_cast<const uint4*>(h_at(l - 1, slot_of(bval ? wb : 0), g & 1));
      const uint4* ihq = gates ? ih + size_t(q) * 2 * kt * 32 : nullptr;
      const uint4* hhq = static_cast<const uint4*>(p.hh_frags) + size_t(b) * p.hh_block_frag +
                         (size_t(l - 1) * gpb + q) * 2 * kt * 32;
      float acc[4][4] = {};
      for (int k = k0; k < k1; k += kOwnTilesInFlight) {  // k0, k1 even
        // a few k16 tiles' loads in flight before their MMAs (B and W_hh from L2)
        uint4 b[kOwnTilesInFlight / 2];
        uint4 w0[kOwnTilesInFlight], w1[kOwnTilesInFlight];
#pragma unroll
        for (int i = 0; i < kOwnTilesInFlight; ++i) {
          const int kk = k + i;
          const bool ok = kk < k1;
          if (i % 2 == 0) b[i / 2] = ok && bval ? __ldcg(brow + 4 * (kk >> 1) + t) : make_uint4(0, 0, 0, 0);
          w0[i] = ok ? __ldcg(hhq + kk * 32 + lane) : make_uint4(0, 0, 0, 0);
          w1[i] = ok ? __ldcg(hhq + (kt + kk) * 32 + lane) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kOwnTilesInFlight; ++i) {
          const int kk = k + i;
          if (kk >= k1) break;
          const uint32_t b0 = b_lo(b[i / 2], i % 2), b1 = b_hi(b[i / 2], i % 2);
          if (gates) {
            dev::mma16816_nv<BF16>(acc[0], ihq[kk * 32 + lane], b0, b1);
            dev::mma16816_nv<BF16>(acc[1], ihq[(kt + kk) * 32 + lane], b0, b1);
          }
          dev::mma16816_nv<BF16>(acc[2], w0[i], b0, b1);
          dev::mma16816_nv<BF16>(acc[3], w1[i], b0, b1);
        }
      }
      // lane (g, t): unit 8q + g of window 4 jt + t; columns 2t (hi) and 2t + 1 (lo) summed
      const float z[8] = {acc[0][0] + acc[0][1], acc[0][2] + acc[0][3], acc[1][0] + acc[1][1], acc[1][2] + acc[1][3],
                          acc[2][0] + acc[2][1], acc[2][2] + acc[2][3], acc[3][0] + acc[3][1], acc[3][2] + acc[3][3]};
      const int w = 4 * jt + t, jj = q * kUnitsPerGroup + g;
      if (kshare) {
        if (t == 0) {
          float* r = red + (size_t(ks) * Ub + jj) * 8;
#pragma unroll
          for (int v = 0; v < 8; ++v) r[v] = z[v];
        }
      } else if (w < nw && u0 + jj < H) {
        finish(w, jj, z);
      }
    }
    if (kshare) {  // the shares meet: one thread a unit adds them in share order
      dev::named_barrier(nct);
      for (int jj = tid; jj < Ub; jj += nct) {
        if (u0 + jj >= H) continue;
        float z[8] = {};
        for (int k = 0; k < p.ksplit; ++k)
#pragma unroll
          for (int v = 0; v < 8; ++v) z[v] += red[(size_t(k) * Ub + jj) * 8 + v];
        finish(0, jj, z);
      }
    }
    dev::named_barrier(nct);
    if (gates && tid == 0) red_release_gpu_add(count + 32 * l, 1u);
  }
  if (b == 0 && tid == 0) {
    const long long t2 = clock64();
    dev::record_precompute_round(p.words, t1 - t0, t_wait, t2 - t1 - t_wait, 0, t2 - t0);
  }
}

// This tick's marks (GridLayerStat) in shared memory, the SM clock's low 32 bits when passed: each
// compute warp's own [warp][L + 1][kGridWarpMarks] (its words taken, its gate sums done, its wait begun:
// plain stores, no contention before the barrier; and its poll rounds, a count), then the block's
// [L + 1][kGridLayerStats] (meet, sums, cell, sent), set by the one thread that passes them. ~0u: not passed this tick (a clock reading of exactly
// ~0u is one in 2^32).
struct GridMarks {
  unsigned* warp_marks;
  unsigned* block_marks;
  int L;
  __device__ GridMarks(const LstmParams& p, char* smem)
      : warp_marks(smem_at<unsigned>(smem, p.s_gmarks)), block_marks(warp_marks + warp_slots(p)), L(p.L) {}
  __device__ static int warp_slots(const LstmParams& p) { return p.compute_warps * kGridWarpMarks * (p.L + 1); }
  __device__ void warp(int w, int l, int which) const {  // which: 0 words, 1 gate sums, 2 wait begun
    warp_marks[(w * (L + 1) + l) * kGridWarpMarks + which] = unsigned(clock64());
  }
  __device__ void polls(int w, int l, int rounds) const { warp_marks[(w * (L + 1) + l) * kGridWarpMarks + 3] = unsigned(rounds); }
  __device__ static int block_slot(int l, int part) { return l * kGridLayerStats + part; }
  __device__ void block(int l, int part) const { block_marks[block_slot(l, part)] = unsigned(clock64()); }
  __device__ void reset(int warps, int first, int step) const {
    for (int i = first; i < warps * kGridWarpMarks * (L + 1) + kGridLayerStats * (L + 1); i += step) warp_marks[i] = ~0u;
  }
  // Warp 0 after the tick (off the critical path), t0 its start of the tick (past the input barrier): per
  // layer (a lane each) the first and last warp's words and the last warp's gate sums, and the block's
  // marks, as cycles since t0 (a warp may pass a mark before warp 0 reads t0: counted as 0), into the
  // block's sums in global memory (fire-and-forget reds); then reset for the next tick. A mark nobody
  // passed (the head's words outside block 0) is left out.
  __device__ void flush(const LstmParams& p, int b, long long t0) const {
    const int lane = threadIdx.x & 31;
    if (p.grid_stats) {
      unsigned long long* sums = p.grid_stats + size_t(b) * kGridStatSlots;
      auto since = [&](unsigned v) { return (unsigned long long)max(0, int(v - unsigned(t0))); };
      if (lane == 0) atomicAdd(sums, 1ull);
      for (int l = lane; l <= L; l += 32) {
        unsigned long long first = ~0ull, last = 0, tiles = 0;
        unsigned long long wait_sum = 0, wait_max = 0, tiles_sum = 0, tiles_max = 0;  // each warp's own clock
        unsigned long long polls_sum = 0, polls_max = 0;
        int timed = 0, polled = 0;
        bool any = false;
        for (int w = 0; w < p.compute_warps; ++w) {
          const unsigned* const wm = warp_marks + (w * (L + 1) + l) * kGridWarpMarks;
          const unsigned words = wm[0], done = wm[1], begun = wm[2], polls = wm[3];
          if (polls != ~0u) {
            polls_sum += polls;
            polls_max = max(polls_max, (unsigned long long)polls);
            ++polled;
          }
          if (words != ~0u && done != ~0u && begun != ~0u) {
            const unsigned long long wait = (unsigned)max(0, int(words - begun)), work = (unsigned)max(0, int(done - words));
            wait_sum += wait;
            wait_max = max(wait_max, wait);
            tiles_sum += work;
            tiles_max = max(tiles_max, work);
            ++timed;
          }
          if (words != ~0u) {
            any = true;
            first = min(first, since(words));
            last = max(last, since(words));
          }
          if (done != ~0u) tiles = max(tiles, since(done));
        }
        unsigned long long* at = sums + 1 + kGridLayerStats * l;
        if (any) {
          atomicAdd(at + kGrWordsFirst, first);
          atomicAdd(at + kGrWordsLast, last);
        }
        if (l < L) atomicAdd(at + kGrTilesLast, tiles);
        if (timed) {
          atomicAdd(at + kGrWarpWaitMean, wait_sum / timed);
          atomicAdd(at + kGrWarpWaitMax, wait_max);
          atomicAdd(at + kGrWarpTilesMean, tiles_sum / timed);
          atomicAdd(at + kGrWarpTilesMax, tiles_max);
        }
        if (polled) {  // in hundredths
          atomicAdd(at + kGrWarpPolls, 100 * polls_sum / polled);
          atomicAdd(at + kGrWarpPollsMax, 100 * polls_max);
        }
        for (int part : {int(kGrMeet), int(kGrSums), int(kGrCell), int(kGrSent)}) {
          const unsigned v = block_marks[l * kGridLayerStats + part];
          if (v != ~0u) atomicAdd(at + part, since(v));
        }
      }
    }
    __syncwarp();
    reset(p.compute_warps, lane, 32);
    __syncwarp();
  }
};

// The fragments of the layers left in L2 (grid_l2_layers > 0: their W_ih slices overflow shared memory).
// Before the tick's input arrives every compute warp prefetches its lines into L2 with the evict-last
// priority (the own precompute streams W_hh through L2 between ticks and would leave them in DRAM); when
// the input is there it loads every tile of its share at once (one L2 round trip, not one per tile pair)
// and runs the MMAs from registers.
inline constexpr int kL2TilesInFlight = 4;
// Block 0's gather of the head's partial sums: the outputs a warp takes at once (4 x 4 words a lane in flight).
inline constexpr int kHeadOutputsAtOnce = 4;
static_assert(kL2TilesInFlight % 2 == 0, "whole pairs of tiles");
__device__ __forceinline__ void prefetch_l2_last(const void* p) {
  asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p));
}
__device__ __forceinline__ unsigned long long l2_evict_last_policy() {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ uint4 ld_l2_last(const uint4* p, unsigned long long pol) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(pol));
  return v;
}
// This warp's tiles [k0, k1) of both m16 tiles (frag = [2][kt][32] uint4): 512-byte rows, 4 lanes a row's
// 128-byte lines.
__device__ __forceinline__ void prefetch_tiles(const uint4* frag, int kt, int k0, int k1) {
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < 2 * 4 * (k1 - k0); i += 32) {
    const int m = i / (4 * (k1 - k0)), r = i % (4 * (k1 - k0));
    prefetch_l2_last(frag + (m * kt + k0 + r / 4) * 32 + (r % 4) * 8);
  }
}
// Tiles [k, k + kL2TilesInFlight) of both m16 tiles from L2 (zeros past k1): this lane's 16 bytes of each.
__device__ __forceinline__ void load_l2_group(const uint4* frag, int kt, int k, int k1, unsigned long long pol,
                                              uint4 (&w)[2][kL2TilesInFlight]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kL2TilesInFlight; ++i) {
    const bool ok = k + i < k1;
    w[0][i] = ok ? ld_l2_last(frag + (k + i) * 32 + lane, pol) : make_uint4(0, 0, 0, 0);
    w[1][i] = ok ? ld_l2_last(frag + (kt + k + i) * 32 + lane, pol) : make_uint4(0, 0, 0, 0);
  }
}
// GridWarm (LstmParams::grid_warm_l2_tiles): the same tiles read, not prefetched, and a value of them
// returned, so that the caller can wait for them: every 32-byte sector in L2 once the loads are back. A
// prefetch is never waited for, so a block would count itself prefetched with up to ~190 KB of its tiles
// still on their way from HBM, while the host's input (sent once every block has counted) is polled.
__device__ __forceinline__ uint32_t warm_tiles(const uint4* frag, int kt, int k0, int k1) {
  const unsigned long long pol = l2_evict_last_policy();
  uint32_t acc = 0;
  for (int k = k0; k < k1; k += kL2TilesInFlight) {
    uint4 w[2][kL2TilesInFlight];
    load_l2_group(frag, kt, k, k1, pol, w);
#pragma unroll
    for (int i = 0; i < kL2TilesInFlight; ++i) acc ^= w[0][i].x ^ w[0][i].w ^ w[1][i].y ^ w[1][i].z;
  }
  return acc;
}
template <bool BF16>
__device__ __forceinline__ void gates_l2(const uint4* frag, int kt, int k0, int k1, const uint32_t* xin32, int stride32,
                                         float (&y)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const uint4* brow = reinterpret_cast<const uint4*>(xin32 + (g & 1) * stride32);
  const bool bvalid = g < 2;
  float acc[2][2][4] = {};
  const unsigned long long pol = l2_evict_last_policy();
  for (int k = k0; k < k1; k += kL2TilesInFlight) {  // k0, k1 even
    uint4 w[2][kL2TilesInFlight];
    load_l2_group(frag, kt, k, k1, pol, w);
#pragma unroll
    for (int i = 0; i < kL2TilesInFlight; i += 2) {
      if (k + i >= k1) break;
      const uint4 b = b_pair(brow, (k + i) >> 1, bvalid);
      dev::mma16816<BF16>(acc[0][0], w[0][i], b_lo(b, 0), b_hi(b, 0));
      dev::mma16816<BF16>(acc[1][0], w[1][i], b_lo(b, 0), b_hi(b, 0));
      dev::mma16816<BF16>(acc[0][1], w[0][i + 1], b_lo(b, 1), b_hi(b, 1));
      dev::mma16816<BF16>(acc[1][1], w[1][i + 1], b_lo(b, 1), b_hi(b, 1));
    }
  }
  sum_chains(acc, y);
}

// GridTiles::registers: this warp's tiles [k0, k1) of both m16 tiles (frag = [2][kt][32] uint4, in shared
// memory, or in global memory for a layer in L2: from_l2) into registers, before the layer's words arrive.
// The shared-memory path loads through ld.shared (LDS.128): through one generic pointer for both they
// compiled to generic LD.E.128, and each warp's wait for its words was ~170 cycles longer on the H200
// (docs/cuda.md, "The grid kernel, seventh round").
__device__ __forceinline__ uint4 lds128(const uint4* p) {
  uint4 v;
  // volatile: never hoisted above the barrier after which the fragments are in shared memory
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(dev::smem_u32(p)));
  return v;
}
template <int kTiles>
__device__ __forceinline__ void load_reg_tiles(const uint4* frag, int kt, int k0, int k1, bool from_l2,
                                               uint4 (&ta)[2][kTiles]) {
  const int lane = threadIdx.x & 31;
  auto each = [&](auto load) {  // one loop, its load chosen outside it
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      if (k0 + i >= k1) break;
      ta[0][i] = load(frag + (k0 + i) * 32 + lane);
      ta[1][i] = load(frag + (kt + k0 + i) * 32 + lane);
    }
  };
  if (from_l2) {
    const unsigned long long pol = l2_evict_last_policy();
    each([pol](const uint4* p) { return ld_l2_last(p, pol); });
  } else {
    each([](const uint4* p) { return lds128(p); });
  }
}
// gates_range with the tiles [k0, k0 + n) already in registers (load_reg_tiles): only the B values are read,
// every pair's LDS.128 issued before the first MMA.
template <bool BF16, int kTiles>
__device__ __forceinline__ void gates_regs(const uint4 (&ta)[2][kTiles], int k0, int n, const uint32_t* xin32,
                                           int stride32, float (&y)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const uint4* brow = reinterpret_cast<const uint4*>(xin32 + (g & 1) * stride32);
  const bool bvalid = g < 2;
  float acc[2][2][4] = {};
  uint4 b[kTiles / 2];
#pragma unroll
  for (int j = 0; j < kTiles / 2; ++j) b[j] = b_pair(brow, (k0 >> 1) + j, bvalid && 2 * j < n);
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    if (i >= n) break;
    const uint32_t b0 = b_lo(b[i / 2], i % 2), b1 = b_hi(b[i / 2], i % 2);
    dev::mma16816<BF16>(acc[0][i & 1], ta[0][i], b0, b1);
    dev::mma16816<BF16>(acc[1][i & 1], ta[1][i], b0, b1);
  }
  sum_chains(acc, y);
}

// Hopper's register moves between warpgroups (GridTiles::registers): the compute warpgroups grow to
// grid_warpgroup_registers, the others shrink to kGridOtherRegs first (a grow waits until the block's pool
// has the registers). Every warp of a warpgroup runs the same one. Without sm_90a's instructions in the
// build the plan never takes this path (DeviceLimits::warpgroup_registers).
template <int kThreads, int kRegWGs>
__device__ __forceinline__ void grow_registers() {
  constexpr int hi = grid_warpgroup_registers(kThreads, kRegWGs);
  static_assert(kRegWGs == 0 || hi > 0, "an instantiation whose compute warpgroups gain registers");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kRegWGs > 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(hi));
#endif
}
template <int kRegWGs>
__device__ __forceinline__ void shrink_registers() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kRegWGs > 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kGridOtherRegs));
#endif
}

// kRegTiles: the k16 tiles a warp holds in registers for a layer (GridTiles::registers), 0: none.
template <bool BF16, int kRegTiles>
__device__ void multi_compute(const LstmParams& p, char* smem, volatile CtaFlags* f, int b) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nct = p.compute_warps * 32;
  const MultiSmem m(p, smem);
  const int H = p.H, L = p.L, O = p.O, nc = p.nc, gpb = p.gpb, ksplit = p.ksplit;
  const int Ub = gpb * kUnitsPerGroup, u0 = b * Ub;
  const int stride = p.xin_stride;
  const int q = warp % gpb, ks = warp / gpb;
  const int g = lane >> 2, t = lane & 3;
  const float hb = (b == 0 && lane < O) ? p.head_b[lane] : 0.f;
  const bool counters = p.grid_exchange == GridExchange::counters;
  const bool tagged = p.grid_exchange == GridExchange::tagged;
  const GridWords gw = grid_words(p);
  unsigned* const count = p.xch_count;  // line l: count + 32 l
  const GridMarks marks(p, smem);
  // The input's slot in L2 (counters): layer L-1's exchange slot, which no layer's h uses.
  auto input_slot = [&](int par) { return p.xch_h + size_t(par * L + (L - 1)) * 2 * stride; };
  const int nbar = nct + 32 * kGridCellWarps;  // the compute warps and the cell warp (kBarSums, kBarCells)
  const bool fold = cells_fold_head(p);
  // This warp's tiles of layer l: [k0, k1) of kt[l] (ksplit shares, even)
  auto share = [&](int l, int& k0, int& k1) {
    const int kt = p.kt[l], per = p.share_tiles[l];  // the plan's: no division on the critical path
    k0 = min(kt, ks * per);
    k1 = min(kt, k0 + per);
  };
  auto l2_frag = [&](int l) {
    return static_cast<const uint4*>(p.frags) + size_t(b) * p.block_frag + p.bfrag_off[l] + q * 2 * p.kt[l] * 32;
  };
  auto smem_frag = [&](int l) { return m.frags + (p.bfrag_off[l] - p.bfrag_off[p.grid_l2_layers]) + q * 2 * p.kt[l] * 32; };
  uint4 ta[2][kRegTiles > 0 ? kRegTiles : 2];  // GridTiles::registers: this warp's tiles of the coming layer
  auto load_layer_tiles = [&](int l) {
    int k0, k1;
    share(l, k0, k1);
    const bool in_l2 = l < p.grid_l2_layers;
    load_reg_tiles(in_l2 ? l2_frag(l) : smem_frag(l), p.kt[l], k0, k1, in_l2, ta);
  };

  const bool own = p.grid_precompute == GridPrecompute::in_critical;
  if (own) {  // every window starts fresh
    for (int slot = 0; slot < p.nslots; ++slot) own_fresh(p, own_state(p, b), slot, u0, nct);
    dev::named_barrier(nct);
  }

  unsigned long long s = 0;
  for (;; ++s) {
    const unsigned seq = wire_seq(s);
    const int par = int(s & 1);
    // (1) the precompute round that prepares tick s (own: this block ran it after tick s-1)
    if (own) {
      if (tid == 0) f->decision = f->quit ? 1u : 0u;
      dev::named_barrier(nct);
      if (f->decision) break;
    } else if (dev::wait_precompute_round(p, s, nct, f)) {
      break;
    }
    // (2) this block's slice of P_l and c_l of the completing window
    if (own)
      own_load_pc(p, own_state(p, b), s, m.sP, m.sc, nct);
    else
      dev::load_pc_slice(p, u0, Ub, m.sP, m.sc, nct);
    uint32_t warm = 0;
    for (int l = 0; l < p.grid_l2_layers; ++l) {
      int k0, k1;
      share(l, k0, k1);
      if (p.grid_warm_l2_tiles)
        warm ^= warm_tiles(l2_frag(l), p.kt[l], k0, k1);
      else
        prefetch_tiles(l2_frag(l), p.kt[l], k0, k1);
    }
    // grid_warm_l2_tiles: the store waits for the loads, the barrier for every warp's store (m.red holds
    // nothing until this tick's layer 0 sums)
    if (p.grid_warm_l2_tiles && p.grid_l2_layers > 0 && lane == 0) m.red[warp] = __uint_as_float(warm);
    if constexpr (kRegTiles > 0) load_layer_tiles(0);  // while the input is on its way
    dev::named_barrier(nct);
    if (tid == 0) {
      __threadfence();
      atomicAdd(&p.words->prefetched, 1ull);
    }
    // (3) the input, polled into this block's shared memory by its own pollers (flags; counters: block 0's,
    // which passes it on)
    long long t_seen = 0;
    if (tagged && b != 0) {  // every compute thread takes its words of the input
      int rounds = 0;
      if (!take_words(p.xch_words, 0, p.I, seq, m.xin0, stride, tid, nct, f, rounds, p.grid_input_nap_ns)) f->decision = 1u;
    } else if (warp == 0) {
      bool ok;
      const int n4 = p.kt[0] * 2;  // uint4 of one row (kt[0] x 16 halves)
      if (!counters || b == 0) {
        ok = dev::wait_tick(m.seqw, p.mb.n_in, seq, f);
        t_seen = clock64();
        if (ok && tagged && !p.grid_pollers_publish) {  // (else the pollers sent each word as it came)
          give_words(p.xch_words, p.I, seq, m.xin0, stride);
        } else if (ok && counters) {
          uint4* dst = reinterpret_cast<uint4*>(input_slot(par));
          const uint4* src = reinterpret_cast<const uint4*>(m.xin0);
          for (int i = lane; i < 2 * n4; i += 32) {
            const int row = i / n4, v = i % n4;
            __stcg(dst + row * (stride / 8) + v, src[row * (stride / 8) + v]);
          }
          __syncwarp();
          if (lane == 0) st_release_gpu(count + 32 * L, seq);
        }
      } else {
        ok = wait_flags(count + 32 * L, 1, seq, f);
        t_seen = clock64();
        if (ok) {
          const uint4* src = reinterpret_cast<const uint4*>(input_slot(par));
          uint4* dst = reinterpret_cast<uint4*>(m.xin0);
          for (int i = lane; i < 2 * n4; i += 32) {
            const int row = i / n4, v = i % n4;
            dst[row * (stride / 8) + v] = __ldcg(src + row * (stride / 8) + v);
          }
        }
      }
      if (lane == 0) f->decision = ok ? 0u : 1u;
      __syncwarp();
    }
    dev::named_barrier(nct);
    if (f->decision) break;
    const long long t_in = clock64();
    long long t_l0 = t_in;
    // (4) layers
    for (int l = 0; l < L; ++l) {
      const uint16_t* in = l == 0 ? m.xin0 : m.layer_in(p, l);
      const int kt = p.kt[l];
      int k0, k1;
      share(l, k0, k1);
      if (l > 0 && lane == 0) marks.warp(warp, l, 2);
      // while the layer's words are on their way (issued after the first look instead, the look came back
      // no sooner and the answer was 700-1,500 cycles later on the H200: docs/cuda.md, "The grid kernel,
      // sixth round" and "seventh round")
      if (kRegTiles > 0 && l > 0) load_layer_tiles(l);
      int rounds = 0;  // of this lane's loads of its words
      if (l > 0 && tagged) {
        // the words of this warp's k16 tiles of layer l-1's output: its MMAs start when their producers
        // are done, not every block (a quit ends the wait: garbage, never read)
        take_words(p.xch_words + gw.layer_in(l), 16 * k0, min(16 * k1, H), seq, const_cast<uint16_t*>(in), stride, lane,
                   32, f, rounds);
        __syncwarp();
      } else if (l > 0) {
        // every slice of layer l-1's output has arrived (a quit ends the wait: garbage, never read)
        if (warp == 0) {
          if (counters)
            wait_flags(count + 32 * (l - 1), 1, unsigned(nc) * unsigned(s + 1), f);
          else
            wait_flags(p.xch_flag + (l - 1) * nc, nc, seq, f);
        }
        dev::named_barrier(nct);
        const uint4* src = reinterpret_cast<const uint4*>(p.xch_h + size_t(par * L + (l - 1)) * 2 * stride);
        uint4* dst = reinterpret_cast<uint4*>(const_cast<uint16_t*>(in));
        for (int i = tid; i < stride / 4; i += nct) dst[i] = __ldcg(src + i);  // 2 rows x stride halves
        dev::named_barrier(nct);
      }
      if (lane == 0) marks.warp(warp, l, 0);
      float y[4];
      if constexpr (kRegTiles > 0)
        gates_regs<BF16>(ta, k0, k1 - k0, reinterpret_cast<const uint32_t*>(in), stride / 2, y);
      else if (l < p.grid_l2_layers)
        gates_l2<BF16>(l2_frag(l), kt, k0, k1, reinterpret_cast<const uint32_t*>(in), stride / 2, y);
      else
        gates_range<BF16>(smem_frag(l), kt, k0, k1, reinterpret_cast<const uint32_t*>(in), stride / 2, y);
      // the k-shares' partial sums by layer parity (the cell warp reads them after the arrival below)
      float* const red = m.red + (l & 1) * ksplit * Ub * 4;
      if (t == 0) *reinterpret_cast<float4*>(red + (ks * Ub + q * kUnitsPerGroup + g) * 4) = make_float4(y[0], y[1], y[2], y[3]);
      if (lane == 0) marks.warp(warp, l, 1);
      // the sums to the cell warp, then wait for its cells: no warp polls the next layer's words (L2 traffic
      // that slows every block's exchange) before this block's own are on their way
      bar_arrive(kBarSums, nbar);
      if (l > 0 && tagged && k1 > k0) {  // while the cells run; a warp without words of this layer never looks
        const int most = __reduce_max_sync(0xffffffffu, rounds);
        if (lane == 0) marks.polls(warp, l, most);
      }
      bar_sync(kBarCells, nbar);
      if (l == 0) {
        t_l0 = clock64();
        if (tid == 0) f->consumed = s + 1;  // every compute warp has read this tick's input
      }
      if (l < L - 1 && !tagged && warp == 0) {
        // this block's slice of layer l's output (the cell warp's stage) -> every block's input buffer of
        // layer l+1, then the flag
        const int vec_per_row = Ub / 8;  // uint4 of 8 halves
        const uint4* st4 = reinterpret_cast<const uint4*>(m.stage);
        uint16_t* dst = p.xch_h + size_t(par * L + l) * 2 * stride;
        for (int k = lane; k < 2 * vec_per_row; k += 32) {
          const int row = k / vec_per_row, v = k % vec_per_row;
          __stcg(reinterpret_cast<uint4*>(dst + row * stride + u0 + v * 8), st4[k]);
        }
        __syncwarp();
        if (lane == 0) {  // the release covers the warp's stores
          if (counters)
            red_release_gpu_add(count + 32 * l, 1u);
          else
            st_release_gpu(p.xch_flag + l * nc + b, seq);
          marks.block(l, kGrSent);
        }
      }
    }
    const long long t_layers = clock64();
    // (5) head (not folded): this block's partial sums over its units -> block 0
    if (!fold) {
      for (int o = warp; o < O; o += p.compute_warps) {
        float z = 0.f;
        for (int j = lane; j < Ub; j += 32) z = fmaf(m.hw[o * Ub + j], m.h32[j], z);
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) z += __shfl_xor_sync(0xffffffffu, z, d);
        if (lane == 0) {
          if (tagged) {
            dev::st_word_gpu(p.xch_words + gw.head(o) + b, dev::tagged(seq, __float_as_uint(z)));
          } else {
            const int at = (par * nc + b) * kMaxOutputs + o;
            __stcg(p.xch_head + at, z);
          }
        }
      }
      dev::named_barrier(nct);
      if (tid == 0) marks.block(L - 1, kGrSent);
    }
    if (tid == 0 && tagged) {
      if (b != 0) f->answered = s + 1;
    } else if (tid == 0) {
      // release: after the named barrier, all partials
      if (counters)
        red_release_gpu_add(count + 32 * (L - 1), 1u);
      else
        st_release_gpu(p.xch_flag + (L - 1) * nc + b, seq);
      if (b != 0) f->answered = s + 1;  // this block's share of tick s is done: its pollers may look again
    }
    // (6) block 0: add the partial sums (lane o of warp 0: output o), answer
    if (b == 0) {
      float z = hb;
      if (tagged) {
        // outputs o0, o0 + compute_warps, .. (kHeadOutputsAtOnce of them): warp o0 takes every block's word of
        // each, all in flight at once, a lane re-reading only the words not yet there, and adds each output's
        // in a tree: one L2 round trip for a warp's outputs, where one output at a time made vollo_med's 32
        // outputs on 8 warps four in a row (its head took ~4,500 cycles from the last block's words to block
        // 0's sums, a layer's exchange ~1,300). With one output warp 0 keeps its sum, else the sums meet in
        // shared memory (sP: free after the last layer until the next tick's load; [L][4][Ub] >= 32 floats)
        const int cw = p.compute_warps;
        for (int o0 = warp; o0 < O; o0 += kHeadOutputsAtOnce * cw) {
          float zo[kHeadOutputsAtOnce] = {};
          for (int r0 = 0; r0 < nc; r0 += 128) {
            unsigned long long w[kHeadOutputsAtOnce][4];
            unsigned want = 0;  // bit 4 j + i: this lane's word i of output o0 + j cw, not yet there
#pragma unroll
            for (int j = 0; j < kHeadOutputsAtOnce; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                w[j][i] = dev::tagged(seq, 0u);  // a word past O or nc adds nothing
                if (o0 + j * cw < O && r0 + lane + 32 * i < nc) want |= 1u << (4 * j + i);
              }
            while (want) {
#pragma unroll
              for (int j = 0; j < kHeadOutputsAtOnce; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                  if (want >> (4 * j + i) & 1u)
                    w[j][i] = dev::ld_word_gpu(p.xch_words + gw.head(o0 + j * cw) + r0 + lane + 32 * i);
#pragma unroll
              for (int j = 0; j < kHeadOutputsAtOnce; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                  if (dev::reached(dev::tag_of(w[j][i]), seq)) want &= ~(1u << (4 * j + i));
              if (f->quit) break;  // a quit: garbage, never read
            }
#pragma unroll
            for (int j = 0; j < kHeadOutputsAtOnce; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) zo[j] += __uint_as_float(dev::value_of(w[j][i]));
          }
#pragma unroll
          for (int d = 16; d > 0; d >>= 1)
#pragma unroll
            for (int j = 0; j < kHeadOutputsAtOnce; ++j)
              if (o0 + j * cw < O) zo[j] += __shfl_xor_sync(0xffffffffu, zo[j], d);  // warp-uniform: one output, one tree
          if (lane == 0) marks.warp(warp, L, 0);
#pragma unroll
          for (int j = 0; j < kHeadOutputsAtOnce; ++j) {
            const int o = o0 + j * cw;
            if (O == 1 && j == 0)
              z += zo[0];
            else if (o < O && lane == 0)
              m.sP[o] = zo[j];
          }
        }
        if (O > 1) {
          dev::named_barrier(nct);
          if (warp == 0 && lane < O) z += m.sP[lane];
        }
      } else if (warp == 0) {
        if (counters)
          wait_flags(count + 32 * (L - 1), 1, unsigned(nc) * unsigned(s + 1), f);
        else
          wait_flags(p.xch_flag + (L - 1) * nc, nc, seq, f);
        if (lane < O)
          for (int r = 0; r < nc; ++r) z += __ldcg(p.xch_head + (par * nc + r) * kMaxOutputs + lane);
        if (lane == 0) marks.warp(0, L, 0);
      }
      if (warp == 0) {
        const float za = __shfl_sync(0xffffffffu, z, (2 * lane) & 31), zb = __shfl_sync(0xffffffffu, z, (2 * lane + 1) & 31);
        const long long t_head = clock64();
        dev::store_output_chunk(p.mb, seq, O, za, zb);
        if (lane == 0) {
          marks.block(L, kGrSent);
          const long long t_out = clock64();
          const unsigned long long g_out = record_tick_timing(p.words, {t_seen, t_in, t_l0, t_layers, t_head, t_out});
          if (p.tick_trace) {  // off the answer's path: the store is out
            unsigned long long* e = p.tick_trace + 3 * (s & p.tick_trace_mask);
            e[0] = s + 1, e[1] = g_out, e[2] = (unsigned long long)(t_out - t_seen);
          }
          if (own && p.grid_quiet_answer) {  // the answer is on its way to the host: the rounds may start
            __threadfence_system();
            st_release_gpu(&p.words->answer_out, seq);
          }
        }
        __syncwarp();
        if (lane == 0) f->answered = s + 1;
      }
    } else if (tid == 0) {
      marks.block(L, kGrSent);
    }
    if (warp == 0) marks.flush(p, b, t_in);
    // (7) own precompute: the round that prepares tick s+1 (quiet answer: once block 0's answer is out; a
    // quit ends the wait, and the round's garbage is never read)
    if (own && p.grid_quiet_answer && b != 0) {
      if (warp == 0) wait_flags(&p.words->answer_out, 1, seq, f);
      dev::named_barrier(nct);
    }
    if (own) own_round<BF16>(p, smem, own_state(p, b), s, b, f);
  }
  bar_arrive(kBarSums, nbar);  // the cell warp wakes, sees the decision and leaves
}

// A warp-uniform value through a shuffle from lane 0, which the compiler cannot see through: it stays in a
// register for the loop that uses it, where the compiler would otherwise re-read the kernel parameter
// (a constant-bank load) at each use. In the cell warp that was worth 70-90 cycles a layer on the H200
// (docs/cuda.md, "The grid kernel's cell warp").
__device__ __forceinline__ int kept(int v) { return __shfl_sync(0xffffffffu, v, 0); }
template <class T>
__device__ __forceinline__ T* kept(T* q) {
  const unsigned long long v = reinterpret_cast<unsigned long long>(q);
  const unsigned lo = __shfl_sync(0xffffffffu, unsigned(v), 0), hi = __shfl_sync(0xffffffffu, unsigned(v >> 32), 0);
  return reinterpret_cast<T*>((static_cast<unsigned long long>(hi) << 32) | lo);
}

// The cell warp (kGridCellWarps): every layer it waits for the compute warps' k-share sums, adds them, runs
// the cells of the block's Ub units and sends h (tagged words straight to L2; the other exchanges: the
// stage that compute warp 0 copies), then lets the compute warps go on. One warp's chain of dependent
// instructions, kept short: kParts (grid_cell_lanes: the lanes a unit) is a template argument (shifts and unrolled
// shuffles, no branch on it), every load of a pass is issued before the first add and before the quit check
// (the addresses are valid whatever the compute warps did), and what a layer's loads need is kept in
// registers and advanced by adds (kept). On the H200 it takes ~900 cycles from the last compute warp's sums
// to the words sent, as it did with twice the instructions (docs/cuda.md, "The grid kernel, sixth round").
// It leaves when the compute warps do (their decision, read after the barrier they arrive at on leaving).
template <bool BF16, int kParts>
__device__ void multi_cells(const LstmParams& p, char* smem, volatile CtaFlags* f, int b) {
  constexpr int kPlog = kParts == 4 ? 2 : kParts == 2 ? 1 : 0;
  constexpr int kPerPass = 32 >> kPlog;
  static_assert(kParts == 1 << kPlog, "1, 2 or 4 lanes a unit");
  const int lane = threadIdx.x & 31;
  const int H = kept(p.H), L = kept(p.L), O = kept(p.O), ksplit = kept(p.ksplit), nc = kept(p.nc);
  const int Ub = kept(p.gpb * kUnitsPerGroup), u0 = b * Ub;
  const int nbar = kept(p.compute_warps * 32 + 32 * kGridCellWarps);
  const bool fold = kept(int(cells_fold_head(p))) != 0, tagged = kept(int(p.grid_exchange == GridExchange::tagged)) != 0;
  const bool own = kept(int(p.grid_precompute == GridPrecompute::in_critical)) != 0;
  const int part = lane & (kParts - 1), jl = lane >> kPlog;
  const GridWords gw = grid_words(p);
  const int kh = kept(gw.kh);
  // the rounds of kSharesInFlight loads that bring a lane its shares part, part + kParts, ... (one where
  // grid_cell_lanes chose kParts; more only where a forced count is smaller)
  const int rounds = (ksplit + kSharesInFlight * kParts - 1) / (kSharesInFlight * kParts);
  // layer l's words: words1 + (l - 1) kh (l >= 1); output o's head word of this block: head0 + o nc
  unsigned long long* const words1 = kept(p.xch_words + gw.layer_in(1) + u0);
  unsigned long long* const head0 = kept(p.xch_words + gw.head(0) + b);
  // shared memory by offset (MultiSmem's views), each offset kept
  const float* const red0 = reinterpret_cast<const float*>(smem + kept(p.s_red));
  const float* const P0 = reinterpret_cast<const float*>(smem + kept(p.s_P));
  const float* const C0 = reinterpret_cast<const float*>(smem + kept(p.s_c));
  float* const z0 = reinterpret_cast<float*>(smem + kept(p.s_z0));
  const float* const hw = reinterpret_cast<const float*>(smem + kept(p.s_hw));
  float* const h32 = reinterpret_cast<float*>(smem + kept(p.s_h32));
  uint16_t* const stage = reinterpret_cast<uint16_t*>(smem + kept(p.s_stage));
  unsigned* const block_marks = reinterpret_cast<unsigned*>(smem + kept(p.s_gmarks + 4 * GridMarks::warp_slots(p)));
  auto mark = [&](int l, int which) { block_marks[GridMarks::block_slot(l, which)] = unsigned(clock64()); };
  const int parity_floats = ksplit * Ub * 4;  // one layer parity's [ksplit][Ub][4] sums
  for (unsigned long long s = 0;; ++s) {
    const unsigned seq = wire_seq(s);
    const float* P = P0;  // layer l's [4][Ub] and [Ub]
    const float* C = C0;
    unsigned long long* words = words1;  // layer l + 1's input (l < L - 1)
    for (int l = 0; l < L; ++l, P += 4 * Ub, C += Ub, words += kh) {
      bar_sync(kBarSums, nbar);
      const bool last = l == L - 1;
      const float* const red = red0 + (l & 1) * parity_floats;
      for (int j0 = 0; j0 < Ub; j0 += kPerPass) {
        const int j = j0 + jl, jc = j < Ub ? j : Ub - 1;
        // every load first: P and c, then the first round of shares (a share past ksplit reads the last one
        // and counts zero)
        const float p0 = P[jc], p1 = P[Ub + jc], p2 = P[2 * Ub + jc], p3 = P[3 * Ub + jc];
        const float c0 = C[jc];
        float4 r[kSharesInFlight];
#pragma unroll
        for (int i = 0; i < kSharesInFlight; ++i) {
          const int k = part + i * kParts;
          r[i] = *reinterpret_cast<const float4*>(red + ((k < ksplit ? k : ksplit - 1) * Ub + jc) * 4);
        }
        if (j0 == 0) {
          if (f->decision) return;  // the compute warps left (1 only then: they write it after this layer's cells)
          // the clock read waits for the load above: the barrier's DEFER_BLOCKING form lets a warp issue
          // instructions that touch no memory before the barrier completes (a mark read right after it
          // can come before the meeting)
          if (lane == 0) mark(l, kGrMeet);
        }
        float z[4] = {0.f, 0.f, 0.f, 0.f};
        for (int round = 0;;) {
#pragma unroll
          for (int i = 0; i < kSharesInFlight; ++i) {
            const bool in = part + (round * kSharesInFlight + i) * kParts < ksplit;
            z[0] += in ? r[i].x : 0.f;
            z[1] += in ? r[i].y : 0.f;
            z[2] += in ? r[i].z : 0.f;
            z[3] += in ? r[i].w : 0.f;
          }
          if (++round == rounds) break;
#pragma unroll
          for (int i = 0; i < kSharesInFlight; ++i) {
            const int k = part + (round * kSharesInFlight + i) * kParts;
            r[i] = *reinterpret_cast<const float4*>(red + ((k < ksplit ? k : ksplit - 1) * Ub + jc) * 4);
          }
        }
#pragma unroll
        for (int d = kParts >> 1; d > 0; d >>= 1)
#pragma unroll
          for (int i = 0; i < 4; ++i) z[i] += __shfl_xor_sync(0xffffffffu, z[i], d);
        if (lane == 0) mark(l, kGrSums);
        float h = 0.f;
        const bool mine = part == 0 && j < Ub;
        if (mine) {
          if (l == 0 && own) {  // W_ih,0 x_s of this unit: the own precompute's layer-0 input term
            z0[j] = z[0];
            z0[Ub + j] = z[1];
            z0[2 * Ub + j] = z[2];
            z0[3 * Ub + j] = z[3];
          }
          float c = c0;
          h = u0 + j < H ? dev::lstm_cell_ftz(z[0] + p0, z[1] + p1, z[2] + p2, z[3] + p3, c) : 0.f;
        }
        if (lane == 0) mark(l, kGrCell);
        if (mine) {
          if (last && !fold)
            h32[j] = h;
          else if (last)
            ;  // the head below
          else if (tagged && u0 + j < H)
            dev::st_word_gpu(words + j, dev::tagged(seq, dev::hi_lo<BF16>(h)));
          else if (!tagged)
            split_store<BF16>(stage + j, stage + Ub + j, h);
        }
        if (last && fold) {
          // the head, folded (one pass): lane o adds output o over the block's units (h of unit j from lane
          // j * kParts) and sends it to block 0
          float zo = 0.f;
          for (int jj = 0; jj < Ub; ++jj) {
            const float hj = __shfl_sync(0xffffffffu, h, jj * kParts);
            if (lane < O) zo = fmaf(hw[lane * Ub + jj], hj, zo);
          }
          if (lane < O) dev::st_word_gpu(head0 + lane * nc, dev::tagged(seq, __float_as_uint(zo)));
        }
      }
      if (lane == 0 && tagged && (!last || fold)) mark(l, kGrSent);
      bar_arrive(kBarCells, nbar);
    }
  }
}

// Block 0's service warp: reports `ready` once every critical block has read the precompute round,
// forwards each tick's input to the precompute (after block 0's compute warps have read it and every
// block has read the round it would overwrite), and watches the control chunk. The other blocks' service
// warp only watches the quit word.
__device__ void multi_service(const LstmParams& p, char* smem, volatile CtaFlags* f, int b) {
  const int lane = threadIdx.x & 31;
  if (b != 0) {
    if (lane == 0) {
      unsigned q;
      while (!(q = dev::ld_volatile_u32(&p.words->quit))) __nanosleep(500);
      f->quit = q;
    }
    return;
  }
  const float* x32 = smem_at<const float>(smem, p.s_x32);
  const unsigned long long nc = (unsigned long long)p.nc;
  dev::LeaseWatch watch;
  if (lane == 0) watch.start(p.mb);
  unsigned long long fwd = 0, ready = 0;
  for (;;) {
    unsigned long long pre = 0;
    if (lane == 0) pre = dev::ld_acquire_u64(&p.words->prefetched);
    pre = __shfl_sync(0xffffffffu, pre, 0);
    if (pre >= (ready + 1) * nc) {
      if (lane == 0)
        dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(ready), unsigned(ready), kServing, 0));
      ++ready;
      continue;
    }
    const unsigned long long done = p.forward_after_output ? f->answered : f->consumed;
    if (__shfl_sync(0xffffffffu, done > fwd && pre >= (fwd + 1) * nc, 0)) {
      dev::forward_input(p, x32, fwd, f);
      continue;
    }
    if (dev::control_says_leave(p, watch, f)) return;
    __nanosleep(100);
  }
}

template <bool BF16, int kThreads, int kRegWGs, int kRegTiles>
__device__ void multi_critical(const LstmParams& p, char* smem, int b) {
  const int tid = threadIdx.x, warp = tid >> 5;
  volatile CtaFlags* f = smem_at<volatile CtaFlags>(smem, p.s_flags);
  const MultiSmem m(p, smem);
  const int H = p.H, O = p.O, Ub = p.gpb * kUnitsPerGroup, u0 = b * Ub;
  {
    // the fragments shared memory holds: layers [grid_l2_layers, L)
    const int from = p.bfrag_off[p.grid_l2_layers];
    const uint4* src = static_cast<const uint4*>(p.frags) + size_t(b) * p.block_frag + from;
    uint4* dst = smem_at<uint4>(smem, p.s_frags);
    for (int i = tid; i < p.block_frag - from; i += blockDim.x) dst[i] = __ldg(src + i);
    uint32_t* xin = smem_at<uint32_t>(smem, p.s_xin);
    for (int i = tid; i < p.L * p.xin_stride; i += blockDim.x) xin[i] = 0;
    for (int i = tid; i < O * Ub; i += blockDim.x) {
      const int o = i / Ub, j = i % Ub;
      m.hw[i] = u0 + j < H ? p.head_w[o * H + u0 + j] : 0.f;
    }
    unsigned* claim = smem_at<unsigned>(smem, p.s_claim);
    for (int i = tid; i < p.mb.n_in; i += blockDim.x) m.seqw[i] = claim[i] = 0;
    GridMarks(p, smem).reset(p.compute_warps, tid, blockDim.x);
    if (tid == 0) dev::reset_flags(f);
  }
  __syncthreads();
  const int first_poller = p.compute_warps + kGridCellWarps;
  // With kRegWGs the compute warps are the first kRegWGs warpgroups (the plan's grid_reg_wgs).
  if (warp < p.compute_warps) {
    grow_registers<kThreads, kRegWGs>();
    multi_compute<BF16, kRegTiles>(p, smem, f, b);
  } else {
    shrink_registers<kRegWGs>();
    if (warp < first_poller) {
      const int parts = grid_cell_lanes(p);
      if (parts == 4)
        multi_cells<BF16, 4>(p, smem, f, b);
      else if (parts == 2)
        multi_cells<BF16, 2>(p, smem, f, b);
      else
        multi_cells<BF16, 1>(p, smem, f, b);
    } else if (warp < first_poller + p.poll_warps) {
      // every block polls the input itself (counters: block 0 only); none while a tick is being computed
      // (mailbox.cuh, gate_answered)
      if (b == 0 || p.grid_exchange == GridExchange::flags)
        dev::poll_input<BF16>(p, warp - first_poller, m.seqw, smem_at<unsigned>(smem, p.s_claim), m.x32, m.xin0, f,
                              b == 0, true,
                              p.grid_pollers_publish && p.grid_exchange == GridExchange::tagged ? p.xch_words : nullptr);
    } else if (warp == first_poller + p.poll_warps) {
      multi_service(p, smem, f, b);
    }  // else: a warp that only fills the last warpgroup (kRegWGs)
  }
  __syncthreads();
  if (b == 0 && tid == 0) {
    __threadfence_system();
    const unsigned long long n = f->answered;
    dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(n), unsigned(n), f->quit, 0));
  }
}

template <bool BF16, int kThreads, int kRegWGs, int kRegTiles>
__global__ void __launch_bounds__(kThreads, 1) lstm_grid(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  const int b = int(blockIdx.x);
  if (b < p.nc) {
    multi_critical<BF16, kThreads, kRegWGs, kRegTiles>(p, smem, b);
  } else {
    precompute_block(p, smem, b - p.nc);
  }
}

// The instantiation a plan runs: its precision, its block size (LstmParams::grid_wide) and, with tiles in
// registers, its compute warpgroups (grid_reg_wgs; kGridRegWGChoices), or null.
template <int kThreads, int kRegWGs, int kRegTiles>
const void* grid_instance(bool bf16) {
  return bf16 ? (const void*)&lstm_grid<true, kThreads, kRegWGs, kRegTiles>
              : (const void*)&lstm_grid<false, kThreads, kRegWGs, kRegTiles>;
}
cudaError_t preload_grid_kernels_here() {
  constexpr GridRegWGChoice regs = kGridRegWGChoices[0];
  cudaFuncAttributes a{};
  for (const bool bf16 : {false, true})
    for (const void* fn : {grid_instance<kMaxBlockThreads, 0, 0>(bf16), grid_instance<kGridBlockThreads, 0, 0>(bf16),
                           grid_instance<regs.threads, regs.wgs, regs.tiles>(bf16)})
      if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return e;
  return cudaSuccess;
}

const void* grid_kernel(const LstmParams& p) {
  static_assert(std::size(kGridRegWGChoices) == 1 && kGridRegWGChoices[0].threads == kGridBlockThreads,
                "the instantiations below");
  constexpr GridRegWGChoice regs = kGridRegWGChoices[0];
  if (p.grid_reg_wgs == 0)
    return p.grid_wide ? grid_instance<kMaxBlockThreads, 0, 0>(p.bf16) : grid_instance<kGridBlockThreads, 0, 0>(p.bf16);
  if (!p.grid_wide && p.grid_reg_wgs == regs.wgs) return grid_instance<regs.threads, regs.wgs, regs.tiles>(p.bf16);
  return nullptr;
}

// The launch's blocks that can be co-resident where `stream`'s work runs (a green context or MPS may
// hold fewer SMs than the device).
cudaError_t grid_fits(const LstmParams& p, cudaStream_t stream, const void* fn, long long* fits) {
  if (!fn) return cudaErrorInvalidValue;  // a plan no instantiation serves (the planner makes none)
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, p.threads(), p.smem_bytes)) != cudaSuccess)
    return e;
  try {
    *fits = coresident_blocks(per_sm, launch_sm_count(query_stream_sms(stream)));
  } catch (const std::exception&) {
    return cudaErrorInvalidResourceHandle;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t preload_grid_kernels() { return preload_grid_kernels_here(); }

cudaError_t grid_max_coresident(const LstmParams& p, cudaStream_t stream, long long* fits) {
  return grid_fits(p, stream, grid_kernel(p), fits);
}

cudaError_t launch_lstm_grid(const LstmParams& p, cudaStream_t stream, long long* max_coresident) {
  if (p.stall_tick >= 0) return cudaErrorInvalidValue;  // the stall hook is compiled into the cta and cluster kernels only
  const void* fn = grid_kernel(p);
  long long fits = 0;
  const cudaError_t e = grid_fits(p, stream, fn, &fits);
  if (e != cudaSuccess) return e;
  if (max_coresident) *max_coresident = fits;
  if (fits < p.grid()) return cudaErrorCooperativeLaunchTooLarge;
  LstmParams copy = p;
  void* args[] = {&copy};
  return cudaLaunchCooperativeKernel(fn, dim3(unsigned(p.grid())), dim3(unsigned(p.threads())), args,
                                     size_t(p.smem_bytes), stream);
}

}  // namespace hotpath::cuda
