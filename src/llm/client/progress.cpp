#include "llm/client/progress.hpp"

#include <chrono>
#include <unistd.h>

#include "llm/common/text.hpp"

namespace hotpath::llm {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::string format_progress(const ProgressSnapshot& s, const std::string& label) {
  std::string o;
  if (!label.empty()) o += label + "  ";
  o += fixed(s.elapsed_s, 1) + " s  sent " + std::to_string(s.sent) + "  completed " + std::to_string(s.completed) +
       "  failed " + std::to_string(s.failed) + "  req/s " + fixed(s.rps, 1);
  if (s.total && *s.total > 0) {
    const double pct = 100.0 * static_cast<double>(s.completed + s.failed) / static_cast<double>(*s.total);
    o += "  [" + fixed(pct, 1) + "%]";
  }
  return o;
}

bool progress_enabled(ProgressMode mode, bool quiet, int fd) {
  if (quiet || mode == ProgressMode::off) return false;
  return mode == ProgressMode::on || isatty(fd) == 1;
}

ProgressLine::ProgressLine(const LiveCounters& counters, std::FILE* out, std::optional<std::uint64_t> total,
                           std::string label, double interval_s)
    : counters_(counters), out_(out), total_(total), label_(std::move(label)), interval_s_(interval_s) {
  thread_ = std::thread([this] { loop(); });
}

ProgressLine::~ProgressLine() { stop(); }

void ProgressLine::loop() {
  const auto t0 = Clock::now();
  auto last = t0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const bool stop = cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stopping_; });
    const auto now = Clock::now();
    draw(std::chrono::duration<double>(now - t0).count(), std::chrono::duration<double>(now - last).count(), stop);
    last = now;
    if (stop) break;
  }
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressLine::draw(double elapsed_s, double dt_s, bool final) {
  ProgressSnapshot s;
  s.elapsed_s = elapsed_s;
  s.sent = counters_.sent.load(std::memory_order_relaxed);
  s.completed = counters_.completed.load(std::memory_order_relaxed);
  s.failed = counters_.failed.load(std::memory_order_relaxed);
  // The final line gives the mean over the whole run: its last interval may be a few ms long.
  const double span = final ? elapsed_s : dt_s;
  const std::uint64_t done = final ? s.completed : s.completed - last_done_;
  s.rps = span > 0 ? static_cast<double>(done) / span : 0.0;
  s.total = total_;
  last_done_ = s.completed;
  std::string line = format_progress(s, label_);
  // Blank out what is left of a longer previous line (no terminal escapes: the output may be a file).
  const std::size_t len = line.size();
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  std::fputc('\r', out_);
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
}

void ProgressLine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hotpath::llm
