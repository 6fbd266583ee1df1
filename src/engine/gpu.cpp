#include "engine/gpu.hpp"

#include <algorithm>

#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/device.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/lockstep_f64.hpp"
#endif

namespace hotpath::gpu {

#ifdef HOTPATH_HAVE_CUDA

bool available(std::string* why, int device) { return cuda::device_available(why, device); }

std::map<std::string, std::string> facts(int device) {
  if (!cuda::device_available(nullptr, device)) return {};
  return cuda::device_facts(device);
}

long long memory_used_bytes(int device) { return cuda::device_memory_used_bytes(device); }

std::string served() { return cuda::served_gpus(); }

LinkRate link_rate(int device) {
  std::string why;
  if (!cuda::device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  const cuda::LinkRate r = cuda::measure_link_rate(device);
  return {r.h2d_gb_per_s, r.d2h_gb_per_s};
}

DevicePointer device_pointer(const void* p) {
  const cuda::PointerExtent e = cuda::pointer_extent(p);
  return {e.device, e.bytes_from};
}

void synchronize_stream(std::uintptr_t handle) { cuda::synchronize_stream_handle(handle); }

DeviceFloats::DeviceFloats(size_t count, int device) : n_(count), device_(device) {
  std::string why;
  if (!cuda::device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  p_ = static_cast<float*>(cuda::device_array_alloc(std::max<size_t>(count, 1) * sizeof(float), device));
}
DeviceFloats::~DeviceFloats() { cuda::device_array_free(p_, device_); }
void DeviceFloats::upload(const float* src, size_t count) {
  cuda::copy_bytes(p_, src, std::min(count, n_) * sizeof(float), device_);
}
void DeviceFloats::download(float* dst, size_t count) const {
  cuda::copy_bytes(dst, p_, std::min(count, n_) * sizeof(float), device_);
}

PingPongResult pingpong(const PingPongRequest& r) {
  std::string why;
  if (!cuda::device_available(&why, r.device)) throw UnsupportedError("no usable CUDA device: " + why);
  cuda::PingPongOptions p;
  p.floats = r.floats;
  p.warmup = r.warmup;
  p.count = r.count;
  p.device = r.device;
  p.cpu = r.cpu;
  PingPongResult out;
  out.path = cuda::pingpong_path_name(p);
  out.samples_us = cuda::pingpong_us(p);
  return out;
}

KernelReport kernel_for(const Model& model, Precision precision, Mode mode, int window, CudaKernel kernel,
                        int device) {
  const cuda::DeviceLimits limits = cuda::query_device_limits(device);
  const cuda::KernelChoice c = cuda::choose_kernel(model, precision, mode, window, cuda::MailboxOptions{}, limits,
                                                   cuda::requested_family(kernel));
  return {cuda::family_name(c.family), c.why};
}

std::unique_ptr<reference::LockstepF64> lockstep_f64(const Model& model, int states, int device) {
  return cuda::make_lockstep_f64(model, states, device);
}

#else

namespace {
constexpr const char* kNoCuda = "this hotpath was built without CUDA (no usable CUDA device)";
}

bool available(std::string* why, int) {
  if (why) *why = kNoCuda;
  return false;
}
std::map<std::string, std::string> facts(int) { return {}; }
long long memory_used_bytes(int) { return -1; }
std::string served() { return "none: built without CUDA"; }
LinkRate link_rate(int) { throw UnsupportedError(std::string("the link's rate needs CUDA: ") + kNoCuda); }
DevicePointer device_pointer(const void*) { return {}; }
void synchronize_stream(std::uintptr_t) { throw UnsupportedError(std::string("arrays in GPU memory need CUDA: ") + kNoCuda); }
DeviceFloats::DeviceFloats(size_t, int) { throw UnsupportedError(std::string("arrays in GPU memory need CUDA: ") + kNoCuda); }
DeviceFloats::~DeviceFloats() = default;
void DeviceFloats::upload(const float*, size_t) {}
void DeviceFloats::download(float*, size_t) const {}
PingPongResult pingpong(const PingPongRequest&) { throw UnsupportedError(std::string("the ping-pong needs CUDA: ") + kNoCuda); }
KernelReport kernel_for(const Model&, Precision, Mode, int, CudaKernel, int) { throw UnsupportedError(kNoCuda); }

std::unique_ptr<reference::LockstepF64> lockstep_f64(const Model&, int, int) {
  throw UnsupportedError(std::string("the float64 check on the GPU needs CUDA: ") + kNoCuda);
}
#endif

}  // namespace hotpath::gpu
