// The cluster family: the critical step of one tick over the nc blocks of one thread-block cluster, for
// models whose critical-step weights do not fit one SM. Blocks [0, nc) are critical, the rest run the
// shared precompute (precompute.cuh). Layout and roles: ClusterLayout (lstm_params.hpp); the exchange:
// tagged words (tagged_words.cuh), or (ClusterLayout::async_exchange) untagged words by st.async counted on
// an mbarrier per (layer, tick parity).
//
// A tick, in every critical block b (16 compute warps, no other warps):
//   start    thread 0 waits for the precompute round; every warp copies this block's slice of (P_l, c_l)
//            into shared memory; the block counts itself prefetched (block 0 reports `ready` when all are).
//   input    block 0's first warps poll the mailbox (lane <-> chunk); once the whole input is there, all
//            16 warps of block 0 store it, as tagged words (hi | lo halves), into every block's input
//            buffer. No other block touches host memory while serving.
//   layer l  warp (q, ks) spins on the words of its k16 tiles of the layer's input, one tile at a time,
//            and runs them through the tensor cores against its register-resident W_ih tiles; the
//            ksplit partial gate sums of group q meet in shared memory (one named barrier of the group's
//            warps); the group's first warp runs the cell update (lane t: gate t's activation) and
//            stores each unit's new h as a tagged word into every block's buffer of layer l+1.
//   head     after the last layer the group's first warp stores its O partial head sums (fp32 h x the
//            rounded head weights) into block 0; block 0's warp 0 spins on them, adds them, answers.
// With tagged words nothing waits for more than the words it reads: no cluster barrier, flag or
// mbarrier per tick; with the mbarrier exchange a warp waits for its layer's phase.
//
// Leaving: only block 0 decides (stop request or lapsed lease, seen while it waits between ticks); it
// stores the reason into every block's quit word. Every wait also ends on quit (the tick then finishes
// with garbage nobody reads, so every warp reaches every barrier), and the blocks leave at the next
// tick's start, then meet at one cluster barrier: no block leaves while a peer may still store into it.
#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>

#include "cuda/kernels/cluster/cluster_policy.hpp"
#include "cuda/kernels/common/tagged_words.cuh"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/common/precompute.cuh"

