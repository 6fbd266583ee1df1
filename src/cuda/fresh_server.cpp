#include "cuda/fresh_server.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/fresh_request.hpp"
#include "cuda/host_lines.hpp"
#include "cuda/memory.hpp"
#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cuda {

FreshServer::FreshServer(const FreshWeights& w, const FreshPlan& plan, int max_window, int max_rows, int device,
                         long long lease_ms, long long idle_ms, unsigned form)
    : plan_(plan), max_window_(max_window), max_rows_(max_rows), I_(w.I), O_(w.O), device_(device) {
  if (plan.rows < 1) throw Error(std::string("cuda fresh-window server: no plan: ") + plan.why);
  if (max_rows < 1 || max_window < 1) throw Error("cuda fresh-window server: needs at least one row and one step");
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  req_bytes_ = round_to_line((1 + size_t(max_rows) * size_t(fresh_row_chunks(max_window, w.I))) * sizeof(Chunk));
  const size_t out_bytes = round_to_line(size_t(max_rows) * size_t(fresh_out_chunks(w.O)) * sizeof(Chunk));
  const size_t prof_bytes = round_to_line(size_t(kFreshMaxLayers) * kFreshProfSlots * sizeof(unsigned long long));
  back_bytes_ = out_bytes + 2 * kHostLine + prof_bytes;
  req_ = static_cast<Chunk*>(pinned_alloc(req_bytes_, cudaHostAllocMapped));
  try {
    back_ = static_cast<char*>(pinned_alloc(back_bytes_, cudaHostAllocMapped));
  } catch (...) {
    pinned_free(req_, req_bytes_, cudaHostAllocMapped);
    throw;
  }
  out_ = reinterpret_cast<Chunk*>(back_);
  status_ = reinterpret_cast<Status*>(back_ + out_bytes);
  control_ = reinterpret_cast<Control*>(back_ + out_bytes + kHostLine);
  prof_ = reinterpret_cast<unsigned long long*>(back_ + out_bytes + 2 * kHostLine);
  // pinned_alloc zeroed both (the control words included); launch() clears the mailbox again before each launch
  try {
    stream_ = Stream(cudaStreamNonBlocking);
    FreshParams& p = params_;
    p.w0 = w.w0;
    for (int l = 0; l < kFreshMaxLayers; ++l) p.w[l] = w.w[l], p.bias[l] = w.bias[l];
    p.head_w = w.head_w, p.head_b = w.head_b;
    p.I = w.I, p.Ip = w.Ip, p.H = w.H, p.Hp = w.Hp, p.L = w.L, p.O = w.O, p.bf16 = w.bf16;
    p.rows = plan.rows, p.max_window = max_window, p.max_rows = max_rows, p.smem = plan.smem;
    p.req = device_view(req_);
    p.out = device_view(out_);
    p.status = device_view(status_);
    p.control = device_view(control_);
    p.lease_ns = lease_ms * 1'000'000LL;
    p.idle_ns = idle_ms * 1'000'000LL;
    p.form = form;
    p.prof = device_view(prof_);
    heartbeat_ = util::start_jthread("the cuda fresh-window heartbeat", [this](std::stop_token stop) {
      uint32_t beats = 0;
      while (!stop.stop_requested()) {
        arch::publish_word(reinterpret_cast<uint32_t*>(control_) + 1, ++beats);
        std::this_thread::sleep_for(kHeartbeatPeriod);
      }
    });
    launch();
  } catch (...) {
    stop();
    pinned_free(back_, back_bytes_, cudaHostAllocMapped);
    pinned_free(req_, req_bytes_, cudaHostAllocMapped);
    throw;
  }
}

