#pragma once
#include <memory>
#include "backend/backend.hpp"

namespace hotpath {
// The persistent-kernel CUDA backend. Throws UnsupportedError when there is no usable CUDA device or
// the model does not fit the kernel.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options);
}  // namespace hotpath
