#include "cuda/shared_launch.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "cuda/cuda_check.hpp"
#include "cuda/device.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/memory.hpp"
#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cuda {
namespace {
using Clock = std::chrono::steady_clock;
constexpr unsigned kMapped = cudaHostAllocMapped;
}  // namespace

SharedLaunch::SharedLaunch(const Model& model, const BackendOptions& options, const SharedLaunchOptions& shared,
                           int count)
    : device_(options.gpu.device), count_(count), shared_(shared) {
  if (count < 1) throw Error("cuda: a shared launch needs at least 1 instance");
  if (options.mode == Mode::batch) throw Error("cuda: a shared launch serves ticks (window or streaming)");
  std::string why;
  if (!device_available(&why, device_)) throw UnsupportedError("no usable CUDA device: " + why);
  claim_ = std::make_unique<DeviceClaim>(device_, shared_.partition.get());
  HOTPATH_CUDA_CHECK(cudaSetDevice(device_));
  stream_ = Stream::adopt(make_stream(shared_.partition.get(), device_));
  copy_stream_ = Stream(cudaStreamNonBlocking);
  limits_ = query_stream_limits(device_, stream_.get());
  const int per = shared_.sms_per_instance > 0 ? std::min(shared_.sms_per_instance, limits_.sm_count / count)
                                              : limits_.sm_count / count;
  const int np = per - 1;
  if (np < 1)
    throw UnsupportedError("a shared launch of " + std::to_string(count) + " instances needs " + std::to_string(2 * count) +
                           " SMs (a critical and a precompute block each); this context has " +
                           std::to_string(limits_.sm_count));
  const Precision precision = options.precision.value_or(Precision::fp16);
  KernelChoice c = choose_kernel(model, precision, options.mode, options.window, shared_.mailbox, limits_,
                                 KernelFamily::cta, np);
  plan_ = std::move(c.plan);
  const CudaVariant v = shared_.variant.value_or(options.gpu.variant);
  variant_ = "smem";
  if (v != CudaVariant::smem) {
    LstmPlan trial = plan_;
    try {
      use_regs_variant(trial);
      plan_ = std::move(trial);
      variant_ = "regs";
    } catch (const UnsupportedError&) {
      if (v == CudaVariant::regs) throw;
    }
  }
  const LstmParams& p = plan_.params;
  multi_.count = count;
  multi_.per_instance = 1 + p.np;
  multi_.params_offset = (p.smem_bytes + 15) / 16 * 16;
  multi_.smem_bytes = multi_.params_offset + int(sizeof(LstmParams));
  // The kernel's own static shared memory (a word, aligned) comes out of the same opt-in limit.
  constexpr int kStaticSmem = 64;
  if (multi_.smem_bytes + kStaticSmem > limits_.smem_per_block_optin)
    throw UnsupportedError("a shared launch block needs " + std::to_string(multi_.smem_bytes) + " bytes of shared memory (" +
                           std::to_string(p.smem_bytes) + " for the model and its parameters); " + limits_.name +
                           " gives " + std::to_string(limits_.smem_per_block_optin));
  params_ = DeviceBuffer<LstmParams>(size_t(count));
  multi_.by_sm = shared_.by_sm;
  if (multi_.by_sm) {
    sm_keys_ = DeviceBuffer<unsigned>(size_t(count) * size_t(multi_.per_instance));
    multi_.sm_keys = sm_keys_.get();
  }
  // Everything the kernel reads exists before it starts (a kernel must not read memory made while it
  // runs: compute-sanitizer does not see such memory as allocated).
  frags_ = DeviceBuffer<uint32_t>(plan_.frags.size());
  head_b_ = DeviceBuffer<float>(plan_.head_b.size());
  head_w_ = DeviceBuffer<float>(plan_.head_w.size());
  pre_w_ = DeviceBuffer<float>(plan_.pre_w.size());
  frags_.upload(plan_.frags.data(), plan_.frags.size(), copy_stream_.get());
  head_b_.upload(plan_.head_b.data(), plan_.head_b.size(), copy_stream_.get());
  head_w_.upload(plan_.head_w.data(), plan_.head_w.size(), copy_stream_.get());
  pre_w_.upload(plan_.pre_w.data(), plan_.pre_w.size(), copy_stream_.get());
  slots_.resize(size_t(count));
  for (SlotBuffers& b : slots_) {
    b.h_state = DeviceBuffer<float>(size_t(p.L) * p.nslots * p.H);
    b.pub_P = DeviceBuffer<float>(size_t(p.L) * 4 * p.H);
    b.pub_c = DeviceBuffer<float>(size_t(p.L) * p.H);
    b.xbuf = DeviceBuffer<float>(size_t(p.I));
    b.words = DeviceBuffer<SharedWords>(1);
    if (plan_.pre_state_floats > 0) b.pre_state = DeviceBuffer<float>(size_t(p.np) * plan_.pre_state_floats);
  }
  for (int k = 0; k < count; ++k) mailboxes_.push_back(std::make_unique<HostMailbox>(p.I, p.O, shared_.mailbox));
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
  go_bytes_ = sizeof(unsigned) * size_t(count);
  parked_bytes_ = sizeof(unsigned) * size_t(count) * size_t(multi_.per_instance);
  go_ = static_cast<unsigned*>(pinned_alloc(go_bytes_, kMapped));
  try {
    parked_ = static_cast<unsigned*>(pinned_alloc(parked_bytes_, kMapped));
    control_ = static_cast<Control*>(pinned_alloc(sizeof(Control), kMapped));
  } catch (...) {
    pinned_free(go_, go_bytes_, kMapped);
    pinned_free(parked_, parked_bytes_, kMapped);
    throw;
  }
  gen_.assign(size_t(count), 0);
  taken_.assign(size_t(count), false);
  multi_.params = params_.get();
  multi_.go = device_view(go_);
  multi_.parked = device_view(parked_);
  multi_.control = device_view(control_);
  multi_.lease_ns = (long long)(shared_.lease_ms * 1e6);
  long long fits = 0;
  const cudaError_t e = launch_lstm_multi(p, multi_, stream_.get(), &fits);
  if (e != cudaSuccess) {
    pinned_free(go_, go_bytes_, kMapped);
    pinned_free(parked_, parked_bytes_, kMapped);
    pinned_free(control_, sizeof(Control), kMapped);
  }
  if (e == cudaErrorCooperativeLaunchTooLarge)
    throw UnsupportedError("a shared launch of " + std::to_string(count) + " instances needs " +
                           std::to_string((long long)count * multi_.per_instance) + " co-resident blocks; " +
                           limits_.name + " fits " + std::to_string(fits) + " with the " +
                           std::to_string(limits_.sm_count) + " SMs of this context");
  if (e != cudaSuccess) throw_cuda(e, "launch_lstm_multi");
  running_ = true;
  heartbeat_ = util::start_jthread("the shared launch's heartbeat", [this](std::stop_token stop) {
    const auto period = std::chrono::duration<double, std::milli>(shared_.heartbeat_ms);
    const auto lease = std::chrono::duration<double, std::milli>(shared_.lease_ms);
    (void)cudaSetDevice(device_);  // the thread queries the launch's stream
    uint32_t beats = 0;
    auto last = Clock::now();
    while (!stop.stop_requested()) {
      arch::publish_word(reinterpret_cast<uint32_t*>(control_) + 1, ++beats);  // Control::heartbeat
      std::this_thread::sleep_for(period);
      // A gap as long as the lease (this thread starved): the blocks of parked instances may have
      // left for good, so the launch counts as ended rather than leave a start() nobody answers.
      const auto now = Clock::now();
      if (now - last >= 0.9 * lease) lapsed_.store(true, std::memory_order_release);
      last = now;
      // Every instance's liveness check reads this flag: a driver call per check, from every
      // instance's thread on the one stream, made them wait on each other (p99 of ticks doubled).
      if (cudaStreamQuery(stream_.get()) != cudaErrorNotReady) ended_.store(true, std::memory_order_release);
    }
  });
}

