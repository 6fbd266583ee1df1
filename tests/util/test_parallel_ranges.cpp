// util::ParallelRanges: every index of a range handled exactly once, on as many workers as the grain
// allows, job after job on the same threads; a piece's exception reaches the caller after every piece.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/parallel_ranges.hpp"

namespace hotpath {
namespace {

TEST(ParallelRanges, EveryIndexOnceOverManyJobs) {
  for (const int threads : {1, 2, 3, 8}) {
    util::ParallelRanges pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (const size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003)})
      for (const size_t grain : {size_t(1), size_t(64), size_t(1) << 20}) {
        std::vector<std::atomic<int>> hits(n);
        std::mutex m;
        std::set<std::thread::id> ids;
        pool.run(n, grain, [&](size_t b, size_t e) {
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
          std::lock_guard lock(m);
          ids.insert(std::this_thread::get_id());
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
        // no more workers than pieces of at least `grain`
        if (n > 0) EXPECT_LE(ids.size(), std::max<size_t>(1, std::min<size_t>(size_t(threads), n / grain)));
      }
  }
}

TEST(ParallelRanges, APieceThatThrowsReachesTheCallerAndThePoolCarriesOn) {
  util::ParallelRanges pool(4);
  std::atomic<size_t> done{0};
  EXPECT_THROW(pool.run(400, 1,
                        [&](size_t b, size_t e) {
                          done.fetch_add(e - b);
                          if (b == 0) throw std::runtime_error("piece 0 fails");
                        }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 400u);  // the other pieces still ran to their end
  std::atomic<size_t> again{0};
  pool.run(400, 1, [&](size_t b, size_t e) { again.fetch_add(e - b); });
  EXPECT_EQ(again.load(), 400u);
}

TEST(ParallelRanges, DefaultThreadsStayBetweenOneAndEight) {
  const int n = util::ParallelRanges::default_threads();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, 8);
}

}  // namespace
}  // namespace hotpath
