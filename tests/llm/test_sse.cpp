#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "llm/client/sse.hpp"

namespace hotpath::llm {
namespace {

std::vector<std::string> parse_in_pieces(const std::string& s, std::size_t piece) {
  SseParser p;
  std::vector<std::string> out;
  auto cb = [&](std::string_view d) {
    out.emplace_back(d);
    return true;
  };
  for (std::size_t i = 0; i < s.size(); i += piece) p.feed(std::string_view(s).substr(i, piece), cb);
  p.finish(cb);
  return out;
}

TEST(LlmSse, SameEventsWhateverTheByteSplits) {
  const std::string stream =
      ": keep-alive comment\n\n"
      "data: {\"a\":1}\n\n"
      "event: message\r\ndata: {\"b\":\r\ndata: 2}\r\n\r\n"
      "data:{\"c\":3}\n\n"
      "id: 7\n\n"  // no data: not an event
      "data: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\n2}", "{\"c\":3}", "[DONE]"};
  for (std::size_t piece : {1, 2, 3, 7, 64, 4096}) EXPECT_EQ(parse_in_pieces(stream, piece), want) << piece;
}

TEST(LlmSse, BareCrAndCrLfEndLinesLikeLf) {
  // The spec allows CR, LF and CRLF; a server may use any, and a CRLF may be split between chunks.
  const std::string lf = "data: {\"a\":1}\n\ndata: {\"b\":\ndata: 2}\n\n: c\n\ndata: [DONE]\n\n";
  std::string cr = lf, crlf;
  std::replace(cr.begin(), cr.end(), '\n', '\r');
  for (char ch : lf) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\n2}", "[DONE]"};
  for (std::size_t piece : {1, 2, 3, 5, 7, 64}) {
    EXPECT_EQ(parse_in_pieces(cr, piece), want) << "CR, pieces of " << piece;
    EXPECT_EQ(parse_in_pieces(crlf, piece), want) << "CRLF, pieces of " << piece;
  }
  // A CR at the end of one chunk and the LF at the start of the next are one line end, not a line
  // end and a blank line (which would dispatch "a" on its own).
  SseParser p;
  std::vector<std::string> out;
  const auto cb = [&](std::string_view d) { return out.emplace_back(d), true; };
  p.feed("data: a\r", cb);
  p.feed("\ndata: b\r", cb);
  p.feed("\n\r", cb);
  p.feed("\n", cb);
  EXPECT_EQ(out, std::vector<std::string>{"a\nb"});
  // A CR then a CR is a line end then a blank line.
  out.clear();
  p.feed("data: c\r", cb);
  p.feed("\r", cb);
  EXPECT_EQ(out, std::vector<std::string>{"c"});
}

TEST(LlmSse, OpenEventAtEndIsDroppedUnlessDone) {
  EXPECT_EQ(parse_in_pieces("data: {\"a\":1}\n\ndata: {\"partial\"", 5), std::vector<std::string>{"{\"a\":1}"});
  EXPECT_EQ(parse_in_pieces("data: [DONE]", 5), std::vector<std::string>{"[DONE]"});
}

TEST(LlmSse, CallbackCanStopTheParser) {
  SseParser p;
  int n = 0;
  EXPECT_FALSE(p.feed("data: 1\n\ndata: 2\n\n", [&](std::string_view) { return ++n < 1; }));
  EXPECT_EQ(n, 1);
}

TEST(LlmSse, InterpretsChatCompletionsUsageAndErrors) {
  auto c = interpret_event(R"({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})");
  EXPECT_EQ(c.kind, StreamEvent::Kind::chunk);
  EXPECT_EQ(c.text, "Hi");
  EXPECT_TRUE(c.finish_reason.empty());
  auto r = interpret_event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})");
  EXPECT_TRUE(r.text.empty());
  auto t = interpret_event(R"({"choices":[{"index":0,"text":" there","finish_reason":"length"}]})");
  EXPECT_EQ(t.text, " there");
  EXPECT_EQ(t.finish_reason, "length");
  auto u = interpret_event(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}})");
  EXPECT_EQ(u.completion_tokens.value(), 9);
  EXPECT_EQ(u.prompt_tokens.value(), 5);
  EXPECT_EQ(interpret_event("[DONE]").kind, StreamEvent::Kind::done);
  auto e = interpret_event(R"({"error":{"message":"overloaded","code":503}})");
  EXPECT_EQ(e.kind, StreamEvent::Kind::error);
  EXPECT_EQ(e.error, "overloaded");
  EXPECT_EQ(interpret_event("{\"choices\":[{\"delta\"").kind, StreamEvent::Kind::malformed);
  EXPECT_EQ(interpret_event("42").kind, StreamEvent::Kind::malformed);
  EXPECT_EQ(interpret_event(R"({"choices":{}})").kind, StreamEvent::Kind::malformed);
  auto s = interpret_event(R"({"choices":[{"delta":{"content":"a"}}],"hotpath_sim":{"recv_ns":10,"sent_ns":25}})");
  EXPECT_EQ(*s.sim_recv_ns, 10);
  EXPECT_EQ(*s.sim_sent_ns, 25);
}

}  // namespace
}  // namespace hotpath::llm
