// The hybrid backend's GPU half, host side (docs/hybrid.md): plans, uploads and launches the precompute-only
// kernel (kernels/hybrid/), sends it each tick's input through the mailbox's ring and waits for the state it
// publishes into mapped host memory; a heartbeat thread renews its lease. The CPU half (cpu/window_feed.hpp)
// reads that state through src/hybrid/.
#pragma once
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "cuda/cuda_raii.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/mailbox_host.hpp"
#include "model/model.hpp"

namespace hotpath::cuda {

class DeviceClaim;

// Where the state goes: the CPU critical step's layout (cpu/window_feed.hpp's CriticalStateLayout, whose
// fields these are; the cuda library does not see the cpu one).
struct ExportLayout {
  int lanes = 0;
  size_t gate_floats = 0, layer_floats = 0;
};

class HybridPrecompute {
 public:
  // Throws UnsupportedError naming why (no usable GPU, the model does not fit the precompute blocks, the GPU
  // already runs a hotpath kernel in this process) and Error for a layout that cannot hold the model.
  // form: the precompute's (plan_hybrid: the tensor cores where a block holds them, else fp32 dot products).
  HybridPrecompute(const Model& model, Mode mode, int window, const ExportLayout& layout, int device, double lease_ms,
                   HybridForm form = HybridForm::automatic, const HybridTuning& tuning = {});
  ~HybridPrecompute();
  HybridPrecompute(const HybridPrecompute&) = delete;
  HybridPrecompute& operator=(const HybridPrecompute&) = delete;

  // Tick t's state, once published: null when it has not come within `timeout` or the kernel has left (*why,
  // if given, says which). *waited: not there at the first look.
  const float* wait(long long t, std::chrono::nanoseconds timeout, bool* waited, std::string* why);
  // Tick t's input, scaled: the open windows advance by it on the GPU. A GPU so far behind that t's ring slot
  // still holds an input it has not read is given up (every later wait() says so) rather than sent.
  void send(std::span<const float> x, long long t);
  // Every window fresh: the kernel stopped and launched again (the next tick is 0).
  void restart();
  std::string describe() const;
  std::map<std::string, double> counters() const;
  void clear_counters() { waits_ = 0; wait_ns_ = 0; }

 private:
  void launch();
  void stop() noexcept;
  bool kernel_left(std::string* why) const;
  LstmPlan plan_;
  ExportLayout layout_;
  int device_;
  double lease_ms_;
  std::string gpu_name_;
  std::unique_ptr<DeviceClaim> claim_;
  Stream stream_, side_stream_;  // the kernel's; reads of its words while it runs
  DeviceBuffer<float> pre_w_, h_state_, xbuf_, pre_state_;
  DeviceBuffer<Chunk> xmirror_;  // HybridTuning::input_mirror: two ticks of input chunks
  bool input_mirror_ = false;
  DeviceBuffer<uint32_t> frags_;  // the tensor-core form's weights
  DeviceBuffer<SharedWords> words_;
  std::unique_ptr<HostMailbox> mailbox_;
  char* export_ = nullptr;  // mapped pinned: the seq line, then two ticks' state
  size_t export_bytes_ = 0;
  unsigned long long* seq_ = nullptr;
  float* state_ = nullptr;
  std::jthread heartbeat_;
  bool running_ = false, leaked_ = false;
  bool lost_ = false;  // the GPU fell past its input ring (send): no state until restart()
  long long launches_ = 0, waits_ = 0, wait_ns_ = 0;
};

}  // namespace hotpath::cuda
