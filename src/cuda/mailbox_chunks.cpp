#include "cuda/mailbox_chunks.hpp"

#include <atomic>
#include <bit>
#include <cstring>

#include "util/arch.hpp"

namespace hotpath::cuda {

void write_input_chunks(Chunk* slot, int count, uint32_t seq, std::span<const float> x, int fpc, const double* shift,
                        const double* mul, bool stream) {
  const int n = int(x.size());
  // Each chunk's words are made in registers and stored once (util/arch.hpp's store16): built in
  // a 16-byte array they stalled on store forwarding, ~12 ns a chunk on the lent H200's host, 2 us for a
  // 500-float input (docs/cuda.md, "A wide input's round trip").
  auto word = [&](int i) -> uint32_t {
    if (i >= n) return 0u;
    return std::bit_cast<uint32_t>(shift ? float((double(x[size_t(i)]) - shift[i]) * mul[i]) : x[size_t(i)]);
  };
  for (int c = 0; c < count; ++c) {
    const int k = fpc * c;
    const uint32_t a = word(k), b = word(k + 1), d = fpc == 3 ? word(k + 2) : seq;
    // One aligned 16-byte store per chunk: the device's 16-byte load sees all of it or none of it.
    if (stream) {
      arch::stream16(slot + c, seq, a, b, d);
    } else {
      arch::store16(slot + c, seq, a, b, d);
    }
  }
}

bool read_output_chunks(const Chunk* chunks, int count, uint32_t seq, std::span<float> out, int floats) {
  uint32_t w[4];
  std::atomic_signal_fence(std::memory_order_seq_cst);  // re-read the device-written lines every call
  for (int c = 0; c < count; ++c) {
    arch::load16(chunks + c, w);
    if (w[0] != seq || w[3] != seq) return false;  // both 8-byte halves must be this answer's
    for (int i = 0; i < kOutFloatsPerChunk; ++i) {
      const int k = kOutFloatsPerChunk * c + i;
      if (k < int(out.size()) && k < floats) std::memcpy(&out[size_t(k)], &w[1 + i], sizeof(float));
    }
  }
  return true;
}

}  // namespace hotpath::cuda
