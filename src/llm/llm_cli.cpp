#include "llm/llm_cli.hpp"

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "llm/client/interrupt.hpp"
#include "llm/client/progress.hpp"
#include "llm/common/limits.hpp"
#include "llm/report/html_report.hpp"
#include "llm/report/report.hpp"
#include "llm/report/slo.hpp"
#include "llm/server/server_monitor.hpp"
#include "llm/sim/sim_server.hpp"
#include "llm/sweep/sweep.hpp"
#include "llm/workloads/dataset.hpp"
#include "llm/workloads/trace.hpp"
#include "util/cli_number.hpp"
#include "util/error.hpp"
#include "util/output_paths.hpp"
#ifdef HOTPATH_HAVE_CURL
#include "llm/client/client.hpp"
#include "llm/sweep/bench_sweep.hpp"
#endif

namespace hotpath::llm {

namespace {

struct BenchOpts {
  std::string endpoint, model, dataset, mode, api = "chat", api_key, json_path, csv_path, slo;
  SweepFlags sw;  // --sweep, --sweep-concurrency, --find-*, --repeat, --sweep-out (sweep.hpp)
  std::string trace;
  std::vector<std::string> headers;
  double rate = 0, burstiness = 1, duration = 0, timeout = 600, grace = 10, ramp_up = 0, ramp_from = 0;
  double trace_speed = 1, think_time = 0, spin_us = 0;
  std::size_t max_concurrency = 0, requests = 0, warmup = 0, threads = 1, turns = 1, trace_block_words = 512;
  std::uint64_t seed = 0;
  bool ignore_eos = false, insecure = false, quiet = false, busy_poll = false;
  ServerViewOptions server;  // --metrics-url, --metrics-interval, --nvml, --no-nvml
  std::string report_path;                    // --report: the HTML report
  bool progress = false, no_progress = false;  // force the live progress line on / off
};

struct SynthOpts {
  SynthParams p;
  std::string out;
};

struct SimOpts {
  SimConfig cfg;
  double duration = 0;
  std::uint64_t max_requests = 0;
};

#ifdef HOTPATH_HAVE_CURL
void print_summary(const nlohmann::json& r, std::ostream& os) {
  const auto& cfg = r["config"];
  if (r.value("interrupted", false))
    os << "INTERRUPTED: the run was stopped early (Ctrl-C); " << r["abandoned"] << " requests abandoned after the grace period\n";
  os << "hotpath llm bench: " << cfg["mode"].get<std::string>();
  if (cfg["rate"].is_number()) os << " at " << fixed_or_dash(cfg["rate"], 2) << " req/s (burstiness " << fixed_or_dash(cfg["burstiness"], 2) << ")";
  if (cfg["max_concurrency"].is_number()) os << ", max concurrency " << cfg["max_concurrency"];
  os << ", " << r["requests"] << " requests: " << r["completed"] << " completed, " << r["failed"] << " failed";
  if (r["not_sent"].get<std::size_t>()) os << ", " << r["not_sent"] << " not sent (duration)";
  os << '\n';
  if (r["failed"].get<std::size_t>()) {
    os << "  failures:";
    for (const auto& [k, v] : r["failures"].items())
      if (v.get<std::size_t>()) os << ' ' << k << '=' << v;
    os << '\n';
  }
  os << "  rps " << fixed_or_dash(r["rps"], 3) << "   total words/s " << fixed_or_dash(r["wps_total"], 1) << "   output tokens/s "
     << fixed_or_dash(r["output_tokens_per_s"], 1) << "   interval " << fixed_or_dash(r["interval_s"], 3) << " s\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %10s %10s %10s %10s %10s %10s %7s\n", "", "p50", "p90", "p95", "p99", "max",
                "mean", "n");
  os << line;
  // Both RTs, named by where they start; the headline one (JSON "headline") is marked.
  const std::string headline = r.contains("headline") ? r["headline"]["rt"].get<std::string>() : "rt_ms";
  const std::string rt_sched = std::string(headline == "rt_ms" ? "*" : "") + "RT ms (sched)";
  const std::string rt_send = std::string(headline == "rt_from_send_ms" ? "*" : "") + "RT ms (send)";
  const std::pair<const char*, const char*> rows[] = {{"rt_ms", rt_sched.c_str()},
                                                      {"rt_from_send_ms", rt_send.c_str()},
                                                      {"e2e_ms", "E2E ms"},
                                                      {"iwl_ms", "IWL ms"},
                                                      {"wps_per_user", "words/s/user"},
                                                      {"tpot_ms", "TPOT ms"},
                                                      {"slot_wait_ms", "slot wait ms"},
                                                      {"send_lag_ms", "send lag ms"}};
  for (const auto& [key, label] : rows) {
    const auto& m = r["metrics"][key];
    std::snprintf(line, sizeof line, "  %-16s %10s %10s %10s %10s %10s %10s %7zu\n", label, fixed_or_dash(m["p50"], 3).c_str(),
                  fixed_or_dash(m["p90"], 3).c_str(), fixed_or_dash(m["p95"], 3).c_str(), fixed_or_dash(m["p99"], 3).c_str(),
                  fixed_or_dash(m["max"], 3).c_str(), fixed_or_dash(m["mean"], 3).c_str(), m["count"].get<std::size_t>());
    os << line;
  }
  os << "  * headline RT (" << headline << "): " << r["headline"]["why"].get<std::string>() << '\n';
  if (r.contains("conversations")) {
    const auto& cv = r["conversations"];
    os << "  conversations: " << cv["sessions"] << " sessions of " << cv["turns_per_session"] << " turns, "
       << cv["completed_sessions"] << " completed, " << cv["broken_sessions"] << " broken; session p50 "
       << fixed_or_dash(cv["session_duration_s"]["p50"], 3) << " s; RT p50 by turn (ms):";
    for (const auto& t : cv["per_turn"]) os << ' ' << fixed_or_dash(t["rt_ms"]["p50"], 1);
    os << '\n';
  }
  const auto& ol = r["output_length"];
  os << "  output length: requested " << ol["requested_tokens_total"] << " tokens, delivered "
     << (ol["delivered_tokens_total"].is_null() ? std::string("unknown") : fixed_or_dash(ol["delivered_tokens_total"], 0))
     << " (" << ol["with_usage"] << " with usage: " << ol["matched"] << " matched, " << ol["short"] << " short, "
     << ol["long"] << " long; " << ol["without_usage"] << " without usage)\n";
  if (r["wps_excluded"].get<std::size_t>())
    os << "  " << r["wps_excluded"] << " completed requests had < 2 distinct word stamps (excluded from WPS/IWL)\n";
  if (r.contains("quality"))
    os << "  ROUGE-L p50 " << fixed_or_dash(r["quality"]["rouge_l"]["p50"], 3) << ", word ratio p50 "
       << fixed_or_dash(r["quality"]["word_ratio"]["p50"], 3) << " over " << r["quality"]["requests_with_reference"]
       << " requests with a reference\n";
  if (r.contains("client")) {
    os << "  client: " << fixed_or_dash(r["client"]["cpu_utilization"].get<double>() * 100, 1) << "% of "
       << r["client"]["threads"] << " core(s) busy, " << fixed_or_dash(r["client"]["cpu_us_per_request"], 1)
       << " us CPU per request\n";
    if (r["client"]["saturated"].get<bool>())
      os << "  WARNING: the client was over 80% busy; its own queueing may be in the latencies (add --threads)\n";
  }
  if (r.contains("harness_overhead_us"))
    os << "  harness overhead (serve-sim stamps) us: p50 " << fixed_or_dash(r["harness_overhead_us"]["p50"], 1) << ", p99 "
       << fixed_or_dash(r["harness_overhead_us"]["p99"], 1) << '\n';
  if (r.contains("goodput")) os << goodput_summary(r["goodput"]);
  print_server_summary(r, os);
}

// One measured phase, with the live progress line on stderr when it is wanted (docs/llm.md).
BenchResult run_live(BenchConfig c, std::size_t dataset_size, const BenchOpts& o,
                     const std::function<BenchResult(const BenchConfig&)>& run, const std::string& label = "") {
  const ProgressMode mode = o.progress ? ProgressMode::on : o.no_progress ? ProgressMode::off : ProgressMode::automatic;
  LiveCounters live;
  std::optional<ProgressLine> line;
  if (progress_enabled(mode, o.quiet, STDERR_FILENO)) {
    // The requests the run schedules (--turns per session); unknown for arrivals until --duration.
    std::optional<std::uint64_t> total;
    if (const auto sessions = planned_sessions(c, dataset_size)) total = *sessions * c.turns;
    c.live = &live;
    line.emplace(live, stderr, total, label);
  }
  return run(c);
}

void run_bench_command(const BenchOpts& o) {
  BenchConfig c;
  c.endpoint = o.endpoint;
  c.model = o.model;
  c.dataset_path = o.dataset;
  c.api_key = o.api_key;
  if (c.api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY")) c.api_key = k;
  }
  if (o.api == "chat") c.api = Api::chat;
  else if (o.api == "completions") c.api = Api::completions;
  else throw Error("--api must be chat or completions");
  const std::vector<Slo> slos = o.slo.empty() ? std::vector<Slo>{} : parse_slos(o.slo);
  check_sweep_flags(o.sw, !slos.empty(), o.rate > 0, o.max_concurrency > 0, o.mode);
  const bool multi = !o.sw.axis().empty();
  const bool has_sweep = o.sw.axis() == "rate";
  const bool has_trace = !o.trace.empty();
  if (has_trace == !o.dataset.empty()) throw Error("give exactly one of --dataset FILE and --trace FILE");
  {
    // Every output checked before the first request: a run's results are never lost at its end.
    const std::string sweep = o.sw.sweep_out;
    const util::FileArg ins[] = {{"--dataset", o.dataset}, {"--trace", o.trace}};
    const util::FileArg outs[] = {{"--json", o.json_path},
                                  {"--csv", o.csv_path},
                                  {"--report", o.report_path},
                                  {"--sweep-out (.csv)", sweep.empty() ? sweep : sweep + ".csv"},
                                  {"--sweep-out (.svg)", sweep.empty() ? sweep : sweep + ".svg"}};
    util::check_output_files(ins, outs);
  }
  if (has_trace && multi) throw Error("--trace replays its own load: it cannot be combined with a sweep or --find-max");
  std::string mode = o.mode;
  if (mode.empty()) mode = has_trace ? "trace" : (o.rate > 0 || has_sweep) ? "interactive" : "batch";
  if (mode == "batch") c.mode = Mode::batch;
  else if (mode == "interactive") c.mode = Mode::interactive;
  else if (mode == "trace") c.mode = Mode::trace;
  else throw Error("--mode must be batch, interactive or trace");
  if ((c.mode == Mode::trace) != has_trace) throw Error("--trace FILE and --mode trace go together");
  if (c.mode != Mode::interactive && (o.rate > 0 || has_sweep))
    throw Error("--rate, --sweep and --find-max rate need --mode interactive");
  if (c.mode == Mode::interactive && !has_sweep && !(o.rate > 0)) throw Error("interactive mode needs --rate R > 0 (or --sweep)");
  if (c.mode == Mode::trace && o.ramp_up > 0) throw Error("--ramp-up does not apply to --trace (the trace sets the load)");
  if (o.ramp_from > 0 && !(o.ramp_up > 0)) throw Error("--ramp-from needs --ramp-up S");
  c.rate = o.rate;
  c.burstiness = o.burstiness;
  c.max_concurrency = o.max_concurrency;
  c.requests = o.requests;
  c.duration_s = o.duration;
  c.warmup = o.warmup;
  c.timeout_s = o.timeout;
  c.seed = o.seed;
  c.ignore_eos = o.ignore_eos;
  c.insecure = o.insecure;
  c.threads = o.threads;
  c.busy_poll = o.busy_poll;
  c.spin_us = o.spin_us;
  c.headers = o.headers;
  c.grace_s = o.grace;
  c.ramp_s = o.ramp_up;
  c.ramp_from = o.ramp_from;
  c.turns = o.turns;
  c.think_time_s = o.think_time;
  endpoint_url(c.endpoint, c.api);  // validate before loading anything
  check_headers(c.headers);
  std::vector<DatasetItem> dataset;
  if (has_trace) {
    Trace t = load_trace(o.trace, TraceParams{o.trace_speed, o.trace_block_words});
    dataset = std::move(t.items);
    c.trace_times = std::move(t.times_s);
    c.trace_path = o.trace;
    c.trace_speed = o.trace_speed;
  } else {
    dataset = load_dataset(o.dataset);
  }

  // Ctrl-C: the first stops sending and lets the run end with its outputs written; the second quits.
  StopSignal stop;
  InterruptScope interrupt(stop);
  c.stop = &stop;
  BenchClient client(c, dataset);  // one client: warm-up and sweep points share its connections
  ServerViewOptions sv = o.server;
  sv.insecure = o.insecure;
  ServerView view(sv, c.endpoint);  // samples the server during each measured phase
  if (view.active()) {
    c.on_measured_start = [&view] { view.measured_start(); };
    c.on_measured_end = [&view] { view.measured_end(); };
  }

  // One run with the progress line, its goodput and the server view's part of its report.
  const auto run_point = [&](const BenchConfig& cfg, const std::string& label) {
    BenchResult res = run_live(cfg, dataset.size(), o, [&](const BenchConfig& x) { return run_bench_with_slos(client, x, slos); }, label);
    view.add_to_report(res.report);
    return res;
  };
  std::size_t completed = 0;
  if (!multi) {
    BenchResult res = run_point(c, "");
    if (!o.quiet) print_summary(res.report, std::cout);
    if (!o.json_path.empty()) write_json(res.report, o.json_path);
    if (!o.csv_path.empty()) write_csv(res.records, o.csv_path);
    completed = res.report["completed"].get<std::size_t>();
    if (!o.report_path.empty()) {
      std::vector<HtmlRun> run;  // (an initializer list would copy the records)
      run.push_back({run_label(res.report), res.report, std::move(res.records)});
      write_html_report(o.report_path, report_title(c.model, c.endpoint), run);
    }
  } else {
    SweepOutputs out{o.json_path, o.csv_path, o.quiet, [](const nlohmann::json& r) { print_summary(r, std::cout); }};
    out.report_path = o.report_path;
    out.report_title = report_title(c.model, c.endpoint);
    out.run = run_point;
    completed = run_bench_sweep(client, c, slos, o.sw, out);
  }
  if (stop.requested()) {
    std::cerr << "hotpath llm bench: interrupted; the outputs hold what finished\n";
    throw CLI::RuntimeError(130);
  }
  if (completed == 0) {
    std::cerr << "hotpath llm bench: no request completed\n";
    throw CLI::RuntimeError(1);
  }
}
#endif

void run_synth_command(const SynthOpts& o) {
  const util::FileArg outs[] = {{"--out", o.out}};
  util::check_output_files({}, outs);
  const auto items = synth_dataset(o.p);
  write_jsonl(items, o.out);
  std::cout << "wrote " << items.size() << " requests to " << o.out << '\n';
}

void run_sim_command(const SimOpts& o) {
  // Block the stop signals before the server thread starts so that only sigtimedwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  SimServer server(o.cfg);
  server.start();
  std::cout << "serve-sim listening on " << server.base_url() << std::endl;
  const timespec tick{0, 100'000'000};
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (sigtimedwait(&set, nullptr, &tick) > 0) break;
    if (o.max_requests && server.stats().requests >= o.max_requests && server.stats().streams_done +
                                                                                server.stats().http_errors +
                                                                                server.stats().cuts +
                                                                                server.stats().malformed + server.stats().resets >=
                                                                            o.max_requests)
      break;
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (o.duration > 0 && (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) * 1e-9 >= o.duration) break;
  }
  server.stop();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  const SimStats s = server.stats();
  std::cout << "serve-sim: " << s.requests << " requests, " << s.streams_done << " completed, " << s.http_errors
            << " HTTP errors, " << s.cuts << " cut, " << s.malformed << " malformed, " << s.resets
            << " reset, " << s.connections << " connections, max concurrent "
            << s.max_concurrent << std::endl;
}

