// Host entry points of the throughput kernels (lstm_batch.cu): many independent LSTM sequences
// (backtest windows, streaming series, fresh windows) advanced in lockstep, one tensor-core GEMM per
// (step, layer) with the gate math fused into its epilogue. Plain C++ with the CUDA runtime's types.
//
// Layouts (one definition, shared with batch_runner.cpp):
//  - Hp: H rounded up to kBatchUnitGroup; padded units have zero weights and bias, so their c and h
//    stay exactly 0 and feed nothing. Np = 4 Hp.
//  - Gate columns are permuted so that one warp's 32 output columns are the 4 gates (i, f, g, o) of the
//    same 8 units: column n of unit u, gate q is batch_column(u, q) (the epilogue then holds all four
//    gates of a unit in one thread).
//  - Weights: one [Np, K] matrix per GEMM, K contiguous (the mma's "col" B operand). Layer 0's GEMM
//    has K = Hp (W_hh); its input projection P0 = x W_ih^T + b is a separate GEMM over every tick once
//    (shared by all the windows that contain the tick), with x split into hi + lo halves (K = 2 Ip) so
//    that rounding x to 16 bits loses nothing. Layers l > 0: K = 2 Hp, [W_ih | W_hh].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hotpath::cuda {

inline constexpr int kBatchUnitGroup = 32;  // units per GEMM block column (128 gate columns)
inline constexpr int kBatchInputAlign = 32;  // I is padded to this (Ip: whole K tiles)
inline constexpr int kBatchRowTile = 128;    // rows (sequences) per GEMM block

inline int batch_column(int u, int q) { return (u / 8) * 32 + q * 8 + (u % 8); }

// One GEMM: rows x Np = [a1 | a2] (rows x (k1 + k2), 16-bit) times w^T, fp32 accumulation, then
// either a plain store (P0) or the LSTM cell (state update). a2/k2 may be absent (k2 = 0), and so may
// the whole product (k1 = k2 = 0: a step from zero state, only p0 and the bias).
struct BatchGemm {
  const void* a1 = nullptr;
  int lda1 = 0, k1 = 0;
  const void* a2 = nullptr;
  int lda2 = 0, k2 = 0;
  const void* w = nullptr;  // [Np, ldw]: the first k1 + k2 of each row are used
  int ldw = 0;
  int rows = 0, Np = 0;
  bool bf16 = false;
  const float* bias = nullptr;  // [Np] (permuted), may be null
  // plain epilogue: out[r * Np + n] = acc + bias
  float* out = nullptr;
  // LSTM epilogue (out == nullptr)
  const float* p0 = nullptr;       // layer 0: + p0[(row_p0[r] + step) * Np + n]
  const int* row_p0 = nullptr;
  const int* row_first = nullptr;  // a row whose first valid step is past `step` keeps zero state
  int step = 0;
  float* c = nullptr;              // [rows, Hp]
  void* h_out = nullptr;           // [rows, Hp] 16-bit
  float* h32 = nullptr;            // optional fp32 copy of h (the last layer's, for the head)
};
cudaError_t launch_batch_gemm(const BatchGemm& g, cudaStream_t stream);
// The fused chunk (lstm_batch_tile.cu; docs/cuda.md, "The fused chunk kernel"): a block takes
// kBatchTileRows rows and runs every step of every layer and the head itself, h and c kept in shared
// memory from the first step to the last, the weights read from L2 by each warp for its own gate
// columns, the input split into hi + lo halves as it is staged (so P0 is never made). Shapes up to
// kBatchTileMaxNp gate columns and kBatchTileMaxLayers layers; the state is read from c/h at the start
// (unless reset) and written back at the end, so a streaming series carries over to its next chunk.
inline constexpr int kBatchTileRows = 32;
inline constexpr int kBatchTileMaxNp = 512;
inline constexpr int kBatchTileMaxLayers = 4;
struct BatchTile {
  const float* x = nullptr;  // staged ticks [n_in, I], fp32
  int I = 0, Ip = 0, Hp = 0, Np = 0, L = 0, O = 0;
  int rows = 0, steps = 0;
  bool bf16 = false, reset = true, emit_every = false;
  const int* row_p0 = nullptr;     // row r at step k reads staged tick row_p0[r] + k
  const int* row_first = nullptr;  // may be null; a step before row_first[r] keeps zero state
  const void* w0 = nullptr;        // [Np, 2 Ip]: layer 0's W_ih for x's hi and lo halves
  const void* w[kBatchTileMaxLayers] = {};  // layer 0 [Np, Hp] W_hh; l > 0 [Np, 2 Hp] [W_ih | W_hh]
  const float* bias[kBatchTileMaxLayers] = {};  // [Np] permuted, may be null
  float* c = nullptr;     // [L][c_stride] fp32 state, row r at r * Hp
  void* h = nullptr;      // [L][h_stride] 16-bit state, row r at r * Hp
  long long c_stride = 0, h_stride = 0;
  const float* head_w = nullptr;  // [O, H]
  const float* head_b = nullptr;  // [O] or null
  int H = 0;
  float* out = nullptr;  // emit_every: [rows, steps, O]; else [rows, O]
};
// False (nothing launched) when the shape is beyond the kernel's limits or its shared memory beyond the
// device's: the caller uses the per-step GEMMs.
bool batch_tile_fits(int Ip, int Hp, int L, int O, int device);
cudaError_t launch_batch_tile(const BatchTile& t, cudaStream_t stream);
// Called by prepare_batch_kernels (the fused kernel loaded with the rest).
cudaError_t prepare_batch_tile_kernels(int device);

