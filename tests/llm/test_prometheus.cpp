// The server-side view without libcurl: the Prometheus text parser (edge cases, malformed and
// random input), PromQL's histogram arithmetic, the recorder of a measured phase, serve-sim's GET
// /metrics over a raw socket, and NVML's absent path.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "llm/loopback_socket.hpp"
#include "llm/server/nvml_monitor.hpp"
#include "llm/server/prometheus.hpp"
#include "llm/server/server_monitor.hpp"
#include "llm/sim/sim_server.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

struct Got {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value;
  std::optional<std::int64_t> ts;
};

std::string parse(std::string_view body, std::vector<Got>& out, std::vector<std::pair<std::string, std::string>>* types = nullptr) {
  out.clear();
  return parse_prometheus(
      body,
      [&](const PromSample& s) {
        Got g{std::string(s.name), {}, s.value, s.timestamp_ms};
        for (const auto& [k, v] : *s.labels) g.labels.emplace_back(std::string(k), v);
        out.push_back(std::move(g));
      },
      [&](std::string_view n, std::string_view t) {
        if (types) types->emplace_back(std::string(n), std::string(t));
      });
}

TEST(LlmPrometheus, ParsesTheExpositionFormat) {
  const std::string body =
      "# HELP http_requests_total The total number of HTTP requests.\n"
      "# TYPE http_requests_total counter\n"
      "http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n"
      "http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\r\n"
      "\n"
      "   \t\n"
      "# a free comment with {braces} and \"quotes\"\n"
      "msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\",} 1.458255915e9\n"
      "metric_without_timestamp_and_labels 12.47\n"
      "something_weird{problem=\"division by zero\"} +Inf -3982045\n"
      "neg_inf -Inf\n"
      "not_a_number NaN\n"
      "empty_set{} 7\n"
      "spaced { a = \"x\" , b=\"}#,\" } 2\n"
      "vllm:num_requests_running{model_name=\"m\"} 3\n"
      "with_exemplar_bucket{le=\"0.5\"} 4 # {trace_id=\"abc\"} 0.3 1.5\n"
      "# EOF\n";
  std::vector<Got> g;
  std::vector<std::pair<std::string, std::string>> types;
  ASSERT_EQ(parse(body, g, &types), "");
  ASSERT_EQ(g.size(), 11u);
  EXPECT_EQ(types, (std::vector<std::pair<std::string, std::string>>{{"http_requests_total", "counter"}}));
  EXPECT_EQ(g[0].name, "http_requests_total");
  EXPECT_EQ(g[0].labels, (std::vector<std::pair<std::string, std::string>>{{"method", "post"}, {"code", "200"}}));
  EXPECT_EQ(g[0].value, 1027);
  EXPECT_EQ(g[0].ts, 1395066363000);
  EXPECT_EQ(g[1].value, 3);  // blanks before the value, CRLF line end
  EXPECT_EQ(g[2].labels[0].second, "C:\\DIR\\FILE.TXT");
  EXPECT_EQ(g[2].labels[1].second, "Cannot find file:\n\"FILE.TXT\"");  // trailing comma accepted
  EXPECT_DOUBLE_EQ(g[2].value, 1.458255915e9);
  EXPECT_FALSE(g[3].ts.has_value());
  EXPECT_TRUE(std::isinf(g[4].value) && g[4].value > 0);
  EXPECT_EQ(g[4].ts, -3982045);
  EXPECT_TRUE(std::isinf(g[5].value) && g[5].value < 0);
  EXPECT_TRUE(std::isnan(g[6].value));
  EXPECT_TRUE(g[7].labels.empty());
  EXPECT_EQ(g[8].labels, (std::vector<std::pair<std::string, std::string>>{{"a", "x"}, {"b", "}#,"}}));
  EXPECT_EQ(g[9].name, "vllm:num_requests_running");
  EXPECT_EQ(g[10].value, 4);  // the exemplar after '#' is ignored
  // No trailing newline, and an empty body, are fine.
  EXPECT_EQ(parse("a 1", g), "");
  EXPECT_EQ(g.size(), 1u);
  EXPECT_EQ(parse("", g), "");
  EXPECT_TRUE(g.empty());
}

