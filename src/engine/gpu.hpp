// What the front ends may know about the GPU, without reaching into the cuda backend: whether one is
// usable, facts for reports, and the bare signalling floor (ping-pong). Built with or without CUDA;
// without it every query says so (no device, UnsupportedError for the ping-pong).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/kernels/common/mailbox_layout.hpp"  // plain C++: the mailbox's limits hold in every build
#include "model/model.hpp"
#include "reference/lockstep_f64.hpp"

namespace hotpath::gpu {

// The widest input the GPU mailbox carries a tick: a cuda model's I, the ping-pong's payload.
inline constexpr int kMaxInputFloats = cuda::kMaxInputFloats;

// True when this build has CUDA and a device it serves is usable; otherwise `why` (if given) says why.
bool available(std::string* why = nullptr, int device = 0);
// gpu_name, driver_version, sm_count, compute_capability, sm_clock_mhz; empty without a usable device.
std::map<std::string, std::string> facts(int device = 0);
// Device memory in use (every process's), -1 when unknown or no device.
long long memory_used_bytes(int device = 0);
// The GPUs this build's kernels serve, in words ("none: built without CUDA" without CUDA).
std::string served();

// GB/s of one 64 MiB pinned copy each way between host and `device`, the best of three: the host link's
// own rate, against which a throughput run's copies are reported. Throws UnsupportedError without a
// usable device.
struct LinkRate {
  double h2d_gb_per_s = 0, d2h_gb_per_s = 0;
};
LinkRate link_rate(int device = 0);

// Where `p` points: the GPU whose memory it is (-1: host memory, a pointer the runtime does not know, or a
// build without CUDA) and the bytes of its allocation from p on (0: the driver will not say).
struct DevicePointer {
  int device = -1;
  size_t bytes_from = 0;
};
DevicePointer device_pointer(const void* p);

// Blocks until the work queued so far on a CUDA stream of this process is done: `handle` as another
// library passes it (__cuda_array_interface__'s "stream": 1 the legacy default stream, 2 the per-thread
// default stream, else a cudaStream_t). Throws hotpath::Error when CUDA refuses it, UnsupportedError
// without CUDA.
void synchronize_stream(std::uintptr_t handle);

// A float array in the memory of GPU `device`, for front ends that hand the engine device arrays (the
// benchmark's --device-arrays): made, filled and read back through the cuda layer. Throws UnsupportedError
// without CUDA or a usable device.
class DeviceFloats {
 public:
  DeviceFloats(size_t count, int device);
  ~DeviceFloats();
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() const { return p_; }
  size_t size() const { return n_; }
  void upload(const float* src, size_t count);      // the first count floats, from host memory
  void download(float* dst, size_t count) const;    // the first count floats, into host memory

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
  int device_ = 0;
};

struct PingPongRequest {
  int floats = 32;           // payload per round trip (the model's input path is chosen from it)
  long long warmup = 1000;
  long long count = 100000;
  int device = 0;
  int cpu = -1;              // pin the calling thread to this core for the run (-1: leave as is)
};
struct PingPongResult {
  std::string path;               // "single_warp" or "poller_warps": the model input path measured
  std::vector<double> samples_us; // one per measured round trip
};
// The host -> GPU -> host floor over the kernels' own mailbox protocol. Throws UnsupportedError
// without a usable device.
PingPongResult pingpong(const PingPongRequest& request);

struct KernelReport {
  std::string family;  // cta, cluster or grid
  std::string why;     // one line: why it serves the model (and why the smaller ones do not)
};
// The kernel family the cuda backend would serve `model` with on `device` (`kernel`: the one asked
// for, or auto), and why. Throws UnsupportedError when there is no usable device or the family asked
// for (or none) can serve the model.
KernelReport kernel_for(const Model& model, Precision precision, Mode mode, int window, CudaKernel kernel,
                        int device = 0);

// `states` float64 streaming states of `model` stepped together on GPU `device` (reference/lockstep_f64.hpp):
// the bench's check of a long streaming run in chunks, once the run's engine is closed. Throws
// UnsupportedError without CUDA or a usable device, hotpath::Error when they do not fit its memory.
std::unique_ptr<reference::LockstepF64> lockstep_f64(const Model& model, int states, int device = 0);

}  // namespace hotpath::gpu
