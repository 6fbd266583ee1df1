// The fused chunk for a few rows (lstm_batch.hpp, BatchNarrow; docs/cuda.md, "Few rows: the narrow cluster
// kernel"). The 32-row kernels (lstm_batch_tile.cu, lstm_batch_cluster.cu) put the rows on the MMA's M side: a
// single fresh window pays for 32. Here the operands swap: the weights are the A operand (gate columns as M,
// row-major [column][K] in shared memory, ldmatrix), the rows' inputs and h the B operand (N = 8 rows), so a
// window costs an eighth of a 32-row tile.
//
//   block r of a cluster holds gate columns [r Nc, (r + 1) Nc) of every layer (the four gates of units
//   [r Hu, (r + 1) Hu), batch_column's permutation) for the whole launch, as the 32-row cluster kernel does;
//   warp (l, cg) computes layer l's 32 columns of group cg (two m16 tiles: gates i, f, then g, o of 8 units)
//   for the tile's 8 rows, so lane (g, t) ends with all four gates of unit 8 cg + g for rows 2t and 2t + 1 and
//   runs those two cells, c in registers from the first step to the last;
//   the layers run as a wavefront: in step p of the launch, layer l computes time step p - l, reading h_{l-1}
//   and h_l that the step before wrote (h double-buffered by time-step parity), so L layers take T + L - 1
//   cluster barriers instead of T L; the new h (16-bit) goes into every block's copy through distributed
//   shared memory, then one cluster barrier (arrive.release / wait.acquire).
//
// Layer 0's input: the step's fp32 rows (cp.async, one step ahead), split in registers into hi and lo 16-bit
// halves as the B fragments are made (hi + lo = x to ~2^-22, as the other kernels' halves), both against the
// same W_ih fragments. The head: each block's share of every output (its units' fp32 h) before the last
// layer's barrier, the shares added in rank order after it.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/batch/batch_mma.cuh"
#include "cuda/kernels/batch/cluster_launch.hpp"
#include "cuda/kernels/batch/lstm_batch.hpp"
#include "cuda/kernels/common/device_util.cuh"

namespace hotpath::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace batch;

constexpr int kRows = kBatchNarrowRows;

__host__ __device__ constexpr size_t align16(size_t v) { return (v + 15) / 16 * 16; }
// Pitches (16-bit elements): K + 8 keeps ldmatrix's 8 rows on distinct banks.
__host__ __device__ constexpr int wx_pitch(int Ip) { return Ip + 8; }
__host__ __device__ constexpr int wl_pitch(int Hp, int l) { return (l == 0 ? Hp : 2 * Hp) + 8; }
__host__ __device__ constexpr int hk_pitch(int Hp) { return Hp + 8; }
__host__ __device__ constexpr int raw_pitch(int Ip) { return Ip + 8; }
__host__ __device__ constexpr int unit_pitch(int Hu) { return Hu + 8; }

struct NarrowSmem {
  size_t wx, wh[kBatchTileMaxLayers], raw, meta, hs, h32, part, red, total;  // byte offsets, and the whole
};
__host__ __device__ inline NarrowSmem narrow_smem(int Ip, int Hp, int L, int O, int C, int KS) {
  const int Nc = 4 * Hp / C, Hu = Hp / C;
  NarrowSmem m{};
  size_t at = 0;
  m.wx = at, at = align16(at + size_t(Nc) * wx_pitch(Ip) * 2);
  for (int l = 0; l < L; ++l) m.wh[l] = at, at = align16(at + size_t(Nc) * wl_pitch(Hp, l) * 2);
  m.raw = at, at = align16(at + size_t(2) * kRows * raw_pitch(Ip) * 4);
  m.meta = at, at = align16(at + size_t(2) * kRows * 4);
  m.hs = at, at = align16(at + size_t(L) * 2 * kRows * hk_pitch(Hp) * 2);
  m.h32 = at, at = align16(at + size_t(kRows) * unit_pitch(Hu) * 4);
  m.part = at, at = align16(at + size_t(2) * kRows * O * 4);
  // the k-shares' partial sums: [L x groups][KS - 1][16 registers][32 lanes]
  m.red = at, at = align16(at + size_t(L) * (Nc / 32) * (KS - 1) * 16 * 32 * 4);
  m.total = at;
  return m;
}

