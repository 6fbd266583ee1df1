// The measuring client against hostile servers and hostile flags (needs libcurl). Servers here are
// canned byte strings on loopback (or serve-sim with its faults); the CLI cases run the built
// `hotpath` under a `timeout` guard, since several of them used to hang. Each test failed on the
// code before its fix.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "llm/client/client.hpp"
#include "llm/common/limits.hpp"
#include "llm/csv_check.hpp"
#include "llm/loopback_socket.hpp"
#include "llm/sim/sim_server.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace fs = std::filesystem;

namespace hotpath::llm {
namespace {

// Answers every connection on 127.0.0.1 with the same bytes after reading one request, then closes;
// with `hold_open`, it keeps the connection open until the client closes it.
class CannedServer {
 public:
  explicit CannedServer(std::string response, bool hold_open = false)
      : response_(std::move(response)), hold_open_(hold_open) {
    fd_ = test::listen_loopback(port_, "canned server");
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      read_request(c);
      std::size_t off = 0;
      while (off < response_.size()) {
        const ssize_t w = send(c, response_.data() + off, response_.size() - off, MSG_NOSIGNAL);
        if (w <= 0) break;  // the client gave up (as it must for an oversized line)
        off += static_cast<std::size_t>(w);
      }
      char buf[4096];
      if (hold_open_) {
        while (!stop_) {
          pollfd q{c, POLLIN, 0};
          const int n = poll(&q, 1, 50);
          if (n > 0 && recv(c, buf, sizeof buf, 0) <= 0) break;  // the client closed it
        }
        close(c);
        continue;
      }
      shutdown(c, SHUT_WR);
      for (pollfd q{c, POLLIN, 0}; poll(&q, 1, 2000) > 0 && recv(c, buf, sizeof buf, 0) > 0;) {
      }
      close(c);
    }
  }
  // Reads the head and a Content-Length body, so that closing does not reset the connection.
  static void read_request(int c) {
    std::string in;
    char buf[4096];
    std::size_t need = std::string::npos;
    while (in.size() < need) {
      pollfd q{c, POLLIN, 0};
      if (poll(&q, 1, 5000) <= 0) return;
      const ssize_t r = recv(c, buf, sizeof buf, 0);
      if (r <= 0) return;
      in.append(buf, static_cast<std::size_t>(r));
      const std::size_t end = in.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      std::string head = in.substr(0, end);
      std::transform(head.begin(), head.end(), head.begin(), ::tolower);
      const std::size_t cl = head.find("content-length:");
      need = end + 4 + (cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 15)));
    }
  }

  std::string response_;
  bool hold_open_ = false;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<DatasetItem> one_item() {
  DatasetItem it;
  it.prompt = "hello there";
  it.input_words = 2;
  it.output_tokens = 4;
  return {it};
}

BenchConfig config_for(const std::string& url) {
  BenchConfig c;
  c.endpoint = url;
  c.model = "m";
  c.timeout_s = 10;
  c.requests = 1;
  return c;
}

BenchResult run_against(const std::string& response) {
  CannedServer srv(response);
  return run_bench(config_for(srv.url()), one_item());
}

const std::string kSseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

TEST(LlmHostileClient, RedirectIsAnHttpRedirectNotACutStream) {
  const auto res = run_against(
      "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 5\r\nConnection: close\r\n\r\nmoved");
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].reason, reason::http_redirect) << res.records[0].detail;
  EXPECT_EQ(res.records[0].http_status, 302);
  EXPECT_NE(res.records[0].detail.find("http://127.0.0.1:1/elsewhere"), std::string::npos) << res.records[0].detail;
  EXPECT_EQ(res.report["failures"]["http_redirect"], 1);
  EXPECT_EQ(res.report["failures"]["cut_stream"], 0);
}

