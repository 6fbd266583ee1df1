// The hybrid backend (docs/hybrid.md): the CPU answers each tick with its critical step, the GPU keeps the
// open windows and delivers the state of the window that completes next into pinned host memory before the
// next tick needs it. The CPU half is the cpu backend fed by a WindowStateFeed (cpu/window_feed.hpp), the GPU
// half cuda::HybridPrecompute; this folder joins them.
#pragma once
#include <memory>

#include "backend/backend.hpp"
#include "model/model.hpp"

namespace hotpath {

// Window or streaming mode; precision fp32, bf16 or int8 (the CPU critical step's; the GPU's precompute keeps
// fp32 weights). options.gpu: the device and the timeout a tick waits for its state; options.cpuset: its first
// core(s) run the critical step, none precomputes. Throws UnsupportedError naming why it cannot run here (no
// GPU, a model the precompute blocks cannot hold, a build without CUDA).
std::unique_ptr<Backend> make_hybrid_backend(const Model& model, const BackendOptions& options);

}  // namespace hotpath
