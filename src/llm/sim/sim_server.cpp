#include "llm/sim/sim_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <queue>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/common/json_int.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/loopback.hpp"
#include "llm/common/text.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

namespace hotpath::llm {

namespace {

constexpr std::array<const char*, 16> kSimWords = {"alpha", "bravo",  "charlie", "delta",  "echo",   "foxtrot",
                                                   "golf",  "hotel",  "india",   "juliet", "kilo",   "lima",
                                                   "mike",  "november", "oscar", "papa"};

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }


bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

}  // namespace

SimFault sim_fault_for(const SimConfig& c, std::uint64_t k) {
  if (c.error_rate > 0 && util::hash_uniform(c.seed, k, 1) < c.error_rate) return SimFault::http_error;
  if (c.cut_rate > 0 && util::hash_uniform(c.seed, k, 2) < c.cut_rate) return SimFault::cut;
  if (c.malformed_rate > 0 && util::hash_uniform(c.seed, k, 3) < c.malformed_rate) return SimFault::malformed;
  if (c.reset_rate > 0 && util::hash_uniform(c.seed, k, 4) < c.reset_rate) return SimFault::reset;
  return SimFault::none;
}

std::string sim_token_text(std::uint64_t k, int tokens_per_word) {
  const std::uint64_t tpw = static_cast<std::uint64_t>(std::max(1, tokens_per_word));
  const std::uint64_t w = k / tpw, part = k % tpw;
  const std::string_view word = kSimWords[w % kSimWords.size()];
  // Split the word into tpw nearly equal non-empty pieces (words are >= 4 letters; more pieces than
  // letters give empty tail pieces, which stay valid tokens).
  const std::size_t len = word.size();
  const std::size_t b = std::min<std::size_t>(len, part * len / tpw);
  const std::size_t e = std::min<std::size_t>(len, (part + 1) * len / tpw);
  std::string out;
  if (part == 0 && w > 0) out += ' ';
  out.append(word.substr(b, e - b));
  return out;
}

struct SimServer::Impl {
  SimConfig cfg;
  int listen_fd = -1, epoll_fd = -1, timer_fd = -1, stop_fd = -1;
  std::uint16_t bound_port = 0;
  std::thread thread;
  std::atomic<bool> running{false};

  std::atomic<std::uint64_t> n_requests{0}, n_done{0}, n_errors{0}, n_cuts{0}, n_malformed{0}, n_resets{0}, n_max{0}, n_conns{0};
  std::uint64_t active = 0;
  // GET /metrics: the receipt -> first content token histogram (per bucket, not cumulative; the
  // last slot is +Inf) and its sum. Touched only on the loop thread.
  static constexpr std::size_t kBuckets = std::size(kSimTtftBuckets);
  std::array<std::uint64_t, kBuckets + 1> ttft_counts{};
  double ttft_sum_s = 0;

  struct Conn {
    int fd = -1;
    std::string in, out;
    std::size_t out_off = 0;
    bool close_after = false;       // close when the current response is written
    bool sent_continue = false;
    std::uint64_t stream = 0;       // active response id, 0 = none
    bool want_out = false;
  };
  struct Stream {
    std::uint64_t conn = 0;
    std::uint64_t seq = 0;
    bool chat = true, streaming = true, include_usage = false;
    std::string model_json, id;
    long long n = 1, sent = 0, prompt_tokens = 0;
    std::string finish;
    long long cut_at = -1, malformed_at = -1;
    std::int64_t recv_ns = 0, first_ns = 0, tpot_ns = 0;
    bool blocked = false;  // its connection's output is over kOutHigh: flush() re-queues it

