#include "engine/shadow.hpp"

#include <pthread.h>

#include <cstring>

#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::engine {

Shadow::Shadow(std::unique_ptr<Backend> backend, int cpu, std::vector<int> staging)
    : backend_(std::move(backend)),
      I_(backend_->config().input_size),
      O_(backend_->config().output_size),
      x_(size_t(kRing) * I_),
      z_(size_t(kRing) * O_),
      cpu_(cpu),
      staging_(std::move(staging)),
      worker_(util::start_jthread("the fallback worker", [this](std::stop_token stop) { run(stop, cpu_, staging_); })) {}

void Shadow::settle() {
  if (cpu_ >= 0 && !staging_.empty()) util::try_pin_thread(worker_.native_handle(), {cpu_}, "fallback worker");
  backend_->settle_threads();
}

Shadow::~Shadow() = default;  // worker_ (the last member) requests stop and joins first

long long Shadow::submit(std::span<const float> x) {
  const long long t = submitted_.load(std::memory_order_relaxed);
  while (t - done_.load(std::memory_order_acquire) >= kRing) {
    check_failure();  // a failed worker answers nothing more: never wait for it
    arch::cpu_relax();
  }
  std::memcpy(&x_[size_t(t % kRing) * I_], x.data(), sizeof(float) * size_t(I_));
  submitted_.store(t + 1, std::memory_order_release);
  return t;
}

void Shadow::result(long long n, std::span<float> out) {
  while (done_.load(std::memory_order_acquire) <= n) {
    check_failure();
    arch::cpu_relax();
  }
  std::memcpy(out.data(), &z_[size_t(n % kRing) * O_], sizeof(float) * size_t(O_));
}

void Shadow::reset() {
  // Once done_ == submitted_ (acquire) the worker has finished every tick and waits for submitted_ to
  // grow, which only this thread does: it does not touch the backend while it is reset here.
  while (done_.load(std::memory_order_acquire) < submitted_.load(std::memory_order_relaxed)) {
    check_failure();
    arch::cpu_relax();
  }
  backend_->reset();  // published to the worker by the next submit's release store
}

void Shadow::check_failure() const {
  if (failed_.load(std::memory_order_acquire)) throw BackendError("fallback: the " + backend_->name() + " backend failed: " + failure_);
}

void Shadow::run(std::stop_token stop, int cpu, const std::vector<int>& staging) {
  // A preference: a failure is recorded (and reported by bench), the fallback still answers.
  if (cpu >= 0) util::try_pin_thread(pthread_self(), staging.empty() ? std::vector<int>{cpu} : staging, "fallback worker");
  while (!stop.stop_requested()) {
    const long long t = done_.load(std::memory_order_relaxed);  // this thread is its only writer
    if (t >= submitted_.load(std::memory_order_acquire)) {
      arch::cpu_relax();
      continue;
    }
    try {
      backend_->process(std::span<const float>(&x_[size_t(t % kRing) * I_], I_),
                        std::span<float>(&z_[size_t(t % kRing) * O_], O_));
    } catch (const std::exception& e) {
      failure_ = e.what();
      failed_.store(true, std::memory_order_release);
      return;  // answers nothing more; every wait on it sees failed_
    }
    done_.store(t + 1, std::memory_order_release);
  }
}

}  // namespace hotpath::engine
