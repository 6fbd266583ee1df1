#include "llm/server/prometheus.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_set>

#include "llm/common/text.hpp"

namespace hotpath::llm {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (x != b[i]) return false;
  }
  return true;
}

// A sample value as Go's ParseFloat reads it (Prometheus' own parser), minus hex floats and
// underscores: decimal with optional sign and exponent, or [+-]Inf/Infinity, NaN (any case).
bool parse_value(std::string_view t, double& v) {
  if (t.empty()) return false;
  bool neg = false;
  if (t[0] == '+' || t[0] == '-') {
    neg = t[0] == '-';
    t.remove_prefix(1);
  }
  if (t.empty() || t[0] == '+' || t[0] == '-') return false;
  if (iequals(t, "inf") || iequals(t, "infinity")) {
    v = neg ? -kInf : kInf;
    return true;
  }
  if (iequals(t, "nan")) {
    v = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
  if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v)) return false;
  if (neg) v = -v;
  return true;
}

std::string_view read_while(std::string_view line, std::size_t& i, bool (*pred)(char)) {
  const std::size_t b = i;
  while (i < line.size() && pred(line[i])) ++i;
  return line.substr(b, i - b);
}

bool metric_char(char c) { return is_alpha_(c) || is_digit(c) || c == ':'; }
bool label_char(char c) { return is_alpha_(c) || is_digit(c); }
bool not_blank(char c) { return !is_blank(c); }

void skip_blanks(std::string_view line, std::size_t& i) {
  while (i < line.size() && is_blank(line[i])) ++i;
}

bool known_type(std::string_view t) {
  for (const char* k : {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "gaugehistogram",
                        "stateset", "info"})
    if (t == k) return true;
  return false;
}

// Makes cumulative counts non-decreasing, as PromQL does before interpolating (a scrape taken while
// buckets were being updated, or label sets with different bounds summed, can break it).
void make_monotonic(Histogram& h) {
  double m = -kInf;
  for (auto& [le, c] : h.buckets) {
    if (c < m) c = m;
    m = c;
  }
}

nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

const std::string* PromSample::label(std::string_view key) const {
  if (!labels) return nullptr;
  for (const auto& [k, v] : *labels)
    if (k == key) return &v;
  return nullptr;
}