    // When token k is due, saturating (2^31 tokens at 600 s each do not fit in int64 ns).
    std::int64_t due_ns(long long k) const {
      if (tpot_ns > 0 && k > (INT64_MAX - first_ns) / tpot_ns) return INT64_MAX;
      return first_ns + k * tpot_ns;
    }
  };
  // Output queued per connection before the stream waits for the socket, so a request for 2^31
  // tokens with --tpot-ms 0 costs a bounded buffer.
  static constexpr std::size_t kOutHigh = 1u << 20;
  std::unordered_map<std::uint64_t, Conn> conns;
  std::unordered_map<std::uint64_t, Stream> streams;
  std::uint64_t next_conn = 1, next_stream = 1;
  using Due = std::pair<std::int64_t, std::uint64_t>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due;
  std::int64_t armed_ns = -1;

  static constexpr std::uint64_t kListenTag = ~0ULL, kTimerTag = ~0ULL - 1, kStopTag = ~0ULL - 2;

  explicit Impl(SimConfig c) : cfg(std::move(c)) {}

  void bind_listen() {
    if (!is_loopback_host(cfg.host))
      throw Error("serve-sim binds only to loopback (127.0.0.0/8, ::1, localhost), not '" + cfg.host + "'");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    std::string host = cfg.host == "[::1]" ? "::1" : cfg.host;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(cfg.port);
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
      throw Error("serve-sim: cannot resolve " + cfg.host);
    listen_fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) {
      freeaddrinfo(res);
      throw Error(sys_error("serve-sim: socket"));
    }
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int rc = bind(listen_fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0) throw Error(sys_error("serve-sim: cannot bind " + cfg.host + ":" + port));
    if (listen(listen_fd, 4096) != 0) throw Error(sys_error("serve-sim: listen"));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
    bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd < 0 || timer_fd < 0 || stop_fd < 0) throw Error(sys_error("serve-sim: epoll/timerfd/eventfd"));
    add_fd(listen_fd, EPOLLIN, kListenTag);
    add_fd(timer_fd, EPOLLIN, kTimerTag);
    add_fd(stop_fd, EPOLLIN, kStopTag);
  }

  void add_fd(int fd, std::uint32_t events, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }

  void close_all() {
    for (auto& [id, c] : conns) ::close(c.fd);
    conns.clear();
    streams.clear();
    for (int* fd : {&listen_fd, &epoll_fd, &timer_fd, &stop_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  // ---- connections -------------------------------------------------------------------------
  void accept_all() {
    for (;;) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN or a transient error (EMFILE): try again on the next wake
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const std::uint64_t id = next_conn++;
      conns[id].fd = fd;
      add_fd(fd, EPOLLIN | EPOLLRDHUP, id);
      n_conns.fetch_add(1, std::memory_order_relaxed);
    }
  }

  void drop_conn(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    if (it->second.stream) end_stream(it->second.stream, /*completed=*/false);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    ::close(it->second.fd);
    conns.erase(it);
  }

  void set_out_interest(std::uint64_t id, Conn& c, bool want) {
    if (c.want_out == want) return;
    c.want_out = want;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
    ev.data.u64 = id;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // Writes what it can; returns false when the connection was dropped.
  bool flush(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return false;
    Conn& c = it->second;
    while (c.out_off < c.out.size()) {
      const ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (w > 0) {
        c.out_off += static_cast<std::size_t>(w);
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_out_interest(id, c, true);
        return true;
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        drop_conn(id);
        return false;
      }
    }
    c.out.clear();
    c.out_off = 0;
    set_out_interest(id, c, false);
    if (c.stream) {
      if (auto st = streams.find(c.stream); st != streams.end() && st->second.blocked) {
        st->second.blocked = false;
        due.emplace(util::steady_ns(), c.stream);
      }
    }
    if (c.close_after && c.stream == 0) {
      drop_conn(id);
      return false;
    }
    return true;
  }

  void on_readable(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    char buf[16384];
    for (;;) {
      const ssize_t r = ::recv(it->second.fd, buf, sizeof buf, 0);
      if (r > 0) {
        it->second.in.append(buf, static_cast<std::size_t>(r));
        if (it->second.in.size() > (64u << 20)) {
          drop_conn(id);
          return;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop_conn(id);  // EOF or error: the client went away
      return;
    }
    process_input(id);
  }

  // Parses and handles complete requests, one response at a time per connection.
  void process_input(std::uint64_t id) {
    for (;;) {
      auto it = conns.find(id);
      if (it == conns.end()) return;
      Conn& c = it->second;
      if (c.stream != 0 || c.close_after) return;
      const std::size_t hdr_end = c.in.find("\r\n\r\n");
      if (hdr_end == std::string::npos) return;
      std::string_view head(c.in.data(), hdr_end);
      const std::size_t line_end = head.find("\r\n");
      std::string_view request_line = head.substr(0, line_end);
      const std::size_t sp1 = request_line.find(' ');
      const std::size_t sp2 = request_line.rfind(' ');
      if (sp1 == std::string_view::npos || sp2 == sp1) {
        c.close_after = true;
        respond_simple(id, 400, "{\"error\":{\"message\":\"bad request line\",\"type\":\"invalid_request_error\"}}");
        return;
      }
      const std::string method(request_line.substr(0, sp1));
      std::string path(request_line.substr(sp1 + 1, sp2 - sp1 - 1));
      if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
      const bool http10 = request_line.substr(sp2 + 1) == "HTTP/1.0";
      std::size_t content_length = 0;
      bool expect_continue = false, conn_close = http10;
      std::size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        std::size_t e = head.find("\r\n", pos);
        if (e == std::string_view::npos) e = head.size();
        std::string_view h = head.substr(pos, e - pos);
        pos = e + 2;
        const std::size_t colon = h.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string name = ascii_lower(std::string(h.substr(0, colon)));
        std::string_view v = h.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
        const std::string value = ascii_lower(std::string(v));
        if (name == "content-length") content_length = std::strtoull(value.c_str(), nullptr, 10);
        else if (name == "expect" && value == "100-continue") expect_continue = true;
        else if (name == "connection") conn_close = value.find("close") != std::string::npos;
      }
      const std::size_t total = hdr_end + 4 + content_length;
      if (c.in.size() < total) {
        if (expect_continue && !c.sent_continue) {
          c.sent_continue = true;
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
          flush(id);
        }
        return;
      }
      std::string body = c.in.substr(hdr_end + 4, content_length);
      c.in.erase(0, total);
      c.sent_continue = false;
      c.close_after = conn_close;
      handle_request(id, method, path, body);
    }
  }

  void respond_simple(std::uint64_t id, int status, const std::string& body,
                      const char* content_type = "application/json") {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = it->second;
    const char* text = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 404 ? "Not Found"
                     : status == 429 ? "Too Many Requests" : status == 503 ? "Service Unavailable"
                                                            : "Internal Server Error";
    c.out += "HTTP/1.1 " + std::to_string(status) + " " + text +
             "\r\nContent-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
             (c.close_after ? "\r\nConnection: close" : "") + "\r\n\r\n" + body;
    flush(id);
  }

  void handle_request(std::uint64_t id, const std::string& method, const std::string& path, const std::string& body) {
    if (method == "GET" && ends_with(path, "/health")) return respond_simple(id, 200, "{}");
    if (method == "GET" && ends_with(path, "/metrics"))
      return respond_simple(id, 200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    if (method == "GET" && ends_with(path, "/models")) {
      return respond_simple(id, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"sim\",\"object\":\"model\",\"owned_by\":\"hotpath\"}]}");
    }
    const bool chat = ends_with(path, "/chat/completions");
    if (method != "POST" || (!chat && !ends_with(path, "/completions")))
      return respond_simple(id, 404, "{\"error\":{\"message\":\"no such route\",\"type\":\"not_found\"}}");
    const std::int64_t recv = util::steady_ns();
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return respond_simple(id, 400, "{\"error\":{\"message\":\"body is not a JSON object\",\"type\":\"invalid_request_error\"}}");
    const std::uint64_t seq = n_requests.fetch_add(1, std::memory_order_relaxed);
    const SimFault fault = sim_fault_for(cfg, seq);
    if (fault == SimFault::reset) {
      // SO_LINGER 0: close() sends RST at once, before any response byte.
      n_resets.fetch_add(1, std::memory_order_relaxed);
      if (auto it = conns.find(id); it != conns.end()) {
        linger lg{1, 0};
        setsockopt(it->second.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      }
      return drop_conn(id);
    }
    if (fault == SimFault::http_error) {
      n_errors.fetch_add(1, std::memory_order_relaxed);
      return respond_simple(id, cfg.error_status,
                            "{\"error\":{\"message\":\"simulated failure\",\"type\":\"server_error\",\"code\":" +
                                std::to_string(cfg.error_status) + "}}");
    }
    Stream s;
    s.conn = id;
    s.seq = seq;
    s.chat = chat;
    s.recv_ns = recv;
    long long max_tokens = cfg.default_tokens;
    for (const char* k : {"max_tokens", "max_completion_tokens"}) {
      if (auto m = j.find(k); m != j.end() && m->is_number_integer()) max_tokens = json_int_in(j, k, 1, kMaxOutputTokens).value_or(0);
    }
    if (max_tokens < 1)
      return respond_simple(id, 400, "{\"error\":{\"message\":\"max_tokens must be in [1, 2147483647]\",\"type\":\"invalid_request_error\"}}");
    const bool ignore_eos = j.value("ignore_eos", false);
    s.n = cfg.output_tokens > 0 ? cfg.output_tokens : max_tokens;
    s.finish = "length";
    if (cfg.eos_tokens > 0 && !ignore_eos && cfg.eos_tokens < s.n) {
      s.n = cfg.eos_tokens;
      s.finish = "stop";
    }
    s.streaming = j.value("stream", false);
    if (auto so = j.find("stream_options"); so != j.end() && so->is_object())
      s.include_usage = so->value("include_usage", false);
    if (auto p = j.find("prompt"); p != j.end() && p->is_string()) s.prompt_tokens = static_cast<long long>(count_words(p->get_ref<const std::string&>()));
    if (auto m = j.find("messages"); m != j.end() && m->is_array())
      for (const auto& msg : *m)
        if (msg.is_object() && msg.contains("content") && msg["content"].is_string())
          s.prompt_tokens += static_cast<long long>(count_words(msg["content"].get_ref<const std::string&>()));
    const std::string model = j.contains("model") && j["model"].is_string() ? j["model"].get<std::string>() : "sim";
    s.model_json = nlohmann::json(model).dump();
    s.id = (chat ? "chatcmpl-sim-" : "cmpl-sim-") + std::to_string(seq);
    if (fault == SimFault::cut) s.cut_at = s.n / 2;
    if (fault == SimFault::malformed) s.malformed_at = s.n / 2;
    s.first_ns = recv + static_cast<std::int64_t>(std::llround(cfg.ttft_ms * 1e6));
    s.tpot_ns = static_cast<std::int64_t>(std::llround(cfg.tpot_ms * 1e6));

    const std::uint64_t sid = next_stream++;
    Conn& c = conns[id];
    c.stream = sid;
    ++active;
    if (active > n_max.load(std::memory_order_relaxed)) n_max.store(active, std::memory_order_relaxed);
    std::int64_t first_due = s.first_ns;
    if (!s.streaming) first_due = s.due_ns(s.n - 1);
    if (s.streaming) {
      c.out += "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               "Transfer-Encoding: chunked\r\n";
      if (c.close_after) c.out += "Connection: close\r\n";
      c.out += "\r\n";
      if (chat && cfg.role_chunk) {
        append_event(c.out, head_json(s) + "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}");
      }
    }
    streams.emplace(sid, std::move(s));
    due.emplace(first_due, sid);
    flush(id);
  }

  void observe_ttft(std::int64_t ns) {
    const double v = static_cast<double>(ns) * 1e-9;
    std::size_t b = 0;
    while (b < kBuckets && v > kSimTtftBuckets[b]) ++b;
    ++ttft_counts[b];
    ttft_sum_s += v;
  }

  // The Prometheus text exposition (0.0.4) of the loop's state, under vLLM's metric names.
  std::string metrics_text() const {
    const std::int64_t now = util::steady_ns();
    double held = 0;  // tokens held by requests in progress: prompt + generated so far
    for (const auto& [sid, s] : streams) {
      long long gen = 0;
      if (now >= s.first_ns) gen = s.tpot_ns > 0 ? std::min<long long>(s.n, (now - s.first_ns) / s.tpot_ns + 1) : s.n;
      held += static_cast<double>(s.prompt_tokens + gen);
    }
    const double kv = std::min(1.0, held / static_cast<double>(std::max(1LL, cfg.kv_capacity_tokens)));
    const char* lbl = "model_name=\"sim\"";
    char num[64];
    std::string o;
    o += "# HELP vllm:num_requests_running Requests in progress: received, last token not yet sent.\n"
         "# TYPE vllm:num_requests_running gauge\n";
    o += "vllm:num_requests_running{" + std::string(lbl) + "} " + std::to_string(active) + "\n";
    o += "# HELP vllm:num_requests_waiting Requests queued: serve-sim admits every request at once, so 0.\n"
         "# TYPE vllm:num_requests_waiting gauge\n";
    o += "vllm:num_requests_waiting{" + std::string(lbl) + "} 0\n";
    std::snprintf(num, sizeof num, "%.6g", kv);
    o += "# HELP vllm:kv_cache_usage_perc Synthetic: tokens held by requests in progress / --kv-capacity-tokens (1 = full).\n"
         "# TYPE vllm:kv_cache_usage_perc gauge\n";
    o += "vllm:kv_cache_usage_perc{" + std::string(lbl) + "} " + num + "\n";
    o += "# HELP vllm:time_to_first_token_seconds Request received -> first content token sent.\n"
         "# TYPE vllm:time_to_first_token_seconds histogram\n";
    std::uint64_t cum = 0;
    for (std::size_t b = 0; b <= kBuckets; ++b) {
      cum += ttft_counts[b];
      if (b < kBuckets) std::snprintf(num, sizeof num, "%.15g", kSimTtftBuckets[b]);
      o += "vllm:time_to_first_token_seconds_bucket{le=\"" + std::string(b < kBuckets ? num : "+Inf") + "\"," + lbl +
           "} " + std::to_string(cum) + "\n";
    }
    std::snprintf(num, sizeof num, "%.9g", ttft_sum_s);
    o += "vllm:time_to_first_token_seconds_sum{" + std::string(lbl) + "} " + num + "\n";
    o += "vllm:time_to_first_token_seconds_count{" + std::string(lbl) + "} " + std::to_string(cum) + "\n";
    return o;
  }

  std::string head_json(const Stream& s) const {
    return "{\"id\":\"" + s.id + "\",\"object\":\"" + (s.chat ? "chat.completion.chunk" : "text_completion") +
           "\",\"created\":0,\"model\":" + s.model_json + ",";
  }

  static void append_event(std::string& out, const std::string& data) {
    char hex[32];
    const std::size_t len = data.size() + 8;  // "data: " + data + "\n\n"
    std::snprintf(hex, sizeof hex, "%zx\r\n", len);
    out += hex;
    out += "data: ";
    out += data;
    out += "\n\n\r\n";
  }

  void end_stream(std::uint64_t sid, bool completed) {
    auto it = streams.find(sid);
    if (it == streams.end()) return;
    if (completed) n_done.fetch_add(1, std::memory_order_relaxed);
    auto c = conns.find(it->second.conn);
    if (c != conns.end() && c->second.stream == sid) c->second.stream = 0;
    streams.erase(it);
    --active;
  }

  // Emits every token of stream sid that is due at `now`.
  void on_due(std::uint64_t sid, std::int64_t now) {
    auto sit = streams.find(sid);
    if (sit == streams.end()) return;
    Stream& s = sit->second;
    const std::uint64_t cid = s.conn;
    auto cit = conns.find(cid);
    if (cit == conns.end()) {
      end_stream(sid, false);
      return;
    }
    Conn& c = cit->second;
    if (!s.streaming) {
      observe_ttft(s.first_ns - s.recv_ns);  // its first token was generated then
      std::string text;
      for (long long k = 0; k < s.n; ++k) text += sim_token_text(static_cast<std::uint64_t>(k), cfg.tokens_per_word);
      nlohmann::json body;
      body["id"] = s.id;
      body["object"] = s.chat ? "chat.completion" : "text_completion";
      body["model"] = nlohmann::json::parse(s.model_json);
      if (s.chat)
        body["choices"] = {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"finish_reason", s.finish}}};
      else
        body["choices"] = {{{"index", 0}, {"text", text}, {"finish_reason", s.finish}}};
      body["usage"] = {{"prompt_tokens", s.prompt_tokens}, {"completion_tokens", s.n}, {"total_tokens", s.prompt_tokens + s.n}};
      end_stream(sid, true);
      respond_simple(cid, 200, body.dump());
      process_input(cid);
      return;
    }
    while (s.sent < s.n && s.due_ns(s.sent) <= now && c.out.size() - c.out_off < kOutHigh) {
      const long long k = s.sent;
      if (k == s.cut_at) {
        n_cuts.fetch_add(1, std::memory_order_relaxed);
        // What was generated so far goes out, then the connection is closed mid-body.
        ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
        drop_conn(cid);
        return;
      }
      if (k == s.malformed_at) {
        n_malformed.fetch_add(1, std::memory_order_relaxed);
        append_event(c.out, "{\"choices\":[{\"delta\":{\"content\":\"x\"}");  // truncated JSON
      }
      const bool last = k + 1 == s.n;
      std::string ev = head_json(s);
      ev += "\"choices\":[{\"index\":0,";
      ev += s.chat ? "\"delta\":{\"content\":\"" : "\"text\":\"";
      ev += sim_token_text(static_cast<std::uint64_t>(k), cfg.tokens_per_word);
      ev += s.chat ? "\"}," : "\",";
      ev += "\"finish_reason\":";
      ev += last ? "\"" + s.finish + "\"" : std::string("null");
      ev += "}]";
      if (k == 0) observe_ttft(util::steady_ns() - s.recv_ns);
      if (k == 0 && cfg.stamps) {
        ev += ",\"hotpath_sim\":{\"recv_ns\":" + std::to_string(s.recv_ns) + ",\"sent_ns\":" + std::to_string(util::steady_ns()) + "}";
      }
      ev += "}";
      append_event(c.out, ev);
      ++s.sent;
    }
    if (s.sent == s.n) {
      if (s.include_usage) {
        append_event(c.out, head_json(s) + "\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(s.prompt_tokens) +
                                ",\"completion_tokens\":" + std::to_string(s.n) +
                                ",\"total_tokens\":" + std::to_string(s.prompt_tokens + s.n) + "}}");
      }
      append_event(c.out, "[DONE]");
      c.out += "0\r\n\r\n";
      end_stream(sid, true);
      if (flush(cid)) process_input(cid);
      return;
    }
    if (c.out.size() - c.out_off >= kOutHigh) {
      s.blocked = true;
      flush(cid);  // may drop the connection and the stream with it: `s` is not used after this
      return;
    }
    due.emplace(s.due_ns(s.sent), sid);
    flush(cid);
  }

  void on_timer() {
    std::uint64_t expirations = 0;
    [[maybe_unused]] ssize_t r = ::read(timer_fd, &expirations, sizeof expirations);
    armed_ns = -1;
  }

  void run_due() {
    const std::int64_t now = util::steady_ns();
    while (!due.empty() && due.top().first <= now) {
      const std::uint64_t sid = due.top().second;
      due.pop();
      on_due(sid, now);
    }
  }

  void arm_timer() {
    if (due.empty()) return;
    const std::int64_t t = due.top().first;
    if (t == armed_ns) return;
    itimerspec its{};
    its.it_value.tv_sec = t / 1'000'000'000;
    its.it_value.tv_nsec = t % 1'000'000'000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, nullptr);
    armed_ns = t;
  }

  void loop() {
    std::vector<epoll_event> events(256);
    while (running.load(std::memory_order_acquire)) {
      run_due();
      arm_timer();
      const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), cfg.busy_poll ? 0 : 1000);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < n; ++i) {
        const std::uint64_t tag = events[i].data.u64;
        if (tag == kStopTag) return;
        if (tag == kListenTag) {
          accept_all();
        } else if (tag == kTimerTag) {
          on_timer();
        } else {
          const std::uint32_t e = events[i].events;
          if (e & EPOLLOUT) {
            if (!flush(tag)) continue;
            process_input(tag);
          }
          if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(tag);
        }
      }
    }
  }
};

