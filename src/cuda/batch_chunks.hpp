// How the throughput path cuts a workload into chunks (batch_runner.cpp runs them): which input ticks
// are staged, which sequence each row is, where each row's output goes. Plain C++, tested without a GPU.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace hotpath::cuda {

// One chunk: `rows` sequences advanced `steps` steps over `n_in` staged input ticks. Row r at step k
// reads staged tick row_p0[r] + k, unless k < row_first[r] (a window step before tick 0: its state
// stays zero); row_first empty means every step is valid.
struct BatchChunk {
  struct Copy {
    size_t src, dst, n;  // in: ticks of the workload -> staged ticks; out: output rows -> workload outputs
  };
  int rows = 0, steps = 0, n_in = 0;
  bool reset = true;        // zero state first (every window; a streaming group's first chunk)
  bool emit_every = false;  // streaming: an output per step ([rows, steps, O], row-major); else [rows, O]
  std::vector<int> row_p0, row_first;
  std::vector<Copy> in, out;
  size_t done = 0;  // workload outputs this chunk completes
};

// Pieces of a chunk's copies (rows of one width each) gathered into strided runs: `count` pieces of `n`
// rows each, the k-th from src + k * src_step to dst + k * dst_step (rows). Consecutive pieces of one
// length at even steps (a streaming chunk's series, a window chunk's whole series) make one run: one 2D
// copy on the device instead of one copy each.
struct CopyRun {
  size_t src = 0, dst = 0, n = 0, count = 0, src_step = 0, dst_step = 0;
};
std::vector<CopyRun> copy_runs(const std::vector<BatchChunk::Copy>& pieces);

// Fills the next chunk; false when there are none.
using ChunkSource = std::function<bool(BatchChunk&)>;

// Rule 1 over S series of T ticks (window W): windows in order, series after series, up to `rows`
// windows and `staged` ticks per chunk (staged >= rows + W - 1), a chunk spanning series as needed.
ChunkSource window_chunks(size_t series, size_t ticks, size_t window, size_t rows, size_t staged);

// Streaming over S series of T ticks: groups of up to `rows` series in lockstep, their ticks in slices
// of staged / group size; a group's state carries over from one slice to the next.
struct StreamingShape {
  size_t group = 0, slice = 0;  // series per group, ticks per chunk
};
StreamingShape streaming_shape(size_t series, size_t ticks, size_t rows, size_t staged);
ChunkSource streaming_chunks(size_t series, size_t ticks, size_t rows, size_t staged);

// Fresh windows [B, W, I]: up to `rows` windows per chunk.
ChunkSource fresh_chunks(size_t batch, size_t window, size_t rows);

}  // namespace hotpath::cuda
