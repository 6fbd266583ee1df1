// The measuring client's insides, shared by its parts and by nothing else: one Worker per client
// thread runs an epoll loop (worker.cpp) that sends requests (requests.cpp) and reads their event
// streams into each request's record (response.cpp); client.cpp drives the workers through execute().
#pragma once
#include <curl/curl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/client/client.hpp"
#include "llm/client/sse.hpp"
#include "llm/common/text.hpp"
#include "llm/report/report.hpp"
#include "llm/workloads/dataset.hpp"

namespace hotpath::llm::detail {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

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

// One request in flight: its easy handle (reused from request to request) and what its stream has
// delivered so far.
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
  ~Worker();

  double now_s() const { return std::chrono::duration<double>(Clock::now() - phase_->t0).count(); }
  double cpu_s() const { return cpu_s_; }
  bool stopped() const { return stop_s_ >= 0; }

  void prepare(const Phase& phase, std::vector<std::size_t> mine, std::size_t cap);
  static double thread_cpu_s();
  void run();

 private:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  static constexpr int kBackstopMs = 1000;
  // How long a body may stay open after `[DONE]`: well-behaved servers end it at once, often in
  // the same packet, and the connection is then reused.
  static constexpr double kDoneLingerS = 0.1;

  // The loop and its clock (worker.cpp).
  void run_loop();
  bool nothing_left() const { return next_ == mine_.size() && followups_.empty(); }
  void begin_stop();
  std::int64_t at_ns(double s) const;
  void expire_overdue();
  std::int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }
  double slot_opens_s(std::size_t k) const;
  bool peek_due(double& due, bool& followup) const;
  std::int64_t next_send_ns() const;
  std::int64_t next_other_ns() const;
  void end_lingering();
  void arm(std::int64_t t);
  void start_due();
  static int socket_cb(CURL*, curl_socket_t s, int what, void* userp, void*);
  static int timer_cb(CURLM*, long timeout_ms, void* userp);

  // Sending, and the end of a transfer (requests.cpp).
  Transfer* acquire();
  Transfer* create_transfer();
  static nlohmann::json turn_messages(const nlohmann::json& history, const DatasetItem& item);
  void launch(RequestRecord& rec, double slot);
  void release_slot(double t) {
    if (cap_) free_slots_.push_back(t);
  }
  void reap();
  void end_transfer(Transfer& t, CURLcode result);
  void next_turn(Transfer& t, double now);

  // Reading the stream and judging the outcome (response.cpp).
  void finish(Transfer& t, CURLcode result);
  bool on_event(Transfer& t, std::string_view data, double now);
  static size_t write_cb(char* ptr, size_t size, size_t nmemb, void* userdata);
  static int prereq_cb(void* clientp, char*, char*, int, int);

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

// Runs `phase` on the workers (worker.cpp); returns the CPU time the worker threads used.
double execute(std::vector<std::unique_ptr<Worker>>& all, Phase& phase, std::size_t cap);

// Refuses a configuration the CLI would have refused (config.cpp).
void check_config(const BenchConfig& c);

}  // namespace hotpath::llm::detail
