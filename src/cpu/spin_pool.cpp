#include "cpu/spin_pool.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "util/clock.hpp"

namespace hotpath::cpu {

SpinPool::SpinPool(const std::vector<int>& cores, const char* role, bool doze, const std::vector<int>& staging)
    : doze_(doze), cores_(cores), done_(cores.size()), threads_([this] {
        stop_.store(true, std::memory_order_release);
        gen_.fetch_add(1, std::memory_order_release);
      }) {
  // A worker that cannot be started or pinned throws; threads_ then stops and joins the others.
  for (size_t i = 0; i < cores.size(); ++i) {
    threads_.start("cpu backend " + std::string(role) + " " + std::to_string(i + 1) + " of " + std::to_string(cores.size()),
                   [this, i] { worker(static_cast<int>(i)); });
    if (!staging.empty())
      util::pin_thread(threads_.back().native_handle(), staging, "cpu backend (staged for a swap)");
    else if (cores[i] >= 0)
      util::pin_thread(threads_.back().native_handle(), {cores[i]}, "cpu backend");
  }
}

void SpinPool::settle() {
  for (size_t i = 0; i < cores_.size(); ++i)
    if (cores_[i] >= 0) util::pin_thread(threads_.native_handle(i), {cores_[i]}, "cpu backend");
}

void SpinPool::start(PoolJob fn, void* ctx) {
  fn_ = fn;
  ctx_ = ctx;
  gen_.fetch_add(1, std::memory_order_release);
}

void SpinPool::wait() const {
  const uint64_t g = gen_.load(std::memory_order_relaxed);
  for (const Done& d : done_)
    while (d.gen.load(std::memory_order_acquire) != g) cpu_relax();
}

int64_t SpinPool::last_busy_ns() const {
  int64_t m = 0;
  for (const Done& d : done_) m = std::max(m, d.busy_ns.load(std::memory_order_relaxed));
  return m;
}

void SpinPool::worker(int part) {
  const int nparts = static_cast<int>(done_.size());
  uint64_t seen = 0;
  for (;;) {
    // Spin on the generation word. After ~2 ms without work, poll every 50 us instead so an idle
    // backend does not hold its cores at 100%; ticks that come faster than that never sleep, and the
    // critical step never waits for a worker (only finish_precompute does).
    uint64_t g;
    int64_t idle_since = 0;
    unsigned spins = 0;
    while ((g = gen_.load(std::memory_order_acquire)) == seen) {
      cpu_relax();
      if (doze_ && (++spins & 1023u) == 0) {
        const int64_t t = util::steady_ns();
        if (idle_since == 0)
          idle_since = t;
        else if (t - idle_since > 2'000'000)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    const int64_t t0 = util::steady_ns();
    fn_(ctx_, part, nparts);
    done_[part].busy_ns.store(util::steady_ns() - t0, std::memory_order_relaxed);
    done_[part].gen.store(g, std::memory_order_release);
  }
}

}  // namespace hotpath::cpu
