#include "llm/server/server_monitor.hpp"

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <system_error>
#include <thread>

#ifdef HOTPATH_HAVE_CURL
#include <curl/curl.h>
#endif

#include "llm/common/loopback.hpp"
#include "llm/common/text.hpp"
#include "llm/report/report.hpp"
#include "llm/server/prometheus.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::llm {

namespace {

using Clock = std::chrono::steady_clock;

// The host part of an http(s) URL ("" when there is none): no user info, port or brackets.
std::string url_host(const std::string& url) {
  const std::size_t s = url.find("://");
  if (s == std::string::npos) return {};
  std::string auth = url.substr(s + 3, url.find_first_of("/?#", s + 3) - (s + 3));
  if (const std::size_t at = auth.rfind('@'); at != std::string::npos) auth.erase(0, at + 1);
  if (!auth.empty() && auth[0] == '[') return ascii_lower(auth.substr(1, auth.find(']') - 1));
  return ascii_lower(auth.substr(0, auth.find(':')));
}

// Calls `tick` every interval on its own thread until stop(); missed ticks are skipped, not
// caught up, so a slow scrape does not turn into a burst of them.
class Periodic {
 public:
  ~Periodic() { stop(); }
  void start(double interval_s, std::function<void()> tick) {
    stop_ = false;
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    thread_ = util::start_thread([this, period, tick = std::move(tick)] {
      auto next = Clock::now() + period;
      std::unique_lock<std::mutex> lock(m_);
      for (;;) {
        if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
        lock.unlock();
        tick();
        lock.lock();
        next += period;
        if (const auto now = Clock::now(); next <= now) next = now + period;
      }
    });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
};

#ifdef HOTPATH_HAVE_CURL
// One easy handle, reused so the scrapes share a keep-alive connection. GET only, no redirects,
// a body over kMaxMetricsBodyBytes is refused, and `abort` cuts a scrape short.
class Scraper {
 public:
  Scraper(const std::string& url, bool insecure, const std::atomic<bool>* abort) : abort_(abort) {
    h_ = curl_easy_init();
    if (!h_) return;
    curl_easy_setopt(h_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h_, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h_, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h_, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h_, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h_, CURLOPT_TIMEOUT_MS, kScrapeTimeoutMs);
    curl_easy_setopt(h_, CURLOPT_CONNECTTIMEOUT_MS, kScrapeConnectTimeoutMs);
    curl_easy_setopt(h_, CURLOPT_ACCEPT_ENCODING, "");  // gzip where the server offers it
    headers_ = curl_slist_append(headers_, "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1");
    curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(h_, CURLOPT_WRITEFUNCTION, &Scraper::on_write);
    curl_easy_setopt(h_, CURLOPT_WRITEDATA, this);
    curl_easy_setopt(h_, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h_, CURLOPT_XFERINFOFUNCTION, &Scraper::on_progress);
    curl_easy_setopt(h_, CURLOPT_XFERINFODATA, this);
    curl_easy_setopt(h_, CURLOPT_ERRORBUFFER, errbuf_);
    if (insecure) {
      curl_easy_setopt(h_, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(h_, CURLOPT_SSL_VERIFYHOST, 0L);
    }
  }
  ~Scraper() {
    if (h_) curl_easy_cleanup(h_);
    curl_slist_free_all(headers_);
  }
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;

  // The body, or an error message in `err`.
  bool get(std::string& body, std::string& err) {
    body_.clear();
    too_big_ = false;
    errbuf_[0] = '\0';
    if (!h_) {
      err = "libcurl could not create a handle";
      return false;
    }
    const CURLcode rc = curl_easy_perform(h_);
    if (too_big_) {
      err = "the body is over 16 MiB";
      return false;
    }
    if (rc != CURLE_OK) {
      err = std::string(curl_easy_strerror(rc)) + (errbuf_[0] ? std::string(": ") + errbuf_ : std::string());
      return false;
    }
    long status = 0;
    curl_easy_getinfo(h_, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
      err = "HTTP " + std::to_string(status);
      return false;
    }
    body.swap(body_);
    return true;
  }

 private:
  static size_t on_write(char* p, size_t size, size_t n, void* self) {
    auto* s = static_cast<Scraper*>(self);
    const size_t len = size * n;
    if (s->body_.size() + len > kMaxMetricsBodyBytes) {
      s->too_big_ = true;
      return 0;  // libcurl fails the transfer
    }
    s->body_.append(p, len);
    return len;
  }
  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    const auto* s = static_cast<Scraper*>(self);
    return s->abort_ && s->abort_->load(std::memory_order_relaxed) ? 1 : 0;
  }

