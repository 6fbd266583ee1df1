// The hybrid backend's GPU half (docs/hybrid.md): the precompute blocks every tick kernel shares
// (common/precompute.cuh), launched alone, advance the open windows by each tick's input and publish the state
// of the window that completes next into mapped host memory in the CPU critical step's layout
// (LstmParams::export_*); one more block's first warp feeds them: it takes tick t's input from the mailbox's
// ring (sent by the CPU after it answered tick t), hands it on once round t - 1 is published, and watches the
// host's stop request and heartbeat lease. Nothing on the GPU answers a tick.
#pragma once
#include <cuda_runtime.h>

#include "cuda/kernels/common/lstm_params.hpp"

namespace hotpath::cuda {

inline constexpr int kHybridThreads = 512;  // a block's threads (the precompute loops take any multiple of 32)

// The blocks launched: p.np precompute blocks and the feeder block (block np), rounded up to whole clusters of
// p.hy_cluster (the blocks past the feeder leave at once).
inline long long hybrid_grid(const LstmParams& p) {
  const long long cs = p.hy_cluster > 1 ? p.hy_cluster : 1;
  return (p.np + 1 + cs - 1) / cs * cs;
}

// Cooperative launch of p.np precompute blocks and the feeder block into `stream` (the plan's p.smem_bytes a
// block; in clusters of p.hy_cluster where that is > 1); cudaErrorCooperativeLaunchTooLarge (and
// *max_coresident) when they cannot all be co-resident, cudaErrorInvalidValue for parameters without an export.
cudaError_t launch_hybrid(const LstmParams& p, cudaStream_t stream, long long* max_coresident = nullptr);

}  // namespace hotpath::cuda
