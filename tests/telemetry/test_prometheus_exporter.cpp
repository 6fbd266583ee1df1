// The Prometheus exporter: a MetricsServer on a port the kernel picks, scraped with a plain HTTP GET
// over a socket, its body read back with the LLM harness's parser of the text format (where that library
// is built) and compared with the snapshots it was made from; the address refusals; and, in a build
// without prometheus-cpp, the one-line refusal to start.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>

#include "llm/loopback_socket.hpp"
#include "telemetry/prometheus_exporter.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_TEST_LLM_PARSER
#include "llm/server/prometheus.hpp"
#endif

namespace hotpath::telemetry {
namespace {

#ifdef HOTPATH_HAVE_PROMETHEUS

// GET /metrics from 127.0.0.1:port; the whole response, headers included ("" when refused).
std::string http_get(int port) {
  const int fd = llm::test::connect_loopback(std::uint16_t(port));
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) response.append(buf, std::size_t(n));
  close(fd);
  return response;
}

// The body of a 200 response; fails the test otherwise.
std::string scrape(const MetricsServer& server) {
  const std::string response = http_get(server.port());
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response.substr(0, 200);
  const auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

std::shared_ptr<TickMetrics> engine_metrics(int ticks, std::uint64_t scale, const char* model) {
  auto m = std::make_shared<TickMetrics>();
  for (int t = 0; t < ticks; ++t) {
    m->record_tick(scale + std::uint64_t(t % 97) * scale / 10);
    m->count_answered();
  }
  m->count_late(3);
  m->count_lost(2);
  m->count_fallback(5);
  m->count_gpu_timeout(1);
  m->count_lease_renewal(4);
  m->count_swap(1);
  m->set_precompute_backlog(6);
  m->set_info(model, "cpu", "int8");
  return m;
}

TEST(TelemetryServer, PortZeroPicksAFreePortAndServesEmptyFamilies) {
  MetricsServer server("127.0.0.1:0");
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  const std::string body = scrape(server);
  EXPECT_NE(body.find("# TYPE hotpath_tick_latency_seconds histogram"), std::string::npos) << body;
  EXPECT_EQ(body.find("hotpath_tick_latency_seconds_bucket"), std::string::npos) << "no engine, no series";
}

#ifdef HOTPATH_TEST_LLM_PARSER
// Every series of one engine (by its `engine` label) in a scraped body.
struct Scraped {
  llm::Histogram latency;
  std::map<std::string, double> values;  // counters and gauges by name
  std::map<std::string, std::string> info;
  std::map<std::string, std::string> types;
};

Scraped read_engine(const std::string& body, const std::string& engine) {
  Scraped out;
  const std::string error = llm::parse_prometheus(
      body,
      [&](const llm::PromSample& s) {
        const std::string* e = s.label("engine");
        if (!e || *e != engine) return;
        const std::string name(s.name);
        if (name == "hotpath_tick_latency_seconds_bucket") {
          out.latency.buckets.emplace_back(std::stod(*s.label("le")), s.value);
        } else if (name == "hotpath_tick_latency_seconds_sum") {
          out.latency.sum = s.value;
        } else if (name == "hotpath_tick_latency_seconds_count") {
          out.latency.count = s.value;
        } else {
          out.values[name] = s.value;
          if (name == "hotpath_engine_info")
            for (const auto& [k, v] : *s.labels) out.info[std::string(k)] = v;
        }
      },
      [&](std::string_view name, std::string_view type) { out.types[std::string(name)] = std::string(type); });
  EXPECT_EQ(error, "");
  return out;
}

TEST(TelemetryServer, ScrapeMatchesTheSnapshotsOfTwoEngines) {
  MetricsServer server("127.0.0.1:0");
  const auto fast = engine_metrics(10'000, 3'000, "lstm_s");      // 3 .. 32 us
  const auto slow = engine_metrics(5'000, 2'000'000, "lstm_l");   // 2 .. 21 ms
  server.add(fast, {{"engine", "0"}, {"instance", "0"}});
  server.add(slow, {{"engine", "1"}, {"instance", "0"}});
  const std::string body = scrape(server);
  for (const auto& [metrics, engine] : {std::pair{fast, "0"}, std::pair{slow, "1"}}) {
    SCOPED_TRACE(std::string("engine ") + engine);
    const Snapshot snap = metrics->snapshot();  // nothing records during the scrape: the same counts
    const Scraped got = read_engine(body, engine);
    ASSERT_EQ(got.latency.buckets.size(), std::size_t(kBuckets)) << "the finite buckets and +Inf";
    for (int i = 0; i < kBuckets; ++i) {
      const double le = got.latency.buckets[i].first;
      if (i == kFiniteBuckets) {
        EXPECT_TRUE(std::isinf(le));
      } else {
        EXPECT_NEAR(le, kBucketUpperNs[i] * 1e-9, kBucketUpperNs[i] * 1e-9 * 1e-12) << i;
      }
      EXPECT_EQ(got.latency.buckets[i].second, double(snap.cumulative[i])) << i;
    }
    EXPECT_EQ(got.latency.count, double(snap.count));
    EXPECT_NEAR(got.latency.sum, double(snap.sum_ns) * 1e-9, 1e-9);
    // PromQL's p99 of the scraped buckets (the LLM harness's implementation) is quantile()'s.
    for (const double q : {0.5, 0.9, 0.99}) {
      EXPECT_NEAR(llm::histogram_quantile(got.latency, q) * 1e9, quantile(snap, q), quantile(snap, q) * 1e-9) << q;
    }
    EXPECT_EQ(got.values.at("hotpath_ticks_answered_total"), double(snap.answered));
    EXPECT_EQ(got.values.at("hotpath_ticks_late_total"), 3);
    EXPECT_EQ(got.values.at("hotpath_ticks_lost_total"), 2);
    EXPECT_EQ(got.values.at("hotpath_ticks_fallback_total"), 5);
    EXPECT_EQ(got.values.at("hotpath_gpu_timeouts_total"), 1);
    EXPECT_EQ(got.values.at("hotpath_lease_renewals_total"), 4);
    EXPECT_EQ(got.values.at("hotpath_swaps_total"), 1);
    EXPECT_EQ(got.values.at("hotpath_precompute_backlog_ticks"), 6);
    EXPECT_EQ(got.values.at("hotpath_engine_info"), 1);
    EXPECT_EQ(got.info.at("model_id"), snap.model_id);
    EXPECT_EQ(got.info.at("backend"), "cpu");
    EXPECT_EQ(got.info.at("variant"), "int8");
    EXPECT_EQ(got.info.at("instance"), "0");
    EXPECT_EQ(got.types.at("hotpath_tick_latency_seconds"), "histogram");
    EXPECT_EQ(got.types.at("hotpath_ticks_answered_total"), "counter");
    EXPECT_EQ(got.types.at("hotpath_precompute_backlog_ticks"), "gauge");
  }
}

TEST(TelemetryServer, AnEngineGoneOrRemovedLeavesTheScrape) {
  MetricsServer server("127.0.0.1:0");
  auto a = engine_metrics(10, 5'000, "a");
  auto b = engine_metrics(10, 5'000, "b");
  const auto c = engine_metrics(10, 5'000, "c");
  server.add(a, {{"engine", "a"}});
  server.add(b, {{"engine", "b"}});
  server.add(c, {{"engine", "c"}});
  a.reset();             // its last owner let go
  server.remove(*b);
  const std::string body = scrape(server);
  EXPECT_TRUE(read_engine(body, "a").values.empty());
  EXPECT_TRUE(read_engine(body, "b").values.empty());
  EXPECT_EQ(read_engine(body, "c").latency.count, 10);
  server.add(b, {{"engine", "a"}});  // the labels of one gone are free again
}
#else
TEST(TelemetryServer, ScrapeHasTheSeries) {
  MetricsServer server("127.0.0.1:0");
  const auto m = engine_metrics(100, 5'000, "lstm_s");
  server.add(m, {{"engine", "0"}});
  const std::string body = scrape(server);
  EXPECT_NE(body.find("hotpath_tick_latency_seconds_count{engine=\"0\"} 100"), std::string::npos) << body;
  EXPECT_NE(body.find("hotpath_ticks_answered_total{engine=\"0\"} 100"), std::string::npos) << body;
}
#endif

TEST(TelemetryServer, LabelsItRefuses) {
  MetricsServer server("127.0.0.1:0");
  const auto m = std::make_shared<TickMetrics>();
  EXPECT_THROW(server.add(m, {{"0engine", "0"}}), Error);
  EXPECT_THROW(server.add(m, {{"__name__", "x"}}), Error);
  EXPECT_THROW(server.add(m, {{"le", "1"}}), Error);
  EXPECT_THROW(server.add(m, {{"model_id", "x"}}), Error);
  EXPECT_THROW(server.add(nullptr, {{"engine", "0"}}), Error);
  server.add(m, {{"engine", "0"}});
  EXPECT_THROW(server.add(m, {{"engine", "1"}}), Error) << "the same metrics twice";
  EXPECT_THROW(server.add(std::make_shared<TickMetrics>(), {{"engine", "0"}}), Error) << "the same labels twice";
}

void expect_one_line_error(const std::string& address, const std::string& says) {
  try {
    MetricsServer server(address);
    ADD_FAILURE() << address << ": listening, expected a refusal";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find(address), std::string::npos) << "names the address: " << what;
    EXPECT_NE(what.find(says), std::string::npos) << what;
  }
}

TEST(TelemetryServer, ASecondServerOnTheSamePortFailsInOneLine) {
  MetricsServer first("127.0.0.1:0");
  expect_one_line_error("127.0.0.1:" + std::to_string(first.port()), "in use");
  EXPECT_FALSE(scrape(first).empty()) << "the first still serves";
}

TEST(TelemetryServer, MalformedAddressesAreRefused) {
  expect_one_line_error("127.0.0.1", "not HOST:PORT");
  expect_one_line_error("127.0.0.1:65536", "not HOST:PORT");
  expect_one_line_error("127.0.0.1:http", "not HOST:PORT");
  expect_one_line_error("192.0.2.1:0", "cannot listen");  // TEST-NET-1: no interface of this machine
  expect_one_line_error("999.1.1.1:0", "not an IPv4 address");  // civetweb alone would listen on 231.1.1.1
}

#else  // built without prometheus-cpp

TEST(TelemetryServer, RefusesToStartSayingWhatIsMissing) {
  try {
    MetricsServer server("127.0.0.1:0");
    ADD_FAILURE() << "started without prometheus-cpp";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("built without prometheus-cpp (apt install prometheus-cpp-dev)"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

#endif

}  // namespace
}  // namespace hotpath::telemetry
