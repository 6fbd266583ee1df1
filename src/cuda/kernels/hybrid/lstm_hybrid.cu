#include "cuda/kernels/hybrid/lstm_hybrid.hpp"

#include <cuda_fp16.h>

#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/common/precompute.cuh"
#include "cuda/kernels/common/tagged_words.cuh"

namespace hotpath::cuda {
namespace {

// One tick's input chunks at `slot` (a ring slot in host memory, or the mirror in GPU memory) polled by one
// warp, 32 at a time (lane <-> chunk), for sequence word `seq`: each chunk, as it arrives, stored as it came at
// copy[c] (where copy is given), and sink(k, x) for each of its input floats. False (in every lane) when
// leave_now() said to leave.
template <class Sink, class Leave>
__device__ bool warp_take_input(const LstmParams& p, const Chunk* slot, unsigned seq, Chunk* copy, Sink&& sink,
                                Leave&& leave_now) {
  const int lane = int(threadIdx.x & 31);
  for (int c0 = 0; c0 < p.mb.n_in; c0 += 32) {
    MailboxView part = p.mb;
    part.n_in = min(32, p.mb.n_in - c0);
    const int c = c0 + lane;
    const bool took = dev::warp_poll_tick(
        part, slot + c0, seq,
        [&](uint4 v) {
          if (copy) dev::st_volatile_v4(copy + c, v);
          const float xs[3] = {__uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
          for (int i = 0; i < 3; ++i) {
            const int k = p.mb.in_fpc * c + i;
            if (i < p.mb.in_fpc && k < p.I) sink(k, xs[i]);
          }
        },
        leave_now);
    if (!took) return false;
  }
  return true;
}

// The feeder (warp 0 of the last block): tick s's input chunks -> p.xbuf (and, as they came, into the mirror
// where there is one: LstmParams::hy_xmirror), then x_seq = s + 1. It hands tick s
// on only once round s - 1 is exported (every precompute block has read x_{s-1} from xbuf by then, and its
// sequence store to the host is out before any of round s's). Leaves on
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
  bool leaving = false;
  // started once tick 0's state (every window fresh) is out
  while (dev::ld_acquire_u64(&p.words->exported) < 1ull)
    if ((leaving = leave_now())) break;
  if (!leaving && lane == 0) dev::st_volatile_v4(p.mb.status, make_uint4(wire_seq(0), 0u, kServing, 0u));
  for (long long s = 0; !leaving; ++s) {
    while (dev::ld_acquire_u64(&p.words->exported) < (unsigned long long)(s + 1))
      if ((leaving = leave_now())) break;
    if (leaving) break;
    const unsigned seq = wire_seq(s);
    const Chunk* slot = p.mb.in + (s % kInputRing) * p.mb.in_stride;
    Chunk* mirror = p.hy_xmirror ? p.hy_xmirror + (s & 1) * p.mb.n_in : nullptr;
    leaving = !warp_take_input(p, slot, seq, mirror, [&](int k, float x) { __stcg(p.xbuf + k, x); }, leave_now);
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

constexpr int kStageLoads = 8;  // the mma block's staging: loads of a row in flight per lane

// A block leaving while its cluster shares the staging (LstmParams::hy_cluster): until it exits, a peer may still
// store into its shared memory, so it first takes part in the cluster barriers a peer can still reach before
// that peer's own leave: a peer that passed the grid barrier this block left at stages at most twice more (the
// last pass's completing tile and, after the publish, the rest) before its next wait sees the quit, so two
// barriers cover every store a peer can still make; the third is slack. A barrier counts only blocks that have
// not exited, so surplus ones pass.
__device__ void leave_cluster(const LstmParams& p) {
  if (p.hy_cluster > 1)
    for (int i = 0; i < 3; ++i) {
      dev::cluster_arrive_release();
      dev::cluster_wait_acquire();
    }
}

// Round t's input from the feeder's copy of the chunks (LstmParams::hy_xmirror): warp 0 polls them, 32 at a
// time, for tick t's sequence word and writes x_t into sx; false (in every thread) when the kernel is leaving.
// The feeder stores a tick's chunks only once the round before is exported, so a parity's chunks are never
// overwritten under a block still reading them.
__device__ bool mirror_round_input(const LstmParams& p, long long t, float* sx, volatile unsigned* quit) {
  const int lane = int(threadIdx.x & 31);
  if (threadIdx.x < 32) {
    const unsigned seq = wire_seq(t);
    const Chunk* slot = p.hy_xmirror + (t & 1) * p.mb.n_in;
    auto leave_now = [&]() {  // whole warp
      const unsigned r = lane == 0 ? dev::ld_volatile_u32(&p.words->quit) : 0u;
      return __shfl_sync(0xffffffffu, r, 0) != 0;
    };
    const bool leaving = !warp_take_input(p, slot, seq, nullptr, [&](int k, float x) { sx[k] = x; }, leave_now);
    if (leaving && lane == 0) *quit = 1;
  }
  __syncthreads();
  return *quit == 0;
}

// A warp's job in a layer pass's products: one unit tile of a matrix (A: its fragments, [kt][hi, lo][32 lanes]
// uint4, FP16 [kt][hi][32 lanes]) against n (<= NT) n8 tiles of staged windows from nt0 on, over all kt k16 steps, into d[0 .. n).
// FP16: one mma a tile, the weights' hi halves and the staged fp16 h (LstmParams::hy_fp16), the odd k steps
// into a second accumulator; else hi.hi, and hi.lo + lo.hi into a second accumulator. Either way two
// independent MMA chains a tile. The A fragments are loaded once a k step for all n tiles.
template <int NT, bool FP16>
__device__ __forceinline__ void mma_job(const uint4* A, const uint32_t* sh, int kpad, int kt, int nt0, int n, float (&d)[4][4]) {
  const int lane = int(threadIdx.x & 31), gid = lane >> 2, tig = lane & 3;
  float x[4][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[j][e] = 0.f, x[j][e] = 0.f;
  // window nt 8 + gid's row: FP16, the words of halves k = 16 k16 + 2 tig, +1 (b0) and +8, +9 (b1); else its
  // hi_lo words k = 16 k16 + 2 tig, +1 and +8, +9, their hi halves, then their lo
  const uint32_t* bw = sh + (nt0 * 8 + gid) * kpad + (FP16 ? tig : 2 * tig);
  if constexpr (FP16) {
    auto step = [&](int k, float (&acc)[4][4]) {
      const uint4 ahi = A[k * 32];
#pragma unroll
      for (int j = 0; j < NT; ++j)
        if (j < n) {
          const uint32_t* r = bw + j * 8 * kpad + 8 * k;
          dev::mma16816<false>(acc[j], ahi, r[0], r[4]);
        }
    };
    for (int k = 0; k < kt; k += 2) {
      step(k, d);
      if (k + 1 < kt) step(k + 1, x);
    }
  } else {
#pragma unroll 2
    for (int k = 0; k < kt; ++k) {
      const uint4 ahi = A[(2 * k) * 32];
      const uint4 alo = A[(2 * k + 1) * 32];
#pragma unroll
      for (int j = 0; j < NT; ++j)
        if (j < n) {
          const uint32_t* r = bw + j * 8 * kpad + 16 * k;
          const uint2 w0 = *reinterpret_cast<const uint2*>(r), w1 = *reinterpret_cast<const uint2*>(r + 8);
          const uint32_t h0 = dev::b_pair(w0.x, w0.y, 0x5410u), h1 = dev::b_pair(w1.x, w1.y, 0x5410u);
          const uint32_t l0 = dev::b_pair(w0.x, w0.y, 0x7632u), l1 = dev::b_pair(w1.x, w1.y, 0x7632u);
          dev::mma16816<false>(d[j], ahi, h0, h1);
          dev::mma16816<false>(x[j], ahi, l0, l1);
          dev::mma16816<false>(x[j], alo, h0, h1);
        }
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[j][e] += x[j][e];
}

// The precompute's tensor-core form (LstmParams::hy_*), block b: the block's units of every open window, as the
// shared fp32 form (common/precompute.cuh) computes them, but each layer's products of all open windows' h
// (W_ih,l for l > 0, W_hh,l-1) as m16n8k16 MMAs: a warp a (matrix, unit tile, n8 tile of windows) job over all
// of H, both operands as fp16 hi + lo halves (hi.hi + hi.lo + lo.hi: the dropped lo.lo term is ~2^-22 of the
// product), fp32 sums. W_ih,0 x_t, one vector for every window, stays an fp32 product.
__device__ void mma_precompute_block(const LstmParams& p, char* smem, int b) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int H = p.H, L = p.L, U = p.U, I = p.I, nslots = p.nslots, G = U >> 2, kt = p.hy_kt, kpad = p.hy_kpad;
  const int u0 = b * U, nu = min(U, H - u0);
  float* sw = dev::smem_at<float>(smem, p.s_pw);     // W_ih,0 rows [4U][I], then the biases [L][4U]
  float* sQ = dev::smem_at<float>(smem, p.s_Q);      // [L][nslots][4U]: W_hh h + b of each open window
  float* scs = dev::smem_at<float>(smem, p.s_pc);    // [L][nslots][U]
  float* sx = dev::smem_at<float>(smem, p.s_px);
  float* su0 = dev::smem_at<float>(smem, p.s_g0);    // W_ih,0 x_t [4U]
  volatile unsigned* quit = dev::smem_at<volatile unsigned>(smem, p.s_pflags);
  uint4* sf = dev::smem_at<uint4>(smem, p.s_hyf);
  uint32_t* sh = dev::smem_at<uint32_t>(smem, p.s_hyb);  // the open windows' h of the layer below, [ncols][kpad] words
  uint64_t* sbar = dev::smem_at<uint64_t>(smem, p.s_hymb);  // the bulk copies' mbarrier (hy_stage_tma)
  float* sz = dev::smem_at<float>(smem, p.s_hyz);    // W_ih,l h of each open window [ncols][4U]
  auto Q = [&](int l, int slot) { return sQ + (l * nslots + slot) * 4 * U; };
  auto C = [&](int l, int slot) { return scs + (l * nslots + slot) * U; };
  // h of (layer, window slot) as words (LstmParams::h_state: hi_lo words, or two fp16 a word), hy_row_words a
  // row: made once by the block that computes it, copied as they are by every block that stages it
  const int RW = p.hy_row_words;
  auto hstate = [&](int l, int slot) { return reinterpret_cast<uint32_t*>(p.h_state) + (size_t(l) * nslots + slot) * RW; };
  auto store_h = [&](int l, int slot, int u, float h) {
    if (p.hy_fp16)
      __stcg(reinterpret_cast<unsigned short*>(hstate(l, slot)) + u0 + u, __half_as_ushort(__float2half_rn(h)));
    else
      __stcg(hstate(l, slot) + u0 + u, dev::hi_lo<false>(h));
  };

  {
    const float* src = p.pre_w + size_t(b) * p.pre_block_floats;
    for (int i = tid; i < p.pre_block_floats; i += nthreads) sw[i] = __ldg(src + i);
    const uint4* fsrc = static_cast<const uint4*>(p.hy_frags) + size_t(b) * p.hy_block_frags;
    for (int i = tid; i < p.hy_block_frags; i += nthreads) sf[i] = __ldg(fsrc + i);
    // the staged h starts at zero: words past H (the last k16 tile's padding) must stay zero
    for (int i = tid; i < p.hy_ncols * kpad; i += nthreads) sh[i] = 0u;
  }
  if (tid == 0) {
    *quit = 0;
    if (p.hy_stage_tma) {
      dev::mbar_init(sbar, 1);  // one arrival a phase: warp 0's expect_tx
      dev::fence_mbar_init();
    }
  }
  __syncthreads();
  // the shared staging (LstmParams::hy_cluster): every block of the cluster running, its staged h zeroed, before
  // any stores into it
  const int cs = p.hy_cluster;
  const unsigned crank = cs > 1 ? dev::cluster_rank() : 0u;
  if (cs > 1) {
    dev::cluster_arrive_release();
    dev::cluster_wait_acquire();
  }
  for (int slot = 0; slot < nslots; ++slot) dev::fresh_window(p, sQ, scs, sw, slot);
  __syncthreads();
  auto publish = [&](int slot, bool fresh, long long tick) {
    dev::export_state(
        p, u0, nu, tick, [&](int l, int r) { return fresh ? sw[p.pre_b[l] + r] : Q(l, slot)[r]; },
        [&](int l, int u) { return fresh ? 0.f : C(l, slot)[u]; });
  };
  publish(0, true, 0);  // tick 0: every window starts from zero

  unsigned long long epoch = 0;
  unsigned tma_parity = 0;  // the phase of sbar the next bulk-copy stage waits for
  for (long long t = 0;; ++t) {
    if (p.hy_xmirror) {
      if (!mirror_round_input(p, t, sx, quit)) return leave_cluster(p);
    } else {
      if (!dev::wait_round_input(p, t, quit)) return leave_cluster(p);
    }
    const long long t_start = clock64();
    long long t_barrier = 0;
    auto barrier = [&]() {
      const long long t0 = clock64();
      const bool ok = dev::pre_barrier(p, epoch, quit);
      t_barrier += clock64() - t0;
      return ok;
    };
    if (!p.hy_xmirror)
      for (int i = tid; i < I; i += nthreads) sx[i] = __ldcg(p.xbuf + i);
    const dev::RoundWindows wins = dev::round_windows(p, t);
    const int nw = wins.nw;
    if (wins.fresh >= 0) dev::fresh_window(p, sQ, scs, sw, wins.fresh);
    auto slot_of = [&](int i) { return wins.slot(i); };
    __syncthreads();

    // layer 0: W_ih,0 x_t, shared by every window (a warp a row, fp32), then the cells
    for (int r = warp; r < 4 * nu; r += nwarps) {
      float v = 0.f;
      for (int k = lane; k < I; k += 32) v = fmaf(sw[r * I + k], sx[k], v);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) su0[r] = v;
    }
    __syncthreads();
    for (int i = tid; i < nw * nu; i += nthreads) {
      const int wi = i / nu, u = i % nu, slot = slot_of(wi);
      const float* q = Q(0, slot) + 4 * u;
      float c = C(0, slot)[u];
      const float h = dev::lstm_cell(su0[4 * u] + q[0], su0[4 * u + 1] + q[1], su0[4 * u + 2] + q[2], su0[4 * u + 3] + q[3], c);
      C(0, slot)[u] = c;
      store_h(0, slot, u, h);
    }
    const long long t_layer0 = clock64();
    if (nw > 0 && !barrier()) return leave_cluster(p);

    // layers 1..L: the layer below's h of every open window staged (hi_lo words), then its products
    long long t_stage = 0, t_mma = 0, t_cells = 0;  // the passes' parts (block 0 records them)
    // Windows [lo, hi)'s h of layer l - 1 into the staged words: a warp hy_stage_rows rows at a time,
    // kStageLoads loads of each in flight before any is used (the h comes from L2, every block's share of it,
    // so each wait is an L2 latency), then the block's barrier.
    // Each row's kStageLoads words from k0 on (a lane's, 32 apart), every load issued before any is used.
    auto load_rows = [&](const uint32_t* const (&src)[kMaxHybridStageRows], int k0,
                         uint32_t (&v)[kMaxHybridStageRows][kStageLoads]) {
#pragma unroll
      for (int r = 0; r < kMaxHybridStageRows; ++r)
#pragma unroll
        for (int j = 0; j < kStageLoads; ++j) {
          const int k = k0 + 32 * j;
          v[r][j] = src[r] && k < RW ? __ldcg(src[r] + k) : 0u;
        }
    };
    auto stage_own = [&](int l, int lo, int hi) {
      const int R = p.hy_stage_rows;
      for (int w0 = lo + warp; w0 < hi; w0 += R * nwarps) {
        const uint32_t* src[kMaxHybridStageRows];
#pragma unroll
        for (int r = 0; r < kMaxHybridStageRows; ++r) {
          const int w = w0 + r * nwarps;
          src[r] = r < R && w < hi ? hstate(l - 1, slot_of(w)) : nullptr;
        }
        for (int k0 = lane; k0 < RW; k0 += kStageLoads * 32) {
          uint32_t v[kMaxHybridStageRows][kStageLoads];
          load_rows(src, k0, v);
#pragma unroll
          for (int r = 0; r < kMaxHybridStageRows; ++r)
#pragma unroll
            for (int j = 0; j < kStageLoads; ++j) {
              const int k = k0 + 32 * j;
              if (src[r] && k < RW) sh[(w0 + r * nwarps) * kpad + k] = v[r][j];
            }
        }
      }
      __syncthreads();
    };
    // The same by the copy engine (hy_stage_tma): warp 0 issues one bulk copy a row (RW words, all of them in
    // flight at once), and every thread waits for the mbarrier's phase that counts their bytes. Before the
    // copies, the proxy fence: the rows' h (other blocks' stores, seen through the grid barrier) and this
    // block's reads of the staged words before (the products, behind a bar.sync) come first. Words past H
    // are never written: they stay zero.
    auto stage_tma = [&](int l, int lo, int hi) {
      if (warp == 0) {
        dev::fence_proxy_async();
        if (lane == 0) dev::mbar_expect_tx(sbar, unsigned(hi - lo) * unsigned(RW) * 4u);
        __syncwarp();
        for (int w = lo + lane; w < hi; w += 32)
          dev::bulk_copy_to_smem(dev::smem_u32(sh + w * kpad), hstate(l - 1, slot_of(w)), unsigned(RW) * 4u, sbar);
      }
      while (!dev::mbar_try_wait(sbar, tma_parity)) {
      }
      tma_parity ^= 1u;
    };
    // The same shared over the cluster (cs > 1): the block reads only rows lo + crank, lo + crank + cs, ... and
    // stores their words into every block of its cluster, then the cluster's barrier: each row leaves L2 once a
    // cluster, not once a block. No peer still reads the rows it overwrites: a grid barrier lies between each
    // stage and the products before it, but for the last pass's two parts: the deferred stage writes rows 8..,
    // while a peer's products of the completing tile may still read rows 0..7.
    auto stage_shared = [&](int l, int lo, int hi) {
      const int R = p.hy_stage_rows;
      const int first = lo + int(crank), mine = hi > first ? (hi - first + cs - 1) / cs : 0;
      const uint32_t base = dev::smem_u32(sh);
      for (int i0 = warp; i0 < mine; i0 += R * nwarps) {
        const uint32_t* src[kMaxHybridStageRows];
        int row[kMaxHybridStageRows];
#pragma unroll
        for (int r = 0; r < kMaxHybridStageRows; ++r) {
          const int i = i0 + r * nwarps;
          row[r] = first + cs * i;
          src[r] = r < R && i < mine ? hstate(l - 1, slot_of(row[r])) : nullptr;
        }
        for (int k0 = lane; k0 < RW; k0 += kStageLoads * 32) {
          uint32_t v[kMaxHybridStageRows][kStageLoads];
          load_rows(src, k0, v);
#pragma unroll
          for (int r = 0; r < kMaxHybridStageRows; ++r)
#pragma unroll
            for (int j = 0; j < kStageLoads; ++j) {
              const int k = k0 + 32 * j;
              if (!src[r] || k >= RW) continue;
              const uint32_t off = uint32_t(row[r] * kpad + k) * uint32_t(sizeof(uint32_t));
              for (int d = 0; d < cs; ++d) dev::st_u32_remote(dev::peer_smem(base + off, unsigned(d)), v[r][j]);
            }
        }
      }
      __syncwarp();  // the lanes' row loops may end apart: the aligned arrive wants the warp whole
      dev::cluster_arrive_release();
      dev::cluster_wait_acquire();
    };
    auto stage = [&](int l, int lo, int hi) {
      const long long t0 = clock64();
      if (cs > 1)
        stage_shared(l, lo, hi);
      else if (p.hy_stage_tma)
        stage_tma(l, lo, hi);
      else
        stage_own(l, lo, hi);
      t_stage += clock64() - t0;
    };
    // The products of the staged windows' n8 tiles [nt_lo, nt_hi): W_hh,l-1 (the next round's Q of layer
    // l - 1) and, with_ih, W_ih,l (this round's layer l input term, into sz); then the block's barrier. A warp's
    // job (mma_job) takes one n8 tile (hi + lo products: the form measured), or with plain fp16 products 1, 2 or
    // 4: the fewest that leave no warp more than one job, else 4.
    auto products = [&](int l, int nt_lo, int nt_hi, bool with_ih) {
      const long long t0 = clock64();
      const int ntl = nt_hi - nt_lo, mats = with_ih ? 2 : 1;
      int NT = 1;
      while (p.hy_fp16 && NT < 4 && mats * G * ((ntl + NT - 1) / NT) > nwarps) NT *= 2;
      const int groups = (ntl + NT - 1) / NT, jobs_per = G * groups, jobs = mats * jobs_per;
      for (int job = warp; job < jobs; job += nwarps) {
        const bool ih = job >= jobs_per;
        const int q = (job % jobs_per) / groups, nt0 = nt_lo + (job % groups) * NT, n = min(NT, nt_hi - nt0);
        const uint4* A = sf + (ih ? p.hy_ih_off[l] : p.hy_hh_off[l - 1]) + q * kt * (p.hy_fp16 ? 1 : 2) * 32 + lane;
        float d[4][4];
        if (!p.hy_fp16) mma_job<1, false>(A, sh, kpad, kt, nt0, n, d);  // NT is 1 there
        else if (NT == 1) mma_job<1, true>(A, sh, kpad, kt, nt0, n, d);
        else if (NT == 2) mma_job<2, true>(A, sh, kpad, kt, nt0, n, d);
        else mma_job<4, true>(A, sh, kpad, kt, nt0, n, d);
        // d[j]: rows gid (gate gid >> 2) and gid + 8 (gate 2 + (gid >> 2)) of unit 4q + (gid & 3), windows
        // (nt0 + j) 8 + 2 tig (+1)
        const int gid = lane >> 2, tig = lane & 3, u = 4 * q + (gid & 3);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int gate = (gid >> 2) + (e & 2), wi = (nt0 + j) * 8 + 2 * tig + (e & 1);
            if (j >= n || wi >= nw || u >= nu) continue;
            if (ih)
              sz[wi * 4 * U + 4 * u + gate] = d[j][e];
            else
              Q(l - 1, slot_of(wi))[4 * u + gate] = d[j][e] + sw[p.pre_b[l - 1] + 4 * u + gate];
          }
      }
      __syncthreads();
      t_mma += clock64() - t0;
    };
    const int ntiles = (nw + 7) >> 3;
    // The window that completes at t + 1 is the round's first (round_windows: the oldest open one), in tile 0.
    // Unless hy_last_whole, the last pass does tile 0 first, publishes, and leaves the other tiles (the next
    // round's Q, not this tick's state) until after the publish, while the CPU answers and sends x_{t+1}.
    // Only with L > 1: the deferred part reads h of layer L - 1, which round t + 1 (that other blocks may
    // start once every block has published) rewrites only after a grid barrier this block has not reached;
    // with one layer that h is layer 0's, rewritten before any barrier.
    const bool split_last = !p.hy_last_whole && ntiles > 1 && L > 1;
    for (int l = 1; l <= L && nw > 0; ++l) {
      const bool last = l == L;
      if (last && split_last) {
        stage(l, 0, min(8, nw));
        products(l, 0, 1, false);
        break;
      }
      stage(l, 0, nw);
      products(l, 0, ntiles, !last);
      if (!last) {
        const long long t0 = clock64();
        for (int i = tid; i < nw * nu; i += nthreads) {
          const int wi = i / nu, u = i % nu, slot = slot_of(wi);
          const float* q = Q(l, slot) + 4 * u;
          const float* z = sz + wi * 4 * U + 4 * u;
          float c = C(l, slot)[u];
          const float h = dev::lstm_cell(z[0] + q[0], z[1] + q[1], z[2] + q[2], z[3] + q[3], c);
          C(l, slot)[u] = c;
          store_h(l, slot, u, h);
        }
        t_cells += clock64() - t0;
        if (!barrier()) return leave_cluster(p);
      }
    }
    __syncthreads();
    const long long t_layers = clock64();

    bool fresh;
    const int done = dev::completing_slot(p, t, &fresh);
    publish(done, fresh, t + 1);
    const long long t_published = clock64();
    if (nw > 0 && split_last) {  // the rest of the last pass: the other windows' Q of the top layer
      stage(L, 8, nw);
      products(L, 1, ntiles, false);
    }
    if (b == 0 && tid == 0) {
      dev::record_precompute_round(p.words, t_layer0 - t_start, t_barrier, t_layers - t_layer0 - t_barrier,
                                   t_published - t_layers, t_published - t_start);
      unsigned long long* w = p.words->pre_sum;
      w[kPreStage] += (unsigned long long)t_stage;
      w[kPreMma] += (unsigned long long)t_mma;
      w[kPreCells] += (unsigned long long)t_cells;
      w[kPreDeferred] += (unsigned long long)(clock64() - t_published);
    }
  }
}

__global__ void __launch_bounds__(kHybridThreads, 1) lstm_hybrid(const __grid_constant__ LstmParams p) {
  extern __shared__ __align__(16) char smem[];
  if (int(blockIdx.x) == p.np)
    hybrid_feeder(p);
  else if (int(blockIdx.x) > p.np)
    return;  // rounds the grid up to whole clusters (hybrid_grid)
  else if (p.hy_mma)
    mma_precompute_block(p, smem, int(blockIdx.x));
  else
    dev::precompute_block(p, smem, int(blockIdx.x));
}

}  // namespace

cudaError_t launch_hybrid(const LstmParams& p, cudaStream_t stream, long long* max_coresident) {
  if (!p.export_state || !p.export_seq || p.export_lanes < 1 || p.np < 1 || !p.words || !p.xbuf || !p.h_state ||
      !p.pre_w || !p.mb.in || !p.mb.status || !p.mb.control || (p.hy_mma && (!p.hy_frags || p.U % 4 != 0)))
    return cudaErrorInvalidValue;
  if (p.hy_cluster > 1 && (!p.hy_mma || p.hy_cluster > kMaxHybridStageCluster || p.np % p.hy_cluster != 0))
    return cudaErrorInvalidValue;
  // the bulk copies: whole 16-byte rows, and a block's own staging (the shared one stores into its peers)
  if (p.hy_stage_tma && (!p.hy_mma || p.hy_row_words % 4 != 0 || p.hy_cluster > 1)) return cudaErrorInvalidValue;
  if (p.hy_mma && (p.hy_row_words < (p.hy_fp16 ? (p.H + 1) / 2 : p.H) || p.hy_kpad < (p.hy_fp16 ? 8 : 16) * p.hy_kt))
    return cudaErrorInvalidValue;
  LstmParams arg = p;
  const void* fn = reinterpret_cast<const void*>(&lstm_hybrid);
  if (p.hy_cluster <= 1) return cooperative_launch(fn, hybrid_grid(p), kHybridThreads, p.smem_bytes, &arg, stream, max_coresident);
  // clusters: co-residency counted in whole clusters (they stay inside a GPC)
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes);
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t cfg;
  cooperative_cluster_config(unsigned(hybrid_grid(p)), unsigned(kHybridThreads), size_t(p.smem_bytes), p.hy_cluster, stream,
                             cfg, attrs);
  int clusters = 0;
  if ((e = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg)) != cudaSuccess) return e;
  const long long fits = (long long)clusters * p.hy_cluster;
  if (max_coresident) *max_coresident = fits;
  if (fits < hybrid_grid(p)) return cudaErrorCooperativeLaunchTooLarge;
  void* args[] = {&arg};
  return cudaLaunchKernelExC(&cfg, fn, args);
}

}  // namespace hotpath::cuda
