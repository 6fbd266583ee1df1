// The cluster family's shape (kernels/cluster/lstm_cluster.cu): tuned constants in one place, visible
// to the host's planner (cuda/lstm_plan.cpp) and to the kernel.
#pragma once

namespace hotpath::cuda {

struct ClusterPolicy {
  // Compute warps of a critical block: 16 warps (512 threads) keep <= 4 warps per SM sub-partition, so a
  // thread may hold 128 registers; a block's gpb unit groups x ksplit k-shares fill them.
  static constexpr int warps = 16;
  // Register instantiations: W_ih tiles (two m16 tiles of one k16 column, 8 registers) a warp holds for
  // the life of the kernel; a warp's tiles beyond the largest come from shared memory each tick.
  static constexpr int reg_slots[] = {2, 4, 6, 8};
  static constexpr int max_reg_slots = 8;
  // Blocks of a cluster: the largest the hardware launches (16 on Hopper with the non-portable size).
  static constexpr int max_blocks = 16;
  // A cluster of one block is the cta family (and a block storing into itself through the cluster window
  // needs a peer: compute-sanitizer refuses it in a one-block cluster).
  static constexpr int min_blocks = 2;
};

}  // namespace hotpath::cuda
