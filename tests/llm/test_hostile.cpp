// Hostile numbers and bytes for the parts of `hotpath llm` that build without libcurl: the SSE
// parser, the data set, serve-sim's settings, the CSV. Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "llm/client/sse.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/text.hpp"
#include "llm/csv_check.hpp"
#include "llm/report/report.hpp"
#include "llm/sim/sim_server.hpp"
#include "llm/workloads/dataset.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::llm {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfinity = std::numeric_limits<double>::infinity();

TEST(LlmHostile, SseLineWithoutNewlineIsCappedNotBufferedForEver) {
  SseParser p;
  const std::string chunk(64 * 1024, 'a');
  std::size_t fed = 0;
  bool go = p.feed("data: ", [](std::string_view) { return true; });
  while (go && fed < 3 * kMaxEventBytes) {
    go = p.feed(chunk, [](std::string_view) { return true; });
    fed += chunk.size();
  }
  EXPECT_FALSE(go) << "a line of " << fed << " bytes without a newline was still accepted";
  EXPECT_TRUE(p.overflowed());
  EXPECT_LE(fed, kMaxEventBytes + chunk.size());
  // Once over, the parser stays stopped: later bytes (even a newline) dispatch nothing.
  int events = 0;
  EXPECT_FALSE(p.feed("\n\ndata: [DONE]\n\n", [&](std::string_view) { return ++events, true; }));
  EXPECT_FALSE(p.finish([&](std::string_view) { return ++events, true; }));
  EXPECT_EQ(events, 0);
}

TEST(LlmHostile, SseEventOfManyShortLinesIsCappedToo) {
  SseParser p(1000);
  std::string many;
  for (int i = 0; i < 200; ++i) many += "data: 0123456789\n";  // 200 lines of 11 bytes, one event
  EXPECT_FALSE(p.feed(many, [](std::string_view) { return true; }));
  EXPECT_TRUE(p.overflowed());
  SseParser ok(1000);
  int events = 0;
  EXPECT_TRUE(ok.feed("data: 0123456789\n\n", [&](std::string_view d) { return ++events, d == "0123456789"; }));
  EXPECT_EQ(events, 1);
}

TEST(LlmHostile, UsageCountsOutsideInt32AreMalformedNotTotals) {
  for (const char* bad : {"-5", "9223372036854775808", "18446744073709551615", "2147483648", "-9223372036854775808"}) {
    const StreamEvent ev = interpret_event(std::string(R"({"choices":[],"usage":{"completion_tokens":)") + bad + "}}");
    EXPECT_EQ(ev.kind, StreamEvent::Kind::malformed) << bad;
    EXPECT_FALSE(ev.completion_tokens) << bad;
    EXPECT_NE(ev.error.find("usage.completion_tokens"), std::string::npos) << ev.error;
    const StreamEvent pe = interpret_event(std::string(R"({"usage":{"prompt_tokens":)") + bad + "}}");
    EXPECT_EQ(pe.kind, StreamEvent::Kind::malformed) << bad;
  }
  const StreamEvent ok = interpret_event(R"({"choices":[],"usage":{"completion_tokens":2147483647,"prompt_tokens":0}})");
  EXPECT_EQ(ok.kind, StreamEvent::Kind::chunk);
  EXPECT_EQ(ok.completion_tokens, 2147483647);
  EXPECT_EQ(ok.prompt_tokens, 0);
  // Stamps that would overflow the client's subtraction are ignored, not used.
  const StreamEvent st = interpret_event(R"({"hotpath_sim":{"recv_ns":-9223372036854775808,"sent_ns":18446744073709551615}})");
  EXPECT_FALSE(st.sim_recv_ns);
  EXPECT_FALSE(st.sim_sent_ns);
}

