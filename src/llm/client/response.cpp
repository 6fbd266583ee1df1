// Reading: the bytes libcurl delivers, parsed as server-sent events and stamped as they arrive, and
// the outcome of each request (completed, or why not) once its transfer ends.
#include <algorithm>
#include <cmath>
#include <string>

#include "llm/client/worker.hpp"
#include "llm/common/limits.hpp"

namespace hotpath::llm::detail {

void Worker::finish(Transfer& t, CURLcode result) {
  const double now = now_s();
  RequestRecord& r = *t.rec;
  if (!t.error_body && !t.done_seen && t.fail_reason.empty())
    t.sse.finish([&](std::string_view d) { return on_event(t, d, now); });
  t.words.finish();
  r.words = t.words.words();
  r.distinct_stamps = t.words.distinct_stamps();
  if (r.words) {
    r.first_word_s = t.words.first_stamp();
    r.last_word_s = t.words.last_stamp();
  }
  if (!std::isfinite(r.end_s)) r.end_s = now;
  long code = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &code);
  r.http_status = code;
  long header_bytes = 0;
  curl_easy_getinfo(t.easy, CURLINFO_HEADER_SIZE, &header_bytes);
  const bool no_response = header_bytes == 0 && t.bytes == 0;
  if (!t.fail_reason.empty()) {
    r.reason = t.fail_reason;
    r.detail = t.fail_detail;
  } else if (code >= 400) {
    r.reason = reason::http_error;
    r.detail = "HTTP " + std::to_string(code) + ": " + t.err_body.substr(0, 300);
  } else if (code >= 300) {
    // Redirects are not followed (a benchmark must not silently measure another server).
    char* location = nullptr;
    curl_easy_getinfo(t.easy, CURLINFO_REDIRECT_URL, &location);
    r.reason = reason::http_redirect;
    r.detail = "HTTP " + std::to_string(code) + " (redirects are not followed)" +
               (location ? std::string(" to ") + location : std::string());
  } else if (t.done_seen) {
    r.outcome = Outcome::completed;  // everything arrived, whatever happened to the socket after
  } else if (result == CURLE_OPERATION_TIMEDOUT) {
    r.reason = reason::timeout;
    r.detail = curl_easy_strerror(result);
  } else if (result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST ||
             result == CURLE_COULDNT_RESOLVE_PROXY || result == CURLE_SSL_CONNECT_ERROR) {
    r.reason = reason::connect_error;
    r.detail = curl_easy_strerror(result);
  } else if (no_response && (result == CURLE_RECV_ERROR || result == CURLE_SEND_ERROR ||
                             result == CURLE_GOT_NOTHING || result == CURLE_PARTIAL_FILE)) {
    // Reset or closed after connecting but before the first response byte: the request failed,
    // no stream was cut.
    r.reason = reason::request_error;
    r.detail = std::string("connection lost before any response byte: ") + curl_easy_strerror(result);
  } else if (result == CURLE_OK || result == CURLE_PARTIAL_FILE || result == CURLE_RECV_ERROR ||
             result == CURLE_GOT_NOTHING || result == CURLE_HTTP2_STREAM) {
    if (t.sse.events() == 0 && t.bytes > 0) {
      r.reason = reason::malformed_event;
      r.detail = "response is not a server-sent event stream (is `stream` honoured?)";
    } else {
      r.reason = reason::cut_stream;
      r.detail = result == CURLE_OK ? "stream ended without `data: [DONE]`" : curl_easy_strerror(result);
    }
  } else {
    r.reason = reason::client_error;
    r.detail = curl_easy_strerror(result);
  }
  if (r.outcome == Outcome::completed && t.item->reference) {
    r.rouge_l = rouge_l(t.text, *t.item->reference);
    const std::size_t ref_words = count_words(*t.item->reference);
    if (ref_words) r.word_ratio = static_cast<double>(r.words) / static_cast<double>(ref_words);
  }
  if (phase_->live)
    (r.outcome == Outcome::completed ? phase_->live->completed : phase_->live->failed)
        .fetch_add(1, std::memory_order_relaxed);
  next_turn(t, now);
  release_slot(now);
}

