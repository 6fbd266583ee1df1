// Google Benchmark micro-benchmark of the float64 streaming references the bench checker runs: one
// FastF64::step (one thread, transposed weights) against one SplitF64::step on 1, 2, 4, 8 and 14 threads
// (each owning a slice of the hidden units), and SplitF64::step_many over batches of 16 ticks (the
// checker's batch at its default --check-every), and FastF64::step_batch of 1, 8 and 16 states on one thread
// (the checker's chunks as they were), and SplitStatesF64 of 16 states a thread on 1, 2, 4, 8 and 14 threads
// (the checker's chunks now), for vollo_small, lstm_m and vollo_large; the head is not included. Wall time per step (the split's helper threads work while the caller waits in the barrier).
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

// FastF64::step_batch of `states` independent states on one thread (the checker's chunks side by side):
// items/s are state-steps a second.
void BM_fast_f64_states(benchmark::State& st, const std::string& model, int states) {
  const Model m = *zoo_model(model);
  const reference::FastF64 f(m);
  std::vector<reference::LstmState> s(size_t(states), reference::LstmState(m.config));
  std::vector<reference::LstmState*> ps;
  for (auto& x : s) ps.push_back(&x);
  const int I = m.config.input_size;
  const auto x = inputs(I, kTicks * states);
  std::vector<const double*> xs(static_cast<size_t>(states));
  size_t t = 0;
  for (auto _ : st) {
    for (int k = 0; k < states; ++k) xs[size_t(k)] = x.data() + ((t % kTicks) * size_t(states) + size_t(k)) * size_t(I);
    ++t;
    f.step_batch(xs, ps);
    benchmark::DoNotOptimize(s.back().h.back().data());
  }
  st.SetItemsProcessed(st.iterations() * states);
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

// SplitStatesF64: `states` states stepped together on `threads` threads (the checker's chunks after a
// streaming run): items/s are state-steps a second.
void BM_split_states(benchmark::State& st, const std::string& model, int threads, int states) {
  const Model m = *zoo_model(model);
  reference::F64Team team(threads);
  reference::SplitStatesF64 f(m, team, states);
  const int I = m.config.input_size;
  const auto x = inputs(I, kTicks * states);
  struct Job {
    reference::SplitStatesF64* f;
    const double* xs;
  } job{&f, nullptr};
  size_t t = 0;
  for (auto _ : st) {
    job.xs = x.data() + (t++ % kTicks) * size_t(states) * size_t(I);
    team.run([](void* ctx, int worker) {
      auto& j = *static_cast<Job*>(ctx);
      j.f->step_worker(worker, j.xs);
    }, &job);
  }
  st.SetItemsProcessed(st.iterations() * states);
}

}  // namespace

int main(int argc, char** argv) {
  const int cores = int(std::thread::hardware_concurrency());
  for (const std::string model : {"vollo_small", "lstm_m", "vollo_large"}) {
    benchmark::RegisterBenchmark(("fast_f64/" + model).c_str(), BM_fast_f64, model)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    for (const int states : {1, 8, 16})
      benchmark::RegisterBenchmark(("fast_f64_states/" + model + "/states:" + std::to_string(states)).c_str(),
                                   BM_fast_f64_states, model, states)
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
        benchmark::RegisterBenchmark(("split_states/" + model + "/threads:" + std::to_string(n) + "/states:" +
                                      std::to_string(16 * n)).c_str(),
                                     BM_split_states, model, n, 16 * n)
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
