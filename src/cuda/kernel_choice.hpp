// Which persistent-kernel family serves a model: one SM (cta), one thread-block cluster exchanging
// hidden states through distributed shared memory (cluster), or blocks on most SMs exchanging them
// through L2 (grid). Chosen from the model's size and the device's queried limits; plain C++, tested
// without a GPU.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.hpp"
#include "cuda/lstm_plan.hpp"
#include "model/model.hpp"

struct CUstream_st;

namespace hotpath::cuda {

const char* family_name(KernelFamily family);
// The family an option asks for (backend/options.hpp); auto: nullopt (choose).
std::optional<KernelFamily> requested_family(CudaKernel kernel);

struct KernelChoice {
  KernelFamily family = KernelFamily::cta;
  std::string why;  // one line: why this family serves the model (and why the smaller ones do not)
  LstmPlan plan;    // what the backend launches
};

// The requested family, or (nullopt) the smallest that holds the model: cta, then cluster, then grid.
// cluster_blocks: the cluster family's size (0: its planner's choice). Throws UnsupportedError with the
// reason when the requested family, or none, can serve it.
KernelChoice choose_kernel(const Model& model, Precision precision, Mode mode, int window,
                           const MailboxOptions& mailbox, const DeviceLimits& limits,
                           std::optional<KernelFamily> requested, int max_precompute_blocks = 0,
                           int cluster_blocks = 0, const GridPlanOptions& grid = {});

// The limits a launch into `stream` (on `device`) sees: the SMs of its context (a green context or MPS
// may hold fewer than the device), the device's shared memory per block, the largest cluster.
DeviceLimits query_stream_limits(int device, CUstream_st* stream);
// The limits of `device` as a launch into a new stream there sees them (cluster size: the largest the
// multi-block kernel may be launched with, non-portable sizes included where the device allows them).
// Throws UnsupportedError when there is no usable CUDA device.
DeviceLimits query_device_limits(int device);

}  // namespace hotpath::cuda
