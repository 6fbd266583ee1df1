#include "cpu/cpu_backend.hpp"
#include "reference/reference_backend.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace hotpath {

std::vector<std::string> backend_names() {
#ifdef HOTPATH_HAVE_CUDA
  return {"ref", "cpu", "cuda"};
#else
  return {"ref", "cpu"};
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, const Model& model, const BackendOptions& options) {
  if (options.mode == Mode::window && options.window < 1)
    throw Error("window mode needs a window length >= 1 (--window, or `window` in the model's metadata)");
  if ((name == "ref" || name == "cpu") && !options.variant.empty())
    throw Error("backend " + name + " has no kernel variants (--variant is for cuda); the cpu path is chosen "
                "from the processor at run time (HOTPATH_CPU_ISA overrides it)");
  if (name == "ref") return make_reference_backend(model, options);
  if (name == "cpu") return make_cpu_backend(model, options);
  if (name == "cuda") {
#ifdef HOTPATH_HAVE_CUDA
    return make_cuda_backend(model, options);
#else
    throw UnsupportedError("backend cuda: this hotpath was built without CUDA (no usable CUDA device)");
#endif
  }
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown backend '" + name + "' (available: " + known + ")");
}

}  // namespace hotpath
