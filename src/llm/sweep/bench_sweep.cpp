#include "llm/sweep/bench_sweep.hpp"

#include <iostream>

#include "llm/client/interrupt.hpp"
#include "llm/report/html_report.hpp"

namespace hotpath::llm {

BenchResult run_bench_with_slos(BenchClient& client, const BenchConfig& c, const std::vector<Slo>& slos) {
  BenchResult res = client.run(c);
  if (!slos.empty()) res.report["goodput"] = evaluate(slos, res.report, res.records);
  return res;
}

std::size_t run_bench_sweep(BenchClient& client, const BenchConfig& c, const std::vector<Slo>& slos,
                            const SweepFlags& f, const SweepOutputs& out) {
  const std::string axis = f.axis();
  const std::size_t repeat = std::max<std::size_t>(f.repeat, 1);
  std::size_t completed = 0;
  bool first = true;
  std::vector<HtmlRun> html_runs;  // only with --report: every run's records are kept for it
  const RunPoint run = [&](const PointSpec& s) {
    BenchConfig pc = c;
    if (s.axis == "concurrency") {
      pc.mode = Mode::batch;
      pc.max_concurrency = static_cast<std::size_t>(s.value);
    } else {
      pc.mode = Mode::interactive;
      pc.rate = s.value;
    }
    pc.seed = c.seed + s.repetition;  // repetitions are independent samples, not replays
    SweepPoint named;
    named.rate = s.value;
    named.axis = s.axis;
    const std::string label = sweep_point_label(named) + (repeat > 1 ? ", run " + std::to_string(s.repetition + 1) : "");
    BenchResult res = out.run ? out.run(pc, label) : run_bench_with_slos(client, pc, slos);
    if (!out.quiet && out.print) out.print(res.report);
    if (!out.csv_path.empty())
      write_csv(res.records, out.csv_path, s.value, /*append=*/!first, s.axis,
                repeat > 1 ? std::optional<std::size_t>(s.repetition) : std::nullopt);
    first = false;
    completed += res.report["completed"].get<std::size_t>();
    nlohmann::json report = res.report;
    if (!out.report_path.empty()) html_runs.push_back({label, res.report, std::move(res.records)});
    return report;
  };
  SweepResult r;
  if (!f.find_max.empty()) {
    SearchOptions so;
    so.axis = axis;
    so.start = f.find_start;
    so.precision = f.find_precision;
    so.max_probes = f.find_max_runs;
    so.saturation_gain = f.find_saturation;
    so.repeat = repeat;
    r = find_max(so, run);
  } else {
    const bool conc = axis == "concurrency";
    r = run_sweep(axis, parse_sweep_values(conc ? "--sweep-concurrency" : "--sweep", conc ? f.sweep_concurrency : f.sweep, conc),
                  repeat, run);
  }
  write_sweep_csv(r.points, f.sweep_out + ".csv");
  write_text(sweep_svg(r.points, "hotpath llm bench sweep: " + c.model + " at " + c.endpoint), f.sweep_out + ".svg");
  if (!out.report_path.empty()) write_html_report(out.report_path, out.report_title, html_runs, r.points);
  if (!out.quiet) {
    if (!r.search.is_null()) std::cout << search_summary(r.search);
    std::cout << "sweep table: " << f.sweep_out << ".csv, plot: " << f.sweep_out << ".svg\n";
  }
  if (!out.json_path.empty()) {
    nlohmann::json j = sweep_json(r);
    j["interrupted"] = c.stop && c.stop->requested();
    write_json(j, out.json_path);
  }
  return completed;
}

}  // namespace hotpath::llm
