// The latency benchmarks' float64 check (docs/model.md, "The error measure and its bounds"), off the
// timed path: the timed loop publishes every `check_every`-th output into CheckedOutputs, checker threads
// recompute those ticks in float64 from the same inputs (tick_input, regenerated from the seed) and file
// the error. Shared by `hotpath bench` for one engine and for many instances (one Checker per instance).
#pragma once
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "scaling/input_scaler.hpp"
#include "model/model.hpp"
#include "reference/reference.hpp"
#include "reference/lockstep_f64.hpp"
#include "reference/split_f64.hpp"
#include "util/threads.hpp"

namespace hotpath::bench {

// Tick t's input: I standard-normal values from (seed, t) alone, so the checker can regenerate them.
void tick_input(uint64_t seed, long long t, std::span<float> x);

// The cores the float64 checker's threads may run on (allowed: the process's cores; cpuset: the bench's,
// its first for the timed thread): the cores outside the cpuset, where the engine's threads do not run;
// with none, every core but the timed thread's. An engine that runs nothing on the cpuset's other cores
// (the cuda backend without a CPU fallback: its work is on the GPU) leaves them to the checker too, so
// a cpuset of most cores does not starve the check (vollo_small streaming on a 16-core host with
// --cpuset 2-15: 1 thread, 113 s of checking after a 6 s run).
std::vector<int> checker_cores(const std::vector<int>& allowed, const std::vector<int>& cpuset, bool engine_uses_cpuset);

// Outputs of the checked ticks, appended by the timed loop and read by the checker threads while the
// loop runs. Record k (tick k * check_every) holds the outputs and a lost flag (the backend gave no
// answer). Storage comes in blocks of ~1 MiB in a fixed ring of block pointers, so readers never see a
// reallocation; a block every reader has passed is reused, so memory follows the checker's backlog,
// not the length of the run. `published` says how many records are complete.
class CheckedOutputs {
 public:
  // Reader r of n reads records r, r + n, ... when strided, else every record.
  CheckedOutputs(int outputs, int readers, bool strided)
      : stride_(size_t(outputs) + 1),
        per_block_(std::max<size_t>(1, kBlockBytes / (stride_ * sizeof(double)))),
        blocks_(kRingBlocks),
        progress_(size_t(readers)) {
    for (int r = 0; r < readers; ++r) progress_[r].store(strided ? size_t(r) : 0, std::memory_order_relaxed);
    // The first block now (zero-filled: ~1 MiB of stores), not between the first timed ticks.
    spare_.push_back(std::make_unique<double[]>(per_block_ * stride_));
  }
  // The timed loop, between ticks: the slot of the next record, or nullptr once the readers are so far
  // behind that the ring is full (the run then stops: see the timed loop).
  double* next_slot() {
    if (full_) return nullptr;
    const size_t n = count_, b = n / per_block_;
    if (n % per_block_ == 0) {
      recycle(b);
      if (b - oldest_ >= kRingBlocks) {
        full_ = true;
        return nullptr;
      }
      auto& block = blocks_[b % kRingBlocks];
      if (!spare_.empty()) {
        block = std::move(spare_.back());
        spare_.pop_back();
      } else {
        block = std::make_unique<double[]>(per_block_ * stride_);
      }
    }
    return blocks_[b % kRingBlocks].get() + (n % per_block_) * stride_;
  }
  // The most records the ring holds unread (1 GiB of outputs): a run whose checked ticks all fit can be
  // checked after it.
  static size_t max_records(int outputs) {
    const size_t stride = size_t(outputs) + 1;
    return kRingBlocks * std::max<size_t>(1, kBlockBytes / (stride * sizeof(double)));
  }
  // A record is an answer to check, a lost tick (no answer), or, with a live swap, a tick another
  // model answered (another checker's: skipped here, counted nowhere).
  enum class Kind { answer = 0, lost = 1, other_model = 2 };
  void publish(double* slot, bool lost) { publish(slot, lost ? Kind::lost : Kind::answer); }
  void publish(double* slot, Kind kind) {
    slot[stride_ - 1] = double(int(kind));
    published_.store(++count_, std::memory_order_release);
  }
  size_t published() const { return published_.load(std::memory_order_acquire); }
  const double* record(size_t k) const { return blocks_[k / per_block_ % kRingBlocks].get() + (k % per_block_) * stride_; }
  bool lost(size_t k) const { return record(k)[stride_ - 1] == double(int(Kind::lost)); }
  bool other_model(size_t k) const { return record(k)[stride_ - 1] == double(int(Kind::other_model)); }
  // Reader r is done with every record it will read below `next`.
  void consumed(int r, size_t next) { progress_[r].store(next, std::memory_order_release); }

 private:
  // Up to 1 GiB of unchecked outputs; past that the run stops (the checker cannot keep up).
  static constexpr size_t kBlockBytes = size_t(1) << 20, kRingBlocks = 1024;
  // Moves blocks below `current` that every reader has passed to the spare list.
  void recycle(size_t current) {
    size_t done = SIZE_MAX;
    for (const auto& p : progress_) done = std::min(done, p.load(std::memory_order_acquire));
    while (oldest_ < current && (oldest_ + 1) * per_block_ <= done) {
      spare_.push_back(std::move(blocks_[oldest_ % kRingBlocks]));
      ++oldest_;
    }
  }
  const size_t stride_, per_block_;
  size_t count_ = 0, oldest_ = 0;
  bool full_ = false;
  std::vector<std::unique_ptr<double[]>> blocks_, spare_;
  std::vector<std::atomic<size_t>> progress_;
  std::atomic<size_t> published_{0};
};

// The tick at which each reporting interval starts, written by the timed loop before that tick runs and
// read by the checker threads, which file each checked tick under its interval.
class IntervalStarts {
 public:
  explicit IntervalStarts(size_t capacity) : start_(capacity) {}
  size_t capacity() const { return start_.size(); }
  size_t size() const { return count_.load(std::memory_order_acquire); }
  bool open(long long tick) {
    const size_t n = count_.load(std::memory_order_relaxed);
    if (n >= start_.size()) return false;
    start_[n] = tick;
    count_.store(n + 1, std::memory_order_release);
    return true;
  }
  // The interval holding `tick`, or -1 (a warm-up tick, or no intervals). `k` is the caller's previous
  // answer: each checker thread's ticks only grow, so the search only moves forward.
  long long find(long long tick, long long k) const {
    const long long n = (long long)size();
    while (k + 1 < n && start_[k + 1] <= tick) ++k;
    return k >= 0 && start_[k] <= tick ? k : -1;
  }

