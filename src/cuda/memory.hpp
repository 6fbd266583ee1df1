// Allocation that never waits for running kernels. cudaFree waits until every kernel on the device has
// finished (cudaFreeHost is treated alike); with many instances on one GPU the other
// instances' persistent tick kernels never finish, and closing one engine hung (docs/cuda.md). Device memory is therefore allocated and
// freed in stream order (cudaMallocAsync / cudaFreeAsync on a stream of its own), and pinned host
// memory is kept for reuse by the next allocation of its size instead of being handed back (the process
// holds at most its peak).
#pragma once
#include <cstddef>

struct CUstream_st;

namespace hotpath::cuda {

// The current device's allocation stream (non-blocking, made once, never destroyed).
CUstream_st* allocation_stream();

// Device memory for `bytes` (at least 1), usable by every stream once this returns; free with
// device_free when no kernel uses it any more.
void* device_alloc(size_t bytes);
void device_free(void* p) noexcept;

// Zeroes `bytes` of device memory at `dst` with host-to-device copies of zeros, queued on `stream`
// (the zeros are static: the copies may still be in flight when this returns).
void copy_zeros(void* dst, size_t bytes, CUstream_st* stream);

// Pinned host memory (cudaHostAlloc `flags`), zeroed; a block pinned_free'd earlier with the same size
// and flags is reused first.
void* pinned_alloc(size_t bytes, unsigned flags);
void pinned_free(void* p, size_t bytes, unsigned flags) noexcept;

// The device's address of mapped pinned host memory (pinned_alloc with cudaHostAllocMapped): what a kernel
// polls or writes. Throws as HOTPATH_CUDA_CHECK does.
void* mapped_device_pointer(const void* host);
template <class T>
T* device_view(T* host) {
  return static_cast<T*>(mapped_device_pointer(host));
}

}  // namespace hotpath::cuda
