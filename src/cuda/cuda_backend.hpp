#pragma once
#include <memory>

#include "backend/backend.hpp"
#include "cuda/device.hpp"

namespace hotpath {

// Tuning and test hooks of the CUDA backend beyond BackendOptions. Defaults are the measured winners.
struct CudaOptions {
  cuda::MailboxOptions mailbox;
  double lease_ms = 1000;         // the kernel stops when the heartbeat has been silent this long
  double heartbeat_ms = 20;       // host heartbeat period (a background thread)
  double start_timeout_ms = 20000;  // launch + weight load + first precompute round
  int max_precompute_blocks = 0;  // 0: one per SM beside the critical block
  bool forward_after_output = false;  // start the precompute only once the answer is out
  int gate_sleep_ns = 0;              // pollers nap while the consumer is busy
  bool keep_warm = false;             // compute warps wait issuing dummy mma: no gain measured (docs/cuda.md)
  // Test hooks.
  long long stall_tick = -1;      // the kernel stalls stall_us before answering this tick (0-based)
  double stall_us = 0;
  bool heartbeat = true;          // false: never renew the lease (tests its expiry)
};

// The persistent-kernel CUDA backend. Throws UnsupportedError when there is no usable CUDA device or
// the model does not fit the kernel.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options);
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options, const CudaOptions& cuda);

}  // namespace hotpath
