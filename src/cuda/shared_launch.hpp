// Many instances of one model in ONE persistent launch (mechanism b, docs/cuda.md): a critical block and
// np precompute blocks per instance, all in one cooperative grid on the SMs of a partition (or the whole
// device); for instance counts beyond what green contexts give, or to spend no SMs on partition
// rounding. The kernel side is MultiLaunch (kernels/lstm_params.hpp). The launch owns the device memory
// its kernel reads, made before the kernel starts: one copy of the weights for every instance (one copy
// in L2, not one per instance) and each instance's state buffers. Each instance is a cuda backend of
// its own (CudaOptions::shared + slot: its host side, the slot's mailbox and buffers), which starts its instance by
// handing instance_params() plus its mailbox to start(); an instance stops and restarts alone while the
// others serve. Instances of a shared launch have no SMs for the throughput path (backtests are
// refused there; a throughput engine belongs on the SMs beside the launch).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_claim.hpp"
#include "cuda/kernels/common/lstm_params.hpp"
#include "cuda/mailbox_host.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/sm_partition.hpp"
#include "model/model.hpp"

namespace hotpath::cuda {

struct SharedLaunchOptions {
  std::shared_ptr<SmPartition> partition;  // null: the whole device
  MailboxOptions mailbox;                   // every instance's mailbox
  std::optional<CudaVariant> variant;       // unset: BackendOptions' (as CudaOptions::variant)
  int sms_per_instance = 0;                 // > 0: at most this many blocks (SMs) per instance
  double lease_ms = 1000;                   // the group's lease (every block leaves when it lapses)
  double heartbeat_ms = 20;
  // Where an instance's blocks go: neighbouring SMs, like a partition (true), or by block index, as the
  // hardware spreads them (false). kernels/lstm_params.hpp, MultiLaunch::by_sm.
  bool by_sm = true;
};

class SharedLaunch {
 public:
  // Plans `model` for `count` instances (cta family: one critical block each, and (SMs / count) - 1
  // precompute blocks (or sms_per_instance - 1), at least 1) and launches the kernel with every instance parked. Throws
  // UnsupportedError naming the limit when they do not fit (or the model needs a multi-block kernel).
  SharedLaunch(const Model& model, const BackendOptions& options, const SharedLaunchOptions& shared, int count);
  ~SharedLaunch();  // every block leaves; an instance still serving leaves once its own lease lapses
  SharedLaunch(const SharedLaunch&) = delete;
  SharedLaunch& operator=(const SharedLaunch&) = delete;

  int count() const { return count_; }
  int device() const { return device_; }
  const LstmPlan& plan() const { return plan_; }  // every instance's (device pointers null)
  const std::string& variant() const { return variant_; }  // "regs" or "smem"
  const DeviceLimits& limits() const { return limits_; }
  const SmPartition* partition() const { return shared_.partition.get(); }
  double lease_ms() const { return shared_.lease_ms; }

  // One engine per instance: claim_slot throws UnsupportedError when instance k already has one.
  void claim_slot(int k);
  void release_slot(int k);
  // Instance k's parameters: the plan with the launch's weights and slot k's own state buffers; the
  // caller adds its mailbox and options.
  LstmParams instance_params(int k) const;
  // Instance k's mailbox (made before the kernel starts, like all it reads; kept across its engines).
  HostMailbox& mailbox(int k) const { return *mailboxes_.at(size_t(k)); }
  // Copies slot k's kernel words (counters and timings, for the engine's stats) on the launch's copy
  // stream: an instance makes no stream of its own (making streams while the launch holds every SM
  // can wait for it: cudaStreamCreate hung at the 17th instance of 32 on the H200).
  bool read_words(int k, SharedWords& out) const;
  // Starts instance k's next generation with `params` (instance_params(k) and the caller's mailbox,
  // cleared by the caller); zeroes slot k's state first. Its blocks must be parked (or never started).
  void start(int k, const LstmParams& params);
  // Every block of instance k has parked after its current generation (or it was never started).
  bool parked(int k) const;
  // The launch is still on the GPU, as of the last heartbeat (a flag: no driver call, so every
  // instance's thread may ask on its hot path; a launch that ended is seen within a heartbeat period).
  bool running() const;
  // Why the launch ended ("" while it runs).
  std::string ended_why() const;

 private:
  int device_, count_;
  SharedLaunchOptions shared_;
  std::unique_ptr<DeviceClaim> claim_;
  Stream stream_, copy_stream_;
  DeviceLimits limits_;
  LstmPlan plan_;
  std::string variant_;
  MultiLaunch multi_;
  DeviceBuffer<LstmParams> params_;
  DeviceBuffer<unsigned> sm_keys_;
  DeviceBuffer<uint32_t> frags_;  // the weights, one copy for every instance
  DeviceBuffer<float> head_b_, head_w_, pre_w_;
  struct SlotBuffers {  // one instance's state (its LstmParams' per-instance pointers)
    DeviceBuffer<float> h_state, pub_P, pub_c, xbuf, pre_state;
    DeviceBuffer<SharedWords> words;
  };
  std::vector<SlotBuffers> slots_;
  std::vector<std::unique_ptr<HostMailbox>> mailboxes_;
  unsigned* go_ = nullptr;      // [count] mapped host memory
  unsigned* parked_ = nullptr;  // [count * per_instance] mapped host memory
  Control* control_ = nullptr;  // mapped host memory
  size_t go_bytes_ = 0, parked_bytes_ = 0;
  std::vector<unsigned> gen_;   // generation each instance was last started at
  std::vector<bool> taken_;     // instances with an engine
  std::mutex slots_mutex_;
  bool running_ = false;
  std::atomic<bool> lapsed_{false};  // the heartbeat missed a whole lease (running() false from then)
  std::atomic<bool> ended_{false};   // the heartbeat found the kernel no longer running
  std::jthread heartbeat_;
};

}  // namespace hotpath::cuda