TEST(LlmHostileClient, EndlessLineIsAnOversizedEventAndBounded) {
  // 3 x the cap without a newline: the client must stop reading, not buffer it all.
  const auto res = run_against(kSseHead + "data: " + std::string(3 * kMaxEventBytes, 'x'));
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].reason, reason::oversized_event) << res.records[0].reason << ": " << res.records[0].detail;
  EXPECT_EQ(res.report["failures"]["oversized_event"], 1);
}

TEST(LlmHostileClient, NegativeUsageIsAMalformedEventNotATotal) {
  const auto res = run_against(kSseHead +
                               "data: {\"choices\":[{\"delta\":{\"content\":\"hi you\"}}]}\n\n"
                               "data: {\"choices\":[],\"usage\":{\"completion_tokens\":-5,\"prompt_tokens\":2}}\n\n"
                               "data: [DONE]\n\n");
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].reason, reason::malformed_event) << res.records[0].reason;
  EXPECT_TRUE(res.report["output_tokens_total"].is_null()) << res.report["output_tokens_total"];
}

TEST(LlmHostileClient, ErrorBodyWithNulAndInvalidUtf8GivesAValidCsv) {
  const std::string body("oops\0\xff\n,\"x\"", 11);
  CannedServer srv("HTTP/1.1 500 Internal Server Error\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\nConnection: close\r\n\r\n" + body);
  const auto res = run_bench(config_for(srv.url()), one_item());
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].reason, reason::http_error);
  const std::string csv = clean_csv_of(res.records);
  EXPECT_NE(csv.find(R"(oops\x00\xff\x0a,""x"")"), std::string::npos) << csv;
}

// One chunk of a chunked body.
std::string chunk(const std::string& data) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
  return hex + data + "\r\n";
}

TEST(LlmHostileClient, StreamHeldOpenAfterDoneEndsAtDoneNotAtTheTimeout) {
  const std::string events = "data: {\"choices\":[{\"delta\":{\"content\":\"hi you\"}}]}\n\ndata: [DONE]\n\n";
  // A keep-alive response whose chunked body never gets its last chunk, and one without framing.
  const std::string chunked = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                              chunk("data: {\"choices\":[{\"delta\":{\"content\":\"hi you\"}}]}\n\n") +
                              chunk("data: [DONE]\n\n");
  for (const std::string& response : {chunked, kSseHead + events}) {
    CannedServer srv(response, /*hold_open=*/true);
    BenchConfig c = config_for(srv.url());
    c.timeout_s = 20;
    c.requests = 2;
    c.max_concurrency = 1;
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = run_bench(c, one_item());
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(res.report["completed"], 2) << res.report["failures"].dump();
    for (const auto& r : res.records) EXPECT_EQ(r.words, 2u);
    // Each request ends at its [DONE] (and a short linger), not at --timeout: 40 s before.
    EXPECT_LT(took, 5.0);
  }
}

TEST(LlmHostileClient, BareCrLineEndsAreEventsNotMalformed) {
  const auto res = run_against(kSseHead +
                               "data: {\"choices\":[{\"delta\":{\"content\":\"hi you\"}}]}\r\r"
                               ": comment\r\r"
                               "data: [DONE]\r\r");
  ASSERT_EQ(res.records.size(), 1u);
  EXPECT_EQ(res.records[0].outcome, Outcome::completed) << res.records[0].reason << ": " << res.records[0].detail;
  EXPECT_EQ(res.records[0].words, 2u);
}

