// The CPU backend: the critical step (docs/model.md, "The critical step and the precompute") on the
// calling thread, pinned to the first core of the cpuset; the precompute (the W-1 open windows consume
// x_t, or W_hh·h + b for streaming) on spinning workers pinned to the other cores, started by step()
// right after the output is written and awaited in finish_precompute().
//
// State, per open window ("slot", start % W) and layer: P = W_hh·h + b, the recurrent half of the
// gates, already in the [nb][4][lanes] order the critical step adds, and c. h itself is not kept:
// once P is known nothing else needs it. A fresh window is P = b, c = 0.
//
// Tick t: the completing window starts at s = max(0, t-W+1). step() runs, for it, gates = W_ih·in + P
// layer by layer (keeping u = W_ih,0·x_t, which every open window shares), the cell, the head, and
// writes h, c of every layer to scratch. Then the precompute: windows starting in
// [max(0, t-W+2), t] advance by x_t, except that while t < W-1 (and always in streaming) the
// completing window is also still open: it takes c from the scratch and P = W_hh·h + b from the
// scratch h (rows split over all workers). Last, the slot of the window starting at t+1 is made fresh.
#include "cpu/cpu_backend.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "cpu/aligned.hpp"
#include "cpu/kernels.hpp"
#include "cpu/packed_model.hpp"
#include "cpu/spin_pool.hpp"
#include "scaling/input_scaler.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"
#include "util/warn.hpp"

namespace hotpath {
namespace cpu {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct IsaChoice {
  const KernelTable* table = nullptr;
  std::string variant;
  std::string int8_slow;  // int8 on the portable table: why, else empty
  CpuOptions options;     // as asked (CpuOptions), for the rest of the backend
};

std::optional<CpuFeatures>& features_override() {
  static std::optional<CpuFeatures> f;
  return f;
}

// The kernel table for `precision` on `cpu` as `o` asks (CpuOptions: isa, bf16). int8 needs AVX512_VNNI;
// without it (or with isa=generic) it runs on the portable table, which emulates vpdpbusd (correct, slow).
IsaChoice choose_isa(Precision precision, const CpuFeatures& cpu, const CpuOptions& o) {
  const bool bf16 = precision == Precision::bf16, int8 = precision == Precision::int8;
  const bool has_avx2 = cpu.avx2_fma;
  const bool has_avx512 = has_avx2 && cpu.avx512;
  const bool has_bf16dot = has_avx512 && cpu.avx512_bf16;
  const bool has_vnni = has_avx512 && cpu.avx512_vnni;
  const bool chose = o.isa != CpuIsa::automatic;
  const CpuIsa isa = chose ? o.isa
                     : int8 ? (has_vnni ? CpuIsa::avx512 : CpuIsa::generic)
                     : has_avx512 ? CpuIsa::avx512
                     : has_avx2   ? CpuIsa::avx2
                                  : CpuIsa::generic;
  IsaChoice c;
  c.options = o;
  if (isa == CpuIsa::avx512) {
    if (!has_avx512) throw UnsupportedError("cpu option isa=avx512: this CPU lacks AVX-512 F/BW/DQ/VL");
    if (int8 && !has_vnni) throw UnsupportedError("--precision int8 with cpu option isa=avx512: this CPU lacks AVX512_VNNI");
    if (o.bf16 == CpuBf16::dot && !has_bf16dot) throw UnsupportedError("cpu option bf16=dot: this CPU lacks AVX512_BF16");
    c.table = kernels_avx512(o.bf16 != CpuBf16::cvt && has_bf16dot);
  } else if (isa == CpuIsa::avx2) {
    if (!has_avx2) throw UnsupportedError("cpu option isa=avx2: this CPU lacks AVX2/FMA");
    if (o.bf16 == CpuBf16::dot) throw UnsupportedError("cpu option bf16=dot needs AVX512_BF16 (or isa=generic)");
    if (int8) throw UnsupportedError("--precision int8 needs AVX512_VNNI or cpu option isa=generic, not avx2");
    c.table = kernels_avx2();
  } else {
    c.table = kernels_generic(o.bf16 != CpuBf16::cvt);
  }
  c.variant = std::string(c.table->isa) +
              (int8 ? "-int8" : bf16 ? (c.table->bf16_dot || isa == CpuIsa::avx2 ? "-bf16" : "-bf16cvt") : "-fp32");
  if (int8 && isa == CpuIsa::generic)
    c.int8_slow = std::string("int8 runs on the portable kernels here (") +
                  (chose ? "cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA"
                         : "this CPU lacks AVX512_VNNI, which the int8 kernels need") +
                  "), many times slower than fp32 (lstm_s: ~15x): use fp32 or bf16 on this machine";
  return c;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& options, Precision precision, IsaChoice isa);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  std::string variant() const override { return variant_; }
  Precision precision() const override { return precision_; }
  void step(std::span<const float> x, std::span<float> out) override;
  void finish_precompute() override;
  void reset() override;
  long long ticks() const override { return ticks_; }
  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override;
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override;
  std::map<std::string, double> counters() const override;
  void clear_counters() override {
    precompute_count_ = 0;
    precompute_busy_us_sum_ = precompute_wait_us_sum_ = 0;
  }
  std::map<std::string, std::string> facts() const override;