namespace hotpath::cuda {
namespace {

using dev::CtaFlags;
using dev::mbar_expect_tx;
using dev::mbar_init;
using dev::mbar_try_wait;
using dev::st_async_b32;
using dev::st_async_v4;
using dev::smem_at;
using ull = unsigned long long;

__device__ __forceinline__ void group_barrier(int q, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(2 + q), "r"(threads) : "memory");
}

// Shared-memory views of a critical block.
struct ClusterSmem {
  ull* tx;          // the tick's input words [kt0 * 16]
  ull* th;          // hidden layers' input words [L-1][h_words]
  ull* thead;       // block 0: head partial sums [nc * gpb][O]
  ull* stats;       // this block's timing sums [kClusterStatSlots]
  const uint4* spill;  // W_ih tiles beyond the register slots [warps][slots - regs][2][32]
  float* x32;       // block 0: the tick's input as floats (for the precompute) [n_in * 3]
  float* red;       // partial gate sums [2 layer parities][ksplit][gpb][32 lanes]
  float* sP;        // [L][4][Ub]
  float* sc;        // [L][Ub]
  float* hw;        // rounded head weights [O][Ub]
  // the mbarrier exchange (async_exchange): untagged words, mbarriers [L + 1][2 tick parities]
  uint32_t* xw;
  uint32_t* hx;
  float* headf;
  uint64_t* bar;
  __device__ ClusterSmem(const LstmParams& p, char* smem)
      : tx(smem_at<ull>(smem, p.cl.s_tx)),
        th(smem_at<ull>(smem, p.cl.s_th)),
        thead(smem_at<ull>(smem, p.cl.s_thead)),
        stats(smem_at<ull>(smem, p.cl.s_stats)),
        spill(smem_at<const uint4>(smem, p.s_frags)),
        x32(smem_at<float>(smem, p.s_x32)),
        red(smem_at<float>(smem, p.s_red)),
        sP(smem_at<float>(smem, p.s_P)),
        sc(smem_at<float>(smem, p.s_c)),
        hw(smem_at<float>(smem, p.s_hw)),
        xw(smem_at<uint32_t>(smem, p.cl.s_xw)),
        hx(smem_at<uint32_t>(smem, p.cl.s_hx)),
        headf(smem_at<float>(smem, p.cl.s_headf)),
        bar(smem_at<uint64_t>(smem, p.cl.s_bar)) {}
};

// The mbarrier exchange's pieces (the barrier and the st.async stores: common/mbarrier.cuh): st.async into a
// peer's shared memory completing bytes on its mbarrier; the owner arms each (layer, parity) barrier with the
// bytes it expects before the tick.
// Waits for tick s's phase of `bar`, or the block quits (false).
__device__ __forceinline__ bool mbar_wait(uint64_t* bar, unsigned long long s, volatile CtaFlags* f) {
  const unsigned parity = unsigned(s >> 1) & 1u;
  while (!mbar_try_wait(bar, parity))
    if (f->quit) return false;
  return true;
}
// Input words a block expects each tick on the mbarrier exchange: I rounded up to whole 16-byte stores.
__device__ __forceinline__ int input_words_async(int I) { return (I + 3) & ~3; }

// The B registers of k16 tile kk of a layer input (words `in`, `valid` of them written), once every word
// this lane reads has reached seq; false when the block quits first. Lane (g, t) reads k = 16 kk + 2t,
// 2t+1 (b0) and 2t+8, 2t+9 (b1); every B column carries the input, hi halves in the even columns and lo
// in the odd ones (N = 8 is paid for anyway), so every lane ends with all four gates of its unit.
__device__ __forceinline__ bool tile_b(const ull* in, int valid, int kk, unsigned seq, uint32_t sel, uint32_t& b0,
                                       uint32_t& b1, volatile CtaFlags* f) {
  const int t = threadIdx.x & 3;
  const int k0 = kk * 16 + 2 * t, k1 = k0 + 8;
  for (;;) {
    ull w0 = 0, w1 = 0, w2 = 0, w3 = 0;
    if (k0 < valid) dev::ld_words2(in + k0, w0, w1);
    if (k1 < valid) dev::ld_words2(in + k1, w2, w3);
    const bool ok = (k0 >= valid || (dev::reached(dev::tag_of(w0), seq) &&
                                     (k0 + 1 >= valid || dev::reached(dev::tag_of(w1), seq)))) &&
                    (k1 >= valid || (dev::reached(dev::tag_of(w2), seq) &&
                                     (k1 + 1 >= valid || dev::reached(dev::tag_of(w3), seq))));
    if (__all_sync(0xffffffffu, ok)) {
      // words past `valid` read as zero; a word at valid - 1 with its pair past it: the pair is zero
      const uint32_t v0 = dev::value_of(w0), v1 = k0 + 1 < valid ? dev::value_of(w1) : 0u;
      const uint32_t v2 = dev::value_of(w2), v3 = k1 + 1 < valid ? dev::value_of(w3) : 0u;
      b0 = dev::b_pair(v0, v1, sel);
      b1 = dev::b_pair(v2, v3, sel);
      return true;
    }
    if (f->quit) {
      b0 = b1 = 0;
      return false;
    }
  }
}

// The B registers of k16 tile kk from untagged words (the mbarrier exchange: the layer's phase has
// completed, every word is there; words past `valid` are zero and never written).
__device__ __forceinline__ void tile_b_plain(const uint32_t* in, int valid, int kk, uint32_t sel, uint32_t& b0,
                                             uint32_t& b1) {
  const int t = threadIdx.x & 3;
  const int k0 = kk * 16 + 2 * t, k1 = k0 + 8;
  const uint2 w0 = k0 < valid ? *reinterpret_cast<const uint2*>(in + k0) : make_uint2(0u, 0u);
  const uint2 w1 = k1 < valid ? *reinterpret_cast<const uint2*>(in + k1) : make_uint2(0u, 0u);
  b0 = dev::b_pair(w0.x, w0.y, sel);
  b1 = dev::b_pair(w1.x, w1.y, sel);
}

// Gate pre-activations of this warp's k-share of one layer: tiles [first, first + n) of its list, the
// first `RS` of the list in registers (w), the rest in shared memory; k16 tile index k0 + (slot - first).
// Two accumulator chains per m16 tile. Returns, in every lane (g, t), the four gates of unit g (hi + lo
// columns summed), and in t_data the clock when the first tile's words were all there.
template <bool BF16, int RS, bool ASYNC>
__device__ __forceinline__ void layer_gates(const uint4 (&w)[RS > 0 ? RS : 1][2], const uint4* spill, int first, int n,
                                            int k0, const ull* in, const uint32_t* in_plain, int valid, unsigned seq,
                                            volatile CtaFlags* f, float (&y)[4], long long& t_data) {
  const int lane = threadIdx.x & 31;
  const uint32_t sel = ((lane >> 2) & 1) ? 0x7632u : 0x5410u;  // odd columns: lo halves
  float a0[2][4] = {}, a1[2][4] = {};
  bool first_tile = true;
  // slot j's B registers, once its words are there (the first tile's arrival is timed)
  auto tile = [&](int j, uint32_t& b0, uint32_t& b1) {
    if constexpr (ASYNC) tile_b_plain(in_plain, valid, k0 + (j - first), sel, b0, b1);
    else tile_b(in, valid, k0 + (j - first), seq, sel, b0, b1, f);
    if (first_tile) {
      t_data = clock64();
      first_tile = false;
    }
  };
#pragma unroll
  for (int j = 0; j < RS; ++j) {
    if (j >= first && j < first + n) {
      uint32_t b0, b1;
      tile(j, b0, b1);
      dev::mma16816_nv<BF16>(a0[j & 1], w[j][0], b0, b1);
      dev::mma16816_nv<BF16>(a1[j & 1], w[j][1], b0, b1);
    }
  }
  // tiles held in shared memory: [slot - RS][2][32] of this warp's region
  for (int j = max(first, RS); j < first + n; ++j) {
    uint32_t b0, b1;
    tile(j, b0, b1);
    const uint4* s = spill + size_t(j - RS) * 2 * 32 + lane;
    dev::mma16816_nv<BF16>(a0[j & 1], s[0], b0, b1);
    dev::mma16816_nv<BF16>(a1[j & 1], s[32], b0, b1);
  }
  if (first_tile) t_data = clock64();
  // columns 2t (hi) and 2t+1 (lo) of rows g (gates i / g) and g+8 (f / o)
  y[0] = (a0[0][0] + a0[0][1]) + (a0[1][0] + a0[1][1]);
  y[1] = (a0[0][2] + a0[0][3]) + (a0[1][2] + a0[1][3]);
  y[2] = (a1[0][0] + a1[0][1]) + (a1[1][0] + a1[1][1]);
  y[3] = (a1[0][2] + a1[0][3]) + (a1[1][2] + a1[1][3]);
}

// Block 0, the input: warps [0, pw) poll the tick's chunks (lane <-> chunk) and the lease; false when
// the kernel is to leave. The floats land in x32.
__device__ __forceinline__ bool poll_input(const LstmParams& p, const ClusterSmem& m, unsigned long long s, unsigned seq,
                                           dev::LeaseWatch& watch, unsigned& checks, volatile CtaFlags* f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int fpc = p.mb.in_fpc, c = warp * 32 + lane;
  const Chunk* slot = p.mb.in + (s % kInputRing) * p.mb.in_stride;
  bool have = c >= p.mb.n_in;
  for (;;) {
    if (!have) {
      const uint4 v = dev::ld_volatile_v4(slot + c);
      if (v.x == seq && (!p.mb.in_dual || v.w == seq)) {
        have = true;
        m.x32[fpc * c] = __uint_as_float(v.y);
        m.x32[fpc * c + 1] = __uint_as_float(v.z);
        if (fpc == 3) m.x32[fpc * c + 2] = __uint_as_float(v.w);
      }
    }
    if (__all_sync(0xffffffffu, have)) return true;
    // the control chunk, every 16th look (its own PCIe load, every 20 us at most)
    unsigned reason = 0;
    if (lane == 0 && (++checks & 15u) == 0) reason = watch.poll(p.mb);
    reason = __shfl_sync(0xffffffffu, reason, 0);
    if (reason) {
      if (lane == 0) f->quit = reason;
      return false;
    }
    if (f->quit) return false;
  }
}

template <bool BF16, int RS, bool ASYNC>
__device__ void cluster_critical(const LstmParams& p, char* smem, int b) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nct = p.compute_warps * 32;
  const ClusterLayout& cl = p.cl;
  const ClusterSmem m(p, smem);
  volatile CtaFlags* f = smem_at<volatile CtaFlags>(smem, p.s_flags);
  const int H = p.H, L = p.L, O = p.O, nc = p.nc, gpb = p.gpb, ksplit = p.ksplit;
  const int Ub = gpb * kUnitsPerGroup, u0 = b * Ub;
  const int q = warp / ksplit, ks = warp % ksplit;
  const int g = lane >> 2, t = lane & 3;
  const int ul = q * kUnitsPerGroup + g;  // this lane's unit within the block (the cell warp's)
  const bool cell_warp = ks == 0;
  const int n_units = nc * gpb * kUnitsPerGroup;  // every block's units: the words a hidden buffer gets

