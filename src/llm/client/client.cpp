#include "llm/client/client.hpp"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <arpa/inet.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cctype>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <queue>
#include <system_error>
#include <thread>

#include "llm/client/interrupt.hpp"
#include "llm/client/sse.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/text.hpp"
#include "llm/workloads/schedule.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::llm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl failed to initialise");
  });
}

// Many concurrent streams need many descriptors; the default soft limit is often 1024.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Everything the workers share for the client's lifetime, read-only while they run.
struct Plan {
  const std::vector<DatasetItem>* items = nullptr;
  std::vector<std::string> bodies;   // one per dataset item
  std::string url;
  curl_slist* headers = nullptr;
  long timeout_ms = 0;
  double timeout_s = 0;
  bool insecure = false;
  bool busy_poll = false;
  Api api = Api::chat;
  std::string model;
  bool ignore_eos = false;
  StopSignal* stop = nullptr;
  double grace_s = 10;
  std::int64_t spin_ns = 0;  // --spin-us
};

// A multi-turn conversation: its requests in turn order and the messages so far. Only the worker
// that owns the session touches it.
struct Conversation {
  std::vector<std::size_t> turns;  // record indices
  nlohmann::json history = nlohmann::json::array();
};

// One run (the warm-up or a measured phase) as the workers see it.
struct Phase {
  std::vector<RequestRecord>* records = nullptr;
  std::vector<Conversation>* conversations = nullptr;  // null unless multi-turn
  double duration_s = 0;
  double cap_ramp_s = 0;     // batch: the cap grows from 1 to its value over this many seconds
  double think_s = 0;
  LiveCounters* live = nullptr;
  Clock::time_point t0;
};

class Worker;

struct Transfer {
  Worker* worker = nullptr;
  CURL* easy = nullptr;
  RequestRecord* rec = nullptr;
  const DatasetItem* item = nullptr;
  SseParser sse;
  WordClock words;
  std::string text;  // kept only when there is a reference to score against or a conversation
  std::string body;  // a conversation turn's own body (history + turn)
  std::string err_body;
  std::string fail_reason, fail_detail;
  bool keep_text = false, done_seen = false, status_checked = false, error_body = false;
  bool active = false;  // added to the multi handle
  std::size_t bytes = 0;
  int sends = 0;        // times libcurl was about to send the request (CURLOPT_PREREQFUNCTION)
  double done_s = kInf;  // when `[DONE]` arrived; the transfer is ended if the stream stays open

  void reset(RequestRecord* r, const DatasetItem* it, bool conversation) {
    rec = r;
    item = it;
    sse = SseParser();
    words = WordClock();
    text.clear();
    body.clear();
    err_body.clear();
    fail_reason.clear();
    fail_detail.clear();
    keep_text = it->reference.has_value() || conversation;
    done_seen = status_checked = error_body = false;
    bytes = 0;
    sends = 0;
    done_s = kInf;
  }
};