TEST(LlmPrometheus, MalformedBodiesAreErrorsNamingTheLine) {
  std::string many_labels = "m{";
  for (int i = 0; i < 129; ++i) many_labels += "l" + std::to_string(i) + "=\"v\",";
  many_labels += "} 1";
  const std::vector<std::string> bad = {
      "ok 1\nm{a=\"unterminated} 1",    // a value that never closes
      "ok 1\nm{a=\"x\\q\"} 1",            // unknown escape
      "ok 1\nm{a=\"x\"}",                 // no value
      "ok 1\nm abc",                      // value not a number
      "ok 1\nm 1 12.5",                   // timestamp not an integer
      "ok 1\nm 1 2 3",                    // junk after the timestamp
      "ok 1\nm{a=x} 1",                   // unquoted label value
      "ok 1\n1m 1",                       // name starting with a digit
      "ok 1\nm{a=\"1\",a=\"2\"} 1",       // duplicate label
      "ok 1\nm{a=\"1\" 1",                // unterminated label set
      "ok 1\nm{a=\"1\" b=\"2\"} 1",       // missing comma
      "ok 1\nm{=\"1\"} 1",                // missing label name
      "ok 1\n# TYPE m bogus",             // unknown type
      "ok 1\n# TYPE",                     // TYPE without a name
      "ok 1\nm 1e999",                    // out of range
      "ok 1\nm --1",                      // double sign
      "ok 1\nm",                          // a name alone
      "ok 1\nm-1 2",                      // no blank after the name
      "ok 1\nm{a=\"x\"\n} 1",             // a raw newline inside the label set
      "ok 1\n{\"object\":\"list\"}",      // JSON, not metrics
      "ok 1\n" + many_labels,
      std::string("ok 1\nm\0 1", 10),     // NUL byte
  };
  for (const auto& b : bad) {
    std::vector<Got> g;
    const std::string e = parse(b, g);
    EXPECT_EQ(e.rfind("line 2: ", 0), 0u) << "body: " << b << " error: " << e;
  }
}

// Whatever the bytes, the parser returns (ok or an error) without crashing or reading out of bounds
// (run under the sanitizers in CI): random bytes, random bytes from the format's alphabet, and every
// prefix of a valid body.
TEST(LlmPrometheus, RandomAndTruncatedInputNeverCrashes) {
  std::mt19937_64 rng(14);
  const std::string alphabet = "ab_:{}=\",\\ \t\n#0123456789.+-eEInfNa";
  std::vector<Got> g;
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = (i % 2) ? static_cast<char>(rng() & 0xff) : alphabet[rng() % alphabet.size()];
    (void)parse(s, g);
  }
  const std::string valid =
      "# TYPE h histogram\nh_bucket{le=\"0.1\",m=\"a\\\"b\"} 1\nh_bucket{le=\"+Inf\",m=\"a\\\"b\"} 2 17\nh_count 2\n";
  for (std::size_t n = 0; n <= valid.size(); ++n) (void)parse(std::string_view(valid).substr(0, n), g);
  EXPECT_EQ(parse(valid, g), "");
  EXPECT_EQ(g.size(), 3u);
}

Histogram hist(std::vector<std::pair<double, double>> b) {
  Histogram h;
  h.buckets = std::move(b);
  h.count = h.buckets.empty() ? 0 : h.buckets.back().second;
  return h;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LlmPrometheus, HistogramQuantileFollowsPromQL) {
  const Histogram h = hist({{0.1, 10}, {0.2, 30}, {0.5, 40}, {kInf, 40}});
  double lo = 0, hi = 0;
  EXPECT_DOUBLE_EQ(histogram_quantile(h, 0.5, &lo, &hi), 0.15);  // rank 20: 10 into the 20 of (0.1, 0.2]
  EXPECT_EQ(lo, 0.1);
  EXPECT_EQ(hi, 0.2);
  EXPECT_DOUBLE_EQ(histogram_quantile(h, 0.99), 0.2 + 0.3 * 9.6 / 10);
  EXPECT_DOUBLE_EQ(histogram_quantile(h, 0.05), 0.02);  // rank 2 of the lowest bucket, which starts at 0
  // A rank in the +Inf bucket gives the highest finite bound.
  EXPECT_EQ(histogram_quantile(hist({{0.1, 10}, {kInf, 20}}), 0.9, &lo, &hi), 0.1);
  EXPECT_EQ(lo, 0.1);
  EXPECT_TRUE(std::isinf(hi));
  // A first bound <= 0 is returned as is.
  EXPECT_EQ(histogram_quantile(hist({{0, 5}, {1, 10}, {kInf, 10}}), 0.2), 0);
  // No +Inf bucket, no observations, a single bucket: NaN.
  EXPECT_TRUE(std::isnan(histogram_quantile(hist({{0.1, 1}, {0.2, 2}}), 0.5)));
  EXPECT_TRUE(std::isnan(histogram_quantile(hist({{0.1, 0}, {kInf, 0}}), 0.5)));
  EXPECT_TRUE(std::isnan(histogram_quantile(hist({{kInf, 3}}), 0.5)));
  EXPECT_TRUE(std::isnan(histogram_quantile(Histogram{}, 0.5)));
}

