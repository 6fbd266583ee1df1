// The fused chunk kernel (lstm_batch.hpp, BatchTile; docs/cuda.md, "The fused chunk kernel"): one block
// advances kBatchTileRows sequences through every step of every layer and runs the head, where the
// per-step path launches a GEMM per (step, layer) and moves h and c through L2 between them.
//
// A block has Np / 32 warps; warp w owns gate columns [32 w, 32 w + 32): the four gates of units
// [8 w, 8 w + 8) (batch_column's permutation), for all the block's rows, so each thread holds every gate
// of its two units for its rows and runs their cells itself. Shared memory holds, per block: the step's
// input as hi | lo 16-bit halves [rows][2 Ip], each layer's h twice (this step's and the last, 16-bit)
// [L][2][rows][Hp], each layer's c (fp32) [L][rows][Hp] and the last layer's h in fp32 for the head
// [rows][Hp], and two slabs of weights. The block copies each layer's weights through shared memory a slab
// of K at a time (16-byte cp.async; L2 after the first blocks: every block reads the same weights), and every
// warp takes its A and B fragments from there by ldmatrix.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/kernels/batch/batch_mma.cuh"
#include "cuda/kernels/batch/lstm_batch.hpp"

namespace hotpath::cuda {
namespace {

using namespace batch;

constexpr int BM = kBatchTileRows;
static_assert(BM == 32, "two m16 tiles a warp");
constexpr int kSlab = 32;               // weight columns of K a slab
constexpr int kSlabPitch = kSlab + 8;   // halves a slab row: ldmatrix's 8 rows on distinct banks

// Pitches (16-bit elements) of the shared rows: K + 8 keeps ldmatrix's 8 rows on distinct banks.
__host__ __device__ constexpr int x_pitch(int Ip) { return 2 * Ip + 8; }
__host__ __device__ constexpr int h_pitch(int Hp) { return Hp + 8; }

struct TileSmem {
  size_t xs, hs, cs, h32, ws, total;  // byte offsets of each region, and the whole
};
__host__ __device__ inline TileSmem tile_smem(int Ip, int Hp, int L) {
  TileSmem m{};
  m.xs = 0;
  m.hs = m.xs + size_t(BM) * x_pitch(Ip) * 2;
  m.cs = m.hs + size_t(L) * 2 * BM * h_pitch(Hp) * 2;
  m.h32 = m.cs + size_t(L) * BM * Hp * 4;
  m.ws = m.h32 + size_t(BM) * Hp * 4;
  m.total = m.ws + size_t(2) * 4 * Hp * kSlabPitch * 2;  // two slabs of Np = 4 Hp rows
  return m;
}

// acc[mi][q] += A [32 rows, K] (shared, pitch lda) x W[n, k0 .. k0 + K)^T for the warp's 32 columns. The
// block's threads (one per gate column) copy the weights into shared memory a slab of kSlab columns of K at a
// time (16-byte cp.async, two slabs in flight), and every warp takes its B fragments from there by ldmatrix;
// called by every thread of the block alike (it synchronises them).
template <bool BF16>
__device__ __forceinline__ void block_product(float (&acc)[2][4][4], const unsigned short* a, int lda, int K,
                                              const unsigned short* __restrict__ w, int ldw, int k0, int Np,
                                              unsigned short* ws, int col0, int tid, int lane) {
  const int slabs = K / kSlab;
  auto load = [&](int j) {
    if (tid < Np) {
      unsigned short* dst = ws + size_t((j & 1) * Np + tid) * kSlabPitch;
      const unsigned short* src = w + size_t(tid) * ldw + k0 + j * kSlab;
#pragma unroll
      for (int c = 0; c < kSlab / 8; ++c) cp_async16(dst + c * 8, src + c * 8, true);
    }
    cp_async_commit();
  };
  load(0);
  for (int j = 0; j < slabs; ++j) {
    if (j + 1 < slabs) {
      load(j + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // slab j whole for every warp
    const unsigned short* bs = ws + size_t((j & 1) * Np) * kSlabPitch;
#pragma unroll
    for (int kk = 0; kk < kSlab; kk += 16) {
      unsigned af[2][4], bf[2][4];
      load_a32(af, a + j * kSlab + kk, lda, lane);
      load_b32(bf, bs + col0 * kSlabPitch + kk, kSlabPitch, lane);
      mma_32x32<BF16>(acc, af, bf);
    }
    __syncthreads();  // every warp done with slab j before slab j + 2 lands in its buffer
  }
}

template <bool BF16>
__global__ void __launch_bounds__(kBatchTileMaxNp) batch_tile(const BatchTile t) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int Ip = t.Ip, Hp = t.Hp, L = t.L, O = t.O;
  const TileSmem lay = tile_smem(Ip, Hp, L);
  auto* xs = reinterpret_cast<unsigned short*>(smem + lay.xs);  // [BM][x_pitch]: hi | lo
  auto* hs = reinterpret_cast<unsigned short*>(smem + lay.hs);  // [L][2][BM][h_pitch]
  auto* cs = reinterpret_cast<float*>(smem + lay.cs);           // [L][BM][Hp]
  auto* h32 = reinterpret_cast<float*>(smem + lay.h32);         // [BM][Hp]
  auto* ws = reinterpret_cast<unsigned short*>(smem + lay.ws);  // [2][Np][kSlabPitch]: weight slabs
  const int xp = x_pitch(Ip), hp = h_pitch(Hp);
  auto hbuf = [&](int l, int parity) { return hs + size_t(l * 2 + parity) * BM * hp; };
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int row0 = blockIdx.x * BM;
  const int rows_here = min(BM, t.rows - row0);

  // The state: zero, or the chunk before's (a streaming series carried over)
  for (int l = 0; l < L; ++l)
    for (int i = tid; i < BM * Hp; i += nthreads) {
      const int r = i / Hp, u = i % Hp;
      const bool load = !t.reset && r < rows_here;
      cs[(size_t(l) * BM + r) * Hp + u] = load ? t.c[l * t.c_stride + size_t(row0 + r) * Hp + u] : 0.f;
      hbuf(l, 0)[r * hp + u] =
          load ? static_cast<const unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + u] : (unsigned short)0;
    }

  // This thread's cells: units u, u + 1 of its warp's 8, rows gq, gq + 8, gq + 16, gq + 24
  const int gq = lane >> 2, tq = lane & 3, col0 = warp * 32, u = warp * 8 + tq * 2;
  const auto* w0 = static_cast<const unsigned short*>(t.w0);
  int parity = 0;  // hbuf(l, parity): the state before this step
  for (int k = 0; k < t.steps; ++k) {
    // the step's input, split into hi + lo halves (zero for a step before tick 0 and past the rows)
    for (int i = tid; i < BM * Ip; i += nthreads) {
      const int r = i / Ip, j = i % Ip;
      float v = 0.f;
      if (r < rows_here && j < t.I) {
        const int g = row0 + r;
        if (!t.row_first || k >= t.row_first[g]) v = t.x[size_t(t.row_p0[g] + k) * t.I + j];
      }
      const unsigned short hi = to16<BF16>(v);
      xs[r * xp + j] = hi;
      xs[r * xp + Ip + j] = to16<BF16>(v - from16<BF16>(hi));
    }
    __syncthreads();
    const bool emit = t.emit_every || k == t.steps - 1;
    for (int l = 0; l < L; ++l) {
      float acc[2][4][4] = {};
      const auto* wl = static_cast<const unsigned short*>(t.w[l]);
      const bool from_zero = t.reset && k == 0;  // the recurrent operand is all zeros
      const int Np = t.Np;
      if (l == 0) {
        block_product<BF16>(acc, xs, xp, 2 * Ip, w0, 2 * Ip, 0, Np, ws, col0, tid, lane);
        if (!from_zero) block_product<BF16>(acc, hbuf(0, parity), hp, Hp, wl, Hp, 0, Np, ws, col0, tid, lane);
      } else {
        block_product<BF16>(acc, hbuf(l - 1, 1 - parity), hp, Hp, wl, 2 * Hp, 0, Np, ws, col0, tid, lane);
        if (!from_zero) block_product<BF16>(acc, hbuf(l, parity), hp, Hp, wl, 2 * Hp, Hp, Np, ws, col0, tid, lane);
      }
      // the cells: gate q of unit u + e is acc[mi][q][half * 2 + e]
      unsigned short* hn16 = hbuf(l, 1 - parity);
      const float* bias = t.bias[l];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mi * 16 + gq + half * 8, g = row0 + r;
          const bool valid = r < rows_here && (!t.row_first || k >= t.row_first[g]);
          float* c = cs + (size_t(l) * BM + r) * Hp + u;
          float hn[2] = {0.f, 0.f}, cn[2] = {0.f, 0.f};
          if (valid) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float pre[4];
#pragma unroll
              for (int q = 0; q < 4; ++q) pre[q] = acc[mi][q][half * 2 + e] + (bias ? bias[col0 + q * 8 + tq * 2 + e] : 0.f);
              cn[e] = sigmoid(pre[1]) * c[e] + sigmoid(pre[0]) * tanhf(pre[2]);
              hn[e] = sigmoid(pre[3]) * tanhf(cn[e]);
            }
          }
          c[0] = cn[0], c[1] = cn[1];
          *reinterpret_cast<unsigned*>(hn16 + r * hp + u) = pack2<BF16>(hn[0], hn[1]);
          if (l == L - 1 && emit) h32[r * Hp + u] = hn[0], h32[r * Hp + u + 1] = hn[1];
        }
      __syncthreads();  // this layer's h whole before the next layer (or the head) reads it
    }
    parity = 1 - parity;
    if (emit) {  // the head, a thread an (row, output)
      for (int i = tid; i < rows_here * O; i += nthreads) {
        const int r = i / O, o = i % O;
        const float* hr = h32 + r * Hp;
        const float* wo = t.head_w + size_t(o) * t.H;
        float z = t.head_b ? t.head_b[o] : 0.f;
        for (int j = 0; j < t.H; ++j) z += __ldg(wo + j) * hr[j];
        const long long at = t.emit_every ? (long long)(row0 + r) * t.steps + k : row0 + r;
        t.out[at * O + o] = z;
      }
      // h32 is written again only after the next step's input barrier
    }
  }
  // The state for the chunk after (streaming): every layer's c and this step's h
  for (int l = 0; l < L; ++l)
    for (int i = tid; i < rows_here * Hp; i += nthreads) {
      const int r = i / Hp, uu = i % Hp;
      t.c[l * t.c_stride + size_t(row0 + r) * Hp + uu] = cs[(size_t(l) * BM + r) * Hp + uu];
      static_cast<unsigned short*>(t.h)[l * t.h_stride + size_t(row0 + r) * Hp + uu] = hbuf(l, parity)[r * hp + uu];
    }
}

}  // namespace

