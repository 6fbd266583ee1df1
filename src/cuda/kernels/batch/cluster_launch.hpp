// Host side of the throughput path's cluster kernels (lstm_batch_cluster.cu, lstm_batch_narrow.cu): their
// attributes, set once per device, and their launch configuration. Plain C++ with the CUDA runtime's types.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

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

// A launch of `blocks` blocks of `threads` in clusters of `cluster` along x, `smem` bytes of dynamic shared
// memory a block; cfg points into attr.
inline void cluster_launch_config(unsigned blocks, unsigned threads, size_t smem, int cluster, cudaStream_t stream,
                                  cudaLaunchConfig_t& cfg, cudaLaunchAttribute (&attr)[1]) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg = cudaLaunchConfig_t{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
}

}  // namespace hotpath::cuda::batch