// The fused chunk on a thread-block cluster (lstm_batch_cluster.cu; docs/cuda.md, "The fused chunk kernel on a
// cluster"): the same work as BatchTile, but the cluster's blocks hold the weights in shared memory for the
// whole launch, block r a slice of Np / cluster gate columns, and a tile of 32 x row_groups rows runs through
// every step on the cluster (h exchanged through distributed shared memory, one cluster barrier a layer).
inline constexpr int kBatchClusterMaxThreads = 256;  // 8 warps: up to 255 registers a thread
inline constexpr int kBatchClusterMaxBlocks = 16;  // beyond 8 where the device allows it
struct BatchCluster {
  int cluster = 0;     // blocks a cluster; 0: the shape fits no cluster on this device
  int row_groups = 0;  // 32-row groups a tile
  size_t smem = 0;     // dynamic shared memory a block
  int threads(int Np) const { return Np / cluster / 32 * row_groups * 32; }
  int rows() const { return 32 * row_groups; }
};
// The plan with the most rows x gate columns a block whose shared memory fits and whose cluster is co-resident
// on `device` (the smaller cluster where two tie), or cluster 0. After prepare_batch_kernels on `device` (the
// kernel's shared-memory and cluster-size attributes: without them no plan fits).
BatchCluster batch_cluster_plan(int Ip, int Hp, int L, int O, bool bf16, int device);
cudaError_t launch_batch_cluster(const BatchTile& t, const BatchCluster& plan, cudaStream_t stream);
cudaError_t prepare_batch_cluster_kernels(int device);

// The fused chunk for a few rows (lstm_batch_narrow.cu; docs/cuda.md, "Few rows: the narrow cluster kernel"):
// fresh windows or series by the handful, where the kernels above would spend their tensor cores on empty rows.
// The operands swap: a block's gate columns are the MMA's M side and kBatchNarrowRows rows its N side, so one row
// costs an eighth of the work of the 32-row tile. The weights stay resident across a cluster's blocks as in
// BatchCluster; the layers run as a wavefront (layer l at step k beside layer l + 1 at step k - 1, one warp set a
// layer), one cluster barrier a wavefront step.
inline constexpr int kBatchNarrowRows = 8;
inline constexpr int kBatchNarrowMaxThreads = 512;  // 16 warps: up to 128 registers a thread
struct BatchNarrow {
  int cluster = 0;  // blocks a cluster; 0: the shape fits no cluster on this device
  int ksplit = 1;   // warps a (layer, 32-column group), each a share of K (their partial sums meet in shared memory)
  int clusters = 0;  // clusters co-resident on the device (one wave: clusters x kBatchNarrowRows rows)
  size_t smem = 0;  // dynamic shared memory a block
  int threads(int Np, int L) const { return Np / cluster / 32 * L * ksplit * 32; }
};
// The smallest cluster whose blocks' shared memory holds the shape with `ksplit` warps a group (0: 1) and that
// is co-resident on `device`, or cluster 0. After prepare_batch_kernels on `device`.
BatchNarrow batch_narrow_plan(int Ip, int Hp, int L, int O, bool bf16, int device, int ksplit = 0);
cudaError_t launch_batch_narrow(const BatchTile& t, const BatchNarrow& plan, cudaStream_t stream);
cudaError_t prepare_batch_narrow_kernels(int device);

// Once per device before the first launch there: the GEMM's shared memory beyond 48 KiB, and every
// kernel of the throughput path loaded (lazy loading would load it at its first launch, which waits for
// every running kernel: forever beside persistent tick kernels).
cudaError_t prepare_batch_kernels();

// Arrays already in GPU memory: the smallest index k < n with x[k] NaN or Inf is left in *first (which
// the caller sets to n or more first; an atomicMin), so that a bad input is named before anything runs.
cudaError_t launch_find_nonfinite(const float* x, unsigned long long n, unsigned long long* first, cudaStream_t stream);

// x [rows, I] fp32 -> [rows, Ip] hi and [rows, Ip] lo 16-bit halves (hi + lo = x to ~2^-22), zero pad.
cudaError_t launch_batch_split(const float* x, int rows, int I, int Ip, bool bf16, void* hi, void* lo,
                               cudaStream_t stream);

// out[(r * out_stride + out_offset) * O + o] = head_b[o] + head_w[o, :] . h32[r, :H]
cudaError_t launch_batch_head(const float* h32, int rows, int H, int Hp, int O, const float* head_w,
                              const float* head_b, float* out, long long out_stride, long long out_offset,
                              cudaStream_t stream);

}  // namespace hotpath::cuda