TEST(LlmHostile, DatasetOutputTokensOutOfRangeIsRefusedNamingTheLimit) {
  for (const char* v : {"1e400", "2147483648", "4294967297", "18446744073709551615", "-3", "0", "9223372036854775808"}) {
    const std::string line = std::string(R"({"prompt":"a b","output_tokens":)") + v + "}";
    try {
      const DatasetItem it = parse_dataset_line(line);
      ADD_FAILURE() << v << " accepted as " << it.output_tokens;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (std::string(v) != "1e400")
        EXPECT_NE(what.find("output_tokens` must be an integer in [1, 2147483647]"), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << v << ": not a hotpath::Error (exit 3): " << e.what();
    }
  }
  EXPECT_EQ(parse_dataset_line(R"({"prompt":"a","output_tokens":2147483647})").output_tokens, 2147483647);
}

TEST(LlmHostile, SynthRefusesNanInfAndHugeSizes) {
  const auto refused = [](SynthParams p, const char* what) {
    try {
      const auto items = synth_dataset(p);
      ADD_FAILURE() << what << ": accepted, " << items.size() << " items, output_tokens "
                    << (items.empty() ? -1 : items[0].output_tokens);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": not a hotpath::Error (exit 3): " << e.what();
    }
  };
  SynthParams base;
  base.requests = 3;
  base.input_mean = 5;
  base.output_mean = 4;
  for (double SynthParams::*mean : {&SynthParams::input_mean, &SynthParams::output_mean}) {
    for (double bad : {kNan, kInfinity, 1e19, -1.0, 0.0}) {
      SynthParams p = base;
      p.*mean = bad;
      refused(p, "a mean");
    }
  }
  for (double SynthParams::*stdev : {&SynthParams::input_stdev, &SynthParams::output_stdev}) {
    for (double bad : {kNan, kInfinity, -1.0}) {
      SynthParams p = base;
      p.*stdev = bad;
      refused(p, "a stdev");
    }
  }
  SynthParams p = base;
  p.requests = kMaxRequests + 1;
  refused(p, "requests");
  p = base;
  p.requests = 1'000'000;
  p.input_mean = 1000;  // 10^9 words
  refused(p, "total words");
  p = base;
  p.requests = 10'000;
  p.input_mean = 1;  // within the mean's bound, but the draws reach ~4e9 words (was built in memory)
  p.input_stdev = 1e6;
  refused(p, "drawn words");
  // A wide output distribution never yields a wrapped or zero length.
  p = base;
  p.requests = 200;
  p.output_mean = 2e9;
  p.output_stdev = 1e9;
  for (const auto& it : synth_dataset(p)) {
    EXPECT_GE(it.output_tokens, 1);
    EXPECT_LE(it.output_tokens, kMaxOutputTokens);
  }
}

TEST(LlmHostile, SimRefusesNanSettings) {
  for (int field = 0; field < 5; ++field) {
    SimConfig c;
    double* f[] = {&c.ttft_ms, &c.tpot_ms, &c.error_rate, &c.cut_rate, &c.malformed_rate};
    *f[field] = kNan;
    EXPECT_THROW(SimServer s(c), Error) << field;
  }
}

TEST(LlmHostile, SimThatCannotStartItsThreadSaysSoAndCleansUp) {
  SimServer s(SimConfig{});
  util::fail_thread_start_for_test(0);
  EXPECT_THROW(s.start(), Error);
  util::fail_thread_start_for_test(-1);
  // Nothing was left half started: the same object starts normally afterwards.
  s.start();
  EXPECT_GT(s.port(), 0);
  s.stop();
}

TEST(LlmHostile, EscapeBytesKeepsUtf8AndEscapesTheRest) {
  EXPECT_EQ(escape_bytes("plain, text"), "plain, text");
  EXPECT_EQ(escape_bytes("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(escape_bytes(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_bytes("line\r\nnext\x7f"), "line\\x0d\\x0anext\\x7f");
  EXPECT_EQ(escape_bytes("back\\slash"), "back\\\\slash");
  // Invalid UTF-8: a lone continuation, a truncated sequence, an overlong NUL, a surrogate, > U+10FFFF.
  EXPECT_EQ(escape_bytes("\x80"), "\\x80");
  EXPECT_EQ(escape_bytes("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(escape_bytes("\xc0\x80"), "\\xc0\\x80");
  EXPECT_EQ(escape_bytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(escape_bytes("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(escape_bytes("\xff"), "\\xff");
}

TEST(LlmHostile, CsvDetailFromTheServerStaysOneValidRow) {
  std::vector<RequestRecord> recs(2);
  recs[0].outcome = Outcome::failed;
  recs[0].reason = reason::http_error;
  recs[0].detail = std::string("HTTP 500: \0bad\xff\xfe\n\"quoted\", more\r\n", 33);
  recs[1].index = 1;
  recs[1].outcome = Outcome::completed;
  recs[1].finish_reason = "st\nop";
  const std::string csv = clean_csv_of(recs);
  EXPECT_NE(csv.find(R"("HTTP 500: \x00bad\xff\xfe\x0a""quoted"", more\x0d\x0a")"), std::string::npos) << csv;
  EXPECT_NE(csv.find(R"(st\x0aop)"), std::string::npos) << csv;
}

}  // namespace
}  // namespace hotpath::llm
