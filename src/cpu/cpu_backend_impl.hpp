// The CPU backend's class (internal to src/cpu): the tick path (cpu_backend.cpp: the critical step on the
// calling thread, the precompute on the pool) and the throughput path (cpu_throughput.cpp: run_batch and
// backtest in tiles of sequences) share its packed model, kernels, pool and pinning.
#pragma once
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/aligned.hpp"
#include "cpu/isa_choice.hpp"
#include "cpu/kernels.hpp"
#include "cpu/packed_model.hpp"
#include "cpu/part_barrier.hpp"
#include "cpu/spin_pool.hpp"
#include "cpu/window_feed.hpp"
#include "scaling/input_scaler.hpp"

namespace hotpath::cpu {

class CpuBackend final : public Backend {
 public:
  // make_feed (may be empty): the critical step's window state comes from the feed it makes (make_cpu_backend_fed)
  CpuBackend(const Model& model, const BackendOptions& options, Precision precision, IsaChoice isa,
             const WindowFeedMaker& make_feed = {}, std::string name = "cpu");
  ~CpuBackend() override;

  std::string name() const override { return name_; }
  std::string variant() const override { return variant_; }
  Precision precision() const override { return precision_; }
  void step(std::span<const float> x, std::span<float> out) override;
  void finish_precompute() override;
  bool try_step(std::span<const float> x, std::span<float> out, std::string* why) override;
  bool try_finish_precompute(std::string* why) override;
  void reset() override;
  long long ticks() const override { return ticks_; }
  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override;
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override;
  std::map<std::string, double> counters() const override;
  void clear_counters() override {
    precompute_count_ = 0;
    precompute_busy_us_sum_ = precompute_wait_us_sum_ = 0;
    fed_late_ = fed_timeouts_ = 0;
    if (feed_) feed_->clear_counters();
    barrier_wait_base_ns_ = barrier_wait_ns();  // the workers may be running: their totals only grow
  }
  std::map<std::string, std::string> facts() const override;
  void settle_threads() override;

 private:
  // Per part (worker) scratch for advancing several windows at once.
  struct Scratch {
    int max_cols = 0;
    AlignedArray<float> h_a, h_b;  // [max_cols][Hp]
    AlignedArray<uint32_t> pairs;  // bf16 activation pairs
    AlignedArray<float> u0;        // int8: this part's W_ih,0·x_t from the dequantized fp32 weights
    long long u0_tick = -1;        // the tick u0 holds
    alignas(8) int64_t wait_ns = 0;  // the row split: time waited at the group's barrier (std::atomic_ref: read by counters())
    std::vector<int> slots;
    std::vector<const float*> in, add;
    std::vector<float*> P, c, h;
    // `cols` windows at most a call; h columns for `h_cols` of them (0: the row split's shared h).
    Scratch(int cols, int h_cols, int Hp, int kmax);
  };

