#pragma once
#include <memory>
#include "backend/backend.hpp"

namespace hotpath {
// The vectorised CPU backend (AVX-512 with an AVX2 fallback chosen at run time).
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options);
}  // namespace hotpath
