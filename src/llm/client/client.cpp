#include "llm/client/client.hpp"

#include <curl/curl.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <mutex>

#include "llm/client/interrupt.hpp"
#include "llm/client/worker.hpp"
#include "llm/common/limits.hpp"
#include "llm/workloads/schedule.hpp"
#include "util/error.hpp"

namespace hotpath::llm {

using detail::check_config;
using detail::Clock;
using detail::Conversation;
using detail::execute;
using detail::Phase;
using detail::Plan;
using detail::Worker;

namespace {

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

}  // namespace

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