// acc[m][chain] += A[32 columns from a, K] x B[K, 8 rows from b]: A row-major (pitch lda), B stored as
// [row][K] (pitch ldb), K a multiple of 32; k16 steps alternate between two accumulator chains. This warp's
// k-share ks of KS: the k32 steps ks, ks + KS, ...
template <bool BF16>
__device__ __forceinline__ void narrow_product(float (&acc)[2][2][4], const unsigned short* a, int lda,
                                               const unsigned short* b, int ldb, int K, int ks, int KS, int lane) {
#pragma unroll 2
  for (int kk = 32 * ks; kk < K; kk += 32 * KS) {
    unsigned bf[4], a0[4], a1[4], a2[4], a3[4];
    // matrices 0..3: rows 0..7, columns kk + 8j (j = lane / 8): b0, b1 of step kk, then of step kk + 16
    ldmatrix_x4(bf, b + (lane & 7) * ldb + kk + (lane >> 3) * 8);
    ldmatrix_x4(a0, a + (lane & 15) * lda + kk + (lane >> 4) * 8);
    ldmatrix_x4(a1, a + (16 + (lane & 15)) * lda + kk + (lane >> 4) * 8);
    ldmatrix_x4(a2, a + (lane & 15) * lda + kk + 16 + (lane >> 4) * 8);
    ldmatrix_x4(a3, a + (16 + (lane & 15)) * lda + kk + 16 + (lane >> 4) * 8);
    mma16816<BF16>(acc[0][0], a0, bf[0], bf[1]);
    mma16816<BF16>(acc[1][0], a1, bf[0], bf[1]);
    mma16816<BF16>(acc[0][1], a2, bf[2], bf[3]);
    mma16816<BF16>(acc[1][1], a3, bf[2], bf[3]);
  }
}

// acc[m][.] += W_ih,0 [32 columns from a, Ip] x [hi(x) | lo(x)] of the 8 staged fp32 rows (pitch rp): lane
// (g, t) makes the B fragments of row g, columns kk + 2t, 2t + 1, + 8, + 9, from its fp32 values.
template <bool BF16>
__device__ __forceinline__ void narrow_product_x(float (&acc)[2][2][4], const unsigned short* a, int lda, const float* raw,
                                                 int rp, int Ip, int ks, int KS, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  for (int kk = 16 * ks; kk < Ip; kk += 16 * KS) {
    unsigned a0[4], a1[4], hi[2], lo[2];
    ldmatrix_x4(a0, a + (lane & 15) * lda + kk + (lane >> 4) * 8);
    ldmatrix_x4(a1, a + (16 + (lane & 15)) * lda + kk + (lane >> 4) * 8);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float2 v = *reinterpret_cast<const float2*>(raw + g * rp + kk + 2 * tq + 8 * j);
      const unsigned short h0 = to16<BF16>(v.x), h1 = to16<BF16>(v.y);
      hi[j] = unsigned(h0) | unsigned(h1) << 16;
      lo[j] = unsigned(to16<BF16>(v.x - from16<BF16>(h0))) | unsigned(to16<BF16>(v.y - from16<BF16>(h1))) << 16;
    }
    mma16816<BF16>(acc[0][0], a0, hi[0], hi[1]);
    mma16816<BF16>(acc[1][0], a1, hi[0], hi[1]);
    mma16816<BF16>(acc[0][1], a0, lo[0], lo[1]);
    mma16816<BF16>(acc[1][1], a1, lo[0], lo[1]);
  }
}

