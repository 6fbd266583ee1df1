// The fused chunk kernel on a thread-block cluster (lstm_batch.hpp, BatchCluster; docs/cuda.md, "The fused
// chunk kernel on a cluster"): the one-block fused kernel (lstm_batch_tile.cu) reads every weight from L2
// once a step for its 32 rows, and L2 bounds it. Here the C blocks of a cluster hold the model's weights in
// their shared memory for the whole launch, each a slice of the gate columns, and a tile of rows
// (sequences) goes through every step of every layer on the cluster:
//
//   block r of a cluster owns gate columns [r Nc, (r + 1) Nc) of every layer (Nc = Np / C: the four gates
//   of units [r Hu, (r + 1) Hu), batch_column's permutation), their weights resident in its shared memory;
//   warp (cg, rg) computes columns [32 cg, 32 cg + 32) of its block's slice for rows [32 rg, 32 rg + 32)
//   of the tile, so each thread holds every gate of its two units for its rows and runs their cells;
//   the new h (16-bit) of the block's units goes into every block's copy of the layer's h (distributed
//   shared memory), then one cluster barrier: the next layer (or step) reads the whole h from its own
//   shared memory.
//
// h is double-buffered by step parity, per layer: layer l at step k reads h_{l-1} of step k and h_l of
// step k-1 and writes h_l of step k; a block writes a buffer only after the barrier that follows every
// peer's last read of it. The head: each block adds its units' share of every output (fp32 h) into its own
// partial sums (double-buffered by step parity) before the last layer's barrier; after it, the blocks add
// the C partials in rank order, rows split among them.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/kernels/batch/batch_mma.cuh"
#include "cuda/kernels/batch/cluster_launch.hpp"
#include "cuda/kernels/batch/lstm_batch.hpp"
#include "cuda/kernels/common/device_util.cuh"

namespace hotpath::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace batch;

constexpr int kWarpRows = 32;  // rows of one warp's tile: two m16 tiles

__host__ __device__ constexpr size_t align16(size_t v) { return (v + 15) / 16 * 16; }
// Pitches (16-bit elements): K + 8 keeps ldmatrix's 8 rows on distinct banks.
__host__ __device__ constexpr int xk_pitch(int Ip) { return 2 * Ip + 8; }
// The step's inputs as fp32 [BM][Ip + 8]: a warp's float2 loads of eight rows then take two wavefronts.
__host__ __device__ constexpr int raw_pitch(int Ip) { return Ip + 8; }
__host__ __device__ constexpr int hk_pitch(int Hp) { return Hp + 8; }
__host__ __device__ constexpr int wl_pitch(int Hp, int l) { return (l == 0 ? Hp : 2 * Hp) + 8; }
// Floats a row of the block's own units (c, the head's fp32 h): + 8, so a warp's eight rows of the same
// units fall on different banks (at Hu = 32, lstm_s's, they were all one bank's).
__host__ __device__ constexpr int unit_pitch(int Hu) { return Hu + 8; }

struct ClusterSmem {
  size_t wx, wh[kBatchTileMaxLayers], raw, meta, hs, cs, h32, part, total;  // byte offsets, and the whole
};
__host__ __device__ inline ClusterSmem cluster_smem(int Ip, int Hp, int L, int O, int C, int RG) {
  const int Nc = 4 * Hp / C, Hu = Hp / C, BM = kWarpRows * RG;
  ClusterSmem m{};
  size_t at = 0;
  m.wx = at, at = align16(at + size_t(Nc) * xk_pitch(Ip) * 2);
  for (int l = 0; l < L; ++l) m.wh[l] = at, at = align16(at + size_t(Nc) * wl_pitch(Hp, l) * 2);
  m.raw = at, at = align16(at + size_t(BM) * raw_pitch(Ip) * 4);
  m.meta = at, at = align16(at + size_t(2) * BM * 4);
  m.hs = at, at = align16(at + size_t(L) * 2 * BM * hk_pitch(Hp) * 2);
  m.cs = at, at = align16(at + size_t(L) * BM * unit_pitch(Hu) * 4);
  m.h32 = at, at = align16(at + size_t(BM) * unit_pitch(Hu) * 4);
  m.part = at, at = align16(at + size_t(2) * BM * O * 4);
  m.total = at;
  return m;
}