TEST(LlmPrometheus, HistogramIncreaseIsLastMinusFirst) {
  const Histogram first = hist({{0.1, 5}, {kInf, 8}});
  const Histogram last = hist({{0.05, 1}, {0.1, 9}, {kInf, 20}});
  bool reset = true;
  const Histogram d = histogram_increase(first, last, &reset);
  EXPECT_FALSE(reset);
  ASSERT_EQ(d.buckets.size(), 3u);
  EXPECT_EQ(d.buckets[0].second, 1);  // missing from `first`: counted from 0
  EXPECT_EQ(d.buckets[1].second, 4);
  EXPECT_EQ(d.total(), 12);
  EXPECT_EQ(d.count, 12);
  // A bucket going down is a counter reset (the server restarted): the last scrape alone counts.
  const Histogram r = histogram_increase(last, first, &reset);
  EXPECT_TRUE(reset);
  EXPECT_EQ(r.total(), 8);
}

TEST(LlmPrometheus, DigestSumsLabelSetsAndNamesWhatItSaw) {
  const std::string body =
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"a\",engine=\"0\"} 3\n"
      "vllm:num_requests_running{model_name=\"a\",engine=\"1\"} 4\n"
      "# TYPE vllm:time_to_first_token_seconds histogram\n"
      "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.1\"} 1\n"
      "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 2\n"
      "vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"0.1\"} 3\n"
      "vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"+Inf\"} 5\n"
      "vllm:time_to_first_token_seconds_sum{engine=\"0\"} 0.7\n"
      "vllm:time_to_first_token_seconds_count{engine=\"0\"} 2\n"
      "vllm:time_to_first_token_seconds_count{engine=\"1\"} 5\n"
      "process_cpu_seconds_total 12\n";
  ScrapeDigest d;
  ASSERT_EQ(digest_scrape(body, MetricNames{}, d), "");
  EXPECT_EQ(d.gauges.at("vllm:num_requests_running"), 7);
  const Histogram& h = d.histograms.at("vllm:time_to_first_token_seconds");
  ASSERT_EQ(h.buckets.size(), 2u);
  EXPECT_EQ(h.buckets[0].second, 4);
  EXPECT_EQ(h.total(), 7);
  EXPECT_EQ(h.count, 7);
  EXPECT_DOUBLE_EQ(h.sum, 0.7);
  EXPECT_EQ(d.names, (std::vector<std::string>{"vllm:num_requests_running", "vllm:time_to_first_token_seconds",
                                               "process_cpu_seconds_total"}));
  EXPECT_FALSE(d.names_truncated);
  // A bucket without a numeric le is an error; the names kept are bounded.
  EXPECT_NE(digest_scrape("vllm:time_to_first_token_seconds_bucket{le=\"x\"} 1\n", MetricNames{}, d), "");
  std::string many;
  for (int i = 0; i < 80; ++i) many += "m" + std::to_string(i) + " 1\n";
  ASSERT_EQ(digest_scrape(many, MetricNames{}, d), "");
  EXPECT_EQ(d.names.size(), kMaxNamesSeen);
  EXPECT_TRUE(d.names_truncated);
}

