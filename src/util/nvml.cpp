#include "util/nvml.hpp"

#include <utility>

namespace hotpath::util {

Nvml::Nvml(std::string library) : library_(std::move(library)) {
  lib_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* e = dlerror();
    reason_ = "cannot load " + library_ + ": " + (e ? e : "dlopen failed") + " (no NVIDIA driver on this machine?)";
    return;
  }
  // The _v2 entry points exist since CUDA 5 / driver r319, which every driver since still exports.
  (void)(symbol("nvmlInit_v2", init_) && symbol("nvmlShutdown", shutdown_) &&
         symbol("nvmlErrorString", error_string_));
}

Nvml::~Nvml() {
  if (initialised_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

bool Nvml::init() {
  if (const NvmlReturn rc = init_(); rc != kNvmlSuccess) {
    reason_ = error("nvmlInit_v2", rc);
    return false;
  }
  initialised_ = true;
  return true;
}

std::string Nvml::error(const char* call, NvmlReturn rc) const {
  const char* s = error_string_ ? error_string_(rc) : nullptr;
  return std::string(call) + " failed: " + (s ? s : "error " + std::to_string(rc));
}

}  // namespace hotpath::util
