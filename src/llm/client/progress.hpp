// The live progress line of a run on a terminal: every 0.5 s one line on stderr, rewritten in place
// with '\r', read from the LiveCounters the client increments.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "llm/report/report.hpp"
#include "util/progress_bar.hpp"

namespace hotpath::llm {

struct ProgressSnapshot {
  double elapsed_s = 0;
  std::uint64_t sent = 0, completed = 0, failed = 0;
  double rps = 0;                       // completions per second over the last interval (the final line: the run)
  std::optional<std::uint64_t> total;   // requests of the run when known in advance
};

// "12.5 s  sent 1200  completed 1150  failed 3  req/s 95.2  [48.0%]"; the percentage is
// (completed + failed) / total and appears only when the total is known.
std::string format_progress(const ProgressSnapshot& s, const std::string& label = "");

using util::ProgressMode;  // automatic, on, off: one definition with `hotpath run`'s bar
// Whether to show the line: never under --quiet; --progress / --no-progress force it; otherwise
// only when `fd` is a terminal.
bool progress_enabled(ProgressMode mode, bool quiet, int fd);

class ProgressLine {
 public:
  // Writes to `out` (stderr in the CLI) every `interval_s` until stop(); `label` prefixes the line
  // (a sweep point).
  ProgressLine(const LiveCounters& counters, std::FILE* out, std::optional<std::uint64_t> total,
               std::string label = "", double interval_s = 0.5);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  // Writes the final counts and a newline, so what follows starts on a line of its own. Idempotent.
  void stop();

 private:
  void loop();
  void draw(double elapsed_s, double dt_s, bool final);

  const LiveCounters& counters_;
  std::FILE* out_;
  std::optional<std::uint64_t> total_;
  std::string label_;
  double interval_s_;
  std::uint64_t last_done_ = 0;
  std::size_t last_len_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, stopped_ = false;
  std::thread thread_;
};

}  // namespace hotpath::llm
