// serve-sim spoken to over a raw socket, so these run in builds without libcurl too.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "llm/client/sse.hpp"
#include "llm/loopback_socket.hpp"
#include "llm/sim/sim_server.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

// Sends `request` and reads until the response is complete (`until` seen) or the peer closes;
// every read is bounded by a 5 s timeout.
std::string exchange(std::uint16_t port, const std::string& request, const std::string& until) {
  const int fd = test::connect_loopback(port);
  if (fd < 0) return "";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    got.append(buf, static_cast<std::size_t>(r));
    if (!until.empty() && got.find(until) != std::string::npos) break;
  }
  close(fd);
  return got;
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

// Undoes chunked transfer encoding.
std::string dechunk(const std::string& resp) {
  std::size_t p = resp.find("\r\n\r\n") + 4;
  std::string out;
  for (;;) {
    const std::size_t e = resp.find("\r\n", p);
    if (e == std::string::npos) break;
    const std::size_t n = std::stoul(resp.substr(p, e - p), nullptr, 16);
    if (n == 0) break;
    out += resp.substr(e + 2, n);
    p = e + 2 + n + 2;
  }
  return out;
}

std::vector<std::string> events_of(const std::string& resp) {
  SseParser p;
  std::vector<std::string> ev;
  p.feed(dechunk(resp), [&](std::string_view d) {
    ev.emplace_back(d);
    return true;
  });
  return ev;
}

TEST(LlmSim, TokenTextSplitsWordsOverTokens) {
  EXPECT_EQ(sim_token_text(0, 1), "alpha");
  EXPECT_EQ(sim_token_text(1, 1), " bravo");
  EXPECT_EQ(sim_token_text(0, 2) + sim_token_text(1, 2) + sim_token_text(2, 2) + sim_token_text(3, 2),
            "alpha bravo");
  EXPECT_EQ(sim_token_text(2, 2), " br");
}

TEST(LlmSim, StreamsChatWithRoleChunkUsageAndDone) {
  SimConfig c;
  c.ttft_ms = 0;
  c.tpot_ms = 0;
  SimServer s(c);
  s.start();
  ASSERT_NE(s.port(), 0);
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"a b c"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}})";
  const std::string resp = exchange(s.port(), post("/v1/chat/completions", body, "Connection: close\r\n"), "");
  ASSERT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << resp;
  const auto ev = events_of(resp);
  ASSERT_EQ(ev.size(), 1u + 4u + 1u + 1u) << resp;  // role, 4 tokens, usage, [DONE]
  EXPECT_TRUE(interpret_event(ev[0]).text.empty());
  std::string text;
  for (int i = 1; i <= 4; ++i) text += interpret_event(ev[i]).text;
  EXPECT_EQ(text, "alpha bravo charlie delta");
  EXPECT_EQ(interpret_event(ev[4]).finish_reason, "length");
  EXPECT_TRUE(interpret_event(ev[1]).sim_recv_ns.has_value());
  const auto u = interpret_event(ev[5]);
  EXPECT_EQ(u.completion_tokens.value(), 4);
  EXPECT_EQ(u.prompt_tokens.value(), 3);
  EXPECT_EQ(ev[6], "[DONE]");
  EXPECT_EQ(s.stats().streams_done, 1u);
}