SharedLaunch::~SharedLaunch() {
  heartbeat_.request_stop();
  if (heartbeat_.joinable()) heartbeat_.join();
  bool stopped = !running_;
  if (running_) {
    arch::publish_word(reinterpret_cast<uint32_t*>(control_), 1);  // every parked block leaves
    // A still serving instance leaves when its own lease lapses (its backend, gone, no longer beats).
    stopped = stream_.finish_within(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::duration<double, std::milli>(2 * shared_.lease_ms + 5000)),
                                    std::chrono::microseconds(200));
  }
  if (!stopped) {
    // The kernel would not leave: leave it what it reads (and the SMs claimed).
    (void)params_.release();
    (void)sm_keys_.release();
    for (auto* b : {&head_b_, &head_w_, &pre_w_}) (void)b->release();
    (void)frags_.release();
    for (SlotBuffers& b : slots_) {
      for (auto* f : {&b.h_state, &b.pub_P, &b.pub_c, &b.xbuf, &b.pre_state}) (void)f->release();
      (void)b.words.release();
    }
    for (auto& m : mailboxes_) (void)m.release();
    (void)claim_.release();
    return;
  }
  pinned_free(go_, go_bytes_, kMapped);
  pinned_free(parked_, parked_bytes_, kMapped);
  pinned_free(control_, sizeof(Control), kMapped);
}

