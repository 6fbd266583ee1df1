// Server-sent events as OpenAI-compatible servers stream them, parsed incrementally from whatever
// byte splits the network delivers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "llm/common/limits.hpp"

namespace hotpath::llm {

// Follows the WHATWG event-stream rules that matter here: lines end in \n, \r\n or a bare \r (a \r\n
// split between two chunks is still one line end), `data:` lines of one event are joined with \n, a
// blank line dispatches the event, comment (`:`) and other fields are ignored. An event still open
// when the stream ends is dropped (as the spec says) unless it is exactly `[DONE]`.
//
// A server decides how long a line or an event is, so both are capped at `max_event_bytes` (a line
// without a newline is otherwise buffered for ever): past it the parser stops for good, feed()
// returns false and overflowed() says why.
class SseParser {
 public:
  explicit SseParser(std::size_t max_event_bytes = kMaxEventBytes) : max_(max_event_bytes) {}
  // Calls on_event(std::string_view data) for each complete event; stops early and returns false
  // when on_event returns false or the stream overflows.
  template <class F>
  bool feed(std::string_view bytes, F&& on_event);
  template <class F>
  bool finish(F&& on_event) {
    if (overflow_) return false;
    if (!line_.empty()) take_line(line_);
    line_.clear();
    if (overflow_) return false;
    if (has_data_ && data_ == "[DONE]") {
      has_data_ = false;
      return on_event(std::string_view(data_));
    }
    return true;
  }
  std::size_t events() const { return events_; }
  bool overflowed() const { return overflow_; }
  std::size_t max_event_bytes() const { return max_; }

 private:
  // Returns true when the line completes an event (data in data_).
  bool take_line(std::string_view line) {
    if (line.empty()) return has_data_;
    if (line.front() == ':') return false;
    if (line.substr(0, 5) == "data:") {
      std::string_view v = line.substr(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (data_.size() + v.size() + 1 > max_) {
        overflow_ = true;
        return false;
      }
      if (has_data_) data_ += '\n';
      data_.append(v);
      has_data_ = true;
    }
    return false;
  }
  std::size_t max_;
  std::string line_;
  std::string data_;
  bool has_data_ = false, overflow_ = false;
  bool after_cr_ = false;  // the last line ended in \r: a \n next (even in the next chunk) belongs to it
  std::size_t events_ = 0;
};

template <class F>
bool SseParser::feed(std::string_view bytes, F&& on_event) {
  if (overflow_) return false;
  while (!bytes.empty()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes.front() == '\n') {
        bytes.remove_prefix(1);
        continue;
      }
    }
    const std::size_t nl = bytes.find_first_of("\r\n");
    const std::size_t part = nl == std::string_view::npos ? bytes.size() : nl;
    if (line_.size() + part > max_) {
      overflow_ = true;
      line_.clear();
      data_.clear();
      return false;
    }
    if (nl == std::string_view::npos) {
      line_.append(bytes);
      return true;
    }
    bool dispatch;
    if (line_.empty()) {
      dispatch = take_line(bytes.substr(0, nl));
    } else {
      line_.append(bytes.substr(0, nl));
      dispatch = take_line(line_);
      line_.clear();
    }
    after_cr_ = bytes[nl] == '\r';
    bytes.remove_prefix(nl + 1);
    if (overflow_) {
      data_.clear();
      return false;
    }
    if (dispatch) {
      has_data_ = false;
      ++events_;
      const bool go_on = on_event(std::string_view(data_));
      data_.clear();
      if (!go_on) return false;
    }
  }
  return true;
}

// What one `data:` payload of a completion stream says.
struct StreamEvent {
  enum class Kind { chunk, done, malformed, error } kind = Kind::chunk;
  std::string text;                        // delta.content (+ reasoning) or text; may be empty
  std::string finish_reason;               // empty until the server gives one
  std::optional<long long> completion_tokens, prompt_tokens;  // from `usage`
  std::string error;                       // for malformed/error: what was wrong
  std::optional<std::int64_t> sim_recv_ns, sim_sent_ns;  // serve-sim's own stamps, when present
};

// Accepts chat chunks (choices[].delta.content, also reasoning_content) and completion chunks
// (choices[].text) whatever API was asked for; `usage` may ride on any chunk.
StreamEvent interpret_event(std::string_view data);

}  // namespace hotpath::llm
