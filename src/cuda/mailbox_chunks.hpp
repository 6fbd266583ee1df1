// The mailbox's chunk coding on the host side (kernels/common/mailbox_layout.hpp): an input's 16-byte chunks
// written, an answer's read. One definition for every mailbox that carries them (the tick kernels' ring,
// HostMailbox; the fresh-window server's requests and answers, fresh_request.hpp). Plain C++ on plain memory,
// so that tests read and write what a device would.
#pragma once
#include <cstdint>
#include <span>

#include "cuda/kernels/common/mailbox_layout.hpp"

namespace hotpath::cuda {

// One input's chunks into `slot` (chunks [0, count): count is the layout's chunks, or its stride when
// whole lines are written), each as one 16-byte store (streaming with `stream`): {seq, f0, f1, f2} with
// fpc 3, {seq, f0, f1, seq} with fpc 2, zeros past x. With shift and mul ([x.size()] each) each value is
// sent as (x - shift) * mul.
void write_input_chunks(Chunk* slot, int count, uint32_t seq, std::span<const float> x, int fpc, const double* shift,
                        const double* mul, bool stream);

// One look at `count` answer chunks {seq, v0, v1, seq}: true, and out[k] filled for k below `floats` and
// out.size(), when every chunk carries seq in both 8-byte halves (each was stored whole by the device); false
// as soon as one does not (out then holds a part of the values).
bool read_output_chunks(const Chunk* chunks, int count, uint32_t seq, std::span<float> out, int floats);

}  // namespace hotpath::cuda