  CURL* h_ = nullptr;
  curl_slist* headers_ = nullptr;
  const std::atomic<bool>* abort_;
  std::string body_;
  bool too_big_ = false;
  char errbuf_[CURL_ERROR_SIZE] = {};
};
#endif

}  // namespace

std::string auto_metrics_url(const std::string& endpoint) {
  std::string b = endpoint;
  while (!b.empty() && b.back() == '/') b.pop_back();
  if (b.size() >= 3 && b.compare(b.size() - 3, 3, "/v1") == 0) b.resize(b.size() - 3);
  return b + "/metrics";
}

bool endpoint_is_loopback(const std::string& endpoint) {
  std::string h = url_host(endpoint);
  if (h == "localhost.") h.pop_back();  // the fully qualified spelling of the same name
  return is_loopback_host(h);
}

struct ServerView::Impl {
  ServerViewOptions opt;
  std::string url;  // resolved --metrics-url ("" = no scraping)
  bool want_nvml = false;
  std::optional<NvmlMonitor> nvml;
  std::optional<MetricsRecorder> rec;
  Clock::time_point t0;
  std::atomic<bool> abort{false};
  std::mutex rec_m;  // the recorder is fed by the sampler thread and, at start and end, by the caller
  Periodic scrape_timer, nvml_timer;
#ifdef HOTPATH_HAVE_CURL
  std::optional<Scraper> scraper;
#endif

  double since_start() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  // The baseline scrape defines the measured phase's start: it is sent at t = 0 by definition, so
  // its sample's time does not depend on how long the recorder took to set up.
  void scrape(bool baseline = false) {
    if (baseline) t0 = Clock::now();
    const double t = baseline ? 0.0 : since_start();
    std::string body, err;
#ifdef HOTPATH_HAVE_CURL
    const bool ok = scraper->get(body, err);
#else
    const bool ok = false;
    err = "hotpath was built without libcurl";
#endif
    std::lock_guard<std::mutex> lock(rec_m);
    if (ok) rec->add_body(t, body);
    else rec->add_error(t, err);
  }
};

ServerView::ServerView(const ServerViewOptions& o, const std::string& endpoint) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = o;
  if (!(o.interval_s >= kMinMetricsIntervalS && o.interval_s <= kMaxMetricsIntervalS))
    throw Error("--metrics-interval must be a number in [0.05, 60] seconds");
  if (o.nvml && o.no_nvml) throw Error("--nvml and --no-nvml exclude each other");
  if (!o.metrics_url.empty()) {
    m.url = o.metrics_url == "auto" ? auto_metrics_url(endpoint) : o.metrics_url;
    bool printable = m.url.size() <= 2048;
    for (char c : m.url) printable = printable && c > ' ' && c < 127;
    const std::string lo = ascii_lower(m.url.substr(0, 8));
    if (!printable || !(lo.rfind("http://", 0) == 0 || lo.rfind("https://", 0) == 0) || url_host(m.url).empty())
      throw Error("--metrics-url must be 'auto' or an http:// or https:// URL of printable ASCII without spaces, at most "
                  "2048 bytes (got '" + escape_bytes(m.url) + "')");
#ifdef HOTPATH_HAVE_CURL
    // Reference-counted; called here, on the main thread before any transfer, as libcurl requires.
    curl_global_init(CURL_GLOBAL_DEFAULT);
    m.scraper.emplace(m.url, o.insecure, &m.abort);
#endif
  }
  m.want_nvml = !o.no_nvml && (o.nvml || endpoint_is_loopback(endpoint));
  if (m.want_nvml) m.nvml.emplace(o.nvml_library);
}

ServerView::~ServerView() {
  impl_->abort = true;
  impl_->scrape_timer.stop();
  impl_->nvml_timer.stop();
#ifdef HOTPATH_HAVE_CURL
  if (impl_->scraper) {
    impl_->scraper.reset();
    curl_global_cleanup();
  }
#endif
}

bool ServerView::active() const { return !impl_->url.empty() || impl_->want_nvml; }

