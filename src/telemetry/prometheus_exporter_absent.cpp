// The exporter in a build without prometheus-cpp (HOTPATH_METRICS=OFF, or AUTO where the package is
// missing): the same API, refusing to start, so a front end can offer the flag and say what it needs.
#include "telemetry/prometheus_exporter.hpp"

#include "util/error.hpp"

namespace hotpath::telemetry {

struct MetricsServer::Impl {};

MetricsServer::MetricsServer(const std::string& address) {
  throw UnsupportedError("metrics server on " + address +
                         ": this hotpath was built without prometheus-cpp (apt install prometheus-cpp-dev)");
}

MetricsServer::~MetricsServer() = default;
int MetricsServer::port() const { return 0; }
std::string MetricsServer::url() const { return {}; }
void MetricsServer::add(const std::shared_ptr<const TickMetrics>&, Labels) {}
void MetricsServer::remove(const TickMetrics&) {}

}  // namespace hotpath::telemetry
