#include "engine/swap.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::engine {

long long replay_period(const ReplayPlan& plan, int input_size) {
  const long long w = std::max(1, plan.window);
  if (plan.history <= 0) return w;
  const long long lcm = std::lcm(w, plan.history);
  return double(lcm) * std::max(1, input_size) * sizeof(float) <= kMaxReplayPeriodBytes ? lcm : w;
}

long long replay_ticks(const ReplayPlan& plan, long long ticks, int input_size) {
  if (plan.mode != Mode::window) return std::min(std::max(0LL, plan.warm_ticks), ticks);
  const long long base = std::max<long long>(std::max(1, plan.window) - 1, plan.history);
  if (ticks <= base) return ticks;
  return base + (ticks - base) % replay_period(plan, input_size);
}

long long record_ticks(const ReplayPlan& plan, int input_size) {
  const long long need = plan.mode == Mode::window
                             ? std::max<long long>(std::max(1, plan.window) - 1, plan.history) + replay_period(plan, input_size)
                             : plan.warm_ticks;
  return need + kRecordSlackTicks;
}

namespace {
std::string family_of(const Backend& b) {
  const auto f = b.facts();
  const auto it = f.find("kernel_family");
  return it == f.end() ? std::string() : it->second;
}
using Clock = std::chrono::steady_clock;
// A worker that cannot get within a tick or two of the feed in this long gives up: the new model is
// slower than the ticks arrive.
constexpr auto kChaseLimit = std::chrono::seconds(30);
constexpr auto kPoll = std::chrono::microseconds(50);
}  // namespace

SwappableBackend::SwappableBackend(ServedModel first, long long record, std::vector<int> worker_cores)
    : Backend(first.backend->config(), first.backend->options()),
      serving_(std::move(first)),
      in_(config().input_size),
      out_(config().output_size),
      cap_(std::max(1LL, record)),
      ring_(size_t(cap_) * size_t(std::max(1, in_))),
      z_(size_t(std::max(1, out_))),
      worker_cores_(std::move(worker_cores)) {
  ids_.push_back(std::make_unique<std::string>(serving_.id));
  serving_id_ = answering_id_ = ids_.back().get();
  family_ = family_of(*serving_.backend);
}

SwappableBackend::~SwappableBackend() { end_worker(); }

void SwappableBackend::end_worker() {
  if (!worker_.joinable()) return;
  cancel_.store(true, std::memory_order_release);
  worker_.join();
  cancel_.store(false, std::memory_order_relaxed);
  retired_ = ServedModel{};
  pending_ = ServedModel{};
}

void SwappableBackend::record(std::span<const float> x) {
  const long long h = head_.load(std::memory_order_relaxed);
  std::memcpy(ring_.data() + size_t(write_row_) * size_t(in_), x.data(), size_t(in_) * sizeof(float));
  if (++write_row_ == cap_) write_row_ = 0;
  head_.store(h + 1, std::memory_order_release);
}

void SwappableBackend::step(std::span<const float> x, std::span<float> out) {
  serving_.backend->step(x, out);  // a bad input throws here: nothing consumed, nothing recorded
  answering_id_ = serving_id_;
  record(x);
}

bool SwappableBackend::try_step(std::span<const float> x, std::span<float> out, std::string* why) {
  const bool answered = serving_.backend->try_step(x, out, why);
  answering_id_ = serving_id_;
  record(x);  // consumed, answered or not
  return answered;
}

void SwappableBackend::finish_precompute() {
  serving_.backend->finish_precompute();
  if (state_.load(std::memory_order_relaxed) == kReady) take_over();
}

bool SwappableBackend::try_finish_precompute(std::string* why) {
  if (!serving_.backend->try_finish_precompute(why)) return false;  // late: the switch waits a tick
  if (state_.load(std::memory_order_relaxed) == kReady) take_over();
  return true;
}

void SwappableBackend::reset() {
  serving_.backend->reset();
  epoch_start_.store(head_.load(std::memory_order_relaxed), std::memory_order_release);
}

void SwappableBackend::backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                                std::atomic<size_t>* done) {
  serving_.backend->backtest(x, series, ticks, out, done);  // leaves the serving backend reset
  epoch_start_.store(head_.load(std::memory_order_relaxed), std::memory_order_release);
}

void SwappableBackend::backtest_on_device(const float* x, size_t series, size_t ticks, float* out,
                                          std::atomic<size_t>* done) {
  serving_.backend->backtest_on_device(x, series, ticks, out, done);  // leaves the serving backend reset
  epoch_start_.store(head_.load(std::memory_order_relaxed), std::memory_order_release);
}