  // ---- set-up: register tiles, buffers, flags; then every block is initialised before any peer stores
  uint4 w[RS > 0 ? RS : 1][2];
  {
    const uint4* src = static_cast<const uint4*>(p.frags) + size_t(b) * p.block_frag + size_t(warp) * cl.slots * 64;
#pragma unroll
    for (int j = 0; j < RS; ++j) {
      w[j][0] = j < cl.slots ? __ldg(src + j * 64 + lane) : make_uint4(0, 0, 0, 0);
      w[j][1] = j < cl.slots ? __ldg(src + j * 64 + 32 + lane) : make_uint4(0, 0, 0, 0);
    }
    const int spill = cl.slots - RS;
    if (spill > 0) {
      uint4* dst = smem_at<uint4>(smem, p.s_frags);
      for (int i = tid; i < p.compute_warps * spill * 64; i += blockDim.x) {
        const int wp = i / (spill * 64), r = i % (spill * 64);
        dst[i] = __ldg(static_cast<const uint4*>(p.frags) + size_t(b) * p.block_frag + size_t(wp) * cl.slots * 64 + RS * 64 + r);
      }
    }
    for (int i = tid; i < p.kt[0] * 16; i += blockDim.x) m.tx[i] = 0;
    for (int i = tid; i < (L - 1) * cl.h_words; i += blockDim.x) m.th[i] = 0;
    for (int i = tid; i < nc * gpb * O; i += blockDim.x) m.thead[i] = 0;
    for (int i = tid; i < kClusterStatSlots + 2; i += blockDim.x) m.stats[i] = 0;
    for (int i = tid; i < O * Ub; i += blockDim.x) {
      const int o = i / Ub, j = i % Ub;
      m.hw[i] = u0 + j < H ? p.head_w[o * H + u0 + j] : 0.f;
    }
    for (int i = tid; i < p.kt[0] * 16; i += blockDim.x) m.xw[i] = 0;
    for (int i = tid; i < (L - 1) * cl.h_words; i += blockDim.x) m.hx[i] = 0;
    if (tid == 0) {
      dev::reset_flags(f);
      if (ASYNC) {
        for (int i = 0; i < 2 * (L + 1); ++i) mbar_init(m.bar + i, 1);  // one arrival: the owner's expect_tx
        dev::fence_mbar_init();
      }
    }
  }
  __syncthreads();
  dev::cluster_arrive_release();
  dev::cluster_wait_acquire();