std::string parse_prometheus(std::string_view body, const std::function<void(const PromSample&)>& on_sample,
                             const std::function<void(std::string_view, std::string_view)>& on_type) {
  std::vector<std::pair<std::string_view, std::string>> labels;
  std::size_t pos = 0, lineno = 0;
  while (pos < body.size()) {
    std::size_t e = body.find('\n', pos);
    if (e == std::string_view::npos) e = body.size();
    std::string_view line = body.substr(pos, e - pos);
    pos = e + 1;
    ++lineno;
    const auto err = [&](const char* what) { return "line " + std::to_string(lineno) + ": " + what; };
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t i = 0;
    skip_blanks(line, i);
    if (i == line.size()) continue;
    if (line[i] == '#') {
      ++i;
      skip_blanks(line, i);
      const std::string_view word = read_while(line, i, not_blank);
      if (word != "HELP" && word != "TYPE") continue;  // any other comment, `# EOF` included
      skip_blanks(line, i);
      if (i == line.size() || !(is_alpha_(line[i]) || line[i] == ':')) return err("HELP/TYPE without a metric name");
      const std::string_view name = read_while(line, i, metric_char);
      if (i < line.size() && !is_blank(line[i])) return err("bad metric name in HELP/TYPE");
      if (word == "TYPE") {
        skip_blanks(line, i);
        const std::string_view type = read_while(line, i, not_blank);
        skip_blanks(line, i);
        if (!known_type(type) || i != line.size()) return err("TYPE is not one of counter, gauge, histogram, summary, untyped");
        if (on_type) on_type(name, type);
      }
      continue;
    }
    if (!(is_alpha_(line[i]) || line[i] == ':')) return err("expected a metric name");
    PromSample s;
    s.name = read_while(line, i, metric_char);
    const std::size_t after_name = i;
    skip_blanks(line, i);
    labels.clear();
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        skip_blanks(line, i);
        if (i == line.size()) return err("unterminated label set");
        if (line[i] == '}') {
          ++i;
          break;
        }
        if (!is_alpha_(line[i])) return err("expected a label name");
        const std::string_view lname = read_while(line, i, label_char);
        skip_blanks(line, i);
        if (i == line.size() || line[i] != '=') return err("expected '=' after a label name");
        ++i;
        skip_blanks(line, i);
        if (i == line.size() || line[i] != '"') return err("expected '\"' to open a label value");
        ++i;
        std::string v;
        for (;;) {
          if (i == line.size()) return err("unterminated label value");
          const char c = line[i++];
          if (c == '"') break;
          if (c != '\\') {
            v += c;
            continue;
          }
          if (i == line.size()) return err("unterminated label value");
          const char d = line[i++];
          if (d == '\\') v += '\\';
          else if (d == '"') v += '"';
          else if (d == 'n') v += '\n';
          else return err("invalid escape in a label value (only \\\\, \\\" and \\n)");
        }
        for (const auto& l : labels)
          if (l.first == lname) return err("duplicate label name");
        if (labels.size() >= kMaxLabelsPerSample) return err("more than 128 labels");
        labels.emplace_back(lname, std::move(v));
        skip_blanks(line, i);
        if (i == line.size()) return err("unterminated label set");
        if (line[i] == ',') {
          ++i;
          continue;
        }
        if (line[i] == '}') {
          ++i;
          break;
        }
        return err("expected ',' or '}' in a label set");
      }
      skip_blanks(line, i);
    } else if (i == line.size()) {
      return err("missing value");
    } else if (i == after_name) {
      return err("expected a blank or '{' after the metric name");
    }
    const std::string_view vtok = read_while(line, i, not_blank);
    if (vtok.empty()) return err("missing value");
    if (!parse_value(vtok, s.value)) return err("the value is not a number, +Inf, -Inf or NaN");
    skip_blanks(line, i);
    if (i < line.size() && line[i] != '#') {
      const std::string_view ts = read_while(line, i, not_blank);
      std::int64_t t = 0;
      const auto [p, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), t);
      if (ec != std::errc() || p != ts.data() + ts.size()) return err("the timestamp is not an integer");
      s.timestamp_ms = t;
      skip_blanks(line, i);
    }
    if (i < line.size() && line[i] != '#') return err("unexpected text after the value");  // '#': an exemplar
    s.labels = &labels;
    if (on_sample) on_sample(s);
  }
  return {};
}

// ---- histograms ------------------------------------------------------------------------------

bool Histogram::has_inf() const { return !buckets.empty() && buckets.back().first == kInf; }

double Histogram::total() const { return has_inf() ? buckets.back().second : 0; }

Histogram histogram_increase(const Histogram& first, const Histogram& last, bool* reset) {
  Histogram d;
  bool r = last.count < first.count;
  for (const auto& [le, c] : last.buckets) {
    double c0 = 0;
    for (const auto& [le0, cc] : first.buckets)
      if (le0 == le) c0 = cc;
    if (c < c0) r = true;
    d.buckets.emplace_back(le, c - c0);
  }
  d.count = last.count - first.count;
  d.sum = last.sum - first.sum;
  if (r) d = last;
  make_monotonic(d);
  if (reset) *reset = r;
  return d;
}

double histogram_quantile(const Histogram& h, double q, double* lo, double* hi) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (lo) *lo = nan;
  if (hi) *hi = nan;
  const auto& b = h.buckets;
  if (!h.has_inf() || b.size() < 2 || !(q >= 0 && q <= 1)) return nan;
  const double total = b.back().second;
  if (!(total > 0)) return nan;
  double rank = q * total;
  std::size_t k = 0;
  while (k < b.size() && b[k].second < rank) ++k;
  if (k >= b.size() - 1) {  // the +Inf bucket: its finite lower bound is all that is known
    if (lo) *lo = b[b.size() - 2].first;
    if (hi) *hi = kInf;
    return b[b.size() - 2].first;
  }
  if (k == 0 && b[0].first <= 0) {
    if (lo) *lo = b[0].first;
    if (hi) *hi = b[0].first;
    return b[0].first;
  }
  double start = 0, count = b[k].second;
  if (k > 0) {
    start = b[k - 1].first;
    count -= b[k - 1].second;
    rank -= b[k - 1].second;
  }
  if (lo) *lo = start;
  if (hi) *hi = b[k].first;
  if (!(count > 0)) return start;
  return start + (b[k].first - start) * (rank / count);
}

// ---- one scrape ------------------------------------------------------------------------------

