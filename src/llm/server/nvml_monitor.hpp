// The server-side view, part 3: GPU telemetry of this machine through NVML (util/nvml: loaded at run
// time), for a server on the same host; on a machine without it the report says why.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "util/nvml.hpp"

namespace hotpath::llm {

inline constexpr unsigned kMaxNvmlGpus = 64;  // GPUs sampled at most

class NvmlMonitor {
 public:
  // Loads `library` and initialises NVML. Never throws: when the library, a symbol or nvmlInit
  // fails, available() is false and reason() says which.
  explicit NvmlMonitor(std::string library = util::kNvmlLibrary);
  ~NvmlMonitor();  // nvmlShutdown and dlclose
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;

  bool available() const;
  const std::string& reason() const;
  std::size_t gpus() const;
  void reset();   // forget the samples (a new measured phase)
  void sample();  // one reading of every GPU; not thread-safe with to_json()/reset()
  // {"available": false, "reason"} or {"available": true, "library", "interval_s", "samples",
  //  "gpus": [{"index", "name", "memory_total_mib", "utilization_pct", "memory_used_mib", "power_w",
  //  "sm_clock_mhz"}]}, each reading {"count", "min", "mean", "max"} (null values when never read).
  nlohmann::json to_json(double interval_s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::llm
