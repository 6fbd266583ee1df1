// The throughput kernels (layouts in lstm_batch.hpp): a 128 x 128 x 32 tensor-core GEMM (mma.sync
// m16n8k16, ldmatrix, 3-stage cp.async pipeline) whose epilogue is either a plain store or the LSTM
// cell, so that gate pre-activations never leave the SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/kernels/batch/batch_mma.cuh"
#include "cuda/kernels/batch/lstm_batch.hpp"
#include "cuda/kernels/fresh/lstm_fresh.hpp"

namespace hotpath::cuda {
namespace {

using namespace batch;

constexpr int BM = kBatchRowTile, BN = 4 * kBatchUnitGroup, BK = 32, STAGES = 3;
constexpr int PITCH = BK + 8;  // halves per smem row: 80 bytes, ldmatrix rows fall on distinct banks
constexpr int THREADS = 256;   // 8 warps: 2 (rows) x 4 (columns), 64 x 32 each
constexpr size_t SMEM_BYTES = size_t(STAGES) * 2 * BM * PITCH * 2;
static_assert(BM == 128 && BN == 128, "the warp layout below assumes 128 x 128 blocks");

template <bool BF16>
__global__ void __launch_bounds__(THREADS) batch_gemm(const BatchGemm g) {
  extern __shared__ __align__(16) unsigned short smem[];
  unsigned short* As = smem;                         // [STAGES][BM][PITCH]
  unsigned short* Bs = smem + STAGES * BM * PITCH;   // [STAGES][BN][PITCH]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int row0 = blockIdx.x * BM, col0 = blockIdx.y * BN;
  const int K = g.k1 + g.k2, KT = K / BK;
  const auto* a1 = static_cast<const unsigned short*>(g.a1);
  const auto* a2 = static_cast<const unsigned short*>(g.a2);
  const auto* w = static_cast<const unsigned short*>(g.w);

  // Each thread copies 2 16-byte chunks of A and 2 of B per stage (128 rows x 4 chunks each).
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * BK;
    const bool first = k0 < g.k1;
    const unsigned short* abase = first ? a1 : a2;
    const int lda = first ? g.lda1 : g.lda2, ka = first ? k0 : k0 - g.k1;
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + i * THREADS, r = chunk >> 2, kc = (chunk & 3) * 8;
      const int grow = row0 + r;
      const bool ok = grow < g.rows;
      cp_async16(As + (stage * BM + r) * PITCH + kc, abase + size_t(ok ? grow : 0) * lda + ka + kc, ok);
      cp_async16(Bs + (stage * BN + r) * PITCH + kc, w + size_t(col0 + r) * g.ldw + k0 + kc, true);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int nk = kt + STAGES - 1;
    if (nk < KT) load_stage(nk % STAGES, nk);
    cp_async_commit();
    const unsigned short* as = As + (kt % STAGES) * BM * PITCH;
    const unsigned short* bs = Bs + (kt % STAGES) * BN * PITCH;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned af[4][4], bf[2][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        ldmatrix_x4(af[mi], as + (wm * 64 + mi * 16 + (lane & 15)) * PITCH + kk + (lane >> 4) * 8);
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
        ldmatrix_x4(bf[nj], bs + (wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8) * PITCH + kk + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int q = 0; q < 4; ++q) mma16816<BF16>(acc[mi][q], af[mi], bf[q >> 1][(q & 1) * 2], bf[q >> 1][(q & 1) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  // Plain (P0 rows, the bias folded in), or the LSTM cell: this thread holds gates i, f, g, o (q = 0..3)
  // of units u, u + 1 for 8 rows.
  const int gq = lane >> 2, tq = lane & 3;
  const int Hp = g.Np / 4;
  const int u = (col0 + wn * 32) / 4 + tq * 2;
  auto* hout = static_cast<unsigned*>(g.h_out);
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + wm * 64 + mi * 16 + gq + half * 8;
      if (r >= g.rows) continue;
      if (g.out) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int n = col0 + wn * 32 + q * 8 + tq * 2;
          float2 v{acc[mi][q][half * 2], acc[mi][q][half * 2 + 1]};
          if (g.bias) v.x += g.bias[n], v.y += g.bias[n + 1];
          *reinterpret_cast<float2*>(g.out + size_t(r) * g.Np + n) = v;
        }
        continue;
      }
      const size_t si = size_t(r) * Hp + u;
      float2 cn{0.f, 0.f}, hn{0.f, 0.f};
      if (!g.row_first || g.step >= g.row_first[r]) {
        float pre[4][2];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int n = col0 + wn * 32 + q * 8 + tq * 2;
          pre[q][0] = acc[mi][q][half * 2];
          pre[q][1] = acc[mi][q][half * 2 + 1];
          if (g.bias) pre[q][0] += g.bias[n], pre[q][1] += g.bias[n + 1];
          if (g.p0) {
            const float2 p = *reinterpret_cast<const float2*>(g.p0 + size_t(g.row_p0[r] + g.step) * g.Np + n);
            pre[q][0] += p.x, pre[q][1] += p.y;
          }
        }
        const float2 c = *reinterpret_cast<const float2*>(g.c + si);
        cn.x = sigmoid(pre[1][0]) * c.x + sigmoid(pre[0][0]) * tanhf(pre[2][0]);
        cn.y = sigmoid(pre[1][1]) * c.y + sigmoid(pre[0][1]) * tanhf(pre[2][1]);
        hn.x = sigmoid(pre[3][0]) * tanhf(cn.x);
        hn.y = sigmoid(pre[3][1]) * tanhf(cn.y);
      }
      *reinterpret_cast<float2*>(g.c + si) = cn;
      hout[si / 2] = pack2<BF16>(hn.x, hn.y);
      if (g.h32) *reinterpret_cast<float2*>(g.h32 + si) = hn;
    }
}

template <bool BF16>
__global__ void batch_split(const float* x, int rows, int I, int Ip, unsigned short* hi, unsigned short* lo) {
  const long long n = (long long)rows * Ip;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int r = int(i / Ip), k = int(i % Ip);
    const float v = k < I ? x[(long long)r * I + k] : 0.f;
    if constexpr (BF16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
      hi[i] = __bfloat16_as_ushort(h);
      lo[i] = __bfloat16_as_ushort(l);
    } else {
      const __half h = __float2half_rn(v);
      const __half l = __float2half_rn(v - __half2float(h));
      hi[i] = __half_as_ushort(h);
      lo[i] = __half_as_ushort(l);
    }
  }
}

