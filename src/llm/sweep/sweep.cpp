#include "llm/sweep/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <sstream>

#include "llm/common/limits.hpp"
#include "llm/report/stats.hpp"
#include "util/error.hpp"
#include "util/number.hpp"

namespace hotpath::llm {

namespace {

constexpr std::size_t kMaxSweepValues = 1000;

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

bool is_concurrency(const std::string& axis) { return axis == "concurrency"; }

// Runs one point `repeat` times and records it in `out`.
const SweepPoint& run_point(SweepResult& out, double value, std::size_t repeat, const RunPoint& run) {
  SweepPoint p;
  p.rate = value;
  p.axis = out.axis;
  std::vector<std::size_t> idx;
  for (std::size_t k = 0; k < repeat; ++k) {
    nlohmann::json rep = run(PointSpec{out.axis, value, k});
    idx.push_back(out.runs.size());
    out.runs.push_back(rep);
    if (repeat > 1) p.repeats.push_back(std::move(rep));
  }
  p.report = out.runs[idx.front()];
  out.points.push_back(std::move(p));
  out.point_runs.push_back(std::move(idx));
  return out.points.back();
}

std::vector<nlohmann::json> runs_of(const SweepPoint& p) {
  return p.repeats.empty() ? std::vector<nlohmann::json>{p.report} : p.repeats;
}

}  // namespace

SweepResult run_sweep(const std::string& axis, const std::vector<double>& values, std::size_t repeat,
                      const RunPoint& run) {
  SweepResult out;
  out.axis = axis;
  for (double v : values) run_point(out, v, std::max<std::size_t>(repeat, 1), run);
  return out;
}

SweepResult find_max(const SearchOptions& opt, const RunPoint& run) {
  using nlohmann::json;
  const bool conc = is_concurrency(opt.axis);
  const double lo_lim = conc ? 1.0 : kMinRate;
  const double hi_lim = conc ? static_cast<double>(kMaxConcurrency) : kMaxRate;
  const auto clamp = [&](double v) {
    v = std::clamp(v, lo_lim, hi_lim);
    return conc ? std::floor(v) : v;
  };
  if (!(opt.precision > 0) || opt.max_probes == 0 || !(opt.saturation_gain >= 0))
    throw Error("find_max: precision > 0, max_probes >= 1 and saturation_gain >= 0 are required");
  SweepResult out;
  out.axis = opt.axis;
  json probes = json::array();
  const std::size_t repeat = std::max<std::size_t>(opt.repeat, 1);

  struct Probe {
    bool met = false;
    double rps = 0;
  };
  const auto probe = [&](double v, const char* phase) {
    const SweepPoint& p = run_point(out, v, repeat, run);
    Probe pr;
    pr.met = true;
    std::vector<double> rps, good;
    for (const auto& r : runs_of(p)) {
      if (!r.contains("goodput")) throw Error("--find-max needs --slo (a run's report has no goodput)");
      pr.met = pr.met && r["goodput"]["all_met"].get<bool>();
      rps.push_back(r.value("rps", 0.0));
      good.push_back(r["goodput"].value("rps", 0.0));
    }
    pr.rps = mean_ci95(rps).mean;
    probes.push_back({{"value", v},
                      {"phase", phase},
                      {"met", pr.met},
                      {"rps", pr.rps},
                      {"goodput_rps", mean_ci95(good).mean},
                      {"runs", out.point_runs.back()}});
    return pr;
  };

  json best = nullptr, bracket_hi = nullptr, saturated_at = nullptr;
  std::string stopped;
  double lo = clamp(opt.start);
  Probe p = probe(lo, "grow");
  if (!p.met) {
    stopped = "slo_failed";  // the start already fails: nothing below it was tried
    bracket_hi = lo;
  } else {
    double lo_rps = p.rps, hi = 0;
    bool have_hi = false;
    // Grow: double until a probe fails, saturates, or the axis' limit is reached.
    while (stopped.empty() && !have_hi) {
      if (probes.size() >= opt.max_probes) stopped = "max_runs";
      else if (lo >= hi_lim) stopped = "limit";
      else {
        const double v = clamp(2 * lo);
        p = probe(v, "grow");
        if (!p.met) {
          hi = v;
          have_hi = true;
        } else if (p.rps < (1 + opt.saturation_gain) * lo_rps) {
          stopped = "saturated";  // twice the load bought (almost) no throughput: keep the smaller
          saturated_at = v;
        } else {
          lo = v;
          lo_rps = p.rps;
        }
      }
    }
    // Bisect between the highest pass and the lowest failure.
    if (have_hi) {
      bracket_hi = hi;
      while (stopped.empty()) {
        const double mid = clamp((lo + hi) / 2);
        if ((hi - lo) / lo <= opt.precision || mid <= lo || mid >= hi) stopped = "slo_failed";
        else if (probes.size() >= opt.max_probes) stopped = "max_runs";
        else if (probe(mid, "bisect").met) lo = mid;
        else {
          hi = mid;
          bracket_hi = hi;
        }
      }
    }
    best = lo;
  }
  // Probes in value order for the table and the plot; `runs` keeps the order they ran in.
  std::vector<std::size_t> order(out.points.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return out.points[a].rate < out.points[b].rate; });
  SweepResult sorted;
  sorted.axis = out.axis;
  sorted.runs = std::move(out.runs);
  for (std::size_t i : order) {
    sorted.points.push_back(std::move(out.points[i]));
    sorted.point_runs.push_back(std::move(out.point_runs[i]));
  }
  sorted.search = {{"axis", opt.axis},
                   {"start", clamp(opt.start)},
                   {"precision", opt.precision},
                   {"max_runs", opt.max_probes},
                   {"saturation_gain", opt.saturation_gain},
                   {"repeat", repeat},
                   {"probes", probes},
                   {"best", best},
                   {"lowest_failing", bracket_hi},
                   {"saturated_at", saturated_at},
                   {"stopped", stopped}};
  return sorted;
}

