#pragma once
#include <memory>
#include "backend/backend.hpp"

namespace hotpath {
// The float64 reference behind the Backend interface ("ref"): every tick is computed in float64 with
// the incremental window reference; precompute is empty (all work happens in step).
std::unique_ptr<Backend> make_reference_backend(const Model& model, const BackendOptions& options);
}  // namespace hotpath
