// Load shapes without a server: the ramped arrival schedule and the trace loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "llm/workloads/schedule.hpp"
#include "llm/workloads/trace.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

TEST(LlmLoadShapes, NoRampIsTheUnrampedSchedule) {
  EXPECT_EQ(interactive_schedule(20, 1, 7, 500, 0, RateRamp{5, 0}), interactive_schedule(20, 1, 7, 500, 0));
}

TEST(LlmLoadShapes, RampTimeInvertsTheCumulativeRate) {
  const RateRamp ramp{10, 4};  // 10/s rising to 50/s over 4 s: 120 expected arrivals by t = 4
  for (double t : {0.0, 0.5, 1.0, 2.5, 4.0, 6.0}) {
    const double lambda = t <= 4 ? 10 * t + 40 * t * t / 8 : 120 + 50 * (t - 4);
    EXPECT_NEAR(ramp_time(lambda, 50, ramp), t, 1e-9) << t;
  }
  const RateRamp down{50, 4};  // a ramp down is the same formula
  EXPECT_NEAR(ramp_time(50 * 1 - 40 * 1.0 / 8, 10, down), 1.0, 1e-9);
}

TEST(LlmLoadShapes, RampedArrivalsFollowTheRate) {
  // 0 -> 200/s over 10 s: 250 expected arrivals in the first half, 750 in the second, then 200/s.
  const auto t = interactive_schedule(200, 1, 3, 0, 12, RateRamp{0, 10});
  const auto in = [&](double a, double b) {
    return static_cast<double>(std::count_if(t.begin(), t.end(), [&](double x) { return x >= a && x < b; }));
  };
  EXPECT_NEAR(in(0, 5), 250, 4 * std::sqrt(250.0));
  EXPECT_NEAR(in(5, 10), 750, 4 * std::sqrt(750.0));
  EXPECT_NEAR(in(10, 12), 400, 4 * std::sqrt(400.0));
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
}

TEST(LlmLoadShapes, MooncakeTraceSharesPrefixesByHashId) {
  const std::string text =
      "{\"timestamp\": 5000, \"input_length\": 10, \"output_length\": 7, \"hash_ids\": [1, 2]}\n"
      "\n"
      "{\"timestamp\": 3000, \"input_length\": 6, \"output_length\": 2, \"hash_ids\": [1]}\n"
      "{\"t\": 4.5, \"prompt\": \"hello there\", \"output_tokens\": 3}\n";
  const Trace t = parse_trace(text, "mem", TraceParams{2.0, 4});
  ASSERT_EQ(t.items.size(), 3u);
  // Sorted by time, shifted to 0, replayed twice as fast.
  EXPECT_DOUBLE_EQ(t.times_s[0], 0.0);
  EXPECT_DOUBLE_EQ(t.times_s[1], 0.75);
  EXPECT_DOUBLE_EQ(t.times_s[2], 1.0);
  EXPECT_EQ(*t.items[1].prompt, "hello there");
  const std::string& a = *t.items[0].prompt;  // 6 words: block 1 (4 words) + 2 unique words
  const std::string& b = *t.items[2].prompt;  // 10 words: block 1, block 2, 2 unique words
  EXPECT_EQ(t.items[0].input_words, 6u);
  EXPECT_EQ(t.items[2].input_words, 10u);
  EXPECT_EQ(std::count(a.begin(), a.end(), ' '), 5);
  EXPECT_EQ(std::count(b.begin(), b.end(), ' '), 9);
  // The first block's four words are the same text in both.
  std::size_t cut = 0;
  for (int k = 0; k < 4; ++k) cut = a.find(' ', cut + (k ? 1 : 0));
  EXPECT_EQ(a.substr(0, cut), b.substr(0, cut));
  EXPECT_EQ(t.items[2].output_tokens, 7);
}

TEST(LlmLoadShapes, BadTraceRecordsAreNamedByLine) {
  const auto why = [](const std::string& text) {
    try {
      parse_trace(text, "t.jsonl", TraceParams{});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(why("{\"timestamp\": 1, \"input_length\": 3, \"output_length\": 2}\n{\"input_length\": 3}\n").find("t.jsonl:2:"),
            std::string::npos);
  EXPECT_NE(why("{\"timestamp\": -1, \"input_length\": 3, \"output_length\": 2}").find("arrival time"), std::string::npos);
  EXPECT_NE(why("{\"t\": 1, \"timestamp\": 1, \"input_length\": 3, \"output_length\": 2}").find("exactly one"),
            std::string::npos);
  EXPECT_NE(why("{\"t\": 1, \"input_length\": 0, \"output_length\": 2}").find("input_length"), std::string::npos);
  EXPECT_NE(why("{\"t\": 1, \"input_length\": 3, \"output_length\": 2, \"hash_ids\": \"x\"}").find("hash_ids"),
            std::string::npos);
  EXPECT_NE(why("[1,2]").find("JSON object"), std::string::npos);
  EXPECT_NE(why("").find("no records"), std::string::npos);
  EXPECT_NE(why("{\"t\": 1, \"input_length\": 3000000, \"output_length\": 2}").find("input_length"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::llm
