// The HTML report (--report) and its SVG drawing: structure validated on every build (a markup
// checker below, Python's XML parser where python3 exists), a real browser where one is installed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "llm/html_check.hpp"
#include "llm/report/html_report.hpp"
#include "llm/report/svg.hpp"

namespace hotpath::llm {
namespace {

// Server and user text meant to break out of the markup.
const std::string kScript = "</script><script>alert(1)</script>";
const std::string kQuotes = "\"quoted\" 'single' & <b>bold</b>";
const std::string kBadUtf8 = std::string("bytes \xff\xfe\xc3( end");
const std::string kUrl = "http://evil.example/x.png\" onerror=\"alert(2)";

RequestRecord completed(std::size_t i, double sched, double rt_s, double e2e_s, std::size_t words = 11) {
  RequestRecord r;
  r.index = i;
  r.outcome = Outcome::completed;
  r.scheduled_s = r.slot_s = r.sent_s = sched;
  r.first_content_s = sched + rt_s;
  r.first_word_s = sched + rt_s;
  r.last_word_s = r.last_content_s = sched + e2e_s * 0.9;
  r.end_s = sched + e2e_s;
  r.words = words;
  r.distinct_stamps = words;
  r.requested_tokens = 10;
  r.completion_tokens = 10;
  return r;
}

RequestRecord failed(std::size_t i, double sched, const std::string& reason, const std::string& detail) {
  RequestRecord r;
  r.index = i;
  r.outcome = Outcome::failed;
  r.reason = reason;
  r.detail = detail;
  r.http_status = 500;
  r.scheduled_s = r.slot_s = r.sent_s = sched;
  r.end_s = sched + 0.01;
  return r;
}

std::vector<RequestRecord> sample_run(double rt_scale = 1.0) {
  std::vector<RequestRecord> v;
  for (std::size_t i = 0; i < 40; ++i)
    v.push_back(completed(i, 0.05 * static_cast<double>(i), rt_scale * (0.02 + 0.001 * static_cast<double>(i % 7)),
                          rt_scale * (0.2 + 0.01 * static_cast<double>(i % 5))));
  v.push_back(failed(40, 2.0, reason::http_error, kScript));
  v.push_back(failed(41, 2.1, reason::cut_stream, kQuotes));
  v.push_back(failed(42, 2.2, reason::http_error, kBadUtf8));
  v.push_back(failed(43, 2.3, reason::connect_error, kUrl));
  return v;
}

HtmlRun make_run(const std::string& label, std::vector<RequestRecord> recs) {
  RunInfo info;
  info.config = {{"model", "m" + kScript + kBadUtf8}, {"endpoint", kUrl}, {"mode", "interactive"}, {"rate", 20.0}};
  info.started_at = "2026-12-01T00:00:00Z";
  info.wall_s = 2.5;
  HtmlRun run;
  run.label = label;
  run.report = make_report(info, recs);
  run.records = std::move(recs);
  return run;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What every report must be, whatever went into it.
void expect_self_contained(const std::string& html, const std::vector<std::string>& user_text) {
  EXPECT_EQ(test::check_markup(html), "");
  EXPECT_TRUE(test::valid_utf8(html));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n<html", 0), 0u);
  const std::string low = lower(html);
  // (check_markup also refuses on* handlers and src/href attributes.)
  for (const char* banned : {"<script", "<img", "<link", "<iframe", "<object", "<embed", "<image", "<use", "<foreignobject",
                             "url(", "@import", "@font-face"})
    EXPECT_EQ(low.find(banned), std::string::npos) << banned;
  // No reference anywhere but the SVG namespace and the user's own (escaped) text.
  std::string rest = html;
  std::vector<std::string> allowed = {"xmlns=\"http://www.w3.org/2000/svg\""};
  for (const auto& t : user_text) allowed.push_back(svg::escape(t));
  for (const auto& a : allowed)
    for (std::size_t at = rest.find(a); at != std::string::npos; at = rest.find(a)) rest.erase(at, a.size());
  for (const char* ref : {"http:", "https:", "ftp:", "file:", "data:", "//"})
    EXPECT_EQ(lower(rest).find(ref), std::string::npos) << ref << ": " << rest.substr(std::min(rest.size(), lower(rest).find(ref)), 80);
  // Every SVG scales: it has a viewBox.
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const std::string tag = html.substr(at, html.find('>', at) - at);
    EXPECT_NE(tag.find(" viewBox=\"0 0 "), std::string::npos) << tag;
  }
}

TEST(LlmHtmlReport, SingleRunIsWellFormedSelfContainedAndEscaped) {
  const HtmlRun run = make_run("interactive, 20 req/s " + kQuotes, sample_run());
  const std::string html = html_report("title " + kScript, {run});
  expect_self_contained(html, {kUrl, "title " + kScript});
  // Every hostile string appears, escaped, and never raw.
  for (const auto& t : {kScript, kQuotes, kBadUtf8, kUrl}) {
    EXPECT_NE(html.find(svg::escape(t)), std::string::npos) << t;
    EXPECT_EQ(html.find(t), std::string::npos) << t;
  }
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("bytes \\xff\\xfe\\xc3( end"), std::string::npos);  // invalid UTF-8 shown as \xNN
  EXPECT_EQ(count(html, "<section id=\"run-"), 1u);
  EXPECT_EQ(html.find("id=\"frontier\""), std::string::npos);  // not a sweep
  EXPECT_EQ(count(html, "<svg"), 4u);                          // 3 CDFs + latency over time
  EXPECT_EQ(count(html, "<table class=\"failures\">"), 1u);
}

// The numbers of the tables are the report's: every metric row, every quantile, and the run's counts.
TEST(LlmHtmlReport, SummaryTableEqualsTheReport) {
  const HtmlRun run = make_run("run", sample_run());
  const std::string html = html_report("t", {run});
  const auto& r = run.report;
  const auto t = test::tables_of(html);
  std::set<std::string> seen;
  for (const auto& [key, cells] : t.metrics) {
    seen.insert(key);
    for (const auto& [q, text] : cells) {
      const auto& want = r["metrics"][key][q];
      if (want.is_null()) {
        EXPECT_EQ(text, "-") << key << ' ' << q;
      } else {
        EXPECT_NEAR(std::stod(text), want.get<double>(), 5e-4 + 1e-9 * std::fabs(want.get<double>())) << key << ' ' << q;
      }
    }
    EXPECT_EQ(cells.size(), 7u) << key;  // p50 p90 p95 p99 max mean count
  }
  EXPECT_EQ(seen, (std::set<std::string>{"rt_ms", "rt_from_send_ms", "e2e_ms", "iwl_ms", "wps_per_user", "tpot_ms",
                                         "slot_wait_ms", "send_lag_ms"}));
  auto rows = t.rows;
  for (const char* k : {"requests", "sent", "completed", "failed", "not_sent"}) EXPECT_EQ(rows[k], r[k].dump()) << k;
  EXPECT_EQ(std::stod(rows["words_total"]), r["words_total"].get<double>());
  for (const char* k : {"rps", "wps_total", "output_tokens_per_s", "interval_s", "wall_s"})
    EXPECT_NEAR(std::stod(rows[k]), r[k].get<double>(), 5e-4) << k;
  EXPECT_EQ(rows["failures.http_error"], "2");
  EXPECT_EQ(rows["failures.cut_stream"], "1");
  EXPECT_EQ(rows["failures.connect_error"], "1");
  EXPECT_EQ(rows.count("failures.timeout"), 0u);  // only the reasons that happened
  EXPECT_EQ(r["completed"], 40);
  EXPECT_EQ(r["failed"], 4);
}

TEST(LlmHtmlReport, SweepHasFrontierSectionPerPointAndOverlaidCdfs) {
  std::vector<HtmlRun> runs;
  std::vector<SweepPoint> points;
  for (int i = 0; i < 3; ++i) {
    HtmlRun run = make_run("", sample_run(1.0 + i));
    points.push_back({10.0 * (i + 1), run.report});
    run.label = sweep_point_label(points.back());
    runs.push_back(std::move(run));
  }
  const std::string html = html_report("sweep " + kQuotes, runs, points);
  expect_self_contained(html, {kUrl});
  EXPECT_NE(html.find("<section id=\"frontier\">"), std::string::npos);
  EXPECT_NE(html.find("Pareto frontier"), std::string::npos);  // sweep_svg, inline
  EXPECT_EQ(count(html, "<section id=\"run-"), 3u);
  EXPECT_EQ(count(html, "<table class=\"sweep\">"), 1u);
  for (const char* l : {"rate 10 req/s", "rate 20 req/s", "rate 30 req/s"}) EXPECT_NE(html.find(l), std::string::npos) << l;
  // Each CDF chart overlays one step line per point.
  const std::size_t cdf = html.find("<section id=\"cdf\">"), end = html.find("</section>", cdf);
  ASSERT_NE(cdf, std::string::npos);
  const std::string part = html.substr(cdf, end - cdf);
  EXPECT_EQ(count(part, "<svg"), 3u);
  EXPECT_EQ(count(part, "stroke-width=\"1.5\""), 9u);
  // Pareto markers: the frontier plot's circles, two panels of three points.
  EXPECT_EQ(count(html, "<circle"), 6u);
}

TEST(LlmHtmlReport, EmptyRunStillRenders) {
  const HtmlRun run = make_run("nothing", {});
  const std::string html = html_report("t", {run});
  expect_self_contained(html, {kUrl});
  EXPECT_NE(html.find("no samples"), std::string::npos);
}

// 10^5 requests: the plotted points are cut down (CDF at fixed ranks, min/max per bin) and the file
// stays small, where every point drawn would be several MB.
TEST(LlmHtmlReport, LargeRunIsDownsampled) {
  std::vector<RequestRecord> recs;
  const std::size_t n = 100000;
  recs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double spike = i == 77777 ? 50.0 : 1.0;  // one outlier that must survive the cut
    recs.push_back(completed(i, 1e-4 * static_cast<double>(i), spike * (0.01 + 1e-7 * static_cast<double>(i % 1000)),
                             0.1 + 1e-7 * static_cast<double>(i % 997)));
  }
  const HtmlRun run = make_run("big", std::move(recs));
  const std::string html = html_report("t", {run});
  EXPECT_LT(html.size(), 1000u * 1000u) << "report of " << n << " requests is " << html.size() << " bytes";
  expect_self_contained(html, {kUrl});
  EXPECT_NE(html.find("evenly spaced ranks"), std::string::npos);  // the downsampling is said
  EXPECT_NE(html.find("Drawn: "), std::string::npos);
  // The RT dot path holds at most kScatterPoints points (min and max of each bin).
  const std::size_t lat = html.find("latency of each request");
  ASSERT_NE(lat, std::string::npos);
  const std::size_t rt_path = html.find("stroke=\"#1f77b4\" stroke-opacity", lat);
  ASSERT_NE(rt_path, std::string::npos);
  const std::string d = html.substr(rt_path, html.find("/>", rt_path) - rt_path);
  EXPECT_LE(count(d, "h0"), kScatterPoints);
  EXPECT_GE(count(d, "h0"), kScatterPoints - 2);
}

