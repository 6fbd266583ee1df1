// The exporter over prometheus-cpp (built with HOTPATH_HAVE_PROMETHEUS; prometheus_exporter_absent.cpp
// otherwise): the library serves HTTP and writes the text format, this file only turns snapshots into
// its MetricFamily values.
#include "telemetry/prometheus_exporter.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "util/error.hpp"

namespace hotpath::telemetry {
namespace {

struct HostPort {
  std::string host;  // as written, brackets of an IPv6 address included
  int port = -1;
};

// "HOST:PORT" with a port in 0..65535; port -1 when malformed.
HostPort split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return {};
  HostPort hp{address.substr(0, colon), -1};
  int port = 0;
  const char* end = address.data() + address.size();
  const auto [p, ec] = std::from_chars(address.data() + colon + 1, end, port);
  if (ec == std::errc() && p == end && port >= 0 && port <= 65535) hp.port = port;
  return hp;
}

std::string unbracketed(const std::string& host) {
  return host.size() >= 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
}

// Why `host` is no address to listen on; empty when it is one. civetweb reads a dotted address with
// sscanf and keeps each part mod 256 (999.1.1.1 listened on 231.1.1.1): the kernel's parser decides here.
std::string not_an_address(const std::string& host) {
  if (host.find_first_not_of("0123456789.") == std::string::npos) {
    in_addr a{};
    return inet_pton(AF_INET, host.c_str(), &a) == 1 ? "" : "not an IPv4 address";
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(unbracketed(host).c_str(), nullptr, &hints, &found);
  if (found) freeaddrinfo(found);
  return rc == 0 ? "" : gai_strerror(rc);
}

// Why `host:port` cannot be listened on, asked of the kernel the way civetweb binds (SO_REUSEADDR), since
// prometheus-cpp reports every failure alike. Empty when this bind works (the failure was elsewhere).
std::string why_cannot_listen(const HostPort& hp) {
  const std::string host = unbracketed(hp.host);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(hp.port).c_str(), &hints, &found); rc != 0)
    return gai_strerror(rc);
  std::string why;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int on = 1;
  if (fd < 0) {
    why = std::strerror(errno);
  } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
             bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 1) != 0) {
    why = std::strerror(errno);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return why;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.starts_with("__") || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string describe(const Labels& labels) {
  std::string s = "{";
  for (const auto& [k, v] : labels) s += (s.size() > 1 ? "," : "") + k + "=\"" + v + "\"";
  return s + "}";
}

struct Entry {
  std::weak_ptr<const TickMetrics> metrics;
  const TickMetrics* key;  // identifies it for remove() once the weak reference has expired
  Labels labels;
};

// What the Exposer calls on each scrape (on its own threads).
class Collector : public prometheus::Collectable {
 public:
  void add(const std::shared_ptr<const TickMetrics>& metrics, Labels labels) {
    if (!metrics) throw Error("metrics server: add() was given no TickMetrics");
    for (const auto& [name, value] : labels) {
      if (!valid_label_name(name))
        throw Error("metrics server: '" + name + "' is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)");
      if (name == "le" || name == "model_id" || name == "backend" || name == "variant")
        throw Error("metrics server: the label '" + name + "' is the exporter's own (le: the histogram's buckets; "
                    "model_id, backend, variant: hotpath_engine_info)");
    }
    std::lock_guard lock(mutex_);
    drop_expired();
    for (const auto& e : entries_) {
      if (e.key == metrics.get()) throw Error("metrics server: this TickMetrics is already served, as " + describe(e.labels));
      if (e.labels == labels) throw Error("metrics server: the labels " + describe(labels) + " are already served");
    }
    entries_.push_back({metrics, metrics.get(), std::move(labels)});
  }

  void remove(const TickMetrics& metrics) {
    std::lock_guard lock(mutex_);
    std::erase_if(entries_, [&](const Entry& e) { return e.key == &metrics; });
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> families = {
        {"hotpath_tick_latency_seconds", "Tick latency: from the tick due to its answer visible", MetricType::Histogram, {}},
        {"hotpath_ticks_answered_total", "Ticks answered", MetricType::Counter, {}},
        {"hotpath_ticks_late_total", "Ticks answered past their deadline", MetricType::Counter, {}},
        {"hotpath_ticks_lost_total", "Ticks never answered", MetricType::Counter, {}},
        {"hotpath_ticks_fallback_total", "Ticks answered by the fallback backend", MetricType::Counter, {}},
        {"hotpath_gpu_timeouts_total", "GPU answers or precomputes past their deadline", MetricType::Counter, {}},
        {"hotpath_lease_renewals_total", "Renewals of the GPU kernel's lease", MetricType::Counter, {}},
        {"hotpath_swaps_total", "Model swaps", MetricType::Counter, {}},
        {"hotpath_precompute_backlog_ticks", "Ticks whose precompute is not done yet", MetricType::Gauge, {}},
        {"hotpath_engine_info", "The model and backend serving (value 1)", MetricType::Gauge, {}},
    };
    std::lock_guard lock(mutex_);
    for (const auto& e : entries_) {
      const auto metrics = e.metrics.lock();
      if (!metrics) continue;  // its engine has gone: its series stop
      const Snapshot s = metrics->snapshot();
      std::vector<prometheus::ClientMetric::Label> labels;
      for (const auto& [k, v] : e.labels) labels.push_back({k, v});

      prometheus::ClientMetric h;
      h.label = labels;
      h.histogram.sample_count = s.count;
      h.histogram.sample_sum = double(s.sum_ns) / 1e9;  // ns / 1e9: the le values print as the decimals they are
      // The finite buckets; prometheus-cpp writes the +Inf one (sample_count) itself.
      for (int i = 0; i < kFiniteBuckets; ++i) h.histogram.bucket.push_back({s.cumulative[i], kBucketUpperNs[i] / 1e9});
      families[0].metric.push_back(std::move(h));

      const std::uint64_t counts[] = {s.answered, s.late, s.lost, s.fallback, s.gpu_timeouts, s.lease_renewals, s.swaps};
      for (std::size_t i = 0; i < std::size(counts); ++i) {
        prometheus::ClientMetric c;
        c.label = labels;
        c.counter.value = double(counts[i]);
        families[1 + i].metric.push_back(std::move(c));
      }
      prometheus::ClientMetric backlog;
      backlog.label = labels;
      backlog.gauge.value = double(s.precompute_backlog);
      families[8].metric.push_back(std::move(backlog));

      prometheus::ClientMetric info;
      info.label = labels;
      info.label.push_back({"model_id", s.model_id});
      info.label.push_back({"backend", s.backend});
      info.label.push_back({"variant", s.variant});
      std::sort(info.label.begin(), info.label.end());
      info.gauge.value = 1;
      families[9].metric.push_back(std::move(info));
    }
    return families;
  }

 private:
  void drop_expired() {
    std::erase_if(entries_, [](const Entry& e) { return e.metrics.expired(); });
  }
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace

struct MetricsServer::Impl {
  HostPort address;
  int port = 0;
  std::shared_ptr<Collector> collector = std::make_shared<Collector>();
  std::unique_ptr<prometheus::Exposer> exposer;  // destroyed first: no scrape outlives the collector
  ~Impl() { exposer.reset(); }
};

MetricsServer::MetricsServer(const std::string& address) : impl_(std::make_unique<Impl>()) {
  impl_->address = split_address(address);
  if (impl_->address.port < 0)
    throw Error("metrics server: '" + address + "' is not HOST:PORT (e.g. 127.0.0.1:9464; port 0 picks a free one)");
  if (const std::string why = not_an_address(impl_->address.host); !why.empty())
    throw Error("metrics server: cannot listen on " + address + ": " + why);
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(address, 1);  // one thread: scrapes are rare
  } catch (const std::exception&) {
    const std::string why = why_cannot_listen(impl_->address);
    // The kernel would bind it: prometheus-cpp's server (civetweb) refused it, as it does IPv6 here.
    throw Error("metrics server: cannot listen on " + address +
                (why.empty() ? " (prometheus-cpp's server refused it; an IPv4 address works)" : ": " + why));
  }
  const auto ports = impl_->exposer->GetListeningPorts();
  if (ports.empty() || ports[0] <= 0) throw Error("metrics server: listening on " + address + " but no port was reported");
  impl_->port = ports[0];
  impl_->exposer->RegisterCollectable(impl_->collector);
}

MetricsServer::~MetricsServer() = default;

int MetricsServer::port() const { return impl_->port; }

std::string MetricsServer::url() const {
  return "http://" + impl_->address.host + ":" + std::to_string(impl_->port) + "/metrics";
}

void MetricsServer::add(const std::shared_ptr<const TickMetrics>& metrics, Labels labels) {
  impl_->collector->add(metrics, std::move(labels));
}

void MetricsServer::remove(const TickMetrics& metrics) { impl_->collector->remove(metrics); }

}  // namespace hotpath::telemetry
