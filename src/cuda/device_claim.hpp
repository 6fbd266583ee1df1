// Which SMs of which GPU run a hotpath persistent kernel in this process (one per SM set).
#pragma once
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "cuda/sm_partition.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {

// One persistent kernel per SM set per process: a kernel's grid takes a block on every SM of its
// context, so a second one on the same SMs would only wait for SMs that never free up (its start timed
// out after 20 s). Refused at once instead: one engine on the whole GPU, or one per SM partition
// (docs/cuda.md, "Many instances on one GPU"), never both.
class DeviceClaim {
 public:
  DeviceClaim(int device, const SmPartition* part) : device_(device), part_(part) {
    std::lock_guard lock(mutex());
    std::set<const SmPartition*>& held = claimed()[device];  // nullptr: the whole GPU
    const std::string gpu = "cuda backend: GPU " + std::to_string(device);
    if (held.count(nullptr))
      throw UnsupportedError(gpu + " already runs a hotpath kernel on all its SMs in this process (one whole-GPU "
                             "cuda engine per GPU per process; close the other engine first, or give every engine "
                             "an SM partition)");
    if (!part && !held.empty())
      throw UnsupportedError(gpu + " already runs hotpath kernels in SM partitions in this process; an engine on "
                             "the whole GPU would wait for their SMs");
    if (part && held.count(part))
      throw UnsupportedError("cuda backend: " + part->describe() +
                             " already runs a hotpath kernel (one engine per partition)");
    held.insert(part);
  }
  ~DeviceClaim() {
    std::lock_guard lock(mutex());
    claimed()[device_].erase(part_);
  }
  DeviceClaim(const DeviceClaim&) = delete;
  DeviceClaim& operator=(const DeviceClaim&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<int, std::set<const SmPartition*>>& claimed() {
    static std::map<int, std::set<const SmPartition*>> s;
    return s;
  }
  int device_;
  const SmPartition* part_;
};

}  // namespace hotpath::cuda
