// The cuda backend's host side: owns the persistent kernel (launch, heartbeat, stop), talks to it
// through the mailbox and enforces the deadline (a late tick is try_step() false: the engine's fallback
// wrapper answers it from its shadow backend).
#include "cuda/cuda_backend.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <iterator>
#include <set>
#include <thread>
#include <utility>

#include "cuda/batch_runner.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_claim.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/kernels/cluster/cluster_policy.hpp"
#include "cuda/kernels/common/cycle_histogram.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/lstm_plan.hpp"
#include "cuda/mailbox_host.hpp"
#include "cuda/tick_trace.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/stats.hpp"
#include "util/threads.hpp"

namespace hotpath {
namespace {

using Clock = std::chrono::steady_clock;
// How long a tick waits before the host asks the driver whether the kernel still runs (and how often
// after that): above the answer time of every model that answers in microseconds, and short next to
// a timeout (a dead kernel is still noticed within 50 us of waiting).
constexpr std::chrono::microseconds kLivenessPeriod{50};
// CudaOptions::tick_trace: the ticks the kernel's ring and the host's stamps hold (a power of two), and the
// stretch of ticks whose fastest input marks the input side's floor (tick_trace.hpp).
constexpr long long kTickTraceTicks = 1 << 18;
constexpr size_t kTraceStretch = 256;
using cuda::HostMailbox;

using cuda::DeviceBuffer;

// What the last backtest or batch measured: time, copies and the share of copy time hidden by compute.
void add_batch_counters(const cuda::BatchRunner& runner, std::map<std::string, double>& c) {
  const cuda::BatchStats& st = runner.stats();
  c["batch_wall_s"] = st.wall_s;
  c["batch_compute_s"] = st.compute_s;
  c["batch_h2d_s"] = st.h2d_s;
  c["batch_d2h_s"] = st.d2h_s;
  c["batch_copy_bytes"] = st.copy_bytes;
  c["batch_chunks"] = double(st.chunks);
  c["batch_copy_overlap"] = st.overlap();
  c["batch_rows_per_chunk"] = double(runner.rows_per_chunk());
  c["batch_copy_threads"] = double(runner.copy_threads());
  c["batch_device_arrays"] = st.device_arrays ? 1.0 : 0.0;  // copied on the device (ArraysIn::device)
  c["batch_tile_kernel"] = st.tile ? 1.0 : 0.0;  // the chunks on the fused kernel (CudaOptions::batch_tile)
  c["batch_cluster_blocks"] = double(st.cluster);  // .. on its cluster form (CudaOptions::batch_cluster), 0: not
  c["batch_narrow_chunks"] = double(st.narrow_chunks);  // chunks on the narrow kernel (CudaOptions::batch_narrow_rows)
  c["batch_fresh_server"] = st.fresh_server ? 1.0 : 0.0;  // the call went to the fresh-window server
  c["batch_fresh_server_rows"] = double(runner.fresh_server_rows());  // calls up to this many rows do (0: none)
  for (const auto& [k, v] : runner.fresh_server_profile()) c[k] = v;  // its kernel's time per request, by part
}

// A backtest on the throughput kernels, each series scaled as the tick path scales it (the scaler's
// history reset after: a backtest leaves the backend reset), window or streaming by the backend's mode.
void run_backtest(cuda::BatchRunner& runner, InputScaler& scaler, const BackendOptions& options,
                  std::span<const float> x, size_t series, size_t ticks, Backend::BacktestOutput out,
                  std::atomic<size_t>* done) {
  std::vector<float> scaled;
  if (scaler.active()) {
    scaled.resize(x.size());
    scaler.scale_series(x, series, ticks, scaled.data());
  }
  scaler.reset();
  runner.backtest(scaled.empty() ? x.data() : scaled.data(), series, ticks,
                  options.mode == Mode::window ? options.window : 0, out, done);
}

// The same with arrays in GPU memory (Backend::backtest_on_device): the first NaN/Inf found on the device and
// named before anything runs; a model with an input scaler takes its inputs through the host (the scaler
// is host code: a rolling one scans each series in order) and sends its outputs back, the rest as above.
void run_backtest_on_device(cuda::BatchRunner& runner, InputScaler& scaler, const BackendOptions& options,
                            const ModelConfig& config, const float* x, size_t series, size_t ticks, float* out,
                            std::atomic<size_t>* done) {
  const size_t I = size_t(config.input_size), O = size_t(config.output_size), n = series * ticks * I;
  scaler.reset();
  if (n == 0) return;
  if (const size_t k = runner.first_nonfinite(x, n); k < n) {
    float v = 0;
    HOTPATH_CUDA_CHECK(cudaMemcpy(&v, x + k, sizeof v, cudaMemcpyDeviceToHost));
    throw_backtest_input_error(k, ticks, I, v);
  }
  if (scaler.active()) {
    std::vector<float> xs(n), zs(series * ticks * O);
    HOTPATH_CUDA_CHECK(cudaMemcpy(xs.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    run_backtest(runner, scaler, options, xs, series, ticks, Backend::BacktestOutput{zs.data(), nullptr}, done);
    HOTPATH_CUDA_CHECK(cudaMemcpy(out, zs.data(), zs.size() * sizeof(float), cudaMemcpyHostToDevice));
    return;
  }
  runner.backtest(x, series, ticks, options.mode == Mode::window ? options.window : 0,
                  Backend::BacktestOutput{out, nullptr}, done, cuda::ArraysIn::device);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, const BackendOptions& options, const CudaOptions& copt)
      : Backend(model.config, options),
        model_(model),
        copt_(copt),
        precision_(options.precision.value_or(Precision::fp16)),
        scaler_(model, options.scaler) {
    asked_variant_ = copt.variant.value_or(options.gpu.variant);
    // Where threads started later (a backtest's copy helpers) should run: the creating thread's cores now,
    // before the engine pins it to the cpuset's first, less that core.
    helper_cores_ = util::allowed_cores();
    if (!options.cpuset.empty() && helper_cores_.size() > 1)
      std::erase(helper_cores_, options.cpuset.front());
    if (options.gpu.tick_trace) copt_.tick_trace = true;  // the CLI's --tick-trace
    if (copt.stall_tick >= 0 && precision_ != Precision::fp16)
      throw UnsupportedError("the stall test hook is compiled into the fp16 test kernels only");
    if (copt.cluster_blocks != 0 && options.gpu.kernel != CudaKernel::automatic && options.gpu.kernel != CudaKernel::cluster)
      throw UnsupportedError(std::string("cluster_blocks sets the cluster kernel's size; the ") +
                             util::name_of(options.gpu.kernel) + " kernel has none");
    if (copt.grid_cell_lanes != 0 && copt.grid_cell_lanes != 1 && copt.grid_cell_lanes != 2 && copt.grid_cell_lanes != 4)
      throw UnsupportedError("grid_cell_lanes is 1, 2 or 4 lanes a unit (0: automatic), not " +
                             std::to_string(copt.grid_cell_lanes));
    std::string why;
    if (!cuda::device_available(&why, options.gpu.device)) throw UnsupportedError("no usable CUDA device: " + why);
    if (copt.shared) {
      init_shared_instance(options);
    } else {
      init_own_kernel(options);
    }
    const cuda::LstmParams& p = plan_.params;
    if (!copt.shared) allocate_kernel_memory();
    if (copt.shared) {
      mailbox_ = &copt.shared->mailbox(copt.slot);
    } else {
      own_mailbox_ = std::make_unique<HostMailbox>(p.I, p.O, copt.mailbox);
      mailbox_ = own_mailbox_.get();
    }
    // Every member above frees itself if this throws; a kernel that would not stop must not have its
    // memory freed under it.
    try {
      launch();
    } catch (...) {
      // launch() can throw with the kernel running (the heartbeat thread refused): ask it to stop
      // first; only a kernel that will not stop keeps its memory.
      try {
        stop_kernel();
      } catch (...) {
      }
      abandon_if_running();
      throw;
    }
  }

  ~CudaBackend() override {
    try {
      stop_kernel();
    } catch (...) {
    }
    abandon_if_running();
  }

  std::string name() const override { return "cuda"; }
  std::string variant() const override {
    if (copt_.shared) return kernel_variant() + "-shared" + std::to_string(copt_.shared->count());
    return kernel_variant();
  }
  std::string kernel_variant() const {
    const auto& p = plan_.params;
    if (p.family != cuda::KernelFamily::cta)
      return "persistent-" + family() + "-" + precision_name(precision_) + "-" + std::to_string(p.nc) + "+" +
             std::to_string(p.np) + "blocks";
    if (p.variant == cuda::kVariantRegs)
      return std::string("persistent-mma-regs-") + precision_name(precision_) + "-1+" + std::to_string(p.np) +
             "blocks-warp0poll";
    return std::string("persistent-mma-") + precision_name(precision_) + "-1+" + std::to_string(p.np) + "blocks-poll" +
           std::to_string(p.mb.poll_sets);
  }
  Precision precision() const override { return precision_; }
  long long ticks() const override { return t_; }

  void step(std::span<const float> x, std::span<float> out) override {
    std::string why;
    if (!try_step(x, out, &why)) throw BackendError("cuda backend: " + why);
  }

  bool try_step(std::span<const float> x, std::span<float> out, std::string* why_not) override {
    check_tick_input(x, t_);
    if (parked_) launch();  // after a backtest: the tick kernel starts again, from a reset state
    const int O = config().output_size;
    if (int(out.size()) < O) throw Error("cuda: output span holds " + std::to_string(out.size()) + " floats, need " +
                                         std::to_string(O));
    const long long t = t_++;
    scaler_.prepare();  // a no-op when finish_precompute() ran, as it should have
    std::string& why = *why_not;
    // The input goes out first: no driver call (cudaStreamQuery costs ~0.5 us and jitters) and no
    // status read on the way. Liveness is checked while waiting, but only once a tick has waited
    // kLivenessPeriod (then every period): an answered tick makes no driver call at all. (A check every
    // 256 looks, ~1 us, put a stream query into most ticks; threads of a shared launch, querying one
    // stream, then waited on each other.) The input ring can only be overrun after the host gave up on
    // a tick, so only then is the status read before sending.
    bool usable = false;
    if (!kernel_running_) why = "the kernel is not running";
    else usable = !maybe_behind_ || gpu_usable(&why);
    if (usable) {
      if (!trace_send_ns_.empty()) trace_send_ns_[size_t(t) & (kTickTraceTicks - 1)] = util::steady_ns();
      // Scaled while packed into the mailbox's chunks (a plain copy without a scaler).
      mailbox_->send(t, x, scaler_.active() ? scaler_.shift().data() : nullptr, scaler_.active() ? scaler_.mul().data() : nullptr);
      // The deadline's clock is read once the input is out (a steady_clock read costs 17-33 ns: the GPU
      // works meanwhile), so the deadline counts from a few ns after the send.
      const auto t0 = Clock::now();
      scaler_.observe(x);  // x joins the history while the GPU computes
      const auto deadline = t0 + std::chrono::duration<double, std::micro>(options().gpu.timeout_us);
      auto next_check = t0 + kLivenessPeriod;
      long long spins = 0;
      for (;;) {
        if (mailbox_->try_receive(t, out)) {
          if (!trace_recv_ns_.empty()) trace_recv_ns_[size_t(t) & (kTickTraceTicks - 1)] = util::steady_ns();
          ++gpu_answers_;
          maybe_behind_ = false;  // the kernel has answered every tick up to this one
          return true;
        }
        if ((++spins & 255) == 0) {
          const auto now = Clock::now();
          if (now > deadline) {
            ++timeouts_;
            maybe_behind_ = true;
            why = "no answer to tick " + std::to_string(t) + " within " + std::to_string(options().gpu.timeout_us) + " us";
            break;
          }
          if (now >= next_check) {
            if (!gpu_usable(&why)) break;
            next_check = now + kLivenessPeriod;
          }
        }
      }
    } else {
      scaler_.observe(x);  // the tick is consumed whether or not the GPU answers it
    }
    return false;
  }

  void finish_precompute() override {
    std::string why;
    if (!try_finish_precompute(&why)) throw BackendError("cuda backend: " + why);
  }

  bool try_finish_precompute(std::string* why) override {
    if (parked_) launch();
    scaler_.prepare();  // the next tick's input statistics
    if (!gpu_usable(why)) return false;
    const uint32_t want = cuda::wire_seq(t_);
    const auto deadline = Clock::now() + std::chrono::duration<double, std::micro>(options().gpu.timeout_us);
    long long spins = 0;
    while (mailbox_->status().ready != want) {
      if ((++spins & 255) == 0 && Clock::now() > deadline) {
        ++timeouts_;
        maybe_behind_ = true;
        *why = "precompute for tick " + std::to_string(t_) + " not ready within " +
               std::to_string(options().gpu.timeout_us) + " us";
        return false;
      }
    }
    return true;
  }

  void reset() override {
    stop_kernel();
    t_ = 0;
    scaler_.reset();
    accepted_base_ = gpu_answers_;
    launch();
  }

  // Backtests run on the throughput kernels (batch_runner.hpp). The tick kernel holds a block on every
  // SM, so it stops first ("parked") and starts again, reset, at the next tick or reset().
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override {
    park_for_backtest();
    run_backtest(batch_runner(), scaler_, options(), x, series, ticks, out, done);
  }
  void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done) override {
    park_for_backtest();
    run_backtest_on_device(batch_runner(), scaler_, options(), config(), x, series, ticks, out, done);
  }
  void park_for_backtest() {
    if (copt_.shared)
      throw UnsupportedError("cuda backend: an instance of a shared launch has no SMs for backtests (the launch holds "
                             "them); run backtests on an engine beside the launch");
    stop_kernel();
    parked_ = true;
    t_ = 0;
    accepted_base_ = gpu_answers_;
  }

  std::map<std::string, double> counters() const override {
    std::map<std::string, double> c;
    if (batch_) add_batch_counters(*batch_, c);
    c["gpu_answers"] = double(gpu_answers_);
    c["timeouts"] = double(timeouts_);
    // Answers the kernel wrote that the host had already given up on (a late GPU answer is discarded).
    c["late_gpu_answers"] = double(late_before_reset_ + late_this_launch());
    c["kernel_running"] = kernel_alive() ? 1.0 : 0.0;
    c["lease_renewals"] = double(lease_renewals_.load(std::memory_order_relaxed));  // the heartbeat's, all launches
    // In-kernel time from "input complete" to "output stored", SM cycles (read on a side stream).
    cuda::SharedWords w{};
    const bool read = copt_.shared ? copt_.shared->read_words(copt_.slot, w)
                                   : side_stream_ && words_.get() &&
                                         cudaMemcpyAsync(&w, words_.get(), sizeof w, cudaMemcpyDeviceToHost,
                                                         side_stream_.get()) == cudaSuccess &&
                                         cudaStreamSynchronize(side_stream_.get()) == cudaSuccess;
    if (read && w.ticks_timed > 0) {
      c["kernel_compute_cycles_mean"] = double(w.compute_cycles_sum) / double(w.ticks_timed);
      c["kernel_compute_cycles_max"] = double(w.compute_cycles_max);
      // input complete -> output stored, every tick (SharedWords::tick_hist): where a tail lies
      const std::pair<const char*, double> quantiles[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p999", 0.999}};
      double tick_cycles[std::size(quantiles)];
      for (size_t i = 0; i < std::size(quantiles); ++i)
        c[std::string("kernel_tick_cycles_") + quantiles[i].first] = tick_cycles[i] =
            cuda::cycle_quantile(w.tick_hist, quantiles[i].second);
      if (w.clock_cycles_sum > 0) {  // the SM clock over the served ticks (SharedWords::clock_*)
        const double ns_per_cycle = double(w.clock_ns_sum) / double(w.clock_cycles_sum);
        c["kernel_compute_ns_mean"] = double(w.compute_cycles_sum) / double(w.ticks_timed) * ns_per_cycle;
        c["kernel_sm_clock_mhz"] = 1e3 / ns_per_cycle;
        for (size_t i = 0; i < std::size(quantiles); ++i)  // at the mean clock of the run
          c[std::string("kernel_tick_us_") + quantiles[i].first] = tick_cycles[i] * ns_per_cycle * 1e-3;
        // the SM clock over each span between two ticks: its 1st percentile shows slow stretches
        c["kernel_sm_clock_mhz_p1"] = cuda::clock_quantile_mhz(w.clock_hist, 0.01);
        c["kernel_sm_clock_mhz_p50"] = cuda::clock_quantile_mhz(w.clock_hist, 0.5);
      }
      // wake: warp 0 has the whole input -> past the barrier every compute warp waited at
      const char* seg[5] = {"wake", "layer0", "layers", "head", "store"};
      for (int i = 0; i < 5; ++i) {
        c[std::string("kernel_cycles_") + seg[i] + "_mean"] = double(w.seg_sum[i]) / double(w.ticks_timed);
        c[std::string("kernel_cycles_") + seg[i] + "_max"] = double(w.seg_max[i]);
      }
      if (plan_.params.family == cuda::KernelFamily::cluster) add_cluster_counters(w, c);
    }
    if (read && grid_stats_.get() && side_stream_) add_grid_counters(c);
    if (read && trace_.get() && side_stream_ && w.clock_cycles_sum > 0)
      add_trace_counters(double(w.clock_ns_sum) / double(w.clock_cycles_sum), c);
    if (read && w.pre_sum[cuda::kPreRounds] > 0) {
      // the precompute's rounds as its block 0 lives them (PrecomputeStat), SM cycles a round
      const double rounds = double(w.pre_sum[cuda::kPreRounds]);
      for (int i = cuda::kPreLayer0; i < cuda::kPreMmaParts; ++i)  // the tick kernels' precompute has no mma parts
        c[std::string("precompute_") + cuda::kPrecomputeStatNames[i] + "_cycles_mean"] = double(w.pre_sum[i]) / rounds;
    }
    if (!read) {
      (void)cudaGetLastError();
    }
    c["launches"] = double(launches_);
    return c;
  }

  // The cluster kernel's parts of a tick, per block (SharedWords::cl_sum): the mean over ticks, then the
  // mean and the largest over the blocks (the slowest block sets every exchange's pace).
  void add_cluster_counters(const cuda::SharedWords& w, std::map<std::string, double>& c) const {
    const cuda::LstmParams& p = plan_.params;
    auto part = [&](const std::string& name, std::initializer_list<int> slots) {
      double sum = 0, most = 0;
      int blocks = 0;
      for (int b = 0; b < p.nc && b < cuda::kMaxClusterBlocks; ++b) {
        const double ticks = double(w.cl_sum[b][1]);
        if (ticks <= 0) continue;
        double v = 0;
        for (int slot : slots) v += double(w.cl_sum[b][slot]) / ticks;
        sum += v;
        most = std::max(most, v);
        ++blocks;
      }
      if (!blocks) return;
      c["cluster_" + name + "_mean"] = sum / blocks;
      c["cluster_" + name + "_max_block"] = most;
    };
    part("input_arrival_ns", {0});
    // per layer: the chain's parts (ClusterLayerStat), and the old pair (wait; compute = the rest of warp 0's)
    for (int l = 0; l < p.L; ++l) {
      const std::string L = "layer" + std::to_string(l) + "_";
      const int at = 2 + cuda::kClusterLayerStats * l;
      const char* names[cuda::kClusterLayerStats] = {"wait", "tiles", "meet", "cell", "send", "kshare_wait", "kshare_tiles"};
      for (int i = 0; i < cuda::kClusterLayerStats; ++i) {
        if (l == 0 && (i == cuda::kClWait || i == cuda::kClShareWait)) continue;
        if (p.ksplit < 2 && (i == cuda::kClShareWait || i == cuda::kClShareTiles)) continue;
        part(L + names[i] + "_cycles", {at + i});
      }
      part(L + "compute_cycles", {at + cuda::kClTiles, at + cuda::kClMeet, at + cuda::kClCell, at + cuda::kClSend});
    }
  }

  // CudaOptions::tick_trace: the kernel's ring and the host's stamps, split (tick_trace.hpp) into each
  // traced tick's input side, kernel span and output side; percentiles in us.
  void add_trace_counters(double ns_per_cycle, std::map<std::string, double>& c) const {
    std::vector<unsigned long long> ring(size_t(3) * kTickTraceTicks);
    if (cudaMemcpyAsync(ring.data(), trace_.get(), ring.size() * sizeof(ring[0]), cudaMemcpyDeviceToHost,
                        side_stream_.get()) != cudaSuccess ||
        cudaStreamSynchronize(side_stream_.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    const cuda::TickTraceSplit split = cuda::split_tick_trace(ring.data(), kTickTraceTicks, trace_send_ns_.data(),
                                                              trace_recv_ns_.data(), t_, ns_per_cycle, kTraceStretch);
    if (split.total.empty()) return;
    c["tick_trace_ticks"] = double(split.total.size());
    const std::pair<const char*, const std::vector<double>*> parts[] = {{"total", &split.total},
                                                                        {"kernel", &split.kernel},
                                                                        {"input_excess", &split.input_excess},
                                                                        {"output_and_floors", &split.output_and_floors}};
    for (const auto& [name, v] : parts) {
      const auto q = util::summarize(*v, util::Percentile::index_floor);
      c[std::string("tick_trace_") + name + "_us_p50"] = q.p50;
      c[std::string("tick_trace_") + name + "_us_p99"] = q.p99;
      c[std::string("tick_trace_") + name + "_us_p999"] = q.p999;
    }
  }

  // The grid kernel's parts of a tick, per block (GridLayerStat, read on the side stream): each mark's
  // mean over the ticks, in SM cycles from the block's start of the tick (the warps' poll rounds: a count);
  // then the mean and the largest over the blocks. The head's words are block 0's alone (the others send,
  // they do not gather).
  void add_grid_counters(std::map<std::string, double>& c) const {
    const cuda::LstmParams& p = plan_.params;
    std::vector<unsigned long long> sums(size_t(p.nc) * cuda::kGridStatSlots);
    if (cudaMemcpyAsync(sums.data(), grid_stats_.get(), sums.size() * sizeof(sums[0]), cudaMemcpyDeviceToHost,
                        side_stream_.get()) != cudaSuccess ||
        cudaStreamSynchronize(side_stream_.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    for (int l = 0; l <= p.L; ++l) {
      const std::string L = l == p.L ? std::string("grid_head_") : "grid_layer" + std::to_string(l) + "_";
      for (int i = 0; i < cuda::kGridLayerStats; ++i) {
        const bool head_words = l == p.L && (i == cuda::kGrWordsFirst || i == cuda::kGrWordsLast);
        if (l == p.L && (i == cuda::kGrTilesLast || i == cuda::kGrMeet || i == cuda::kGrSums || i == cuda::kGrCell))
          continue;
        if ((l == 0 || l == p.L) && i >= cuda::kGrWarpWaitMean) continue;  // the warps' own spans: hidden layers
        const bool cycles = cuda::grid_stat_in_cycles(i);
        double sum = 0, most = 0;
        int blocks = 0;
        for (int b = 0; b < (head_words ? 1 : p.nc); ++b) {
          const unsigned long long* s = sums.data() + size_t(b) * cuda::kGridStatSlots;
          if (s[0] == 0) continue;
          const double v = double(s[1 + cuda::kGridLayerStats * l + i]) / double(s[0]) / (cycles ? 1.0 : 100.0);
          sum += v;
          most = std::max(most, v);
          ++blocks;
        }
        if (!blocks) continue;
        const std::string name = L + cuda::kGridLayerStatNames[i] + (cycles ? "_cycles" : "");
        c[name + "_mean"] = sum / blocks;
        c[name + "_max_block"] = most;
      }
    }
  }

  // After the engine's warm-up, whose reset() relaunched the kernel (launch() cleared the mailbox, so
  // the next tick is sequence 0 again, and zeroed the kernel's timing words): the host's counts restart
  // as a new backend's, the running launch being the first. gpu_answers_ - accepted_base_ (this
  // launch's accepted answers, against which late answers are counted) is kept.
  void clear_counters() override {
    accepted_base_ -= gpu_answers_;
    gpu_answers_ = timeouts_ = late_before_reset_ = 0;
    launches_ = kernel_running_ ? 1 : 0;
    lease_renewals_.store(0, std::memory_order_relaxed);
  }

  std::map<std::string, std::string> facts() const override {
    std::map<std::string, std::string> f;
    try {
      f = cuda::device_facts(options().gpu.device);
    } catch (const std::exception&) {
    }
    const auto& p = plan_.params;
    f["kernel_family"] = family();
    f["kernel_choice"] = family_why_;
    f["critical_blocks"] = std::to_string(p.nc);
    if (p.family != cuda::KernelFamily::cta) {
      f["units_per_critical_block"] = std::to_string(p.gpb * cuda::kUnitsPerGroup);
      f["k_split_warps"] = std::to_string(p.ksplit);
      f["precompute_weights"] = p.grid_precompute == cuda::GridPrecompute::in_critical ? "L2 (W_hh), the critical blocks' (W_ih)"
                                : p.pre_global                                         ? "global"
                                                                                       : "shared";
      f["precompute_state"] = plan_.pre_state_floats > 0 ? "global" : "shared";
      if (p.family == cuda::KernelFamily::grid) {
        f["grid_exchange"] = cuda::grid_exchange_name(copt_.grid_exchange);
        // where the critical weights live: layers [0, n) read from L2 every tick, the rest in shared memory
        f["critical_layers_in_l2"] = std::to_string(p.grid_l2_layers);
        f["grid_precompute"] = p.grid_precompute == cuda::GridPrecompute::in_critical ? "in_critical" : "separate";
        f["critical_smem_weight_bytes_per_block"] = std::to_string(cuda::grid_smem_weight_bytes(p));
        f["grid_cell_lanes_per_unit"] = std::to_string(cuda::grid_cell_lanes(p, copt_.grid_cell_lanes));
        f["grid_tiles"] = cuda::grid_tiles_name(p.grid_reg_wgs > 0 ? cuda::GridTiles::registers : cuda::GridTiles::shared);
        f["grid_compute_warps"] = std::to_string(p.compute_warps);
        f["grid_quiet_answer"] = copt_.grid_quiet_answer ? "1" : "0";
        f["grid_input_nap_ns"] = std::to_string(copt_.grid_input_nap_ns);
        // the two knobs as they act: warming needs layers read from L2, the pollers' words the tagged exchange
        f["grid_warm_l2_tiles"] = copt_.grid_warm_l2_tiles && p.grid_l2_layers > 0 ? "1" : "0";
        f["grid_pollers_publish"] =
            copt_.grid_pollers_publish && copt_.grid_exchange == cuda::GridExchange::tagged ? "1" : "0";
      }
      if (p.family == cuda::KernelFamily::cluster) {
        f["cluster_exchange"] = copt_.cluster_async_exchange ? "st.async+mbarrier" : "tagged words";
        f["cluster_tiles_per_warp"] = std::to_string(p.cl.slots);
        f["cluster_register_tiles"] = std::to_string(std::min(p.cl.slots, p.cl.regs));
      }
    }
    f["kernel_variant"] = variant();
    if (copt_.shared) {
      f["shared_launch_instances"] = std::to_string(copt_.shared->count());
      f["shared_launch_slot"] = std::to_string(copt_.slot);
    }
    f["critical_variant"] = variant_;
    f["critical_weight_bytes"] = std::to_string(plan_.critical_weight_bytes);
    f["smem_bytes_per_block"] = std::to_string(p.smem_bytes);
    f["block_threads"] = std::to_string(p.threads());
    f["precompute_blocks"] = std::to_string(p.np);
    f["context_sm_count"] = std::to_string(limits_.sm_count);  // the SMs the grid was sized for
    f["units_per_precompute_block"] = std::to_string(p.U);
    f["mailbox"] = std::string(copt_.mailbox.stream_stores ? "stream" : "store") +
                   (copt_.mailbox.dual_seq_input ? "+dualseq" : "") +
                   (copt_.mailbox.write_combined_input ? "+wc" : "+wb") + ",poll_sets=" + std::to_string(p.mb.poll_sets);
    f["keep_warm"] = copt_.keep_warm ? "1" : "0";
    return f;
  }

 private:
  // This engine's own kernel, on its partition's SMs or the whole device's.
  void init_own_kernel(const BackendOptions& options) {
    const CudaOptions& copt = copt_;
    claim_ = std::make_unique<cuda::DeviceClaim>(options.gpu.device, copt.partition.get());
    HOTPATH_CUDA_CHECK(cudaSetDevice(options.gpu.device));
    // The tick kernel's stream decides its SMs: the partition's, or the whole device's.
    stream_ = cuda::Stream::adopt(cuda::make_stream(copt.partition.get(), options.gpu.device));
    side_stream_ = cuda::Stream::adopt(cuda::make_stream(copt.partition.get(), options.gpu.device));
    limits_ = cuda::query_stream_limits(options.gpu.device, stream_.get());
    const auto asked = cuda::requested_family(options.gpu.kernel);
    if (copt.stall_tick >= 0 && asked && *asked == cuda::KernelFamily::grid)
      throw UnsupportedError("the stall test hook is compiled into the cta and cluster kernels only");
    choose_and_plan(asked, copt.max_precompute_blocks);
    if (copt.tick_trace && plan_.params.family != cuda::KernelFamily::grid)
      throw UnsupportedError("the tick trace is the grid kernel's; this model runs on the " + family() +
                             " kernel (--kernel grid runs it there)");
    if (plan_.params.family != cuda::KernelFamily::cta && asked_variant_ == CudaVariant::regs)
      throw UnsupportedError("cuda variant 'regs' is a variant of the cta kernel; the " + family() +
                             " kernel has one critical-step variant (smem)");
    variant_ = util::name_of(asked_variant_);
    if (plan_.params.family != cuda::KernelFamily::cta) {
      variant_ = "smem";
    } else if (asked_variant_ == CudaVariant::regs) {
      cuda::use_regs_variant(plan_);
    } else if (asked_variant_ == CudaVariant::automatic) {
      variant_ = "smem";  // serves every model that fits; regs is faster where it is compiled
      cuda::LstmPlan trial = plan_;
      try {
        cuda::use_regs_variant(trial);
        plan_ = std::move(trial);
        variant_ = "regs";
      } catch (const UnsupportedError&) {
      }
    }
  }

  // This engine's own weights and state (an instance of a shared launch uses the launch's).
  void allocate_kernel_memory() {
    const cuda::LstmParams& p = plan_.params;
    frags_ = DeviceBuffer<uint32_t>(plan_.frags.size());
    head_b_ = DeviceBuffer<float>(plan_.head_b.size());
    head_w_ = DeviceBuffer<float>(plan_.head_w.size());
    pre_w_ = DeviceBuffer<float>(plan_.pre_w.size());
    h_state_ = DeviceBuffer<float>(size_t(p.L) * p.nslots * p.H);
    pub_P_ = DeviceBuffer<float>(size_t(p.L) * 4 * p.H);
    pub_c_ = DeviceBuffer<float>(size_t(p.L) * p.H);
    xbuf_ = DeviceBuffer<float>(size_t(p.I));
    words_ = DeviceBuffer<cuda::SharedWords>(1);
    if (plan_.pre_state_floats > 0) pre_state_ = DeviceBuffer<float>(size_t(p.np) * plan_.pre_state_floats);
    if (p.family == cuda::KernelFamily::grid) {
      xch_h_ = DeviceBuffer<uint16_t>(size_t(2) * p.L * 2 * p.xin_stride);
      xch_flag_ = DeviceBuffer<unsigned>(size_t(cuda::grid_flag_words(p.L, p.nc)));
      xch_head_ = DeviceBuffer<float>(size_t(2) * p.nc * cuda::kMaxOutputs);
      if (copt_.grid_exchange == cuda::GridExchange::tagged)  // the plan's params leave the exchange to launch()
        xch_words_ = DeviceBuffer<unsigned long long>(size_t(cuda::grid_words(p).total()));
      grid_stats_ = DeviceBuffer<unsigned long long>(size_t(p.nc) * cuda::kGridStatSlots);
      if (copt_.tick_trace) {
        trace_ = DeviceBuffer<unsigned long long>(size_t(3) * kTickTraceTicks);
        trace_send_ns_.assign(kTickTraceTicks, 0);
        trace_recv_ns_.assign(kTickTraceTicks, 0);
      }
      if (p.grid_precompute == cuda::GridPrecompute::in_critical) {
        hh_frags_ = DeviceBuffer<uint32_t>(plan_.hh_frags.size());
        own_bias_ = DeviceBuffer<float>(plan_.own_bias.size());
        own_state_ = DeviceBuffer<float>(size_t(p.nc) * p.own_state_floats);
        own_h_ = DeviceBuffer<uint16_t>(size_t(p.L) * 2 * p.nslots * p.kt[p.L] * 16);
        hh_frags_.upload(plan_.hh_frags.data(), plan_.hh_frags.size(), stream_.get());
        own_bias_.upload(plan_.own_bias.data(), plan_.own_bias.size(), stream_.get());
      }
    }
    frags_.upload(plan_.frags.data(), plan_.frags.size(), stream_.get());
    head_b_.upload(plan_.head_b.data(), plan_.head_b.size(), stream_.get());
    head_w_.upload(plan_.head_w.data(), plan_.head_w.size(), stream_.get());
    pre_w_.upload(plan_.pre_w.data(), plan_.pre_w.size(), stream_.get());
    HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  // One instance of a shared launch (mechanism b): its plan, SMs and claim are the launch's.
  void init_shared_instance(const BackendOptions& options) {
    cuda::SharedLaunch& sh = *copt_.shared;
    if (sh.device() != options.gpu.device)
      throw Error("cuda: the shared launch is on GPU " + std::to_string(sh.device()) + ", not " + std::to_string(options.gpu.device));
    if (copt_.stall_tick >= 0) throw UnsupportedError("the stall test hook is not compiled into the shared launch's kernel");
    if (copt_.tick_trace) throw UnsupportedError("the tick trace is the grid kernel's, not the shared launch's");
    if (options.gpu.kernel != CudaKernel::automatic && options.gpu.kernel != CudaKernel::cta)
      throw UnsupportedError(std::string("a shared launch runs the cta kernel family, not ") + util::name_of(options.gpu.kernel));
    if (copt_.partition && copt_.partition.get() != sh.partition())
      throw Error("cuda: an instance of a shared launch runs on the launch's SMs; give no partition of its own");
    slot_ = std::make_unique<SlotClaim>(copt_.shared, copt_.slot);
    HOTPATH_CUDA_CHECK(cudaSetDevice(options.gpu.device));
    // No streams of its own (SharedLaunch::read_words says why): the launch zeroes, starts and reads.
    limits_ = sh.limits();
    plan_ = sh.plan();
    variant_ = sh.variant();
    family_why_ = "one of " + std::to_string(sh.count()) + " instances of a shared launch (cta family)";
  }

  bool kernel_alive() const {
    if (copt_.shared) return kernel_running_ && copt_.shared->running() && !copt_.shared->parked(copt_.slot);
    return kernel_running_ && cudaStreamQuery(stream_.get()) == cudaErrorNotReady;
  }

  // The kernel ignored the stop request and outlived its lease: leak what it may still touch rather
  // than free it under it (the streams may go: the runtime frees them once their work ends).
  void abandon_if_running() {
    if (!kernel_running_) return;
    for (auto* b : {&head_b_, &head_w_, &pre_w_, &h_state_, &pub_P_, &pub_c_, &xbuf_, &pre_state_, &xch_head_})
      (void)b->release();
    (void)xch_h_.release();
    (void)xch_flag_.release();
    (void)xch_words_.release();
    (void)grid_stats_.release();
    (void)trace_.release();
    (void)hh_frags_.release();
    (void)own_bias_.release();
    (void)own_state_.release();
    (void)own_h_.release();
    (void)frags_.release();
    (void)words_.release();
    (void)own_mailbox_.release();
    (void)claim_.release();  // the GPU stays claimed: a new kernel would wait for this one's SMs
    (void)slot_.release();   // likewise the shared launch's instance
  }

  // The GPU can still answer: kernel running, and not so far behind that its input ring was overrun.
  bool gpu_usable(std::string* why) {
    if (!kernel_running_) {
      *why = "the kernel is not running";
      return false;
    }
    if (copt_.shared) {
      // This instance's blocks leave alone (stop, lease); the launch ends for all.
      const cuda::Status st = mailbox_->status();
      if (!copt_.shared->running()) {
        kernel_running_ = false;
        *why = "the shared launch has ended: " + copt_.shared->ended_why();
        return false;
      }
      if (st.state == cuda::kStopped || st.state == cuda::kLeaseExpired) {
        kernel_running_ = false;
        *why = st.state == cuda::kLeaseExpired
                   ? "the instance stopped itself: its lease lapsed (no heartbeat for " + std::to_string(copt_.lease_ms) + " ms)"
                   : "the instance has stopped";
        return false;
      }
    }
    const cudaError_t q = copt_.shared ? cudaErrorNotReady : cudaStreamQuery(stream_.get());
    if (q != cudaErrorNotReady) {
      kernel_running_ = false;
      (void)cudaGetLastError();
      const cuda::Status st = mailbox_->status();
      *why = q != cudaSuccess ? std::string("the kernel failed: ") + cudaGetErrorString(q)
             : st.state == cuda::kLeaseExpired
                 ? "the kernel stopped itself: its lease lapsed (no heartbeat for " + std::to_string(copt_.lease_ms) + " ms)"
                 : "the kernel has stopped";
      return false;
    }
    const uint32_t answered = mailbox_->status().answers;
    if (int32_t(uint32_t(t_ - 1) - answered) >= cuda::kInputRing - 1) {
      *why = "the kernel is " + std::to_string(int32_t(uint32_t(t_ - 1) - answered)) +
             " ticks behind, past its input ring; its state can no longer follow the stream";
      return false;
    }
    return true;
  }

  cuda::BatchRunner& batch_runner() {
    // Made at the first backtest, often by the thread the engine pinned to the critical core: its copy helpers
    // would inherit that one core. They start on helper_cores_ instead (the caller's own cores come back after).
    const util::ScopedPin spawn(batch_ ? std::vector<int>{} : helper_cores_, "cuda backtest copy helpers' start", false);
    if (!batch_)
      batch_ = std::make_unique<cuda::BatchRunner>(model_, precision_, options().gpu.device,
                                                   cuda::BatchTuning{options().gpu.batch_rows, copt_.partition, copt_.batch_priority, options().gpu.batch_copy_threads,
                                                                     copt_.batch_tile, copt_.batch_cluster,
                                                                     // beside the tick kernel only when asked: a
                                                                     // cluster needs several SMs of one GPC free
                                                                     std::max(copt_.batch_narrow_rows, 0LL), copt_.batch_narrow_ksplit});
    return *batch_;
  }

  void launch() {
    parked_ = false;
    cuda::LstmParams p = copt_.shared ? copt_.shared->instance_params(copt_.slot) : plan_.params;
    p.mb = mailbox_->view((long long)(copt_.lease_ms * 1e6));
    p.stall_tick = copt_.stall_tick;
    p.stall_ns = (long long)(copt_.stall_us * 1e3);
    p.forward_after_output = copt_.forward_after_output;
    p.cl.async_exchange = copt_.cluster_async_exchange ? 1 : 0;
    p.grid_exchange = copt_.grid_exchange;
    p.gate_sleep_ns = copt_.gate_sleep_ns;
    p.keep_warm = copt_.keep_warm;
    p.grid_cell_lanes = copt_.grid_cell_lanes;
    p.grid_quiet_answer = copt_.grid_quiet_answer ? 1 : 0;
    p.grid_input_nap_ns = copt_.grid_input_nap_ns;
    p.grid_warm_l2_tiles = copt_.grid_warm_l2_tiles ? 1 : 0;
    p.grid_pollers_publish = copt_.grid_pollers_publish ? 1 : 0;
    if (copt_.shared) {
      mailbox_->clear();
      copt_.shared->start(copt_.slot, p);
      kernel_running_ = true;
      maybe_behind_ = false;
      ++launches_;
      start_heartbeat();
      wait_until_started();
      return;
    }
    p.frags = frags_.get();
    p.head_b = head_b_.get();
    p.head_w = head_w_.get();
    p.pre_w = pre_w_.get();
    p.h_state = h_state_.get();
    p.pub_P = pub_P_.get();
    p.pub_c = pub_c_.get();
    p.xbuf = xbuf_.get();
    p.words = words_.get();
    p.pre_state = pre_state_.get();
    p.xch_h = xch_h_.get();
    p.xch_flag = xch_flag_.get();
    p.xch_count = p.xch_flag ? p.xch_flag + cuda::grid_counter_offset(p.L, p.nc) : nullptr;
    p.hh_frags = hh_frags_.get();
    p.own_bias = own_bias_.get();
    p.own_state = own_state_.get();
    p.own_h = own_h_.get();
    p.xch_head = xch_head_.get();
    p.xch_words = xch_words_.get();
    p.grid_stats = grid_stats_.get();
    p.tick_trace = trace_.get();
    p.tick_trace_mask = kTickTraceTicks - 1;
    mailbox_->clear();
    words_.zero(stream_.get());
    h_state_.zero(stream_.get());
    // The grid's exchange buffers too: nobody writes the padding columns between the blocks' h slices and
    // the k16 tiles' width, which the matvec reads (times zero weights: a NaN left there by an earlier
    // allocation would still poison every answer).
    if (xch_flag_.get()) xch_flag_.zero(stream_.get());
    if (xch_h_.get()) xch_h_.zero(stream_.get());
    if (xch_head_.get()) xch_head_.zero(stream_.get());
    if (xch_words_.get()) xch_words_.zero(stream_.get());  // tag 0: no tick (an earlier run's tags would pass)
    if (grid_stats_.get()) grid_stats_.zero(stream_.get());  // the timing sums restart with the launch
    if (trace_.get()) trace_.zero(stream_.get());  // the launch's ticks start at 0 again, as the host's
    if (own_h_.get()) own_h_.zero(stream_.get());  // the padding units' columns are read (times zero weights)
    HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    long long max_blocks = 0;
    const cudaError_t e = cuda::launch_lstm(p, stream_.get(), &max_blocks);
    if (e == cudaErrorCooperativeLaunchTooLarge)
      throw UnsupportedError("the cuda kernel needs " + std::to_string(p.grid()) + " co-resident blocks of " +
                             std::to_string(p.threads()) + " threads and " + std::to_string(p.smem_bytes / 1024) +
                             " KiB shared memory; " + limits_.name + " fits " + std::to_string(max_blocks) + " with the " +
                             std::to_string(limits_.sm_count) + " SMs of this context");
    if (e != cudaSuccess) cuda::throw_cuda(e, "launch_lstm");
    kernel_running_ = true;
    maybe_behind_ = false;
    ++launches_;
    start_heartbeat();
    wait_until_started();
  }

  // Cold start: weights into shared memory, first precompute round published, status.ready = 1.
  void wait_until_started() {
    const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(copt_.start_timeout_ms);
    std::string why;
    while (mailbox_->status().ready != cuda::wire_seq(0)) {
      if (!gpu_usable(&why)) why = "the kernel did not start: " + why;
      else if (Clock::now() > deadline) why = "the kernel did not start within " + std::to_string(copt_.start_timeout_ms) + " ms";
      if (!why.empty()) {
        try {
          stop_kernel();
        } catch (...) {
        }
        stop_heartbeat();
        throw BackendError("cuda backend: " + why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Answers this launch's kernel wrote that the host had already given up on (discarded late answers).
  long long late_this_launch() const {
    return cuda::late_answers(mailbox_->status().answers, gpu_answers_ - accepted_base_);
  }

  void start_heartbeat() {
    stop_heartbeat();
    if (!copt_.heartbeat) return;
    heartbeat_ = util::start_jthread("the cuda heartbeat", [this](std::stop_token stop) {
      const auto period = std::chrono::duration<double, std::milli>(copt_.heartbeat_ms);
      while (!stop.stop_requested()) {
        mailbox_->beat();
        lease_renewals_.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(period);
      }
    });
  }
  void stop_heartbeat() {
    heartbeat_.request_stop();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  void stop_kernel() {
    if (kernel_running_) {
      // Remember late answers of this launch before the counters restart.
      late_before_reset_ += late_this_launch();
      mailbox_->request_stop();
      const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(copt_.lease_ms + 5000);
      // Stopped: this engine's kernel has ended, or (shared launch) every block of this instance parked.
      auto stopped = [&] {
        if (copt_.shared) return copt_.shared->parked(copt_.slot) || !copt_.shared->running();
        return cudaStreamQuery(stream_.get()) != cudaErrorNotReady;
      };
      bool done;
      while (!(done = stopped()) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!done) {
        stop_heartbeat();
        throw BackendError("cuda backend: the kernel did not stop");
      }
      kernel_running_ = false;
      (void)cudaGetLastError();
    }
    stop_heartbeat();
  }

  std::string family() const { return cuda::family_name(plan_.params.family); }

  // The kernel family (asked for, or the smallest that holds the model) and its plan. A cluster launch
  // may find fewer co-resident clusters than the plan assumed (clusters stay inside one GPC): the plan is
  // then redone with the precompute blocks that fit.
  void choose_and_plan(std::optional<cuda::KernelFamily> asked, int max_precompute_blocks) {
    cuda::GridPlanOptions grid(copt_.grid_precompute);
    grid.tiles = copt_.grid_tiles;
    grid.compute_warps = copt_.grid_compute_warps;
    cuda::KernelChoice c = cuda::choose_kernel(model_, precision_, options().mode, options().window, copt_.mailbox,
                                               limits_, asked, max_precompute_blocks, copt_.cluster_blocks, grid);
    // A cluster wider than the context's co-scheduled SM groups fits nowhere there (none co-resident: a
    // green context of groups of 8 SMs, where the device's clusters go to 16); smaller clusters then, or
    // whatever family the planner falls to. A cluster size asked for is left as asked.
    while (c.family == cuda::KernelFamily::cluster && copt_.cluster_blocks == 0 &&
           limits_.max_cluster_size / 2 >= cuda::ClusterPolicy::min_blocks) {
      long long fits = 0;
      HOTPATH_CUDA_CHECK(cuda::multiblock_max_coresident(c.plan.params, stream_.get(), &fits));
      if (fits > 0) break;
      limits_.max_cluster_size /= 2;
      c = cuda::choose_kernel(model_, precision_, options().mode, options().window, copt_.mailbox, limits_, asked,
                              max_precompute_blocks, copt_.cluster_blocks, grid);
    }
    if (c.family != cuda::KernelFamily::cta) {
      long long fits = 0;
      HOTPATH_CUDA_CHECK(cuda::multiblock_max_coresident(c.plan.params, stream_.get(), &fits));
      const int nc = c.plan.params.nc;
      if (fits < c.plan.params.grid() && fits > nc) {
        int np = int(fits) - nc;
        if (max_precompute_blocks > 0) np = std::min(np, max_precompute_blocks);
        c = cuda::choose_kernel(model_, precision_, options().mode, options().window, copt_.mailbox, limits_, asked, np,
                                copt_.cluster_blocks, grid);
      }
    }
    plan_ = std::move(c.plan);
    family_why_ = c.why;
  }

  std::unique_ptr<cuda::DeviceClaim> claim_;  // first member: released after everything else is gone
  // The instance of copt_.shared this engine holds (given back when the engine goes).
  struct SlotClaim {
    SlotClaim(std::shared_ptr<cuda::SharedLaunch> l, int k) : launch(std::move(l)), slot(k) { launch->claim_slot(slot); }
    ~SlotClaim() { launch->release_slot(slot); }
    SlotClaim(const SlotClaim&) = delete;
    SlotClaim& operator=(const SlotClaim&) = delete;
    std::shared_ptr<cuda::SharedLaunch> launch;
    int slot;
  };
  std::unique_ptr<SlotClaim> slot_;
  Model model_;
  CudaOptions copt_;
  CudaVariant asked_variant_ = CudaVariant::automatic;
  std::string variant_;  // the one serving: "regs" or "smem"
  Precision precision_;
  InputScaler scaler_;  // x is scaled while packed into the mailbox (send); statistics in try_finish_precompute
  cuda::DeviceLimits limits_;
  cuda::LstmPlan plan_;
  cuda::Stream stream_;
  cuda::Stream side_stream_;  // reads instrumentation while the kernel runs
  DeviceBuffer<uint32_t> frags_;
  DeviceBuffer<float> head_b_, head_w_, pre_w_, h_state_, pub_P_, pub_c_, xbuf_;
  DeviceBuffer<cuda::SharedWords> words_;
  DeviceBuffer<float> pre_state_, xch_head_;  // precompute state in global memory; grid: head partial sums
  DeviceBuffer<uint16_t> xch_h_;              // grid: the layers' h slices
  DeviceBuffer<unsigned> xch_flag_;           // grid: per-(layer, block) flags, the counters
  DeviceBuffer<unsigned long long> xch_words_;  // grid, tagged exchange: the words (GridWords)
  DeviceBuffer<unsigned long long> grid_stats_;  // grid: each block's timing sums [nc][kGridStatSlots]
  // CudaOptions::tick_trace: the kernel's ring [kTickTraceTicks][3] and the host's stamps (steady_clock ns)
  DeviceBuffer<unsigned long long> trace_;
  std::vector<long long> trace_send_ns_, trace_recv_ns_;
  // grid, own precompute (GridPrecompute::in_critical): W_hh fragments, biases, each block's state, the h columns
  DeviceBuffer<uint32_t> hh_frags_;
  DeviceBuffer<float> own_bias_, own_state_;
  DeviceBuffer<uint16_t> own_h_;
  std::string family_why_;  // choose_kernel's reason for the plan's family
  std::unique_ptr<HostMailbox> own_mailbox_;  // an instance of a shared launch uses the launch's
  HostMailbox* mailbox_ = nullptr;
  std::atomic<long long> lease_renewals_{0};  // the heartbeat's beats (counters()), since clear_counters
  // Renews the kernel's lease. A std::jthread: a constructor that throws after starting it stops and
  // joins it (a joinable std::thread would call std::terminate); declared after mailbox_ and
  // lease_renewals_, which it uses.
  std::jthread heartbeat_;
  std::unique_ptr<cuda::BatchRunner> batch_;  // the throughput kernels, made at the first backtest
  bool parked_ = false;                        // stopped for a backtest: launched again at the next tick
  bool kernel_running_ = false;
  bool maybe_behind_ = false;  // the host gave up on a tick the kernel has not answered yet
  long long t_ = 0;
  long long gpu_answers_ = 0, accepted_base_ = 0, timeouts_ = 0, late_before_reset_ = 0;
  long long launches_ = 0;
  std::vector<int> helper_cores_;
};

// The throughput kernels only, no tick kernel: the batch workload (fresh windows, docs/model.md), and
// backtests that run beside tick kernels (CudaOptions::throughput_only) in the SMs those leave.
class CudaBatchBackend final : public Backend {
 public:
  CudaBatchBackend(const Model& model, const BackendOptions& options, const CudaOptions& copt)
      : Backend(model.config, options),
        precision_(options.precision.value_or(Precision::fp16)),
        scaler_(model, options.scaler) {
    std::string why;
    if (!cuda::device_available(&why, options.gpu.device)) throw UnsupportedError("no usable CUDA device: " + why);
    runner_ = std::make_unique<cuda::BatchRunner>(model, precision_, options.gpu.device,
                                                  cuda::BatchTuning{options.gpu.batch_rows, copt.partition, copt.batch_priority, options.gpu.batch_copy_threads,
                                                                    copt.batch_tile, copt.batch_cluster, copt.batch_narrow_rows, copt.batch_narrow_ksplit,
                                                                    copt.batch_fresh_rows, copt.batch_fresh_form});
  }
  std::string name() const override { return "cuda"; }
  std::string variant() const override { return std::string("batch-gemm-") + precision_name(precision_); }
  Precision precision() const override { return precision_; }
  void step(std::span<const float>, std::span<float>) override {
    throw Error("cuda backend: created for the throughput path only (batch, backtest); it has no tick kernel");
  }
  // As the tick backend's backtest (the same runner), window or streaming by this backend's mode.
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override {
    if (options().mode == Mode::batch) throw Error("cuda backend: a backtest needs the window or streaming mode");
    run_backtest(*runner_, scaler_, options(), x, series, ticks, out, done);
  }
  void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done) override {
    if (options().mode == Mode::batch) throw Error("cuda backend: a backtest needs the window or streaming mode");
    run_backtest_on_device(*runner_, scaler_, options(), config(), x, series, ticks, out, done);
  }
  void finish_precompute() override {}
  void reset() override {}
  long long ticks() const override { return 0; }

  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override {
    const size_t I = size_t(config().input_size), O = size_t(config().output_size);
    if (window < 1) throw Error("cuda backend: run_batch needs a window length >= 1");
    if (x.size() != batch * window * I || out.size() < batch * O)
      throw Error("cuda backend: run_batch holds " + std::to_string(x.size()) + " input and " +
                  std::to_string(out.size()) + " output floats for " + std::to_string(batch) + " windows of " +
                  std::to_string(window) + " x " + std::to_string(I));
    check_batch_input(x, window);
    // A fixed scaler applies to every element (a rolling one is refused: batch windows have no stream).
    std::vector<float> scaled;
    if (scaler_.active()) {
      scaled.resize(x.size());
      scaler_.scale_batch(x, scaled.data());
    }
    runner_->fresh(scaled.empty() ? x.data() : scaled.data(), batch, window, out.data());
  }
  // Fresh windows in GPU memory: checked there; a fixed scaler (host code) takes them through the host.
  void run_batch_on_device(const float* x, size_t batch, size_t window, float* out) override {
    const size_t I = size_t(config().input_size), O = size_t(config().output_size), n = batch * window * I;
    if (window < 1) throw Error("cuda backend: run_batch needs a window length >= 1");
    if (n == 0) return;
    if (const size_t k = runner_->first_nonfinite(x, n); k < n) throw_batch_input_error(k, window);
    if (scaler_.active()) {
      std::vector<float> xs(n), zs(batch * O);
      HOTPATH_CUDA_CHECK(cudaMemcpy(xs.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
      run_batch(xs, batch, window, zs);
      HOTPATH_CUDA_CHECK(cudaMemcpy(out, zs.data(), zs.size() * sizeof(float), cudaMemcpyHostToDevice));
      return;
    }
    runner_->fresh(x, batch, window, out, cuda::ArraysIn::device);
  }

  std::map<std::string, double> counters() const override {
    std::map<std::string, double> c;
    add_batch_counters(*runner_, c);
    return c;
  }

 private:
  Precision precision_;
  InputScaler scaler_;
  std::unique_ptr<cuda::BatchRunner> runner_;
};

}  // namespace


std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options) {
  return make_cuda_backend(model, options, CudaOptions{});
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options, const CudaOptions& cuda) {
  if (options.mode == Mode::batch || cuda.throughput_only) return std::make_unique<CudaBatchBackend>(model, options, cuda);
  return std::make_unique<CudaBackend>(model, options, cuda);
}

void preload_cuda_kernels(int device) {
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  HOTPATH_CUDA_CHECK(cuda::preload_cta_kernels());
  HOTPATH_CUDA_CHECK(cuda::preload_cluster_kernels());
  HOTPATH_CUDA_CHECK(cuda::preload_grid_kernels());
  cuda::preload_batch_kernels(device);
}

}  // namespace hotpath
