// Serves TickMetrics to Prometheus over HTTP (GET /metrics), through prometheus-cpp's Exposer: each
// scrape reads a snapshot of every registered TickMetrics and hands prometheus-cpp these families,
// every series labelled with the labels it was added with:
//   hotpath_tick_latency_seconds           histogram, the log-spaced buckets of tick_metrics.hpp
//   hotpath_ticks_answered_total, hotpath_ticks_late_total, hotpath_ticks_lost_total,
//   hotpath_ticks_fallback_total, hotpath_gpu_timeouts_total, hotpath_lease_renewals_total,
//   hotpath_swaps_total                    counters
//   hotpath_precompute_backlog_ticks       gauge
//   hotpath_engine_info                    gauge 1, with model_id, backend and variant as labels
// The model and backend ride on the info metric, not on every series, so that a swap does not start a
// new latency series; PromQL joins them back on (`* on(engine) group_left(model_id) hotpath_engine_info`).
// A build without prometheus-cpp (HOTPATH_METRICS=OFF, or AUTO without the package) has the same API,
// whose constructor throws UnsupportedError saying so.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "telemetry/tick_metrics.hpp"

namespace hotpath::telemetry {

// Label name -> value, e.g. {{"engine", "0"}, {"instance", "2"}}.
using Labels = std::map<std::string, std::string>;

class MetricsServer {
 public:
  // Listens on `address`, "HOST:PORT" ("127.0.0.1:9464"; port 0: one the kernel picks, see port()).
  // Throws hotpath::Error naming the address when it cannot listen there (malformed, in use, not this
  // machine's), UnsupportedError in a build without prometheus-cpp.
  explicit MetricsServer(const std::string& address);
  // Takes up to 2 s: civetweb's accept loop, under prometheus-cpp, looks for the stop every 2 s.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;         // the port it listens on
  std::string url() const;  // http://HOST:PORT/metrics

  // Reports `metrics` under `labels` on every scrape from now on, until the last owner of `metrics`
  // drops it (the server keeps a weak reference) or remove(). Throws hotpath::Error for a label name
  // Prometheus refuses or one the families use themselves (le, model_id, backend, variant), and for a
  // label set already added.
  void add(const std::shared_ptr<const TickMetrics>& metrics, Labels labels);
  void remove(const TickMetrics& metrics);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::telemetry