std::string digest_scrape(std::string_view body, const MetricNames& names, ScrapeDigest& out) {
  out = ScrapeDigest{};
  struct Acc {
    std::map<double, double> buckets;
    double sum = 0, count = 0;
    bool any = false;
  };
  std::map<std::string, Acc> acc;
  std::unordered_set<std::string> seen;
  std::string family;  // the histogram/summary whose TYPE line came last: its samples follow it
  std::string bad;
  const auto wanted_gauge = [&](std::string_view n) {
    for (const auto* list : {&names.running, &names.waiting, &names.kv_cache})
      for (const auto& g : *list)
        if (g == n) return true;
    return false;
  };
  const auto on_type = [&](std::string_view name, std::string_view type) {
    if (type == "histogram" || type == "summary" || type == "gaugehistogram") family = name;
    else family.clear();
  };
  const auto on_sample = [&](const PromSample& s) {
    if (!bad.empty()) return;
    // The name a person would look for: a histogram's parts under the histogram's own name.
    std::string_view shown = s.name;
    if (!family.empty() && s.name.size() > family.size() && s.name.substr(0, family.size()) == family) {
      const std::string_view suf = s.name.substr(family.size());
      if (suf == "_bucket" || suf == "_sum" || suf == "_count" || suf == "_created") shown = family;
    }
    if (!out.names_truncated && !seen.count(std::string(shown))) {
      if (out.names.size() < kMaxNamesSeen) {
        out.names.emplace_back(shown);
        seen.emplace(shown);
      } else {
        out.names_truncated = true;
      }
    }
    if (wanted_gauge(s.name)) {
      out.gauges[std::string(s.name)] += s.value;
      return;
    }
    for (const auto& base : names.ttft) {
      if (s.name.size() <= base.size() || s.name.substr(0, base.size()) != base) continue;
      const std::string_view suf = s.name.substr(base.size());
      if (suf == "_bucket") {
        const std::string* le = s.label("le");
        double bound = 0;
        if (!le || !parse_value(*le, bound)) {
          bad = "a " + base + "_bucket sample without a numeric le label";
          return;
        }
        Acc& a = acc[base];
        a.buckets[bound] += s.value;
        a.any = true;
      } else if (suf == "_sum") {
        acc[base].sum += s.value;
      } else if (suf == "_count") {
        acc[base].count += s.value;
        acc[base].any = true;
      }
    }
  };
  std::string e = parse_prometheus(body, on_sample, on_type);
  if (e.empty()) e = bad;
  if (!e.empty()) return e;
  for (auto& [base, a] : acc) {
    if (!a.any) continue;
    Histogram h;
    h.buckets.assign(a.buckets.begin(), a.buckets.end());
    h.sum = a.sum;
    h.count = a.count;
    make_monotonic(h);
    out.histograms.emplace(base, std::move(h));
  }
  return {};
}

// ---- series and the recorder -----------------------------------------------------------------

void GaugeSeries::add(double t, double v) {
  if (!std::isfinite(v)) return;
  if (count == 0) min = max = v;
  min = std::min(min, v);
  max = std::max(max, v);
  sum += v;
  const std::size_t k = count++;
  if (k % stride != 0) return;
  samples.emplace_back(t, v);
  if (samples.size() > kMaxSeriesSamples) {  // keep every other one: the stride doubles
    std::size_t w = 0;
    for (std::size_t r = 0; r < samples.size(); r += 2) samples[w++] = samples[r];
    samples.resize(w);
    stride *= 2;
  }
}

nlohmann::json GaugeSeries::to_json() const {
  nlohmann::json j;
  j["metric"] = metric;
  j["count"] = count;
  j["min"] = count ? nlohmann::json(min) : nlohmann::json(nullptr);
  j["mean"] = count ? nlohmann::json(sum / static_cast<double>(count)) : nlohmann::json(nullptr);
  j["max"] = count ? nlohmann::json(max) : nlohmann::json(nullptr);
  j["stride"] = stride;
  nlohmann::json s = nlohmann::json::array();
  for (const auto& [t, v] : samples) s.push_back({std::round(t * 1e4) / 1e4, v});
  j["samples"] = std::move(s);
  return j;
}

MetricsRecorder::MetricsRecorder(std::string url, double interval_s, MetricNames names)
    : url_(std::move(url)), interval_s_(interval_s), names_(std::move(names)) {}

