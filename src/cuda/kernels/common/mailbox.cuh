// Device side of the mailbox (mailbox_layout.hpp): poller warps that turn 16-byte input chunks into
// shared memory, and the service warp that watches the host's control chunk (stop, heartbeat lease).
#pragma once
#include "cuda/kernels/common/device_util.cuh"
#include "cuda/kernels/common/mailbox_layout.hpp"

namespace hotpath::cuda::dev {

// Per-block flags in shared memory, shared by pollers, compute warps and the service warp.
struct CtaFlags {
  unsigned long long consumed;   // ticks whose input the compute warps have finished reading
  unsigned long long forwarded;  // ticks whose input the service warp has passed to the precompute
  unsigned long long answered;    // ticks whose output has been stored
  unsigned quit;                 // 0, or the DeviceState the block leaves with
  unsigned decision;             // compute warps: 1 = leave now (written by one thread, read after a barrier)
};
static_assert(sizeof(CtaFlags) <= kCtaFlagsBytes, "the planner reserves kCtaFlagsBytes for the flags");

// Every block that polls the mailbox starts from these (one thread, before a __syncthreads).
__device__ __forceinline__ void reset_flags(volatile CtaFlags* f) {
  f->consumed = 0;
  f->forwarded = 0;
  f->answered = 0;
  f->quit = 0;
  f->decision = 0;
}

enum class PollLoad { volatile_v4, relaxed_sys_v4 };

// One warp polls one tick's chunks, lane c <-> chunk c (n_in <= 32), one 16-byte load in flight per
// lane (two or four in flight, spaced over the PCIe round trip, made every round trip slower: 3.3-5.7
// vs 2.3 us p50, docs/cuda.md); `sink(chunk)` runs once in each lane that owns a chunk, when it arrives.
// `quit()` is asked between looks and must return the same value in every lane. True when the whole
// tick has arrived.
template <class Sink, class Quit>
__device__ __forceinline__ bool warp_poll_tick(const MailboxView& mb, const Chunk* slot, unsigned seq, Sink&& sink,
                                               Quit&& quit) {
  const int lane = int(threadIdx.x & 31);
  const Chunk* src = slot + lane;
  bool have = lane >= mb.n_in;
  for (;;) {
    if (!have) {
      const uint4 v = ld_volatile_v4(src);
      if (v.x == seq && (!mb.in_dual || v.w == seq)) {
        have = true;
        sink(v);
      }
    }
    if (__all_sync(0xffffffffu, have)) return true;
    if (quit()) return false;
  }
}

// One lane per input chunk, `set_warp` selects which 32 chunks of the tick this warp covers. Several
// poll sets may cover the same chunks: whichever lane sees a chunk first stores it, the others then
// skip it (the per-chunk word in shared memory already holds the seq). Polling of tick s starts only
// once the consumer has read tick s-1 (and, when gated, the service warp has forwarded it), so shared
// memory is never overwritten under a reader even when the host runs ahead after a timeout.
//
// With several poll sets a lane can come back from a PCIe load with tick s's chunk after another set
// stored it and the consumer has moved on; only the lane that claims the chunk (atomicCAS on `claim`,
// seq(s-1) -> seq(s)) may store it, so a late lane never overwrites a newer tick.
//
// gate_answered: polling of tick s also waits until tick s-1 is answered (the multi-block kernels: with
// pollers loading over PCIe during the layer exchange, lstm_s on the cluster kernel took 39.9 us p50,
// without them 15.0 us, lstm_m 54.6 -> 18.1 us; likely the exchange's fences waiting on those loads).
template <PollLoad LOAD, class Sink>
__device__ void poll_loop(const MailboxView& mb, int set_warp, unsigned* seqw, unsigned* claim, volatile CtaFlags* f,
                          bool gate_forward, int gate_sleep_ns, Sink&& sink, bool gate_answered = false) {
  const int c = set_warp * 32 + int(threadIdx.x & 31);
  const bool mine = c < mb.n_in;
  const bool shared = mb.poll_sets > 1;
  for (long long s = 0;; ++s) {
    while (f->consumed < (unsigned long long)s || (gate_forward && f->forwarded < (unsigned long long)s) ||
           (gate_answered && f->answered < (unsigned long long)s)) {
      if (f->quit) return;
      if (gate_sleep_ns) __nanosleep(gate_sleep_ns);
    }
    const unsigned seq = wire_seq(s);
    if (mine) {
      const Chunk* src = mb.in + (s % kInputRing) * mb.in_stride + c;
      while (ld_volatile_u32(&seqw[c]) != seq) {
        const uint4 v = LOAD == PollLoad::volatile_v4 ? ld_volatile_v4(src) : ld_relaxed_sys_v4(src);
        if (v.x == seq && (!mb.in_dual || v.w == seq)) {
          if (shared && atomicCAS(&claim[c], seq - 1u, seq) != seq - 1u) break;
          sink(c, v);
          __threadfence_block();
          st_volatile_u32(&seqw[c], seq);
          break;
        }
        if (f->quit) return;
      }
    }
  }
}

// True when every input chunk of this tick has arrived in shared memory (all lanes of the warp agree).
__device__ __forceinline__ bool tick_arrived(const unsigned* seqw, int n_in, unsigned seq) {
  bool ok = true;
  for (int c = int(threadIdx.x & 31); c < n_in; c += 32) ok &= ld_volatile_u32(&seqw[c]) == seq;
  return __all_sync(0xffffffffu, ok);
}

// Spins (the whole warp) until the tick's input is complete or the block quits; false on quit.
__device__ __forceinline__ bool wait_tick(const unsigned* seqw, int n_in, unsigned seq, volatile CtaFlags* f) {
  while (!tick_arrived(seqw, n_in, seq)) {
    if (f->quit) return false;
  }
  __threadfence_block();
  return true;
}

// One warp answers a tick: lane i < n_out stores output chunk i, {seq, z[2i], z[2i+1], seq} (the host
// needs both seq words: a 16-byte store can reach it torn in 8-byte halves); za / zb are this lane's two
// outputs, zero past O.
__device__ __forceinline__ void store_output_chunk(const MailboxView& mb, unsigned seq, int O, float za, float zb) {
  const int lane = int(threadIdx.x & 31);
  if (lane >= mb.n_out) return;
  st_volatile_v4(mb.out + lane,
                 make_uint4(seq, __float_as_uint(2 * lane < O ? za : 0.f), __float_as_uint(2 * lane + 1 < O ? zb : 0.f), seq));
}

// The service warp's control check, run by lane 0 every ~20 us: stop request, or heartbeat lease lapsed.
// Returns 0 to keep serving, else the DeviceState to leave with.
struct LeaseWatch {
  unsigned last_beat = 0;
  unsigned long long last_change = 0, next_check = 0;
  __device__ void start(const MailboxView& mb) {
    last_beat = ld_volatile_v4(mb.control).y;
    last_change = next_check = globaltimer_ns();
  }
  __device__ unsigned poll(const MailboxView& mb) {
    const unsigned long long now = globaltimer_ns();
    if (now < next_check) return 0;
    next_check = now + 20'000;
    const uint4 ctl = ld_volatile_v4(mb.control);
    if (ctl.x) return kStopped;
    if (ctl.y != last_beat) {
      last_beat = ctl.y;
      last_change = now;
    } else if (mb.lease_ns > 0 && now - last_change > (unsigned long long)mb.lease_ns) {
      return kLeaseExpired;
    }
    return 0;
  }
};

}  // namespace hotpath::cuda::dev
