// Latency distributions: every sample is kept; percentiles are nearest-rank over all of them
// (util/stats). Long runs that report per interval use Histogram instead, whose memory does not grow
// with the run.
#pragma once
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/stats.hpp"

namespace hotpath::bench {

using Summary = util::Summary;  // p95 is not reported here

using Clock = std::chrono::steady_clock;
inline double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The benches' tables: microseconds with two decimals; a header and a row per distribution
// (p50, p90, p99, p99.9, max, mean, count).
std::string fmt(double v);
void print_header(std::ostream& out, const std::string& label = "(microseconds)");
void print_row(std::ostream& out, const std::string& what, const Summary& s);

// Nearest rank; sorts a copy; an empty input gives a zero summary with count 0.
inline Summary summarize(std::vector<double> samples) {
  return util::summarize(std::move(samples), util::Percentile::nearest_rank);
}
nlohmann::json to_json(const Summary& s);

// Samples in microseconds, binned by nanoseconds: exact below 1024 ns, then 1024 bins per power of two
// (relative width 1/1024) up to 2^40 ns (~18 minutes; longer samples land in the last bin, reported as the maximum). A
// percentile is nearest-rank over the bins and reported as its bin's upper edge (never below the exact
// value, at most 0.1% above it, and at most the exact maximum); count, min, max and mean are exact.
class Histogram {
 public:
  Histogram();
  void add(double us);
  void merge(const Histogram& other);
  void clear();
  long long count() const { return count_; }
  Summary summary() const;

 private:
  static constexpr int kSubBits = 10;
  static constexpr int kMaxExp = 40;
  static size_t bin(uint64_t ns);
  static uint64_t upper_edge_ns(size_t bin);
  std::vector<uint64_t> bins_;
  long long count_ = 0;
  double min_ = 0, max_ = 0, sum_ = 0;
};

}  // namespace hotpath::bench
