#include "engine/swap_room.hpp"

#include <algorithm>

#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/sm_partition.hpp"
#endif

namespace hotpath::engine {

#ifdef HOTPATH_HAVE_CUDA

struct SwapRoom::Impl {
  std::unique_ptr<cuda::SmSplit> split;
  int device = 0;
  int sms_each = 0;
};

SwapRoom::SwapRoom(int device) : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!cuda::device_available(&why, device)) throw UnsupportedError("swap room: no usable CUDA device (" + why + ")");
  const cuda::SmSplitFacts f = cuda::sm_split_facts(device);
  impl_->device = device;
  // Every kernel the next model may need, loaded while nothing runs (a load waits for running kernels).
  preload_cuda_kernels(device);
  // The largest half the split gives two of: the plain split first (co-scheduled groups, so clusters fit),
  // then the fine one.
  for (const bool fine : {false, true}) {
    const int step = std::max(1, fine ? f.fine_min_partition : f.alignment);
    const int least = std::max(1, fine ? f.fine_min_partition : f.min_partition);
    for (int each = f.sm_count / 2 / step * step; each >= least; each -= step) {
      if (cuda::sm_groups(device, each, fine) < 2) continue;
      impl_->split = std::make_unique<cuda::SmSplit>(device, 2, each, fine, /*keep_rest=*/false);
      impl_->sms_each = impl_->split->partitions().at(0)->sm_count();
      return;
    }
  }
  throw UnsupportedError("swap room: GPU " + std::to_string(device) + " (" + std::to_string(f.sm_count) +
                         " SMs) cannot be split into two SM partitions");
}

SwapRoom::~SwapRoom() = default;

std::unique_ptr<Backend> SwapRoom::make(const Model& model, const BackendOptions& options, int half) const {
  if (half < 0 || half > 1) throw Error("swap room: half " + std::to_string(half) + " is not 0 or 1");
  CudaOptions co;
  co.partition = impl_->split->partitions().at(size_t(half));
  return make_cuda_backend(model, options, co);
}

std::string SwapRoom::describe() const {
  return "two halves of " + std::to_string(impl_->sms_each) + " SMs of GPU " + std::to_string(impl_->device);
}

#else

struct SwapRoom::Impl {};

SwapRoom::SwapRoom(int) {
  throw UnsupportedError("swap room: this hotpath was built without CUDA (no usable CUDA device)");
}
SwapRoom::~SwapRoom() = default;
std::unique_ptr<Backend> SwapRoom::make(const Model&, const BackendOptions&, int) const { return nullptr; }
std::string SwapRoom::describe() const { return ""; }

#endif

}  // namespace hotpath::engine