void MetricsRecorder::add_error(double t, const std::string& what) {
  ++failed_;
  if (first_error_.empty()) {
    char at[48];
    std::snprintf(at, sizeof at, "t=%.3f s: ", t);
    first_error_ = at + escape_bytes(what);
  }
}

void MetricsRecorder::pick(std::optional<GaugeSeries>& s, const std::vector<std::string>& cands,
                           const ScrapeDigest& d, double t) {
  if (!s) {
    for (const auto& c : cands)
      if (d.gauges.count(c)) {
        s.emplace();
        s->metric = c;
        break;
      }
    if (!s) return;
  }
  if (auto it = d.gauges.find(s->metric); it != d.gauges.end()) s->add(t, it->second);
}

void MetricsRecorder::add_body(double t, std::string_view body) {
  ScrapeDigest d;
  if (const std::string e = digest_scrape(body, names_, d); !e.empty()) {
    add_error(t, "malformed body: " + e);
    return;
  }
  const bool first = ok_ == 0;
  ++ok_;
  pick(running_, names_.running, d, t);
  pick(waiting_, names_.waiting, d, t);
  pick(kv_, names_.kv_cache, d, t);
  if (first) first_scrape_ = {t, d.histograms};
  if (ttft_metric_.empty())
    for (const auto& c : names_.ttft)
      if (d.histograms.count(c)) {
        ttft_metric_ = c;
        break;
      }
  if (!ttft_metric_.empty())
    if (auto it = d.histograms.find(ttft_metric_); it != d.histograms.end()) ttft_last_ = {t, it->second};
  for (const auto& n : d.names) {
    if (std::find(names_seen_.begin(), names_seen_.end(), n) != names_seen_.end()) continue;
    if (names_seen_.size() < kMaxNamesSeen) names_seen_.push_back(n);
    else names_truncated_ = true;
  }
  names_truncated_ = names_truncated_ || d.names_truncated;
}

nlohmann::json MetricsRecorder::to_json(const nlohmann::json& client) const {
  nlohmann::json j;
  j["url"] = url_;
  j["interval_s"] = interval_s_;
  j["scrapes_ok"] = ok_;
  j["scrapes_failed"] = failed_;
  j["first_error"] = first_error_.empty() ? nlohmann::json(nullptr) : nlohmann::json(first_error_);
  const auto series = [](const std::optional<GaugeSeries>& s) { return s ? s->to_json() : nlohmann::json(nullptr); };
  j["series"] = {{"running", series(running_)}, {"waiting", series(waiting_)}, {"kv_cache_usage", series(kv_)}};
  if (!ttft_last_) {
    j["ttft"] = nullptr;
  } else {
    // The baseline is the first successful scrape; a histogram it did not have yet counts as empty.
    Histogram base;
    if (auto it = first_scrape_->second.find(ttft_metric_); it != first_scrape_->second.end()) base = it->second;
    bool reset = false;
    const Histogram d = histogram_increase(base, ttft_last_->second, &reset);
    nlohmann::json t;
    t["metric"] = ttft_metric_;
    t["window_s"] = {std::round(first_scrape_->first * 1e4) / 1e4, std::round(ttft_last_->first * 1e4) / 1e4};
    t["reset"] = reset;
    t["server_count"] = d.total();
    nlohmann::json server, bucket, cl, diff;
    for (const auto& [key, q] : {std::pair<const char*, double>{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}) {
      double lo = 0, hi = 0;
      const double v = histogram_quantile(d, q, &lo, &hi) * 1000;
      server[key] = num_or_null(v);
      bucket[key] = std::isnan(lo) ? nlohmann::json(nullptr) : nlohmann::json{num_or_null(lo * 1000), num_or_null(hi * 1000)};
      const nlohmann::json c = client.is_object() && client.contains(key) ? client[key] : nlohmann::json(nullptr);
      cl[key] = c;
      diff[key] = c.is_number() && std::isfinite(v) ? nlohmann::json(c.get<double>() - v) : nlohmann::json(nullptr);
    }
    t["server_ms"] = server;
    t["server_bucket_ms"] = bucket;
    t["client_rt_from_send_ms"] = cl;
    t["client_count"] = client.is_object() && client.contains("count") ? client["count"] : nlohmann::json(0);
    t["client_minus_server_ms"] = diff;
    j["ttft"] = t;
  }
  j["names_seen"] = names_seen_;
  j["names_seen_truncated"] = names_truncated_;
  return j;
}

}  // namespace hotpath::llm
