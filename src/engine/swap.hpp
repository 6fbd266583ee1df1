// Live model swap (docs/production.md, "Swapping a model while it serves"): the backend an engine serves,
// wrapped so that a new model is made ready on a worker thread while the old one keeps answering, and
// takes over at a tick boundary. The wrapper keeps a record of the last inputs; the new model's state is
// rebuilt from it, so in window mode the first tick it answers is bit-identical to an engine that had
// served it from the start.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "model/model.hpp"

namespace hotpath::engine {

// How a new model's state is rebuilt from the record.
struct ReplayPlan {
  Mode mode = Mode::window;
  int window = 1;            // W, window mode
  long long history = 0;     // inputs a rolling scaler's statistics span (its N; 0 without one)
  long long warm_ticks = 0;  // streaming: the new model's state from zero over the last K inputs
};
// How many of the last inputs a fresh backend is fed when the engine has consumed `ticks` since its last
// reset. Window mode: every input since the reset while that is short, else at least W-1 (and the
// scaler's N) and congruent to `ticks` modulo replay_period, so the new backend's open windows sit in
// the same ring slots as those of an engine that served it from the start (the same columns of the same
// products), and a rolling scaler's ring and its periodic exact re-summing (every N ticks) are in the
// same phase: the same bits. Streaming: the last K (warm_ticks), or all there are.
long long replay_ticks(const ReplayPlan& plan, long long ticks, int input_size);
// W, or lcm(W, N) with a rolling scaler while that many inputs take at most kMaxReplayPeriodBytes (past
// it W: the rolling statistics then differ from a fresh engine's by the rounding of their sums).
long long replay_period(const ReplayPlan& plan, int input_size);
inline constexpr double kMaxReplayPeriodBytes = 64.0 * (1 << 20);
// The record's length in ticks for a plan's worst case, plus room for the worker to fall behind the
// feed while it replays.
long long record_ticks(const ReplayPlan& plan, int input_size);
inline constexpr long long kRecordSlackTicks = 4096;
// A new backend more than this many ticks behind the feed when it would take over is left to the worker
// to catch up: the tick thread only feeds it the last few, between ticks.
inline constexpr long long kMaxTickThreadCatchUp = 4;

// A model and the backend serving it.
struct ServedModel {
  std::unique_ptr<Backend> backend;
  std::shared_ptr<const Model> model;
  std::string id;  // model_id(): the content hash
  int slot = -1;   // the half of the engine's swap room its kernels run on (engine/swap_room.hpp); -1: none
};

class SwappableBackend final : public Backend {
 public:
  // `record` ticks of inputs are kept (record_ticks(plan) for the largest plan a swap may ask);
  // `worker_cores`: where the swap worker runs (not the critical core; empty: unpinned).
  SwappableBackend(ServedModel first, long long record, std::vector<int> worker_cores);
  ~SwappableBackend() override;

  std::string name() const override { return serving_.backend->name(); }
  std::string variant() const override { return serving_.backend->variant(); }
  Precision precision() const override { return serving_.backend->precision(); }
  long long ticks() const override { return head_.load(std::memory_order_relaxed) - epoch_start_; }

  void step(std::span<const float> x, std::span<float> out) override;
  bool try_step(std::span<const float> x, std::span<float> out, std::string* why) override;
  void finish_precompute() override;
  bool try_finish_precompute(std::string* why) override;
  void reset() override;
  std::span<const double> last_output_f64() const override { return serving_.backend->last_output_f64(); }
  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override {
    serving_.backend->run_batch(x, batch, window, out);
  }
  void run_batch_on_device(const float* x, size_t batch, size_t window, float* out) override {
    serving_.backend->run_batch_on_device(x, batch, window, out);
  }
  void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done) override;
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override;
  std::map<std::string, double> counters() const override;
  void clear_counters() override;
  std::map<std::string, std::string> facts() const override;

