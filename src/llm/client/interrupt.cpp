#include "llm/client/interrupt.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/error.hpp"

namespace hotpath::llm {

StopSignal::StopSignal() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) throw Error(std::string("eventfd: ") + std::strerror(errno));
}

StopSignal::~StopSignal() {
  if (fd_ >= 0) ::close(fd_);
}

void StopSignal::request() noexcept {
  flag_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(fd_, &one, sizeof one);  // never blocks: EFD_NONBLOCK
}

namespace {
std::atomic<StopSignal*> g_stop{nullptr};
std::atomic<int> g_count{0};

void on_signal(int sig) {
  const int saved_errno = errno;
  if (g_count.fetch_add(1) == 0) {
    static const char msg[] =
        "\nhotpath llm bench: interrupted: no more requests are sent; waiting for those in flight "
        "(Ctrl-C again to quit at once)\n";
    [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    if (StopSignal* s = g_stop.load()) s->request();
  } else {
    _exit(128 + sig);
  }
  errno = saved_errno;
}
}  // namespace

struct InterruptScope::Saved {
  struct sigaction old_int {}, old_term {};
};

InterruptScope::InterruptScope(StopSignal& stop) : saved_(new Saved) {
  g_count.store(0);
  g_stop.store(&stop);
  struct sigaction sa {};
  sa.sa_handler = &on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &saved_->old_int);
  sigaction(SIGTERM, &sa, &saved_->old_term);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &saved_->old_int, nullptr);
  sigaction(SIGTERM, &saved_->old_term, nullptr);
  g_stop.store(nullptr);
  delete saved_;
}

}  // namespace hotpath::llm
