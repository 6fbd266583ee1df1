// --slo parsing and goodput on hand-made records of known timing (no server, no libcurl).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "llm/report/report.hpp"
#include "llm/report/slo.hpp"
#include "llm/report/stats.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

RequestRecord done(double sched, double first, double end, std::size_t words, double w0, double w1,
                   std::size_t distinct, std::optional<long long> tokens) {
  RequestRecord r;
  r.outcome = Outcome::completed;
  r.scheduled_s = r.slot_s = r.sent_s = sched;
  r.first_content_s = first;
  r.last_content_s = w1;
  r.end_s = end;
  r.words = words;
  r.first_word_s = w0;
  r.last_word_s = w1;
  r.distinct_stamps = distinct;
  r.requested_tokens = tokens ? static_cast<int>(*tokens) : 4;
  r.completion_tokens = tokens;
  return r;
}

// RT 100 / 300 / 150 ms; words/s 25 / 10 / none (one stamp); TPOT 40 / 100 / none (no usage);
// E2E 500 / 800 / 200 ms; plus one failed request. Interval 0 -> 1.0 s.
std::vector<RequestRecord> sample() {
  std::vector<RequestRecord> v;
  v.push_back(done(0.0, 0.1, 0.5, 11, 0.1, 0.5, 11, 11));
  v.push_back(done(0.2, 0.5, 1.0, 6, 0.5, 1.0, 6, 6));
  v.push_back(done(0.4, 0.55, 0.6, 3, 0.55, 0.55, 1, std::nullopt));
  RequestRecord f;
  f.outcome = Outcome::failed;
  f.reason = reason::http_error;
  f.scheduled_s = f.slot_s = f.sent_s = 0.3;
  v.push_back(f);
  return v;
}

nlohmann::json goodput(const std::string& spec, const std::vector<RequestRecord>& recs) {
  return evaluate(parse_slos(spec), make_report(RunInfo{}, recs), recs);
}

TEST(LlmSlo, ParsesMetricsUnitsAndPercentiles) {
  const auto s = parse_slos(" rt:200ms, e2e:2s ,iwl@p90:50ms,wps:20,ttft@p99.9:0.5s,tpot_ms:40ms,rt_send:1ms");
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[0].metric, "rt_ms");
  EXPECT_FALSE(s[0].percentile);
  EXPECT_DOUBLE_EQ(s[0].limit, 200);
  EXPECT_FALSE(s[0].lower_bound);
  EXPECT_EQ(s[0].spec, "rt:200ms");
  EXPECT_DOUBLE_EQ(s[1].limit, 2000);  // seconds become ms
  EXPECT_EQ(s[2].metric, "iwl_ms");
  EXPECT_DOUBLE_EQ(*s[2].percentile, 90);
  EXPECT_EQ(s[3].metric, "wps_per_user");
  EXPECT_TRUE(s[3].lower_bound);
  EXPECT_DOUBLE_EQ(s[3].limit, 20);
  EXPECT_EQ(s[4].metric, "ttft_ms");
  EXPECT_DOUBLE_EQ(*s[4].percentile, 99.9);
  EXPECT_DOUBLE_EQ(s[4].limit, 500);
  EXPECT_EQ(s[5].metric, "tpot_ms");
  EXPECT_EQ(s[6].metric, "rt_from_send_ms");
}

