#include "cuda/sm_partition.hpp"

#include <algorithm>

#include <cuda.h>  // driver API types only: the functions come through the runtime's entry points
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <mutex>
#include <set>

#include "cuda/cuda_check.hpp"
#include "cuda/device.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {
namespace {

// The driver functions of green contexts, fetched once; UnsupportedError when the driver lacks them.
struct GreenApi {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetDevResource_v12040 get_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 split = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 create = nullptr;
  PFN_cuGreenCtxDestroy_v12040 destroy = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create = nullptr;
};

const GreenApi& green_api() {
  static const GreenApi api = [] {
    GreenApi a;
    auto get = [](const char* name, int version, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(driver_entry_point(name, version));
      if (!fn) throw UnsupportedError(std::string("cuda: this driver has no ") + name + " (green contexts need CUDA 12.5+)");
    };
    get("cuDeviceGet", 2000, a.device_get);
    get("cuDeviceGetDevResource", 12040, a.get_resource);
    get("cuDevSmResourceSplitByCount", 12040, a.split);
    get("cuDevResourceGenerateDesc", 12040, a.generate_desc);
    get("cuGreenCtxCreate", 12040, a.create);
    get("cuGreenCtxDestroy", 12040, a.destroy);
    get("cuGreenCtxStreamCreate", 12050, a.stream_create);
    return a;
  }();
  return api;
}

void check(CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) throw Error("cuda: " + what + " failed (CUresult " + std::to_string(int(r)) + ")");
}

// The device's SM resource, its primary context made first (green contexts retain it; making it here
// keeps its cost out of the green context's creation).
CUdevResource device_sms(int device, CUdevice* dev) {
  std::string why;
  if (!device_available(&why, device)) throw UnsupportedError("no usable CUDA device: " + why);
  const GreenApi& api = green_api();
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  HOTPATH_CUDA_CHECK(cudaInitDevice(device, 0, 0));  // not cudaFree(nullptr): that waits for running kernels
  check(api.device_get(dev, device), "cuDeviceGet");
  CUdevResource res{};
  check(api.get_resource(*dev, &res, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)");
  return res;
}

// Groups of at least min_count SMs, as many as the driver gives (up to `want`), and what is left.
std::vector<CUdevResource> split_groups(const CUdevResource& all, unsigned want, unsigned min_count, bool fine,
                                        CUdevResource* remaining) {
  std::vector<CUdevResource> groups(std::max(1u, want));
  unsigned n = want;
  CUdevResource input = all;
  check(green_api().split(groups.data(), &n, &input, remaining,
                          fine ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0u, min_count),
        "cuDevSmResourceSplitByCount");
  groups.resize(n);
  return groups;
}

// One split of each device at a time: the partitions of two would share SMs.
std::mutex& split_mutex() {
  static std::mutex m;
  return m;
}
std::set<int>& split_devices() {
  static std::set<int> s;
  return s;
}

}  // namespace

SmSplitFacts sm_split_facts(int device) {
  CUdevice dev = 0;
  const CUdevResource all = device_sms(device, &dev);
  SmSplitFacts f;
  f.sm_count = int(all.sm.smCount);
  // Measured by splitting (descriptors only, nothing is created): the smallest group each split gives.
  CUdevResource rest{};
  const auto plain = split_groups(all, all.sm.smCount, 1, false, &rest);
  f.min_partition = plain.empty() ? 0 : int(plain[0].sm.smCount);
  f.alignment = int(all.sm.smCoscheduledAlignment);
  const auto fine = split_groups(all, all.sm.smCount, 1, true, &rest);
  f.fine_min_partition = fine.empty() ? 0 : int(fine[0].sm.smCount);
  f.fine_groups = int(fine.size());
  return f;
}

int sm_groups(int device, int sms_each, bool fine) {
  if (sms_each < 1) return 0;
  CUdevice dev = 0;
  const CUdevResource all = device_sms(device, &dev);
  CUdevResource rest{};
  return int(split_groups(all, all.sm.smCount, unsigned(sms_each), fine, &rest).size());
}