  // The slot of the window that completes at tick t (fed: one slot, the feed's copy).
  int completing_slot(long long t) const { return streaming_ || t < W_ - 1 ? 0 : int((t - W_ + 1) % nslots_); }
  // The step's body; false (with *why) when a feed's state did not come in time (then nothing is answered).
  bool step_impl(std::span<const float> x, std::span<float> out, std::string* why);
  // finish_precompute with a feed: its state for the next tick into slot 0; false (with *why) when it did
  // not come within the timeout. in_step: called by the step itself (a wait there makes the tick late).
  bool finish_fed(bool in_step, std::string* why);
  float* slot_P(int slot, int layer) { return slots_.data() + size_t(slot) * slot_floats_ + size_t(layer) * layer_floats_; }
  float* slot_c(int slot, int layer) { return slot_P(slot, layer) + pm_.gate_floats(); }
  void make_fresh(int slot);
  void gemm(const PackedLayer& layer, bool hh, int b0, int b1, int ncols, const float* const* X,
            const float* const* add, float* const* out, uint32_t* pairs) const;
  const float* open_windows_u0(Scratch& s, int b0, int b1);
  void advance_windows(Scratch& s, int n);
  // The row split (CpuOptions::pre_split): the open windows of the part's group through its blocks.
  void advance_windows_rows(Scratch& s, int part);
  void plan_row_groups(int row_cores, size_t l2);
  std::string row_split_text() const;
  // The row split's barrier waits so far, every part's together.
  int64_t barrier_wait_ns() const {
    int64_t sum = 0;
    for (const Scratch& s : scratch_)
      sum += std::atomic_ref<int64_t>(const_cast<int64_t&>(s.wait_ns)).load(std::memory_order_relaxed);
    return sum;
  }
  int64_t barrier_wait_base_ns_ = 0;
  void precompute_part(int part, int nparts);
  static void precompute_job(void* self, int part, int nparts) {
    static_cast<CpuBackend*>(self)->precompute_part(part, nparts);
  }
  // The throughput paths (run_batch, backtest): tiles of up to kMaxTileCols sequences advanced in
  // lockstep from zero state, `steps` steps each. Column j reads its step-k input at x[j] + k*I and,
  // from step `emit_from` on, writes each step's output (O values) as row row0[j] + (k - emit_from).
  struct Tile {
    int n = 0;
    size_t steps = 0, emit_from = 0;
    const float* x[kMaxTileCols] = {};
    size_t row0[kMaxTileCols] = {};
  };
  struct TileScratch {
    AlignedArray<float> P, c, ha, hb, z;
    AlignedArray<uint32_t> pairs;
    explicit TileScratch(const PackedModel& pm);
  };
  struct TileJob {
    size_t count = 0;                    // tiles
    std::function<Tile(size_t)> tile;    // the k-th tile
    BacktestOutput out;                  // rows of O values
    std::atomic<size_t> next{0};         // the next tile to take
    std::atomic<size_t>* done = nullptr; // rows finished (progress)
    std::vector<TileScratch> scratch;    // one per thread, allocated before any starts (workers must not throw)
  };
  // Returns early (the tile unfinished) when out.stop is set; advances `done` (may be null) as it emits.
  void run_tile(const Tile& tile, TileScratch& s, BacktestOutput out, std::atomic<size_t>* done) const;
  // Runs every tile of `job` on the pool's workers and the caller (or, without a cpuset, on a thread
  // per allowed core), each taking the next tile as it finishes one.
  void run_tiles(TileJob& job);
  void tiles_part(TileJob& job, TileScratch& scratch) const;
  static void tiles_job(void* job_self, int part, int) {
    auto* p = static_cast<std::pair<CpuBackend*, TileJob*>*>(job_self);
    p->first->tiles_part(*p->second, p->second->scratch[size_t(part)]);
  }
  void pin_caller();
  // The critical step's layers for blocks [b0, b1) of hidden units (part `part` of crit_parts_): every
  // layer's gates and cell, after the barrier that says the previous layer's h is whole (several parts).
  void critical_layers(int part);
  static void critical_job(void* self, int helper, int) { static_cast<CpuBackend*>(self)->critical_layers(helper + 1); }
  static void fed_copy_job(void* self, int helper, int) { static_cast<CpuBackend*>(self)->copy_fed_part(helper + 1); }
  void copy_fed_part(int part);

  const std::string name_;
  const Precision precision_;
  const KernelTable* k_;
  std::string variant_;
  std::string int8_slow_;  // IsaChoice::int8_slow
  PackedModel pm_;
  const bool streaming_;
  const int W_;       // window length (1 slot in streaming)
  const int nslots_;
  InputScaler scaler_;  // x is scaled while it is copied into xbuf_; the next tick's statistics in finish_precompute
  int prefetch_ = 0;
  bool rewarm_ = true;
  // The critical step's private copy of its weights: every layer's W_ih in the step's format (int8:
  // with its scales and corrections), then the head, contiguous in the order the step reads them, then
  // its scratch. No line of the weights is shared with the precompute workers (they read the packed
  // model), rewarm() walks one region, and by default (HOTPATH_CPU_HUGEPAGES=0 turns it off) it sits on
  // a transparent huge page: one dTLB entry for all of it instead of one per 4 KB. Measured on the lent
  // Xeon (a KVM guest, where a TLB miss walks two page tables), critical step p50/p99 in us, huge vs 4 KB
  // pages, two runs (bench/results/2026-12-02-xeon-cpu-{variants,issue15}.json): vollo_tiny int8
  // 3.17/3.73 vs 4.05/8.79, then 4.12/6.00 vs 3.87/6.26; lstm_s window int8 2.55/3.87 vs 2.99/5.44, then
  // 2.94/4.79 vs 3.00/6.54: p99 lower in both, p50 within the machine's noise.
  struct CriticalLayer {
    const void* w = nullptr;
    const float* scale = nullptr;
    const int32_t* corr = nullptr;
  };
  void build_critical_arena(bool huge, int kmax);
  AlignedArray<char> crit_arena_;
  size_t crit_bytes_ = 0;
  bool crit_huge_ = false;
  std::vector<CriticalLayer> crit_;
  const float* crit_head_ = nullptr;     // the fp32 head, or
  const int8_t* crit_head8_ = nullptr;  // the int8 head (int8 with O > kHeadRowMajorMax)
  const float* crit_head8_scale_ = nullptr;
  const int32_t* crit_head8_corr_ = nullptr;
  size_t rewarm_offset_ = 0;  // where the next rewarm() starts
  void rewarm();