bool Worker::on_event(Transfer& t, std::string_view data, double now) {
  RequestRecord& r = *t.rec;
  ++r.events;
  StreamEvent ev = interpret_event(data);
  switch (ev.kind) {
    case StreamEvent::Kind::done:
      t.done_seen = true;
      r.end_s = now;
      t.done_s = now;
      linger_until_s_ = std::min(linger_until_s_, now + kDoneLingerS);
      return true;
    case StreamEvent::Kind::malformed:
      t.fail_reason = reason::malformed_event;
      t.fail_detail = ev.error;
      r.end_s = now;
      return false;
    case StreamEvent::Kind::error:
      t.fail_reason = reason::server_error_event;
      t.fail_detail = ev.error;
      r.end_s = now;
      return false;
    case StreamEvent::Kind::chunk:
      break;
  }
  if (!ev.text.empty()) {
    if (!std::isfinite(r.first_content_s)) r.first_content_s = now;
    r.last_content_s = now;
    ++r.content_events;
    t.words.feed(ev.text, now);
    if (t.keep_text && t.text.size() < kMaxKeptTextBytes)
      t.text.append(ev.text, 0, kMaxKeptTextBytes - t.text.size());
  }
  if (!ev.finish_reason.empty()) r.finish_reason = ev.finish_reason;
  if (ev.completion_tokens) r.completion_tokens = ev.completion_tokens;
  if (ev.prompt_tokens) r.prompt_tokens = ev.prompt_tokens;
  if (ev.sim_recv_ns && ev.sim_sent_ns) {
    r.sim_recv_s = static_cast<double>(*ev.sim_recv_ns - t0_ns_) * 1e-9;
    r.sim_sent_s = static_cast<double>(*ev.sim_sent_ns - t0_ns_) * 1e-9;
  }
  return true;
}

size_t Worker::write_cb(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const std::size_t len = size * nmemb;
  const double now = t->worker->now_s();  // arrival stamp of this chunk
  t->bytes += len;
  if (!t->status_checked) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    t->status_checked = true;
    t->error_body = code >= 300;  // an error or a redirect: keep the start of the body, parse none
  }
  if (t->error_body) {
    if (t->err_body.size() < 4096) t->err_body.append(ptr, std::min<std::size_t>(len, 4096 - t->err_body.size()));
    return len;
  }
  if (t->done_seen || !t->fail_reason.empty()) return len;
  const bool go = t->sse.feed(std::string_view(ptr, len),
                              [&](std::string_view d) { return t->worker->on_event(*t, d, now); });
  if (t->sse.overflowed()) {
    t->fail_reason = reason::oversized_event;
    t->fail_detail = "an event or line exceeded " + std::to_string(t->sse.max_event_bytes()) + " bytes";
    t->rec->end_s = now;
  }
  return go ? len : 0;  // 0 aborts the transfer: a malformed, error or oversized event ends it
}

// Called each time libcurl is about to send the request. When a reused connection dies before
// any response byte, libcurl sends the request again on a fresh one by itself, and it has no
// option to stop that; but the server may have received the first send (and worked on it), so
// the resend would be a request the report never counted. A second send is refused here: the
// request fails as request_error and sends equal the server's arrivals.
int Worker::prereq_cb(void* clientp, char*, char*, int, int) {
  auto* t = static_cast<Transfer*>(clientp);
  if (++t->sends == 1) return CURL_PREREQFUNC_OK;
  t->fail_reason = reason::request_error;
  t->fail_detail = "the reused connection was lost before any response byte (libcurl's resend refused)";
  return CURL_PREREQFUNC_ABORT;
}

}  // namespace hotpath::llm::detail
