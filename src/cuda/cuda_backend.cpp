// Placeholder until the CUDA backend lands.
#include "cuda/cuda_backend.hpp"
#include "util/error.hpp"
namespace hotpath {
std::unique_ptr<Backend> make_cuda_backend(const Model&, const BackendOptions&) {
  throw UnsupportedError("the cuda backend is not built yet");
}
}  // namespace hotpath