TEST(LlmSlo, BadSpecsAreOneLineErrorsNamingTheFlag) {
  std::string many;
  for (int i = 0; i <= 32; ++i) many += "rt:1ms,";
  for (const std::string& bad : std::vector<std::string>{"", " , ", "rt", "rt:", "rt:200", "rt:200us", "rt:ms", "rt:-5ms", "rt:0ms",
                                "rt:nanms", "rt:1e999ms", "rt:2e9ms", "foo:1ms", "rt@p0:1ms", "rt@p101:1ms",
                                "rt@90:1ms", "rt@p:1ms", "rt@pnan:1ms", "wps:20ms", "wps:x", "RT:1ms", many,
                                // empty items are typos, numbers are decimal and finite
                                "rt:5ms,,iwl:3ms", "rt:5ms,", ",rt:5ms", "rt:5ms, ,iwl:3ms", "rt:0x10ms",
                                "rt:0x1p4ms", "rt:infms", "rt:1_0ms", "rt:+-5ms", "rt@p0x10:1ms", "rt@p1e999:1ms",
                                "wps:0x10", "wps:nan", "wps:inf/s"}) {
    try {
      parse_slos(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--slo"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(LlmSlo, LimitsFollowTheNumberGrammar) {
  const auto s = parse_slos("rt:1e3ms,e2e:.5s,iwl@p99.9:010ms,wps:20/s,tpot:+2ms");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_DOUBLE_EQ(s[0].limit, 1000);
  EXPECT_DOUBLE_EQ(s[1].limit, 500);
  EXPECT_DOUBLE_EQ(*s[2].percentile, 99.9);
  EXPECT_DOUBLE_EQ(s[2].limit, 10);
  EXPECT_DOUBLE_EQ(s[3].limit, 20);
  EXPECT_DOUBLE_EQ(s[4].limit, 2);
  const auto error = [](const std::string& spec) {
    try {
      parse_slos(spec);
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(error(""), "--slo: '' holds no objective (e.g. --slo rt:200ms,iwl@p90:50ms)");
  EXPECT_EQ(error("rt:5ms,,iwl:3ms"), "--slo: an empty objective in 'rt:5ms,,iwl:3ms' (e.g. rt:200ms,iwl@p90:50ms)");
  EXPECT_NE(error("rt:0x10ms").find("--slo: 'rt:0x10ms' has a limit that is not a finite decimal number ('0x10')"),
            std::string::npos);
  EXPECT_NE(error("rt:200us").find("needs a time unit, ms or s"), std::string::npos);
}

TEST(LlmSlo, PerRequestObjectivesGiveGoodput) {
  const auto recs = sample();
  const auto g = goodput("rt:200ms", recs);
  EXPECT_EQ(g["sent"], 4);
  EXPECT_EQ(g["requests_meeting"], 2);  // RT 100 and 150; 300 is over; the failed one meets nothing
  EXPECT_DOUBLE_EQ(g["fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(g["rps"].get<double>(), 2.0);   // 2 requests over the 1.0 s interval
  EXPECT_DOUBLE_EQ(g["wps"].get<double>(), 14.0);  // their 11 + 3 words
  const auto& s = g["slos"][0];
  EXPECT_EQ(s["passed"], 2);
  EXPECT_EQ(s["exceeded"], 1);
  EXPECT_EQ(s["missing"], 0);
  EXPECT_FALSE(s["met"].get<bool>());  // not every sent request met it
  EXPECT_TRUE(g["percentile_slos_met"].get<bool>());  // there are none
  EXPECT_FALSE(g["all_met"].get<bool>());

  // Every objective must hold: IWL 40 ms passes, 100 is over, the one-stamp request has none.
  const auto g2 = goodput("rt:200ms,iwl:50ms", recs);
  EXPECT_EQ(g2["requests_meeting"], 1);
  EXPECT_EQ(g2["slos"][1]["passed"], 1);
  EXPECT_EQ(g2["slos"][1]["exceeded"], 1);
  EXPECT_EQ(g2["slos"][1]["missing"], 1);
  EXPECT_DOUBLE_EQ(g2["wps"].get<double>(), 11.0);

  // words/s per user is a lower bound: 25 passes, 10 does not.
  const auto g3 = goodput("wps:20,e2e:0.6s", recs);
  EXPECT_EQ(g3["slos"][0]["passed"], 1);
  EXPECT_EQ(g3["slos"][0]["exceeded"], 1);
  EXPECT_EQ(g3["slos"][1]["passed"], 2);  // E2E 500 and 200 ms
  EXPECT_EQ(g3["requests_meeting"], 1);
  EXPECT_NE(goodput_summary(g3).find("goodput: 1 of 4 sent requests"), std::string::npos) << goodput_summary(g3);
}

TEST(LlmSlo, PercentileObjectivesUseTheReportsPercentiles) {
  auto recs = sample();
  recs.pop_back();  // no failure: every request completed
  const auto report = make_report(RunInfo{}, recs);
  const auto g = evaluate(parse_slos("rt@p90:200ms,rt@p50:160ms,wps@p10:5,tpot@p50:60ms"), report, recs);
  // RT 100, 150, 300: p90 = 150 + 0.8 * 150 = 270 (over 200), p50 = 150.
  EXPECT_DOUBLE_EQ(g["slos"][0]["value"].get<double>(), report["metrics"]["rt_ms"]["p90"].get<double>());
  EXPECT_DOUBLE_EQ(g["slos"][0]["value"].get<double>(), 270.0);
  EXPECT_FALSE(g["slos"][0]["met"].get<bool>());
  EXPECT_TRUE(g["slos"][1]["met"].get<bool>());
  EXPECT_DOUBLE_EQ(g["slos"][2]["value"].get<double>(), 11.5);  // words/s 10, 25: p10 = 11.5 >= 5
  EXPECT_TRUE(g["slos"][2]["met"].get<bool>());
  EXPECT_DOUBLE_EQ(g["slos"][3]["value"].get<double>(), 70.0);  // TPOT 40, 100
  EXPECT_FALSE(g["slos"][3]["met"].get<bool>());
  EXPECT_FALSE(g["percentile_slos_met"].get<bool>());
  EXPECT_EQ(g["requests_meeting"], 3);  // no per-request objective: every completed request counts
  EXPECT_FALSE(g["all_met"].get<bool>());

  const auto ok = evaluate(parse_slos("rt@p90:300ms,rt:0.3s"), report, recs);
  EXPECT_TRUE(ok["percentile_slos_met"].get<bool>());
  EXPECT_TRUE(ok["per_request_slos_met"].get<bool>());
  EXPECT_TRUE(ok["all_met"].get<bool>());
  EXPECT_DOUBLE_EQ(ok["fraction"].get<double>(), 1.0);
}

TEST(LlmSlo, NoCompletedRequestMeetsNothing) {
  std::vector<RequestRecord> recs(1);
  recs[0].outcome = Outcome::failed;
  recs[0].scheduled_s = recs[0].sent_s = 0;
  const auto g = goodput("rt@p50:1s", recs);
  EXPECT_TRUE(g["slos"][0]["value"].is_null());
  EXPECT_FALSE(g["slos"][0]["met"].get<bool>());
  EXPECT_FALSE(g["all_met"].get<bool>());
  EXPECT_DOUBLE_EQ(g["rps"].get<double>(), 0.0);
}

}  // namespace
}  // namespace hotpath::llm
