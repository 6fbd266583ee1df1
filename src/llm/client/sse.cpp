#include "llm/client/sse.hpp"

#include <nlohmann/json.hpp>

#include "llm/common/json_int.hpp"
#include "llm/common/limits.hpp"

namespace hotpath::llm {

namespace {
void append_string(const nlohmann::json& obj, const char* key, std::string& out) {
  const auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) out += it->get_ref<const std::string&>();
}
}  // namespace

StreamEvent interpret_event(std::string_view data) {
  StreamEvent ev;
  if (data == "[DONE]") {
    ev.kind = StreamEvent::Kind::done;
    return ev;
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    ev.kind = StreamEvent::Kind::malformed;
    ev.error = "event is not a JSON object: " + std::string(data.substr(0, 120));
    return ev;
  }
  if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
    ev.kind = StreamEvent::Kind::error;
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
      ev.error = (*e)["message"].get<std::string>();
    else
      ev.error = e->dump();
    return ev;
  }
  if (const auto c = j.find("choices"); c != j.end()) {
    if (!c->is_array()) {
      ev.kind = StreamEvent::Kind::malformed;
      ev.error = "`choices` is not a list";
      return ev;
    }
    for (const auto& ch : *c) {
      if (!ch.is_object()) continue;
      if (const auto d = ch.find("delta"); d != ch.end() && d->is_object()) {
        append_string(*d, "reasoning_content", ev.text);
        append_string(*d, "content", ev.text);
      }
      append_string(ch, "text", ev.text);
      if (const auto f = ch.find("finish_reason"); f != ch.end() && f->is_string())
        ev.finish_reason = f->get<std::string>();
    }
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    // A count outside [0, 2^31-1] (negative, 2^63, 1e300) would enter the totals: the event is bad.
    for (auto [key, out] : {std::pair{"completion_tokens", &ev.completion_tokens}, std::pair{"prompt_tokens", &ev.prompt_tokens}}) {
      const auto t = u->find(key);
      if (t == u->end() || !t->is_number()) continue;
      *out = json_int_in(*u, key, 0, kMaxOutputTokens);
      if (!*out) {
        ev = StreamEvent();
        ev.kind = StreamEvent::Kind::malformed;
        ev.error = std::string("usage.") + key + " is not an integer in [0, 2147483647]: " + t->dump();
        return ev;
      }
    }
  }
  if (const auto s = j.find("hotpath_sim"); s != j.end() && s->is_object()) {
    // Stamps are steady_clock nanoseconds, never negative (so differences cannot overflow).
    ev.sim_recv_ns = json_int_in(*s, "recv_ns", 0, INT64_MAX);
    ev.sim_sent_ns = json_int_in(*s, "sent_ns", 0, INT64_MAX);
  }
  return ev;
}

}  // namespace hotpath::llm