void ServerView::measured_start() {
  Impl& m = *impl_;
  m.t0 = Clock::now();
  m.abort = false;
  try {
    if (!m.url.empty()) {
      m.rec.emplace(m.url, m.opt.interval_s);
      m.scrape(/*baseline=*/true);  // the baseline the server's TTFT histogram is measured from
      m.scrape_timer.start(m.opt.interval_s, [&m] { m.scrape(); });
    }
    if (m.nvml && m.nvml->available()) {
      m.nvml->reset();
      m.nvml->sample();
      m.nvml_timer.start(m.opt.interval_s, [&m] { m.nvml->sample(); });
    }
  } catch (const std::system_error& e) {
    m.abort = true;
    m.scrape_timer.stop();
    throw Error(std::string("cannot start the server monitor's thread: ") + e.what() + " (ulimit -u?)");
  }
}

void ServerView::measured_end() {
  Impl& m = *impl_;
  m.abort = true;  // cut a scrape in progress short
  m.scrape_timer.stop();
  m.nvml_timer.stop();
  m.abort = false;
  if (!m.url.empty() && m.rec) m.scrape();  // the last scrape: every measured request is in it
  if (m.nvml && m.nvml->available()) m.nvml->sample();
}

void ServerView::add_to_report(nlohmann::json& report) const {
  const Impl& m = *impl_;
  if (!active()) return;
  nlohmann::json s = nlohmann::json::object();
  if (m.rec) {
    const nlohmann::json client =
        report.contains("metrics") ? report["metrics"].value("rt_from_send_ms", nlohmann::json()) : nlohmann::json();
    s["metrics"] = m.rec->to_json(client);
  }
  if (m.nvml) s["nvml"] = m.nvml->to_json(m.opt.interval_s);
  report["server"] = std::move(s);
}

void print_server_summary(const nlohmann::json& r, std::ostream& os) {
  if (!r.contains("server") || !r["server"].is_object()) return;
  const auto& s = r["server"];
  if (s.contains("metrics")) {
    const auto& m = s["metrics"];
    os << "  server /metrics: " << m["scrapes_ok"] << " scrapes (" << m["scrapes_failed"] << " failed)";
    const auto series = [&](const char* key, const char* label, double scale, const char* unit) {
      const auto& x = m["series"][key];
      if (x.is_null()) return;
      os << "; " << label << " mean " << fixed_or_dash(x["mean"].is_number() ? nlohmann::json(x["mean"].get<double>() * scale) : x["mean"], 1)
         << unit << " max " << fixed_or_dash(x["max"].is_number() ? nlohmann::json(x["max"].get<double>() * scale) : x["max"], 1) << unit;
    };
    series("running", "running", 1, "");
    series("waiting", "waiting", 1, "");
    series("kv_cache_usage", "KV cache", 100, "%");
    const auto& t = m["ttft"];
    if (t.is_object())
      os << "; server TTFT p50/p90/p99 " << fixed_or_dash(t["server_ms"]["p50"], 1) << "/" << fixed_or_dash(t["server_ms"]["p90"], 1) << "/"
         << fixed_or_dash(t["server_ms"]["p99"], 1) << " ms vs client " << fixed_or_dash(t["client_rt_from_send_ms"]["p50"], 1) << "/"
         << fixed_or_dash(t["client_rt_from_send_ms"]["p90"], 1) << "/" << fixed_or_dash(t["client_rt_from_send_ms"]["p99"], 1) << " ms";
    if (m["series"]["running"].is_null() && m["series"]["waiting"].is_null() && m["series"]["kv_cache_usage"].is_null() &&
        t.is_null() && m["scrapes_ok"].get<std::size_t>() > 0)
      os << "; no known metric (see server.metrics.names_seen)";
    if (m["first_error"].is_string()) os << "; first error: " << m["first_error"].get<std::string>();
    os << '\n';
  }
  if (s.contains("nvml")) {
    const auto& n = s["nvml"];
    if (!n["available"].get<bool>()) {
      os << "  GPU telemetry (NVML): unavailable: " << n["reason"].get<std::string>() << '\n';
    } else {
      for (const auto& g : n["gpus"])
        os << "  GPU " << g["index"] << ' ' << g["name"].get<std::string>() << ": util mean "
           << fixed_or_dash(g["utilization_pct"]["mean"], 0) << "% max " << fixed_or_dash(g["utilization_pct"]["max"], 0)
           << "%, memory max " << fixed_or_dash(g["memory_used_mib"]["max"], 0) << " MiB, power mean " << fixed_or_dash(g["power_w"]["mean"], 0)
           << " W max " << fixed_or_dash(g["power_w"]["max"], 0) << " W, SM clock mean " << fixed_or_dash(g["sm_clock_mhz"]["mean"], 0)
           << " MHz\n";
    }
  }
}

}  // namespace hotpath::llm