// One warp per row.
__global__ void batch_head(const float* h32, int rows, int H, int Hp, int O, const float* head_w, const float* head_b,
                           float* out, long long out_stride, long long out_offset) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const float* h = h32 + size_t(r) * Hp;
  for (int o = 0; o < O; ++o) {
    float s = 0.f;
    for (int j = lane; j < H; j += 32) s += head_w[size_t(o) * H + j] * h[j];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
    if (lane == 0) out[((long long)r * out_stride + out_offset) * O + o] = s + (head_b ? head_b[o] : 0.f);
  }
}

}  // namespace

cudaError_t launch_batch_gemm(const BatchGemm& g, cudaStream_t stream) {
  if (g.rows <= 0) return cudaSuccess;
  if ((g.k1 % BK) || (g.k2 % BK) || (g.Np % BN) || g.k1 < 0 || g.k2 < 0 || g.ldw < g.k1 + g.k2 || (g.ldw % 8))
    return cudaErrorInvalidValue;
  auto kernel = g.bf16 ? batch_gemm<true> : batch_gemm<false>;
  const dim3 grid((g.rows + BM - 1) / BM, g.Np / BN);
  kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(g);
  return cudaGetLastError();
}

// Grid-stride over x; each thread keeps the first bad index it saw (its indices only grow), one atomicMin
// a thread at the end.
__global__ void find_nonfinite(const float* __restrict__ x, unsigned long long n, unsigned long long* first) {
  unsigned long long mine = ~0ull;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += step)
    if (!isfinite(__ldg(x + k))) {
      mine = k;
      break;
    }
  if (mine != ~0ull) atomicMin(first, mine);
}

cudaError_t prepare_batch_kernels() {
  for (auto kernel : {batch_gemm<false>, batch_gemm<true>}) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM_BYTES));
    if (e != cudaSuccess) return e;
  }
  // Every other kernel of the throughput path is loaded now too (a query loads a lazily loaded kernel):
  // loading one while persistent tick kernels run waits for them forever (a backtest beside live
  // instances hung in cuKernelGetFunction).
  cudaFuncAttributes a{};
  for (const void* kernel : {(const void*)batch_split<false>, (const void*)batch_split<true>, (const void*)batch_head,
                             (const void*)find_nonfinite}) {
    const cudaError_t e = cudaFuncGetAttributes(&a, kernel);
    if (e != cudaSuccess) return e;
  }
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = prepare_batch_tile_kernels(device); e != cudaSuccess) return e;
  if (const cudaError_t e = prepare_batch_cluster_kernels(device); e != cudaSuccess) return e;
  if (const cudaError_t e = prepare_batch_narrow_kernels(device); e != cudaSuccess) return e;
  return prepare_fresh_kernels(device);
}

cudaError_t launch_batch_split(const float* x, int rows, int I, int Ip, bool bf16, void* hi, void* lo,
                               cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const long long n = (long long)rows * Ip;
  const int blocks = int(std::min<long long>((n + 255) / 256, 4096));
  auto* h = static_cast<unsigned short*>(hi);
  auto* l = static_cast<unsigned short*>(lo);
  if (bf16) batch_split<true><<<blocks, 256, 0, stream>>>(x, rows, I, Ip, h, l);
  else batch_split<false><<<blocks, 256, 0, stream>>>(x, rows, I, Ip, h, l);
  return cudaGetLastError();
}

cudaError_t launch_find_nonfinite(const float* x, unsigned long long n, unsigned long long* first, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = int(std::min<unsigned long long>((n + 255) / 256, 4096));
  find_nonfinite<<<blocks, 256, 0, stream>>>(x, n, first);
  return cudaGetLastError();
}

cudaError_t launch_batch_head(const float* h32, int rows, int H, int Hp, int O, const float* head_w,
                              const float* head_b, float* out, long long out_stride, long long out_offset,
                              cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kWarps = 8;
  batch_head<<<(rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(h32, rows, H, Hp, O, head_w, head_b, out,
                                                                       out_stride, out_offset);
  return cudaGetLastError();
}

}  // namespace hotpath::cuda