template <bool BF16>
__global__ void __launch_bounds__(kBatchNarrowMaxThreads, 1) batch_narrow(const BatchTile t, const BatchNarrow plan) {
  extern __shared__ __align__(16) unsigned char smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int C = plan.cluster, KS = plan.ksplit;
  const int Ip = t.Ip, Hp = t.Hp, L = t.L, O = t.O, Np = t.Np;
  const int Nc = Np / C, Hu = Hp / C, ncg = Nc / 32;
  const int rank = int(cluster.block_rank());
  const NarrowSmem lay = narrow_smem(Ip, Hp, L, O, C, KS);
  auto* wx = reinterpret_cast<unsigned short*>(smem + lay.wx);  // [Nc][wx_pitch]: W_ih,0
  auto* raw = reinterpret_cast<float*>(smem + lay.raw);         // [2][kRows][raw_pitch]: staged inputs, fp32
  auto* meta = reinterpret_cast<int*>(smem + lay.meta);          // [2][kRows]: each row's row_p0, row_first
  auto* hs = reinterpret_cast<unsigned short*>(smem + lay.hs);  // [L][2][kRows][hk_pitch]: every unit's h
  auto* h32 = reinterpret_cast<float*>(smem + lay.h32);         // [kRows][up]: the block's last-layer h, fp32
  auto* part = reinterpret_cast<float*>(smem + lay.part);       // [2][kRows][O]: its share of the head
  auto* red = reinterpret_cast<float*>(smem + lay.red);         // [L ncg][KS - 1][16][32]: k-shares' partials
  const int xp = wx_pitch(Ip), hp = hk_pitch(Hp), rp = raw_pitch(Ip), up = unit_pitch(Hu);
  auto hbuf = [&](int l, int parity) { return hs + size_t(l * 2 + parity) * kRows * hp; };
  auto wl = [&](int l) { return reinterpret_cast<unsigned short*>(smem + lay.wh[l]); };
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int row0 = int(blockIdx.x) / C * kRows;
  const int rows_here = min(kRows, t.rows - row0);

  // the weights of this block's columns, for the whole launch (layer 0's W_ih once: the hi and lo halves of x
  // both go against it)
  load_slice(wx, xp, static_cast<const unsigned short*>(t.w0), 2 * Ip, Ip, rank * Nc, Nc, tid, nthreads);
  for (int l = 0; l < L; ++l) {
    const int K = l == 0 ? Hp : 2 * Hp;
    load_slice(wl(l), wl_pitch(Hp, l), static_cast<const unsigned short*>(t.w[l]), K, K, rank * Nc, Nc, tid, nthreads);
  }
  // the state before the first step (parity 1): zero, or the chunk before's; every block holds every unit's h
  for (int l = 0; l < L; ++l)
    for (int i = tid; i < kRows * Hp; i += nthreads) {
      const int r = i / Hp, u = i % Hp;
      const bool load = !t.reset && r < rows_here;
      hbuf(l, 1)[r * hp + u] =
          load ? static_cast<const unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + u] : (unsigned short)0;
    }
  for (int r = tid; r < kRows; r += nthreads) {
    meta[r] = r < rows_here ? t.row_p0[row0 + r] : 0;
    meta[kRows + r] = r < rows_here ? (t.row_first ? t.row_first[row0 + r] : 0) : t.steps;  // past the end: never valid
  }
  const int pad = Ip - t.I;
  for (int i = tid; i < 2 * kRows * pad; i += nthreads) raw[(i / pad) * rp + t.I + i % pad] = 0.f;
  __syncthreads();
  // step k's inputs into raw[k & 1], in flight during the launch step before (a row past the end, or a step
  // before its window's first, reads zeros)
  auto stage = [&](int k) {
    float* dst = raw + (k & 1) * kRows * rp;
    for (int r = warp; r < kRows; r += nwarps) {
      const bool valid = k >= meta[kRows + r];
      const float* src = t.x + (valid ? size_t(meta[r] + k) * t.I : 0);
      for (int j = lane; j < t.I; j += 32) cp_async4(dst + r * rp + j, src + (valid ? j : 0), valid);
    }
    cp_async_commit();
  };
  stage(0);

  // This warp: layer wlay, column group cg of the block, k-share ks (the share 0 warp adds the others' partial
  // sums and runs the cells); this lane: unit ul of the block's slice (u in the model), rows 2 tq and 2 tq + 1
  // of the tile, their c in registers.
  const int ks = warp % KS, wgrp = warp / KS, wlay = wgrp / ncg, cgp = wgrp % ncg;
  const bool cells = ks == 0;
  const int gq = lane >> 2, tq = lane & 3;
  const int ul = cgp * 8 + gq, u = rank * Hu + ul;
  const int col0 = rank * Nc + cgp * 32;
  float cr[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = 2 * tq + e;
    cr[e] = cells && !t.reset && r < rows_here ? t.c[wlay * t.c_stride + size_t(row0 + r) * Hp + u] : 0.f;
  }
  float bq[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) bq[q] = t.bias[wlay] ? __ldg(t.bias[wlay] + col0 + q * 8 + gq) : 0.f;
  const unsigned short* wrow = wl(wlay) + size_t(cgp * 32) * wl_pitch(Hp, wlay);
  const unsigned short* wxrow = wx + size_t(cgp * 32) * xp;
  cluster.sync();  // every block of the cluster running (its shared memory exists) before the first remote store

  const int phases = t.steps + L - 1;
  for (int p = 0; p < phases; ++p) {
    cp_async_wait<0>();
    __syncthreads();  // raw[p & 1] whole; raw[(p + 1) & 1] read by the step before's layer 0 in every warp
    if (p + 1 < t.steps) stage(p + 1);
    const int k = p - wlay;  // this warp's time step
    const bool active = k >= 0 && k < t.steps;
    float acc[2][2][4] = {};
    if (active) {
      const bool from_zero = t.reset && k == 0;  // the recurrent operand is all zeros
      if (wlay == 0) {
        narrow_product_x<BF16>(acc, wxrow, xp, raw + (k & 1) * kRows * rp, rp, Ip, ks, KS, lane);
        if (!from_zero) narrow_product<BF16>(acc, wrow, wl_pitch(Hp, 0), hbuf(0, (k + 1) & 1), hp, Hp, ks, KS, lane);
      } else {
        narrow_product<BF16>(acc, wrow, wl_pitch(Hp, wlay), hbuf(wlay - 1, k & 1), hp, Hp, ks, KS, lane);
        if (!from_zero)
          narrow_product<BF16>(acc, wrow + Hp, wl_pitch(Hp, wlay), hbuf(wlay, (k + 1) & 1), hp, Hp, ks, KS, lane);
      }
    }
    if (KS > 1) {  // the k-shares meet: partial sums through shared memory, one block barrier
      float* mine = red + size_t(wgrp) * (KS - 1) * 16 * 32 + lane;
      if (active && !cells)
#pragma unroll
        for (int j = 0; j < 16; ++j) mine[((ks - 1) * 16 + j) * 32] = acc[j >> 3][(j >> 2) & 1][j & 3];
      __syncthreads();
      if (active && cells)
        for (int o = 0; o < KS - 1; ++o)
#pragma unroll
          for (int j = 0; j < 16; ++j) acc[j >> 3][(j >> 2) & 1][j & 3] += mine[(o * 16 + j) * 32];
    }
    if (active && cells) {
      // gate q of unit ul for row 2 tq + e: tile q / 2, register (q & 1) * 2 + e, both chains
      float hn[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float pre[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) pre[q] = acc[q >> 1][0][(q & 1) * 2 + e] + acc[q >> 1][1][(q & 1) * 2 + e] + bq[q];
        const bool valid = k >= meta[kRows + 2 * tq + e];  // a row past the end: never
        float c = valid ? cr[e] : 0.f;
        const float h = dev::lstm_cell_ftz(pre[0], pre[1], pre[2], pre[3], c);
        cr[e] = valid ? c : 0.f;
        hn[e] = valid ? h : 0.f;
      }
      // units ul and ul + 1 (lanes g and g ^ 1) share a 32-bit store: the even lane's of row 2 tq, the odd
      // lane's of row 2 tq + 1
      const bool even = (gq & 1) == 0;
      const float other = __shfl_xor_sync(0xffffffffu, even ? hn[1] : hn[0], 4);
      const int r = 2 * tq + (even ? 0 : 1);
      const unsigned packed = even ? pack2<BF16>(hn[0], other) : pack2<BF16>(other, hn[1]);
      const unsigned at = smem_addr(hbuf(wlay, k & 1) + r * hp + (even ? u : u - 1));
      for (int peer = 0; peer < C; ++peer) st_cluster_u32(at, unsigned(peer), packed);
      if (wlay == L - 1) h32[(2 * tq) * up + ul] = hn[0], h32[(2 * tq + 1) * up + ul] = hn[1];
    }
    const int kl = p - (L - 1);  // the last layer's time step
    const bool head_now = kl >= 0 && (t.emit_every || kl == t.steps - 1);
    if (head_now) {
      // this block's units' share of every output, for each row (the other blocks add theirs below)
      __syncthreads();
      head_share(part + size_t(kl & 1) * kRows * O, h32, up, t.head_w, t.H, rank * Hu, min(Hu, t.H - rank * Hu),
                 rows_here, O, tid, nthreads);
    }
    cluster_arrive();
    cluster_wait();  // this step's h (and the head's shares) whole in every block
    if (head_now)  // the blocks' shares in rank order
      head_sum(cluster, part + size_t(kl & 1) * kRows * O, rows_here, O, t.head_b, t.out, t.emit_every, t.steps, kl, row0,
               rank, C, tid, nthreads);
  }
  // The state for the chunk after (streaming): c from each cell's registers, h of the last step
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = 2 * tq + e;
    if (cells && r < rows_here) t.c[wlay * t.c_stride + size_t(row0 + r) * Hp + u] = cr[e];
  }
  const int last = (t.steps - 1) & 1;
  for (int l = 0; l < L; ++l)
    for (int i = tid; i < rows_here * Hu; i += nthreads) {
      const int r = i / Hu, uu = rank * Hu + i % Hu;
      static_cast<unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + uu] = hbuf(l, last)[r * hp + uu];
    }
  cluster.sync();  // no block leaves while a peer may still read its head shares
}

