#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "llm/report/report.hpp"

namespace hotpath::llm {
namespace {

RequestRecord done(std::size_t i, double sched, double first, double end, std::size_t words, double w0, double w1,
                   std::size_t distinct, int requested, std::optional<long long> tokens) {
  RequestRecord r;
  r.index = i;
  r.outcome = Outcome::completed;
  r.scheduled_s = sched;
  r.slot_s = sched;
  r.sent_s = sched;
  r.first_content_s = first;
  r.last_content_s = w1;
  r.end_s = end;
  r.words = words;
  r.first_word_s = w0;
  r.last_word_s = w1;
  r.distinct_stamps = distinct;
  r.requested_tokens = requested;
  r.completion_tokens = tokens;
  return r;
}

TEST(LlmReport, CountsRatesAndPerUserMetrics) {
  std::vector<RequestRecord> recs;
  // 11 words over 1 s -> 10 words/s/user, IWL 100 ms; RT 0.5 s.
  recs.push_back(done(0, 0.0, 0.5, 1.5, 11, 0.5, 1.5, 11, 10, 10));
  // 6 words over 0.5 s -> 10 words/s; RT 0.25 s; no usage.
  recs.push_back(done(1, 1.0, 1.25, 1.75, 6, 1.25, 1.75, 6, 8, std::nullopt));
  // One distinct stamp: excluded from WPS/IWL but counted; ends the interval at 2.0 s.
  recs.push_back(done(2, 1.5, 1.6, 2.0, 3, 1.6, 1.6, 1, 4, 3));
  RequestRecord f;
  f.index = 3;
  f.outcome = Outcome::failed;
  f.reason = reason::cut_stream;
  f.scheduled_s = f.slot_s = f.sent_s = 1.8;
  recs.push_back(f);
  RequestRecord ns;
  ns.index = 4;
  ns.scheduled_s = 5;
  recs.push_back(ns);

  const auto j = make_report(RunInfo{}, recs);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["not_sent"], 1);
  EXPECT_EQ(j["failures"]["cut_stream"], 1);
  EXPECT_EQ(j["failures"]["timeout"], 0);
  EXPECT_DOUBLE_EQ(j["interval_s"].get<double>(), 2.0);  // first scheduled 0 -> last completion 2.0
  EXPECT_DOUBLE_EQ(j["rps"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["wps_total"].get<double>(), 20.0 / 2.0);
  EXPECT_DOUBLE_EQ(j["output_tokens_total"].get<double>(), 13);
  EXPECT_EQ(j["wps_excluded"], 1);
  const auto& m = j["metrics"];
  for (const char* k : {"rt_ms", "e2e_ms", "wps_per_user", "iwl_ms"})
    for (const char* q : {"p50", "p90", "p95", "p99", "max", "mean"}) ASSERT_TRUE(m[k][q].is_number()) << k << q;
  EXPECT_EQ(m["wps_per_user"]["count"], 2);
  EXPECT_DOUBLE_EQ(m["wps_per_user"]["p50"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(m["iwl_ms"]["max"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(m["rt_ms"]["max"].get<double>(), 500.0);
  EXPECT_NEAR(m["rt_ms"]["min"].get<double>(), 100.0, 1e-9);
  EXPECT_EQ(j["output_length"]["matched"], 1);
  EXPECT_EQ(j["output_length"]["short"], 1);  // 3 of 4 requested
  EXPECT_EQ(j["output_length"]["without_usage"], 1);
  // TPOT from usage: request 0 has 10 tokens over 1.0 s of content -> 111.1 ms.
  EXPECT_NEAR(m["tpot_ms"]["max"].get<double>(), 1000.0 / 9, 1e-9);
}

TEST(LlmReport, EmptyRunHasNullPercentiles) {
  const auto j = make_report(RunInfo{}, {});
  EXPECT_EQ(j["completed"], 0);
  EXPECT_TRUE(j["metrics"]["rt_ms"]["p50"].is_null());
  EXPECT_EQ(j["rps"], 0.0);
}

TEST(LlmReport, CsvHasOneRowPerRequest) {
  std::vector<RequestRecord> recs = {done(0, 0, 0.1, 0.2, 2, 0.1, 0.2, 2, 2, 2)};
  RequestRecord f;
  f.outcome = Outcome::failed;
  f.reason = reason::http_error;
  f.detail = "HTTP 500: {\"error\": \"x, y\"}";
  recs.push_back(f);
  const std::string p = (std::filesystem::temp_directory_path() / ("hotpath_llm_csv_" + std::to_string(getpid()))).string();
  write_csv(recs, p);
  std::ifstream in(p);
  std::string header, l1, l2, extra;
  std::getline(in, header);
  std::getline(in, l1);
  std::getline(in, l2);
  EXPECT_FALSE(std::getline(in, extra));
  std::filesystem::remove(p);
  EXPECT_EQ(header.rfind("index,dataset_index,status,reason", 0), 0u);
  EXPECT_NE(l1.find("completed"), std::string::npos);
  EXPECT_NE(l2.find("failed,http_error,"), std::string::npos);
  EXPECT_NE(l2.find("\"HTTP 500: {\"\"error\"\": \"\"x, y\"\"}\""), std::string::npos) << l2;
}

TEST(LlmReport, ParetoFrontier) {
  //            A     B     C     D
  // words/s  100   200   150   300
  // RT p90    10    20    30    25   -> C is beaten by B (more throughput, lower RT)
  const auto f = pareto_front({100, 200, 150, 300}, {10, 20, 30, 25});
  EXPECT_EQ(f, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(pareto_front({1, 1}, {5, 5}), (std::vector<bool>{true, true}));  // ties dominate nothing
}

TEST(LlmReport, SweepTableAndPlot) {
  std::vector<SweepPoint> pts;
  for (int i = 1; i <= 3; ++i) {
    std::vector<RequestRecord> recs = {done(0, 0, 0.01 * i, 1.0, 11, 0.01 * i, 1.0, 11, 10, 10)};
    pts.push_back({double(i), make_report(RunInfo{}, recs)});
  }
  const std::string p = (std::filesystem::temp_directory_path() / ("hotpath_llm_sweep_" + std::to_string(getpid()))).string();
  write_sweep_csv(pts, p);
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(p);
  const std::string csv = ss.str();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_EQ(csv.rfind("rate,completed,failed,rps,wps_total", 0), 0u);
  const std::string svg = sweep_svg(pts, "t <&>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
  std::size_t circles = 0;
  for (std::size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(circles, 6u);  // three rates, two panels
}

}  // namespace
}  // namespace hotpath::llm