nlohmann::json sweep_json(const SweepResult& r) {
  nlohmann::json points = nlohmann::json::array();
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    std::vector<nlohmann::json> reps;
    for (std::size_t k : r.point_runs[i]) reps.push_back(r.runs[k]);
    points.push_back({{"value", r.points[i].rate},
                      {"repetitions", reps.size()},
                      {"runs", r.point_runs[i]},
                      {"stats", repetition_stats(reps)}});
  }
  nlohmann::json j = {{"schema", "hotpath.llm.sweep/1"}, {"axis", r.axis}, {"runs", r.runs}, {"points", points}};
  if (!r.search.is_null()) j["search"] = r.search;
  return j;
}

std::string search_summary(const nlohmann::json& s) {
  const bool conc = s["axis"] == "concurrency";
  const auto val = [&](const nlohmann::json& v) {
    return v.is_number() ? num_text(v.get<double>()) + (conc ? "" : " req/s") : std::string("-");
  };
  std::ostringstream os;
  os << "find-max " << s["axis"].get<std::string>() << ": ";
  if (s["best"].is_null())
    os << "the first probe (" << val(s["start"]) << ") already missed an SLO; try a lower --find-start";
  else
    os << "best " << val(s["best"]);
  os << " after " << s["probes"].size() << " probes, stopped: " << s["stopped"].get<std::string>();
  if (s["lowest_failing"].is_number() && !s["best"].is_null()) os << " (lowest failing " << val(s["lowest_failing"]) << ")";
  if (s["saturated_at"].is_number()) os << " (" << val(s["saturated_at"]) << " gave no more throughput)";
  os << '\n';
  return os.str();
}

std::string SweepFlags::axis() const {
  if (!sweep.empty() || find_max == "rate") return "rate";
  if (!sweep_concurrency.empty() || find_max == "concurrency") return "concurrency";
  return "";
}

void check_sweep_flags(const SweepFlags& f, bool has_slo, bool has_rate, bool has_max_concurrency,
                       const std::string& mode) {
  const int kinds = !f.sweep.empty() + !f.sweep_concurrency.empty() + !f.find_max.empty();
  if (kinds > 1) throw Error("--sweep, --sweep-concurrency and --find-max are exclusive: give one");
  if (!f.find_max.empty() && f.find_max != "rate" && f.find_max != "concurrency")
    throw Error("--find-max must be rate or concurrency (got '" + f.find_max + "')");
  if (!f.find_max.empty() && !has_slo) throw Error("--find-max needs --slo: the search is for the highest load meeting it");
  if (f.repeat > 1 && kinds == 0)
    throw Error("--repeat needs --sweep, --sweep-concurrency or --find-max (a single point: --sweep R --repeat N)");
  if (!f.sweep.empty()) parse_sweep_values("--sweep", f.sweep, false);
  if (!f.sweep_concurrency.empty()) parse_sweep_values("--sweep-concurrency", f.sweep_concurrency, true);
  const std::string axis = f.axis();
  if (axis == "rate" && has_rate) throw Error("--rate cannot be given with --sweep or --find-max rate (they set the rate)");
  if (axis == "concurrency") {
    if (has_rate || mode == "interactive")
      throw Error("--sweep-concurrency and --find-max concurrency run batch mode: drop --rate/--mode interactive");
    if (has_max_concurrency)
      throw Error("--max-concurrency cannot be given with --sweep-concurrency or --find-max concurrency (they set it)");
  }
  if (f.find_max == "concurrency" &&
      (f.find_start != std::floor(f.find_start) || f.find_start < 1 || f.find_start > static_cast<double>(kMaxConcurrency)))
    throw Error("--find-start must be an integer in [1, " + std::to_string(kMaxConcurrency) +
                "] for --find-max concurrency");
}

std::vector<double> parse_sweep_values(const std::string& flag, const std::string& list, bool integers) {
  const std::string example = flag + (integers ? " 1,4,16" : " 1,2,4,8");
  const std::vector<std::string> items = util::split_list(list);
  if (items.size() == 1 && items[0].empty())
    throw Error(flag + ": '" + list + "' holds no value (e.g. " + example + ")");
  if (items.size() > kMaxSweepValues) throw Error(flag + ": at most " + std::to_string(kMaxSweepValues) + " values");
  const std::string range = integers ? "a decimal integer in [1, " + std::to_string(kMaxConcurrency) + "]"
                                     : "a decimal rate in [" + num_text(kMinRate) + ", " + num_text(kMaxRate) + "]";
  std::vector<double> out;
  for (const std::string& item : items) {
    // An empty item is a typo ("1,,2", a trailing comma), not a value to skip.
    if (item.empty()) throw Error(flag + ": an empty value in '" + list + "' (e.g. " + example + ")");
    std::optional<double> v;
    if (integers) {
      if (const auto n = util::parse_int<std::uint64_t>(item); n && *n >= 1 && *n <= kMaxConcurrency)
        v = static_cast<double>(*n);
    } else if (const auto x = util::parse_float(item); x && *x >= kMinRate && *x <= kMaxRate) {
      v = *x;
    }
    if (!v) throw Error(flag + ": '" + item + "' is not " + range);
    out.push_back(*v);
  }
  return out;
}

}  // namespace hotpath::llm
