// libFuzzer target: the LLM client's server-sent-event parser and its reading of each event's JSON,
// on arbitrary bytes split into arbitrary chunks (as the network may deliver them).
//
// Input layout: byte 0-1 the parser's line/event cap (16 .. 4111 bytes, so the cap is reached by
// small inputs), byte 2 the seed of the chunk sizes, byte 3 the event after which the callback
// stops the parser (0 = never), then the stream. Checked on every input:
//   - the events, the return values and the overflow state are the same whatever the chunking
//     (compared with the stream fed in one piece);
//   - a stream without CR parses the same with its line ends written as CRLF or as a bare CR
//     (chunked, so a CRLF is also split between chunks);
//   - no event holds more than the cap;
//   - interpret_event gives usage counts in [0, 2^31-1] and non-negative stamps, and its error
//     text made safe by escape_bytes is valid UTF-8 without control bytes (what the CSV gets).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/client/sse.hpp"
#include "llm/common/text.hpp"
#include "util/rng.hpp"

namespace {

using hotpath::llm::SseParser;

struct Outcome {
  std::vector<std::string> events;
  bool fed_ok = true, finished_ok = true, overflowed = false;
  bool operator==(const Outcome&) const = default;
};

void check_event(std::string_view data) {
  using hotpath::llm::StreamEvent;
  const StreamEvent ev = hotpath::llm::interpret_event(data);
  for (const auto& n : {ev.completion_tokens, ev.prompt_tokens})
    if (n && (*n < 0 || *n > hotpath::llm::kMaxOutputTokens)) std::abort();
  for (const auto& s : {ev.sim_recv_ns, ev.sim_sent_ns})
    if (s && *s < 0) std::abort();
  for (const std::string* t : {&ev.error, &ev.text, &ev.finish_reason}) {
    const std::string safe = hotpath::llm::escape_bytes(*t);
    for (char c : safe)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
    (void)nlohmann::json(safe).dump();  // throws (and so crashes the target) on invalid UTF-8
  }
}

Outcome run(std::string_view stream, std::size_t cap, std::uint64_t seed, std::size_t stop_after, bool chunked) {
  Outcome o;
  SseParser p(cap);
  const auto on_event = [&](std::string_view d) {
    if (d.size() > cap) std::abort();
    o.events.emplace_back(d);
    return stop_after == 0 || o.events.size() < stop_after;
  };
  hotpath::util::Rng rng(seed);
  while (!stream.empty() && o.fed_ok) {
    // Mostly small pieces (1..16 bytes), sometimes large ones, as recv() gives them.
    std::size_t n = stream.size();
    if (chunked) n = std::min<std::size_t>(n, (rng.next() & 3) ? 1 + rng.next() % 16 : 1 + rng.next() % 512);
    o.fed_ok = p.feed(stream.substr(0, n), on_event);
    stream.remove_prefix(n);
  }
  if (o.fed_ok) o.finished_ok = p.finish(on_event);
  o.overflowed = p.overflowed();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  const std::size_t cap = 16 + ((static_cast<std::size_t>(data[0]) << 8 | data[1]) % 4096);
  const std::uint64_t seed = data[2];
  const std::size_t stop_after = data[3];
  const std::string_view stream(reinterpret_cast<const char*>(data) + 4, size - 4);
  const Outcome whole = run(stream, cap, seed, stop_after, false);
  const Outcome pieces = run(stream, cap, seed, stop_after, true);
  if (!(whole == pieces)) std::abort();
  if (stream.find('\r') == std::string_view::npos) {
    std::string cr(stream), crlf;
    std::replace(cr.begin(), cr.end(), '\n', '\r');
    for (char c : stream) {
      if (c == '\n') crlf += '\r';
      crlf += c;
    }
    if (!(run(cr, cap, seed, stop_after, true) == whole)) std::abort();
    if (!(run(crlf, cap, seed, stop_after, true) == whole)) std::abort();
  }
  for (const auto& e : whole.events) check_event(e);
  return 0;
}