  size_t layer_floats_ = 0, slot_floats_ = 0;
  AlignedArray<float> slots_;
  // Critical-step scratch.
  AlignedArray<float> u0_;
  // In the critical arena, after the weights: x (scaled), h and c of every layer, the head's output,
  // the activations in the kernels' formats.
  float *xbuf_ = nullptr, *hs_ = nullptr, *cs_ = nullptr, *z_ = nullptr;
  uint32_t* crit_pairs_ = nullptr;

  int int8_act_ = 0;  // index into KernelTable::crit_i8
  // The critical step over crit_parts_ cores (CpuOptions::crit_cores): part 0 on the calling thread,
  // parts 1.. on crit_pool_'s helpers, each all four gates of its blocks of hidden units; after each
  // layer a part publishes the epoch it reached on a line of its own (PartBarrier) and the next layer
  // waits for every part's. The tick's slot and epoch base are written before crit_pool_.start().
  int crit_parts_ = 1;
  std::vector<int> crit_block0_;                  // part k's blocks: [crit_block0_[k], crit_block0_[k + 1])
  std::vector<AlignedArray<uint32_t>> crit_part_scratch_;  // parts 1..: their activation scratch
  std::unique_ptr<PartBarrier> crit_barrier_;
  int crit_slot_ = 0;
  uint64_t crit_epoch_ = 0;  // the epoch before this tick's first layer (grows by L a tick, never reset)
  std::string options_text_;  // the CpuOptions it was made with (facts)
  std::vector<Scratch> scratch_;  // one per precompute part
  // The precompute's row split (CpuOptions::pre_split, pre_row_cores): the parts form groups of
  // consecutive parts; group g advances the open windows whose slot maps to it (pre_slot_group_, slots
  // shared out in proportion to the groups' parts); part k owns blocks [pre_block0_[k], pre_block1_[k])
  // of every layer within its group; after each layer's cells a group's parts meet at its barrier
  // (pre_barriers_[g], a part there by its rank; epochs as the critical split's), and the layer's h of
  // every window is in pre_h_ (two buffers by layer parity, [slot][Hp]).
  bool rows_split_ = false;
  std::vector<int> pre_block0_, pre_block1_;  // per part: its blocks [first, end)
  std::vector<int> pre_group_, pre_rank_;     // per part
  std::vector<int> pre_slot_group_;        // per slot
  std::vector<std::unique_ptr<PartBarrier>> pre_barriers_;
  AlignedArray<float> pre_h_;
  uint64_t pre_epoch_ = 0;  // the epoch before this tick's precompute (grows by L a tick)
  SpinPool crit_pool_;  // the critical step's helpers (crit_parts_ - 1): they never doze
  SpinPool pool_;
  int nparts_ = 1;

  long long ticks_ = 0;
  bool pending_ = false;
  long long pending_tick_ = 0;
  bool pending_keep_ = false;
  int pending_slot_ = 0;

  // Pinning of the thread that calls step().
  bool pin_ = false;
  int critical_core_ = -1;
  pthread_t pinned_thread_{};
  std::vector<int> saved_affinity_;  // the pinned thread's cores before, restored by the destructor

  // The window state's producer when not the CPU (make_cpu_backend_fed), and what its waits cost.
  std::unique_ptr<WindowStateFeed> feed_;
  std::chrono::nanoseconds feed_timeout_{};
  const float* fed_state_ = nullptr;  // the feed's state while finish_fed() copies it (copy_fed_part)
  long long fed_late_ = 0, fed_timeouts_ = 0;  // counted once a tick
  long long fed_failed_tick_ = -1;              // the tick whose wait last timed out

  // Counters (caller thread only).
  long long precompute_count_ = 0;
  double precompute_busy_us_sum_ = 0, precompute_wait_us_sum_ = 0;
  volatile float sink_ = 0;
};

}  // namespace hotpath::cpu
