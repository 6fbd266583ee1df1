#include "cuda/mailbox_host.hpp"

#include "cuda/host_lines.hpp"
#include "cuda/memory.hpp"

#include <pthread.h>

#include <atomic>
#include <cstring>

#include "cuda/cuda_check.hpp"
#include "util/arch.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cuda {
namespace {
constexpr int kChunksPerLine = int(kHostLine / sizeof(Chunk));
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
  const size_t out_bytes = round_to_line(n_out_ * sizeof(Chunk));
  back_bytes_ = out_bytes + 2 * kHostLine;
  try {
    back_ = static_cast<char*>(pinned_alloc(back_bytes_, cudaHostAllocMapped));
  } catch (...) {
    pinned_free(in_, in_bytes, in_flags);
    throw;
  }
  out_ = reinterpret_cast<Chunk*>(back_);
  status_ = reinterpret_cast<Status*>(back_ + out_bytes);
  control_ = reinterpret_cast<Control*>(back_ + out_bytes + kHostLine);
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
  return read_output_chunks(out_, n_out_, wire_seq(tick), out, out_floats_);
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
