// Where a tick's input floats sit in the mailbox's chunks (kernels/mailbox_layout.hpp), and how many poll
// sets fit a block: plain C++ that the planner and the host mailbox share (built without nvcc).
#pragma once

namespace hotpath::cuda {

// Where one tick's input sits in its ring slot.
struct InputLayout {
  int floats_per_chunk = 3;  // 3, or 2 with dual_seq_input
  int chunks = 0;            // chunks carrying the floats
  int stride = 0;            // chunks per ring slot: whole 64-byte lines, so slots never share a line
};
// Throws UnsupportedError past kMaxInputFloats (a model too wide for the kernels, not a bad request) and
// Error below 1.
InputLayout input_layout(int floats, bool dual_seq_input);

// Poll sets that fit one block: each set is ceil(chunks / 32) poller warps, beside `other_warps`; the
// request shrinks (to no fewer than 1) until the block fits `max_threads`.
int fit_poll_sets(int chunks, int requested, int other_warps, int max_threads);

}  // namespace hotpath::cuda
