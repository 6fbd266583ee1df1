// `hotpath bench --instances N`: N independent instances of one model on one GPU, each on SMs
// of its own (engine/instances.hpp), each with its own inputs (its own seed), windows, state and
// outputs. Measured as the single-instance bench measures one: each tick from the moment its driver
// thread sends it to the moment the answer is visible to that thread, then the wait for the next
// tick's precompute apart. T = min(N, cores) driver threads (pinned to --cpuset's first T cores when
// given); thread j drives instances j, j+T, ... in turn, so with N > T a thread's instances are served
// one after another (the answer to one, then the next one's tick), never two ticks of one thread at
// once. Instances are independent (each thread at its own pace) unless --lockstep (every thread starts
// round r together). Per instance and over all ticks: p50/p99/p99.9; the worst instance's p99; every
// instance's outputs checked against float64 after the timed phase (off the clock).
// --beside-backtest measures twice in one process: the instances alone, then again while a backtest
// runs over and over on the SMs they leave, at the lowest stream priority (its throughput and its
// float64 error reported).
#pragma once
#include <ostream>

#include <nlohmann/json.hpp>

#include "bench/latency_bench.hpp"

namespace hotpath::bench {

// `hotpath bench --instances N`: runs the benchmark, prints the table to `out`, writes the JSON when
// asked, returns the report (as run_bench does for one engine).
nlohmann::json run_instances_bench(const BenchOptions& options, std::ostream& out);

}  // namespace hotpath::bench
