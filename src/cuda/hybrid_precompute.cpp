#include "cuda/hybrid_precompute.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/device.hpp"
#include "cuda/device_claim.hpp"
#include "cuda/host_lines.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/kernels/hybrid/lstm_hybrid.hpp"
#include "cuda/memory.hpp"
#include "util/arch.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cuda {
namespace {
constexpr auto kStartWait = std::chrono::seconds(20);  // how long a launch may take to publish tick 0
}  // namespace

HybridPrecompute::HybridPrecompute(const Model& model, Mode mode, int window, const ExportLayout& layout, int device,
                                   double lease_ms, HybridForm form, const HybridTuning& tuning)
    : layout_(layout), device_(device), lease_ms_(lease_ms) {
  if (tuning.stage_rows < 1 || tuning.stage_rows > HybridTuning::kMaxStageRows)
    throw Error("hybrid precompute: stage rows " + std::to_string(tuning.stage_rows) + ": 1 to " +
                std::to_string(HybridTuning::kMaxStageRows));
  if (const int cs = tuning.stage_cluster; cs < 1 || cs > HybridTuning::kMaxStageCluster || (cs & (cs - 1)) != 0)
    throw Error("hybrid precompute: stage cluster " + std::to_string(cs) + ": 1, 2, 4 or 8 blocks");
  const ModelConfig& cfg = model.config;
  const int H = cfg.hidden_size, L = cfg.num_layers;
  if (layout.lanes < 1 || layout.gate_floats < size_t((H + layout.lanes - 1) / layout.lanes) * 4 * size_t(layout.lanes) ||
      layout.layer_floats < layout.gate_floats + size_t(H))
    throw Error("hybrid precompute: the state layout (" + std::to_string(layout.lanes) + " lanes, " +
                std::to_string(layout.gate_floats) + " gate floats, " + std::to_string(layout.layer_floats) +
                " a layer) cannot hold " + std::to_string(H) + " hidden units");
  std::string why;
  if (!device_available(&why, device)) throw UnsupportedError("hybrid backend: " + why);
  const DeviceLimits limits = query_device_limits(device);
  gpu_name_ = limits.name;
  if (tuning.max_blocks < 0) throw Error("hybrid precompute: max blocks " + std::to_string(tuning.max_blocks) + ": 0 (all) or more");
  plan_ = plan_hybrid(model, mode, window, MailboxOptions{}, limits, tuning.max_blocks, form, tuning.fp16_products);
  plan_.params.hy_stage_rows = tuning.stage_rows;
  plan_.params.hy_round_fence = tuning.round_fence ? 1 : 0;
  plan_.params.hy_release_barrier = tuning.release_barrier ? 1 : 0;
  plan_.params.hy_last_whole = tuning.last_whole ? 1 : 0;
  // the shared staging needs whole clusters of precompute blocks (the feeder's cluster stages nothing)
  plan_.params.hy_cluster = plan_.params.hy_mma && plan_.params.np % tuning.stage_cluster == 0 ? tuning.stage_cluster : 1;
  // the bulk copies move whole 16-byte rows into a block's own staging
  plan_.params.hy_stage_tma =
      tuning.stage_tma && plan_.params.hy_mma && plan_.params.hy_row_words % 4 == 0 && plan_.params.hy_cluster == 1 ? 1 : 0;
  input_mirror_ = tuning.input_mirror && plan_.params.hy_mma;  // the fp32 form reads xbuf only
  claim_ = std::make_unique<DeviceClaim>(device, nullptr);
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  stream_ = Stream(cudaStreamNonBlocking);
  side_stream_ = Stream(cudaStreamNonBlocking);
  const LstmParams& p = plan_.params;
  pre_w_ = DeviceBuffer<float>(plan_.pre_w.size());
  h_state_ = DeviceBuffer<float>(size_t(L) * size_t(p.nslots) * size_t(p.hy_mma ? p.hy_row_words : H));
  xbuf_ = DeviceBuffer<float>(size_t(p.I));
  words_ = DeviceBuffer<SharedWords>(1);
  if (plan_.pre_state_floats > 0) pre_state_ = DeviceBuffer<float>(size_t(p.np) * size_t(plan_.pre_state_floats));
  pre_w_.upload(plan_.pre_w.data(), plan_.pre_w.size(), stream_.get());
  if (p.hy_mma) {
    frags_ = DeviceBuffer<uint32_t>(plan_.frags.size());
    frags_.upload(plan_.frags.data(), plan_.frags.size(), stream_.get());
  }
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  mailbox_ = std::make_unique<HostMailbox>(p.I, 1, MailboxOptions{});
  const size_t tick_floats = layout.layer_floats * size_t(L);
  export_bytes_ = kHostLine + round_to_line(2 * tick_floats * sizeof(float));
  export_ = static_cast<char*>(pinned_alloc(export_bytes_, cudaHostAllocMapped));  // zeroed: padding units stay 0
  seq_ = reinterpret_cast<unsigned long long*>(export_);
  state_ = reinterpret_cast<float*>(export_ + kHostLine);
  try {
    launch();
  } catch (...) {
    stop();
    if (!leaked_) pinned_free(export_, export_bytes_, cudaHostAllocMapped);
    throw;
  }
}

