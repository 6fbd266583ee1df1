// The self-contained HTML report of a run or a sweep (`hotpath llm bench --report run.html`): one
// HTML5 file with inline CSS and inline SVG charts, no scripts, fonts, stylesheets or images from
// anywhere. Independent of libcurl, so it is tested in every build.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/report/report.hpp"

namespace hotpath::llm {

// What a large run's charts are cut down to, so a report of 10^6 requests stays a few hundred KB per run.
inline constexpr std::size_t kCdfRanks = 2000;       // evenly spaced ranks of an empirical CDF ...
inline constexpr std::size_t kCdfTail = 100;         // ... plus this many of the largest samples
inline constexpr std::size_t kScatterPoints = 4000;  // per series of the latency-over-time plot
inline constexpr std::size_t kFailureRows = 20;      // failed requests listed with their detail
inline constexpr std::size_t kDetailBytes = 300;     // of each failure's detail

struct HtmlRun {
  std::string label;                  // e.g. "rate 4 req/s"; the section heading
  nlohmann::json report;              // from make_report
  std::vector<RequestRecord> records;
};

// The whole document. `sweep` non-empty adds the frontier section (sweep_svg and its table); the
// CDFs of all runs are overlaid in one section either way.
std::string html_report(const std::string& title, const std::vector<HtmlRun>& runs,
                        const std::vector<SweepPoint>& sweep = {});
void write_html_report(const std::string& path, const std::string& title, const std::vector<HtmlRun>& runs,
                       const std::vector<SweepPoint>& sweep = {});

// "hotpath llm bench: MODEL at ENDPOINT" (escaped when it is written).
std::string report_title(const std::string& model, const std::string& endpoint);
// A run named by its config: "batch, max concurrency 32" or "interactive, 4 req/s".
std::string run_label(const nlohmann::json& report);

// The (x, F(x)) points an empirical CDF is drawn through: every sample when there are at most
// kCdfRanks + kCdfTail, else the samples at kCdfRanks evenly spaced ranks plus the kCdfTail largest
// (so the tail and the max stay exact). F = (rank + 1) / n. Non-finite samples are dropped.
std::pair<std::vector<double>, std::vector<double>> cdf_points(std::vector<double> samples);
// Indices (ascending) of a series kept for a scatter of at most `max_points`: all of them when it
// fits, else the smallest and the largest value of each of max_points / 2 runs of consecutive
// indices, so spikes survive the cut.
std::vector<std::size_t> decimate_minmax(const std::vector<double>& values, std::size_t max_points);

}  // namespace hotpath::llm