// One client thread's share of the work: an epoll loop, a curl multi handle and a pool of easy
// handles. It lives as long as the client, so the multi handle's connection cache carries open
// keep-alive connections from one phase to the next.
class Worker {
 public:
  explicit Worker(const Plan& plan) : plan_(plan) {}
  ~Worker() {
    for (auto& t : pool_) {
      if (!t->easy) continue;
      if (multi_) curl_multi_remove_handle(multi_, t->easy);  // a no-op unless a throw left it added
      curl_easy_cleanup(t->easy);
    }
    if (multi_) curl_multi_cleanup(multi_);
    if (timer_fd_ >= 0) close(timer_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  double now_s() const { return std::chrono::duration<double>(Clock::now() - phase_->t0).count(); }
  double cpu_s() const { return cpu_s_; }
  bool stopped() const { return stop_s_ >= 0; }

  // Everything that costs time once (epoll, the multi handle, easy handles: the first
  // curl_easy_init takes milliseconds) happens here, before t0, so it never delays a send.
  void prepare(const Phase& phase, std::vector<std::size_t> mine, std::size_t cap) {
    if (epoll_fd_ < 0) {
      epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
      timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      if (epoll_fd_ < 0 || timer_fd_ < 0) throw Error(std::string("client: epoll/timerfd: ") + std::strerror(errno));
      epoll_event tev{};
      tev.events = EPOLLIN;
      tev.data.fd = timer_fd_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &tev);
      multi_ = curl_multi_init();
      if (!multi_) throw Error("client: curl_multi_init failed");
      curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &Worker::socket_cb);
      curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
      curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &Worker::timer_cb);
      curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
      curl_multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_NOTHING);
    }
    phase_ = &phase;
    records_ = phase.records;
    mine_ = std::move(mine);
    cap_ = cap;
    next_ = in_flight_ = 0;
    free_slots_.assign(cap_, -kInf);
    followups_ = {};
    stop_s_ = -1;
    next_watchdog_s_ = 0;
    linger_until_s_ = kInf;
    // Keep one idle connection per possible stream so keep-alive reuse never has to reconnect;
    // the cache only grows, so the connections of an earlier phase survive a smaller one.
    const long keep = static_cast<long>(std::min(cap_ ? cap_ : kMaxConcurrency, std::max<std::size_t>(mine_.size(), 16)));
    if (keep > keep_) {
      keep_ = keep;
      curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, keep_);
    }
    const std::size_t pre = std::min<std::size_t>(cap_ ? cap_ : mine_.size(), std::min<std::size_t>(mine_.size(), 1024));
    while (pool_.size() < pre) idle_.push_back(create_transfer());
  }

  static double thread_cpu_s() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  }

  void run() {
    const double cpu0 = thread_cpu_s();
    // The stop eventfd wakes the loop; it is watched for this run only, on every path out of it.
    struct StopWatch {
      int epoll_fd, fd;
      StopWatch(int e, int f) : epoll_fd(e), fd(f) {
        if (fd < 0) return;
        epoll_event sev{};
        sev.events = EPOLLIN;
        sev.data.fd = fd;
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &sev);
      }
      ~StopWatch() {
        if (fd >= 0) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);  // ENOENT once the loop dropped it
      }
    } watch(epoll_fd_, plan_.stop ? plan_.stop->fd() : -1);
    run_loop();
    cpu_s_ = thread_cpu_s() - cpu0;
  }

 private:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  static constexpr int kBackstopMs = 1000;
  // How long a body may stay open after `[DONE]`: well-behaved servers end it at once, often in
  // the same packet, and the connection is then reused.
  static constexpr double kDoneLingerS = 0.1;

  void run_loop() {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake-ups at the scheduled nanosecond, not +50 us
    t0_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(phase_->t0.time_since_epoch()).count();
    std::vector<epoll_event> events(512);
    for (;;) {
      if (!stopped() && plan_.stop && plan_.stop->requested()) begin_stop();
      start_due();
      // A transfer can end inside curl_multi_socket_action without any socket event (a refused
      // connect, a URL curl rejects): reap before sleeping, or nothing would wake the loop.
      reap();
      end_lingering();
      expire_overdue();
      if (in_flight_ == 0 && nothing_left()) break;
      const std::int64_t send = next_send_ns(), other = next_other_ns();
      const std::int64_t wake = std::min(send, other), now = now_ns();
      // The timerfd wakes the loop at the next send or curl deadline; the epoll timeout is a
      // backstop so that no wait is unbounded whatever curl or the schedule say. With --spin-us the
      // timer fires that much before a send and the loop spins the rest, so a core's wake-up
      // latency does not land in the send time.
      int timeout = kBackstopMs;
      if (plan_.busy_poll || wake <= now) {
        timeout = 0;  // busy polling never sleeps, so no wake-up latency lands in RT
      } else if (plan_.spin_ns > 0 && send <= other && send - now <= plan_.spin_ns) {
        timeout = 0;
      } else if (wake != kNever) {
        arm(send <= other ? std::max(now, send - plan_.spin_ns) : other);
      }
      const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) throw Error(std::string("client: epoll_wait: ") + std::strerror(errno));
      int running = 0;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == timer_fd_) {
          std::uint64_t x;
          [[maybe_unused]] ssize_t r = read(timer_fd_, &x, sizeof x);
          armed_ = -1;
          continue;
        }
        if (plan_.stop && fd == plan_.stop->fd()) {
          // Level-triggered and never drained (every worker watches it): stop watching it here;
          // the check at the top of the loop begins the stop.
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
          continue;
        }
        int flags = 0;
        if (events[i].events & EPOLLIN) flags |= CURL_CSELECT_IN;
        if (events[i].events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
        if (events[i].events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
        curl_multi_socket_action(multi_, fd, flags, &running);
      }
      if (curl_deadline_ns_ != kNever && curl_deadline_ns_ <= now_ns()) {
        curl_deadline_ns_ = kNever;
        curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      }
      reap();
    }
  }

  bool nothing_left() const { return next_ == mine_.size() && followups_.empty(); }

  // No request is sent after this; those in flight get the grace period.
  void begin_stop() {
    stop_s_ = now_s();
    next_ = mine_.size();
    followups_ = {};
  }

  // Seconds since t0 as an absolute steady_clock time in ns, saturating at kNever.
  std::int64_t at_ns(double s) const {
    const double ns = static_cast<double>(t0_ns_) + s * 1e9;
    return ns >= 9.2e18 ? kNever : static_cast<std::int64_t>(std::llround(ns));
  }

  // The watchdog behind curl's own timeout: a transfer still running a second after its
  // --timeout is ended here as a timeout, so a run always ends within its flags. Checked once a
  // second, so its cost does not grow with the event rate. After an interrupt, transfers still
  // running when the grace period ends are abandoned.
  void expire_overdue() {
    const double now = now_s();
    const bool abandon = stopped() && now >= stop_s_ + plan_.grace_s;
    if (now < next_watchdog_s_ && !abandon) return;
    next_watchdog_s_ = now + 1.0;
    for (auto& t : pool_) {
      if (!t->active) continue;
      if (abandon) {
        curl_multi_remove_handle(multi_, t->easy);
        t->fail_reason = reason::abandoned;
        t->fail_detail = "still in flight when the grace period after the interrupt ended";
        end_transfer(*t, CURLE_ABORTED_BY_CALLBACK);
      } else if (now >= t->rec->sent_s + plan_.timeout_s + 1.0) {
        curl_multi_remove_handle(multi_, t->easy);
        end_transfer(*t, CURLE_OPERATION_TIMEDOUT);
      }
    }
  }

  std::int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }

  // With a cap ramp the cap grows from 1 to cap_ over cap_ramp_s: the (k + 1)-th concurrent slot
  // opens at k * ramp / cap (the first at 0). The one rule behind the wake-up and the send.
  double slot_opens_s(std::size_t k) const {
    if (!(phase_->cap_ramp_s > 0) || !cap_) return -kInf;
    return phase_->cap_ramp_s * static_cast<double>(k) / static_cast<double>(cap_);
  }

  // The next request due: from the schedule or a conversation's next turn.
  bool peek_due(double& due, bool& followup) const {
    const bool has_static = next_ < mine_.size();
    const bool has_follow = !followups_.empty();
    if (!has_static && !has_follow) return false;
    const double ds = has_static ? (*records_)[mine_[next_]].scheduled_s : kInf;
    const double df = has_follow ? followups_.top().first : kInf;
    followup = df < ds;
    due = followup ? df : ds;
    return true;
  }

  // The next scheduled send (kNever when none is due or no slot is free).
  std::int64_t next_send_ns() const {
    double due = 0;
    bool followup = false;
    if (!peek_due(due, followup) || (cap_ != 0 && in_flight_ >= cap_)) return kNever;
    double s = std::max(due, slot_opens_s(in_flight_));
    if (phase_->duration_s > 0) s = std::min(s, phase_->duration_s);
    return at_ns(s);
  }
  // The next thing other than a send that needs the loop: curl's deadline, the end of the grace
  // period, a stream still open after its `[DONE]`.
  std::int64_t next_other_ns() const {
    std::int64_t w = std::min(curl_deadline_ns_, at_ns(linger_until_s_));
    if (stopped()) w = std::min(w, at_ns(stop_s_ + plan_.grace_s));
    return w;
  }

  // A request is complete at `[DONE]`, but its transfer runs until the server ends the body. One
  // still open kDoneLingerS after `[DONE]` is ended here and counted as completed (its connection
  // is closed, not reused) rather than holding its slot until --timeout.
  void end_lingering() {
    const double now = now_s();
    if (now < linger_until_s_) return;
    linger_until_s_ = kInf;
    for (auto& t : pool_) {
      if (!t->active || !t->done_seen) continue;
      if (now >= t->done_s + kDoneLingerS) {
        curl_multi_remove_handle(multi_, t->easy);
        end_transfer(*t, CURLE_OK);
      } else {
        linger_until_s_ = std::min(linger_until_s_, t->done_s + kDoneLingerS);
      }
    }
  }

  void arm(std::int64_t t) {
    if (t == armed_) return;
    itimerspec its{};
    its.it_value.tv_sec = t / 1'000'000'000;
    its.it_value.tv_nsec = t % 1'000'000'000;
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
    armed_ = t;
  }

  // Sends every request whose time has come and for which a slot is free.
  void start_due() {
    double due = 0;
    bool followup = false;
    while (peek_due(due, followup)) {
      const double now = now_s();
      if (phase_->duration_s > 0 && now >= phase_->duration_s) {
        next_ = mine_.size();  // the rest stay not_sent
        followups_ = {};
        return;
      }
      if (due > now) return;
      if (cap_ && (in_flight_ >= cap_ || now < slot_opens_s(in_flight_))) return;
      std::size_t idx;
      if (followup) {
        idx = followups_.top().second;
        followups_.pop();
      } else {
        idx = mine_[next_++];
      }
      RequestRecord& rec = (*records_)[idx];
      double slot = rec.scheduled_s;
      if (cap_) {
        // The slot this request takes was freed at free_slots_.front() (or opened by the ramp);
        // waiting for it is the client-slot wait, reported apart from RT.
        slot = std::max({slot, free_slots_.front(), slot_opens_s(in_flight_)});
        free_slots_.pop_front();
      }
      launch(rec, slot);
      // Let curl write the request now rather than after another trip through epoll_wait.
      int running = 0;
      curl_deadline_ns_ = kNever;
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
  }

  Transfer* acquire() {
    if (idle_.empty()) return create_transfer();
    Transfer* t = idle_.back();
    idle_.pop_back();
    return t;
  }

  Transfer* create_transfer() {
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
  static nlohmann::json turn_messages(const nlohmann::json& history, const DatasetItem& item) {
    nlohmann::json m = history;
    if (item.messages) {
      for (const auto& msg : *item.messages) m.push_back(msg);
    } else {
      m.push_back({{"role", "user"}, {"content", item.prompt.value_or("")}});
    }
    return m;
  }

  void launch(RequestRecord& rec, double slot) {
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

  void release_slot(double t) {
    if (cap_) free_slots_.push_back(t);
  }

  void reap() {
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

  void end_transfer(Transfer& t, CURLcode result) {
    t.active = false;
    finish(t, result);
    --in_flight_;
    idle_.push_back(&t);
  }

  // A completed turn adds itself and the reply to the history and schedules the next turn after
  // the think time; a failed one ends its conversation (the later turns stay not_sent).
  void next_turn(Transfer& t, double now) {
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

  void finish(Transfer& t, CURLcode result) {
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

  bool on_event(Transfer& t, std::string_view data, double now) {
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

  static size_t write_cb(char* ptr, size_t size, size_t nmemb, void* userdata) {
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
  static int prereq_cb(void* clientp, char*, char*, int, int) {
    auto* t = static_cast<Transfer*>(clientp);
    if (++t->sends == 1) return CURL_PREREQFUNC_OK;
    t->fail_reason = reason::request_error;
    t->fail_detail = "the reused connection was lost before any response byte (libcurl's resend refused)";
    return CURL_PREREQFUNC_ABORT;
  }

  static int socket_cb(CURL*, curl_socket_t s, int what, void* userp, void*) {
    auto* w = static_cast<Worker*>(userp);
    if (what == CURL_POLL_REMOVE) {
      epoll_ctl(w->epoll_fd_, EPOLL_CTL_DEL, s, nullptr);
      return 0;
    }
    epoll_event ev{};
    ev.data.fd = s;
    if (what & CURL_POLL_IN) ev.events |= EPOLLIN;
    if (what & CURL_POLL_OUT) ev.events |= EPOLLOUT;
    if (epoll_ctl(w->epoll_fd_, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT)
      epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, s, &ev);
    return 0;
  }

  static int timer_cb(CURLM*, long timeout_ms, void* userp) {
    auto* w = static_cast<Worker*>(userp);
    w->curl_deadline_ns_ = timeout_ms < 0 ? kNever : w->now_ns() + static_cast<std::int64_t>(timeout_ms) * 1'000'000;
    return 0;
  }

  using Due = std::pair<double, std::size_t>;  // (scheduled_s, record index), earliest first
  const Plan& plan_;
  const Phase* phase_ = nullptr;
  std::vector<RequestRecord>* records_ = nullptr;
  std::vector<std::size_t> mine_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> followups_;
  std::size_t cap_ = 0;
  std::size_t next_ = 0, in_flight_ = 0;
  std::deque<double> free_slots_;
  std::vector<std::unique_ptr<Transfer>> pool_;
  std::vector<Transfer*> idle_;
  CURLM* multi_ = nullptr;
  long keep_ = 0;
  int epoll_fd_ = -1, timer_fd_ = -1;
  std::int64_t t0_ns_ = 0;
  std::int64_t curl_deadline_ns_ = kNever;
  std::int64_t armed_ = -1;
  double next_watchdog_s_ = 0;
  double linger_until_s_ = kInf;  // the earliest end of a linger after `[DONE]` (end_lingering)
  double stop_s_ = -1;
  double cpu_s_ = 0;
};

// Holds worker threads until every one has started, so that a start that fails (ulimit -u) can
// release the others to return at once instead of running the schedule.
class StartGate {
 public:
  enum State { waiting, go, abort };
  void open(State s) {
    {
      std::lock_guard<std::mutex> l(m_);
      if (state_ != waiting) return;
      state_ = s;
    }
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return state_ != waiting; });  // open() is called on every path of execute()
    return state_ == go;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  State state_ = waiting;
};

// Runs `phase` on the workers: request i goes to worker i % workers (a conversation's turns all to
// the worker of its session), and the cap is split between workers as evenly as possible, the same
// way for every phase so each worker's connections stay within its share. Returns the CPU time the
// worker threads used.
double execute(std::vector<std::unique_ptr<Worker>>& all, Phase& phase, std::size_t cap) {
  auto& records = *phase.records;
  // A cap below the thread count leaves the extra workers idle (each needs a share of >= 1).
  const std::size_t threads = cap ? std::min(all.size(), cap) : all.size();
  std::vector<Worker*> workers;
  for (std::size_t k = 0; k < threads; ++k) workers.push_back(all[k].get());
  std::vector<std::vector<std::size_t>> parts(threads);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& r = records[i];
    const std::size_t owner = r.session == RequestRecord::kNoSession ? i : r.session;
    if (r.session != RequestRecord::kNoSession && r.turn > 0) continue;  // sent when the turn before completes
    parts[owner % threads].push_back(i);
  }
  for (std::size_t k = 0; k < threads; ++k) {
    const std::size_t share = cap ? cap / threads + (k < cap % threads ? 1 : 0) : 0;
    workers[k]->prepare(phase, std::move(parts[k]), share);
  }
  if (threads == 1) {
    phase.t0 = Clock::now() + std::chrono::microseconds(200);  // t0 is set after the set-up
    workers[0]->run();
    return workers[0]->cpu_s();
  }
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(threads);
  StartGate gate;
  // Whatever throws below, no std::thread is destroyed joinable (that would std::terminate).
  struct Joiner {
    StartGate& gate;
    std::vector<std::thread>& ts;
    ~Joiner() {
      gate.open(StartGate::abort);  // a no-op once the gate is open
      for (auto& t : ts)
        if (t.joinable()) t.join();
    }
  } joiner{gate, ts};
  ts.reserve(threads);
  for (std::size_t k = 0; k < threads; ++k) {
    try {
      ts.push_back(util::start_thread([&, k] {
        if (!gate.wait()) return;
        try {
          workers[k]->run();
        } catch (...) {
          errs[k] = std::current_exception();
        }
      }));
    } catch (const std::system_error& e) {
      throw Error("client: cannot start thread " + std::to_string(k + 1) + " of " + std::to_string(threads) + " (" +
                  e.what() + "); lower --threads or raise the process limit (ulimit -u)");
    }
  }
  // t0 is set once every thread exists; the margin lets them wake before the first send.
  phase.t0 = Clock::now() + std::chrono::microseconds(5000);
  gate.open(StartGate::go);
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
  double cpu = 0;
  for (const Worker* w : workers) cpu += w->cpu_s();
  return cpu;
}

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

namespace {
void check_config(const BenchConfig& c) {
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
}  // namespace

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

struct BenchClient::Impl {
  const std::vector<DatasetItem>* dataset = nullptr;
  Plan plan;
  curl_slist* headers = nullptr;
  std::vector<std::unique_ptr<Worker>> workers;
  bool warmed = false;

  ~Impl() {
    workers.clear();  // before the headers their easy handles point to
    curl_slist_free_all(headers);
  }
};

BenchClient::BenchClient(const BenchConfig& c, const std::vector<DatasetItem>& dataset) : impl_(new Impl) {
  std::unique_ptr<Impl> guard(impl_);
  if (dataset.empty()) throw Error("the dataset is empty");
  check_config(c);
  global_init();
  raise_fd_limit();
  Impl& m = *impl_;
  m.dataset = &dataset;
  Plan& plan = m.plan;
  plan.items = &dataset;
  plan.url = endpoint_url(c.endpoint, c.api);
  plan.timeout_ms = static_cast<long>(std::ceil(c.timeout_s * 1000));  // 0.0004 s is 1 ms, never 0 (= none)
  plan.timeout_s = c.timeout_s;
  plan.insecure = c.insecure;
  plan.busy_poll = c.busy_poll;
  plan.api = c.api;
  plan.model = c.model;
  plan.ignore_eos = c.ignore_eos;
  plan.stop = c.stop;
  plan.grace_s = c.grace_s;
  plan.spin_ns = static_cast<std::int64_t>(std::llround(c.spin_us * 1e3));
  plan.bodies.reserve(dataset.size());
  for (const auto& it : dataset) plan.bodies.push_back(build_request_body(it, c.api, c.model, c.ignore_eos));
  m.headers = curl_slist_append(m.headers, "Content-Type: application/json");
  m.headers = curl_slist_append(m.headers, "Accept: text/event-stream");
  m.headers = curl_slist_append(m.headers, "Expect:");  // no 100-continue round trip for long prompts
  if (!c.api_key.empty()) m.headers = curl_slist_append(m.headers, ("Authorization: Bearer " + c.api_key).c_str());
  for (const auto& h : c.headers) m.headers = curl_slist_append(m.headers, h.c_str());
  plan.headers = m.headers;
  for (std::size_t k = 0; k < std::max<std::size_t>(1, c.threads); ++k) m.workers.push_back(std::make_unique<Worker>(plan));
  guard.release();
}

BenchClient::~BenchClient() { delete impl_; }

BenchResult BenchClient::run(const BenchConfig& c) {
  Impl& m = *impl_;
  const auto& dataset = *m.dataset;
  check_config(c);
  // Without --max-concurrency the limit still holds: each stream in flight is a socket and a handle.
  const std::size_t cap = c.max_concurrency ? c.max_concurrency : kMaxConcurrency;
  BenchResult res;
  res.info.ignore_eos = c.ignore_eos;
  res.info.config = config_json(c);
  res.info.think_time_s = c.think_time_s;
  const bool stopped_before = c.stop && c.stop->requested();

  // Warm-up: unmeasured, sent as a batch under the same cap, from the start of the data set, on the
  // same connections the measured phase then reuses.
  if (c.warmup && !m.warmed && !stopped_before) {
    std::vector<RequestRecord> warm(c.warmup);
    for (std::size_t i = 0; i < warm.size(); ++i) {
      warm[i].index = i;
      warm[i].dataset_index = i % dataset.size();
      warm[i].scheduled_s = 0;
      warm[i].requested_tokens = dataset[warm[i].dataset_index].output_tokens;
    }
    Phase wp;
    wp.records = &warm;
    execute(m.workers, wp, cap);
    res.info.warmup_sent = warm.size();
    for (const auto& r : warm)
      if (r.outcome != Outcome::completed) ++res.info.warmup_failed;
  }
  m.warmed = true;

  // The schedule of first requests (sessions, in multi-turn runs).
  std::vector<double> schedule;
  const std::optional<std::size_t> sessions = planned_sessions(c, dataset.size());
  if (c.mode == Mode::interactive) {
    schedule = interactive_schedule(c.rate, c.burstiness, c.seed, sessions.value_or(0), c.duration_s,
                                    RateRamp{c.ramp_from, c.ramp_s});
  } else if (c.mode == Mode::trace) {
    if (c.trace_times.size() != dataset.size()) throw Error("trace mode needs one arrival time per trace record");
    schedule.assign(c.trace_times.begin(), c.trace_times.begin() + static_cast<std::ptrdiff_t>(*sessions));
  } else {
    schedule = batch_schedule(*sessions);
  }
  if (schedule.size() * c.turns > kMaxRequests) throw Error("--requests x --turns must be at most 10000000 requests");
  std::vector<Conversation> conversations;
  if (c.turns > 1) conversations.resize(schedule.size());
  res.records.resize(schedule.size() * c.turns);
  for (std::size_t s = 0; s < schedule.size(); ++s) {
    for (std::size_t k = 0; k < c.turns; ++k) {
      const std::size_t i = s * c.turns + k;
      auto& r = res.records[i];
      r.index = i;
      r.dataset_index = (c.mode == Mode::trace ? s : i) % dataset.size();
      r.scheduled_s = k == 0 ? schedule[s] : kNaN;  // later turns: when the turn before completes
      r.requested_tokens = dataset[r.dataset_index].output_tokens;
      r.input_words = dataset[r.dataset_index].input_words;
      if (c.turns > 1) {
        r.session = s;
        r.turn = static_cast<int>(k);
        conversations[s].turns.push_back(i);
      }
    }
  }
  Phase phase;
  phase.records = &res.records;
  phase.conversations = c.turns > 1 ? &conversations : nullptr;
  phase.duration_s = c.duration_s;
  phase.cap_ramp_s = c.mode == Mode::batch ? c.ramp_s : 0;
  phase.think_s = c.think_time_s;
  phase.live = c.live;  // the warm-up is not counted
  res.info.started_at = utc_now_iso();
  res.info.client_threads = std::min(m.workers.size(), cap);
  if (!(c.stop && c.stop->requested())) {
    if (c.on_measured_start) c.on_measured_start();
    const auto wall0 = Clock::now();
    res.info.client_cpu_s = execute(m.workers, phase, cap);
    res.info.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
    if (c.on_measured_end) c.on_measured_end();
  }
  res.info.interrupted = c.stop && c.stop->requested();
  res.report = make_report(res.info, res.records);
  return res;
}

BenchResult run_bench(const BenchConfig& c, const std::vector<DatasetItem>& dataset) {
  BenchClient client(c, dataset);
  return client.run(c);
}

}  // namespace hotpath::llm
