// Host-side facts about the CUDA device and the bare signalling floor (ping-pong), callable from host
// code that is built without nvcc. Every function throws UnsupportedError when there is no usable
// CUDA device (the message says so).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda/mailbox_options.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace hotpath::cuda {

// True when a CUDA device can be used; otherwise `why` (if given) says why not (a device this build has
// no kernel code for is refused by name: see architecture_refusal).
bool device_available(std::string* why = nullptr, int device = 0);

// The CUDA architectures this build compiled its kernels for, as CMake spelt them (e.g. "90a", or
// "80-real,90a"), and the GPUs they serve in words, e.g. "sm_90a (H100/H200)".
const char* built_architectures();
std::string served_gpus(const std::string& architectures = built_architectures());
// Empty when kernels built for `architectures` (comma-separated CMake entries: NN real+PTX, NN-real,
// NN-virtual, NNa arch-specific, NNf family) run on a device of compute capability major.minor;
// otherwise the one-line refusal "this build serves sm_90a (H100/H200); device NAME is sm_YY".
// Entries that name no number (native, all, all-major) are taken to serve any device.
std::string architecture_refusal(const std::string& architectures, int major, int minor, const std::string& device_name);
// True when `architectures` holds arch-specific machine code (NNa, not -virtual) for compute capability
// major.minor: the build has that GPU's own instructions (sm_90a: setmaxnreg, wgmma). Entries that name no
// number (native, all) are not taken to.
bool built_arch_specific(const std::string& architectures, int major, int minor);

// What the runtime reports about the SMs a stream's work may use (-1: not reported): the green
// context's SM partition when the stream belongs to one, the SM resource of its context (MPS limits
// show there), the device's SM count.
struct SmReport {
  int green_ctx_sms = -1;
  int ctx_sms = -1;
  int device_sms = -1;
};
// The SMs a launch into that stream can use: the narrowest reported scope. Throws Error when none is.
int launch_sm_count(const SmReport& report);
// Asks the runtime (and, through its entry points, the driver) about the stream's context. Needs a device.
SmReport query_stream_sms(CUstream_st* stream);
// A driver API function through the runtime's entry points (nothing links libcuda), in the form of
// CUDA `version` (e.g. 12050); nullptr when this driver has no such function.
void* driver_entry_point(const char* name, int version);
// Blocks of one kernel that can be co-resident in a context: the kernel's occupancy per SM (as
// cudaOccupancyMaxActiveBlocksPerMultiprocessor reports it) x the context's SMs; 0 when either is <= 0.
long long coresident_blocks(int blocks_per_sm, int sms);

// What `p` points into: the GPU whose memory it is (-1: not device memory: host memory, pageable or pinned,
// or a pointer the runtime does not know) and the bytes of its allocation from p to the allocation's end
// (cuMemGetAddressRange; 0 where the driver will not say). Managed memory counts as its device's.
struct PointerExtent {
  int device = -1;
  size_t bytes_from = 0;
};
PointerExtent pointer_extent(const void* p);

// Waits for a stream another library of this process handed over (1: the legacy default stream, 2: the
// per-thread default stream, else a cudaStream_t); throws Error naming the failure.
void synchronize_stream_handle(std::uintptr_t handle);

// Device memory for arrays the front ends hand the engine (gpu::DeviceFloats): memory.hpp's stream-ordered
// allocation on `device` (freeing never waits for running kernels); and a synchronous copy between host
// and device memory (either way, cudaMemcpyDefault).
void* device_array_alloc(size_t bytes, int device);
void device_array_free(void* p, int device) noexcept;
void copy_bytes(void* dst, const void* src, size_t bytes, int device);

// Memory in use on the device (total - free, as cudaMemGetInfo reports it: every process's, not only
// this one's); -1 when the runtime will not say. For soak runs, which check that it stays flat.
long long device_memory_used_bytes(int device = 0);

// gpu_name, driver_version, sm_count, compute_capability, sm_clock_mhz (read at run time, or "unknown").
std::map<std::string, std::string> device_facts(int device = 0);

// What the host link moves in each direction: GB/s of one pinned copy of `bytes` (the best of `repeats`),
// on a stream of its own. The yardstick of the throughput path's copies (their share of the link).
struct LinkRate {
  double h2d_gb_per_s = 0, d2h_gb_per_s = 0;
};
LinkRate measure_link_rate(int device = 0, size_t bytes = size_t(64) << 20, int repeats = 3);

// Which of the kernels' input paths the ping-pong measures.
enum class PingPongPath {
  automatic,     // single_warp when the input fits one warp's lanes and one poll set, else poller_warps
  single_warp,   // one warp polls (lane c <-> chunk c) and answers: the "regs" critical block's path
  poller_warps,  // poller warps hand chunks to a responder through shared memory: the "smem" path
};

struct PingPongOptions {
  int floats = 32;             // input floats carried per round trip, over the backend's mailbox protocol
  long long warmup = 1000;     // round trips before measuring
  long long count = 100000;    // measured round trips
  double gap_us = 0;           // pause between round trips
  int device = 0;
  int cpu = -1;                // pin the calling thread to this core (-1: leave as is)
  MailboxOptions mailbox;
  PingPongPath path = PingPongPath::automatic;
  // When set: each measured round trip's input write, to its stores' drain (a full fence after them, so
  // the time holds every line's ownership request), in microseconds: the host's share of a wide input.
  std::vector<double>* send_us = nullptr;
};
// The path `options` resolves to: "single_warp" or "poller_warps".
std::string pingpong_path_name(const PingPongOptions& options);
// One latency sample per measured round trip, in microseconds: host writes the input, a persistent
// kernel (no model) sees it and answers, host sees the answer. Every answer is checked (the kernel
// echoes a checksum of the input bits); a wrong one throws.
std::vector<double> pingpong_us(const PingPongOptions& options);

}  // namespace hotpath::cuda
