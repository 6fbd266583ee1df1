#include "util/progress_bar.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <system_error>

namespace hotpath::util {

std::string si(double v) {
  static constexpr const char* kSuffix[] = {"", "k", "M", "G", "T", "P"};
  int k = 0;
  while (std::fabs(v) >= 999.5 && k < 5) {
    v /= 1000;
    ++k;
  }
  char buf[32];
  if (k == 0) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, std::fabs(v) >= 99.95 ? "%.0f%s" : std::fabs(v) >= 9.995 ? "%.1f%s" : "%.2f%s",
                     v, kSuffix[k]);
  return buf;
}

std::string clock_time(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long long s = std::llround(std::min(seconds, 360000.0 * 24));  // past 10,000 days it is all the same
  char buf[48];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

std::string format_progress(size_t done, size_t total, double elapsed_s, const std::string& unit,
                            size_t done_at_start) {
  constexpr int kWidth = 20;
  done = std::min(done, total);
  done_at_start = std::min(done_at_start, done);
  const double fraction = total == 0 ? 1.0 : double(done) / double(total);
  const int filled = int(fraction * kWidth);  // a cell fills only when its share is done
  const double rate = elapsed_s > 0 ? double(done - done_at_start) / elapsed_s : 0.0;
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3d%%", int(fraction * 100));  // 100% only when all is done
  std::string line = "[" + std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.') + "] " +
                     pct + "  " + std::to_string(done) + "/" + std::to_string(total) + " " + unit + "  " +
                     si(rate) + " " + unit + "/s  ETA ";
  line += done == done_at_start || rate <= 0 ? "--:--" : clock_time(double(total - done) / rate);
  return line;
}

bool progress_wanted(ProgressMode mode) {
  if (mode != ProgressMode::automatic) return mode == ProgressMode::on;
  return ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(const std::atomic<size_t>& done, size_t total, std::FILE* out, Options options)
    : done_(done), total_(total), done_at_start_(done.load(std::memory_order_relaxed)), out_(out),
      options_(std::move(options)) {
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::system_error&) {
    // No thread (a process limit): the run goes on without a bar.
  }
}

void ProgressBar::loop() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::unique_lock<std::mutex> lock(mu_);
  // Finished within the delay: quiet. No delay: shown however short the run (at least its final state).
  if (options_.delay_s > 0 &&
      cv_.wait_for(lock, std::chrono::duration<double>(options_.delay_s), [this] { return stopping_; }))
    return;
  for (;;) {
    draw(seconds());
    if (cv_.wait_for(lock, std::chrono::duration<double>(options_.interval_s), [this] { return stopping_; })) break;
  }
  draw(seconds());  // the state reached: 100% when the run finished
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressBar::draw(double elapsed_s) {
  std::string line = format_progress(done_.load(std::memory_order_relaxed), total_, elapsed_s, options_.unit, done_at_start_);
  // Blank what is left of a longer previous line (no terminal escapes).
  const size_t len = line.size();
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  std::fputc('\r', out_);
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  shown_ = true;
}

void ProgressBar::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hotpath::util