void SharedLaunch::claim_slot(int k) {
  std::lock_guard lock(slots_mutex_);
  if (k < 0 || k >= count_)
    throw Error("cuda: instance " + std::to_string(k) + " of a shared launch of " + std::to_string(count_) + " instances");
  if (taken_[size_t(k)]) throw UnsupportedError("cuda: instance " + std::to_string(k) + " of the shared launch already has an engine");
  taken_[size_t(k)] = true;
}

void SharedLaunch::release_slot(int k) {
  std::lock_guard lock(slots_mutex_);
  if (k >= 0 && k < count_) taken_[size_t(k)] = false;
}

LstmParams SharedLaunch::instance_params(int k) const {
  const SlotBuffers& b = slots_.at(size_t(k));
  LstmParams p = plan_.params;
  p.frags = frags_.get();
  p.head_b = head_b_.get();
  p.head_w = head_w_.get();
  p.pre_w = pre_w_.get();
  p.h_state = b.h_state.get();
  p.pub_P = b.pub_P.get();
  p.pub_c = b.pub_c.get();
  p.xbuf = b.xbuf.get();
  p.words = b.words.get();
  p.pre_state = b.pre_state.get();
  return p;
}

bool SharedLaunch::read_words(int k, SharedWords& out) const {
  const SharedWords* w = slots_.at(size_t(k)).words.get();
  return cudaMemcpyAsync(&out, w, sizeof out, cudaMemcpyDeviceToHost, copy_stream_.get()) == cudaSuccess &&
         cudaStreamSynchronize(copy_stream_.get()) == cudaSuccess;
}

void SharedLaunch::start(int k, const LstmParams& params) {
  if (k < 0 || k >= count_) throw Error("cuda: instance " + std::to_string(k) + " of a shared launch of " + std::to_string(count_));
  if (!running()) throw BackendError("cuda: the shared launch has ended: " + ended_why());
  // An instance that just stopped itself (its lease) may still have precompute blocks on their way
  // to parking: they follow within a tick or two.
  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  while (!parked(k) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(50));
  if (!parked(k)) throw BackendError("cuda: instance " + std::to_string(k) + " of the shared launch is still running");
  // The launch's SMs are all busy: the state is zeroed by copies (copy engines), not by memset
  // kernels; then the parameters, then the generation that lets the blocks in.
  SlotBuffers& b = slots_[size_t(k)];
  b.words.zero_by_copy(copy_stream_.get());
  b.h_state.zero_by_copy(copy_stream_.get());
  HOTPATH_CUDA_CHECK(cudaMemcpyAsync(params_.get() + k, &params, sizeof(LstmParams), cudaMemcpyHostToDevice,
                                     copy_stream_.get()));
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
  const unsigned g = ++gen_[size_t(k)];
  arch::publish_word(go_ + k, g);
}

bool SharedLaunch::parked(int k) const {
  const unsigned g = gen_.at(size_t(k));
  unsigned* p = parked_ + size_t(k) * multi_.per_instance;  // written by the device
  for (int r = 0; r < multi_.per_instance; ++r)
    if (std::atomic_ref<unsigned>(p[r]).load(std::memory_order_acquire) != g) return false;
  return true;
}

bool SharedLaunch::running() const {
  return running_ && !lapsed_.load(std::memory_order_acquire) && !ended_.load(std::memory_order_acquire);
}

std::string SharedLaunch::ended_why() const {
  if (!running_) return "it never started";
  if (lapsed_.load(std::memory_order_acquire))
    return "its heartbeat stopped for a whole lease (" + std::to_string(shared_.lease_ms) +
           " ms: the host starved), so its parked blocks may have left";
  const cudaError_t q = cudaStreamQuery(stream_.get());
  if (q == cudaErrorNotReady) return "";
  if (q != cudaSuccess) return std::string("the kernel failed: ") + cudaGetErrorString(q);
  return "its lease lapsed or it was stopped";
}

}  // namespace hotpath::cuda
