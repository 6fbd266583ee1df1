// Room on a GPU for live swaps (docs/production.md, "Swapping a model while it serves"): a cuda engine's
// persistent kernel holds every SM it is given, so a second model cannot come up beside it on the same
// SMs. An engine made with EngineOptions::swap_room splits its GPU into two equal SM partitions (green
// contexts): the serving model's kernel runs on one half, and a swap makes the next model on the other
// while the first keeps answering; the halves change roles at each swap.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "model/model.hpp"

namespace hotpath::engine {

class SwapRoom {
 public:
  // Splits `device` into two partitions of the most SMs its driver's split gives two of (co-scheduled
  // groups where it can, so thread-block clusters fit). Throws UnsupportedError naming why when it
  // cannot (no device, a build without CUDA, a driver without green contexts); one split per device in a
  // process, so no other engine may hold the device meanwhile.
  explicit SwapRoom(int device);
  ~SwapRoom();
  SwapRoom(const SwapRoom&) = delete;
  SwapRoom& operator=(const SwapRoom&) = delete;

  // A cuda backend for `model` whose kernels run on half `half` (0 or 1) only; throws as
  // make_cuda_backend does (UnsupportedError when the model does not fit half the GPU).
  std::unique_ptr<Backend> make(const Model& model, const BackendOptions& options, int half) const;
  std::string describe() const;  // e.g. "two halves of 64 SMs of GPU 0"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::engine
