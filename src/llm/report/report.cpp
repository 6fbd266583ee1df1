#include "llm/report/report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>

#include "llm/common/text.hpp"
#include "llm/report/stats.hpp"
#include "llm/report/svg.hpp"
#include "util/error.hpp"

namespace hotpath::llm {

namespace {
bool ok(double v) { return std::isfinite(v); }

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

RequestMetrics request_metrics(const RequestRecord& r) {
  RequestMetrics d;
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

nlohmann::json conversation_report(const std::vector<RequestRecord>& records, double think_time_s) {
  using nlohmann::json;
  std::map<std::size_t, std::vector<const RequestRecord*>> sessions;
  int turns = 0;
  for (const auto& r : records) {
    if (r.session == RequestRecord::kNoSession) continue;
    sessions[r.session].push_back(&r);
    turns = std::max(turns, r.turn + 1);
  }
  if (sessions.empty()) return nullptr;
  std::size_t complete = 0, broken = 0, unstarted = 0;
  std::vector<double> duration, done_turns;
  std::vector<std::vector<double>> rt_by_turn(static_cast<std::size_t>(turns)), e2e_by_turn(rt_by_turn.size()),
      in_by_turn(rt_by_turn.size());
  for (const auto& [id, recs] : sessions) {
    std::size_t ok_turns = 0;
    double first = kNaN, last = kNaN;
    for (const RequestRecord* r : recs) {
      if (r->outcome == Outcome::not_sent) continue;
      if (!ok(first)) first = r->scheduled_s;
      if (ok(r->end_s)) last = r->end_s;
      const auto t = static_cast<std::size_t>(r->turn);
      in_by_turn[t].push_back(static_cast<double>(r->input_words));
      if (r->outcome != Outcome::completed) continue;
      ++ok_turns;
      const RequestMetrics d = request_metrics(*r);
      if (ok(d.rt_ms)) rt_by_turn[t].push_back(d.rt_ms);
      if (ok(d.e2e_ms)) e2e_by_turn[t].push_back(d.e2e_ms);
    }
    done_turns.push_back(static_cast<double>(ok_turns));
    if (!ok(first)) {
      ++unstarted;
      continue;
    }
    if (ok_turns == recs.size()) {
      ++complete;
      if (ok(last)) duration.push_back(last - first);
    } else {
      ++broken;
    }
  }
  json per_turn = json::array();
  for (std::size_t t = 0; t < rt_by_turn.size(); ++t)
    per_turn.push_back({{"turn", t},
                        {"rt_ms", to_json(summarize(rt_by_turn[t]))},
                        {"e2e_ms", to_json(summarize(e2e_by_turn[t]))},
                        {"input_words", to_json(summarize(in_by_turn[t]))}});
  return {{"sessions", sessions.size()},
          {"turns_per_session", turns},
          {"think_time_s", think_time_s},
          {"completed_sessions", complete},
          {"broken_sessions", broken},
          {"not_started_sessions", unstarted},
          {"completed_turns_per_session", to_json(summarize(done_turns))},
          {"session_duration_s", to_json(summarize(duration))},
          {"per_turn", per_turn}};
}

std::string fixed_or_dash(const nlohmann::json& v, int prec) {
  return v.is_number() ? fixed(v.get<double>(), prec) : "-";
}

nlohmann::json make_report(const RunInfo& info, const std::vector<RequestRecord>& records) {
  using nlohmann::json;
  std::size_t completed = 0, failed = 0, not_sent = 0, sent = 0, no_content = 0, wps_excluded = 0;
  std::map<std::string, std::size_t> failures;
  for (const char* k : {reason::http_error, reason::http_redirect, reason::connect_error, reason::request_error,
                        reason::timeout, reason::cut_stream, reason::malformed_event, reason::server_error_event,
                        reason::oversized_event, reason::client_error, reason::abandoned})
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
    const RequestMetrics d = request_metrics(r);
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
  j["interrupted"] = info.interrupted;
  j["abandoned"] = failures[reason::abandoned];
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
  // The RT a reader should quote: from the scheduled send in open-loop runs (interactive, trace),
  // where the schedule is the load and a client slot wait is part of the user's wait; from the
  // actual send in batch runs, where every request is "due" at t = 0 and the time from the
  // schedule is mostly the queue for a client slot.
  const bool closed_loop = info.config.is_object() && info.config.value("mode", "") == "batch";
  j["headline"] = {{"rt", closed_loop ? "rt_from_send_ms" : "rt_ms"},
                   {"why", closed_loop ? "batch: every request is due at t = 0, so RT from the schedule includes "
                                         "the wait for a client slot; RT from the send is the server's answer time"
                                       : "open loop: requests are due at their scheduled time, and any client slot "
                                         "wait is part of the user's wait"}};
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
  if (auto conv = conversation_report(records, info.think_time_s); !conv.is_null()) j["conversations"] = conv;
  if (!overhead.empty()) {
    j["harness_overhead_us"] = to_json(summarize(overhead));
    j["harness_overhead_parts_us"] = {{"slot_to_server", to_json(summarize(pre))},
                                      {"server_to_stamp", to_json(summarize(post))}};
  }
  return j;
}

void write_csv(const std::vector<RequestRecord>& records, const std::string& path,
               std::optional<double> rate_column, bool append, const std::string& axis,
               std::optional<std::size_t> repetition) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  if (!append) {
    if (rate_column) out << axis << ',';
    if (repetition) out << "repetition,";
    out << "index,dataset_index,status,reason,http_status,scheduled_s,slot_wait_ms,send_lag_ms,rt_ms,"
           "rt_from_send_ms,e2e_ms,words,distinct_stamps,wps,iwl_ms,requested_tokens,completion_tokens,"
           "prompt_tokens,finish_reason,events,content_events,input_words,tpot_ms,rouge_l,word_ratio,"
           "overhead_us,session,turn,detail\n";
  }
  for (const auto& r : records) {
    const RequestMetrics d = request_metrics(r);
    if (rate_column) out << iso_num(*rate_column) << ',';
    if (repetition) out << *repetition << ',';
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
        << iso_num(d.overhead_us) << ','
        << (r.session == RequestRecord::kNoSession ? std::string() : std::to_string(r.session)) << ','
        << (r.session == RequestRecord::kNoSession ? std::string() : std::to_string(r.turn)) << ','
        << csv_field(r.detail) << '\n';
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
// The number at rep[a][b][c] (NaN when a key is missing: const operator[] must not see one).
double num_at(const nlohmann::json& rep, std::initializer_list<const char*> path) {
  const nlohmann::json* j = &rep;
  for (const char* k : path) {
    if (!j->is_object() || !j->contains(k)) return kNaN;
    j = &(*j)[k];
  }
  return num(*j);
}
double metric(const nlohmann::json& rep, const char* name, const char* q) { return num_at(rep, {"metrics", name, q}); }
double goodput(const nlohmann::json& rep, const char* key) { return num_at(rep, {"goodput", key}); }

using Extract = double (*)(const nlohmann::json&);
struct Headline {
  const char* key;
  Extract get;
};
const Headline kHeadlines[] = {
    {"rps", [](const nlohmann::json& r) { return num_at(r, {"rps"}); }},
    {"wps_total", [](const nlohmann::json& r) { return num_at(r, {"wps_total"}); }},
    {"goodput_rps", [](const nlohmann::json& r) { return goodput(r, "rps"); }},
    {"rt_p50_ms", [](const nlohmann::json& r) { return metric(r, "rt_ms", "p50"); }},
    {"rt_p90_ms", [](const nlohmann::json& r) { return metric(r, "rt_ms", "p90"); }},
    {"iwl_p50_ms", [](const nlohmann::json& r) { return metric(r, "iwl_ms", "p50"); }},
};

std::vector<nlohmann::json> runs_of(const SweepPoint& p) {
  return p.repeats.empty() ? std::vector<nlohmann::json>{p.report} : p.repeats;
}
std::vector<double> values_of(const std::vector<nlohmann::json>& runs, const std::function<double(const nlohmann::json&)>& f) {
  std::vector<double> v;
  for (const auto& r : runs)
    if (const double x = f(r); ok(x)) v.push_back(x);
  return v;
}
// A sweep point's number: the mean over its repetitions (NaN when no run has it).
double point_value(const SweepPoint& p, const std::function<double(const nlohmann::json&)>& f) {
  const auto v = values_of(runs_of(p), f);
  return v.empty() ? kNaN : mean_ci95(v).mean;
}
double point_metric(const SweepPoint& p, const char* name, const char* q) {
  return point_value(p, [&](const nlohmann::json& r) { return metric(r, name, q); });
}
double point_num(const SweepPoint& p, const char* key) {
  return point_value(p, [&](const nlohmann::json& r) { return num_at(r, {key}); });
}
double point_goodput(const SweepPoint& p, const char* key) {
  return point_value(p, [&](const nlohmann::json& r) { return goodput(r, key); });
}
std::size_t point_total(const SweepPoint& p, const char* key) {
  std::size_t n = 0;
  for (const auto& r : runs_of(p)) n += r.value(key, std::size_t{0});
  return n;
}
}  // namespace

nlohmann::json repetition_stats(const std::vector<nlohmann::json>& reports) {
  nlohmann::json out = nlohmann::json::object();
  const auto jnum = [](double v) { return ok(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  for (const auto& h : kHeadlines) {
    const auto v = values_of(reports, h.get);
    if (v.empty() && std::string(h.key) == "goodput_rps") continue;
    const MeanCi m = mean_ci95(v);
    out[h.key] = {{"n", m.n},
                  {"mean", jnum(m.mean)},
                  {"ci95_half_width", jnum(m.half_width)},
                  {"ci95_low", jnum(m.mean - m.half_width)},
                  {"ci95_high", jnum(m.mean + m.half_width)},
                  {"values", v}};
  }
  return out;
}

void write_sweep_csv(const std::vector<SweepPoint>& points, const std::string& path) {
  std::vector<double> thr, rt90, iwl90;
  for (const auto& p : points) {
    thr.push_back(point_num(p, "wps_total"));
    rt90.push_back(point_metric(p, "rt_ms", "p90"));
    iwl90.push_back(point_metric(p, "iwl_ms", "p90"));
  }
  const auto f_rt = pareto_front(thr, rt90);
  const auto f_iwl = pareto_front(thr, iwl90);
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  out << (points.empty() ? std::string("rate") : points.front().axis)
      << ",completed,failed,rps,wps_total,output_tokens_per_s,rt_p50_ms,rt_p90_ms,rt_p99_ms,iwl_p50_ms,"
         "iwl_p90_ms,iwl_p99_ms,wps_per_user_p50,e2e_p90_ms,slot_wait_p90_ms,pareto_rt,pareto_iwl,"
         "goodput_rps,goodput_wps,goodput_fraction,slos_met,repeats,rps_ci95,wps_total_ci95,goodput_rps_ci95,"
         "rt_p50_ci95_ms,rt_p90_ci95_ms,iwl_p50_ci95_ms\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto runs = runs_of(p);
    std::string met;  // 1 when every repetition met every SLO; empty without --slo
    if (p.report.contains("goodput")) {
      met = "1";
      for (const auto& r : runs)
        if (!r.contains("goodput") || !r["goodput"]["all_met"].get<bool>()) met = "0";
    }
    out << iso_num(p.rate) << ',' << point_total(p, "completed") << ',' << point_total(p, "failed") << ','
        << iso_num(point_num(p, "rps")) << ',' << iso_num(thr[i]) << ','
        << iso_num(point_num(p, "output_tokens_per_s")) << ',' << iso_num(point_metric(p, "rt_ms", "p50")) << ','
        << iso_num(rt90[i]) << ',' << iso_num(point_metric(p, "rt_ms", "p99")) << ','
        << iso_num(point_metric(p, "iwl_ms", "p50")) << ',' << iso_num(iwl90[i]) << ','
        << iso_num(point_metric(p, "iwl_ms", "p99")) << ',' << iso_num(point_metric(p, "wps_per_user", "p50"))
        << ',' << iso_num(point_metric(p, "e2e_ms", "p90")) << ','
        << iso_num(point_metric(p, "slot_wait_ms", "p90")) << ',' << (f_rt[i] ? 1 : 0) << ','
        << (f_iwl[i] ? 1 : 0) << ',' << iso_num(point_goodput(p, "rps")) << ','
        << iso_num(point_goodput(p, "wps")) << ',' << iso_num(point_goodput(p, "fraction")) << ',' << met << ','
        << runs.size();
    for (const auto& h : kHeadlines) {
      const auto v = values_of(runs, h.get);
      out << ',' << iso_num(v.empty() ? kNaN : mean_ci95(v).half_width);
    }
    out << '\n';
  }
  if (!out) throw Error("failed writing " + path);
}

namespace {
std::string axis_tag(const SweepPoint& p) {
  return p.axis == "rate" ? fixed(p.rate, p.rate < 10 ? 2 : 0) + "/s" : "C" + fixed(p.rate, 0);
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
    titles.push_back(sweep_point_label(points[i]) + ": " + fixed(x[i], 1) + " words/s, " + fixed(y[i], 2));
    labels.push_back(axis_tag(points[i]));
  }
  chart.markers(s, x, y, color, front, titles, labels);
}
}  // namespace

std::string sweep_point_label(const SweepPoint& p) {
  return p.axis == "rate" ? "rate " + fixed(p.rate, p.rate < 10 ? 2 : 0) + " req/s" : p.axis + " " + fixed(p.rate, 0);
}

std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  std::vector<double> thr, rt90, iwl90;
  for (const auto& p : points) {
    thr.push_back(point_num(p, "wps_total"));  // means over a point's repetitions
    rt90.push_back(point_metric(p, "rt_ms", "p90"));
    iwl90.push_back(point_metric(p, "iwl_ms", "p90"));
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

void write_json(const nlohmann::json& j, const std::string& path) {
  write_text(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", path);
}

}  // namespace hotpath::llm