TEST(LlmHtmlReport, CdfPointsAreExactRanksAndKeepTheTail) {
  std::vector<double> v(1000000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % v.size());  // 0..n-1 shuffled
  v.push_back(std::nan(""));  // dropped
  const auto [x, f] = cdf_points(v);
  ASSERT_LE(x.size(), kCdfRanks + kCdfTail);
  ASSERT_GE(x.size(), kCdfRanks);
  EXPECT_EQ(x.front(), 0.0);
  EXPECT_EQ(x.back(), 999999.0);
  EXPECT_EQ(f.back(), 1.0);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(f[i], (x[i] + 1) / 1e6);  // F = (rank + 1) / n, exactly
  EXPECT_EQ(x[x.size() - kCdfTail], 1e6 - kCdfTail);                              // the 100 largest, all of them
  // Small inputs: every sample is a point.
  const auto [xs, fs] = cdf_points({3, 1, 2});
  EXPECT_EQ(xs, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(fs[0], 1.0 / 3);
}

TEST(LlmHtmlReport, DecimateKeepsMinAndMaxOfEachBin) {
  std::vector<double> v(10000, 1.0);
  v[1234] = 100;
  v[8765] = -5;
  const auto k = decimate_minmax(v, 100);
  EXPECT_LE(k.size(), 100u);
  EXPECT_TRUE(std::is_sorted(k.begin(), k.end()));
  EXPECT_NE(std::find(k.begin(), k.end(), 1234u), k.end());
  EXPECT_NE(std::find(k.begin(), k.end(), 8765u), k.end());
  EXPECT_EQ(decimate_minmax({1, 2, 3}, 100), (std::vector<std::size_t>{0, 1, 2}));
}

TEST(LlmSvg, AxesTicksAndEscaping) {
  const auto lin = svg::linear_axis(0, 37, "x");
  EXPECT_EQ(lin.ticks, (std::vector<double>{0, 10, 20, 30, 40}));
  EXPECT_EQ(lin.hi, 40);
  const auto narrow = svg::linear_axis(80.2, 81.9, "x");  // not squashed against 0
  EXPECT_GE(narrow.lo, 80.0);
  EXPECT_LE(narrow.hi, 82.0);
  const auto flat = svg::linear_axis(5, 5, "x");  // one value: still a range
  EXPECT_LT(flat.lo, flat.hi);
  const auto lg = svg::log_axis(3, 4000, "ms");
  EXPECT_TRUE(lg.log);
  EXPECT_EQ(lg.lo, 1);
  EXPECT_EQ(lg.hi, 10000);
  EXPECT_EQ(lg.label, "ms (log scale)");
  EXPECT_DOUBLE_EQ(lg.frac(100), 0.5);
  EXPECT_TRUE(svg::auto_axis(1, 1000, "ms").log);
  EXPECT_FALSE(svg::auto_axis(10, 100, "ms").log);
  EXPECT_FALSE(svg::auto_axis(0, 1000, "ms").log);  // 0 cannot sit on a log axis
  EXPECT_EQ(svg::escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(svg::escape(std::string("\xff\n", 2)), "\\xff\\x0a");
  const svg::Chart c({10, 10, 100, 100}, svg::linear_axis(0, 10, "x"), svg::linear_axis(0, 10, "y"));
  EXPECT_DOUBLE_EQ(c.px(5), 60);
  EXPECT_DOUBLE_EQ(c.py(10), 10);  // y grows upward
  std::string out = svg::open(120, 120);
  c.axes(out);
  c.steps(out, {1, 2, 3}, {0, 0.5, 1}, "#000");
  c.dots(out, {1, std::nan("")}, {1, 1}, "#000");  // NaN skipped
  out += "</svg>\n";
  EXPECT_EQ(test::check_markup(out), "");
  EXPECT_EQ(count(out, "h0"), 1u);
}

// The checker itself catches what an unescaped string would do to the markup.
TEST(LlmHtmlReport, CheckerCatchesBrokenMarkup) {
  EXPECT_EQ(test::check_markup("<p>a &amp; b<br/></p>"), "");
  for (const char* bad : {"<p>a</div>", "<p><b>x</p></b>", "<p>", "<p>a < b</p>", "<p>a > b</p>", "<p>a & b</p>",
                          "<p>&nbsp;</p>", "<p class=x>y</p>", "<p class=\"a<b\">y</p>", "<img src=\"x\"/>",
                          "<svg onload=\"alert(1)\"></svg>", "<p><!-- c --></p>", "</p>", "<style>a<b</style>"})
    EXPECT_NE(test::check_markup(bad), "") << bad;
  EXPECT_FALSE(test::valid_utf8("\xff"));
  EXPECT_FALSE(test::valid_utf8("\xc0\x80"));  // overlong NUL
  EXPECT_TRUE(test::valid_utf8("caf\xc3\xa9"));
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("hotpath_llm_" + std::to_string(getpid()) + "_" + name);
  write_text(text, p.string());
  return p.string();
}

// An independent parser: the report is also well-formed XML (void elements are written "<meta .../>").
TEST(LlmHtmlReport, ParsesAsXmlWithPython) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not found";
  std::vector<HtmlRun> runs = {make_run("a " + kScript, sample_run()), make_run("b", sample_run(2))};
  std::vector<SweepPoint> points = {{1, runs[0].report}, {2, runs[1].report}};
  const std::string p = write_temp("xml.html", html_report("x " + kQuotes, runs, points));
  const std::string cmd =
      "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
      "sys.exit(0 if d.getElementsByTagName('svg').length == 6 else 1)\" " + p;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << p;
  std::filesystem::remove(p);
}

// Renders in a real browser where one is installed (exit 0 and a non-empty screenshot).
TEST(LlmHtmlReport, RendersInHeadlessBrowser) {
  std::string browser;
  for (const char* b : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "firefox"}) {
    if (std::system(("command -v " + std::string(b) + " >/dev/null 2>&1").c_str()) == 0) {
      browser = b;
      break;
    }
  }
  if (browser.empty())
    GTEST_SKIP() << "no headless browser found (chromium, chromium-browser, google-chrome, firefox): "
                    "the structure checks above still ran";
  const std::string page = write_temp("browser.html", html_report("b", {make_run("r", sample_run())}));
  const std::string png = page + ".png";
  const std::string cmd =
      browser == "firefox"
          ? "timeout 120 firefox --headless --screenshot " + png + " file://" + page + " >/dev/null 2>&1"
          : "timeout 120 " + browser + " --headless --disable-gpu --no-sandbox --window-size=1200,3000 --screenshot=" +
                png + " file://" + page + " >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_TRUE(std::filesystem::exists(png) && std::filesystem::file_size(png) > 1000) << png;
  std::filesystem::remove(page);
  std::filesystem::remove(png);
}

}  // namespace
}  // namespace hotpath::llm
