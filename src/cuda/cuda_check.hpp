// CUDA runtime error handling: one throwing macro (clears the sticky error first so the message is the
// call's own) and a noexcept twin for destructors.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "util/error.hpp"

namespace hotpath::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace hotpath::cuda

#define HOTPATH_CUDA_CHECK(call)                                      \
  do {                                                                \
    const cudaError_t hotpath_err_ = (call);                          \
    if (hotpath_err_ != cudaSuccess) ::hotpath::cuda::throw_cuda(hotpath_err_, #call); \
  } while (0)

#define HOTPATH_CUDA_CHECK_NOTHROW(call) \
  do {                                   \
    if ((call) != cudaSuccess) (void)cudaGetLastError(); \
  } while (0)