TEST(LlmHostileClient, ResetReusedConnectionsAreNotResentUncounted) {
  // libcurl resends a request by itself when a reused connection dies before any response byte:
  // 200 requests gave the server ~230 arrivals, the resends counted nowhere. Every send is counted.
  SimConfig sc;
  sc.ttft_ms = 1;
  sc.tpot_ms = 0.2;
  sc.reset_rate = 0.3;
  sc.seed = 11;
  SimServer sim(sc);
  sim.start();
  BenchConfig c = config_for(sim.base_url());
  c.requests = 200;
  c.max_concurrency = 4;
  const auto res = run_bench(c, one_item());
  const SimStats st = sim.stats();
  sim.stop();
  EXPECT_EQ(res.report["sent"], 200);
  EXPECT_EQ(st.requests, res.report["sent"].get<std::uint64_t>()) << "arrivals at the server vs sends in the report";
  EXPECT_EQ(st.resets, res.report["failures"]["request_error"].get<std::uint64_t>()) << res.report["failures"].dump();
  EXPECT_EQ(res.report["completed"].get<std::uint64_t>() + st.resets, 200u);
  EXPECT_GT(st.resets, 20u);  // the fault did happen, often on a reused connection
}

TEST(LlmHostileClient, SchemeInAnyCaseIsAccepted) {
  SimServer sim(SimConfig{});
  sim.start();
  const std::string base = sim.base_url();  // http://127.0.0.1:PORT/v1
  for (const std::string scheme : {"HTTP://", "Http://"}) {
    BenchConfig c = config_for(scheme + base.substr(7));
    c.requests = 2;
    const auto res = run_bench(c, one_item());
    EXPECT_EQ(res.report["completed"], 2) << scheme << ' ' << res.report["failures"].dump();
  }
  EXPECT_NO_THROW(endpoint_url("HTTPS://example.com/v1", Api::chat));
  EXPECT_THROW(endpoint_url("HTTPX://example.com/v1", Api::chat), Error);
  sim.stop();
}

TEST(LlmHostileClient, TimeoutBelowAMillisecondIsRefusedNotNone) {
  BenchConfig c = config_for("http://127.0.0.1:1/v1");
  c.timeout_s = 0.0004;  // rounded to 0 ms it meant "no timeout" in libcurl
  EXPECT_THROW(run_bench(c, one_item()), Error);
  c.timeout_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(run_bench(c, one_item()), Error);
}

TEST(LlmHostileClient, OversizedSettingsAreRefusedBeforeAnyAllocation) {
  for (int k = 0; k < 4; ++k) {
    BenchConfig c = config_for("http://127.0.0.1:1/v1");
    if (k == 0) c.max_concurrency = 1'000'000'000'000ULL;
    if (k == 1) c.requests = ~std::size_t{0};
    if (k == 2) c.warmup = ~std::size_t{0};
    if (k == 3) c.threads = 100'000;
    EXPECT_THROW(run_bench(c, one_item()), Error) << k;
  }
}

TEST(LlmHostileClient, ThreadThatCannotStartEndsTheRunWithAnErrorNotAnAbort) {
  SimServer sim(SimConfig{});
  sim.start();
  BenchConfig c = config_for(sim.base_url());
  c.requests = 8;
  c.threads = 4;
  for (int fail_at : {0, 1, 3}) {
    util::fail_thread_start_for_test(fail_at);
    try {
      run_bench(c, one_item());
      ADD_FAILURE() << "no error when thread " << fail_at + 1 << " could not start";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot start thread " + std::to_string(fail_at + 1) + " of 4"),
                std::string::npos)
          << e.what();
    }
  }
  util::fail_thread_start_for_test(-1);
  EXPECT_EQ(run_bench(c, one_item()).report["completed"], 8);  // and the client still works
}

// ---- the built binary ---------------------------------------------------------------------------

struct CliRun {
  int code;
  std::string err;
};

class LlmHostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hotpath_llm_hostile_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    dataset_ = (dir_ / "d.jsonl").string();
    std::ofstream(dataset_) << R"({"prompt":"a b","output_tokens":3})" << '\n';
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `timeout` turns a hang into exit 124 instead of a stuck test.
  CliRun hotpath(const std::string& args) const {
    const std::string err = (dir_ / "stderr.txt").string();
    const std::string cmd =
        "timeout -s KILL 20 " + std::string(HOTPATH_BINARY) + " " + args + " >/dev/null 2>" + err + " </dev/null";
    const int status = std::system(cmd.c_str());
    std::ifstream f(err);
    std::stringstream s;
    s << f.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s.str()};
  }
  void expect_refused(const std::string& args, const std::string& needle) const {
    const CliRun r = hotpath(args);
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nnot one line: " << r.err;
  }
  std::string bench(const std::string& extra) const {
    return "llm bench --endpoint http://127.0.0.1:1/v1 --model m --timeout 2 --dataset " + dataset_ + " " + extra;
  }

  fs::path dir_;
  std::string dataset_;
};

TEST_F(LlmHostileCli, BenchNumbersOutOfRangeAreExit2NamingTheFlagAndLimit) {
  expect_refused(bench("--requests -5"), "--requests: must be a decimal integer in [1, 10000000]");
  expect_refused(bench("--requests 18446744073709551615"), "--requests: must be a decimal integer in [1, 10000000]");
  expect_refused(bench("--warmup 18446744073709551615"), "--warmup: must be a decimal integer in [0, 10000000]");
  expect_refused(bench("--max-concurrency -1"), "--max-concurrency: must be a decimal integer in [1, 100000]");
  expect_refused(bench("--max-concurrency 1000000000000"), "--max-concurrency: must be a decimal integer in [1, 100000]");
  expect_refused(bench("--max-concurrency 0x10"), "--max-concurrency");  // decimal only (CLI11 takes hex, octal)
  expect_refused(bench("--timeout 0.0004"), "--timeout: must be a decimal number in [0.001, 1000000]");
  expect_refused(bench("--timeout nan"), "--timeout");
  expect_refused(bench("--duration nan"), "--duration: must be a decimal number in (0, 10000000]");
  expect_refused(bench("--duration -1"), "--duration");
  expect_refused(bench("--threads 0"), "--threads: must be a decimal integer in [1, 256]");
  expect_refused(bench("--rate nan"), "--rate");
  expect_refused(bench("--burstiness inf --rate 5"), "--burstiness");
  expect_refused(bench("--seed -1"), "--seed");
  expect_refused(bench("--sweep 1,nan"), "--sweep");
}

// One number grammar for flags and the numbers inside specs; an empty spec or list item is an error,
// not "not given" or "skip it".
TEST_F(LlmHostileCli, EmptyAndMalformedSpecsAreExit2NamingTheFlagAndValue) {
  expect_refused(bench("--requests 010 --max-concurrency 0x10"),
                 "--max-concurrency: must be a decimal integer in [1, 100000] (got '0x10')");
  expect_refused(bench("--seed ''"), "--seed: must be a decimal integer in [0, 18446744073709551615] (got '')");
  expect_refused(bench("--seed 18446744073709551616"), "(got '18446744073709551616')");
  expect_refused(bench("--rate 0x10"), "--rate: must be a decimal number in [0.001, 1000000] (got '0x10')");
  expect_refused(bench("--duration 0x1p4"), "--duration: must be a decimal number in (0, 10000000] (got '0x1p4')");
  expect_refused(bench("--sweep ''"), "--sweep: '' holds no value");
  expect_refused(bench("--sweep 1,,2"), "--sweep: an empty value in '1,,2'");
  expect_refused(bench("--sweep 1,2,"), "--sweep: an empty value in '1,2,'");
  expect_refused(bench("--sweep 0x10"), "--sweep: '0x10' is not a decimal rate");
  expect_refused(bench("--sweep-concurrency ''"), "--sweep-concurrency: '' holds no value");
  expect_refused(bench("--sweep-concurrency 1,,4"), "--sweep-concurrency: an empty value in '1,,4'");
  expect_refused(bench("--sweep-concurrency 010,0x10"), "--sweep-concurrency: '0x10' is not a decimal integer");
  expect_refused(bench("--slo ''"), "--slo: '' holds no objective");
  expect_refused(bench("--slo 'rt:5ms,,iwl:3ms'"), "--slo: an empty objective in 'rt:5ms,,iwl:3ms'");
  expect_refused(bench("--slo rt:0x10ms"),
                 "--slo: 'rt:0x10ms' has a limit that is not a finite decimal number ('0x10')");
  expect_refused("llm serve-sim --port 0x10", "--port: must be a decimal integer in [0, 65535] (got '0x10')");
  expect_refused("llm serve-sim --port ''", "--port: must be a decimal integer in [0, 65535] (got '')");
  expect_refused("llm dataset synth --requests 1 --input-mean 0x10 --output-mean 1 --out " + (dir_ / "d.jsonl").string(),
                 "--input-mean: must be a decimal number in (0, 1000000] (got '0x10')");
}