 private:
  // Per part (worker) scratch for advancing several windows at once.
  struct Scratch {
    int max_cols = 0;
    AlignedArray<float> h_a, h_b;  // [max_cols][Hp]
    AlignedArray<uint32_t> pairs;  // bf16 activation pairs
    AlignedArray<float> u0;        // int8: this part's W_ih,0·x_t from the dequantized fp32 weights
    long long u0_tick = -1;        // the tick u0 holds
    std::vector<int> slots;
    std::vector<const float*> in, add;
    std::vector<float*> P, c, h;
    Scratch(int cols, int Hp, int kmax);
  };

  float* slot_P(int slot, int layer) { return slots_.data() + size_t(slot) * slot_floats_ + size_t(layer) * layer_floats_; }
  float* slot_c(int slot, int layer) { return slot_P(slot, layer) + pm_.gate_floats(); }
  void make_fresh(int slot);
  void gemm(const PackedLayer& layer, bool hh, int b0, int b1, int ncols, const float* const* X,
            const float* const* add, float* const* out, uint32_t* pairs) const;
  void advance_windows(Scratch& s, int n);
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
  std::string options_text_;  // the CpuOptions it was made with (facts)
  std::vector<Scratch> scratch_;  // one per precompute part
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

  // Counters (caller thread only).
  long long precompute_count_ = 0;
  double precompute_busy_us_sum_ = 0, precompute_wait_us_sum_ = 0;
  volatile float sink_ = 0;
};

CpuBackend::Scratch::Scratch(int cols, int Hp, int kmax)
    : max_cols(cols),
      h_a(size_t(cols) * Hp),
      h_b(size_t(cols) * Hp),
      pairs(pair_scratch_words(kmax)),
      u0(size_t(Hp) * 4),
      slots(cols),
      in(cols),
      add(cols),
      P(cols),
      c(cols),
      h(cols) {}

CpuBackend::CpuBackend(const Model& model, const BackendOptions& options, Precision precision, IsaChoice isa)
    : Backend(model.config, options),
      precision_(precision),
      k_(isa.table),
      variant_(std::move(isa.variant)),
      int8_slow_(std::move(isa.int8_slow)),
      pm_(pack_model(model, isa.table->lanes,
                     precision == Precision::bf16   ? WeightFormat::bf16
                     : precision == Precision::int8 ? WeightFormat::int8
                                                    : WeightFormat::fp32)),
      streaming_(options.mode != Mode::window),
      W_(options.mode == Mode::window ? (options.window > 0 ? options.window : model.config.window.value_or(0)) : 1),
      nslots_(options.mode == Mode::window ? std::max(W_, 1) : 1),
      scaler_(model, options.scaler),
      pool_(options.cpuset.size() > 1 ? std::vector<int>(options.cpuset.begin() + 1, options.cpuset.end())
                                      : std::vector<int>{}) {
  if (options.mode == Mode::window && W_ < 1)
    throw Error("cpu backend: window mode needs a window length >= 1 (none given and none in the model file)");
  const CpuOptions& co = isa.options;
  options_text_ = cpu_options_text(co);
  // CpuOptions::prefetch_bytes: auto is 1,024 on AVX-512 (measured there), off elsewhere (not measured)
  prefetch_ = co.prefetch_bytes >= 0 ? co.prefetch_bytes : k_->lanes == 16 && std::string(k_->isa) == "avx512" ? 1024 : 0;
  rewarm_ = co.rewarm;
  if (pm_.int8) {
    int8_act_ = co.int8_act_bits == 16 ? 1 : 0;  // KernelTable::crit_i8's index (kernels.hpp)
    variant_ += int8_act_ ? "" : "-a8";
  }
  const bool use_huge = co.huge_pages;
  const int Hp = pm_.Hp;
  layer_floats_ = round_to_lines<float>(pm_.gate_floats() + size_t(Hp));
  slot_floats_ = layer_floats_ * pm_.num_layers;
  nparts_ = std::max(1, pool_.size());
  const int cols = int((static_cast<long long>(nslots_) + nparts_ - 1) / nparts_ + 1);
  // The window state (P and c per open window, two h columns per window for the precompute) grows
  // with W: refuse a window whose state no machine should be asked for before allocating any of it.
  if (!streaming_)
    check_window_state("cpu", W_,
                       4.0 * (double(slot_floats_) * nslots_ + double(nparts_) * cols * 2.0 * Hp));
  // The open windows' state: the critical step reads one slot a tick (huge pages: one dTLB entry).
  slots_ = AlignedArray<float>(slot_floats_ * nslots_, use_huge);
  u0_ = AlignedArray<float>(pm_.gate_floats());
  const int kmax = std::max(pm_.I, pm_.H);
  build_critical_arena(use_huge, kmax);
  scratch_.reserve(nparts_);
  for (int p = 0; p < nparts_; ++p) scratch_.emplace_back(cols, Hp, kmax);
  if (!options.cpuset.empty()) {
    for (size_t i = 0; i < options.cpuset.size(); ++i)
      for (size_t j = i + 1; j < options.cpuset.size(); ++j)
        if (options.cpuset[i] == options.cpuset[j])
          throw Error("cpu backend: core " + std::to_string(options.cpuset[i]) + " appears twice in --cpuset");
    pin_ = true;
    critical_core_ = options.cpuset[0];
    saved_affinity_ = util::allowed_cores();
    pin_caller();
  }
  make_fresh(0);
}

void CpuBackend::build_critical_arena(bool huge, int kmax) {
  struct Piece {
    const void* src;
    size_t bytes;
    size_t at = 0;
  };
  std::vector<Piece> pieces;
  for (const PackedLayer& l : pm_.layers) {
    if (pm_.int8) {
      pieces.push_back({l.wih8.data(), l.wih8.size()});
      pieces.push_back({l.wih8_scale.data(), l.wih8_scale.size() * 4});
      pieces.push_back({l.wih8_corr.data(), l.wih8_corr.size() * 4});
    } else if (pm_.bf16) {
      pieces.push_back({l.wih16.data(), l.wih16.size() * 4});
    } else {
      pieces.push_back({l.wih32.data(), l.wih32.size() * 4});
    }
  }
  const bool head8 = pm_.head8.size() > 0;
  if (head8) {
    pieces.push_back({pm_.head8_scale.data(), pm_.head8_scale.size() * 4});
    pieces.push_back({pm_.head8_corr.data(), pm_.head8_corr.size() * 4});
    pieces.push_back({pm_.head8.data(), pm_.head8.size()});
  } else {
    pieces.push_back({pm_.head_w.data(), pm_.head_w.size() * 4});
  }
  const size_t weights = pieces.size();
  // scratch (zeroed): x, h and c of every layer, z, the activations (bf16 pairs or int8's bytes)
  const size_t hc = size_t(pm_.Hp) * pm_.num_layers * 4;
  for (const size_t bytes : {round_to_lines<float>(size_t(pm_.I) + 1) * 4, hc, hc, size_t(pm_.Op) * 4,
                             activation_scratch_words(kmax) * 4})
    pieces.push_back({nullptr, bytes});
  size_t total = 0;
  for (Piece& p : pieces) {
    p.at = total;
    total += (p.bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  }
  crit_arena_ = AlignedArray<char>(total, huge);
  crit_bytes_ = pieces[weights].at;  // rewarm walks the weights
  crit_huge_ = huge;
  for (const Piece& p : pieces)
    if (p.src) std::memcpy(crit_arena_.data() + p.at, p.src, p.bytes);
  const int per_layer = pm_.int8 ? 3 : 1;
  crit_.resize(pm_.layers.size());
  for (size_t l = 0; l < crit_.size(); ++l) {
    const char* base = crit_arena_.data();
    crit_[l].w = base + pieces[l * per_layer].at;
    if (pm_.int8) {
      crit_[l].scale = reinterpret_cast<const float*>(base + pieces[l * per_layer + 1].at);
      crit_[l].corr = reinterpret_cast<const int32_t*>(base + pieces[l * per_layer + 2].at);
    }
  }
  const char* head_at = crit_arena_.data() + pieces[weights - 1].at;
  if (head8) {
    crit_head8_ = reinterpret_cast<const int8_t*>(head_at);
    crit_head8_scale_ = reinterpret_cast<const float*>(crit_arena_.data() + pieces[weights - 3].at);
    crit_head8_corr_ = reinterpret_cast<const int32_t*>(crit_arena_.data() + pieces[weights - 2].at);
  } else {
    crit_head_ = reinterpret_cast<const float*>(head_at);
  }
  auto at = [&](size_t k) { return crit_arena_.data() + pieces[weights + k].at; };
  xbuf_ = reinterpret_cast<float*>(at(0));
  hs_ = reinterpret_cast<float*>(at(1));
  cs_ = reinterpret_cast<float*>(at(2));
  z_ = reinterpret_cast<float*>(at(3));
  crit_pairs_ = reinterpret_cast<uint32_t*>(at(4));
}

CpuBackend::~CpuBackend() {
  if (pending_) pool_.wait();
  if (!saved_affinity_.empty() && pthread_equal(pinned_thread_, pthread_self()))
    util::set_thread_cores(pthread_self(), saved_affinity_);
}

void CpuBackend::pin_caller() {
  util::pin_thread(pthread_self(), {critical_core_}, "cpu backend");
  pinned_thread_ = pthread_self();
}

void CpuBackend::make_fresh(int slot) {
  for (int l = 0; l < pm_.num_layers; ++l) {
    std::memcpy(slot_P(slot, l), pm_.layers[l].bias.data(), pm_.gate_floats() * sizeof(float));
    std::memset(slot_c(slot, l), 0, size_t(pm_.Hp) * sizeof(float));
  }
}

void CpuBackend::gemm(const PackedLayer& layer, bool hh, int b0, int b1, int ncols, const float* const* X,
                      const float* const* add, float* const* out, uint32_t* pairs) const {
  const int kdim = hh ? pm_.H : layer.in;
  if (pm_.bf16)
    k_->gemm_bf16((hh ? layer.whh16 : layer.wih16).data(), kdim, b0, b1, ncols, X, add, out, pairs);
  else
    k_->gemm_f32((hh ? layer.whh32 : layer.wih32).data(), kdim, b0, b1, ncols, X, add, out, pairs);
}

void CpuBackend::step(std::span<const float> x, std::span<float> out) {
  const long long t = ticks_;
  check_tick_input(x, t);
  if (out.size() < size_t(pm_.O))
    throw Error("cpu backend: output span holds " + std::to_string(out.size()) + " floats, the model gives " +
                std::to_string(pm_.O));
  if (options().mode == Mode::batch) throw Error("cpu backend: created for the batch workload; use run_batch");
  if (pending_) finish_precompute();
  if (pin_ && !pthread_equal(pinned_thread_, pthread_self())) pin_caller();  // first tick of a new thread only

  scaler_.scale(x, xbuf_);  // the copy of x, scaled on the way (a plain copy without a scaler)
  const int slot = streaming_ || t < W_ - 1 ? 0 : int((t - W_ + 1) % W_);
  const int nb = pm_.nb, Hp = pm_.Hp;
  const float* in = xbuf_;
  for (int l = 0; l < pm_.num_layers; ++l) {
    const PackedLayer& layer = pm_.layers[l];
    float* u = (l == 0 && !streaming_ && W_ > 1) ? u0_.data() : nullptr;
    float* h = hs_ + size_t(l) * Hp;
    float* c = cs_ + size_t(l) * Hp;
    const CriticalLayer& cl = crit_[l];
    if (pm_.int8)  // u0 comes from the precompute's own fp32 product (advance_windows)
      k_->crit_i8[int8_act_](static_cast<const int8_t*>(cl.w), cl.scale, cl.corr, layer.in, nb, in, slot_P(slot, l),
                             slot_c(slot, l), h, c, reinterpret_cast<uint8_t*>(crit_pairs_), prefetch_);
    else if (pm_.bf16)
      k_->crit_bf16(static_cast<const uint32_t*>(cl.w), layer.in, nb, in, slot_P(slot, l), slot_c(slot, l), h, c, u,
                    crit_pairs_, prefetch_);
    else
      k_->crit_f32(static_cast<const float*>(cl.w), layer.in, nb, in, slot_P(slot, l), slot_c(slot, l), h, c, u,
                   crit_pairs_, prefetch_);
    in = h;
  }
  if (crit_head8_)
    k_->head_i8[int8_act_](crit_head8_, crit_head8_scale_, crit_head8_corr_, pm_.head_bias ? pm_.head_b.data() : nullptr,
                           pm_.O, pm_.H, in, z_, reinterpret_cast<uint8_t*>(crit_pairs_));
  else
    k_->head(crit_head_, pm_.head_bias ? pm_.head_b.data() : nullptr, pm_.O, Hp, in, z_);
  for (int o = 0; o < pm_.O; ++o) out[o] = z_[o];

  // Off the critical path from here.
  pending_tick_ = t;
  pending_keep_ = streaming_ || t < W_ - 1;
  pending_slot_ = slot;
  pending_ = true;
  ticks_ = t + 1;
  if (pool_.size() > 0) pool_.start(&precompute_job, this);
}

void CpuBackend::finish_precompute() {
  if (!pending_) return;
  const int64_t t0 = now_ns();
  scaler_.prepare();  // the next tick's input statistics, while the workers run
  int64_t busy;
  if (pool_.size() > 0) {
    if (rewarm_)
      pool_.wait_with([this] { rewarm(); });
    else
      pool_.wait();
    busy = pool_.last_busy_ns();
  } else {
    precompute_part(0, 1);
    busy = now_ns() - t0;
  }
  pending_ = false;
  ++precompute_count_;
  precompute_busy_us_sum_ += busy * 1e-3;
  // Pull the next completing window's state into this core's cache now, not during the next step().
  const long long t = ticks_;
  const int slot = streaming_ || t < W_ - 1 ? 0 : int((t - W_ + 1) % W_);
  float s = 0;
  const float* p = slot_P(slot, 0);
  for (size_t i = 0; i < slot_floats_; i += kCacheLine / sizeof(float)) s += p[i];
  sink_ = s;
  precompute_wait_us_sum_ += (now_ns() - t0) * 1e-3;
}

// While the workers run, the critical thread walks its weights with L2 prefetches, a few lines per
// poll, round and round: lines of the critical weights that the precompute's traffic pushed out of
// this core's L2 (the other cores' streams can evict them through the shared L3 / snoop filter) come
// back before the next step needs them. It only uses time the thread would spend spinning.
// (Window-mode p99 on the Xeon was 2-3x its p50 without it; not yet measured with it.)
void CpuBackend::rewarm() {
  constexpr size_t kLinesPerPoll = 8;
  for (size_t i = 0; i < kLinesPerPoll; ++i, rewarm_offset_ += kCacheLine) {
    if (rewarm_offset_ >= crit_bytes_) rewarm_offset_ = 0;
    __builtin_prefetch(crit_arena_.data() + rewarm_offset_, 0, 2);  // prefetcht1: into L2
  }
  cpu_relax();
}

// Windows s.slots[0..n) consume x_t: layer 0 uses u = W_ih,0·x_t from the critical step.
void CpuBackend::advance_windows(Scratch& s, int n) {
  const int nb = pm_.nb, Hp = pm_.Hp;
  float* hin = s.h_a.data();
  float* hout = s.h_b.data();
  for (int l = 0; l < pm_.num_layers; ++l) {
    const PackedLayer& layer = pm_.layers[l];
    for (int j = 0; j < n; ++j) {
      s.P[j] = slot_P(s.slots[j], l);
      s.c[j] = slot_c(s.slots[j], l);
      s.h[j] = hout + size_t(j) * Hp;
      s.in[j] = hin + size_t(j) * Hp;
    }
    if (l == 0) {
      const float* u0 = u0_.data();
      if (pm_.int8) {
        // The critical step's int8 product rounds x_t; the open windows take the exact fp32 one (one
        // product per part and tick, shared by the part's windows).
        if (s.u0_tick != pending_tick_) {
          const float* x = xbuf_;
          const float* none = nullptr;
          float* out = s.u0.data();
          k_->gemm_f32(layer.wih32.data(), layer.in, 0, nb, 1, &x, &none, &out, s.pairs.data());
          s.u0_tick = pending_tick_;
        }
        u0 = s.u0.data();
      }
      for (int j = 0; j < n; ++j) k_->cell(s.P[j], u0, s.c[j], s.h[j], 0, nb);
    } else {
      for (int j = 0; j < n; ++j) s.add[j] = s.P[j];
      gemm(layer, false, 0, nb, n, s.in.data(), s.add.data(), s.P.data(), s.pairs.data());
      for (int j = 0; j < n; ++j) k_->cell(s.P[j], nullptr, s.c[j], s.h[j], 0, nb);
    }
    for (int j = 0; j < n; ++j) {
      s.add[j] = layer.bias.data();
      s.in[j] = s.h[j];
    }
    gemm(layer, true, 0, nb, n, s.in.data(), s.add.data(), s.P.data(), s.pairs.data());
    std::swap(hin, hout);
  }
}

void CpuBackend::precompute_part(int part, int nparts) {
  Scratch& s = scratch_[part];
  const long long t = pending_tick_;
  if (!streaming_) {
    // Open windows (other than a kept completing one) that consume x_t, owned by slot % nparts.
    const long long lo = pending_keep_ ? 1 : std::max(0LL, t - W_ + 2);
    int n = 0;
    for (long long st = lo; st <= t; ++st) {
      const int slot = int(st % W_);
      if (slot % nparts != part) continue;
      s.slots[n++] = slot;
      if (n == s.max_cols) {
        advance_windows(s, n);
        n = 0;
      }
    }
    if (n > 0) advance_windows(s, n);
  }
  if (pending_keep_) {
    // The completing window stays open: c from the scratch, P = W_hh·h + b from the scratch h. The
    // (layer, block) rows are split over the parts.
    const int nb = pm_.nb, Hp = pm_.Hp, items = pm_.num_layers * nb;
    const int i0 = int(long(items) * part / nparts), i1 = int(long(items) * (part + 1) / nparts);
    for (int l = 0; l < pm_.num_layers; ++l) {
      const int b0 = std::max(i0 - l * nb, 0), b1 = std::min(i1 - l * nb, nb);
      if (b0 >= b1) continue;
      const float* h = hs_ + size_t(l) * Hp;
      const float* bias = pm_.layers[l].bias.data();
      float* P = slot_P(pending_slot_, l);
      gemm(pm_.layers[l], true, b0, b1, 1, &h, &bias, &P, s.pairs.data());
      const int L = pm_.lanes;
      std::memcpy(slot_c(pending_slot_, l) + b0 * L, cs_ + size_t(l) * Hp + b0 * L,
                  size_t(b1 - b0) * L * sizeof(float));
    }
  }
  if (!streaming_) {
    const int next = int((t + 1) % W_);
    if (next % nparts == part) make_fresh(next);
  }
}

void CpuBackend::reset() {
  if (pending_) finish_precompute();
  ticks_ = 0;
  scaler_.reset();
  make_fresh(0);
}

CpuBackend::TileScratch::TileScratch(const PackedModel& pm)
    : P(size_t(kMaxTileCols) * pm.num_layers * pm.gate_floats()),
      c(size_t(kMaxTileCols) * pm.num_layers * pm.Hp),
      ha(size_t(kMaxTileCols) * pm.Hp),
      hb(size_t(kMaxTileCols) * pm.Hp),
      z(pm.Op),
      pairs(pair_scratch_words(std::max(pm.I, pm.H))) {}

void CpuBackend::run_tile(const Tile& tile, TileScratch& s, BacktestOutput out, std::atomic<size_t>* done) const {
  const int nb = pm_.nb, Hp = pm_.Hp, L = pm_.num_layers, n = tile.n;
  const size_t G = pm_.gate_floats(), O = size_t(pm_.O);
  const float* in[kMaxTileCols];
  const float* add[kMaxTileCols];
  float* Pp[kMaxTileCols];
  float* hp[kMaxTileCols];
  // Zero state: P = b (W_hh·0 + b), c = 0.
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < L; ++l) {
      std::memcpy(s.P.data() + (size_t(j) * L + l) * G, pm_.layers[l].bias.data(), G * sizeof(float));
      std::memset(s.c.data() + (size_t(j) * L + l) * Hp, 0, size_t(Hp) * sizeof(float));
    }
  // Progress within the tile too: a streaming series is one tile of T steps.
  size_t unreported = 0;
  for (size_t t = 0; t < tile.steps && !out.stopped(); ++t) {
    float* hin = s.ha.data();
    float* hout = s.hb.data();
    for (int l = 0; l < L; ++l) {
      for (int j = 0; j < n; ++j) {
        Pp[j] = s.P.data() + (size_t(j) * L + l) * G;
        in[j] = l == 0 ? tile.x[j] + t * size_t(pm_.I) : hin + size_t(j) * Hp;
        add[j] = Pp[j];
        hp[j] = hout + size_t(j) * Hp;
      }
      gemm(pm_.layers[l], false, 0, nb, n, in, add, Pp, s.pairs.data());
      for (int j = 0; j < n; ++j) k_->cell(Pp[j], nullptr, s.c.data() + (size_t(j) * L + l) * Hp, hp[j], 0, nb);
      if (t + 1 < tile.steps) {  // the next step's P = W_hh·h + b
        for (int j = 0; j < n; ++j) {
          add[j] = pm_.layers[l].bias.data();
          in[j] = hp[j];
        }
        gemm(pm_.layers[l], true, 0, nb, n, in, add, Pp, s.pairs.data());
      }
      std::swap(hin, hout);
    }
    if (t < tile.emit_from) continue;
    for (int j = 0; j < n; ++j) {
      k_->head(pm_.head_w.data(), pm_.head_bias ? pm_.head_b.data() : nullptr, pm_.O, Hp, hin + size_t(j) * Hp,
               s.z.data());
      const size_t row = tile.row0[j] + (t - tile.emit_from);
      if (out.f32) std::memcpy(out.f32 + row * O, s.z.data(), O * sizeof(float));
      else
        for (size_t o = 0; o < O; ++o) out.f64[row * O + o] = s.z[o];
    }
    unreported += size_t(n);
    if (done && (unreported >= 1024 || t + 1 == tile.steps)) {
      done->fetch_add(unreported, std::memory_order_relaxed);
      unreported = 0;
    }
  }
}

void CpuBackend::tiles_part(TileJob& job, TileScratch& scratch) const {
  for (size_t k; !job.out.stopped() && (k = job.next.fetch_add(1, std::memory_order_relaxed)) < job.count;)
    run_tile(job.tile(k), scratch, job.out, job.done);
}

void CpuBackend::run_tiles(TileJob& job) {
  if (job.count == 0) return;
  if (pending_) finish_precompute();
  if (pool_.size() > 0) {
    // The cpuset's workers and its first core (this thread) all take tiles.
    const int n = pool_.size() + 1;
    job.scratch.reserve(size_t(n));
    for (int p = 0; p < n; ++p) job.scratch.emplace_back(pm_);
    std::pair<CpuBackend*, TileJob*> ctx{this, &job};
    pool_.start(&tiles_job, &ctx);
    tiles_part(job, job.scratch.back());
    pool_.wait();
  } else {
    // No cpuset: a thread per core this process may use, for this call.
    const size_t cores = std::max<size_t>(1, util::allowed_cores().size());
    const int n = int(std::min(job.count, cores));
    job.scratch.reserve(size_t(n));
    for (int p = 0; p < n; ++p) job.scratch.emplace_back(pm_);
    util::ThreadGroup threads;  // joined however this ends (a thread the system refuses throws)
    for (int p = 1; p < n; ++p)
      threads.start("cpu backend throughput thread " + std::to_string(p) + " of " + std::to_string(n - 1),
                    [this, &job, p] { tiles_part(job, job.scratch[size_t(p)]); });
    tiles_part(job, job.scratch[0]);
    threads.join();
  }
}

void CpuBackend::run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) {
  const size_t I = size_t(pm_.I), O = size_t(pm_.O);
  if (window < 1) throw Error("cpu backend: run_batch needs a window length >= 1");
  if (x.size() != batch * window * I)
    throw Error("cpu backend: run_batch input holds " + std::to_string(x.size()) + " floats, expected " +
                std::to_string(batch) + " x " + std::to_string(window) + " x " + std::to_string(I));
  if (out.size() < batch * O)
    throw Error("cpu backend: run_batch output holds " + std::to_string(out.size()) + " floats, expected " +
                std::to_string(batch * O));
  check_batch_input(x, window);
  // A fixed scaler applies to every element (a rolling one is refused: batch windows have no stream).
  AlignedArray<float> scaled;
  if (scaler_.active()) {
    scaled = AlignedArray<float>(x.size());
    scaler_.scale_batch(x, scaled.data());
  }
  const float* xs = scaler_.active() ? scaled.data() : x.data();
  TileJob job;
  job.count = (batch + kMaxTileCols - 1) / kMaxTileCols;
  job.out.f32 = out.data();
  job.tile = [&](size_t k) {
    Tile t;
    t.n = int(std::min<size_t>(kMaxTileCols, batch - k * kMaxTileCols));
    t.steps = window;
    t.emit_from = window - 1;
    for (int j = 0; j < t.n; ++j) {
      t.row0[j] = k * kMaxTileCols + j;
      t.x[j] = xs + t.row0[j] * window * I;
    }
    return t;
  };
  run_tiles(job);
}