HybridPrecompute::~HybridPrecompute() {
  stop();
  if (leaked_) {  // a kernel that did not leave keeps what it writes to
    (void)mailbox_.release();
    (void)pre_w_.release(), (void)h_state_.release(), (void)xbuf_.release(), (void)pre_state_.release(), (void)words_.release();
    (void)frags_.release(), (void)xmirror_.release();
    (void)claim_.release();
    return;
  }
  pinned_free(export_, export_bytes_, cudaHostAllocMapped);
}

// A clean mailbox, state and words (the sequence starts again at tick 0), then the kernel; returns once it has
// published tick 0's state.
void HybridPrecompute::launch() {
  mailbox_->clear();  // the heartbeat is stopped (stop()): nobody else writes the control chunk
  *reinterpret_cast<volatile unsigned long long*>(seq_) = 0;
  arch::store_fence();
  heartbeat_ = util::start_jthread("the hybrid precompute's heartbeat", [this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      mailbox_->beat();
      std::this_thread::sleep_for(kHeartbeatPeriod);
    }
  });
  words_.zero(stream_.get());
  h_state_.zero(stream_.get());
  if (input_mirror_) {
    // zeroed at each launch: an earlier launch's chunks carry sequence words this one will use again
    if (!xmirror_.get()) xmirror_ = DeviceBuffer<Chunk>(2 * size_t(mailbox_->view(0).n_in));
    xmirror_.zero(stream_.get());
  }
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  LstmParams p = plan_.params;
  p.mb = mailbox_->view((long long)(lease_ms_ * 1e6));
  p.pre_w = pre_w_.get();
  p.h_state = h_state_.get();
  p.xbuf = xbuf_.get();
  p.hy_xmirror = input_mirror_ ? xmirror_.get() : nullptr;
  p.words = words_.get();
  p.pre_state = pre_state_.get();
  p.hy_frags = frags_.get();
  p.export_state = device_view(state_);
  p.export_seq = device_view(seq_);
  p.export_lanes = layout_.lanes;
  p.export_gate_floats = int(layout_.gate_floats);
  p.export_layer_floats = int(layout_.layer_floats);
  p.export_tick_floats = int(layout_.layer_floats * size_t(p.L));
  long long fits = 0;
  const cudaError_t e = launch_hybrid(p, stream_.get(), &fits);
  if (e == cudaErrorCooperativeLaunchTooLarge)
    throw UnsupportedError("hybrid backend: its precompute needs " + std::to_string(hybrid_grid(p)) + " co-resident blocks of " +
                           std::to_string(kHybridThreads) + " threads and " + std::to_string(p.smem_bytes / 1024) +
                           " KiB shared memory" + (p.hy_cluster > 1 ? " in clusters of " + std::to_string(p.hy_cluster) : std::string()) +
                           "; " + gpu_name_ + " fits " + std::to_string(fits));
  if (e != cudaSuccess) throw_cuda(e, "launch_hybrid");
  running_ = true;
  ++launches_;
  const auto deadline = std::chrono::steady_clock::now() + kStartWait;
  std::string why;
  while (mailbox_->status().ready != wire_seq(0)) {
    if (kernel_left(&why) || std::chrono::steady_clock::now() > deadline) {
      if (why.empty()) why = "it did not start within " + std::to_string(kStartWait.count()) + " s";
      stop();
      throw BackendError("hybrid backend: the GPU precompute " + why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

bool HybridPrecompute::kernel_left(std::string* why) const {
  if (!running_) {
    if (why) *why = "is not running (stopped after an earlier failure)";
    return true;
  }
  const cudaError_t e = cudaStreamQuery(stream_.get());
  if (e == cudaErrorNotReady) return false;
  const Status st = mailbox_->status();
  if (why) {
    *why = e != cudaSuccess ? std::string("failed: ") + cudaGetErrorString(e)
           : st.state == kLeaseExpired ? "left: its lease lapsed (no heartbeat from the host)"
           : st.state == kStopped      ? "was stopped"
                                       : "left";
  }
  return true;
}

void HybridPrecompute::stop() noexcept {
  if (mailbox_) mailbox_->request_stop();
  heartbeat_.request_stop();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (running_ && stream_ && !stream_.finish_within(kStopWait)) leaked_ = true;
  running_ = false;
}

void HybridPrecompute::restart() {
  stop();
  lost_ = false;
  if (leaked_) throw BackendError("hybrid backend: the GPU precompute did not leave when asked; it cannot start again");
  launch();
}

// The ring holds kInputRing ticks: tick t's slot is tick t - kInputRing's. That one's input was surely read
// once round t - kInputRing is published (sequence word t - kInputRing + 2); a GPU further behind (the host
// went on after timeouts) would find its input overwritten and wait for it forever: it is given up instead.
void HybridPrecompute::send(std::span<const float> x, long long t) {
  if (lost_) return;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  const long long published = (long long)*reinterpret_cast<const volatile unsigned long long*>(seq_);
  if (t - kInputRing + 2 > published) {
    lost_ = true;
    return;
  }
  mailbox_->send(t, x);
}

const float* HybridPrecompute::wait(long long t, std::chrono::nanoseconds timeout, bool* waited, std::string* why) {
  const unsigned long long want = (unsigned long long)(t + 1);
  auto published = [&] {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return *reinterpret_cast<const volatile unsigned long long*>(seq_) >= want;
  };
  const float* state = state_ + size_t(t & 1) * layout_.layer_floats * size_t(plan_.params.L);
  if (lost_) {
    *waited = false;
    if (why)
      *why = "the GPU precompute fell " + std::to_string(kInputRing) +
             " ticks behind the inputs (its input ring overflowed after timeouts); no state for tick " + std::to_string(t) +
             " until a reset";
    return nullptr;
  }
  if (published()) {
    *waited = false;
    std::atomic_thread_fence(std::memory_order_acquire);
    return state;
  }
  *waited = true;
  const int64_t t0 = util::steady_ns();
  for (unsigned n = 1;; ++n) {
    arch::cpu_relax();
    if (published()) break;
    if ((n & 255u) == 0u) {
      std::string left;
      if (kernel_left(&left)) {
        if (why) *why = "the GPU precompute " + left + "; no state for tick " + std::to_string(t);
        return nullptr;
      }
      if (util::steady_ns() - t0 > timeout.count()) {
        if (why)
          *why = "the GPU precompute's state for tick " + std::to_string(t) + " did not come within " +
                 std::to_string(timeout.count() / 1000) + " us";
        return nullptr;
      }
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  ++waits_;
  wait_ns_ += util::steady_ns() - t0;
  return state;
}

std::string HybridPrecompute::describe() const {
  const LstmParams& p = plan_.params;
  return "the cuda precompute on " + gpu_name_ + " (" + std::to_string(p.np) + " blocks of " + std::to_string(p.U) +
         (p.U == 1 ? " unit" : " units") +
         (p.hy_mma ? (p.hy_fp16 ? ", the windows' products on the tensor cores, fp16 operands"
                                : ", the windows' products on the tensor cores, fp16 hi + lo halves")
                   : std::string(", fp32 weights") + (p.pre_global ? " in global memory" : " in shared memory")) +
         ")";
}

std::map<std::string, double> HybridPrecompute::counters() const {
  std::map<std::string, double> c;
  c["gpu_precompute_launches"] = double(launches_);
  c["gpu_precompute_waits"] = double(waits_);  // states not there at the first look
  if (waits_ > 0) c["gpu_precompute_wait_us_mean"] = double(wait_ns_) * 1e-3 / double(waits_);
  c["gpu_precompute_blocks"] = double(plan_.params.np);
  c["gpu_precompute_mma"] = plan_.params.hy_mma ? 1.0 : 0.0;
  // the kernel's variant (HybridTuning), so a run's record says which ran
  c["gpu_precompute_stage_rows"] = plan_.params.hy_mma ? plan_.params.hy_stage_rows : 0;  // the mma form's
  c["gpu_precompute_round_fence"] = plan_.params.hy_round_fence;
  c["gpu_precompute_release_barrier"] = plan_.params.hy_release_barrier;
  c["gpu_precompute_input_mirror"] = input_mirror_ ? 1.0 : 0.0;
  c["gpu_precompute_stage_cluster"] = plan_.params.hy_mma ? plan_.params.hy_cluster : 0;
  c["gpu_precompute_stage_tma"] = plan_.params.hy_stage_tma;
  c["gpu_precompute_fp16_products"] = plan_.params.hy_fp16;
  c["gpu_precompute_last_whole"] = plan_.params.hy_mma ? plan_.params.hy_last_whole : 1;  // fp32: always whole
  // the rounds as the precompute's block 0 lives them (PrecomputeStat), SM cycles a round, this launch's
  SharedWords w{};
  if (words_.get() && cudaMemcpyAsync(&w, words_.get(), sizeof w, cudaMemcpyDeviceToHost, side_stream_.get()) == cudaSuccess &&
      cudaStreamSynchronize(side_stream_.get()) == cudaSuccess && w.pre_sum[kPreRounds] > 0) {
    const double rounds = double(w.pre_sum[kPreRounds]);
    for (int i = kPreLayer0; i < (plan_.params.hy_mma ? int(kPrecomputeStats) : int(kPreMmaParts)); ++i)
      c[std::string("gpu_precompute_") + kPrecomputeStatNames[i] + "_cycles_mean"] = double(w.pre_sum[i]) / rounds;
  }
  (void)cudaGetLastError();
  return c;
}

}  // namespace hotpath::cuda