TEST(LlmPrometheus, GaugeSeriesKeepsBoundedSamples) {
  GaugeSeries s;
  const std::size_t n = 3 * kMaxSeriesSamples + 7;
  for (std::size_t i = 0; i < n; ++i) s.add(static_cast<double>(i), static_cast<double>(i % 10));
  s.add(1e9, std::numeric_limits<double>::quiet_NaN());  // not recorded
  EXPECT_EQ(s.count, n);
  EXPECT_LE(s.samples.size(), kMaxSeriesSamples);
  EXPECT_GE(s.samples.size(), kMaxSeriesSamples / 2);
  EXPECT_EQ(s.stride, 4u);
  for (const auto& [t, v] : s.samples) EXPECT_EQ(static_cast<std::size_t>(t) % s.stride, 0u);
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.max, 9);
}

std::string vllm_body(double running, double kv, double b1, double b2, double inf) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "vllm:num_requests_running{m=\"a\"} %g\nvllm:gpu_cache_usage_perc %g\n"
                "vllm:time_to_first_token_seconds_bucket{le=\"0.04\"} %g\n"
                "vllm:time_to_first_token_seconds_bucket{le=\"0.06\"} %g\n"
                "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %g\n"
                "vllm:time_to_first_token_seconds_count %g\n",
                running, kv, b1, b2, inf, inf);
  return buf;
}

TEST(LlmPrometheus, RecorderTurnsScrapesIntoSeriesAndServerTtft) {
  MetricsRecorder rec("http://h/metrics", 0.5);
  rec.add_body(0.0, vllm_body(0, 0.1, 2, 5, 5));  // the baseline: earlier requests are not counted
  rec.add_body(0.5, vllm_body(4, 0.3, 2, 9, 9));
  rec.add_body(0.7, "{garbage");
  rec.add_error(0.9, "HTTP 503");
  rec.add_body(1.0, vllm_body(2, 0.2, 2, 25, 25));
  EXPECT_EQ(rec.ok(), 3u);
  EXPECT_EQ(rec.failed(), 2u);
  const nlohmann::json client = {{"count", 20}, {"p50", 51.0}, {"p90", 55.0}, {"p99", 58.0}};
  const auto j = rec.to_json(client);
  EXPECT_EQ(j["first_error"], "t=0.700 s: malformed body: line 1: expected a metric name");
  const auto& run = j["series"]["running"];
  EXPECT_EQ(run["metric"], "vllm:num_requests_running");
  EXPECT_EQ(run["count"], 3);
  EXPECT_EQ(run["min"], 0);
  EXPECT_EQ(run["max"], 4);
  EXPECT_DOUBLE_EQ(run["mean"].get<double>(), 2);
  EXPECT_EQ(run["samples"], nlohmann::json::parse("[[0.0, 0.0], [0.5, 4.0], [1.0, 2.0]]"));
  EXPECT_EQ(j["series"]["kv_cache_usage"]["metric"], "vllm:gpu_cache_usage_perc");  // the older vLLM name
  EXPECT_TRUE(j["series"]["waiting"].is_null());
  const auto& t = j["ttft"];
  EXPECT_EQ(t["server_count"], 20);  // 25 - 5
  EXPECT_DOUBLE_EQ(t["server_ms"]["p50"].get<double>(), 50.0);  // all 20 in (40, 60] ms
  EXPECT_EQ(t["server_bucket_ms"]["p50"], nlohmann::json::parse("[40.0, 60.0]"));
  EXPECT_DOUBLE_EQ(t["client_minus_server_ms"]["p50"].get<double>(), 1.0);
  EXPECT_EQ(t["client_count"], 20);
  EXPECT_EQ(t["window_s"], nlohmann::json::parse("[0.0, 1.0]"));
  EXPECT_EQ(t["reset"], false);
}

