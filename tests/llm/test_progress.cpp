// The live progress line: its text (a pure function), when it is shown, and what the forced mode
// writes to a file that is not a terminal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "llm/client/progress.hpp"

namespace hotpath::llm {
namespace {

TEST(LlmProgress, FormatsCountsRateAndPercent) {
  ProgressSnapshot s;
  s.elapsed_s = 12.345;
  s.sent = 1200;
  s.completed = 1150;
  s.failed = 3;
  s.rps = 95.24;
  EXPECT_EQ(format_progress(s), "12.3 s  sent 1200  completed 1150  failed 3  req/s 95.2");
  s.total = 2000;
  EXPECT_EQ(format_progress(s, "rate 4.00 req/s"),
            "rate 4.00 req/s  12.3 s  sent 1200  completed 1150  failed 3  req/s 95.2  [57.6%]");
  s.total = 0;  // unknown, never a division by zero
  EXPECT_EQ(format_progress(s).find('%'), std::string::npos);
}

TEST(LlmProgress, ShownOnATerminalUnlessForcedOrQuiet) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_FALSE(progress_enabled(ProgressMode::automatic, false, fds[1]));  // a pipe is not a terminal
  EXPECT_TRUE(progress_enabled(ProgressMode::on, false, fds[1]));
  EXPECT_FALSE(progress_enabled(ProgressMode::on, true, fds[1]));  // --quiet wins
  EXPECT_FALSE(progress_enabled(ProgressMode::off, false, fds[1]));
  close(fds[0]);
  close(fds[1]);
}

TEST(LlmProgress, ForcedLineRewritesInPlaceAndEndsWithNewline) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  LiveCounters live;
  {
    ProgressLine line(live, f, 10, "", 0.02);
    for (int i = 0; i < 5; ++i) {
      live.sent += 2;
      live.completed += 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    live.failed += 2;
    line.stop();
    line.stop();  // idempotent: one final newline
  }
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front(), '\r');
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);  // one line, rewritten
  EXPECT_GE(std::count(out.begin(), out.end(), '\r'), 3);  // 75 ms at 20 ms: several updates
  const std::string last = out.substr(out.rfind('\r') + 1);
  EXPECT_NE(last.find("sent 10  completed 5  failed 2"), std::string::npos) << last;
  EXPECT_NE(last.find("[70.0%]"), std::string::npos) << last;  // (5 + 2) / 10
  // A shorter line than the one before is padded, so nothing of the old one shows.
  std::size_t prev = 0;
  for (std::size_t a = out.find('\r'), b; a != std::string::npos; a = b) {
    b = out.find('\r', a + 1);
    const std::size_t len = (b == std::string::npos ? out.size() - 1 : b) - a - 1;
    EXPECT_GE(len, prev);
    prev = len;
  }
}

}  // namespace
}  // namespace hotpath::llm
