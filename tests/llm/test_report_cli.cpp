// `hotpath llm bench --report / --progress` against serve-sim of known timing: the HTML report of a
// run and of a sweep says what the JSON says, and the progress line counts the run as it goes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "llm/html_check.hpp"
#include "llm/llm_cli.hpp"
#include "llm/sim/sim_server.hpp"

namespace hotpath::llm {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sends this process's stdout and stderr to files while it lives (the summary and the progress line).
class Capture {
 public:
  explicit Capture(const std::filesystem::path& dir) {
    std::cout.flush();
    std::fflush(nullptr);
    for (int fd : {1, 2}) {
      saved_[fd - 1] = dup(fd);
      const int f = open((dir / (fd == 1 ? "stdout" : "stderr")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(f, fd);
      close(f);
    }
  }
  ~Capture() {
    std::cout.flush();
    std::fflush(nullptr);
    for (int fd : {1, 2}) {
      dup2(saved_[fd - 1], fd);
      close(saved_[fd - 1]);
    }
  }

 private:
  int saved_[2] = {-1, -1};
};

struct Fixture {
  std::filesystem::path dir;
  SimServer sim;
  explicit Fixture(const char* name) : dir(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))), sim([] {
    SimConfig c;
    c.ttft_ms = 20;  // the known RT
    c.tpot_ms = 1;
    c.error_rate = 0.1;  // failures in the report, with the server's text
    c.seed = 3;
    return c;
  }()) {
    std::filesystem::create_directories(dir);
    std::ofstream o(dir / "ds.jsonl");
    for (int i = 0; i < 5; ++i) o << R"({"prompt": "a b c", "output_tokens": 6})" << '\n';
    sim.start();
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
  void bench(const std::string& args) {
    CLI::App app{"hotpath"};
    add_llm_commands(app);
    app.parse("llm bench --endpoint " + sim.base_url() + " --model sim --dataset " + (dir / "ds.jsonl").string() + " " +
                  args,
              false);
  }
};

// Every metric and count printed for a run equals its JSON report.
void expect_tables_equal(const std::string& html, const nlohmann::json& r) {
  const auto t = test::tables_of(html);
  ASSERT_EQ(t.metrics.size(), 8u);
  for (const auto& [key, cells] : t.metrics)
    for (const auto& [q, text] : cells) {
      const auto& want = r["metrics"][key][q];
      if (want.is_null()) EXPECT_EQ(text, "-") << key << q;
      else EXPECT_NEAR(std::stod(text), want.get<double>(), 5e-4 + 1e-9 * std::fabs(want.get<double>())) << key << q;
    }
  for (const char* k : {"requests", "completed", "failed"}) EXPECT_EQ(t.rows.at(k), r[k].dump()) << k;
  EXPECT_NEAR(std::stod(t.rows.at("rps")), r["rps"].get<double>(), 5e-4);
  EXPECT_NEAR(std::stod(t.rows.at("wps_total")), r["wps_total"].get<double>(), 5e-4);
  if (r["failures"]["http_error"].get<int>() > 0) EXPECT_EQ(t.rows.at("failures.http_error"), r["failures"]["http_error"].dump());
}

TEST(LlmReportCli, SingleRunReportAndForcedProgress) {
  Fixture f("hotpath_llm_report_cli_");
  {
    Capture cap(f.dir);
    f.bench("--rate 200 --requests 30 --seed 1 --progress --json " + (f.dir / "r.json").string() + " --report " +
            (f.dir / "r.html").string());
  }
  const auto r = nlohmann::json::parse(slurp(f.dir / "r.json"));
  const std::string html = slurp(f.dir / "r.html");
  EXPECT_EQ(test::check_markup(html), "");
  EXPECT_EQ(html.find("<script"), std::string::npos);
  expect_tables_equal(html, r);
  // serve-sim's 20 ms to the first token is what the report shows.
  const double rt = std::stod(test::tables_of(html).metrics["rt_ms"]["p50"]);
  EXPECT_GE(rt, 19.5);
  EXPECT_LE(rt, 50);
  EXPECT_EQ(r["completed"].get<int>() + r["failed"].get<int>(), 30);
  EXPECT_GT(r["failed"].get<int>(), 0);
  EXPECT_NE(html.find("<table class=\"failures\">"), std::string::npos);
  // The progress line (forced: stderr is a file here) ends on the run's final counts.
  const std::string err = slurp(f.dir / "stderr");
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.front(), '\r');
  EXPECT_EQ(err.back(), '\n');
  const std::string last = err.substr(err.rfind('\r') + 1);
  EXPECT_NE(last.find("sent 30  completed " + r["completed"].dump() + "  failed " + r["failed"].dump()),
            std::string::npos) << last;
  EXPECT_NE(last.find("[100.0%]"), std::string::npos) << last;
}

TEST(LlmReportCli, SweepReportHasASectionPerPoint) {
  Fixture f("hotpath_llm_report_sweep_");
  {
    Capture cap(f.dir);
    f.bench("--quiet --progress --sweep 100,200 --requests 10 --sweep-out " + (f.dir / "sw").string() + " --json " +
            (f.dir / "r.json").string() + " --report " + (f.dir / "r.html").string());
  }
  EXPECT_EQ(slurp(f.dir / "stderr"), "");  // --quiet: no progress line even when forced
  const auto runs = nlohmann::json::parse(slurp(f.dir / "r.json"))["runs"];
  const std::string html = slurp(f.dir / "r.html");
  EXPECT_EQ(test::check_markup(html), "");
  EXPECT_NE(html.find("<section id=\"frontier\">"), std::string::npos);
  ASSERT_EQ(runs.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::size_t a = html.find("<section id=\"run-" + std::to_string(i) + "\">");
    ASSERT_NE(a, std::string::npos);
    const std::string section = html.substr(a, html.find("</section>", a) - a);
    EXPECT_NE(section.find(i == 0 ? "rate 100 req/s" : "rate 200 req/s"), std::string::npos);
    expect_tables_equal(section, runs[i]);
  }
}

TEST(LlmReportCli, ProgressFlagsExcludeEachOther) {
  Fixture f("hotpath_llm_report_flags_");
  EXPECT_THROW(f.bench("--rate 10 --progress --no-progress"), CLI::ParseError);
}

}  // namespace
}  // namespace hotpath::llm
