// The host<->device mailbox protocol, shared by host code (plain C++) and kernels (.cu/.cuh).
//
// Every message is a sequence of 16-byte chunks, each stored with ONE 16-byte store and read with one
// 16-byte load; a chunk whose seq matches is complete by itself, so no flag-then-data round trip is
// needed (3.1 us p50 vs 5.1 us for flag-then-read on the lent H200).
//
// A 16-byte store is not always seen whole across PCIe. Measured on the lent H200 (docs/cuda.md): the
// device's 16-byte store to host memory reached the host's 16-byte load torn in 8-byte halves, and a
// host streaming (write-combining) store to a partly written line is flushed as 8-byte pieces (Intel
// SDM 11.3.1). So:
//  - output chunks are {seq, v0, v1, seq}: each 8-byte half carries the seq, the host needs both;
//  - input chunks are {seq, f0, f1, f2} written with plain cached 16-byte stores (the device's read
//    snoops the whole line), or, with dual_seq, {seq, f0, f1, seq} like the output.
//
// Sequence numbers: tick t (0-based, 64-bit on both sides) travels as seq = uint32(t + 1). Readers wait
// for an EXACT match with the seq they expect next. A slot only ever holds the seq of the tick it
// carries or of a tick R (ring size) or more earlier, so after 2^32 ticks the low 32 bits still differ
// between the two candidates and wrap-around cannot make an old chunk look new.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define HOTPATH_HD __host__ __device__
#else
#define HOTPATH_HD
#endif

namespace hotpath::cuda {

struct alignas(16) Chunk {
  uint32_t seq;
  float v[3];
};
static_assert(sizeof(Chunk) == 16, "one chunk is one 16-byte store");

HOTPATH_HD constexpr int chunks_for(int floats, int per_chunk) { return (floats + per_chunk - 1) / per_chunk; }
inline constexpr int kOutFloatsPerChunk = 2;  // {seq, v0, v1, seq}

// The widest input one tick carries (host refuses more, kernels size shared memory for it): the widest
// zoo model's I (960) with headroom. With dual_seq (2 floats a chunk) that is kMaxInputChunks chunks.
inline constexpr int kMaxInputFloats = 1024;
inline constexpr int kMaxInputChunks = chunks_for(kMaxInputFloats, 2);
HOTPATH_HD inline uint32_t wire_seq(long long tick) { return uint32_t(uint64_t(tick) + 1); }

// Inputs travel in a ring of kInputRing slots (slot = tick % kInputRing): a device that fell behind
// (a stall the host gave up on) still finds every input it has not consumed and catches up, keeping
// its window state exact, as long as it is fewer than kInputRing ticks behind.
inline constexpr int kInputRing = 8;

// Host-written control chunk: stop request and heartbeat counter (the kernel's lease is renewed each
// time the counter changes).
struct alignas(16) Control {
  uint32_t stop;
  uint32_t heartbeat;
  uint32_t pad[2];
};
static_assert(sizeof(Control) == 16);

// Device-written status chunk, one 16-byte store: `ready` is the seq of the next tick the device can
// serve without waiting for precompute; `answers` counts outputs written since launch (lets the host
// count answers that arrived after it gave up on them); `state` is a DeviceState.
struct alignas(16) Status {
  uint32_t ready;
  uint32_t answers;
  uint32_t state;
  uint32_t pad;
};
static_assert(sizeof(Status) == 16);

// kIdle: the fresh-window server left after no request for its idle time (kernels/fresh/; its host relaunches it).
enum DeviceState : uint32_t { kStarting = 0, kServing = 1, kStopped = 2, kLeaseExpired = 3, kIdle = 4 };

// The shared-memory bytes of a block's flags (dev::CtaFlags, kernels/common/mailbox.cuh, which asserts
// they fit): the planner reserves this many in every block that polls or serves.
inline constexpr int kCtaFlagsBytes = 32;

// Where the device polls and writes. All pointers are device views of mapped pinned host memory.
struct MailboxView {
  const Chunk* in = nullptr;   // [kInputRing][in_stride]
  int n_in = 0;                // input chunks per tick
  int in_stride = 0;           // chunks per ring slot (n_in rounded up to whole 64-byte lines)
  int in_fpc = 3;              // floats per input chunk: 3, or 2 with dual_seq
  int in_dual = 0;             // input chunks carry the seq in both halves
  Chunk* out = nullptr;        // [n_out]
  int n_out = 0;
  Status* status = nullptr;
  const Control* control = nullptr;
  int poll_sets = 1;           // independent poller warp sets, each covering every input chunk
  long long lease_ns = 0;      // the kernel stops when the heartbeat has not changed for this long
};

}  // namespace hotpath::cuda
