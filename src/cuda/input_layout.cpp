#include "cuda/input_layout.hpp"

#include <algorithm>
#include <string>

#include "cuda/kernels/common/mailbox_layout.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {
namespace {
constexpr int kChunksPerLine = int(64 / sizeof(Chunk));  // whole 64-byte lines per ring slot
}  // namespace

InputLayout input_layout(int floats, bool dual_seq_input) {
  if (floats < 1) throw Error("the cuda mailbox needs at least 1 input float a tick, not " + std::to_string(floats));
  if (floats > kMaxInputFloats)
    throw UnsupportedError("the cuda mailbox carries at most " + std::to_string(kMaxInputFloats) +
                           " input floats a tick, not " + std::to_string(floats));
  InputLayout l;
  l.floats_per_chunk = dual_seq_input ? 2 : 3;
  l.chunks = chunks_for(floats, l.floats_per_chunk);
  l.stride = chunks_for(l.chunks, kChunksPerLine) * kChunksPerLine;
  return l;
}

int fit_poll_sets(int chunks, int requested, int other_warps, int max_threads) {
  const int per_set = chunks_for(chunks, 32);
  int sets = std::max(1, requested);
  while (sets > 1 && 32 * (per_set * sets + other_warps) > max_threads) --sets;
  return sets;
}

}  // namespace hotpath::cuda
