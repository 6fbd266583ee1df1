// Host side of the fresh-window server's mailbox (kernels/fresh/fresh_layout.hpp): a request's chunks and the
// answer's. Plain C++ on plain memory, so tests read what a device would.
#pragma once
#include <cstdint>
#include <span>

#include "cuda/kernels/fresh/fresh_layout.hpp"

namespace hotpath::cuda {

// The chunks of one request in `req` ([1 + rows fresh_row_chunks(max_window, I)] at least): every row's window
// (x [rows, window, I]), then the header {seq, rows, window, seq} last, each chunk one 16-byte store, so a
// device that sees the header finds the windows written (x86 and Arm keep a core's stores to this memory in
// order as a device reads them: the header goes after a store fence).
void write_fresh_request(Chunk* req, uint32_t seq, std::span<const float> x, int rows, int window, int I, int max_window);

// One look at the answer's chunks: true (and z [rows, O] filled) when every chunk carries seq in both halves.
bool read_fresh_answer(const Chunk* out, uint32_t seq, int rows, int O, std::span<float> z);

}  // namespace hotpath::cuda
