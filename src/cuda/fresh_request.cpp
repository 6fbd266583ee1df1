#include "cuda/fresh_request.hpp"

#include "cuda/mailbox_chunks.hpp"
#include "util/arch.hpp"

namespace hotpath::cuda {

void write_fresh_request(Chunk* req, uint32_t seq, std::span<const float> x, int rows, int window, int I, int max_window) {
  const int stride = fresh_row_chunks(max_window, I), n = fresh_row_chunks(window, I), nf = window * I;
  for (int r = 0; r < rows; ++r)
    write_input_chunks(req + 1 + size_t(r) * size_t(stride), n, seq, x.subspan(size_t(r) * size_t(nf), size_t(nf)), 3,
                       nullptr, nullptr, false);
  arch::store_fence();
  arch::store16(req, seq, uint32_t(rows), uint32_t(window), seq);
  arch::store_fence();
}

bool read_fresh_answer(const Chunk* out, uint32_t seq, int rows, int O, std::span<float> z) {
  const int per = fresh_out_chunks(O);
  // the last chunk first: the device writes a pass's chunks together, the last pass last
  if (!read_output_chunks(out + size_t(rows) * size_t(per) - 1, 1, seq, {}, 0)) return false;
  for (int r = 0; r < rows; ++r)
    if (!read_output_chunks(out + size_t(r) * size_t(per), per, seq, z.subspan(size_t(r) * size_t(O), size_t(O)), O))
      return false;
  return true;
}

}  // namespace hotpath::cuda