 private:
  std::vector<long long> start_;
  std::atomic<size_t> count_{0};
};

struct CheckResult {
  double max_abs = 0, max_ref = 0;
  double max_rounding_abs = 0;  // per-model bounds (int8): the rounded-weights reference's own error
  long long checked = 0;
  long long lost = 0;         // ticks due for checking that got no answer
  long long over_bound = 0;   // checked ticks whose own error exceeds the bound
  long long worst_tick = -1;  // tick of max_abs
  // Per-model bounds are known only once every tick is checked: each tick's normalized error is kept
  // and over_bound counted by recount().
  std::vector<double> tick_errors;
  void add(long long tick, double abs, double ref, double bound, double rounding_abs, bool keep) {
    if (abs > max_abs || worst_tick < 0) {
      max_abs = abs;
      worst_tick = tick;
    }
    max_ref = std::max(max_ref, ref);
    max_rounding_abs = std::max(max_rounding_abs, rounding_abs);
    if (keep) tick_errors.push_back(abs / std::max(1.0, ref));
    else if (abs / std::max(1.0, ref) > bound) ++over_bound;
    ++checked;
  }
  void merge(const CheckResult& o) {
    if (o.worst_tick >= 0 && (o.max_abs > max_abs || worst_tick < 0)) {
      max_abs = o.max_abs;
      worst_tick = o.worst_tick;
    }
    max_ref = std::max(max_ref, o.max_ref);
    max_rounding_abs = std::max(max_rounding_abs, o.max_rounding_abs);
    checked += o.checked;
    lost += o.lost;
    over_bound += o.over_bound;
    tick_errors.insert(tick_errors.end(), o.tick_errors.begin(), o.tick_errors.end());
  }
  void recount(double bound) {
    over_bound = 0;
    for (const double e : tick_errors) over_bound += e > bound;
  }
  double normalized() const { return max_abs / std::max(1.0, max_ref); }
  double rounding_normalized() const { return max_rounding_abs / std::max(1.0, max_ref); }
};

// How the check was computed and how long it took.
struct CheckTiming {
  int threads = 0;          // threads computing the reference (streaming: the threads each step is split over)
  long long steps = 0;      // float64 LSTM steps computed (with a rounded model, each counted once)
  double busy_s = 0;        // the longest any checker thread spent computing, not waiting for outputs
  double after_run_s = 0;   // from finish() (the end of the timed loop) until every output was checked
  // Streaming checked after the run (Checker::run_chunks): the chunks, and those whose start the
  // previous chunk's end did not confirm, computed again from it.
  int chunks = 0, chunks_redone = 0;
  // Where the chunks were stepped: empty on the host's cores, else the LockstepF64's where(); and why a
  // LockstepF64 that was asked for could not be made (the chunks then ran on the host's cores).
  std::string lockstep_where, lockstep_refused;
};

struct CheckTotals {
  CheckResult all;
  std::vector<CheckResult> intervals;
  CheckTiming timing;
  // Adds another part's checked ticks, the run's and each interval's (not its timing).
  void merge_results(const CheckTotals& o) {
    all.merge(o.all);
    if (o.intervals.size() > intervals.size()) intervals.resize(o.intervals.size());
    for (size_t k = 0; k < o.intervals.size(); ++k) intervals[k].merge(o.intervals[k]);
  }
};

// Float64 check of every `every`-th tick (tick t is checked when t % every == 0). Window mode recomputes
// each checked window from zero state (W steps, FastF64); the checker's threads take turns over the
// checked ticks. Streaming advances one float64 state through every tick: one thread reads the outputs,
// and each of its steps is split over the checker's threads by hidden units (reference::SplitF64), the
// ticks up to the next checked output taken as one batch (SplitF64::step_many), so that the check keeps
// up with a fast backend. Inputs are scaled as the backend scales them: each
// reading thread has an InputScaler of its own, in float64, fed the raw ticks.
class Checker {
 public:
  using Clock = std::chrono::steady_clock;
  // rounded: for a per-model bound (int8), the model with the backend's rounded weights; each checked
  // tick is then also run on it, and the bound follows from its error (finish() recounts). `model` must
  // outlive the checker.
  Checker(const Model& model, Mode mode, int window, uint64_t seed, int every, CheckedOutputs& outs,
          const IntervalStarts& intervals, const ScalerChoice& scaler, std::optional<Model> rounded = std::nullopt)
      : model_(model),
        rounded_model_(std::move(rounded)),
        scaler_proto_(model, scaler),
        rolling_(scaler.kind == ScalerKind::rolling ? scaler.window : 0),
        mode_(mode),
        window_(window),
        seed_(seed),
        every_(every),
        outs_(outs),
        intervals_(intervals),
        threads_([this] {
          abort_.store(true, std::memory_order_release);
          done_.store(true, std::memory_order_release);
        }) {}
  // Starts the check on `threads` threads (on `cores`, a preference): window mode, that many reading
  // threads (CheckedOutputs made for threads_for(mode, threads) readers); streaming, one reading thread
  // whose steps are split over up to `threads` (as many as the model's size makes worth a barrier per
  // layer). The weights are packed here, on the calling thread and the new ones. The threads need the
  // bound from the first record on: set_bound() before any record is published.
  // all_published: every record is already published (the check after the run); streaming then checks
  // its ticks in chunks side by side (see run_chunks) on `threads` threads, when they make two chunks or
  // more.
  void start(int threads, const std::vector<int>& cores, bool all_published = false) {
    const int readers = threads_for(mode_, threads);
    chunked_ = mode_ == Mode::streaming && all_published && ticks_to_check() >= 2 * chunk_min_ticks_;
    threads_used_ = chunked_                 ? std::max(1, threads)
                    : mode_ == Mode::streaming ? reference::SplitF64::useful_threads(model_.config, threads)
                                               : readers;
    auto name = [n = threads_used_](int k) {
      return "bench checker thread " + std::to_string(k + 1) + " of " + std::to_string(n);
    };
    auto pin = [cores, name](int k) {
      // Only a preference: a failure is reported (pin_failures), the check still runs.
      if (!cores.empty()) util::try_pin_thread(pthread_self(), cores, name(k));
    };
    if (chunked_) {
      team_.emplace(threads_used_, pin);  // the reading thread below is its worker 0
      f64_.emplace(model_);
      if (rounded_model_) rounded_f64_.emplace(*rounded_model_);
    } else if (mode_ == Mode::streaming) {
      team_.emplace(threads_used_, pin);  // the reading thread below is its worker 0
      split_.emplace(model_, *team_);
      if (rounded_model_) rounded_split_.emplace(*rounded_model_, *team_);
    } else {
      f64_.emplace(model_);
      if (rounded_model_) rounded_f64_.emplace(*rounded_model_);
      if (all_published && lockstep_maker_ && rolling_ == 0) make_window_lockstep(threads, pin);
      if (all_published && lockstep_maker_ && rolling_ > 0)
        lockstep_refused_ = "a rolling scaler's state would be needed for every window";
    }
    if (mode_ == Mode::streaming && all_published && lockstep_maker_ && !chunked_)
      lockstep_refused_ = "a run of fewer than " + std::to_string(2 * chunk_min_ticks_) +
                             " ticks is checked as one state";
    results_.resize(size_t(readers));
    scalers_.assign(size_t(readers), scaler_proto_);
    for (int k = 0; k < readers; ++k)
      threads_.start(name(k) + " (--check-threads)",
                     [this, k, readers, pin] {
                       pin(k);
                       run(k, readers);
                     });
  }
  // Records checked so far, lost ones included (each reading thread adds its own as it goes): what a
  // progress display watches, out of CheckedOutputs::published().
  const std::atomic<size_t>& filed() const { return filed_; }
  // Counts every record filed into `counter` too (one progress display over several checkers). Before
  // start().
  void also_count_into(std::atomic<size_t>* counter) { also_count_ = counter; }
  // The error bound of the backend's precision, published to the threads by the first record's release
  // store: so the checker can be made, and started, before the backend.
  void set_bound(double bound) { bound_ = bound; }
  // Checked after the run: step the float64 states with `maker`'s LockstepF64 (the GPU, once the run's
  // engine is closed) instead of on the host's threads, which still make the inputs and file the outputs.
  // Streaming: the chunks' states. Window mode (without a rolling scaler, whose state a window's scaling
  // would need per window): every checked window a state, up to kLockstepStates at a time. Where it cannot
  // be made the host's threads check as before, and CheckTiming::lockstep_refused says why. Before start().
  void set_lockstep(reference::LockstepF64Maker maker) { lockstep_maker_ = std::move(maker); }
  // Window mode: the inputs a checker thread may make ahead of a batch of windows (kWindowBatchBytes by
  // default; a test lowers it to check the windows one at a time). Before start().
  void set_window_batch_bytes(size_t bytes) { window_batch_bytes_ = bytes; }
  // Reading threads for `mode` (the readers CheckedOutputs is made for): streaming advances one state,
  // so one.
  static int threads_for(Mode mode, int asked) { return mode == Mode::streaming ? 1 : std::max(1, asked); }
  // Call once the timed loop is done: checks what was published, then joins. With a rounded model,
  // *bound becomes bound_of(its error) and the ticks over it are counted.
  CheckTotals finish(double* bound = nullptr, double (*bound_of)(double) = nullptr) {
    const auto called = Clock::now();
    done_.store(true, std::memory_order_release);
    threads_.join();
    CheckTotals r;
    r.timing.after_run_s = std::chrono::duration<double>(Clock::now() - called).count();
    r.timing.threads = threads_used_;
    for (const auto& p : results_) {
      r.merge_results(p);
      r.timing.steps += p.timing.steps;
      r.timing.busy_s = std::max(r.timing.busy_s, p.timing.busy_s);
      r.timing.chunks += p.timing.chunks;
      r.timing.chunks_redone += p.timing.chunks_redone;
      if (!p.timing.lockstep_where.empty()) r.timing.lockstep_where = p.timing.lockstep_where;
      if (!p.timing.lockstep_refused.empty()) r.timing.lockstep_refused = p.timing.lockstep_refused;
    }
    if (!lockstep_refused_.empty()) r.timing.lockstep_refused = lockstep_refused_;
    if (rounded_model_ && bound && bound_of) {
      *bound = bound_of(r.all.rounding_normalized());
      r.all.recount(*bound);
      for (auto& iv : r.intervals) iv.recount(*bound);
    }
    return r;
  }