  // Where this block's words go: the same offset in every block (shared::cluster addresses of block 0's
  // view; mapa per peer).
  const uint32_t th_local = dev::smem_u32(m.th), tx_local = dev::smem_u32(m.tx), head_local = dev::smem_u32(m.thead);
  const uint32_t hx_local = dev::smem_u32(m.hx), xw_local = dev::smem_u32(m.xw), headf_local = dev::smem_u32(m.headf);
  const uint32_t bar_local = dev::smem_u32(m.bar);
  const float hb = (b == 0 && lane < O) ? p.head_b[lane] : 0.f;

  // Block 0's poll warps watch the lease while they wait (lane 0 of each: a PCIe load every 20 us).
  dev::LeaseWatch watch;
  if (b == 0 && lane == 0 && warp < (p.mb.n_in + 31) / 32) watch.start(p.mb);
  unsigned checks = 0;
  long long t_seen = 0, t_in = 0, t_l0 = 0, t_layers = 0, t_head = 0;

  unsigned long long s = 0;
  for (;; ++s) {
    const unsigned seq = wire_seq(s);
    // (1) the precompute round that prepares tick s; this block's slice of P_l and c_l
    if (tid == 0) {
      const unsigned long long target = (s + 1) * (unsigned long long)p.np;
      while (dev::ld_acquire_u64(&p.words->published) < target && !f->quit) {
      }
      f->decision = f->quit ? 1u : 0u;
    }
    dev::named_barrier(nct);
    if (f->decision) break;
    dev::load_pc_slice(p, u0, Ub, m.sP, m.sc, nct);
    dev::named_barrier(nct);
    if (tid == 0) {
      // the last tick's timing sums, off the critical path (the host reads them while the kernel runs):
      // the input's arrival here against block 0 seeing it (block 0 cannot have seen the next input yet:
      // it waits for this block's `prefetched` below)
      if (s > 0) {
        const uint32_t seen_at = dev::smem_u32(m.stats + kClusterStatSlots);
        const ull seen = b == 0 ? m.stats[kClusterStatSlots] : dev::ld_word_remote(dev::peer_smem(seen_at, 0u));
        const ull here = m.stats[kClusterStatSlots + 1];
        if (here >= seen) m.stats[0] += here - seen;
        ull* dst = p.words->cl_sum[b];
        for (int i = 0; i < 2 + kClusterLayerStats * L; ++i) dst[i] = m.stats[i];
      }
      if (ASYNC) {
        // this tick's exchanges: the input, every hidden layer's words, (block 0) the head's partials
        const int par = int(s & 1);
        mbar_expect_tx(m.bar + 0 * 2 + par, unsigned(4 * input_words_async(p.I)));
        for (int l = 1; l < L; ++l) mbar_expect_tx(m.bar + l * 2 + par, unsigned(4 * n_units));
        if (b == 0) mbar_expect_tx(m.bar + L * 2 + par, unsigned(4 * nc * gpb * O));
      }
      __threadfence();
      atomicAdd(&p.words->prefetched, 1ull);
    }
    // (2) the input: block 0 polls, then its 16 warps store it into every block as tagged words
    if (b == 0) {
      if (warp == 0) {
        if (lane == 0) {
          // `ready` once every block has its slice of this round (the host sends the tick after it)
          const unsigned long long want = (s + 1) * (unsigned long long)nc;
          while (dev::ld_acquire_u64(&p.words->prefetched) < want && !f->quit) {
            if ((++checks & 15u) == 0) {
              const unsigned reason = watch.poll(p.mb);
              if (reason) f->quit = reason;
            }
          }
          if (!f->quit) dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(s), unsigned(s), kServing, 0));
        }
        __syncwarp();
      }
      const int pw = (p.mb.n_in + 31) / 32;
      bool ok = true;
      if (warp < pw) ok = !f->quit && poll_input(p, m, s, seq, watch, checks, f);
      if (warp == 0) {
        t_seen = clock64();
        if (lane == 0) {
          m.stats[kClusterStatSlots] = dev::globaltimer_ns();  // the blocks' input arrivals compared on one clock
          f->decision = ok ? 0u : 1u;
          if (!ok) {
            // every block (and the precompute) leaves: each block's quit word, then the global one
            const unsigned reason = f->quit ? f->quit : unsigned(kStopped);
            f->quit = reason;
            for (int r = 1; r < nc; ++r)
              dev::st_u32_remote(dev::peer_smem(dev::smem_u32(const_cast<unsigned*>(&f->quit)), r), reason);
            dev::st_volatile_u32(&p.words->quit, reason);
            __threadfence();
          }
        }
        dev::stall_if(p, s);  // test hook (stall_tick >= 0 only): a late answer
      }
      dev::named_barrier(nct);
      if (!f->decision && ASYNC) {
        // 16-byte stores of four words each (hi | lo halves; zeros past I) into every block, block 0 too
        const int I = p.I, v4s = input_words_async(I) / 4, total = v4s * nc;
        const uint32_t bar = bar_local + 8u * unsigned(0 * 2 + int(s & 1));
        for (int i = tid; i < total; i += nct) {
          const int r = i / v4s, c = i % v4s, k = 4 * c;
          const uint4 v = make_uint4(k < I ? dev::hi_lo<BF16>(m.x32[k]) : 0u, k + 1 < I ? dev::hi_lo<BF16>(m.x32[k + 1]) : 0u,
                                     k + 2 < I ? dev::hi_lo<BF16>(m.x32[k + 2]) : 0u,
                                     k + 3 < I ? dev::hi_lo<BF16>(m.x32[k + 3]) : 0u);
          st_async_v4(dev::peer_smem(xw_local + 16u * unsigned(c), unsigned(r)), v, dev::peer_smem(bar, unsigned(r)));
        }
      } else if (!f->decision) {
        // every input element as a word, into every block (block 0's own through the cluster window too)
        const int I = p.I, total = I * nc;
        for (int i = tid; i < total; i += nct) {
          const int r = i / I, k = i % I;
          dev::st_word(dev::peer_smem(tx_local + 8u * unsigned(k), unsigned(r)), dev::tagged(seq, dev::hi_lo<BF16>(m.x32[k])));
        }
      }
      t_in = clock64();
    }
    // (3) layers: every warp spins only on the words of its own tiles. The block's timing: warp 0 times
    // its whole chain, group 0's last k-share warp its wait and its tiles (ClusterLayerStat).
    long long t_prev = clock64();
    for (int l = 0; l < L; ++l) {
      const ull* in = l == 0 ? m.tx : m.th + size_t(l - 1) * cl.h_words;
      const int valid = l == 0 ? p.I : n_units;
      const int kt = p.kt[l], per = cl.tiles[l];
      const int k0 = ks * per, n = max(0, min(per, kt - k0));
      const int valid_plain = l == 0 ? input_words_async(p.I) : n_units;
      const uint32_t* in_plain = l == 0 ? m.xw : m.hx + size_t(l - 1) * cl.h_words;
      float y[4];
      long long t_data = 0;
      if (ASYNC && n > 0) mbar_wait(m.bar + l * 2 + int(s & 1), s, f);
      layer_gates<BF16, RS, ASYNC>(w, m.spill + size_t(warp) * (cl.slots > RS ? cl.slots - RS : 0) * 64, cl.first[l], n,
                                   k0, in, in_plain, ASYNC ? valid_plain : valid, seq, f, y, t_data);
      const long long t_gates = clock64();
      if (l == 0 && warp == 0 && lane == 0) m.stats[kClusterStatSlots + 1] = dev::globaltimer_ns();  // the input is here
      // the group's partial sums meet: lane (g, t) keeps gate t. Two buffers, by layer parity: a k-share
      // warp may have its next layer's words (from other groups) while the cell warp still reads these.
      float pre;
      float* red = m.red + (l & 1) * ksplit * gpb * 32;
      if (ksplit > 1) {
        red[(ks * gpb + q) * 32 + lane] = t == 0 ? y[0] : t == 1 ? y[1] : t == 2 ? y[2] : y[3];
      }
      const float Pt = cell_warp ? m.sP[(l * 4 + t) * Ub + ul] : 0.f;
      const float cprev = cell_warp ? m.sc[l * Ub + ul] : 0.f;
      if (ksplit > 1) group_barrier(q, ksplit * 32);
      const long long t_met = clock64();
      ull* st = m.stats + 2 + kClusterLayerStats * l;
      if (!cell_warp) {
        if (lane == 0 && q == 0 && ks == ksplit - 1) {
          if (l > 0) st[kClShareWait] += (unsigned long long)(t_data - t_prev);
          st[kClShareTiles] += (unsigned long long)(t_gates - t_data);
          t_prev = t_met;
        }
        continue;
      }
      if (ksplit > 1) {
        pre = 0.f;
        for (int k = 0; k < ksplit; ++k) pre += red[(k * gpb + q) * 32 + lane];
      } else {
        pre = t == 0 ? y[0] : t == 1 ? y[1] : t == 2 ? y[2] : y[3];
      }
      pre += Pt;
      // the cell: lane t computes gate t's activation (tanh = 2 sigmoid(2x) - 1 for g), four shuffles
      const float a = dev::sigmoid_ftz(t == 2 ? 2.f * pre : pre);
      const float act = t == 2 ? 2.f * a - 1.f : a;
      const int base = lane & ~3;
      const float ai = __shfl_sync(0xffffffffu, act, base), af = __shfl_sync(0xffffffffu, act, base + 1),
                  ag = __shfl_sync(0xffffffffu, act, base + 2), ao = __shfl_sync(0xffffffffu, act, base + 3);
      const float c = af * cprev + ai * ag;
      const float h = ao * dev::tanh_ftz(c);
      const long long t_cell = clock64();
      if (ASYNC && l + 1 < L) {
        // the group's 8 words (lanes 4g) as two 16-byte stores per block: lane i -> block i / 2, half i % 2
        const uint32_t word = dev::hi_lo<BF16>(h);
        const int half = lane & 1, r = lane >> 1;
        uint4 v;
        v.x = __shfl_sync(0xffffffffu, word, 16 * half);
        v.y = __shfl_sync(0xffffffffu, word, 16 * half + 4);
        v.z = __shfl_sync(0xffffffffu, word, 16 * half + 8);
        v.w = __shfl_sync(0xffffffffu, word, 16 * half + 12);
        if (r < nc && !f->quit) {
          const uint32_t at = hx_local + 4u * unsigned(size_t(l) * cl.h_words + u0 + q * kUnitsPerGroup) + 16u * unsigned(half);
          st_async_v4(dev::peer_smem(at, unsigned(r)), v,
                      dev::peer_smem(bar_local + 8u * unsigned((l + 1) * 2 + int(s & 1)), unsigned(r)));
        }
      } else if (l + 1 < L) {
        // unit (b, q, g)'s h into every block's buffer of layer l+1: lane t stores to blocks t, t+4, ...
        const ull word = dev::tagged(seq, dev::hi_lo<BF16>(h));
        const uint32_t at = th_local + 8u * unsigned(size_t(l) * cl.h_words + u0 + ul);
        for (int r = t; r < nc; r += 4) dev::st_word(dev::peer_smem(at, unsigned(r)), word);
      } else {
        // head partial sums over the group's 8 units: lane t for outputs t, t+4, ... -> block 0
        const int col = b * gpb + q;
#pragma unroll
        for (int i = 0; i < kMaxOutputs / 4; ++i) {
          const int o = t + 4 * i;
          float v = o < O ? m.hw[o * Ub + ul] * h : 0.f;
          v += __shfl_xor_sync(0xffffffffu, v, 4);
          v += __shfl_xor_sync(0xffffffffu, v, 8);
          v += __shfl_xor_sync(0xffffffffu, v, 16);
          if (o < O && g == 0) {
            if (ASYNC) {
              if (!f->quit)
                st_async_b32(dev::peer_smem(headf_local + 4u * unsigned(col * O + o), 0u), __float_as_uint(v),
                             dev::peer_smem(bar_local + 8u * unsigned(L * 2 + int(s & 1)), 0u));
            } else {
              dev::st_word(dev::peer_smem(head_local + 8u * unsigned(col * O + o), 0u), dev::tagged(seq, __float_as_uint(v)));
            }
          }
          if (4 * (i + 1) >= O) break;
        }
      }
      // the block's timing, warp 0 (off the chain's data path: after its sends)
      if (warp == 0 && lane == 0) {
        const long long now = clock64();
        if (l == 0) t_l0 = now;
        if (l > 0) st[kClWait] += (unsigned long long)(t_data - t_prev);
        st[kClTiles] += (unsigned long long)(t_gates - t_data);
        st[kClMeet] += (unsigned long long)(t_met - t_gates);
        st[kClCell] += (unsigned long long)(t_cell - t_met);
        st[kClSend] += (unsigned long long)(now - t_cell);
        t_prev = now;
      }
    }
    t_layers = clock64();
    // (4) block 0: the head's partial sums, the answer
    if (b == 0 && warp == 0) {
      const int n = nc * gpb;
      float z = 0.f;
      if (ASYNC) {
        mbar_wait(m.bar + L * 2 + int(s & 1), s, f);
        if (lane < O)
          for (int j = 0; j < n; ++j) z += m.headf[j * O + lane];
        if (O == 1) z = __shfl_sync(0xffffffffu, z, 0);
        z += hb;
      } else if (O == 1) {
        // one output: the lanes share the n partials (lane j: j, j + 32, ...), then a warp sum
        for (;;) {
          bool ok = true;
          z = 0.f;
          for (int j = lane; j < n; j += 32) {
            const ull wd = dev::ld_word(m.thead + j);
            ok &= dev::reached(dev::tag_of(wd), seq);
            z += __uint_as_float(dev::value_of(wd));
          }
          if (__all_sync(0xffffffffu, ok)) break;
          if (f->quit) break;
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) z += __shfl_xor_sync(0xffffffffu, z, d);
        z += hb;
      } else {
        for (;;) {
          bool ok = true;
          z = 0.f;
          if (lane < O)
            for (int j = 0; j < n; ++j) {
              const ull wd = dev::ld_word(m.thead + j * O + lane);
              ok &= dev::reached(dev::tag_of(wd), seq);
              z += __uint_as_float(dev::value_of(wd));
            }
          if (__all_sync(0xffffffffu, ok)) break;
          if (f->quit) break;
        }
        z += hb;
      }
      const float za = __shfl_sync(0xffffffffu, z, O == 1 ? 0 : (2 * lane) & 31),
                  zb = __shfl_sync(0xffffffffu, z, O == 1 ? 0 : (2 * lane + 1) & 31);
      t_head = clock64();
      if (!f->quit) dev::store_output_chunk(p.mb, seq, O, za, zb);
      if (lane == 0) {
        dev::record_tick_timing(p.words, {t_seen, t_in, t_l0, t_layers, t_head, clock64()});
        m.stats[1] += 1;
      }
      // x_t to the precompute (its previous round has published, so it no longer reads xbuf); after the
      // answer, so that its L2 traffic never meets a tick's exchange
      for (int i = lane; i < p.I; i += 32) __stcg(p.xbuf + i, m.x32[i]);
      __threadfence();
      __syncwarp();
      if (lane == 0) {
        dev::st_release_u64(&p.words->x_seq, s + 1);
        f->answered = s + 1;
      }
    } else if (warp == 0 && lane == 0) {
      m.stats[1] += 1;
    }
  }
  __syncthreads();
  if (b == 0 && tid == 0) {
    __threadfence_system();
    const unsigned long long n = f->answered;
    dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(n), unsigned(n), f->quit, 0));
  }
  // No block leaves while a peer may still store into its shared memory: every store a block made is
  // ordered before its arrival here (release), and nobody stores after it.
  dev::cluster_arrive_release();
  dev::cluster_wait_acquire();
}

