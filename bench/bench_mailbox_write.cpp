// Google Benchmark micro-benchmark of the host's share of a mailbox round trip: one tick's input written
// into a ring slot as 16-byte chunks (cuda::write_input_chunks), in ordinary memory, at the zoo's input
// widths, beside the way it was written before 2026-12-05 (each chunk built in a 16-byte array, whose
// smaller stores and 16-byte reload stall on store forwarding). The device's round trip waits for the
// last chunk, so this time is part of every tick's latency (docs/cuda.md, "A wide input's round trip").
//
//   bench_mailbox_write [google benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/input_layout.hpp"
#include "cuda/mailbox_host.hpp"

using namespace hotpath;

namespace {

constexpr int kSlots = 8;  // the ring: consecutive ticks go to consecutive slots, as in a run

// Ticks of state.range(0) floats written by `write(slot, seq, x, layout)` into consecutive ring slots.
template <class Write>
void ticks_written(benchmark::State& state, Write&& write) {
  const int n = int(state.range(0));
  const cuda::InputLayout l = cuda::input_layout(n, false);
  std::vector<cuda::Chunk> ring(size_t(kSlots) * l.stride);
  std::vector<float> x(static_cast<size_t>(n), 0.25f);
  uint32_t seq = 1;
  for (auto _ : state) {
    write(ring.data() + (seq % kSlots) * l.stride, seq, x, l);
    benchmark::ClobberMemory();
    ++seq;
  }
  state.counters["chunks"] = l.chunks;
}

void BM_InputWrite(benchmark::State& state) {
  ticks_written(state, [](cuda::Chunk* slot, uint32_t seq, const std::vector<float>& x, const cuda::InputLayout& l) {
    cuda::write_input_chunks(slot, l.chunks, seq, x, l.floats_per_chunk, nullptr, nullptr, false);
  });
}

// Before: the chunk assembled in memory, then copied out as 16 bytes.
void BM_InputWriteThroughArray(benchmark::State& state) {
  ticks_written(state, [](cuda::Chunk* slot, uint32_t seq, const std::vector<float>& x, const cuda::InputLayout& l) {
    const int n = int(x.size());
    for (int c = 0; c < l.chunks; ++c) {
      const int k = 3 * c;
      uint32_t w[4] = {seq, 0, 0, 0};
      std::memcpy(&w[1], &x[size_t(k)], sizeof(float) * size_t(std::min(3, n - k)));
      benchmark::DoNotOptimize(w);
      std::memcpy(slot + c, w, 16);
    }
  });
}

}  // namespace

BENCHMARK(BM_InputWrite)->Arg(32)->Arg(128)->Arg(256)->Arg(500)->Arg(960);
BENCHMARK(BM_InputWriteThroughArray)->Arg(32)->Arg(128)->Arg(256)->Arg(500)->Arg(960);
BENCHMARK_MAIN();
