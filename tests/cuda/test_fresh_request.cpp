// The fresh-window server's mailbox on the host (cuda/fresh_request.hpp): the chunks a request puts where the
// kernel reads them (kernels/fresh/fresh_layout.hpp), and an answer taken only when every chunk is whole.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "cuda/fresh_request.hpp"

namespace hotpath::cuda {
namespace {

TEST(FreshRequest, WindowsThenTheHeaderWhereTheKernelReadsThem) {
  const int rows = 3, window = 5, I = 7, max_window = 9;
  const int stride = fresh_row_chunks(max_window, I), used = fresh_row_chunks(window, I);
  std::vector<Chunk> req(size_t(1 + (rows + 1) * stride));  // one row more than the request: left alone
  std::vector<float> x(size_t(rows * window * I));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * float(i) - 3.f;
  write_fresh_request(req.data(), 77u, x, rows, window, I, max_window);
  EXPECT_EQ(req[0].seq, 77u);
  uint32_t h[4];
  std::memcpy(h, &req[0], sizeof h);
  EXPECT_EQ(h[1], uint32_t(rows));
  EXPECT_EQ(h[2], uint32_t(window));
  EXPECT_EQ(h[3], 77u);  // both halves: a header torn in 8-byte halves is never taken
  for (int r = 0; r <= rows; ++r)
    for (int c = 0; c < stride; ++c) {
      const Chunk& k = req[size_t(1 + r * stride + c)];
      const bool written = r < rows && c < used;
      EXPECT_EQ(k.seq, written ? 77u : 0u) << r << " " << c;
      for (int e = 0; e < 3; ++e) {
        const int f = 3 * c + e;
        const float want = written && f < window * I ? x[size_t(r * window * I + f)] : 0.f;
        EXPECT_EQ(std::bit_cast<uint32_t>(k.v[e]), std::bit_cast<uint32_t>(want)) << r << " " << c << " " << e;
      }
    }
}

TEST(FreshRequest, AnAnswerNeedsEveryChunkWithTheSeqInBothHalves) {
  const int rows = 3, O = 3, per = fresh_out_chunks(O);
  ASSERT_EQ(per, 2);
  std::vector<Chunk> out(size_t(rows * per));
  auto put = [&](int i, uint32_t seq_a, float a, float b, uint32_t seq_b) {
    const uint32_t w[4] = {seq_a, std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b), seq_b};
    std::memcpy(&out[size_t(i)], w, sizeof w);
  };
  for (int i = 0; i < rows * per; ++i) put(i, 5u, float(2 * i), float(2 * i + 1), 5u);
  std::vector<float> z(size_t(rows * O), -1.f);
  EXPECT_FALSE(read_fresh_answer(out.data(), 6u, rows, O, z));  // another request's
  put(3, 5u, 6.f, 7.f, 4u);                                       // one chunk torn
  EXPECT_FALSE(read_fresh_answer(out.data(), 5u, rows, O, z));
  put(3, 5u, 6.f, 7.f, 5u);
  ASSERT_TRUE(read_fresh_answer(out.data(), 5u, rows, O, z));
  // row r's outputs from its own chunks (the second chunk's second value is padding)
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < O; ++o) EXPECT_EQ(z[size_t(r * O + o)], float(2 * (r * per) + o)) << r << " " << o;
}

}  // namespace
}  // namespace hotpath::cuda
