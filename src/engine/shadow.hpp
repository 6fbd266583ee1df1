// A backend run alongside another on its own thread (and core), with its own state: every tick is
// handed to it, and its answer is there when the primary misses a deadline (the engine's fallback).
#pragma once
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"

namespace hotpath::engine {

class Shadow {
 public:
  // cpu >= 0: the worker thread runs on that core (a preference: a failure to pin is recorded);
  // `staging` (non-empty): on those cores instead until settle() (a live swap's new backend).
  Shadow(std::unique_ptr<Backend> backend, int cpu, std::vector<int> staging = {});
  ~Shadow();
  Shadow(const Shadow&) = delete;
  Shadow& operator=(const Shadow&) = delete;

  // Queues the next tick (waits while kRing ticks are unanswered); returns its number for result().
  long long submit(std::span<const float> x);
  // The shadow's answer to tick number n (waits for it).
  void result(long long n, std::span<float> out);
  // Drains the queue and resets the shadow backend's state: the next tick starts a fresh stream.
  void reset();
  // Ticks the worker has answered since construction (never rewound).
  long long answered() const { return done_.load(std::memory_order_acquire); }
  const Backend& backend() const { return *backend_; }
  Backend& backend() { return *backend_; }
  // The worker onto its own core, and the backend's threads onto theirs (Backend::settle_threads).
  void settle();

  static constexpr int kRing = 64;

 private:
  void check_failure() const;
  void run(std::stop_token stop, int cpu, const std::vector<int>& staging);

  std::unique_ptr<Backend> backend_;
  int I_, O_;
  std::vector<float> x_, z_;
  // Each counter has one writer (submitted_: the caller's thread, done_: the worker) and only grows, so
  // neither side can see the other's counter rewound under it; reset() changes no counter.
  alignas(64) std::atomic<long long> submitted_{0};
  alignas(64) std::atomic<long long> done_{0};
  alignas(64) std::atomic<bool> failed_{false};
  std::string failure_;  // written by the worker before failed_ is released
  int cpu_;
  std::vector<int> staging_;
  std::jthread worker_;  // last member: stopped and joined before the rest is destroyed
};

}  // namespace hotpath::engine
