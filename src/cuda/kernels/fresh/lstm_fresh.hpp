// The fresh-window server (docs/cuda.md, "Fresh windows through a persistent kernel"): a persistent kernel
// that takes whole windows through a mailbox in mapped host memory and answers each from zero state, with no
// launch, no copy and no weight load per request. One block a layer on one thread-block cluster; block l
// keeps its layer's recurrent weights W_hh in registers and W_ih in shared memory for its whole life.
//
// Per step, block l's critical path is W_hh h_l(t-1) (register A fragments, h in shared memory), the cells
// and one block barrier; the input products W_ih u(t) (u = x for layer 0, h_{l-1} for the others) are made
// a group of kFreshGroup steps at a time, one group ahead, off that path. h_l(t) reaches block l + 1 as
// tagged words (value and step tag in one 8-byte store into its shared memory), so the layers run as a
// pipeline a group apart, never at one cluster barrier a step.
//
// Host code sees the parameters, the plan and the launch (plain C++ with the CUDA runtime's types); the
// request's layout is fresh_layout.hpp.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/kernels/fresh/fresh_layout.hpp"

namespace hotpath::cuda {

struct FreshParams {
  // The batch kernels' packing (batch_runner.hpp, BatchWeights), in device memory.
  const void* w0 = nullptr;                      // [Np, 2 Ip]: W_ih,0 in its first Ip columns
  const void* w[kFreshMaxLayers] = {};           // layer 0 [Np, Hp] W_hh; l > 0 [Np, 2 Hp] [W_ih | W_hh]
  const float* bias[kFreshMaxLayers] = {};       // [Np] permuted, may be null
  const float* head_w = nullptr;                 // [O, H]
  const float* head_b = nullptr;                 // [O] or null
  int I = 0, Ip = 0, H = 0, Hp = 0, L = 0, O = 0;
  bool bf16 = false;
  int rows = 0;        // rows a pass (the plan's)
  int max_window = 0;  // the longest window a request carries (block 0's input buffer)
  int max_rows = 0;    // the most rows a request carries
  const Chunk* req = nullptr;  // [1 + max_rows fresh_row_chunks(max_window, I)]
  Chunk* out = nullptr;        // [max_rows fresh_out_chunks(O)]
  Status* status = nullptr;    // written when the kernel leaves: state, requests answered
  const Control* control = nullptr;
  long long lease_ns = 0;
  long long idle_ns = 0;  // the kernel leaves (state kIdle) after this long without a request (0: never)
  unsigned form = 0;  // FreshForm bits (fresh_layout.hpp): earlier forms of the kernel, to measure against
  unsigned long long* prof = nullptr;  // [kFreshMaxLayers][kFreshProfSlots] (fresh_layout.hpp), mapped host memory
  size_t smem = 0;  // dynamic shared memory a block (the plan's)
};

struct FreshPlan {
  int rows = 0;  // rows a pass; 0: no plan (why says so)
  int threads = 0;
  size_t smem = 0;
  const char* why = "";
};
// The most rows a pass (<= kFreshMaxRows) whose blocks' shared memory fits `device` and whose cluster of L
// blocks is co-resident there; rows 0 and a reason where none does (H beyond kFreshMaxHp, more than
// kFreshMaxLayers layers, no cluster launch, shared memory). After prepare_fresh_kernels on `device`.
FreshPlan fresh_plan(int Ip, int Hp, int L, int O, int max_window, bool bf16, int device);
cudaError_t prepare_fresh_kernels(int device);
// The server's launch: returns once it is queued; it serves until the control chunk asks it to stop or its
// lease lapses. Refuses (cudaErrorInvalidValue) parameters its plan was not made for.
cudaError_t launch_fresh(const FreshParams& p, cudaStream_t stream);

}  // namespace hotpath::cuda