 private:
  // Records filed (lost ones included), for the progress display: filed_, and also_count_ where set.
  void count_filed(size_t records = 1) {
    filed_.fetch_add(records, std::memory_order_relaxed);
    if (also_count_) also_count_->fetch_add(records, std::memory_order_relaxed);
  }
  // Waits for record k; false when the loop ended without producing it (or the run is abandoned).
  bool wait_for(size_t k) {
    while (outs_.published() <= k) {
      if (done_.load(std::memory_order_acquire) && outs_.published() <= k) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return !abort_.load(std::memory_order_acquire);
  }
  // Files record k (tick t) against the reference output `ref` (and `rounded`, the rounded model's, or
  // empty).
  void file(size_t k, long long t, std::span<const double> ref, std::span<const double> rounded, CheckTotals& r,
            long long& interval) {
    interval = intervals_.find(t, interval);
    CheckResult* in = nullptr;
    if (interval >= 0) {
      if (size_t(interval) >= r.intervals.size()) r.intervals.resize(size_t(interval) + 1);
      in = &r.intervals[size_t(interval)];
    }
    if (outs_.other_model(k)) return;  // a swapped-in model's tick: its own checker files it
    if (outs_.lost(k)) {
      ++r.all.lost;
      if (in) ++in->lost;
      return;
    }
    const double* z = outs_.record(k);
    double tick_abs = 0, tick_ref = 0, rounding_abs = 0;
    for (size_t o = 0; o < ref.size(); ++o) {
      const double d = std::abs(z[o] - ref[o]);
      tick_abs = std::isnan(d) ? INFINITY : std::max(tick_abs, d);
      tick_ref = std::max(tick_ref, std::abs(ref[o]));
      if (!rounded.empty()) rounding_abs = std::max(rounding_abs, std::abs(rounded[o] - ref[o]));
    }
    const bool keep = rounded_model_.has_value();
    r.all.add(t, tick_abs, tick_ref, bound_, rounding_abs, keep);
    if (in) in->add(t, tick_abs, tick_ref, bound_, rounding_abs, keep);
  }
  // Tick s's input, scaled by `scaler` into `out` (`raw`: its values, already made; x: room for them).
  // `next` is the next tick the scaler takes: a rolling scaler first takes the raw ticks its window needs.
  void scaled_input(InputScaler& scaler, long long& next, long long s, const float* raw, std::vector<float>& x,
                    double* out) const {
    if (rolling_ > 0 && next != s) {
      // A scaler cannot go back, and a long way forward is cheaper from N ticks before s.
      const long long from = std::max(0LL, s - rolling_);
      if (next > s || next < from) {
        scaler.reset();
        next = from;
      }
      for (; next < s; ++next) {
        tick_input(seed_, next, x);
        scaler.observe(x);
        scaler.prepare();
      }
    }
    if (raw) std::copy(raw, raw + x.size(), x.begin());
    else tick_input(seed_, s, x);
    scaler.scale(x, out);
    scaler.prepare();
    next = s + 1;
  }
  void run(int id, int n) {
    const auto& cfg = model_.config;
    const bool rounded = rounded_model_.has_value();
    std::vector<float> x(cfg.input_size);
    std::vector<double> xd(cfg.input_size), z(cfg.output_size), zq(rounded ? cfg.output_size : 0);
    CheckTotals& r = results_[id];
    long long interval = -1;
    InputScaler& scaler = scalers_[size_t(id)];
    long long next = 0;  // the next tick `scaler` takes
    // Tick s's input, scaled, into xd (`raw`: its values, already made); the scaler first takes the raw
    // ticks a rolling window needs.
    auto input = [&](long long s, const float* raw = nullptr) { scaled_input(scaler, next, s, raw, x, xd.data()); };
    if (chunked_) {
      run_chunks(r);
      return;
    }
    if (window_lock_) {  // reading thread 0 checks every window on the lockstep; the others have none
      if (id != 0) return;
      const size_t filed_before = filed_.load(), counted_before = also_count_ ? also_count_->load() : 0;
      try {
        run_windows_lockstep(r);
        return;
      } catch (const std::exception& e) {  // a GPU error part-way: this thread checks every window again
        lockstep_refused_ = e.what();
        r = CheckTotals{};
        filed_.store(filed_before);
        if (also_count_) also_count_->store(counted_before);
        n = 1;
      }
    }
    const bool split = mode_ == Mode::streaming;
    // Time spent computing, from the moment a record is there to its filing: waits are left out.
    Clock::time_point busy_from;
    auto filed = [&](size_t records = 1) {
      r.timing.busy_s += std::chrono::duration<double>(Clock::now() - busy_from).count();
      count_filed(records);
    };
    if (split) {
      const int I = cfg.input_size;
      std::vector<float> raw(size_t(kInputBatch) * I);
      std::vector<double> scaled(size_t(kInputBatch) * I);
      for (size_t k = 0;; ++k) {
        if (!wait_for(k)) return;
        busy_from = Clock::now();
        const long long last = (long long)(k) * every_;
        for (long long t0 = (k == 0 ? 0 : last - every_ + 1); t0 <= last; t0 += kInputBatch) {
          // The raw inputs of a batch of ticks on the team first (on several threads, Box-Muller costs
          // about as much as a step's share), then the steps in order.
          InputBatch batch{seed_, t0, int(std::min<long long>(kInputBatch, last - t0 + 1)), I, raw.data(), team_->size()};
          team_->run(&Checker::input_job, &batch);
          // then the batch's steps at once (SplitF64::step_many: the bits of one step at a time)
          for (int i = 0; i < batch.count; ++i) {
            input(t0 + i, raw.data() + size_t(i) * I);
            std::copy(xd.begin(), xd.end(), scaled.begin() + ptrdiff_t(i) * I);
          }
          const std::span<const double> xs(scaled.data(), size_t(batch.count) * I);
          split_->step_many(xs);
          if (rounded) rounded_split_->step_many(xs);
          r.timing.steps += batch.count;
        }
        split_->head(z);  // the truth's, and the rounded-weights model's for a per-model bound
        if (rounded) rounded_split_->head(zq);
        file(k, last, z, zq, r, interval);
        outs_.consumed(id, k + 1);
        filed();
      }
    }
    // Window mode: this thread's records k, k + n, ..., a batch at a time (those already published, up
    // to window_batch): each window's scaled inputs made in its tick order, then the batch's windows
    // stepped together, aligned at their last tick (FastF64::step_batch: each weight read once for eight
    // windows, the same bits as one window at a time); a window shorter than W (the run's first ticks)
    // joins when its first tick comes. A window whose inputs alone pass the cap (lazy) is a batch of one
    // whose inputs are made when each step comes, in tick order.
    const size_t I = size_t(cfg.input_size), W = size_t(window_);
    const bool lazy = W * I * sizeof(double) > window_batch_bytes_;
    const size_t batch = window_batch(W * I);  // 1 when lazy
    std::vector<reference::LstmState> states(batch, reference::LstmState(cfg)), qstates(rounded ? batch : 0, reference::LstmState(cfg));
    std::vector<double> xs(lazy ? 0 : batch * W * I);
    std::vector<size_t> ks;
    std::vector<long long> first;  // a window's first tick; -1: lost, not computed
    std::vector<const double*> step_x;
    std::vector<reference::LstmState*> step_s, step_q;
    for (size_t k = id;;) {
      if (!wait_for(k)) return;
      busy_from = Clock::now();
      ks.assign(1, k);
      while (ks.size() < batch && outs_.published() > ks.back() + n && !abort_.load(std::memory_order_acquire))
        ks.push_back(ks.back() + n);
      first.assign(ks.size(), -1);
      for (size_t j = 0; j < ks.size(); ++j) {
        if (outs_.lost(ks[j]) || outs_.other_model(ks[j])) continue;
        const long long t = (long long)(ks[j]) * every_;
        first[j] = std::max(0LL, t - window_ + 1);
        states[j].clear();
        if (rounded) qstates[j].clear();
        for (long long s = first[j]; s <= t && !lazy; ++s) {
          input(s);
          std::copy(xd.begin(), xd.end(), xs.begin() + ptrdiff_t((j * W + size_t(s - first[j])) * I));
        }
      }
      for (size_t i = 0; i < W; ++i) {  // step i of W: tick t - W + 1 + i of each window
        step_x.clear();
        step_s.clear();
        step_q.clear();
        for (size_t j = 0; j < ks.size(); ++j) {
          if (first[j] < 0) continue;
          const long long at = (long long)(ks[j]) * every_ - window_ + 1 + (long long)i;  // this step's tick
          if (at < first[j]) continue;
          if (lazy) input(at);  // the batch's one window: its ticks in order
          step_x.push_back(lazy ? xd.data() : xs.data() + (j * W + size_t(at - first[j])) * I);
          step_s.push_back(&states[j]);
          if (rounded) step_q.push_back(&qstates[j]);
        }
        if (step_s.empty()) continue;
        f64_->step_batch(step_x, step_s);
        if (rounded) rounded_f64_->step_batch(step_x, step_q);
        r.timing.steps += (long long)step_s.size();
      }
      for (size_t j = 0; j < ks.size(); ++j) {
        if (first[j] >= 0) {
          f64_->head(states[j], z);
          if (rounded) rounded_f64_->head(qstates[j], zq);
        }
        file(ks[j], (long long)(ks[j]) * every_, z, zq, r, interval);
      }
      k = ks.back() + n;
      outs_.consumed(id, k);
      filed(ks.size());
    }
  }

  // Streaming, every record published: the ticks 0 .. T (T the last checked one) cut into chunks, checked
  // side by side: every chunk's state stepped together, each step split over the team by hidden units
  // (reference::SplitStatesF64: each weight read by one thread once a step for all the chunks; each
  // chunk's bits those of FastF64 stepping it alone, on x86-64). Chunk 0 starts from the zero state at tick 0, as the run
  // did; chunk c > 0 starts from the zero state `washout` ticks before its first tick, unchecked, so that
  // the state it reaches at its first tick is the one the run's inputs force from any start (an LSTM
  // forgets its start: the zoo's models within ~100 ticks). That is not taken on trust: after every chunk
  // is done, each chunk's state at its first tick is compared with the state the previous chunk reached
  // there (h and c of every layer, within kChunkAgree of each other, relatively); where they differ (a
  // model with a long memory), that chunk is checked again from the previous chunk's end, in order, so
  // each chunk's reference is the chain's from tick 0. The errors filed are then those of one float64
  // state carried from tick 0, up to the agreement's 1e-12.
  struct Chunk {
    long long from = 0, first = 0, end = 0;  // stepped [from, end), checked [first, end)
    std::optional<reference::LstmState> state, qstate;                   // the truth's, the rounded model's
    std::optional<reference::LstmState> at_first, q_at_first, at_end, q_at_end;
    CheckTotals totals;
    long long interval = -1;
    std::optional<InputScaler> scaler;
    long long next = 0;  // the next tick `scaler` takes
    long long steps = 0;
  };
  // One step of every chunk on the team (chunk_step_job): worker k makes the inputs of chunks k, k + n,
  // ... and files their outputs, every worker steps its slice of every chunk's state.
  struct ChunkStep {
    Checker* self;
    std::vector<Chunk>* chunks;
    reference::SplitStatesF64* truth;    // every chunk's state
    reference::SplitStatesF64* rounded;  // the rounded model's, or null
    std::vector<double> xs;              // [chunks][I]: this step's inputs
    struct Scratch {
      std::vector<float> x;         // a raw input
      std::vector<double> z, zq;    // a chunk's outputs, the rounded model's
    };
    std::vector<Scratch> scratch;   // one per worker, made once
    long long i = 0;                // the step: chunk c is at tick from + i
    int workers;
  };
  static constexpr int kChunksAThread = 16;          // chunks per thread of the team, at most
  static constexpr int kLockstepStates = 2048;       // chunks on a LockstepF64, at most
  static constexpr long long kChunkWashout = 256;    // unchecked ticks before a chunk's first
  static constexpr double kChunkAgree = 1e-12;       // |a - b| <= kChunkAgree * max(1, |b|)
  long long chunk_washout_ = kChunkWashout, chunk_min_ticks_ = 8 * kChunkWashout;  // washout <= 1/8 of the steps

 public:
  // Streaming after the run: the unchecked ticks before a chunk and the least ticks a chunk has (a test
  // lowers them to make several chunks of a short run). Before start().
  void set_chunking(long long washout, long long min_ticks) {
    chunk_washout_ = std::max(0LL, washout);
    chunk_min_ticks_ = std::max(1LL, min_ticks);
  }

 private:
  // Ticks 0 .. the last published record's: what a streaming check steps through.
  long long ticks_to_check() const {
    const size_t records = outs_.published();
    return records > 0 ? (long long)(records - 1) * every_ + 1 : 0;
  }

  static bool states_agree(const reference::LstmState& a, const reference::LstmState& b) {
    auto close = [](const std::vector<std::vector<double>>& x, const std::vector<std::vector<double>>& y) {
      for (size_t l = 0; l < x.size(); ++l)
        for (size_t i = 0; i < x[l].size(); ++i)
          if (!(std::abs(x[l][i] - y[l][i]) <= kChunkAgree * std::max(1.0, std::abs(y[l][i])))) return false;
      return true;
    };
    return close(a.h, b.h) && close(a.c, b.c);
  }

  // Steps `group` (chunks stepped together, each from its own `from`) to their ends, filing their checked
  // ticks into their own totals; keeps each one's state at its first tick and at its end.
  void step_chunks(std::vector<Chunk*> group, bool count = true) {
    const auto& cfg = model_.config;
    const size_t I = size_t(cfg.input_size);
    const bool rounded = rounded_model_.has_value();
    std::vector<float> x(I);
    std::vector<double> xs(group.size() * I), z(cfg.output_size), zq(rounded ? cfg.output_size : 0);
    std::vector<const double*> step_x;
    std::vector<reference::LstmState*> step_s, step_q;
    for (Chunk* c : group) {
      c->scaler.emplace(scaler_proto_);
      c->next = 0;
    }
    long long longest = 0;
    for (const Chunk* c : group) longest = std::max(longest, c->end - c->from);
    for (long long i = 0; i < longest && !abort_.load(std::memory_order_acquire); ++i) {
      step_x.clear();
      step_s.clear();
      step_q.clear();
      for (size_t j = 0; j < group.size(); ++j) {
        Chunk& c = *group[j];
        const long long t = c.from + i;
        if (t >= c.end) continue;
        if (t == c.first) {
          c.at_first = *c.state;
          if (rounded) c.q_at_first = *c.qstate;
        }
        scaled_input(*c.scaler, c.next, t, nullptr, x, xs.data() + j * I);
        step_x.push_back(xs.data() + j * I);
        step_s.push_back(&*c.state);
        if (rounded) step_q.push_back(&*c.qstate);
        ++c.steps;
      }
      f64_->step_batch(step_x, step_s);
      if (rounded) rounded_f64_->step_batch(step_x, step_q);
      for (Chunk* c : group) {
        const long long t = c->from + i;
        if (t >= c->end) continue;
        if (t >= c->first && t % every_ == 0) {
          f64_->head(*c->state, z);
          if (rounded) rounded_f64_->head(*c->qstate, zq);
          file(size_t(t / every_), t, z, zq, c->totals, c->interval);
          if (count) count_filed();  // a chunk checked again is not counted twice
        }
        if (t == c->end - 1) {
          c->at_end = *c->state;
          if (rounded) c->q_at_end = *c->qstate;
        }
      }
    }
  }

  // Chunk k's scaled input of step i (its tick from + i) into xc (I values), through its own scaler; zeros
  // once the chunk is done (stepped on, never read again).
  void chunk_input(Chunk& k, long long i, std::vector<float>& raw, double* xc) {
    const long long t = k.from + i;
    if (t >= k.end) {
      std::fill(xc, xc + model_.config.input_size, 0.0);
      return;
    }
    scaled_input(*k.scaler, k.next, t, nullptr, raw, xc);
    ++k.steps;
  }
  static void chunk_step_job(void* ctx, int worker) {
    auto& job = *static_cast<ChunkStep*>(ctx);
    Checker& self = *job.self;
    const size_t I = size_t(self.model_.config.input_size), n = job.chunks->size();
    ChunkStep::Scratch& mine = job.scratch[size_t(worker)];
    for (size_t c = size_t(worker); c < n; c += size_t(job.workers)) {
      Chunk& k = (*job.chunks)[c];
      const long long t = k.from + job.i;
      if (t == k.first && t < k.end) {
        k.at_first = job.truth->state(int(c));
        if (job.rounded) k.q_at_first = job.rounded->state(int(c));
      }
      self.chunk_input(k, job.i, mine.x, job.xs.data() + c * I);
    }
    self.team_->sync();  // every chunk's input is there
    job.truth->step_worker(worker, job.xs.data());
    if (job.rounded) job.rounded->step_worker(worker, job.xs.data());
    for (size_t c = size_t(worker); c < n; c += size_t(job.workers)) {
      Chunk& k = (*job.chunks)[c];
      const long long t = k.from + job.i;
      if (t >= k.end) continue;
      if (t >= k.first && t % self.every_ == 0) {
        job.truth->head(int(c), mine.z);
        if (job.rounded) job.rounded->head(int(c), mine.zq);
        self.file(size_t(t / self.every_), t, mine.z, mine.zq, k.totals, k.interval);
        self.count_filed();
      }
      if (t == k.end - 1) {
        k.at_end = job.truth->state(int(c));
        if (job.rounded) k.q_at_end = job.rounded->state(int(c));
      }
    }
  }

  // Window mode, checked after the run: the lockstep for up to kLockstepStates windows at a time and a team
  // of `threads` to make their inputs (the reading thread 0 its worker 0); none made, the lockstep_refused_.
  template <class Pin>
  void make_window_lockstep(int threads, const Pin& pin) {
    const long long full = full_windows();
    if (full == 0) return;
    // batches of equal size: 6,250 windows as 4 of 1,563, not 3 of 2,048 and one of 106 stepped as 2,048
    const long long batches = (full + kLockstepStates - 1) / kLockstepStates;
    const int states = int((full + batches - 1) / batches);
    try {
      window_lock_ = lockstep_maker_(model_, states);
      if (rounded_model_) window_lock_rounded_ = lockstep_maker_(*rounded_model_, states);
      const int got = window_lock_->states();  // fewer than asked: smaller batches
      if (got < 1 || got > states || (window_lock_rounded_ && window_lock_rounded_->states() != got))
        throw Error("the lockstep made " + std::to_string(got) + " states where " + std::to_string(states) +
                    " were asked for" + (window_lock_rounded_ ? " (and the rounded model's " +
                                             std::to_string(window_lock_rounded_->states()) + ")" : std::string()));
    } catch (const std::exception& e) {
      window_lock_.reset();
      window_lock_rounded_.reset();
      lockstep_refused_ = e.what();
      return;
    }
    threads_used_ = std::max(1, threads);
    team_.emplace(threads_used_, pin);
  }
  // Published records whose window is whole (W ticks: tick >= W - 1), counted from record 0.
  long long full_windows() const {
    const long long records = (long long)outs_.published();
    const long long first = (window_ - 1 + every_ - 1) / every_;  // the first record with a whole window
    return std::max(0LL, records - first);
  }

  // Every checked window on the lockstep, kLockstepStates at a time: each batch of windows stepped together
  // from the zero state, aligned at their ticks (step i: tick t - W + 1 + i of window t), the team making
  // the next step's inputs while the lockstep runs, then the heads filed. A window shorter than W (the run's
  // first W - 1 ticks) and a lost tick are checked here on FastF64 first.
  struct WindowStep {
    Checker* self;
    const std::vector<size_t>* ks;  // the batch's records
    std::vector<double> xs;         // [states][I]: the inputs of step `make`
    std::vector<double> z, zq;      // [states][O]: the batch's heads, the rounded model's
    std::vector<std::vector<float>> raw;
    std::vector<InputScaler> scalers;  // one per worker (a rolling scaler never comes here: stateless)
    std::vector<long long> nexts;
    std::vector<CheckTotals> totals;   // one per worker
    std::vector<long long> intervals;  // one per worker
    long long make = 0;
    int workers = 1;
    bool rounded = false;
  };
  static void window_inputs_job(void* ctx, int worker) {
    auto& job = *static_cast<WindowStep*>(ctx);
    Checker& self = *job.self;
    const size_t I = size_t(self.model_.config.input_size), n = job.xs.size() / I;
    for (size_t j = size_t(worker); j < n; j += size_t(job.workers)) {
      double* xj = job.xs.data() + j * I;
      if (j >= job.ks->size()) {  // a state past the batch's windows: zeros, never read
        std::fill(xj, xj + I, 0.0);
        continue;
      }
      const long long t = (long long)(*job.ks)[j] * self.every_ - self.window_ + 1 + job.make;
      self.scaled_input(job.scalers[size_t(worker)], job.nexts[size_t(worker)], t, nullptr, job.raw[size_t(worker)], xj);
    }
  }
  static void window_file_job(void* ctx, int worker) {
    auto& job = *static_cast<WindowStep*>(ctx);
    Checker& self = *job.self;
    const size_t O = size_t(self.model_.config.output_size);
    for (size_t j = size_t(worker); j < job.ks->size(); j += size_t(job.workers)) {
      const size_t k = (*job.ks)[j];
      const std::span<const double> zq =
          job.rounded ? std::span<const double>(job.zq.data() + j * O, O) : std::span<const double>();
      self.file(k, (long long)k * self.every_, std::span<const double>(job.z.data() + j * O, O), zq,
                job.totals[size_t(worker)], job.intervals[size_t(worker)]);
      self.count_filed();
    }
  }
  void run_windows_lockstep(CheckTotals& r) {
    const auto& cfg = model_.config;
    const bool rounded = rounded_model_.has_value();
    const auto began = Clock::now();
    const size_t records = outs_.published(), I = size_t(cfg.input_size), O = size_t(cfg.output_size);
    const size_t first_full = records - size_t(full_windows());
    reference::LockstepF64& lock = *window_lock_;
    const size_t S = size_t(lock.states());
    // the short windows (every one a prefix of the stream from the zero state: one state from tick 0, its
    // head at each of their ticks) and every lost or other model's record, here, in tick order
    std::vector<float> x(I);
    std::vector<double> xd(I), z(O), zq(rounded ? O : 0);
    InputScaler scaler = scaler_proto_;
    long long next = 0, interval = -1, stepped = 0;  // the prefix state has taken ticks [0, stepped)
    reference::LstmState st(cfg), qs(cfg);
    std::vector<size_t> full;
    for (size_t k = 0; k < records && !abort_.load(std::memory_order_acquire); ++k) {
      const long long t = (long long)k * every_;
      const bool answer = !outs_.lost(k) && !outs_.other_model(k);
      if (k >= first_full && answer) {
        full.push_back(k);
        continue;
      }
      if (answer) {
        for (; stepped <= t; ++stepped) {
          scaled_input(scaler, next, stepped, nullptr, x, xd.data());
          f64_->step(xd, st);
          if (rounded) rounded_f64_->step(xd, qs);
          ++r.timing.steps;
        }
        f64_->head(st, z);
        if (rounded) rounded_f64_->head(qs, zq);
      }
      file(k, t, z, zq, r, interval);
      count_filed();
    }
    const int workers = team_->size();
    WindowStep job{this, nullptr, std::vector<double>(S * I), std::vector<double>(S * O),
                   std::vector<double>(rounded ? S * O : 0), {}, {}, std::vector<long long>(size_t(workers), 0),
                   std::vector<CheckTotals>(size_t(workers)), std::vector<long long>(size_t(workers), -1), 0, workers,
                   rounded};
    job.raw.assign(size_t(workers), std::vector<float>(I));
    job.scalers.assign(size_t(workers), scaler_proto_);
    std::vector<size_t> batch;
    for (size_t b0 = 0; b0 < full.size() && !abort_.load(std::memory_order_acquire); b0 += S) {
      batch.assign(full.begin() + ptrdiff_t(b0), full.begin() + ptrdiff_t(std::min(full.size(), b0 + S)));
      job.ks = &batch;
      lock.reset();
      if (rounded) window_lock_rounded_->reset();
      job.make = 0;
      team_->run(&Checker::window_inputs_job, &job);
      for (long long i = 0; i < window_ && !abort_.load(std::memory_order_acquire); ++i) {
        lock.step(job.xs.data());  // takes the inputs before it returns
        if (rounded) window_lock_rounded_->step(job.xs.data());
        if (i + 1 < window_) {  // the next step's inputs while this one runs
          job.make = i + 1;
          team_->run(&Checker::window_inputs_job, &job);
        }
      }
      if (abort_.load(std::memory_order_acquire)) break;  // the batch is part-stepped: nothing to file
      lock.heads(job.z.data());
      if (rounded) window_lock_rounded_->heads(job.zq.data());
      team_->run(&Checker::window_file_job, &job);
      r.timing.steps += (long long)batch.size() * window_;
    }
    for (const CheckTotals& t : job.totals) r.merge_results(t);
    r.timing.lockstep_where = lock.where();
    r.timing.busy_s = std::chrono::duration<double>(Clock::now() - began).count();
    outs_.consumed(0, records);
  }

  // Every chunk stepped together on a LockstepF64 (truth, and the rounded model's or null) for `longest`
  // steps: per step the lockstep steps the chunks (asynchronously: the GPU), meanwhile the team makes the
  // next step's inputs (worker k chunks k, k + n, ..., each chunk's scaler on one worker in tick order), and
  // where a chunk reaches a checked tick the heads come back and are filed; the states at the chunks' first
  // ticks and ends are kept.
  struct LockstepStep {
    Checker* self;
    std::vector<Chunk>* chunks;
    std::vector<double> xs;     // [chunks][I]: the inputs of step `make`
    std::vector<double> z, zq;  // [chunks][O]: the last step's heads, the rounded model's
    std::vector<std::vector<float>> raw;  // a raw input, one per worker
    long long make = 0;
    int workers = 1;
  };
  static void lockstep_inputs_job(void* ctx, int worker) {
    auto& job = *static_cast<LockstepStep*>(ctx);
    Checker& self = *job.self;
    const size_t I = size_t(self.model_.config.input_size), n = job.chunks->size();
    for (size_t c = size_t(worker); c < n; c += size_t(job.workers))
      self.chunk_input((*job.chunks)[c], job.make, job.raw[size_t(worker)], job.xs.data() + c * I);
  }
  // The outputs of step i (heads z, zq: [chunks][O]) at the chunks' checked ticks, each into its chunk's
  // totals: a few a step, filed on the driving thread without waking the team.
  void file_lockstep_step(std::vector<Chunk>& chunks, long long i, const std::vector<double>& z,
                          const std::vector<double>& zq) {
    const size_t O = size_t(model_.config.output_size);
    for (size_t c = 0; c < chunks.size(); ++c) {
      Chunk& k = chunks[c];
      const long long t = k.from + i;
      if (t >= k.end || t < k.first || t % every_ != 0) continue;
      const std::span<const double> q = zq.empty() ? std::span<const double>() : std::span<const double>(zq.data() + c * O, O);
      file(size_t(t / every_), t, std::span<const double>(z.data() + c * O, O), q, k.totals, k.interval);
      count_filed();
    }
  }
  void step_chunks_lockstep(std::vector<Chunk>& chunks, long long longest, reference::LockstepF64& truth,
                            reference::LockstepF64* rounded) {
    const auto& cfg = model_.config;
    const size_t n = chunks.size(), I = size_t(cfg.input_size), O = size_t(cfg.output_size);
    LockstepStep job{this, &chunks, std::vector<double>(n * I), std::vector<double>(n * O),
                     std::vector<double>(rounded ? n * O : 0), {}, 0, team_->size()};
    job.raw.assign(size_t(job.workers), std::vector<float>(I));
    if (longest > 0) team_->run(&Checker::lockstep_inputs_job, &job);  // step 0's
    for (long long i = 0; i < longest && !abort_.load(std::memory_order_acquire); ++i) {
      bool checked = false;
      for (size_t c = 0; c < n; ++c) {
        Chunk& k = chunks[c];
        const long long t = k.from + i;
        if (t >= k.end) continue;
        if (t == k.first) {  // the state its first tick starts from
          k.at_first = truth.state(int(c));
          if (rounded) k.q_at_first = rounded->state(int(c));
        }
        checked = checked || (t >= k.first && t % every_ == 0);
      }
      truth.step(job.xs.data());  // takes the inputs before it returns
      if (rounded) rounded->step(job.xs.data());
      if (i + 1 < longest) {  // the next step's inputs while this one runs
        job.make = i + 1;
        team_->run(&Checker::lockstep_inputs_job, &job);
      }
      if (checked) {
        truth.heads(job.z.data());
        if (rounded) rounded->heads(job.zq.data());
        file_lockstep_step(chunks, i, job.z, job.zq);
      }
      for (size_t c = 0; c < n; ++c) {
        Chunk& k = chunks[c];
        if (k.from + i != k.end - 1) continue;
        k.at_end = truth.state(int(c));
        if (rounded) k.q_at_end = rounded->state(int(c));
      }
    }
  }

  void run_chunks(CheckTotals& r) {
    const auto& cfg = model_.config;
    const bool rounded = rounded_model_.has_value();
    const auto began = Clock::now();
    const size_t records = outs_.published();
    const long long ticks = ticks_to_check();
    if (ticks == 0) return;
    const int workers = team_->size();
    // As many chunks as keep each one chunk_min_ticks_ long (each costs its washout again), up to
    // kChunksAThread a thread of the team, or kLockstepStates on a LockstepF64.
    const long long wanted = std::max(1LL, ticks / chunk_min_ticks_);
    std::vector<Chunk> chunks;
    long long longest = 0;
    auto cut = [&](long long n) {
      chunks.assign(static_cast<size_t>(n), Chunk{});
      longest = 0;
      for (long long c = 0; c < n; ++c) {
        Chunk& k = chunks[size_t(c)];
        k.first = ticks * c / n;
        k.end = ticks * (c + 1) / n;
        k.from = std::max(0LL, k.first - chunk_washout_);
        k.scaler.emplace(scaler_proto_);
        longest = std::max(longest, k.end - k.from);
      }
    };
    bool stepped = false;
    if (lockstep_maker_) {
      // On the lockstep; where it cannot be made, or fails part-way (a GPU error), the team checks every
      // chunk again from the start, and the timing says why.
      const size_t filed_before = filed_.load(), counted_before = also_count_ ? also_count_->load() : 0;
      try {
        const int states = int(std::min<long long>(wanted, kLockstepStates));
        std::unique_ptr<reference::LockstepF64> truth = lockstep_maker_(model_, states), qtruth;
        if (rounded) qtruth = lockstep_maker_(*rounded_model_, states);
        if (truth->states() != states || (qtruth && qtruth->states() != states))
          throw Error("the lockstep made " + std::to_string(truth->states()) + " states, not the " +
                      std::to_string(states) + " asked for");
        cut(states);
        step_chunks_lockstep(chunks, longest, *truth, qtruth.get());
        r.timing.lockstep_where = truth->where();
        stepped = true;
      } catch (const std::exception& e) {
        r.timing.lockstep_refused = e.what();
        filed_.store(filed_before);
        if (also_count_) also_count_->store(counted_before);
      }
    }
    if (!stepped) {
      const long long n = std::min<long long>(wanted, (long long)kChunksAThread * workers);
      cut(n);
      reference::SplitStatesF64 truth(model_, *team_, int(n));
      std::optional<reference::SplitStatesF64> rounded_truth;
      if (rounded) rounded_truth.emplace(*rounded_model_, *team_, int(n));
      ChunkStep job{this, &chunks, &truth, rounded ? &*rounded_truth : nullptr,
                    std::vector<double>(size_t(n) * size_t(cfg.input_size)), {}, 0, workers};
      const size_t O = size_t(cfg.output_size);
      job.scratch.assign(size_t(workers), {std::vector<float>(size_t(cfg.input_size)), std::vector<double>(O),
                                           std::vector<double>(rounded ? O : 0)});
      for (job.i = 0; job.i < longest && !abort_.load(std::memory_order_acquire); ++job.i)
        team_->run(&Checker::chunk_step_job, &job);
    }
    if (abort_.load(std::memory_order_acquire)) return;
    // Each chunk's start against the previous chunk's end, in order; a chunk whose start differs is
    // stepped again from that end (its totals replaced).
    const int n = int(chunks.size());
    int redone = 0;
    for (int c = 1; c < n && !abort_.load(std::memory_order_acquire); ++c) {
      Chunk& k = chunks[size_t(c)];
      const Chunk& prev = chunks[size_t(c) - 1];
      if (states_agree(*k.at_first, *prev.at_end) && (!rounded || states_agree(*k.q_at_first, *prev.q_at_end))) continue;
      ++redone;
      k.from = k.first;
      k.state = *prev.at_end;
      if (rounded) k.qstate = *prev.q_at_end;
      k.totals = CheckTotals{};
      k.interval = -1;
      step_chunks({&k}, /*count=*/false);
    }
    for (Chunk& k : chunks) {
      r.merge_results(k.totals);
      r.timing.steps += k.steps;
    }
    r.timing.chunks = n;
    r.timing.chunks_redone = redone;
    r.timing.busy_s = std::chrono::duration<double>(Clock::now() - began).count();
    outs_.consumed(0, records);
  }

  // Windows a checker thread steps together: up to kWindowBatch, fewer where their inputs would pass
  // kWindowBatchBytes (a batch's W x I float64 inputs a window are made before its steps); at least one.
  static constexpr size_t kWindowBatch = 16, kWindowBatchBytes = size_t(64) << 20;
  size_t window_batch(size_t values_a_window) const {
    return std::clamp<size_t>(window_batch_bytes_ / std::max<size_t>(1, values_a_window * sizeof(double)), 1, kWindowBatch);
  }
  size_t window_batch_bytes_ = kWindowBatchBytes;

  // Streaming: the raw inputs of up to kInputBatch ticks are made at once, shared out over the team.
  static constexpr int kInputBatch = 64;
  struct InputBatch {
    uint64_t seed;
    long long first;
    int count, width;
    float* out;  // [count][width]
    int workers;
  };
  static void input_job(void* ctx, int worker) {
    const auto& b = *static_cast<const InputBatch*>(ctx);
    for (int i = worker; i < b.count; i += b.workers)
      tick_input(b.seed, b.first + i, std::span<float>(b.out + size_t(i) * b.width, size_t(b.width)));
  }

  const Model& model_;
  std::optional<Model> rounded_model_;
  // Window mode: FastF64, shared by the reading threads. Streaming: the split reference on a team of
  // threads whose worker 0 is the one reading thread; checked after the run, every chunk's state on the
  // team (run_chunks' SplitStatesF64), and FastF64 for a chunk checked again from the previous one's end.
  std::optional<reference::FastF64> f64_, rounded_f64_;
  std::optional<reference::F64Team> team_;
  std::optional<reference::SplitF64> split_, rounded_split_;
  reference::LockstepF64Maker lockstep_maker_;  // set_lockstep: the states elsewhere (the GPU)
  // Window mode checked after the run on a lockstep (make_window_lockstep): the truth's, the rounded model's.
  std::unique_ptr<reference::LockstepF64> window_lock_, window_lock_rounded_;
  // Why a lockstep asked for was not used (window mode, or a streaming run too short for chunks; the chunks'
  // own reason goes straight into their timing).
  std::string lockstep_refused_;
  int threads_used_ = 0;
  bool chunked_ = false;  // streaming, checked after the run: run_chunks
  std::atomic<size_t> filed_{0};
  std::atomic<size_t>* also_count_ = nullptr;
  InputScaler scaler_proto_;          // fresh, copied for each thread
  std::vector<InputScaler> scalers_;  // one per thread
  long long rolling_;                 // N of a rolling scaler, else 0
  Mode mode_;
  long long window_;
  uint64_t seed_;
  long long every_;
  double bound_ = 0;
  CheckedOutputs& outs_;
  const IntervalStarts& intervals_;
  std::atomic<bool> done_{false}, abort_{false};
  std::vector<CheckTotals> results_;
  util::ThreadGroup threads_;  // last: stopped and joined before what the threads use is destroyed
};


}  // namespace hotpath::bench