TEST_F(LlmHostileCli, MalformedEndpointsAreExit2BeforeAnyRequest) {
  for (const char* url : {"http://127.0.0.1:99999/v1", "http://127.0.0.1:0/v1", "'http://[::1/v1'",
                          "'http://exa mple/v1'", "http://127.0.0.1:28403:1/v1", "http://127.0.0.1:/v1",
                          "http:///v1", "'http://[::zz]:80/v1'"}) {
    expect_refused("llm bench --model m --timeout 2 --dataset " + dataset_ + " --endpoint " + url, "--endpoint: ");
  }
}

TEST_F(LlmHostileCli, HeadersTheClientSetsItselfAreExit2NamingThem) {
  // libcurl sent these in place of its own: every request then failed (http_error) or misbehaved.
  for (const char* h : {"Content-Length: 5", "content-length: 5", "Content-Length:", "Transfer-Encoding: chunked",
                        "Host: example.com", "Connection: close", "Upgrade: h2c", "TE: gzip", "Keep-Alive: 5",
                        "Proxy-Connection: keep-alive"}) {
    const std::string name = std::string(h).substr(0, std::string(h).find(':'));
    expect_refused(bench(std::string("--header '") + h + "'"), "--header: " + name + " cannot be set");
  }
  EXPECT_THROW(check_headers({"X-Tenant: a", "HOST: b"}), Error);
  EXPECT_NO_THROW(check_headers({"X-Tenant: a", "Content-Type: application/json", "Hosts: b"}));
}

TEST_F(LlmHostileCli, DatasetFieldsOutOfRangeAreExit2) {
  for (const char* v : {"1e400", "2147483648", "4294967297", "-1"}) {
    std::ofstream(dataset_) << R"({"prompt":"a b","output_tokens":)" << v << "}\n";
    expect_refused(bench(""), "d.jsonl:1: ");
  }
}

TEST_F(LlmHostileCli, SynthAndSimNumbersOutOfRangeAreExit2) {
  const std::string out = " --out " + (dir_ / "s.jsonl").string();
  expect_refused("llm dataset synth --requests 2 --input-mean nan --output-mean 3" + out, "--input-mean");
  expect_refused("llm dataset synth --requests 2 --input-mean 1e19 --output-mean 3" + out, "--input-mean");
  expect_refused("llm dataset synth --requests 2 --input-mean 3 --input-stdev nan --output-mean 3" + out,
                 "--input-stdev");
  expect_refused("llm dataset synth --requests -1 --input-mean 3 --output-mean 3" + out, "--requests");
  expect_refused("llm dataset synth --requests 2 --input-mean 3 --output-mean inf" + out, "--output-mean");
  for (const char* flag : {"--ttft-ms nan", "--tpot-ms -1", "--error-rate nan", "--malformed-rate nan",
                           "--cut-rate 2", "--duration nan", "--duration -1", "--port 70000", "--tokens-per-word 0"})
    expect_refused(std::string("llm serve-sim ") + flag, std::string(flag).substr(0, std::string(flag).find(' ')));
}

}  // namespace
}  // namespace hotpath::llm
