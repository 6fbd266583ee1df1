#include "cuda/device.hpp"


#include <cuda.h>  // driver API types only: its entry points are fetched through the runtime
#include <cudaTypedefs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "cuda/cuda_check.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_error.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/mailbox_host.hpp"
#include "cuda/memory.hpp"
#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/nvml.hpp"
#include "util/threads.hpp"

#ifndef HOTPATH_CUDA_ARCHS
#define HOTPATH_CUDA_ARCHS "unknown"
#endif

namespace hotpath::cuda {
static_assert(int(cudaErrorNoDevice) == kCudaErrorNoDevice && int(cudaErrorInsufficientDriver) == kCudaErrorInsufficientDriver);
namespace {

using Clock = std::chrono::steady_clock;

// One CMake CUDA_ARCHITECTURES entry: "90a", "80-real", "100f-virtual", ...
struct ArchEntry {
  int number = -1;  // 90 for compute capability 9.0; -1: not a number (native, all, ...)
  char suffix = 0;  // 'a' arch-specific, 'f' family, 0 plain
  bool sass = true, ptx = true;
  std::string text;
};

std::vector<ArchEntry> parse_architectures(const std::string& list) {
  std::vector<ArchEntry> out;
  std::string item;
  std::istringstream in(list);
  while (std::getline(in, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    ArchEntry e;
    e.text = item;
    size_t i = 0;
    while (i < item.size() && item[i] >= '0' && item[i] <= '9') ++i;
    if (i > 0 && i <= 4) {
      e.number = std::stoi(item.substr(0, i));
      if (i < item.size() && (item[i] == 'a' || item[i] == 'f')) e.suffix = item[i++];
      const std::string rest = item.substr(i);
      if (rest == "-real") e.ptx = false;
      else if (rest == "-virtual") e.sass = false;
      else if (!rest.empty()) e.number = -1;
    }
    out.push_back(e);
  }
  return out;
}

bool entry_serves(const ArchEntry& e, int major, int minor) {
  if (e.number < 0) return true;
  const int M = e.number / 10, m = e.number % 10;
  if (e.suffix == 'a') return major == M && minor == m;  // arch-specific code runs on that one only
  if (e.suffix == 'f') return major == M && minor >= m;  // family code: the same major, newer minors
  if (e.ptx && (major > M || (major == M && minor >= m))) return true;  // PTX: JIT-compiled for newer
  return e.sass && major == M && minor >= m;  // SASS: the same major, newer minors
}

std::string gpus_of(int number) {
  switch (number) {
    case 80: return "A100/A30";
    case 86: return "A10/A40/RTX 30";
    case 87: return "Jetson Orin";
    case 89: return "L4/L40/RTX 40";
    case 90: return "H100/H200";
    case 100: return "B200/GB200";
    case 103: return "B300/GB300";
    case 120: return "RTX 50/RTX PRO Blackwell";
    default: return "";
  }
}

void require_device(int device) {
  std::string why;
  if (!device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
}

std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

const char* built_architectures() { return HOTPATH_CUDA_ARCHS; }

std::string served_gpus(const std::string& architectures) {
  std::string out;
  for (const ArchEntry& e : parse_architectures(architectures)) {
    std::string d = e.number < 0 ? e.text : "sm_" + std::to_string(e.number) + (e.suffix ? std::string(1, e.suffix) : "");
    const std::string names = e.number < 0 ? "" : gpus_of(e.number);
    if (!names.empty()) d += " (" + names + (e.suffix == 'f' ? " family" : "") + ")";
    if (e.number >= 0 && !e.suffix && e.ptx) d += " and newer";
    out += (out.empty() ? "" : ", ") + d;
  }
  return out.empty() ? architectures : out;
}

std::string architecture_refusal(const std::string& architectures, int major, int minor, const std::string& device_name) {
  for (const ArchEntry& e : parse_architectures(architectures))
    if (entry_serves(e, major, minor)) return "";
  return "this build serves " + served_gpus(architectures) + "; device " + device_name + " is sm_" +
         std::to_string(major) + std::to_string(minor);
}

bool built_arch_specific(const std::string& architectures, int major, int minor) {
  for (const ArchEntry& e : parse_architectures(architectures))
    if (e.number == major * 10 + minor && e.suffix == 'a' && e.sass) return true;
  return false;
}

int launch_sm_count(const SmReport& r) {
  for (int n : {r.green_ctx_sms, r.ctx_sms, r.device_sms})
    if (n > 0) return n;
  throw Error("cuda: the runtime reported no SM count for the launch stream's context");
}

long long coresident_blocks(int blocks_per_sm, int sms) {
  if (blocks_per_sm <= 0 || sms <= 0) return 0;
  return (long long)blocks_per_sm * sms;
}

void* driver_entry_point(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, unsigned(version), cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

PointerExtent pointer_extent(const void* p) {
  PointerExtent e;
  cudaPointerAttributes a{};
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return e;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return e;
  e.device = a.device;
  using AddressRange = PFN_cuMemGetAddressRange_v3020;
  if (void* fn = driver_entry_point("cuMemGetAddressRange", 3020)) {
    CUdeviceptr base = 0;
    size_t size = 0;
    const auto at = reinterpret_cast<CUdeviceptr>(p);
    if (reinterpret_cast<AddressRange>(fn)(&base, &size, at) == CUDA_SUCCESS && at >= base && at - base <= size)
      e.bytes_from = size - size_t(at - base);
  }
  return e;
}

void* device_array_alloc(size_t bytes, int device) {
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  return device_alloc(bytes);
}

void device_array_free(void* p, int device) noexcept {
  if (!p || cudaSetDevice(device) != cudaSuccess) return;
  device_free(p);
}

void copy_bytes(void* dst, const void* src, size_t bytes, int device) {
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  HOTPATH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void synchronize_stream_handle(std::uintptr_t handle) {
  const cudaStream_t s = handle == 1   ? cudaStreamLegacy
                         : handle == 2 ? cudaStreamPerThread
                                       : reinterpret_cast<cudaStream_t>(handle);
  if (const cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("cuda: waiting for the array's stream (" + std::to_string(handle) + ") failed: " + cudaGetErrorString(e));
  }
}

SmReport query_stream_sms(CUstream_st* stream) {
  SmReport r;
  int device = 0;
  HOTPATH_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  HOTPATH_CUDA_CHECK(cudaDeviceGetAttribute(&r.device_sms, cudaDevAttrMultiProcessorCount, device));
  // The context's own view (green contexts and MPS can narrow it), through the driver's entry points so
  // that nothing links libcuda; a driver without them leaves the device count.
  auto entry = [](const char* name, void** fn) { return (*fn = driver_entry_point(name, 12050)) != nullptr; };
  using StreamCtx = PFN_cuStreamGetCtx_v12050;
  using CtxRes = PFN_cuCtxGetDevResource_v12040;
  using GreenRes = PFN_cuGreenCtxGetDevResource_v12040;
  void *stream_ctx = nullptr, *ctx_res = nullptr, *green_res = nullptr;
  if (!entry("cuStreamGetCtx", &stream_ctx)) return r;  // at version 12.5: the form that names green contexts
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  if (reinterpret_cast<StreamCtx>(stream_ctx)(stream, &ctx, &green) != CUDA_SUCCESS) return r;
  CUdevResource res{};
  if (green && entry("cuGreenCtxGetDevResource", &green_res) &&
      reinterpret_cast<GreenRes>(green_res)(green, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS)
    r.green_ctx_sms = int(res.sm.smCount);
  res = CUdevResource{};
  if (ctx && entry("cuCtxGetDevResource", &ctx_res) &&
      reinterpret_cast<CtxRes>(ctx_res)(ctx, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS)
    r.ctx_sms = int(res.sm.smCount);
  return r;
}

bool device_available(std::string* why, int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) {
      DeviceCountFailure f{int(e), cudaGetErrorName(e), cudaGetErrorString(e)};
      if (cudaDriverGetVersion(&f.driver_version) != cudaSuccess) f.driver_version = 0;
      if (cudaRuntimeGetVersion(&f.runtime_version) != cudaSuccess) f.runtime_version = 0;
      (void)cudaGetLastError();
      *why = device_count_failure(f);
    }
    return false;
  }
  if (device < 0 || device >= count) {
    if (why) *why = "device " + std::to_string(device) + " requested, " + std::to_string(count) + " present";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = "cannot query device " + std::to_string(device);
    return false;
  }
  const std::string refusal = architecture_refusal(built_architectures(), prop.major, prop.minor, prop.name);
  if (!refusal.empty()) {
    if (why) *why = refusal;
    return false;
  }
  if (!prop.canMapHostMemory || prop.major < 8) {
    if (why) *why = std::string(prop.name) + " lacks mapped host memory or tensor-core mma.sync (compute capability " +
                    std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
    return false;
  }
  return true;
}

long long device_memory_used_bytes(int device) {
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so later calls do not see it
    return -1;
  }
  return (long long)(total_b - free_b);
}

LinkRate measure_link_rate(int device, size_t bytes, int repeats) {
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  const unsigned flags = cudaHostAllocDefault;
  void* host = pinned_alloc(bytes, flags);
  LinkRate out;
  try {
    DeviceBuffer<char> dev(bytes);
    Stream s(cudaStreamNonBlocking);
    auto best_of = [&](cudaMemcpyKind kind) {
      double best = 0;
      for (int i = 0; i < std::max(1, repeats); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        HOTPATH_CUDA_CHECK(kind == cudaMemcpyHostToDevice ? cudaMemcpyAsync(dev.get(), host, bytes, kind, s.get())
                                                          : cudaMemcpyAsync(host, dev.get(), bytes, kind, s.get()));
        HOTPATH_CUDA_CHECK(cudaStreamSynchronize(s.get()));
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(bytes) / sec / 1e9);
      }
      return best;
    };
    out.h2d_gb_per_s = best_of(cudaMemcpyHostToDevice);
    out.d2h_gb_per_s = best_of(cudaMemcpyDeviceToHost);
  } catch (...) {
    pinned_free(host, bytes, flags);
    throw;
  }
  pinned_free(host, bytes, flags);
  return out;
}

std::map<std::string, std::string> device_facts(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  HOTPATH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::map<std::string, std::string> f;
  f["gpu_name"] = prop.name;
  f["sm_count"] = std::to_string(prop.multiProcessorCount);
  f["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  f["build_cuda_architectures"] = built_architectures();
  f["smem_per_block_optin"] = std::to_string(prop.sharedMemPerBlockOptin);
  f["driver_version"] = "unknown";
  f["sm_clock_mhz"] = "unknown";
  char bus[32] = {};
  HOTPATH_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  f["pci_bus_id"] = bus;
  // NVML (util/nvml.hpp: loaded at run time), else nvidia-smi
  util::Nvml nvml;
  using ByBus = util::NvmlReturn (*)(const char*, void**);
  using Clock = util::NvmlReturn (*)(void*, int, unsigned*);
  using Driver = util::NvmlReturn (*)(char*, unsigned);
  ByBus by_bus = nullptr;
  Clock clock = nullptr;
  Driver driver = nullptr;
  if (nvml.ok() && nvml.symbol("nvmlDeviceGetHandleByPciBusId_v2", by_bus) && nvml.symbol("nvmlDeviceGetClockInfo", clock) &&
      nvml.symbol("nvmlSystemGetDriverVersion", driver) && nvml.init()) {
    char drv[96] = {};
    if (driver(drv, sizeof drv) == util::kNvmlSuccess) f["driver_version"] = drv;
    void* h = nullptr;
    unsigned mhz = 0;
    if (by_bus(bus, &h) == util::kNvmlSuccess && clock(h, /*NVML_CLOCK_SM*/ 1, &mhz) == util::kNvmlSuccess)
      f["sm_clock_mhz"] = std::to_string(mhz);
  } else {
    const std::string q = run_command(std::string("nvidia-smi --query-gpu=driver_version,clocks.sm --format=csv,noheader,nounits -i ") +
                                      bus + " 2>/dev/null");
    const auto comma = q.find(',');
    if (comma != std::string::npos) {
      f["driver_version"] = q.substr(0, comma);
      std::string mhz = q.substr(comma + 1);
      while (!mhz.empty() && mhz.front() == ' ') mhz.erase(mhz.begin());
      if (!mhz.empty()) f["sm_clock_mhz"] = mhz;
    }
  }
  // Dense fp16 tensor-core peak (fp32 accumulation) at the maximum SM clock: the yardstick of the
  // throughput benchmarks. Per SM and clock: 2048 flops on sm_80, 4096 on sm_90; others unknown.
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) == cudaSuccess && clock_khz > 0) {
    f["sm_clock_max_mhz"] = std::to_string(clock_khz / 1000);
    const int per_clock = prop.major == 9 && prop.minor == 0 ? 4096 : prop.major == 8 && prop.minor == 0 ? 2048 : 0;
    if (per_clock > 0)
      f["dense_fp16_peak_tflops"] = std::to_string(double(prop.multiProcessorCount) * per_clock * clock_khz * 1e3 / 1e12);
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  f["cuda_runtime"] = std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
  f["cuda_driver_api"] = std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10);
  return f;
}

namespace {
bool pingpong_single_warp(const PingPongOptions& o) {
  if (o.path != PingPongPath::automatic) return o.path == PingPongPath::single_warp;
  const int chunks = chunks_for(o.floats, o.mailbox.dual_seq_input ? 2 : 3);
  return chunks <= 32 && o.mailbox.poll_sets <= 1;
}
}  // namespace

std::string pingpong_path_name(const PingPongOptions& o) {
  return pingpong_single_warp(o) ? "single_warp" : "poller_warps";
}

std::vector<double> pingpong_us(const PingPongOptions& options) {
  // Refused before the device is touched: a bad width is the caller's mistake on any machine.
  if (options.floats < 1 || options.floats > kMaxInputFloats)
    throw Error("ping-pong carries 1.." + std::to_string(kMaxInputFloats) + " floats, not " + std::to_string(options.floats));
  require_device(options.device);
  PingPongOptions o = options;
  const InputLayout layout = input_layout(o.floats, o.mailbox.dual_seq_input);
  // Poller warps: one poll set per ceil(chunks / 32) warps, beside the responder and the service warp.
  o.mailbox.poll_sets = fit_poll_sets(layout.chunks, o.mailbox.poll_sets, 2, kMaxBlockThreads);
  // A preference: a failure is recorded (bench reports it) and the ping-pong runs unpinned.
  util::ScopedPin pin(o.cpu >= 0 ? std::vector<int>{o.cpu} : std::vector<int>{}, "ping-pong host thread", false);
  // Everything that can throw comes before the launch: once the kernel runs it must be stopped (or its
  // mailbox leaked) before anything is freed.
  std::vector<double> samples;
  samples.reserve(size_t(o.count));
  auto mb = std::make_unique<HostMailbox>(o.floats, 3, o.mailbox);
  Stream stream(cudaStreamNonBlocking);
  PingPongParams p;
  p.mb = mb->view(2'000'000'000LL);  // 2 s lease, renewed every 1024 round trips below
  p.floats = o.floats;
  p.load_kind = o.mailbox.load_kind;
  p.single_warp = pingpong_single_warp(o) ? 1 : 0;
  std::vector<float> x(o.floats);
  const cudaError_t le = launch_pingpong(p, stream.get());
  if (le != cudaSuccess) throw_cuda(le, "launch_pingpong");
  // Stops the kernel; the empty string when it stopped cleanly.
  auto stop_kernel = [&]() -> std::string {
    mb->request_stop();
    const auto stop_deadline = Clock::now() + std::chrono::seconds(5);
    cudaError_t qe;
    while ((qe = cudaStreamQuery(stream.get())) == cudaErrorNotReady && Clock::now() < stop_deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (qe == cudaErrorNotReady) {
      (void)mb.release();  // the kernel may poll it until its lease lapses: leak it rather than free it
      return "ping-pong kernel did not stop within 5 s";
    }
    if (qe != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("ping-pong kernel failed: ") + cudaGetErrorString(qe);
    }
    return "";
  };
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string failure;
  const long long total = o.warmup + o.count;
  float back[3];
  try {
    for (long long t = 0; t < total && failure.empty(); ++t) {
      for (float& v : x) v = dist(rng);
      if (t % 1024 == 0) mb->beat();
      const auto t0 = Clock::now();
      mb->send(t, x);
      if (o.send_us && t >= o.warmup) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        o.send_us->push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      long long spins = 0;
      while (!mb->try_receive(t, back)) {
        if ((++spins & 4095) == 0 && Clock::now() - t0 > std::chrono::seconds(2)) {
          failure = "ping-pong: no answer to round trip " + std::to_string(t) + " within 2 s";
          break;
        }
      }
      if (!failure.empty()) break;
      const auto t1 = Clock::now();
      uint32_t sum = 0;
      for (float v : x) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        sum ^= b;
      }
      uint32_t got;
      std::memcpy(&got, &back[2], 4);
      if (back[0] != x[0] || back[1] != x[o.floats - 1] || got != sum)
        failure = "ping-pong: round trip " + std::to_string(t) + " came back with the wrong payload (torn chunk?)";
      if (t >= o.warmup) samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (o.gap_us > 0) {
        const auto until = t1 + std::chrono::duration<double, std::micro>(o.gap_us);
        while (Clock::now() < until) arch::cpu_relax();
      }
    }
  } catch (...) {
    (void)stop_kernel();
    throw;
  }
  const std::string stopped = stop_kernel();
  if (failure.empty()) failure = stopped;
  if (!failure.empty()) throw Error(failure);
  return samples;
}

}  // namespace hotpath::cuda
