// Why no CUDA device can be used, in words, from what the runtime and driver report: host code without
// CUDA headers, so that the wording is tested on machines without a GPU or a toolkit.
#pragma once
#include <string>

namespace hotpath::cuda {

// cudaError_t values (device.cpp checks them against the runtime's enum).
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorNoDevice = 100;

struct DeviceCountFailure {
  int error = 0;           // what cudaGetDeviceCount returned
  std::string error_name;  // cudaGetErrorName, e.g. "cudaErrorNoDevice"
  std::string error_text;  // cudaGetErrorString
  int driver_version = 0;  // cudaDriverGetVersion: 0 when no driver is installed, e.g. 12040 for 12.4
  int runtime_version = 0; // cudaRuntimeGetVersion, the CUDA this hotpath was built with
};

// One line. Without a driver the runtime also answers cudaErrorInsufficientDriver ("CUDA driver
// version is insufficient"), which on a machine with no GPU at all blames a driver update; the driver
// version tells the two apart: 0 is no driver (no GPU found), one older than the runtime is too old.
std::string device_count_failure(const DeviceCountFailure& f);

}  // namespace hotpath::cuda
