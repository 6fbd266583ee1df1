// The host mailbox's tuning (mailbox_host.hpp), in a header of its own: the device facts and the
// ping-pong (device.hpp, also seen by nvcc's C++17) carry it too, without the mailbox's C++20 class.
#pragma once

namespace hotpath::cuda {

// How the host and the kernel talk (the winners measured on the lent H200 are the defaults; the numbers
// are in docs/cuda.md).
struct MailboxOptions {
  bool stream_stores = false;         // host writes chunks with non-temporal stores + a store fence (util/arch.hpp stream16; else store16);
                                      // whole 64-byte lines are written so no partial write-combining flush tears
  bool dual_seq_input = false;        // input chunks {seq, f0, f1, seq} (else {seq, f0, f1, f2})
  bool write_combined_input = false;  // input ring in write-combined pinned memory (else cached)
  int poll_sets = 1;                  // poller warps per input chunk
  int load_kind = 0;                  // device poll load: 0 ld.volatile.v4, 1 ld.relaxed.sys.v4
};

}  // namespace hotpath::cuda