// A clean mailbox (the sequence starts again at the kernel's first request), then the kernel.
void FreshServer::launch() {
  std::memset(static_cast<void*>(req_), 0, req_bytes_);
  std::memset(static_cast<void*>(out_), 0, size_t(max_rows_) * size_t(fresh_out_chunks(O_)) * sizeof(Chunk));
  std::memset(static_cast<void*>(status_), 0, sizeof(Status));
  std::memset(static_cast<void*>(prof_), 0, size_t(kFreshMaxLayers) * kFreshProfSlots * sizeof(unsigned long long));
  arch::store_fence();
  sent_ = 0;
  answered_launch_ = 0;
  HOTPATH_CUDA_CHECK(launch_fresh(params_, stream_.get()));
  serving_ = true;
  ++launches_;
}

// The kernel has left (its exit state written: idle, stopped, lease lapsed, a refused request).
bool FreshServer::kernel_left() const {
  uint32_t w[4];
  std::atomic_signal_fence(std::memory_order_seq_cst);
  arch::load16(status_, w);
  return w[2] != 0u;
}

// After an idle exit: wait for the stream (the kernel is past its last store), then a new launch.
void FreshServer::relaunch() {
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  launch();
}

void FreshServer::stop() noexcept {
  // No header for a kernel that starts late (queued behind other work) to serve: it sees none, then the stop.
  if (req_) arch::store16(req_, 0u, 0u, 0u, 0u);
  if (control_) arch::publish_word(reinterpret_cast<uint32_t*>(control_), 1);
  heartbeat_.request_stop();
  if (heartbeat_.joinable()) heartbeat_.join();
  // The kernel sees the stop within the lease check's period (~20 us) once it polls for a request again;
  // it is finished when its stream is. One that does not finish within the wait (stuck part-way through a
  // request) keeps its mailbox: the memory is left allocated rather than freed under it.
  if (serving_ && stream_ && !stream_.finish_within(kStopWait)) leaked_ = true;
  serving_ = false;
}

FreshServer::~FreshServer() {
  stop();
  if (leaked_) return;
  pinned_free(back_, back_bytes_, cudaHostAllocMapped);
  pinned_free(req_, req_bytes_, cudaHostAllocMapped);
}

std::vector<unsigned long long> FreshServer::profile() const {
  std::vector<unsigned long long> v(size_t(kFreshMaxLayers) * kFreshProfSlots);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  for (size_t i = 0; i < v.size(); ++i) v[i] = reinterpret_cast<const volatile unsigned long long*>(prof_)[i];
  return v;
}

bool FreshServer::run(std::span<const float> x, int rows, int window, std::span<float> z, std::chrono::microseconds timeout) {
  if (!serving_) return false;
  if (rows < 1 || rows > max_rows_ || window < 1 || window > max_window_ ||
      x.size() != size_t(rows) * size_t(window) * size_t(I_) || z.size() < size_t(rows) * size_t(O_))
    throw Error("cuda fresh-window server: a request of " + std::to_string(rows) + " rows of " + std::to_string(window) +
                " steps does not fit it (up to " + std::to_string(max_rows_) + " rows of " + std::to_string(max_window_) +
                " steps) or its arrays");
  auto t0 = std::chrono::steady_clock::now();
  if (kernel_left()) relaunch();  // it went idle since the last request
  uint32_t seq = wire_seq(sent_++);
  write_fresh_request(req_, seq, x, rows, window, I_, max_window_);
  for (unsigned n = 1;; ++n) {
    if (read_fresh_answer(out_, seq, rows, O_, z)) {
      ++answered_;
      ++answered_launch_;
      return true;
    }
    if ((n & 1023u) == 0u) {
      // it went idle just as the request came (before it took the header): again, on a new launch, with the
      // timeout counted from there
      if (kernel_left()) {
        relaunch();
        t0 = std::chrono::steady_clock::now();
        seq = wire_seq(sent_++);
        write_fresh_request(req_, seq, x, rows, window, I_, max_window_);
        continue;
      }
      if (std::chrono::steady_clock::now() - t0 > timeout) break;
    }
  }
  stop();  // a late answer would land on the next request's: never serve again
  return false;
}

}  // namespace hotpath::cuda
