// The barrier between the parts of a critical step split over several cores (CpuOptions::crit_cores):
// each part publishes the epoch it has reached on a cache line of its own, and a part that needs the
// others' results reads their lines until each shows the epoch. No read-modify-write, so no line is
// fought over: a wait costs one line transfer per part that arrived after the waiter started looking.
// Epochs only grow (a tick adds one per layer), so the barrier is never reset and never reused wrongly.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "util/arch.hpp"

namespace hotpath::cpu {

class PartBarrier {
 public:
  explicit PartBarrier(int parts) : lines_(size_t(parts)) {}
  // Part `part` has finished everything up to `epoch` (its writes before this are visible to a waiter).
  void arrive(int part, uint64_t epoch) { lines_[size_t(part)].epoch.store(epoch, std::memory_order_release); }
  // Returns once every part but `part` has arrived at `epoch` or later. With `yield_after` > 0 the waiter
  // gives its core away (sched_yield) after that many polls of one line: for parts off the critical path
  // that may share cores (unpinned workers), so a part that waits does not hold the core its producer needs.
  void wait_others(int part, uint64_t epoch, int yield_after = 0) const {
    for (size_t j = 0; j < lines_.size(); ++j) {
      if (int(j) == part) continue;
      for (int polls = 0; lines_[j].epoch.load(std::memory_order_acquire) < epoch; ++polls) {
        if (yield_after > 0 && polls >= yield_after)
          sched_yield();
        else
          arch::cpu_relax();
      }
    }
  }

 private:
  struct alignas(arch::kCacheLine) Line {
    std::atomic<uint64_t> epoch{0};
  };
  std::vector<Line> lines_;
};

}  // namespace hotpath::cpu
