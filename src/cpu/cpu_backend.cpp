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
#include <string>
#include <unistd.h>

#include "cpu/cpu_backend_impl.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"
#include "util/warn.hpp"

namespace hotpath {
namespace cpu {
namespace {

// The cpuset's cores by role: the first `parts` run the critical step (the first is the caller's, the
// others the helpers'), the rest the precompute. Without a cpuset the helpers are unpinned (-1) and the
// precompute runs inline.
std::vector<int> helper_cores(const std::vector<int>& cpuset, int parts) {
  if (cpuset.empty()) return std::vector<int>(size_t(parts - 1), -1);
  return {cpuset.begin() + 1, cpuset.begin() + parts};
}
// Where the threads start: the staging cores of a swap's new backend (pinned there only with a cpuset).
const std::vector<int>& staging(const BackendOptions& o) {
  static const std::vector<int> none;
  return o.cpuset.empty() ? none : o.staging_cores;
}
// CpuOptions::pre_cores `asked` (0: auto) of them; without a cpuset, that many unpinned workers.
std::vector<int> precompute_cores(const std::vector<int>& cpuset, int parts, int asked) {
  if (cpuset.empty()) return std::vector<int>(size_t(asked), -1);
  const size_t left = cpuset.size() > size_t(parts) ? cpuset.size() - size_t(parts) : 0;
  if (asked > 0 && size_t(asked) > left)
    throw Error("pre_cores=" + std::to_string(asked) + ": the cpuset has " + std::to_string(left) +
                (left == 1 ? " core" : " cores") + " after the critical step's " + std::to_string(parts));
  const size_t n = asked > 0 ? size_t(asked) : left;
  return std::vector<int>(cpuset.begin() + parts, cpuset.begin() + parts + long(n));
}

}  // namespace

size_t core_l2_bytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? size_t(bytes) : 0;
}

int choose_critical_cores(int asked, size_t critical_bytes, size_t l2_bytes, size_t cpuset_cores, int blocks,
                          size_t usable_cores, bool precompute_beside) {
  if (asked > 0) {
    const std::string n = std::to_string(asked);
    if (asked > blocks)
      throw Error("crit_cores=" + n + ": the model's critical step has " + std::to_string(blocks) +
                  (blocks == 1 ? " block" : " blocks") + " of hidden units to split over cores");
    if (cpuset_cores > 0 && size_t(asked) > cpuset_cores)
      throw Error("crit_cores=" + n + " needs a --cpuset of at least " + n + " cores (its first " + n +
                  " run the critical step); it has " + std::to_string(cpuset_cores));
    if (cpuset_cores == 0 && size_t(asked) > usable_cores)
      throw Error("crit_cores=" + n + ": this process may run on " + std::to_string(usable_cores) +
                  " cores, and each part of the critical step spins on one of its own");
    return asked;
  }
  // auto: split only where one core's L2 cannot keep the weights (half of it: the scratch, the state
  // and the precompute's traffic share it), and only with a core left over for the precompute (where it
  // runs beside).
  const size_t share = l2_bytes / 2, kept = precompute_beside ? 1 : 0;
  if (cpuset_cores < 2 + kept || share == 0 || critical_bytes <= share) return 1;
  const size_t spread = (critical_bytes + share - 1) / share;
  return int(std::min<size_t>({spread, size_t(kMaxCriticalCores), cpuset_cores - kept, size_t(std::max(blocks, 1))}));
}

CpuBackend::Scratch::Scratch(int cols, int h_cols, int Hp, int kmax)
    : max_cols(cols),
      h_a(size_t(h_cols) * Hp),
      h_b(size_t(h_cols) * Hp),
      pairs(gemm_scratch_words(kmax)),
      u0(size_t(Hp) * 4),
      slots(cols),
      in(cols),
      add(cols),
      P(cols),
      c(cols),
      h(cols) {}

CpuBackend::CpuBackend(const Model& model, const BackendOptions& options, Precision precision, IsaChoice isa,
                       const WindowFeedMaker& make_feed, std::string name)
    : Backend(model.config, options),
      name_(std::move(name)),
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
      // fed: one slot, the feed's state for the tick copied in (the feed keeps the open windows)
      nslots_(options.mode == Mode::window && !make_feed ? std::max(W_, 1) : 1),
      scaler_(model, options.scaler),
      crit_parts_(choose_critical_cores(isa.options.crit_cores, pm_.critical_weight_bytes(), core_l2_bytes(),
                                        options.cpuset.size(), pm_.nb, util::allowed_cores().size(),
                                        /*precompute_beside=*/!make_feed)),
      crit_pool_(helper_cores(options.cpuset, crit_parts_), "critical-step helper", /*doze=*/false,
                 staging(options)),
      pool_(make_feed ? std::vector<int>{} : precompute_cores(options.cpuset, crit_parts_, isa.options.pre_cores),
            "precompute worker", /*doze=*/true, staging(options)) {
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
  const size_t l2 = core_l2_bytes();  // 0: unknown, and then only AMX asks for rows
  rows_split_ = !streaming_ && nparts_ > 1 &&
                (co.pre_split == CpuPrecomputeSplit::rows ||
                 (co.pre_split == CpuPrecomputeSplit::automatic &&
                  (k_->amx || (l2 > 0 && pm_.precompute_weight_bytes(k_->gemm_i8 != nullptr) > l2 / 2))));
  // Windows a part advances at most in one call: its share of them (window split), or all (row split).
  const int cols = rows_split_ ? nslots_ : int((static_cast<long long>(nslots_) + nparts_ - 1) / nparts_ + 1);
  const int h_cols = rows_split_ ? 0 : cols;
  // The window state (P and c per open window, two h columns per window for the precompute) grows
  // with W: refuse a window whose state no machine should be asked for before allocating any of it.
  if (!streaming_)
    check_window_state("cpu", W_,
                       4.0 * (double(slot_floats_) * nslots_ + (rows_split_ ? 2.0 * nslots_ * Hp : 0.0) +
                              double(nparts_) * h_cols * 2.0 * Hp));
  // The open windows' state: the critical step reads one slot a tick (huge pages: one dTLB entry).
  slots_ = AlignedArray<float>(slot_floats_ * nslots_, use_huge);
  u0_ = AlignedArray<float>(pm_.gate_floats());
  const int kmax = std::max(pm_.I, pm_.H);
  build_critical_arena(use_huge, kmax);
  scratch_.reserve(nparts_);
  for (int p = 0; p < nparts_; ++p) scratch_.emplace_back(cols, h_cols, Hp, kmax);
  if (rows_split_) plan_row_groups(co.pre_row_cores, l2);
  for (int k = 0; k <= crit_parts_; ++k) crit_block0_.push_back(int(long(pm_.nb) * k / crit_parts_));
  for (int k = 1; k < crit_parts_; ++k) crit_part_scratch_.emplace_back(activation_scratch_words(kmax));
  crit_barrier_ = std::make_unique<PartBarrier>(crit_parts_);
  // The feed first: threads it starts (a GPU's heartbeat) take the caller's cores, not the critical one.
  if (make_feed) {  // make_cpu_backend_fed refused batch mode
    CriticalStateLayout layout;
    layout.layers = pm_.num_layers;
    layout.input = pm_.I;
    layout.hidden = pm_.H;
    layout.lanes = pm_.lanes;
    layout.blocks = pm_.nb;
    layout.padded = pm_.Hp;
    layout.gate_floats = pm_.gate_floats();
    layout.layer_floats = layer_floats_;
    feed_ = make_feed(layout);
    if (!feed_) throw Error(name_ + " backend: no window state feed was made");
    feed_timeout_ = std::chrono::nanoseconds(static_cast<long long>(options.gpu.timeout_us * 1e3));
  }
  if (!options.cpuset.empty()) {
    for (size_t i = 0; i < options.cpuset.size(); ++i)
      for (size_t j = i + 1; j < options.cpuset.size(); ++j)
        if (options.cpuset[i] == options.cpuset[j])
          throw Error("cpu backend: core " + std::to_string(options.cpuset[i]) + " appears twice in --cpuset");
    pin_ = true;
    critical_core_ = options.cpuset[0];
    saved_affinity_ = util::allowed_cores();
    if (staging(options).empty()) {
      pin_caller();
    } else {
      // A swap's new backend: its maker (the swap worker) steps it on the staging cores; the thread that
      // steps it once it serves is pinned to the critical core at its first tick (a new calling thread).
      util::pin_thread(pthread_self(), options.staging_cores, "cpu backend (staged for a swap)");
      pinned_thread_ = pthread_self();
    }
  }
  make_fresh(0);
}

// The row split's groups: `row_cores` parts a group (0: as few as keep a part's share of the weights within
// half of `l2`; all of them where l2 is unknown), the groups' sizes within one of each other; the slots
// shared out in proportion to them; each group's blocks shared out among its parts.
void CpuBackend::plan_row_groups(int row_cores, size_t l2) {
  int R = row_cores;
  if (R == 0) {
    const size_t share = l2 / 2, bytes = pm_.precompute_weight_bytes(k_->gemm_i8 != nullptr);
    R = share == 0 ? nparts_ : int((bytes + share - 1) / share);
  }
  R = std::clamp(R, 1, nparts_);
  const int groups = nparts_ / R;
  for (int g = 0; g < groups; ++g) {
    const int first = int(long(nparts_) * g / groups), size = int(long(nparts_) * (g + 1) / groups) - first;
    pre_barriers_.push_back(std::make_unique<PartBarrier>(size));
    for (int r = 0; r < size; ++r) {
      pre_group_.push_back(g);
      pre_rank_.push_back(r);
      pre_block0_.push_back(int(long(pm_.nb) * r / size));
      pre_block1_.push_back(int(long(pm_.nb) * (r + 1) / size));
    }
  }
  for (int slot = 0; slot < nslots_; ++slot) pre_slot_group_.push_back(pre_group_[size_t(long(slot) * nparts_ / nslots_)]);
  pre_h_ = AlignedArray<float>(2 * size_t(nslots_) * size_t(pm_.Hp));
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
  if (pending_) {
    crit_pool_.wait();
    pool_.wait();
  }
  if (!saved_affinity_.empty() && pthread_equal(pinned_thread_, pthread_self()))
    util::set_thread_cores(pthread_self(), saved_affinity_);
}

void CpuBackend::settle_threads() {
  crit_pool_.settle();
  pool_.settle();
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
  else if (pm_.int8 && k_->gemm_i8)
    k_->gemm_i8((hh ? layer.whh8 : layer.wih8).data(), (hh ? layer.whh8_scale : layer.wih8_scale).data(), kdim, b0, b1,
                ncols, X, add, out, pairs);
  else
    k_->gemm_f32((hh ? layer.whh32 : layer.wih32).data(), kdim, b0, b1, ncols, X, add, out, pairs);
}

void CpuBackend::step(std::span<const float> x, std::span<float> out) {
  std::string why;
  if (!step_impl(x, out, &why)) throw Error(why);
}

bool CpuBackend::try_step(std::span<const float> x, std::span<float> out, std::string* why) {
  return step_impl(x, out, why);
}

bool CpuBackend::step_impl(std::span<const float> x, std::span<float> out, std::string* why) {
  const long long t = ticks_;
  check_tick_input(x, t);
  if (out.size() < size_t(pm_.O))
    throw Error(name_ + " backend: output span holds " + std::to_string(out.size()) + " floats, the model gives " +
                std::to_string(pm_.O));
  if (options().mode == Mode::batch) throw Error(name_ + " backend: created for the batch workload; use run_batch");
  if (pending_) {
    if (!feed_) {
      finish_precompute();
    } else if (!finish_fed(/*in_step=*/true, why)) {
      // No state for this tick: nothing is answered from stale data. The tick still counts as consumed (the
      // feed gets its input once its state for the tick before has come; the next tick waits again).
      scaler_.scale(x, xbuf_);
      feed_->consume({xbuf_, size_t(pm_.I)}, t);
      ticks_ = t + 1;
      return false;
    }
  }
  if (pin_ && !pthread_equal(pinned_thread_, pthread_self())) pin_caller();  // first tick of a new thread only

  scaler_.scale(x, xbuf_);  // the copy of x, scaled on the way (a plain copy without a scaler)
  const bool feed_first = feed_ && feed_->input_before_step();
  if (feed_first) feed_->consume({xbuf_, size_t(pm_.I)}, t);  // the producer starts before the step
  const int slot = completing_slot(t);
  crit_slot_ = slot;
  if (crit_parts_ > 1) crit_pool_.start(&critical_job, this);  // publishes x, the slot and the epoch
  critical_layers(0);
  const int L = pm_.num_layers;
  if (crit_parts_ > 1) {
    crit_barrier_->wait_others(0, crit_epoch_ + L);  // every part's h of the last layer
    crit_epoch_ += L;
  }
  const float* in = hs_ + size_t(L - 1) * pm_.Hp;
  if (crit_head8_)
    k_->head_i8[int8_act_](crit_head8_, crit_head8_scale_, crit_head8_corr_, pm_.head_bias ? pm_.head_b.data() : nullptr,
                           pm_.O, pm_.H, in, z_, reinterpret_cast<uint8_t*>(crit_pairs_));
  else
    k_->head(crit_head_, pm_.head_bias ? pm_.head_b.data() : nullptr, pm_.O, pm_.Hp, in, z_);
  for (int o = 0; o < pm_.O; ++o) out[o] = z_[o];

  // Off the critical path from here.
  pending_tick_ = t;
  pending_keep_ = streaming_ || t < W_ - 1;
  pending_slot_ = slot;
  pending_ = true;
  ticks_ = t + 1;
  if (feed_) {
    if (!feed_first) feed_->consume({xbuf_, size_t(pm_.I)}, t);  // x_t, scaled, to the producer of the open windows
  } else if (pool_.size() > 0) {
    pool_.start(&precompute_job, this);
  }
  return true;
}

void CpuBackend::critical_layers(int part) {
  const uint64_t epoch = crit_epoch_;  // read before the first arrive: the caller moves it on after the last
  const int slot = crit_slot_;
  const int b0 = crit_block0_[size_t(part)], n = crit_block0_[size_t(part) + 1] - b0;
  const int Hp = pm_.Hp, lanes = pm_.lanes;
  const size_t g0 = size_t(b0) * 4 * lanes, h0 = size_t(b0) * lanes;  // the part's gate vectors, its units
  uint32_t* scratch = part == 0 ? crit_pairs_ : crit_part_scratch_[size_t(part) - 1].data();
  const float* in = xbuf_;
  for (int l = 0; l < pm_.num_layers; ++l) {
    if (l > 0 && crit_parts_ > 1) crit_barrier_->wait_others(part, epoch + uint64_t(l));  // h of layer l - 1
    const PackedLayer& layer = pm_.layers[l];
    float* u = (l == 0 && !streaming_ && W_ > 1) ? u0_.data() + g0 : nullptr;
    float* h = hs_ + size_t(l) * Hp;
    float* c = cs_ + size_t(l) * Hp;
    const CriticalLayer& cl = crit_[l];
    const float* P = slot_P(slot, l) + g0;
    const float* c_in = slot_c(slot, l) + h0;
    // Each block's weights are one contiguous stream (kernels.hpp): the part's start at block b0. (A part
    // with no blocks, n == 0, only keeps the barrier's count.)
    if (pm_.int8) {  // u0 comes from the precompute's own fp32 product (advance_windows)
      const auto* w = static_cast<const uint32_t*>(cl.w) + b0 * int8_block_words(layer.in, lanes);
      k_->crit_i8[int8_act_](reinterpret_cast<const int8_t*>(w), cl.scale + g0, cl.corr + g0, layer.in, n, in, P, c_in,
                             h + h0, c + h0, reinterpret_cast<uint8_t*>(scratch), prefetch_);
    } else if (pm_.bf16) {
      k_->crit_bf16(static_cast<const uint32_t*>(cl.w) + b0 * bf16_block_words(layer.in, lanes), layer.in, n, in, P,
                    c_in, h + h0, c + h0, u, scratch, prefetch_);
    } else {
      k_->crit_f32(static_cast<const float*>(cl.w) + b0 * f32_block_floats(layer.in, lanes), layer.in, n, in, P, c_in,
                   h + h0, c + h0, u, scratch, prefetch_);
    }
    if (crit_parts_ > 1) crit_barrier_->arrive(part, epoch + uint64_t(l) + 1);
    in = h;
  }
}

// Part `part`'s share of the feed's state (fed_state_) into slot 0: for each layer, its blocks' P and c, the
// lines its critical step reads.
void CpuBackend::copy_fed_part(int part) {
  const size_t lanes = size_t(pm_.lanes), gate = pm_.gate_floats();
  const size_t b0 = size_t(crit_block0_[size_t(part)]), nb = size_t(crit_block0_[size_t(part) + 1]) - b0;
  for (int l = 0; l < pm_.num_layers; ++l) {
    const float* src = fed_state_ + size_t(l) * layer_floats_;
    float* dst = slot_P(0, l);
    std::memcpy(dst + b0 * 4 * lanes, src + b0 * 4 * lanes, nb * 4 * lanes * sizeof(float));
    std::memcpy(dst + gate + b0 * lanes, src + gate + b0 * lanes, nb * lanes * sizeof(float));
  }
}

// The feed's state for the next tick, copied into slot 0 (the critical step then reads its own cache-hot copy,
// not lines the producer just wrote): over the critical step's cores, each part its own share, so the copy
// takes a part's time and each part's lines are in its own core's cache when the step reads them.
bool CpuBackend::finish_fed(bool in_step, std::string* why) {
  if (!pending_) return true;
  const int64_t t0 = util::steady_ns();
  if (crit_parts_ > 1) crit_pool_.wait();
  scaler_.prepare();
  bool waited = false;
  // a tick whose wait already timed out (try_finish_precompute) gets one more look, not a second timeout
  const bool again = fed_failed_tick_ == ticks_;
  const float* state = feed_->wait(ticks_, again ? std::chrono::nanoseconds(0) : feed_timeout_, &waited, why);
  if (!state) {
    if (!again) ++fed_timeouts_;
    fed_failed_tick_ = ticks_;
    return false;
  }
  if (in_step && waited) ++fed_late_;
  fed_state_ = state;
  if (crit_parts_ > 1) crit_pool_.start(&fed_copy_job, this);
  copy_fed_part(0);
  if (crit_parts_ > 1) crit_pool_.wait();
  fed_state_ = nullptr;
  pending_ = false;
  ++precompute_count_;
  precompute_wait_us_sum_ += (util::steady_ns() - t0) * 1e-3;
  return true;
}

bool CpuBackend::try_finish_precompute(std::string* why) {
  if (!feed_) {
    finish_precompute();
    return true;
  }
  return finish_fed(/*in_step=*/false, why);
}

void CpuBackend::finish_precompute() {
  if (!pending_) return;
  if (feed_) {
    std::string why;
    if (!finish_fed(/*in_step=*/false, &why)) throw Error(why);
    return;
  }
  const int64_t t0 = util::steady_ns();
  if (crit_parts_ > 1) crit_pool_.wait();  // the helpers left the tick's last barrier long ago
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
    busy = util::steady_ns() - t0;
  }
  pending_ = false;
  if (rows_split_) pre_epoch_ += uint64_t(pm_.num_layers);
  ++precompute_count_;
  precompute_busy_us_sum_ += busy * 1e-3;
  // Pull the next completing window's state into this core's cache now, not during the next step().
  const int slot = completing_slot(ticks_);
  float s = 0;
  const float* p = slot_P(slot, 0);
  for (size_t i = 0; i < slot_floats_; i += kCacheLine / sizeof(float)) s += p[i];
  sink_ = s;
  precompute_wait_us_sum_ += (util::steady_ns() - t0) * 1e-3;
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

// W_ih,0·x_t for the open windows, blocks [b0, b1) (each part always asks for the same blocks): the
// critical step's u0, but for int8, whose critical product rounds x_t: there the open windows take the
// exact fp32 one, one product a part and tick, shared by the part's windows.
const float* CpuBackend::open_windows_u0(Scratch& s, int b0, int b1) {
  if (!pm_.int8) return u0_.data();
  if (s.u0_tick != pending_tick_) {
    const float* x = xbuf_;
    const float* none = nullptr;
    float* out = s.u0.data();
    k_->gemm_f32(pm_.layers[0].wih32.data(), pm_.layers[0].in, b0, b1, 1, &x, &none, &out, s.pairs.data());
    s.u0_tick = pending_tick_;
  }
  return s.u0.data();
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
      const float* u0 = open_windows_u0(s, 0, nb);
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

// The open windows of this part's group (other than a kept completing one) consume x_t through blocks
// [b0, b1) of this part: the products take all the group's windows as columns, and the next layer waits
// until every part of the group has its cells of this one in pre_h_.
void CpuBackend::advance_windows_rows(Scratch& s, int part) {
  const long long t = pending_tick_;
  const long long lo = pending_keep_ ? 1 : std::max(0LL, t - W_ + 2);
  const int group = pre_group_[size_t(part)], rank = pre_rank_[size_t(part)];
  const int b0 = pre_block0_[size_t(part)], b1 = pre_block1_[size_t(part)];
  const int Hp = pm_.Hp, L = pm_.num_layers;
  PartBarrier& barrier = *pre_barriers_[size_t(group)];
  const uint64_t epoch = pre_epoch_;  // moved on by the caller only after every part is done
  auto h_of = [&](int l, int slot) { return pre_h_.data() + (size_t(l & 1) * nslots_ + size_t(slot)) * Hp; };
  int n = 0;
  for (long long st = lo; st <= t; ++st) {
    const int slot = int(st % W_);
    if (pre_slot_group_[size_t(slot)] == group) s.slots[n++] = slot;
  }
  int64_t waited = 0;
  for (int l = 0; l < L; ++l) {
    const PackedLayer& layer = pm_.layers[l];
    for (int j = 0; j < n; ++j) {
      s.P[j] = slot_P(s.slots[j], l);
      s.c[j] = slot_c(s.slots[j], l);
      s.h[j] = h_of(l, s.slots[j]);
    }
    if (b0 < b1 && n > 0) {
      if (l == 0) {
        const float* u0 = open_windows_u0(s, b0, b1);
        for (int j = 0; j < n; ++j) k_->cell(s.P[j], u0, s.c[j], s.h[j], b0, b1);
      } else {
        for (int j = 0; j < n; ++j) {
          s.in[j] = h_of(l - 1, s.slots[j]);
          s.add[j] = s.P[j];
        }
        gemm(layer, false, b0, b1, n, s.in.data(), s.add.data(), s.P.data(), s.pairs.data());
        for (int j = 0; j < n; ++j) k_->cell(s.P[j], nullptr, s.c[j], s.h[j], b0, b1);
      }
    }
    barrier.arrive(rank, epoch + uint64_t(l) + 1);
    // every part's h of layer l; a wait past ~1,000 polls (tens of us) yields: the workers may be unpinned
    const int64_t w0 = util::steady_ns();
    barrier.wait_others(rank, epoch + uint64_t(l) + 1, /*yield_after=*/1000);
    waited += util::steady_ns() - w0;
    if (b0 < b1 && n > 0) {
      for (int j = 0; j < n; ++j) {
        s.in[j] = s.h[j];
        s.add[j] = layer.bias.data();
      }
      gemm(layer, true, b0, b1, n, s.in.data(), s.add.data(), s.P.data(), s.pairs.data());
    }
  }
  std::atomic_ref<int64_t> total(s.wait_ns);
  total.store(total.load(std::memory_order_relaxed) + waited, std::memory_order_relaxed);
}

void CpuBackend::precompute_part(int part, int nparts) {
  Scratch& s = scratch_[part];
  const long long t = pending_tick_;
  if (rows_split_) {
    advance_windows_rows(s, part);
  } else if (!streaming_) {
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
  fed_failed_tick_ = -1;
  if (feed_) {
    feed_->reset();  // a late state is dropped with the windows, not waited for
    pending_ = false;
  } else if (pending_) {
    finish_precompute();
  }
  ticks_ = 0;
  for (Scratch& s : scratch_) s.u0_tick = -1;  // tick numbers start again: no kept product is this run's
  scaler_.reset();
  make_fresh(0);
}

std::map<std::string, double> CpuBackend::counters() const {
  std::map<std::string, double> m;
  m["critical_parts"] = crit_parts_;
  m["precompute_parts"] = nparts_;
  m["precompute_workers"] = pool_.size();
  m["precompute_ticks"] = double(precompute_count_);
  if (precompute_count_ > 0) {
    // busy: the slowest part's own time; wait: what finish_precompute() cost the caller.
    m["precompute_busy_us_mean"] = precompute_busy_us_sum_ / double(precompute_count_);
    m["precompute_wait_us_mean"] = precompute_wait_us_sum_ / double(precompute_count_);
    if (rows_split_) {
      // the row split's barriers: what a part waited for the rest of its group, a tick, mean over the parts
      const double waited = double(barrier_wait_ns() - barrier_wait_base_ns_);
      m["precompute_barrier_wait_us_mean"] = waited * 1e-3 / double(nparts_) / double(precompute_count_);
    }
  }
  if (rows_split_) m["precompute_groups"] = double(pre_barriers_.size());
  m["critical_weight_kib"] = double(pm_.critical_weight_bytes()) / 1024.0;
  if (feed_) {
    // late: a step that had to wait for its state (the producer behind the ticks); timeouts: waits given up
    m["fed_late_ticks"] = double(fed_late_);
    m["fed_timeouts"] = double(fed_timeouts_);
    for (const auto& [k, v] : feed_->counters()) m[k] = v;
  }
  return m;
}

std::string CpuBackend::row_split_text() const {
  const size_t groups = pre_barriers_.size();
  const int most = *std::max_element(pre_rank_.begin(), pre_rank_.end()) + 1;
  const int least = int(size_t(nparts_) / groups);
  const std::string cores = least == most ? std::to_string(most) : std::to_string(least) + "-" + std::to_string(most);
  return "rows (" + std::to_string(groups) + (groups == 1 ? " group" : " groups") + " of windows, " + cores +
         (most == 1 ? " core" : " cores") + " a group, each core its blocks of units; a barrier a layer within a group)";
}

std::map<std::string, std::string> CpuBackend::facts() const {
  std::map<std::string, std::string> f;
  f["cpu_isa"] = k_->isa;
  f["cpu_lanes"] = std::to_string(k_->lanes);
  f["cpu_weights"] = pm_.int8 ? (k_->gemm_i8 ? "int8 (per-row scales; the precompute's products in int8 on AMX)"
                                              : "int8 (per-row scales; precompute on the dequantized fp32)")
                    : pm_.bf16 ? "bf16" : "fp32";
  f["cpu_options"] = options_text_;
  f["cpu_activations"] = pm_.int8 ? (int8_act_ ? "16-bit per tick (hi/lo bytes, 2x vpdpbusd)" : "int8 per tick (vpdpbusd)")
                         : pm_.bf16 && k_->bf16_dot ? "bf16 (vdpbf16ps operands)"
                                                    : "fp32";
  if (pm_.int8) f["cpu_int8"] = int8_slow_.empty() ? "AVX512_VNNI (vpdpbusd)" : "slow: " + int8_slow_;
  f["cpu_critical_core"] = critical_core_ >= 0 ? std::to_string(critical_core_) : "unpinned";
  std::string crit;
  for (int k = 0; k < crit_parts_; ++k)
    crit += (k ? "," : "") + (k < int(options().cpuset.size()) ? std::to_string(options().cpuset[size_t(k)]) : std::string("unpinned"));
  f["cpu_critical_cores"] = crit + " (the critical step in " + std::to_string(crit_parts_) +
                            (crit_parts_ == 1 ? " part" : " parts, one barrier a layer") + ")";
  std::string pre;
  for (size_t i = 0; i < size_t(pool_.size()); ++i)
    pre += (pre.empty() ? "" : ",") + (options().cpuset.empty() ? std::string("unpinned")
                                                                : std::to_string(options().cpuset[size_t(crit_parts_) + i]));
  f["cpu_precompute_cores"] = feed_ ? "none (the window state comes from " + feed_->describe() + ")"
                              : pre.empty() ? "inline (critical thread)" : pre;
  f["cpu_precompute_split"] = streaming_ ? "none (streaming: the completing window's rows over the cores)"
                              : rows_split_ ? row_split_text()
                                            : nparts_ > 1 ? "windows (each core its own windows)" : "none (one core)";
  f["cpu_gemm"] = !k_->amx                 ? "vector"
                  : pm_.int8 && k_->gemm_i8 ? "amx (int8 tiles, 16 columns a tile, 16-bit activations as two bytes)"
                  : pm_.bf16                ? "amx (bf16 tiles, 16 columns a tile)"
                                            : "vector";
  f["cpu_prefetch_bytes"] = std::to_string(prefetch_);
  f["cpu_rewarm"] = rewarm_ && pool_.size() > 0 ? "on" : "off";
  f["cpu_critical_weights"] = std::to_string(crit_bytes_) + " B in one private block with the step's scratch" +
                              (crit_huge_ ? ", madvise'd onto a transparent huge page" : ", 4 KB pages (HOTPATH_CPU_HUGEPAGES=0)");
  return f;
}

}  // namespace cpu

namespace {
// Both factories: the precision checked, the kernels chosen for this CPU, the backend (`name`, fed by
// make_feed where given).
std::unique_ptr<Backend> make_cpu(const Model& model, const BackendOptions& options, const std::string& name,
                                  const cpu::WindowFeedMaker& make_feed) {
  const Precision p = options.precision.value_or(Precision::fp32);
  if (p != Precision::fp32 && p != Precision::bf16 && p != Precision::int8)
    throw UnsupportedError("the " + name + " backend does not support precision " + precision_name(p) +
                           " (use fp32, bf16 or int8)");
  model.validate();
  cpu::IsaChoice isa = cpu::choose_isa(p, cpu::cpu_features(), cpu_options_or_env(options.cpu));
  if (!isa.table) throw UnsupportedError(isa.unbuilt);
  if (!isa.int8_slow.empty()) util::warn_once(isa.int8_slow);
  return std::make_unique<cpu::CpuBackend>(model, options, p, std::move(isa), make_feed, name);
}
}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options) {
  return make_cpu(model, options, "cpu", {});
}

std::unique_ptr<Backend> make_cpu_backend_fed(const Model& model, const BackendOptions& options, const std::string& name,
                                              const cpu::WindowFeedMaker& make_feed) {
  if (options.mode == Mode::batch)
    throw UnsupportedError("the " + name + " backend serves ticks (window, streaming); batch runs on cpu or cuda");
  if (!make_feed) throw Error("make_cpu_backend_fed: no feed maker");
  return make_cpu(model, options, name, make_feed);
}

}  // namespace hotpath
