// Google Benchmark micro-benchmark of the float64 streaming references the bench checker runs: one
// FastF64::step (one thread, transposed weights) against one SplitF64::step on 1, 2, 4, 8 and 14 threads
// (each owning a slice of the hidden units), and SplitF64::step_many over batches of 16 ticks (the
// checker's batch at its default --check-every), for vollo_small, lstm_m and vollo_large; the head is not
// included. Wall time per step (the split's helper threads work while the caller waits in the barrier).
// Thread counts above the machine's cores are skipped (spinning threads that share a core measure the
// scheduler, not the reference).
//
//   bench_reference_f64 [google benchmark flags]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/zoo.hpp"
#include "reference/reference.hpp"
#include "reference/split_f64.hpp"

using namespace hotpath;

namespace {

std::vector<double> inputs(int I, int ticks) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n;
  std::vector<double> x(size_t(I) * ticks);
  for (auto& v : x) v = n(rng);
  return x;
}

constexpr int kTicks = 64;  // inputs cycled over

void BM_fast_f64(benchmark::State& st, const std::string& model) {
  const Model m = *zoo_model(model);
  const reference::FastF64 f(m);
  reference::LstmState s(m.config);
  const int I = m.config.input_size;
  const auto x = inputs(I, kTicks);
  size_t t = 0;
  for (auto _ : st) {
    f.step(std::span<const double>(x).subspan((t++ % kTicks) * I, I), s);
    benchmark::DoNotOptimize(s.h.back().data());
  }
  st.SetItemsProcessed(st.iterations());  // items/s: steps a second
}

// batch 1: step(); more: step_many over that many ticks at a time.
void BM_split_f64(benchmark::State& st, const std::string& model, int threads, int batch) {
  const Model m = *zoo_model(model);
  reference::F64Team team(threads);
  reference::SplitF64 f(m, team);
  const int I = m.config.input_size;
  const auto x = inputs(I, kTicks);
  size_t t = 0;
  for (auto _ : st) {
    const auto xs = std::span<const double>(x).subspan((t++ % (kTicks / batch)) * batch * I, size_t(batch) * I);
    if (batch == 1) f.step(xs);
    else f.step_many(xs);
  }
  st.SetItemsProcessed(st.iterations() * batch);  // items/s: steps a second
}

constexpr int kBatch = 16;

}  // namespace

int main(int argc, char** argv) {
  const int cores = int(std::thread::hardware_concurrency());
  for (const std::string model : {"vollo_small", "lstm_m", "vollo_large"}) {
    benchmark::RegisterBenchmark(("fast_f64/" + model).c_str(), BM_fast_f64, model)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    for (int n : {1, 2, 4, 8, 14})
      if (n <= cores)
        benchmark::RegisterBenchmark(("split_f64/" + model + "/threads:" + std::to_string(n)).c_str(), BM_split_f64,
                                     model, n, 1)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    for (int n : {1, 2, 4, 8, 14})
      if (n <= cores)
        benchmark::RegisterBenchmark(("split_f64_many/" + model + "/threads:" + std::to_string(n)).c_str(),
                                     BM_split_f64, model, n, kBatch)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
