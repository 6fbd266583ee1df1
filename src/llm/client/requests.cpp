// Sending: a worker's easy handles, the body of each request (a conversation's turn carries the
// history so far), the slot it takes, and what becomes of a transfer once it ends.
#include <algorithm>
#include <memory>

#include "llm/client/worker.hpp"
#include "util/error.hpp"

namespace hotpath::llm::detail {

Transfer* Worker::acquire() {
  if (idle_.empty()) return create_transfer();
  Transfer* t = idle_.back();
  idle_.pop_back();
  return t;
}

Transfer* Worker::create_transfer() {
  auto t = std::make_unique<Transfer>();
  t->worker = this;
  t->easy = curl_easy_init();
  if (!t->easy) throw Error("client: curl_easy_init failed");
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, plan_.url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, plan_.headers);
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Worker::write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &Worker::prereq_cb);
  curl_easy_setopt(e, CURLOPT_PREREQDATA, t.get());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, plan_.timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, std::min<long>(plan_.timeout_ms, 30'000));
  if (plan_.insecure) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  Transfer* raw = t.get();
  pool_.push_back(std::move(t));
  return raw;
}

// The messages of a conversation's turn: the history so far, then this turn's user message(s).
nlohmann::json Worker::turn_messages(const nlohmann::json& history, const DatasetItem& item) {
  nlohmann::json m = history;
  if (item.messages) {
    for (const auto& msg : *item.messages) m.push_back(msg);
  } else {
    m.push_back({{"role", "user"}, {"content", item.prompt.value_or("")}});
  }
  return m;
}

void Worker::launch(RequestRecord& rec, double slot) {
  Transfer* t = acquire();
  const DatasetItem& item = (*plan_.items)[rec.dataset_index];
  const bool conversation = rec.session != RequestRecord::kNoSession && phase_->conversations;
  t->reset(&rec, &item, conversation);
  const std::string* body = &plan_.bodies[rec.dataset_index];
  if (conversation && rec.turn > 0) {
    DatasetItem turn;
    turn.messages = turn_messages((*phase_->conversations)[rec.session].history, item);
    turn.output_tokens = item.output_tokens;
    t->body = build_request_body(turn, plan_.api, plan_.model, plan_.ignore_eos);
    rec.input_words = message_words(*turn.messages);
    body = &t->body;
  }
  curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, body->data());
  curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  rec.slot_s = slot;
  rec.sent_s = now_s();
  rec.outcome = Outcome::failed;  // until proven completed
  const CURLMcode mc = curl_multi_add_handle(multi_, t->easy);
  if (mc != CURLM_OK) {
    rec.reason = reason::client_error;
    rec.detail = curl_multi_strerror(mc);
    rec.end_s = now_s();
    idle_.push_back(t);
    release_slot(rec.end_s);
    return;
  }
  t->active = true;
  if (phase_->live) phase_->live->sent.fetch_add(1, std::memory_order_relaxed);
  ++in_flight_;
}

void Worker::reap() {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    const CURLcode result = m->data.result;
    curl_multi_remove_handle(multi_, m->easy_handle);
    end_transfer(*t, result);
  }
}

void Worker::end_transfer(Transfer& t, CURLcode result) {
  t.active = false;
  finish(t, result);
  --in_flight_;
  idle_.push_back(&t);
}

// A completed turn adds itself and the reply to the history and schedules the next turn after
// the think time; a failed one ends its conversation (the later turns stay not_sent).
void Worker::next_turn(Transfer& t, double now) {
  const RequestRecord& r = *t.rec;
  if (r.session == RequestRecord::kNoSession || !phase_->conversations) return;
  Conversation& conv = (*phase_->conversations)[r.session];
  if (r.outcome != Outcome::completed) return;
  conv.history = turn_messages(conv.history, *t.item);
  conv.history.push_back({{"role", "assistant"}, {"content", t.text}});
  const std::size_t k = static_cast<std::size_t>(r.turn) + 1;
  if (k >= conv.turns.size() || stopped()) return;
  RequestRecord& next = (*records_)[conv.turns[k]];
  next.scheduled_s = now + phase_->think_s;
  followups_.emplace(next.scheduled_s, conv.turns[k]);
}

}  // namespace hotpath::llm::detail
