// Many instances of one model on one GPU (docs/cuda.md, "Many instances on one GPU"): independent engines
// (own inputs, windows, states and outputs), each on SMs of its own, and optionally a throughput engine
// (backtests) on the SMs they leave. Isolation "green": one SM partition (a CUDA green context) per
// instance, each running its own persistent tick kernel sized from the partition's SMs. Isolation
// "shared": one persistent launch serving every instance, a critical block and its precompute blocks each
// (cuda/shared_launch.hpp), on the whole GPU, or on one partition when a throughput engine runs beside
// it.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.hpp"

namespace hotpath::engine {

// How instances share the GPU: an SM partition and a kernel each (green), or one launch serving all
// (shared).
enum class Isolation { green, shared };
// shared: where an instance's blocks go: neighbouring SMs, as a partition (sm), or by block index, as
// the hardware spreads them (block).
enum class Placement { sm, block };
constexpr auto name_table(Isolation) {
  return util::make_names<Isolation>("isolation", {{Isolation::green, "green"}, {Isolation::shared, "shared"}});
}
constexpr auto name_table(Placement) {
  return util::make_names<Placement>("placement", {{Placement::sm, "sm"}, {Placement::block, "block"}});
}

struct InstanceOptions {
  int count = 1;
  Isolation isolation = Isolation::green;
  // SMs per instance; 0: the largest equal share the device's split allows (the SMs of a throughput
  // engine beside them, when asked for, come off first: the instances then get the smallest groups).
  int sms_each = 0;
  bool beside = false;  // keep the SMs the instances leave for a throughput engine (beside_engine)
  Placement placement = Placement::sm;  // shared only
};

// What the split gave, for reports.
struct InstanceLayout {
  Isolation isolation = Isolation::green;
  int count = 0;
  int sms_each = 0;        // SMs in each instance's partition
  bool fine = false;       // the fine split (groups below the co-scheduled minimum)
  int rest_sms = 0;        // SMs left to the throughput engine (0: none kept)
  int device_sms = 0;
  int granularity = 0;     // the split's group size: the plain split's, or the fine one's
  int launch_sms = 0;      // shared: the SMs of the launch (its partition's with a throughput engine beside)
  std::optional<Placement> placement;  // shared: InstanceOptions::placement
};

class InstanceSet {
 public:
  // `count` engines of `model` with `options` (backend cuda or auto; no fallback), each warmed on the
  // calling thread. Throws hotpath::Error for bad options, UnsupportedError when the device cannot
  // hold them (naming what it allows).
  InstanceSet(const Model& model, const EngineOptions& options, const InstanceOptions& instances);
  ~InstanceSet();
  InstanceSet(const InstanceSet&) = delete;
  InstanceSet& operator=(const InstanceSet&) = delete;

  size_t size() const { return engines_.size(); }
  // Instance k's engine; Error while a failed restart(k) left it without one.
  Engine& operator[](size_t k);
  const InstanceLayout& layout() const { return layout_; }
  // Closes instance k and makes it again on its SMs (the others keep serving), warmed.
  void restart(size_t k);
  // The throughput engine on the SMs the instances leave, its streams at the lowest priority, made
  // before the instances started: backtest() serves (window or streaming, as options.mode), step() is
  // refused. Needs InstanceOptions::beside; handed over once (Error after).
  std::unique_ptr<Engine> beside_engine();

 private:
  std::unique_ptr<Engine> make_instance(size_t k) const;
  std::unique_ptr<Engine> make_beside() const;
  Model model_;
  EngineOptions options_;
  InstanceLayout layout_;
  struct Split;
  std::unique_ptr<Split> split_;  // the partitions: declared before the engines, which it outlives
  std::vector<std::unique_ptr<Engine>> engines_;
  std::unique_ptr<Engine> beside_;
};

// How many groups of at least `sms` SMs the device's plain (fine = false) or fine split gives.
using GroupCount = std::function<int(int sms, bool fine)>;

// The split an instance set with these options asks for: the largest equal share the plain split gives
// (groups whose SMs are co-scheduled), else the fine split's; with `beside`, the smallest groups and SMs
// left over. device_sms, plain_group and fine_group: the device's SMs and the two splits' smallest
// groups. Throws UnsupportedError naming the most instances that fit. Host-only (tested without a GPU).
InstanceLayout plan_instances(const InstanceOptions& instances, int device_sms, int plain_group, int fine_group,
                              const GroupCount& groups);

}  // namespace hotpath::engine