void CpuBackend::backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                          std::atomic<size_t>* done) {
  const size_t I = size_t(pm_.I), T = ticks, G = kMaxTileCols;
  if (series == 0 || ticks == 0) return;
  // Scaled as step() would scale each series: a fixed scaler elementwise, a rolling one restarting
  // with every series (its statistics for tick t come from ticks before t only).
  AlignedArray<float> scaled;
  if (scaler_.active()) {
    scaled = AlignedArray<float>(x.size());
    scaler_.scale_series(x, series, T, scaled.data());
  }
  const float* xs = scaler_.active() ? scaled.data() : x.data();
  TileJob job;
  job.out = out;
  job.done = done;
  // Tile k of series from tick 0, G series in lockstep, every step emitted.
  auto series_tile = [&](size_t k, size_t steps) {
    Tile t;
    t.n = int(std::min(G, series - k * G));
    t.steps = steps;
    for (int j = 0; j < t.n; ++j) {
      t.x[j] = xs + (k * G + j) * T * I;
      t.row0[j] = (k * G + j) * T;
    }
    return t;
  };
  if (streaming_) {
    // One sequence per series, the whole series.
    job.count = (series + G - 1) / G;
    job.tile = [&](size_t k) { return series_tile(k, T); };
  } else {
    // Rule 1: ticks t < W-1 are the partial windows that start at tick 0, i.e. one sequence per series
    // over its first min(W-1, T) ticks with every step emitted (the head tiles, G series each); every
    // later tick is one full window of W steps ending there (G consecutive windows per tile).
    const size_t W = size_t(W_), head = std::min(W - 1, T), full = T > head ? T - head : 0;
    const size_t head_tiles = head > 0 ? (series + G - 1) / G : 0, per_series = (full + G - 1) / G;
    job.count = head_tiles + series * per_series;
    job.tile = [&, W, head, full, head_tiles, per_series](size_t k) {
      if (k < head_tiles) return series_tile(k, head);
      k -= head_tiles;
      Tile t;
      const size_t s = k / per_series, first = (k % per_series) * G;  // window index within the series
      t.n = int(std::min(G, full - first));
      t.steps = W;
      t.emit_from = W - 1;
      for (int j = 0; j < t.n; ++j) {
        const size_t end = head + first + j;  // the tick the window ends at
        t.x[j] = xs + (s * T + end + 1 - W) * I;
        t.row0[j] = s * T + end;
      }
      return t;
    };
  }
  // The head tiles (longest, up to W-1 steps) come first, so no thread is left with one at the end.
  run_tiles(job);
  reset();
}

