// What a run is configured with: the endpoint URL, the checks of flags and headers, and the
// configuration as the report records it.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>
#include <utility>

#include "llm/client/client.hpp"
#include "llm/client/worker.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/text.hpp"
#include "util/error.hpp"

namespace hotpath::llm {

namespace {

// Why `url` is not an http(s) URL this client can send to, or "" when it is. Stricter than curl
// (which would take some of these and fail only once the run has started): scheme, host (a name,
// an IPv4 address or a bracketed IPv6 one), an optional port in 1-65535, then printable ASCII.
std::string url_problem(const std::string& url) {
  std::string_view u = url;
  const std::string scheme = ascii_lower(url.substr(0, 8));  // schemes are case-insensitive (RFC 3986)
  if (scheme.rfind("http://", 0) == 0) u.remove_prefix(7);
  else if (scheme.rfind("https://", 0) == 0) u.remove_prefix(8);
  else return "must start with http:// or https://";
  for (char ch : u)
    if (ch <= ' ' || ch >= 0x7f) return "must be printable ASCII without spaces (percent-encode the rest)";
  std::string_view auth = u.substr(0, u.find_first_of("/?#"));
  if (const std::size_t at = auth.rfind('@'); at != std::string_view::npos) auth.remove_prefix(at + 1);
  std::string_view host = auth, port;
  if (!auth.empty() && auth.front() == '[') {
    const std::size_t close = auth.find(']');
    if (close == std::string_view::npos) return "an IPv6 host needs its closing ']'";
    host = auth.substr(1, close - 1);
    in6_addr a6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &a6) != 1) return "'[" + std::string(host) + "]' is not an IPv6 address";
    const std::string_view rest = auth.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return "only ':PORT' may follow ']'";
    if (!rest.empty()) port = rest.substr(1);
    if (rest.size() == 1) return "the port after ':' is empty";
  } else {
    if (const std::size_t colon = auth.find(':'); colon != std::string_view::npos) {
      host = auth.substr(0, colon);
      port = auth.substr(colon + 1);
      if (port.empty()) return "the port after ':' is empty";
    }
    if (host.empty()) return "the host is empty";
    for (char ch : host)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' || ch == '_'))
        return "the host '" + std::string(host) + "' may hold only letters, digits, '-', '.' and '_'";
  }
  if (!port.empty()) {
    unsigned long v = 0;
    for (char ch : port) {
      if (ch < '0' || ch > '9') return "the port '" + std::string(port) + "' is not a number in 1-65535";
      v = std::min(v * 10 + static_cast<unsigned long>(ch - '0'), 100000UL);
    }
    if (v < 1 || v > 65535) return "the port " + std::string(port) + " is outside 1-65535";
  }
  return {};
}

}  // namespace

std::string endpoint_url(const std::string& base, Api api) {
  if (const std::string why = url_problem(base); !why.empty())
    throw Error("--endpoint: " + why + " (got '" + escape_bytes(base) + "')");
  std::string b = base;
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + (api == Api::chat ? "/chat/completions" : "/completions");
}

nlohmann::json config_json(const BenchConfig& c) {
  nlohmann::json j;
  j["endpoint"] = c.endpoint;
  j["url"] = endpoint_url(c.endpoint, c.api);
  j["model"] = c.model;
  j["api"] = c.api == Api::chat ? "chat" : "completions";
  j["mode"] = c.mode == Mode::batch ? "batch" : c.mode == Mode::interactive ? "interactive" : "trace";
  j["rate"] = c.mode == Mode::interactive ? nlohmann::json(c.rate) : nlohmann::json(nullptr);
  j["burstiness"] = c.burstiness;
  j["max_concurrency"] = c.max_concurrency ? nlohmann::json(c.max_concurrency) : nlohmann::json(nullptr);
  j["requests"] = c.requests ? nlohmann::json(c.requests) : nlohmann::json(nullptr);
  j["duration_s"] = c.duration_s > 0 ? nlohmann::json(c.duration_s) : nlohmann::json(nullptr);
  j["warmup"] = c.warmup;
  j["timeout_s"] = c.timeout_s;
  j["seed"] = c.seed;
  j["ignore_eos"] = c.ignore_eos;
  j["threads"] = c.threads;
  j["busy_poll"] = c.busy_poll;
  j["spin_us"] = c.spin_us;
  j["dataset"] = c.dataset_path;
  j["grace_s"] = c.grace_s;
  j["ramp_up_s"] = c.ramp_s > 0 ? nlohmann::json(c.ramp_s) : nlohmann::json(nullptr);
  j["ramp_from"] = c.ramp_s > 0 && c.mode == Mode::interactive ? nlohmann::json(c.ramp_from) : nlohmann::json(nullptr);
  if (c.mode == Mode::trace) j["trace"] = {{"path", c.trace_path}, {"speed", c.trace_speed}, {"requests", c.trace_times.size()}};
  j["turns"] = c.turns;
  j["think_time_s"] = c.think_time_s;
  // Header names only: values are often credentials.
  nlohmann::json names = nlohmann::json::array();
  for (const auto& h : c.headers) names.push_back(h.substr(0, h.find(':')));
  j["headers"] = names;
  j["word_rule"] = "maximal runs of non-ASCII-whitespace characters";
  return j;
}