TEST(LlmSim, CompletionsEosExpectContinueAndNonStreaming) {
  SimConfig c;
  c.ttft_ms = 1;
  c.tpot_ms = 0;
  c.eos_tokens = 2;
  SimServer s(c);
  s.start();
  const std::string body = R"({"model":"m","prompt":"x","max_tokens":5,"stream":true})";
  // The body follows only after "100 Continue", as curl does for large bodies.
  const int fd = test::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  std::string head = post("/v1/completions", body, "Expect: 100-continue\r\nConnection: close\r\n");
  head.resize(head.size() - body.size());
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  char buf[4096];
  ssize_t r = recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(r, 0);
  EXPECT_EQ(std::string(buf, r), "HTTP/1.1 100 Continue\r\n\r\n");
  send(fd, body.data(), body.size(), MSG_NOSIGNAL);
  std::string resp;
  while ((r = recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, r);
  close(fd);
  const auto ev = events_of(resp);
  ASSERT_EQ(ev.size(), 3u) << resp;  // eos after 2 tokens (no ignore_eos), no usage asked, [DONE]
  EXPECT_EQ(interpret_event(ev[1]).finish_reason, "stop");

  const std::string ign = R"({"model":"m","prompt":"x","max_tokens":5,"stream":true,"ignore_eos":true})";
  EXPECT_EQ(events_of(exchange(s.port(), post("/v1/completions", ign, "Connection: close\r\n"), "")).size(), 6u);

  const std::string plain = exchange(s.port(), post("/v1/chat/completions", R"({"messages":[],"max_tokens":3})",
                                                    "Connection: close\r\n"), "");
  const auto j = nlohmann::json::parse(plain.substr(plain.find("\r\n\r\n") + 4));
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "alpha bravo");
  EXPECT_NE(exchange(s.port(), "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n", "").find(" 404 "), std::string::npos);
  EXPECT_NE(exchange(s.port(), post("/v1/completions", "{bad", "Connection: close\r\n"), "").find(" 400 "),
            std::string::npos);
}

TEST(LlmSim, KeepAliveServesRequestsInTurn) {
  SimConfig c;
  c.ttft_ms = 0;
  c.tpot_ms = 0;
  SimServer s(c);
  s.start();
  const std::string body = R"({"prompt":"x","max_tokens":2,"stream":true})";
  // Two pipelined requests on one connection: two complete responses, in order.
  const std::string resp = exchange(s.port(), post("/v1/completions", body) + post("/v1/completions", body,
                                                                                    "Connection: close\r\n"), "");
  std::size_t n = 0;
  for (std::size_t p = resp.find("HTTP/1.1 200"); p != std::string::npos; p = resp.find("HTTP/1.1 200", p + 1)) ++n;
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(s.stats().streams_done, 2u);
  EXPECT_EQ(s.stats().connections, 1u);
}

TEST(LlmSim, FaultDecisionsAreDeterministicPerRequestNumber) {
  SimConfig c;
  c.error_rate = 0.2;
  c.cut_rate = 0.1;
  c.malformed_rate = 0.1;
  c.seed = 5;
  int counts[4] = {0, 0, 0, 0};
  for (std::uint64_t k = 0; k < 10000; ++k) ++counts[static_cast<int>(sim_fault_for(c, k))];
  EXPECT_NEAR(counts[1] / 10000.0, 0.2, 0.02);
  EXPECT_NEAR(counts[2] / 10000.0, 0.8 * 0.1, 0.015);
  for (std::uint64_t k = 0; k < 100; ++k) EXPECT_EQ(sim_fault_for(c, k), sim_fault_for(c, k));
  c.error_rate = 1;
  EXPECT_EQ(sim_fault_for(c, 3), SimFault::http_error);
}

TEST(LlmSim, InjectedHttpErrorAndCut) {
  SimConfig c;
  c.ttft_ms = 0;
  c.tpot_ms = 0;
  c.error_rate = 1;
  c.error_status = 503;
  {
    SimServer s(c);
    s.start();
    const std::string resp = exchange(s.port(), post("/v1/completions", R"({"prompt":"x","stream":true})",
                                                     "Connection: close\r\n"), "");
    EXPECT_EQ(resp.rfind("HTTP/1.1 503", 0), 0u) << resp;
  }
  c.error_rate = 0;
  c.cut_rate = 1;
  SimServer s(c);
  s.start();
  const std::string resp =
      exchange(s.port(), post("/v1/completions", R"({"prompt":"x","stream":true,"max_tokens":6})"), "");
  EXPECT_EQ(resp.find("0\r\n\r\n"), std::string::npos);  // no end of body: the stream was cut
  EXPECT_EQ(resp.find("[DONE]"), std::string::npos);
  EXPECT_EQ(s.stats().cuts, 1u);
}

TEST(LlmSim, RefusesNonLoopbackAndBadSettings) {
  SimConfig c;
  c.host = "0.0.0.0";
  SimServer s(c);
  EXPECT_THROW(s.start(), Error);
  SimConfig bad;
  bad.cut_rate = 2;
  EXPECT_THROW(SimServer{bad}, Error);
}

}  // namespace
}  // namespace hotpath::llm
