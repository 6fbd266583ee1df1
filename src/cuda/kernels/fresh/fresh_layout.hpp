// The fresh-window server's limits and request layout (lstm_fresh.hpp), shared by host code (plain C++, no
// CUDA headers: the request writer is tested without a GPU) and the kernel.
#pragma once
#include "cuda/kernels/common/mailbox_layout.hpp"

namespace hotpath::cuda {

inline constexpr int kFreshMaxLayers = 4;  // a block a layer: clusters up to the portable 8 hold them
inline constexpr int kFreshMaxHp = 128;    // a warp's 8 units' W_hh in registers: 2 m16 tiles x Hp / 16 k16 tiles
inline constexpr int kFreshMaxRows = 4;    // rows a pass: the MMA's 8 columns are 4 rows' hi and lo halves
inline constexpr int kFreshGroup = 4;      // steps one set of input-product MMAs makes (8 columns: 4 steps' hi, lo)
inline constexpr int kFreshRing = 8;       // steps of h_l that block l + 1 holds (two groups)
// Earlier forms of the kernel, kept to measure the present one against (FreshParams::form, bits).
enum FreshForm : unsigned {
  kFreshRingSerial = 1u,  // the ring's words waited for a pair at a time, not eight loaded then checked
  kFreshDynamicK = 2u,    // W_hh's k16 tiles counted at run time (a branch between a step's MMAs), not compiled in
};

// The request, in mapped host memory: chunk 0 is {seq, rows, window, seq}; row r's window (window x I floats,
// step-major) in chunks [1 + r S, 1 + r S + fresh_row_chunks(window, I)), S = fresh_row_chunks(max_window, I),
// three floats a chunk {seq, f0, f1, f2}. The answer: row r's O outputs in chunks [r A, (r + 1) A),
// A = fresh_out_chunks(O), each {seq, z0, z1, seq}.
// Where a request's time goes, per block (thread 0, a cell lane of warp 0), SM cycles summed over requests, in
// mapped host memory: [kFreshMaxLayers][kFreshProfSlots].
enum FreshProf {
  kProfRequest = 0,  // the header's cluster barrier passed -> the last pass's end barrier passed
  kProfInput,        // block 0: the pass's windows read from host memory
  kProfGroups,       // the input products (the ring's words waited for included)
  kProfChain,        // each step: the recurrent product, the cell, h stored (and sent)
  kProfBarrier,      // each step: the block barrier
  kProfHead,         // the last block: the head and the answer's chunks
  kProfPassEnd,      // the pass's end barrier
  kProfSteps,        // steps run (a count)
  kFreshProfSlots
};
// The slots' names in the backend's counters (fresh_server_l<l>_<name>_cycles; steps: fresh_server_l<l>_steps).
inline constexpr const char* kFreshProfNames[kFreshProfSlots] = {"request", "input",    "groups", "chain",
                                                                 "barrier", "head",     "pass_end", "steps"};

HOTPATH_HD constexpr int fresh_row_chunks(int window, int I) { return chunks_for(window * I, 3); }
HOTPATH_HD constexpr int fresh_out_chunks(int O) { return chunks_for(O, kOutFloatsPerChunk); }

}  // namespace hotpath::cuda
