#include "llm/report/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "llm/common/text.hpp"
#include "llm/report/svg.hpp"

namespace hotpath::llm {

namespace {
using nlohmann::json;
using svg::escape;

bool ok(double v) { return std::isfinite(v); }

// A number of the report JSON as the tables print it; "-" for null or absent.
std::string cell(const json& v, int prec) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) return fixed(v.get<double>(), prec);
  return "-";
}
const json& at(const json& j, const char* key) {
  static const json null_json;
  return j.is_object() && j.contains(key) ? j[key] : null_json;
}
std::string json_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Rows of the metrics table: the console summary's, with both RTs named.
const std::pair<const char*, const char*> kMetricRows[] = {
    {"rt_ms", "RT from schedule (ms)"}, {"rt_from_send_ms", "RT from send (ms)"}, {"e2e_ms", "E2E (ms)"},
    {"iwl_ms", "IWL (ms)"},           {"wps_per_user", "words/s/user"},       {"tpot_ms", "TPOT (ms)"},
    {"slot_wait_ms", "slot wait (ms)"}, {"send_lag_ms", "send lag (ms)"}};

constexpr const char* kCss =
    "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;color:#222;max-width:1120px;margin:1.5em auto;"
    "padding:0 1em}\n"
    "h1{font-size:1.4em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}"
    "h3{font-size:1em}\n"
    "table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}\n"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;vertical-align:top}\n"
    "th{background:#f4f4f4}.t{text-align:left}\n"
    "td.detail{text-align:left;font-family:monospace;max-width:640px;overflow-wrap:anywhere}\n"
    ".charts{display:flex;flex-wrap:wrap;gap:10px}\n"
    "svg{max-width:100%;height:auto}\n"
    ".note{color:#555;font-size:.85em}\n"
    ".sw{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:-.1em}\n";

struct Series {
  std::vector<double> rt, e2e, iwl;                 // completed requests, as make_report takes them
  std::vector<double> t_rt, v_rt, t_e2e, v_e2e;     // by send time
  std::vector<double> t_failed;
};

Series collect(const std::vector<RequestRecord>& records) {
  Series s;
  struct P {
    double t, v;
  };
  std::vector<P> rt, e2e;
  for (const auto& r : records) {
    if (r.outcome == Outcome::failed) {
      if (ok(r.sent_s)) s.t_failed.push_back(r.sent_s);
      continue;
    }
    if (r.outcome != Outcome::completed) continue;
    const RequestMetrics d = request_metrics(r);
    if (ok(d.rt_ms)) {
      s.rt.push_back(d.rt_ms);
      if (ok(r.sent_s)) rt.push_back({r.sent_s, d.rt_ms});
    }
    if (ok(d.e2e_ms)) {
      s.e2e.push_back(d.e2e_ms);
      if (ok(r.sent_s)) e2e.push_back({r.sent_s, d.e2e_ms});
    }
    if (ok(d.iwl_ms)) s.iwl.push_back(d.iwl_ms);
  }
  const auto by_time = [](const P& a, const P& b) { return a.t < b.t; };
  std::stable_sort(rt.begin(), rt.end(), by_time);
  std::stable_sort(e2e.begin(), e2e.end(), by_time);
  for (const auto& p : rt) s.t_rt.push_back(p.t), s.v_rt.push_back(p.v);
  for (const auto& p : e2e) s.t_e2e.push_back(p.t), s.v_e2e.push_back(p.v);
  return s;
}

void minmax(const std::vector<double>& v, double& lo, double& hi) {
  for (double x : v)
    if (ok(x)) lo = std::min(lo, x), hi = std::max(hi, x);
}

