// A progress bar for long runs on a terminal: one line on stderr, redrawn in place with '\r' a few times
// a second from a counter that the working thread advances, with the percentage, done/total, the rate
// and the time left. (The LLM benchmark has its own line, src/llm/progress: requests, not rows.)
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace hotpath::util {

// 950, 12.3k, 4.56M, 7.89G: three significant digits.
std::string si(double value);
// 0:07, 12:34, 1:02:03 (h:mm:ss from an hour).
std::string clock_time(double seconds);

// "[#######.............]  35%  3500/10000 rows  1.23k rows/s  ETA 0:05": the bar, the percentage (of
// `total`; 100% when total is 0), done/total, the mean rate since the start and the time left at that
// rate ("ETA --:--" before anything is done). `unit` names what is counted. `done_at_start`: what was
// already done when the clock started (a bar shown for the rest of a job), left out of the rate.
std::string format_progress(size_t done, size_t total, double elapsed_s, const std::string& unit = "rows",
                            size_t done_at_start = 0);

// Whether a run shows the bar: --progress / --no-progress force it; otherwise only when stdout and stderr
// are both terminals (nothing extra in a log or a pipe).
enum class ProgressMode { automatic, on, off };
bool progress_wanted(ProgressMode mode);

class ProgressBar {
 public:
  struct Options {
    double delay_s = 2.0;      // shown only once the run has taken this long (short runs stay quiet); 0: always
    double interval_s = 0.25;  // redraws a second: 4
    std::string unit = "rows";
  };
  // Watches `done` (advanced by another thread) out of `total`, drawing on `out` from a thread of its
  // own; the rate counts from what `done` holds now. If the system refuses the thread, there is simply
  // no bar.
  ProgressBar(const std::atomic<size_t>& done, size_t total, std::FILE* out, Options options);
  ProgressBar(const std::atomic<size_t>& done, size_t total, std::FILE* out)
      : ProgressBar(done, total, out, Options{}) {}
  // Stops the thread; a bar that was shown gets its last state and a newline, so that what follows
  // (the summary, an error) starts on a line of its own.
  ~ProgressBar() { stop(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  void stop();
  bool shown() const { return shown_; }

 private:
  void loop();
  void draw(double elapsed_s);

  const std::atomic<size_t>& done_;
  const size_t total_;
  const size_t done_at_start_;
  std::FILE* out_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool shown_ = false;     // written by the bar's thread only, read after it is joined
  size_t last_len_ = 0;
  std::thread thread_;
};

}  // namespace hotpath::util
