// Host entry points of the kernel families (implemented in the .cu files). Plain C++ with the CUDA
// runtime's types.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/kernels/common/lstm_params.hpp"
#include "cuda/kernels/common/mailbox_layout.hpp"

namespace hotpath::cuda {

// A cooperative launch of `fn` (one kernel argument, `arg`) when its grid fits: co-resident blocks where this
// stream's work runs are this kernel's occupancy x the SMs of the stream's context (a green context or MPS may
// hold fewer than the device); else cudaErrorCooperativeLaunchTooLarge, *max_coresident (if given) saying how
// many fit. Every persistent family's launch goes through it (defined in cta/lstm_cta.cu).
cudaError_t cooperative_launch(const void* fn, long long grid, int threads, int smem_bytes, void* arg, cudaStream_t stream,
                               long long* max_coresident);

// A launch of `blocks` blocks of `threads` in thread-block clusters of `cluster` along x, `smem` bytes of dynamic
// shared memory a block: the cluster dimension in attrs[0], cfg pointing at attrs with that one attribute (a form
// that needs more sets them after it and counts them in cfg.numAttrs).
template <size_t N>
inline void cluster_launch_config(unsigned blocks, unsigned threads, size_t smem, int cluster, cudaStream_t stream,
                                  cudaLaunchConfig_t& cfg, cudaLaunchAttribute (&attrs)[N]) {
  static_assert(N >= 1);
  attrs[0] = cudaLaunchAttribute{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(cluster);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  cfg = cudaLaunchConfig_t{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = 1;
}

// The same launch made cooperative (every block co-resident: the persistent kernels' grid-wide waits); its
// co-residency is then counted in whole clusters (cudaOccupancyMaxActiveClusters: they stay inside a GPC).
inline void cooperative_cluster_config(unsigned grid, unsigned threads, size_t smem, int cluster, cudaStream_t stream,
                                       cudaLaunchConfig_t& cfg, cudaLaunchAttribute (&attrs)[2]) {
  cluster_launch_config(grid, threads, smem, cluster, stream, cfg, attrs);
  attrs[1] = cudaLaunchAttribute{};
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  cfg.numAttrs = 2;
}

// Cooperative launch of the persistent LSTM kernel (block 0 critical, 1..np precompute) into `stream`.
// Fails with cudaErrorCooperativeLaunchTooLarge when the grid cannot be co-resident in the stream's
// context (the kernel's occupancy per SM x that context's SMs); *max_coresident (if given) receives the
// number of blocks that could be. params.stall_tick >= 0 selects the test-only kernels with the stall
// hook (fp16 only; cudaErrorInvalidValue otherwise).
cudaError_t launch_lstm(const LstmParams& params, cudaStream_t stream, long long* max_coresident = nullptr);

// One cooperative launch serving m.count instances of `plan`'s model (MultiLaunch, lstm_params.hpp),
// every instance parked until the host raises its generation. cta family only (cudaErrorInvalidValue
// otherwise); cudaErrorCooperativeLaunchTooLarge (and *max_coresident) as launch_lstm.
cudaError_t launch_lstm_multi(const LstmParams& plan, const MultiLaunch& m, cudaStream_t stream,
                              long long* max_coresident = nullptr);

// The cluster family (cluster/lstm_cluster.cu) and the grid family (grid/lstm_grid.cu); launch_lstm
// forwards to them. A cluster plan's kernel must be compiled (ClusterPolicy::reg_slots): else
// cudaErrorInvalidValue.
cudaError_t launch_lstm_cluster(const LstmParams& params, cudaStream_t stream, long long* max_coresident);
cudaError_t launch_lstm_grid(const LstmParams& params, cudaStream_t stream, long long* max_coresident);
// The blocks of the multi-block kernel for `params` (cluster or grid family) that can be co-resident where
// `stream` runs (clusters stay inside one GPC: fewer may fit than the SMs suggest).
cudaError_t multiblock_max_coresident(const LstmParams& params, cudaStream_t stream, long long* fits);
cudaError_t cluster_max_coresident(const LstmParams& params, cudaStream_t stream, long long* fits);
cudaError_t grid_max_coresident(const LstmParams& params, cudaStream_t stream, long long* fits);

// Loads every production tick kernel of each family on the current device (a query loads a lazily loaded
// kernel). CUDA loads kernels at their first use by default, and a load waits for the kernels running
// in the context: a tick kernel of another shape started beside a running persistent one (a live swap's
// next model) would wait forever. Call before any persistent kernel starts. The test-only stall kernels
// are left out.
cudaError_t preload_cta_kernels();
cudaError_t preload_cluster_kernels();
cudaError_t preload_grid_kernels();

// The largest thread-block cluster the cluster kernel can be launched with on the current device (16
// where non-portable sizes are allowed, else 8).
int max_lstm_cluster_size();

// The ping-pong kernel: the LSTM kernel's input and output path with no model; it answers each tick
// with {seq, x[0], x[n-1]} and {seq, xor of all input bits} in two output chunks.
struct PingPongParams {
  MailboxView mb;
  int floats = 32;
  int load_kind = 0;  // 0: ld.volatile.v4, 1: ld.relaxed.sys.v4
  // 1: one warp polls (lane c <-> chunk c, n_in <= 32, one poll set) and answers: the regs variant's
  // path. 0: poller warps hand the chunks to a responder warp through shared memory: the smem variant's.
  int single_warp = 0;
};
cudaError_t launch_pingpong(const PingPongParams& params, cudaStream_t stream);

}  // namespace hotpath::cuda
