#include "cuda/memory.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace hotpath::cuda {
namespace {

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

CUstream_st* allocation_stream() {
  int device = 0;
  HOTPATH_CUDA_CHECK(cudaGetDevice(&device));
  static std::map<int, cudaStream_t> streams;
  std::lock_guard lock(mutex());
  cudaStream_t& s = streams[device];
  if (!s) HOTPATH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void* device_alloc(size_t bytes) {
  cudaStream_t s = allocation_stream();
  void* p = nullptr;
  HOTPATH_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 1), s));
  const cudaError_t e = cudaStreamSynchronize(s);  // usable from any stream from here on
  if (e != cudaSuccess) {
    (void)cudaFreeAsync(p, s);
    throw_cuda(e, "cudaStreamSynchronize (allocation)");
  }
  return p;
}

void device_free(void* p) noexcept {
  if (!p) return;
  try {
    HOTPATH_CUDA_CHECK_NOTHROW(cudaFreeAsync(p, allocation_stream()));
  } catch (...) {
  }
}

void copy_zeros(void* dst, size_t bytes, CUstream_st* stream) {
  static const std::vector<char> zeros(size_t(1) << 16, 0);
  for (size_t off = 0; off < bytes; off += zeros.size()) {
    const size_t n = std::min(zeros.size(), bytes - off);
    HOTPATH_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, zeros.data(), n, cudaMemcpyHostToDevice, stream));
  }
}

namespace {
// Freed pinned blocks by (bytes, flags), for reuse.
std::map<std::pair<size_t, unsigned>, std::vector<void*>>& spare_pinned() {
  static std::map<std::pair<size_t, unsigned>, std::vector<void*>> m;
  return m;
}
}  // namespace

void* pinned_alloc(size_t bytes, unsigned flags) {
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  {
    std::lock_guard lock(mutex());
    auto& spare = spare_pinned()[{bytes, flags}];
    if (!spare.empty()) {
      p = spare.back();
      spare.pop_back();
    }
  }
  if (!p) HOTPATH_CUDA_CHECK(cudaHostAlloc(&p, bytes, flags));
  std::memset(p, 0, bytes);
  return p;
}

void* mapped_device_pointer(const void* host) {
  void* d = nullptr;
  HOTPATH_CUDA_CHECK(cudaHostGetDevicePointer(&d, const_cast<void*>(host), 0));
  return d;
}

void pinned_free(void* p, size_t bytes, unsigned flags) noexcept {
  if (!p) return;
  try {
    std::lock_guard lock(mutex());
    spare_pinned()[{std::max<size_t>(bytes, 1), flags}].push_back(p);
  } catch (...) {
    // out of memory for the list: the block stays pinned until the process ends
  }
}

}  // namespace hotpath::cuda