template <bool BF16, int RS, bool ASYNC>
__global__ void __launch_bounds__(ClusterPolicy::warps * 32, 1) lstm_cluster(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  const int b = int(blockIdx.x);
  if (b < p.nc) {
    cluster_critical<BF16, RS, ASYNC>(p, smem, b);
  } else {
    dev::precompute_block(p, smem, b - p.nc);
  }
}

template <bool BF16, bool ASYNC, size_t N = 0>
const void* cluster_kernel_for(int regs) {
  if constexpr (N < std::size(ClusterPolicy::reg_slots)) {
    constexpr int rs = ClusterPolicy::reg_slots[N];
    if (regs == rs) return (const void*)&lstm_cluster<BF16, rs, ASYNC>;
    return cluster_kernel_for<BF16, ASYNC, N + 1>(regs);
  }
  return nullptr;
}

template <size_t N = 0>
cudaError_t preload_cluster_slots(cudaFuncAttributes& a) {
  if constexpr (N < std::size(ClusterPolicy::reg_slots)) {
    constexpr int rs = ClusterPolicy::reg_slots[N];
    for (const void* fn : {(const void*)&lstm_cluster<false, rs, false>, (const void*)&lstm_cluster<true, rs, false>,
                           (const void*)&lstm_cluster<false, rs, true>, (const void*)&lstm_cluster<true, rs, true>})
      if (const cudaError_t e = cudaFuncGetAttributes(&a, fn); e != cudaSuccess) return e;
    return preload_cluster_slots<N + 1>(a);
  }
  return cudaSuccess;
}

