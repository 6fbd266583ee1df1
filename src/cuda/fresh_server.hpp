// The fresh-window server's host side (docs/cuda.md, "Fresh windows through a persistent kernel"): launches the
// persistent kernel of kernels/fresh/ once, then sends each call's windows through its mailbox in mapped
// pinned memory and spins on the answer; a heartbeat thread renews the kernel's lease. The BatchRunner owns
// one and sends it the fresh-window calls of up to its rows.
#pragma once
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "cuda/cuda_raii.hpp"
#include "cuda/kernels/fresh/lstm_fresh.hpp"

namespace hotpath::cuda {

// The device weights the kernel reads (the batch kernels' packing; their owner outlives the server).
struct FreshWeights {
  const void* w0 = nullptr;
  const void* w[kFreshMaxLayers] = {};
  const float* bias[kFreshMaxLayers] = {};
  const float* head_w = nullptr;
  const float* head_b = nullptr;
  int I = 0, Ip = 0, H = 0, Hp = 0, L = 0, O = 0;
  bool bf16 = false;
};

class FreshServer {
 public:
  // `plan` from fresh_plan for this shape and max_window on `device` (rows > 0). Launches the kernel.
  // idle_ms: the kernel leaves after this long without a request (FreshParams::idle_ns; the next request launches
  // it again), so that the SMs go back to the device and a device-wide synchronize elsewhere in the process waits
  // at most that long. form: FreshParams::form (earlier forms of the kernel, to measure against).
  FreshServer(const FreshWeights& w, const FreshPlan& plan, int max_window, int max_rows, int device, long long lease_ms,
              long long idle_ms, unsigned form = 0);
  ~FreshServer();
  FreshServer(const FreshServer&) = delete;
  FreshServer& operator=(const FreshServer&) = delete;

  // x [rows, window, I] (already scaled) -> z [rows, O]. False when the server does not answer: it was stopped,
  // or no answer came within `timeout` (it is then stopped for good, and the caller runs the windows elsewhere).
  // rows in [1, max_rows], window in [1, max_window], every value finite: the caller's checks.
  bool run(std::span<const float> x, int rows, int window, std::span<float> z, std::chrono::microseconds timeout);
  bool serving() const { return serving_; }
  long long answered() const { return answered_; }
  long long answered_this_launch() const { return answered_launch_; }  // what profile() sums over
  long long launches() const { return launches_; }
  bool leaked() const { return leaked_; }  // a kernel that did not leave when stopped: its inputs must stay allocated
  int max_rows() const { return max_rows_; }
  int max_window() const { return max_window_; }
  int rows_per_pass() const { return plan_.rows; }
  // Where the requests' time went in the kernel: per block (layer) and FreshProf slot, SM cycles summed over the
  // requests its current launch answered (kFreshMaxLayers x kFreshProfSlots; fresh_layout.hpp). The kernel copies
  // them after each request's answer: the last request's may land a moment after run() returns.
  std::vector<unsigned long long> profile() const;

 private:
  void launch();
  void relaunch();
  bool kernel_left() const;
  void stop() noexcept;
  FreshParams params_;
  FreshPlan plan_;
  int max_window_, max_rows_, I_, O_, device_;
  size_t req_bytes_ = 0, back_bytes_ = 0;
  Chunk* req_ = nullptr;   // mapped pinned: the request
  char* back_ = nullptr;   // mapped pinned: answer chunks, status, control (separate lines)
  Chunk* out_ = nullptr;
  Status* status_ = nullptr;
  Control* control_ = nullptr;
  unsigned long long* prof_ = nullptr;
  Stream stream_;
  std::jthread heartbeat_;
  long long sent_ = 0, answered_ = 0, answered_launch_ = 0, launches_ = 0;
  bool serving_ = false;
  bool leaked_ = false;  // the kernel did not leave when asked: its mailbox stays allocated
};

}  // namespace hotpath::cuda