// acc[mi][q] += A[32 rows from a, K] x B[32 columns from b, K]^T, both in shared memory (pitches lda, ldb).
template <bool BF16>
__device__ __forceinline__ void warp_product(float (&acc)[2][4][4], const unsigned short* a, int lda,
                                             const unsigned short* b, int ldb, int K, int lane) {
#pragma unroll 2
  for (int kk = 0; kk < K; kk += 16) {
    unsigned af[2][4], bf[2][4];
    load_a32(af, a + kk, lda, lane);
    load_b32(bf, b + kk, ldb, lane);
    mma_32x32<BF16>(acc, af, bf);
  }
}

// acc[mi][q] += [hi(x) | lo(x)] (32 rows of fp32 inputs, pitch rp, Ip columns) x B[32 columns from b, 2 Ip]^T:
// the A fragments made in registers from the fp32 inputs, hi = x rounded to 16 bits and lo = x - hi rounded
// (the one-block kernel's staged halves, bit for bit), so no 16-bit copy of the input sits in shared memory.
template <bool BF16>
__device__ __forceinline__ void warp_product_x(float (&acc)[2][4][4], const float* raw, int rp, const unsigned short* b,
                                               int ldb, int Ip, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  for (int kk = 0; kk < Ip; kk += 16) {
    unsigned ahi[2][4], alo[2][4], bh[2][4], bl[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // register i: row g (+8 for odd i), columns 2 tq, 2 tq + 1 (+8 for i >= 2)
        const float2 v = *reinterpret_cast<const float2*>(raw + (mi * 16 + g + (i & 1) * 8) * rp + kk + 2 * tq + (i >> 1) * 8);
        const unsigned short h0 = to16<BF16>(v.x), h1 = to16<BF16>(v.y);
        ahi[mi][i] = unsigned(h0) | unsigned(h1) << 16;
        alo[mi][i] = unsigned(to16<BF16>(v.x - from16<BF16>(h0))) | unsigned(to16<BF16>(v.y - from16<BF16>(h1))) << 16;
      }
    load_b32(bh, b + kk, ldb, lane);
    load_b32(bl, b + Ip + kk, ldb, lane);
    mma_32x32<BF16>(acc, ahi, bh);
    mma_32x32<BF16>(acc, alo, bl);
  }
}