// One CDF chart of a metric, one step line per run.
std::string cdf_chart(const std::string& name, const std::string& unit, const std::vector<const std::vector<double>*>& data) {
  constexpr double W = 360, H = 300;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* d : data) minmax(*d, lo, hi);
  std::string s = svg::open(W, H);
  s += svg::text(W / 2, 18, name + " CDF", 13);
  const bool any = lo <= hi;
  const svg::Chart chart({62, 30, 278, 212}, svg::auto_axis(any ? lo : 0, any ? hi : 1, name + " (" + unit + ")"),
                         svg::linear_axis(0, 1, "fraction of requests <= x"));
  chart.axes(s);
  for (const auto& [q, l] : {std::pair{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}}) chart.hline(s, q, l);
  if (!any) s += svg::text(62 + 139, 30 + 106, "no samples", 12, "middle", "#777");
  for (std::size_t i = 0; i < data.size(); ++i) {
    auto [x, f] = cdf_points(*data[i]);
    if (x.empty()) continue;
    x.insert(x.begin(), x.front());
    f.insert(f.begin(), 0.0);
    chart.steps(s, x, f, svg::color(i));
  }
  return s + "</svg>\n";
}

// RT and E2E of each completed request against its send time; failures as a rug at the bottom.
std::string time_chart(const Series& s, std::string& note) {
  constexpr double W = 1000, H = 360;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, tlo = 0, thi = 0;
  minmax(s.v_rt, lo, hi);
  minmax(s.v_e2e, lo, hi);
  minmax(s.t_rt, tlo, thi);
  minmax(s.t_e2e, tlo, thi);
  minmax(s.t_failed, tlo, thi);
  const bool any = lo <= hi;
  std::string o = svg::open(W, H);
  o += svg::text(W / 2, 18, "latency of each request over the run", 13);
  const svg::Chart chart({70, 30, 720, 270}, svg::linear_axis(0, thi > 0 ? thi : 1, "send time (s since the run's start)"),
                         svg::auto_axis(any ? lo : 0, any ? hi : 1, "latency (ms)", true));
  chart.axes(o);
  std::size_t drawn = 0, total = 0;
  const auto series = [&](const std::vector<double>& t, const std::vector<double>& v, const char* color) {
    const auto keep = decimate_minmax(v, kScatterPoints);
    std::vector<double> x, y;
    for (std::size_t i : keep) x.push_back(t[i]), y.push_back(v[i]);
    chart.dots(o, x, y, color);
    drawn += keep.size();
    total += v.size();
  };
  series(s.t_e2e, s.v_e2e, svg::color(3));
  series(s.t_rt, s.v_rt, svg::color(0));
  std::vector<double> fail;
  const std::size_t fstep = std::max<std::size_t>(1, s.t_failed.size() / kScatterPoints + (s.t_failed.size() % kScatterPoints != 0));
  for (std::size_t i = 0; i < s.t_failed.size(); i += fstep) fail.push_back(s.t_failed[i]);
  chart.rug(o, fail, svg::color(1));
  svg::legend(o, 806, 50,
              {{"RT from schedule (" + std::to_string(s.v_rt.size()) + ")", svg::color(0)},
               {"E2E (" + std::to_string(s.v_e2e.size()) + ")", svg::color(3)},
               {"failed, at send (" + std::to_string(s.t_failed.size()) + ")", svg::color(1)}});
  if (drawn < total || fail.size() < s.t_failed.size())
    note = "Drawn: " + std::to_string(drawn) + " of " + std::to_string(total) +
           " points (in send order, the smallest and largest latency of each of " + std::to_string(kScatterPoints / 2) +
           " runs of consecutive requests per series), " + std::to_string(fail.size()) + " of " +
           std::to_string(s.t_failed.size()) + " failures.";
  return o + "</svg>\n";
}

void row(std::string& o, const std::string& key, const std::string& name, const std::string& value) {
  o += "<tr data-key=\"" + escape(key) + "\"><th class=\"t\">" + escape(name) + "</th><td>" + escape(value) + "</td></tr>\n";
}