// The shapes the kernel's layout takes (the planner's and the launch's one check).
bool shape_fits(int Ip, int Hp, int L, int O) {
  return Hp % kBatchUnitGroup == 0 && Ip % 32 == 0 && L >= 1 && L <= kBatchTileMaxLayers && O >= 1;
}
const void* narrow_kernel(bool bf16) {
  return bf16 ? reinterpret_cast<const void*>(&batch_narrow<true>) : reinterpret_cast<const void*>(&batch_narrow<false>);
}

void launch_config(const BatchTile& t, const BatchNarrow& plan, cudaStream_t stream, cudaLaunchConfig_t& cfg,
                   cudaLaunchAttribute (&attr)[1]) {
  cluster_launch_config(unsigned((t.rows + kRows - 1) / kRows * plan.cluster), unsigned(plan.threads(t.Np, t.L)), plan.smem,
                        plan.cluster, stream, cfg, attr);
}

}  // namespace

cudaError_t prepare_batch_narrow_kernels(int device) {
  return prepare_cluster_kernels(device, {narrow_kernel(false), narrow_kernel(true)});
}

BatchNarrow batch_narrow_plan(int Ip, int Hp, int L, int O, bool bf16, int device, int ksplit) {
  BatchNarrow plan;
  if (!shape_fits(Ip, Hp, L, O)) return plan;
  const size_t optin = cluster_smem_optin(device);
  if (!optin) return plan;
  const int Np = 4 * Hp, groups = Np / 32;
  // The smallest cluster that holds the weights: fewer blocks at each barrier, more clusters side by side.
  for (int C = 1; C <= kBatchClusterMaxBlocks; ++C) {
    if (groups % C) continue;
    BatchNarrow p;
    p.cluster = C;
    p.ksplit = ksplit > 0 ? ksplit : 1;
    if (p.threads(Np, L) > kBatchNarrowMaxThreads) continue;
    p.smem = narrow_smem(Ip, Hp, L, O, C, p.ksplit).total;
    if (p.smem > optin) continue;
    BatchTile probe;
    probe.rows = kRows, probe.Np = Np, probe.L = L;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    launch_config(probe, p, nullptr, cfg, attr);
    int fits = 0;
    if (cudaOccupancyMaxActiveClusters(&fits, narrow_kernel(bf16), &cfg) != cudaSuccess || fits < 1) {
      (void)cudaGetLastError();
      continue;
    }
    p.clusters = fits;
    return p;
  }
  return plan;
}

cudaError_t launch_batch_narrow(const BatchTile& t, const BatchNarrow& plan, cudaStream_t stream) {
  if (t.rows <= 0 || t.steps <= 0) return cudaSuccess;
  if (plan.cluster < 1 || plan.cluster > kBatchClusterMaxBlocks || plan.ksplit < 1 || t.Np != 4 * t.Hp ||
      !shape_fits(t.Ip, t.Hp, t.L, t.O) ||
      (t.Np / 32) % plan.cluster || plan.threads(t.Np, t.L) > kBatchNarrowMaxThreads)
    return cudaErrorInvalidValue;
  // a plan made for this shape: its shared memory is what the kernel's layout of this shape takes
  if (plan.smem != narrow_smem(t.Ip, t.Hp, t.L, t.O, plan.cluster, plan.ksplit).total) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  launch_config(t, plan, stream, cfg, attr);
  BatchTile targ = t;
  BatchNarrow parg = plan;
  void* args[] = {&targ, &parg};
  return cudaLaunchKernelExC(&cfg, narrow_kernel(t.bf16), args);
}

}  // namespace hotpath::cuda
