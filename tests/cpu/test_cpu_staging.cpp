// A live swap's new cpu backend is made beside the serving one on the same cpuset (engine/swap.hpp): its
// threads start on the staging cores (BackendOptions::staging_cores) and move onto their own only at
// settle_threads(), so the serving backend keeps its cores to itself meanwhile.
#include <gtest/gtest.h>
#include <pthread.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/random_model.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/spin_pool.hpp"
#include "util/threads.hpp"

namespace hotpath {
namespace {

std::vector<int> first_cores(size_t n) {
  std::vector<int> all = util::allowed_cores();
  if (all.size() > n) all.resize(n);
  return all;
}

struct Seen {
  std::vector<int> cores[4];
};
void record_cores(void* ctx, int part, int) { static_cast<Seen*>(ctx)->cores[part] = util::allowed_cores(); }

TEST(SpinPoolStaging, WorkersStartOnTheStagingCoresAndSettleOntoTheirOwn) {
  const auto cores = first_cores(2);
  if (cores.size() < 2) GTEST_SKIP() << "needs two cores";
  cpu::SpinPool pool({cores[1]}, "staging test worker", /*doze=*/true, /*staging=*/{cores[0]});
  Seen seen;
  pool.start(&record_cores, &seen);
  pool.wait();
  EXPECT_EQ(seen.cores[0], std::vector<int>{cores[0]}) << "staged: off its own core";
  pool.settle();
  pool.start(&record_cores, &seen);
  pool.wait();
  EXPECT_EQ(seen.cores[0], std::vector<int>{cores[1]}) << "settled: on its own core";
  // Without staging a worker is on its own core from the start.
  cpu::SpinPool plain({cores[0]}, "staging test worker");
  plain.start(&record_cores, &seen);
  plain.wait();
  EXPECT_EQ(seen.cores[0], std::vector<int>{cores[0]});
}

TEST(CpuBackendStaging, TheMakerStepsOnTheStagingCoresAndTheNextThreadOnTheCriticalCore) {
  const auto cores = first_cores(2);
  if (cores.size() < 2) GTEST_SKIP() << "needs two cores";
  const std::vector<int> before = util::allowed_cores();
  const Model m = test_support::random_model(3, 12, 2, 2, true, true, 5);
  BackendOptions o;
  o.mode = Mode::window;
  o.window = 6;
  o.cpuset = {cores[1]};
  o.staging_cores = {cores[0]};
  auto staged = make_cpu_backend(m, o);
  EXPECT_EQ(util::allowed_cores(), std::vector<int>{cores[0]}) << "the maker stays off the critical core";
  BackendOptions plain_o = o;
  plain_o.staging_cores.clear();
  std::vector<float> x(3), a(2), b(2);
  std::vector<std::vector<float>> staged_out;
  for (int t = 0; t < 10; ++t) {
    for (int i = 0; i < 3; ++i) x[size_t(i)] = float(t * 3 + i) * 0.1f - 1.f;
    staged->step(x, a);
    staged->finish_precompute();
    staged_out.push_back(a);
  }
  EXPECT_EQ(util::allowed_cores(), std::vector<int>{cores[0]}) << "steps on the maker leave it staged";
  staged->settle_threads();
  // Once it serves, the tick thread (a new calling thread) is pinned to the critical core at its first tick.
  std::vector<int> tick_thread_cores;
  std::thread([&] {
    for (int i = 0; i < 3; ++i) x[size_t(i)] = 0.5f;
    staged->step(x, a);
    staged->finish_precompute();
    tick_thread_cores = util::allowed_cores();
  }).join();
  EXPECT_EQ(tick_thread_cores, std::vector<int>{cores[1]});
  // The same outputs as a backend made on its cores from the start.
  util::set_thread_cores(pthread_self(), before);
  auto plain = make_cpu_backend(m, plain_o);
  for (int t = 0; t < 10; ++t) {
    for (int i = 0; i < 3; ++i) x[size_t(i)] = float(t * 3 + i) * 0.1f - 1.f;
    plain->step(x, b);
    plain->finish_precompute();
    EXPECT_EQ(std::memcmp(b.data(), staged_out[size_t(t)].data(), sizeof(float) * 2), 0) << "tick " << t;
  }
  plain.reset();
  staged.reset();
  util::set_thread_cores(pthread_self(), before);
}

}  // namespace
}  // namespace hotpath