template <bool BF16>
__global__ void __launch_bounds__(kBatchClusterMaxThreads, 1) batch_cluster(const BatchTile t, const BatchCluster plan) {
  extern __shared__ __align__(16) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int C = plan.cluster, RG = plan.row_groups;
  const int Ip = t.Ip, Hp = t.Hp, L = t.L, O = t.O, Np = t.Np;
  const int Nc = Np / C, Hu = Hp / C, BM = kWarpRows * RG;
  const int rank = int(cluster.block_rank());
  const ClusterSmem lay = cluster_smem(Ip, Hp, L, O, C, RG);
  auto* wx = reinterpret_cast<unsigned short*>(smem + lay.wx);  // [Nc][xk_pitch]: W_ih,0 for x's hi | lo
  auto* raw = reinterpret_cast<float*>(smem + lay.raw);         // [BM][raw_pitch]: the step's input, fp32
  auto* meta = reinterpret_cast<int*>(smem + lay.meta);          // [2][BM]: each row's row_p0, row_first
  auto* hs = reinterpret_cast<unsigned short*>(smem + lay.hs);  // [L][2][BM][hk_pitch]: every unit's h
  auto* cs = reinterpret_cast<float*>(smem + lay.cs);           // [L][BM][up]: this block's units' c
  auto* h32 = reinterpret_cast<float*>(smem + lay.h32);         // [BM][up]: their last-layer h, fp32
  auto* part = reinterpret_cast<float*>(smem + lay.part);       // [2][BM][O]: their share of the head
  const int xp = xk_pitch(Ip), hp = hk_pitch(Hp), rp = raw_pitch(Ip), up = unit_pitch(Hu);
  auto hbuf = [&](int l, int parity) { return hs + size_t(l * 2 + parity) * BM * hp; };
  auto wl = [&](int l) { return reinterpret_cast<unsigned short*>(smem + lay.wh[l]); };
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int tile = int(blockIdx.x) / C;
  const int row0 = tile * BM;
  const int rows_here = min(BM, t.rows - row0);

  // the weights of this block's columns, for the whole launch
  load_slice(wx, xp, static_cast<const unsigned short*>(t.w0), 2 * Ip, 2 * Ip, rank * Nc, Nc, tid, nthreads);
  for (int l = 0; l < L; ++l)
    load_slice(wl(l), wl_pitch(Hp, l), static_cast<const unsigned short*>(t.w[l]), l == 0 ? Hp : 2 * Hp, l == 0 ? Hp : 2 * Hp,
               rank * Nc, Nc, tid, nthreads);
  // the state: zero, or the chunk before's (a streaming series carried over); every block holds every unit's h
  for (int l = 0; l < L; ++l) {
    for (int i = tid; i < BM * Hp; i += nthreads) {
      const int r = i / Hp, u = i % Hp;
      const bool load = !t.reset && r < rows_here;
      hbuf(l, 0)[r * hp + u] =
          load ? static_cast<const unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + u] : (unsigned short)0;
    }
    for (int i = tid; i < BM * Hu; i += nthreads) {
      const int r = i / Hu, u = rank * Hu + i % Hu;
      const bool load = !t.reset && r < rows_here;
      cs[(size_t(l) * BM + r) * up + i % Hu] = load ? t.c[l * t.c_stride + size_t(row0 + r) * Hp + u] : 0.f;
    }
  }
  // each row's first staged tick and first valid step, and the input's padding columns (zero for good)
  for (int r = tid; r < BM; r += nthreads) {
    meta[r] = r < rows_here ? t.row_p0[row0 + r] : 0;
    meta[BM + r] = r < rows_here ? (t.row_first ? t.row_first[row0 + r] : 0) : t.steps;
  }
  for (int i = tid; i < BM * (Ip - t.I); i += nthreads) raw[(i / (Ip - t.I)) * rp + t.I + i % (Ip - t.I)] = 0.f;
  __syncthreads();
  // step k's inputs into raw, in flight while the block computes (cp.async; a row past the end, or a step
  // before its window's first, reads zeros); a warp a row at a time, no division on the way
  const int nwarps = nthreads >> 5;
  auto stage = [&](int k) {
    for (int r = warp; r < BM; r += nwarps) {
      const bool valid = k >= meta[BM + r];
      const float* src = t.x + (valid ? size_t(meta[r] + k) * t.I : 0);
      for (int j = lane; j < t.I; j += 32) cp_async4(raw + r * rp + j, src + (valid ? j : 0), valid);
    }
    cp_async_commit();
  };
  stage(0);
  cluster.sync();  // every block of the cluster running (its shared memory exists) before the first remote store

  // This thread: column group cgp of the block (units 8 cgp + 2 tq + {0, 1} of its slice), rows 32 rg + ..
  const int ncg = Nc / 32, cgp = warp % ncg, rg = warp / ncg;
  const int gq = lane >> 2, tq = lane & 3;
  const int ul = cgp * 8 + tq * 2;            // the first of its two units, in the block's slice
  const int u = rank * Hu + ul;               // .. and in the model
  const int col0 = rank * Nc + cgp * 32;      // its warp's first gate column, in the model
  const int ar0 = rg * kWarpRows;             // its warp's first row of the tile
  int parity = 0;                             // hbuf(l, parity): the state before this step
  for (int k = 0; k < t.steps; ++k) {
    // the step's inputs, staged during the step before (after its layer 0 had read the last ones)
    cp_async_wait<0>();
    __syncthreads();
    const bool emit = t.emit_every || k == t.steps - 1;
    const int kpar = k & 1;
    for (int l = 0; l < L; ++l) {
      const bool last = l == L - 1;
      float acc[2][4][4] = {};
      const bool from_zero = t.reset && k == 0;  // the recurrent operand is all zeros
      const unsigned short* wrow = wl(l) + size_t(cgp * 32) * wl_pitch(Hp, l);
      if (l == 0) {
        warp_product_x<BF16>(acc, raw + ar0 * rp, rp, wx + size_t(cgp * 32) * xp, xp, Ip, lane);
        if (!from_zero) warp_product<BF16>(acc, hbuf(0, parity) + ar0 * hp, hp, wrow, wl_pitch(Hp, 0), Hp, lane);
      } else {
        warp_product<BF16>(acc, hbuf(l - 1, 1 - parity) + ar0 * hp, hp, wrow, wl_pitch(Hp, l), Hp, lane);
        if (!from_zero) warp_product<BF16>(acc, hbuf(l, parity) + ar0 * hp, hp, wrow + Hp, wl_pitch(Hp, l), Hp, lane);
      }
      // the cells: gate q of unit u + e is acc[mi][q][half * 2 + e]; the new h into every block's buffer
      unsigned short* hn16 = hbuf(l, 1 - parity);
      const float* bias = t.bias[l];
      float bq[4][2];
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e = 0; e < 2; ++e) bq[q][e] = bias ? __ldg(bias + col0 + q * 8 + tq * 2 + e) : 0.f;
      // every cell of this thread first (eight independent chains: its c loaded before any store, which the
      // compiler could not move across the stores to distributed shared memory), then the stores
      float hn[2][2][2], cn[2][2][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = ar0 + mi * 16 + gq + half * 8;
          const bool valid = k >= meta[BM + r];  // a row past the end: never
          const float* c = cs + (size_t(l) * BM + r) * up + ul;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            cn[mi][half][e] = valid ? c[e] : 0.f;
            hn[mi][half][e] = 0.f;
          }
          if (valid) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float pre[4];
#pragma unroll
              for (int q = 0; q < 4; ++q) pre[q] = acc[mi][q][half * 2 + e] + bq[q][e];
              // the flush-to-zero activations: a shorter chain than expf and a division
              hn[mi][half][e] = dev::lstm_cell_ftz(pre[0], pre[1], pre[2], pre[3], cn[mi][half][e]);
            }
          }
        }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = ar0 + mi * 16 + gq + half * 8;
          const unsigned packed = pack2<BF16>(hn[mi][half][0], hn[mi][half][1]);
          const unsigned at = smem_addr(hn16 + r * hp + u);
          for (int peer = 0; peer < C; ++peer) st_cluster_u32(at, unsigned(peer), packed);
        }
      // this block's own: the arrival first, so the barrier's wait overlaps them (a non-emitting layer)
      const bool head_now = last && emit;
      if (!head_now) cluster_arrive();
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = ar0 + mi * 16 + gq + half * 8;
          float* c = cs + (size_t(l) * BM + r) * up + ul;
          c[0] = cn[mi][half][0], c[1] = cn[mi][half][1];
          if (head_now) h32[r * up + ul] = hn[mi][half][0], h32[r * up + ul + 1] = hn[mi][half][1];
        }
      if (last && emit) {
        // this block's units' share of every output, for each row (the other blocks add theirs below)
        __syncthreads();
        head_share(part + size_t(kpar) * BM * O, h32, up, t.head_w, t.H, rank * Hu, min(Hu, t.H - rank * Hu), rows_here, O,
                   tid, nthreads);
      }
      if (head_now) cluster_arrive();  // after the head's shares
      cluster_wait();  // this layer's h (and the head's shares) whole in every block
      if (l == 0 && k + 1 < t.steps) stage(k + 1);  // layer 0 has read raw in every warp
    }
    parity = 1 - parity;
    if (emit)  // the head: the blocks' shares in rank order
      head_sum(cluster, part + size_t(kpar) * BM * O, rows_here, O, t.head_b, t.out, t.emit_every, t.steps, k, row0, rank, C,
               tid, nthreads);
  }
  // The state for the chunk after (streaming): this block's units of every layer's c and this step's h
  for (int l = 0; l < L; ++l)
    for (int i = tid; i < rows_here * Hu; i += nthreads) {
      const int r = i / Hu, uu = rank * Hu + i % Hu;
      t.c[l * t.c_stride + size_t(row0 + r) * Hp + uu] = cs[(size_t(l) * BM + r) * up + i % Hu];
      static_cast<unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + uu] = hbuf(l, parity)[r * hp + uu];
    }
  cluster.sync();  // no block leaves while a peer may still read its head shares
}

