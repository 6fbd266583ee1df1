// Tensor-core building blocks of the throughput kernels (lstm_batch.cu, lstm_batch_tile.cu, lstm_batch_cluster.cu,
// lstm_batch_narrow.cu): cp.async, the cluster barrier, stores into a peer's shared memory and the head's two
// halves, ldmatrix, mma.sync m16n8k16 with fp32 accumulation, 16-bit packing and rounding, the cell's sigmoid.
// Device code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace hotpath::cuda::batch {

__device__ __forceinline__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  // src-size 0 fills the 16 bytes with zeros (rows past the end)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  // src-size 0 fills the 4 bytes with zero (a row past the end, a step before its window's first)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

// The cluster forms' pieces (lstm_batch_cluster.cu, lstm_batch_narrow.cu).
// The cluster barrier in its two halves: the arrival releases this thread's stores (distributed shared memory
// included), the wait acquires every peer's.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// A 32-bit store into block `rank`'s copy of this block's shared-memory address `local` (the cluster window's
// own form: no generic address to resolve).
__device__ __forceinline__ void st_cluster_u32(unsigned local, unsigned rank, unsigned v) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n st.shared::cluster.u32 [remote], %2;\n}\n" ::"r"(local),
      "r"(rank), "r"(v)
      : "memory");
}

// A block's slice into shared memory at `pitch`: columns [0, K) of rows [r0, r0 + n) of a matrix whose rows are
// ld apart (K and ld multiples of 8).
__device__ __forceinline__ void load_slice(unsigned short* dst, int pitch, const unsigned short* src, int ld, int K, int r0,
                                           int n, int tid, int nthreads) {
  const int per_row = K / 8;
  for (int i = tid; i < n * per_row; i += nthreads) {
    const int r = i / per_row, v = i % per_row;
    *reinterpret_cast<uint4*>(dst + size_t(r) * pitch + v * 8) =
        __ldg(reinterpret_cast<const uint4*>(src + size_t(r0 + r) * ld) + v);
  }
}

// The head on a cluster, in two halves around a cluster barrier. First, before it, the block's share of every
// output for rows [0, rows): its units [u0, u0 + n) of h (fp32, rows `up` apart) against head_w [O, H]'s columns
// (n <= 0: a block of padding units only, its share zero), into part [rows][O].
__device__ __forceinline__ void head_share(float* part, const float* h32, int up, const float* head_w, int H, int u0, int n,
                                           int rows, int O, int tid, int nthreads) {
  for (int i = tid; i < rows * O; i += nthreads) {
    const int r = i / O, o = i % O;
    const float* hr = h32 + r * up;
    const float* wo = head_w + size_t(o) * H + min(u0, H);
    float z = 0.f;
    for (int j = 0; j < n; ++j) z = fmaf(__ldg(wo + j), hr[j], z);
    part[r * O + o] = z;
  }
}
// Then, after it, the C blocks' shares (`part` at the same address in each) added in rank order to the bias, rows
// split among the blocks: row r of the tile is row0 + r of out, [rows, steps, O] at step k with emit_every, else
// [rows, O].
template <class Cluster>
__device__ __forceinline__ void head_sum(const Cluster& cluster, float* part, int rows, int O, const float* head_b,
                                         float* out, bool emit_every, int steps, int k, int row0, int rank, int C,
                                         int tid, int nthreads) {
  for (int i = rank * nthreads + tid; i < rows * O; i += C * nthreads) {
    const int r = i / O, o = i % O;
    float z = head_b ? head_b[o] : 0.f;
    for (int peer = 0; peer < C; ++peer) z += *cluster.map_shared_rank(part + r * O + o, unsigned(peer));
    const long long at = emit_every ? (long long)(row0 + r) * steps + k : row0 + r;
    out[at * O + o] = z;
  }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// One warp's 32 x 32 output tile over one k16 step, both operands in shared memory (rows of 16-bit values,
// pitches of K + 8 so ldmatrix's eight rows sit on distinct banks): the A fragments of rows [0, 32) from `a`
// (column k0 of row 0), the B fragments of columns [0, 32) from `b` (B stored as [column][K], column k0 of
// column 0), then acc[mi][q] (rows 16 mi.., columns 8 q..) += A B^T.
__device__ __forceinline__ void load_a32(unsigned (&af)[2][4], const unsigned short* a, int lda, int lane) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(af[mi], a + (mi * 16 + (lane & 15)) * lda + (lane >> 4) * 8);
}
__device__ __forceinline__ void load_b32(unsigned (&bf)[2][4], const unsigned short* b, int ldb, int lane) {
#pragma unroll
  for (int nj = 0; nj < 2; ++nj) ldmatrix_x4(bf[nj], b + (nj * 16 + (lane & 7) + (lane >> 4) * 8) * ldb + ((lane >> 3) & 1) * 8);
}
template <bool BF16>
__device__ __forceinline__ void mma_32x32(float (&acc)[2][4][4], const unsigned (&af)[2][4], const unsigned (&bf)[2][4]) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int q = 0; q < 4; ++q) mma16816<BF16>(acc[mi][q], af[mi], bf[q >> 1][(q & 1) * 2], bf[q >> 1][(q & 1) * 2 + 1]);
}

template <bool BF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
  }
}

// One value in the 16-bit type and back (the inputs' hi and lo halves: lo = x - hi, rounded).
template <bool BF16>
__device__ __forceinline__ unsigned short to16(float v) {
  if constexpr (BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}
template <bool BF16>
__device__ __forceinline__ float from16(unsigned short v) {
  if constexpr (BF16) return __bfloat162float(__ushort_as_bfloat16(v));
  else return __half2float(__ushort_as_half(v));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

}  // namespace hotpath::cuda::batch