TEST(LlmPrometheus, RecorderOnOtherServers) {
  {  // SGLang's names; a TTFT histogram that first appears mid-run counts from zero.
    MetricsRecorder rec("u", 1);
    rec.add_body(0, "sglang:num_running_reqs 1\nsglang:num_queue_reqs 5\nsglang:token_usage 0.5\n");
    rec.add_body(1, "sglang:num_running_reqs 3\nsglang:num_queue_reqs 1\nsglang:token_usage 0.25\n"
                    "sglang:time_to_first_token_seconds_bucket{le=\"0.1\"} 4\n"
                    "sglang:time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n");
    const auto j = rec.to_json(nlohmann::json());
    EXPECT_EQ(j["series"]["running"]["metric"], "sglang:num_running_reqs");
    EXPECT_EQ(j["series"]["waiting"]["max"], 5);
    EXPECT_EQ(j["series"]["kv_cache_usage"]["min"], 0.25);
    EXPECT_EQ(j["ttft"]["server_count"], 4);
    EXPECT_TRUE(j["ttft"]["client_rt_from_send_ms"]["p50"].is_null());
  }
  {  // TGI
    MetricsRecorder rec("u", 1);
    rec.add_body(0, "tgi_queue_size 2\ntgi_batch_current_size 8\n");
    const auto j = rec.to_json(nlohmann::json());
    EXPECT_EQ(j["series"]["running"]["max"], 8);
    EXPECT_EQ(j["series"]["waiting"]["metric"], "tgi_queue_size");
    EXPECT_TRUE(j["ttft"].is_null());
  }
  {  // an unknown server: nothing recognised, but what it exposes is named
    MetricsRecorder rec("u", 1);
    rec.add_body(0, "# TYPE my_latency histogram\nmy_latency_bucket{le=\"+Inf\"} 1\nmy_latency_count 1\nmy_queue 3\n");
    const auto j = rec.to_json(nlohmann::json());
    EXPECT_TRUE(j["series"]["running"].is_null());
    EXPECT_TRUE(j["ttft"].is_null());
    EXPECT_EQ(j["names_seen"], nlohmann::json::parse(R"(["my_latency", "my_queue"])"));
    EXPECT_EQ(j["scrapes_ok"], 1);
    EXPECT_TRUE(j["first_error"].is_null());
  }
}

TEST(LlmPrometheus, MetricsUrlAndLoopback) {
  EXPECT_EQ(auto_metrics_url("http://127.0.0.1:8000/v1"), "http://127.0.0.1:8000/metrics");
  EXPECT_EQ(auto_metrics_url("http://h:8000/v1/"), "http://h:8000/metrics");
  EXPECT_EQ(auto_metrics_url("https://h/api/v1"), "https://h/api/metrics");
  EXPECT_EQ(auto_metrics_url("http://h:8000"), "http://h:8000/metrics");
  EXPECT_EQ(auto_metrics_url("http://h:8000/v10"), "http://h:8000/v10/metrics");
  for (const char* e : {"http://127.0.0.1:8000/v1", "http://localhost/v1", "http://[::1]:80/v1", "https://127.9.9.9",
                        "http://LocalHost:1/v1"})
    EXPECT_TRUE(endpoint_is_loopback(e)) << e;
  for (const char* e : {"http://10.0.0.1:8000/v1", "http://gpu-host/v1", "http://128.0.0.1/v1", "http://[::2]/v1",
                        "http://localhost.example.com/v1", "not a url"})
    EXPECT_FALSE(endpoint_is_loopback(e)) << e;
}