// The shapes the kernel's layout takes (the planner's and the launch's one check).
bool shape_fits(int Ip, int Hp, int L, int O) {
  return Hp % kBatchUnitGroup == 0 && Ip % 16 == 0 && L >= 1 && L <= kBatchTileMaxLayers && O >= 1;
}
const void* cluster_kernel(bool bf16) {
  return bf16 ? reinterpret_cast<const void*>(&batch_cluster<true>) : reinterpret_cast<const void*>(&batch_cluster<false>);
}

void launch_config(const BatchTile& t, const BatchCluster& plan, cudaStream_t stream, cudaLaunchConfig_t& cfg,
                   cudaLaunchAttribute (&attr)[1]) {
  const int BM = plan.rows();
  cluster_launch_config(unsigned((t.rows + BM - 1) / BM * plan.cluster), unsigned(plan.threads(t.Np)), plan.smem,
                        plan.cluster, stream, cfg, attr);
}

}  // namespace

cudaError_t prepare_batch_cluster_kernels(int device) {
  return prepare_cluster_kernels(device, {cluster_kernel(false), cluster_kernel(true)});
}

BatchCluster batch_cluster_plan(int Ip, int Hp, int L, int O, bool bf16, int device) {
  BatchCluster best;
  if (!shape_fits(Ip, Hp, L, O)) return best;
  const size_t optin = cluster_smem_optin(device);
  if (!optin) return best;
  const int Np = 4 * Hp, groups = Np / 32;  // 32-column groups of the model: 8 units each
  // The most rows times columns a block (the work between two barriers), then the smaller cluster; each
  // candidate must fit the shared memory and be co-resident as a whole cluster on this device (the kernel's
  // attributes as prepare_batch_cluster_kernels set them).
  auto work = [&](const BatchCluster& p) { return (long long)(Np / p.cluster) * p.row_groups; };
  for (int C = 2; C <= kBatchClusterMaxBlocks; ++C) {
    if (groups % C) continue;
    for (int RG : {4, 2, 1}) {
      BatchCluster p;
      p.cluster = C, p.row_groups = RG;
      if (p.threads(Np) > kBatchClusterMaxThreads) continue;
      p.smem = cluster_smem(Ip, Hp, L, O, C, RG).total;
      if (p.smem > optin) continue;
      if (best.cluster && work(p) <= work(best)) continue;
      BatchTile probe;
      probe.rows = p.rows(), probe.Np = Np;
      cudaLaunchConfig_t cfg;
      cudaLaunchAttribute attr[1];
      launch_config(probe, p, nullptr, cfg, attr);
      int fits = 0;
      if (cudaOccupancyMaxActiveClusters(&fits, cluster_kernel(bf16), &cfg) != cudaSuccess || fits < 1) {
        (void)cudaGetLastError();
        continue;
      }
      best = p;
    }
  }
  return best;
}

cudaError_t launch_batch_cluster(const BatchTile& t, const BatchCluster& plan, cudaStream_t stream) {
  if (t.rows <= 0 || t.steps <= 0) return cudaSuccess;
  if (plan.cluster < 2 || plan.row_groups < 1 || t.Np != 4 * t.Hp || !shape_fits(t.Ip, t.Hp, t.L, t.O) ||
      (t.Np / 32) % plan.cluster || plan.threads(t.Np) > kBatchClusterMaxThreads)
    return cudaErrorInvalidValue;
  // a plan made for this shape: its shared memory is what the kernel's layout of this shape takes
  if (plan.smem != cluster_smem(t.Ip, t.Hp, t.L, t.O, plan.cluster, plan.row_groups).total) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  launch_config(t, plan, stream, cfg, attr);
  const void* fn = cluster_kernel(t.bf16);
  BatchTile targ = t;
  BatchCluster parg = plan;
  void* args[] = {&targ, &parg};
  return cudaLaunchKernelExC(&cfg, fn, args);
}

}  // namespace hotpath::cuda
