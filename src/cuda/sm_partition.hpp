// SM partitions of one GPU (docs/cuda.md, "Many instances on one GPU"): green contexts, each holding a
// share of the device's SMs, so that several persistent kernels (model instances, a backtest beside them)
// run side by side in one process without waiting for each other's SMs. Host code; every function needs a
// device (UnsupportedError without one, or when the driver has no green contexts).
#pragma once
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;
struct CUgreenCtx_st;

namespace hotpath::cuda {

// What a split of the device's SMs can give, as the driver reports it: the plain split keeps groups
// whose SMs are co-scheduled in one GPU processing cluster (so clusters of blocks fit); the fine split
// ignores that (CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) and goes lower.
struct SmSplitFacts {
  int sm_count = 0;
  int min_partition = 0;        // the plain split's smallest group
  int alignment = 0;            // ... and the multiple its groups come in
  int fine_min_partition = 0;   // the fine split's smallest group (a split into groups of 1 SM or more)
  int fine_groups = 0;          // how many of those it gives
};
SmSplitFacts sm_split_facts(int device);
// How many groups of at least `sms_each` SMs the plain (or fine) split of the device gives.
int sm_groups(int device, int sms_each, bool fine);

// One green context: SMs of the device that only the work of its streams runs on. Memory is the
// device's (the primary context's allocations are valid in every partition).
class SmPartition {
 public:
  ~SmPartition();
  SmPartition(const SmPartition&) = delete;
  SmPartition& operator=(const SmPartition&) = delete;
  int device() const { return device_; }
  int index() const { return index_; }   // 0.. in its split; the rest (if asked for) is last
  int sm_count() const { return sms_; }
  bool rest() const { return rest_; }    // the SMs the split's groups left over
  // A non-blocking stream of this partition (priority as cudaStreamCreateWithPriority takes it: lower
  // is higher); the caller destroys it (cudaStreamDestroy).
  CUstream_st* make_stream(int priority = 0) const;
  std::string describe() const;  // e.g. "partition 3 of GPU 0 (8 SMs)"

 private:
  friend class SmSplit;
  SmPartition(int device, int index, int sms, bool rest, CUgreenCtx_st* ctx)
      : device_(device), index_(index), sms_(sms), rest_(rest), ctx_(ctx) {}
  int device_, index_, sms_;
  bool rest_;
  CUgreenCtx_st* ctx_;
  std::shared_ptr<void> claim_;  // the split's claim on the device, shared by its partitions
};

// The lowest stream priority (larger numbers are lower priorities): make_stream clamps a priority into
// the device's range.
inline constexpr int kLowestStreamPriority = 1 << 20;

// A non-blocking stream for an engine's kernels: on `part` when given (it must be on `device`: Error
// otherwise), else on the whole device (the current one); priority as cudaStreamCreateWithPriority takes
// it. The caller destroys it (cudaStreamDestroy).
CUstream_st* make_stream(const SmPartition* part, int device, int priority = 0);

// A split of one device into `count` partitions of `sms_each` SMs or more (rounded up as the driver
// requires), and optionally the SMs left over as one more partition (for a throughput job beside the
// instances). fine: the fine split (no co-scheduling: groups below the plain minimum, no clusters across
// them). One split per device at a time in a process (partitions of two splits would share SMs): a
// second is refused while the first, or any partition of it, lives. Throws UnsupportedError, naming
// what the device allows, when the split cannot be made.
class SmSplit {
 public:
  SmSplit(int device, int count, int sms_each, bool fine, bool keep_rest);
  ~SmSplit();
  SmSplit(const SmSplit&) = delete;
  SmSplit& operator=(const SmSplit&) = delete;
  const std::vector<std::shared_ptr<SmPartition>>& partitions() const { return parts_; }
  std::shared_ptr<SmPartition> rest() const { return rest_; }  // null when not kept or nothing was left
  int device() const { return device_; }

 private:
  int device_;
  std::shared_ptr<void> claim_;
  std::vector<std::shared_ptr<SmPartition>> parts_;
  std::shared_ptr<SmPartition> rest_;
};

}  // namespace hotpath::cuda
