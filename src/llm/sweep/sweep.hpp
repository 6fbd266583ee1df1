// Sweeps over a load setting (arrival rate or client concurrency), repeated points with confidence
// intervals, and the search for the highest load that still meets the SLOs. The driver does not
// run requests itself: it calls `RunPoint` for each run, so it is tested without a server and
// without libcurl. docs/llm.md, "Sweeps and the saturation search".
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/report/report.hpp"

namespace hotpath::llm {

// One run the driver asks for.
struct PointSpec {
  std::string axis;            // "rate" (interactive, requests/s) or "concurrency" (batch, client slots)
  double value = 0;            // the setting on that axis
  std::size_t repetition = 0;  // 0 .. repeat - 1
};
// Runs one measured phase at `spec` and returns its report (make_report()'s JSON, with `goodput`
// when SLOs are set). Errors propagate.
using RunPoint = std::function<nlohmann::json(const PointSpec&)>;

struct SweepResult {
  std::string axis = "rate";
  std::vector<SweepPoint> points;    // the sweep's points; a search's probes in value order
  std::vector<nlohmann::json> runs;  // every run's report in the order they ran
  std::vector<std::vector<std::size_t>> point_runs;  // per point: its runs' indexes in `runs`
  nlohmann::json search;             // a search's account (find_max), null for a plain sweep
};

// Runs every value in the order given, each `repeat` times in a row.
SweepResult run_sweep(const std::string& axis, const std::vector<double>& values, std::size_t repeat,
                      const RunPoint& run);

struct SearchOptions {
  std::string axis = "rate";
  double start = 1;               // first probe
  double precision = 0.1;         // bisection ends when (fail - pass) / pass <= precision
  std::size_t max_probes = 12;    // probes at most (each is `repeat` runs)
  double saturation_gain = 0.05;  // doubling that raises rps by less than this fraction: saturated
  std::size_t repeat = 1;
};

// The highest value on `axis` that still meets every SLO. A probe passes when every one of its
// repetitions has goodput.all_met. Doubling from `start` until a probe fails (then bisection
// between the last pass and the first failure) or saturates (its mean rps is below
// (1 + saturation_gain) x the previous probe's: the answer is the previous probe), within
// `max_probes`. Concurrency probes are whole numbers. Reports lacking `goodput` are an Error.
SweepResult find_max(const SearchOptions& opt, const RunPoint& run);

// {"schema": "hotpath.llm.sweep/1", "axis", "runs": [...], "points": [{"value", "repetitions",
//  "runs": [index...], "stats": repetition_stats()}], "search": {...}} (search only from find_max).
nlohmann::json sweep_json(const SweepResult& r);

// One console line for a search's result.
std::string search_summary(const nlohmann::json& search);

// The bench flags of this file's features, as the CLI reads them.
struct SweepFlags {
  std::string sweep;              // --sweep R1,R2,...
  std::string sweep_concurrency;  // --sweep-concurrency C1,C2,...
  std::string find_max;           // --find-max rate|concurrency
  std::string sweep_out = "llm-sweep";
  double find_start = 1, find_precision = 0.1, find_saturation = 0.05;
  std::size_t find_max_runs = 12, repeat = 1;
  // "rate" or "concurrency" when the flags ask for several runs, "" for one run.
  std::string axis() const;
};
// Checks the flags against each other and the run's other settings (has_* say which were given;
// `mode` is --mode as given, possibly empty). Throws hotpath::Error naming the flags.
void check_sweep_flags(const SweepFlags& f, bool has_slo, bool has_rate, bool has_max_concurrency,
                       const std::string& mode);

// A comma list of sweep values for `flag`, each a number of the flags' grammar (util/number.hpp):
// rates in [kMinRate, kMaxRate] or, when `integers`, concurrencies in [1, kMaxConcurrency]. An
// empty list or item is an error. Throws hotpath::Error naming `flag`.
std::vector<double> parse_sweep_values(const std::string& flag, const std::string& list, bool integers);

}  // namespace hotpath::llm