std::map<std::string, double> CpuBackend::counters() const {
  std::map<std::string, double> m;
  m["precompute_parts"] = nparts_;
  m["precompute_workers"] = pool_.size();
  m["precompute_ticks"] = double(precompute_count_);
  if (precompute_count_ > 0) {
    // busy: the slowest part's own time; wait: what finish_precompute() cost the caller.
    m["precompute_busy_us_mean"] = precompute_busy_us_sum_ / double(precompute_count_);
    m["precompute_wait_us_mean"] = precompute_wait_us_sum_ / double(precompute_count_);
  }
  m["critical_weight_kib"] = double(pm_.critical_weight_bytes()) / 1024.0;
  return m;
}

std::map<std::string, std::string> CpuBackend::facts() const {
  std::map<std::string, std::string> f;
  f["cpu_isa"] = k_->isa;
  f["cpu_lanes"] = std::to_string(k_->lanes);
  f["cpu_weights"] = pm_.int8 ? "int8 (per-row scales; precompute on the dequantized fp32)" : pm_.bf16 ? "bf16" : "fp32";
  f["cpu_options"] = options_text_;
  f["cpu_activations"] = pm_.int8 ? (int8_act_ ? "16-bit per tick (hi/lo bytes, 2x vpdpbusd)" : "int8 per tick (vpdpbusd)")
                         : pm_.bf16 && k_->bf16_dot ? "bf16 (vdpbf16ps operands)"
                                                    : "fp32";
  if (pm_.int8) f["cpu_int8"] = int8_slow_.empty() ? "AVX512_VNNI (vpdpbusd)" : "slow: " + int8_slow_;
  f["cpu_critical_core"] = critical_core_ >= 0 ? std::to_string(critical_core_) : "unpinned";
  std::string pre;
  for (size_t i = 1; i < options().cpuset.size(); ++i) pre += (pre.empty() ? "" : ",") + std::to_string(options().cpuset[i]);
  f["cpu_precompute_cores"] = pre.empty() ? "inline (critical thread)" : pre;
  f["cpu_prefetch_bytes"] = std::to_string(prefetch_);
  f["cpu_rewarm"] = rewarm_ && pool_.size() > 0 ? "on" : "off";
  f["cpu_critical_weights"] = std::to_string(crit_bytes_) + " B in one private block with the step's scratch" +
                              (crit_huge_ ? ", madvise'd onto a transparent huge page" : ", 4 KB pages (HOTPATH_CPU_HUGEPAGES=0)");
  return f;
}

}  // namespace

CpuFeatures cpu_features() {
  if (features_override()) return *features_override();
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  return f;
}

void override_cpu_features(std::optional<CpuFeatures> features) { features_override() = features; }

std::string int8_slow_note(const CpuFeatures& features, const CpuOptions& options) {
  return choose_isa(Precision::int8, features, options).int8_slow;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options) {
  const Precision p = options.precision.value_or(Precision::fp32);
  if (p != Precision::fp32 && p != Precision::bf16 && p != Precision::int8)
    throw UnsupportedError(std::string("the cpu backend does not support precision ") + precision_name(p) +
                           " (use fp32, bf16 or int8)");
  model.validate();
  // the environment is read only when no options are given (value_or would read it always)
  cpu::IsaChoice isa = cpu::choose_isa(p, cpu::cpu_features(), options.cpu ? *options.cpu : cpu_options_from_env());
  if (!isa.int8_slow.empty()) util::warn_once(isa.int8_slow);
  return std::make_unique<cpu::CpuBackend>(model, options, p, std::move(isa));
}

}  // namespace hotpath
