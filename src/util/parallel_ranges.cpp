#include "util/parallel_ranges.hpp"

#include <algorithm>
#include <thread>

namespace hotpath::util {

ParallelRanges::ParallelRanges(int threads, const std::string& name)
    : n_(std::max(1, threads)), threads_([this] {
        {
          std::lock_guard lock(m_);
          stop_ = true;
        }
        go_cv_.notify_all();
      }) {
  for (int k = 1; k < n_; ++k)
    threads_.start(name + " thread " + std::to_string(k + 1) + " of " + std::to_string(n_), [this, k] { helper(k); });
}

ParallelRanges::~ParallelRanges() { threads_.stop_and_join(); }

int ParallelRanges::default_threads() {
  const int cores = int(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 8);
}

// Worker k's piece of the current job: [n k / used, n (k + 1) / used).
void ParallelRanges::piece(int k) {
  const size_t begin = n_items_ * size_t(k) / size_t(used_), end = n_items_ * size_t(k + 1) / size_t(used_);
  if (begin >= end) return;
  try {
    (*fn_)(begin, end);
  } catch (...) {
    std::lock_guard lock(m_);
    if (!error_) error_ = std::current_exception();
  }
}

void ParallelRanges::helper(int k) {
  unsigned long long seen = 0;
  for (;;) {
    {
      std::unique_lock lock(m_);
      go_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (k >= used_) continue;  // not needed for this job (pending_ did not count it)
    }
    piece(k);
    bool last = false;
    {
      std::lock_guard lock(m_);
      last = --pending_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

void ParallelRanges::run(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  const size_t by_grain = std::max<size_t>(1, n / std::max<size_t>(1, grain));
  const int used = int(std::min<size_t>(size_t(n_), by_grain));
  if (used == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(m_);
    fn_ = &fn;
    n_items_ = n;
    used_ = used;
    pending_ = used - 1;
    error_ = nullptr;
    ++generation_;
  }
  go_cv_.notify_all();
  piece(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(m_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    error = std::exchange(error_, nullptr);
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hotpath::util
