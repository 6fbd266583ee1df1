// The tick trace (CudaOptions::tick_trace; docs/cuda.md, "Where the grid kernel's tail lies"): each tick's
// latency as the host sees it, split into the input side, the kernel's span and the output side. Plain C++,
// built and tested without a GPU.
//
// The kernel stamps each tick s in a ring of 3 words: s + 1, %globaltimer right after the output's store,
// and the SM cycles from "input complete" to that stamp. The host stamps its send and the instant it sees
// the answer (steady_clock ns). The two clocks differ by an offset that drifts by ppm (a microsecond over a
// tenth of a second), so the input side (send -> input complete: stamp - span - send, plus the offset) is
// given above its floor: a line through the fastest input of each stretch of ticks. The output side is the
// rest of the tick (total - kernel - input excess: the output's delivery plus the input's floor).
#pragma once
#include <cstddef>
#include <vector>

namespace hotpath::cuda {

struct TickTraceSplit {
  std::vector<double> total, kernel, input_excess, output_and_floors;  // us, one per traced tick
};

// ring: ring_ticks x 3 words (a power of two), send_ns / recv_ns: ring_ticks stamps each, indexed the same
// way (tick & (ring_ticks - 1)); ticks: the ticks sent since the kernel's launch (the last ring_ticks are
// read). A tick whose ring entry belongs to another tick, or that the host saw no answer to, is left out.
TickTraceSplit split_tick_trace(const unsigned long long* ring, long long ring_ticks, const long long* send_ns,
                                const long long* recv_ns, long long ticks, double ns_per_cycle, size_t stretch);

}  // namespace hotpath::cuda