void run_section(std::string& o, const HtmlRun& run, std::size_t index) {
  const json& r = run.report;
  o += "<section id=\"run-" + std::to_string(index) + "\">\n<h2>" + escape(run.label) + "</h2>\n";
  // Summary: the console's numbers.
  o += "<h3>Summary</h3>\n<table class=\"summary\">\n";
  row(o, "requests", "requests scheduled", cell(at(r, "requests"), 0));
  row(o, "sent", "sent", cell(at(r, "sent"), 0));
  row(o, "completed", "completed", cell(at(r, "completed"), 0));
  row(o, "failed", "failed", cell(at(r, "failed"), 0));
  for (const auto& [k, v] : at(r, "failures").items())
    if (v.is_number() && v.get<double>() > 0) row(o, "failures." + k, "  failed: " + k, cell(v, 0));
  row(o, "not_sent", "not sent (duration)", cell(at(r, "not_sent"), 0));
  if (at(r, "interrupted").is_boolean()) row(o, "interrupted", "interrupted", at(r, "interrupted").get<bool>() ? "yes" : "no");
  row(o, "rps", "requests/s", cell(at(r, "rps"), 3));
  row(o, "wps_total", "total words/s", cell(at(r, "wps_total"), 3));
  row(o, "output_tokens_per_s", "output tokens/s", cell(at(r, "output_tokens_per_s"), 3));
  row(o, "words_total", "words", cell(at(r, "words_total"), 0));
  row(o, "interval_s", "interval (s)", cell(at(r, "interval_s"), 3));
  row(o, "wall_s", "wall (s)", cell(at(r, "wall_s"), 3));
  const json& w = at(r, "warmup");
  row(o, "warmup.sent", "warm-up sent", cell(at(w, "sent"), 0));
  row(o, "warmup.failed", "warm-up failed", cell(at(w, "failed"), 0));
  const json& ol = at(r, "output_length");
  if (ol.is_object())
    row(o, "output_length", "output length",
        "requested " + cell(at(ol, "requested_tokens_total"), 0) + " tokens, delivered " +
            cell(at(ol, "delivered_tokens_total"), 0) + " (" + cell(at(ol, "matched"), 0) + " matched, " +
            cell(at(ol, "short"), 0) + " short, " + cell(at(ol, "long"), 0) + " long, " +
            cell(at(ol, "without_usage"), 0) + " without usage)");
  if (at(r, "wps_excluded").is_number())
    row(o, "wps_excluded", "completed with < 2 word stamps (no WPS/IWL)", cell(at(r, "wps_excluded"), 0));
  const json& c = at(r, "client");
  if (c.is_object()) {
    row(o, "client.cpu_utilization", "client CPU busy (fraction)", cell(at(c, "cpu_utilization"), 3));
    if (at(c, "saturated").is_boolean() && at(c, "saturated").get<bool>())
      row(o, "client.saturated", "client saturated", "yes: its own queueing may be in the latencies");
  }
  const json& ho = at(r, "harness_overhead_us");
  if (ho.is_object())
    row(o, "harness_overhead_us", "harness overhead (us, p50 / p99)", cell(at(ho, "p50"), 1) + " / " + cell(at(ho, "p99"), 1));
  o += "</table>\n";

  o += "<table class=\"metrics\">\n<tr><th class=\"t\">latency</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th>"
       "<th>max</th><th>mean</th><th>n</th></tr>\n";
  for (const auto& [key, name] : kMetricRows) {
    const json& m = at(at(r, "metrics"), key);
    o += "<tr data-metric=\"" + std::string(key) + "\"><th class=\"t\">" + name + "</th>";
    for (const char* q : {"p50", "p90", "p95", "p99", "max", "mean"})
      o += "<td data-q=\"" + std::string(q) + "\">" + cell(at(m, q), 3) + "</td>";
    o += "<td data-q=\"count\">" + cell(at(m, "count"), 0) + "</td></tr>\n";
  }
  o += "</table>\n";

  // Failed requests with what the server said (escaped: it is server text).
  std::size_t listed = 0, failed = 0;
  std::string rows;
  for (const auto& rec : run.records) {
    if (rec.outcome != Outcome::failed) continue;
    ++failed;
    if (listed == kFailureRows) continue;
    ++listed;
    const std::string detail = rec.detail.size() > kDetailBytes ? rec.detail.substr(0, kDetailBytes) + "..." : rec.detail;
    rows += "<tr><td>" + std::to_string(rec.index) + "</td><td class=\"t\">" + escape(rec.reason) + "</td><td>" +
            std::to_string(rec.http_status) + "</td><td class=\"detail\">" + escape(detail) + "</td></tr>\n";
  }
  if (failed) {
    o += "<h3>Failed requests</h3>\n<p class=\"note\">The first " + std::to_string(listed) + " of " +
         std::to_string(failed) + " (the per-request CSV has all of them).</p>\n";
    o += "<table class=\"failures\">\n<tr><th>index</th><th class=\"t\">reason</th><th>HTTP</th><th class=\"t\">detail</th></tr>\n" +
         rows + "</table>\n";
  }

  o += "<h3>Latency over time</h3>\n";
  std::string note;
  o += "<div class=\"charts\">\n" + time_chart(collect(run.records), note) + "</div>\n";
  if (!note.empty()) o += "<p class=\"note\">" + escape(note) + "</p>\n";

  o += "<details open=\"open\">\n<summary>Configuration</summary>\n<table class=\"config\">\n";
  for (const auto& [k, v] : at(r, "config").items())
    o += "<tr><th class=\"t\">" + escape(k) + "</th><td class=\"t\">" + escape(json_text(v)) + "</td></tr>\n";
  o += "</table>\n</details>\n</section>\n";
}

