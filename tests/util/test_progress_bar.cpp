// The generic progress bar (src/util/progress_bar): its line for given counts and times, and that it
// stays quiet for short runs, draws with '\r' and ends with its final state and a newline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include "util/progress_bar.hpp"

namespace hotpath::util {
namespace {

TEST(ProgressFormat, LineForGivenCountsAndTimes) {
  EXPECT_EQ(format_progress(50, 200, 2.0), "[#####...............]  25%  50/200 rows  25 rows/s  ETA 0:06");
  EXPECT_EQ(format_progress(0, 1000, 0.0), "[....................]   0%  0/1000 rows  0 rows/s  ETA --:--");
  EXPECT_EQ(format_progress(0, 1000, 5.0), "[....................]   0%  0/1000 rows  0 rows/s  ETA --:--");
  EXPECT_EQ(format_progress(4000000, 4000000, 3.2), "[####################] 100%  4000000/4000000 rows  1.25M rows/s  ETA 0:00");
  // 99.99% is not 100% (the bar's last cell and the percentage round down).
  EXPECT_EQ(format_progress(9999, 10000, 1.0, "ticks"),
            "[###################.]  99%  9999/10000 ticks  10.0k ticks/s  ETA 0:00");
  // An hour and more left; nothing to do is done.
  EXPECT_EQ(format_progress(1, 3724, 1.0), "[....................]   0%  1/3724 rows  1 rows/s  ETA 1:02:03");
  EXPECT_EQ(format_progress(0, 0, 0.0), "[####################] 100%  0/0 rows  0 rows/s  ETA --:--");
  // A counter past the total (never, but a display must not print 101%).
  EXPECT_EQ(format_progress(12, 10, 1.0).substr(0, 27), "[####################] 100%");
  // A bar shown for the rest of a job (the checks left after a benchmark): the rate and the time left
  // count only what was done since it started.
  EXPECT_EQ(format_progress(600, 1000, 2.0, "checks", 400),
            "[############........]  60%  600/1000 checks  100 checks/s  ETA 0:04");
  EXPECT_EQ(format_progress(400, 1000, 2.0, "checks", 400),
            "[########............]  40%  400/1000 checks  0 checks/s  ETA --:--");
}

TEST(ProgressFormat, SiAndClock) {
  EXPECT_EQ(si(0), "0");
  EXPECT_EQ(si(950), "950");
  EXPECT_EQ(si(999.4), "999");
  EXPECT_EQ(si(999.7), "1.00k");
  EXPECT_EQ(si(12345), "12.3k");
  EXPECT_EQ(si(123456), "123k");
  EXPECT_EQ(si(1.234e6), "1.23M");
  EXPECT_EQ(si(7.891e9), "7.89G");
  EXPECT_EQ(clock_time(7), "0:07");
  EXPECT_EQ(clock_time(754), "12:34");
  EXPECT_EQ(clock_time(3723), "1:02:03");
  EXPECT_EQ(clock_time(-1), "--:--");
  EXPECT_EQ(clock_time(std::numeric_limits<double>::infinity()), "--:--");
}

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) s.append(buf, n);
  return s;
}

TEST(ProgressBar, DrawsInPlaceAndEndsWithTheFinalStateAndANewline) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::atomic<size_t> done{0};
  {
    ProgressBar bar(done, 100, f, {0.0, 0.01, "rows"});
    for (int k = 0; k < 100; ++k) {
      done.fetch_add(1, std::memory_order_relaxed);
      if (k % 20 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    bar.stop();
    EXPECT_TRUE(bar.shown());
  }
  const std::string s = contents(f);
  std::fclose(f);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front(), '\r') << s;
  EXPECT_EQ(s.back(), '\n') << s;
  EXPECT_EQ(s.find('\n'), s.size() - 1) << "one line, redrawn: " << s;
  EXPECT_GE(std::count(s.begin(), s.end(), '\r'), 2) << s;
  const std::string last = s.substr(s.rfind('\r') + 1);
  EXPECT_EQ(last.rfind("[####################] 100%  100/100 rows", 0), 0u) << last;
  EXPECT_NE(last.find(" rows/s  ETA 0:00"), std::string::npos) << last;
}

TEST(ProgressBar, ShortRunsStayQuiet) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::atomic<size_t> done{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    ProgressBar bar(done, 10, f, {30.0, 0.25, "rows"});
    done = 10;
    bar.stop();
    EXPECT_FALSE(bar.shown());
  }
  // stop() does not wait out the delay.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(ProgressBar, NoDelayShowsEvenAnInstantRun) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::atomic<size_t> done{7};
  {
    ProgressBar bar(done, 7, f, {0.0, 10.0, "rows"});
    bar.stop();
    EXPECT_TRUE(bar.shown());
  }
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.substr(s.rfind('\r') + 1, 37), "[####################] 100%  7/7 rows") << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(ProgressBar, ForcedModes) {
  EXPECT_TRUE(progress_wanted(ProgressMode::on));
  EXPECT_FALSE(progress_wanted(ProgressMode::off));
}

}  // namespace
}  // namespace hotpath::util
