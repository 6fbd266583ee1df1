// Worker threads pinned one per core that spin (with a pause instruction) waiting for work, so that
// handing them a job is one atomic store and no system call. Used for the precompute and run_batch.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "util/arch.hpp"
#include "util/threads.hpp"

namespace hotpath::cpu {

// fn(ctx, part, nparts) is run once for each part in [0, nparts); it must not throw.
using PoolJob = void (*)(void* ctx, int part, int nparts);

class SpinPool {
 public:
  // One worker per core id (-1: a worker left unpinned); throws hotpath::Error naming a core that cannot
  // be pinned or a worker that cannot be started (the others are joined first). Empty: no workers.
  // `role` names the threads; `doze` lets an idle worker poll every 50 us after ~2 ms without work (a
  // pool the critical step itself waits on must not: its next job would wait for the wake-up).
  // `staging` (non-empty): every worker starts on those cores instead, until settle() (a live swap's new
  // backend, made beside the serving one: engine/swap.hpp).
  explicit SpinPool(const std::vector<int>& cores, const char* role = "precompute worker", bool doze = true,
                    const std::vector<int>& staging = {});
  ~SpinPool() = default;  // threads_ stops and joins the workers
  SpinPool(const SpinPool&) = delete;
  SpinPool& operator=(const SpinPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Hands the job to every worker and returns at once. Not while a job is running.
  void start(PoolJob fn, void* ctx);
  // Spins until every worker has finished the job given by start().
  void wait() const;
  // The same, calling idle() between polls (cheap work for a thread that would only spin).
  template <class F>
  void wait_with(F&& idle) const {
    const uint64_t g = gen_.load(std::memory_order_relaxed);
    for (const Done& d : done_)
      while (d.gen.load(std::memory_order_acquire) != g) idle();
  }
  // Pins each worker to its own core (the constructor's `cores`); any thread, while jobs run. Throws
  // hotpath::Error naming a core that cannot be pinned.
  void settle();
  // Nanoseconds the slowest worker spent in the last job (valid after wait()).
  int64_t last_busy_ns() const;

 private:
  void worker(int part);

  struct alignas(64) Done {
    std::atomic<uint64_t> gen{0};
    std::atomic<int64_t> busy_ns{0};
  };
  // Written by the caller, read by every worker: its own cache line.
  alignas(64) std::atomic<uint64_t> gen_{0};
  PoolJob fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
  const bool doze_;
  const std::vector<int> cores_;
  alignas(64) std::vector<Done> done_;
  util::ThreadGroup threads_;  // last: destroyed (stopped, joined) before what the workers use
};

using arch::cpu_relax;

}  // namespace hotpath::cpu
