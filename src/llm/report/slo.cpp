#include "llm/report/slo.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

#include "llm/common/text.hpp"
#include "llm/report/stats.hpp"
#include "util/error.hpp"
#include "util/number.hpp"

namespace hotpath::llm {

namespace {

struct MetricName {
  const char* name;    // as written in --slo
  const char* metric;  // the report's key
  bool time;           // a duration (ms/s); else words/s, a lower bound
};
constexpr MetricName kMetrics[] = {
    {"rt", "rt_ms", true},           {"rt_ms", "rt_ms", true},
    {"ttft", "ttft_ms", true},       {"ttft_ms", "ttft_ms", true},
    {"rt_send", "rt_from_send_ms", true}, {"rt_from_send_ms", "rt_from_send_ms", true},
    {"e2e", "e2e_ms", true},         {"e2e_ms", "e2e_ms", true},
    {"iwl", "iwl_ms", true},         {"iwl_ms", "iwl_ms", true},
    {"tpot", "tpot_ms", true},       {"tpot_ms", "tpot_ms", true},
    {"wps", "wps_per_user", false},  {"wps_per_user", "wps_per_user", false},
};
constexpr const char* kChoices = "rt, ttft, rt_send, e2e, iwl, tpot (times) or wps (words/s per user)";
// A limit past this (ms, or words/s) is a typo, not an objective.
constexpr double kMaxLimit = 1e9;

[[noreturn]] void bad(const std::string& item, const std::string& why) {
  throw Error("--slo: '" + item + "' " + why + " (form METRIC[@pQ]:LIMIT, e.g. rt:200ms,iwl@p90:50ms,wps:20)");
}

// `text` split into a number and the unit after it (the trailing letters and '/': "200ms" ->
// "200", "ms"); the number read with the flags' grammar.
std::optional<double> read_limit(const std::string& text, std::string& unit) {
  std::size_t n = text.size();
  while (n > 0 && (std::isalpha(static_cast<unsigned char>(text[n - 1])) || text[n - 1] == '/')) --n;
  unit = text.substr(n);
  return util::parse_float(std::string_view(text).substr(0, n));
}

Slo parse_one(const std::string& item) {
  Slo slo;
  slo.spec = item;
  const auto colon = item.find(':');
  if (colon == std::string::npos) bad(item, "has no ':LIMIT'");
  std::string name = item.substr(0, colon);
  const std::string limit = item.substr(colon + 1);
  if (const auto at = name.find('@'); at != std::string::npos) {
    const std::string p = name.substr(at + 1);
    name = name.substr(0, at);
    const auto q = p.size() < 2 || p[0] != 'p' ? std::nullopt : util::parse_float(std::string_view(p).substr(1));
    if (!q || !(*q > 0 && *q <= 100))
      bad(item, "has a percentile that is not p followed by a decimal number in (0, 100], e.g. @p90");
    slo.percentile = *q;
  }
  const MetricName* m = nullptr;
  for (const auto& k : kMetrics)
    if (name == k.name) m = &k;
  if (!m) bad(item, std::string("names no metric; choose ") + kChoices);
  slo.metric = m->metric;
  slo.lower_bound = !m->time;
  std::string unit;
  const std::optional<double> number = read_limit(limit, unit);
  if (limit.size() == unit.size()) bad(item, "has no limit (a number)");
  const std::string digits = limit.substr(0, limit.size() - unit.size());
  if (!number) bad(item, "has a limit that is not a finite decimal number ('" + digits + "')");
  const double v = *number;
  if (m->time) {
    if (unit == "ms") slo.limit = v;
    else if (unit == "s") slo.limit = v * 1e3;
    else bad(item, "needs a time unit, ms or s");
  } else {
    if (!unit.empty() && unit != "/s") bad(item, "takes words/s as a plain number");
    slo.limit = v;
  }
  if (!(slo.limit > 0 && slo.limit <= kMaxLimit))
    bad(item, m->time ? "needs a limit in (0, 1e9] ms" : "needs a limit in (0, 1e9] words/s");
  return slo;
}

bool meets(const Slo& s, double v) { return std::isfinite(v) && (s.lower_bound ? v >= s.limit : v <= s.limit); }

}  // namespace

std::vector<Slo> parse_slos(const std::string& spec) {
  const std::vector<std::string> items = util::split_list(spec);
  if (items.size() == 1 && items[0].empty())
    throw Error("--slo: '" + spec + "' holds no objective (e.g. --slo rt:200ms,iwl@p90:50ms)");
  if (items.size() > kMaxSlos) throw Error("--slo: at most " + std::to_string(kMaxSlos) + " objectives");
  std::vector<Slo> out;
  for (const std::string& item : items) {
    // An empty item is a typo ("rt:5ms,,iwl:3ms", a trailing comma), not an objective to skip.
    if (item.empty()) throw Error("--slo: an empty objective in '" + spec + "' (e.g. rt:200ms,iwl@p90:50ms)");
    out.push_back(parse_one(item));
  }
  return out;
}

double slo_value(const Slo& slo, const RequestMetrics& m) {
  const std::string& k = slo.metric;
  if (k == "rt_ms" || k == "ttft_ms") return m.rt_ms;
  if (k == "rt_from_send_ms") return m.rt_send_ms;
  if (k == "e2e_ms") return m.e2e_ms;
  if (k == "iwl_ms") return m.iwl_ms;
  if (k == "tpot_ms") return m.tpot_ms;
  if (k == "wps_per_user") return m.wps;
  return kNaN;
}

nlohmann::json evaluate(const std::vector<Slo>& slos, const nlohmann::json& report,
                        const std::vector<RequestRecord>& records) {
  using nlohmann::json;
  const std::size_t n = slos.size();
  std::vector<std::size_t> passed(n, 0), exceeded(n, 0), missing(n, 0);
  std::vector<std::vector<double>> samples(n);
  std::size_t meeting = 0, completed = 0;
  double words = 0;
  for (const auto& r : records) {
    if (r.outcome != Outcome::completed) continue;  // a failed request meets no objective
    ++completed;
    const RequestMetrics m = request_metrics(r);
    bool all = true;
    for (std::size_t i = 0; i < n; ++i) {
      const double v = slo_value(slos[i], m);
      if (slos[i].percentile) {
        if (std::isfinite(v)) samples[i].push_back(v);
        continue;
      }
      if (!std::isfinite(v)) ++missing[i], all = false;
      else if (meets(slos[i], v)) ++passed[i];
      else ++exceeded[i], all = false;
    }
    if (all) {
      ++meeting;
      words += static_cast<double>(r.words);
    }
  }
  const std::size_t sent = report.value("sent", std::size_t{0});
  const double interval = report.value("interval_s", 0.0);
  bool pct_met = true, req_met = sent > 0 && meeting == sent;
  json list = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const Slo& s = slos[i];
    json j = {{"spec", s.spec},
              {"metric", s.metric},
              {"percentile", s.percentile ? json(*s.percentile) : json(nullptr)},
              {"limit", s.limit},
              {"unit", s.lower_bound ? "words/s" : "ms"},
              {"bound", s.lower_bound ? "min" : "max"}};
    if (s.percentile) {
      auto& v = samples[i];
      std::sort(v.begin(), v.end());
      const bool have = !v.empty();
      const double q = have ? util::percentile_sorted(v, *s.percentile / 100.0, util::Percentile::linear) : kNaN;
      j["value"] = have ? json(q) : json(nullptr);
      j["count"] = v.size();
      j["met"] = meets(s, q);
      pct_met = pct_met && meets(s, q);
    } else {
      j["passed"] = passed[i];
      j["exceeded"] = exceeded[i];
      j["missing"] = missing[i];
      j["met"] = sent > 0 && passed[i] == sent;
    }
    list.push_back(std::move(j));
  }
  return {{"slos", list},
          {"sent", sent},
          {"requests_meeting", meeting},
          {"fraction", sent ? static_cast<double>(meeting) / static_cast<double>(sent) : 0.0},
          {"rps", interval > 0 ? static_cast<double>(meeting) / interval : 0.0},
          {"wps", interval > 0 ? words / interval : 0.0},
          {"words", words},
          {"per_request_slos_met", req_met},
          {"percentile_slos_met", pct_met},
          {"all_met", req_met && pct_met && completed > 0}};
}

std::string goodput_summary(const nlohmann::json& g) {
  std::ostringstream os;
  os << "  goodput: " << g["requests_meeting"] << " of " << g["sent"] << " sent requests met every per-request SLO ("
     << fixed(g["fraction"].get<double>() * 100, 1) << "%): " << fixed(g["rps"].get<double>(), 3) << " req/s, "
     << fixed(g["wps"].get<double>(), 1) << " words/s\n  SLOs:";
  for (const auto& s : g["slos"]) {
    os << ' ' << s["spec"].get<std::string>();
    if (s.contains("value")) {
      char q[32];
      std::snprintf(q, sizeof q, "%g", s["percentile"].get<double>());
      os << " (p" << q << " = " << (s["value"].is_number() ? fixed(s["value"].get<double>(), 2) : std::string("-")) << ")";
    } else {
      os << " (" << s["passed"] << " met, " << s["exceeded"] << " over";
      if (s["missing"].get<std::size_t>()) os << ", " << s["missing"] << " without the metric";
      os << ")";
    }
    os << (s["met"].get<bool>() ? " ok;" : " FAILED;");
  }
  os << " all met: " << (g["all_met"].get<bool>() ? "yes" : "no") << '\n';
  return os.str();
}

}  // namespace hotpath::llm
