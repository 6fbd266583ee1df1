// A worker's event loop: the epoll wait, the send schedule, curl's sockets and timers, the
// watchdogs; and execute(), which runs a phase on the worker threads.
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "llm/client/interrupt.hpp"
#include "llm/client/worker.hpp"
#include "llm/common/limits.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::llm::detail {

Worker::~Worker() {
  for (auto& t : pool_) {
    if (!t->easy) continue;
    if (multi_) curl_multi_remove_handle(multi_, t->easy);  // a no-op unless a throw left it added
    curl_easy_cleanup(t->easy);
  }
  if (multi_) curl_multi_cleanup(multi_);
  if (timer_fd_ >= 0) close(timer_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

// Everything that costs time once (epoll, the multi handle, easy handles: the first
// curl_easy_init takes milliseconds) happens here, before t0, so it never delays a send.
void Worker::prepare(const Phase& phase, std::vector<std::size_t> mine, std::size_t cap) {
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

double Worker::thread_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

void Worker::run() {
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

void Worker::run_loop() {
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

// No request is sent after this; those in flight get the grace period.
void Worker::begin_stop() {
  stop_s_ = now_s();
  next_ = mine_.size();
  followups_ = {};
}

// Seconds since t0 as an absolute steady_clock time in ns, saturating at kNever.
std::int64_t Worker::at_ns(double s) const {
  const double ns = static_cast<double>(t0_ns_) + s * 1e9;
  return ns >= 9.2e18 ? kNever : static_cast<std::int64_t>(std::llround(ns));
}

// The watchdog behind curl's own timeout: a transfer still running a second after its
// --timeout is ended here as a timeout, so a run always ends within its flags. Checked once a
// second, so its cost does not grow with the event rate. After an interrupt, transfers still
// running when the grace period ends are abandoned.
void Worker::expire_overdue() {
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

// With a cap ramp the cap grows from 1 to cap_ over cap_ramp_s: the (k + 1)-th concurrent slot
// opens at k * ramp / cap (the first at 0). The one rule behind the wake-up and the send.
double Worker::slot_opens_s(std::size_t k) const {
  if (!(phase_->cap_ramp_s > 0) || !cap_) return -kInf;
  return phase_->cap_ramp_s * static_cast<double>(k) / static_cast<double>(cap_);
}

// The next request due: from the schedule or a conversation's next turn.
bool Worker::peek_due(double& due, bool& followup) const {
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
std::int64_t Worker::next_send_ns() const {
  double due = 0;
  bool followup = false;
  if (!peek_due(due, followup) || (cap_ != 0 && in_flight_ >= cap_)) return kNever;
  double s = std::max(due, slot_opens_s(in_flight_));
  if (phase_->duration_s > 0) s = std::min(s, phase_->duration_s);
  return at_ns(s);
}

// The next thing other than a send that needs the loop: curl's deadline, the end of the grace
// period, a stream still open after its `[DONE]`.
std::int64_t Worker::next_other_ns() const {
  std::int64_t w = std::min(curl_deadline_ns_, at_ns(linger_until_s_));
  if (stopped()) w = std::min(w, at_ns(stop_s_ + plan_.grace_s));
  return w;
}

// A request is complete at `[DONE]`, but its transfer runs until the server ends the body. One
// still open kDoneLingerS after `[DONE]` is ended here and counted as completed (its connection
// is closed, not reused) rather than holding its slot until --timeout.
void Worker::end_lingering() {
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

void Worker::arm(std::int64_t t) {
  if (t == armed_) return;
  itimerspec its{};
  its.it_value.tv_sec = t / 1'000'000'000;
  its.it_value.tv_nsec = t % 1'000'000'000;
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
  armed_ = t;
}

// Sends every request whose time has come and for which a slot is free.
void Worker::start_due() {
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

int Worker::socket_cb(CURL*, curl_socket_t s, int what, void* userp, void*) {
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

int Worker::timer_cb(CURLM*, long timeout_ms, void* userp) {
  auto* w = static_cast<Worker*>(userp);
  w->curl_deadline_ns_ = timeout_ms < 0 ? kNever : w->now_ns() + static_cast<std::int64_t>(timeout_ms) * 1'000'000;
  return 0;
}

namespace {

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

}  // namespace

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

}  // namespace hotpath::llm::detail