void detail::check_config(const BenchConfig& c) {
  // The CLI refuses these first; written so that NaN fails every check.
  if (c.model.empty()) throw Error("--model is required");
  if (!(c.timeout_s >= kMinTimeoutS && c.timeout_s <= kMaxTimeoutS)) throw Error("--timeout must be in [0.001, 1000000] seconds");
  if (c.threads < 1 || c.threads > kMaxThreads) throw Error("--threads must be in [1, 256]");
  if (c.max_concurrency > kMaxConcurrency) throw Error("--max-concurrency must be at most 100000");
  if (c.requests > kMaxRequests || c.warmup > kMaxRequests) throw Error("--requests and --warmup must be at most 10000000");
  if (!(c.duration_s >= 0 && c.duration_s <= kMaxDurationS)) throw Error("--duration must be in (0, 10000000] seconds");
  if (!(c.grace_s >= 0 && c.grace_s <= kMaxTimeoutS)) throw Error("--grace must be in [0, 1000000] seconds");
  if (!(c.spin_us >= 0 && c.spin_us <= kMaxSpinUs)) throw Error("--spin-us must be in [0, 10000]");
  if (!(c.ramp_s >= 0 && c.ramp_s <= kMaxDurationS)) throw Error("--ramp-up must be in [0, 10000000] seconds");
  if (c.turns < 1 || c.turns > kMaxTurns) throw Error("--turns must be in [1, " + std::to_string(kMaxTurns) + "]");
  if (!(c.think_time_s >= 0 && c.think_time_s <= kMaxDurationS)) throw Error("--think-time must be in [0, 10000000] seconds");
  if (c.turns > 1 && c.mode == Mode::trace) throw Error("--turns cannot be combined with --trace");
  if (c.ramp_s > 0 && c.mode == Mode::batch && !c.max_concurrency)
    throw Error("--ramp-up in batch mode ramps the cap: it needs --max-concurrency");
  check_headers(c.headers);
}

void check_headers(const std::vector<std::string>& headers) {
  // What the client sets itself, by lower-case name, and why a user's value would break it: libcurl
  // sends a user's header in place of its own, so a wrong length or encoding breaks every request.
  static const std::pair<const char*, const char*> kRefused[] = {
      {"content-length", "frames the request body, which the client sets"},
      {"transfer-encoding", "frames the request body, which the client sets"},
      {"host", "comes from --endpoint"},
      {"te", "would change how the response is framed"},
      {"upgrade", "would switch the connection away from HTTP/1.1"},
      {"connection", "is hop-by-hop: the client manages its connections (their reuse is part of what it measures)"},
      {"keep-alive", "is hop-by-hop: the client manages its connections (their reuse is part of what it measures)"},
      {"proxy-connection", "is hop-by-hop: the client manages its connections (their reuse is part of what it measures)"},
  };
  for (const auto& h : headers) {
    const std::size_t colon = h.find(':');
    bool ok = colon != std::string::npos && colon > 0;
    for (std::size_t i = 0; ok && i < colon; ++i) {
      const unsigned char ch = static_cast<unsigned char>(h[i]);
      ok = std::isalnum(ch) || std::strchr("!#$%&'*+-.^_`|~", ch);
    }
    for (unsigned char ch : h) ok = ok && ch != '\r' && ch != '\n' && ch != '\0';
    if (!ok) throw Error("--header must be 'Name: value' with a token name and no line breaks (got '" + escape_bytes(h) + "')");
    const std::string name = h.substr(0, colon), lower = ascii_lower(name);
    for (const auto& [refused, why] : kRefused)
      if (lower == refused) throw Error("--header: " + name + " cannot be set: it " + why);
  }
}

std::optional<std::size_t> planned_sessions(const BenchConfig& c, std::size_t dataset_size) {
  if (c.mode == Mode::trace) return c.requests ? std::min(c.requests, c.trace_times.size()) : c.trace_times.size();
  if (c.requests) return c.requests;
  if (c.mode == Mode::interactive && c.duration_s > 0) return std::nullopt;
  return (dataset_size + c.turns - 1) / c.turns;
}

}  // namespace hotpath::llm
