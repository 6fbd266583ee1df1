// Host side of the mailbox (kernels/mailbox_layout.hpp): mapped pinned memory, chunk stores, polling.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/input_layout.hpp"
#include "cuda/mailbox_options.hpp"
#include "cuda/kernels/common/mailbox_layout.hpp"
#include "cuda/mailbox_chunks.hpp"

namespace hotpath::cuda {

class HostMailbox {
 public:
  // in_floats as input_layout() takes it (throws as it does).
  HostMailbox(int in_floats, int out_floats, const MailboxOptions& options);
  ~HostMailbox();
  HostMailbox(const HostMailbox&) = delete;
  HostMailbox& operator=(const HostMailbox&) = delete;

  // Device view; lease_ns as given. Call clear() before every launch.
  MailboxView view(long long lease_ns) const;
  void clear();

  // Writes tick `tick`'s input into its ring slot: one 16-byte store per chunk. With shift and mul
  // (an InputScaler's, [x.size()] each) each value is sent as (x - shift) * mul, scaled while packed.
  void send(long long tick, std::span<const float> x, const double* shift = nullptr, const double* mul = nullptr);
  // One look at the output chunks: true (and `out` filled) when every chunk carries tick's seq.
  bool try_receive(long long tick, std::span<float> out) const;
  Status status() const;
  void request_stop();
  void beat();

  int in_floats() const { return in_floats_; }
  int out_floats() const { return out_floats_; }

 private:
  MailboxOptions options_;
  int in_floats_, out_floats_, fpc_, n_in_, stride_, n_out_;
  Chunk* in_ = nullptr;         // [kInputRing][stride_], input allocation
  char* back_ = nullptr;        // output allocation: out chunks, status, control on separate lines
  size_t back_bytes_ = 0;
  Chunk* out_ = nullptr;
  Status* status_ = nullptr;
  Control* control_ = nullptr;
  uint32_t beats_ = 0;
};

// Answers a launch's kernel wrote beyond the `accepted` ones the host took (both counted from the
// launch): `written` is the status chunk's 32-bit count, which wraps every 2^32 answers, so it is
// compared in that width with accepted's low bits. Never negative (the count can lag an accepted answer).
inline long long late_answers(uint32_t written, long long accepted) {
  const int32_t ahead = int32_t(written - uint32_t(uint64_t(accepted)));
  return ahead > 0 ? ahead : 0;
}

}  // namespace hotpath::cuda