  // Makes `make()`'s model ready to take over and returns once it is: made (and warmed) on a worker
  // thread, fed the recorded inputs by replay_ticks(plan) and then every tick that arrives meanwhile.
  // The tick thread switches to it after the next tick it answers (finish_precompute), feeding it first
  // the few inputs it has not yet seen; from the tick after that on, the new model answers. Safe to call
  // from any thread while one thread ticks (the only call that is), or from the tick thread between
  // ticks. Throws hotpath::Error (nothing changed, the old model serving) when the new backend cannot be
  // made, is of another kernel family than the serving one (unless made in a swap room: its own SMs), or
  // fails while catching up. Once it serves, the worker destroys the old backend and then moves the new
  // one's threads from their staging cores onto their own (Backend::settle_threads). A swap asked
  // while another is still waiting for its tick replaces it.
  void swap(const std::function<ServedModel()>& make, const ReplayPlan& plan);

  // The tick thread's view (not thread-safe, like the other calls):
  const Model& model() const { return *serving_.model; }
  // The model that answered the last tick (the serving one before any tick).
  const std::string& answering_id() const { return *answering_id_; }
  const std::string& serving_id() const { return *serving_id_; }
  // The serving model's ServedModel::slot. Also read by a swap's make() on the worker (no other swap
  // runs then, so the serving model cannot change under it).
  int serving_slot() const { return serving_.slot; }
  long long swaps() const { return swaps_; }
  bool swap_pending() const;
  // A swap is ready: the next finish_precompute() hands over (unless the tick thread finds it too far
  // behind). For the engine's telemetry, which folds the old backend's counts before it goes.
  bool take_over_due() const { return state_.load(std::memory_order_relaxed) == kReady; }
  // Why the last swap that had returned failed before its switch (empty when none did, and after a
  // swap that took over). Any thread.
  std::string late_failure() const;

 private:
  enum State : int { kIdle, kPreparing, kReady, kTaking, kTaken, kRetry, kFailed };
  enum Outcome : int { kOutcomePending, kOutcomeReady, kOutcomeFailed };  // what swap() waits for

  void record(std::span<const float> x);
  const float* row(long long seq) const { return ring_.data() + size_t(seq % cap_) * size_t(in_); }
  void take_over();
  void worker_main(std::function<ServedModel()> make, ReplayPlan plan);
  // Feeds the new backend every recorded input up to the head, restarting from replay_ticks() after a
  // reset or when the feed overtook the record; returns false with *why on failure.
  bool chase(Backend& b, const ReplayPlan& plan, long long* consumed, long long* epoch, std::string* why);
  void end_worker();
  void set_late_failure(std::string why);

  ServedModel serving_;
  const std::string* serving_id_;    // ids_'s entry of the serving model
  const std::string* answering_id_;  // the one that answered the last tick
  std::string family_;               // the serving backend's kernel family (facts), "" for none
  const int in_, out_;
  const long long cap_;
  std::vector<float> ring_;  // cap_ rows of I inputs; row seq % cap_ holds input seq
  long long write_row_ = 0;  // head_ % cap_
  // Written by the tick thread only; the worker reads them.
  std::atomic<long long> head_{0};         // inputs recorded since creation
  std::atomic<long long> epoch_start_{0};  // head_ at the last reset (or backtest)
  long long swaps_ = 0, catch_up_ticks_ = 0;
  std::vector<float> z_;
  mutable std::mutex failure_mutex_;
  std::string late_failure_;

  // The swap in flight: `pending_` belongs to the worker except between kReady and kTaken/kRetry/kFailed
  // (the tick thread's); `retired_` is what the worker destroys once the tick thread is done with it.
  std::mutex swap_mutex_;  // one swap() at a time
  std::atomic<int> state_{kIdle};
  std::atomic<int> outcome_{kOutcomePending};
  std::atomic<bool> cancel_{false};
  ServedModel pending_, retired_;
  Backend* settle_ = nullptr;      // the new serving backend, for the worker to settle once retired_ is gone
  ReplayPlan plan_;                // the swap in flight's
  long long ready_seq_ = 0;        // the inputs the new backend has consumed (head_ when it was ready)
  long long ready_from_ = 0;       // the first of them since its reset
  long long ready_epoch_ = 0;
  std::string worker_error_;
  std::vector<std::unique_ptr<std::string>> ids_;  // every id that served, for answering_id_
  std::vector<int> worker_cores_;
  std::thread worker_;
};

}  // namespace hotpath::engine