std::map<std::string, double> SwappableBackend::counters() const {
  auto c = serving_.backend->counters();
  if (swaps_ > 0) {
    c["swaps"] = double(swaps_);
    c["swap_catch_up_ticks"] = double(catch_up_ticks_);
  }
  return c;
}

void SwappableBackend::clear_counters() { serving_.backend->clear_counters(); }

std::map<std::string, std::string> SwappableBackend::facts() const {
  auto f = serving_.backend->facts();
  f["model_id"] = *serving_id_;
  return f;
}

void SwappableBackend::set_late_failure(std::string why) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  late_failure_ = std::move(why);
}

std::string SwappableBackend::late_failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return late_failure_;
}

bool SwappableBackend::swap_pending() const {
  const int s = state_.load(std::memory_order_acquire);
  return s == kPreparing || s == kReady || s == kTaking || s == kRetry;
}

void SwappableBackend::take_over() {
  int s = kReady;
  if (!state_.compare_exchange_strong(s, kTaking, std::memory_order_acq_rel)) return;  // cancelled meanwhile
  const long long head = head_.load(std::memory_order_relaxed), e = epoch_start_.load(std::memory_order_relaxed);
  // Where the new state must start: window mode, wherever the replay began (any start the worker chose
  // keeps the windows exact); streaming, K inputs before the next tick.
  const bool streaming = plan_.mode != Mode::window;
  const long long from = streaming ? std::max(e, head - plan_.warm_ticks) : ready_from_;
  long long seq = ready_seq_;
  Backend& b = *pending_.backend;
  if (ready_epoch_ != e || ready_from_ != from || head - ready_seq_ > kMaxTickThreadCatchUp) {
    if (!streaming || head - from > kMaxTickThreadCatchUp || ready_epoch_ != e) {
      state_.store(kRetry, std::memory_order_release);  // a reset, or too far behind: the worker goes on
      return;
    }
    b.reset();  // streaming with few warm ticks: rebuilt here
    seq = from;
  }
  std::string why;
  bool ok = true;
  try {
    for (; ok && seq < head; ++seq, ++catch_up_ticks_)
      ok = b.try_step({row(seq), size_t(in_)}, z_, &why) && b.try_finish_precompute(&why);
  } catch (const std::exception& ex) {
    ok = false;
    why = ex.what();
  }
  if (!ok) {
    set_late_failure("swap to model " + pending_.id + " failed while it caught up with the last ticks (" + why +
                     "); the old model goes on serving");
    retired_ = std::move(pending_);
    state_.store(kFailed, std::memory_order_release);
    return;
  }
  retired_ = std::move(serving_);
  serving_ = std::move(pending_);
  settle_ = serving_.backend.get();
  ids_.push_back(std::make_unique<std::string>(serving_.id));
  serving_id_ = ids_.back().get();
  ++swaps_;
  set_late_failure("");
  state_.store(kTaken, std::memory_order_release);
}

bool SwappableBackend::chase(Backend& b, const ReplayPlan& plan, long long* consumed, long long* epoch,
                             std::string* why) {
  const auto t0 = Clock::now();
  const bool streaming = plan.mode != Mode::window;
  std::vector<float> x(size_t(std::max(1, in_))), z(size_t(std::max(1, out_)));
  for (;;) {
    if (cancel_.load(std::memory_order_acquire)) {
      *why = "cancelled";
      return false;
    }
    const long long e = epoch_start_.load(std::memory_order_acquire);
    const long long head = head_.load(std::memory_order_acquire);
    if (streaming || *epoch != e || head - *consumed >= cap_) {
      // (Re)start: a fresh state, fed the inputs it depends on. Streaming always starts over: its state
      // must span the last K inputs at the switch, and feeding later ones would lengthen the span.
      b.reset();
      const long long r = streaming ? std::min(std::max(0LL, plan.warm_ticks - 1), head - e)
                                    : replay_ticks(plan, head - e, in_);
      *consumed = ready_from_ = head - r;
      *epoch = e;
    } else if (head - *consumed <= 1) {
      return true;  // the tick thread feeds the last one or two
    }
    bool restart = false;
    for (; *consumed < head; ++*consumed) {
      const long long seq = *consumed;
      std::memcpy(x.data(), row(seq), size_t(in_) * sizeof(float));
      // The row was whole if the writer had not yet begun the row that replaces it, nor a reset come.
      if (head_.load(std::memory_order_acquire) >= seq + cap_ || epoch_start_.load(std::memory_order_acquire) != e) {
        restart = true;
        *epoch = -1;
        break;
      }
      if (!b.try_step(x, z, why) || !b.try_finish_precompute(why)) return false;
    }
    if (streaming && !restart) return true;  // one input short of K: the switch's own tick is the last
    if (Clock::now() - t0 > kChaseLimit) {
      *why = "the new model could not catch up with the ticks in " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kChaseLimit).count()) +
             " s: it is slower than they arrive";
      return false;
    }
  }
}

