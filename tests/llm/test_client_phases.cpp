// The client's behaviour against serve-sim: connections kept from the warm-up, a reset before
// any response byte named as a request failure, Ctrl-C that still writes every output, both RTs in
// batch mode, load shapes (rate and cap ramps, trace replay), multi-turn conversations and extra
// headers. The first four failed on the code before they were fixed.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "llm/client/client.hpp"
#include "llm/loopback_socket.hpp"
#include "llm/sim/sim_server.hpp"
#include "llm/sim_fixture.hpp"
#include "llm/workloads/trace.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;

namespace hotpath::llm {
namespace {

using test::config_for;
using test::items;
using test::sim;

// --- defect 1: the warm-up's connections are the measured phase's ------------------------------

TEST(LlmClientPhases, WarmupConnectionsAreReused) {
  for (std::size_t threads : {1u, 2u}) {
    SimServer s(sim(2, 1));
    s.start();
    BenchConfig c = config_for(s);
    c.max_concurrency = 16;
    c.requests = 160;
    c.warmup = 16;
    c.threads = threads;
    const auto res = run_bench(c, items(8, 4));
    EXPECT_EQ(res.report["completed"], 160u);
    EXPECT_EQ(res.report["warmup"]["sent"], 16u);
    // Once each phase had its own handles: 32 connections.
    EXPECT_LE(s.stats().connections, 16u) << "threads " << threads;
    s.stop();
  }
}

TEST(LlmClientPhases, SweepPointsReuseTheClientsConnections) {
  SimServer s(sim(2, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.max_concurrency = 8;
  c.requests = 40;
  const auto data = items(4, 3);
  BenchClient client(c, data);
  for (int point = 0; point < 3; ++point) {
    const auto res = client.run(c);
    EXPECT_EQ(res.report["completed"], 40u);
  }
  EXPECT_LE(s.stats().connections, 8u);
  s.stop();
}

// --- defect 2: a reset before the first response byte is a request failure -----------------------

TEST(LlmClientPhases, ResetBeforeAnyByteIsARequestError) {
  SimConfig sc = sim(2, 1);
  sc.reset_rate = 1;
  SimServer s(sc);
  s.start();
  BenchConfig c = config_for(s);
  c.max_concurrency = 1;
  c.requests = 5;
  const auto res = run_bench(c, items(1, 3));
  EXPECT_EQ(res.report["failed"], 5u);
  EXPECT_EQ(res.report["failures"]["request_error"], 5u) << res.report["failures"].dump();
  EXPECT_EQ(res.report["failures"]["cut_stream"], 0u);
  EXPECT_NE(res.records[0].detail.find("before any response byte"), std::string::npos) << res.records[0].detail;
  EXPECT_GE(s.stats().resets, 5u);
  s.stop();
}

TEST(LlmClientPhases, CutAfterTheStreamStartedIsStillCutStream) {
  SimConfig sc = sim(2, 1);
  sc.cut_rate = 1;
  SimServer s(sc);
  s.start();
  BenchConfig c = config_for(s);
  c.requests = 3;
  const auto res = run_bench(c, items(1, 8));
  EXPECT_EQ(res.report["failures"]["cut_stream"], 3u) << res.report["failures"].dump();
  EXPECT_EQ(res.report["failures"]["request_error"], 0u);
  s.stop();
}

// --- defect 4: batch mode reports RT from the send as its headline -------------------------------

TEST(LlmClientPhases, BatchHeadlineIsRtFromSend) {
  SimServer s(sim(40, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.max_concurrency = 1;
  c.requests = 5;
  const auto res = run_bench(c, items(1, 2));
  const auto& m = res.report["metrics"];
  EXPECT_EQ(res.report["headline"]["rt"], "rt_from_send_ms");
  // From the send: the server's 40 ms. From the schedule (t = 0 for all): the queue for the one slot too.
  EXPECT_LT(m["rt_from_send_ms"]["p50"].get<double>(), 100.0);
  EXPECT_GT(m["rt_ms"]["max"].get<double>(), 4 * 40.0);
  s.stop();
  c.mode = Mode::interactive;  // open loop: the schedule is the load, RT from it is the headline
  SimServer s2(sim(5, 1));
  s2.start();
  c.endpoint = s2.base_url();
  c.rate = 100;
  const auto r2 = run_bench(c, items(1, 2));
  EXPECT_EQ(r2.report["headline"]["rt"], "rt_ms");
  s2.stop();
}

TEST(LlmClientPhases, SpinBeforeSendKeepsTheSchedule) {
  SimServer s(sim(2, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.mode = Mode::interactive;
  c.rate = 200;
  c.requests = 40;
  c.spin_us = 300;
  const auto res = run_bench(c, items(1, 2));
  EXPECT_EQ(res.report["completed"], 40u);
  EXPECT_EQ(res.report["config"]["spin_us"], 300.0);
  // Never early: a send happens at or after its scheduled time.
  for (const auto& r : res.records) EXPECT_GE(r.sent_s, r.scheduled_s);
  s.stop();
}

// --- load shapes ------------------------------------------------------------------------------------

TEST(LlmClientPhases, BatchCapRampOpensSlotsOverTime) {
  SimServer s(sim(150, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.max_concurrency = 8;
  c.requests = 8;
  c.ramp_s = 0.4;
  const auto res = run_bench(c, items(1, 2));
  ASSERT_EQ(res.report["completed"], 8u);
  std::vector<double> sent;
  for (const auto& r : res.records) sent.push_back(r.sent_s);
  std::sort(sent.begin(), sent.end());
  // Slot k + 1 opens at k * 0.4 / 8 s; all 8 requests outlast the ramp (150 ms each).
  EXPECT_LT(sent.front(), 0.04);
  EXPECT_GE(sent.back(), 0.7 * 0.4 * 7 / 8);
  EXPECT_GE(sent[4], 0.7 * 0.4 * 4 / 8);
  s.stop();
}

TEST(LlmClientPhases, TraceReplaysArrivalTimes) {
  const std::string text =
      "{\"timestamp\": 1000, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [7]}\n"
      "{\"timestamp\": 1150, \"input_length\": 30, \"output_length\": 2, \"hash_ids\": [7, 9]}\n"
      "{\"timestamp\": 1300, \"input_length\": 5, \"output_length\": 2}\n";
  const Trace t = parse_trace(text, "mem", TraceParams{1.0, 16});
  SimServer s(sim(2, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.mode = Mode::trace;
  c.trace_times = t.times_s;
  const auto res = run_bench(c, t.items);
  ASSERT_EQ(res.report["completed"], 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(res.records[i].scheduled_s, 0.15 * static_cast<double>(i), 1e-9);
    EXPECT_GE(res.records[i].sent_s, res.records[i].scheduled_s);
    EXPECT_LT(res.records[i].sent_s, res.records[i].scheduled_s + 0.1);
  }
  EXPECT_EQ(res.report["config"]["mode"], "trace");
  s.stop();
}

// --- multi-turn conversations -------------------------------------------------------------------------

TEST(LlmClientPhases, ConversationsCarryHistoryAndThinkTime) {
  SimServer s(sim(5, 1));
  s.start();
  BenchConfig c = config_for(s);
  c.turns = 3;
  c.think_time_s = 0.05;
  c.requests = 4;  // sessions
  c.max_concurrency = 4;
  const auto res = run_bench(c, items(12, 4));
  ASSERT_EQ(res.records.size(), 12u);
  EXPECT_EQ(res.report["completed"], 12u);
  const auto& cv = res.report["conversations"];
  EXPECT_EQ(cv["sessions"], 4u);
  EXPECT_EQ(cv["completed_sessions"], 4u);
  for (std::size_t sess = 0; sess < 4; ++sess) {
    for (int k = 1; k < 3; ++k) {
      const RequestRecord& prev = res.records[sess * 3 + static_cast<std::size_t>(k) - 1];
      const RequestRecord& cur = res.records[sess * 3 + static_cast<std::size_t>(k)];
      EXPECT_EQ(cur.session, sess);
      EXPECT_EQ(cur.turn, k);
      EXPECT_GE(cur.scheduled_s, prev.end_s + 0.05 - 1e-9);
      // The history: every earlier user turn (3 words) and reply (4 words) precede this turn.
      EXPECT_EQ(cur.input_words, static_cast<std::size_t>(k) * (3 + 4) + 3);
    }
  }
  s.stop();
}

TEST(LlmClientPhases, AFailedTurnEndsItsConversation) {
  SimConfig sc = sim(2, 1);
  sc.error_rate = 1;
  SimServer s(sc);
  s.start();
  BenchConfig c = config_for(s);
  c.turns = 3;
  c.requests = 2;
  const auto res = run_bench(c, items(6, 2));
  EXPECT_EQ(res.report["failed"], 2u);
  EXPECT_EQ(res.report["not_sent"], 4u);
  EXPECT_EQ(res.report["conversations"]["broken_sessions"], 2u);
  s.stop();
}

// --- --header -----------------------------------------------------------------------------------------

// Records the head of each request and answers with a one-word stream.
class HeaderServer {
 public:
  HeaderServer() {
    fd_ = test::listen_loopback(port_, "header server");
    thread_ = std::thread([this] { serve(); });
  }
  ~HeaderServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  std::string head() {
    std::lock_guard<std::mutex> l(m_);
    return head_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        pollfd q{c, POLLIN, 0};
        if (poll(&q, 1, 2000) <= 0) break;
        const ssize_t r = recv(c, buf, sizeof buf, 0);
        if (r <= 0) break;
        in.append(buf, static_cast<std::size_t>(r));
      }
      {
        std::lock_guard<std::mutex> l(m_);
        head_ = in.substr(0, in.find("\r\n\r\n"));
      }
      const std::string body =
          "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
      const std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] ssize_t w = send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      shutdown(c, SHUT_WR);
      for (pollfd q{c, POLLIN, 0}; poll(&q, 1, 500) > 0 && recv(c, buf, sizeof buf, 0) > 0;) {
      }
      close(c);
    }
  }
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex m_;
  std::string head_;
  std::thread thread_;
};

TEST(LlmClientPhases, ExtraHeadersAreSent) {
  HeaderServer hs;
  BenchConfig c;
  c.endpoint = hs.url();
  c.model = "m";
  c.timeout_s = 10;
  c.requests = 1;
  c.headers = {"X-Desk: rates", "X-Trace-Id: 42"};
  const auto res = run_bench(c, items(1, 1));
  EXPECT_EQ(res.report["completed"], 1u) << res.records[0].detail;
  const std::string head = hs.head();
  EXPECT_NE(head.find("X-Desk: rates"), std::string::npos) << head;
  EXPECT_NE(head.find("X-Trace-Id: 42"), std::string::npos) << head;
  EXPECT_EQ(res.report["config"]["headers"], nlohmann::json({"X-Desk", "X-Trace-Id"}));  // names only
}

TEST(LlmClientPhases, BadHeadersAreRefused) {
  BenchConfig c;
  c.endpoint = "http://127.0.0.1:9/v1";
  c.model = "m";
  for (const char* h : {"NoColon", ": empty name", "Bad Name: x", "X-A: b\r\nX-Injected: c"}) {
    c.headers = {h};
    EXPECT_THROW(run_bench(c, items(1, 1)), Error) << h;
  }
}

// --- defect 3: Ctrl-C ---------------------------------------------------------------------------------

class LlmInterrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hotpath_llm_int_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    dataset_ = (dir_ / "d.jsonl").string();
    std::ofstream(dataset_) << R"({"prompt":"a b","output_tokens":4})" << '\n';
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts the built binary with `args`, sends SIGINT at each of `signal_at_s`, and returns its exit
  // status and how long it ran.
  std::pair<int, double> run_interrupted(const std::string& args, std::vector<double> signal_at_s) {
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string cmd = std::string(HOTPATH_BINARY) + " " + args + " >" + (dir_ / "out.txt").string() +
                              " 2>" + (dir_ / "err.txt").string() + " </dev/null";
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (double at : signal_at_s) {
      std::this_thread::sleep_until(t0 + std::chrono::duration<double>(at));
      kill(pid, SIGINT);
    }
    int status = 0;
    // A hang would fail the test rather than block it: give up (and kill) after 20 s.
    for (int i = 0; i < 2000 && waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {-1, 99};
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s};
  }
  std::string read(const char* name) const {
    std::ifstream f(dir_ / name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  fs::path dir_;
  std::string dataset_;
};

TEST_F(LlmInterrupt, FirstCtrlCWritesEveryOutputMarkedInterrupted) {
  SimServer s(sim(10, 5));
  s.start();
  const std::string json = (dir_ / "r.json").string(), csv = (dir_ / "r.csv").string();
  const auto [code, secs] = run_interrupted("llm bench --endpoint " + s.base_url() + " --model sim --dataset " + dataset_ +
                                                " --rate 50 --duration 30 --json " + json + " --csv " + csv,
                                            {1.0});
  EXPECT_EQ(code, 130) << read("err.txt");
  EXPECT_LT(secs, 10.0);
  ASSERT_TRUE(fs::exists(json)) << read("err.txt");
  ASSERT_TRUE(fs::exists(csv));
  std::ifstream f(json);
  const auto r = nlohmann::json::parse(f);
  EXPECT_EQ(r["interrupted"], true);
  EXPECT_GT(r["completed"].get<std::size_t>(), 10u);
  EXPECT_EQ(r["abandoned"], 0u);  // 25 ms streams all finish within the grace period
  EXPECT_GT(r["not_sent"].get<std::size_t>(), 0u);
  EXPECT_NE(read("out.txt").find("INTERRUPTED"), std::string::npos);
  s.stop();
}

TEST_F(LlmInterrupt, GracePeriodAbandonsWhatIsStillInFlight) {
  SimServer s(sim(10, 1000));  // streams of 4 tokens a second apart
  s.start();
  const std::string json = (dir_ / "r.json").string();
  const auto [code, secs] = run_interrupted("llm bench --endpoint " + s.base_url() + " --model sim --dataset " + dataset_ +
                                                " --requests 4 --grace 0.3 --json " + json,
                                            {0.5});
  EXPECT_EQ(code, 130) << read("err.txt");
  EXPECT_LT(secs, 3.0);
  ASSERT_TRUE(fs::exists(json)) << read("err.txt");
  std::ifstream f(json);
  const auto r = nlohmann::json::parse(f);
  EXPECT_EQ(r["interrupted"], true);
  EXPECT_EQ(r["abandoned"], 4u);
  EXPECT_EQ(r["failures"]["abandoned"], 4u);
  s.stop();
}

TEST_F(LlmInterrupt, SecondCtrlCQuitsAtOnce) {
  SimServer s(sim(10, 1000));
  s.start();
  const auto [code, secs] = run_interrupted("llm bench --endpoint " + s.base_url() + " --model sim --dataset " + dataset_ +
                                                " --requests 4 --grace 60",
                                            {0.5, 0.8});
  EXPECT_EQ(code, 130) << read("err.txt");
  EXPECT_LT(secs, 3.0);
  s.stop();
}

}  // namespace
}  // namespace hotpath::llm
