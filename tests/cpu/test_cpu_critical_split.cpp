// The critical step split over several cores (CpuOptions::crit_cores): each part computes all four gates
// of its blocks of hidden units, one barrier a layer. Splitting changes where each block is computed,
// never its arithmetic: the outputs are bitwise those of one core, for every precision, mode and count.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "reference/reference.hpp"
#include "test_cpu_util.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

using namespace hotpath;
using namespace hotpath::cputest;

namespace {

std::unique_ptr<Backend> split_backend(const Model& m, Mode mode, Precision p, int crit_cores,
                                       const std::vector<int>& cpuset = {}) {
  BackendOptions o;
  o.mode = mode;
  o.window = 9;
  o.precision = p;
  o.cpuset = cpuset;
  CpuOptions c;
  c.crit_cores = crit_cores;
  o.cpu = c;
  return make_cpu_backend(m, o);
}

// Without a cpuset the helpers are unpinned threads (as many parts as the process has cores).
TEST(CpuCriticalSplit, EveryCoreCountAnswersBitwiseAsOneCore) {
  const size_t usable = util::allowed_cores().size();
  if (usable < 2) GTEST_SKIP() << "needs two cores";
  const Model m = random_model(7, 70, 3, 2, true, true, 12);  // 70 units: blocks of 8 or 16, the last partial
  const size_t T = 24;
  const auto x = random_inputs(T, 7, 5);
  for (const Precision p : {Precision::fp32, Precision::bf16, Precision::int8}) {
    for (const Mode mode : {Mode::window, Mode::streaming}) {
      auto one = split_backend(m, mode, p, 1);
      const auto want = run_ticks(*one, x, T);
      for (const int parts : {2, 3, 4}) {
        if (size_t(parts) > usable) {
          std::printf("[split] %d parts: this process has %zu cores, not tested here\n", parts, usable);
          continue;
        }
        SCOPED_TRACE(std::string(precision_name(p)) + " " + mode_name(mode) + " " + std::to_string(parts) + " parts");
        std::unique_ptr<Backend> b;
        try {
          b = split_backend(m, mode, p, parts);
        } catch (const Error& e) {  // more parts than the kernels' blocks (8-lane tables: 9, 16-lane: 5)
          ADD_FAILURE() << e.what();
          continue;
        }
        EXPECT_EQ(b->counters().at("critical_parts"), double(parts));
        EXPECT_EQ(run_ticks(*b, x, T), want);
        b->reset();  // and again from the start: the barrier's epochs only grow, across resets too
        EXPECT_EQ(run_ticks(*b, x, T), want);
      }
    }
  }
}

// With a cpuset: the first crit_cores cores run the critical step, the rest the precompute.
TEST(CpuCriticalSplit, PinnedPartsTakeTheCpusetsFirstCores) {
  const std::vector<int> cores = two_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs two cores";
  const Model m = random_model(5, 40, 2, 1, true, true, 3);
  const size_t T = 30;
  const auto x = random_inputs(T, 5, 9);
  auto one = split_backend(m, Mode::window, Precision::fp32, 1, cores);
  auto two = split_backend(m, Mode::window, Precision::fp32, 2, cores);
  EXPECT_EQ(run_ticks(*two, x, T), run_ticks(*one, x, T));
  EXPECT_EQ(two->facts().at("cpu_critical_cores"),
            std::to_string(cores[0]) + "," + std::to_string(cores[1]) + " (the critical step in 2 parts, one barrier a layer)");
  EXPECT_EQ(two->facts().at("cpu_precompute_cores"), "inline (critical thread)");  // no core left for it
  EXPECT_EQ(one->facts().at("cpu_precompute_cores"), std::to_string(cores[1]));
  // more parts than the cpuset has cores: refused, naming both
  try {
    (void)split_backend(m, Mode::window, Precision::fp32, 3, cores);
    ADD_FAILURE() << "three parts on a cpuset of two";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("crit_cores=3 needs a --cpuset of at least 3 cores"), std::string::npos)
        << e.what();
  }
}

TEST(CpuCriticalSplit, TheCountIsChosenFromTheWeightsAndChecked) {
  constexpr size_t MB = 1 << 20;
  using cpu::choose_critical_cores;
  // asked: served as asked, or refused naming why
  EXPECT_EQ(choose_critical_cores(3, 1, 0, 0, 8, 4), 3);  // without a cpuset: unpinned helpers
  EXPECT_EQ(choose_critical_cores(3, 1, 0, 4, 8, 2), 3);  // a cpuset's cores are checked as the engine's
  try {
    (void)choose_critical_cores(4, 1, 0, 0, 2, 16);
    ADD_FAILURE() << "4 parts of 2 blocks";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "crit_cores=4: the model's critical step has 2 blocks of hidden units to split over cores");
  }
  try {
    (void)choose_critical_cores(4, 1, 0, 0, 8, 2);
    ADD_FAILURE() << "4 spinning parts on 2 cores";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "crit_cores=4: this process may run on 2 cores, and each part of the critical step spins on one of its own");
  }
  // auto: one core while the weights fit half its L2, or without a core to spare, or not knowing the L2
  EXPECT_EQ(choose_critical_cores(0, MB, 2 * MB, 16, 64, 16), 1);
  EXPECT_EQ(choose_critical_cores(0, 8 * MB, 2 * MB, 2, 64, 16), 1);
  EXPECT_EQ(choose_critical_cores(0, 8 * MB, 0, 16, 64, 16), 1);
  // else as many as spread the weights at half an L2 each, within the cpuset less one, the blocks, 8
  EXPECT_EQ(choose_critical_cores(0, 3 * MB, 2 * MB, 16, 64, 16), 3);
  EXPECT_EQ(choose_critical_cores(0, 3 * MB, 2 * MB, 3, 64, 16), 2);
  EXPECT_EQ(choose_critical_cores(0, 3 * MB, 2 * MB, 16, 2, 16), 2);
  EXPECT_EQ(choose_critical_cores(0, 100 * MB, 2 * MB, 64, 64, 64), kMaxCriticalCores);
  // a fed backend (its precompute elsewhere) keeps no core back: all of a cpuset of 2 or 3
  EXPECT_EQ(choose_critical_cores(0, 3 * MB, 2 * MB, 3, 64, 16, /*precompute_beside=*/false), 3);
  EXPECT_EQ(choose_critical_cores(0, 8 * MB, 2 * MB, 2, 64, 16, /*precompute_beside=*/false), 2);
  EXPECT_EQ(choose_critical_cores(0, 8 * MB, 2 * MB, 1, 64, 16, /*precompute_beside=*/false), 1);
  EXPECT_EQ(choose_critical_cores(0, MB, 2 * MB, 4, 64, 16, /*precompute_beside=*/false), 1);  // fits one L2
}

}  // namespace
