// Move-only owners of CUDA runtime resources: a constructor that throws part-way leaks nothing (the
// members built so far free themselves), and release() hands a resource over for deliberate leaking
// (memory a kernel that would not stop may still touch).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/memory.hpp"

namespace hotpath::cuda {

class Stream {
 public:
  Stream() = default;
  explicit Stream(unsigned flags) { HOTPATH_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, flags)); }
  // Takes ownership of a stream made elsewhere (e.g. an SM partition's).
  static Stream adopt(cudaStream_t s) {
    Stream out;
    out.s_ = s;
    return out;
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // Safe with work still queued: the runtime frees the stream once that work is done.
  ~Stream() {
    if (s_) HOTPATH_CUDA_CHECK_NOTHROW(cudaStreamDestroy(s_));
  }
  cudaStream_t get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  // Polls (every `poll`) until the stream's work is done or `limit` has passed: false while it still runs (a
  // persistent kernel that did not leave when asked). Clears the sticky runtime error either way.
  bool finish_within(std::chrono::nanoseconds limit, std::chrono::microseconds poll = std::chrono::microseconds(50)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    cudaError_t e;
    while ((e = cudaStreamQuery(s_)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(poll);
    (void)cudaGetLastError();
    return e != cudaErrorNotReady;
  }

 private:
  cudaStream_t s_ = nullptr;
};

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Stream-ordered (cuda/memory.hpp): freeing never waits for other engines' running kernels.
  explicit DeviceBuffer(size_t n) : count_(n) { ptr_ = static_cast<T*>(device_alloc(std::max<size_t>(n, 1) * sizeof(T))); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    device_free(ptr_);
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  // Gives up ownership without freeing (the memory stays allocated until the process ends).
  T* release() {
    count_ = 0;
    return std::exchange(ptr_, nullptr);
  }
  void upload(const T* src, size_t n, cudaStream_t s) {
    HOTPATH_CUDA_CHECK(cudaMemcpyAsync(ptr_, src, n * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  void zero(cudaStream_t s) { HOTPATH_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, std::max<size_t>(count_, 1) * sizeof(T), s)); }
  // Zeroes by copies from host zeros (a copy engine), for SMs that a running kernel holds.
  void zero_by_copy(cudaStream_t s) { copy_zeros(ptr_, std::max<size_t>(count_, 1) * sizeof(T), s); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace hotpath::cuda
