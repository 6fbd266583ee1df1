#include "cuda/device.hpp"

#include <dlfcn.h>
#include <emmintrin.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/lstm_launch.hpp"
#include "cuda/mailbox_host.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {
namespace {

using Clock = std::chrono::steady_clock;

void require_device(int device) {
  std::string why;
  if (!device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
}

// NVML through dlopen, so the library is optional at build and run time.
struct Nvml {
  void* lib = nullptr;
  using Init = int (*)();
  using ByBus = int (*)(const char*, void**);
  using Clock = int (*)(void*, int, unsigned*);
  using Driver = int (*)(char*, unsigned);
  Init shutdown = nullptr;
  ByBus by_bus = nullptr;
  Clock clock = nullptr;
  Driver driver = nullptr;
  bool ok = false;
  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    shutdown = reinterpret_cast<Init>(dlsym(lib, "nvmlShutdown"));
    by_bus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    driver = reinterpret_cast<Driver>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    ok = init && shutdown && by_bus && clock && driver && init() == 0;
  }
  ~Nvml() {
    if (ok) shutdown();
    if (lib) dlclose(lib);
  }
};

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

bool device_available(std::string* why, int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
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
  if (!prop.canMapHostMemory || prop.major < 8) {
    if (why) *why = std::string(prop.name) + " lacks mapped host memory or tensor-core mma.sync (compute capability " +
                    std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
    return false;
  }
  return true;
}

std::map<std::string, std::string> device_facts(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  HOTPATH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::map<std::string, std::string> f;
  f["gpu_name"] = prop.name;
  f["sm_count"] = std::to_string(prop.multiProcessorCount);
  f["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  f["smem_per_block_optin"] = std::to_string(prop.sharedMemPerBlockOptin);
  f["driver_version"] = "unknown";
  f["sm_clock_mhz"] = "unknown";
  char bus[32] = {};
  HOTPATH_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  f["pci_bus_id"] = bus;
  Nvml nvml;
  if (nvml.ok) {
    char drv[96] = {};
    if (nvml.driver(drv, sizeof drv) == 0) f["driver_version"] = drv;
    void* h = nullptr;
    unsigned mhz = 0;
    if (nvml.by_bus(bus, &h) == 0 && nvml.clock(h, /*NVML_CLOCK_SM*/ 1, &mhz) == 0) f["sm_clock_mhz"] = std::to_string(mhz);
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

std::vector<double> pingpong_us(const PingPongOptions& o) {
  require_device(o.device);
  if (o.floats < 1 || o.floats > 256) throw Error("ping-pong carries 1..256 floats, not " + std::to_string(o.floats));
  ScopedPin pin(o.cpu);
  HostMailbox mb(o.floats, 3, o.mailbox);
  cudaStream_t stream = nullptr;
  HOTPATH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PingPongParams p;
  p.mb = mb.view(2'000'000'000LL);  // 2 s lease, renewed every 1024 round trips below
  p.floats = o.floats;
  p.load_kind = o.mailbox.load_kind;
  p.single_warp = pingpong_single_warp(o) ? 1 : 0;
  const cudaError_t le = launch_pingpong(p, stream);
  if (le != cudaSuccess) {
    cudaStreamDestroy(stream);
    throw_cuda(le, "launch_pingpong");
  }
  std::vector<double> samples;
  samples.reserve(size_t(o.count));
  std::vector<float> x(o.floats);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string failure;
  const long long total = o.warmup + o.count;
  float back[3];
  for (long long t = 0; t < total && failure.empty(); ++t) {
    for (float& v : x) v = dist(rng);
    if (t % 1024 == 0) mb.beat();
    const auto t0 = Clock::now();
    mb.send(t, x);
    long long spins = 0;
    while (!mb.try_receive(t, back)) {
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
      while (Clock::now() < until) _mm_pause();
    }
  }
  mb.request_stop();
  const auto stop_deadline = Clock::now() + std::chrono::seconds(5);
  cudaError_t qe;
  while ((qe = cudaStreamQuery(stream)) == cudaErrorNotReady && Clock::now() < stop_deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  if (qe == cudaErrorNotReady) failure += failure.empty() ? "ping-pong kernel did not stop within 5 s" : "";
  else cudaStreamDestroy(stream);
  if (qe != cudaSuccess && qe != cudaErrorNotReady) failure = std::string("ping-pong kernel failed: ") + cudaGetErrorString(qe);
  if (!failure.empty()) throw Error(failure);
  return samples;
}

}  // namespace hotpath::cuda
