#include "engine/instances.hpp"

#include <climits>

#include "engine/warm.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/batch_runner.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/shared_launch.hpp"
#include "cuda/sm_partition.hpp"
#endif

namespace hotpath::engine {

namespace {
// The options' own sense, before any device is asked.
void check_instance_options(const InstanceOptions& io) {
  if (io.count < 1) throw Error("the instance count (--instances) must be at least 1");
  if (io.sms_each < 0) throw Error("--sms-per-instance must be at least 1 (or 0: as many as fit)");
}
}  // namespace

InstanceLayout plan_instances(const InstanceOptions& io, int device_sms, int plain_group, int fine_group,
                              const GroupCount& groups) {
  check_instance_options(io);
  if (device_sms < 1 || plain_group < 1 || fine_group < 1)
    throw UnsupportedError("this GPU cannot be split into SM partitions");
  InstanceLayout l;
  l.isolation = io.isolation;
  l.count = io.count;
  l.device_sms = device_sms;
  if (io.isolation == Isolation::shared) {
    l.placement = io.placement;
    // One launch: a critical and at least one precompute block per instance, one block per SM.
    const int each = io.sms_each > 0 ? std::max(2, io.sms_each) : (io.beside ? 2 : device_sms / io.count);
    const long need = long(io.count) * std::max(each, 2);
    if (need > device_sms - (io.beside ? 1 : 0))
      throw UnsupportedError(std::to_string(io.count) + " instances in one launch" +
                             (io.beside ? " with SMs left beside it" : "") + " need " + std::to_string(need) +
                             " SMs (a critical and a precompute block each, one block an SM); this GPU has " +
                             std::to_string(device_sms) + " (at most " + std::to_string(device_sms / 2) + " instances)");
    l.sms_each = each;
    l.granularity = 1;
    l.launch_sms = io.beside ? 0 : device_sms;
    if (io.beside) {
      // The launch's partition: the smallest plain group that holds it, else the fine split's.
      for (const bool fine : {false, true}) {
        const int g = fine ? fine_group : plain_group;
        const int sms = int((need + g - 1) / g * g);
        if (sms < device_sms && groups(sms, fine) >= 1) {
          l.launch_sms = sms;
          l.fine = fine;
          l.granularity = g;
          break;
        }
      }
      if (l.launch_sms == 0)
        throw UnsupportedError(std::to_string(io.count) + " instances in one launch leave no SMs beside it on this GPU");
      l.rest_sms = device_sms - l.launch_sms;
    }
    return l;
  }
  // With a throughput engine beside them, the instances' groups must leave SMs over.
  auto fits = [&](int sms, bool fine) {
    return groups(sms, fine) >= io.count && (!io.beside || long(io.count) * sms < device_sms);
  };
  auto take = [&](int sms, bool fine) {
    l.sms_each = sms;
    l.fine = fine;
    l.granularity = fine ? fine_group : plain_group;
    l.rest_sms = io.beside ? device_sms - io.count * sms : 0;
    return l;
  };
  if (io.sms_each > 0) {
    // The plain split where the size is one of its multiples, else the fine one (sizes round up).
    const bool fine = io.sms_each % plain_group != 0;
    const int g = fine ? fine_group : plain_group;
    const int sms = (io.sms_each + g - 1) / g * g;
    if (fits(sms, fine)) return take(sms, fine);
    throw UnsupportedError(std::to_string(io.count) + " instances of " + std::to_string(sms) + " SMs" +
                           (io.beside ? " with SMs left beside them" : "") + " do not fit this GPU's " +
                           std::to_string(device_sms) + " SMs: its " + (fine ? "fine" : "plain") + " split gives " +
                           std::to_string(groups(sms, fine)) + " groups of " + std::to_string(sms));
  }
  for (const bool fine : {false, true}) {
    const int g = fine ? fine_group : plain_group;
    if (io.beside) {
      if (fits(g, fine)) return take(g, fine);
      continue;
    }
    for (int sms = device_sms / io.count / g * g; sms >= g; sms -= g)
      if (fits(sms, fine)) return take(sms, fine);
  }
  const int most = std::max(groups(fine_group, true) - (io.beside ? 1 : 0), 0);
  throw UnsupportedError(std::to_string(io.count) + " instances" + (io.beside ? " with SMs left beside them" : "") +
                         " do not fit this GPU's " + std::to_string(device_sms) + " SMs: at most " +
                         std::to_string(most) + " (groups of " + std::to_string(plain_group) + " SMs, or of " +
                         std::to_string(fine_group) + " with the fine split)");
}

Engine& InstanceSet::operator[](size_t k) {
  if (!engines_.at(k)) throw Error("instance " + std::to_string(k) + " has no engine (its last restart failed)");
  return *engines_[k];
}

namespace {
// Every option checked before the device is touched ("auto" becomes cuda).
void check_options(const Model& model, EngineOptions* options, const InstanceOptions& io) {
  check_instance_options(io);
  if (options->backend == BackendKind::automatic) options->backend = BackendKind::cuda;
  if (options->backend != BackendKind::cuda)
    throw Error(std::string("many instances on one GPU need the cuda backend (--backend cuda), not ") +
                util::name_of(options->backend));
  if (options->fallback != Fallback::none) throw Error("--fallback is not available with --instances");
  (void)backend_options(model, *options);
}
}  // namespace

#ifdef HOTPATH_HAVE_CUDA

struct InstanceSet::Split {
  std::unique_ptr<cuda::SmSplit> sms;            // green: a partition per instance (and the rest); shared: the launch's and the rest
  std::shared_ptr<cuda::SharedLaunch> launch;    // shared: gone before the partitions
};

InstanceSet::InstanceSet(const Model& model, const EngineOptions& options, const InstanceOptions& io)
    : model_(model), options_(options), split_(std::make_unique<Split>()) {
  check_options(model_, &options_, io);
  const cuda::SmSplitFacts f = cuda::sm_split_facts(options_.gpu.device);
  const int device = options_.gpu.device;
  layout_ = plan_instances(io, f.sm_count, f.min_partition, f.fine_min_partition,
                           [device](int sms, bool fine) { return cuda::sm_groups(device, sms, fine); });
  const bool shared = layout_.isolation == Isolation::shared;
  if (!shared) {
    split_->sms = std::make_unique<cuda::SmSplit>(options_.gpu.device, layout_.count, layout_.sms_each, layout_.fine, io.beside);
  } else if (io.beside) {
    split_->sms = std::make_unique<cuda::SmSplit>(options_.gpu.device, 1, layout_.launch_sms, layout_.fine, true);
    layout_.launch_sms = split_->sms->partitions()[0]->sm_count();
  }
  if (io.beside) layout_.rest_sms = split_->sms->rest() ? split_->sms->rest()->sm_count() : 0;
  if (io.beside && layout_.rest_sms == 0) throw UnsupportedError("no SMs are left beside the instances");
  // Before any tick kernel runs: the throughput kernels loaded (one loaded later would wait for the
  // persistent kernels forever), and the engine beside the instances made.
  cuda::preload_batch_kernels(options_.gpu.device);
  if (io.beside) beside_ = make_beside();
  if (shared) {
    cuda::SharedLaunchOptions so;
    if (io.beside) so.partition = split_->sms->partitions()[0];
    so.sms_per_instance = layout_.sms_each;  // as planned (an asked 1 became 2)
    so.by_sm = io.placement == Placement::sm;
    split_->launch = std::make_shared<cuda::SharedLaunch>(model_, backend_options(model_, options_), so, layout_.count);
  }
  for (size_t k = 0; k < size_t(layout_.count); ++k) engines_.push_back(make_instance(k));
}

InstanceSet::~InstanceSet() {
  engines_.clear();
  beside_.reset();
  split_->launch.reset();  // after its instances, before the partitions
}

std::unique_ptr<Engine> InstanceSet::make_instance(size_t k) const {
  const BackendOptions bo = backend_options(model_, options_);
  CudaOptions co;
  if (split_->launch) {
    co.shared = split_->launch;
    co.slot = int(k);
  } else {
    co.partition = split_->sms->partitions().at(k);
  }
  auto engine = std::make_unique<Engine>(model_, make_cuda_backend(model_, bo, co), options_.metrics);
  if (options_.warm) (void)warm(engine->backend());
  return engine;
}

void InstanceSet::restart(size_t k) {
  engines_.at(k).reset();  // its partition is free again before the new engine claims it
  engines_[k] = make_instance(k);
}

std::unique_ptr<Engine> InstanceSet::beside_engine() {
  if (!beside_) throw Error("this instance set keeps no throughput engine (InstanceOptions::beside), or gave it away");
  return std::move(beside_);
}

std::unique_ptr<Engine> InstanceSet::make_beside() const {
  const auto rest = split_->sms ? split_->sms->rest() : nullptr;
  if (!rest) throw Error("this instance set keeps no SMs for a throughput engine (InstanceOptions::beside)");
  const BackendOptions bo = backend_options(model_, options_);
  CudaOptions co;
  co.partition = rest;
  co.throughput_only = true;
  co.batch_priority = cuda::kLowestStreamPriority;
  return std::make_unique<Engine>(model_, make_cuda_backend(model_, bo, co));
}

#else

struct InstanceSet::Split {};

InstanceSet::InstanceSet(const Model& model, const EngineOptions& options, const InstanceOptions& io)
    : model_(model), options_(options) {
  check_options(model_, &options_, io);
  throw UnsupportedError("many instances on one GPU: this hotpath was built without CUDA (no usable CUDA device)");
}
InstanceSet::~InstanceSet() = default;
std::unique_ptr<Engine> InstanceSet::make_instance(size_t) const { return nullptr; }
void InstanceSet::restart(size_t) {}
std::unique_ptr<Engine> InstanceSet::beside_engine() { return nullptr; }
std::unique_ptr<Engine> InstanceSet::make_beside() const { return nullptr; }

#endif

}  // namespace hotpath::engine
