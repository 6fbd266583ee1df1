#include "cuda/device_error.hpp"

namespace hotpath::cuda {
namespace {

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

std::string device_count_failure(const DeviceCountFailure& f) {
  const std::string code = " (" + f.error_name + ")";
  if (f.error == kCudaErrorNoDevice) return "no CUDA GPU found: the NVIDIA driver sees no device" + code;
  if (f.error == kCudaErrorInsufficientDriver) {
    if (f.driver_version <= 0) return "no CUDA GPU found: no NVIDIA driver is installed" + code;
    if (f.runtime_version > f.driver_version)
      return "the NVIDIA driver is too old: it supports CUDA " + cuda_version(f.driver_version) +
             ", this hotpath was built with CUDA " + cuda_version(f.runtime_version) + "; update the driver" + code;
  }
  return f.error_text + code;
}

}  // namespace hotpath::cuda