cudaError_t preload_cluster_kernels_here() {
  cudaFuncAttributes a{};
  return preload_cluster_slots(a);
}

const void* cluster_kernel(const LstmParams& p) {
  if (p.cl.async_exchange)
    return p.bf16 ? cluster_kernel_for<true, true>(p.cl.regs) : cluster_kernel_for<false, true>(p.cl.regs);
  return p.bf16 ? cluster_kernel_for<true, false>(p.cl.regs) : cluster_kernel_for<false, false>(p.cl.regs);
}

// The launch configuration of p (attrs must outlive cfg's use) and the blocks that can be co-resident
// where `stream`'s work runs (clusters stay inside a GPC: fewer may fit than SMs suggest).
cudaError_t cluster_config(const LstmParams& p, cudaStream_t stream, const void** fn, cudaLaunchConfig_t& cfg,
                           cudaLaunchAttribute (&attrs)[2], long long* fits) {
  *fn = cluster_kernel(p);
  if (!*fn) return cudaErrorInvalidValue;
  cudaError_t e = cudaFuncSetAttribute(*fn, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
  if (e != cudaSuccess) return e;
  if (p.nc > 8 && (e = cudaFuncSetAttribute(*fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) != cudaSuccess)
    return e;
  cooperative_cluster_config(unsigned(p.grid()), unsigned(p.threads()), size_t(p.smem_bytes), p.nc, stream, cfg, attrs);
  int clusters = 0;
  if ((e = cudaOccupancyMaxActiveClusters(&clusters, *fn, &cfg)) != cudaSuccess) return e;
  *fits = (long long)clusters * p.nc;
  return cudaSuccess;
}

}  // namespace

cudaError_t preload_cluster_kernels() { return preload_cluster_kernels_here(); }

int max_lstm_cluster_size() {
  const void* fn = cluster_kernel_for<false, false>(ClusterPolicy::reg_slots[0]);
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return 8;  // the portable size every cluster-capable device supports
  }
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess) {
    (void)cudaGetLastError();
    return 8;
  }
  // One block per SM (the kernel's shared memory), as many blocks as the largest cluster asked about.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(32);
  cfg.blockDim = dim3(ClusterPolicy::warps * 32);
  cfg.dynamicSmemBytes = size_t(optin);
  int n = 0;
  if (cudaOccupancyMaxPotentialClusterSize(&n, fn, &cfg) != cudaSuccess || n < 1) {
    (void)cudaGetLastError();
    return 8;
  }
  return std::min(n, ClusterPolicy::max_blocks);
}

cudaError_t cluster_max_coresident(const LstmParams& p, cudaStream_t stream, long long* fits) {
  const void* fn = nullptr;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attrs[2] = {};
  return cluster_config(p, stream, &fn, cfg, attrs, fits);
}

cudaError_t launch_lstm_cluster(const LstmParams& p, cudaStream_t stream, long long* max_coresident) {
  const void* fn = nullptr;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attrs[2] = {};
  long long fits = 0;
  const cudaError_t e = cluster_config(p, stream, &fn, cfg, attrs, &fits);
  if (e != cudaSuccess) return e;
  if (max_coresident) *max_coresident = fits;
  if (fits < p.grid()) return cudaErrorCooperativeLaunchTooLarge;
  LstmParams copy = p;
  void* args[] = {&copy};
  return cudaLaunchKernelExC(&cfg, fn, args);
}

}  // namespace hotpath::cuda