TEST(LlmNvml, AbsentLibraryIsReportedNotFatal) {
  NvmlMonitor none("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(none.available());
  EXPECT_NE(none.reason().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << none.reason();
  none.reset();
  none.sample();  // a no-op, not a crash
  const auto j = none.to_json(1);
  EXPECT_EQ(j["available"], false);
  EXPECT_EQ(j["reason"], none.reason());
  EXPECT_EQ(j.size(), 2u);
  // A library that loads but is not NVML: the first missing symbol is named.
  NvmlMonitor libc("libc.so.6");
  EXPECT_FALSE(libc.available());
  EXPECT_NE(libc.reason().find("nvmlInit_v2"), std::string::npos) << libc.reason();
}

TEST(LlmNvml, ServerViewChoosesWhenToSample) {
  ServerViewOptions o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  {  // a local endpoint: NVML is tried, and its absence reported
    ServerView v(o, "http://127.0.0.1:8000/v1");
    ASSERT_TRUE(v.active());
    v.measured_start();
    v.measured_end();
    nlohmann::json r = nlohmann::json::object();
    v.add_to_report(r);
    EXPECT_EQ(r["server"]["nvml"]["available"], false);
    EXPECT_FALSE(r["server"].contains("metrics"));
  }
  {  // a remote endpoint: off unless --nvml
    ServerView v(o, "http://gpu-host:8000/v1");
    EXPECT_FALSE(v.active());
    nlohmann::json r = nlohmann::json::object();
    v.add_to_report(r);
    EXPECT_FALSE(r.contains("server"));
    o.nvml = true;
    EXPECT_TRUE(ServerView(o, "http://gpu-host:8000/v1").active());
    o.nvml = false;
  }
  o.no_nvml = true;
  EXPECT_FALSE(ServerView(o, "http://127.0.0.1:8000/v1").active());
  o.nvml = true;
  EXPECT_THROW(ServerView(o, "http://127.0.0.1:8000/v1"), Error);
  o.nvml = false;
  for (const char* u : {"ftp://h/metrics", "http://", "http://h/me trics", "metrics"}) {
    o.metrics_url = u;
    EXPECT_THROW(ServerView(o, "http://127.0.0.1:8000/v1"), Error) << u;
  }
  o.metrics_url = "auto";
  o.interval_s = 0.01;
  EXPECT_THROW(ServerView(o, "http://127.0.0.1:8000/v1"), Error);
}

// ---- serve-sim's GET /metrics over a raw socket ------------------------------------------------

std::string read_until(int fd, const std::string& until) {
  std::string got;
  char buf[4096];
  while (got.find(until) == std::string::npos) {
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    got.append(buf, static_cast<std::size_t>(r));
  }
  return got;
}

ScrapeDigest scrape_sim(std::uint16_t port) {
  const int fd = test::connect_loopback(port);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const std::string resp = read_until(fd, "\x01never");
  close(fd);
  EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << resp;
  ScrapeDigest d;
  const std::size_t body = resp.find("\r\n\r\n");
  EXPECT_EQ(digest_scrape(std::string_view(resp).substr(body == std::string::npos ? resp.size() : body + 4), MetricNames{}, d), "");
  return d;
}

TEST(LlmSimMetrics, ExposesRunningKvAndItsOwnTtft) {
  SimConfig c;
  c.ttft_ms = 30;
  c.tpot_ms = 20;
  c.kv_capacity_tokens = 100;
  SimServer s(c);
  s.start();
  {
    const ScrapeDigest idle = scrape_sim(s.port());
    EXPECT_EQ(idle.gauges.at("vllm:num_requests_running"), 0);
    EXPECT_EQ(idle.gauges.at("vllm:num_requests_waiting"), 0);
    EXPECT_EQ(idle.gauges.at("vllm:kv_cache_usage_perc"), 0);
    EXPECT_EQ(idle.histograms.at("vllm:time_to_first_token_seconds").total(), 0);
    EXPECT_TRUE(idle.histograms.at("vllm:time_to_first_token_seconds").has_inf());
  }
  const int fd = test::connect_loopback(s.port());
  const std::string body = R"({"model":"m","prompt":"one two three four","max_tokens":10,"stream":true})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  ASSERT_NE(read_until(fd, "hotpath_sim").find("hotpath_sim"), std::string::npos);  // the first token is out
  {
    const ScrapeDigest mid = scrape_sim(s.port());
    EXPECT_EQ(mid.gauges.at("vllm:num_requests_running"), 1);
    const double kv = mid.gauges.at("vllm:kv_cache_usage_perc");  // (4 prompt words + 1..10 tokens) / 100
    EXPECT_GE(kv, 0.05);
    EXPECT_LE(kv, 0.14);
    const Histogram& h = mid.histograms.at("vllm:time_to_first_token_seconds");
    EXPECT_EQ(h.total(), 1);
    double lo = 0, hi = 0;
    histogram_quantile(h, 0.5, &lo, &hi);
    EXPECT_EQ(lo, 0.02);  // 30 ms lands in vLLM's (0.02, 0.04] bucket
    EXPECT_EQ(hi, 0.04);
    EXPECT_GE(h.sum, 0.029);
  }
  read_until(fd, "[DONE]");
  close(fd);
  const ScrapeDigest after = scrape_sim(s.port());
  EXPECT_EQ(after.gauges.at("vllm:num_requests_running"), 0);
  EXPECT_EQ(after.gauges.at("vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(after.histograms.at("vllm:time_to_first_token_seconds").count, 1);
  EXPECT_EQ(s.stats().requests, 1u);  // scrapes are not completion requests
}

}  // namespace
}  // namespace hotpath::llm
