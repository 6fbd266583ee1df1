// The sweep driver and the find-max search against a deterministic fake server (no libcurl), and,
// where libcurl is built, the CLI's concurrency sweep and search against serve-sim.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "llm/report/report.hpp"
#include "llm/sweep/sweep.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CURL
#include "llm/llm_cli.hpp"
#include "llm/sim/sim_server.hpp"
#include "llm/workloads/dataset.hpp"
#endif

namespace hotpath::llm {
namespace {

// A server that keeps up to `capacity` req/s; past `knee` its RT p90 rises by 20 ms per req/s
// over 100 ms. The SLO is RT p90 <= 200 ms, so it holds up to knee + 5.
struct FakeServer {
  double capacity = 50, knee = 40;
  std::vector<PointSpec> calls;
  // Optional: a repetition that fails the SLO from this value on.
  double flaky_from = 1e300;
  std::size_t flaky_rep = 1;

  nlohmann::json operator()(const PointSpec& s) {
    calls.push_back(s);
    const double rps = std::min(s.value, capacity) + 0.5 * static_cast<double>(s.repetition);
    const double rt90 = s.value <= knee ? 100 : 100 + (s.value - knee) * 20;
    const bool met = rt90 <= 200 && !(s.repetition == flaky_rep && s.value >= flaky_from);
    return {{"completed", 10},
            {"failed", 0},
            {"rps", rps},
            {"wps_total", rps * 10},
            {"metrics", {{"rt_ms", {{"p50", 80.0}, {"p90", rt90}}}, {"iwl_ms", {{"p50", 5.0}, {"p90", 6.0}}}}},
            {"goodput", {{"all_met", met}, {"rps", met ? rps : 0.0}, {"wps", met ? rps * 10 : 0.0}, {"fraction", met ? 1.0 : 0.0}}}};
  }
};

RunPoint as_run(FakeServer& f) {
  return [&f](const PointSpec& s) { return f(s); };
}

std::vector<double> probe_values(const nlohmann::json& search) {
  std::vector<double> v;
  for (const auto& p : search["probes"]) v.push_back(p["value"].get<double>());
  return v;
}

TEST(LlmSweep, FindMaxDoublesThenBisectsToThePrecision) {
  FakeServer f;
  SearchOptions o;  // rate from 1, precision 0.1, 12 probes
  const auto r = find_max(o, as_run(f));
  const auto& s = r.search;
  // 1..32 pass, 64 fails (RT p90 580 ms); bisection: 48 fails, 40 passes, 44 passes; then
  // (48 - 44) / 44 = 0.09 <= 0.1.
  EXPECT_EQ(probe_values(s), (std::vector<double>{1, 2, 4, 8, 16, 32, 64, 48, 40, 44}));
  EXPECT_EQ(s["best"], 44.0);
  EXPECT_EQ(s["lowest_failing"], 48.0);
  EXPECT_EQ(s["stopped"], "slo_failed");
  EXPECT_EQ(s["probes"][6]["phase"], "grow");
  EXPECT_EQ(s["probes"][7]["phase"], "bisect");
  EXPECT_FALSE(s["probes"][6]["met"].get<bool>());
  // The table is in value order; every run is kept in the order it ran.
  ASSERT_EQ(r.points.size(), 10u);
  EXPECT_TRUE(std::is_sorted(r.points.begin(), r.points.end(),
                             [](const SweepPoint& a, const SweepPoint& b) { return a.rate < b.rate; }));
  EXPECT_EQ(r.runs.size(), 10u);
  EXPECT_EQ(r.runs[6]["metrics"]["rt_ms"]["p90"], 580.0);
  EXPECT_EQ(f.calls.size(), 10u);
  EXPECT_NE(search_summary(s).find("best 44 req/s"), std::string::npos) << search_summary(s);
}

TEST(LlmSweep, FindMaxStopsWhenThroughputNoLongerRises) {
  FakeServer f;
  f.knee = 1e9;  // the SLO always holds: only saturation stops the search
  SearchOptions o;
  const auto s = find_max(o, as_run(f)).search;
  // 64 -> 50 req/s (+56% over 32), 128 -> 50 req/s (+0% < 5%): saturated, keep 64.
  EXPECT_EQ(probe_values(s), (std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(s["stopped"], "saturated");
  EXPECT_EQ(s["best"], 64.0);
  EXPECT_EQ(s["saturated_at"], 128.0);
  // A looser rule (a doubling must add 60%) calls 64 saturated already.
  o.saturation_gain = 0.6;
  FakeServer g;
  g.knee = 1e9;
  EXPECT_EQ(find_max(o, as_run(g)).search["best"], 32.0);
}

TEST(LlmSweep, FindMaxRunCapStartFailureAndAxisLimit) {
  {
    FakeServer f;
    SearchOptions o;
    o.max_probes = 5;
    const auto s = find_max(o, as_run(f)).search;
    EXPECT_EQ(probe_values(s), (std::vector<double>{1, 2, 4, 8, 16}));
    EXPECT_EQ(s["stopped"], "max_runs");
    EXPECT_EQ(s["best"], 16.0);
  }
  {
    FakeServer f;
    SearchOptions o;
    o.start = 100;  // already past the SLO
    const auto s = find_max(o, as_run(f)).search;
    EXPECT_EQ(s["probes"].size(), 1u);
    EXPECT_TRUE(s["best"].is_null());
    EXPECT_EQ(s["stopped"], "slo_failed");
    EXPECT_NE(search_summary(s).find("--find-start"), std::string::npos);
  }
  {
    FakeServer f;
    f.knee = f.capacity = 1e300;
    SearchOptions o;
    o.axis = "concurrency";
    o.start = 50000;
    const auto s = find_max(o, as_run(f)).search;
    EXPECT_EQ(probe_values(s), (std::vector<double>{50000, 100000}));  // kMaxConcurrency
    EXPECT_EQ(s["stopped"], "limit");
    EXPECT_EQ(s["best"], 100000.0);
  }
}

TEST(LlmSweep, FindMaxConcurrencyProbesWholeNumbers) {
  FakeServer f;
  f.knee = 8;  // RT p90 <= 200 ms up to 13
  SearchOptions o;
  o.axis = "concurrency";
  const auto s = find_max(o, as_run(f)).search;
  // 16 fails; 12 passes, 14 fails, 13 passes; 14 - 13 = 1: no whole number between.
  EXPECT_EQ(probe_values(s), (std::vector<double>{1, 2, 4, 8, 16, 12, 14, 13}));
  EXPECT_EQ(s["best"], 13.0);
  EXPECT_EQ(s["lowest_failing"], 14.0);
  for (const auto& c : f.calls) EXPECT_EQ(c.axis, "concurrency");
}

TEST(LlmSweep, FindMaxWithRepeatsNeedsEveryRepetitionToPass) {
  FakeServer f;
  f.flaky_from = 8;  // repetition 1 misses the SLO from 8 on
  SearchOptions o;
  o.repeat = 2;
  const auto r = find_max(o, as_run(f));
  EXPECT_GE(r.search["best"].get<double>(), 4.0);
  EXPECT_LT(r.search["best"].get<double>(), 8.0);
  EXPECT_EQ(r.runs.size(), 2 * r.search["probes"].size());
  EXPECT_DOUBLE_EQ(r.search["probes"][0]["rps"].get<double>(), 1.25);  // mean of 1 and 1.5
  // Without goodput (no --slo) there is nothing to search for.
  EXPECT_THROW(find_max(o, [](const PointSpec&) { return nlohmann::json{{"rps", 1.0}}; }), Error);
}

TEST(LlmSweep, RepeatedPointsGiveMeansAndConfidenceIntervals) {
  FakeServer f;
  const auto r = run_sweep("rate", {10, 20}, 3, as_run(f));
  ASSERT_EQ(f.calls.size(), 6u);
  EXPECT_EQ(f.calls[1].value, 10.0);
  EXPECT_EQ(f.calls[1].repetition, 1u);
  EXPECT_EQ(f.calls[3].repetition, 0u);
  ASSERT_EQ(r.points.size(), 2u);
  EXPECT_EQ(r.points[0].repeats.size(), 3u);
  const auto j = sweep_json(r);
  EXPECT_EQ(j["schema"], "hotpath.llm.sweep/1");
  EXPECT_EQ(j["axis"], "rate");
  EXPECT_EQ(j["runs"].size(), 6u);
  EXPECT_EQ(j["points"][1]["runs"], (std::vector<std::size_t>{3, 4, 5}));
  // rps 10, 10.5, 11: mean 10.5, sd 0.5, t(2) = 4.303 -> half width 4.303 * 0.5 / sqrt(3).
  const auto& rps = j["points"][0]["stats"]["rps"];
  EXPECT_EQ(rps["n"], 3);
  EXPECT_DOUBLE_EQ(rps["mean"].get<double>(), 10.5);
  EXPECT_NEAR(rps["ci95_half_width"].get<double>(), 4.303 * 0.5 / std::sqrt(3.0), 1e-9);
  EXPECT_NEAR(rps["ci95_low"].get<double>(), 10.5 - 4.303 * 0.5 / std::sqrt(3.0), 1e-9);
  EXPECT_EQ(j["points"][0]["stats"]["rt_p90_ms"]["ci95_half_width"], 0.0);  // the same every time
  EXPECT_TRUE(j["points"][0]["stats"].contains("goodput_rps"));
  EXPECT_FALSE(j.contains("search"));
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> v;
  std::stringstream ss(line);
  std::string c;
  while (std::getline(ss, c, ',')) v.push_back(c);
  if (!line.empty() && line.back() == ',') v.emplace_back();
  return v;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

TEST(LlmSweep, ConcurrencyTableNamesItsAxisAndAveragesRepetitions) {
  FakeServer f;
  f.flaky_from = 4;
  const auto r = run_sweep("concurrency", {2, 4}, 2, as_run(f));
  const std::string p = (std::filesystem::temp_directory_path() / ("hotpath_llm_sweepc_" + std::to_string(getpid()))).string();
  write_sweep_csv(r.points, p);
  const auto lines = lines_of(p);
  std::filesystem::remove(p);
  ASSERT_EQ(lines.size(), 3u);
  const auto head = split(lines[0]);
  const auto row = split(lines[1]);
  const auto row2 = split(lines[2]);
  ASSERT_EQ(head.size(), row.size());
  ASSERT_EQ(head.size(), row2.size());
  const auto col = [&](const char* name) {
    return static_cast<std::size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  EXPECT_EQ(head[0], "concurrency");
  EXPECT_EQ(row[0], "2.000000");
  EXPECT_EQ(row[col("completed")], "20");               // a total over the repetitions
  EXPECT_EQ(row[col("rps")], "2.250000");               // mean of 2 and 2.5
  EXPECT_EQ(row[col("repeats")], "2");
  EXPECT_EQ(row[col("slos_met")], "1");
  EXPECT_EQ(row2[col("slos_met")], "0");                // repetition 1 failed at 4
  EXPECT_EQ(row2[col("goodput_rps")], "2.000000");      // mean of 4 and 0
  // t(1) = 12.706, sd of {2, 2.5} = 0.3536: half width 12.706 * 0.3536 / sqrt(2) = 3.1765.
  EXPECT_EQ(row[col("rps_ci95")], "3.176500");
  EXPECT_EQ(row[col("rt_p90_ci95_ms")], "0.000000");
  const std::string svg = sweep_svg(r.points, "c");
  EXPECT_NE(svg.find(">C4<"), std::string::npos);
}

TEST(LlmSweep, FlagCombinationsAreChecked) {
  const auto bad = [](SweepFlags f, bool slo, bool rate, bool maxc, const std::string& mode) {
    try {
      check_sweep_flags(f, slo, rate, maxc, mode);
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  SweepFlags f;
  EXPECT_EQ(bad(f, false, false, false, ""), "accepted");
  f.sweep = "1,2";
  f.sweep_concurrency = "1,2";
  EXPECT_NE(bad(f, false, false, false, "").find("exclusive"), std::string::npos);
  f = {};
  f.find_max = "rate";
  EXPECT_NE(bad(f, false, false, false, "").find("--find-max needs --slo"), std::string::npos);
  EXPECT_NE(bad(f, true, true, false, "").find("--rate"), std::string::npos);
  EXPECT_EQ(bad(f, true, false, false, ""), "accepted");
  f.find_max = "latency";
  EXPECT_NE(bad(f, true, false, false, "").find("rate or concurrency"), std::string::npos);
  f = {};
  f.repeat = 3;
  EXPECT_NE(bad(f, false, false, false, "").find("--repeat needs"), std::string::npos);
  f.sweep_concurrency = "1,4";
  EXPECT_EQ(bad(f, false, false, false, ""), "accepted");
  EXPECT_EQ(f.axis(), "concurrency");
  EXPECT_NE(bad(f, false, false, true, "").find("--max-concurrency"), std::string::npos);
  EXPECT_NE(bad(f, false, false, false, "interactive").find("batch"), std::string::npos);
  f.sweep_concurrency = "1,2.5";
  EXPECT_NE(bad(f, false, false, false, "").find("--sweep-concurrency: '2.5' is not a decimal integer"), std::string::npos);
  f.sweep_concurrency = "0";
  EXPECT_NE(bad(f, false, false, false, "").find("[1, 100000]"), std::string::npos);
  f = {};
  f.find_max = "concurrency";
  f.find_start = 2.5;
  EXPECT_NE(bad(f, true, false, false, "").find("--find-start"), std::string::npos);
  EXPECT_THROW(parse_sweep_values("--sweep", "1,x", false), Error);
  EXPECT_THROW(parse_sweep_values("--sweep", ",", false), Error);
}

// Sweep values are read as every number of a flag is: decimal, no hex, no inf or nan, and an empty
// item (a doubled or trailing comma) is an error, not a value to skip.
TEST(LlmSweep, ValuesFollowTheNumberGrammar) {
  const auto error = [](const std::string& flag, const std::string& list, bool integers) {
    try {
      parse_sweep_values(flag, list, integers);
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(parse_sweep_values("--sweep", "0.5, 1e1 ,.25,010", false), (std::vector<double>{0.5, 10, 0.25, 10}));
  EXPECT_EQ(parse_sweep_values("--sweep-concurrency", "010,2", true), (std::vector<double>{10, 2}));
  for (const std::string list : {"", " "}) {
    EXPECT_EQ(error("--sweep", list, false), "--sweep: '" + list + "' holds no value (e.g. --sweep 1,2,4,8)") << list;
    EXPECT_NE(error("--sweep-concurrency", list, true).find("--sweep-concurrency: '" + list + "'"), std::string::npos);
  }
  for (const std::string list : {",", "1,,2", "1,2,", ",1", "1, ,2"}) {
    EXPECT_EQ(error("--sweep", list, false), "--sweep: an empty value in '" + list + "' (e.g. --sweep 1,2,4,8)");
    EXPECT_NE(error("--sweep-concurrency", list, true).find("an empty value in '" + list + "'"), std::string::npos);
  }
  for (const std::string v : {"0x10", "0x1p4", "inf", "nan", "1e999", "1_0", "+-1", "2 4"})
    EXPECT_EQ(error("--sweep", "1," + v, false), "--sweep: '" + v + "' is not a decimal rate in [0.001, 1000000]");
  for (const std::string v : {"0x10", "0b1", "1e1", "1.0", "-1", "18446744073709551616"})
    EXPECT_EQ(error("--sweep-concurrency", v, true),
              "--sweep-concurrency: '" + v + "' is not a decimal integer in [1, 100000]");
  std::string many = "1";
  for (int i = 0; i < 1000; ++i) many += ",1";
  EXPECT_NE(error("--sweep", many, false).find("at most 1000 values"), std::string::npos);
}

#ifdef HOTPATH_HAVE_CURL
std::unique_ptr<CLI::App> make_app() {
  auto app = std::make_unique<CLI::App>("hotpath");
  app->require_subcommand(1);
  add_llm_commands(*app);
  return app;
}

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() / ("hotpath_llm_sweep_e2e_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string operator/(const char* f) const { return (dir / f).string(); }
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// serve-sim answers 100 ms after receipt, so in batch mode a request that waited one wave for a
// client slot has RT >= 200 ms: with 4 requests and `rt:150ms`, concurrency 1 meets it for the
// first request only and concurrency 4 for all four (50 ms of margin either side).
TEST(LlmSweepBench, ConcurrencySweepCountsGoodputPerPoint) {
  SimConfig sc;
  sc.ttft_ms = 100;
  sc.tpot_ms = 1;
  SimServer s(sc);
  s.start();
  TempDir t;
  write_jsonl(std::vector<DatasetItem>(4, DatasetItem{.prompt = "p", .output_tokens = 2}), t / "d.jsonl");
  auto app = make_app();
  app->parse("llm bench --endpoint " + s.base_url() + " --model sim --dataset " + (t / "d.jsonl") +
                 " --sweep-concurrency 1,4 --repeat 2 --slo rt:150ms,e2e@p50:5s --quiet --json " + (t / "s.json") +
                 " --csv " + (t / "r.csv") + " --sweep-out " + (t / "sw"),
             false);
  const auto j = read_json(t / "s.json");
  EXPECT_EQ(j["axis"], "concurrency");
  ASSERT_EQ(j["runs"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& g = j["runs"][i]["goodput"];
    const bool c1 = i < 2;
    EXPECT_EQ(j["runs"][i]["config"]["max_concurrency"], c1 ? 1 : 4);
    EXPECT_EQ(j["runs"][i]["config"]["mode"], "batch");
    EXPECT_EQ(g["sent"], 4);
    EXPECT_EQ(g["requests_meeting"], c1 ? 1 : 4) << g.dump();
    EXPECT_EQ(g["all_met"].get<bool>(), !c1);
    EXPECT_TRUE(g["percentile_slos_met"].get<bool>());
  }
  EXPECT_EQ(j["points"][0]["repetitions"], 2);
  EXPECT_EQ(j["points"][1]["stats"]["goodput_rps"]["n"], 2);
  const auto table = lines_of(t / "sw.csv");
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].rfind("concurrency,completed,failed,rps", 0), 0u);
  EXPECT_NE(table[1].find(",0.250000,0,2,"), std::string::npos) << table[1];  // fraction, slos_met, repeats
  EXPECT_NE(table[2].find(",1.000000,1,2,"), std::string::npos) << table[2];
  const auto rows = lines_of(t / "r.csv");
  ASSERT_EQ(rows.size(), 17u);  // header + 4 runs x 4 requests
  EXPECT_EQ(rows[0].rfind("concurrency,repetition,index,", 0), 0u);
  EXPECT_EQ(rows[5].rfind("1.000000,1,0,", 0), 0u);  // concurrency 1, repetition 1, request 0
}

// A concurrency search with a loose SLO: 4 requests of 100 ms each give twice the throughput at
// each doubling up to concurrency 4 and none more at 8, which a 25% rule calls saturation.
TEST(LlmSweepBench, FindMaxConcurrencyStopsAtSaturation) {
  SimConfig sc;
  sc.ttft_ms = 100;
  sc.tpot_ms = 1;
  SimServer s(sc);
  s.start();
  TempDir t;
  write_jsonl(std::vector<DatasetItem>(4, DatasetItem{.prompt = "p", .output_tokens = 2}), t / "d.jsonl");
  auto app = make_app();
  app->parse("llm bench --endpoint " + s.base_url() + " --model sim --dataset " + (t / "d.jsonl") +
                 " --find-max concurrency --slo e2e:5s --find-saturation 0.25 --quiet --json " + (t / "s.json") +
                 " --sweep-out " + (t / "sw"),
             false);
  const auto sr = read_json(t / "s.json")["search"];
  EXPECT_EQ(probe_values(sr), (std::vector<double>{1, 2, 4, 8})) << sr.dump(1);
  EXPECT_EQ(sr["stopped"], "saturated");
  EXPECT_EQ(sr["best"], 4.0);
  EXPECT_EQ(sr["saturated_at"], 8.0);
  const double r1 = sr["probes"][0]["rps"].get<double>(), r4 = sr["probes"][2]["rps"].get<double>();
  EXPECT_GT(r4, 2.5 * r1);  // 4 slots: about 4x the requests per second of 1
}

TEST(LlmSweepBench, BadSloAndSweepFlagsStopBeforeAnyRequest) {
  TempDir t;
  write_jsonl(std::vector<DatasetItem>(1, DatasetItem{.prompt = "p", .output_tokens = 2}), t / "d.jsonl");
  const std::pair<const char*, const char*> cases[] = {
      {"--slo rt:5", "--slo: 'rt:5' needs a time unit"},
      {"--find-max rate", "--find-max needs --slo"},
      {"--sweep 1 --sweep-concurrency 2", "exclusive"},
      {"--repeat 2", "--repeat needs"},
      {"--sweep-concurrency 2 --max-concurrency 4", "--max-concurrency cannot"},
      {"--find-max concurrency --slo rt:1s --rate 3", "batch mode"},
      {"--find-max rate --slo rt:1s --mode batch", "need --mode interactive"},
      {"--sweep-concurrency 0", "--sweep-concurrency: '0'"},
      {"--sweep 1,,2", "--sweep: an empty value in '1,,2'"},
      {"--sweep 0x10", "--sweep: '0x10' is not a decimal rate"},
      {"--slo rt:5ms,,iwl:3ms", "--slo: an empty objective"},
      {"--slo rt:0x10ms", "--slo: 'rt:0x10ms' has a limit that is not a finite decimal number ('0x10')"}};
  for (const auto& [extra, msg] : cases) {
    auto app = make_app();
    try {
      app->parse("llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset " + (t / "d.jsonl") + " " + extra, false);
      ADD_FAILURE() << extra << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << extra << ": " << e.what();
    }
  }
}
#endif

}  // namespace
}  // namespace hotpath::llm
