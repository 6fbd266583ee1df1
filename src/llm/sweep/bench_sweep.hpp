// The bench command's multi-run modes (--sweep, --sweep-concurrency, --find-max, --repeat): the
// sweep driver (sweep.hpp) with run_bench as its RunPoint. Needs libcurl.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "llm/client/client.hpp"
#include "llm/report/slo.hpp"
#include "llm/sweep/sweep.hpp"

namespace hotpath::llm {

struct SweepOutputs {
  std::string json_path, csv_path;  // --json, --csv (empty: not written)
  bool quiet = false;
  std::function<void(const nlohmann::json& report)> print;  // a run's console summary
  std::string report_path, report_title;  // --report: the HTML report of the whole sweep
  // Runs one point (default: run_bench_with_slos on the client); the CLI wraps it with the progress
  // line and the server view. `label` names the point ("rate 4.00 req/s").
  std::function<BenchResult(const BenchConfig& point, const std::string& label)> run;
};

// One measured run of `c` with its goodput (when `slos` is not empty) in the report.
BenchResult run_bench_with_slos(BenchClient& client, const BenchConfig& c, const std::vector<Slo>& slos);

// Runs what `f` asks for from the base config `c` (rate points run interactive, concurrency
// points batch; repetition k uses seed + k) on `client`, whose connections the points share, writes
// the sweep table/plot/JSON and the per-request CSV, and returns the number of completed requests
// over all runs. After an interrupt (c.stop) the remaining points run nothing and the JSON says
// "interrupted": true.
std::size_t run_bench_sweep(BenchClient& client, const BenchConfig& c, const std::vector<Slo>& slos,
                            const SweepFlags& f, const SweepOutputs& out);

}  // namespace hotpath::llm