cudaError_t prepare_batch_tile_kernels(int device) {
  // as prepare_batch_kernels: loaded now, with the most dynamic shared memory the device gives a block
  int optin = 0;
  if (const cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device); e != cudaSuccess)
    return e;
  for (auto kernel : {batch_tile<false>, batch_tile<true>})
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

bool batch_tile_fits(int Ip, int Hp, int L, int O, int device) {
  if (4 * Hp > kBatchTileMaxNp || Hp % kBatchUnitGroup || Ip % 16 || L < 1 || L > kBatchTileMaxLayers || O < 1) return false;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return tile_smem(Ip, Hp, L).total <= size_t(optin);
}

cudaError_t launch_batch_tile(const BatchTile& t, cudaStream_t stream) {
  if (t.rows <= 0 || t.steps <= 0) return cudaSuccess;
  if (t.Np != 4 * t.Hp || t.Np > kBatchTileMaxNp || t.Hp % kBatchUnitGroup || t.Ip % 16 || t.L < 1 ||
      t.L > kBatchTileMaxLayers)
    return cudaErrorInvalidValue;
  const size_t bytes = tile_smem(t.Ip, t.Hp, t.L).total;  // within the limit prepare_batch_tile_kernels set
  auto kernel = t.bf16 ? batch_tile<true> : batch_tile<false>;
  kernel<<<(t.rows + BM - 1) / BM, t.Np, bytes, stream>>>(t);
  return cudaGetLastError();
}

}  // namespace hotpath::cuda
