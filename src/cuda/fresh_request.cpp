#include "cuda/fresh_request.hpp"

#include <atomic>
#include <bit>
#include <cstring>

#include "util/arch.hpp"

namespace hotpath::cuda {

void write_fresh_request(Chunk* req, uint32_t seq, std::span<const float> x, int rows, int window, int I, int max_window) {
  const int stride = fresh_row_chunks(max_window, I), n = fresh_row_chunks(window, I), nf = window * I;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * size_t(nf);
    auto word = [&](int f) { return f < nf ? std::bit_cast<uint32_t>(xr[f]) : 0u; };
    Chunk* dst = req + 1 + size_t(r) * size_t(stride);
    for (int c = 0; c < n; ++c) arch::store16(dst + c, seq, word(3 * c), word(3 * c + 1), word(3 * c + 2));
  }
  arch::store_fence();
  arch::store16(req, seq, uint32_t(rows), uint32_t(window), seq);
  arch::store_fence();
}

bool read_fresh_answer(const Chunk* out, uint32_t seq, int rows, int O, std::span<float> z) {
  const int per = fresh_out_chunks(O);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // re-read the device-written lines every call
  // the last chunk first: the device writes a pass's chunks together, the last pass last
  uint32_t w[4];
  arch::load16(out + size_t(rows) * size_t(per) - 1, w);
  if (w[0] != seq || w[3] != seq) return false;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < per; ++c) {
      arch::load16(out + size_t(r) * size_t(per) + size_t(c), w);
      if (w[0] != seq || w[3] != seq) return false;
      for (int e = 0; e < 2; ++e)
        if (2 * c + e < O) std::memcpy(&z[size_t(r) * size_t(O) + size_t(2 * c + e)], &w[1 + e], sizeof(float));
    }
  return true;
}

}  // namespace hotpath::cuda
