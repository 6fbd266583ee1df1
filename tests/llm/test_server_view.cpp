// The server-side view end to end: `hotpath llm bench --metrics-url` against serve-sim in the same
// process, checked against what serve-sim is known to do (its concurrency and its TTFT).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "llm/llm_cli.hpp"
#include "llm/sim/sim_server.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

struct TempDir {
  std::filesystem::path p = std::filesystem::temp_directory_path() / ("hotpath_server_view_" + std::to_string(getpid()));
  TempDir() { std::filesystem::create_directories(p); }
  ~TempDir() { std::filesystem::remove_all(p); }
  std::string file(const char* name) const { return (p / name).string(); }
};

std::string write_dataset(const TempDir& d, int n, int tokens) {
  const std::string path = d.file("data.jsonl");
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) f << R"({"prompt": "summarize the filing", "output_tokens": )" << tokens << "}\n";
  return path;
}

nlohmann::json run_cli(const std::string& args) {
  CLI::App app("hotpath");
  app.require_subcommand(1);
  add_llm_commands(app);
  app.parse(args, false);
  return {};
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(LlmServerView, ScrapesServeSimDuringTheMeasuredPhase) {
  SimConfig sc;
  sc.ttft_ms = 50;
  sc.tpot_ms = 10;
  SimServer sim(sc);
  sim.start();
  TempDir d;
  const int concurrency = 6;
  const std::string data = write_dataset(d, 24, 10);
  run_cli("llm bench --endpoint " + sim.base_url() + " --model sim --dataset " + data +
          " --max-concurrency 6 --warmup 6 --ignore-eos --quiet --metrics-url auto --metrics-interval 0.05 --json " +
          d.file("r.json"));
  const auto r = read_json(d.file("r.json"));
  ASSERT_EQ(r["completed"], 24) << r.dump(1);
  const auto& m = r["server"]["metrics"];
  EXPECT_EQ(m["url"], "http://127.0.0.1:" + std::to_string(sim.port()) + "/metrics");
  EXPECT_EQ(m["interval_s"], 0.05);
  EXPECT_EQ(m["scrapes_failed"], 0) << m["first_error"];
  // ~0.6 s at 0.05 s, plus the baseline and the last scrape; a loaded machine may skip ticks.
  EXPECT_GE(m["scrapes_ok"].get<int>(), 4);
  // Six streams are in flight nearly all the time, and never more.
  const auto& running = m["series"]["running"];
  EXPECT_EQ(running["metric"], "vllm:num_requests_running");
  EXPECT_GE(running["max"].get<double>(), concurrency - 1);
  EXPECT_LE(running["max"].get<double>(), concurrency);
  EXPECT_EQ(running["samples"].size(), running["count"].get<std::size_t>());
  EXPECT_EQ(running["samples"][0][0], 0.0);  // the baseline, at the start of the measured phase
  EXPECT_GT(m["series"]["kv_cache_usage"]["max"].get<double>(), 0);
  EXPECT_EQ(m["series"]["waiting"]["max"], 0);
  // The server's TTFT over exactly the measured requests (the warm-up came before the baseline):
  // serve-sim's 50 ms, to the resolution of vLLM's (40, 60] ms bucket.
  const auto& t = m["ttft"];
  EXPECT_EQ(t["metric"], "vllm:time_to_first_token_seconds");
  EXPECT_EQ(t["server_count"], 24);
  EXPECT_EQ(t["server_bucket_ms"]["p50"], nlohmann::json::parse("[40.0, 60.0]"));
  EXPECT_NEAR(t["server_ms"]["p50"].get<double>(), sc.ttft_ms, 10);
  EXPECT_EQ(t["client_count"], 24);
  EXPECT_EQ(t["client_rt_from_send_ms"]["p50"], r["metrics"]["rt_from_send_ms"]["p50"]);
  EXPECT_EQ(t["reset"], false);
  // The endpoint is loopback, so GPU telemetry was tried; on a machine without NVML it says why.
  const auto& n = r["server"]["nvml"];
  ASSERT_TRUE(n["available"].is_boolean());
  if (!n["available"].get<bool>()) EXPECT_FALSE(n["reason"].get<std::string>().empty());
  else EXPECT_GE(n["gpus"].size(), 1u);
}

TEST(LlmServerView, ScrapeFailuresAreRecordedAndTheRunGoesOn) {
  SimServer sim(SimConfig{});
  sim.start();
  TempDir d;
  const std::string data = write_dataset(d, 4, 4);
  const std::string base = "http://127.0.0.1:" + std::to_string(sim.port());
  // A JSON route is not the exposition format: a malformed body, not a crash.
  run_cli("llm bench --endpoint " + sim.base_url() + " --model sim --dataset " + data +
          " --quiet --no-nvml --metrics-interval 0.05 --metrics-url " + base + "/v1/models --json " + d.file("a.json"));
  auto r = read_json(d.file("a.json"));
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["server"]["metrics"]["scrapes_ok"], 0);
  EXPECT_GE(r["server"]["metrics"]["scrapes_failed"].get<int>(), 2);  // at least the baseline and the last
  EXPECT_NE(r["server"]["metrics"]["first_error"].get<std::string>().find("malformed body: line 1"), std::string::npos)
      << r["server"]["metrics"]["first_error"];
  EXPECT_TRUE(r["server"]["metrics"]["ttft"].is_null());
  EXPECT_FALSE(r["server"].contains("nvml"));  // --no-nvml
  // A route that does not exist: the HTTP status is the error.
  run_cli("llm bench --endpoint " + sim.base_url() + " --model sim --dataset " + data +
          " --quiet --no-nvml --metrics-url " + base + "/nothing/here --json " + d.file("b.json"));
  r = read_json(d.file("b.json"));
  EXPECT_EQ(r["completed"], 4);
  EXPECT_NE(r["server"]["metrics"]["first_error"].get<std::string>().find("HTTP 404"), std::string::npos);
}

TEST(LlmServerView, BadFlagsAreUserErrors) {
  const std::string base = "llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset /no/such.jsonl ";
  EXPECT_THROW(run_cli(base + "--metrics-url auto --metrics-interval 0.01"), CLI::ParseError);
  EXPECT_THROW(run_cli(base + "--metrics-url auto --metrics-interval 61"), CLI::ParseError);
  EXPECT_THROW(run_cli(base + "--metrics-url auto --metrics-interval nan"), CLI::ParseError);
  TempDir d;
  const std::string ok = "llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset " + write_dataset(d, 1, 1) + " ";
  EXPECT_THROW(run_cli(ok + "--metrics-url ftp://h/metrics"), Error);
  EXPECT_THROW(run_cli(ok + "--nvml --no-nvml"), Error);
}

}  // namespace
}  // namespace hotpath::llm