[[noreturn]] void no_curl() { throw Error(kNoCurlMessage); }

}  // namespace

void add_llm_commands(CLI::App& root) {
  using util::add_float_option;
  using util::add_int_option;
  CLI::App* llm = root.add_subcommand("llm", "Benchmark OpenAI-compatible LLM servers (docs/llm.md)");
#ifdef HOTPATH_HAVE_CURL
  llm->require_subcommand(1);
#else
  llm->callback([] { no_curl(); });
#endif

  // ---- bench -----------------------------------------------------------------------------
  auto b = std::make_shared<BenchOpts>();
  CLI::App* bench = llm->add_subcommand("bench", "Measure a server in batch or interactive mode");
  bench->add_option("--endpoint", b->endpoint, "Base URL as OpenAI clients take it, e.g. http://host:8000/v1")->required();
  bench->add_option("--model", b->model, "Model name sent in each request")->required();
  bench->add_option("--dataset", b->dataset, "JSONL data set (prompt|messages, output_tokens, [reference])");
  bench->add_option("--trace", b->trace, "Replay a timestamped JSONL trace (Mooncake or hotpath form) instead of --dataset");
  add_float_option(bench, "--trace-speed", b->trace_speed, "Trace: replay X times faster (default 1)", 0.001, 1e6);
  add_int_option(bench, "--trace-block-words", b->trace_block_words, "Trace: words per hash_ids block (default 512)", 1,
                 1'000'000);
  bench->add_option("--mode", b->mode, "batch | interactive | trace (default: from --trace, --rate/--sweep, else batch)");
  bench->add_option("--api", b->api, "chat | completions (default chat)");
  add_float_option(bench, "--rate", b->rate, "Interactive: mean arrival rate, requests/s", kMinRate, kMaxRate);
  add_float_option(bench, "--burstiness", b->burstiness, "Interactive: gamma shape K of the gaps (1 = Poisson)",
                   kMinBurstiness, kMaxBurstiness);
  add_int_option(bench, "--max-concurrency", b->max_concurrency, "Client slots (default: no cap but the limit, 100000)",
                 1, kMaxConcurrency);
  add_int_option(bench, "--requests", b->requests, "Requests to send, cycling the data set (default: all of it)", 1,
                 kMaxRequests);
  add_float_option(bench, "--duration", b->duration, "Send no request after S seconds", 0, kMaxDurationS, true);
  add_int_option(bench, "--warmup", b->warmup, "Unmeasured requests sent first", 0, kMaxRequests);
  add_float_option(bench, "--timeout", b->timeout, "Per-request timeout in seconds (default 600)", kMinTimeoutS,
                   kMaxTimeoutS);
  add_int_option(bench, "--seed", b->seed, "Seed of the arrival schedule", 0, UINT64_MAX);
  bench->add_option("--api-key", b->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  bench->add_flag("--ignore-eos", b->ignore_eos, "Send ignore_eos: true so outputs run to max_tokens");
  bench->add_option("--json", b->json_path, "Write the report as JSON");
  bench->add_option("--csv", b->csv_path, "Write one CSV row per request");
  bench->add_option("--sweep", b->sw.sweep, "Interactive runs at rates R1,R2,... with the throughput/latency frontier");
  bench->add_option("--sweep-out", b->sw.sweep_out, "Prefix of the sweep table (.csv) and plot (.svg)");
  bench->add_option("--slo", b->slo, "SLOs, e.g. rt:200ms,iwl@p90:50ms,wps:20 (goodput counts requests meeting them)");
  bench->add_option("--sweep-concurrency", b->sw.sweep_concurrency, "Batch runs at max concurrency C1,C2,...");
  bench->add_option("--find-max", b->sw.find_max, "rate | concurrency: search the highest load meeting --slo");
  add_float_option(bench, "--find-start", b->sw.find_start, "--find-max: first probe (default 1)", kMinRate, kMaxRate);
  add_float_option(bench, "--find-precision", b->sw.find_precision,
                   "--find-max: relative width where bisection ends (default 0.1)", 0.001, 1);
  add_int_option(bench, "--find-max-runs", b->sw.find_max_runs, "--find-max: probes at most (default 12)", 1, 1000);
  add_float_option(bench, "--find-saturation", b->sw.find_saturation,
                   "--find-max: a doubling that adds less than this fraction of req/s is saturation (default 0.05)", 0,
                   10);
  add_int_option(bench, "--repeat", b->sw.repeat, "Run each sweep point N times: mean and 95% CI (default 1)", 1, 100);
  add_int_option(bench, "--threads", b->threads, "Client threads (default 1)", 1, kMaxThreads);
  bench->add_option("--header", b->headers, "Extra HTTP header 'Name: value' (repeatable)");
  add_float_option(bench, "--grace", b->grace, "After Ctrl-C, seconds to let requests in flight finish (default 10)", 0,
                   kMaxTimeoutS);
  add_float_option(bench, "--ramp-up", b->ramp_up,
                   "Ramp the rate (interactive) or the cap (batch) up linearly over S seconds", 0, kMaxDurationS);
  add_float_option(bench, "--ramp-from", b->ramp_from, "Interactive ramp: the rate at t = 0 (default 0)", 0, kMaxRate);
  add_int_option(bench, "--turns", b->turns,
                 "Multi-turn: requests per conversation, each carrying the history (default 1)", 1, kMaxTurns);
  add_float_option(bench, "--think-time", b->think_time,
                   "Multi-turn: seconds between a reply and the next turn (default 0)", 0, kMaxDurationS);
  bench->add_flag("--insecure", b->insecure, "https without certificate verification");
  bench->add_flag("--quiet", b->quiet, "No summary on stdout, no progress line");
  bench->add_option("--report", b->report_path, "Write a self-contained HTML report (tables, SVG charts)");
  bench->add_flag("--progress", b->progress, "Live progress line on stderr even when it is not a terminal")
      ->excludes(bench->add_flag("--no-progress", b->no_progress, "No live progress line"));
  bench->add_flag("--busy-poll", b->busy_poll, "Spin instead of sleeping (needs a free core per --threads)");
  add_float_option(bench, "--spin-us", b->spin_us,
                   "Wake this many us before each scheduled send and spin to it (default 0)", 0, kMaxSpinUs);
  bench->add_option("--metrics-url", b->server.metrics_url,
                    "Scrape the server's Prometheus /metrics in the measured phase: a URL, or auto (--endpoint's /v1 -> /metrics)");
  add_float_option(bench, "--metrics-interval", b->server.interval_s,
                   "Seconds between scrapes and GPU readings (default 1)", kMinMetricsIntervalS, kMaxMetricsIntervalS);
  bench->add_flag("--nvml", b->server.nvml, "GPU telemetry through NVML even when --endpoint is not loopback");
  bench->add_flag("--no-nvml", b->server.no_nvml, "No GPU telemetry (default: on when --endpoint is loopback)");
#ifdef HOTPATH_HAVE_CURL
  bench->callback([b, bench] {
    // A spec given empty ("--slo ''") goes to its parser, which refuses it, instead of reading as absent.
    if (bench->count("--slo")) parse_slos(b->slo);
    if (bench->count("--sweep")) parse_sweep_values("--sweep", b->sw.sweep, false);
    if (bench->count("--sweep-concurrency")) parse_sweep_values("--sweep-concurrency", b->sw.sweep_concurrency, true);
    run_bench_command(*b);
  });
#else
  bench->callback([] { no_curl(); });
#endif

  // ---- dataset synth -----------------------------------------------------------------------
  CLI::App* dataset = llm->add_subcommand("dataset", "Benchmark data sets");
  dataset->require_subcommand(1);
  auto s = std::make_shared<SynthOpts>();
  CLI::App* synth = dataset->add_subcommand("synth", "Write reproducible synthetic prompts (normal length distributions)");
  add_int_option(synth, "--requests", s->p.requests, "Number of requests", 1, kMaxRequests)->required();
  add_float_option(synth, "--input-mean", s->p.input_mean, "Mean prompt length, words", 0, kMaxInputWords, true)
      ->required();
  add_float_option(synth, "--input-stdev", s->p.input_stdev, "Prompt length standard deviation, words", 0,
                   kMaxInputWords);
  add_float_option(synth, "--output-mean", s->p.output_mean, "Mean requested output, tokens", 0, kMaxOutputTokens, true)
      ->required();
  add_float_option(synth, "--output-stdev", s->p.output_stdev, "Requested output standard deviation, tokens", 0,
                   kMaxOutputTokens);
  add_int_option(synth, "--seed", s->p.seed, "Seed", 0, UINT64_MAX);
  synth->add_option("--out", s->out, "Output JSONL file")->required();
#ifdef HOTPATH_HAVE_CURL
  synth->callback([s] { run_synth_command(*s); });
#else
  synth->callback([] { no_curl(); });
#endif

  // ---- serve-sim ---------------------------------------------------------------------------
  auto m = std::make_shared<SimOpts>();
  CLI::App* sim = llm->add_subcommand("serve-sim", "Simulated OpenAI-compatible streaming server on loopback");
  sim->add_option("--host", m->cfg.host, "Loopback address (default 127.0.0.1)");
  add_int_option(sim, "--port", m->cfg.port, "Port (default 0: any free one, printed)", 0, 65535);
  add_float_option(sim, "--ttft-ms", m->cfg.ttft_ms, "Request received -> first token, ms (default 20)", 0,
                   kMaxSimDelayMs);
  add_float_option(sim, "--tpot-ms", m->cfg.tpot_ms, "Between tokens, ms (default 5)", 0, kMaxSimDelayMs);
  add_int_option(sim, "--output-tokens", m->cfg.output_tokens, "Always this many tokens (default: max_tokens)", 1,
                 kMaxOutputTokens);
  add_int_option(sim, "--default-tokens", m->cfg.default_tokens, "Tokens when a request has no max_tokens (default 16)",
                 1, kMaxOutputTokens);
  add_int_option(sim, "--eos-tokens", m->cfg.eos_tokens,
                 "Stop after this many tokens unless ignore_eos (default: never)", 1, kMaxOutputTokens);
  add_int_option(sim, "--tokens-per-word", m->cfg.tokens_per_word, "Split each word over this many tokens (default 1)",
                 1, kMaxTokensPerWord);
  add_float_option(sim, "--error-rate", m->cfg.error_rate, "Fraction of requests answered with an HTTP error", 0, 1);
  add_int_option(sim, "--error-status", m->cfg.error_status, "Status of injected errors (default 500)", 400, 599);
  add_float_option(sim, "--cut-rate", m->cfg.cut_rate, "Fraction of streams cut half way", 0, 1);
  add_float_option(sim, "--malformed-rate", m->cfg.malformed_rate, "Fraction of streams given a malformed event", 0, 1);
  add_float_option(sim, "--reset-rate", m->cfg.reset_rate, "Fraction of requests whose connection is reset on receipt",
                   0, 1);
  add_int_option(sim, "--seed", m->cfg.seed, "Seed of the fault decisions", 0, UINT64_MAX);
  add_int_option(sim, "--kv-capacity-tokens", m->cfg.kv_capacity_tokens,
                 "GET /metrics: tokens that fill the synthetic KV cache (default 100000)", 1, kMaxOutputTokens);
  sim->add_flag("!--no-role-chunk", m->cfg.role_chunk, "Chat: no empty role chunk on receipt");
  sim->add_flag("!--no-stamps", m->cfg.stamps, "No hotpath_sim timing stamps in the first content chunk");
  sim->add_flag("--busy-poll", m->cfg.busy_poll, "Spin instead of sleeping (needs a free core)");
  add_float_option(sim, "--duration", m->duration, "Exit after S seconds (default: at SIGINT/SIGTERM)", 0,
                   kMaxDurationS, true);
  add_int_option(sim, "--max-requests", m->max_requests, "Exit after answering N requests", 1, UINT64_MAX);
#ifdef HOTPATH_HAVE_CURL
  sim->callback([m] { run_sim_command(*m); });
#else
  sim->callback([] { no_curl(); });
  (void)&run_sim_command;
  (void)&run_synth_command;
#endif
}

}  // namespace hotpath::llm
