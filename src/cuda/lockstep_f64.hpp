// Many float64 streaming states stepped together on a GPU (reference/lockstep_f64.hpp): the float64
// check of a long streaming run in chunks side by side, when the run's GPU is free again and the host's
// cores would take longer than the run did. Plain C++ header; the kernels are kernels/check/.
#pragma once
#include <memory>

#include "model/model.hpp"
#include "reference/lockstep_f64.hpp"

namespace hotpath::cuda {

// The most states one lockstep holds.
inline constexpr int kMaxLockstepStates = 1 << 16;

// `states` zero states of `model` on GPU `device`. Throws UnsupportedError without a usable device and
// hotpath::Error when the weights and states do not fit its memory (the message gives the bytes).
std::unique_ptr<reference::LockstepF64> make_lockstep_f64(const Model& model, int states, int device = 0);

}  // namespace hotpath::cuda
