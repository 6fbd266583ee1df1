// A few threads that split one range of work between them and the calling thread: for bulk copies a
// single core cannot keep up with (staging a backtest's inputs into pinned memory for the GPU, where one
// memcpy thread moves a few GB/s and the PCIe link several times that).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "util/threads.hpp"

namespace hotpath::util {

class ParallelRanges {
 public:
  // threads - 1 helper threads (the caller is the first worker); 1: everything on the caller. Throws
  // hotpath::Error when a thread cannot be started.
  explicit ParallelRanges(int threads, const std::string& name = "parallel copy");
  ~ParallelRanges();
  ParallelRanges(const ParallelRanges&) = delete;
  ParallelRanges& operator=(const ParallelRanges&) = delete;

  int threads() const { return n_; }
  // fn(begin, end) over contiguous pieces of [0, n), one per worker, each at least `grain` long (fewer
  // workers when n is short: a wake-up costs more than a small copy); returns once all are done. The
  // first exception a piece throws is rethrown here after every piece has finished. One caller at a time.
  void run(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  // A worker count for copies on this machine: half its cores, between 1 and 8.
  static int default_threads();

 private:
  void helper(int k);
  void piece(int k);

  const int n_;
  std::mutex m_;
  std::condition_variable go_cv_, done_cv_;
  unsigned long long generation_ = 0;  // bumped by run() for every job
  bool stop_ = false;
  int pending_ = 0;  // helpers still working on the current job
  // The current job: workers [0, used_) take a piece each.
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_items_ = 0;
  int used_ = 0;
  std::exception_ptr error_;
  ThreadGroup threads_;  // last: stopped and joined first
};

}  // namespace hotpath::util
