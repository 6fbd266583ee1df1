#include "bench/stats.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <iomanip>

namespace hotpath::bench {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

void print_row(std::ostream& out, const std::string& what, const Summary& s) {
  out << std::left << std::setw(22) << what << std::right;
  for (double v : {s.p50, s.p90, s.p99, s.p999, s.max, s.mean}) out << std::setw(10) << fmt(v);
  out << std::setw(10) << s.count << "\n";
}

void print_header(std::ostream& out, const std::string& label) {
  out << std::left << std::setw(22) << label << std::right;
  for (const char* h : {"p50", "p90", "p99", "p99.9", "max", "mean", "count"}) out << std::setw(10) << h;
  out << "\n";
}

nlohmann::json to_json(const Summary& s) {
  return {{"count", s.count}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"p999", s.p999},
          {"max", s.max},     {"min", s.min}, {"mean", s.mean}};
}

Histogram::Histogram() : bins_(size_t(kMaxExp - kSubBits + 1) << kSubBits) {}

size_t Histogram::bin(uint64_t ns) {
  constexpr uint64_t sub = uint64_t(1) << kSubBits;
  ns = std::min(ns, (uint64_t(1) << kMaxExp) - 1);
  if (ns < sub) return size_t(ns);
  const int e = std::bit_width(ns) - 1;  // 2^e <= ns < 2^(e+1), e >= kSubBits
  const int shift = e - kSubBits;
  return size_t(e - kSubBits + 1) * sub + size_t((ns >> shift) - sub);
}

uint64_t Histogram::upper_edge_ns(size_t b) {
  constexpr uint64_t sub = uint64_t(1) << kSubBits;
  if (b < sub) return b;
  const int shift = int(b / sub) - 1;
  return ((sub + b % sub + 1) << shift) - 1;
}

void Histogram::add(double us) {
  const double ns = std::max(0.0, us * 1000.0);
  ++bins_[bin(ns >= 0x1p62 ? uint64_t(1) << 62 : uint64_t(std::ceil(ns)))];
  min_ = count_ == 0 ? us : std::min(min_, us);
  max_ = count_ == 0 ? us : std::max(max_, us);
  sum_ += us;
  ++count_;
}

void Histogram::merge(const Histogram& o) {
  if (o.count_ == 0) return;
  for (size_t b = 0; b < bins_.size(); ++b) bins_[b] += o.bins_[b];
  min_ = count_ == 0 ? o.min_ : std::min(min_, o.min_);
  max_ = count_ == 0 ? o.max_ : std::max(max_, o.max_);
  sum_ += o.sum_;
  count_ += o.count_;
}

void Histogram::clear() {
  std::fill(bins_.begin(), bins_.end(), 0);
  count_ = 0;
  min_ = max_ = sum_ = 0;
}

Summary Histogram::summary() const {
  Summary s;
  s.count = static_cast<std::size_t>(count_);
  if (count_ == 0) return s;
  auto rank = [&](double q) {
    const long long r = std::max<long long>(1, (long long)std::ceil(q * double(count_)));
    long long seen = 0;
    for (size_t b = 0; b < bins_.size(); ++b) {
      seen += (long long)bins_[b];
      if (seen >= r) return b + 1 == bins_.size() ? max_ : std::min(max_, double(upper_edge_ns(b)) / 1000.0);
    }
    return max_;
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.p999 = rank(0.999);
  s.min = min_;
  s.max = max_;
  s.mean = sum_ / double(count_);
  return s;
}

}  // namespace hotpath::bench