void SwappableBackend::worker_main(std::function<ServedModel()> make, ReplayPlan plan) {
  auto keep_off_critical_core = [&] {
    if (!worker_cores_.empty()) util::set_thread_cores(pthread_self(), worker_cores_);
  };
  keep_off_critical_core();
  ServedModel b;
  std::string why;
  long long consumed = 0, epoch = -1;
  try {
    b = make();
    keep_off_critical_core();  // the cpu backend pins the thread that makes it to the critical core
    const std::string fam = family_of(*b.backend);
    if (fam != family_ && b.slot < 0)
      throw Error("swap: the new model would run on the " + fam + " kernel family, the serving one on " + family_ +
                  "; a live swap stays within one family (make a new engine instead)");
    if (!chase(*b.backend, plan, &consumed, &epoch, &why)) throw Error("swap: the new model failed to catch up: " + why);
  } catch (const std::exception& e) {
    worker_error_ = e.what();
    b = ServedModel{};
    state_.store(kIdle, std::memory_order_release);
    outcome_.store(kOutcomeFailed, std::memory_order_release);
    return;
  }
  for (;;) {
    pending_ = std::move(b);
    ready_seq_ = consumed;
    ready_epoch_ = epoch;
    state_.store(kReady, std::memory_order_release);
    outcome_.store(kOutcomeReady, std::memory_order_release);
    for (;;) {
      int s = state_.load(std::memory_order_acquire);
      if (s == kTaken || s == kFailed) {
        retired_ = ServedModel{};  // the old model (or the new one that failed), off the tick thread
        if (s == kTaken) {
          family_ = family_of(*settle_);  // read by the next swap's worker, after this one is joined
          try {
            settle_->settle_threads();  // onto the cores the old one just left
          } catch (const std::exception& e) {
            set_late_failure(std::string("the new model serves, but its threads stay on their staging cores: ") + e.what());
          }
        }
        return;
      }
      if (s == kRetry && cancel_.load(std::memory_order_acquire)) {
        pending_ = ServedModel{};  // handed back, and replaced meanwhile: nothing to chase for
        state_.store(kIdle, std::memory_order_release);
        return;
      }
      if (s == kRetry) break;
      if (s == kReady && cancel_.load(std::memory_order_acquire) &&
          state_.compare_exchange_strong(s, kIdle, std::memory_order_acq_rel)) {
        pending_ = ServedModel{};
        return;
      }
      std::this_thread::sleep_for(kPoll);
    }
    b = std::move(pending_);
    state_.store(kPreparing, std::memory_order_release);
    if (!chase(*b.backend, plan, &consumed, &epoch, &why)) {
      set_late_failure("swap to model " + b.id + " failed: " + why + "; the old model goes on serving");
      b = ServedModel{};
      state_.store(kIdle, std::memory_order_release);
      return;
    }
  }
}

void SwappableBackend::swap(const std::function<ServedModel()>& make, const ReplayPlan& plan) {
  std::lock_guard<std::mutex> lock(swap_mutex_);
  end_worker();  // a swap still waiting for its tick is replaced; a finished one is joined
  if (record_ticks(plan, in_) > cap_)
    throw Error("swap: the engine keeps " + std::to_string(cap_ - kRecordSlackTicks) +
                " ticks of inputs; the new model's state needs " + std::to_string(record_ticks(plan, in_) - kRecordSlackTicks));
  worker_error_.clear();
  plan_ = plan;
  outcome_.store(kOutcomePending, std::memory_order_relaxed);
  state_.store(kPreparing, std::memory_order_release);
  try {
    worker_ = util::start_thread([this, make, plan] { worker_main(make, plan); });
  } catch (const std::system_error& e) {
    state_.store(kIdle, std::memory_order_release);
    throw util::thread_start_error("the swap worker", e);
  }
  while (outcome_.load(std::memory_order_acquire) == kOutcomePending) std::this_thread::sleep_for(kPoll);
  if (outcome_.load(std::memory_order_acquire) == kOutcomeFailed) {
    worker_.join();
    throw Error(worker_error_ + "; the old model goes on serving");
  }
}

}  // namespace hotpath::engine