SmPartition::~SmPartition() {
  if (ctx_) (void)green_api().destroy(reinterpret_cast<CUgreenCtx>(ctx_));
}

CUstream_st* SmPartition::make_stream(int priority) const {
  CUstream s = nullptr;
  check(green_api().stream_create(&s, reinterpret_cast<CUgreenCtx>(ctx_), CU_STREAM_NON_BLOCKING, priority),
        "cuGreenCtxStreamCreate (" + describe() + ")");
  return s;
}

CUstream_st* make_stream(const SmPartition* part, int device, int priority) {
  // Into the device's range (a green context's streams take the same), so kLowestStreamPriority is the
  // lowest on every path.
  int least = 0, greatest = 0;
  HOTPATH_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  priority = std::clamp(priority, greatest, least);
  if (part) {
    if (part->device() != device)
      throw Error("cuda: " + part->describe() + " is not on GPU " + std::to_string(device));
    return part->make_stream(priority);
  }
  cudaStream_t s = nullptr;
  HOTPATH_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  return s;
}

std::string SmPartition::describe() const {
  return std::string(rest_ ? "the rest" : "partition " + std::to_string(index_)) + " of GPU " +
         std::to_string(device_) + " (" + std::to_string(sms_) + " SMs)";
}

SmSplit::SmSplit(int device, int count, int sms_each, bool fine, bool keep_rest) : device_(device) {
  if (count < 1 || sms_each < 1)
    throw Error("cuda: an SM split needs at least 1 partition of at least 1 SM, got " + std::to_string(count) +
                " of " + std::to_string(sms_each));
  CUdevice dev = 0;
  const CUdevResource all = device_sms(device, &dev);
  {
    std::lock_guard lock(split_mutex());
    if (!split_devices().insert(device).second)
      throw UnsupportedError("cuda: GPU " + std::to_string(device) +
                             " is already split into partitions in this process (one split per GPU at a time)");
  }
  // The claim ends when the split and every partition of it are gone (engines hold their partitions).
  claim_ = std::shared_ptr<void>(new int(device), [](void* p) {
    const int* d = static_cast<int*>(p);
    {
      std::lock_guard lock(split_mutex());
      split_devices().erase(*d);
    }
    delete d;
  });
  try {
    CUdevResource remaining{};
    const auto groups = split_groups(all, unsigned(count), unsigned(sms_each), fine, &remaining);
    if (int(groups.size()) < count) {
      CUdevResource r2{};
      const int possible = int(split_groups(all, all.sm.smCount, unsigned(sms_each), fine, &r2).size());
      throw UnsupportedError("cuda: GPU " + std::to_string(device) + " (" + std::to_string(all.sm.smCount) +
                             " SMs) splits into " + std::to_string(possible) + " partitions of at least " +
                             std::to_string(sms_each) + " SMs" + (fine ? " (fine split)" : " (plain split)") +
                             ", not the " + std::to_string(count) + " asked for");
    }
    const GreenApi& api = green_api();
    auto make = [&](CUdevResource group, int index, bool rest) {
      CUdevResourceDesc desc = nullptr;
      check(api.generate_desc(&desc, &group, 1), "cuDevResourceGenerateDesc");
      CUgreenCtx ctx = nullptr;
      check(api.create(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
      auto part = std::shared_ptr<SmPartition>(
          new SmPartition(device, index, int(group.sm.smCount), rest, reinterpret_cast<CUgreenCtx_st*>(ctx)));
      part->claim_ = claim_;
      return part;
    };
    for (int i = 0; i < count; ++i) parts_.push_back(make(groups[size_t(i)], i, false));
    if (keep_rest && remaining.sm.smCount > 0) rest_ = make(remaining, count, true);
  } catch (...) {
    parts_.clear();
    rest_.reset();
    claim_.reset();
    throw;
  }
}

SmSplit::~SmSplit() = default;

}  // namespace hotpath::cuda
