// Host entry points of the kernel families (implemented in the .cu files). Plain C++ with the CUDA
// runtime's types.
#pragma once
#include <cuda_runtime.h>

#include "cuda/kernels/lstm_params.hpp"
#include "cuda/kernels/mailbox_layout.hpp"

namespace hotpath::cuda {

// Cooperative launch of the persistent LSTM kernel (block 0 critical, 1..np precompute). Fails with
// cudaErrorCooperativeLaunchTooLarge when the grid cannot be co-resident; *max_coresident (if given)
// receives the number of blocks that could be.
cudaError_t launch_lstm(const LstmParams& params, cudaStream_t stream, int* max_coresident = nullptr);

// The ping-pong kernel: the same pollers and service warp as the LSTM kernel, and one responder warp
// that answers each tick with {seq, x[0], x[n-1], xor of all input bits} in one output chunk.
struct PingPongParams {
  MailboxView mb;
  int floats = 32;
  int load_kind = 0;  // 0: ld.volatile.v4, 1: ld.relaxed.sys.v4
};
cudaError_t launch_pingpong(const PingPongParams& params, cudaStream_t stream);

}  // namespace hotpath::cuda
