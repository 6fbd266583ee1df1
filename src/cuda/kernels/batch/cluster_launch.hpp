// Host side of the throughput path's cluster kernels (lstm_batch_cluster.cu, lstm_batch_narrow.cu): their
// attributes, set once per device, and their launch configuration. Plain C++ with the CUDA runtime's types.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

#include "cuda/kernels/common/lstm_launch.hpp"

namespace hotpath::cuda::batch {

// Each of `kernels` gets the most dynamic shared memory the device gives a block, and clusters beyond the
// portable 8 where the device allows them (elsewhere a plan of such a cluster never fits). Nothing where the
// device has no cluster launch: the planners find no plan there.
inline cudaError_t prepare_cluster_kernels(int device, std::initializer_list<const void*> kernels) {
  int optin = 0, clusters = 0;
  if (const cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device); e != cudaSuccess)
    return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device); e != cudaSuccess) return e;
  if (!clusters) return cudaSuccess;
  for (const void* fn : kernels) {
    if (const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin); e != cudaSuccess)
      return e;
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) (void)cudaGetLastError();
  }
  return cudaSuccess;
}

// The planners' first look: the dynamic shared memory a block may have on `device`, or 0 where the device has no
// cluster launch or the query fails (no plan fits there).
inline size_t cluster_smem_optin(int device) {
  int optin = 0, cluster_launch = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return cluster_launch ? size_t(optin) : 0;
}

// The launch configuration: one definition for every cluster launch (common/lstm_launch.hpp).
using cuda::cluster_launch_config;

}  // namespace hotpath::cuda::batch