SimServer::SimServer(SimConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  // Written so that NaN fails every check.
  for (double d : {impl_->cfg.ttft_ms, impl_->cfg.tpot_ms})
    if (!(d >= 0 && d <= kMaxSimDelayMs)) throw Error("serve-sim: --ttft-ms and --tpot-ms must be in [0, 600000]");
  if (impl_->cfg.tokens_per_word < 1 || impl_->cfg.tokens_per_word > kMaxTokensPerWord)
    throw Error("serve-sim: --tokens-per-word must be in [1, 1000]");
  for (double r : {impl_->cfg.error_rate, impl_->cfg.cut_rate, impl_->cfg.malformed_rate, impl_->cfg.reset_rate})
    if (!(r >= 0 && r <= 1)) throw Error("serve-sim: fault rates must be in [0, 1]");
  if (impl_->cfg.kv_capacity_tokens < 1) throw Error("serve-sim: --kv-capacity-tokens must be at least 1");
  if (impl_->cfg.error_status < 400 || impl_->cfg.error_status > 599) throw Error("serve-sim: --error-status must be 4xx or 5xx");
}

SimServer::~SimServer() { stop(); }

void SimServer::start() {
  if (impl_->running.load()) return;
  try {
    impl_->bind_listen();
  } catch (...) {
    impl_->close_all();
    throw;
  }
  impl_->running.store(true, std::memory_order_release);
  try {
    impl_->thread = util::start_thread([this] { impl_->loop(); });
  } catch (const std::system_error& e) {
    impl_->running.store(false);
    impl_->close_all();
    throw Error(std::string("serve-sim: cannot start its thread: ") + e.what() + " (ulimit -u?)");
  }
}

void SimServer::stop() {
  if (!impl_->running.exchange(false)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(impl_->stop_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->close_all();
}

std::uint16_t SimServer::port() const { return impl_->bound_port; }

std::string SimServer::base_url() const {
  const std::string& h = impl_->cfg.host;
  const std::string host = (h == "::1") ? "[::1]" : h;
  return "http://" + host + ":" + std::to_string(impl_->bound_port) + "/v1";
}

SimStats SimServer::stats() const {
  SimStats s;
  s.requests = impl_->n_requests.load(std::memory_order_relaxed);
  s.streams_done = impl_->n_done.load(std::memory_order_relaxed);
  s.http_errors = impl_->n_errors.load(std::memory_order_relaxed);
  s.cuts = impl_->n_cuts.load(std::memory_order_relaxed);
  s.malformed = impl_->n_malformed.load(std::memory_order_relaxed);
  s.max_concurrent = impl_->n_max.load(std::memory_order_relaxed);
  s.connections = impl_->n_conns.load(std::memory_order_relaxed);
  s.resets = impl_->n_resets.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hotpath::llm
