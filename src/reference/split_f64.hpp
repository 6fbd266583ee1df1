// A float64 streaming LSTM whose every step is split over several threads by hidden units, for checking
// long streaming runs about as fast as a backend answers them. One float64 step of a model like
// vollo_small reads 12.6 MB of weights: on one core that comes from L3 or memory (~0.45 ms a step); split
// n ways, each thread keeps its own packed rows in its own L2 and the step is n times shorter, plus one
// barrier per layer. Weights that are all floats (fp32 files, rounded models) are kept as floats, the same
// values in half the bytes; step_many takes a batch of ticks layer by layer, each input-side weight read
// once for four ticks.
//
// The arithmetic is FastF64's (float64, libm sigmoid/tanh) and so is the summation order: each gate row
// starts from b_ih + b_hh, adds w_ih[r][k] * x[k] for k = 0, 1, ..., then w_hh[r][k] * h[k] for k = 0, 1,
// ..., in one accumulator; the head starts from its bias and adds w[o][k] * h[k] in order. Which thread
// computes a row, and which vector lane, never changes its value, so any thread count gives the same
// bits; and since split_f64.cpp is compiled without FMA contraction (a fused multiply-add rounds once),
// on x86-64 those bits are FastF64's.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/model.hpp"
#include "reference/reference.hpp"
#include "util/threads.hpp"

namespace hotpath::reference {

// n workers: the thread that calls run() (worker 0) and n - 1 helper threads. run(job, ctx) runs
// job(ctx, k) on every worker k and returns once all are done; inside a job, sync() waits until every
// worker has reached it. Waiting threads spin (with a pause), then yield, for a few tens of microseconds
// in all, then sleep on a futex, so a team with no work costs no core. One caller at a time.
class F64Team {
 public:
  using Job = void (*)(void* ctx, int worker);
  // on_start(k) runs first on helper k (1 .. n - 1), e.g. to pin it. Throws hotpath::Error when a
  // thread cannot be started.
  explicit F64Team(int threads, std::function<void(int)> on_start = {});
  ~F64Team();
  F64Team(const F64Team&) = delete;
  F64Team& operator=(const F64Team&) = delete;

  int size() const { return n_; }
  void run(Job job, void* ctx);
  void sync();

 private:
  void helper(int k);

  const int n_;
  // The job's generation, bumped by run(): its own cache line, read by every helper.
  alignas(64) std::atomic<uint32_t> go_{0};
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;  // read by helpers after a go_ they acquired
  alignas(64) std::atomic<uint32_t> arrived_{0};
  alignas(64) std::atomic<uint32_t> passed_{0};  // the barrier's generation
  // Threads asleep (or about to be) on go_ and on passed_.
  alignas(64) std::atomic<int> go_sleepers_{0}, passed_sleepers_{0};
  util::ThreadGroup threads_;                    // last: stopped and joined first
};

class SplitF64 {
 public:
  // Packs the model for `team`'s workers (each packs and first touches its own slice). The team must
  // outlive this object; several SplitF64 may share one team (stepped one after the other).
  SplitF64(const Model& m, F64Team& team);
  ~SplitF64();
  SplitF64(const SplitF64&) = delete;
  SplitF64& operator=(const SplitF64&) = delete;

  // One time step of every layer on x (I values), from the calling thread (worker 0).
  void step(std::span<const double> x);
  void step(std::span<const float> x);
  // T = xs.size() / I time steps, xs [T][I]: the same bits as T calls of step(), faster by about the
  // batch's reuse of the input-side weights (layer by layer, each weight read once for four ticks).
  void step_many(std::span<const double> xs);
  // The head on the last layer's h: O values into z.
  void head(std::span<double> z) const;
  // Back to zero state.
  void reset();
  // h and c of every layer (for tests).
  LstmState state() const;
  const ModelConfig& config() const { return cfg_; }
  int threads() const { return team_.size(); }

  // How many of `asked` threads are worth a barrier per layer for a model of this shape: each thread
  // gets at least a block of 4 hidden units and at least kMinMultiplyAdds of a step's multiply-adds.
  static int useful_threads(const ModelConfig& cfg, int asked);
  static constexpr long long kMinMultiplyAdds = 1 << 16;

