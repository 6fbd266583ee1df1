#include "cuda/mailbox_host.hpp"

#include "cuda/memory.hpp"

#include <pthread.h>

#include <atomic>
#include <bit>
#include <cstring>

#include "cuda/cuda_check.hpp"
#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cuda {
namespace {
constexpr size_t kLine = 64;
size_t round_line(size_t n) { return (n + kLine - 1) / kLine * kLine; }
constexpr int kChunksPerLine = int(kLine / sizeof(Chunk));
}  // namespace

HostMailbox::HostMailbox(int in_floats, int out_floats, const MailboxOptions& options)
    : options_(options), in_floats_(in_floats), out_floats_(out_floats) {
  const InputLayout layout = input_layout(in_floats, options.dual_seq_input);
  fpc_ = layout.floats_per_chunk;
  n_in_ = layout.chunks;
  stride_ = layout.stride;
  n_out_ = chunks_for(out_floats, kOutFloatsPerChunk);
  const size_t in_bytes = size_t(kInputRing) * stride_ * sizeof(Chunk);  // whole lines per slot
  const unsigned in_flags = cudaHostAllocMapped | (options.write_combined_input ? cudaHostAllocWriteCombined : 0u);
  // Pinned through cuda/memory.hpp: closing a mailbox never waits for other engines' running kernels.
  in_ = static_cast<Chunk*>(pinned_alloc(in_bytes, in_flags));
  const size_t out_bytes = round_line(n_out_ * sizeof(Chunk));
  back_bytes_ = out_bytes + 2 * kLine;
  try {
    back_ = static_cast<char*>(pinned_alloc(back_bytes_, cudaHostAllocMapped));
  } catch (...) {
    pinned_free(in_, in_bytes, in_flags);
    throw;
  }
  out_ = reinterpret_cast<Chunk*>(back_);
  status_ = reinterpret_cast<Status*>(back_ + out_bytes);
  control_ = reinterpret_cast<Control*>(back_ + out_bytes + kLine);
  clear();
}

HostMailbox::~HostMailbox() {
  pinned_free(back_, back_bytes_, cudaHostAllocMapped);
  pinned_free(in_, size_t(kInputRing) * stride_ * sizeof(Chunk),
              cudaHostAllocMapped | (options_.write_combined_input ? cudaHostAllocWriteCombined : 0u));
}

MailboxView HostMailbox::view(long long lease_ns) const {
  MailboxView v;
  v.in = device_view(in_);
  v.n_in = n_in_;
  v.in_stride = stride_;
  v.in_fpc = fpc_;
  v.in_dual = options_.dual_seq_input;
  v.out = device_view(out_);
  v.n_out = n_out_;
  v.status = device_view(status_);
  v.control = device_view(control_);
  v.poll_sets = options_.poll_sets;
  v.lease_ns = lease_ns;
  return v;
}

void HostMailbox::clear() {
  std::memset(static_cast<void*>(in_), 0, size_t(kInputRing) * stride_ * sizeof(Chunk));
  std::memset(static_cast<void*>(out_), 0, n_out_ * sizeof(Chunk));
  std::memset(static_cast<void*>(status_), 0, sizeof(Status));
  std::memset(static_cast<void*>(control_), 0, sizeof(Control));
  beats_ = 0;
  arch::store_fence();
}

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

void HostMailbox::send(long long tick, std::span<const float> x, const double* shift, const double* mul) {
  Chunk* slot = in_ + (tick % kInputRing) * stride_;
  // Streaming stores fill whole lines (padding chunks included) so each line leaves the write-combining
  // buffer as one burst; a partial line would be flushed in 8-byte pieces and could be seen torn.
  write_input_chunks(slot, options_.stream_stores ? stride_ : n_in_, wire_seq(tick), x, fpc_, shift, mul,
                     options_.stream_stores);
  // Streaming stores sit in write-combining buffers until fenced: flush them now, not eventually.
  if (options_.stream_stores) arch::store_fence();
}

bool HostMailbox::try_receive(long long tick, std::span<float> out) const {
  const uint32_t seq = wire_seq(tick);
  uint32_t w[4];
  std::atomic_signal_fence(std::memory_order_seq_cst);  // re-read the device-written lines every call
  for (int c = 0; c < n_out_; ++c) {
    arch::load16(out_ + c, w);
    if (w[0] != seq || w[3] != seq) return false;  // both 8-byte halves must be this tick's
    for (int i = 0; i < kOutFloatsPerChunk; ++i) {
      const int k = kOutFloatsPerChunk * c + i;
      if (k < int(out.size()) && k < out_floats_) std::memcpy(&out[k], &w[1 + i], sizeof(float));
    }
  }
  return true;
}

Status HostMailbox::status() const {
  Status s;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  uint32_t w[4];
  arch::load16(status_, w);
  static_assert(sizeof(Status) == sizeof(w));
  std::memcpy(&s, w, sizeof(s));
  return s;
}

void HostMailbox::request_stop() {
  arch::publish_word(reinterpret_cast<uint32_t*>(control_), 1);
}

void HostMailbox::beat() {
  arch::publish_word(reinterpret_cast<uint32_t*>(control_) + 1, ++beats_);
}

}  // namespace hotpath::cuda
