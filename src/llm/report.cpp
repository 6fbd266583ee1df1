#include "llm/report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "llm/stats.hpp"
#include "llm/svg.hpp"
#include "llm/text.hpp"
#include "util/error.hpp"

namespace hotpath::llm {

namespace {
bool ok(double v) { return std::isfinite(v); }

}  // namespace

Derived derive(const RequestRecord& r) {
  Derived d;
  if (ok(r.first_content_s)) {
    d.rt_ms = (r.first_content_s - r.scheduled_s) * 1e3;
    d.rt_send_ms = (r.first_content_s - r.sent_s) * 1e3;
  }
  if (ok(r.end_s)) d.e2e_ms = (r.end_s - r.scheduled_s) * 1e3;
  if (ok(r.slot_s)) d.slot_ms = (r.slot_s - r.scheduled_s) * 1e3;
  if (ok(r.sent_s) && ok(r.slot_s)) d.lag_ms = (r.sent_s - r.slot_s) * 1e3;
  if (r.distinct_stamps >= 2 && r.last_word_s > r.first_word_s) {
    d.wps = static_cast<double>(r.words - 1) / (r.last_word_s - r.first_word_s);
    d.iwl_ms = 1e3 / d.wps;
  }
  if (r.completion_tokens && *r.completion_tokens >= 2 && ok(r.first_content_s) && ok(r.last_content_s))
    d.tpot_ms = (r.last_content_s - r.first_content_s) * 1e3 / static_cast<double>(*r.completion_tokens - 1);
  if (ok(r.sim_recv_s) && ok(r.sim_sent_s) && ok(r.first_content_s)) {
    // What the client side adds to RT: slot free (the schedule, when no cap holds it back) ->
    // server receipt, plus server send -> client stamp. The slot wait itself is reported apart.
    d.pre_us = (r.sim_recv_s - (ok(r.slot_s) ? r.slot_s : r.scheduled_s)) * 1e6;
    d.post_us = (r.first_content_s - r.sim_sent_s) * 1e6;
    d.overhead_us = d.pre_us + d.post_us;
  }
  return d;
}

namespace {

std::string iso_num(double v) {
  if (!ok(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

// A CSV cell of text from a server: escaped (no NUL, newline or invalid UTF-8 gets through), then
// quoted when it holds a comma or a quote.
std::string csv_field(const std::string& raw) {
  const std::string s = escape_bytes(raw);
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + '"';
}
}  // namespace

nlohmann::json make_report(const RunInfo& info, const std::vector<RequestRecord>& records) {
  using nlohmann::json;
  std::size_t completed = 0, failed = 0, not_sent = 0, sent = 0, no_content = 0, wps_excluded = 0;
  std::map<std::string, std::size_t> failures;
  for (const char* k : {reason::http_error, reason::http_redirect, reason::connect_error, reason::timeout,
                        reason::cut_stream, reason::malformed_event, reason::server_error_event,
                        reason::oversized_event, reason::client_error})
    failures[k] = 0;
  std::vector<double> rt, rt_send, e2e, slot, lag, wps, iwl, tpot, words, tokens, overhead, pre, post;
  std::vector<double> rouge, ratio;
  double first_sched = std::numeric_limits<double>::infinity();
  double last_done = -std::numeric_limits<double>::infinity();
  double words_total = 0, tokens_total = 0;
  std::size_t with_usage = 0, len_match = 0, len_short = 0, len_long = 0, len_unknown = 0;
  long long requested_total = 0;
  std::size_t with_reference = 0;

  for (const auto& r : records) {
    if (r.outcome == Outcome::not_sent) {
      ++not_sent;
      continue;
    }
    ++sent;
    first_sched = std::min(first_sched, r.scheduled_s);
    const Derived d = derive(r);
    if (ok(d.slot_ms)) slot.push_back(d.slot_ms);
    if (ok(d.lag_ms)) lag.push_back(d.lag_ms);
    if (r.outcome == Outcome::failed) {
      ++failed;
      ++failures[r.reason.empty() ? reason::client_error : r.reason];
      continue;
    }
    ++completed;
    if (ok(r.end_s)) last_done = std::max(last_done, r.end_s);
    if (ok(d.rt_ms)) {
      rt.push_back(d.rt_ms);
      rt_send.push_back(d.rt_send_ms);
    } else {
      ++no_content;
    }
    if (ok(d.e2e_ms)) e2e.push_back(d.e2e_ms);
    if (ok(d.wps)) {
      wps.push_back(d.wps);
      iwl.push_back(d.iwl_ms);
    } else {
      ++wps_excluded;
    }
    if (ok(d.tpot_ms)) tpot.push_back(d.tpot_ms);
    if (ok(d.overhead_us)) {
      overhead.push_back(d.overhead_us);
      pre.push_back(d.pre_us);
      post.push_back(d.post_us);
    }
    words.push_back(static_cast<double>(r.words));
    words_total += static_cast<double>(r.words);
    requested_total += r.requested_tokens;
    if (r.completion_tokens) {
      ++with_usage;
      tokens_total += static_cast<double>(*r.completion_tokens);
      tokens.push_back(static_cast<double>(*r.completion_tokens));
      if (*r.completion_tokens == r.requested_tokens) ++len_match;
      else if (*r.completion_tokens < r.requested_tokens) ++len_short;
      else ++len_long;
    } else {
      ++len_unknown;
    }
    if (r.rouge_l) {
      ++with_reference;
      rouge.push_back(*r.rouge_l);
      if (r.word_ratio) ratio.push_back(*r.word_ratio);
    }
  }

  json j;
  j["schema"] = "hotpath.llm.bench/1";
  j["hotpath_version"] = HOTPATH_VERSION;
  j["git_commit"] = HOTPATH_GIT_COMMIT;
  j["started_at"] = info.started_at;
  j["config"] = info.config;
  j["requests"] = records.size();
  j["sent"] = sent;
  j["completed"] = completed;
  j["failed"] = failed;
  j["not_sent"] = not_sent;
  j["failures"] = failures;
  j["warmup"] = {{"sent", info.warmup_sent}, {"failed", info.warmup_failed}};
  const double interval = (completed && ok(first_sched) && last_done > first_sched) ? last_done - first_sched : 0.0;
  j["interval_s"] = interval;
  j["wall_s"] = info.wall_s;
  j["rps"] = interval > 0 ? completed / interval : 0.0;
  j["wps_total"] = interval > 0 ? words_total / interval : 0.0;
  j["words_total"] = words_total;
  if (with_usage) {
    j["output_tokens_total"] = tokens_total;
    j["output_tokens_per_s"] = interval > 0 ? tokens_total / interval : 0.0;
  } else {
    j["output_tokens_total"] = nullptr;
    j["output_tokens_per_s"] = nullptr;
  }
  j["wps_excluded"] = wps_excluded;
  j["no_content"] = no_content;
  json m;
  m["rt_ms"] = to_json(summarize(rt));
  m["rt_from_send_ms"] = to_json(summarize(rt_send));
  m["e2e_ms"] = to_json(summarize(e2e));
  m["slot_wait_ms"] = to_json(summarize(slot));
  m["send_lag_ms"] = to_json(summarize(lag));
  m["wps_per_user"] = to_json(summarize(wps));
  m["iwl_ms"] = to_json(summarize(iwl));
  m["ttft_ms"] = to_json(summarize(rt));
  m["tpot_ms"] = to_json(summarize(tpot));
  m["output_words"] = to_json(summarize(words));
  m["output_tokens"] = to_json(summarize(tokens));
  j["metrics"] = m;
  j["output_length"] = {{"requested_tokens_total", requested_total},
                        {"delivered_tokens_total", with_usage ? json(tokens_total) : json(nullptr)},
                        {"with_usage", with_usage},
                        {"without_usage", len_unknown},
                        {"matched", len_match},
                        {"short", len_short},
                        {"long", len_long},
                        {"ignore_eos", info.ignore_eos}};
  if (with_reference) {
    j["quality"] = {{"requests_with_reference", with_reference},
                    {"rouge_l", to_json(summarize(rouge))},
                    {"word_ratio", to_json(summarize(ratio))}};
  }
  if (info.client_cpu_s >= 0) {
    std::size_t events = 0;
    for (const auto& r : records) events += r.events;
    const double busy = info.wall_s > 0 ? info.client_cpu_s / (info.wall_s * static_cast<double>(info.client_threads)) : 0.0;
    // A client near 100% busy queues its own work into the latencies: say so in the report.
    j["client"] = {{"threads", info.client_threads},
                   {"cpu_s", info.client_cpu_s},
                   {"cpu_utilization", busy},
                   {"events", events},
                   {"cpu_us_per_request", sent ? info.client_cpu_s * 1e6 / static_cast<double>(sent) : 0.0},
                   {"cpu_us_per_event", events ? info.client_cpu_s * 1e6 / static_cast<double>(events) : 0.0},
                   {"saturated", busy > 0.8}};
  }
  if (!overhead.empty()) {
    j["harness_overhead_us"] = to_json(summarize(overhead));
    j["harness_overhead_parts_us"] = {{"slot_to_server", to_json(summarize(pre))},
                                      {"server_to_stamp", to_json(summarize(post))}};
  }
  return j;
}

void write_csv(const std::vector<RequestRecord>& records, const std::string& path,
               std::optional<double> rate_column, bool append) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  if (!append) {
    if (rate_column) out << "rate,";
    out << "index,dataset_index,status,reason,http_status,scheduled_s,slot_wait_ms,send_lag_ms,rt_ms,"
           "rt_from_send_ms,e2e_ms,words,distinct_stamps,wps,iwl_ms,requested_tokens,completion_tokens,"
           "prompt_tokens,finish_reason,events,content_events,input_words,tpot_ms,rouge_l,word_ratio,"
           "overhead_us,detail\n";
  }
  for (const auto& r : records) {
    const Derived d = derive(r);
    if (rate_column) out << iso_num(*rate_column) << ',';
    const char* status = r.outcome == Outcome::completed ? "completed"
                         : r.outcome == Outcome::failed  ? "failed"
                                                         : "not_sent";
    out << r.index << ',' << r.dataset_index << ',' << status << ',' << r.reason << ',' << r.http_status << ','
        << iso_num(r.scheduled_s) << ',' << iso_num(d.slot_ms) << ',' << iso_num(d.lag_ms) << ','
        << iso_num(d.rt_ms) << ',' << iso_num(d.rt_send_ms) << ',' << iso_num(d.e2e_ms) << ',' << r.words << ','
        << r.distinct_stamps << ',' << iso_num(d.wps) << ',' << iso_num(d.iwl_ms) << ',' << r.requested_tokens
        << ',' << (r.completion_tokens ? std::to_string(*r.completion_tokens) : "") << ','
        << (r.prompt_tokens ? std::to_string(*r.prompt_tokens) : "") << ',' << csv_field(r.finish_reason) << ','
        << r.events << ',' << r.content_events << ',' << r.input_words << ',' << iso_num(d.tpot_ms) << ','
        << (r.rouge_l ? iso_num(*r.rouge_l) : "") << ',' << (r.word_ratio ? iso_num(*r.word_ratio) : "") << ','
        << iso_num(d.overhead_us) << ',' << csv_field(r.detail) << '\n';
  }
  if (!out) throw Error("failed writing " + path);
}

std::vector<bool> pareto_front(const std::vector<double>& throughput, const std::vector<double>& latency) {
  const std::size_t n = throughput.size();
  std::vector<bool> front(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (!ok(throughput[i]) || !ok(latency[i])) continue;
    bool dominated = false;
    for (std::size_t k = 0; k < n && !dominated; ++k) {
      if (k == i || !ok(throughput[k]) || !ok(latency[k])) continue;
      dominated = throughput[k] >= throughput[i] && latency[k] <= latency[i] &&
                  (throughput[k] > throughput[i] || latency[k] < latency[i]);
    }
    front[i] = !dominated;
  }
  return front;
}

namespace {
double num(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : kNaN; }
double metric(const nlohmann::json& rep, const char* name, const char* q) {
  return num(rep["metrics"][name][q]);
}
}  // namespace

void write_sweep_csv(const std::vector<SweepPoint>& points, const std::string& path) {
  std::vector<double> thr, rt90, iwl90;
  for (const auto& p : points) {
    thr.push_back(num(p.report["wps_total"]));
    rt90.push_back(metric(p.report, "rt_ms", "p90"));
    iwl90.push_back(metric(p.report, "iwl_ms", "p90"));
  }
  const auto f_rt = pareto_front(thr, rt90);
  const auto f_iwl = pareto_front(thr, iwl90);
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  out << "rate,completed,failed,rps,wps_total,output_tokens_per_s,rt_p50_ms,rt_p90_ms,rt_p99_ms,iwl_p50_ms,"
         "iwl_p90_ms,iwl_p99_ms,wps_per_user_p50,e2e_p90_ms,slot_wait_p90_ms,pareto_rt,pareto_iwl\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& r = points[i].report;
    out << iso_num(points[i].rate) << ',' << r["completed"].get<std::size_t>() << ','
        << r["failed"].get<std::size_t>() << ',' << iso_num(num(r["rps"])) << ',' << iso_num(thr[i]) << ','
        << iso_num(num(r["output_tokens_per_s"])) << ',' << iso_num(metric(r, "rt_ms", "p50")) << ','
        << iso_num(rt90[i]) << ',' << iso_num(metric(r, "rt_ms", "p99")) << ','
        << iso_num(metric(r, "iwl_ms", "p50")) << ',' << iso_num(iwl90[i]) << ','
        << iso_num(metric(r, "iwl_ms", "p99")) << ',' << iso_num(metric(r, "wps_per_user", "p50")) << ','
        << iso_num(metric(r, "e2e_ms", "p90")) << ',' << iso_num(metric(r, "slot_wait_ms", "p90")) << ','
        << (f_rt[i] ? 1 : 0) << ',' << (f_iwl[i] ? 1 : 0) << '\n';
  }
  if (!out) throw Error("failed writing " + path);
}

namespace {
std::string fmt(double v, int prec = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string axis_tag(const SweepPoint& p) {
  return p.axis == "rate" ? fmt(p.rate, p.rate < 10 ? 2 : 0) + "/s" : fmt(p.rate, 0);
}

// One panel: x = total words/s, y = the latency; frontier points joined by a line, others hollow.
void panel(std::string& s, const svg::Box& box, const std::vector<SweepPoint>& points, const std::vector<double>& x,
           const std::vector<double>& y, const std::vector<bool>& front, const std::string& ylabel, const char* color) {
  double xm = 0, ym = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (ok(x[i])) xm = std::max(xm, x[i]);
    if (ok(y[i])) ym = std::max(ym, y[i]);
  }
  const svg::Chart chart(box, svg::linear_axis(0, xm, "total words/s (all users)"), svg::linear_axis(0, ym, ylabel));
  chart.axes(s);
  // Frontier polyline in throughput order.
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (front[i]) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  if (idx.size() >= 2) {
    std::vector<double> fx, fy;
    for (std::size_t i : idx) fx.push_back(x[i]), fy.push_back(y[i]);
    chart.polyline(s, fx, fy, color);
  }
  std::vector<std::string> titles, labels;
  for (std::size_t i = 0; i < points.size(); ++i) {
    titles.push_back(sweep_point_label(points[i]) + ": " + fmt(x[i]) + " words/s, " + fmt(y[i], 2));
    labels.push_back(axis_tag(points[i]));
  }
  chart.markers(s, x, y, color, front, titles, labels);
}
}  // namespace

std::string sweep_point_label(const SweepPoint& p) {
  return p.axis == "rate" ? "rate " + fmt(p.rate, p.rate < 10 ? 2 : 0) + " req/s" : p.axis + " " + fmt(p.rate, 0);
}

std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  std::vector<double> thr, rt90, iwl90;
  for (const auto& p : points) {
    thr.push_back(num(p.report["wps_total"]));
    rt90.push_back(metric(p.report, "rt_ms", "p90"));
    iwl90.push_back(metric(p.report, "iwl_ms", "p90"));
  }
  const double W = 960, H = 420;
  std::string s = svg::open(W, H);
  s += svg::text(W / 2, 22, title, 15);
  s += svg::text(W / 2, 40, "filled points: Pareto frontier (no other point has both more words/s and lower latency)", 11,
                 "middle", "#555");
  panel(s, {80, 60, 360, 300}, points, thr, rt90, pareto_front(thr, rt90), "RT p90 (ms)", "#1f77b4");
  panel(s, {560, 60, 360, 300}, points, thr, iwl90, pareto_front(thr, iwl90), "IWL p90 (ms)", "#d62728");
  s += "</svg>\n";
  return s;
}

void write_text(const std::string& text, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  out << text;
  if (!out) throw Error("failed writing " + path);
}

}  // namespace hotpath::llm