 private:
  struct Slice;
  struct Packing {
    SplitF64* self;
    const Model* model;
  };
  static void pack_job(void* ctx, int worker);  // ctx: a Packing
  static void step_job(void* ctx, int worker);
  static void many_job(void* ctx, int worker);
  template <class W>
  static void step_slice(SplitF64& self, Slice& s);  // W: how the slice keeps its weights
  template <class W>
  static void many_slice(SplitF64& self, Slice& s);

  ModelConfig cfg_;
  F64Team& team_;
  bool floats_;  // every LSTM weight is a float: the slices keep them as floats (the same values)
  std::vector<std::unique_ptr<Slice>> slices_;  // one per worker
  // h of every layer twice: a step reads the previous tick's h[l] from one buffer while it writes the
  // new one into the other, so one barrier per layer suffices. cur_ is the buffer holding the latest.
  std::vector<double> h_[2];  // [L][H]
  int cur_ = 0;
  std::vector<double> x_;                  // the step's input (I), written by worker 0 before run()
  // step_many: its inputs [T][I], the layers' h of every tick of the batch [T][H] (layer l writes
  // seq_[l % 2], layer l + 1 reads it), T
  std::vector<double> xs_;
  std::vector<double> seq_[2];
  int many_ = 0;
  std::unique_ptr<double[], void (*)(void*)> head_w_;  // [ceil(O / 16)][H][16]
  std::vector<double> head_b_;             // [ceil(O / 16) * 16], zeros without a bias
};

// Many independent streaming states stepped in lockstep, every step split over a team's workers by hidden
// units: worker k owns the same units of every state, so each weight is read by one thread once per step
// for all the states (from that thread's caches, in runs of kChunkColumns columns per four states),
// instead of once per state or per thread. For the checker's chunks of a long streaming run (a run cut in
// S pieces checked side by side): a model like vollo_large, whose weights no cache holds, then costs its
// arithmetic rather than its memory traffic.
//
// The arithmetic and every row's summation order are SplitF64's: the same bits for each state whatever
// the thread and state counts, and on x86-64 the bits of FastF64::step on it alone (as SplitF64's).
//
// step_worker() runs inside a team job on every worker (each with its own index), so that a job can do
// its own work around the step (the checker makes each state's input and checks its outputs on the
// worker that owns it); it syncs the team inside, and on return every state's new h is visible to every
// worker. head(), state() and set_state() read or write one state; they may run on any worker after a
// step has returned, each state from one worker at a time (the checker's: its owner's), or outside jobs.
class SplitStatesF64 {
 public:
  // Packs the model for `team`'s workers (each packs and first touches its own slice); `states` zero states.
  SplitStatesF64(const Model& m, F64Team& team, int states);
  ~SplitStatesF64();
  SplitStatesF64(const SplitStatesF64&) = delete;
  SplitStatesF64& operator=(const SplitStatesF64&) = delete;

  int states() const { return states_; }
  const ModelConfig& config() const { return cfg_; }
  // One step of every state: state s on xs[s * I .. s * I + I). Every worker of the team calls it, in a
  // job, with the same xs (written before the call and not changed until every worker has returned).
  void step_worker(int worker, const double* xs);
  // The head on state s's last layer: O values into z.
  void head(int s, std::span<double> z) const;
  LstmState state(int s) const;
  void set_state(int s, const LstmState& st);

  // Columns of a weight block read per pass over the states (16 rows x 128 columns of two blocks: 32 KiB,
  // in a core's L1 while four states at a time use them).
  static constexpr int kChunkColumns = 128;

 private:
  struct Slice;
  void step_slice(Slice& s, const double* xs);

  ModelConfig cfg_;
  F64Team& team_;
  int states_;
  std::vector<std::unique_ptr<Slice>> slices_;  // one per worker
  std::vector<double> h_;                        // [S][L][H]: every state's h, one buffer (two barriers a layer)
  std::unique_ptr<double[], void (*)(void*)> head_w_;
  std::vector<double> head_b_;
};

}  // namespace hotpath::reference
