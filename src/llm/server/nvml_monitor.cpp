#include "llm/server/nvml_monitor.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace hotpath::llm {

namespace {

// The few NVML declarations used beyond util::Nvml's, written out so no nvml.h is needed (the
// _v2 entry points of nvmlDeviceGetCount and nvmlDeviceGetHandleByIndex; the others never changed
// signature).
using util::kNvmlSuccess;
using nvmlReturn_t = util::NvmlReturn;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of time a kernel ran over the last sample period
  unsigned int memory;  // percent of time device memory was read or written
};
struct nvmlMemory_t {  // nvmlMemory_t (v1): bytes
  unsigned long long total, free, used;
};
constexpr int kNvmlClockSm = 1;  // nvmlClockType_t: NVML_CLOCK_GRAPHICS 0, NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2
constexpr unsigned kNvmlNameBuffer = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetUtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using GetMemFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using GetPowerFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);  // milliwatts
using GetClockFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);  // MHz

struct Reading {
  std::size_t count = 0;
  double min = 0, max = 0, sum = 0;
  void add(double v) {
    if (count == 0) min = max = v;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
    ++count;
  }
  nlohmann::json to_json() const {
    const auto v = [&](double x) { return count ? nlohmann::json(x) : nlohmann::json(nullptr); };
    return {{"count", count}, {"min", v(min)}, {"mean", v(count ? sum / static_cast<double>(count) : 0)}, {"max", v(max)}};
  }
};

struct Gpu {
  nvmlDevice_t handle = nullptr;
  std::string name;
  double memory_total_mib = -1;
  Reading util, mem_used, power, sm_clock;
};

}  // namespace

struct NvmlMonitor::Impl {
  explicit Impl(std::string library) : nvml(std::move(library)) {}
  util::Nvml nvml;
  GetCountFn get_count = nullptr;
  GetHandleFn get_handle = nullptr;
  GetNameFn get_name = nullptr;
  GetUtilFn get_util = nullptr;
  GetMemFn get_mem = nullptr;
  GetPowerFn get_power = nullptr;
  GetClockFn get_clock = nullptr;
  std::vector<Gpu> gpus;
  std::size_t samples = 0;

  void open() {
    if (!(nvml.ok() && nvml.symbol("nvmlDeviceGetCount_v2", get_count) &&
          nvml.symbol("nvmlDeviceGetHandleByIndex_v2", get_handle) && nvml.symbol("nvmlDeviceGetName", get_name) &&
          nvml.symbol("nvmlDeviceGetUtilizationRates", get_util) && nvml.symbol("nvmlDeviceGetMemoryInfo", get_mem) &&
          nvml.symbol("nvmlDeviceGetPowerUsage", get_power) && nvml.symbol("nvmlDeviceGetClockInfo", get_clock)))
      return;
    if (!nvml.init()) return;
    unsigned int n = 0;
    if (const nvmlReturn_t rc = get_count(&n); rc != kNvmlSuccess) {
      nvml.fail(nvml.error("nvmlDeviceGetCount_v2", rc));
      return;
    }
    if (n == 0) {
      nvml.fail("NVML sees no GPU");
      return;
    }
    for (unsigned int i = 0; i < std::min(n, kMaxNvmlGpus); ++i) {
      Gpu g;
      if (get_handle(i, &g.handle) != kNvmlSuccess) g.handle = nullptr;  // sampled as unreadable
      char name[kNvmlNameBuffer] = {};
      if (g.handle && get_name(g.handle, name, sizeof name) == kNvmlSuccess) g.name.assign(name, strnlen(name, sizeof name));
      nvmlMemory_t m{};
      if (g.handle && get_mem(g.handle, &m) == kNvmlSuccess) g.memory_total_mib = static_cast<double>(m.total) / (1 << 20);
      gpus.push_back(std::move(g));
    }
  }

  // Each reading an unsupported query gives (NVML_ERROR_NOT_SUPPORTED on some boards) stays empty.
  void sample() {
    if (!nvml.ok()) return;
    ++samples;
    for (auto& g : gpus) {
      if (!g.handle) continue;
      nvmlUtilization_t u{};
      if (get_util(g.handle, &u) == kNvmlSuccess) g.util.add(u.gpu);
      nvmlMemory_t m{};
      if (get_mem(g.handle, &m) == kNvmlSuccess) g.mem_used.add(static_cast<double>(m.used) / (1 << 20));
      unsigned int mw = 0;
      if (get_power(g.handle, &mw) == kNvmlSuccess) g.power.add(mw / 1000.0);
      unsigned int mhz = 0;
      if (get_clock(g.handle, kNvmlClockSm, &mhz) == kNvmlSuccess) g.sm_clock.add(mhz);
    }
  }
};

NvmlMonitor::NvmlMonitor(std::string library) : impl_(std::make_unique<Impl>(std::move(library))) { impl_->open(); }

NvmlMonitor::~NvmlMonitor() = default;  // util::Nvml shuts NVML down and unloads it

bool NvmlMonitor::available() const { return impl_->nvml.ok(); }
const std::string& NvmlMonitor::reason() const { return impl_->nvml.reason(); }
std::size_t NvmlMonitor::gpus() const { return impl_->gpus.size(); }

void NvmlMonitor::reset() {
  impl_->samples = 0;
  for (auto& g : impl_->gpus) g.util = g.mem_used = g.power = g.sm_clock = Reading{};
}

void NvmlMonitor::sample() { impl_->sample(); }

nlohmann::json NvmlMonitor::to_json(double interval_s) const {
  if (!available()) return {{"available", false}, {"reason", reason()}};
  nlohmann::json gpus = nlohmann::json::array();
  for (std::size_t i = 0; i < impl_->gpus.size(); ++i) {
    const Gpu& g = impl_->gpus[i];
    gpus.push_back({{"index", i},
                    {"name", g.name},
                    {"memory_total_mib", g.memory_total_mib >= 0 ? nlohmann::json(g.memory_total_mib) : nlohmann::json(nullptr)},
                    {"utilization_pct", g.util.to_json()},
                    {"memory_used_mib", g.mem_used.to_json()},
                    {"power_w", g.power.to_json()},
                    {"sm_clock_mhz", g.sm_clock.to_json()}});
  }
  return {{"available", true}, {"library", impl_->nvml.library()}, {"interval_s", interval_s},
          {"samples", impl_->samples}, {"gpus", std::move(gpus)}};
}

}  // namespace hotpath::llm
