// The device's limits as a launch sees them (kernel_choice.hpp declares them): the CUDA side of the
// kernel choice, apart from the plain-C++ planner.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {

// The limits of the context `stream` launches into: its SMs (a green context or MPS may hold fewer than
// the device has), the device's shared memory per block.
DeviceLimits query_stream_limits(int device, CUstream_st* stream) {
  cudaDeviceProp prop{};
  HOTPATH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceLimits lim;
  lim.sm_count = launch_sm_count(query_stream_sms(stream));
  lim.smem_per_block_optin = int(prop.sharedMemPerBlockOptin);
  int cluster_launch = 0;
  HOTPATH_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
  lim.max_cluster_size = cluster_launch ? max_lstm_cluster_size() : 0;
  lim.name = prop.name;
  lim.warpgroup_registers = prop.major == 9 && built_arch_specific(built_architectures(), prop.major, prop.minor);
  return lim;
}

DeviceLimits query_device_limits(int device) {
  std::string why;
  if (!device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  Stream stream(cudaStreamNonBlocking);
  return query_stream_limits(device, stream.get());
}

}  // namespace hotpath::cuda