void sweep_section(std::string& o, const std::vector<SweepPoint>& points, const std::string& title) {
  o += "<section id=\"frontier\">\n<h2>Sweep frontier</h2>\n<div class=\"charts\">\n" + sweep_svg(points, title) +
       "</div>\n";
  std::vector<double> thr, rt90, iwl90;
  for (const auto& p : points) {
    const json& m = at(p.report, "metrics");
    const auto num = [](const json& v) { return v.is_number() ? v.get<double>() : std::nan(""); };
    thr.push_back(num(at(p.report, "wps_total")));
    rt90.push_back(num(at(at(m, "rt_ms"), "p90")));
    iwl90.push_back(num(at(at(m, "iwl_ms"), "p90")));
  }
  const auto f_rt = pareto_front(thr, rt90), f_iwl = pareto_front(thr, iwl90);
  o += "<table class=\"sweep\">\n<tr><th>" + escape(points.empty() ? "rate" : points[0].axis) +
       "</th><th>completed</th><th>failed</th><th>requests/s</th><th>total words/s</th><th>RT p90 (ms)</th>"
       "<th>IWL p90 (ms)</th><th>Pareto (RT)</th><th>Pareto (IWL)</th></tr>\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& r = points[i].report;
    o += "<tr><td>" + fixed(points[i].rate, 3) + "</td><td>" + cell(at(r, "completed"), 0) + "</td><td>" +
         cell(at(r, "failed"), 0) + "</td><td>" + cell(at(r, "rps"), 3) + "</td><td>" + cell(at(r, "wps_total"), 1) +
         "</td><td>" + cell(at(at(at(r, "metrics"), "rt_ms"), "p90"), 3) + "</td><td>" +
         cell(at(at(at(r, "metrics"), "iwl_ms"), "p90"), 3) + "</td><td>" + (f_rt[i] ? "yes" : "") + "</td><td>" +
         (f_iwl[i] ? "yes" : "") + "</td></tr>\n";
  }
  o += "</table>\n</section>\n";
}
}  // namespace

std::string report_title(const std::string& model, const std::string& endpoint) {
  return "hotpath llm bench: " + model + " at " + endpoint;
}

std::string run_label(const json& report) {
  const json& c = at(report, "config");
  std::string l = at(c, "mode").is_string() ? at(c, "mode").get<std::string>() : "run";
  if (at(c, "rate").is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", at(c, "rate").get<double>());
    l += std::string(", ") + buf + " req/s";
  }
  if (at(c, "max_concurrency").is_number()) l += ", max concurrency " + cell(at(c, "max_concurrency"), 0);
  return l;
}

std::pair<std::vector<double>, std::vector<double>> cdf_points(std::vector<double> samples) {
  samples.erase(std::remove_if(samples.begin(), samples.end(), [](double v) { return !ok(v); }), samples.end());
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  std::vector<std::size_t> ranks;
  if (n <= kCdfRanks + kCdfTail) {
    for (std::size_t i = 0; i < n; ++i) ranks.push_back(i);
  } else {
    for (std::size_t k = 0; k < kCdfRanks; ++k)
      ranks.push_back(static_cast<std::size_t>(std::llround(static_cast<double>(k) * static_cast<double>(n - 1) /
                                                            static_cast<double>(kCdfRanks - 1))));
    for (std::size_t i = n - kCdfTail; i < n; ++i) ranks.push_back(i);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  std::vector<double> x, f;
  x.reserve(ranks.size());
  f.reserve(ranks.size());
  for (std::size_t r : ranks) {
    x.push_back(samples[r]);
    f.push_back(static_cast<double>(r + 1) / static_cast<double>(n));
  }
  return {std::move(x), std::move(f)};
}

std::vector<std::size_t> decimate_minmax(const std::vector<double>& values, std::size_t max_points) {
  const std::size_t n = values.size();
  std::vector<std::size_t> keep;
  if (n <= max_points || max_points < 2) {
    for (std::size_t i = 0; i < n && (max_points >= 2 || i < max_points); ++i) keep.push_back(i);
    return keep;
  }
  const std::size_t bins = max_points / 2;
  for (std::size_t b = 0; b < bins; ++b) {
    const std::size_t lo = b * n / bins, hi = (b + 1) * n / bins;
    std::size_t mn = lo, mx = lo;
    for (std::size_t i = lo; i < hi; ++i) {
      if (values[i] < values[mn]) mn = i;
      if (values[i] > values[mx]) mx = i;
    }
    keep.push_back(std::min(mn, mx));
    if (mn != mx) keep.push_back(std::max(mn, mx));
  }
  return keep;
}

std::string html_report(const std::string& title, const std::vector<HtmlRun>& runs, const std::vector<SweepPoint>& sweep) {
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>" +
       escape(title) + "</title>\n<style>\n" + kCss + "</style>\n</head>\n<body>\n";
  o += "<h1>" + escape(title) + "</h1>\n";
  if (!runs.empty()) {
    const json& r = runs.front().report;
    o += "<p class=\"note\">hotpath " + escape(json_text(at(r, "hotpath_version"))) + " (commit " +
         escape(json_text(at(r, "git_commit"))) + "), first run started " + escape(json_text(at(r, "started_at"))) +
         ". Definitions of every number: docs/llm.md.</p>\n";
  }
  if (!sweep.empty()) sweep_section(o, sweep, title);

  o += "<section id=\"cdf\">\n<h2>Latency distributions</h2>\n";
  if (runs.size() > 1) {
    o += "<p class=\"legend\">";
    for (std::size_t i = 0; i < runs.size(); ++i)
      o += "<span class=\"sw\" style=\"background:" + std::string(svg::color(i)) + "\"></span>" + escape(runs[i].label);
    o += "</p>\n";
  }
  std::vector<Series> series;
  series.reserve(runs.size());
  for (const auto& run : runs) series.push_back(collect(run.records));
  std::vector<const std::vector<double>*> rt, e2e, iwl;
  std::size_t biggest = 0;
  for (const auto& s : series) {
    rt.push_back(&s.rt);
    e2e.push_back(&s.e2e);
    iwl.push_back(&s.iwl);
    biggest = std::max({biggest, s.rt.size(), s.e2e.size(), s.iwl.size()});
  }
  o += "<div class=\"charts\">\n" + cdf_chart("RT from schedule", "ms", rt) + cdf_chart("E2E", "ms", e2e) +
       cdf_chart("IWL", "ms", iwl) + "</div>\n";
  o += "<p class=\"note\">Empirical CDFs of the completed requests (a step at each sample). The x axis is "
       "logarithmic when the samples span a factor of 20 or more, linear otherwise (the axis label says which).";
  if (biggest > kCdfRanks + kCdfTail)
    o += " Runs of more than " + std::to_string(kCdfRanks + kCdfTail) + " samples are drawn through " +
         std::to_string(kCdfRanks) + " evenly spaced ranks plus the " + std::to_string(kCdfTail) +
         " largest samples, so the tail and the max are exact.";
  o += "</p>\n</section>\n";
  series.clear();

  for (std::size_t i = 0; i < runs.size(); ++i) run_section(o, runs[i], i);
  o += "</body>\n</html>\n";
  return o;
}

void write_html_report(const std::string& path, const std::string& title, const std::vector<HtmlRun>& runs,
                       const std::vector<SweepPoint>& sweep) {
  write_text(html_report(title, runs, sweep), path);
}

}  // namespace hotpath::llm
